// The cross-rank check with a small sum riding along (core/call_check.hpp), on loopback ranks:
// every group size from 1 to 9 (powers of two and the ranks beyond them), sums bit-identical on
// every rank and exact, every kind of disagreement reported on every rank, malformed messages, and
// a peer that gives up.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/call_check.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

WaitSpec spec(double seconds = 20.0) {
  WaitSpec w;
  w.deadline = deadlineIn(seconds);
  w.what = "check";
  return w;
}

// Runs fn(transport, rank) on n loopback ranks, one thread each; an exception fails the test.
void onRanks(int n, const std::function<void(Transport&, int)>& fn, const std::vector<int>& hostOf = {}) {
  std::vector<TransportPtr> ts = makeLoopbackGroup(n, hostOf);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*ts[static_cast<size_t>(r)], r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

void wordsOf(int64_t* w, int64_t count) {
  const int64_t base[CallCheck::kWords] = {7, count, 3 * 256 + 1, 2, 123456789, 0x10001};
  std::memcpy(w, base, sizeof base);
}

// Bit for bit; empty vectors (whose data() may be null) are equal.
bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Small integers: every partial sum is exact in fp32, so any order gives the same bits.
float valueOf(size_t i, int rank) { return static_cast<float>(static_cast<int>(i % 1013) - 500 + 3 * rank); }

TEST(CallCheck, AgreeingRanksGetTheExactSumOnEveryRank) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{256}, size_t{1000}, CallCheck::kMaxFloats}) {
      std::vector<std::vector<float>> outs(static_cast<size_t>(n));
      onRanks(n, [&](Transport& t, int r) {
        int64_t w[CallCheck::kWords];
        wordsOf(w, static_cast<int64_t>(count));
        std::vector<float> in(count), out(count, -1.0f), scratch;
        for (size_t i = 0; i < count; ++i) in[i] = valueOf(i, r);
        EXPECT_EQ(checkCall(t, spec(), w, in.data(), out.data(), count, scratch), -1);
        // In place works too, and the check alone needs no floats.
        EXPECT_EQ(checkCall(t, spec(), w, in.data(), in.data(), count, scratch), -1);
        EXPECT_TRUE(sameBits(in, out));
        EXPECT_EQ(checkCall(t, spec(), w, nullptr, nullptr, count, scratch), -1);
        outs[static_cast<size_t>(r)] = out;
      });
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += valueOf(i, r);
        ASSERT_EQ(outs[0][i], want) << "n " << n << " count " << count << " element " << i;
      }
      for (int r = 1; r < n; ++r)
        EXPECT_TRUE(sameBits(outs[0], outs[static_cast<size_t>(r)]))
            << "n " << n << " count " << count << " rank " << r;
    }
  }
}

TEST(CallCheck, RoundingIsTheSameOnEveryRank) {
  // Values whose sums round: the ranks must still agree bit for bit.
  for (int n : {3, 4, 6, 7}) {
    const size_t count = 4093;
    std::vector<std::vector<float>> outs(static_cast<size_t>(n));
    onRanks(n, [&](Transport& t, int r) {
      int64_t w[CallCheck::kWords];
      wordsOf(w, static_cast<int64_t>(count));
      std::vector<float> in(count), scratch;
      for (size_t i = 0; i < count; ++i) in[i] = 1.0f / static_cast<float>(i + 3 + static_cast<size_t>(r) * 7);
      EXPECT_EQ(checkCall(t, spec(), w, in.data(), in.data(), count, scratch), -1);
      outs[static_cast<size_t>(r)] = in;
    });
    for (int r = 1; r < n; ++r)
      EXPECT_TRUE(sameBits(outs[0], outs[static_cast<size_t>(r)])) << "n " << n << " rank " << r;
  }
}

TEST(CallCheck, AnyDisagreementIsReportedOnEveryRank) {
  for (int n = 2; n <= 9; ++n) {
    for (int odd = 0; odd < n; ++odd) {
      for (int word : {0, 1, 4, 5}) {
        std::vector<int> got(static_cast<size_t>(n), -2);
        onRanks(n, [&](Transport& t, int r) {
          int64_t w[CallCheck::kWords];
          wordsOf(w, 16);
          if (r == odd) w[word] += 1;
          std::vector<float> in(16, 1.0f), out(16, -1.0f), scratch;
          got[static_cast<size_t>(r)] = checkCall(t, spec(), w, in.data(), out.data(), 16, scratch);
          for (float v : out) EXPECT_EQ(v, -1.0f) << "a sum was written although the ranks disagree";
        });
        for (int r = 0; r < n; ++r)
          EXPECT_EQ(got[static_cast<size_t>(r)], word) << "n " << n << " odd rank " << odd << " rank " << r;
      }
    }
  }
}

TEST(CallCheck, DifferentCountsAreAMismatchWhateverTheSizes) {
  // One rank carries more floats (or none) than the others: messages of every size meet, and
  // every rank reports the count, without a truncated receive or a hang.
  for (int n : {2, 3, 4, 5, 8}) {
    for (int odd : {0, n - 1}) {
      for (size_t oddCount : {size_t{0}, size_t{15}, CallCheck::kMaxFloats}) {
        std::vector<int> got(static_cast<size_t>(n), -2);
        onRanks(n, [&](Transport& t, int r) {
          const size_t count = r == odd ? oddCount : 100;
          int64_t w[CallCheck::kWords];
          wordsOf(w, static_cast<int64_t>(count));
          std::vector<float> in(count, 1.0f), scratch;
          const bool withSum = !(r == odd && oddCount == 0);
          got[static_cast<size_t>(r)] =
              checkCall(t, spec(), w, withSum ? in.data() : nullptr, withSum ? in.data() : nullptr, count, scratch);
        });
        for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], 1) << "n " << n << " rank " << r;
      }
    }
  }
}

