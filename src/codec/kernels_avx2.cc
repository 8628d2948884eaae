// AVX2 + F16C kernels for CPUs without AVX-512. Same structure and the same per-element IEEE
// operations as kernels_avx512.cc (see the notes there); without mask registers, the sign-split
// sums add +0.0f in the lanes that belong to the other sum, which leaves a sum unchanged because
// these sums are never -0.0f.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "codec/cpu_kernels.hpp"
#include "qccl/error.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#define QCCL_TARGET_AVX2 __attribute__((target("avx2,f16c,popcnt")))

namespace qccl {
namespace cpu {
namespace {

bool scalarEncode(CodecId c, const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                  uint8_t* block) {
  return scalarKernels().bucketEncode[(int)c](ctx, in, res, m, base, block);
}
void scalarDecode(CodecId c, const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  scalarKernels().bucketDecode[(int)c](ctx, block, m, out, add);
}

QCCL_TARGET_AVX2 inline __m256 absV(__m256 v) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
QCCL_TARGET_AVX2 inline int notFinite(__m256 v) {
  return _mm256_movemask_ps(_mm256_cmp_ps(absV(v), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
}
template <bool kRes>
QCCL_TARGET_AVX2 inline __m256 stageV(const float* in, const float* res, size_t i) {
  __m256 g = _mm256_loadu_ps(in + i);
  if (kRes) g = _mm256_add_ps(g, _mm256_loadu_ps(res + i));
  return g;
}
QCCL_TARGET_AVX2 inline __m256 addOut(__m256 d, const float* out, bool add) {
  return add ? _mm256_add_ps(_mm256_loadu_ps(out), d) : d;
}

// ---------------------------------------------------------------------------------------------
// onebit / signscale
// ---------------------------------------------------------------------------------------------
// The 128 slots of the canonical order do not fit 16 ymm registers (onebit needs two sums), so the
// bucket is walked in column groups: group j (elements j..j+31 of every 128-element row, slots
// j..j+31) accumulates down the rows of a 512-element block in 8 registers, then goes back to
// memory. Each slot still adds its elements in increasing index, as in the canonical order; only
// the walk differs. Keeping the sums in registers instead of a load-add-store per vector made the
// encode 4-10% faster on data in cache (bench/RESULTS.md, "AVX2: the sign encodes' sums in
// registers"). Fed from memory the walk does not overlap its loads with its work; encodeSign then
// stages v first ("The sign encodes from memory").
//
// foldSlots (cpu_kernels.hpp) in registers, with the same additions in the same order. Left to the
// compiler, the scalar fold became ~50 lane permutes per call, which cost about as much as encoding
// the 512-element bucket itself on a Zen 1 core (bench/RESULTS.md, "The sign encodes from
// memory"). hadd pairs neighbours: two rounds give s[l] = (acc[4l] + acc[4l+1]) + (acc[4l+2] +
// acc[4l+3]) in the lane order [s0 s2 s4 s6 | s1 s3 s5 s7] of each group of eight, and the halving
// fold adds groups lane by lane, which keeps that order. (IEEE addition is commutative, so b + a is
// a + b bit for bit; only a NaN's payload could differ, and a NaN statistic is re-encoded by the
// scalar path anyway.)
QCCL_TARGET_AVX2 inline float foldSlotsAvx2(const float* acc) {
  __m256 v[4];
  for (int g = 0; g < 4; ++g) {
    const float* p = acc + 32 * g;
    const __m256 ab = _mm256_hadd_ps(_mm256_load_ps(p), _mm256_load_ps(p + 8));
    const __m256 cd = _mm256_hadd_ps(_mm256_load_ps(p + 16), _mm256_load_ps(p + 24));
    v[g] = _mm256_hadd_ps(ab, cd);  // s[8g..8g+7] as [s0 s2 s4 s6 | s1 s3 s5 s7]
  }
  const __m256 h16a = _mm256_add_ps(v[0], v[2]), h16b = _mm256_add_ps(v[1], v[3]);      // s[l] + s[l + 16]
  const __m256 h8 = _mm256_add_ps(h16a, h16b);                                          // s[l] + s[l + 8]
  const __m256 h4 = _mm256_add_ps(h8, _mm256_permute_ps(h8, _MM_SHUFFLE(3, 2, 3, 2)));  // s[l] + s[l + 4]
  alignas(32) float t[8];
  _mm256_store_ps(t, h4);  // s0 = t[0], s2 = t[1], s1 = t[4], s3 = t[5]
  return (t[0] + t[1]) + (t[4] + t[5]);
}

// res = v - decoded(v) for a finite bucket, with v = in + r (kRes) or v = in.
template <bool kRes>
QCCL_TARGET_AVX2 inline void signResidual(const float* in, const float* r, float* res, uint32_t m, float hi, float lo) {
  const __m256 h = _mm256_set1_ps(hi), l = _mm256_set1_ps(lo), zero = _mm256_setzero_ps();
  for (uint32_t i = 0; i < m; i += 8) {
    const __m256 x = stageV<kRes>(in, r, i);
    _mm256_storeu_ps(res + i, _mm256_sub_ps(x, _mm256_blendv_ps(l, h, _mm256_cmp_ps(x, zero, _CMP_GE_OQ))));
  }
}

template <bool kRes, bool kOneBit>
QCCL_TARGET_AVX2 bool encodeSignT(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                  uint8_t* block) {
  const CodecId c = kOneBit ? CodecId::kOneBit : CodecId::kSignScale;
  // The first block starts the sums from zero in registers, so only slots no element reaches (m <
  // 128) need zeros in memory.
  alignas(32) float a[math::kReduceSlots], b[math::kReduceSlots];
  const uint32_t meta = kOneBit ? 8 : 4;
  const __m256 zero = _mm256_setzero_ps();
  uint32_t cnt = 0;
  constexpr uint32_t kBlock = 4 * math::kReduceSlots;
  for (uint32_t blk = 0; blk < m; blk += kBlock) {
    const uint32_t end = m - blk < kBlock ? m : blk + kBlock;
    for (uint32_t j = 0; j < (uint32_t)math::kReduceSlots && blk + j < end; j += 32) {
      __m256 a0 = zero, a1 = zero, a2 = zero, a3 = zero, b0 = zero, b1 = zero, b2 = zero, b3 = zero;
      if (blk > 0) {
        a0 = _mm256_load_ps(a + j), a1 = _mm256_load_ps(a + j + 8), a2 = _mm256_load_ps(a + j + 16),
        a3 = _mm256_load_ps(a + j + 24);
      }
      if (kOneBit && blk > 0) {
        b0 = _mm256_load_ps(b + j), b1 = _mm256_load_ps(b + j + 8), b2 = _mm256_load_ps(b + j + 16),
        b3 = _mm256_load_ps(b + j + 24);
      }
      for (uint32_t i = blk + j; i < end; i += math::kReduceSlots) {
        const __m256 x0 = stageV<kRes>(in, res, i), x1 = stageV<kRes>(in, res, i + 8),
                     x2 = stageV<kRes>(in, res, i + 16), x3 = stageV<kRes>(in, res, i + 24);
        const __m256 g0 = _mm256_cmp_ps(x0, zero, _CMP_GE_OQ), g1 = _mm256_cmp_ps(x1, zero, _CMP_GE_OQ),
                     g2 = _mm256_cmp_ps(x2, zero, _CMP_GE_OQ), g3 = _mm256_cmp_ps(x3, zero, _CMP_GE_OQ);
        const uint32_t word = (uint32_t)_mm256_movemask_ps(g0) | (uint32_t)_mm256_movemask_ps(g1) << 8 |
                              (uint32_t)_mm256_movemask_ps(g2) << 16 | (uint32_t)_mm256_movemask_ps(g3) << 24;
        storeU32(block + meta + i / 8, word);
        if (kOneBit) {
          a0 = _mm256_add_ps(a0, _mm256_and_ps(x0, g0));
          a1 = _mm256_add_ps(a1, _mm256_and_ps(x1, g1));
          a2 = _mm256_add_ps(a2, _mm256_and_ps(x2, g2));
          a3 = _mm256_add_ps(a3, _mm256_and_ps(x3, g3));
          b0 = _mm256_add_ps(b0, _mm256_andnot_ps(g0, x0));
          b1 = _mm256_add_ps(b1, _mm256_andnot_ps(g1, x1));
          b2 = _mm256_add_ps(b2, _mm256_andnot_ps(g2, x2));
          b3 = _mm256_add_ps(b3, _mm256_andnot_ps(g3, x3));
          cnt += (uint32_t)__builtin_popcount(word);
        } else {
          a0 = _mm256_add_ps(a0, absV(x0));
          a1 = _mm256_add_ps(a1, absV(x1));
          a2 = _mm256_add_ps(a2, absV(x2));
          a3 = _mm256_add_ps(a3, absV(x3));
        }
      }
      _mm256_store_ps(a + j, a0);
      _mm256_store_ps(a + j + 8, a1);
      _mm256_store_ps(a + j + 16, a2);
      _mm256_store_ps(a + j + 24, a3);
      if (kOneBit) {
        _mm256_store_ps(b + j, b0);
        _mm256_store_ps(b + j + 8, b1);
        _mm256_store_ps(b + j + 16, b2);
        _mm256_store_ps(b + j + 24, b3);
      }
    }
  }
  for (uint32_t j = m; j < (uint32_t)math::kReduceSlots; ++j) a[j] = b[j] = 0.0f;
  float hi, lo;
  if (kOneBit) {
    hi = cnt ? foldSlotsAvx2(a) / (float)cnt : 0.0f;
    lo = cnt < m ? foldSlotsAvx2(b) / (float)(m - cnt) : 0.0f;
  } else {
    hi = foldSlotsAvx2(a) / (float)m;
    lo = -hi;
  }
  if (!math::isFinite(hi) || !math::isFinite(lo)) return scalarEncode(c, ctx, in, res, m, base, block);
  storeF32(block, hi);
  if (kOneBit) storeF32(block + 4, lo);
  // v = in + res again from the bucket, which is still in cache: for data in cache that beats
  // staging v in a scratch buffer (encodeSign stages it when the call streams from memory).
  if (kRes) signResidual<true>(in, res, res, m, hi, lo);
  return false;
}

// Error control (BucketCtx::gain = g) in the staged path: v = in + g r staged, the bits from v, and
// res = (v - decoded(v)) + (r - g r), each float rounded as encodeWith's generic error control
// rounds it (g r, then in + g r; the kernel's v - decoded(v), then plus r - g r), so the bits and
// residuals are the same. A bucket the vector path does not take goes that generic way.
template <bool kOneBit>
QCCL_TARGET_AVX2 bool encodeSignGain(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                     uint8_t* block) {
  const CodecId c = kOneBit ? CodecId::kOneBit : CodecId::kSignScale;
  const __m256 g = _mm256_set1_ps(ctx.gain);
  float* v = ctx.scratch;
  if (m % 32 == 0) {
    for (uint32_t i = 0; i < m; i += 8)
      _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(in + i), _mm256_mul_ps(g, _mm256_loadu_ps(res + i))));
    if (ctx.prefetch)  // as in encodeSign
      for (uint32_t i = 0; i < m; i += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(in + m + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(res + m + i), _MM_HINT_T0);
      }
    if (!encodeSignT<false, kOneBit>(ctx, v, nullptr, m, base, block)) {
      const float hi = loadF32(block);
      const __m256 h = _mm256_set1_ps(hi), l = _mm256_set1_ps(kOneBit ? loadF32(block + 4) : -hi),
                   zero = _mm256_setzero_ps();
      for (uint32_t i = 0; i < m; i += 8) {
        const __m256 x = _mm256_loadu_ps(v + i), r = _mm256_loadu_ps(res + i);
        const __m256 left = _mm256_sub_ps(x, _mm256_blendv_ps(l, h, _mm256_cmp_ps(x, zero, _CMP_GE_OQ)));
        _mm256_storeu_ps(res + i, _mm256_add_ps(left, _mm256_sub_ps(r, _mm256_mul_ps(g, r))));
      }
      return false;
    }
  }
  // (The scalar kernels stage v in ctx.scratch, so g r goes into a buffer of its own.)
  thread_local std::vector<float> fed;
  if (fed.size() < m) fed.resize(m);
  return encodeHeldBack(res, m, ctx.gain, fed.data(),
                        [&](float* f) { return scalarEncode(c, ctx, in, f, m, base, block); });
}

template <bool kOneBit>
QCCL_TARGET_AVX2 bool encodeSign(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                 uint8_t* block) {
  const CodecId c = kOneBit ? CodecId::kOneBit : CodecId::kSignScale;
  if (res != nullptr && ctx.gain != 1.0f) return encodeSignGain<kOneBit>(ctx, in, res, m, base, block);
  if (m % 32) return scalarEncode(c, ctx, in, res, m, base, block);
  if (res == nullptr) return encodeSignT<false, kOneBit>(ctx, in, res, m, base, block);
  if (!ctx.streaming || ctx.scratch == nullptr) return encodeSignT<true, kOneBit>(ctx, in, res, m, base, block);
  // From memory: v = in + res in one sequential pass into scratch (L1), then the sums and the bits
  // from v, then the residual from v. The column walk below strides 512 bytes down a block, and
  // fed from memory it ran at 2.5 GB/s of input on a Zen 1 core where this runs at 3.2 (in cache
  // the extra pass costs more than it saves, hence ctx.streaming). res is left as it was until the
  // statistics are known finite, so the scalar fallback sees the caller's residual.
  float* v = ctx.scratch;
  for (uint32_t i = 0; i < m; i += 8) _mm256_storeu_ps(v + i, stageV<true>(in, res, i));
  // The next bucket's input and residual, requested now so that they arrive while this bucket's
  // sums and residual run from L1: each phase alone left either the memory or the core idle. On
  // the Zen 1 VM a 64 MiB encode went from 3.0-3.3 to 3.8-4.3 GB/s (onebit) and from 3.3-3.6 to
  // 4.1-4.5 (signscale); two buckets ahead, or prefetches inside the staging loop, gained less
  // (bench/RESULTS.md, "The next bucket prefetched"). A prefetch past the end of the call is a
  // hint, not an access: it never faults.
  if (ctx.prefetch)
    for (uint32_t i = 0; i < m; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(in + m + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(res + m + i), _MM_HINT_T0);
    }
  if (encodeSignT<false, kOneBit>(ctx, v, nullptr, m, base, block))
    return scalarEncode(c, ctx, in, res, m, base, block);
  const float hi = loadF32(block);
  signResidual<false>(v, nullptr, res, m, hi, kOneBit ? loadF32(block + 4) : -hi);
  return false;
}

template <bool kOneBit>
QCCL_TARGET_AVX2 void decodeSign(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  if (m % 32) return scalarDecode(kOneBit ? CodecId::kOneBit : CodecId::kSignScale, ctx, block, m, out, add);
  float hi = loadF32(block), lo = kOneBit ? loadF32(block + 4) : -hi;
  const uint8_t* words = block + (kOneBit ? 8 : 4);
  const __m256 h = _mm256_set1_ps(hi), l = _mm256_set1_ps(lo);
  const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (uint32_t i = 0; i < m; i += 8) {
    __m256i bits = _mm256_and_si256(_mm256_set1_epi32(words[i / 8]), lanes);
    __m256 sel = _mm256_castsi256_ps(_mm256_cmpeq_epi32(bits, lanes));
    _mm256_storeu_ps(out + i, addOut(_mm256_blendv_ps(l, h, sel), out + i, add));
  }
}

// The sum of k sources' decodes of one bucket (BucketDecodeSumFn): the running sum stays in a
// register across the sources, so out is loaded and stored once per vector instead of once per
// source. The additions and their order are decodeSign's, source after source.
template <bool kOneBit>
QCCL_TARGET_AVX2 void decodeSignSum(const BucketCtx& ctx, const uint8_t* const* blocks, uint32_t k, uint32_t m,
                                    float* out, bool add) {
  if (m % 32 || k > kMaxSumSources) {
    for (uint32_t j = 0; j < k; ++j) decodeSign<kOneBit>(ctx, blocks[j], m, out, add || j > 0);
    return;
  }
  const uint32_t meta = kOneBit ? 8 : 4;
  __m256 h[kMaxSumSources], l[kMaxSumSources];
  for (uint32_t j = 0; j < k; ++j) {
    const float hi = loadF32(blocks[j]), lo = kOneBit ? loadF32(blocks[j] + 4) : -hi;
    h[j] = _mm256_set1_ps(hi);
    l[j] = _mm256_set1_ps(lo);
  }
  const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (uint32_t i = 0; i < m; i += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t j = 0; j < k; ++j) {
      const __m256i bits = _mm256_and_si256(_mm256_set1_epi32(blocks[j][meta + i / 8]), lanes);
      const __m256 d = _mm256_blendv_ps(l[j], h[j], _mm256_castsi256_ps(_mm256_cmpeq_epi32(bits, lanes)));
      acc = j == 0 ? (add ? _mm256_add_ps(_mm256_loadu_ps(out + i), d) : d) : _mm256_add_ps(acc, d);
    }
    _mm256_storeu_ps(out + i, acc);
  }
}

// ---------------------------------------------------------------------------------------------
// maxmin (round to nearest)
// ---------------------------------------------------------------------------------------------
QCCL_TARGET_AVX2 inline __m256 levelOf(__m256 x, __m256 mn, __m256 inv, __m256 top, __m256 u) {
  __m256 q = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, mn), inv), u));
  return _mm256_min_ps(_mm256_max_ps(q, _mm256_setzero_ps()), top);
}

