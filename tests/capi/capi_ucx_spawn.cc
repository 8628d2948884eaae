// The UCX communicator without mpirun: this program forks its ranks, rank 0 creates the unique
// id with qcclGetUniqueId and hands it to the others through pipes, NCCL-style.
//
//   capi_ucx_spawn --ranks N --tls tcp|shm --case basic|exit [--id address]
// --id address: every rank builds the id itself with qcclUniqueIdFromAddress (torchrun style).
// basic: exact fp32 allreduce and allgather, and a onebit allreduce whose bytes must be equal on
//        every rank (the parent compares the hashes the ranks report).
// exit:  after one allreduce the last rank exits; every other rank must return an error within the
//        short QCCL timeout instead of hanging.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qccl/qccl.h"

namespace {

struct Report {
  int rank;
  int ok;          // 1 when every check of this rank passed
  int result;      // qcclResult_t of the last collective
  uint64_t hash;   // of the onebit result
  double seconds;  // time of the failing call (exit case)
};

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

float exactInput(int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 613) * 7 - 2000 + rank); }

bool writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool readAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool runBasic(qcclComm_t comm, int rank, int n, Report* rep) {
  const size_t count = 200003;
  std::vector<float> send(count), recv(count);
  for (size_t i = 0; i < count; ++i) send[i] = exactInput(rank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = qcclCodecNone;
  bool ok = true;
  for (int algo : {qcclAlgoRing, qcclAlgoSra}) {
    t.algo = algo;
    rep->result = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
    if (rep->result != qcclSuccess) {
      std::fprintf(stderr, "[rank %d] allreduce: %s\n", rank, qcclGetLastError(comm));
      return false;
    }
    for (size_t i = 0; i < count; ++i) {
      double sum = 0;
      for (int k = 0; k < n; ++k) sum += exactInput(k, i);
      if (recv[i] != static_cast<float>(sum)) ok = false;
    }
  }
  std::vector<float> gathered(1001 * n);
  rep->result = qcclAllgather(send.data(), gathered.data(), 1001, qcclFloat32, &t, comm, nullptr);
  for (int k = 0; k < n && rep->result == qcclSuccess; ++k)
    for (size_t i = 0; i < 1001; ++i) ok = ok && gathered[k * 1001 + i] == exactInput(k, i);
  for (size_t i = 0; i < count; ++i) send[i] = std::sin(0.01f * static_cast<float>(i) + rank);
  t.codec = qcclCodecOneBit;
  t.algo = qcclAlgoSra;
  t.id = 5;
  rep->result = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  if (rep->result != qcclSuccess) std::fprintf(stderr, "[rank %d] onebit: %s\n", rank, qcclGetLastError(comm));
  rep->hash = fnv1a(recv.data(), count * sizeof(float));
  return ok && rep->result == qcclSuccess;
}

// A TCP port that was free a moment ago on 127.0.0.1 (the kernel picks it).
// A port for the ranks to bind later: from below the kernel's ephemeral range, at random, so
// that no outgoing connection or port-0 bind of another process (a test running beside this
// one) can take it between this probe and the ranks' bind, as it could with a port-0 probe.
bool portFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

int freePort() {
  int low = 10000, high = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int lo = 0, hi = 0;
    if (std::fscanf(f, "%d %d", &lo, &hi) == 2 && lo > 0) high = lo;
    std::fclose(f);
  }
  if (high - low < 1000) {  // no room below the ephemeral range
    low = high;
    high = 65536;
  }
  std::mt19937 rng(static_cast<unsigned>(getpid()) ^ static_cast<unsigned>(time(nullptr)));
  for (int i = 0; i < 200; ++i) {
    const int port = low + static_cast<int>(rng() % static_cast<unsigned>(high - low));
    if (portFree(port)) return port;
  }
  return 0;
}

