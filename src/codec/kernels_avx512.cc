// AVX-512 kernels (F + BW + VL, F16C). Each function carries its own target attribute, so this
// file needs no special compile flags and the dispatcher only calls it on CPUs that have the ISA.
//
// Byte-for-byte equal to the scalar reference: the vector code performs the same IEEE operations
// per element, accumulates sums into the canonical 128 slots (16 lanes x 8 registers), and uses
// no FMA (contraction is off project-wide). Buckets whose size is not a multiple of 32 and buckets
// that turn out non-finite are handed to the scalar kernel: they are rare (one partial bucket per
// call). Stochastic maxmin runs Philox on 16 counters at once.
#include "codec/avx512_common.hpp"

#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

namespace qccl {
namespace cpu {
namespace {

constexpr int kSlotRegs = math::kReduceSlots / 16;

bool scalarEncode(CodecId c, const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                  uint8_t* block) {
  return scalarKernels().bucketEncode[(int)c](ctx, in, res, m, base, block);
}
void scalarDecode(CodecId c, const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  scalarKernels().bucketDecode[(int)c](ctx, block, m, out, add);
}

template <bool kRes>
QCCL_TARGET_AVX512 inline __m512 stageV(const float* in, const float* res, size_t i) {
  __m512 g = _mm512_loadu_ps(in + i);
  if (kRes) g = _mm512_add_ps(g, _mm512_loadu_ps(res + i));
  return g;
}

// Lanes holding NaN or +-Inf.
QCCL_TARGET_AVX512 inline __mmask16 notFinite(__m512 v) {
  return _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
}

QCCL_TARGET_AVX512 inline __m512 addOut(__m512 d, const float* out, bool add) {
  return add ? _mm512_add_ps(_mm512_loadu_ps(out), d) : d;
}

// ---------------------------------------------------------------------------------------------
// onebit and signscale: sign bits from the >= 0 mask, sums in the canonical slots.
// ---------------------------------------------------------------------------------------------
struct SignStats {
  float a[math::kReduceSlots], b[math::kReduceSlots];  // onebit: sums of v >= 0 / v < 0; signscale: a = sum |v|
  uint32_t cntPos = 0;
  __mmask16 bad = 0;
};

// v = in + res (kRes), in + g res (kRes and kGain: error control, g res rounded first as
// encodeWith's generic error control rounds it), or in.
template <bool kRes, bool kGain>
QCCL_TARGET_AVX512 inline __m512 stageVG(const float* in, const float* res, size_t i, __m512 g) {
  __m512 x = _mm512_loadu_ps(in + i);
  if (kRes) {
    const __m512 r = _mm512_loadu_ps(res + i);
    x = _mm512_add_ps(x, kGain ? _mm512_mul_ps(g, r) : r);
  }
  return x;
}

// Pass over memory: stage v, write the sign words, accumulate. m is a multiple of 32. The
// accumulators are locals so that stores through the float pointers cannot alias them.
template <bool kRes, bool kOneBit, bool kGain = false>
QCCL_TARGET_AVX512 void signPass(const float* in, const float* res, uint32_t m, uint8_t* words, SignStats* st,
                                 __m512 gain = _mm512_set1_ps(1.0f)) {
  __m512 a[kSlotRegs], b[kSlotRegs];
  for (int j = 0; j < kSlotRegs; ++j) a[j] = b[j] = _mm512_setzero_ps();
  const __m512 zero = _mm512_setzero_ps();
  uint32_t cnt = 0;
  __mmask16 bad = 0;
  // Full rows first, with a fixed trip count, so the accumulators stay in registers; then the
  // 32-element groups of a last partial row.
  const uint32_t full = m - m % math::kReduceSlots;
  for (uint32_t row = 0; row < m; row += math::kReduceSlots) {
    const int groups = row < full ? kSlotRegs : static_cast<int>((m - row) / 16);
#pragma GCC unroll 4
    for (int j = 0; j < kSlotRegs; j += 2) {
      if (row >= full && j >= groups) break;
      uint32_t i = row + 16 * j;
      __m512 v0 = stageVG<kRes, kGain>(in, res, i, gain), v1 = stageVG<kRes, kGain>(in, res, i + 16, gain);
      bad |= notFinite(v0) | notFinite(v1);
      __mmask16 g0 = _mm512_cmp_ps_mask(v0, zero, _CMP_GE_OQ), g1 = _mm512_cmp_ps_mask(v1, zero, _CMP_GE_OQ);
      storeU32(words + i / 8, (uint32_t)g0 | (uint32_t)g1 << 16);
      if (kOneBit) {
        a[j] = _mm512_mask_add_ps(a[j], g0, a[j], v0);
        b[j] = _mm512_mask_add_ps(b[j], (__mmask16)~g0, b[j], v0);
        a[j + 1] = _mm512_mask_add_ps(a[j + 1], g1, a[j + 1], v1);
        b[j + 1] = _mm512_mask_add_ps(b[j + 1], (__mmask16)~g1, b[j + 1], v1);
        cnt += (uint32_t)__builtin_popcount((uint32_t)g0 | (uint32_t)g1 << 16);
      } else {
        a[j] = _mm512_add_ps(a[j], _mm512_abs_ps(v0));
        a[j + 1] = _mm512_add_ps(a[j + 1], _mm512_abs_ps(v1));
      }
    }
  }
  for (int j = 0; j < kSlotRegs; ++j) {
    _mm512_storeu_ps(st->a + 16 * j, a[j]);
    _mm512_storeu_ps(st->b + 16 * j, b[j]);
  }
  st->cntPos = cnt;
  st->bad = bad;
}

// residual = v - (v >= 0 ? hi : lo), with v = in + res recomputed from the bucket, which is still
// in L1. (Staging v in a scratch buffer instead made encode speed depend on the scratch buffer's
// address: stores to it alias the loads of in and res modulo 4 KiB, 4-12 GB/s from run to run.)
QCCL_TARGET_AVX512 void signResidual(const float* in, uint32_t m, float hi, float lo, float* res) {
  const __m512 h = _mm512_set1_ps(hi), l = _mm512_set1_ps(lo), zero = _mm512_setzero_ps();
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 x = stageV<true>(in, res, i);
    __mmask16 ge = _mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ);
    _mm512_storeu_ps(res + i, _mm512_sub_ps(x, _mm512_mask_blend_ps(ge, l, h)));
  }
}

// The bucket's scales from a finished pass (onebit: the means of the v >= 0 and v < 0 values;
// signscale: mean |v| and its negative), written to the block's header. False, with nothing
// written, when the bucket held a non-finite value or a scale is not finite: the scalar kernel
// then encodes it.
template <bool kOneBit>
QCCL_TARGET_AVX512 inline bool signScales(const SignStats& st, uint32_t m, uint8_t* block, float* hi, float* lo) {
  if (st.bad) return false;
  if (kOneBit) {
    const uint32_t cntNeg = m - st.cntPos;
    *hi = st.cntPos ? foldSlots(st.a) / (float)st.cntPos : 0.0f;
    *lo = cntNeg ? foldSlots(st.b) / (float)cntNeg : 0.0f;
  } else {
    *hi = foldSlots(st.a) / (float)m;
    *lo = -*hi;
  }
  if (!math::isFinite(*hi) || !math::isFinite(*lo)) return false;
  storeF32(block, *hi);
  if (kOneBit) storeF32(block + 4, *lo);
  return true;
}

template <bool kRes, bool kOneBit>
QCCL_TARGET_AVX512 bool encodeSignT(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                    uint8_t* block) {
  const CodecId c = kOneBit ? CodecId::kOneBit : CodecId::kSignScale;
  if (m % 32) return scalarEncode(c, ctx, in, res, m, base, block);
  const uint32_t meta = kOneBit ? 8 : 4;
  SignStats st;
  signPass<kRes, kOneBit>(in, res, m, block + meta, &st);
  float hi, lo;
  if (!signScales<kOneBit>(st, m, block, &hi, &lo)) return scalarEncode(c, ctx, in, res, m, base, block);
  if (kRes) signResidual(in, m, hi, lo, res);
  return false;
}

// Error control (BucketCtx::gain = g) in the kernel, with the bits and residuals of encodeWith's
// generic error control: the sums and bits from v = in + g r, then res = (v - decoded(v)) + (r - g r)
// with v recomputed from the bucket, which is still in L1, each float rounded as the generic path
// rounds it. Against the generic path (two more passes over an L1 buffer per bucket) 0.6x the time
// on 25.6M elements on the 2-vCPU AVX-512 VM (10-11 against 17-20 ms). Staging v in ctx.scratch
// first, as the AVX2 kernel does, took 17-26 ms there (see signResidual on staging), and
// prefetching the next bucket, as the AVX2 kernels do, changed nothing measurable (bench/RESULTS.md,
// "AVX-512: error control and the multi-source decode"). A bucket the vector path does not take
// goes the generic way.
template <bool kOneBit>
QCCL_TARGET_AVX512 bool encodeSignGain(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                       uint8_t* block) {
  const CodecId c = kOneBit ? CodecId::kOneBit : CodecId::kSignScale;
  const __m512 g = _mm512_set1_ps(ctx.gain);
  if (m % 32 == 0) {
    SignStats st;
    signPass<true, kOneBit, true>(in, res, m, block + (kOneBit ? 8 : 4), &st, g);
    float hi, lo;
    if (signScales<kOneBit>(st, m, block, &hi, &lo)) {
      const __m512 h = _mm512_set1_ps(hi), l = _mm512_set1_ps(lo), zero = _mm512_setzero_ps();
      for (uint32_t i = 0; i < m; i += 16) {
        const __m512 r = _mm512_loadu_ps(res + i), x = _mm512_add_ps(_mm512_loadu_ps(in + i), _mm512_mul_ps(g, r));
        const __m512 left = _mm512_sub_ps(x, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ), l, h));
        _mm512_storeu_ps(res + i, _mm512_add_ps(left, _mm512_sub_ps(r, _mm512_mul_ps(g, r))));
      }
      return false;
    }
  }
  thread_local std::vector<float> fed;
  if (fed.size() < m) fed.resize(m);
  return encodeHeldBack(res, m, ctx.gain, fed.data(),
                        [&](float* f) { return scalarEncode(c, ctx, in, f, m, base, block); });
}

