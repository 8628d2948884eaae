// Element and bucket math shared by the CPU and CUDA codecs (__host__ __device__).
//
// Everything that decides a bit on the wire is defined here once, as scalar code: the vectorized
// CPU path and the CUDA kernels must compute exactly these IEEE operations in exactly this order.
// Both are compiled without floating-point contraction (-ffp-contract=off, nvcc -fmad=false).
//
// Canonical bucket reduction order (sums in onebit and signscale):
//   element i of a bucket goes to slot p = i % 128 of 128 fp32 accumulators, added in increasing i,
//   all starting at +0.0f. Lane l (0..31) then holds (acc[4l] + acc[4l+1]) + (acc[4l+2] + acc[4l+3]),
//   which is what a CUDA lane that loads float4 number l of every 128-element row accumulates.
//   The 32 lanes are folded by halves: s[l] = s[l] + s[l + h] for h = 16, 8, 4, 2, 1; the sum is s[0].
//   (This is a warp xor-butterfly read at lane 0.) Missing elements of a partial bucket add nothing.
// Min and max do not depend on order; -0.0f is canonicalized to +0.0f by adding +0.0f.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "qccl/wire_format.hpp"

#if defined(__CUDACC__)
#define QCCL_HD __host__ __device__ __forceinline__
#else
#define QCCL_HD inline
#endif

