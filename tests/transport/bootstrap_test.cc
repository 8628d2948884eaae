// Bootstrap of the UCX transport, in one process over real sockets: unique ids, the allgather
// through rank 0, and its failures (mismatch, duplicate rank, missing ranks).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

// ----------------------------------------------------------------------------------------------

TEST(Bootstrap, UniqueIdRoundTrip) {
  UniqueId a, b;
  uniqueIdFromAddress(&a, "127.0.0.1", 29500);
  uniqueIdFromAddress(&b, "127.0.0.1", 29500);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  BootstrapAddress pa = parseUniqueId(a);
  EXPECT_EQ(pa.host, "127.0.0.1");
  EXPECT_EQ(pa.port, 29500);
  uniqueIdFromAddress(&b, "127.0.0.1", 29501);
  EXPECT_NE(parseUniqueId(b).nonce, pa.nonce);
  EXPECT_THROW(uniqueIdFromAddress(&a, "h", 0), Error);
  EXPECT_THROW(uniqueIdFromAddress(&a, std::string(101, 'h').c_str(), 1), Error);
  EXPECT_THROW(uniqueIdFromAddress(&a, nullptr, 1), Error);
  UniqueId junk{};
  try {
    parseUniqueId(junk);
    FAIL() << "junk id accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  getUniqueId(&a);
  getUniqueId(&b);
  EXPECT_NE(parseUniqueId(a).nonce, parseUniqueId(b).nonce);
  EXPECT_GT(parseUniqueId(a).port, 0);
}

TEST(Bootstrap, SocketIfnameIsHonoured) {
  UniqueId id;
  setenv("QCCL_SOCKET_IFNAME", "lo", 1);
  getUniqueId(&id);
  EXPECT_EQ(parseUniqueId(id).host, "127.0.0.1");
  setenv("QCCL_SOCKET_IFNAME", "no-such-if0", 1);
  EXPECT_THROW(getUniqueId(&id), Error);
  unsetenv("QCCL_SOCKET_IFNAME");
}

TEST(Bootstrap, AllgatherInThreads) {
  constexpr int n = 5;
  UniqueId id;
  getUniqueId(&id);
  std::vector<std::vector<std::string>> got(n);
  std::vector<std::string> errs(n);
  std::vector<std::thread> th;
  for (int r = n - 1; r >= 0; --r) {  // rank 0 last: the others must retry their connects
    th.emplace_back([&, r] {
      try {
        got[r] = bootstrapAllgather(id, n, r, std::string(r * 100 + 1, static_cast<char>('a' + r)), 20);
      } catch (const std::exception& e) {
        errs[r] = e.what();
      }
    });
    if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : th) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errs[r], "");
    ASSERT_EQ(got[r].size(), static_cast<size_t>(n));
    for (int q = 0; q < n; ++q) EXPECT_EQ(got[r][q], std::string(q * 100 + 1, static_cast<char>('a' + q)));
  }
}

TEST(Bootstrap, DuplicateRankIsAMismatch) {
  UniqueId id;
  getUniqueId(&id);
  std::vector<ErrorCode> codes(3, ErrorCode::kSuccess);
  std::vector<std::thread> th;
  const int ranks[3] = {0, 1, 1};
  for (int i = 0; i < 3; ++i) {
    th.emplace_back([&, i] {
      try {
        bootstrapAllgather(id, 3, ranks[i], "x", 10);
      } catch (const Error& e) {
        codes[i] = e.code();
      }
    });
  }
  for (auto& t : th) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(codes[i], ErrorCode::kMismatch) << i;
}

TEST(Bootstrap, MissingRootTimesOut) {
  UniqueId id;
  getUniqueId(&id);
  auto t0 = Clock::now();
  try {
    bootstrapAllgather(id, 2, 1, "x", 0.5);
    FAIL() << "joined a rank 0 that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_THROW(bootstrapAllgather(id, 2, 2, "x", 1), Error);
  EXPECT_THROW(bootstrapAllgather(id, 2, 0, "x", 0), Error);
}

TEST(Bootstrap, MissingRankTimesOutOnRoot) {
  UniqueId id;
  getUniqueId(&id);
  try {
    bootstrapAllgather(id, 2, 0, "x", 0.5);
    FAIL() << "root finished alone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 of 2"), std::string::npos) << e.what();
  }
}

