// Loopback transport: one thread per rank, exercising matching, ordering, sizes and failures.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "transport/host_key.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Runs body(rank, transport) on one thread per rank and rethrows the first failure's text.
void runRanks(std::vector<TransportPtr>& ts, const std::function<void(int, Transport&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(ts.size());
  for (size_t r = 0; r < ts.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), *ts[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < ts.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

uint32_t pattern(int src, int dst, uint32_t tag, size_t i) {
  return static_cast<uint32_t>(src * 7919 + dst * 104729 + tag * 31 + i * 2654435761u);
}

// The MPI and UCX transports share this notice format; what arrives is untrusted.
TEST(AbortNotice, RoundTripAndUntrustedBytes) {
  ErrorCode code = ErrorCode::kSuccess;
  std::string reason;
  std::vector<char> n = packAbortNotice(ErrorCode::kMismatch, "count differs");
  parseAbortNotice(n.data(), n.size(), &code, &reason);
  EXPECT_EQ(code, ErrorCode::kMismatch);
  EXPECT_EQ(reason, "count differs");

  n = packAbortNotice(ErrorCode::kTimeout, std::string(1000, 'x'));
  EXPECT_EQ(n.size(), kAbortNoticeBytes);  // the reason is cut to fit
  parseAbortNotice(n.data(), n.size(), &code, &reason);
  EXPECT_EQ(code, ErrorCode::kTimeout);
  EXPECT_EQ(reason.size(), kAbortNoticeBytes - 4);

  parseAbortNotice(n.data(), 3, &code, &reason);  // too short for a code
  EXPECT_EQ(code, ErrorCode::kRemoteError);
  EXPECT_TRUE(reason.empty());

  const int32_t bogus[2] = {9999, 0};  // unknown code
  parseAbortNotice(reinterpret_cast<const char*>(bogus), sizeof bogus, &code, &reason);
  EXPECT_EQ(code, ErrorCode::kRemoteError);
  EXPECT_EQ(reason.size(), 4u);
}

TEST(Loopback, RejectsBadArguments) {
  EXPECT_THROW(makeLoopbackGroup(0), Error);
  auto ts = makeLoopbackGroup(2);
  char b[4];
  try {
    ts[0]->isend(2, 0, b, 4);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_THROW(ts[0]->irecv(-1, 0, b, 4), Error);
  EXPECT_THROW(ts[0]->isend(1, kMaxTag, b, 4), Error);
  EXPECT_THROW(ts[0]->irecv(1, 0, nullptr, 4), Error);
  EXPECT_EQ(std::string(ts[1]->name()), "loopback");
  EXPECT_EQ(ts[1]->rank(), 1);
  EXPECT_EQ(ts[1]->size(), 2);
}

// Every rank sends to every rank (itself included) on several tags; receives are posted in a
// different order from the sends so that both the posted and the unexpected paths are used.
TEST(Loopback, AllToAllManyTags) {
  for (int n : {1, 2, 3, 8}) {
    auto ts = makeLoopbackGroup(n);
    constexpr int kTags = 5;
    constexpr size_t kLen = 257;
    runRanks(ts, [&](int rank, Transport& t) {
      std::vector<std::vector<uint32_t>> out(n * kTags, std::vector<uint32_t>(kLen));
      std::vector<std::vector<uint32_t>> in(n * kTags, std::vector<uint32_t>(kLen, 0));
      std::vector<RequestPtr> reqs;
      for (int p = 0; p < n; ++p) {
        for (int k = 0; k < kTags; ++k) {
          auto& b = in[p * kTags + k];
          reqs.push_back(t.irecv(p, 1000 + (kTags - 1 - k), b.data(), b.size() * 4));
        }
      }
      for (int p = n - 1; p >= 0; --p) {
        for (int k = 0; k < kTags; ++k) {
          auto& b = out[p * kTags + k];
          for (size_t i = 0; i < kLen; ++i) b[i] = pattern(rank, p, 1000 + k, i);
          reqs.push_back(t.isend(p, 1000 + k, b.data(), b.size() * 4));
        }
      }
      waitAll(t, reqs, after(10), "all-to-all");
      for (int p = 0; p < n; ++p) {
        for (int k = 0; k < kTags; ++k) {
          uint32_t tag = 1000 + (kTags - 1 - k);
          EXPECT_EQ(reqs[p * kTags + k]->bytes(), kLen * 4);
          for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(in[p * kTags + k][i], pattern(p, rank, tag, i));
        }
      }
    });
  }
}

// Many messages on one (source, tag) arrive in send order, whether the receives are posted
// before, after or interleaved with the sends.
TEST(Loopback, FifoPerSourceAndTag) {
  auto ts = makeLoopbackGroup(2);
  constexpr int kMsgs = 2000;
  runRanks(ts, [&](int rank, Transport& t) {
    if (rank == 0) {
      std::vector<uint32_t> vals(kMsgs);
      std::vector<RequestPtr> reqs;
      for (int i = 0; i < kMsgs; ++i) {
        vals[i] = i;
        reqs.push_back(t.isend(1, 7, &vals[i], 4));
        if (i % 3 == 0) std::this_thread::yield();
      }
      waitAll(t, reqs, after(10), "sends");
    } else {
      std::vector<uint32_t> got(kMsgs, ~0u);
      std::vector<RequestPtr> reqs;
      for (int i = 0; i < kMsgs; ++i) {
        reqs.push_back(t.irecv(0, 7, &got[i], 4));
        if (i % 5 == 0) std::this_thread::yield();
      }
      waitAll(t, reqs, after(10), "recvs");
      for (int i = 0; i < kMsgs; ++i) ASSERT_EQ(got[i], static_cast<uint32_t>(i));
    }
  });
}

TEST(Loopback, LargeAndZeroLength) {
  auto ts = makeLoopbackGroup(2);
  const size_t big = (64u << 20) + 3;  // odd size on purpose
  runRanks(ts, [&](int rank, Transport& t) {
    int peer = 1 - rank;
    std::vector<unsigned char> out(big), in(big + 16, 0xEE);
    for (size_t i = 0; i < big; ++i) out[i] = static_cast<unsigned char>((i * 131 + rank) >> 3);
    std::vector<RequestPtr> reqs;
    reqs.push_back(t.irecv(peer, 1, in.data(), in.size()));
    reqs.push_back(t.irecv(peer, 2, nullptr, 0));
    char z = 'z';
    reqs.push_back(t.irecv(peer, 3, &z, 1));  // zero bytes into a non-empty buffer
    reqs.push_back(t.isend(peer, 1, out.data(), big));
    reqs.push_back(t.isend(peer, 2, nullptr, 0));
    reqs.push_back(t.isend(peer, 3, out.data(), 0));
    waitAll(t, reqs, after(20), "large");
    EXPECT_EQ(reqs[0]->bytes(), big);
    EXPECT_EQ(reqs[1]->bytes(), 0u);
    EXPECT_EQ(reqs[2]->bytes(), 0u);
    EXPECT_EQ(z, 'z');
    for (size_t i = 0; i < big; ++i) {
      ASSERT_EQ(in[i], static_cast<unsigned char>((i * 131 + peer) >> 3)) << i;
    }
    EXPECT_EQ(in[big], 0xEE);
  });
}

TEST(Loopback, TruncationIsAnError) {
  auto ts = makeLoopbackGroup(2);
  char out[16] = "0123456789abcde";
  char in[8] = {};
  for (bool postFirst : {true, false}) {
    std::vector<RequestPtr> reqs;
    if (postFirst) reqs.push_back(ts[1]->irecv(0, 4, in, sizeof in));
    auto s = ts[0]->isend(1, 4, out, sizeof out);
    if (!postFirst) reqs.push_back(ts[1]->irecv(0, 4, in, sizeof in));
    try {
      waitAll(*ts[1], reqs, after(5), "truncated recv");
      FAIL() << "no error for a truncated message";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
    }
    // The message was consumed: the next one on the same tag is received intact.
    char ok[8] = "abcdefg";
    auto s2 = ts[0]->isend(1, 4, ok, sizeof ok);
    std::vector<RequestPtr> r2;
    r2.push_back(ts[1]->irecv(0, 4, in, sizeof in));
    waitAll(*ts[1], r2, after(5), "next recv");
    EXPECT_STREQ(in, "abcdefg");
  }
}

TEST(Loopback, TimeoutWhenNothingArrives) {
  auto ts = makeLoopbackGroup(2);
  int x = 0;
  std::vector<RequestPtr> reqs;
  reqs.push_back(ts[0]->irecv(1, 9, &x, sizeof x));
  auto t0 = Clock::now();
  try {
    waitAll(*ts[0], reqs, after(0.2), "lonely recv");
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("lonely recv"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  WaitSpec late;
  late.deadline = Clock::now() - std::chrono::seconds(1);
  late.what = "poll";
  EXPECT_THROW(pollWait(*ts[0], late), Error);
  WaitSpec fine;
  fine.deadline = after(10);
  EXPECT_NO_THROW(pollWait(*ts[0], fine));
  // A send after the timed-out receive was dropped must not touch it (run under ASan).
  reqs.clear();
  int y = 5;
  auto s = ts[1]->isend(0, 9, &y, sizeof y);
  reqs.push_back(ts[0]->irecv(1, 9, &x, sizeof x));
  waitAll(*ts[0], reqs, after(5), "late recv");
  EXPECT_EQ(x, 5);
}

// One rank aborts while the others wait on receives that will never complete: every other rank
// must fail with kRemoteError carrying the reason, well before its own deadline.
TEST(Loopback, AbortReachesEveryPeer) {
  constexpr int n = 6;
  auto ts = makeLoopbackGroup(n);
  std::atomic<int> remoteErrors{0};
  runRanks(ts, [&](int rank, Transport& t) {
    if (rank == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      t.sendAbort(ErrorCode::kMismatch, "count differs");
      int peer = -1;
      EXPECT_FALSE(t.pollAbort(&peer, nullptr, nullptr)) << "a rank does not see its own abort";
      return;
    }
    int x = 0;
    std::vector<RequestPtr> reqs;
    reqs.push_back(t.irecv((rank + 1) % n, 11, &x, sizeof x));
    auto t0 = Clock::now();
    try {
      waitAll(t, reqs, after(30), "waiting");
      ADD_FAILURE() << "rank " << rank << " finished";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRemoteError);
      EXPECT_NE(std::string(e.what()).find("count differs"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
      ++remoteErrors;
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    int peer = -1;
    ErrorCode code = ErrorCode::kSuccess;
    std::string reason;
    ASSERT_TRUE(t.pollAbort(&peer, &code, &reason));  // sticky
    EXPECT_EQ(peer, 3);
    EXPECT_EQ(code, ErrorCode::kMismatch);
    EXPECT_EQ(reason, "count differs");
  });
  EXPECT_EQ(remoteErrors.load(), n - 1);
}

TEST(HostKey, KeysGroupRanksInOrderOfTheirLowestRank) {
  EXPECT_EQ(hostsFromKeys({"b", "a", "b", "c", "a"}), (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(hostsFromKeys({"x"}), (std::vector<int>{0}));
  EXPECT_TRUE(hostsFromKeys({}).empty());
}

TEST(HostKey, LocalKeyNamesTheNetworkNamespaceAndQcclHostIdOverridesIt) {
  unsetenv("QCCL_HOST_ID");
  const std::string key = localHostKey();
  EXPECT_FALSE(key.empty());
  EXPECT_NE(key.find("/net:"), std::string::npos) << key;  // emulated hosts share the hostname
  EXPECT_EQ(localHostKey(), key);
  setenv("QCCL_HOST_ID", "rack3-node7", 1);
  EXPECT_EQ(localHostKey(), "id:rack3-node7");
  unsetenv("QCCL_HOST_ID");
}

TEST(HostKey, LoopbackGroupsReportTheirHosts) {
  auto one = makeLoopbackGroup(3);
  for (auto& t : one) EXPECT_EQ(t->hostOfRanks(), (std::vector<int>{0, 0, 0}));
  auto two = makeLoopbackGroup(4, {7, 7, 2, 7});
  for (auto& t : two) EXPECT_EQ(t->hostOfRanks(), (std::vector<int>{0, 0, 1, 0}));
  EXPECT_THROW(makeLoopbackGroup(2, {1}), Error);
}

}  // namespace
}  // namespace qccl
