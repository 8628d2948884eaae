// Failures, lifetimes and threads of the interposer, on real ranks. QCCL_CODEC=onebit, QCCL_TIMEOUT short.
//
//   interpose_fault --case mismatch-count   ranks compress different counts: an error on every rank
//   interpose_fault --case mismatch-route   rank 0 compresses, the others' call is too small: with
//                                           QCCL_INTERPOSE_CHECK=1 (default) an error on every rank
//   interpose_fault --case mismatch-fatal   the same with QCCL_INTERPOSE_CHECK=0 and the default error
//                                           handler: rank 0 fails after QCCL_TIMEOUT and the job ends
//                                           (the test expects a non-zero exit and the message)
//   interpose_fault --case reentry          an error handler that calls MPI_Allreduce from inside the
//                                           interposer gets a plain PMPI_Allreduce, no deadlock
//   interpose_fault --case comm-free        every qccl communicator goes with its MPI communicator
//   interpose_fault --case threads          MPI_THREAD_MULTIPLE: threads on their own communicators
#include <chrono>
#include <thread>

#include "interpose_test_util.hpp"

using namespace itest;

namespace {

constexpr int kLarge = 100000;

double now() { return MPI_Wtime(); }

bool isQcclError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return rc != MPI_SUCCESS && std::strstr(text, "qccl") != nullptr;
}

// Every rank must return an error (not hang, not succeed) well within the test's time limit.
void expectErrorEverywhere(int myCount) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  std::vector<float> buf(static_cast<size_t>(myCount), 1.0f);
  // One good call first, so that the qccl communicator exists before the ranks disagree.
  std::vector<float> good(kLarge, 1.0f);
  EXPECT(MPI_Allreduce(MPI_IN_PLACE, good.data(), kLarge, MPI_FLOAT, MPI_SUM, comm) == MPI_SUCCESS, "good call");
  const double t0 = now();
  int rc = MPI_Allreduce(MPI_IN_PLACE, buf.data(), myCount, MPI_FLOAT, MPI_SUM, comm);
  const double sec = now() - t0;
  EXPECT(isQcclError(rc), "rc %d is not the interposer's error", rc);
  EXPECT(sec < 30, "took %.1f s", sec);
  EXPECT(stats().errors >= 1, "no error counted");
  // Calls that are not compressed still work on the communicator.
  int one = 1, sum = 0;
  EXPECT(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm) == MPI_SUCCESS && sum == gSize, "int sum after");
  // MPI_Comm_free runs the interposer's delete callback on a failed qccl communicator too.
  MPI_Comm_free(&comm);
}

void caseMismatchFatal() {
  // Rank 0 compresses, the others pass a small call through: they wait in different collectives.
  // Rank 0's QCCL_TIMEOUT ends it with an error, MPI_ERRORS_ARE_FATAL ends the job.
  std::vector<float> warm(kLarge, 1.0f);
  MPI_Allreduce(MPI_IN_PLACE, warm.data(), kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const int n = gRank == 0 ? kLarge : 16;
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  std::fprintf(stderr, "[rank %d] the mismatched call returned\n", gRank);
}

// The handler runs inside the interposer's MPI_Allreduce (it calls the error handler itself) and
// makes an MPI_Allreduce of its own, large enough to be compressed: it must be passed through.
int gHandlerCalls = 0;
bool gHandlerExact = false;
void handler(MPI_Comm* comm, int* code, ...) {
  (void)code;
  ++gHandlerCalls;
  std::vector<float> in(kLarge), viaInterposer(kLarge), viaPmpi(kLarge);
  for (int i = 0; i < kLarge; ++i) in[i] = input(gRank, i);
  MPI_Allreduce(in.data(), viaInterposer.data(), kLarge, MPI_FLOAT, MPI_SUM, *comm);
  PMPI_Allreduce(in.data(), viaPmpi.data(), kLarge, MPI_FLOAT, MPI_SUM, *comm);
  gHandlerExact = std::memcmp(viaInterposer.data(), viaPmpi.data(), viaPmpi.size() * 4) == 0;
}

void caseReentry() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Errhandler eh;
  MPI_Comm_create_errhandler(handler, &eh);
  MPI_Comm_set_errhandler(comm, eh);
  const int n = kLarge + (gRank == 0 ? 0 : 32);  // disagree on the count: the check fails on every rank
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  const qcclMpiInterposeStats_t s0 = stats();
  int rc = MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, comm);
  const qcclMpiInterposeStats_t s1 = stats();
  EXPECT(rc != MPI_SUCCESS, "the mismatched call succeeded");
  EXPECT(gHandlerCalls == 1, "handler called %d times", gHandlerCalls);
  EXPECT(gHandlerExact, "the handler's own allreduce was not passed through exactly");
  EXPECT(s1.reentered - s0.reentered == 1, "re-entered %llu", (unsigned long long)(s1.reentered - s0.reentered));
  EXPECT(s1.calls - s0.calls == 2, "calls %llu", (unsigned long long)(s1.calls - s0.calls));
  MPI_Comm_free(&comm);
  MPI_Errhandler_free(&eh);
}