QCCL_TARGET_AVX2 inline void mulhilo8(__m256i a, __m256i mul, __m256i* hi, __m256i* lo) {
  __m256i even = _mm256_mul_epu32(a, mul), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), mul);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

// Uniforms of 32 consecutive elements starting at element 4 * block0 (math::stochasticUniform):
// Philox4x32-10 on the 8 counters {block0 + lane, rngOffset}, then element e = word e % 4 of
// block e / 4.
QCCL_TARGET_AVX2 void uniforms32(uint64_t block0, const BucketCtx& ctx, __m256* u) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), sign = _mm256_set1_epi32((int)0x80000000u);
  const __m256i lo0 = _mm256_set1_epi32((int)(uint32_t)block0), hi0 = _mm256_set1_epi32((int)(uint32_t)(block0 >> 32));
  __m256i c0 = _mm256_add_epi32(lo0, lanes);
  __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lo0, sign), _mm256_xor_si256(c0, sign));  // c0 < lo0 unsigned
  __m256i c1 = _mm256_sub_epi32(hi0, carry);
  __m256i c2 = _mm256_set1_epi32((int)(uint32_t)ctx.rngOffset);
  __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(ctx.rngOffset >> 32));
  uint32_t k0 = (uint32_t)ctx.seed, k1 = (uint32_t)(ctx.seed >> 32);
  const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
  for (int round = 0; round < 10; ++round) {
    __m256i h0, l0, h1, l1;
    mulhilo8(c0, m0, &h0, &l0);
    mulhilo8(c2, m1, &h1, &l1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(h1, c1), _mm256_set1_epi32((int)k0));
    c1 = l1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(h0, c3), _mm256_set1_epi32((int)k1));
    c3 = l0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int k = 0; k < 4; ++k) {
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(2 * k), _mm256_srli_epi32(lanes, 2));
    __m256i x = _mm256_permutevar8x32_epi32(c0, idx);
    x = _mm256_blend_epi32(x, _mm256_permutevar8x32_epi32(c1, idx), 0x22);
    x = _mm256_blend_epi32(x, _mm256_permutevar8x32_epi32(c2, idx), 0x44);
    x = _mm256_blend_epi32(x, _mm256_permutevar8x32_epi32(c3, idx), 0x88);
    u[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 8)), _mm256_set1_ps(0x1p-24f));
  }
}

