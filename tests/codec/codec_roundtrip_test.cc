// Round trips, error feedback and edge-case inputs for every codec on the CPU path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codec_test_util.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace test {
namespace {

constexpr double kEps = 0x1p-23;  // fp32 unit roundoff doubled (one ulp at 1.0)

// The largest |decoded - v| the codec may produce for v in a bucket with the given statistics.
double errorBound(const CodecConfig& cfg, double v, double mn, double mx, double absmax) {
  switch (cfg.codec) {
    case CodecId::kFp32:
      return 0.0;
    case CodecId::kFp16:
      return std::fabs(v) * 0x1p-11 + 0x1p-25;
    case CodecId::kBf16:
      return std::fabs(v) * 0x1p-8 + 0x1p-134;
    case CodecId::kMaxMin: {
      double step = (mx - mn) / ((1 << cfg.bits) - 1);
      return (cfg.stochastic ? step : step / 2) * (1 + 1e-5) + 4 * kEps * absmax;
    }
    case CodecId::kDyn8:  // half of the widest gap between magnitude codes (0.9/64 in the top decade)
      return absmax * (0.9 / 128 + 1e-6);
    default:
      return INFINITY;  // onebit/signscale are checked through their statistics
  }
}

// Checks decoded values of one bucket against v (the encoder's input).
void checkBucket(const CodecConfig& cfg, const float* v, const float* d, size_t m) {
  double mn = v[0], mx = v[0], absmax = 0, sumPos = 0, sumNeg = 0, sumAbs = 0;
  size_t nPos = 0;
  for (size_t i = 0; i < m; ++i) {
    mn = std::min(mn, (double)v[i]);
    mx = std::max(mx, (double)v[i]);
    absmax = std::max(absmax, std::fabs((double)v[i]));
    sumAbs += std::fabs(v[i]);
    if (v[i] >= 0) {
      sumPos += v[i];
      ++nPos;
    } else {
      sumNeg += v[i];
    }
  }
  for (size_t i = 0; i < m; ++i) {
    SCOPED_TRACE("element " + std::to_string(i));
    ASSERT_TRUE(std::isfinite(d[i]));
    if (cfg.codec == CodecId::kOneBit) {
      double want = v[i] >= 0 ? sumPos / nPos : sumNeg / (m - nPos);
      ASSERT_NEAR(d[i], want, 1e-5 * std::fabs(want) + 1e-30);
    } else if (cfg.codec == CodecId::kSignScale) {
      double want = (v[i] >= 0 ? 1 : -1) * sumAbs / m;
      ASSERT_NEAR(d[i], want, 1e-5 * std::fabs(want) + 1e-30);
    } else {
      ASSERT_LE(std::fabs((double)d[i] - v[i]), errorBound(cfg, v[i], mn, mx, absmax)) << v[i] << " -> " << d[i];
    }
  }
}

// Sizes every round-trip test runs (looped inside each test: one process per config under CTest).
const size_t kSizes[] = {0, 1, 7, 31, 33, 511, 513, 1000003};

class CodecRoundTrip : public ::testing::TestWithParam<CodecConfig> {};

void roundTrip(const CodecConfig& cfg, size_t n) {
  std::vector<float> g = gaussian(n, 7 + (uint32_t)n);
  std::vector<uint8_t> w = encodeVec(cfg, g, nullptr, {3, 11});
  ASSERT_EQ(w.size(), encodedBytes(cfg, n));
  std::vector<float> d = decodeVec(w, n);
  WireInfo info = parseWire(w.data(), w.size());
  EXPECT_EQ(info.count, n);
  EXPECT_EQ(info.seq, 3u);
  EXPECT_EQ(info.flags & kFlagErrorFeedback, 0);
  EXPECT_EQ(info.flags & kFlagNonFinite, 0);
  EXPECT_EQ((info.flags & kFlagStochastic) != 0, cfg.stochastic);
  if (isLossless(cfg)) {
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(d[i]), bitsOf(g[i]));
  } else if (n > 0) {
    size_t bucket = cfg.codec <= CodecId::kBf16 ? n : cfg.bucket;
    for (size_t b = 0; b < n; b += bucket) checkBucket(cfg, &g[b], &d[b], std::min(bucket, n - b));
  }
  // decodeAdd is decode followed by an fp32 add, bit for bit.
  std::vector<float> acc = gaussian(n, 99);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = acc[i] + d[i];
  decodeAdd(w.data(), w.size(), acc.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(acc[i]), bitsOf(want[i])) << i;
}

