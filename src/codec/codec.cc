// Codec driver: configuration, sizes, the wire header, validation of untrusted bytes, and the walk
// over buckets. The per-bucket math lives in the ISA kernels (cpu_kernels.hpp).
#include "qccl/codec.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codec/codec_math.hpp"
#include "codec/cpu_kernels.hpp"
#include "qccl/error.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace qccl {
namespace {

bool isCast(CodecId c) { return c == CodecId::kFp32 || c == CodecId::kFp16 || c == CodecId::kBf16; }

/// The wire bit width of a codec, or -1 when `bits` is not allowed for it (0 = default).
int wireBits(CodecId c, int bits) {
  int fixed = 0;
  switch (c) {
    case CodecId::kFp32:
      fixed = 32;
      break;
    case CodecId::kFp16:
    case CodecId::kBf16:
      fixed = 16;
      break;
    case CodecId::kOneBit:
    case CodecId::kSignScale:
      fixed = 1;
      break;
    case CodecId::kDyn8:
      fixed = 8;
      break;
    case CodecId::kMaxMin:
      if (bits == 0) return 4;
      return (bits == 2 || bits == 4 || bits == 8) ? bits : -1;
    default:
      return -1;
  }
  return (bits == 0 || bits == fixed) ? fixed : -1;
}

bool validBucket(uint32_t b) { return b >= 32 && b <= kMaxBucket && b % 32 == 0; }

// Payload size with overflow detection; false when it does not fit in size_t.
bool payloadBytesChecked(CodecId c, int bits, uint32_t bucket, uint64_t n, uint64_t* out) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max() / 8;
  if (n > kMax) return false;
  uint64_t bytes = 0;
  if (isCast(c)) {
    bytes = c == CodecId::kFp32 ? n * 4 : (n * 2 + 3) / 4 * 4;
  } else {
    uint64_t full = n / bucket, rem = n % bucket;
    uint64_t per = math::bucketBlockBytes(c, bits, bucket);
    if (full > kMax / per) return false;
    bytes = full * per + (rem ? math::bucketBlockBytes(c, bits, rem) : 0);
  }
  if (bytes > std::numeric_limits<size_t>::max() - kWireHeaderBytes) return false;
  *out = bytes;
  return true;
}

[[noreturn]] void malformed(const std::string& msg) { QCCL_THROW(ErrorCode::kMalformed, "wire: " + msg); }

const math::Dyn8Tables& dyn8Tables() {
  static const math::Dyn8Tables tables = [] {
    math::Dyn8Tables t;
    math::fillDyn8Tables(&t);
    return t;
  }();
  return tables;
}

cpu::BucketCtx makeCtx(const CodecConfig& cfg, uint64_t rngOffset) {
  cpu::BucketCtx ctx;
  ctx.bits = cfg.bits;
  ctx.stochastic = cfg.stochastic;
  ctx.seed = cfg.seed;
  ctx.rngOffset = rngOffset;
  ctx.dyn8 = &dyn8Tables();
  // One bucket of staging per thread, reused across calls: no allocation on the hot path.
  thread_local std::vector<float> scratch;
  if (scratch.size() < cfg.bucket) scratch.resize(cfg.bucket);
  ctx.scratch = scratch.data();
  return ctx;
}

}  // namespace

namespace cpu {

namespace {

// out[0..n) *= s; the same single multiplication per element as a separate pass would make. The
// fixed-length inner loop is vectorized at -O2 too (GCC's cheap cost model takes no epilogues).
void scaleRange(float* out, size_t n, float s) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t j = 0; j < 16; ++j) out[i + j] = out[i + j] * s;
  }
  for (; i < n; ++i) out[i] = out[i] * s;
}