template <bool kOneBit>
QCCL_TARGET_AVX512 bool encodeSign(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                   uint8_t* block) {
  if (res == nullptr) return encodeSignT<false, kOneBit>(ctx, in, res, m, base, block);
  if (ctx.gain != 1.0f) return encodeSignGain<kOneBit>(ctx, in, res, m, base, block);
  return encodeSignT<true, kOneBit>(ctx, in, res, m, base, block);
}

template <bool kOneBit>
QCCL_TARGET_AVX512 void decodeSign(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  const CodecId c = kOneBit ? CodecId::kOneBit : CodecId::kSignScale;
  if (m % 16) return scalarDecode(c, ctx, block, m, out, add);
  float hi = loadF32(block), lo = kOneBit ? loadF32(block + 4) : -hi;
  const uint8_t* words = block + (kOneBit ? 8 : 4);
  const __m512 h = _mm512_set1_ps(hi), l = _mm512_set1_ps(lo);
  for (uint32_t i = 0; i < m; i += 16) {
    __mmask16 bits = loadU16(words + i / 8);
    _mm512_storeu_ps(out + i, addOut(_mm512_mask_blend_ps(bits, l, h), out + i, add));
  }
}

// The sum of k sources' decodes of one bucket (BucketDecodeSumFn): the running sum stays in a
// register across the sources, so out is loaded and stored once per vector instead of once per
// source. The additions and their order are decodeSign's, source after source.
template <bool kOneBit>
QCCL_TARGET_AVX512 void decodeSignSum(const BucketCtx& ctx, const uint8_t* const* blocks, uint32_t k, uint32_t m,
                                      float* out, bool add) {
  if (m % 16 || k > kMaxSumSources) {
    for (uint32_t j = 0; j < k; ++j) decodeSign<kOneBit>(ctx, blocks[j], m, out, add || j > 0);
    return;
  }
  const uint32_t meta = kOneBit ? 8 : 4;
  __m512 h[kMaxSumSources], l[kMaxSumSources];
  for (uint32_t j = 0; j < k; ++j) {
    const float hi = loadF32(blocks[j]), lo = kOneBit ? loadF32(blocks[j] + 4) : -hi;
    h[j] = _mm512_set1_ps(hi);
    l[j] = _mm512_set1_ps(lo);
  }
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t j = 0; j < k; ++j) {
      const __m512 d = _mm512_mask_blend_ps((__mmask16)loadU16(blocks[j] + meta + i / 8), l[j], h[j]);
      acc = j == 0 ? addOut(d, out + i, add) : _mm512_add_ps(acc, d);
    }
    _mm512_storeu_ps(out + i, acc);
  }
}

