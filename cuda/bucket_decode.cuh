// One warp decodes one bucket (decode or decodeAdd), with the geometry of the encoder: lane l owns
// elements 4l..4l+3 of every 128-element row, whose 4B code bits are contiguous on the wire.
// Mirrors the CPU decoders of src/codec/kernels_scalar.cc.
#pragma once

#include "cuda/bucket_common.cuh"

namespace qccl {
namespace cuda {
namespace detail {

/// A NaN maxmin value as x86 computes maxminValue(q, mn, maxminStep(mn, mx, B)) step by step
/// (only reached with NaN or infinite statistics, e.g. a non-finite bucket).
template <int B>
QCCL_HD float maxminNaN(uint32_t q, float mn, float mx) {
  const float t = propagateNaN(mx - mn, mx, mn);
  const float levels = (float)((1u << B) - 1u);
  const float step = propagateNaN(t / levels, t, levels);
  const float prod = propagateNaN((float)q * step, (float)q, step);
  return propagateNaN(mn + prod, mn, prod);
}

/// Decodes bucket `b`: out = decoded (ADD false) or out = out + decoded (ADD true).
/// mag: the dyn8 magnitude table (null for other codecs).
template <CodecId C, int B, bool ADD, class W>
QCCL_HD void decodeBucket(const W& w, const DecodeArgs& a, uint64_t b, const float* mag) {
  const uint64_t start = b * a.bucket;
  const uint32_t m = (uint32_t)(a.n - start < a.bucket ? a.n - start : a.bucket);
  const uint8_t* block = a.payload + b * a.blockBytes;
  const uint32_t lane = w.lane(), meta = math::metaBytes(C);
  const float s0 = loadFloat(block);
  const float s1 = meta == 8 ? loadFloat(block + 4) : 0.0f;
  float step = 0.0f;
  if constexpr (C == CodecId::kMaxMin) step = math::maxminStep(s0, s1, B);
  constexpr uint32_t kMask = (1u << B) - 1u;
  const uint8_t* words = block + meta;
  // 8-bit codes (a word per lane per row) go kBatch = 4 rows at a time: every load of the batch (the
  // code words and, with ADD, the output) is issued before any of its rows is decoded and stored,
  // so a warp keeps 4 rows of loads in flight instead of one (the stores of one row could alias the
  // next row's loads, so the compiler keeps them in order). Narrower codes go one row at a time:
  // the batch takes 62 registers instead of 38 there, occupancy falls from 75% to 50%, and they got
  // slower. Measured on an H200, decodeAdd at 1 GiB, mem_eff one row / 4 rows: maxmin8 0.90 / 0.96,
  // dyn8 0.91 / 0.96, maxmin4 0.82 / 0.76, maxmin2 0.87 / 0.79, onebit 0.91 / 0.92
  // (bench/data/gpu-h200-2026-11-28).
  constexpr uint32_t kBatch = B == 8 ? 4 : 1;
  for (uint32_t r0 = 0; r0 < m; r0 += kBatch * kRow) {
    uint32_t x[kBatch], cnt[kBatch];
    float o[kBatch][4];
    QCCL_UNROLL
    for (uint32_t j = 0; j < kBatch; ++j) {
      const uint32_t e0 = r0 + j * kRow + 4u * lane;
      cnt[j] = laneCount(m, e0);
      x[j] = 0;
      if (cnt[j] == 0) continue;  // also keeps the word read below inside the bucket's words
      // The lane's first element e0 has bit offset e0 * B; its 4B bits never straddle a word.
      const uint32_t bit = e0 * (uint32_t)B;
      x[j] = loadWord(words + 4u * (bit / 32u)) >> (bit % 32u);
      if constexpr (ADD) load4(a.out, start + e0, cnt[j], a.vec, o[j]);
    }
    QCCL_UNROLL
    for (uint32_t j = 0; j < kBatch; ++j) {
      if (cnt[j] == 0) continue;
      const uint64_t g = start + r0 + j * kRow + 4u * lane;
      float d[4];
      QCCL_UNROLL
      for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t q = (x[j] >> (k * (uint32_t)B)) & kMask;
        if constexpr (C == CodecId::kOneBit) {
          d[k] = q ? s0 : s1;
        } else if constexpr (C == CodecId::kSignScale) {
          d[k] = q ? s0 : -s0;
        } else if constexpr (C == CodecId::kMaxMin) {
          d[k] = math::maxminValue(q, s0, step);
          if (isNaN(d[k])) d[k] = maxminNaN<B>(q, s0, s1);
        } else {
          d[k] = math::dyn8Value((uint8_t)q, s0, mag);
          if (isNaN(d[k])) {  // magnitudes are finite, so the NaN is absmax's (x86: mag * absmax)
            const float mg = propagateNaN(d[k], mag[q & 0x7fu], s0);
            d[k] = (q & 0x80u) ? -mg : mg;
          }
        }
      }
      if constexpr (ADD) {
        QCCL_UNROLL
        for (int k = 0; k < 4; ++k) d[k] = addX86(o[j][k], d[k]);
      }
      store4(a.out, g, cnt[j], a.vec, d);
    }
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace qccl
