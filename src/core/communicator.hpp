// Communicator: the C++ core that the C API, the Python bindings and the benchmarks call.
// Owns one Transport, the Options, the per-tensor error-feedback state and the staging buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "qccl/codec.hpp"
#include "transport/transport.hpp"

namespace qccl {

enum class DataType : int { kFloat32 = 0, kFloat16 = 1, kBfloat16 = 2 };
enum class RedOp : int { kSum = 0, kAvg = 1 };
/// Allreduce algorithms. kAuto picks (rule kept in Communicator::Impl::pickAlgo, communicator.cc):
/// codec fp32, or fewer than Options::minCompressBytes of fp32 data -> fp32 ring; fp16/bf16 -> ring
/// with that cast; other codecs -> sra on 3+ ranks, allgather on 1-2 ranks. kRing takes only the
/// casts (fp32/fp16/bf16) and has no error feedback; sra and allgather take every codec.
enum class Algo : int { kAuto = 0, kRing = 1, kSra = 2, kAllgather = 3 };

/// Communicator options. Defaults here; optionsFromEnv() applies QCCL_* overrides (config.hpp).
struct Options {
  CodecConfig codec;                   ///< default codec for tensors that do not name one (fp32)
  size_t minCompressBytes = 64 << 10;  ///< auto: tensors smaller than this go uncompressed
  size_t chunkBytes = 4 << 20;         ///< pipeline chunk size in fp32 bytes
  int pipelineDepth = 2;               ///< chunks in flight per peer
  double timeoutSec = 300.0;           ///< any single wait
  int warmupCalls = 0;                 ///< first N calls of each tensor are sent uncompressed
  Algo algo = Algo::kAuto;
  bool errorFeedback = true;
};

/// Per-call tensor options.
struct TensorOpts {
  uint64_t id = 0;               ///< stable caller id; (id, count) keys the error-feedback state
  std::optional<CodecId> codec;  ///< default: Options::codec.codec
  int bits = 0;                  ///< 0: Options::codec.bits
  std::optional<Algo> algo;      ///< default: Options::algo
};

struct CommStats {
  uint64_t bytesSent = 0;
  uint64_t bytesReceived = 0;
  uint64_t calls = 0;
  uint64_t residualBytes = 0;
  uint64_t stagingBytes = 0;
  uint64_t peakStagingBytes = 0;
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
  /// Throws Error; after a timeout or a peer's failure the communicator is failed and every later
  /// call throws Error(kCommFailed).
  void allreduce(const void* send, void* recv, size_t count, DataType dtype, RedOp op, const TensorOpts& opts,
                 void* stream = nullptr);
  /// recv[r * sendCount + i] = rank r's send[i] (decoded values when the codec is lossy).
  void allgather(const void* send, void* recv, size_t sendCount, DataType dtype, const TensorOpts& opts,
                 void* stream = nullptr);

  /// Frees the error-feedback state of every tensor with this id.
  void releaseTensor(uint64_t id);
  /// Marks the communicator failed and tells the peers (best effort). Never throws.
  void abort(const std::string& reason) noexcept;
  bool failed() const;
  CommStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qccl