// ---------------------------------------------------------------------------------------------
// maxmin (round to nearest): min/max pass, then quantize + pack + residual from L1.
// ---------------------------------------------------------------------------------------------
template <bool kRes>
QCCL_TARGET_AVX512 bool minMaxPass(const float* in, const float* res, uint32_t m, float* mn, float* mx) {
  __m512 lo = _mm512_set1_ps(INFINITY), hi = _mm512_set1_ps(-INFINITY);
  __mmask16 bad = 0;
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 x = stageV<kRes>(in, res, i);
    bad |= notFinite(x);
    lo = _mm512_min_ps(lo, x);
    hi = _mm512_max_ps(hi, x);
  }
  *mn = _mm512_reduce_min_ps(lo);
  *mx = _mm512_reduce_max_ps(hi);
  return bad == 0;
}

// Packs 32 levels (one per byte of x) into 32 * bits / 8 bytes at p.
QCCL_TARGET_AVX512 inline void packLevels(__m256i x, int bits, uint8_t* p) {
  if (bits == 8) {
    _mm256_storeu_si256((__m256i*)p, x);
  } else if (bits == 4) {
    __m256i y = _mm256_or_si256(x, _mm256_srli_epi16(x, 4));
    _mm_storeu_si128((__m128i*)p, _mm256_cvtepi16_epi8(y));
  } else {
    __m256i y = _mm256_or_si256(_mm256_or_si256(x, _mm256_srli_epi32(x, 6)),
                                _mm256_or_si256(_mm256_srli_epi32(x, 12), _mm256_srli_epi32(x, 18)));
    _mm_storel_epi64((__m128i*)p, _mm256_cvtepi32_epi8(y));
  }
}