// out[0..n) = init[0..n) + the fp32 payload's floats: a sum's raw first term and its first fp32
// source in one pass, instead of copying init into out and adding the payload over it (the same
// single addition per element, in the order the decode's add makes it: out + decoded). The copy
// showed as 5% of all CPU in the fp32 ring across 4 unshaped emulated hosts; one pass makes this
// sum 0.84x the time on its own (bench/RESULTS.md, "The fp32 ring's sums in one pass").
void addFp32Payload(const float* init, const uint8_t* payload, float* out, size_t n) {
  size_t i = 0;
  float v[16];
  for (; i + 16 <= n; i += 16) {
    std::memcpy(v, payload + 4 * i, sizeof v);
    for (size_t j = 0; j < 16; ++j) out[i + j] = init[i + j] + v[j];
  }
  for (; i < n; ++i) {
    float x;
    std::memcpy(&x, payload + 4 * i, sizeof x);
    out[i] = init[i] + x;
  }
}

// Elements of a decodeSum's first term copied at a time (64 KiB: stays in L2 for the adds).
constexpr size_t kInitPieceElems = 16384;

// out = (out if add, or init if given) + decode(in[0]) + ... + decode(in[sources - 1]), then * scale,
// piece by piece (a bucket, or 4096 elements of a cast) so that out is written once while the piece
// is in cache. The sums and their order are those of one decode per source in turn followed by a
// scaling pass. Each finished piece then goes through the epilogue, if any, while still in cache.
void decodeSources(const Kernels& k, const WireInfo* infos, const void* const* in, size_t sources, float* out, size_t n,
                   bool add, float scale, const float* init = nullptr, const DecodeEpilogue* epi = nullptr) {
  const auto finish = [&](float* piece, size_t m) {
    if (scale != 1.0f) scaleRange(piece, m, scale);
    if (epi != nullptr && epi->fn != nullptr) epi->fn(epi->ctx, piece, m);
  };
  const CodecConfig& cfg = infos[0].cfg;
  for (size_t j = 0; j < sources; ++j) {
    if (infos[j].count != n)
      QCCL_THROW(ErrorCode::kMismatch,
                 "wire: count " + std::to_string(infos[j].count) + " but the caller expects " + std::to_string(n));
    const CodecConfig& c = infos[j].cfg;
    if (c.codec != cfg.codec || c.bits != cfg.bits || c.bucket != cfg.bucket || c.stochastic != cfg.stochastic)
      QCCL_THROW(ErrorCode::kMismatch, "wire: source " + std::to_string(j) + " is " + codecName(c.codec) +
                                           " but source 0 is " + codecName(cfg.codec) +
                                           " (or their bits or buckets differ)");
  }
  QCCL_CHECK(out != nullptr || n == 0, ErrorCode::kInvalidArgument, "decode: null output");
  if (n == 0) return;
  auto payload = [&](size_t j) { return static_cast<const uint8_t*>(in[j]) + kWireHeaderBytes; };
  if (isCast(cfg.codec)) {
    auto fn = k.castDecode[static_cast<int>(cfg.codec)];
    constexpr size_t kPiece = 4096;
    const size_t width = cfg.codec == CodecId::kFp32 ? 4 : 2;
    // A raw first term and an fp32 first source: summed in one pass (addFp32Payload).
    const bool fuseInit = sources > 0 && init != nullptr && init != out && cfg.codec == CodecId::kFp32;
    for (size_t base = 0; base < n; base += kPiece) {
      const size_t m = n - base < kPiece ? n - base : kPiece;
      size_t j = 0;
      if (fuseInit) {
        addFp32Payload(init + base, payload(0) + base * width, out + base, m);
        j = 1;
      } else if (init != nullptr && init != out) {
        std::memmove(out + base, init + base, m * sizeof(float));
      }
      for (; j < sources; ++j) fn(payload(j) + base * width, m, out + base, add || init || j > 0);
      finish(out + base, m);
    }
    return;
  }
  BucketCtx ctx = makeCtx(cfg, 0);
  BucketDecodeFn fn = k.bucketDecode[static_cast<int>(cfg.codec)];
  // Every bucket but the last is full, so bucket b starts b full blocks into each payload.
  const uint64_t fullBlock = math::bucketBlockBytes(cfg.codec, cfg.bits, cfg.bucket);
#if defined(__SSE2__)
  // A long plain decode of a 1-bit codec: each bucket decoded and scaled in a scratch buffer in L1,
  // then streamed to out with non-temporal stores (kStreamDecodeElems). The values are the same;
  // only the stores differ. On the 2-vCPU Zen 1 VM a 64 MiB write ran at 14.7 GB/s this way against
  // 8.1 with ordinary stores, which first read each line, and onebit's 64 MiB decode took 0.87-0.93x
  // the time; maxmin 4-bit's decode, which does more per element, took 1.04-1.05x (the extra pass
  // over the scratch buffer), so the other codecs keep ordinary stores (bench/RESULTS.md, "The
  // sign encodes from memory").
  const bool sign = cfg.codec == CodecId::kOneBit || cfg.codec == CodecId::kSignScale;
  if (sign && sources == 1 && !add && init == nullptr && (epi == nullptr || epi->fn == nullptr) &&
      n >= kStreamDecodeElems && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    float* t = ctx.scratch;  // one bucket; operator new's 16-byte alignment suits _mm_load_ps
    for (size_t base = 0, b = 0; base < n; base += cfg.bucket, ++b) {
      const uint32_t m = static_cast<uint32_t>(n - base < cfg.bucket ? n - base : cfg.bucket);
      fn(ctx, payload(0) + b * fullBlock, m, t, false);
      if (scale != 1.0f) scaleRange(t, m, scale);
      uint32_t i = 0;
      for (; i + 4 <= m; i += 4) _mm_stream_ps(out + base + i, _mm_load_ps(t + i));
      for (; i < m; ++i) out[base + i] = t[i];
    }
    _mm_sfence();  // the streamed stores are weakly ordered: make them visible before returning
    return;
  }
#endif
  // Bucket b of every source, summed into out + base: with the kernel's multi-source decode where
  // it has one (kMaxSumSources at a time), else one decode per source; the same sums either way.
  BucketDecodeSumFn sumFn = sources > 1 ? k.bucketDecodeSum[static_cast<int>(cfg.codec)] : nullptr;
  const uint8_t* blocks[kMaxSumSources];
  const auto decodeBucket = [&](size_t base, size_t b, uint32_t m, bool addFirst) {
    if (sumFn == nullptr) {
      for (size_t j = 0; j < sources; ++j) fn(ctx, payload(j) + b * fullBlock, m, out + base, addFirst || j > 0);
      return;
    }
    for (size_t j0 = 0; j0 < sources; j0 += kMaxSumSources) {
      const uint32_t kk = static_cast<uint32_t>(sources - j0 < kMaxSumSources ? sources - j0 : kMaxSumSources);
      for (uint32_t j = 0; j < kk; ++j) blocks[j] = payload(j0 + j) + b * fullBlock;
      sumFn(ctx, blocks, kk, m, out + base, addFirst || j0 > 0);
    }
  };
  if (init == nullptr || init == out) {
    for (size_t base = 0, b = 0; base < n; base += cfg.bucket, ++b) {
      const uint32_t m = static_cast<uint32_t>(n - base < cfg.bucket ? n - base : cfg.bucket);
      decodeBucket(base, b, m, add || init != nullptr);
      finish(out + base, m);
    }
    return;
  }
  // A first term from memory: copied a piece of whole buckets at a time (a long copy streams from
  // memory; one bucket at a time between the decodes did not), the piece then summed in cache.
  const size_t piece = (kInitPieceElems / cfg.bucket ? kInitPieceElems / cfg.bucket : 1) * cfg.bucket;
  for (size_t p0 = 0; p0 < n; p0 += piece) {
    const size_t pn = n - p0 < piece ? n - p0 : piece;
    std::memcpy(out + p0, init + p0, pn * sizeof(float));
    for (size_t base = p0, b = p0 / cfg.bucket; base < p0 + pn; base += cfg.bucket, ++b) {
      const uint32_t m = static_cast<uint32_t>(n - base < cfg.bucket ? n - base : cfg.bucket);
      decodeBucket(base, b, m, true);
    }
    finish(out + p0, pn);
  }
}

}  // namespace

