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
    const float v = res ? addX86(in[e], res[e]) : in[e];  // NaN payload as on the CPU
    if constexpr (C == CodecId::kFp32) {
      word = math::floatBits(v);
      *bad = *bad || !math::isFinite(v);
      if (res) res[e] = 0.0f;
    } else {
      const uint16_t h = C == CodecId::kFp16 ? math::floatToHalf(v) : math::floatToBf16(v);
      const float d = C == CodecId::kFp16 ? math::halfToFloat(h) : math::bf16ToFloat(h);
      const bool nf = !math::isFinite(d);  // non-finite input, or a finite value that rounded to Inf
      *bad = *bad || nf;
      if (res) res[e] = nf ? 0.0f : v - d;
      word |= static_cast<uint32_t>(h) << (16 * k);
    }
  }
  return word;
}

/// Decodes payload word i into out (out = decoded, or out + decoded with ADD).
template <CodecId C, bool ADD>
QCCL_HD void decodeCastWord(uint32_t word, uint64_t n, uint64_t i, float* out) {
  constexpr uint64_t kPer = castPerWord<C>();
  QCCL_UNROLL
  for (uint64_t k = 0; k < kPer; ++k) {
    const uint64_t e = i * kPer + k;
    if (e >= n) break;
    float d;
    if constexpr (C == CodecId::kFp32) {
      d = math::bitsFloat(word);
    } else {
      const uint16_t h = static_cast<uint16_t>(word >> (16 * k));
      d = C == CodecId::kFp16 ? math::halfToFloat(h) : math::bf16ToFloat(h);
    }
    out[e] = ADD ? addX86(out[e], d) : d;
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