// One level per element, as in math::maxminLevel; u is 0.5f or the stochastic uniforms.
QCCL_TARGET_AVX512 inline __m512 levelOf(__m512 x, __m512 mn, __m512 inv, __m512 top, __m512 u) {
  __m512 t = _mm512_mul_ps(_mm512_sub_ps(x, mn), inv);
  __m512 q = _mm512_roundscale_ps(_mm512_add_ps(t, u), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  return _mm512_min_ps(_mm512_max_ps(q, _mm512_setzero_ps()), top);
}

// 32x32 -> 64-bit products of 16 lanes, split into high and low words.
QCCL_TARGET_AVX512 inline void mulhilo16(__m512i a, __m512i mul, __m512i* hi, __m512i* lo) {
  __m512i even = _mm512_mul_epu32(a, mul), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mul);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// math::philox4x32 for the 16 counters {block0 + lane, rngOffset}: word j of every block in w[j].
QCCL_TARGET_AVX512 void philox16(uint64_t block0, const BucketCtx& ctx, __m512i* w) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo0 = _mm512_set1_epi32((int)(uint32_t)block0), hi0 = _mm512_set1_epi32((int)(uint32_t)(block0 >> 32));
  __m512i c0 = _mm512_add_epi32(lo0, lanes);
  __m512i c1 = _mm512_mask_add_epi32(hi0, _mm512_cmplt_epu32_mask(c0, lo0), hi0, _mm512_set1_epi32(1));  // carry
  __m512i c2 = _mm512_set1_epi32((int)(uint32_t)ctx.rngOffset);
  __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(ctx.rngOffset >> 32));
  uint32_t k0 = (uint32_t)ctx.seed, k1 = (uint32_t)(ctx.seed >> 32);
  const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
  for (int round = 0; round < 10; ++round) {
    __m512i h0, l0, h1, l1;
    mulhilo16(c0, m0, &h0, &l0);
    mulhilo16(c2, m1, &h1, &l1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(h1, c1), _mm512_set1_epi32((int)k0));
    c1 = l1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(h0, c3), _mm512_set1_epi32((int)k1));
    c3 = l0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0;
  w[1] = c1;
  w[2] = c2;
  w[3] = c3;
}

