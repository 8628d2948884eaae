// Decode / decodeAdd launchers and kernels. The header was validated on the host (parseWire), so
// the kernels trust info and read only the payload, which parseWire proved long enough.
#include "codec/codec_math.hpp"
#include "cuda/bucket_decode.cuh"
#include "cuda/cast_codec.cuh"
#include "cuda/launch_util.hpp"
#include "cuda/warp.cuh"
#include "qccl/cuda_codec.hpp"

namespace qccl {
namespace cuda {
namespace detail {
namespace {

template <CodecId C, int B, bool ADD>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinBlocksPerSm) decodeBucketsKernel(DecodeArgs a, TablesFor<C> t) {
  __shared__ float sMag[C == CodecId::kDyn8 ? 128 : 1];
  if constexpr (C == CodecId::kDyn8) {
    for (int i = threadIdx.x; i < 128; i += blockDim.x) sMag[i] = t.magnitude[i];
    __syncthreads();
  }
  const DeviceWarp w;
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32u;
  for (uint64_t b = warp; b < a.numBuckets; b += warps) decodeBucket<C, B, ADD>(w, a, b, sMag);
}

// Casts: one thread per payload word, as in the encoder.
template <CodecId C, bool ADD>
__global__ void __launch_bounds__(kThreadsPerBlock) decodeCastKernel(const uint32_t* payload, uint64_t n, float* out) {
  const uint64_t words = (n + castPerWord<C>() - 1) / castPerWord<C>();
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    decodeCastWord<C, ADD>(payload[i], n, i, out);
}

template <CodecId C, int B, bool ADD>
void launchBuckets(const DecodeArgs& a, cudaStream_t s) {
  TablesFor<C> t;
  if constexpr (C == CodecId::kDyn8) t = hostDyn8Tables();
  decodeBucketsKernel<C, B, ADD><<<gridFor(a.numBuckets, kWarpsPerBlock), kThreadsPerBlock, 0, s>>>(a, t);
  QCCL_CUDA_CHECK_LAUNCH();
}

template <CodecId C, bool ADD>
void launchCast(const uint8_t* payload, uint64_t n, float* out, cudaStream_t s) {
  const uint64_t words = C == CodecId::kFp32 ? n : (n + 1) / 2;
  decodeCastKernel<C, ADD><<<gridFor(words, kThreadsPerBlock, 65535), kThreadsPerBlock, 0, s>>>(
      reinterpret_cast<const uint32_t*>(payload), n, out);
  QCCL_CUDA_CHECK_LAUNCH();
}

template <bool ADD>
void launchDecode(const CodecConfig& cfg, const uint8_t* payload, float* out, uint64_t n, cudaStream_t s) {
  switch (cfg.codec) {
    case CodecId::kFp32:
      return launchCast<CodecId::kFp32, ADD>(payload, n, out, s);
    case CodecId::kFp16:
      return launchCast<CodecId::kFp16, ADD>(payload, n, out, s);
    case CodecId::kBf16:
      return launchCast<CodecId::kBf16, ADD>(payload, n, out, s);
    default:
      break;
  }
  const DecodeArgs a = makeDecodeArgs(cfg, payload, out, n);
  switch (cfg.codec) {
    case CodecId::kOneBit:
      return launchBuckets<CodecId::kOneBit, 1, ADD>(a, s);
    case CodecId::kSignScale:
      return launchBuckets<CodecId::kSignScale, 1, ADD>(a, s);
    case CodecId::kDyn8:
      return launchBuckets<CodecId::kDyn8, 8, ADD>(a, s);
    case CodecId::kMaxMin:
      if (cfg.bits == 2) return launchBuckets<CodecId::kMaxMin, 2, ADD>(a, s);
      if (cfg.bits == 4) return launchBuckets<CodecId::kMaxMin, 4, ADD>(a, s);
      if (cfg.bits == 8) return launchBuckets<CodecId::kMaxMin, 8, ADD>(a, s);
      break;
    default:
      break;
  }
  QCCL_THROW(ErrorCode::kInvalidArgument, "cuda decode: WireInfo holds an invalid codec/bits pair");
}

template <bool ADD>
void decodeImpl(const WireInfo& info, const void* wire_d, float* out_d, size_t n, void* stream) {
  const char* what = ADD ? "cuda decodeAdd" : "cuda decode";
  if (info.count != n)
    QCCL_THROW(ErrorCode::kMismatch, std::string(what) + ": wire count " + std::to_string(info.count) +
                                         " but the caller expects " + std::to_string(n));
  // info normally comes from parseWire; recheck what the kernels rely on so a hand-made WireInfo
  // cannot make them read past the payload (payloadBytes also validates codec, bits and bucket).
  const CodecConfig& cfg = info.cfg;
  QCCL_CHECK(info.totalBytes == kWireHeaderBytes + payloadBytes(cfg, n), ErrorCode::kInvalidArgument,
             std::string(what) + ": WireInfo.totalBytes does not match its codec and count");
  if (n == 0) return;
  QCCL_CHECK(wire_d != nullptr && out_d != nullptr, ErrorCode::kInvalidArgument, std::string(what) + ": null pointer");
  QCCL_CHECK(isAligned(wire_d, 4) && isAligned(out_d, 4), ErrorCode::kInvalidArgument,
             std::string(what) + ": wire not 4-byte aligned or output not float aligned");
  launchDecode<ADD>(cfg, static_cast<const uint8_t*>(wire_d) + kWireHeaderBytes, out_d, n, asStream(stream));
}

}  // namespace
}  // namespace detail

void decode(const WireInfo& info, const void* wire_d, float* out_d, size_t n, void* stream) {
  detail::decodeImpl<false>(info, wire_d, out_d, n, stream);
}

void decodeAdd(const WireInfo& info, const void* wire_d, float* out_d, size_t n, void* stream) {
  detail::decodeImpl<true>(info, wire_d, out_d, n, stream);
}

}  // namespace cuda
}  // namespace qccl
