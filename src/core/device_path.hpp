// Device-pointer support of the collectives (CUDA builds; device_path.cc, else device_path_stub.cc).
//
// Device buffers never leave the device as fp32: the CUDA codecs (qccl/cuda_codec.hpp) encode each
// chunk on the caller's stream into a device wire buffer, only the encoded bytes are copied to the
// host staging slot that the transport sends, and received bytes are copied back and decoded (or
// decode-added) on the device. Residuals of device tensors live in device memory.
#pragma once

#include <cstddef>
#include <memory>

#include "core/communicator.hpp"
#include "core/executor.hpp"

namespace qccl {
namespace device {

/// True when `p` is device (or managed) memory. Always false in builds without CUDA.
bool isDevicePointer(const void* p);

/// Page-locked host memory for the executor's staging slots (HostAllocator). Throws Error.
void* pinnedAlloc(size_t bytes);
void pinnedFree(void* p);

/// A zero-initialized fp32 array in device memory, freed with the object.
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray();
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept;
  DeviceArray& operator=(DeviceArray&& o) noexcept;
  /// Pointer to n elements; reallocated (and zeroed) when n differs from the current size.
  float* ensure(size_t n);
  size_t size() const { return n_; }

 private:
  float* ptr_ = nullptr;
  size_t n_ = 0;
};

/// Device resources of one communicator: the ChunkOps that run the CUDA codecs on a stream, and
/// grow-only device work buffers. Created on the first call with device buffers.
class DeviceContext {
 public:
  /// Throws Error(kInvalidUsage) in builds without CUDA.
  DeviceContext();
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  /// Codec operations on `stream` (a cudaStream_t). Each encode waits until its bytes are on the
  /// host; each decode waits until the host bytes have been consumed, so slots can be reused.
  ChunkOps* ops(void* stream);
  /// Grow-only device buffer `index` (0 or 1) of at least n floats.
  float* buffer(int index, size_t n);
  /// Stream-ordered conversions and copies on device memory.
  void toFloat(const void* in, DataType t, float* out, size_t n, void* stream);
  void fromFloat(const float* in, DataType t, void* out, size_t n, void* stream);
  void copy(void* dst, const void* src, size_t bytes, void* stream);
  void scale(float* d, size_t n, float s, void* stream);
  /// Device bytes held by the work and wire buffers.
  size_t bytesHeld() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace device
}  // namespace qccl
