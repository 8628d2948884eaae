// Helpers shared by the codec tests: configs of every codec, deterministic data, byte-offset buffers.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qccl/codec.hpp"

namespace qccl {
namespace test {

/// Every codec configuration the tests sweep (maxmin at 2/4/8 bits, nearest and stochastic).
inline std::vector<CodecConfig> allConfigs(uint32_t bucket = 512) {
  std::vector<CodecConfig> v;
  for (int c = 0; c < kNumCodecs; ++c) {
    CodecConfig cfg;
    cfg.codec = static_cast<CodecId>(c);
    cfg.bucket = bucket;
    if (cfg.codec == CodecId::kMaxMin) {
      for (int bits : {2, 4, 8})
        for (bool sr : {false, true}) {
          cfg.bits = bits;
          cfg.stochastic = sr;
          cfg.seed = 0x1234567887654321ull;
          v.push_back(cfg);
        }
    } else {
      v.push_back(cfg);
    }
  }
  return v;
}

inline std::string configName(const CodecConfig& c) {
  std::string s = codecName(c.codec);
  if (c.codec == CodecId::kMaxMin) s += std::to_string(c.bits) + (c.stochastic ? "sr" : "");
  return s + "_b" + std::to_string(c.bucket);
}

inline bool isLossless(const CodecConfig& c) { return c.codec == CodecId::kFp32; }

/// Normal(0, scale) data from a fixed seed.
inline std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

/// A float array that starts `offset` bytes past a 64-byte boundary (offset may be odd).
/// Access goes through get/set so the test itself does no misaligned float loads.
class OffsetFloats {
 public:
  OffsetFloats(size_t n, size_t offset) : raw_(n * 4 + 128), n_(n), off_(offset) {
    uintptr_t a = reinterpret_cast<uintptr_t>(raw_.data());
    base_ = raw_.data() + ((64 - a % 64) % 64) + off_;
  }
  float* data() { return reinterpret_cast<float*>(base_); }
  size_t size() const { return n_; }
  float get(size_t i) const {
    float f;
    std::memcpy(&f, base_ + 4 * i, 4);
    return f;
  }
  void set(size_t i, float f) { std::memcpy(base_ + 4 * i, &f, 4); }
  void assign(const std::vector<float>& v) {
    if (!v.empty()) std::memcpy(base_, v.data(), v.size() * 4);
  }
  std::vector<float> vec() const {
    std::vector<float> v(n_);
    if (n_) std::memcpy(v.data(), base_, n_ * 4);
    return v;
  }

 private:
  std::vector<uint8_t> raw_;
  uint8_t* base_;
  size_t n_, off_;
};

/// Encodes into a fresh vector of exactly encodedBytes.
inline std::vector<uint8_t> encodeVec(const CodecConfig& cfg, const std::vector<float>& in, std::vector<float>* res,
                                      const EncodeParams& p = {}) {
  std::vector<uint8_t> w(encodedBytes(cfg, in.size()));
  size_t n = encode(cfg, in.data(), res ? res->data() : nullptr, in.size(), w.data(), w.size(), p);
  w.resize(n);
  return w;
}

inline std::vector<float> decodeVec(const std::vector<uint8_t>& w, size_t n) {
  std::vector<float> out(n);
  decode(w.data(), w.size(), out.data(), n);
  return out;
}

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace test
}  // namespace qccl