// Three ranks of one bootstrap: rank 2 in a child process forked before any thread exists, where
// child(links) runs and its exit ends the process (returning means exit 0; a throw, exit 1); ranks
// 0 and 1 in threads of this process, where peer(rank, links) runs and then keeps the links 300 ms
// more, so that rank 0 relays what it heard before it leaves. Expects clean exits and no errors.
template <class Child, class Peer>
void threeRanksWithRank2InAChild(Child child, Peer peer) {
  UniqueId id;
  getUniqueId(&id);
  pid_t pid = fork();
  if (pid == 0) {
    try {
      BootstrapResult r = bootstrapConnect(id, 3, 2, "c", 10);
      child(*r.links);
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  std::vector<std::string> errs(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      try {
        BootstrapResult res = bootstrapConnect(id, 3, r, "p", 10);
        peer(r, *res.links);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      } catch (const std::exception& e) {
        errs[r] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errs[r], "") << "rank " << r;
}

// When rank 2 leaves in good order the others must not call it dead; when it just exits, rank 0
// sees its connection close and rank 1 hears it from rank 0.
TEST(BootstrapLinks, DeathIsReportedAndGoodbyeIsNot) {
  for (bool graceful : {true, false}) {
    SCOPED_TRACE(graceful ? "goodbye" : "death");
    std::vector<std::vector<int>> dead(2);
    threeRanksWithRank2InAChild(
        [&](BootstrapLinks&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          if (!graceful) _exit(0);  // no destructors: the links close without a goodbye
        },
        [&](int r, BootstrapLinks& links) {
          auto until = Clock::now() + std::chrono::seconds(graceful ? 1 : 5);
          while (Clock::now() < until && dead[r].empty()) {
            for (int d : links.poll()) dead[r].push_back(d);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        });
    for (int r = 0; r < 2; ++r) {
      if (graceful) {
        EXPECT_TRUE(dead[r].empty()) << "rank " << r;
      } else {
        EXPECT_EQ(dead[r], std::vector<int>{2}) << "rank " << r;
      }
    }
  }
}

// Rank 2 aborts and exits at once, without a goodbye: rank 0 hears the notice from rank 2, rank 1
// through rank 0, both with the code and the reason (cut to kMaxLinkReason bytes), then the death.
TEST(BootstrapLinks, AbortNoticeCarriesItsReasonThroughTheHub) {
  const std::string reason = "codec differs on rank 2: " + std::string(400, 'r');
  std::vector<LinkEvents> got(2);
  std::vector<std::vector<int>> dead(2);
  threeRanksWithRank2InAChild(
      [&](BootstrapLinks& links) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        links.sendAbort(static_cast<int32_t>(ErrorCode::kMismatch), reason);
        _exit(0);  // right after the notice, no destructors
      },
      [&](int r, BootstrapLinks& links) {
        auto until = Clock::now() + std::chrono::seconds(10);
        LinkEvents ev;
        while (Clock::now() < until && (!got[r].abort || dead[r].empty())) {
          links.poll(&ev);
          if (ev.abort && !got[r].abort) got[r] = ev;
          for (int d : ev.dead) dead[r].push_back(d);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(got[r].abort);
    EXPECT_EQ(got[r].abortFrom, 2);
    EXPECT_EQ(got[r].abortCode, static_cast<int32_t>(ErrorCode::kMismatch));
    EXPECT_EQ(got[r].abortReason, reason.substr(0, BootstrapLinks::kMaxLinkReason));
    EXPECT_EQ(dead[r], std::vector<int>{2});
  }
}

}  // namespace
}  // namespace qccl
