// UCX transport and its bootstrap. In-process tests cover the bootstrap over real sockets; the
// transport tests start their own ranks as child processes (this binary re-executed with
// --child), hand them the unique id through the environment and check their exit status.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "transport/bootstrap.hpp"
#include "transport/transport.hpp"
#include "transport/ucx_transport.hpp"

namespace qccl {
namespace {

std::string selfExe;  // path of this binary, for the children

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string toHex(const UniqueId& id) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : id.internal) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

UniqueId fromHex(const char* s) {
  UniqueId id{};
  if (s == nullptr || std::strlen(s) != 2 * sizeof id.internal) {
    std::fprintf(stderr, "child: bad QCCL_TEST_UID\n");
    std::exit(3);
  }
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    id.internal[i] = static_cast<char>(std::stoi(std::string(s + 2 * i, 2), nullptr, 16));
  }
  return id;
}

// ----------------------------------------------------------------------------------------------
// Children. Each scenario returns the process exit status: 0 when the rank saw what it should.
// ----------------------------------------------------------------------------------------------

#define CHILD_CHECK(cond, ...)                                          \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "rank %d: check failed: %s: ", rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                \
      std::fprintf(stderr, "\n");                                       \
      return 1;                                                         \
    }                                                                   \
  } while (0)

uint32_t pattern(int src, int dst, uint32_t tag, size_t i) {
  return static_cast<uint32_t>(src * 7919 + dst * 104729 + tag * 31 + i * 2654435761u);
}

// Every rank sends to every rank (itself included): small, large and empty messages, then a
// truncated one, which must fail on the receiver only.
int childAllToAll(Transport& t) {
  const int n = t.size(), rank = t.rank();
  const size_t lens[] = {1, 1000, (2u << 20) + 3};  // in uint32 words
  for (uint32_t k = 0; k < 3; ++k) {
    std::vector<std::vector<uint32_t>> out(n), in(n);
    std::vector<RequestPtr> reqs;
    for (int p = 0; p < n; ++p) {
      in[p].assign(lens[k] + 1, 0xdeadbeef);
      reqs.push_back(t.irecv(p, 10 + k, in[p].data(), in[p].size() * 4));
    }
    for (int p = 0; p < n; ++p) {
      out[p].resize(lens[k]);
      for (size_t i = 0; i < lens[k]; ++i) out[p][i] = pattern(rank, p, 10 + k, i);
      reqs.push_back(t.isend(p, 10 + k, out[p].data(), lens[k] * 4));
    }
    waitAll(t, reqs, after(60), "all-to-all");
    for (int p = 0; p < n; ++p) {
      CHILD_CHECK(reqs[p]->bytes() == lens[k] * 4, "got %zu bytes", reqs[p]->bytes());
      for (size_t i = 0; i < lens[k]; ++i) {
        CHILD_CHECK(in[p][i] == pattern(p, rank, 10 + k, i), "word %zu from rank %d", i, p);
      }
      CHILD_CHECK(in[p][lens[k]] == 0xdeadbeef, "wrote past the message");
    }
  }
  std::vector<RequestPtr> empties;
  for (int p = 0; p < n; ++p) empties.push_back(t.irecv(p, 20, nullptr, 0));
  for (int p = 0; p < n; ++p) empties.push_back(t.isend(p, 20, nullptr, 0));
  waitAll(t, empties, after(30), "zero-length");
  for (int p = 0; p < n; ++p) CHILD_CHECK(empties[p]->bytes() == 0, "zero-length got %zu", empties[p]->bytes());

  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  // 4 KiB and 1 MiB into 16 bytes: one eager fragment, and many (or a rendezvous, where
  // UCX_RNDV_THRESH asks for one).
  std::vector<char> big(size_t{1} << 20, 'x'), small(16);
  for (uint32_t k = 0; k < 2; ++k) {
    std::vector<RequestPtr> sends, recvs;
    sends.push_back(t.isend(next, 30 + 2 * k, big.data(), k == 0 ? 4096 : big.size()));
    recvs.push_back(t.irecv(prev, 30 + 2 * k, small.data(), small.size()));
    try {
      waitAll(t, recvs, after(30), "truncated");
      CHILD_CHECK(false, "no error for a truncated message of %zu bytes", k == 0 ? size_t{4096} : big.size());
    } catch (const Error& e) {
      CHILD_CHECK(e.code() == ErrorCode::kMismatch, "%s", e.what());
      CHILD_CHECK(std::strstr(e.what(), "disagree") != nullptr, "%s", e.what());
    }
    waitAll(t, sends, after(30), "send of the truncated message");
  }
  // A final exchange so that no rank closes while a peer still needs its messages.
  uint32_t token = rank, got = ~0u;
  std::vector<RequestPtr> fin;
  fin.push_back(t.irecv(prev, 35, &got, 4));
  fin.push_back(t.isend(next, 35, &token, 4));
  waitAll(t, fin, after(30), "final ring");
  CHILD_CHECK(got == static_cast<uint32_t>(prev), "ring got %u", got);
  return 0;
}