void decodeParsedWith(const Kernels& k, const WireInfo& info, const void* in, float* out, size_t n, bool add,
                      float scale, const DecodeEpilogue* epilogue) {
  decodeSources(k, &info, &in, 1, out, n, add, scale, nullptr, epilogue);
}

void decodeSumParsedWith(const Kernels& k, const WireInfo* infos, const void* const* in, size_t sources, float* out,
                         size_t n, float scale, const float* init, const DecodeEpilogue* epilogue) {
  QCCL_CHECK(sources >= 1 ? infos != nullptr && in != nullptr : init != nullptr || n == 0, ErrorCode::kInvalidArgument,
             "decodeSum: needs at least one source");
  QCCL_CHECK(init == nullptr || out != nullptr || n == 0, ErrorCode::kInvalidArgument, "decode: null output");
  if (sources == 0) {  // init alone, a piece at a time when there is an epilogue to run in cache
    const size_t piece = epilogue != nullptr && epilogue->fn != nullptr ? kInitPieceElems : n;
    for (size_t p0 = 0; p0 < n; p0 += piece) {
      const size_t m = n - p0 < piece ? n - p0 : piece;
      if (init != out) std::memmove(out + p0, init + p0, m * sizeof(float));
      if (scale != 1.0f) scaleRange(out + p0, m, scale);
      if (epilogue != nullptr && epilogue->fn != nullptr) epilogue->fn(epilogue->ctx, out + p0, m);
    }
    return;
  }
  decodeSources(k, infos, in, sources, out, n, false, scale, init, epilogue);
}

