// Encode launcher and kernels: bucket codecs (one warp per bucket), casts and the header writer.
//
// Launch sequence on the caller's stream, nothing allocated:
//   1. cudaMemsetAsync(workspace flag word, 0)
//   2. the codec kernel; a non-finite bucket/value sets the flag (atomicOr)
//   3. a one-thread kernel writes the 32-byte header with flag bit 2 taken from the workspace word.
#include <cstring>

#include "codec/codec_math.hpp"
#include "cuda/bucket_encode.cuh"
#include "cuda/cast_codec.cuh"
#include "cuda/launch_util.hpp"
#include "cuda/warp.cuh"
#include "qccl/cuda_codec.hpp"

namespace qccl {
namespace cuda {
namespace detail {
namespace {

constexpr size_t kWorkspaceBytes = 16;  // one flag word, padded to a 16-byte line

template <CodecId C, int B>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinBlocksPerSm) encodeBucketsKernel(EncodeArgs a, TablesFor<C> t) {
  __shared__ float sThr[C == CodecId::kDyn8 ? 128 : 1];
  __shared__ float sMag[C == CodecId::kDyn8 ? 128 : 1];
  if constexpr (C == CodecId::kDyn8) {
    for (int i = threadIdx.x; i < 128; i += blockDim.x) {
      sMag[i] = t.magnitude[i];
      if (i < 127) sThr[i] = t.threshold[i];
    }
    __syncthreads();
  }
  const DeviceWarp w;
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32u;
  for (uint64_t b = warp; b < a.numBuckets; b += warps) encodeBucket<C, B>(w, a, b, sThr, sMag);
}

// Casts: one thread per group of 4 elements (kCastGroup). Where the input, the residual and the
// payload are aligned for it, a full group is one 16-byte load of the input and of the residual,
// one store of each of the residual and the payload (16 bytes for fp32, 8 for fp16/bf16); the
// tail, and every group of unaligned buffers, goes word by word. One element per thread with
// 4-byte accesses moved 0.11-0.15 of cudaMemcpy's bytes per second for fp32 on an H200.
template <CodecId C>
__global__ void __launch_bounds__(kThreadsPerBlock)
    encodeCastKernel(const float* in, float* res, uint64_t n, uint32_t* payload, uint32_t* flag, bool vec) {
  const uint64_t groups = (n + kCastGroup - 1) / kCastGroup;
  bool bad = false;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t e0 = g * kCastGroup;
    if (vec && e0 + kCastGroup <= n) {
      const float4 xv = *reinterpret_cast<const float4*>(in + e0);
      const float4 rv = res ? *reinterpret_cast<const float4*>(res + e0) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float x[4] = {xv.x, xv.y, xv.z, xv.w}, r[4] = {rv.x, rv.y, rv.z, rv.w};
      float rNew[4];
      uint32_t w[4];
      encodeCastGroup<C>(x, r, res != nullptr, rNew, w, &bad);
      if (res) *reinterpret_cast<float4*>(res + e0) = make_float4(rNew[0], rNew[1], rNew[2], rNew[3]);
      if constexpr (C == CodecId::kFp32) {
        *reinterpret_cast<uint4*>(payload + e0) = make_uint4(w[0], w[1], w[2], w[3]);
      } else {
        *reinterpret_cast<uint2*>(payload + e0 / 2) = make_uint2(w[0], w[1]);
      }
    } else {
      uint64_t w0, w1;
      castGroupWords<C>(e0, n, &w0, &w1);
      for (uint64_t i = w0; i < w1; ++i) payload[i] = encodeCastWord<C>(in, res, n, i, &bad);
    }
  }
  // Every thread of the block reaches this point, so the full-mask vote is well defined.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31u) == 0) atomicOr(flag, 1u);
}

__global__ void writeHeaderKernel(WireHeader h, const uint32_t* flag, uint32_t* out) {
  if (*flag) h.flags |= kFlagNonFinite;
  uint32_t words[8];
  memcpy(words, &h, sizeof(h));
  QCCL_UNROLL
  for (int i = 0; i < 8; ++i) out[i] = words[i];
}

template <CodecId C, int B>
void launchBuckets(const EncodeArgs& a, cudaStream_t s) {
  TablesFor<C> t;
  if constexpr (C == CodecId::kDyn8) t = hostDyn8Tables();
  encodeBucketsKernel<C, B><<<gridFor(a.numBuckets, kWarpsPerBlock), kThreadsPerBlock, 0, s>>>(a, t);
  QCCL_CUDA_CHECK_LAUNCH();
}

template <CodecId C>
void launchCast(const float* in, float* res, uint64_t n, uint8_t* payload, uint32_t* flag, cudaStream_t s) {
  const uint64_t groups = (n + kCastGroup - 1) / kCastGroup;
  const bool vec = isAligned(in, 16) && isAligned(res, 16) && isAligned(payload, C == CodecId::kFp32 ? 16 : 8);
  encodeCastKernel<C><<<gridFor(groups, kThreadsPerBlock, 65535), kThreadsPerBlock, 0, s>>>(
      in, res, n, reinterpret_cast<uint32_t*>(payload), flag, vec);
  QCCL_CUDA_CHECK_LAUNCH();
}

void launchEncode(const CodecConfig& r, const float* in, float* res, uint64_t n, uint8_t* payload,
                  const EncodeParams& params, uint32_t* flag, cudaStream_t s) {
  if (r.codec == CodecId::kFp32) return launchCast<CodecId::kFp32>(in, res, n, payload, flag, s);
  if (r.codec == CodecId::kFp16) return launchCast<CodecId::kFp16>(in, res, n, payload, flag, s);
  if (r.codec == CodecId::kBf16) return launchCast<CodecId::kBf16>(in, res, n, payload, flag, s);
  const EncodeArgs a = makeEncodeArgs(r, in, res, n, payload, params.rngOffset, flag);
  switch (r.codec) {
    case CodecId::kOneBit:
      return launchBuckets<CodecId::kOneBit, 1>(a, s);
    case CodecId::kSignScale:
      return launchBuckets<CodecId::kSignScale, 1>(a, s);
    case CodecId::kDyn8:
      return launchBuckets<CodecId::kDyn8, 8>(a, s);
    case CodecId::kMaxMin:
      if (r.bits == 2) return launchBuckets<CodecId::kMaxMin, 2>(a, s);
      if (r.bits == 4) return launchBuckets<CodecId::kMaxMin, 4>(a, s);
      return launchBuckets<CodecId::kMaxMin, 8>(a, s);
    default:
      QCCL_THROW(ErrorCode::kInternalError, "cuda encode: unhandled codec");
  }
}

}  // namespace
}  // namespace detail