TEST(CallCheck, AMalformedMessageIsAMismatch) {
  // Rank 1 of 2 sends a 5-byte message, then one whose verdict field is out of range.
  std::vector<int> got(2, -2);
  onRanks(2, [&](Transport& t, int r) {
    int64_t w[CallCheck::kWords];
    wordsOf(w, 4);
    std::vector<float> in(4, 2.0f), scratch;
    if (r == 0) {
      got[0] = checkCall(t, spec(), w, in.data(), in.data(), 4, scratch);
      EXPECT_EQ(checkCall(t, spec(), w, in.data(), in.data(), 4, scratch), 1);
      for (float v : in) EXPECT_EQ(v, 2.0f);
      return;
    }
    const char junk[5] = {1, 2, 3, 4, 5};
    RequestPtr s = t.isend(0, t.tagLimit() - 2, junk, sizeof junk);  // round 1's tag
    std::vector<RequestPtr> reqs;
    reqs.push_back(std::move(s));
    std::vector<char> sink(1 << 17);
    reqs.push_back(t.irecv(0, t.tagLimit() - 2, sink.data(), sink.size()));
    waitAll(t, reqs, deadlineIn(20), "junk");
    int64_t msg[CallCheck::kWords + 1 + 2] = {};
    std::memcpy(msg, w, sizeof w);
    msg[CallCheck::kWords] = -77;  // a verdict no rank sends
    reqs.clear();
    reqs.push_back(t.isend(0, t.tagLimit() - 2, msg, sizeof msg));
    reqs.push_back(t.irecv(0, t.tagLimit() - 2, sink.data(), sink.size()));
    waitAll(t, reqs, deadlineIn(20), "junk");
  });
  EXPECT_EQ(got[0], 1);
}

TEST(CallCheck, APeerThatGivesUpEndsTheCheckWithItsAbort) {
  // Rank 1 never takes part and sends an abort notice: rank 0 stops waiting within the grace
  // second and reports the peer's failure, not a timeout.
  onRanks(2, [&](Transport& t, int r) {
    if (r == 1) {
      t.sendAbort(ErrorCode::kInvalidUsage, "rank 1 gave up");
      return;
    }
    int64_t w[CallCheck::kWords];
    wordsOf(w, 1);
    float x = 1.0f;
    std::vector<float> scratch;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      checkCall(t, spec(60), w, &x, &x, 1, scratch);
      ADD_FAILURE() << "the check completed without its peer";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  });
}

TEST(CallCheck, TrafficCountsEveryMessageSentAndReceived) {
  // Four ranks on two hosts {0, 1} and {2, 3}: recursive doubling pairs 0-1 and 2-3 first (same
  // host), then 0-2 and 1-3 (across), so each rank sends one message within its host and one
  // across; a message is the 7 header words (56 bytes) and the floats. Five ranks: rank 4 is
  // beyond the largest power of two, so ranks 0 and 1 pair first and last (two more messages).
  for (size_t count : {size_t{0}, size_t{100}}) {
    const uint64_t msg = 56 + 4 * count;
    std::vector<CheckTraffic> got(4);
    onRanks(4,
            [&](Transport& t, int r) {
              int64_t w[CallCheck::kWords];
              wordsOf(w, static_cast<int64_t>(count));
              std::vector<float> in(count, 1.0f), scratch;
              CheckTraffic& tr = got[static_cast<size_t>(r)];
              EXPECT_EQ(checkCall(t, spec(), w, count ? in.data() : nullptr, count ? in.data() : nullptr, count,
                                  scratch, &tr),
                        -1);
              // Calls add up.
              EXPECT_EQ(checkCall(t, spec(), w, nullptr, nullptr, count, scratch, &tr), -1);
            },
            {0, 0, 1, 1});
    for (int r = 0; r < 4; ++r) {
      const CheckTraffic& tr = got[static_cast<size_t>(r)];
      EXPECT_EQ(tr.sent, 2 * msg + 2 * 56) << "rank " << r << " count " << count;
      EXPECT_EQ(tr.received, tr.sent) << "rank " << r;
      EXPECT_EQ(tr.sentInterHost, msg + 56) << "rank " << r;
    }
  }
  std::vector<CheckTraffic> got(5);
  onRanks(5, [&](Transport& t, int r) {
    int64_t w[CallCheck::kWords];
    wordsOf(w, 8);
    std::vector<float> in(8, 1.0f), scratch;
    EXPECT_EQ(checkCall(t, spec(), w, in.data(), in.data(), 8, scratch, &got[static_cast<size_t>(r)]), -1);
  });
  uint64_t sent = 0, received = 0;
  for (const CheckTraffic& tr : got) {
    sent += tr.sent;
    received += tr.received;
    EXPECT_EQ(tr.sentInterHost, 0u);  // one host
  }
  EXPECT_EQ(sent, received);
  EXPECT_EQ(sent, (2 * 4 + 2) * (56u + 4 * 8));  // 4 ranks x 2 rounds, then the pair's first and last
}

TEST(CallCheck, TooLargeASumIsRefused) {
  onRanks(1, [&](Transport& t, int) {
    int64_t w[CallCheck::kWords];
    wordsOf(w, 1);
    std::vector<float> in(CallCheck::kMaxFloats + 1), scratch;
    EXPECT_THROW(checkCall(t, spec(), w, in.data(), in.data(), in.size(), scratch), Error);
  });
}

}  // namespace
}  // namespace qccl
