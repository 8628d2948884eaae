// AVX-512 casts (fp32 / fp16 / bf16). fp16 uses the F16C round-to-nearest-even conversion, which is
// IEEE-exact like math::floatToHalf; NaN is then replaced by the canonical 0x7e00. bf16 rounds with
// the same integer formula as math::floatToBf16 (the AVX512_BF16 instruction flushes denormals).
// The last n % 16 elements go through the scalar kernel, which is element-wise and identical.
#include "codec/avx512_common.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

namespace qccl {
namespace cpu {
namespace {

enum Cast { kF32 = 0, kF16 = 1, kB16 = 2 };

QCCL_TARGET_AVX512 inline __mmask16 notFinite(__m512 v) {
  return _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
}

// 16 halves for v, and their exact float values in *d.
template <int kCast>
QCCL_TARGET_AVX512 inline __m256i toHalf(__m512 v, __m512* d) {
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (kCast == kF16) {
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    h = _mm256_mask_blend_epi16(nan, h, _mm256_set1_epi16(0x7e00));
    *d = _mm512_cvtph_ps(h);
    return h;
  }
  __m512i x = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  h = _mm512_mask_blend_epi32(nan, h, _mm512_set1_epi32(0x7fc0));
  *d = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  return _mm512_cvtepi32_epi16(h);
}

template <int kCast>
QCCL_TARGET_AVX512 inline __m512 fromHalf(const uint8_t* p) {
  __m256i h = _mm256_loadu_si256((const __m256i*)p);
  if (kCast == kF16) {
    __m512 d = _mm512_cvtph_ps(h);
    __mmask16 nan = _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    if (nan == 0) return d;
    // The hardware quiets signalling NaNs; math::halfToFloat keeps the payload bits as they are.
    __m512i x = _mm512_cvtepu16_epi32(h);
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x8000)), 16);
    __m512i mant = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x3ff)), 13);
    __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, mant), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_blend_ps(nan, d, _mm512_castsi512_ps(bits));
  }
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <int kCast, bool kRes>
QCCL_TARGET_AVX512 bool encodeCastT(const float* in, float* res, size_t n, uint8_t* payload) {
  const size_t vecN = n / 16 * 16;
  __mmask16 bad = 0;
  for (size_t i = 0; i < vecN; i += 16) {
    __m512 v = _mm512_loadu_ps(in + i);
    if (kRes) v = _mm512_add_ps(v, _mm512_loadu_ps(res + i));
    if (kCast == kF32) {
      bad |= notFinite(v);
      _mm512_storeu_ps((float*)(payload + 4 * i), v);
      if (kRes) _mm512_storeu_ps(res + i, _mm512_setzero_ps());
      continue;
    }
    __m512 d;
    _mm256_storeu_si256((__m256i*)(payload + 2 * i), toHalf<kCast>(v, &d));
    __mmask16 b = notFinite(d);
    bad |= b;
    if (kRes) _mm512_storeu_ps(res + i, _mm512_maskz_sub_ps((__mmask16)~b, v, d));
  }
  bool tailBad = false;
  if (vecN < n) {
    uint8_t* p = payload + (kCast == kF32 ? 4 : 2) * vecN;
    tailBad = scalarKernels().castEncode[kCast](in + vecN, kRes ? res + vecN : nullptr, n - vecN, p);
  }
  return bad != 0 || tailBad;
}

template <int kCast>
QCCL_TARGET_AVX512 bool encodeCast(const float* in, float* res, size_t n, uint8_t* payload) {
  return res ? encodeCastT<kCast, true>(in, res, n, payload) : encodeCastT<kCast, false>(in, res, n, payload);
}

template <int kCast>
QCCL_TARGET_AVX512 void decodeCast(const uint8_t* payload, size_t n, float* out, bool add) {
  const size_t vecN = n / 16 * 16;
  const size_t width = kCast == kF32 ? 4 : 2;
  for (size_t i = 0; i < vecN; i += 16) {
    __m512 d = kCast == kF32 ? _mm512_loadu_ps((const float*)(payload + 4 * i)) : fromHalf<kCast>(payload + 2 * i);
    if (add) d = _mm512_add_ps(_mm512_loadu_ps(out + i), d);
    _mm512_storeu_ps(out + i, d);
  }
  if (vecN < n) scalarKernels().castDecode[kCast](payload + width * vecN, n - vecN, out + vecN, add);
}

}  // namespace

void setAvx512Casts(Kernels* k) {
  k->castEncode[kF32] = encodeCast<kF32>;
  k->castEncode[kF16] = encodeCast<kF16>;
  k->castEncode[kB16] = encodeCast<kB16>;
  k->castDecode[kF32] = decodeCast<kF32>;
  k->castDecode[kF16] = decodeCast<kF16>;
  k->castDecode[kB16] = decodeCast<kB16>;
}

}  // namespace cpu
}  // namespace qccl

#endif
