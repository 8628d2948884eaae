// Executor: runs a Plan (plan.hpp) on a Transport with a codec, over fp32 buffers in host memory.
//
// Every range is cut into chunks of at most chunkElems elements (a multiple of the bucket, so a
// chunked encode equals the encode of the whole range). A step streams its chunks through
// `depth` staging slots per message stream: chunk k+1 is encoded while chunk k is on the wire,
// receives are posted `depth` chunks ahead, and each received chunk is validated and decoded as
// soon as it is next in the plan's order. Steps of a plan marked pipelineSteps (sra) run
// together round by round, so no step waits for the previous one to drain. Staging buffers belong
// to the Executor and only grow, so repeated calls with the same shapes allocate nothing.
//
// Staging is sized for what the plan expects: a receive slot holds exactly the encoding of one
// chunk of the expected codec and count. A longer message is refused by the transport (kMismatch)
// without being written, a shorter one by the header check, so a disagreement between ranks is a
// clean error without slots sized for the worst case.
//
// Tags: chunk k of step s travels under a tag built from s and k, folded into the transport's
// tag limit (MPI guarantees only 32767 tags). Messages of one (peer, tag) are matched in order, so
// a tag need only tell apart the streams that are in flight at once between two ranks: the steps
// that run together and the `depth` chunks of a stream.
//
// Raw fp32: a stream of the lossless fp32 codec sends its chunk 0 encoded (header and floats, so
// the receiver checks seq, codec and count as for every codec) and its later chunks as the bare
// floats, checked by their size. Where nothing else of the running steps touches the same elements
// of dst, those chunks leave straight from the buffer the step reads and land straight in dst,
// without a copy into or out of a staging slot, as an uncompressed ring of the MPI library or gloo
// moves them (planDirect). After a failure such a receive may still be landing in dst while the
// transport lets go of it (Transport::limitDrops), as the library's own collectives on the
// caller's buffers do.
//
// Deadlock freedom: in round k a rank only waits for (a) its own sends of round k - depth, whose
// receives every peer has posted once it finished round k - 1, and (b) messages of round k that
// every peer sends before it waits for anything of round k; so the slowest rank can always move.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/plan.hpp"
#include "qccl/codec.hpp"
#include "transport/transport.hpp"

namespace qccl {

/// How the executor touches the data buffers. Without one (ExecParams::ops == nullptr) the CPU
/// codec works on host memory; the device path (device_path.hpp) supplies one for device buffers.
/// Wire bytes are always in host memory: they are what the transport sends and receives.
class ChunkOps {
 public:
  virtual ~ChunkOps() = default;
  /// Encodes n elements of src (error feedback through residual, may be null) into the host
  /// buffer `out` of `capacity` bytes. Returns the bytes written.
  virtual size_t encode(const CodecConfig& cfg, const float* src, float* residual, size_t n, void* out, size_t capacity,
                        const EncodeParams& params) = 0;
  /// dst[0..n) = decode(in), or += when `add`. `info` is the validated header of `in`.
  virtual void decode(const WireInfo& info, const void* in, float* dst, size_t n, bool add) = 0;
  /// dst[0..n) = src[0..n) (the raw first term of a sum); nothing to do when they are the same.
  virtual void copyFloats(const float* src, float* dst, size_t n) = 0;
};

/// Parameters of one collective call, identical on every rank.
struct ExecParams {
  CodecConfig codec;                          ///< resolved (resolveConfig)
  uint32_t seq = 0;                           ///< call counter, written into every header and checked on receipt
  size_t chunkElems = 0;                      ///< elements per chunk; 0 = one chunk per range
  int depth = 2;                              ///< staging slots per message stream
  double timeoutSec = 300;                    ///< limit of every single wait
  const std::atomic<bool>* cancel = nullptr;  ///< set from another thread to end the call (abort)
  float* workerResidual = nullptr;            ///< indexed like the source; null = no error feedback
  float* ownerResidual = nullptr;             ///< indexed from plan.ownerRange.begin; null = none
  float feedbackGain = 1.0f;                  ///< EncodeParams::feedbackGain of the encodes with a residual
  ChunkOps* ops = nullptr;                    ///< null: CPU codec on host buffers
  /// Multiplies dst's final values by this (an average's 1/n) inside the last step's decodes, bit
  /// for bit a pass of dst[i] *= outScale after run(). Only for plans with lastStepWritesFinal
  /// and without ops; run() throws kInternal otherwise.
  float outScale = 1.0f;
  /// Runs over dst's final values inside the last step's decodes, after outScale, each element
  /// exactly once (DecodeEpilogue; an allreduce's epilogue). The same plans as outScale only.
  const DecodeEpilogue* epilogue = nullptr;
  /// Rewrites each chunk of the source (in place: the caller's writable input) right before the
  /// one read of it: the chunk's encode, or the raw receive that starts its owner's sum, while
  /// that is about to read it. Only for plans with readsSourceOnce, a lossy codec and no ops;
  /// run() throws kInternal otherwise.
  const DecodeEpilogue* prologue = nullptr;
};

struct ExecStats {
  uint64_t bytesSent = 0;
  uint64_t bytesSentInterHost = 0;  ///< the part of bytesSent sent to ranks on other hosts
  uint64_t messagesSent = 0;
  uint64_t bytesReceived = 0;
  uint64_t stagingBytes = 0;
  uint64_t peakStagingBytes = 0;
  double encodeSec = 0;  ///< wall time in encode (codec work)
  double decodeSec = 0;  ///< wall time in header checks and decode / decode-add
  WaitTimes waits;       ///< wall time waiting for the transport (progress + idle)
};

/// Allocator of host staging memory. The default is the C++ heap; the device path installs a
/// page-locked one so that copies between the device and the staging slots are truly async.
struct HostAllocator {
  void* (*alloc)(size_t bytes) = nullptr;  ///< must return memory or throw Error
  void (*release)(void* p) = nullptr;
};

class Executor {
 public:
  explicit Executor(Transport& transport);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Runs every step of `plan`: the first step's sends read `src`, every later step's sends read
  /// `dst` (what the earlier steps received there: sra's owner forwards its reduced shard), and
  /// receives write `dst`. They may be equal, as in an in-place allreduce: a step encodes chunk k of
  /// every send before it decodes chunk k. A raw receive (Transfer::raw) reads `src` in any step.
  /// Out of place, a plan with a kAccumulate step needs dst to hold src's values first
  /// (planNeedsDstInit()); none of the library's plans has one.
  /// Throws Error: kMismatch / kMalformed for a bad message, kTimeout, kRemoteError,
  /// kTransportError, kCommFailed (cancelled). After a throw the requests of the call are still
  /// outstanding: the caller tells the peers first, then calls abandon().
  void run(const Plan& plan, const float* src, float* dst, const ExecParams& params);
  /// Drops every request a failed run() left outstanding (the transport bounds the time it takes,
  /// Transport::limitDrops). The staging they point at is never freed (leaked with the Executor):
  /// a peer may still read it through a rendezvous.
  void abandon() noexcept;

