// Communicator: the C++ core that the C API, the Python bindings and the benchmarks call.
// It owns one Transport, the Options, the per-tensor state (tensor_state.hpp), the plans and the
// executor, and runs one code path for host and device buffers over a MemorySpace.
//
// Threads: one thread at a time may call the collectives and the tensor-state functions of a
// communicator (the C API serializes callers with a lock). requestAbort() and stats() may be called
// from any thread at any time, also while a collective runs: requestAbort() only raises a flag
// that every wait of the running call polls, and stats() reads counters published atomically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/options.hpp"
#include "transport/transport.hpp"

namespace qccl {

struct CommStats {
  uint64_t bytesSent = 0;
  uint64_t bytesSentInterHost = 0;  ///< the part of bytesSent sent to ranks on other hosts
  uint64_t messagesSent = 0;        ///< the messages of bytesSent
  uint64_t bytesReceived = 0;
  uint64_t calls = 0;
  uint64_t residualBytes = 0;  ///< per-tensor state held now (residuals + bookkeeping)
  uint64_t stagingBytes = 0;   ///< staging and scratch held now
  uint64_t peakStagingBytes = 0;
  uint64_t tensors = 0;    ///< tensor ids with state
  uint64_t evictions = 0;  ///< states dropped by Options::maxResidualBytes
  uint64_t peakResidualBytes = 0;
  double encodeSeconds = 0;  ///< wall time encoding, all calls
  double decodeSeconds = 0;  ///< wall time validating and decoding
  double waitSeconds = 0;    ///< wall time waiting for the transport (progress, polling, idle)
  double idleSeconds = 0;    ///< part of waitSeconds yielding or sleeping in Transport::idle
};

class Communicator {
 public:
  Communicator(TransportPtr transport, Options options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const Options& options() const;
  Transport& transport();

  /// recv[i] = op over ranks of send[i]; in place when send == recv. `stream` is a cudaStream_t for
  /// device buffers (QCCL_HAVE_CUDA), else null. Results are bit-identical on every rank.
  /// Throws Error; argument errors leave the communicator usable, every other failure marks it
  /// failed (peers are told at once) and every later call throws Error(kCommFailed).
  void allreduce(const void* send, void* recv, size_t count, DataType dtype, RedOp op, const TensorOpts& opts,
                 void* stream = nullptr);
  /// An allreduce's epilogue: rewrites values[0..count), elements [first, first + count) of the
  /// result, in place. Must not throw.
  using EpilogueFn = void (*)(void* user, float* values, size_t first, size_t count);
  /// allreduce() of fp32 host buffers, then fn over every element of the result exactly once,
  /// before the call returns, in pieces of any size and order. Where the schedule writes each
  /// element's final value in its last step (sra, allgather-reduce), fn runs inside that step's
  /// decodes, on each bucket while it is in cache; elsewhere over the whole result after the call.
  /// Either way the result is bit for bit allreduce() followed by fn. After a failure (Error) the
  /// result is undefined, as it is for allreduce(), and fn may have run on parts of it.
  void allreduce(const float* send, float* recv, size_t count, RedOp op, const TensorOpts& opts, EpilogueFn fn,
                 void* user);
  /// The same with a prologue too (either may be null, not both): prologue(user, values, first,
  /// count) rewrites elements [first, first + count) of `send` in place, each exactly once, before
  /// anything reads them. Where the schedule reads the input only in its first step's encodes
  /// (allgather-reduce with a lossy codec), it runs on each chunk right before its encode, while the
  /// encode is about to read it; elsewhere over the whole input first. Either way bit for bit the
  /// prologue over send, then allreduce(), then the epilogue. In place (send == recv) the prologue
  /// rewrites the input that the result then replaces.
  void allreduce(float* send, float* recv, size_t count, RedOp op, const TensorOpts& opts, EpilogueFn prologue,
                 EpilogueFn epilogue, void* user);
  /// recv[r * sendCount + i] = rank r's send[i] (decoded values when the codec is lossy).
  void allgather(const void* send, void* recv, size_t sendCount, DataType dtype, const TensorOpts& opts,
                 void* stream = nullptr);

  /// recv[i] = op over ranks r of rank r's send[rank * recvCount + i] (NCCL layout: send holds
  /// size() * recvCount elements; in place when recv == send + rank * recvCount). Compressed with
  /// the tensor's codec like sra's scatter stage: each rank encodes the shards it sends with its
  /// worker residual (error feedback), the owner sums the decodings in rank order; no owner stage.
  /// Under `auto`, tensors below Options::minCompressBytes (of fp32, all shards) go uncompressed.
  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, RedOp op, const TensorOpts& opts,
                     void* stream = nullptr);

  /// Frees the per-tensor state of `id`.
  void releaseTensor(uint64_t id);
  /// The state of `id` as a record for a checkpoint (empty when it has none); see TensorStateStore.
  std::vector<uint8_t> saveTensorState(uint64_t id) const;
  /// Replaces the state of `id` by a record of saveTensorState() of the same rank, in the memory
  /// space of the tensor's next calls (`device`: device memory).
  void loadTensorState(uint64_t id, const void* data, size_t bytes, bool device = false);
  /// Multiplies the residuals of `id` by `factor`; false when `id` has no state.
  bool scaleTensorState(uint64_t id, float factor);
  /// Error control for `id`'s calls that keep residuals: their encodes send `gain` (in (0, 1]) times
  /// the accumulated error and keep the rest (EncodeParams::feedbackGain). 1 = plain error feedback
  /// (the default). A call's TensorOpts::feedbackGain overrides it. Kept until releaseTensor(id).
  void setFeedbackGain(uint64_t id, float gain);
  /// The gain set for `id` (1 when none).
  float feedbackGain(uint64_t id) const;

  /// Thread-safe: makes the running collective (if any) end with Error(kCommFailed) and fails
  /// the communicator; the thread running it tells the peers. Returns at once.
  void requestAbort() noexcept;
  /// Marks the communicator failed and tells the peers (best effort). Never throws. Not
  /// concurrent with a collective (see requestAbort).
  void abort(const std::string& reason) noexcept;
  bool failed() const;
  /// Thread-safe.
  CommStats stats() const;
  /// Thread-safe. The schedule the last allreduce ran (never kAuto; kAuto before the first
  /// allreduce), and in *path how: 0 qccl's messages (the schedule), 1 the transport's library
  /// (MPI_Iallreduce), 2 qccl's shared-memory sum of a communicator on one host (shm_group.hpp),
  /// 3 a small sum carried by the cross-rank check's recursive doubling (call_check.hpp).
  Algo lastAlgo(int* path = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qccl