// Uniforms of elements 16k..16k+15 of the 64 covered by w: element e is word e % 4 of block e / 4.
QCCL_TARGET_AVX512 inline __m512 uniforms(const __m512i* w, int k) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i idx = _mm512_or_si512(_mm512_add_epi32(_mm512_set1_epi32(4 * k), _mm512_srli_epi32(lanes, 2)),
                                _mm512_slli_epi32(_mm512_and_si512(lanes, _mm512_set1_epi32(1)), 4));
  __m512i x = _mm512_mask_blend_epi32(0xCCCC, _mm512_permutex2var_epi32(w[0], idx, w[1]),
                                      _mm512_permutex2var_epi32(w[2], idx, w[3]));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(x, 8)), _mm512_set1_ps(0x1p-24f));
}

template <bool kRes, bool kStochastic>
QCCL_TARGET_AVX512 void quantizePass(const BucketCtx& ctx, const float* in, uint32_t m, uint64_t base,
                                     const math::MaxMinParams& p, uint8_t* words, float* res) {
  // v = in + res again from the L1-resident bucket (see signResidual for why it is not staged).
  const int bits = ctx.bits;
  const __m512 mn = _mm512_set1_ps(p.mn), inv = _mm512_set1_ps(p.inv), step = _mm512_set1_ps(p.step);
  const __m512 top = _mm512_set1_ps((float)p.levels);
  __m512 u0 = _mm512_set1_ps(0.5f), u1 = u0;
  __m512i w[4];
  for (uint32_t i = 0; i < m; i += 32) {
    if (kStochastic) {
      if (i % 64 == 0) philox16((base + i) >> 2, ctx, w);  // base is a multiple of 32
      u0 = uniforms(w, (int)(i % 64) / 16);
      u1 = uniforms(w, (int)(i % 64) / 16 + 1);
    }
    __m512 x0 = stageV<kRes>(in, res, i), x1 = stageV<kRes>(in, res, i + 16);
    __m512 q0 = levelOf(x0, mn, inv, top, u0), q1 = levelOf(x1, mn, inv, top, u1);
    __m128i b0 = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q0)), b1 = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q1));
    packLevels(_mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1), bits, words + i * bits / 8);
    if (kRes) {
      _mm512_storeu_ps(res + i, _mm512_sub_ps(x0, _mm512_add_ps(mn, _mm512_mul_ps(q0, step))));
      _mm512_storeu_ps(res + i + 16, _mm512_sub_ps(x1, _mm512_add_ps(mn, _mm512_mul_ps(q1, step))));
    }
  }
}

template <bool kRes>
QCCL_TARGET_AVX512 bool encodeMaxMinT(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                      uint8_t* block) {
  float mn, mx;
  if (!minMaxPass<kRes>(in, res, m, &mn, &mx)) return scalarEncode(CodecId::kMaxMin, ctx, in, res, m, base, block);
  math::MaxMinParams p = math::maxminParams(mn + 0.0f, mx + 0.0f, ctx.bits);
  storeF32(block, p.mn);
  storeF32(block + 4, p.mx);
  if (ctx.stochastic)
    quantizePass<kRes, true>(ctx, in, m, base, p, block + 8, res);
  else
    quantizePass<kRes, false>(ctx, in, m, base, p, block + 8, res);
  return false;
}

QCCL_TARGET_AVX512 bool encodeMaxMin(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                     uint8_t* block) {
  if (m % 32) return scalarEncode(CodecId::kMaxMin, ctx, in, res, m, base, block);
  return res ? encodeMaxMinT<true>(ctx, in, res, m, base, block) : encodeMaxMinT<false>(ctx, in, res, m, base, block);
}

