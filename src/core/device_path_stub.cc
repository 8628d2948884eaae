// Builds without CUDA: no pointer is a device pointer, so none of the device objects is ever used
// with data; constructing a context is refused.
#include "core/device_path.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace device {

bool isDevicePointer(const void*) { return false; }

void* pinnedAlloc(size_t) { QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA"); }
void pinnedFree(void*) {}

DeviceArray::~DeviceArray() = default;
DeviceArray::DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
  o.ptr_ = nullptr;
  o.n_ = 0;
}
DeviceArray& DeviceArray::operator=(DeviceArray&& o) noexcept {
  ptr_ = o.ptr_;
  n_ = o.n_;
  o.ptr_ = nullptr;
  o.n_ = 0;
  return *this;
}
float* DeviceArray::ensure(size_t) { QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA"); }

struct DeviceContext::Impl {};
DeviceContext::DeviceContext() { QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA"); }
DeviceContext::~DeviceContext() = default;
ChunkOps* DeviceContext::ops(void*) { return nullptr; }
float* DeviceContext::buffer(int, size_t) { return nullptr; }
void DeviceContext::toFloat(const void*, DataType, float*, size_t, void*) {}
void DeviceContext::fromFloat(const float*, DataType, void*, size_t, void*) {}
void DeviceContext::copy(void*, const void*, size_t, void*) {}
void DeviceContext::scale(float*, size_t, float, void*) {}
size_t DeviceContext::bytesHeld() const { return 0; }

}  // namespace device
}  // namespace qccl
