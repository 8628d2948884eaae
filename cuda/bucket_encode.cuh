// One warp encodes one bucket. Follows the bucket rules of src/codec/cpu_kernels.hpp operation by
// operation (the CPU scalar kernels are the oracle); every bit-deciding step calls codec_math.hpp.
//
// Two passes over the bucket: pass 1 loads v = in + residual and reduces the statistics; pass 2
// quantizes, writes the residual and packs the words. Buckets of up to kCachedRows rows (512
// elements, the default bucket) keep their v in registers between the passes (16 floats per
// lane), so every input and residual byte is read once. Larger buckets reload v in pass 2 (the
// same loads give the same v), so register use does not grow with the bucket size; that reload
// is a second read of the bucket from L2 or memory. On an H100 the reloading path moved 0.66 of
// cudaMemcpy's bandwidth at 1 GiB for onebit and maxmin 4-bit (bench/RESULTS.md).
#pragma once

#include "cuda/bucket_common.cuh"

namespace qccl {
namespace cuda {
namespace detail {

/// Bucket statistics, uniform across the warp.
struct Stats {
  float s0 = 0.0f;   // onebit pos, signscale scale, maxmin min, dyn8 absmax
  float s1 = 0.0f;   // onebit neg, maxmin max
  bool bad = false;  // non-finite bucket
};

/// Rows of a bucket whose v stays in registers between the passes (kCachedRows * kRow elements).
constexpr uint32_t kCachedRows = 4;

/// Pass 1's per-lane accumulators: rows are added in increasing order, one lane's four elements
/// at a time, exactly as bucketStats always has.
template <CodecId C>
struct StatsAcc {
  float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float lo = math::bitsFloat(0x7f800000u), hi = C == CodecId::kDyn8 ? 0.0f : -math::bitsFloat(0x7f800000u);
  uint32_t cntPos = 0;
  bool finite = true;

