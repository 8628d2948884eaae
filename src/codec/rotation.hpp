// The block rotation before a 1-bit codec (H D x in blocks of a power of two, Walsh-Hadamard after a
// fixed diagonal of random signs; Suresh et al., "Distributed Mean Estimation with Limited
// Communication", ICML 2017), shared by the C API's momentum correction (qccl_momentum.h) and the
// Python DDP hook (HookState(rotation=...)), and the 1-bit codecs' loss that decides whether to rotate.
// Scalar code plus GCC/Clang vector extensions: no ISA beyond the baseline, the same bits everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qccl {
namespace rotation {

constexpr int kMinBlock = 32, kMaxBlock = 65536;
constexpr int kDefaultBlock = 512;  // the codecs' default bucket
// Rotate when the codec's loss on the rotated data is below this share of its loss on it as it is
// (onebit encodes a bucket of similar values nearly exactly, and the rotation would make it Gaussian).
constexpr double kAutoGain = 0.9;

inline bool validBlock(int n) { return n >= kMinBlock && n <= kMaxBlock && (n & (n - 1)) == 0; }

// The rotation's diagonal for a block of n: element i's sign is the top bit of splitmix64(i), the
// same on every rank and in every run.
inline std::vector<float> signs(int n) {
  std::vector<float> d(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) {
    uint64_t z = static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    d[static_cast<size_t>(i)] = (z >> 63) != 0 ? -1.0f : 1.0f;
  }
  return d;
}

// Four floats in SSE registers (GCC and Clang vector extensions; no ISA beyond the baseline).
// Loads and stores go through memcpy, so no alignment is assumed.
typedef float F4 __attribute__((vector_size(16)));
typedef int I4 __attribute__((vector_size(16)));
#if defined(__clang__)
#define QCCL_ROTATION_SHUFFLE4(v, a, b, c, d) __builtin_shufflevector(v, v, a, b, c, d)
#else
#define QCCL_ROTATION_SHUFFLE4(v, a, b, c, d) __builtin_shuffle(v, (I4){a, b, c, d})
#endif

inline F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, F4 v) { std::memcpy(p, &v, sizeof v); }

