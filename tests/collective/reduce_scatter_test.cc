// Reduce-scatter over loopback ranks: exact for fp32 on the wire (sum, avg, in place, fp16/bf16
// buffers), bit for bit against a reference of sra's scatter stage for the lossy codecs (with the
// worker residuals carried over several calls), and mismatched counts failing on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "coll_test_util.hpp"
#include "core/memory_space.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace test {
namespace {

Options testOptions() {
  Options o;
  o.timeoutSec = 20;
  return o;
}

// sra's scatter stage on NCCL's shards: rank q != p quantizes shard p of its input with its worker
// residual (indexed like the whole input); owner p starts from its own values of the shard, exact,
// and adds the n - 1 decodings in rank order.
std::vector<std::vector<float>> refReduceScatter(const CodecConfig& cfg, const std::vector<std::vector<float>>& x,
                                                 size_t shard, std::vector<std::vector<float>>* worker) {
  const int n = static_cast<int>(x.size());
  if (worker->empty()) worker->assign(n, std::vector<float>(shard * n, 0.0f));
  std::vector<std::vector<float>> out(n, std::vector<float>(shard));
  for (int p = 0; p < n; ++p) {
    const size_t b = static_cast<size_t>(p) * shard;
    std::copy(x[p].begin() + b, x[p].begin() + b + shard, out[p].begin());
    for (int q = 0; q < n; ++q) {
      if (q == p) continue;
      std::vector<float> d = quantize(cfg, x[q].data() + b, (*worker)[q].data() + b, shard);
      for (size_t i = 0; i < shard; ++i) out[p][i] = out[p][i] + d[i];
    }
  }
  return out;
}

class ReduceScatterRanks : public ::testing::TestWithParam<int> {};

TEST_P(ReduceScatterRanks, Fp32IsExactForSumAvgAndInPlace) {
  const int n = GetParam();
  for (size_t shard : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
    SCOPED_TRACE("ranks " + std::to_string(n) + " shard " + std::to_string(shard));
    runRanks(n, testOptions(), [&](Communicator& c, int r) {
      const std::vector<float> x = exactInput(shard * n, r);
      std::vector<float> recv(shard, -1.0f), inplace = x;
      TensorOpts t;
      t.codec = CodecId::kFp32;
      c.reduceScatter(x.data(), recv.data(), shard, DataType::kFloat32, RedOp::kSum, t);
      c.reduceScatter(inplace.data(), inplace.data() + r * shard, shard, DataType::kFloat32, RedOp::kAvg, t);
      std::vector<float> sums(shard, 0.0f);
      for (int q = 0; q < n; ++q) {
        const std::vector<float> xq = exactInput(shard * n, q);
        for (size_t i = 0; i < shard; ++i) sums[i] += xq[r * shard + i];
      }
      for (size_t i = 0; i < shard; ++i) {
        const float sum = sums[i];
        ASSERT_EQ(recv[i], sum) << "rank " << r << " element " << i;
        ASSERT_EQ(inplace[r * shard + i], sum * (1.0f / static_cast<float>(n))) << "avg, element " << i;
      }
    });
  }
}

TEST_P(ReduceScatterRanks, LossyCodecsMatchTheScatterStageWithErrorFeedback) {
  const int n = GetParam();
  const size_t shard = 5003;  // not a multiple of the bucket: every shard ends in a partial bucket
  Options opts = testOptions();
  opts.chunkBytes = 8 << 10;  // several chunks per shard
  for (CodecId codec : {CodecId::kFp16, CodecId::kOneBit, CodecId::kSignScale, CodecId::kMaxMin, CodecId::kDyn8}) {
    SCOPED_TRACE(std::string("codec ") + codecName(codec) + " ranks " + std::to_string(n));
    CodecConfig cfg = opts.codec;
    cfg.codec = codec;
    cfg.bits = 0;
    cfg = resolveConfig(cfg);
    // Three calls on the same communicators, so that the later ones run with the residuals.
    const int steps = 3;
    std::vector<std::vector<std::vector<float>>> x(steps), out(steps);
    for (int step = 0; step < steps; ++step) {
      x[step].resize(n);
      out[step].assign(n, std::vector<float>(shard));
      for (int r = 0; r < n; ++r) {
        x[step][r].resize(shard * n);
        for (size_t i = 0; i < x[step][r].size(); ++i) x[step][r][i] = std::sin(0.01f * i + r + step) * (1 + r);
      }
    }
    runRanks(n, opts, [&](Communicator& c, int r) {
      TensorOpts t;
      t.id = 11;
      t.codec = codec;
      t.algo = Algo::kSra;
      for (int step = 0; step < steps; ++step)
        c.reduceScatter(x[step][r].data(), out[step][r].data(), shard, DataType::kFloat32, RedOp::kSum, t);
    });
    std::vector<std::vector<float>> worker;
    for (int step = 0; step < steps; ++step) {
      auto ref = refReduceScatter(cfg, x[step], shard, &worker);
      for (int r = 0; r < n; ++r) EXPECT_TRUE(bitEqual(out[step][r], ref[r])) << "step " << step << " rank " << r;
    }
  }
}

TEST_P(ReduceScatterRanks, HalfBuffersAreReducedExactly) {
  const int n = GetParam();
  const size_t shard = 777;
  for (DataType dt : {DataType::kFloat16, DataType::kBfloat16}) {
    runRanks(n, testOptions(), [&](Communicator& c, int r) {
      // Small integers: exact in both formats; converted through the library's own casts.
      std::vector<float> x(shard * n), sums(shard, 0.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 41) - 20 + r);
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < shard; ++i)
          sums[i] += static_cast<float>(static_cast<int>((r * shard + i) % 41) - 20 + q);
      std::vector<uint16_t> send(x.size()), recv(shard), expect(shard);
      std::unique_ptr<MemorySpace> host = makeHostSpace();
      host->fromFloat(x.data(), dt, send.data(), x.size());
      host->fromFloat(sums.data(), dt, expect.data(), shard);
      TensorOpts t;
      t.codec = CodecId::kFp32;
      c.reduceScatter(send.data(), recv.data(), shard, dt, RedOp::kSum, t);
      EXPECT_EQ(recv, expect) << "rank " << r;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReduceScatterRanks, ::testing::Values(1, 2, 3, 5, 8));

// Rank 0 passes another recvcount: every rank fails (kMismatch where it is seen, kRemoteError from
// the notice), none waits for the timeout. Small counts differ in the first chunk; large ones only
// in the number of equal chunks, which the count folded into the call's tag catches.
TEST(ReduceScatter, MismatchedCountFailsOnEveryRank) {
  for (size_t base : {size_t{100}, size_t{4096}}) {
    Options opts = testOptions();
    opts.timeoutSec = 5;
    opts.chunkBytes = 4 << 10;  // 1024 elements: 4096 and 3072 are 4 and 3 equal chunks
    const int n = 3;
    std::vector<ErrorCode> codes(n, ErrorCode::kSuccess);
    std::vector<std::string> what(n);
    std::vector<TransportPtr> ts = makeLoopbackGroup(n);
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<Communicator>(std::move(ts[r]), opts));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        const size_t shard = r == 0 ? base * 3 / 4 : base;
        std::vector<float> send(shard * n, 1.0f), recv(shard);
        TensorOpts t;
        t.id = 3;
        t.codec = CodecId::kOneBit;
        t.algo = Algo::kSra;
        try {
          comms[r]->reduceScatter(send.data(), recv.data(), shard, DataType::kFloat32, RedOp::kSum, t);
        } catch (const Error& e) {
          codes[r] = e.code();
          what[r] = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
    int seen = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(codes[r] == ErrorCode::kMismatch || codes[r] == ErrorCode::kRemoteError)
          << "base " << base << " rank " << r << ": " << static_cast<int>(codes[r]) << " " << what[r];
      if (codes[r] == ErrorCode::kMismatch) {
        ++seen;
        EXPECT_NE(what[r].find("count"), std::string::npos) << what[r];
      }
    }
    EXPECT_GE(seen, 1) << "base " << base;
  }
}

TEST(ReduceScatter, LossyCodecWithoutIdIsRefusedBeforeAnythingIsSent) {
  runRanks(2, testOptions(), [&](Communicator& c, int) {
    std::vector<float> send(2000, 1.0f), recv(1000);
    TensorOpts t;
    t.codec = CodecId::kOneBit;
    t.algo = Algo::kSra;  // under auto this small tensor would go uncompressed
    try {
      c.reduceScatter(send.data(), recv.data(), 1000, DataType::kFloat32, RedOp::kSum, t);
      ADD_FAILURE() << "accepted a lossy codec without a tensor id";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidUsage);
    }
    EXPECT_FALSE(c.failed());
  });
}

}  // namespace
}  // namespace test
}  // namespace qccl