// Packs 32 levels (4 vectors of 8 int32 each) into 32 * bits / 8 bytes at p.
QCCL_TARGET_AVX2 void packLevels(const __m256i* q, int bits, uint8_t* p) {
  __m256i x = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
  x = _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));  // one level per byte
  if (bits == 8) {
    _mm256_storeu_si256((__m256i*)p, x);
    return;
  }
  // Adjacent bytes combine as q0 + (q1 << bits); 2-bit levels combine twice more.
  __m256i y = _mm256_maddubs_epi16(x, _mm256_set1_epi16(bits == 4 ? 0x1001 : 0x0401));
  __m128i lo = _mm256_castsi256_si128(y), hi = _mm256_extracti128_si256(y, 1);
  if (bits == 4) {
    _mm_storeu_si128((__m128i*)p, _mm_packus_epi16(lo, hi));
    return;
  }
  __m256i z = _mm256_madd_epi16(y, _mm256_set1_epi32(0x00100001));
  __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(z), _mm256_extracti128_si256(z, 1));
  _mm_storel_epi64((__m128i*)p, _mm_packus_epi16(w, w));
}

template <bool kRes>
QCCL_TARGET_AVX2 bool encodeMaxMinT(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                    uint8_t* block) {
  __m256 lo = _mm256_set1_ps(INFINITY), hi = _mm256_set1_ps(-INFINITY);
  int bad = 0;
  for (uint32_t i = 0; i < m; i += 8) {
    __m256 x = stageV<kRes>(in, res, i);
    bad |= notFinite(x);
    lo = _mm256_min_ps(lo, x);
    hi = _mm256_max_ps(hi, x);
  }
  if (bad) return scalarEncode(CodecId::kMaxMin, ctx, in, res, m, base, block);
  // As in encodeSign: the next bucket is requested while this one, now in L1, is quantized.
  if (ctx.prefetch)
    for (uint32_t i = 0; i < m; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(in + m + i), _MM_HINT_T0);
      if (kRes) _mm_prefetch(reinterpret_cast<const char*>(res + m + i), _MM_HINT_T0);
    }
  alignas(32) float l8[8], h8[8];
  _mm256_store_ps(l8, lo);
  _mm256_store_ps(h8, hi);
  float mn = l8[0], mx = h8[0];
  for (int k = 1; k < 8; ++k) {
    mn = math::fmin2(mn, l8[k]);
    mx = math::fmax2(mx, h8[k]);
  }
  math::MaxMinParams p = math::maxminParams(mn + 0.0f, mx + 0.0f, ctx.bits);
  storeF32(block, p.mn);
  storeF32(block + 4, p.mx);
  const __m256 mnV = _mm256_set1_ps(p.mn), inv = _mm256_set1_ps(p.inv), step = _mm256_set1_ps(p.step);
  const __m256 top = _mm256_set1_ps((float)p.levels);
  __m256 u[4] = {_mm256_set1_ps(0.5f), _mm256_set1_ps(0.5f), _mm256_set1_ps(0.5f), _mm256_set1_ps(0.5f)};
  for (uint32_t i = 0; i < m; i += 32) {
    if (ctx.stochastic) uniforms32((base + i) >> 2, ctx, u);  // base is a multiple of 32
    __m256i qi[4];
    for (int k = 0; k < 4; ++k) {
      __m256 x = stageV<kRes>(in, res, i + 8 * k);  // again, from cache: no staging (see encodeSignT)
      __m256 q = levelOf(x, mnV, inv, top, u[k]);
      qi[k] = _mm256_cvttps_epi32(q);
      if (kRes) _mm256_storeu_ps(res + i + 8 * k, _mm256_sub_ps(x, _mm256_add_ps(mnV, _mm256_mul_ps(q, step))));
    }
    packLevels(qi, ctx.bits, block + 8 + i * ctx.bits / 8);
  }
  return false;
}

