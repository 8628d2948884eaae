// qccl-bench's alpha-beta model (bench/model.cc): the ring fit, the pipelined sum of wire and codec
// time, and the break-even link rate found by bisection.
#include "bench/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

TEST(BenchModel, FitRingRecoversAlphaAndBeta) {
  const int n = 4;
  const double alpha = 50e-6, beta = 8e-9;  // 1 Gbit/s
  std::vector<double> w, t;
  for (double bytes : {1e6, 4e6, 16e6, 64e6}) {
    w.push_back(bytes);
    t.push_back(2 * (n - 1) * alpha + bytes * beta);
  }
  const bench::LinkFit f = bench::fitRing(w, t, n);
  ASSERT_TRUE(f.ok);
  EXPECT_NEAR(f.alpha, alpha, 1e-9);
  EXPECT_NEAR(f.beta, beta, 1e-15);
  EXPECT_NEAR(f.gbit(), 1.0, 1e-6);
  EXPECT_FALSE(bench::fitRing({1e6}, {1e-3}, n).ok);  // one size: no line
}

TEST(BenchModel, PipelinedIsMaxPlusMinOverRounds) {
  EXPECT_DOUBLE_EQ(bench::pipelinedSeconds(8.0, 2.0, 4), 8.5);
  EXPECT_DOUBLE_EQ(bench::pipelinedSeconds(2.0, 8.0, 4), 8.5);
  EXPECT_DOUBLE_EQ(bench::pipelinedSeconds(3.0, 5.0, 1), 8.0);  // one round: nothing overlaps
  EXPECT_DOUBLE_EQ(bench::pipelinedSeconds(3.0, 5.0, 0), 8.0);  // rounds below 1 count as 1
}

TEST(BenchModel, CallModelScalesTheWireWithTheRate) {
  bench::CallModel m;
  m.fixedS = 1e-4;
  m.bytes = 1e6;
  m.slowdown = 1.5;
  m.cpuS = 0;
  m.chunkRounds = 4;
  EXPECT_NEAR(m.secondsAt(1.0), 1e-4 + 1e6 * 1.5 * 8e-9, 1e-12);
  EXPECT_NEAR(m.secondsAt(2.0), 1e-4 + 1e6 * 1.5 * 4e-9, 1e-12);
}

TEST(BenchModel, BreakEvenSolvesRingEqualsCompressed) {
  bench::LinkFit fit;
  fit.ok = true;
  fit.alpha = 50e-6;
  fit.beta = 8e-9;
  const int n = 4, r0 = 2 * (n - 1);
  const double w0 = 96e6;  // 64 MiB-ish fp32 ring bytes per rank
  bench::CallModel m;
  m.fixedS = 2 * fit.alpha;
  m.bytes = 3e6;
  m.slowdown = 1.2;
  m.cpuS = 0.04;
  m.chunkRounds = 8;
  const double be = bench::breakEvenGbit(fit, w0, r0, m);
  ASSERT_GT(be, 0);
  ASSERT_FALSE(std::isinf(be));
  const double ring = r0 * fit.alpha + w0 * 8e-9 / be;
  EXPECT_NEAR(m.secondsAt(be) / ring, 1.0, 1e-3);
  EXPECT_GT(r0 * fit.alpha + w0 * 8e-9 / (be / 2), m.secondsAt(be / 2));  // pays below it
  EXPECT_LT(r0 * fit.alpha + w0 * 8e-9 / (be * 2), m.secondsAt(be * 2));  // not above it
  // More bytes than the ring's: never pays. No CPU and fewer rounds: pays at any rate.
  bench::CallModel worse = m;
  worse.bytes = 2 * w0;
  EXPECT_EQ(bench::breakEvenGbit(fit, w0, r0, worse), 0);
  bench::CallModel free = m;
  free.cpuS = 0;
  free.slowdown = 1;
  EXPECT_TRUE(std::isinf(bench::breakEvenGbit(fit, w0, r0, free)));
  bench::LinkFit none;
  EXPECT_EQ(bench::breakEvenGbit(none, w0, r0, m), 0);
}

}  // namespace