WireInfo decodeWith(const Kernels& k, const void* in, size_t bytes, float* out, size_t n, bool add) {
  WireInfo info = parseWire(in, bytes);
  decodeParsedWith(k, info, in, out, n, add);
  return info;
}

}  // namespace cpu

void validateConfig(const CodecConfig& cfg) {
  int c = static_cast<int>(cfg.codec);
  QCCL_CHECK(c >= 0 && c < kNumCodecs, ErrorCode::kInvalidArgument, "codec: unknown codec id " + std::to_string(c));
  QCCL_CHECK(wireBits(cfg.codec, cfg.bits) > 0, ErrorCode::kInvalidArgument,
             std::string("codec: ") + codecName(cfg.codec) + " does not take bits = " + std::to_string(cfg.bits));
  QCCL_CHECK(!cfg.stochastic || cfg.codec == CodecId::kMaxMin, ErrorCode::kInvalidArgument,
             "codec: stochastic rounding is only defined for maxmin");
  if (!isCast(cfg.codec))
    QCCL_CHECK(validBucket(cfg.bucket), ErrorCode::kInvalidArgument,
               "codec: bucket " + std::to_string(cfg.bucket) + " is not a multiple of 32 in [32, 65536]");
}

CodecConfig resolveConfig(const CodecConfig& cfg) {
  validateConfig(cfg);
  CodecConfig r = cfg;
  r.bits = wireBits(cfg.codec, cfg.bits);
  if (isCast(cfg.codec)) r.bucket = 0;  // the casts have no buckets; the wire carries 0
  return r;
}

size_t payloadBytes(const CodecConfig& cfg, size_t n) {
  CodecConfig r = resolveConfig(cfg);
  uint64_t bytes = 0;
  QCCL_CHECK(payloadBytesChecked(r.codec, r.bits, r.bucket, n, &bytes), ErrorCode::kInvalidArgument,
             "codec: element count " + std::to_string(n) + " is too large");
  return static_cast<size_t>(bytes);
}

double compressionRatio(const CodecConfig& cfg, size_t n) {
  return 4.0 * static_cast<double>(n) / static_cast<double>(encodedBytes(cfg, n));
}