QCCL_TARGET_AVX2 bool encodeMaxMin(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                   uint8_t* block) {
  if (m % 32) return scalarEncode(CodecId::kMaxMin, ctx, in, res, m, base, block);
  return res ? encodeMaxMinT<true>(ctx, in, res, m, base, block) : encodeMaxMinT<false>(ctx, in, res, m, base, block);
}

QCCL_TARGET_AVX2 void decodeMaxMin(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  if (m % 32) return scalarDecode(CodecId::kMaxMin, ctx, block, m, out, add);
  const int bits = ctx.bits;
  float mnS = loadF32(block), mxS = loadF32(block + 4);
  const __m256 mn = _mm256_set1_ps(mnS), step = _mm256_set1_ps(math::maxminStep(mnS, mxS, bits));
  const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
  const __m256i shifts = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bits));
  const uint8_t* words = block + 8;
  for (uint32_t i = 0; i < m; i += 8) {
    __m256i q;
    if (bits == 8) {
      q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(words + i)));
    } else {
      // 8 levels of 4 bits fill one word; of 2 bits, half a word.
      uint32_t w = bits == 4 ? loadU32(words + i / 2) : loadU32(words + i / 16 * 4) >> (i % 16 * 2);
      q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shifts), mask);
    }
    __m256 d = _mm256_add_ps(mn, _mm256_mul_ps(_mm256_cvtepi32_ps(q), step));
    _mm256_storeu_ps(out + i, addOut(d, out + i, add));
  }
}

