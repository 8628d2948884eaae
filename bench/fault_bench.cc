// qccl-bench faults: how fast the survivors of a killed rank learn of it, over UCX.
//
// Each trial forks --ranks processes that build a UCX communicator from a known address
// (qcclUniqueIdFromAddress, torchrun style) and run compressed allreduces in a loop. Once every
// rank has completed one call, the parent waits a random time, kills a random rank with SIGKILL
// in the middle of whatever collective is running, and measures, for every survivor, the time
// from the kill to the moment its call returned an error (CLOCK_MONOTONIC is the same clock in
// every process). Survivors then abort their communicator and must exit cleanly. No mpirun: an
// MPI launcher ends the whole job when a rank dies (Open MPI 4.1 without ULFM error recovery).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qccl/qccl.h"

namespace {

const char kFaultHelp[] =
    "usage: qccl-bench faults [options]   (no mpirun: it forks its ranks)\n"
    "  --trials N      kill trials (default 100)\n"
    "  --ranks N       ranks per trial, 2..16 (default 4)\n"
    "  --bytes B       fp32 bytes per allreduce, K/M suffixes (default 4M)\n"
    "  --codec NAME    onebit|maxmin|none (default onebit)\n"
    "  --timeout S     QCCL_TIMEOUT of the ranks (default 300: detection must not rely on it)\n"
    "  --seed S        victims and kill times (default 1)\n"
    "  --json          one JSON summary line\n"
    "Per survivor: seconds from the SIGKILL to the error its collective returned; it must then exit 0.\n";

double nowSec() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Msg {
  int rank;
  int kind;    // 0 ready (a first call completed), 1 error
  int result;  // qcclResult_t of the failed call
  double at;   // steady clock, seconds
};

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

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

[[noreturn]] void rankMain(int rank, int n, int port, size_t count, int codec, double timeout, int fd) {
  qcclUniqueId id;
  if (qcclUniqueIdFromAddress(&id, "127.0.0.1", port) != qcclSuccess) _exit(3);
  qcclConfig_t cfg;
  qcclConfigInit(&cfg);
  cfg.timeoutSec = timeout;
  qcclComm_t comm = nullptr;
  if (qcclCommInitRank(&comm, n, id, rank, &cfg) != qcclSuccess) {
    std::fprintf(stderr, "[rank %d] init: %s\n", rank, qcclGetLastError(nullptr));
    _exit(4);
  }
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = std::sin(0.001f * static_cast<float>(i) + static_cast<float>(rank));
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 1;
  t.codec = codec;
  bool ready = false;
  for (;;) {
    qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclAvg, &t, comm, nullptr);
    if (r != qcclSuccess) {
      Msg m{rank, 1, r, nowSec()};
      writeAll(fd, &m, sizeof m);
      if (std::getenv("QCCL_FAULTS_VERBOSE")) std::fprintf(stderr, "[rank %d] %s\n", rank, qcclGetLastError(nullptr));
      qcclCommAbort(comm);
      _exit(0);
    }
    if (!ready) {
      Msg m{rank, 0, 0, nowSec()};
      writeAll(fd, &m, sizeof m);
      ready = true;
    }
  }
}

struct Trial {
  int victim = -1;
  double delay = 0;
  std::vector<double> latency;  // per survivor that reported
  int missing = 0;              // survivors that never reported an error
  int unclean = 0;              // survivors that did not exit 0 within 10 s of their error
  int wrongCode = 0;            // survivors whose error was not a peer failure or timeout
  bool setupFailed = false;     // a rank exited before all were running (e.g. the port was taken)
};

// Kills and reaps every rank of a trial that could not start.
void killAll(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) kill(pid, SIGKILL);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
}

