// CUDA builds: device pointers are detected with cudaPointerGetAttributes; chunks are encoded and
// decoded by the CUDA codecs on the caller's stream, and only wire bytes cross PCIe.
#include "core/device_path.hpp"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "qccl/cuda_codec.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace device {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) QCCL_THROW(ErrorCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

// Grow-only raw device allocation.
class DeviceBytes {
 public:
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void* get(size_t bytes) {
    if (bytes <= bytes_ && ptr_ != nullptr) return ptr_;
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    check(cudaMalloc(&ptr_, bytes ? bytes : 16), "cudaMalloc");
    bytes_ = bytes;
    return ptr_;
  }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudaChunkOps : public ChunkOps {
 public:
  void setStream(void* s) { stream_ = s; }

  size_t encode(const CodecConfig& cfg, const float* src, float* residual, size_t n, void* out, size_t capacity,
                const EncodeParams& params) override {
    size_t wsBytes = cuda::encodeWorkspaceBytes(cfg, n);
    void* ws = workspace_.get(wsBytes);
    void* wire = encodeWire_.get(capacity);
    size_t bytes = cuda::encode(cfg, src, residual, n, wire, capacity, params, ws, wsBytes, stream_);
    check(cudaMemcpyAsync(out, wire, bytes, cudaMemcpyDeviceToHost, asStream(stream_)), "cudaMemcpyAsync D2H");
    check(cudaStreamSynchronize(asStream(stream_)), "cudaStreamSynchronize");
    return bytes;
  }

  void decode(const WireInfo& info, const void* in, float* dst, size_t n, bool add) override {
    void* wire = decodeWire_.get(info.totalBytes);
    check(cudaMemcpyAsync(wire, in, info.totalBytes, cudaMemcpyHostToDevice, asStream(stream_)), "cudaMemcpyAsync H2D");
    if (add) {
      cuda::decodeAdd(info, wire, dst, n, stream_);
    } else {
      cuda::decode(info, wire, dst, n, stream_);
    }
    // The host slot is reposted for the next receive as soon as this returns.
    check(cudaStreamSynchronize(asStream(stream_)), "cudaStreamSynchronize");
  }

  size_t bytesHeld() const { return workspace_.size() + encodeWire_.size() + decodeWire_.size(); }

 private:
  void* stream_ = nullptr;
  DeviceBytes workspace_, encodeWire_, decodeWire_;
};

}  // namespace

bool isDevicePointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer must not leave a sticky error behind
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void* pinnedAlloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
  return p;
}

void pinnedFree(void* p) { cudaFreeHost(p); }

DeviceArray::~DeviceArray() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}
DeviceArray::DeviceArray(DeviceArray&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
DeviceArray& DeviceArray::operator=(DeviceArray&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
float* DeviceArray::ensure(size_t n) {
  if (n == n_ && ptr_ != nullptr) return ptr_;
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  n_ = 0;
  check(cudaMalloc(reinterpret_cast<void**>(&ptr_), (n ? n : 1) * sizeof(float)), "cudaMalloc residual");
  check(cudaMemset(ptr_, 0, (n ? n : 1) * sizeof(float)), "cudaMemset residual");
  n_ = n;
  return ptr_;
}

struct DeviceContext::Impl {
  CudaChunkOps ops;
  DeviceBytes buffers[2];
};

DeviceContext::DeviceContext() : impl_(std::make_unique<Impl>()) {}
DeviceContext::~DeviceContext() = default;

ChunkOps* DeviceContext::ops(void* stream) {
  impl_->ops.setStream(stream);
  return &impl_->ops;
}

float* DeviceContext::buffer(int index, size_t n) {
  return static_cast<float*>(impl_->buffers[index].get(n * sizeof(float)));
}

void DeviceContext::toFloat(const void* in, DataType t, float* out, size_t n, void* stream) {
  const uint16_t* h = static_cast<const uint16_t*>(in);
  if (t == DataType::kFloat16) {
    cuda::halfToFloat(h, out, n, stream);
  } else {
    cuda::bf16ToFloat(h, out, n, stream);
  }
}

void DeviceContext::fromFloat(const float* in, DataType t, void* out, size_t n, void* stream) {
  uint16_t* h = static_cast<uint16_t*>(out);
  if (t == DataType::kFloat16) {
    cuda::floatToHalf(in, h, n, stream);
  } else {
    cuda::floatToBf16(in, h, n, stream);
  }
}

void DeviceContext::copy(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, asStream(stream)), "cudaMemcpyAsync D2D");
}

void DeviceContext::scale(float* d, size_t n, float s, void* stream) { cuda::scale(d, n, s, stream); }

size_t DeviceContext::bytesHeld() const {
  return impl_->ops.bytesHeld() + impl_->buffers[0].size() + impl_->buffers[1].size();
}

}  // namespace device
}  // namespace qccl