// ---------------------------------------------------------------------------------------------
// dyn8: absmax pass, then each magnitude code from a table of bins of a = |v| / absmax.
// ---------------------------------------------------------------------------------------------
// The code of a is the number of thresholds below it (math::dyn8Code, a 7-step binary search, which
// took 7 gathers per 8 elements: 0.37 GB/s on a Zen 1 core, where gathers are microcoded). Here a's
// float bits select a bin (its exponent and 7 mantissa bits: 0.8% wide); bins below 2^-22, where
// no threshold lies (the smallest is 5e-7), share bin 0. Each bin stores the code of its smallest
// value, and no bin holds more than one threshold (checked when the table is built), so code =
// base + (a > threshold[base]): two gathers per 8 elements.
constexpr int32_t kDyn8BinLo = 105 << 7;                            // a's bits >> 16 for 2^-22
constexpr int32_t kDyn8Bins = (0x3f800000 >> 16) - kDyn8BinLo + 1;  // up to a = 1.0
struct Dyn8Bins {
  alignas(32) float threshold[128];  // threshold[127] = +Inf: a > it never holds
  alignas(32) int32_t base[kDyn8Bins];
};

const Dyn8Bins& dyn8Bins() {
  static const Dyn8Bins bins = [] {
    Dyn8Bins b;
    math::Dyn8Tables t;
    math::fillDyn8Tables(&t);
    std::memcpy(b.threshold, t.threshold, sizeof(t.threshold));
    b.threshold[127] = INFINITY;
    for (int32_t k = 0; k < kDyn8Bins; ++k) {
      const uint32_t first = k == 0 ? 0u : static_cast<uint32_t>(k + kDyn8BinLo) << 16;
      const uint32_t last = (static_cast<uint32_t>(k + kDyn8BinLo + 1) << 16) - 1u;
      b.base[k] = static_cast<int32_t>(math::dyn8Code(math::bitsFloat(first), t.threshold));
      QCCL_CHECK(math::dyn8Code(math::bitsFloat(last), t.threshold) <= static_cast<uint32_t>(b.base[k]) + 1u,
                 ErrorCode::kInternalError, "dyn8: a bin of the AVX2 code table holds two thresholds");
    }
    return b;
  }();
  return bins;
}