  QCCL_HD void add(const float v[4], uint32_t cnt) {
    QCCL_UNROLL
    for (uint32_t k = 0; k < 4; ++k) {
      if (k >= cnt) continue;
      finite = finite && math::isFinite(v[k]);
      if constexpr (C == CodecId::kOneBit) {
        if (v[k] >= 0.0f) {
          acc0[k] = acc0[k] + v[k];
          ++cntPos;
        } else {
          acc1[k] = acc1[k] + v[k];
        }
      } else if constexpr (C == CodecId::kSignScale) {
        acc0[k] = acc0[k] + fabsf(v[k]);
      } else if constexpr (C == CodecId::kMaxMin) {
        lo = math::fmin2(lo, v[k]);
        hi = math::fmax2(hi, v[k]);
      } else {
        hi = math::fmax2(hi, fabsf(v[k]));
      }
    }
  }
};

/// The warp-wide statistics of m elements from the lanes' accumulators.
template <CodecId C, class W>
QCCL_HD Stats finishStats(const W& w, StatsAcc<C>& s, uint32_t m) {
  Stats st;
  st.bad = w.any(!s.finite);
  if constexpr (C == CodecId::kOneBit) {
    const float sp = canonicalSum(w, s.acc0), sn = canonicalSum(w, s.acc1);
    const uint32_t np = warpSumU32(w, s.cntPos), nn = m - np;
    st.s0 = np ? sp / (float)np : 0.0f;
    st.s1 = nn ? sn / (float)nn : 0.0f;
    st.bad = st.bad || !math::isFinite(st.s0) || !math::isFinite(st.s1);
  } else if constexpr (C == CodecId::kSignScale) {
    st.s0 = canonicalSum(w, s.acc0) / (float)m;
    st.bad = st.bad || !math::isFinite(st.s0);
  } else if constexpr (C == CodecId::kMaxMin) {
    float lo = s.lo, hi = s.hi;
    QCCL_UNROLL
    for (int h = 16; h >= 1; h >>= 1) {
      lo = math::fmin2(lo, w.shflXor(lo, h));
      hi = math::fmax2(hi, w.shflXor(hi, h));
    }
    // The min/max values agree across lanes; only the sign of a zero may not, and +0.0f fixes it.
    st.s0 = w.shflIdx(lo, 0) + 0.0f;
    st.s1 = w.shflIdx(hi, 0) + 0.0f;
  } else {
    float hi = s.hi;
    QCCL_UNROLL
    for (int h = 16; h >= 1; h >>= 1) hi = math::fmax2(hi, w.shflXor(hi, h));
    st.s0 = w.shflIdx(hi, 0);
  }
  return st;
}

/// Pass 1: statistics of bucket [start, start + m). With R > 0 (m <= R * kRow) the lane's v of
/// row r is left in cache[r] for pass 2; with R == 0 nothing is kept.
template <CodecId C, uint32_t R, class W>
QCCL_HD Stats bucketStats(const W& w, const EncodeArgs& a, uint64_t start, uint32_t m, float (*cache)[4]) {
  const uint32_t lane = w.lane();
  StatsAcc<C> s;
  if constexpr (R > 0) {
    QCCL_UNROLL
    for (uint32_t r = 0; r < R; ++r) {
      const uint32_t r0 = r * kRow;
      if (r0 >= m) break;
      const uint32_t e0 = r0 + 4u * lane, cnt = laneCount(m, e0);
      loadV(a, start + e0, cnt, cache[r]);
      s.add(cache[r], cnt);
    }
  } else {
    (void)cache;
    for (uint32_t r0 = 0; r0 < m; r0 += kRow) {
      const uint32_t e0 = r0 + 4u * lane, cnt = laneCount(m, e0);
      float v[4];
      loadV(a, start + e0, cnt, v);
      s.add(v, cnt);
    }
  }
  return finishStats<C>(w, s, m);
}

/// The canonical non-finite bucket: NaN statistics, zero words, residual +0.0f.
template <CodecId C, int B, class W>
QCCL_HD void encodeNonFinite(const W& w, const EncodeArgs& a, uint64_t start, uint32_t m, uint8_t* block) {
  const uint32_t lane = w.lane(), meta = math::metaBytes(C), words = (m * (uint32_t)B + 31u) / 32u;
  if (lane * 4u < meta) storeFloat(block + lane * 4u, math::quietNaN());
  for (uint32_t i = lane; i < words; i += 32u) storeWord(block + meta + 4u * i, 0u);
  if (a.res) {
    const float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint32_t r0 = 0; r0 < m; r0 += kRow) {
      const uint32_t e0 = r0 + 4u * lane;
      store4(a.res, start + e0, laneCount(m, e0), a.vec, z);
    }
  }
  if (lane == 0) w.setFlag(a.flag);
}

/// Codes (q[k], B bits each, 0 beyond cnt) and decoded values d[k] of one lane's four elements.
template <CodecId C, int B>
QCCL_HD void quantize4(const EncodeArgs& a, const Stats& st, const math::MaxMinParams& p, const float* thr,
                       const float* mag, uint64_t g, uint32_t cnt, const float v[4], uint32_t q[4], float d[4]) {
  float u[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  if constexpr (C == CodecId::kMaxMin) {
    if (a.stochastic && cnt > 0) {
      // g is a multiple of 4 (buckets are multiples of 32), so the lane's four elements share one
      // Philox block: the same words math::stochasticUniform(seed, rngOffset, g + k) picks.
      const uint64_t blk = g >> 2;
      const math::U32x4 ctr = {
          {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)a.rngOffset, (uint32_t)(a.rngOffset >> 32)}};
      const math::U32x4 r = math::philox4x32(ctr, (uint32_t)a.seed, (uint32_t)(a.seed >> 32));
      QCCL_UNROLL
      for (int k = 0; k < 4; ++k) u[k] = math::uniformFromBits(r.v[k]);
    }
  }
  QCCL_UNROLL
  for (uint32_t k = 0; k < 4; ++k) {
    q[k] = 0;
    d[k] = 0.0f;
    if (k >= cnt) continue;
    if constexpr (C == CodecId::kOneBit || C == CodecId::kSignScale) {
      q[k] = v[k] >= 0.0f ? 1u : 0u;
      d[k] = C == CodecId::kOneBit ? (q[k] ? st.s0 : st.s1) : (q[k] ? st.s0 : -st.s0);
    } else if constexpr (C == CodecId::kMaxMin) {
      q[k] = math::maxminLevel(v[k], p, u[k]);
      d[k] = math::maxminValue(q[k], p.mn, p.step);
    } else {
      // absmax == 0: every v is +-0, code 0 and d = +0.0f, so v - d == v bit for bit (the CPU
      // stores v itself as the residual).
      if (st.s0 != 0.0f) {
        q[k] = math::dyn8Encode(v[k], st.s0, thr);
        d[k] = math::dyn8Value((uint8_t)q[k], st.s0, mag);
      }
    }
  }
}

/// Pass 2 for one row: packs the lanes' codes into the row's words and stores them.
/// `rowWords` points at the row's first word; `valid` is how many words of the row exist.
template <int B, class W>
QCCL_HD void packRow(const W& w, const uint32_t q[4], uint8_t* rowWords, uint32_t valid) {
  const uint32_t lane = w.lane();
  if constexpr (B == 1) {
    uint32_t b[4];
    QCCL_UNROLL
    for (int k = 0; k < 4; ++k) b[k] = w.ballot(q[k] != 0);
    if (lane < 4u && lane < valid) storeWord(rowWords + 4u * lane, signWord(b, lane));
  } else {
    // Lane l holds 4B bits at bit offset 4B*l of the row; L = 8/B lanes share a word.
    constexpr uint32_t L = 8u / (uint32_t)B;
    uint32_t x = q[0] | (q[1] << B) | (q[2] << (2 * B)) | (q[3] << (3 * B));
    x <<= 4u * (uint32_t)B * (lane % L);
    QCCL_UNROLL
    for (uint32_t h = 1; h < L; h <<= 1) x |= w.shflXorU32(x, (int)h);
    if (lane % L == 0 && lane / L < valid) storeWord(rowWords + 4u * (lane / L), x);
  }
}

/// Pass 2 for one row of v: quantize, residual, pack.
template <CodecId C, int B, class W>
QCCL_HD void encodeRow(const W& w, const EncodeArgs& a, const Stats& st, const math::MaxMinParams& p, const float* thr,
                       const float* mag, uint64_t g, uint32_t cnt, const float v[4], uint8_t* rowWords,
                       uint32_t valid) {
  float d[4];
  uint32_t q[4];
  quantize4<C, B>(a, st, p, thr, mag, g, cnt, v, q, d);
  if (a.res) {
    QCCL_UNROLL
    for (int k = 0; k < 4; ++k) d[k] = v[k] - d[k];
    store4(a.res, g, cnt, a.vec, d);
  }
  packRow<B>(w, q, rowWords, valid);
}

/// Encodes bucket `b` of the call, keeping v in registers when R > 0 (m <= R * kRow).
template <CodecId C, int B, uint32_t R, class W>
QCCL_HD void encodeBucketRows(const W& w, const EncodeArgs& a, uint64_t b, const float* thr, const float* mag) {
  const uint64_t start = b * a.bucket;
  const uint32_t m = (uint32_t)(a.n - start < a.bucket ? a.n - start : a.bucket);
  uint8_t* block = a.payload + b * a.blockBytes;
  float cache[R > 0 ? R : 1][4];
  const Stats st = bucketStats<C, R>(w, a, start, m, cache);
  if (st.bad) {
    encodeNonFinite<C, B>(w, a, start, m, block);
    return;
  }
  const uint32_t lane = w.lane(), meta = math::metaBytes(C), words = (m * (uint32_t)B + 31u) / 32u;
  math::MaxMinParams p = {};
  if constexpr (C == CodecId::kMaxMin) p = math::maxminParams(st.s0, st.s1, B);
  if (lane == 0) {
    storeFloat(block, C == CodecId::kMaxMin ? p.mn : st.s0);
    if (meta == 8) storeFloat(block + 4, C == CodecId::kMaxMin ? p.mx : st.s1);
  }
  constexpr uint32_t kWordsPerRow = 4u * (uint32_t)B;
  if constexpr (R > 0) {
    QCCL_UNROLL
    for (uint32_t r = 0; r < R; ++r) {
      const uint32_t r0 = r * kRow, wr = r * kWordsPerRow;
      if (r0 >= m) break;
      const uint32_t e0 = r0 + 4u * lane;
      encodeRow<C, B>(w, a, st, p, thr, mag, start + e0, laneCount(m, e0), cache[r], block + meta + 4u * wr,
                      words - wr);
    }
  } else {
    for (uint32_t r0 = 0, wr = 0; r0 < m; r0 += kRow, wr += kWordsPerRow) {
      const uint32_t e0 = r0 + 4u * lane, cnt = laneCount(m, e0);
      float v[4];
      loadV(a, start + e0, cnt, v);
      encodeRow<C, B>(w, a, st, p, thr, mag, start + e0, cnt, v, block + meta + 4u * wr, words - wr);
    }
  }
}

/// Encodes bucket `b` of the call. thr/mag: dyn8 tables (null for other codecs).
template <CodecId C, int B, class W>
QCCL_HD void encodeBucket(const W& w, const EncodeArgs& a, uint64_t b, const float* thr, const float* mag) {
  if (a.bucket <= kCachedRows * kRow) {
    encodeBucketRows<C, B, kCachedRows>(w, a, b, thr, mag);
  } else {
    encodeBucketRows<C, B, 0>(w, a, b, thr, mag);
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace qccl
