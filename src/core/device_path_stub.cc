// Builds without CUDA: no pointer is a device pointer, and the device helpers are unreachable.
#include "core/device_path.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace device {

bool isDevicePointer(const void*) { return false; }

PinnedBuffer::~PinnedBuffer() = default;

void* PinnedBuffer::get(size_t) { QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA"); }

void copyToHost(void*, const void*, size_t, void*) {
  QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA");
}

void copyToDevice(void*, const void*, size_t, void*) {
  QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA");
}

}  // namespace device
}  // namespace qccl
