// The codec rows of qccl-bench codec, shared by the CPU and the device modes.
#pragma once

#include "qccl/codec.hpp"

namespace qccl {
namespace bench {

struct CodecRow {
  const char* label;
  CodecId codec;
  int bits;
  bool stochastic;
};

inline constexpr CodecRow kCodecRows[] = {
    {"fp32", CodecId::kFp32, 0, false},           {"fp16", CodecId::kFp16, 0, false},
    {"bf16", CodecId::kBf16, 0, false},           {"onebit", CodecId::kOneBit, 0, false},
    {"signscale", CodecId::kSignScale, 0, false}, {"maxmin2", CodecId::kMaxMin, 2, false},
    {"maxmin4", CodecId::kMaxMin, 4, false},      {"maxmin8", CodecId::kMaxMin, 8, false},
    {"maxmin4sr", CodecId::kMaxMin, 4, true},     {"dyn8", CodecId::kDyn8, 0, false},
};

/// The device mode (codec_bench_device.cc, CUDA builds): encode with error feedback and decodeAdd
/// of every row on the GPU against a device-to-device cudaMemcpy timed in the same run, each row's
/// bytes (wire, residual, decodeAdd output) checked against the CPU codec on the same input.
/// Returns 0, 1 when a row's bytes differ or a CUDA call fails, 2 without a device.
int runDeviceCodecBench(size_t bytes, int iters, int warmup, uint32_t bucket, const char* only, bool json);

}  // namespace bench
}  // namespace qccl
