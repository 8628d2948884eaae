// Shared pieces of the bucket kernels: argument blocks, lane geometry, loads and stores.
//
// Everything here is __host__ __device__ and written against a warp policy W (warp.cuh), so the
// exact per-lane code of the kernels can also run on the host under a warp emulator in the tests.
//
// Geometry (one warp per bucket): a bucket is walked in rows of 128 elements; lane l owns elements
// 4l..4l+3 of every row (one float4). Element i of the bucket therefore lands in lane (i % 128) / 4,
// slot (i % 128) % 4 -- exactly the canonical reduction slots of codec_math.hpp.
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "codec/codec_math.hpp"
#include "qccl/codec.hpp"

// `#pragma unroll` for the device pass only (the host pass of the same code would warn about it).
#if defined(__CUDA_ARCH__)
#define QCCL_UNROLL _Pragma("unroll")
#else
#define QCCL_UNROLL
#endif

namespace qccl {
namespace cuda {
namespace detail {

constexpr uint32_t kRow = 128;  // elements per row: 32 lanes x float4
constexpr int kThreadsPerBlock = 256;
constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;
// Bucket kernels promise ptxas 4 resident blocks per SM, i.e. a budget of 64 registers per thread.
// Without the hint ptxas for sm_100 picks a tighter budget for the dyn8 encoder and spills.
constexpr int kMinBlocksPerSm = 4;

/// Encode kernel arguments (one launch covers every bucket of one encode call).
struct EncodeArgs {
  const float* in;
  float* res;        // null: no error feedback
  uint8_t* payload;  // first byte after the wire header, 4-byte aligned
  uint32_t* flag;    // set non-zero when any bucket is non-finite
  uint64_t n;        // elements in the call
  uint64_t numBuckets;
  uint64_t blockBytes;  // bytes of one full bucket block
  uint64_t seed;
  uint64_t rngOffset;
  uint32_t bucket;
  bool vec;  // in and res are 16-byte aligned: full lanes use 128-bit accesses
  bool stochastic;
};

/// Decode kernel arguments.
struct DecodeArgs {
  const uint8_t* payload;  // 4-byte aligned
  float* out;
  uint64_t n;
  uint64_t numBuckets;
  uint64_t blockBytes;
  uint32_t bucket;
  bool vec;  // out is 16-byte aligned
};

/// Host-computed dyn8 tables, passed by value to the dyn8 kernels only (identical to the CPU's
/// tables because both come from math::fillDyn8Tables on the host); the other kernels get an empty
/// struct.
struct NoTables {};
template <CodecId C>
using TablesFor = typename std::conditional<C == CodecId::kDyn8, math::Dyn8Tables, NoTables>::type;

inline bool isAligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

/// Encode arguments for a resolved bucket-codec config (host side; shared by the launcher and the
/// warp-emulation tests so both run the kernels on identical arguments).
inline EncodeArgs makeEncodeArgs(const CodecConfig& r, const float* in, float* res, uint64_t n, uint8_t* payload,
                                 uint64_t rngOffset, uint32_t* flag) {
  EncodeArgs a = {};
  a.in = in;
  a.res = res;
  a.payload = payload;
  a.flag = flag;
  a.n = n;
  a.bucket = r.bucket;
  a.numBuckets = (n + r.bucket - 1) / r.bucket;
  a.blockBytes = math::bucketBlockBytes(r.codec, r.bits, r.bucket);
  a.seed = r.seed;
  a.rngOffset = rngOffset;
  a.stochastic = r.stochastic;
  a.vec = isAligned(in, 16) && (res == nullptr || isAligned(res, 16));
  return a;
}

/// Decode arguments for a validated bucket-codec config.
inline DecodeArgs makeDecodeArgs(const CodecConfig& cfg, const uint8_t* payload, float* out, uint64_t n) {
  DecodeArgs a = {};
  a.payload = payload;
  a.out = out;
  a.n = n;
  a.bucket = cfg.bucket;
  a.numBuckets = (n + cfg.bucket - 1) / cfg.bucket;
  a.blockBytes = math::bucketBlockBytes(cfg.codec, cfg.bits, cfg.bucket);
  a.vec = isAligned(out, 16);
  return a;
}

QCCL_HD bool isNaN(float f) { return (math::floatBits(f) & 0x7fffffffu) > 0x7f800000u; }

/// NaN payload of r = a (op) b as x86 SSE/AVX computes it, the CPU codec's platform: the first NaN
/// operand, quieted, else the default NaN 0xffc00000. GPUs return 0x7fffffff for every NaN result,
/// so outputs that may be NaN go through this to stay bit-identical with the CPU (a no-op on x86).
QCCL_HD float propagateNaN(float r, float a, float b) {
  if (!isNaN(r)) return r;
  if (isNaN(a)) return math::bitsFloat(math::floatBits(a) | 0x00400000u);
  if (isNaN(b)) return math::bitsFloat(math::floatBits(b) | 0x00400000u);
  return math::bitsFloat(0xffc00000u);
}

/// x86-exact a + b (see propagateNaN).
QCCL_HD float addX86(float a, float b) { return propagateNaN(a + b, a, b); }

/// Elements of the row starting at bucket offset e0 that this lane owns (0..4).
QCCL_HD uint32_t laneCount(uint32_t m, uint32_t e0) { return e0 < m ? (m - e0 < 4u ? m - e0 : 4u) : 0u; }

/// v[k] = p[g + k] for k < cnt (0 beyond); one 128-bit load when the lane is full and aligned.
QCCL_HD void load4(const float* p, uint64_t g, uint32_t cnt, bool vec, float v[4]) {
  if (cnt == 4 && vec) {
#if defined(__CUDA_ARCH__)
    const float4 x = *reinterpret_cast<const float4*>(p + g);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
#else
    memcpy(v, p + g, 16);
#endif
    return;
  }
  QCCL_UNROLL
  for (uint32_t k = 0; k < 4; ++k) v[k] = k < cnt ? p[g + k] : 0.0f;
}

/// p[g + k] = v[k] for k < cnt; one 128-bit store when the lane is full and aligned.
QCCL_HD void store4(float* p, uint64_t g, uint32_t cnt, bool vec, const float v[4]) {
  if (cnt == 4 && vec) {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<float4*>(p + g) = make_float4(v[0], v[1], v[2], v[3]);
#else
    memcpy(p + g, v, 16);
#endif
    return;
  }
  QCCL_UNROLL
  for (uint32_t k = 0; k < 4; ++k)
    if (k < cnt) p[g + k] = v[k];
}

/// v = in + residual (or in unchanged without error feedback), as the CPU stages it.
QCCL_HD void loadV(const EncodeArgs& a, uint64_t g, uint32_t cnt, float v[4]) {
  load4(a.in, g, cnt, a.vec, v);
  if (a.res) {
    float r[4];
    load4(a.res, g, cnt, a.vec, r);
    QCCL_UNROLL
    for (int k = 0; k < 4; ++k) v[k] = v[k] + r[k];
  }
}

QCCL_HD uint32_t loadWord(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t u;
  memcpy(&u, p, 4);
  return u;
#endif
}

QCCL_HD void storeWord(uint8_t* p, uint32_t u) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = u;
#else
  memcpy(p, &u, 4);
#endif
}

QCCL_HD float loadFloat(const uint8_t* p) { return math::bitsFloat(loadWord(p)); }
QCCL_HD void storeFloat(uint8_t* p, float f) { storeWord(p, math::floatBits(f)); }

/// Moves bit m of an 8-bit value to bit 4m (m = 0..7).
QCCL_HD uint32_t spreadNibbles(uint32_t x) {
  x &= 0xffu;
  x = (x | (x << 12)) & 0x000f000fu;
  x = (x | (x << 6)) & 0x03030303u;
  x = (x | (x << 3)) & 0x11111111u;
  return x;
}

/// Sign word `w` (0..3) of a row from the four ballots of the row: ballot k holds, in bit l, the
/// bit of element 4l + k, and word w must hold element 32w + j in bit j = 4(l - 8w) + k.
QCCL_HD uint32_t signWord(const uint32_t b[4], uint32_t w) {
  const uint32_t s = 8u * w;
  return spreadNibbles(b[0] >> s) | (spreadNibbles(b[1] >> s) << 1) | (spreadNibbles(b[2] >> s) << 2) |
         (spreadNibbles(b[3] >> s) << 3);
}

/// Warp sum in the canonical order: lane value (a0 + a1) + (a2 + a3), then s[l] = s[l] + s[l ^ h]
/// for h = 16..1 (at lane 0 this is s[0] + s[h]); lane 0's result is broadcast.
template <class W>
QCCL_HD float canonicalSum(const W& w, const float acc[4]) {
  float s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  QCCL_UNROLL
  for (int h = 16; h >= 1; h >>= 1) s = s + w.shflXor(s, h);
  return w.shflIdx(s, 0);
}

template <class W>
QCCL_HD uint32_t warpSumU32(const W& w, uint32_t x) {
  QCCL_UNROLL
  for (int h = 16; h >= 1; h >>= 1) x += w.shflXorU32(x, h);
  return x;
}

}  // namespace detail
}  // namespace cuda
}  // namespace qccl
