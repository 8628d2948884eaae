// qccl CUDA codecs: the same encode / decode / decodeAdd as qccl/codec.hpp, on device memory.
//
// Available when the library is built with CUDA (QCCL_HAVE_CUDA == 1). This header needs no CUDA
// headers: a stream is passed as `void*` and is a cudaStream_t (nullptr = the legacy default stream).
//
// Every function is stream-ordered and asynchronous: it enqueues kernels on `stream` and returns;
// none allocates device memory or synchronizes. The bytes written equal the CPU encoder's bytes
// (qccl::encode) bit for bit, for every codec; stochastic rounding matches given the same
// CodecConfig::seed and EncodeParams::rngOffset. Outputs that are NaN carry the payload x86
// arithmetic gives (the CPU codec's), not the GPU's canonical NaN.
//
// Alignment: float and uint16_t arrays must be aligned to their element size and wire buffers to
// 4 bytes (what cudaMalloc plus whole-element offsets always gives); anything else is rejected
// with Error(kInvalidArgument). 16-byte alignment is not required: the kernels use 128-bit loads
// when every pointer allows them and a scalar path otherwise, with identical results.
//
// Errors: invalid arguments throw qccl::Error(kInvalidArgument) before anything is enqueued; a
// failed launch or CUDA call throws qccl::Error(kCudaError) whose message holds the CUDA error
// string. Errors of kernels that already run asynchronously surface at the caller's next
// synchronization, as with any CUDA library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qccl/codec.hpp"

namespace qccl {
namespace cuda {

/// True when the CUDA runtime reports at least one usable device. Never throws.
bool deviceAvailable() noexcept;

/// Device workspace bytes that encode() needs for n elements (small and independent of n today;
/// call it anyway). The workspace must be 16-byte aligned; its content need not be initialized
/// and is not preserved, so one workspace may serve consecutive encodes on the same stream (not
/// concurrent encodes on different streams). Throws Error(kInvalidArgument) when cfg is invalid.
size_t encodeWorkspaceBytes(const CodecConfig& cfg, size_t n);

/// Fused encode on the device: v = in + residual; bucket statistics; pack; residual = v - decoded(v).
/// Writes the wire header and payload (exactly qccl::encodedBytes(cfg, n) bytes) to out_d.
///
/// @param cfg            codec configuration (validated; throws kInvalidArgument when invalid)
/// @param in_d           n fp32 values in device memory
/// @param residual_d     n fp32 error-feedback values, read and updated; nullptr = no error feedback.
///                       May equal in_d; must not otherwise overlap it.
/// @param n              element count (0 is valid: a header with no payload)
/// @param out_d          device buffer for the encoded chunk, 4-byte aligned
/// @param outCapacity    bytes available at out_d; must be >= encodedBytes(cfg, n)
/// @param params         header sequence number and stochastic-rounding counter offset
/// @param workspace_d    device scratch of at least encodeWorkspaceBytes(cfg, n) bytes, 16-byte aligned
/// @param workspaceBytes bytes available at workspace_d
/// @param stream         cudaStream_t to enqueue on
/// @return bytes written (encodedBytes(cfg, n)); the bytes are ready when the stream reaches them.
size_t encode(const CodecConfig& cfg, const float* in_d, float* residual_d, size_t n, void* out_d, size_t outCapacity,
              const EncodeParams& params, void* workspace_d, size_t workspaceBytes, void* stream);

/// out_d[0..n) = decode(wire). `info` is the header as parsed and validated on the host by
/// qccl::parseWire (the kernels trust it and do not re-read the device header); wire_d points at
/// the header (the payload starts kWireHeaderBytes after it) and holds info.totalBytes bytes.
/// Throws Error(kMismatch) when info.count != n, and Error(kInvalidArgument) when info is not a
/// consistent header (codec, bits, bucket, totalBytes) or a pointer is misaligned.
void decode(const WireInfo& info, const void* wire_d, float* out_d, size_t n, void* stream);

/// out_d[0..n) += decode(wire), fused (one read of out_d, one write). Same contract as decode().
void decodeAdd(const WireInfo& info, const void* wire_d, float* out_d, size_t n, void* stream);

/// out_d[i] = fp32 value of the IEEE half in_d[i] (exact). in_d and out_d must not overlap.
void halfToFloat(const uint16_t* in_d, float* out_d, size_t n, void* stream);

/// out_d[i] = in_d[i] rounded to IEEE half, nearest even (math::floatToHalf). No overlap.
void floatToHalf(const float* in_d, uint16_t* out_d, size_t n, void* stream);

/// out_d[i] = fp32 value of the bfloat16 in_d[i] (exact). in_d and out_d must not overlap.
void bf16ToFloat(const uint16_t* in_d, float* out_d, size_t n, void* stream);

/// out_d[i] = in_d[i] rounded to bfloat16, nearest even (math::floatToBf16). No overlap.
void floatToBf16(const float* in_d, uint16_t* out_d, size_t n, void* stream);

/// d[i] = d[i] * s (one IEEE multiply per element; used to turn a sum into an average).
void scale(float* d, size_t n, float s, void* stream);

/// acc_d[i] = acc_d[i] + x_d[i] (uncompressed reductions). acc_d and x_d may be equal, not overlap otherwise.
void add(float* acc_d, const float* x_d, size_t n, void* stream);

}  // namespace cuda
}  // namespace qccl