namespace cpu {

size_t encodeWith(const Kernels& k, const CodecConfig& cfg, const float* in, float* residual, size_t n, void* out,
                  size_t outCapacity, const EncodeParams& params) {
  CodecConfig r = resolveConfig(cfg);
  size_t total = encodedBytes(r, n);
  QCCL_CHECK(out != nullptr, ErrorCode::kInvalidArgument, "encode: null output");
  QCCL_CHECK(in != nullptr || n == 0, ErrorCode::kInvalidArgument, "encode: null input");
  QCCL_CHECK(outCapacity >= total, ErrorCode::kInvalidArgument,
             "encode: output capacity " + std::to_string(outCapacity) + " < " + std::to_string(total) + " bytes");

  QCCL_CHECK(params.feedbackGain > 0.0f && params.feedbackGain <= 1.0f, ErrorCode::kInvalidArgument,
             "encode: feedbackGain must be in (0, 1]");
  uint8_t* payload = static_cast<uint8_t*>(out) + kWireHeaderBytes;
  bool nonFinite = false;
  // Error control (EncodeParams::feedbackGain): each bucket's kernel sees g * residual in an L1
  // buffer, and what it leaves there gets the held-back part, residual - g * residual, added back.
  // The caller's residual is read and written once either way.
  const float gain = params.feedbackGain;
  const bool control = residual != nullptr && gain != 1.0f;
  // Pieces of at most `piece` elements (a bucket; the casts, which have none, 4096).
  const size_t piece = isCast(r.codec) ? 4096 : r.bucket;
  thread_local std::vector<float> fed;
  if (control && fed.size() < piece) fed.resize(piece);
  if (n > 0 && isCast(r.codec) && control) {
    for (size_t base = 0; base < n; base += piece) {
      const size_t m = n - base < piece ? n - base : piece;
      // A cast's payload is element by element: element `base` starts at payloadBytes(base).
      nonFinite |= encodeHeldBack(residual + base, m, gain, fed.data(), [&](float* f) {
        return k.castEncode[static_cast<int>(r.codec)](in + base, f, m, payload + payloadBytes(r, base));
      });
    }
  } else if (n > 0 && isCast(r.codec)) {
    nonFinite = k.castEncode[static_cast<int>(r.codec)](in, residual, n, payload);
  } else if (n > 0) {
    BucketCtx ctx = makeCtx(r, params.rngOffset);
    const uint64_t span = params.spanElems > n ? params.spanElems : n;
    ctx.streaming = span >= kStreamEncodeElems;
    ctx.prefetch = span >= kPrefetchEncodeElems;
    BucketEncodeFn fn = k.bucketEncode[static_cast<int>(r.codec)];
    // A kernel that does error control itself reads the caller's residual, as without it, and
    // saves the two passes over the L1 buffer (and prefetches the real next residual).
    const bool wrap = control && !k.bucketEncodeGain[static_cast<int>(r.codec)];
    if (control && !wrap) ctx.gain = gain;
    uint8_t* p = payload;
    for (size_t base = 0; base < n; base += r.bucket) {
      uint32_t m = static_cast<uint32_t>(n - base < r.bucket ? n - base : r.bucket);
      float* res = residual ? residual + base : nullptr;
      if (wrap)
        nonFinite |=
            encodeHeldBack(res, m, gain, fed.data(), [&](float* f) { return fn(ctx, in + base, f, m, base, p); });
      else
        nonFinite |= fn(ctx, in + base, res, m, base, p);
      p += math::bucketBlockBytes(r.codec, r.bits, m);
    }
  }

  WireHeader h;
  h.magic = kWireMagic;
  h.version = kWireVersion;
  h.codec = static_cast<uint8_t>(r.codec);
  h.bits = static_cast<uint8_t>(r.bits);
  h.flags = static_cast<uint8_t>((r.stochastic ? kFlagStochastic : 0) | (residual ? kFlagErrorFeedback : 0) |
                                 (nonFinite ? kFlagNonFinite : 0));
  h.bucket = r.bucket;
  h.seq = params.seq;
  h.count = n;
  h.payloadBytes = total - kWireHeaderBytes;
  std::memcpy(out, &h, sizeof(h));
  return total;
}

}  // namespace cpu

size_t encode(const CodecConfig& cfg, const float* in, float* residual, size_t n, void* out, size_t outCapacity,
              const EncodeParams& params) {
  return cpu::encodeWith(cpu::activeKernels(), cfg, in, residual, n, out, outCapacity, params);
}

