// selectAlgorithm: the one place that decides what a call runs.
//
// Why the inputs must agree: the uncompressed path of `auto` may be the MPI library's own
// MPI_Iallreduce, while every other path exchanges qccl's self-describing messages. A rank on one
// and a rank on the other would wait for each other forever (two ranks whose counts fall on both
// sides of minCompressBytes did exactly that). So over a transport with a native path the
// communicator first compares the inputs across ranks with one small collective and only then acts
// on this function's answer; over the others every path speaks qccl's wire format, whose headers
// (count, codec, call) catch a disagreement on the first message.
#include "core/select.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace {

bool isCast(CodecId c) { return c == CodecId::kFp32 || c == CodecId::kFp16 || c == CodecId::kBf16; }

Selection uncompressed(const SelectInput& in, bool mayNative) {
  Selection s;
  s.codec = resolveConfig(CodecConfig{});
  s.algo = Algo::kRing;
  s.shm = mayNative && in.shmAvailable;
  const bool ringFirst = in.ringOverNativeBytes > 0 && in.count * sizeof(float) >= in.ringOverNativeBytes;
  s.native = mayNative && in.nativeAvailable && !s.shm && !ringFirst;
  return s;
}

}  // namespace

Selection selectAlgorithm(const SelectInput& in) {
  QCCL_CHECK(isValid(in.requested), ErrorCode::kInvalidArgument, "allreduce: unknown algorithm");
  QCCL_CHECK(in.nranks >= 1, ErrorCode::kInvalidArgument, "allreduce: no ranks");
  const CodecConfig cfg = resolveConfig(in.codec);
  if (in.requested == Algo::kRing) {
    QCCL_CHECK(isCast(cfg.codec), ErrorCode::kInvalidArgument,
               std::string("algorithm ring sends fp32, fp16 or bf16, not ") + codecName(cfg.codec) +
                   " (use sra or allgather)");
  }
  const bool isAuto = in.requested == Algo::kAuto;
  const bool small = in.count * sizeof(float) < in.minCompressBytes;
  if (in.warmup || (isAuto && (cfg.codec == CodecId::kFp32 || small))) return uncompressed(in, isAuto);

  Selection s;
  s.codec = cfg;
  if (isAuto) {
    s.algo = isCast(cfg.codec) ? Algo::kRing : (in.nranks >= 3 ? Algo::kSra : Algo::kAllgather);
  } else {
    s.algo = in.requested;
  }
  s.errorFeedback = in.errorFeedback && s.algo != Algo::kRing && cfg.codec != CodecId::kFp32;
  if (s.errorFeedback && !in.hasId) {
    QCCL_THROW(ErrorCode::kInvalidUsage,
               std::string("allreduce: codec ") + codecName(cfg.codec) +
                   " keeps an error-feedback residual per tensor, and this call has no tensor id: set "
                   "qcclTensorOpts_t.id (Python: tensor_id) to a nonzero id unique to this tensor and the same on "
                   "every rank, or turn error feedback off (QCCL_ERROR_FEEDBACK=0)");
  }
  // After the tensor-id check, so that a program that runs on one host runs on many.
  if (isAuto && in.shmAvailable && !in.deviceBuffers && !in.localCompress) return uncompressed(in, true);
  return s;
}

bool preferSecond(const float* times, size_t nranks) {
  float first = 0, second = 0;
  for (size_t r = 0; r < nranks; ++r) {
    const float f = times[2 * r], h = times[2 * r + 1];
    if (!(f > 0) || !(h > 0) || !std::isfinite(f) || !std::isfinite(h)) return false;
    first = std::max(first, f);
    second = std::max(second, h);
  }
  return nranks > 0 && second < kTuneMargin * first;
}

}  // namespace qccl