  /// Chunk size in elements for `chunkBytes` of fp32 under `codec` (a multiple of its bucket).
  static size_t chunkElemsFor(const CodecConfig& codec, size_t chunkBytes);
  /// The largest chunk of at most `maxElems` elements (a multiple of the bucket) whose message
  /// (encoding and header) still leaves kEagerHeadroom bytes of an `eagerBytes` limit for the
  /// transport's own header; `maxElems` when `eagerBytes` is 0 or not even one bucket fits.
  static size_t eagerChunkElems(const CodecConfig& codec, size_t eagerBytes, size_t maxElems);
  static constexpr size_t kEagerHeadroom = 128;

  const ExecStats& stats() const { return stats_; }
  /// Frees the staging slots and allocates later ones with `a`. Call between collectives only.
  void setHostAllocator(HostAllocator a);

 private:
  struct StepState;
  void runSteps(const Plan& plan, size_t first, size_t last, const float* src, float* dst, const ExecParams& p);
  size_t prepareStep(StepState& S, size_t slotBase);
  void planDirect(size_t first, size_t last, const float* dst);
  void postFirstRecvs(StepState& S);
  void postRecv(StepState& S, size_t recv, size_t chunk);
  void sendChunk(StepState& S, size_t group, size_t chunk);
  void recvChunk(StepState& S, size_t recv, size_t chunk, bool first);
  /// A kSum step's chunk k from every receive stream, summed in one decode (decodeSumParsed).
  void recvSumChunk(StepState& S, size_t chunk);
  /// Waits for chunk k of receive stream r (or takes this rank's own encoding) and validates its
  /// header; returns the bytes and their parsed header.
  const uint8_t* takeChunk(StepState& S, size_t r, size_t k, WireInfo* info);
  void finishStep(StepState& S);
  uint8_t* slot(size_t index, size_t bytes);
  void accountStaging(size_t grown);

  Transport& t_;
  std::vector<int> hostOf_;  ///< t_.hostOfRanks(), taken once
  struct Slot {
    uint8_t* ptr = nullptr;
    size_t bytes = 0;
  };
  void releaseSlots();

  HostAllocator alloc_;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<StepState>> scratch_;  // one per step run together
  ExecStats stats_;
  bool poisoned_ = false;  // a failed run: the slots may still be read by peers
};

}  // namespace qccl