// a = |x| / absmax in [0, 1] (x finite, absmax > 0 and >= |x|).
QCCL_TARGET_AVX2 inline __m256i dyn8Codes(__m256 x, __m256 absmax, const Dyn8Bins& bins) {
  const __m256 a = _mm256_div_ps(absV(x), absmax);
  __m256i k = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 16), _mm256_set1_epi32(kDyn8BinLo));
  k = _mm256_min_epi32(_mm256_max_epi32(k, _mm256_setzero_si256()), _mm256_set1_epi32(kDyn8Bins - 1));
  const __m256i base = _mm256_i32gather_epi32(bins.base, k, 4);
  const __m256 t = _mm256_i32gather_ps(bins.threshold, base, 4);
  const __m256i lo = _mm256_sub_epi32(base, _mm256_castps_si256(_mm256_cmp_ps(a, t, _CMP_GT_OQ)));  // true: -1
  __m256i neg = _mm256_andnot_si256(_mm256_cmpeq_epi32(lo, _mm256_setzero_si256()),
                                    _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ)));
  return _mm256_or_si256(lo, _mm256_and_si256(neg, _mm256_set1_epi32(0x80)));
}

QCCL_TARGET_AVX2 inline __m256 dyn8Values(__m256i code, __m256 absmax, const float* mag) {
  __m256 m = _mm256_i32gather_ps(mag, _mm256_and_si256(code, _mm256_set1_epi32(0x7f)), 4);
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, _mm256_set1_epi32(0x80)), 24);
  return _mm256_xor_ps(_mm256_mul_ps(m, absmax), _mm256_castsi256_ps(sign));  // -m as a sign flip
}