// 16 levels starting at element i of the packed words.
QCCL_TARGET_AVX512 inline __m512i unpackLevels(const uint8_t* words, uint32_t i, int bits) {
  if (bits == 8) return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(words + i)));
  __m128i src, shift;
  if (bits == 4) {
    __m128i b = _mm_loadl_epi64((const __m128i*)(words + i / 2));
    src = _mm_unpacklo_epi8(b, b);
    shift = _mm_set1_epi16(0x0400);  // lane shifts 0,4,0,4,...
  } else {
    uint32_t w;
    std::memcpy(&w, words + i / 4, 4);
    src = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)w), _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    shift = _mm_set1_epi32(0x06040200);  // lane shifts 0,2,4,6,...
  }
  __m512i q = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(src), _mm512_cvtepu8_epi32(shift));
  return _mm512_and_si512(q, _mm512_set1_epi32((1 << bits) - 1));
}

QCCL_TARGET_AVX512 void decodeMaxMin(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  if (m % 16) return scalarDecode(CodecId::kMaxMin, ctx, block, m, out, add);
  float mnS = loadF32(block), mxS = loadF32(block + 4);
  const __m512 mn = _mm512_set1_ps(mnS), step = _mm512_set1_ps(math::maxminStep(mnS, mxS, ctx.bits));
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 q = _mm512_cvtepi32_ps(unpackLevels(block + 8, i, ctx.bits));
    _mm512_storeu_ps(out + i, addOut(_mm512_add_ps(mn, _mm512_mul_ps(q, step)), out + i, add));
  }
}

// The sum of k sources' decodes of one bucket (BucketDecodeSumFn), as decodeSignSum: the running
// sum in a register across the sources, the additions and their order decodeMaxMin's.
QCCL_TARGET_AVX512 void decodeMaxMinSum(const BucketCtx& ctx, const uint8_t* const* blocks, uint32_t k, uint32_t m,
                                        float* out, bool add) {
  if (m % 16 || k > kMaxSumSources) {
    for (uint32_t j = 0; j < k; ++j) decodeMaxMin(ctx, blocks[j], m, out, add || j > 0);
    return;
  }
  __m512 mn[kMaxSumSources], step[kMaxSumSources];
  for (uint32_t j = 0; j < k; ++j) {
    const float mnS = loadF32(blocks[j]), mxS = loadF32(blocks[j] + 4);
    mn[j] = _mm512_set1_ps(mnS);
    step[j] = _mm512_set1_ps(math::maxminStep(mnS, mxS, ctx.bits));
  }
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (uint32_t j = 0; j < k; ++j) {
      const __m512 q = _mm512_cvtepi32_ps(unpackLevels(blocks[j] + 8, i, ctx.bits));
      const __m512 d = _mm512_add_ps(mn[j], _mm512_mul_ps(q, step[j]));
      acc = j == 0 ? addOut(d, out + i, add) : _mm512_add_ps(acc, d);
    }
    _mm512_storeu_ps(out + i, acc);
  }
}

// ---------------------------------------------------------------------------------------------
// dyn8: absmax pass, then the code search below. Table lookups use in-register permutes of a
// 128-entry table (gathers are slow on some cores).
// ---------------------------------------------------------------------------------------------
struct Table128 {
  __m512 t[8];
};

QCCL_TARGET_AVX512 inline Table128 loadTable(const float* src, int count) {
  alignas(64) float padded[128];
  for (int k = 0; k < 128; ++k) padded[k] = k < count ? src[k] : INFINITY;  // a > +Inf never holds
  Table128 tab;
  for (int j = 0; j < 8; ++j) tab.t[j] = _mm512_load_ps(padded + 16 * j);
  return tab;
}

// tab[idx] for idx in [0, 128).
QCCL_TARGET_AVX512 inline __m512 lookup(const Table128& tab, __m512i idx) {
  __m512 a = _mm512_permutex2var_ps(tab.t[0], idx, tab.t[1]), b = _mm512_permutex2var_ps(tab.t[2], idx, tab.t[3]);
  __m512 c = _mm512_permutex2var_ps(tab.t[4], idx, tab.t[5]), d = _mm512_permutex2var_ps(tab.t[6], idx, tab.t[7]);
  __mmask16 bit5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
  __mmask16 bit6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));
  return _mm512_mask_blend_ps(bit6, _mm512_mask_blend_ps(bit5, a, b), _mm512_mask_blend_ps(bit5, c, d));
}