// Communicators created, used for a compressed call and freed, over and over: each gets its own
// qccl communicator and loses it in MPI_Comm_free. MPI_COMM_WORLD's goes at MPI_Finalize.
void caseCommFree() {
  std::vector<float> buf(kLarge);
  MPI_Allreduce(MPI_IN_PLACE, buf.data(), kLarge, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int round = 0; round < 20; ++round) {
    MPI_Comm a, b;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(a, &b);
    for (int i = 0; i < kLarge; ++i) buf[i] = input(gRank, i);
    EXPECT(MPI_Allreduce(MPI_IN_PLACE, buf.data(), kLarge, MPI_FLOAT, MPI_SUM, a) == MPI_SUCCESS, "a");
    EXPECT(MPI_Allreduce(MPI_IN_PLACE, buf.data(), kLarge, MPI_FLOAT, MPI_SUM, b) == MPI_SUCCESS, "b");
    EXPECT(sameOnAllRanks(buf.data(), buf.size() * 4), "round %d: results differ", round);
    const qcclMpiInterposeStats_t before = stats();
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
    const qcclMpiInterposeStats_t after = stats();
    EXPECT(after.commsFreed - before.commsFreed == 2, "round %d: %llu freed", round,
           (unsigned long long)(after.commsFreed - before.commsFreed));
  }
  // A communicator from MPI_Comm_split, in another rank order: compressed or, where qccl cannot
  // build on it, passed through; either way the same on every rank, and freed with it.
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, 0, gSize - gRank, &split);
  for (int i = 0; i < kLarge; ++i) buf[i] = input(gRank, i);
  EXPECT(MPI_Allreduce(MPI_IN_PLACE, buf.data(), kLarge, MPI_FLOAT, MPI_SUM, split) == MPI_SUCCESS, "split");
  EXPECT(sameOnAllRanks(buf.data(), buf.size() * 4), "split: results differ");
  MPI_Comm_free(&split);
  const qcclMpiInterposeStats_t s = stats();
  EXPECT(s.commsCreated == s.commsFreed + 1 && s.commsCreated >= 41, "created %llu, freed %llu",
         (unsigned long long)s.commsCreated, (unsigned long long)s.commsFreed);
}

// Two threads per rank, each on its own communicator, compress at the same time.
void caseThreads() {
  constexpr int kThreads = 2, kCalls = 20;
  MPI_Comm comms[kThreads];
  for (MPI_Comm& c : comms) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  std::vector<float> results[kThreads];
  int failures[kThreads] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> buf(kLarge);
      for (int call = 0; call < kCalls; ++call) {
        for (int i = 0; i < kLarge; ++i) buf[i] = input(gRank, i) * static_cast<float>(t + 1);
        if (MPI_Allreduce(MPI_IN_PLACE, buf.data(), kLarge, MPI_FLOAT, MPI_SUM, comms[t]) != MPI_SUCCESS) ++failures[t];
      }
      results[t] = buf;
    });
  }
  for (std::thread& th : threads) th.join();
  const std::vector<float> exact = exactSum(kLarge);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT(failures[t] == 0, "thread %d: %d failed calls", t, failures[t]);
    EXPECT(sameOnAllRanks(results[t].data(), results[t].size() * 4), "thread %d: results differ", t);
    std::vector<float> want(exact);
    for (float& w : want) w *= static_cast<float>(t + 1);
    const double e = relErr(results[t].data(), want.data(), kLarge);
    EXPECT(e < 0.5, "thread %d: relative error %g", t, e);
  }
  const qcclMpiInterposeStats_t s = stats();
  EXPECT(s.compressed == kThreads * kCalls, "compressed %llu", (unsigned long long)s.compressed);
  for (MPI_Comm& c : comms) MPI_Comm_free(&c);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = caseArg(argc, argv);
  init(&argc, &argv, which == "threads" ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE);
  if (which == "mismatch-count") {
    expectErrorEverywhere(kLarge + (gRank == 0 ? 0 : 64));
  } else if (which == "mismatch-route") {
    expectErrorEverywhere(gRank == 0 ? kLarge : 16);
  } else if (which == "mismatch-fatal") {
    caseMismatchFatal();
  } else if (which == "reentry") {
    caseReentry();
  } else if (which == "comm-free") {
    caseCommFree();
  } else if (which == "threads") {
    caseThreads();
  } else {
    EXPECT(false, "unknown case '%s'", which.c_str());
  }
  return finish(("interpose_fault " + which).c_str());
}