// In place, the unnormalized Walsh-Hadamard transform of n floats (n a power of two, >= 8), H H = n I,
// stage by stage (h = 1, 2, 4, ...), each butterfly (x, y) -> (x + y, x - y). The input is read from
// `src` (a itself when NULL); `pre`, when given, multiplies it element-wise first (the diagonal D).
// The first three stages run in registers, eight elements at a time: x - y is computed as
// x + (-1 * y), which IEEE makes the same bits.
inline void walshHadamard4(float* a, size_t n, const float* src, const float* pre) {
  if (!src) src = a;
  const F4 alt = {1.0f, -1.0f, 1.0f, -1.0f}, pairs = {1.0f, 1.0f, -1.0f, -1.0f};
  for (size_t i = 0; i < n; i += 8) {
    F4 v[2];
    for (int k = 0; k < 2; k++) {
      F4 x = load4(src + i + 4 * k);
      if (pre) x = x * load4(pre + i + 4 * k);
      x = QCCL_ROTATION_SHUFFLE4(x, 0, 0, 2, 2) + QCCL_ROTATION_SHUFFLE4(x, 1, 1, 3, 3) * alt;       // h = 1
      v[k] = QCCL_ROTATION_SHUFFLE4(x, 0, 1, 0, 1) + QCCL_ROTATION_SHUFFLE4(x, 2, 3, 2, 3) * pairs;  // h = 2
    }
    store4(a + i, v[0] + v[1]);  // h = 4
    store4(a + i + 4, v[0] - v[1]);
  }
  // Then two stages per pass (h and 2h): each group of four elements j, j + h, j + 2h, j + 3h takes
  // the same butterflies in the same order as two passes would, with half the loads and stores.
  size_t h = 8;
  for (; 4 * h <= n; h *= 4)
    for (size_t i = 0; i < n; i += 4 * h)
      for (size_t j = i; j < i + h; j += 4) {
        const F4 x0 = load4(a + j), x1 = load4(a + j + h), x2 = load4(a + j + 2 * h), x3 = load4(a + j + 3 * h);
        const F4 s0 = x0 + x1, d0 = x0 - x1, s1 = x2 + x3, d1 = x2 - x3;
        store4(a + j, s0 + s1);
        store4(a + j + h, d0 + d1);
        store4(a + j + 2 * h, s0 - s1);
        store4(a + j + 3 * h, d0 - d1);
      }
  if (h < n)  // an odd number of stages left: the last one alone
    for (size_t j = 0; j < h; j += 4) {
      const F4 x = load4(a + j), y = load4(a + j + h);
      store4(a + j, x + y);
      store4(a + j + h, x - y);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The same transform eight floats at a time in AVX registers: the same butterflies on the same
// values in the same order (the first three stages as in walshHadamard4, x + (-1 * y) for x - y),
// so the same bits; what the rotation costs is this arithmetic once its passes run in cache.
typedef float F8 __attribute__((vector_size(32)));
typedef int I8 __attribute__((vector_size(32)));
#if defined(__clang__)
#define QCCL_ROTATION_SHUFFLE8(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define QCCL_ROTATION_SHUFFLE8(v, ...) __builtin_shuffle(v, (I8){__VA_ARGS__})
#endif

__attribute__((target("avx2"))) inline F8 load8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((target("avx2"))) inline void store8(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }

__attribute__((target("avx2"))) inline void walshHadamard8(float* a, size_t n, const float* src, const float* pre) {
  if (!src) src = a;
  const F8 alt = {1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f};
  const F8 pairs = {1.0f, 1.0f, -1.0f, -1.0f, 1.0f, 1.0f, -1.0f, -1.0f};
  const F8 quads = {1.0f, 1.0f, 1.0f, 1.0f, -1.0f, -1.0f, -1.0f, -1.0f};
  for (size_t i = 0; i < n; i += 8) {
    F8 x = load8(src + i);
    if (pre) x = x * load8(pre + i);
    x = QCCL_ROTATION_SHUFFLE8(x, 0, 0, 2, 2, 4, 4, 6, 6) + QCCL_ROTATION_SHUFFLE8(x, 1, 1, 3, 3, 5, 5, 7, 7) * alt;
    x = QCCL_ROTATION_SHUFFLE8(x, 0, 1, 0, 1, 4, 5, 4, 5) + QCCL_ROTATION_SHUFFLE8(x, 2, 3, 2, 3, 6, 7, 6, 7) * pairs;
    x = QCCL_ROTATION_SHUFFLE8(x, 0, 1, 2, 3, 0, 1, 2, 3) + QCCL_ROTATION_SHUFFLE8(x, 4, 5, 6, 7, 4, 5, 6, 7) * quads;
    store8(a + i, x);
  }
  size_t h = 8;
  for (; 4 * h <= n; h *= 4)
    for (size_t i = 0; i < n; i += 4 * h)
      for (size_t j = i; j < i + h; j += 8) {
        const F8 x0 = load8(a + j), x1 = load8(a + j + h), x2 = load8(a + j + 2 * h), x3 = load8(a + j + 3 * h);
        const F8 s0 = x0 + x1, d0 = x0 - x1, s1 = x2 + x3, d1 = x2 - x3;
        store8(a + j, s0 + s1);
        store8(a + j + h, d0 + d1);
        store8(a + j + 2 * h, s0 - s1);
        store8(a + j + 3 * h, d0 - d1);
      }
  if (h < n)
    for (size_t j = 0; j < h; j += 8) {
      const F8 x = load8(a + j), y = load8(a + j + h);
      store8(a + j, x + y);
      store8(a + j + h, x - y);
    }
}
#undef QCCL_ROTATION_SHUFFLE8

// AVX2 where the CPU has it and QCCL_CPU_ISA does not cap the kernels at scalar.
inline bool useAvx2() {
  static const bool yes = [] {
    const char* e = std::getenv("QCCL_CPU_ISA");
    return !(e != nullptr && std::strcmp(e, "scalar") == 0) && __builtin_cpu_supports("avx2");
  }();
  return yes;
}
#endif

// The transform: walshHadamard4 or, where the CPU has AVX2, walshHadamard8 (the same bits).
inline void walshHadamard(float* a, size_t n, const float* src, const float* pre) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (useAvx2()) return walshHadamard8(a, n, src, pre);
#endif
  walshHadamard4(a, n, src, pre);
}

// In place, the inverse of the rotation for one block of n: x = (1/n) D H x (1/n a power of two,
// exact).
inline void rotateBackBlock4(float* x, size_t n, const float* d) {
  const F4 inv = F4{} + 1.0f / static_cast<float>(n);
  walshHadamard4(x, n, nullptr, nullptr);
  for (size_t i = 0; i < n; i += 4) store4(x + i, load4(x + i) * (load4(d + i) * inv));
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) inline void rotateBackBlock8(float* x, size_t n, const float* d) {
  const F8 inv = F8{} + 1.0f / static_cast<float>(n);
  walshHadamard8(x, n, nullptr, nullptr);
  for (size_t i = 0; i < n; i += 8) store8(x + i, load8(x + i) * (load8(d + i) * inv));
}
#endif

inline void rotateBackBlock(float* x, size_t n, const float* d) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (useAvx2()) return rotateBackBlock8(x, n, d);
#endif
  rotateBackBlock4(x, n, d);
}

// What a 1-bit codec loses of x (squared error), bucket by bucket: onebit sends the mean of a bucket's
// positive and of its negative elements, signscale each sign with the mean magnitude.
inline double oneBitLoss(const float* x, size_t count, bool twoMeans, size_t bucket = kDefaultBlock) {
  double loss = 0;
  for (size_t b = 0; b < count; b += bucket) {
    const size_t e = std::min(count, b + bucket);
    double pos = 0, neg = 0, mag = 0, sq = 0;
    size_t npos = 0, nneg = 0;
    for (size_t i = b; i < e; i++) {
      const double v = x[i];
      sq += v * v;
      mag += std::fabs(v);
      if (v > 0) pos += v, npos++;
      if (v < 0) neg += v, nneg++;
    }
    if (twoMeans)
      loss += sq - (npos ? pos * pos / static_cast<double>(npos) : 0.0) -
              (nneg ? neg * neg / static_cast<double>(nneg) : 0.0);
    else
      loss += sq - mag * mag / static_cast<double>(e - b);
  }
  return loss;
}

// In place over the whole blocks of n in x[0, count) (the rest is left as it is): x = H D x per block,
// or its inverse (1/n) D H x with back. `d`: signs(n).
inline void rotate(float* x, size_t count, size_t n, const float* d, bool back) {
  for (size_t b = 0; b + n <= count; b += n) {
    if (back)
      rotateBackBlock(x + b, n, d);
    else
      walshHadamard(x + b, n, nullptr, d);
  }
}

}  // namespace rotation
}  // namespace qccl

#undef QCCL_ROTATION_SHUFFLE4
