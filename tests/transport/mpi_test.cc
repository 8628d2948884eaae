// MPI transport under a real mpirun (-np 2, 3, 4; see CMakeLists.txt). Every rank runs every test
// in the same order; each test makes its own transport, i.e. its own duplicated communicator.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "transport/mpi_transport.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

TransportPtr world() { return makeMpiTransport(MPI_Comm_c2f(MPI_COMM_WORLD)); }

uint32_t pattern(int src, int dst, uint32_t tag, size_t i) {
  return static_cast<uint32_t>(src * 7919 + dst * 104729 + tag * 31 + i * 2654435761u);
}

TEST(Mpi, Basics) {
  auto t = world();
  int r = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  EXPECT_EQ(t->rank(), r);
  EXPECT_EQ(t->size(), n);
  EXPECT_STREQ(t->name(), "mpi");
  char b[4];
  EXPECT_THROW(t->isend(n, 0, b, 4), Error);
  EXPECT_THROW(t->irecv(0, kMaxTag, b, 4), Error);
  EXPECT_THROW(t->isend(0, 0, nullptr, 4), Error);
}

// Host grouping: every rank of this mpirun runs on this machine, so one host; with QCCL_HOST_ID
// set per rank (rank parity), two hosts numbered by their lowest rank.
TEST(Mpi, HostGrouping) {
  auto t = world();
  const std::vector<int> one = t->hostOfRanks();
  ASSERT_EQ(one.size(), static_cast<size_t>(t->size()));
  for (int h : one) EXPECT_EQ(h, 0);
  setenv("QCCL_HOST_ID", (t->rank() % 2) ? "odd" : "even", 1);
  auto u = world();
  unsetenv("QCCL_HOST_ID");
  const std::vector<int> two = u->hostOfRanks();
  ASSERT_EQ(two.size(), static_cast<size_t>(u->size()));
  for (int r = 0; r < u->size(); ++r) EXPECT_EQ(two[r], r % 2) << "rank " << r;
}

// eagerBytes(): Open MPI's TCP eager limit where this job's btl list has tcp (np 2: self,tcp; np 4:
// self,tcp,vader; CMakeLists.txt), 0 where it has not (np 3: self,vader).
TEST(Mpi, EagerBytesFollowTheBtlList) {
  auto t = world();
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (btl == nullptr) GTEST_SKIP() << "not started with --mca btl (OMPI_MCA_btl unset)";
  EXPECT_EQ(t->eagerBytes(), mpiTcpEagerBytes());
  if (std::string(btl).find("tcp") != std::string::npos) {
    EXPECT_EQ(t->eagerBytes(), 65536u) << "btl " << btl << ": Open MPI's default btl_tcp_eager_limit";
  } else {
    EXPECT_EQ(t->eagerBytes(), 0u) << "btl " << btl;
  }
}

// Ring exchange on the transport while the application sends on MPI_COMM_WORLD with the same
// tag: each side must receive only its own traffic.
TEST(Mpi, RingIsolatedFromApplication) {
  auto t = world();
  const int n = t->size(), r = t->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int iter = 0; iter < 20; ++iter) {
    uint64_t mine = 1000u * r + iter, got = 0, app = 0xA0000 + r, appGot = 0;
    MPI_Request appReqs[2];
    MPI_Irecv(&appGot, 8, MPI_BYTE, prev, 5, MPI_COMM_WORLD, &appReqs[0]);
    std::vector<RequestPtr> reqs;
    reqs.push_back(t->irecv(prev, 5, &got, sizeof got));
    MPI_Isend(&app, 8, MPI_BYTE, next, 5, MPI_COMM_WORLD, &appReqs[1]);
    reqs.push_back(t->isend(next, 5, &mine, sizeof mine));
    waitAll(*t, reqs, after(20), "ring");
    MPI_Waitall(2, appReqs, MPI_STATUSES_IGNORE);
    ASSERT_EQ(got, 1000u * prev + iter);
    ASSERT_EQ(appGot, 0xA0000u + prev);
    EXPECT_EQ(reqs[0]->bytes(), sizeof got);
  }
}

