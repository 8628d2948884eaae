// Faults over loopback ranks: mismatched counts, codecs and call order end in an error on every
// rank (no hang, no garbage); a missing peer times out; a failed communicator fails fast.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "coll_test_util.hpp"
#include "core/config.hpp"

namespace qccl {
namespace test {
namespace {

using Ms = std::chrono::milliseconds;

struct Outcome {
  bool threw = false;
  ErrorCode code = ErrorCode::kSuccess;
  std::string what;
  bool failedAfter = false;
};

// Runs one call per rank (which may differ per rank) and records how each ended.
std::vector<Outcome> runCalls(int n, const Options& opts, const std::function<void(Communicator&, int)>& call) {
  std::vector<Outcome> out(n);
  runRanks(n, opts, [&](Communicator& c, int r) {
    try {
      call(c, r);
    } catch (const Error& e) {
      out[r].threw = true;
      out[r].code = e.code();
      out[r].what = e.what();
    }
    out[r].failedAfter = c.failed();
  });
  return out;
}

Options faultOptions() {
  Options o;
  o.timeoutSec = 20;  // far above the expected time: a hang would show as a slow test
  o.minCompressBytes = 0;
  return o;
}

void expectAllFailed(const std::vector<Outcome>& out, Clock::time_point start) {
  bool sawMismatch = false;
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_TRUE(out[r].threw) << "rank " << r << " returned normally";
    EXPECT_NE(out[r].code, ErrorCode::kTimeout) << "rank " << r << ": " << out[r].what;
    EXPECT_TRUE(out[r].failedAfter) << "rank " << r;
    sawMismatch |= out[r].code == ErrorCode::kMismatch;
  }
  EXPECT_TRUE(sawMismatch) << "no rank reported the mismatch itself";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << "ranks waited instead of failing fast";
}

TEST(Faults, MismatchedCountsFailOnEveryRank) {
  for (Algo algo : {Algo::kRing, Algo::kSra, Algo::kAllgather}) {
    for (int n : {2, 3, 5}) {
      SCOPED_TRACE(std::string(algoName(algo)) + " ranks " + std::to_string(n));
      auto start = Clock::now();
      auto out = runCalls(n, faultOptions(), [&](Communicator& c, int r) {
        size_t count = r == n - 1 ? 1001 : 1000;
        std::vector<float> buf = exactInput(count, r);
        TensorOpts t;
        t.id = 21;
        t.algo = algo;
        t.codec = algo == Algo::kRing ? CodecId::kFp32 : CodecId::kOneBit;
        c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
      });
      expectAllFailed(out, start);
    }
  }
}

TEST(Faults, MismatchedCodecsFailOnEveryRank) {
  const std::pair<CodecId, CodecId> pairs[] = {
      {CodecId::kOneBit, CodecId::kSignScale}, {CodecId::kMaxMin, CodecId::kDyn8}, {CodecId::kFp16, CodecId::kBf16}};
  for (auto [a, b] : pairs) {
    for (int n : {2, 4}) {
      SCOPED_TRACE(std::string(codecName(a)) + " vs " + codecName(b) + " ranks " + std::to_string(n));
      auto start = Clock::now();
      auto out = runCalls(n, faultOptions(), [&](Communicator& c, int r) {
        std::vector<float> buf = exactInput(4096, r);
        TensorOpts t;
        t.id = 21;
        t.codec = r == 0 ? b : a;
        t.algo = (a == CodecId::kFp16) ? Algo::kRing : Algo::kSra;
        c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, RedOp::kSum, t);
      });
      expectAllFailed(out, start);
    }
  }
}

TEST(Faults, CallsOutOfOrderFailOnEveryRank) {
  // Rank 0 reduces tensor B before tensor A; the others A before B.
  const int n = 3;
  auto start = Clock::now();
  auto out = runCalls(n, faultOptions(), [&](Communicator& c, int r) {
    std::vector<float> a = exactInput(1000, r), b = exactInput(3000, r);
    std::vector<float>* order[2] = {&a, &b};
    if (r == 0) std::swap(order[0], order[1]);
    for (std::vector<float>* v : order)
      c.allreduce(v->data(), v->data(), v->size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
  });
  expectAllFailed(out, start);
}

TEST(Faults, MissingPeerTimesOutThenFailsFast) {
  Options opts;
  opts.timeoutSec = 0.3;
  std::atomic<bool> rank0Done{false};
  std::vector<Outcome> out(2), later(2);
  runRanks(2, opts, [&](Communicator& c, int r) {
    std::vector<float> buf = exactInput(100, r);
    if (r == 0) {
      auto start = Clock::now();
      try {
        c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
      } catch (const Error& e) {
        out[0].threw = true;
        out[0].code = e.code();
      }
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
      EXPECT_TRUE(c.failed());
      try {
        c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
      } catch (const Error& e) {
        later[0].code = e.code();
      }
      rank0Done = true;
    } else {
      // Rank 1 is late: by the time it calls, rank 0 has given up and told it so.
      while (!rank0Done) std::this_thread::sleep_for(Ms(5));
      try {
        c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
      } catch (const Error& e) {
        later[1].code = e.code();
      }
      EXPECT_TRUE(c.failed());
    }
  });
  EXPECT_TRUE(out[0].threw);
  EXPECT_EQ(out[0].code, ErrorCode::kTimeout);
  EXPECT_EQ(later[0].code, ErrorCode::kCommFailed);
  EXPECT_EQ(later[1].code, ErrorCode::kRemoteError);
}

TEST(Faults, AbortReachesPeers) {
  Options opts;
  opts.timeoutSec = 20;
  std::vector<ErrorCode> codes(3, ErrorCode::kSuccess);
  auto start = Clock::now();
  runRanks(3, opts, [&](Communicator& c, int r) {
    if (r == 2) {
      c.abort("test abort");
      EXPECT_TRUE(c.failed());
    }
    std::vector<float> buf = exactInput(100, r);
    try {
      c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
    } catch (const Error& e) {
      codes[r] = e.code();
    }
  });
  EXPECT_EQ(codes[0], ErrorCode::kRemoteError);
  EXPECT_EQ(codes[1], ErrorCode::kRemoteError);
  EXPECT_EQ(codes[2], ErrorCode::kCommFailed);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace test
}  // namespace qccl
