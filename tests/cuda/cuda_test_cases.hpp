// Inputs and comparisons shared by the CUDA codec tests (GPU and warp-emulated).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/codec_math.hpp"
#include "qccl/codec.hpp"

namespace qccl {
namespace testing {

/// Every codec configuration the CUDA path implements: casts, sign codecs, maxmin 2/4/8 nearest and
/// stochastic, dyn8.
inline std::vector<CodecConfig> allConfigs(uint32_t bucket = 512) {
  std::vector<CodecConfig> v;
  auto add = [&](CodecId c, int bits, bool stochastic) {
    CodecConfig cfg;
    cfg.codec = c;
    cfg.bits = bits;
    cfg.bucket = bucket;
    cfg.stochastic = stochastic;
    cfg.seed = stochastic ? 0x0123456789abcdefull : 0;
    v.push_back(cfg);
  };
  add(CodecId::kFp32, 0, false);
  add(CodecId::kFp16, 0, false);
  add(CodecId::kBf16, 0, false);
  add(CodecId::kOneBit, 0, false);
  add(CodecId::kSignScale, 0, false);
  for (int bits : {2, 4, 8}) {
    add(CodecId::kMaxMin, bits, false);
    add(CodecId::kMaxMin, bits, true);
  }
  add(CodecId::kDyn8, 0, false);
  return v;
}

inline bool isCast(CodecId c) { return c == CodecId::kFp32 || c == CodecId::kFp16 || c == CodecId::kBf16; }

inline std::string describe(const CodecConfig& c, size_t n, bool residual, bool aligned, int pattern) {
  return std::string(codecName(c.codec)) + " bits=" + std::to_string(c.bits) + (c.stochastic ? " stochastic" : "") +
         " bucket=" + std::to_string(c.bucket) + " n=" + std::to_string(n) + (residual ? " residual" : "") +
         (aligned ? " aligned" : " unaligned") + " pattern=" + std::to_string(pattern);
}

/// Pattern 0: Gaussian values. Pattern 1: the same plus edge buckets and values: an all-zero
/// bucket with -0.0f, a constant bucket, a NaN, an Inf, values near FLT_MAX (sums overflow, maxmin
/// range overflows), denormals, and values that round to Inf in fp16.
inline std::vector<float> makeInput(size_t n, uint32_t seed, int pattern, uint32_t bucket) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  if (pattern == 0 || n == 0) return v;
  const size_t b = bucket ? bucket : 64;
  auto fill = [&](size_t bi, float value) {
    for (size_t i = bi * b; i < n && i < (bi + 1) * b; ++i) v[i] = value;
  };
  fill(0, 0.0f);
  for (size_t i = 0; i < n && i < b; i += 3) v[i] = -0.0f;
  fill(1, 0.75f);
  if (n > 2 * b + 5) v[2 * b + 5] = math::quietNaN();
  if (n > 3 * b + 1) v[3 * b + 1] = -math::bitsFloat(0x7f800000u);
  for (size_t i = 4 * b; i < n && i < 5 * b; ++i) v[i] = (i % 2 ? 3.0e38f : -3.0e38f);
  for (size_t i = 5 * b; i < n && i < 6 * b; ++i) v[i] = math::bitsFloat(0x00000100u + (uint32_t)i) * (i % 3 ? 1 : -1);
  for (size_t i = 6 * b; i < n && i < 7 * b; i += 7) v[i] = 70000.0f;
  return v;
}

/// Index of the first element whose bits differ, or -1.
inline long long firstBitDiff(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (math::floatBits(a[i]) != math::floatBits(b[i])) return static_cast<long long>(i);
  return -1;
}

inline long long firstByteDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<long long>(i);
  return -1;
}

/// A float buffer whose data() is 16-byte aligned (aligned) or 4 bytes past it (unaligned).
class FloatBuf {
 public:
  FloatBuf(size_t n, bool aligned) : store_(n + 8), off_(0) {
    uintptr_t p = reinterpret_cast<uintptr_t>(store_.data());
    off_ = ((16 - p % 16) % 16) / 4 + (aligned ? 0 : 1);
  }
  float* data() { return store_.data() + off_; }

 private:
  std::vector<float> store_;
  size_t off_;
};

}  // namespace testing
}  // namespace qccl