void efInvariant(const CodecConfig& cfg, size_t n) {
  std::vector<float> g = gaussian(n, 5), r = gaussian(n, 6, 0.1f), rOld = r;
  std::vector<uint8_t> w = encodeVec(cfg, g, &r);
  if (n > 0) {  // an empty vector has no residual storage (data() is null): no feedback
    EXPECT_NE(parseWire(w.data(), w.size()).flags & kFlagErrorFeedback, 0);
  }
  std::vector<float> d = decodeVec(w, n);
  for (size_t i = 0; i < n; ++i) {
    // v = fl(g + rOld) and r = fl(v - d): each rounding is at most half an ulp of its result.
    double exact = (double)g[i] + rOld[i];
    double tol = kEps * (std::fabs(exact) + std::fabs((double)r[i])) + 0x1p-149;
    ASSERT_NEAR((double)d[i] + r[i], exact, tol) << "element " << i;
  }
}

void unaligned(const CodecConfig& cfg, size_t size) {
  const size_t n = std::min<size_t>(size, 5000);
  if (n == 0) return;  // nothing to misalign
  std::vector<float> g = gaussian(n, 21), r = gaussian(n, 22, 0.1f);
  std::vector<float> rRef = r;
  std::vector<uint8_t> ref = encodeVec(cfg, g, &rRef);
  std::vector<float> dRef = decodeVec(ref, n);
  for (size_t off : {1, 2, 3, 4, 7}) {
    SCOPED_TRACE("offset " + std::to_string(off));
    OffsetFloats in(n, off), res(n, (off + 1) % 8), out(n, (off + 2) % 8);
    in.assign(g);
    res.assign(r);
    std::vector<uint8_t> wireRaw(ref.size() + 8);
    uint8_t* wire = wireRaw.data() + off;
    ASSERT_EQ(encode(cfg, in.data(), res.data(), n, wire, ref.size()), ref.size());
    ASSERT_EQ(0, std::memcmp(wire, ref.data(), ref.size()));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(res.get(i)), bitsOf(rRef[i]));
    decode(wire, ref.size(), out.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(out.get(i)), bitsOf(dRef[i]));
    decodeAdd(wire, ref.size(), out.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(out.get(i)), bitsOf(dRef[i] + dRef[i]));
  }
}

TEST_P(CodecRoundTrip, DecodesWithinBoundAndDecodeAddMatches) {
  for (size_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    roundTrip(GetParam(), n);
    if (HasFatalFailure()) return;
  }
}

TEST_P(CodecRoundTrip, ErrorFeedbackInvariant) {
  for (size_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    efInvariant(GetParam(), n);
    if (HasFatalFailure()) return;
  }
}

TEST_P(CodecRoundTrip, UnalignedPointersGiveTheSameBytes) {
  for (size_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    unaligned(GetParam(), n);
    if (HasFatalFailure()) return;
  }
}

std::vector<CodecConfig> sweepConfigs() {
  std::vector<CodecConfig> v = allConfigs(512);
  for (uint32_t b : {32u, 4096u})
    for (const CodecConfig& c : allConfigs(b))
      if (c.codec > CodecId::kBf16) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, CodecRoundTrip, ::testing::ValuesIn(sweepConfigs()),
                         [](const auto& info) { return configName(info.param); });

class CodecEdge : public ::testing::TestWithParam<CodecConfig> {};

