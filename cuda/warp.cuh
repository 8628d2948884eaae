// The warp policy of the bucket kernels on the device: lane id, ballot, shuffles, flag.
//
// The bucket code (bucket_encode.cuh, bucket_decode.cuh) is written against this small interface so
// the tests can run the very same code on the host with an emulated warp (tests/cuda/warp_emulator.hpp).
// Every collective here is called by all 32 lanes of the warp (the full mask is always right).
#pragma once

#include <stdint.h>

namespace qccl {
namespace cuda {
namespace detail {

#if defined(__CUDACC__)
struct DeviceWarp {
  static constexpr unsigned kFull = 0xffffffffu;
  __device__ __forceinline__ uint32_t lane() const { return threadIdx.x & 31u; }
  __device__ __forceinline__ uint32_t ballot(bool p) const { return __ballot_sync(kFull, p); }
  __device__ __forceinline__ bool any(bool p) const { return __any_sync(kFull, p) != 0; }
  __device__ __forceinline__ float shflXor(float v, int h) const { return __shfl_xor_sync(kFull, v, h); }
  __device__ __forceinline__ uint32_t shflXorU32(uint32_t v, int h) const { return __shfl_xor_sync(kFull, v, h); }
  __device__ __forceinline__ float shflIdx(float v, int src) const { return __shfl_sync(kFull, v, src); }
  /// Marks the call as holding a non-finite bucket (any lane may call it).
  __device__ __forceinline__ void setFlag(uint32_t* flag) const { atomicOr(flag, 1u); }
};
#endif

}  // namespace detail
}  // namespace cuda
}  // namespace qccl
