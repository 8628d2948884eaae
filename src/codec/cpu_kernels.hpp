// Internal interface between the codec driver (codec.cc) and the per-ISA CPU kernels.
//
// The driver validates arguments, writes the header and walks the buckets; a kernel handles one
// bucket (bucket codecs) or one whole buffer (the casts). Every ISA variant must produce exactly
// the bytes, residuals and decoded values of the scalar variant (kernels_scalar.cc), which is the
// reference: it follows codec_math.hpp operation by operation.
//
// Bucket rules that codec_math.hpp leaves to the codec (the CUDA kernels follow the same ones):
//   v[i] = in[i] + residual[i] with error feedback, v[i] = in[i] (unchanged, -0.0f kept) without.
//   onebit:    pos = sumPos / cntPos over v >= 0 (0.0f when cntPos == 0), neg likewise over v < 0;
//              sums in the canonical reduction order; bit = (v >= 0).
//   signscale: scale = sum|v| / m in the canonical order; bit = (v >= 0).
//   maxmin:    min/max of v plus +0.0f, maxminParams(); level = maxminLevel(v, p, u) with u = 0.5f
//              or stochasticUniform(seed, rngOffset, element index within the encode call).
//   dyn8:      absmax = max |v|; absmax == 0 gives all-zero codes.
//   A bucket whose v holds NaN/Inf, or whose statistics are not finite (a sum that overflowed), is
//   written with every statistic = quietNaN() and all payload words zero; its residual becomes +0.0f.
//   Residual of a finite bucket: r = v - decoded(v).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codec/codec_math.hpp"
#include "qccl/codec.hpp"