TEST(Mpi, AllToAllWithZeroLength) {
  auto t = world();
  const int n = t->size(), r = t->rank();
  constexpr size_t kLen = 1031;
  std::vector<std::vector<uint32_t>> out(n, std::vector<uint32_t>(kLen)), in(n, std::vector<uint32_t>(kLen));
  std::vector<RequestPtr> reqs;
  std::vector<RequestPtr> empties;
  for (int p = 0; p < n; ++p) {
    reqs.push_back(t->irecv(p, 3, in[p].data(), kLen * 4));
    empties.push_back(t->irecv(p, 4, nullptr, 0));
  }
  for (int p = 0; p < n; ++p) {
    for (size_t i = 0; i < kLen; ++i) out[p][i] = pattern(r, p, 3, i);
    reqs.push_back(t->isend(p, 3, out[p].data(), kLen * 4));
    empties.push_back(t->isend(p, 4, nullptr, 0));
  }
  waitAll(*t, reqs, after(20), "all-to-all");
  waitAll(*t, empties, after(20), "zero-length");
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(reqs[p]->bytes(), kLen * 4);
    EXPECT_EQ(empties[p]->bytes(), 0u);
    for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(in[p][i], pattern(p, r, 3, i));
  }
}

TEST(Mpi, LargeMessages) {
  auto t = world();
  const int n = t->size(), r = t->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const size_t big = (24u << 20) + 5;
  std::vector<unsigned char> out(big), in(big + 3, 0xEE);
  for (size_t i = 0; i < big; ++i) out[i] = static_cast<unsigned char>((i * 131 + r) >> 2);
  std::vector<RequestPtr> reqs;
  reqs.push_back(t->irecv(prev, 9, in.data(), in.size()));
  reqs.push_back(t->isend(next, 9, out.data(), big));
  waitAll(*t, reqs, after(60), "large");
  EXPECT_EQ(reqs[0]->bytes(), big);
  for (size_t i = 0; i < big; ++i) ASSERT_EQ(in[i], static_cast<unsigned char>((i * 131 + prev) >> 2)) << i;
  EXPECT_EQ(in[big], 0xEE);
}

