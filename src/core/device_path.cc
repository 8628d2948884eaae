// CUDA builds: the device memory space (see device_path.hpp for the device and stream discipline).
// Compiled and linked in CI (no GPU there); run on an H100 once (cuda/README.md, "What ran on a GPU").
#include "core/device_path.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <string>
#include <utility>
#include <vector>

#include "qccl/cuda_codec.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace device {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) QCCL_THROW(ErrorCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

// Selects `device` for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) {
      check(cudaSetDevice(device), "cudaSetDevice");
    } else {
      prev_ = -1;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// Grow-only raw device allocation on the current device.
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

// Everything qccl keeps on one device: its stream, the events that order it against callers, and
// grow-only buffers.
struct PerDevice {
  explicit PerDevice(int dev) : device(dev) {
    DeviceGuard g(device);
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaEventCreateWithFlags(&before, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&after, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~PerDevice() {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    if (pinned != nullptr) cudaFreeHost(pinned);
    cudaEventDestroy(before);
    cudaEventDestroy(after);
    cudaStreamDestroy(stream);
    if (prev >= 0) cudaSetDevice(prev);
  }
  PerDevice(const PerDevice&) = delete;
  PerDevice& operator=(const PerDevice&) = delete;

  void sync() { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (qccl stream)"); }

  float* pinnedFloats(size_t n) {
    if (n > pinnedN || pinned == nullptr) {
      if (pinned != nullptr) cudaFreeHost(pinned);
      pinned = nullptr;
      pinnedN = 0;
      check(cudaMallocHost(reinterpret_cast<void**>(&pinned), (n ? n : 1) * sizeof(float)), "cudaMallocHost");
      pinnedN = n;
    }
    return pinned;
  }

  size_t bytesHeld() const {
    return workspace.size() + encodeWire.size() + decodeWire.size() + scratch[0].size() + scratch[1].size() +
           pinnedN * sizeof(float);
  }

  int device;
  cudaStream_t stream = nullptr;
  cudaEvent_t before = nullptr, after = nullptr;
  DeviceBytes workspace, encodeWire, decodeWire, scratch[2];
  float* pinned = nullptr;
  size_t pinnedN = 0;
};

// A residual array on one device, zeroed in order on qccl's stream.
class DeviceArray final : public FloatArray {
 public:
  DeviceArray(PerDevice* dev, size_t n) : dev_(dev), n_(n) {
    DeviceGuard g(dev_->device);
    check(cudaMalloc(reinterpret_cast<void**>(&ptr_), (n ? n : 1) * sizeof(float)), "cudaMalloc residual");
    check(cudaMemsetAsync(ptr_, 0, (n ? n : 1) * sizeof(float), dev_->stream), "cudaMemsetAsync residual");
  }
  ~DeviceArray() override {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(dev_->device);
    cudaFree(ptr_);  // implicitly waits for the work that uses it
    if (prev >= 0) cudaSetDevice(prev);
  }
  float* data() override { return ptr_; }
  size_t size() const override { return n_; }
  void toHost(float* out) const override {
    DeviceGuard g(dev_->device);
    check(cudaMemcpyAsync(out, ptr_, n_ * sizeof(float), cudaMemcpyDeviceToHost, dev_->stream), "residual D2H");
    dev_->sync();
  }
  void fromHost(const float* in) override {
    DeviceGuard g(dev_->device);
    check(cudaMemcpyAsync(ptr_, in, n_ * sizeof(float), cudaMemcpyHostToDevice, dev_->stream), "residual H2D");
    dev_->sync();
  }
  void scale(float factor) override {
    DeviceGuard g(dev_->device);
    cuda::scale(ptr_, n_, factor, dev_->stream);
    dev_->sync();
  }

 private:
  PerDevice* dev_;
  float* ptr_ = nullptr;
  size_t n_;
};

class DeviceSpace final : public MemorySpace, private ChunkOps {
 public:
  bool isDevice() const override { return true; }

  void begin(const void* ptr, void* stream) override {
    cudaPointerAttributes attr{};
    check(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes");
    check(cudaGetDevice(&prevDevice_), "cudaGetDevice");
    if (prevDevice_ != attr.device) check(cudaSetDevice(attr.device), "cudaSetDevice");
    cur_ = perDevice(attr.device);
    caller_ = asStream(stream);
    check(cudaEventRecord(cur_->before, caller_), "cudaEventRecord (caller stream)");
    check(cudaStreamWaitEvent(cur_->stream, cur_->before, 0), "cudaStreamWaitEvent (qccl stream)");
  }

  void end() noexcept override {
    if (cur_ == nullptr) return;
    if (cudaEventRecord(cur_->after, cur_->stream) == cudaSuccess) cudaStreamWaitEvent(caller_, cur_->after, 0);
    if (prevDevice_ >= 0 && prevDevice_ != cur_->device) cudaSetDevice(prevDevice_);
    cur_ = nullptr;
    prevDevice_ = -1;
  }

  std::unique_ptr<FloatArray> newArray(size_t n) override { return std::make_unique<DeviceArray>(current(), n); }
  float* scratch(int index, size_t n) override {
    return static_cast<float*>(current()->scratch[index & 1].get(n * sizeof(float)));
  }
  void toFloat(const void* in, DataType t, float* out, size_t n) override {
    const uint16_t* h = static_cast<const uint16_t*>(in);
    if (t == DataType::kFloat16) {
      cuda::halfToFloat(h, out, n, current()->stream);
    } else {
      cuda::bf16ToFloat(h, out, n, current()->stream);
    }
  }
  void fromFloat(const float* in, DataType t, void* out, size_t n) override {
    uint16_t* h = static_cast<uint16_t*>(out);
    if (t == DataType::kFloat16) {
      cuda::floatToHalf(in, h, n, current()->stream);
    } else {
      cuda::floatToBf16(in, h, n, current()->stream);
    }
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, current()->stream), "cudaMemcpyAsync D2D");
  }
  void scale(float* d, size_t n, float s) override { cuda::scale(d, n, s, current()->stream); }
  ChunkOps* ops() override { return this; }

  float* hostView(float* work, size_t n) override {
    PerDevice* dev = current();
    float* host = dev->pinnedFloats(n);
    check(cudaMemcpyAsync(host, work, n * sizeof(float), cudaMemcpyDeviceToHost, dev->stream), "D2H");
    dev->sync();
    return host;
  }
  void fromHostView(float* work, const float* host, size_t n) override {
    check(cudaMemcpyAsync(work, host, n * sizeof(float), cudaMemcpyHostToDevice, current()->stream), "H2D");
  }

  size_t bytesHeld() const override {
    size_t b = 0;
    for (const auto& d : devs_)
      if (d) b += d->bytesHeld();
    return b;
  }

 private:
  // ChunkOps: encode into a device wire buffer, copy the bytes to the host slot, and wait for them
  // on qccl's stream only.
  size_t encode(const CodecConfig& cfg, const float* src, float* residual, size_t n, void* out, size_t capacity,
                const EncodeParams& params) override {
    QCCL_CHECK(params.feedbackGain == 1.0f, ErrorCode::kInvalidUsage,
               "error control (feedbackGain) takes host buffers only");
    PerDevice* dev = current();
    size_t wsBytes = cuda::encodeWorkspaceBytes(cfg, n);
    void* ws = dev->workspace.get(wsBytes);
    void* wire = dev->encodeWire.get(capacity);
    size_t bytes = cuda::encode(cfg, src, residual, n, wire, capacity, params, ws, wsBytes, dev->stream);
    check(cudaMemcpyAsync(out, wire, bytes, cudaMemcpyDeviceToHost, dev->stream), "cudaMemcpyAsync D2H");
    dev->sync();
    return bytes;
  }

  void decode(const WireInfo& info, const void* in, float* dst, size_t n, bool add) override {
    PerDevice* dev = current();
    void* wire = dev->decodeWire.get(info.totalBytes);
    check(cudaMemcpyAsync(wire, in, info.totalBytes, cudaMemcpyHostToDevice, dev->stream), "cudaMemcpyAsync H2D");
    if (add) {
      cuda::decodeAdd(info, wire, dst, n, dev->stream);
    } else {
      cuda::decode(info, wire, dst, n, dev->stream);
    }
    dev->sync();  // the host slot is reposted for the next receive as soon as this returns
  }

  void copyFloats(const float* src, float* dst, size_t n) override { copy(dst, src, n * sizeof(float)); }

  PerDevice* current() {
    QCCL_CHECK(cur_ != nullptr, ErrorCode::kInternalError, "device space used outside begin()/end()");
    return cur_;
  }

  PerDevice* perDevice(int device) {
    QCCL_CHECK(device >= 0, ErrorCode::kInvalidArgument, "device buffer on an unknown device");
    if (devs_.size() <= static_cast<size_t>(device)) devs_.resize(static_cast<size_t>(device) + 1);
    if (!devs_[device]) devs_[device] = std::make_unique<PerDevice>(device);
    return devs_[device].get();
  }

  std::vector<std::unique_ptr<PerDevice>> devs_;
  PerDevice* cur_ = nullptr;
  cudaStream_t caller_ = nullptr;
  int prevDevice_ = -1;
};

}  // namespace

// The driver's cuPointerGetAttributes, looked up in the libcuda.so.1 this process has already
// loaded. A process that has not loaded the driver holds no device memory, so a pointer is host
// memory without asking; one that has is asked through the driver, which creates no context (the
// runtime's cudaPointerGetAttributes would create the primary context of device 0, about 500 MB of
// GPU memory, in a process that only ever passes host buffers). The plural call answers a pointer
// CUDA does not know with memory type 0 and success, so host buffers raise no API error (which
// compute-sanitizer would report).
namespace {
using CuPointerGetAttributes = int (*)(unsigned numAttributes, int* attributes, void** data, unsigned long long ptr);
constexpr int kCuPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kCuPointerAttributeIsManaged = 8;   // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kCuMemoryTypeDevice = 2;       // CU_MEMORYTYPE_DEVICE

// Whether libcuda.so.1 is among the loaded objects, from the loader's list. The list's load count
// (dlpi_adds) is remembered, so while nothing new was loaded a scan stops at its first entry: this
// runs on every call of a process without the driver. (dlopen with RTLD_NOLOAD of a library that is
// not loaded searches the library path: 29 us per call on the development machine.)
struct DriverScan {
  unsigned long long known = 0;  // dlpi_adds at the last scan that found no driver
  unsigned long long adds = 0;
  bool first = true, unchanged = false;
  const char* found = nullptr;  // the driver's path as loaded
};

int scanForDriver(struct dl_phdr_info* info, size_t size, void* data) {
  auto* scan = static_cast<DriverScan*>(data);
  if (scan->first) {
    scan->first = false;
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds)) {
      scan->adds = info->dlpi_adds;
      if (scan->adds == scan->known) {
        scan->unchanged = true;
        return 1;
      }
    }
  }
  // The driver under any of its names (libcuda.so.1, the versioned file, the unversioned link).
  const char* name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  const char* slash = std::strrchr(name, '/');
  const char* base = slash != nullptr ? slash + 1 : name;
  if (std::strncmp(base, "libcuda.so", 10) == 0) {
    scan->found = name;
    return 1;
  }
  return 0;
}

CuPointerGetAttributes loadedDriverQuery() {
  static std::atomic<CuPointerGetAttributes> fn{nullptr};
  static std::atomic<unsigned long long> noDriverAt{~0ull};  // dlpi_adds of the last scan without it
  CuPointerGetAttributes f = fn.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  DriverScan scan;
  scan.known = noDriverAt.load(std::memory_order_relaxed);
  dl_iterate_phdr(scanForDriver, &scan);
  if (scan.unchanged) return nullptr;
  if (!scan.found) {
    noDriverAt.store(scan.adds, std::memory_order_relaxed);
    return nullptr;
  }
  void* lib = dlopen(scan.found, RTLD_LAZY | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  f = reinterpret_cast<CuPointerGetAttributes>(dlsym(lib, "cuPointerGetAttributes"));
  dlclose(lib);  // drops only the reference NOLOAD took; the library stays loaded
  if (f != nullptr) fn.store(f, std::memory_order_release);
  return f;
}
}  // namespace

bool isDevicePointer(const void* p) {
  if (p == nullptr) return false;
  CuPointerGetAttributes query = loadedDriverQuery();
  if (query == nullptr) return false;
  unsigned memoryType = 0;
  unsigned managed = 0;  // CUDA writes a bool-sized value; the rest stays zero
  int attributes[2] = {kCuPointerAttributeMemoryType, kCuPointerAttributeIsManaged};
  void* data[2] = {&memoryType, &managed};
  if (query(2, attributes, data, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p))) != 0) return false;
  return memoryType == kCuMemoryTypeDevice || managed != 0;
}

void* pinnedAlloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
  return p;
}

void pinnedFree(void* p) { cudaFreeHost(p); }

std::unique_ptr<MemorySpace> makeDeviceSpace() { return std::make_unique<DeviceSpace>(); }

}  // namespace device
}  // namespace qccl