// Over 100 steps of error feedback, sum(decoded) = sum(inputs) - final residual, up to the fp32
// roundings of v = g + r and r = v - d in every step (bounded per element, summed in double).
TEST_P(CodecEdge, HundredStepErrorFeedbackTracksInputs) {
  const CodecConfig cfg = GetParam();
  const size_t n = 1031;
  std::vector<float> r(n, 0.0f);
  std::vector<double> sumG(n, 0), sumD(n, 0), bound(n, 0);
  EncodeParams p;
  for (int step = 0; step < 100; ++step) {
    std::vector<float> g = gaussian(n, 1000 + step);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = g[i] + r[i];
    p.rngOffset = (uint64_t)step * n;
    std::vector<uint8_t> w = encodeVec(cfg, g, &r, p);
    std::vector<float> d = decodeVec(w, n);
    for (size_t i = 0; i < n; ++i) {
      sumG[i] += g[i];
      sumD[i] += d[i];
      bound[i] += kEps * (std::fabs((double)v[i]) + std::fabs((double)r[i]));
    }
  }
  double maxGap = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(sumG[i] - sumD[i], r[i], bound[i] + 1e-12) << "element " << i;
    maxGap = std::max(maxGap, std::fabs(sumG[i] - sumD[i]));
  }
  // The residual stays bounded: error feedback neither diverges nor loses mass.
  EXPECT_LT(maxGap, 20.0);
}

TEST_P(CodecEdge, ZeroAndConstantBuckets) {
  const CodecConfig cfg = GetParam();
  const size_t n = 3 * 512 + 100;
  for (float c : {0.0f, -0.0f, 1.0f, -0.3f, 0.1f, 12345.5f}) {
    SCOPED_TRACE("constant " + std::to_string(c));
    std::vector<float> g(n, c), r(n, 0.0f);
    std::vector<uint8_t> w = encodeVec(cfg, g, &r);
    EXPECT_EQ(parseWire(w.data(), w.size()).flags & kFlagNonFinite, 0);
    std::vector<float> d = decodeVec(w, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(d[i], c,
                  1e-6 * std::fabs(c) + (cfg.codec == CodecId::kFp16 ? 4.0 : 0.0) * std::fabs(c) * 0x1p-11 +
                      (cfg.codec == CodecId::kBf16 ? std::fabs(c) * 0x1p-8 : 0.0));
      ASSERT_NEAR((double)d[i] + r[i], c, kEps * std::fabs(c));
      // maxmin and dyn8 represent a constant exactly; the zero bucket is exact everywhere.
      if (c == 0.0f || cfg.codec == CodecId::kMaxMin || cfg.codec == CodecId::kDyn8 || cfg.codec == CodecId::kFp32) {
        ASSERT_EQ(d[i], c);
        ASSERT_EQ(r[i], 0.0f);
      }
    }
  }
}

TEST_P(CodecEdge, Denormals) {
  const CodecConfig cfg = GetParam();
  const size_t n = 700;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = (float)((int)(i % 13) - 6) * 0x1p-146f;  // subnormal fp32
  std::vector<float> r(n, 0.0f);
  std::vector<uint8_t> w = encodeVec(cfg, g, &r);
  EXPECT_EQ(parseWire(w.data(), w.size()).flags & kFlagNonFinite, 0);
  std::vector<float> d = decodeVec(w, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(d[i]) && std::isfinite(r[i])) << i;
    // Subtraction of subnormals is exact, so the invariant holds exactly.
    ASSERT_EQ((double)d[i] + r[i], (double)g[i]) << i;
    // Every codec's decoded value stays within the bucket's range (maxmin's step is so small here
    // that its inverse saturates, so it is not more precise than that).
    ASSERT_LE(std::fabs(d[i]), 6 * 0x1p-146) << i;
    if (cfg.codec == CodecId::kFp32) {
      ASSERT_EQ(d[i], g[i]);
    }
  }
}

TEST_P(CodecEdge, NonFiniteBucketDecodesToNaNAndResetsResidual) {
  const CodecConfig cfg = GetParam();
  const bool cast = cfg.codec <= CodecId::kBf16;
  const size_t n = 4 * 512;
  const float bad[] = {NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 3; ++k) {
    std::vector<float> g = gaussian(n, 40), r = gaussian(n, 41, 0.01f), rOld = r;
    size_t badAt = 512 + 17 + k;  // inside bucket 1
    g[badAt] = bad[k];
    std::vector<uint8_t> w = encodeVec(cfg, g, &r);
    EXPECT_NE(parseWire(w.data(), w.size()).flags & kFlagNonFinite, 0);
    std::vector<float> d = decodeVec(w, n);
    for (size_t i = 0; i < n; ++i) {
      bool inBad = cast ? i == badAt : (i >= 512 && i < 1024);
      if (!inBad) {
        ASSERT_TRUE(std::isfinite(d[i])) << i;
        ASSERT_NEAR((double)d[i] + r[i], (double)g[i] + rOld[i], 1e-5) << i;
        continue;
      }
      ASSERT_EQ(r[i], 0.0f) << i;
      if (cast && k > 0)
        ASSERT_EQ(d[i], bad[k]);  // the casts pass Inf through
      else
        ASSERT_TRUE(std::isnan(d[i])) << i;
    }
  }
}