// A message longer than the receive's capacity is refused before any byte lands (matched probe),
// as kMismatch: the receive buffer and what lies beyond it are untouched.
TEST(Mpi, LongerMessageIsAMismatchAndWritesNothing) {
  auto t = world();
  const int n = t->size(), r = t->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  uint32_t tag = 2;
  for (size_t len : {size_t{64}, size_t{1} << 20}) {  // eager and rendezvous sizes
    ++tag;                                            // the refused message stays unreceived on its tag
    std::vector<char> out(len, 'x');
    std::vector<char> in(64, 'g');  // capacity 16, then a guard of 48 bytes
    std::vector<RequestPtr> sends;
    sends.push_back(t->isend(next, tag, out.data(), out.size()));
    std::vector<RequestPtr> reqs;
    reqs.push_back(t->irecv(prev, tag, in.data(), 16));
    try {
      waitAll(*t, reqs, after(20), "longer message");
      FAIL() << "no error for a message longer than the receive";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
      EXPECT_NE(std::string(e.what()).find("from rank " + std::to_string(prev)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::string(in.begin(), in.end()), std::string(64, 'g'));
    // The sender's request is dropped: its peer will never receive it (a failed communicator).
    t->limitDrops(Clock::now() + std::chrono::milliseconds(50));
    sends.clear();
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Rank n-1 aborts; every other rank waits for a message that never comes and must see the notice.
TEST(Mpi, AbortNoticeReachesPeers) {
  auto t = world();
  const int n = t->size(), r = t->rank();
  if (r == n - 1) {
    t->sendAbort(ErrorCode::kMismatch, "rank says no");
    t->sendAbort(ErrorCode::kMismatch, "second notice is ignored");
  } else {
    int x = 0;
    std::vector<RequestPtr> reqs;
    reqs.push_back(t->irecv(n - 1, 1, &x, sizeof x));
    auto t0 = Clock::now();
    try {
      waitAll(*t, reqs, after(20), "waiting");
      FAIL() << "no abort seen";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRemoteError);
      EXPECT_NE(std::string(e.what()).find("rank says no"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
    int peer = -1;
    ErrorCode code{};
    std::string reason;
    ASSERT_TRUE(t->pollAbort(&peer, &code, &reason));
    EXPECT_EQ(peer, n - 1);
    EXPECT_EQ(code, ErrorCode::kMismatch);
    EXPECT_EQ(reason, "rank says no");
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the notice must not leak into the next test's communicator
}

// Every rank but 0 sends an abort notice after rank 0 has already freed its communicator, so the
// notices to rank 0 arrive for a context id it no longer has (and each other rank takes only the
// first of the notices sent to it). Open MPI keeps such messages and hands them to the next
// communicator that gets the same context id: freeing a communicator that may still be sent
// messages, then duplicating again, lets stale notices reach the new one (seen on a 16-core
// machine: a peer's abort there, and a barrier on the new communicator that never ended). A
// transport that sent or received a notice, or whose communicator failed, keeps its duplicate
// until MPI_Finalize instead, so its context id is not reused.
TEST(Mpi, StaleAbortNoticesDoNotReachTheNextCommunicator) {
  {
    auto t = world();
    if (t->rank() == 0) {
      t.reset();
      MPI_Barrier(MPI_COMM_WORLD);
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
      t->sendAbort(ErrorCode::kMismatch, "stale notice");
    }
  }
  auto t = world();
  const int n = t->size(), r = t->rank();
  int x = -1, v = 70 + r;
  std::vector<RequestPtr> reqs;
  reqs.push_back(t->irecv((r + 1) % n, 2, &x, sizeof x));
  reqs.push_back(t->isend((r + n - 1) % n, 2, &v, sizeof v));
  try {
    waitAll(*t, reqs, after(20), "the next communicator");
  } catch (const Error& e) {
    ADD_FAILURE() << "the next communicator failed: " << e.what();
  }
  EXPECT_EQ(x, 70 + (r + 1) % n);
  MPI_Barrier(MPI_COMM_WORLD);  // every rank's exchange is done: a stale notice would be here now
  int peer = -1;
  ErrorCode code{};
  std::string reason;
  EXPECT_FALSE(t->pollAbort(&peer, &code, &reason)) << "a stale notice from rank " << peer << ": " << reason;
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Mpi, TimeoutThenCleanReuse) {
  auto t = world();
  const int n = t->size(), r = t->rank();
  int x = 0;
  std::vector<RequestPtr> reqs;
  reqs.push_back(t->irecv((r + 1) % n, 6, &x, sizeof x));
  auto t0 = Clock::now();
  try {
    waitAll(*t, reqs, after(0.3), "nobody sends");
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  reqs.clear();  // cancels the receive: a later message on that tag must go to a new receive
  MPI_Barrier(MPI_COMM_WORLD);
  int v = 40 + r;
  reqs.push_back(t->irecv((r + 1) % n, 6, &x, sizeof x));
  reqs.push_back(t->isend((r + n - 1) % n, 6, &v, sizeof v));
  waitAll(*t, reqs, after(20), "after timeout");
  EXPECT_EQ(x, 40 + (r + 1) % n);
}

}  // namespace
}  // namespace qccl

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    // Only rank 0 prints progress; failures on any rank still fail the exit code below.
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anyFailed && failed) std::fprintf(stderr, "rank %d: transport MPI tests failed\n", rank);
  MPI_Finalize();
  return anyFailed ? 1 : 0;
}
