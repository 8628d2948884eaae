// Options of a communicator and of one call: the leaf header every layer above the codec may use.
// It includes nothing from qccl but the public codec header, so no lower layer ever depends on the
// communicator. Defaults live here; QCCL_* environment overrides are parsed in config.cc alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "qccl/codec.hpp"

namespace qccl {

/// Element types of the buffers a caller passes (the wire is always what the codec says).
enum class DataType : int { kFloat32 = 0, kFloat16 = 1, kBfloat16 = 2, kCount };
enum class RedOp : int { kSum = 0, kAvg = 1, kCount };
/// Allreduce algorithms. kAuto is decided by selectAlgorithm() (select.hpp). kRing takes only the
/// casts (fp32/fp16/bf16) and has no error feedback; kSra and kAllgather take every codec.
/// kHier (plan_hier.hpp) takes every codec for its inter-host level; its intra-host levels send fp32.
enum class Algo : int { kAuto = 0, kRing = 1, kSra = 2, kAllgather = 3, kHier = 4, kCount };

constexpr bool isValid(DataType t) { return static_cast<int>(t) >= 0 && t < DataType::kCount; }
constexpr bool isValid(RedOp o) { return static_cast<int>(o) >= 0 && o < RedOp::kCount; }
constexpr bool isValid(Algo a) { return static_cast<int>(a) >= 0 && a < Algo::kCount; }
constexpr size_t elementBytes(DataType t) { return t == DataType::kFloat32 ? 4 : 2; }

/// Bounds of the options that size memory or messages.
constexpr size_t kMaxChunkBytes = size_t{1} << 30;  ///< a chunk's encoding must fit MPI's int count
constexpr int kMaxPipelineDepth = 64;
constexpr size_t kMaxShmChunkBytes = size_t{256} << 20;

/// The pipeline chunk (fp32 bytes) of a codec when Options::chunkBytes is 0. Measured on 4 emulated
/// hosts at 1 Gbit/s (bench/RESULTS.md, "Pipeline chunks by codec"): 1 MiB chunks made maxmin
/// 4-bit 1.24-1.40x and fp16 1.13x faster than 4 MiB ones (more chunks per shard overlap encoding,
/// the wire and decoding), while onebit's 1 MiB chunks are 37 KB on the wire and ran 0.69-0.77x.
/// So the 1-bit codecs (and uncompressed fp32, not measured) keep 4 MiB; every other codec
/// (casts, maxmin, dyn8) takes 1 MiB. The best size depends on the link rate, which the library
/// does not know: at 0.25 Gbit/s fp16 and at 2.5 Gbit/s maxmin 4-bit ran slower with 1 MiB.
constexpr size_t chunkBytesFor(CodecId codec) {
  return codec == CodecId::kFp32 || codec == CodecId::kOneBit || codec == CodecId::kSignScale ? size_t{4} << 20
                                                                                              : size_t{1} << 20;
}

/// Communicator options. Defaults here; optionsFromEnv() (config.hpp) applies QCCL_* overrides.
struct Options {
  CodecConfig codec;                   ///< default codec for tensors that do not name one (fp32)
  size_t minCompressBytes = 64 << 10;  ///< auto: tensors smaller than this go uncompressed
  size_t chunkBytes = 0;               ///< pipeline chunk size in fp32 bytes, at most kMaxChunkBytes;
                                       ///< 0: by the codec on the wire (chunkBytesFor()), and
                                       ///< the fp32 ring across hosts within the transport's
                                       ///< eager limit (Transport::eagerBytes), or in the
                                       ///< transport's own chunk (Transport::ringChunkBytes)
  int pipelineDepth = 2;               ///< chunks in flight per peer, 1..kMaxPipelineDepth
  double timeoutSec = 300.0;           ///< any single wait
  int warmupCalls = 0;                 ///< first N calls of each tensor are sent uncompressed
  Algo algo = Algo::kAuto;
  bool errorFeedback = true;
  /// Cap on the memory of per-tensor state (residuals plus bookkeeping); 0 = no cap. Beyond it
  /// the least recently used tensors lose their state (a one-time warning says so).
  size_t maxResidualBytes = 0;
  /// hier: what the stages inside a host send, fp32 (default), fp16 or bf16 (a cast: like the
  /// ring's casts, no residual; the inter-host stage keeps the call's codec and its residuals).
  CodecId intraCodec = CodecId::kFp32;
  /// auto: when ranks share hosts, time hier against the flat path on the first calls of each
  /// tensor (with an id, from kTuneMinBytes) and keep the faster (communicator.cc, "auto and hier").
  bool autoHier = true;
  /// auto, uncompressed tensors of kRingOverNativeBytes or more on 4+ ranks whose fp32 ring crosses
  /// hosts over a transport with its own allreduce and an eager limit (Open MPI's TCP): time qccl's
  /// ring against the library's allreduce on the first calls of each tensor with an id and keep the
  /// faster (an anonymous tensor takes the ring). false: always the library's allreduce, no trial.
  bool autoRing = true;
  /// auto, every rank on one host: the uncompressed sum and the cross-rank check go through one
  /// shared-memory segment (shm_group.hpp) instead of the transport. Every rank must allow it.
  bool shm = true;
  /// Bytes of fp32 each rank stages per step of the shared-memory sum (two such slots per rank).
  size_t shmChunkBytes = 1 << 20;
  /// auto, every rank on one host with the shared segment, host buffers: false (default) sums a
  /// call that asks for a lossy codec exactly in the segment too, since copying fp32 there costs
  /// less than any codec's passes over the data (bench/RESULTS.md, "One host: compression does not
  /// pay"); true compresses as asked. Device buffers are compressed as asked either way.
  bool localCompress = false;
};

/// auto tries hier only for tensors of at least this many fp32 bytes: below it the extra stages
/// cost more latency than any link saves (measured: bench/RESULTS.md, "auto and hier").
constexpr size_t kTuneMinBytes = size_t{1} << 20;
/// Calls of a tensor that auto spends trying the flat path and hier (alternating, flat first)
/// before it keeps one; also QCCL_AUTO_TRIAL_CALLS in qccl.h.
constexpr uint32_t kTuneTrials = 4;

/// Throws Error(kInvalidArgument) naming the first option that is out of range.
void validate(const Options& o);

/// Per-call tensor options.
struct TensorOpts {
  /// The caller's stable id of this tensor, the same on every rank. It keys the error-feedback
  /// state (a new element count for a known id replaces that state). 0 means "no id": such a
  /// call keeps no residual, so a lossy codec with error feedback refuses it (kInvalidUsage).
  uint64_t id = 0;
  std::optional<CodecId> codec;  ///< default: Options::codec.codec
  int bits = 0;                  ///< 0: Options::codec.bits
  std::optional<Algo> algo;      ///< default: Options::algo
  /// Error control of the call's residuals (EncodeParams::feedbackGain), in (0, 1]; 1 = plain error
  /// feedback. Host buffers only. Unset: the tensor's own setting (Communicator::setFeedbackGain),
  /// else 1. Set by qcclMomentumAllreduce.
  std::optional<float> feedbackGain;
};

}  // namespace qccl
