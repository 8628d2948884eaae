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
  for (uint32_t r0 = 0; r0 < m; r0 += kRow) {
    const uint32_t e0 = r0 + 4u * lane, cnt = laneCount(m, e0);
    if (cnt == 0) continue;  // also keeps the word read below inside the bucket's words
    // The lane's first element e0 has bit offset e0 * B; its 4B bits never straddle a word.
    const uint32_t bit = e0 * (uint32_t)B;
    const uint32_t x = loadWord(words + 4u * (bit / 32u)) >> (bit % 32u);
    const uint64_t g = start + e0;
    float d[4];
    QCCL_UNROLL
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t q = (x >> (k * (uint32_t)B)) & kMask;
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
          const float m = propagateNaN(d[k], mag[q & 0x7fu], s0);
          d[k] = (q & 0x80u) ? -m : m;
        }
      }
    }
    if constexpr (ADD) {
      float o[4];
      load4(a.out, g, cnt, a.vec, o);
      QCCL_UNROLL
      for (int k = 0; k < 4; ++k) d[k] = addX86(o[k], d[k]);
    }
    store4(a.out, g, cnt, a.vec, d);
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace qccl
