// Builds without CUDA: no pointer is a device pointer, so a device space is never needed.
#include "core/device_path.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace device {

bool isDevicePointer(const void*) { return false; }
void* pinnedAlloc(size_t) { QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA"); }
void pinnedFree(void*) {}
std::unique_ptr<MemorySpace> makeDeviceSpace() {
  QCCL_THROW(ErrorCode::kInvalidUsage, "qccl was built without CUDA: device buffers are not supported");
}

}  // namespace device
}  // namespace qccl