// The child process of one rank. Never returns.
[[noreturn]] void rankMain(int rank, int n, const std::string& which, int addrPort, std::vector<int>& idPipes,
                           int reportFd, const int* firstDone) {
  Report rep{rank, 0, qcclSuccess, 0, 0.0};
  qcclUniqueId id;
  if (addrPort > 0) {
    // torchrun style: every rank builds the same id from a known address, nothing is passed.
    if (qcclUniqueIdFromAddress(&id, "127.0.0.1", addrPort) != qcclSuccess) {
      std::fprintf(stderr, "qcclUniqueIdFromAddress: %s\n", qcclGetLastError(nullptr));
      _exit(2);
    }
  } else if (rank == 0) {
    if (qcclGetUniqueId(&id) != qcclSuccess) {
      std::fprintf(stderr, "qcclGetUniqueId: %s\n", qcclGetLastError(nullptr));
      _exit(2);
    }
    for (int r = 1; r < n; ++r) writeAll(idPipes[2 * r + 1], &id, sizeof(id));
  } else if (!readAll(idPipes[2 * rank], &id, sizeof(id))) {
    _exit(2);
  }
  qcclConfig_t cfg;
  qcclConfigInit(&cfg);
  cfg.timeoutSec = which == "exit" ? 3.0 : 30.0;
  qcclComm_t comm = nullptr;
  rep.result = qcclCommInitRank(&comm, n, id, rank, &cfg);
  if (rep.result != qcclSuccess) {
    std::fprintf(stderr, "[rank %d] init: %s\n", rank, qcclGetLastError(nullptr));
    writeAll(reportFd, &rep, sizeof(rep));
    _exit(1);
  }
  if (which == "exit") {
    // One collective first, so every pair is connected: the rank dies in the middle of training,
    // not during UCX wire-up (where UCX 1.13's tcp transport can trip an internal assertion).
    std::vector<float> buf(1 << 18, 1.0f);
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.algo = qcclAlgoSra;
    if (qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, &t, comm, nullptr) != qcclSuccess) {
      std::fprintf(stderr, "[rank %d] first allreduce: %s\n", rank, qcclGetLastError(comm));
      _exit(1);
    }
    // The last rank dies once every other rank has finished the first call too (it could otherwise
    // leave while a peer still waits for that call's last message to it, and fail the first call).
    if (rank == n - 1) {
      char c = 0;
      for (int r = 0; r < n - 1; ++r)
        if (!readAll(firstDone[0], &c, 1)) break;
      _exit(0);  // dies without a word to its peers
    }
    const char one = 1;
    writeAll(firstDone[1], &one, 1);
    auto t0 = std::chrono::steady_clock::now();
    rep.result = qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, &t, comm, nullptr);
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[rank %d] after peer exit: %s after %.2f s: %s\n", rank,
                 qcclGetErrorString(static_cast<qcclResult_t>(rep.result)), rep.seconds, qcclGetLastError(comm));
    rep.ok = rep.result != qcclSuccess && rep.seconds < 20.0;
    writeAll(reportFd, &rep, sizeof(rep));
    qcclCommAbort(comm);
    _exit(0);
  }
  rep.ok = runBasic(comm, rank, n, &rep) ? 1 : 0;
  writeAll(reportFd, &rep, sizeof(rep));
  qcclCommDestroy(comm);
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2, addrPort = 0;
  std::string tls = "tcp", which = "basic";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ranks") == 0) n = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--tls") == 0) tls = argv[i + 1];
    if (std::strcmp(argv[i], "--case") == 0) which = argv[i + 1];
    if (std::strcmp(argv[i], "--id") == 0 && std::strcmp(argv[i + 1], "address") == 0) addrPort = freePort();
  }
  if (n < 2 || n > 16) {
    std::fprintf(stderr, "--ranks must be in 2..16\n");
    return 2;
  }
  // UCX reads UCX_TLS when the children create their contexts.
  setenv("UCX_TLS", tls == "shm" ? "sm,self" : "tcp,self", 1);
  std::vector<int> idPipes(2 * n, -1);
  for (int r = 1; r < n; ++r)
    if (pipe(&idPipes[2 * r]) != 0) return 2;
  int rep[2], firstDone[2];
  if (pipe(rep) != 0 || pipe(firstDone) != 0) return 2;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(rep[0]);
      rankMain(r, n, which, addrPort, idPipes, rep[1], firstDone);
    }
    pids.push_back(pid);
  }
  close(rep[1]);
  // Collect reports with a deadline, so that a hung rank fails the test instead of hanging it.
  std::vector<Report> reports;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int expected = which == "exit" ? n - 1 : n;
  while (static_cast<int>(reports.size()) < expected && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{rep[0], POLLIN, 0};
    if (poll(&pfd, 1, 500) <= 0) continue;
    Report r;
    if (!readAll(rep[0], &r, sizeof(r))) break;
    reports.push_back(r);
  }
  // Let the ranks finish their destroy calls, then make sure none outlives the test.
  auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t done = 0;
  std::vector<bool> reaped(pids.size(), false);
  while (done < pids.size() && std::chrono::steady_clock::now() < grace) {
    for (size_t i = 0; i < pids.size(); ++i)
      if (!reaped[i] && waitpid(pids[i], nullptr, WNOHANG) == pids[i]) reaped[i] = true, ++done;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (reaped[i]) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
  }
  bool ok = static_cast<int>(reports.size()) == expected;
  if (!ok) std::fprintf(stderr, "only %zu of %d ranks reported\n", reports.size(), expected);
  for (const Report& r : reports) {
    if (!r.ok) std::fprintf(stderr, "rank %d failed (result %d)\n", r.rank, r.result);
    ok = ok && r.ok;
    if (which == "basic" && r.hash != reports[0].hash) {
      std::fprintf(stderr, "rank %d: onebit result differs from rank %d's\n", r.rank, reports[0].rank);
      ok = false;
    }
  }
  std::printf("capi_ucx_spawn %s over %s, %d ranks: %s\n", which.c_str(), tls.c_str(), n, ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