template <bool kRes>
QCCL_TARGET_AVX2 bool encodeDyn8T(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                  uint8_t* block) {
  float* v = ctx.scratch;
  __m256 amax = _mm256_setzero_ps();
  int bad = 0;
  for (uint32_t i = 0; i < m; i += 8) {
    __m256 x = stageV<kRes>(in, res, i);
    _mm256_storeu_ps(v + i, x);
    bad |= notFinite(x);
    amax = _mm256_max_ps(amax, absV(x));
  }
  alignas(32) float a8[8];
  _mm256_store_ps(a8, amax);
  float absmax = a8[0];
  for (int k = 1; k < 8; ++k) absmax = math::fmax2(absmax, a8[k]);
  if (bad || absmax == 0.0f) return scalarEncode(CodecId::kDyn8, ctx, in, res, m, base, block);
  storeF32(block, absmax);
  const Dyn8Bins& bins = dyn8Bins();
  const __m256 am = _mm256_set1_ps(absmax);
  for (uint32_t i = 0; i < m; i += 8) {
    __m256 x = _mm256_loadu_ps(v + i);
    __m256i code = dyn8Codes(x, am, bins);
    __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64((__m128i*)(block + 4 + i), _mm_packus_epi16(c16, c16));
    if (kRes) _mm256_storeu_ps(res + i, _mm256_sub_ps(x, dyn8Values(code, am, ctx.dyn8->magnitude)));
  }
  return false;
}

QCCL_TARGET_AVX2 bool encodeDyn8(const BucketCtx& ctx, const float* in, float* res, uint32_t m, uint64_t base,
                                 uint8_t* block) {
  if (m % 32) return scalarEncode(CodecId::kDyn8, ctx, in, res, m, base, block);
  return res ? encodeDyn8T<true>(ctx, in, res, m, base, block) : encodeDyn8T<false>(ctx, in, res, m, base, block);
}

QCCL_TARGET_AVX2 void decodeDyn8(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add) {
  if (m % 32) return scalarDecode(CodecId::kDyn8, ctx, block, m, out, add);
  const __m256 am = _mm256_set1_ps(loadF32(block));
  for (uint32_t i = 0; i < m; i += 8) {
    __m256i code = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(block + 4 + i)));
    _mm256_storeu_ps(out + i, addOut(dyn8Values(code, am, ctx.dyn8->magnitude), out + i, add));
  }
}

// ---------------------------------------------------------------------------------------------
// Casts
// ---------------------------------------------------------------------------------------------
enum Cast { kF32 = 0, kF16 = 1, kB16 = 2 };

template <int kCast>
QCCL_TARGET_AVX2 inline __m128i toHalf(__m256 v, __m256* d) {
  __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
  __m128i h;
  if (kCast == kF16) {
    h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7e00), nan16);
    *d = _mm256_cvtph_ps(h);
    return h;
  }
  __m256i x = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i h32 = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  h32 = _mm256_blendv_epi8(h32, _mm256_set1_epi32(0x7fc0), nan32);
  *d = _mm256_castsi256_ps(_mm256_slli_epi32(h32, 16));
  return _mm_packus_epi32(_mm256_castsi256_si128(h32), _mm256_extracti128_si256(h32, 1));
}