// Code search without a full binary search. The decade (number of fraction bits f) is exact: it
// counts the thresholds at decade boundaries, thr[2^f - 1], that a exceeds. Inside a decade the
// thresholds are evenly spaced midpoints T(j) = 10^-e (0.1 + 0.9 (j + 1.5) / 2^f), so the count
// of them below a is ceil(a * S - K), computed in float with an error far below one step; the
// estimate is therefore off by at most one, and one comparison on each side with the real
// thresholds makes it exact (the thresholds are increasing).
struct Dyn8Search {
  Table128 thr;
  float bound[7];      // thr[2^f - 1]
  __m512 scale, bias;  // S[f] = 10^e 2^f / 0.9, K[f] = 0.1 2^f / 0.9 + 1.5, e = 6 - f, lanes f = 0..6
};

QCCL_TARGET_AVX512 inline void initSearch(const float* threshold, Dyn8Search* d) {
  d->thr = loadTable(threshold, 127);
  alignas(64) float s[16] = {}, k[16] = {};
  for (int f = 0; f < 7; ++f) {
    d->bound[f] = threshold[(1 << f) - 1];
    double p10 = 1.0;
    for (int e = 0; e < 6 - f; ++e) p10 *= 10.0;
    s[f] = (float)(p10 * (double)(1 << f) / 0.9);
    k[f] = (float)(0.1 * (double)(1 << f) / 0.9 + 1.5);
  }
  d->scale = _mm512_load_ps(s);
  d->bias = _mm512_load_ps(k);
}

QCCL_TARGET_AVX512 inline __m512i dyn8Codes(__m512 x, __m512 absmax, const Dyn8Search& d) {
  const __m512i one = _mm512_set1_epi32(1);
  __m512 a = _mm512_div_ps(_mm512_abs_ps(x), absmax);
  __m512i p = _mm512_setzero_si512();
  for (int f = 0; f < 7; ++f)
    p = _mm512_mask_add_epi32(p, _mm512_cmp_ps_mask(a, _mm512_set1_ps(d.bound[f]), _CMP_GT_OQ), p, one);
  __mmask16 nonzero = _mm512_test_epi32_mask(p, p);
  __m512i f = _mm512_max_epi32(_mm512_sub_epi32(p, one), _mm512_setzero_si512());
  __m512 y = _mm512_sub_ps(_mm512_mul_ps(a, _mm512_permutexvar_ps(f, d.scale)), _mm512_permutexvar_ps(f, d.bias));
  __m512i j = _mm512_cvttps_epi32(_mm512_roundscale_ps(y, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
  __m512i base = _mm512_sllv_epi32(one, f);
  j = _mm512_min_epi32(_mm512_max_epi32(j, _mm512_setzero_si512()), _mm512_sub_epi32(base, one));
  __m512i c = _mm512_add_epi32(base, j);
  __mmask16 up = _mm512_cmp_ps_mask(a, lookup(d.thr, c), _CMP_GT_OQ);
  __mmask16 down = _mm512_cmp_ps_mask(a, lookup(d.thr, _mm512_sub_epi32(c, one)), _CMP_NGT_UQ);
  c = _mm512_mask_add_epi32(c, up, c, one);
  c = _mm512_mask_sub_epi32(c, down, c, one);
  c = _mm512_maskz_mov_epi32(nonzero, c);
  __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ) & nonzero;
  return _mm512_mask_or_epi32(c, neg, c, _mm512_set1_epi32(0x80));
}

QCCL_TARGET_AVX512 inline __m512 dyn8Values(__m512i code, __m512 absmax, const Table128& mag) {
  __m512 v = _mm512_mul_ps(lookup(mag, _mm512_and_si512(code, _mm512_set1_epi32(0x7f))), absmax);
  __mmask16 neg = _mm512_test_epi32_mask(code, _mm512_set1_epi32(0x80));
  // Flip the sign bit (not 0 - v) so a hostile code 0x80 decodes to -0.0f as in the scalar path.
  __m512i bits = _mm512_castps_si512(v);
  return _mm512_castsi512_ps(_mm512_mask_xor_epi32(bits, neg, bits, _mm512_set1_epi32((int)0x80000000u)));
}

template <bool kRes>
QCCL_TARGET_AVX512 bool encodeDyn8T(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                    uint8_t* block) {
  float* v = ctx.scratch;
  __m512 amax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 x = stageV<kRes>(in, res, i);
    _mm512_storeu_ps(v + i, x);
    bad |= notFinite(x);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
  }
  float absmax = _mm512_reduce_max_ps(amax);
  if (bad || absmax == 0.0f) return scalarEncode(CodecId::kDyn8, ctx, in, res, m, base, block);
  storeF32(block, absmax);
  const __m512 am = _mm512_set1_ps(absmax);
  Dyn8Search search;
  initSearch(ctx.dyn8->threshold, &search);
  const Table128 mag = loadTable(ctx.dyn8->magnitude, 128);
  for (uint32_t i = 0; i < m; i += 16) {
    __m512 x = _mm512_loadu_ps(v + i);
    __m512i code = dyn8Codes(x, am, search);
    _mm_storeu_si128((__m128i*)(block + 4 + i), _mm512_cvtepi32_epi8(code));
    if (kRes) _mm512_storeu_ps(res + i, _mm512_sub_ps(x, dyn8Values(code, am, mag)));
  }
  return false;
}