namespace qccl {
namespace math {

constexpr int kReduceSlots = 128;
constexpr int kLanes = 32;
constexpr float kMaxMinClamp = 0x1p126f;  // |min|,|max| clamp of a maxmin bucket

QCCL_HD uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
QCCL_HD float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
QCCL_HD bool isFinite(float f) { return (floatBits(f) & 0x7f800000u) != 0x7f800000u; }
QCCL_HD float fmin2(float a, float b) { return b < a ? b : a; }  // inputs are finite here
QCCL_HD float fmax2(float a, float b) { return b > a ? b : a; }
QCCL_HD float quietNaN() { return bitsFloat(0x7fc00000u); }

// ---------------------------------------------------------------------------------------------
// fp16 / bf16, round to nearest even. NaN becomes the canonical quiet NaN (0x7e00 / 0x7fc0).
// ---------------------------------------------------------------------------------------------
QCCL_HD uint16_t floatToHalf(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return 0x7e00u;                        // NaN
  if (absx >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);    // >= 65536 (or Inf): Inf
  if (absx >= 0x38800000u) {                                     // normal half (>= 2^-14)
    uint32_t mant = absx + 0xfffu + ((absx >> 13) & 1u);         // round to nearest even at bit 13
    mant -= 0x38000000u;                                         // rebias exponent 127 -> 15
    if (mant >= 0x0f800000u) return (uint16_t)(sign | 0x7c00u);  // rounded up to Inf
    return (uint16_t)(sign | (mant >> 13));
  }
  if (absx < 0x33000000u) return (uint16_t)sign;  // < 2^-25 rounds to zero (ties to even: 2^-25 -> 0)
  // subnormal half: value = m * 2^-24
  uint32_t e = absx >> 23;  // 102..112
  uint32_t m = (absx & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e;  // 14..24
  uint32_t h = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) h += 1u;
  return (uint16_t)(sign | h);
}

QCCL_HD float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bitsFloat(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bitsFloat(sign);
    // subnormal: m * 2^-24, exact in fp32
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}

QCCL_HD uint16_t floatToBf16(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
QCCL_HD float bf16ToFloat(uint16_t b) { return bitsFloat((uint32_t)b << 16); }

// ---------------------------------------------------------------------------------------------
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// ---------------------------------------------------------------------------------------------
struct U32x4 {
  uint32_t v[4];
};

QCCL_HD void mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

QCCL_HD U32x4 philox4x32(U32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, ctr.v[0], &hi0, &lo0);
    mulhilo(0xCD9E8D57u, ctr.v[2], &hi1, &lo1);
    U32x4 next = {{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    ctr = next;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/// Uniform in [0, 1) from the top 24 bits of a word.
QCCL_HD float uniformFromBits(uint32_t w) { return (float)(w >> 8) * 0x1p-24f; }

/// The uniform used for element `i` (index within one encode call) of a stochastic encode.
QCCL_HD float stochasticUniform(uint64_t seed, uint64_t rngOffset, uint64_t i) {
  uint64_t block = i >> 2;
  U32x4 ctr = {{(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)rngOffset, (uint32_t)(rngOffset >> 32)}};
  U32x4 r = philox4x32(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
  return uniformFromBits(r.v[i & 3u]);
}

// ---------------------------------------------------------------------------------------------
// maxmin: k-bit levels between min and max.
// ---------------------------------------------------------------------------------------------
struct MaxMinParams {
  float mn, mx, step, inv;
  uint32_t levels;  // 2^bits - 1
};

/// From the bucket's finite min and max (already +0.0f canonicalized). When max - min overflows,
/// or the top level min + levels * step does (min 2.6e33, max FLT_MAX: the range is finite, the top
/// level is Inf), both are clamped to [-2^126, 2^126], so every decoded value and residual is finite.
/// Any other bucket, a constant one near FLT_MAX included, keeps its exact min and max.
QCCL_HD MaxMinParams maxminParams(float mn, float mx, int bits) {
  MaxMinParams p;
  p.levels = (1u << bits) - 1u;
  p.step = (mx - mn) / (float)p.levels;
  if (!isFinite(mx - mn) || !isFinite(mn + (float)p.levels * p.step)) {
    mn = fmin2(fmax2(mn, -kMaxMinClamp), kMaxMinClamp);
    mx = fmin2(fmax2(mx, -kMaxMinClamp), kMaxMinClamp);
    p.step = (mx - mn) / (float)p.levels;
  }
  p.mn = mn;
  p.mx = mx;
  float inv = p.step > 0.0f ? 1.0f / p.step : 0.0f;
  p.inv = isFinite(inv) ? inv : 3.40282347e38f;
  return p;
}

/// Step used by the decoder (recomputed from the wire's min and max exactly as the encoder did).
QCCL_HD float maxminStep(float mn, float mx, int bits) { return (mx - mn) / (float)((1u << bits) - 1u); }

/// Level for v; `u` is 0.5f for round-to-nearest or a uniform in [0,1) for stochastic rounding.
QCCL_HD uint32_t maxminLevel(float v, const MaxMinParams& p, float u) {
  float t = (v - p.mn) * p.inv;
  float q = floorf(t + u);
  q = fmax2(q, 0.0f);
  q = fmin2(q, (float)p.levels);
  return (uint32_t)q;
}

QCCL_HD float maxminValue(uint32_t q, float mn, float step) { return mn + (float)q * step; }

// ---------------------------------------------------------------------------------------------
// dyn8: Dettmers' dynamic tree quantization ("8-bit approximations for parallelism in deep
// learning", ICLR 2016). Code byte: bit 7 sign; the 7 magnitude bits hold e leading zeros, an
// indicator 1, then f = 6 - e fraction bits j: magnitude = 10^-e * (0.1 + 0.9 * (j + 1) / 2^f).
// Magnitude code 0 is exact zero. Codes are increasing in value; code 127 is 1.0 (= absmax).
// ---------------------------------------------------------------------------------------------
QCCL_HD float dyn8Magnitude(uint32_t code) {
  code &= 0x7fu;
  if (code == 0) return 0.0f;
#if defined(__CUDA_ARCH__)
  int f = 31 - __clz((int)code);  // indicator bit position
#else
  int f = 31 - __builtin_clz(code);
#endif
  int e = 6 - f;
  uint32_t j = code & ((1u << f) - 1u);
  const double p10[7] = {1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6};
  double frac = 0.1 + 0.9 * (double)(j + 1u) / (double)(1u << f);
  return (float)(p10[e] * frac);
}

/// Decision threshold between magnitude codes k and k+1 (k = 0..126): a > threshold picks k+1.
QCCL_HD float dyn8Threshold(uint32_t k) {
  return (float)(((double)dyn8Magnitude(k) + (double)dyn8Magnitude(k + 1u)) * 0.5);
}

/// Tables filled once from the functions above (host: static; device: shared or constant memory).
struct Dyn8Tables {
  float magnitude[128];
  float threshold[127];
};

inline void fillDyn8Tables(Dyn8Tables* t) {
  for (uint32_t k = 0; k < 128; ++k) t->magnitude[k] = dyn8Magnitude(k);
  for (uint32_t k = 0; k < 127; ++k) t->threshold[k] = dyn8Threshold(k);
}

/// Magnitude code for a in [0, 1]: the number of thresholds below a (binary search, 7 steps).
QCCL_HD uint32_t dyn8Code(float a, const float* threshold) {
  uint32_t lo = 0;  // invariant: answer in [lo, lo + 2^s]
  for (uint32_t s = 64; s >= 1; s >>= 1) {
    if (lo + s - 1u < 127u && a > threshold[lo + s - 1u]) lo += s;
  }
  return lo;
}

/// Encoded byte for v with the bucket's absmax > 0.
QCCL_HD uint8_t dyn8Encode(float v, float absmax, const float* threshold) {
  float a = fabsf(v) / absmax;
  uint32_t c = dyn8Code(a, threshold);
  if (c != 0 && v < 0.0f) c |= 0x80u;
  return (uint8_t)c;
}

QCCL_HD float dyn8Value(uint8_t code, float absmax, const float* magnitude) {
  float m = magnitude[code & 0x7fu] * absmax;
  return (code & 0x80u) ? -m : m;
}

// ---------------------------------------------------------------------------------------------
// Bucket layout.
// ---------------------------------------------------------------------------------------------
/// Bytes of per-bucket statistics on the wire.
QCCL_HD uint32_t metaBytes(CodecId c) {
  switch (c) {
    case CodecId::kOneBit:
    case CodecId::kMaxMin:
      return 8;
    case CodecId::kSignScale:
    case CodecId::kDyn8:
      return 4;
    default:
      return 0;
  }
}

/// Bytes of one bucket block holding m elements at `bits` per element (bucket codecs only).
QCCL_HD uint64_t bucketBlockBytes(CodecId c, int bits, uint64_t m) {
  return metaBytes(c) + ((m * (uint64_t)bits + 31u) / 32u) * 4u;
}

}  // namespace math
}  // namespace qccl
