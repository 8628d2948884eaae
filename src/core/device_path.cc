// CUDA builds: device pointers are detected with cudaPointerGetAttributes and staged through
// pinned host memory on the caller's stream.
#include "core/device_path.hpp"

#include <cuda_runtime.h>

#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace device {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) QCCL_THROW(ErrorCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

bool isDevicePointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an unknown host pointer must not leave a sticky error behind
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

void* PinnedBuffer::get(size_t bytes) {
  if (bytes <= bytes_ && ptr_ != nullptr) return ptr_;
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  check(cudaMallocHost(&ptr_, bytes ? bytes : 1), "cudaMallocHost");
  bytes_ = bytes;
  return ptr_;
}

void copyToHost(void* dstHost, const void* srcDevice, size_t bytes, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  check(cudaMemcpyAsync(dstHost, srcDevice, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync to host");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void copyToDevice(void* dstDevice, const void* srcHost, size_t bytes, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  check(cudaMemcpyAsync(dstDevice, srcHost, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync to device");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

}  // namespace device
}  // namespace qccl
