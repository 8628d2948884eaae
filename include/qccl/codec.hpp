// qccl codecs: stateless encode / decode / decodeAdd of fp32 buffers into the wire format
// (wire_format.hpp). The caller owns the error-feedback residual memory.
//
// The CPU functions here are the reference and the test oracle; the CUDA launchers in
// qccl/cuda_codec.hpp produce the same bytes (bit for bit for deterministic codecs; for
// stochastic rounding, given the same seed and rngOffset).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "qccl/wire_format.hpp"

namespace qccl {

/// How to encode. Stateless: the same config and input always give the same bytes.
struct CodecConfig {
  CodecId codec = CodecId::kFp32;
  int bits = 0;             ///< 0 = the codec's default (maxmin: 4); maxmin takes 2, 4 or 8
  uint32_t bucket = 512;    ///< elements per bucket; a multiple of 32 in [32, kMaxBucket]
  bool stochastic = false;  ///< maxmin only: stochastic rounding instead of nearest
  uint64_t seed = 0;        ///< stochastic rounding key (Philox4x32-10)
};

/// Per-call encode parameters.
struct EncodeParams {
  uint32_t seq = 0;        ///< copied into the header
  uint64_t rngOffset = 0;  ///< stochastic rounding stream: element i of this call uses Philox
                           ///< counter {(i/4) lo, (i/4) hi, rngOffset lo, rngOffset hi}, word i%4
  /// The contiguous range this call is one piece of, in elements (a schedule's chunk of a shard:
  /// the shard's size); 0 = the call alone. The kernels judge by it whether the data comes from
  /// memory (and prefetch ahead) or is likely still cached. It does not change the bytes.
  uint64_t spanElems = 0;
  /// Error control (qcclMomentumConfig_t.feedbackGain): the codec quantizes in + g * residual, and
  /// the residual it leaves is (in + g * residual) - decoded + (residual - g * residual): the part of
  /// the old residual held back stays in it. 1 = plain error feedback. Only with a residual.
  float feedbackGain = 1.0f;
};

/// Throws Error(kInvalidArgument) when the config is not valid.
void validateConfig(const CodecConfig& cfg);

/// Config with bits resolved to the codec's wire bit width (fp32 32, fp16/bf16 16, ...).
CodecConfig resolveConfig(const CodecConfig& cfg);

/// Payload bytes (after the header) for n elements. Exact: every codec is fixed-rate.
size_t payloadBytes(const CodecConfig& cfg, size_t n);

/// Header + payload bytes for n elements. encode() writes exactly this many bytes.
inline size_t encodedBytes(const CodecConfig& cfg, size_t n) { return kWireHeaderBytes + payloadBytes(cfg, n); }

/// Same as encodedBytes (kept for the GUIDE's interface name).
inline size_t maxEncodedBytes(const CodecConfig& cfg, size_t n) { return encodedBytes(cfg, n); }

/// Compression ratio of fp32 input: 4n / encodedBytes(n), header included.
double compressionRatio(const CodecConfig& cfg, size_t n);

/// Fused encode, one pass per bucket: v = in + residual; statistics; pack; residual = v - decoded(v).
/// residual may be null (no error feedback). `in` and `residual` may alias each other only if equal.
/// Pointers need no alignment. outCapacity must be >= encodedBytes(cfg, n). Returns bytes written.
size_t encode(const CodecConfig& cfg, const float* in, float* residual, size_t n, void* out, size_t outCapacity,
              const EncodeParams& params = {});

/// Parsed and validated header.
struct WireInfo {
  CodecConfig cfg;  ///< codec, bits, bucket, stochastic (seed is not on the wire)
  uint32_t seq = 0;
  uint8_t flags = 0;
  uint64_t count = 0;
  size_t totalBytes = 0;  ///< header + payload
};

/// Validates a header and its size against `bytes` available. Throws Error(kMalformed) with a
/// message saying which field is wrong. Reads at most kWireHeaderBytes.
WireInfo parseWire(const void* in, size_t bytes);

/// out[0..n) = decode(in). Validates first (parseWire + count == n, else kMismatch). Returns the info.
WireInfo decode(const void* in, size_t bytes, float* out, size_t n);

/// out[0..n) += decode(in), fused. Same validation as decode.
WireInfo decodeAdd(const void* in, size_t bytes, float* out, size_t n);

/// A rewrite of a decode's finished values while they are in cache: `fn(ctx, out, n)` is called
/// once for each piece of the output (a bucket, or a few thousand elements of a cast) right after
/// the piece's last addition and scaling, with out pointing into the decode's `out`. An
/// allreduce's epilogue (qcclAllreduceEpilogue) runs through it; a null fn does nothing.
struct DecodeEpilogue {
  void (*fn)(const void* ctx, float* out, size_t n) = nullptr;
  const void* ctx = nullptr;
};

/// decode (add = false) or decodeAdd (add = true) of bytes that parseWire() already validated:
/// `info` must be parseWire's result for these bytes. Skips the second parse; still checks
/// info.count == n (Error kMismatch). With `scale` != 1 every element written is then multiplied
/// by it, bucket by bucket while the bucket is in cache: bit for bit the decode followed by a pass
/// of out[i] *= scale (an average's 1/n on the call's last write of out). With `epilogue`, each
/// piece of out is then handed to it (DecodeEpilogue), each element exactly once.
void decodeParsed(const WireInfo& info, const void* in, float* out, size_t n, bool add, float scale = 1.0f,
                  const DecodeEpilogue* epilogue = nullptr);

/// out[0..n) = (decode(in[0]) + decode(in[1]) + ... + decode(in[k-1])) * scale, summed left to
/// right: bit for bit decodeParsed(in[0], add = false) followed by decodeParsed(in[j], add = true)
/// for j = 1..k-1 and then the scaling, but bucket by bucket, so that out is written once while
/// each bucket is in cache instead of read and written k times. Every in[j] must have been
/// validated by parseWire() into infos[j]; all must share one codec configuration (kMismatch) and
/// hold n elements (kMismatch). k >= 1.
/// With `init` (n floats, may be `out` itself) the sum starts from it instead:
/// out = (init + decode(in[0]) + ... + decode(in[k-1])) * scale, left to right; k may then be 0.
/// `epilogue` as in decodeParsed.
void decodeSumParsed(const WireInfo* infos, const void* const* in, size_t k, float* out, size_t n, float scale = 1.0f,
                     const float* init = nullptr, const DecodeEpilogue* epilogue = nullptr);

/// "fp32", "fp16", "bf16", "onebit", "signscale", "maxmin", "dyn8".
const char* codecName(CodecId id) noexcept;

/// Parses a codec name (also "none" for fp32). Throws Error(kInvalidArgument) on unknown names.
CodecId parseCodecName(const std::string& name);

/// Which CPU implementation runs: "avx512", "avx2" or "scalar". QCCL_CPU_ISA=scalar|avx2|avx512
/// caps the choice (for testing); the default is the best the CPU supports.
const char* cpuIsaName() noexcept;

}  // namespace qccl
