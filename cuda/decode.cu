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

// Casts: one thread per group of 4 elements, as in the encoder: a full group of aligned buffers is
// one load of its payload words (16 bytes for fp32, 8 for fp16/bf16), with ADD one 16-byte load of
// the output, and one 16-byte store; the tail, and unaligned buffers, go word by word.
template <CodecId C, bool ADD>
__global__ void __launch_bounds__(kThreadsPerBlock)
    decodeCastKernel(const uint32_t* payload, uint64_t n, float* out, bool vec) {
  const uint64_t groups = (n + kCastGroup - 1) / kCastGroup;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t e0 = g * kCastGroup;
    if (vec && e0 + kCastGroup <= n) {
      uint32_t w[4];
      if constexpr (C == CodecId::kFp32) {
        const uint4 p = *reinterpret_cast<const uint4*>(payload + e0);
        w[0] = p.x, w[1] = p.y, w[2] = p.z, w[3] = p.w;
      } else {
        const uint2 p = *reinterpret_cast<const uint2*>(payload + e0 / 2);
        w[0] = p.x, w[1] = p.y;
      }
      float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (ADD) {
        const float4 ov = *reinterpret_cast<const float4*>(out + e0);
        o[0] = ov.x, o[1] = ov.y, o[2] = ov.z, o[3] = ov.w;
      }
      decodeCastGroup<C, ADD>(w, o);
      *reinterpret_cast<float4*>(out + e0) = make_float4(o[0], o[1], o[2], o[3]);
    } else {
      uint64_t w0, w1;
      castGroupWords<C>(e0, n, &w0, &w1);
      for (uint64_t i = w0; i < w1; ++i) decodeCastWord<C, ADD>(payload[i], n, i, out);
    }
  }
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
  const uint64_t groups = (n + kCastGroup - 1) / kCastGroup;
  const bool vec = isAligned(out, 16) && isAligned(payload, C == CodecId::kFp32 ? 16 : 8);
  decodeCastKernel<C, ADD><<<gridFor(groups, kThreadsPerBlock, 65535), kThreadsPerBlock, 0, s>>>(
      reinterpret_cast<const uint32_t*>(payload), n, out, vec);
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
