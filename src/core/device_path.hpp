// Device-pointer support of the collectives (CUDA builds only; see device_path.cc).
//
// Device buffers go through pinned host staging: the input is copied to the host on the caller's
// stream, the host path runs the collective, and the result is copied back on the same stream.
#pragma once

#include <cstddef>

namespace qccl {
namespace device {

/// True when `p` is device (or managed) memory. Always false in builds without CUDA.
bool isDevicePointer(const void* p);

/// Pinned host buffer that grows on demand and is kept for later calls.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  /// At least `bytes` bytes of page-locked memory. Throws Error(kCudaError).
  void* get(size_t bytes);
  size_t capacity() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Stream-ordered copies that wait for completion before returning. Throw Error(kCudaError).
void copyToHost(void* dstHost, const void* srcDevice, size_t bytes, void* stream);
void copyToDevice(void* dstDevice, const void* srcHost, size_t bytes, void* stream);

}  // namespace device
}  // namespace qccl