TEST_P(CodecEdge, OverflowingResidualOrStatisticIsNonFinite) {
  const CodecConfig cfg = GetParam();
  const size_t n = 512;
  std::vector<float> g(n, 3e38f), r(n, 3e38f);  // v = g + r overflows to +Inf
  encodeVec(cfg, g, &r);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(r[i], 0.0f);
  // Finite inputs whose bucket sum overflows: onebit/signscale must not send an Inf mean.
  std::vector<float> big(n, 3e38f);
  std::vector<uint8_t> w = encodeVec(cfg, big, nullptr);
  std::vector<float> d = decodeVec(w, n);
  bool flagged = parseWire(w.data(), w.size()).flags & kFlagNonFinite;
  if (cfg.codec == CodecId::kOneBit || cfg.codec == CodecId::kSignScale) {
    EXPECT_TRUE(flagged);
    EXPECT_TRUE(std::isnan(d[0]));
  } else if (cfg.codec == CodecId::kFp16) {
    EXPECT_TRUE(flagged);  // 3e38 rounds to Inf in half precision
    EXPECT_EQ(d[0], INFINITY);
  } else {
    EXPECT_FALSE(flagged);
    EXPECT_NEAR(d[0], 3e38f, 3e38 * 0.01);
  }
}

void extremeRange(const CodecConfig& cfg) {
  std::vector<float> g(64);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2 ? 3e38f : -3e38f) * ((float)i / 64.0f);
  std::vector<float> r(g.size(), 0.0f);
  std::vector<uint8_t> w = encodeVec(cfg, g, &r);
  EXPECT_EQ(parseWire(w.data(), w.size()).flags & kFlagNonFinite, 0);
  std::vector<float> d = decodeVec(w, g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(std::isfinite(d[i]) && std::isfinite(r[i]));
    ASSERT_LE(std::fabs(d[i]), 0x1p126f);
  }
}

// max - min overflows fp32: the range is clamped to +-2^126 and the bucket stays finite.
TEST(CodecMaxMin, ExtremeRangeIsClamped) {
  for (const CodecConfig& cfg : allConfigs(512)) {
    if (cfg.codec == CodecId::kMaxMin) {
      SCOPED_TRACE(configName(cfg));
      extremeRange(cfg);
    }
  }
}

// One-sided buckets near FLT_MAX: max - min is finite, but the top level min + levels * step
// was not (a fuzzer find: min 2.6e33, max FLT_MAX). Every value and residual stays finite.
TEST(CodecMaxMin, OneSidedHugeRangeStaysFinite) {
  const std::vector<std::vector<float>> cases = {
      {3.40282347e38f, 3.4e38f, 1.87e38f, 2.6e33f, 2.99e38f},
      {-3.40282347e38f, -2.6e33f, -1e38f},
      {0x1p127f, 0x1p126f, 0x1.000002p126f},
      {3.40282347e38f, 3.40282347e38f},
  };
  for (const CodecConfig& cfg : allConfigs(32)) {
    if (cfg.codec != CodecId::kMaxMin) continue;
    for (const std::vector<float>& g : cases) {
      SCOPED_TRACE(configName(cfg) + " first " + std::to_string(g[0]));
      std::vector<float> r(g.size(), 0.0f);
      std::vector<uint8_t> w = encodeVec(cfg, g, &r);
      EXPECT_EQ(parseWire(w.data(), w.size()).flags & kFlagNonFinite, 0);
      std::vector<float> d = decodeVec(w, g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_TRUE(std::isfinite(d[i]) && std::isfinite(r[i])) << i << ": " << d[i] << " " << r[i];
        ASSERT_EQ(std::signbit(d[i]), std::signbit(g[i]));                    // one-sided stays on its side
        ASSERT_NEAR((double)d[i] + r[i], g[i], 1e-6 * std::fabs(g[i])) << i;  // error feedback keeps the rest
      }
    }
  }
}

