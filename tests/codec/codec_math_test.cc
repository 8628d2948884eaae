// The scalar math that defines the wire bits: Philox known answers, fp16/bf16 rounding against the
// compiler's own conversions, dyn8 tables, and the statistics of stochastic rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "codec/codec_math.hpp"
#include "codec_test_util.hpp"

namespace qccl {
namespace test {
namespace {

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(CodecMath, PhiloxKnownAnswers) {
  struct Kat {
    math::U32x4 ctr;
    uint32_t k0, k1;
    uint32_t want[4];
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    math::U32x4 r = math::philox4x32(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.want[i]) << "word " << i;
  }
}

// _Float16 conversions round to nearest even in hardware (F16C) or libgcc; codec_math must agree
// on every non-NaN input, and give the canonical NaN.
TEST(CodecMath, HalfConversionMatchesCompiler) {
  uint64_t checked = 0;
  for (uint64_t x = 0; x <= 0xffffffffull; x += 4093) {
    float f = math::bitsFloat((uint32_t)x);
    uint16_t got = math::floatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got, 0x7e00);
      continue;
    }
    _Float16 h = (_Float16)f;
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(got, want) << std::hex << x;
    ++checked;
  }
  EXPECT_GT(checked, 1000000u);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    _Float16 hv;
    uint16_t hb = (uint16_t)h;
    std::memcpy(&hv, &hb, 2);
    float want = (float)hv;
    float got = math::halfToFloat(hb);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(bitsOf(got), bitsOf(want)) << std::hex << h;
      ASSERT_EQ(math::floatToHalf(got), hb);  // exact values round-trip
    }
  }
}

TEST(CodecMath, Bf16RoundsToNearestEven) {
  EXPECT_EQ(math::floatToBf16(math::bitsFloat(0x3f808000u)), 0x3f80u);  // tie, even stays
  EXPECT_EQ(math::floatToBf16(math::bitsFloat(0x3f818000u)), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(math::floatToBf16(math::bitsFloat(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(math::floatToBf16(math::bitsFloat(0x7f7fffffu)), 0x7f80u);  // FLT_MAX rounds to Inf
  EXPECT_EQ(math::floatToBf16(NAN), 0x7fc0u);
  EXPECT_EQ(math::floatToBf16(-INFINITY), 0xff80u);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = math::bf16ToFloat((uint16_t)b);
    if (!std::isnan(f)) {
      ASSERT_EQ(math::floatToBf16(f), b);
    }
  }
}

TEST(CodecMath, Dyn8TablesAreMonotone) {
  math::Dyn8Tables t;
  math::fillDyn8Tables(&t);
  EXPECT_EQ(t.magnitude[0], 0.0f);
  EXPECT_EQ(t.magnitude[127], 1.0f);
  for (int k = 0; k < 127; ++k) {
    ASSERT_LT(t.magnitude[k], t.threshold[k]);
    ASSERT_LT(t.threshold[k], t.magnitude[k + 1]);
    // The search returns the nearest code, so the code of a magnitude is itself.
    ASSERT_EQ(math::dyn8Code(t.magnitude[k + 1], t.threshold), (uint32_t)k + 1);
  }
}

// Stochastic maxmin is unbiased: E[decoded] = v. Each trial decodes to one of the two levels
// around v, so its variance is at most step^2/4 and the mean of N trials has standard deviation
// at most step / (2 sqrt(N)). We allow 5 of those (two-sided tail ~6e-7; the seed is fixed, so
// the outcome is deterministic), and check that round-to-nearest fails the same test.
TEST(CodecMath, StochasticRoundingIsUnbiased) {
  const int kTrials = 4000;
  const size_t n = 64;
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = (float)i / (float)(n - 1);  // min 0, max 1 in every trial
  for (int bits : {2, 4, 8}) {
    CodecConfig cfg;
    cfg.codec = CodecId::kMaxMin;
    cfg.bits = bits;
    cfg.bucket = 64;
    const double step = 1.0 / ((1 << bits) - 1);
    const double tol = 5 * step / (2 * std::sqrt((double)kTrials));
    for (bool sr : {true, false}) {
      cfg.stochastic = sr;
      cfg.seed = 0x5eed;
      std::vector<double> mean(n, 0.0);
      for (int t = 0; t < kTrials; ++t) {
        EncodeParams p;
        p.rngOffset = (uint64_t)t;
        std::vector<float> d = decodeVec(encodeVec(cfg, g, nullptr, p), n);
        for (size_t i = 0; i < n; ++i) mean[i] += d[i] / kTrials;
      }
      double worst = 0;
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(mean[i] - g[i]));
      if (sr)
        EXPECT_LT(worst, tol) << bits << " bits";
      else
        EXPECT_GT(worst, tol) << bits << " bits: nearest rounding should show its bias";
    }
  }
}

// The wire levels follow the spec element by element: q_i = maxminLevel(v_i, params, u_i) with
// u_i = stochasticUniform(seed, rngOffset, i), i counted from the start of the encode call.
TEST(CodecMath, StochasticLevelsFollowThePhiloxStream) {
  CodecConfig cfg;
  cfg.codec = CodecId::kMaxMin;
  cfg.stochastic = true;
  cfg.seed = 0x0123456789abcdefull;
  cfg.bucket = 64;
  for (int bits : {2, 4, 8}) {
    cfg.bits = bits;
    const size_t n = 64 * 5 + 13;
    std::vector<float> g = gaussian(n, 12);
    EncodeParams p;
    p.rngOffset = 0xfedcba9876543210ull;
    std::vector<uint8_t> w = encodeVec(cfg, g, nullptr, p);
    const uint8_t* block = w.data() + kWireHeaderBytes;
    for (size_t b = 0; b < n; b += 64) {
      size_t m = std::min<size_t>(64, n - b);
      float mn, mx;
      std::memcpy(&mn, block, 4);
      std::memcpy(&mx, block + 4, 4);
      math::MaxMinParams prm = math::maxminParams(mn, mx, bits);
      for (size_t i = 0; i < m; ++i) {
        uint32_t word;
        std::memcpy(&word, block + 8 + 4 * (i * bits / 32), 4);
        uint32_t q = (word >> (i * bits % 32)) & ((1u << bits) - 1);
        float u = math::stochasticUniform(cfg.seed, p.rngOffset, b + i);
        ASSERT_EQ(q, math::maxminLevel(g[b + i], prm, u)) << "element " << b + i;
      }
      block += math::bucketBlockBytes(CodecId::kMaxMin, bits, m);
    }
  }
}

TEST(CodecMath, StochasticIsReproducibleAndKeyed) {
  CodecConfig cfg;
  cfg.codec = CodecId::kMaxMin;
  cfg.stochastic = true;
  cfg.seed = 42;
  std::vector<float> g = gaussian(5000, 8);
  EncodeParams p;
  p.rngOffset = 77;
  auto a = encodeVec(cfg, g, nullptr, p), b = encodeVec(cfg, g, nullptr, p);
  EXPECT_EQ(a, b);
  p.rngOffset = 78;
  EXPECT_NE(a, encodeVec(cfg, g, nullptr, p));
  p.rngOffset = 77;
  cfg.seed = 43;
  EXPECT_NE(a, encodeVec(cfg, g, nullptr, p));
}

}  // namespace
}  // namespace test
}  // namespace qccl
