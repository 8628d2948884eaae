// Element-wise device helpers for the collectives: fp16/bf16 <-> fp32 conversion (codec_math's
// round-to-nearest-even), scaling and accumulation; and device discovery.
#include "codec/codec_math.hpp"
#include "cuda/bucket_common.cuh"
#include "cuda/launch_util.hpp"
#include "qccl/cuda_codec.hpp"

namespace qccl {
namespace cuda {
namespace detail {
namespace {

enum class Op { kHalfToFloat, kBf16ToFloat, kFloatToHalf, kFloatToBf16, kScale, kAdd };

struct ElementArgs {
  const void* in;
  void* out;
  uint64_t n;
  float s;
};

// Grid-stride loop, one element per thread per step: these are bandwidth-bound streams whose
// coalesced 32-bit (or 16-bit) accesses already fill the memory pipeline.
template <Op O>
__global__ void __launch_bounds__(kThreadsPerBlock) elementKernel(ElementArgs a) {
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if constexpr (O == Op::kHalfToFloat) {
      static_cast<float*>(a.out)[i] = math::halfToFloat(static_cast<const uint16_t*>(a.in)[i]);
    } else if constexpr (O == Op::kBf16ToFloat) {
      static_cast<float*>(a.out)[i] = math::bf16ToFloat(static_cast<const uint16_t*>(a.in)[i]);
    } else if constexpr (O == Op::kFloatToHalf) {
      static_cast<uint16_t*>(a.out)[i] = math::floatToHalf(static_cast<const float*>(a.in)[i]);
    } else if constexpr (O == Op::kFloatToBf16) {
      static_cast<uint16_t*>(a.out)[i] = math::floatToBf16(static_cast<const float*>(a.in)[i]);
    } else if constexpr (O == Op::kScale) {
      float* d = static_cast<float*>(a.out);
      d[i] = propagateNaN(d[i] * a.s, d[i], a.s);  // NaN payloads as on the CPU
    } else {
      float* d = static_cast<float*>(a.out);
      d[i] = addX86(d[i], static_cast<const float*>(a.in)[i]);
    }
  }
}

template <Op O>
void launch(const char* what, const void* in, size_t inAlign, void* out, size_t outAlign, size_t n, float s,
            void* stream) {
  if (n == 0) return;
  QCCL_CHECK(out != nullptr && (in != nullptr || O == Op::kScale), ErrorCode::kInvalidArgument,
             std::string("cuda ") + what + ": null pointer");
  QCCL_CHECK(isAligned(out, outAlign) && (in == nullptr || isAligned(in, inAlign)), ErrorCode::kInvalidArgument,
             std::string("cuda ") + what + ": pointer not aligned to its element size");
  ElementArgs a = {in, out, n, s};
  elementKernel<O><<<gridFor(n, kThreadsPerBlock, 65535), kThreadsPerBlock, 0, asStream(stream)>>>(a);
  QCCL_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace detail

bool deviceAvailable() noexcept {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for the caller
    return false;
  }
  return count > 0;
}

void halfToFloat(const uint16_t* in_d, float* out_d, size_t n, void* stream) {
  detail::launch<detail::Op::kHalfToFloat>("halfToFloat", in_d, 2, out_d, 4, n, 0.0f, stream);
}

void bf16ToFloat(const uint16_t* in_d, float* out_d, size_t n, void* stream) {
  detail::launch<detail::Op::kBf16ToFloat>("bf16ToFloat", in_d, 2, out_d, 4, n, 0.0f, stream);
}

void floatToHalf(const float* in_d, uint16_t* out_d, size_t n, void* stream) {
  detail::launch<detail::Op::kFloatToHalf>("floatToHalf", in_d, 4, out_d, 2, n, 0.0f, stream);
}

void floatToBf16(const float* in_d, uint16_t* out_d, size_t n, void* stream) {
  detail::launch<detail::Op::kFloatToBf16>("floatToBf16", in_d, 4, out_d, 2, n, 0.0f, stream);
}

void scale(float* d, size_t n, float s, void* stream) {
  detail::launch<detail::Op::kScale>("scale", nullptr, 4, d, 4, n, s, stream);
}

void add(float* acc_d, const float* x_d, size_t n, void* stream) {
  detail::launch<detail::Op::kAdd>("add", x_d, 4, acc_d, 4, n, 0.0f, stream);
}

}  // namespace cuda
}  // namespace qccl