template <int kCast>
QCCL_TARGET_AVX2 inline __m256 fromHalf(const uint8_t* p) {
  __m128i h = _mm_loadu_si128((const __m128i*)p);
  __m256i x = _mm256_cvtepu16_epi32(h);
  if (kCast == kB16) return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  __m256 d = _mm256_cvtph_ps(h);
  __m256 nan = _mm256_cmp_ps(d, d, _CMP_UNORD_Q);
  if (_mm256_movemask_ps(nan) == 0) return d;
  // Keep the NaN payload bits exactly as math::halfToFloat does (the hardware quiets them).
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16);
  __m256i mant = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x3ff)), 13);
  __m256i bits = _mm256_or_si256(_mm256_or_si256(sign, mant), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_ps(d, _mm256_castsi256_ps(bits), nan);
}

template <int kCast, bool kRes>
QCCL_TARGET_AVX2 bool encodeCastT(const float* in, float* res, size_t n, uint8_t* payload) {
  const size_t vecN = n / 8 * 8;
  int bad = 0;
  for (size_t i = 0; i < vecN; i += 8) {
    __m256 v = stageV<kRes>(in, res, i);
    if (kCast == kF32) {
      bad |= notFinite(v);
      _mm256_storeu_ps((float*)(payload + 4 * i), v);
      if (kRes) _mm256_storeu_ps(res + i, _mm256_setzero_ps());
      continue;
    }
    __m256 d;
    _mm_storeu_si128((__m128i*)(payload + 2 * i), toHalf<kCast>(v, &d));
    __m256 dBad = _mm256_cmp_ps(absV(d), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ);
    bad |= _mm256_movemask_ps(dBad);
    if (kRes) _mm256_storeu_ps(res + i, _mm256_andnot_ps(dBad, _mm256_sub_ps(v, d)));
  }
  bool tailBad = false;
  if (vecN < n) {
    uint8_t* p = payload + (kCast == kF32 ? 4 : 2) * vecN;
    tailBad = scalarKernels().castEncode[kCast](in + vecN, kRes ? res + vecN : nullptr, n - vecN, p);
  }
  return bad != 0 || tailBad;
}

template <int kCast>
QCCL_TARGET_AVX2 bool encodeCast(const float* in, float* res, size_t n, uint8_t* payload) {
  return res ? encodeCastT<kCast, true>(in, res, n, payload) : encodeCastT<kCast, false>(in, res, n, payload);
}

template <int kCast>
QCCL_TARGET_AVX2 void decodeCast(const uint8_t* payload, size_t n, float* out, bool add) {
  const size_t vecN = n / 8 * 8;
  const size_t width = kCast == kF32 ? 4 : 2;
  for (size_t i = 0; i < vecN; i += 8) {
    __m256 d = kCast == kF32 ? _mm256_loadu_ps((const float*)(payload + 4 * i)) : fromHalf<kCast>(payload + 2 * i);
    _mm256_storeu_ps(out + i, addOut(d, out + i, add));
  }
  if (vecN < n) scalarKernels().castDecode[kCast](payload + width * vecN, n - vecN, out + vecN, add);
}

}  // namespace

const Kernels* avx2Kernels() {
  static const Kernels k = [] {
    Kernels r = scalarKernels();
    r.isa = "avx2";
    r.bucketEncode[(int)CodecId::kOneBit] = encodeSign<true>;
    r.bucketDecode[(int)CodecId::kOneBit] = decodeSign<true>;
    r.bucketEncode[(int)CodecId::kSignScale] = encodeSign<false>;
    r.bucketDecode[(int)CodecId::kSignScale] = decodeSign<false>;
    r.bucketDecodeSum[(int)CodecId::kOneBit] = decodeSignSum<true>;
    r.bucketDecodeSum[(int)CodecId::kSignScale] = decodeSignSum<false>;
    r.bucketEncodeGain[(int)CodecId::kOneBit] = r.bucketEncodeGain[(int)CodecId::kSignScale] = true;
    r.bucketEncode[(int)CodecId::kMaxMin] = encodeMaxMin;
    r.bucketDecode[(int)CodecId::kMaxMin] = decodeMaxMin;
    r.bucketEncode[(int)CodecId::kDyn8] = encodeDyn8;
    r.bucketDecode[(int)CodecId::kDyn8] = decodeDyn8;
    r.castEncode[kF32] = encodeCast<kF32>;
    r.castEncode[kF16] = encodeCast<kF16>;
    r.castEncode[kB16] = encodeCast<kB16>;
    r.castDecode[kF32] = decodeCast<kF32>;
    r.castDecode[kF16] = decodeCast<kF16>;
    r.castDecode[kB16] = decodeCast<kB16>;
    return r;
  }();
  return &k;
}

}  // namespace cpu
}  // namespace qccl

#else

namespace qccl {
namespace cpu {
const Kernels* avx2Kernels() { return nullptr; }
}  // namespace cpu
}  // namespace qccl

#endif