// Rank 1 aborts; the others wait for a message from rank 1 and must see the notice.
int childAbort(Transport& t) {
  const int rank = t.rank();
  if (rank == 1) {
    t.sendAbort(ErrorCode::kMismatch, "codec differs on rank 1");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let the notices drain
    return 0;
  }
  int x = 0;
  std::vector<RequestPtr> reqs;
  reqs.push_back(t.irecv(1, 5, &x, sizeof x));
  try {
    waitAll(t, reqs, after(30), "waiting for rank 1");
    CHILD_CHECK(false, "no abort seen");
  } catch (const Error& e) {
    CHILD_CHECK(e.code() == ErrorCode::kRemoteError, "%s", e.what());
    CHILD_CHECK(std::strstr(e.what(), "codec differs on rank 1") != nullptr, "%s", e.what());
  }
  int peer = -1;
  ErrorCode code{};
  std::string reason;
  CHILD_CHECK(t.pollAbort(&peer, &code, &reason) && peer == 1 && code == ErrorCode::kMismatch, "poll");
  return 0;
}

// Rank `victim` dies after the first exchange, in the middle of the second. The others must get
// an error, not hang, within a short timeout.
int childDeadPeer(Transport& t, int victim) {
  const int n = t.size(), rank = t.rank();
  for (int round = 0; round < 2; ++round) {
    std::vector<uint32_t> out(1 << 16, rank), in(static_cast<size_t>(n) << 16);
    std::vector<RequestPtr> reqs;
    for (int p = 0; p < n; ++p) reqs.push_back(t.irecv(p, round, in.data() + (p << 16), 1 << 18));
    if (round == 1 && rank == victim) {
      t.progress();
      std::fprintf(stderr, "rank %d: exiting mid-exchange on purpose\n", rank);
      _exit(0);  // no destructors: a crash, as far as the peers can tell
    }
    for (int p = 0; p < n; ++p) reqs.push_back(t.isend(p, round, out.data(), 1 << 18));
    auto t0 = Clock::now();
    try {
      waitAll(t, reqs, after(30), "exchange");
      CHILD_CHECK(round == 0, "round 1 finished although rank %d died", victim);
    } catch (const Error& e) {
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::fprintf(stderr, "rank %d: round %d: %s after %.2f s: %s\n", rank, round, errorCodeName(e.code()), s,
                   e.what());
      // A slow survivor can still be finishing round 0 (with the other survivors) when the
      // victim, done with round 0, dies: the communicator then fails fast in round 0, which is as
      // right, provided the error is the victim's death (seen once on a loaded 2-core CI machine).
      char victimName[32];
      std::snprintf(victimName, sizeof victimName, "rank %d ", victim);
      CHILD_CHECK(round == 1 || std::strstr(e.what(), victimName) != nullptr, "error in the first round: %s", e.what());
      // The bootstrap links report the death on every transport, well before the timeout (the
      // bound leaves room for a loaded CI machine; unloaded it takes milliseconds).
      CHILD_CHECK(e.code() == ErrorCode::kRemoteError, "wrong code");
      CHILD_CHECK(s < 15.0, "took %.2f s", s);
      return 0;
    }
  }
  return 0;
}

