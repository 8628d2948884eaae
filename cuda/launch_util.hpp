// Host-side helpers shared by the launchers: CUDA error checks, argument checks, grid sizing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/codec_math.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace cuda {
namespace detail {

/// Throws Error(kCudaError) naming the failed call and the CUDA error string.
inline void checkCuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    ::qccl::detail::throwError(ErrorCode::kCudaError, file, line,
                               std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

/// Blocks for `items` units of `perBlock`, capped: the kernels stride over the rest, and a cap
/// keeps per-block setup (the dyn8 table copy) small against the work.
inline unsigned gridFor(uint64_t items, uint64_t perBlock, unsigned cap = 16384) {
  uint64_t b = (items + perBlock - 1) / perBlock;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

/// The dyn8 tables, filled once on the host by the same function the CPU codec uses.
inline const math::Dyn8Tables& hostDyn8Tables() {
  static const math::Dyn8Tables t = [] {
    math::Dyn8Tables x;
    math::fillDyn8Tables(&x);
    return x;
  }();
  return t;
}

inline cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace detail
}  // namespace cuda
}  // namespace qccl

/// Throws qccl::Error(kCudaError) when a CUDA runtime call fails.
#define QCCL_CUDA_CHECK(call) ::qccl::cuda::detail::checkCuda((call), #call, __FILE__, __LINE__)

/// Checks the launch just enqueued (configuration errors surface here, not at the next sync).
#define QCCL_CUDA_CHECK_LAUNCH() QCCL_CUDA_CHECK(cudaGetLastError())
