// Portable scalar kernels: the reference every vectorized path must match byte for byte.
// Each function is a direct transcription of codec_math.hpp and the bucket rules in cpu_kernels.hpp.
#include <cstring>

#include "codec/cpu_kernels.hpp"

namespace qccl {
namespace cpu {
namespace {

using math::isFinite;

// The API allows float pointers at any byte offset, so element access goes through memcpy
// (a plain mov on x86; keeps UBSan's alignment check quiet).
inline float ld(const float* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline void st(float* p, float f) { std::memcpy(p, &f, 4); }
inline void storeU16(uint8_t* p, uint16_t u) { std::memcpy(p, &u, 2); }

// Stages v = in + residual for one bucket; returns false when any v is not finite.
bool stage(const float* in, const float* residual, uint32_t m, float* v) {
  bool finite = true;
  for (uint32_t i = 0; i < m; ++i) {
    v[i] = residual ? ld(in + i) + ld(residual + i) : ld(in + i);
    finite &= isFinite(v[i]);
  }
  return finite;
}

// Writes the canonical non-finite bucket: NaN statistics, zero words, residual reset.
bool nonFiniteBucket(uint32_t statBytes, uint32_t wordBytes, float* residual, uint32_t m, uint8_t* block) {
  for (uint32_t s = 0; s < statBytes; s += 4) storeF32(block + s, math::quietNaN());
  std::memset(block + statBytes, 0, wordBytes);
  if (residual)
    for (uint32_t i = 0; i < m; ++i) st(residual + i, 0.0f);
  return true;
}

uint32_t wordBytesFor(uint32_t m, int bits) { return (m * (uint32_t)bits + 31u) / 32u * 4u; }

// Writes sign bits (1 = v >= 0) for m elements.
void packSigns(const float* v, uint32_t m, uint8_t* words) {
  for (uint32_t w = 0; w * 32 < m; ++w) {
    uint32_t bitsWord = 0;
    for (uint32_t j = 0; j < 32 && w * 32 + j < m; ++j) bitsWord |= (uint32_t)(v[w * 32 + j] >= 0.0f) << j;
    storeU32(words + 4 * w, bitsWord);
  }
}

bool encodeOneBit(const BucketCtx& ctx, const float* in, float* residual, uint32_t m, uint64_t, uint8_t* block) {
  float* v = ctx.scratch;
  const uint32_t wb = wordBytesFor(m, 1);
  if (!stage(in, residual, m, v)) return nonFiniteBucket(8, wb, residual, m, block);
  float pos[math::kReduceSlots] = {}, neg[math::kReduceSlots] = {};
  uint32_t cntPos = 0;
  for (uint32_t i = 0; i < m; ++i) {
    if (v[i] >= 0.0f) {
      pos[i % math::kReduceSlots] += v[i];
      ++cntPos;
    } else {
      neg[i % math::kReduceSlots] += v[i];
    }
  }
  uint32_t cntNeg = m - cntPos;
  float p = cntPos ? foldSlots(pos) / (float)cntPos : 0.0f;
  float q = cntNeg ? foldSlots(neg) / (float)cntNeg : 0.0f;
  if (!isFinite(p) || !isFinite(q)) return nonFiniteBucket(8, wb, residual, m, block);
  storeF32(block, p);
  storeF32(block + 4, q);
  packSigns(v, m, block + 8);
  if (residual)
    for (uint32_t i = 0; i < m; ++i) st(residual + i, v[i] - (v[i] >= 0.0f ? p : q));
  return false;
}

void decodeOneBit(const BucketCtx&, const uint8_t* block, uint32_t m, float* out, bool add) {
  float p = loadF32(block), q = loadF32(block + 4);
  for (uint32_t i = 0; i < m; ++i) {
    float d = (loadU32(block + 8 + 4 * (i / 32)) >> (i % 32)) & 1u ? p : q;
    st(out + i, add ? ld(out + i) + d : d);
  }
}

bool encodeSignScale(const BucketCtx& ctx, const float* in, float* residual, uint32_t m, uint64_t, uint8_t* block) {
  float* v = ctx.scratch;
  const uint32_t wb = wordBytesFor(m, 1);
  if (!stage(in, residual, m, v)) return nonFiniteBucket(4, wb, residual, m, block);
  float acc[math::kReduceSlots] = {};
  for (uint32_t i = 0; i < m; ++i) acc[i % math::kReduceSlots] += fabsf(v[i]);
  float s = foldSlots(acc) / (float)m;
  if (!isFinite(s)) return nonFiniteBucket(4, wb, residual, m, block);
  storeF32(block, s);
  packSigns(v, m, block + 4);
  if (residual)
    for (uint32_t i = 0; i < m; ++i) st(residual + i, v[i] - (v[i] >= 0.0f ? s : -s));
  return false;
}

void decodeSignScale(const BucketCtx&, const uint8_t* block, uint32_t m, float* out, bool add) {
  float s = loadF32(block);
  for (uint32_t i = 0; i < m; ++i) {
    float d = (loadU32(block + 4 + 4 * (i / 32)) >> (i % 32)) & 1u ? s : -s;
    st(out + i, add ? ld(out + i) + d : d);
  }
}

// math::stochasticUniform, evaluating each Philox block once for its four consecutive elements.
class UniformStream {
 public:
  UniformStream(uint64_t seed, uint64_t offset) : seed_(seed), offset_(offset) {}
  float at(uint64_t i) {
    uint64_t block = i >> 2;
    if (block != block_) {
      math::U32x4 ctr = {{(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)offset_, (uint32_t)(offset_ >> 32)}};
      r_ = math::philox4x32(ctr, (uint32_t)seed_, (uint32_t)(seed_ >> 32));
      block_ = block;
    }
    return math::uniformFromBits(r_.v[i & 3u]);
  }

 private:
  uint64_t seed_, offset_;
  uint64_t block_ = ~0ull;
  math::U32x4 r_ = {};
};

bool encodeMaxMin(const BucketCtx& ctx, const float* in, float* residual, uint32_t m, uint64_t base, uint8_t* block) {
  float* v = ctx.scratch;
  const uint32_t wb = wordBytesFor(m, ctx.bits);
  if (!stage(in, residual, m, v)) return nonFiniteBucket(8, wb, residual, m, block);
  float mn = v[0], mx = v[0];
  for (uint32_t i = 1; i < m; ++i) {
    mn = math::fmin2(mn, v[i]);
    mx = math::fmax2(mx, v[i]);
  }
  math::MaxMinParams p = math::maxminParams(mn + 0.0f, mx + 0.0f, ctx.bits);
  storeF32(block, p.mn);
  storeF32(block + 4, p.mx);
  const uint32_t perWord = 32u / (uint32_t)ctx.bits;
  uint8_t* words = block + 8;
  std::memset(words, 0, wb);
  UniformStream rng(ctx.seed, ctx.rngOffset);
  for (uint32_t i = 0; i < m; ++i) {
    float u = ctx.stochastic ? rng.at(base + i) : 0.5f;
    uint32_t q = math::maxminLevel(v[i], p, u);
    uint8_t* w = words + 4 * (i / perWord);
    storeU32(w, loadU32(w) | q << ((i % perWord) * (uint32_t)ctx.bits));
    if (residual) st(residual + i, v[i] - math::maxminValue(q, p.mn, p.step));
  }
  return false;
}

void decodeMaxMin(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  float mn = loadF32(block), mx = loadF32(block + 4);
  float step = math::maxminStep(mn, mx, ctx.bits);
  const uint32_t perWord = 32u / (uint32_t)ctx.bits, mask = (1u << ctx.bits) - 1u;
  for (uint32_t i = 0; i < m; ++i) {
    uint32_t q = (loadU32(block + 8 + 4 * (i / perWord)) >> ((i % perWord) * (uint32_t)ctx.bits)) & mask;
    float d = math::maxminValue(q, mn, step);
    st(out + i, add ? ld(out + i) + d : d);
  }
}

bool encodeDyn8(const BucketCtx& ctx, const float* in, float* residual, uint32_t m, uint64_t, uint8_t* block) {
  float* v = ctx.scratch;
  const uint32_t wb = wordBytesFor(m, 8);
  if (!stage(in, residual, m, v)) return nonFiniteBucket(4, wb, residual, m, block);
  float absmax = 0.0f;
  for (uint32_t i = 0; i < m; ++i) absmax = math::fmax2(absmax, fabsf(v[i]));
  storeF32(block, absmax);
  uint8_t* codes = block + 4;
  std::memset(codes, 0, wb);
  if (absmax == 0.0f) {
    if (residual)
      for (uint32_t i = 0; i < m; ++i) st(residual + i, v[i]);  // v is +-0 here; v - 0 keeps it
    return false;
  }
  for (uint32_t i = 0; i < m; ++i) {
    uint8_t c = math::dyn8Encode(v[i], absmax, ctx.dyn8->threshold);
    codes[i] = c;
    if (residual) st(residual + i, v[i] - math::dyn8Value(c, absmax, ctx.dyn8->magnitude));
  }
  return false;
}

void decodeDyn8(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  float absmax = loadF32(block);
  for (uint32_t i = 0; i < m; ++i) {
    float d = math::dyn8Value(block[4 + i], absmax, ctx.dyn8->magnitude);
    st(out + i, add ? ld(out + i) + d : d);
  }
}

bool encodeFp32(const float* in, float* residual, size_t n, uint8_t* payload) {
  bool nonFinite = false;
  for (size_t i = 0; i < n; ++i) {
    float v = residual ? ld(in + i) + ld(residual + i) : ld(in + i);
    nonFinite |= !isFinite(v);
    storeF32(payload + 4 * i, v);
    if (residual) st(residual + i, 0.0f);
  }
  return nonFinite;
}

void decodeFp32(const uint8_t* payload, size_t n, float* out, bool add) {
  for (size_t i = 0; i < n; ++i) {
    float d = loadF32(payload + 4 * i);
    st(out + i, add ? ld(out + i) + d : d);
  }
}

template <uint16_t (*Enc)(float), float (*Dec)(uint16_t)>
bool encodeHalfLike(const float* in, float* residual, size_t n, uint8_t* payload) {
  bool nonFinite = false;
  for (size_t i = 0; i < n; ++i) {
    float v = residual ? ld(in + i) + ld(residual + i) : ld(in + i);
    uint16_t h = Enc(v);
    float d = Dec(h);
    storeU16(payload + 2 * i, h);
    bool bad = !isFinite(d);  // non-finite input, or a finite value that rounded to Inf
    nonFinite |= bad;
    if (residual) st(residual + i, bad ? 0.0f : v - d);
  }
  if (n % 2) storeU16(payload + 2 * n, 0);
  return nonFinite;
}

template <float (*Dec)(uint16_t)>
void decodeHalfLike(const uint8_t* payload, size_t n, float* out, bool add) {
  for (size_t i = 0; i < n; ++i) {
    float d = Dec(loadU16(payload + 2 * i));
    st(out + i, add ? ld(out + i) + d : d);
  }
}

uint16_t toHalf(float f) { return math::floatToHalf(f); }
float fromHalf(uint16_t h) { return math::halfToFloat(h); }
uint16_t toBf16(float f) { return math::floatToBf16(f); }
float fromBf16(uint16_t h) { return math::bf16ToFloat(h); }

Kernels makeScalar() {
  Kernels k = {};
  k.isa = "scalar";
  k.castEncode[0] = encodeFp32;
  k.castEncode[1] = encodeHalfLike<toHalf, fromHalf>;
  k.castEncode[2] = encodeHalfLike<toBf16, fromBf16>;
  k.castDecode[0] = decodeFp32;
  k.castDecode[1] = decodeHalfLike<fromHalf>;
  k.castDecode[2] = decodeHalfLike<fromBf16>;
  k.bucketEncode[(int)CodecId::kOneBit] = encodeOneBit;
  k.bucketDecode[(int)CodecId::kOneBit] = decodeOneBit;
  k.bucketEncode[(int)CodecId::kSignScale] = encodeSignScale;
  k.bucketDecode[(int)CodecId::kSignScale] = decodeSignScale;
  k.bucketEncode[(int)CodecId::kMaxMin] = encodeMaxMin;
  k.bucketDecode[(int)CodecId::kMaxMin] = decodeMaxMin;
  k.bucketEncode[(int)CodecId::kDyn8] = encodeDyn8;
  k.bucketDecode[(int)CodecId::kDyn8] = decodeDyn8;
  return k;
}

}  // namespace

const Kernels& scalarKernels() {
  static const Kernels k = makeScalar();
  return k;
}

}  // namespace cpu
}  // namespace qccl
