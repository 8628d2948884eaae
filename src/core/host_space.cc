// Host memory: plain loops over the caller's buffers; the CPU codec runs in the executor.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/codec_math.hpp"
#include "core/memory_space.hpp"

namespace qccl {
namespace {

class HostArray final : public FloatArray {
 public:
  explicit HostArray(size_t n) : v_(n, 0.0f) {}
  float* data() override { return v_.data(); }
  size_t size() const override { return v_.size(); }
  void toHost(float* out) const override { std::copy(v_.begin(), v_.end(), out); }
  void fromHost(const float* in) override { std::copy(in, in + v_.size(), v_.begin()); }
  void scale(float factor) override {
    for (float& x : v_) x = x * factor;
  }

 private:
  std::vector<float> v_;
};

class HostSpace final : public MemorySpace {
 public:
  bool isDevice() const override { return false; }
  std::unique_ptr<FloatArray> newArray(size_t n) override { return std::make_unique<HostArray>(n); }

  float* scratch(int index, size_t n) override {
    std::vector<float>& s = scratch_[index & 1];
    if (s.size() < n) s.resize(n);
    return s.data();
  }

  void toFloat(const void* in, DataType t, float* out, size_t n) override {
    const uint16_t* h = static_cast<const uint16_t*>(in);
    if (t == DataType::kFloat16) {
      for (size_t i = 0; i < n; ++i) out[i] = math::halfToFloat(h[i]);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = math::bf16ToFloat(h[i]);
    }
  }

  void fromFloat(const float* in, DataType t, void* out, size_t n) override {
    uint16_t* h = static_cast<uint16_t*>(out);
    if (t == DataType::kFloat16) {
      for (size_t i = 0; i < n; ++i) h[i] = math::floatToHalf(in[i]);
    } else {
      for (size_t i = 0; i < n; ++i) h[i] = math::floatToBf16(in[i]);
    }
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }

  void scale(float* d, size_t n, float s) override {
    for (size_t i = 0; i < n; ++i) d[i] = d[i] * s;
  }

  ChunkOps* ops() override { return nullptr; }
  float* hostView(float* work, size_t) override { return work; }
  void fromHostView(float* work, const float* host, size_t n) override { copy(work, host, n * sizeof(float)); }
  size_t bytesHeld() const override { return (scratch_[0].capacity() + scratch_[1].capacity()) * sizeof(float); }

 private:
  std::vector<float> scratch_[2];
};

}  // namespace

std::unique_ptr<MemorySpace> makeHostSpace() { return std::make_unique<HostSpace>(); }

}  // namespace qccl