QCCL_TARGET_AVX512 bool encodeDyn8(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                   uint8_t* block) {
  if (m % 16) return scalarEncode(CodecId::kDyn8, ctx, in, res, m, base, block);
  return res ? encodeDyn8T<true>(ctx, in, res, m, base, block) : encodeDyn8T<false>(ctx, in, res, m, base, block);
}

QCCL_TARGET_AVX512 void decodeDyn8(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  if (m % 16) return scalarDecode(CodecId::kDyn8, ctx, block, m, out, add);
  const __m512 am = _mm512_set1_ps(loadF32(block));
  const Table128 mag = loadTable(ctx.dyn8->magnitude, 128);
  for (uint32_t i = 0; i < m; i += 16) {
    __m512i code = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(block + 4 + i)));
    _mm512_storeu_ps(out + i, addOut(dyn8Values(code, am, mag), out + i, add));
  }
}

}  // namespace
}  // namespace cpu
}  // namespace qccl

namespace qccl {
namespace cpu {

const Kernels* avx512Kernels() {
  static const Kernels k = [] {
    Kernels r = scalarKernels();
    r.isa = "avx512";
    r.bucketEncode[(int)CodecId::kOneBit] = encodeSign<true>;
    r.bucketDecode[(int)CodecId::kOneBit] = decodeSign<true>;
    r.bucketEncode[(int)CodecId::kSignScale] = encodeSign<false>;
    r.bucketDecode[(int)CodecId::kSignScale] = decodeSign<false>;
    r.bucketDecodeSum[(int)CodecId::kOneBit] = decodeSignSum<true>;
    r.bucketDecodeSum[(int)CodecId::kSignScale] = decodeSignSum<false>;
    r.bucketEncodeGain[(int)CodecId::kOneBit] = true;
    r.bucketEncodeGain[(int)CodecId::kSignScale] = true;
    r.bucketEncode[(int)CodecId::kMaxMin] = encodeMaxMin;
    r.bucketDecode[(int)CodecId::kMaxMin] = decodeMaxMin;
    r.bucketDecodeSum[(int)CodecId::kMaxMin] = decodeMaxMinSum;
    r.bucketEncode[(int)CodecId::kDyn8] = encodeDyn8;
    r.bucketDecode[(int)CodecId::kDyn8] = decodeDyn8;
    setAvx512Casts(&r);  // kernels_avx512_cast.cc
    return r;
  }();
  return &k;
}

}  // namespace cpu
}  // namespace qccl

#else

namespace qccl {
namespace cpu {
const Kernels* avx512Kernels() { return nullptr; }
}  // namespace cpu
}  // namespace qccl

#endif
