// Device-pointer support of the collectives (CUDA builds: device_path.cc, else device_path_stub.cc).
//
// Device buffers never leave the device as fp32: the CUDA codecs (qccl/cuda_codec.hpp) encode each
// chunk into a device wire buffer, only the encoded bytes are copied to the host staging slot that
// the transport sends, and received bytes are copied back and decoded (or decode-added) on the
// device. Residuals of device tensors live in device memory.
//
// Device and stream discipline (the MemorySpace::begin/end bracket of one call):
//   - the device is the one the call's buffer lives on (cudaPointerGetAttributes), selected for
//     the call and restored afterwards, so a rank on GPU 3 never allocates on GPU 0;
//   - qccl works on its own non-blocking stream per device, which first waits (event) for the
//     work the caller enqueued on its stream before the call; at the end the caller's stream waits
//     for qccl's stream. The per-chunk synchronization the transport needs (bytes on the host
//     before a send, host bytes consumed before a receive slot is reused) is on qccl's stream, so it
//     never waits for unrelated work on the caller's stream (e.g. the rest of backward).
//   - residual arrays are zeroed in stream order on qccl's stream.
#pragma once

#include <cstddef>
#include <memory>

#include "core/memory_space.hpp"

namespace qccl {
namespace device {

/// True when `p` is device (or managed) memory. Always false in builds without CUDA; never creates
/// a CUDA context for a host pointer in builds with CUDA when no device is present.
bool isDevicePointer(const void* p);

/// Page-locked host memory for the executor's staging slots (HostAllocator). Throws Error.
void* pinnedAlloc(size_t bytes);
void pinnedFree(void* p);

/// The device memory space of one communicator. Throws Error(kInvalidUsage) without CUDA.
std::unique_ptr<MemorySpace> makeDeviceSpace();

}  // namespace device
}  // namespace qccl