Trial runTrial(int n, size_t count, int codec, double timeout, std::mt19937_64& rng) {
  Trial tr;
  const int port = freePort();
  int p[2];
  if (pipe(p) != 0) std::exit(2);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      rankMain(r, n, port, count, codec, timeout, p[1]);
    }
    pids.push_back(pid);
  }
  close(p[1]);
  auto readMsg = [&](Msg* m, double untilSec) {
    while (nowSec() < untilSec) {
      pollfd pf{p[0], POLLIN, 0};
      if (poll(&pf, 1, 50) <= 0) continue;
      return read(p[0], m, sizeof *m) == static_cast<ssize_t>(sizeof *m);
    }
    return false;
  };
  // Every rank must be running a collective before the kill. The port freePort() found may be
  // taken by someone else before rank 0 binds it; a rank that exits here makes the trial start
  // again on another port (counted as a set-up retry, not as a result).
  int ready = 0;
  Msg m;
  for (const double until = nowSec() + 120; ready < n;) {
    if (readMsg(&m, std::min(until, nowSec() + 0.2))) {
      ready += m.kind == 0 ? 1 : 0;
      continue;
    }
    bool gone = nowSec() >= until;
    for (pid_t pid : pids) gone = gone || waitpid(pid, nullptr, WNOHANG) == pid;
    if (gone) {
      killAll(pids);
      close(p[0]);
      tr.setupFailed = true;
      return tr;
    }
  }
  tr.victim = static_cast<int>(rng() % static_cast<uint64_t>(n));
  tr.delay = std::ldexp(static_cast<double>(rng() >> 11), -53) * 0.5;
  std::this_thread::sleep_for(std::chrono::duration<double>(tr.delay));
  const double killedAt = nowSec();
  kill(pids[tr.victim], SIGKILL);
  std::vector<double> errAt(n, -1);
  int reported = 0;
  const double limit = killedAt + std::max(30.0, timeout + 5);
  while (reported < n - 1 && readMsg(&m, limit)) {
    if (m.kind != 1 || m.rank == tr.victim || errAt[m.rank] >= 0) continue;
    errAt[m.rank] = m.at;
    ++reported;
    tr.latency.push_back(m.at - killedAt);
    if (m.result != qcclRemoteError && m.result != qcclTransportError && m.result != qcclCommFailed &&
        m.result != qcclMalformed && m.result != qcclMismatch)
      ++tr.wrongCode;
  }
  tr.missing = n - 1 - reported;
  for (int r = 0; r < n; ++r) {
    int status = 0;
    if (r == tr.victim) {
      waitpid(pids[r], &status, 0);
      continue;
    }
    bool exited = false;
    for (double until = nowSec() + 10; nowSec() < until && !exited;) {
      exited = waitpid(pids[r], &status, WNOHANG) == pids[r];
      if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!exited) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status, 0);
    }
    if (!exited || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++tr.unclean;
  }
  close(p[0]);
  return tr;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int runFaultBench(int argc, char** argv) {
  int trials = 100, n = 4;
  size_t bytes = 4 << 20;
  std::string codec = "onebit";
  double timeout = 300;
  uint64_t seed = 1;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      std::fputs(kFaultHelp, stdout);
      return 0;
    }
    if (k == "--json") {
      json = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "option %s needs a value\n", k.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (k == "--trials") {
      trials = std::atoi(v.c_str());
    } else if (k == "--ranks") {
      n = std::atoi(v.c_str());
    } else if (k == "--bytes") {
      double x = std::atof(v.c_str());
      char suffix = v.empty() ? ' ' : v.back();
      bytes = static_cast<size_t>(x * (suffix == 'M' ? 1048576.0 : suffix == 'K' ? 1024.0 : 1.0));
    } else if (k == "--codec") {
      codec = v;
    } else if (k == "--timeout") {
      timeout = std::atof(v.c_str());
    } else if (k == "--seed") {
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (n < 2 || n > 16 || trials < 1 || bytes < 4) {
    std::fprintf(stderr, "--ranks must be 2..16, --trials and --bytes positive\n");
    return 2;
  }
  const int c = codec == "maxmin" ? qcclCodecMaxMin : codec == "none" ? qcclCodecNone : qcclCodecOneBit;
  std::mt19937_64 rng(seed);
  std::vector<double> all, worst;
  int missing = 0, unclean = 0, wrongCode = 0, over2 = 0, setupRetries = 0;
  for (int k = 0; k < trials; ++k) {
    Trial t = runTrial(n, bytes / sizeof(float), c, timeout, rng);
    for (int retry = 0; t.setupFailed && retry < 5; ++retry, ++setupRetries) {
      std::fprintf(stderr, "trial %d: a rank did not start; starting again on another port\n", k);
      t = runTrial(n, bytes / sizeof(float), c, timeout, rng);
    }
    if (t.setupFailed) {
      std::fprintf(stderr, "trial %d: the ranks did not start in 6 tries\n", k);
      return 1;
    }
    double w = t.latency.empty() ? 0 : *std::max_element(t.latency.begin(), t.latency.end());
    all.insert(all.end(), t.latency.begin(), t.latency.end());
    worst.push_back(w);
    missing += t.missing;
    unclean += t.unclean;
    wrongCode += t.wrongCode;
    over2 += (w > 2.0 || t.missing > 0) ? 1 : 0;
    if (!json)
      std::printf("trial %3d: killed rank %d after %.3f s; slowest survivor erred %.3f s after the kill%s%s\n", k,
                  t.victim, t.delay, w, t.missing ? " (some never reported)" : "",
                  t.unclean ? " (an unclean exit)" : "");
    std::fflush(stdout);
  }
  std::printf(
      "{\"bench\": \"faults\", \"ranks\": %d, \"trials\": %d, \"codec\": \"%s\", \"bytes\": %zu, "
      "\"timeout_s\": %.0f, \"survivor_errors\": %zu, \"latency_median_s\": %.4f, \"latency_p90_s\": %.4f, "
      "\"latency_p99_s\": %.4f, \"latency_max_s\": %.4f, \"slowest_per_trial_median_s\": %.4f, "
      "\"trials_over_2s_or_missing\": %d, \"missing_reports\": %d, \"unclean_exits\": %d, "
      "\"unexpected_codes\": %d, \"setup_retries\": %d}\n",
      n, trials, codec.c_str(), bytes, timeout, all.size(), quantile(all, 0.5), quantile(all, 0.9), quantile(all, 0.99),
      all.empty() ? 0 : *std::max_element(all.begin(), all.end()), quantile(worst, 0.5), over2, missing, unclean,
      wrongCode, setupRetries);
  return over2 == 0 && unclean == 0 && wrongCode == 0 ? 0 : 1;
}