size_t encodeWorkspaceBytes(const CodecConfig& cfg, size_t) {
  validateConfig(cfg);
  return detail::kWorkspaceBytes;
}

size_t encode(const CodecConfig& cfg, const float* in_d, float* residual_d, size_t n, void* out_d, size_t outCapacity,
              const EncodeParams& params, void* workspace_d, size_t workspaceBytes, void* stream) {
  using detail::isAligned;
  const CodecConfig r = resolveConfig(cfg);
  const size_t total = encodedBytes(r, n);
  QCCL_CHECK(out_d != nullptr, ErrorCode::kInvalidArgument, "cuda encode: null output");
  QCCL_CHECK(in_d != nullptr || n == 0, ErrorCode::kInvalidArgument, "cuda encode: null input");
  QCCL_CHECK(outCapacity >= total, ErrorCode::kInvalidArgument,
             "cuda encode: output capacity " + std::to_string(outCapacity) + " < " + std::to_string(total) + " bytes");
  QCCL_CHECK(workspace_d != nullptr && workspaceBytes >= detail::kWorkspaceBytes, ErrorCode::kInvalidArgument,
             "cuda encode: workspace missing or smaller than encodeWorkspaceBytes()");
  QCCL_CHECK(isAligned(workspace_d, 16), ErrorCode::kInvalidArgument, "cuda encode: workspace not 16-byte aligned");
  QCCL_CHECK(isAligned(out_d, 4), ErrorCode::kInvalidArgument, "cuda encode: output not 4-byte aligned");
  QCCL_CHECK(isAligned(in_d, 4) && isAligned(residual_d, 4), ErrorCode::kInvalidArgument,
             "cuda encode: input or residual not 4-byte aligned");
  QCCL_CHECK(residual_d == nullptr || residual_d == in_d || residual_d + n <= in_d || in_d + n <= residual_d,
             ErrorCode::kInvalidArgument, "cuda encode: residual overlaps the input without being equal to it");

  cudaStream_t s = detail::asStream(stream);
  uint32_t* flag = static_cast<uint32_t*>(workspace_d);
  uint8_t* out = static_cast<uint8_t*>(out_d);
  QCCL_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(uint32_t), s));
  if (n > 0) detail::launchEncode(r, in_d, residual_d, n, out + kWireHeaderBytes, params, flag, s);

  const WireHeader h = detail::makeHeader(r, n, params, residual_d != nullptr);
  detail::writeHeaderKernel<<<1, 1, 0, s>>>(h, flag, reinterpret_cast<uint32_t*>(out));
  QCCL_CUDA_CHECK_LAUNCH();
  return total;
}

}  // namespace cuda
}  // namespace qccl
