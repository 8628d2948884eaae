// The casts (fp32, fp16, bf16) per payload word, shared by the cast kernels and the host tests.
// Mirrors encodeFp32 / encodeHalfLike / decode*HalfLike of src/codec/kernels_scalar.cc.
#pragma once

#include "cuda/bucket_common.cuh"

namespace qccl {
namespace cuda {
namespace detail {

/// Elements per 32-bit payload word: fp32 1, fp16/bf16 2 (an odd tail is padded with a zero half).
template <CodecId C>
constexpr uint64_t castPerWord() {
  return C == CodecId::kFp32 ? 1 : 2;
}

/// One element of a cast encode: input x with residual r (when hasRes). Returns what is sent (the
/// fp32 bits, or the fp16/bf16 bits in the low half), leaves the new residual in *rNew and sets
/// *bad when the value is (or, for fp16/bf16, rounds to) a non-finite one.
template <CodecId C>
QCCL_HD uint32_t encodeCastElem(float x, float r, bool hasRes, float* rNew, bool* bad) {
  const float v = hasRes ? addX86(x, r) : x;  // NaN payload as on the CPU
  if constexpr (C == CodecId::kFp32) {
    *bad = *bad || !math::isFinite(v);
    *rNew = 0.0f;
    return math::floatBits(v);
  } else {
    const uint16_t h = C == CodecId::kFp16 ? math::floatToHalf(v) : math::floatToBf16(v);
    const float d = C == CodecId::kFp16 ? math::halfToFloat(h) : math::bf16ToFloat(h);
    const bool nf = !math::isFinite(d);  // non-finite input, or a finite value that rounded to Inf
    *bad = *bad || nf;
    *rNew = nf ? 0.0f : v - d;
    return h;
  }
}

/// Payload word i of n elements; updates the residual of its elements and sets *bad when a value
/// is (or, for fp16/bf16, rounds to) a non-finite one.
template <CodecId C>
QCCL_HD uint32_t encodeCastWord(const float* in, float* res, uint64_t n, uint64_t i, bool* bad) {
  constexpr uint64_t kPer = castPerWord<C>();
  uint32_t word = 0;
  QCCL_UNROLL
  for (uint64_t k = 0; k < kPer; ++k) {
    const uint64_t e = i * kPer + k;
    if (e >= n) break;
    float rNew;
    const uint32_t bits = encodeCastElem<C>(in[e], res ? res[e] : 0.0f, res != nullptr, &rNew, bad);
    if (res) res[e] = rNew;
    word |= kPer == 1 ? bits : bits << (16 * k);
  }
  return word;
}

/// Elements per group of the vectorized cast kernels: one 16-byte load of the input (and of the
/// residual or the output), 4 payload words for fp32, 2 for fp16/bf16.
constexpr uint64_t kCastGroup = 4;

/// The payload words [*w0, *w1) that hold the group of elements starting at e0 (of n): the words a
/// group that cannot take the vector path encodes or decodes one by one.
template <CodecId C>
QCCL_HD void castGroupWords(uint64_t e0, uint64_t n, uint64_t* w0, uint64_t* w1) {
  constexpr uint64_t kPer = castPerWord<C>();
  const uint64_t words = (n + kPer - 1) / kPer;
  *w0 = e0 / kPer;
  *w1 = *w0 + kCastGroup / kPer < words ? *w0 + kCastGroup / kPer : words;
}

/// A whole group of 4 elements, from values already loaded: the payload words it fills
/// (kCastGroup / castPerWord), the new residuals. The same bits as encodeCastWord on each word.
template <CodecId C>
QCCL_HD void encodeCastGroup(const float x[4], const float r[4], bool hasRes, float rNew[4], uint32_t* words,
                             bool* bad) {
  uint32_t b[4];
  QCCL_UNROLL
  for (int k = 0; k < 4; ++k) b[k] = encodeCastElem<C>(x[k], r[k], hasRes, &rNew[k], bad);
  if constexpr (C == CodecId::kFp32) {
    QCCL_UNROLL
    for (int k = 0; k < 4; ++k) words[k] = b[k];
  } else {
    words[0] = b[0] | (b[1] << 16);
    words[1] = b[2] | (b[3] << 16);
  }
}

/// The value of one element from what encodeCastElem sent.
template <CodecId C>
QCCL_HD float decodeCastElem(uint32_t bits) {
  if constexpr (C == CodecId::kFp32) {
    return math::bitsFloat(bits);
  } else {
    const uint16_t h = static_cast<uint16_t>(bits);
    return C == CodecId::kFp16 ? math::halfToFloat(h) : math::bf16ToFloat(h);
  }
}

/// Decodes payload word i into out (out = decoded, or out + decoded with ADD).
template <CodecId C, bool ADD>
QCCL_HD void decodeCastWord(uint32_t word, uint64_t n, uint64_t i, float* out) {
  constexpr uint64_t kPer = castPerWord<C>();
  QCCL_UNROLL
  for (uint64_t k = 0; k < kPer; ++k) {
    const uint64_t e = i * kPer + k;
    if (e >= n) break;
    const float d = decodeCastElem<C>(kPer == 1 ? word : word >> (16 * k));
    out[e] = ADD ? addX86(out[e], d) : d;
  }
}

/// A whole group of 4 elements from its payload words: o[k] = decoded, or o[k] + decoded with ADD
/// (o holds the output's old values then). The same bits as decodeCastWord on each word.
template <CodecId C, bool ADD>
QCCL_HD void decodeCastGroup(const uint32_t* words, float o[4]) {
  QCCL_UNROLL
  for (int k = 0; k < 4; ++k) {
    const uint32_t bits = C == CodecId::kFp32 ? words[k] : words[k / 2] >> (16 * (k % 2));
    const float d = decodeCastElem<C>(bits);
    o[k] = ADD ? addX86(o[k], d) : d;
  }
}

/// The wire header of an encode call, without the non-finite flag (known only after the kernel).
inline WireHeader makeHeader(const CodecConfig& r, uint64_t n, const EncodeParams& params, bool residual) {
  WireHeader h;
  h.magic = kWireMagic;
  h.version = kWireVersion;
  h.codec = static_cast<uint8_t>(r.codec);
  h.bits = static_cast<uint8_t>(r.bits);
  h.flags = static_cast<uint8_t>((r.stochastic ? kFlagStochastic : 0) | (residual ? kFlagErrorFeedback : 0));
  h.bucket = r.bucket;
  h.seq = params.seq;
  h.count = n;
  h.payloadBytes = encodedBytes(r, n) - kWireHeaderBytes;
  return h;
}

}  // namespace detail
}  // namespace cuda
}  // namespace qccl
