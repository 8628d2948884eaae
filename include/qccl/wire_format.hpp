// The qccl wire format: the one place that defines the bytes an encoded chunk has.
//
// Every encoded chunk is self-describing: a 32-byte header followed by the payload.
// All integers and floats are little-endian; the header is naturally aligned.
//
//   offset size field
//   0      4    magic        0x4C434351 ("QCCL" read as bytes)
//   4      1    version      kWireVersion (1)
//   5      1    codec        CodecId
//   6      1    bits         bits per element on the wire (32 fp32, 16 fp16/bf16, 1 onebit/signscale,
//                            2/4/8 maxmin, 8 dyn8)
//   7      1    flags        bit 0: stochastic rounding was used; bit 1: error feedback was applied;
//                            bit 2: at least one bucket held NaN/Inf; other bits must be zero
//   8      4    bucket       elements per bucket (multiple of 32, 32..kMaxBucket); 0 for the casts
//   12     4    seq          sequence number set by the caller (collectives: call counter)
//   16     8    count        number of fp32 elements encoded
//   24     8    payloadBytes bytes after the header; must equal payloadBytes(codec, bits, bucket, count)
//
// Payload by codec (buckets are consecutive; the last bucket holds m = count - b*bucket <= bucket elements):
//   fp32        count * 4 bytes, raw IEEE binary32.
//   fp16/bf16   count * 2 bytes, padded with zeros to a multiple of 4. Round to nearest even.
//   onebit      per bucket: float pos, float neg, then ceil(m/32) uint32 words of sign bits.
//               Element i of the bucket is bit (i % 32) of word (i / 32); 1 means v >= 0 and
//               decodes to pos (the mean of the bucket's v >= 0), 0 decodes to neg (mean of v < 0).
//   signscale   per bucket: float scale (mean |v|), then ceil(m/32) uint32 words of sign bits as above;
//               1 decodes to +scale, 0 to -scale.
//   maxmin      per bucket: float min, float max, then ceil(m*bits/32) uint32 words; element i holds a
//               `bits`-wide unsigned level q at bit offset (i*bits) % 32 of word (i*bits) / 32 and
//               decodes to min + q * ((max - min) / (2^bits - 1)).
//   dyn8        per bucket: float absmax, then m bytes padded with zeros to a multiple of 4. Byte c
//               decodes to sign(c) * dyn8Magnitude(c & 0x7f) * absmax (see codec_math.hpp).
//
// Non-finite input: a bucket that holds NaN or Inf (after adding the residual) is sent with its
// statistics set to NaN, so every element of it decodes to NaN and a mixed-precision loss scaler
// still sees the overflow; its residual is reset to zero. The casts (fp32/fp16/bf16) pass
// non-finite values through element by element (Inf stays Inf) and reset those residuals to zero.
//
// Collectives (src/core/executor.hpp, "Raw fp32"): a message stream of the fp32 codec sends its
// first chunk as above and every later chunk as the bare payload, count * 4 bytes of binary32 with
// no header; the receiver checks the first chunk's header and each later chunk's exact size.
//
// A decoder treats the bytes as untrusted: it checks magic, version, codec, bits, bucket, flags,
// count and payloadBytes against the caller's expectation before it reads the payload.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qccl {

/// Codec identifiers; values are stable on the wire and equal the C API's qcclCodec_t.
enum class CodecId : uint8_t {
  kFp32 = 0,       ///< uncompressed
  kFp16 = 1,       ///< IEEE half, round to nearest even
  kBf16 = 2,       ///< bfloat16, round to nearest even
  kOneBit = 3,     ///< 1-bit SGD (sign + two per-bucket means)
  kSignScale = 4,  ///< EF-signSGD (sign + per-bucket mean |v|)
  kMaxMin = 5,     ///< k-bit linear quantization between per-bucket min and max
  kDyn8 = 6,       ///< 8-bit dynamic tree quantization with per-bucket absmax
};
constexpr int kNumCodecs = 7;

constexpr uint32_t kWireMagic = 0x4C434351u;  // "QCCL"
constexpr uint8_t kWireVersion = 1;
constexpr size_t kWireHeaderBytes = 32;
constexpr uint32_t kMaxBucket = 1u << 16;

enum WireFlags : uint8_t {
  kFlagStochastic = 1u << 0,
  kFlagErrorFeedback = 1u << 1,
  kFlagNonFinite = 1u << 2,
  kFlagsKnown = kFlagStochastic | kFlagErrorFeedback | kFlagNonFinite,
};

/// The 32-byte header, exactly as on the wire (little-endian hosts only).
struct WireHeader {
  uint32_t magic;
  uint8_t version;
  uint8_t codec;
  uint8_t bits;
  uint8_t flags;
  uint32_t bucket;
  uint32_t seq;
  uint64_t count;
  uint64_t payloadBytes;
};
static_assert(sizeof(WireHeader) == kWireHeaderBytes, "wire header must be 32 bytes");

}  // namespace qccl