// The last rank dies while the others wait only on each other: rank 1 on a message from rank 0
// that never comes, rank 0 on one from rank 1. Neither has a request towards the dead rank, yet a
// collective with a dead member cannot finish: both must get kRemoteError well before the timeout
// (the wait of a rank that had no request towards the dead one once ran out its whole timeout).
int childDeadBystander(Transport& t) {
  const int n = t.size(), rank = t.rank(), victim = n - 1;
  {  // everyone is up and connected before the victim dies
    std::vector<uint32_t> out(16, rank), in(static_cast<size_t>(n) * 16);
    std::vector<RequestPtr> reqs;
    for (int p = 0; p < n; ++p) reqs.push_back(t.irecv(p, 1, in.data() + p * 16, 64));
    for (int p = 0; p < n; ++p) reqs.push_back(t.isend(p, 1, out.data(), 64));
    waitAll(t, reqs, after(30), "warm-up exchange");
  }
  if (rank == victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::fprintf(stderr, "rank %d: exiting on purpose\n", rank);
    _exit(0);
  }
  int x = 0;
  std::vector<RequestPtr> reqs;
  reqs.push_back(t.irecv(rank == 0 ? 1 : 0, 2, &x, sizeof x));
  auto t0 = Clock::now();
  try {
    waitAll(t, reqs, after(30), "waiting on a live rank");
    CHILD_CHECK(false, "the wait finished although nobody sent");
  } catch (const Error& e) {
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, errorCodeName(e.code()), s, e.what());
    CHILD_CHECK(e.code() == ErrorCode::kRemoteError, "wrong code");
    CHILD_CHECK(std::strstr(e.what(), ("rank " + std::to_string(victim)).c_str()) != nullptr, "names no victim");
    CHILD_CHECK(s < 15.0, "took %.2f s", s);
  }
  return 0;
}

int runChild(const std::string& scenario, int rank, int nranks) {
  UniqueId id = fromHex(std::getenv("QCCL_TEST_UID"));
  try {
    if (scenario == "mismatch") {
      // Rank 1 claims a different nranks: every rank must get kMismatch.
      int claimed = rank == 1 ? nranks - 1 : nranks;
      try {
        makeUcxTransport(id, claimed, rank, 20);
        CHILD_CHECK(false, "bootstrap succeeded despite the mismatch");
      } catch (const Error& e) {
        CHILD_CHECK(e.code() == ErrorCode::kMismatch, "%s: %s", errorCodeName(e.code()), e.what());
        CHILD_CHECK(std::strstr(e.what(), "nranks") != nullptr, "%s", e.what());
      }
      return 0;
    }
    // Host grouping: QCCL_HOST_ID = rank / 2 in scenario "hosts"; else one machine, one host.
    if (scenario == "hosts") setenv("QCCL_HOST_ID", std::to_string(rank / 2).c_str(), 1);
    auto t = makeUcxTransport(id, nranks, rank, 30);
    CHILD_CHECK(t->rank() == rank && t->size() == nranks && std::strcmp(t->name(), "ucx") == 0, "identity");
    const std::vector<int> hosts = t->hostOfRanks();
    CHILD_CHECK(hosts.size() == static_cast<size_t>(nranks), "%zu hosts entries", hosts.size());
    for (int r = 0; r < nranks && r < static_cast<int>(hosts.size()); ++r)
      CHILD_CHECK(hosts[r] == (scenario == "hosts" ? r / 2 : 0), "rank %d on host %d", r, hosts[r]);
    if (scenario == "hosts") return childAllToAll(*t);
    if (scenario == "alltoall") return childAllToAll(*t);
    if (scenario == "abort") return childAbort(*t);
    if (scenario == "deadpeer") return childDeadPeer(*t, nranks - 1);
    if (scenario == "deadroot") return childDeadPeer(*t, 0);
    if (scenario == "deadbystander") return childDeadBystander(*t);
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s: unexpected error: %s\n", rank, scenario.c_str(), e.what());
    return 1;
  }
}

// ----------------------------------------------------------------------------------------------
// Parent side.
// ----------------------------------------------------------------------------------------------

