// Runs the CUDA kernels' device code (cuda/bucket_encode.cuh, cuda/bucket_decode.cuh) on the
// host under a warp emulator and checks it against the CPU codec bit for bit: payload bytes,
// residuals, the non-finite flag, decode and decodeAdd. Needs no GPU, so the kernels' lane
// geometry, reduction order, ballot packing and partial-bucket handling are tested everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/bucket_decode.cuh"
#include "cuda/bucket_encode.cuh"
#include "cuda/cast_codec.cuh"
#include "tests/cuda/cuda_test_cases.hpp"
#include "tests/cuda/warp_emulator.hpp"

namespace qccl {
namespace testing {
namespace {

using cuda::detail::DecodeArgs;
using cuda::detail::EncodeArgs;

const math::Dyn8Tables& tables() {
  static const math::Dyn8Tables t = [] {
    math::Dyn8Tables x;
    math::fillDyn8Tables(&x);
    return x;
  }();
  return t;
}

template <CodecId C, int B>
void runEncode(const EncodeArgs& a) {
  WarpEmulator emu;
  emu.run([&](uint32_t lane) {
    const HostWarp w{&emu, lane};
    for (uint64_t b = 0; b < a.numBuckets; ++b)
      cuda::detail::encodeBucket<C, B>(w, a, b, tables().threshold, tables().magnitude);
  });
}

template <CodecId C, int B>
void runDecode(const DecodeArgs& a, bool add) {
  WarpEmulator emu;
  emu.run([&](uint32_t lane) {
    const HostWarp w{&emu, lane};
    for (uint64_t b = 0; b < a.numBuckets; ++b) {
      if (add)
        cuda::detail::decodeBucket<C, B, true>(w, a, b, tables().magnitude);
      else
        cuda::detail::decodeBucket<C, B, false>(w, a, b, tables().magnitude);
    }
  });
}

void emulateEncode(const CodecConfig& r, const EncodeArgs& a) {
  switch (r.codec) {
    case CodecId::kOneBit:
      return runEncode<CodecId::kOneBit, 1>(a);
    case CodecId::kSignScale:
      return runEncode<CodecId::kSignScale, 1>(a);
    case CodecId::kDyn8:
      return runEncode<CodecId::kDyn8, 8>(a);
    case CodecId::kMaxMin:
      if (r.bits == 2) return runEncode<CodecId::kMaxMin, 2>(a);
      if (r.bits == 4) return runEncode<CodecId::kMaxMin, 4>(a);
      return runEncode<CodecId::kMaxMin, 8>(a);
    default:
      FAIL() << "not a bucket codec";
  }
}

void emulateDecode(const CodecConfig& r, const DecodeArgs& a, bool add) {
  switch (r.codec) {
    case CodecId::kOneBit:
      return runDecode<CodecId::kOneBit, 1>(a, add);
    case CodecId::kSignScale:
      return runDecode<CodecId::kSignScale, 1>(a, add);
    case CodecId::kDyn8:
      return runDecode<CodecId::kDyn8, 8>(a, add);
    case CodecId::kMaxMin:
      if (r.bits == 2) return runDecode<CodecId::kMaxMin, 2>(a, add);
      if (r.bits == 4) return runDecode<CodecId::kMaxMin, 4>(a, add);
      return runDecode<CodecId::kMaxMin, 8>(a, add);
    default:
      FAIL() << "not a bucket codec";
  }
}

// One full comparison: encode with and without residual, then decode and decodeAdd of the CPU wire.
void checkCase(const CodecConfig& cfg, size_t n, bool residual, bool aligned, int pattern) {
  SCOPED_TRACE(describe(cfg, n, residual, aligned, pattern));
  const CodecConfig r = resolveConfig(cfg);
  const std::vector<float> x = makeInput(n, 7u + static_cast<uint32_t>(n), pattern, r.bucket);
  const std::vector<float> r0 = makeInput(n, 99u, 0, r.bucket);
  EncodeParams params;
  params.seq = 5;
  params.rngOffset = 0x1122334455667788ull;

  // CPU oracle.
  const size_t total = encodedBytes(r, n);
  std::vector<uint8_t> cpuWire(total);
  std::vector<float> cpuRes = r0;
  cpuRes.push_back(0.0f);  // keeps data() non-null for n == 0, like the emulated pointer
  encode(r, x.data(), residual ? cpuRes.data() : nullptr, n, cpuWire.data(), total, params);

  // Kernel code under the emulator, on possibly unaligned copies.
  FloatBuf in(n, aligned), res(n, aligned);
  if (n) std::memcpy(in.data(), x.data(), n * 4);
  if (n) std::memcpy(res.data(), r0.data(), n * 4);
  std::vector<uint32_t> wire(total / 4 + 1, 0xdeadbeefu);  // poison: every payload byte must be written
  uint8_t* payload = reinterpret_cast<uint8_t*>(wire.data()) + kWireHeaderBytes;
  uint32_t flag = 0;
  const EncodeArgs a =
      cuda::detail::makeEncodeArgs(r, in.data(), residual ? res.data() : nullptr, n, payload, params.rngOffset, &flag);
  ASSERT_EQ(a.vec, aligned);
  if (n) emulateEncode(r, a);

  const size_t pb = total - kWireHeaderBytes;
  EXPECT_EQ(firstByteDiff(payload, cpuWire.data() + kWireHeaderBytes, pb), -1) << "payload differs";
  EXPECT_EQ(reinterpret_cast<uint8_t*>(wire.data())[total], 0xef) << "wrote past the payload";
  if (residual) {
    EXPECT_EQ(firstBitDiff(res.data(), cpuRes.data(), n), -1) << "residual differs";
  }
  const bool cpuNonFinite = (cpuWire[7] & kFlagNonFinite) != 0;
  EXPECT_EQ(flag != 0, cpuNonFinite) << "non-finite flag differs";

  // Decode and decodeAdd of the CPU bytes.
  const WireInfo info = parseWire(cpuWire.data(), total);
  std::vector<uint32_t> wireCopy(total / 4);
  std::memcpy(wireCopy.data(), cpuWire.data(), total);
  const uint8_t* pl = reinterpret_cast<const uint8_t*>(wireCopy.data()) + kWireHeaderBytes;
  for (bool add : {false, true}) {
    std::vector<float> cpuOut = makeInput(n, 3u, 0, r.bucket);
    FloatBuf out(n, aligned);
    if (n) std::memcpy(out.data(), cpuOut.data(), n * 4);
    if (add)
      decodeAdd(cpuWire.data(), total, cpuOut.data(), n);
    else
      decode(cpuWire.data(), total, cpuOut.data(), n);
    if (n) emulateDecode(info.cfg, cuda::detail::makeDecodeArgs(info.cfg, pl, out.data(), n), add);
    EXPECT_EQ(firstBitDiff(out.data(), cpuOut.data(), n), -1) << (add ? "decodeAdd" : "decode") << " differs";
  }
}

// The cast kernels' per-word code, run for every word, against the CPU codec.
template <CodecId C>
void checkCast(size_t n, bool residual, int pattern, bool vec) {
  CodecConfig cfg;
  cfg.codec = C;
  SCOPED_TRACE(describe(cfg, n, residual, true, pattern) + (vec ? " (16-byte groups)" : " (word by word)"));
  const CodecConfig r = resolveConfig(cfg);
  const std::vector<float> x = makeInput(n, 17u, pattern, 64);
  std::vector<float> cpuRes = makeInput(n, 4u, 0, 64), res = cpuRes;
  cpuRes.push_back(0.0f);  // keeps data() non-null for n == 0
  res.push_back(0.0f);
  EncodeParams params;
  params.seq = 3;
  const size_t total = encodedBytes(r, n);
  std::vector<uint8_t> cpuWire(total);
  encode(r, x.data(), residual ? cpuRes.data() : nullptr, n, cpuWire.data(), total, params);

  const uint64_t words = (n + cuda::detail::castPerWord<C>() - 1) / cuda::detail::castPerWord<C>();
  ASSERT_EQ(words * 4, total - kWireHeaderBytes);
  std::vector<uint32_t> payload(words);
  bool bad = false;
  // The kernel's loop: groups of kCastGroup elements; a full group of aligned buffers (vec) is
  // encoded from values loaded at once, everything else word by word.
  constexpr uint64_t kPer = cuda::detail::castPerWord<C>(), kG = cuda::detail::kCastGroup;
  float* rp = residual ? res.data() : nullptr;
  for (uint64_t e0 = 0; e0 < n; e0 += kG) {
    if (vec && e0 + kG <= n) {
      float r4[4] = {0, 0, 0, 0}, rNew[4];
      if (rp) std::copy(rp + e0, rp + e0 + kG, r4);
      cuda::detail::encodeCastGroup<C>(x.data() + e0, r4, rp != nullptr, rNew, payload.data() + e0 / kPer, &bad);
      if (rp) std::copy(rNew, rNew + kG, rp + e0);
    } else {
      uint64_t w0, w1;
      cuda::detail::castGroupWords<C>(e0, n, &w0, &w1);
      for (uint64_t i = w0; i < w1; ++i) payload[i] = cuda::detail::encodeCastWord<C>(x.data(), rp, n, i, &bad);
    }
  }
  WireHeader h = cuda::detail::makeHeader(r, n, params, residual);
  if (bad) h.flags |= kFlagNonFinite;
  EXPECT_EQ(firstByteDiff(reinterpret_cast<const uint8_t*>(&h), cpuWire.data(), kWireHeaderBytes), -1)
      << "header differs";
  EXPECT_EQ(firstByteDiff(reinterpret_cast<const uint8_t*>(payload.data()), cpuWire.data() + kWireHeaderBytes,
                          total - kWireHeaderBytes),
            -1)
      << "payload differs";
  if (residual) {
    EXPECT_EQ(firstBitDiff(res.data(), cpuRes.data(), n), -1) << "residual differs";
  }
  for (bool add : {false, true}) {
    std::vector<float> cpuOut = makeInput(n, 3u, 0, 64), out = cpuOut;
    if (add)
      decodeAdd(cpuWire.data(), total, cpuOut.data(), n);
    else
      decode(cpuWire.data(), total, cpuOut.data(), n);
    for (uint64_t e0 = 0; e0 < n; e0 += kG) {
      if (vec && e0 + kG <= n) {
        if (add)
          cuda::detail::decodeCastGroup<C, true>(payload.data() + e0 / kPer, out.data() + e0);
        else
          cuda::detail::decodeCastGroup<C, false>(payload.data() + e0 / kPer, out.data() + e0);
        continue;
      }
      uint64_t w0, w1;
      cuda::detail::castGroupWords<C>(e0, n, &w0, &w1);
      for (uint64_t i = w0; i < w1; ++i) {
        if (add)
          cuda::detail::decodeCastWord<C, true>(payload[i], n, i, out.data());
        else
          cuda::detail::decodeCastWord<C, false>(payload[i], n, i, out.data());
      }
    }
    EXPECT_EQ(firstBitDiff(out.data(), cpuOut.data(), n), -1) << (add ? "decodeAdd" : "decode") << " differs";
  }
}

TEST(CudaEmulated, CastsAndHeaderMatchCpu) {
  for (size_t n : {0, 1, 7, 31, 33, 511, 513, 4096 + 3})
    for (bool residual : {false, true})
      for (int pattern : {0, 1}) {
        for (bool vec : {false, true}) {
          checkCast<CodecId::kFp32>(n, residual, pattern, vec);
          checkCast<CodecId::kFp16>(n, residual, pattern, vec);
          checkCast<CodecId::kBf16>(n, residual, pattern, vec);
        }
      }
}

TEST(CudaEmulated, BucketHeaderMatchesCpu) {
  for (const CodecConfig& cfg : allConfigs()) {
    const CodecConfig r = resolveConfig(cfg);
    for (bool residual : {false, true}) {
      std::vector<float> x(100, 1.0f), res(100, 0.0f);
      EncodeParams params;
      params.seq = 123456;
      std::vector<uint8_t> cpuWire(encodedBytes(r, x.size()));
      encode(r, x.data(), residual ? res.data() : nullptr, x.size(), cpuWire.data(), cpuWire.size(), params);
      const WireHeader h = cuda::detail::makeHeader(r, x.size(), params, residual);
      EXPECT_EQ(firstByteDiff(reinterpret_cast<const uint8_t*>(&h), cpuWire.data(), kWireHeaderBytes), -1)
          << describe(cfg, x.size(), residual, true, 0);
    }
  }
}

// The device's NaN handling must reproduce what x86 arithmetic gives natively; on an x86 host the
// plain expressions are the reference. Only cases with one NaN source (or none) are compared:
// with two different NaN payloads x86's answer depends on the compiler's operand order.
TEST(CudaEmulated, NaNPropagationMatchesX86) {
#if defined(__x86_64__) || defined(__i386__)
  const float inf = math::bitsFloat(0x7f800000u);
  const float nans[] = {math::quietNaN(), math::bitsFloat(0xffc01234u), math::bitsFloat(0x7f800001u)};
  const float finite[] = {0.0f, -0.0f, 1.5f, -3.0e38f, 1e-40f};
  auto same = [](float a, float b) { return math::floatBits(a) == math::floatBits(b); };
  for (float n : nans) {
    for (float f : finite) {
      EXPECT_TRUE(same(cuda::detail::addX86(n, f), n + f));
      EXPECT_TRUE(same(cuda::detail::addX86(f, n), f + n));
      for (uint32_t q : {0u, 1u, 3u}) {
        EXPECT_TRUE(same(cuda::detail::maxminNaN<2>(q, n, f), math::maxminValue(q, n, math::maxminStep(n, f, 2))));
        EXPECT_TRUE(same(cuda::detail::maxminNaN<2>(q, f, n), math::maxminValue(q, f, math::maxminStep(f, n, 2))));
      }
    }
    for (uint32_t q : {0u, 1u, 3u})
      EXPECT_TRUE(same(cuda::detail::maxminNaN<2>(q, n, n), math::maxminValue(q, n, math::maxminStep(n, n, 2))));
    const float m = tables().magnitude[5];
    EXPECT_TRUE(same(cuda::detail::propagateNaN(m * n, m, n), m * n));
  }
  EXPECT_TRUE(same(cuda::detail::addX86(inf, -inf), inf + -inf));
  EXPECT_EQ(math::floatBits(cuda::detail::addX86(inf, -inf)), 0xffc00000u);
  for (uint32_t q : {0u, 2u, 255u})
    EXPECT_TRUE(
        same(cuda::detail::maxminNaN<8>(q, -inf, inf), math::maxminValue(q, -inf, math::maxminStep(-inf, inf, 8))));
#else
  GTEST_SKIP() << "the reference is x86 arithmetic";
#endif
}

TEST(CudaEmulated, SignWordInterleavesBallots) {
  // Element 4l + k of a row sets bit l of ballot k; word w must carry element 32w + j in bit j.
  for (uint32_t e = 0; e < 128; ++e) {
    uint32_t b[4] = {0, 0, 0, 0};
    b[e % 4] = 1u << (e / 4);
    for (uint32_t w = 0; w < 4; ++w)
      EXPECT_EQ(cuda::detail::signWord(b, w), w == e / 32 ? 1u << (e % 32) : 0u) << "element " << e;
  }
}

TEST(CudaEmulated, BucketCodecsMatchCpuAcrossSizes) {
  for (const CodecConfig& cfg : allConfigs()) {
    if (isCast(cfg.codec)) continue;
    for (size_t n : {0, 1, 7, 31, 33, 511, 513, 4096 + 3})
      for (bool residual : {false, true}) checkCase(cfg, n, residual, residual, 0);
  }
}

TEST(CudaEmulated, UnalignedPointersTakeTheScalarPath) {
  for (const CodecConfig& cfg : allConfigs()) {
    if (isCast(cfg.codec)) continue;
    checkCase(cfg, 513, true, false, 0);
    checkCase(cfg, 513, false, false, 0);
  }
}

TEST(CudaEmulated, EdgeBucketsMatchCpu) {
  // Small buckets so that one call covers zero, constant, NaN, Inf, overflow and denormal buckets;
  // 96 is a bucket that is not a multiple of the 128-element row; 32 and 96 keep v in registers
  // between the passes (buckets up to 512), 672 reloads it (cuda/bucket_encode.cuh).
  for (uint32_t bucket : {32u, 96u, 672u}) {
    for (const CodecConfig& cfg : allConfigs(bucket)) {
      if (isCast(cfg.codec)) continue;
      checkCase(cfg, 7 * bucket + 5, true, true, 1);
      checkCase(cfg, 7 * bucket + 5, false, false, 1);
    }
  }
}

TEST(CudaEmulated, LargestBucket) {
  CodecConfig cfg;
  cfg.codec = CodecId::kOneBit;
  cfg.bucket = kMaxBucket;
  checkCase(cfg, kMaxBucket + 33, true, true, 0);
  cfg.codec = CodecId::kMaxMin;
  cfg.bits = 2;
  cfg.stochastic = true;
  cfg.seed = 42;
  checkCase(cfg, kMaxBucket + 33, true, false, 0);
}

}  // namespace
}  // namespace testing
}  // namespace qccl