namespace qccl {
namespace cpu {

// Unaligned little-endian loads and stores of wire words (wire bytes may sit at any offset).
inline uint16_t loadU16(const uint8_t* p) {
  uint16_t u;
  std::memcpy(&u, p, 2);
  return u;
}
inline uint32_t loadU32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
inline void storeU32(uint8_t* p, uint32_t u) { std::memcpy(p, &u, 4); }
inline float loadF32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline void storeF32(uint8_t* p, float f) { std::memcpy(p, &f, 4); }

/// Per-call parameters a bucket kernel needs besides the data.
struct BucketCtx {
  int bits = 0;
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t rngOffset = 0;
  const math::Dyn8Tables* dyn8 = nullptr;
  float* scratch = nullptr;  ///< room for one bucket (v in an encode, a streamed decode's bucket); L1-sized
  /// The encode call's input and residual do not fit in the L2 cache (kStreamEncodeElems): a
  /// kernel may then stage v = in + res in `scratch` in one sequential pass, which streams from
  /// memory faster than its own access pattern does (AVX2 sign encodes).
  bool streaming = false;
  /// The call's input and residual fill a last-level cache of 8 MiB or more (kPrefetchEncodeElems):
  /// a kernel that streams may then request the next bucket's input and residual while it works on
  /// this one (AVX2 sign and maxmin encodes). Below that the data is often still cached from
  /// whatever wrote it, and the prefetches only cost instructions. Judged by the range the call is
  /// a piece of (EncodeParams::spanElems) where that is larger than the call.
  bool prefetch = false;
  /// Error control (EncodeParams::feedbackGain) inside the kernel, for the kernels that take it
  /// (Kernels::bucketEncodeGain); 1 for the others, which encodeWith feeds g * residual instead.
  float gain = 1.0f;
};

/// Error control around one encode of m elements (EncodeParams::feedbackGain = gain): encode(fed)
/// runs on fed = gain * res (m floats of the caller's), and res becomes what it leaves in fed plus
/// res - gain * res. The generic path of every kernel that does not do it itself
/// (Kernels::bucketEncodeGain), and those kernels' own fallback.
template <typename Encode>
inline bool encodeHeldBack(float* res, size_t m, float gain, float* fed, Encode&& encode) {
  for (size_t i = 0; i < m; i++) fed[i] = gain * res[i];
  const bool nonFinite = encode(fed);
  // res is still the old residual (the encode wrote fed): the part held back, res - gain * res,
  // is computed again from it, the same float as fed's was.
  for (size_t i = 0; i < m; i++) res[i] = fed[i] + (res[i] - gain * res[i]);
  return nonFinite;
}

/// Encode calls of at least this many elements (or pieces of a range of that many,
/// EncodeParams::spanElems) set BucketCtx::streaming: their input and residual (8 bytes per element)
/// exceed a 512 KiB L2 cache.
constexpr size_t kStreamEncodeElems = 65536;

/// Encode calls of at least this many elements set BucketCtx::prefetch: 8 MiB of input and residual,
/// the 1-bit codecs' whole pipeline chunk (options.hpp, chunkBytesFor). On the Zen 1 VM the AVX2
/// onebit encode of a 1 MiB buffer that stays in its 8 MiB L3 ran at 0.92-0.94x the speed with the
/// prefetches (bench/RESULTS.md, "The next bucket prefetched").
constexpr size_t kPrefetchEncodeElems = size_t{1} << 20;

/// A plain decode (no add, no first term, no epilogue) of a 1-bit codec of at least this many
/// elements (1 MiB of output, twice the L2 cache) writes its output with non-temporal stores:
/// nothing of it would stay in cache, and the stores then skip reading each output line first.
constexpr size_t kStreamDecodeElems = 262144;

/// Encodes one bucket of m elements (1 <= m <= kMaxBucket) into `block` (bucketBlockBytes bytes,
/// any alignment). `base` is the index of the bucket's first element within the encode call.
/// residual may be null. Returns true when the bucket was non-finite.
using BucketEncodeFn = bool (*)(const BucketCtx& ctx, const float* in, float* residual, uint32_t m, uint64_t base,
                                uint8_t* block);

/// Decodes one bucket: out[i] = decoded (add == false) or out[i] = out[i] + decoded (add == true).
using BucketDecodeFn = void (*)(const BucketCtx& ctx, const uint8_t* block, uint32_t m, float* out, bool add);

/// Decodes the same bucket of k sources (1 <= k <= kMaxSumSources) and sums them: out[i] =
/// ((out[i] + d0[i]) + d1[i]) + ... (add == true) or (d0[i] + d1[i]) + ... (add == false), bit for
/// bit k BucketDecodeFn calls in source order, with the running sum kept in registers.
constexpr uint32_t kMaxSumSources = 8;
using BucketDecodeSumFn = void (*)(const BucketCtx& ctx, const uint8_t* const* blocks, uint32_t k, uint32_t m,
                                   float* out, bool add);

/// Encodes a whole cast buffer (fp32/fp16/bf16). Returns true when any value was or became non-finite.
using CastEncodeFn = bool (*)(const float* in, float* residual, size_t n, uint8_t* payload);
using CastDecodeFn = void (*)(const uint8_t* payload, size_t n, float* out, bool add);

/// One ISA's kernels, indexed by CodecId.
struct Kernels {
  const char* isa;
  CastEncodeFn castEncode[3];  // fp32, fp16, bf16
  CastDecodeFn castDecode[3];
  BucketEncodeFn bucketEncode[kNumCodecs];  // entries for the bucket codecs only
  BucketDecodeFn bucketDecode[kNumCodecs];
  BucketDecodeSumFn bucketDecodeSum[kNumCodecs];  ///< optional (null: one bucketDecode per source)
  /// bucketEncode[c] does error control itself (BucketCtx::gain), with the bits and the residual
  /// encodeWith's generic error control would give: it sees in + g r, and keeps what it leaves
  /// plus r - g r.
  bool bucketEncodeGain[kNumCodecs];
};

const Kernels& scalarKernels();
/// Null when the build cannot produce that ISA's kernels.
const Kernels* avx2Kernels();
const Kernels* avx512Kernels();

/// Fills the cast entries of an AVX-512 / AVX2 table (kernels_avx512_cast.cc, kernels_avx2.cc).
void setAvx512Casts(Kernels* k);

/// The kernels selected once at startup (QCCL_CPU_ISA caps the choice).
const Kernels& activeKernels();
/// Kernels for a named ISA if the CPU and the build support it, else null ("scalar", "avx2", "avx512").
const Kernels* kernelsFor(const char* isa);

/// encode() / decode() / decodeAdd() with the given kernels instead of the active ones (the ISA
/// equivalence tests run every available ISA in one process).
size_t encodeWith(const Kernels& k, const CodecConfig& cfg, const float* in, float* residual, size_t n, void* out,
                  size_t outCapacity, const EncodeParams& params);
WireInfo decodeWith(const Kernels& k, const void* in, size_t bytes, float* out, size_t n, bool add);
void decodeParsedWith(const Kernels& k, const WireInfo& info, const void* in, float* out, size_t n, bool add,
                      float scale = 1.0f, const DecodeEpilogue* epilogue = nullptr);
void decodeSumParsedWith(const Kernels& k, const WireInfo* infos, const void* const* in, size_t sources, float* out,
                         size_t n, float scale = 1.0f, const float* init = nullptr,
                         const DecodeEpilogue* epilogue = nullptr);

/// Canonical bucket sum (codec_math.hpp): 128 slots, 32 lanes of four, halving fold.
inline float foldSlots(const float* acc) {
  float s[math::kLanes];
  for (int l = 0; l < math::kLanes; ++l) s[l] = (acc[4 * l] + acc[4 * l + 1]) + (acc[4 * l + 2] + acc[4 * l + 3]);
  for (int h = math::kLanes / 2; h >= 1; h >>= 1)
    for (int l = 0; l < h; ++l) s[l] = s[l] + s[l + h];
  return s[0];
}

}  // namespace cpu
}  // namespace qccl