TEST_P(CodecEdge, CompressionRatioEqualsFormula) {
  const CodecConfig cfg = GetParam();
  for (size_t n : {0ul, 1ul, 31ul, 511ul, 512ul, 513ul, 100000ul}) {
    size_t payload = 0;
    size_t b = cfg.bucket, full = n / b, rem = n % b;
    switch (cfg.codec) {
      case CodecId::kFp32:
        payload = 4 * n;
        break;
      case CodecId::kFp16:
      case CodecId::kBf16:
        payload = (2 * n + 3) / 4 * 4;
        break;
      case CodecId::kOneBit:
        payload = full * (8 + b / 8) + (rem ? 8 + (rem + 31) / 32 * 4 : 0);
        break;
      case CodecId::kSignScale:
        payload = full * (4 + b / 8) + (rem ? 4 + (rem + 31) / 32 * 4 : 0);
        break;
      case CodecId::kMaxMin:
        payload = full * (8 + b * cfg.bits / 8) + (rem ? 8 + (rem * cfg.bits + 31) / 32 * 4 : 0);
        break;
      case CodecId::kDyn8:
        payload = full * (4 + b) + (rem ? 4 + (rem + 3) / 4 * 4 : 0);
        break;
    }
    EXPECT_EQ(payloadBytes(cfg, n), payload) << n;
    EXPECT_EQ(encodedBytes(cfg, n), 32 + payload) << n;
    EXPECT_DOUBLE_EQ(compressionRatio(cfg, n), 4.0 * n / (32.0 + payload)) << n;
    std::vector<float> g(n, 1.0f);
    EXPECT_EQ(encodeVec(cfg, g, nullptr).size(), 32 + payload);
  }
}

// Error control (EncodeParams::feedbackGain = g): the same bytes as a plain encode of the input with
// g * residual, and the residual that encode leaves plus the part held back, residual - g * residual.
// Over 1031 elements (a partial last bucket) and 20 steps, so that the residual feeds back; the
// sums still track the inputs (nothing is dropped). A gain outside (0, 1] is refused.
TEST_P(CodecEdge, FeedbackGainKeepsTheHeldBackResidual) {
  const CodecConfig cfg = GetParam();
  const size_t n = 1031;
  const float gain = 0.3f;
  std::vector<float> r(n, 0.0f);
  std::vector<double> sumG(n, 0), sumD(n, 0);
  for (int step = 0; step < 20; ++step) {
    std::vector<float> g = gaussian(n, 3000 + step);
    EncodeParams plain;
    plain.rngOffset = (uint64_t)step * n;
    EncodeParams controlled = plain;
    controlled.feedbackGain = gain;
    std::vector<float> fed(n), held(n);
    for (size_t i = 0; i < n; ++i) {
      fed[i] = gain * r[i];
      held[i] = r[i] - fed[i];
    }
    std::vector<uint8_t> want = encodeVec(cfg, g, &fed, plain);
    std::vector<uint8_t> got = encodeVec(cfg, g, &r, controlled);
    ASSERT_EQ(want, got) << "step " << step;
    for (size_t i = 0; i < n; ++i) {
      const float expect = fed[i] + held[i];
      ASSERT_EQ(std::memcmp(&r[i], &expect, sizeof(float)), 0) << "step " << step << ", element " << i;
    }
    std::vector<float> d = decodeVec(got, n);
    for (size_t i = 0; i < n; ++i) {
      sumG[i] += g[i];
      sumD[i] += d[i];
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sumG[i] - sumD[i], r[i], 1e-3 * (1 + std::fabs(r[i]))) << i;
  std::vector<float> g(64, 1.0f), res(64, 0.0f);
  std::vector<uint8_t> out(encodedBytes(cfg, 64));
  for (float bad : {0.0f, -0.5f, 1.5f, std::nanf("")}) {
    EncodeParams p;
    p.feedbackGain = bad;
    EXPECT_THROW(encode(cfg, g.data(), res.data(), 64, out.data(), out.size(), p), Error) << bad;
  }
}

INSTANTIATE_TEST_SUITE_P(All, CodecEdge, ::testing::ValuesIn(allConfigs(512)),
                         [](const auto& info) { return configName(info.param); });

}  // namespace
}  // namespace test
}  // namespace qccl
