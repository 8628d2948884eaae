#include "wire_probe.hpp"

#define OMPI_SKIP_MPICXX 1  // only MPI's C bindings
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace bench {
namespace {

// qccl's wait (transport.hpp, waitUntil): spin 64 rounds, then sleep 50 us between tests.
void waitAll(int n, MPI_Request* reqs) {
  for (int round = 0;; ++round) {
    int done = 0;
    MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (round >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

double processCpu() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

}  // namespace

double timeWirePattern(size_t bytes, int phases, size_t rounds, int depth,
                       const std::function<double(const std::function<void()>&)>& timer, double* cpuS) {
  if (cpuS) *cpuS = 0;
  int n = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (n < 2 || bytes == 0 || rounds == 0 || phases < 1) return 0;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const size_t peers = static_cast<size_t>(n - 1), P = static_cast<size_t>(phases);
  const size_t D = static_cast<size_t>(std::max(1, depth));
  const int count = static_cast<int>(bytes);  // one chunk's encoding: well below 2 GiB
  // One buffer and one request per (slot, phase, peer); slot = round % D.
  auto at = [&](size_t slot, size_t phase, size_t i) { return (slot * P + phase) * peers + i; };
  std::vector<char> out(D * P * peers * bytes, 1), in(D * P * peers * bytes);
  std::vector<MPI_Request> sreq(D * P * peers, MPI_REQUEST_NULL), rreq(D * P * peers, MPI_REQUEST_NULL);
  auto peer = [&](size_t i, bool to) {
    const int d = static_cast<int>(i) + 1;
    return to ? (me + d) % n : (me - d + n) % n;
  };
  auto postRecvs = [&](size_t k) {
    for (size_t ph = 0; ph < P; ++ph)
      for (size_t i = 0; i < peers; ++i) {
        const size_t j = at(k % D, ph, i);
        MPI_Irecv(in.data() + j * bytes, count, MPI_BYTE, peer(i, false), static_cast<int>(ph), comm, &rreq[j]);
      }
  };
  size_t replays = 0;
  double cpu = 0;  // inside the replays only: the timer's barriers spin
  auto replay = [&] {
    const double cpu0 = processCpu();
    for (size_t k = 0; k < std::min(D, rounds); ++k) postRecvs(k);
    for (size_t k = 0; k < rounds; ++k) {
      for (size_t ph = 0; ph < P; ++ph) {
        const size_t j0 = at(k % D, ph, 0);
        waitAll(static_cast<int>(peers), &sreq[j0]);  // round k - D's sends
        for (size_t i = 0; i < peers; ++i)
          MPI_Isend(out.data() + (j0 + i) * bytes, count, MPI_BYTE, peer(i, true), static_cast<int>(ph), comm,
                    &sreq[j0 + i]);
        waitAll(static_cast<int>(peers), &rreq[j0]);
      }
      if (k + D < rounds) postRecvs(k + D);
    }
    waitAll(static_cast<int>(sreq.size()), sreq.data());
    ++replays;
    cpu += processCpu() - cpu0;
  };
  const double t = timer(replay);
  if (cpuS && replays > 0) *cpuS = cpu / static_cast<double>(replays);
  MPI_Comm_free(&comm);
  return t;
}

}  // namespace bench