WireInfo parseWire(const void* in, size_t bytes) {
  if (bytes < kWireHeaderBytes)
    malformed("truncated header: " + std::to_string(bytes) + " < " + std::to_string(kWireHeaderBytes) + " bytes");
  if (in == nullptr) malformed("null buffer");
  WireHeader h;
  std::memcpy(&h, in, sizeof(h));
  if (h.magic != kWireMagic) malformed("bad magic");
  if (h.version != kWireVersion) malformed("unsupported version " + std::to_string(h.version));
  if (h.codec >= kNumCodecs) malformed("unknown codec id " + std::to_string(h.codec));
  CodecId codec = static_cast<CodecId>(h.codec);
  if (h.bits == 0 || wireBits(codec, h.bits) != h.bits)
    malformed(std::string("bits ") + std::to_string(h.bits) + " invalid for " + codecName(codec));
  if (h.flags & ~kFlagsKnown) malformed("unknown flag bits");
  if ((h.flags & kFlagStochastic) && codec != CodecId::kMaxMin) malformed("stochastic flag on a non-maxmin codec");
  if (isCast(codec) ? h.bucket != 0 : !validBucket(h.bucket))
    malformed("bucket " + std::to_string(h.bucket) + " invalid for " + codecName(codec));
  uint64_t expect = 0;
  if (!payloadBytesChecked(codec, h.bits, h.bucket, h.count, &expect))
    malformed("count " + std::to_string(h.count) + " too large");
  if (h.payloadBytes != expect)
    malformed("payloadBytes " + std::to_string(h.payloadBytes) + " != " + std::to_string(expect) + " for count " +
              std::to_string(h.count));
  if (bytes - kWireHeaderBytes < expect)
    malformed("truncated payload: " + std::to_string(bytes - kWireHeaderBytes) + " < " + std::to_string(expect) +
              " bytes");

  WireInfo info;
  info.cfg.codec = codec;
  info.cfg.bits = h.bits;
  info.cfg.bucket = h.bucket;
  info.cfg.stochastic = (h.flags & kFlagStochastic) != 0;
  info.seq = h.seq;
  info.flags = h.flags;
  info.count = h.count;
  info.totalBytes = static_cast<size_t>(kWireHeaderBytes + expect);
  return info;
}

WireInfo decode(const void* in, size_t bytes, float* out, size_t n) {
  return cpu::decodeWith(cpu::activeKernels(), in, bytes, out, n, false);
}

WireInfo decodeAdd(const void* in, size_t bytes, float* out, size_t n) {
  return cpu::decodeWith(cpu::activeKernels(), in, bytes, out, n, true);
}

void decodeParsed(const WireInfo& info, const void* in, float* out, size_t n, bool add, float scale,
                  const DecodeEpilogue* epilogue) {
  cpu::decodeParsedWith(cpu::activeKernels(), info, in, out, n, add, scale, epilogue);
}

void decodeSumParsed(const WireInfo* infos, const void* const* in, size_t k, float* out, size_t n, float scale,
                     const float* init, const DecodeEpilogue* epilogue) {
  cpu::decodeSumParsedWith(cpu::activeKernels(), infos, in, k, out, n, scale, init, epilogue);
}

const char* codecName(CodecId id) noexcept {
  switch (id) {
    case CodecId::kFp32:
      return "fp32";
    case CodecId::kFp16:
      return "fp16";
    case CodecId::kBf16:
      return "bf16";
    case CodecId::kOneBit:
      return "onebit";
    case CodecId::kSignScale:
      return "signscale";
    case CodecId::kMaxMin:
      return "maxmin";
    case CodecId::kDyn8:
      return "dyn8";
  }
  return "unknown";
}

CodecId parseCodecName(const std::string& name) {
  if (name == "none") return CodecId::kFp32;
  for (int c = 0; c < kNumCodecs; ++c)
    if (name == codecName(static_cast<CodecId>(c))) return static_cast<CodecId>(c);
  QCCL_THROW(ErrorCode::kInvalidArgument, "unknown codec name '" + name + "'");
}

const char* cpuIsaName() noexcept { return cpu::activeKernels().isa; }

}  // namespace qccl