// Starts `n` ranks of `scenario` with `env` added, waits at most `limitSec`, returns exit codes
// (-1 for a rank killed at the limit or by a signal).
std::vector<int> launch(const std::string& scenario, int n, const std::vector<std::string>& env, double limitSec) {
  UniqueId id;
  getUniqueId(&id);
  std::string uid = toHex(id);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("QCCL_TEST_UID", uid.c_str(), 1);
      for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
      std::string rs = std::to_string(r), ns = std::to_string(n);
      execl(selfExe.c_str(), selfExe.c_str(), "--child", scenario.c_str(), rs.c_str(), ns.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(n, -1);
  std::vector<char> done(n, 0);
  auto deadline = after(limitSec);
  int left = n;
  while (left > 0 && Clock::now() < deadline) {
    for (int r = 0; r < n; ++r) {
      int status = 0;
      if (!done[r] && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = 1;
        --left;
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r) {
    if (!done[r]) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
  }
  return codes;
}

void expectAllZero(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " (-1: hung or crashed)";
}

// Transports: TCP only, and shared memory only. UCX_TLS is read by UCX itself.
const std::vector<std::pair<std::string, std::vector<std::string>>> kTransports = {
    {"tcp", {"UCX_TLS=tcp"}},
    {"shm", {"UCX_TLS=sm,self"}},
};

// qccl's defaults for its UCP context give way to the user's UCX_* variables, an empty one too.
TEST(UcxConfig, DefaultsGiveWayToTheEnvironment) {
  const char* keep[] = {"UCX_TLS",         "UCX_RNDV_THRESH",     "UCX_TCP_TX_SEG_SIZE",
                        "UCX_TX_SEG_SIZE", "UCX_TCP_RX_SEG_SIZE", "UCX_RX_SEG_SIZE"};
  std::vector<std::pair<std::string, bool>> saved;
  for (const char* k : keep) {
    const char* v = std::getenv(k);
    saved.emplace_back(v ? v : "", v != nullptr);
    unsetenv(k);
  }
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  const Pairs segs{{"TX_SEG_SIZE", "256K"}, {"RX_SEG_SIZE", "512K"}};
  EXPECT_EQ(ucxConfigDefaults(),
            (Pairs{{"TLS", "^cma"}, {"RNDV_THRESH", "inf"}, {"TX_SEG_SIZE", "256K"}, {"RX_SEG_SIZE", "512K"}}));
  setenv("UCX_RNDV_THRESH", "8k", 1);
  EXPECT_EQ(ucxConfigDefaults(), (Pairs{{"TLS", "^cma"}, segs[0], segs[1]}));
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_RNDV_THRESH", "", 1);
  EXPECT_EQ(ucxConfigDefaults(), segs);
  setenv("UCX_TCP_TX_SEG_SIZE", "8K", 1);  // either spelling keeps UCX's own
  setenv("UCX_RX_SEG_SIZE", "64K", 1);
  EXPECT_EQ(ucxConfigDefaults(), Pairs{});
  unsetenv("UCX_TCP_TX_SEG_SIZE");
  EXPECT_EQ(ucxConfigDefaults(), Pairs{segs[0]});
  for (size_t i = 0; i < saved.size(); ++i) {
    if (saved[i].second) {
      setenv(keep[i], saved[i].first.c_str(), 1);
    } else {
      unsetenv(keep[i]);
    }
  }
}

TEST(UcxProcesses, AllToAll) {
  auto all = kTransports;
  all.push_back({"posix+cma", {"UCX_TLS=posix,cma,self"}});
  // qccl makes every message eager by default (ucxConfigDefaults); UCX's rendezvous still works.
  all.push_back({"tcp, rendezvous from 8 KiB", {"UCX_TLS=tcp", "UCX_RNDV_THRESH=8k"}});
  all.push_back({"shm, rendezvous from 8 KiB", {"UCX_TLS=sm,self", "UCX_RNDV_THRESH=8k"}});
  all.push_back({"UCX default or inherited", {}});
  for (const auto& tl : all) {
    for (int n : {1, 2, 4}) {
      SCOPED_TRACE(tl.first + " n=" + std::to_string(n));
      expectAllZero(launch("alltoall", n, tl.second, 90));
    }
  }
}

TEST(UcxProcesses, AbortReachesPeers) {
  for (const auto& tl : kTransports) {
    SCOPED_TRACE(tl.first);
    expectAllZero(launch("abort", 3, tl.second, 60));
  }
}

TEST(UcxProcesses, DeadPeerGivesErrorNotHang) {
  for (const auto& tl : kTransports) {
    SCOPED_TRACE(tl.first);
    expectAllZero(launch("deadpeer", 3, tl.second, 60));
    // Rank 0 relays deaths; its own death is seen directly on every rank's link to it.
    expectAllZero(launch("deadroot", 3, tl.second, 60));
    expectAllZero(launch("deadbystander", 3, tl.second, 60));
  }
}

TEST(UcxProcesses, HostKeysAreExchangedAtBootstrap) { expectAllZero(launch("hosts", 5, {"UCX_TLS=tcp"}, 60)); }

TEST(UcxProcesses, MismatchedNranksFailsEverywhere) { expectAllZero(launch("mismatch", 3, {"UCX_TLS=tcp"}, 40)); }

}  // namespace
}  // namespace qccl

int main(int argc, char** argv) {
  qccl::selfExe = "/proc/self/exe";
  char buf[4096];
  ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (len > 0) qccl::selfExe.assign(buf, static_cast<size_t>(len));
  if (argc == 5 && std::strcmp(argv[1], "--child") == 0) {
    return qccl::runChild(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
