// GPU codec tests: qccl::cuda::encode / decode / decodeAdd against the CPU codec, bit for bit, for
// every codec, sizes from 0 to 2^20 + 7, with and without residual, aligned and unaligned pointers;
// plus the element-wise helpers and argument validation. Device tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "qccl/cuda_codec.hpp"
#include "qccl/error.hpp"
#include "tests/cuda/cuda_test_cases.hpp"

namespace qccl {
namespace testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device"

void ok(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

/// A device allocation with some slack so a 4-byte offset (unaligned case) stays in bounds.
class DeviceBuf {
 public:
  explicit DeviceBuf(size_t bytes) {
    if (cudaMalloc(&p_, bytes + 64) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceBuf() { cudaFree(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <class T>
  T* at(size_t byteOffset) {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(p_) + byteOffset);
  }

 private:
  void* p_ = nullptr;
};

void toDevice(void* d, const void* h, size_t bytes) {
  if (bytes) ok(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
}
void toHost(void* h, const void* d, size_t bytes) {
  if (bytes) ok(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

void checkCase(const CodecConfig& cfg, size_t n, bool residual, bool aligned, int pattern, cudaStream_t stream) {
  SCOPED_TRACE(describe(cfg, n, residual, aligned, pattern));
  const CodecConfig r = resolveConfig(cfg);
  const std::vector<float> x = makeInput(n, 11u + static_cast<uint32_t>(n), pattern, r.bucket ? r.bucket : 512);
  const std::vector<float> r0 = makeInput(n, 5u, 0, 512);
  EncodeParams params;
  params.seq = 77;
  params.rngOffset = 0x0102030405060708ull;
  const size_t total = encodedBytes(r, n);
  std::vector<uint8_t> cpuWire(total);
  std::vector<float> cpuRes = r0;
  cpuRes.push_back(0.0f);  // keeps data() non-null for n == 0, like the device pointer
  encode(r, x.data(), residual ? cpuRes.data() : nullptr, n, cpuWire.data(), total, params);

  const size_t off = aligned ? 0 : 4;
  DeviceBuf dIn(n * 4), dRes(n * 4), dWire(total + 16), dOut(n * 4), dWs(cuda::encodeWorkspaceBytes(r, n));
  float* in = dIn.at<float>(off);
  float* res = dRes.at<float>(off);
  uint8_t* wire = dWire.at<uint8_t>(off);
  toDevice(in, x.data(), n * 4);
  toDevice(res, r0.data(), n * 4);
  ok(cudaMemset(dWire.at<uint8_t>(0), 0xa5, total + 16 + 64));
  const size_t written = cuda::encode(cfg, in, residual ? res : nullptr, n, wire, total + 16, params, dWs.at<void>(0),
                                      cuda::encodeWorkspaceBytes(r, n), stream);
  ok(cudaStreamSynchronize(stream));
  EXPECT_EQ(written, total);
  std::vector<uint8_t> gpuWire(total + 1);
  toHost(gpuWire.data(), wire, total + 1);
  EXPECT_EQ(firstByteDiff(gpuWire.data(), cpuWire.data(), total), -1) << "encoded bytes differ";
  EXPECT_EQ(gpuWire[total], 0xa5) << "wrote past encodedBytes";
  if (residual) {
    std::vector<float> gpuRes(n);
    toHost(gpuRes.data(), res, n * 4);
    EXPECT_EQ(firstBitDiff(gpuRes.data(), cpuRes.data(), n), -1) << "residual differs";
  }

  // Decode the CPU bytes on the GPU.
  const WireInfo info = parseWire(cpuWire.data(), total);
  toDevice(wire, cpuWire.data(), total);
  for (bool add : {false, true}) {
    std::vector<float> cpuOut = makeInput(n, 3u, 0, 512), gpuOut(n);
    float* out = dOut.at<float>(off);
    toDevice(out, cpuOut.data(), n * 4);
    if (add) {
      decodeAdd(cpuWire.data(), total, cpuOut.data(), n);
      cuda::decodeAdd(info, wire, out, n, stream);
    } else {
      decode(cpuWire.data(), total, cpuOut.data(), n);
      cuda::decode(info, wire, out, n, stream);
    }
    ok(cudaStreamSynchronize(stream));
    toHost(gpuOut.data(), out, n * 4);
    EXPECT_EQ(firstBitDiff(gpuOut.data(), cpuOut.data(), n), -1) << (add ? "decodeAdd" : "decode") << " differs";
  }
}

class CudaCodec : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaCodec, MatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  ok(cudaStreamCreate(&stream));
  const size_t n = GetParam();
  for (const CodecConfig& cfg : allConfigs())
    for (bool residual : {false, true})
      for (bool aligned : {true, false}) checkCase(cfg, n, residual, aligned, n >= 4096 ? 1 : 0, stream);
  ok(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaCodec,
                         ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{33}, size_t{511},
                                           size_t{513}, size_t{4096 + 3}, (size_t{1} << 20) + 7));

TEST(CudaCodecEdges, SmallAndOddBuckets) {
  SKIP_WITHOUT_GPU();
  for (uint32_t bucket : {32u, 96u, 65536u}) {
    for (const CodecConfig& cfg : allConfigs(bucket)) {
      if (isCast(cfg.codec)) continue;
      checkCase(cfg, 7 * bucket + 5, true, true, 1, nullptr);
      checkCase(cfg, 7 * bucket + 5, false, false, 1, nullptr);
    }
  }
}

TEST(CudaCodecEdges, ResidualAliasingInput) {
  SKIP_WITHOUT_GPU();
  CodecConfig cfg;
  cfg.codec = CodecId::kMaxMin;
  const size_t n = 1000;
  std::vector<float> x = makeInput(n, 1u, 0, 512), cpu = x;
  std::vector<uint8_t> cpuWire(encodedBytes(cfg, n)), gpuWire(cpuWire.size());
  encode(cfg, cpu.data(), cpu.data(), n, cpuWire.data(), cpuWire.size());
  DeviceBuf d(n * 4), w(cpuWire.size()), ws(cuda::encodeWorkspaceBytes(cfg, n));
  toDevice(d.at<float>(0), x.data(), n * 4);
  cuda::encode(cfg, d.at<float>(0), d.at<float>(0), n, w.at<void>(0), cpuWire.size(), {}, ws.at<void>(0),
               cuda::encodeWorkspaceBytes(cfg, n), nullptr);
  ok(cudaDeviceSynchronize());
  toHost(gpuWire.data(), w.at<void>(0), gpuWire.size());
  toHost(x.data(), d.at<float>(0), n * 4);
  EXPECT_EQ(firstByteDiff(gpuWire.data(), cpuWire.data(), cpuWire.size()), -1);
  EXPECT_EQ(firstBitDiff(x.data(), cpu.data(), n), -1);
}

TEST(CudaHelpers, ConversionsScaleAndAdd) {
  SKIP_WITHOUT_GPU();
  const size_t n = 100003;
  std::vector<float> x = makeInput(n, 2u, 1, 64), y = makeInput(n, 8u, 0, 64);
  for (size_t i = 0; i < 300; ++i) x[i] = math::bitsFloat(0x33000000u + (uint32_t)i * 0x10000u);  // fp16 subnormals
  DeviceBuf dx(n * 4), dy(n * 4), dh(n * 2);
  toDevice(dx.at<float>(0), x.data(), n * 4);
  std::vector<uint16_t> h(n);
  std::vector<float> back(n);
  for (bool bf16 : {false, true}) {
    if (bf16)
      cuda::floatToBf16(dx.at<float>(0), dh.at<uint16_t>(0), n, nullptr);
    else
      cuda::floatToHalf(dx.at<float>(0), dh.at<uint16_t>(0), n, nullptr);
    ok(cudaDeviceSynchronize());
    toHost(h.data(), dh.at<void>(0), n * 2);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(h[i], bf16 ? math::floatToBf16(x[i]) : math::floatToHalf(x[i])) << "element " << i;
    if (bf16)
      cuda::bf16ToFloat(dh.at<uint16_t>(0), dy.at<float>(0), n, nullptr);
    else
      cuda::halfToFloat(dh.at<uint16_t>(0), dy.at<float>(0), n, nullptr);
    ok(cudaDeviceSynchronize());
    toHost(back.data(), dy.at<void>(0), n * 4);
    for (size_t i = 0; i < n; ++i) {
      const float e = bf16 ? math::bf16ToFloat(h[i]) : math::halfToFloat(h[i]);
      ASSERT_EQ(math::floatBits(back[i]), math::floatBits(e)) << "element " << i;
    }
  }
  toDevice(dy.at<float>(0), y.data(), n * 4);
  cuda::add(dy.at<float>(0), dx.at<float>(0), n, nullptr);
  cuda::scale(dy.at<float>(0), n, 0.25f, nullptr);
  ok(cudaDeviceSynchronize());
  toHost(back.data(), dy.at<void>(0), n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float e = (y[i] + x[i]) * 0.25f;
    ASSERT_EQ(math::floatBits(back[i]), math::floatBits(e)) << "element " << i;
  }
}

// Argument validation happens on the host before anything is enqueued, so these run without a GPU
// (the pointers are never dereferenced).
TEST(CudaValidation, RejectsBadArguments) {
  CodecConfig cfg;
  cfg.codec = CodecId::kOneBit;
  auto* in = reinterpret_cast<float*>(uintptr_t{0x10000});
  auto* odd = reinterpret_cast<float*>(uintptr_t{0x10002});
  void* out = reinterpret_cast<void*>(uintptr_t{0x20000});
  void* ws = reinterpret_cast<void*>(uintptr_t{0x30000});
  const size_t n = 100, cap = encodedBytes(cfg, n), wsb = cuda::encodeWorkspaceBytes(cfg, n);
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kSuccess;
  };
  EXPECT_EQ(code([&] { cuda::encode(cfg, odd, nullptr, n, out, cap, {}, ws, wsb, nullptr); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { cuda::encode(cfg, in, nullptr, n, static_cast<uint8_t*>(out) + 2, cap, {}, ws, wsb, nullptr); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { cuda::encode(cfg, in, nullptr, n, out, cap - 4, {}, ws, wsb, nullptr); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { cuda::encode(cfg, in, nullptr, n, out, cap, {}, nullptr, wsb, nullptr); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { cuda::encode(cfg, in, in + 1, n, out, cap, {}, ws, wsb, nullptr); }),
            ErrorCode::kInvalidArgument);
  CodecConfig bad = cfg;
  bad.bucket = 33;
  EXPECT_EQ(code([&] { cuda::encode(bad, in, nullptr, n, out, cap, {}, ws, wsb, nullptr); }),
            ErrorCode::kInvalidArgument);

  std::vector<uint8_t> wire(cap);
  std::vector<float> x(n, 1.0f);
  encode(cfg, x.data(), nullptr, n, wire.data(), cap);
  WireInfo info = parseWire(wire.data(), cap);
  EXPECT_EQ(code([&] { cuda::decode(info, out, in, n + 1, nullptr); }), ErrorCode::kMismatch);
  EXPECT_EQ(code([&] { cuda::decodeAdd(info, out, odd, n, nullptr); }), ErrorCode::kInvalidArgument);
  WireInfo forged = info;
  forged.totalBytes += 4;
  EXPECT_EQ(code([&] { cuda::decode(forged, out, in, n, nullptr); }), ErrorCode::kInvalidArgument);
  forged = info;
  forged.cfg.bits = 3;
  EXPECT_EQ(code([&] { cuda::decode(forged, out, in, n, nullptr); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { cuda::scale(odd, n, 2.0f, nullptr); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace testing
}  // namespace qccl
