// qccl-bench allreduce / allgather / reducescatter: collective timings in nccl-tests conventions, with the MPI
// library's own MPI_Allreduce/MPI_Allgather and qccl's fp16 ring timed in the same run on the same
// buffers. Ranks are always started by mpirun; --transport picks what qccl runs over.
#define OMPI_SKIP_MPICXX 1  // only MPI's C bindings (the C++ ones warn under -Wextra)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "baselines.hpp"
#include "coll_bench.hpp"
#include "core/executor.hpp"
#include "core/options.hpp"
#include "core/select.hpp"
#include "model.hpp"
#include "qccl/codec.hpp"
#include "qccl/qccl.h"
#include "qccl/qccl_mpi.h"
#include "wire_probe.hpp"

namespace collbench {

int gRank = 0, gSize = 1;

[[noreturn]] void fatal(const std::string& msg) {
  std::fprintf(stderr, "qccl-bench [rank %d]: %s\n", gRank, msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void qc(qcclResult_t r, qcclComm_t comm, const char* what) {
  if (r != qcclSuccess) fatal(std::string(what) + ": " + qcclGetLastError(comm));
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  size_t mult = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'K':
      case 'k':
        mult = size_t{1} << 10;
        break;
      case 'M':
      case 'm':
        mult = size_t{1} << 20;
        break;
      case 'G':
      case 'g':
        mult = size_t{1} << 30;
        break;
      default:
        fatal(std::string("bad size '") + s + "'");
    }
  }
  if (!(v >= 0)) fatal(std::string("bad size '") + s + "'");
  return static_cast<size_t>(v * static_cast<double>(mult));
}

bool parseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      if (gRank == 0) std::fputs(kCollHelp, stdout);
      return false;
    }
    if (k == "--json") {
      a->json = true;
      continue;
    }
    if (k == "--csv") {
      a->csv = true;
      continue;
    }
    if (i + 1 >= argc) fatal("option " + k + " needs a value (see --help)");
    const char* v = argv[++i];
    if (k == "-b" || k == "--minbytes")
      a->minBytes = parseSize(v);
    else if (k == "-e" || k == "--maxbytes")
      a->maxBytes = parseSize(v);
    else if (k == "-f" || k == "--stepfactor")
      a->factor = std::atof(v);
    else if (k == "-n" || k == "--iters")
      a->iters = std::atoi(v);
    else if (k == "-w" || k == "--warmup")
      a->warmup = std::atoi(v);
    else if (k == "-c" || k == "--check")
      a->check = std::atoi(v);
    else if (k == "--codec")
      a->codec = v;
    else if (k == "--bits")
      a->bits = std::atoi(v);
    else if (k == "--algo")
      a->algo = v;
    else if (k == "--transport")
      a->transport = v;
    else if (k == "--baselines")
      a->baselines = v;
    else
      fatal("unknown option " + k + " (see --help)");
  }
  if (a->factor <= 1.0 && a->maxBytes > a->minBytes) fatal("-f must be > 1");
  if (a->iters < 1 || a->warmup < 0) fatal("-n must be >= 1 and -w >= 0");
  if (a->transport != "mpi" && a->transport != "ucx") fatal("--transport must be mpi or ucx");
  if (a->baselines != "all" && a->baselines != "mpi") fatal("--baselines must be all or mpi");
  return true;
}

int algoFromName(const std::string& s) {
  const char* names[] = {"auto", "ring", "sra", "allgather", "hier"};
  for (int i = 0; i < 5; ++i)
    if (s == names[i]) return i;
  fatal("unknown --algo " + s);
}
const char* algoName(int a) {
  static const char* names[] = {"auto", "ring", "sra", "allgather", "hier"};
  return a >= 0 && a < 5 ? names[a] : "?";
}

// Inputs: gaussian-like, multiples of 2^-10 below 8 in magnitude (exact partial sums in fp32).
float input(int rank, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  int s = 0;
  for (int k = 0; k < 4; ++k) s += static_cast<int>((x >> (16 * k)) & 0x7FF);  // 0..8188
  return static_cast<float>(s - 4094) / 1024.0f;
}

// Median over iterations of the slowest rank's time; every rank returns the same value. `each`, when
// given, receives the slowest rank's time of every iteration in call order.
// Warm-ups start together too, as the timed calls do, so no rank enters a call while a peer is still
// in the one before.
double timeIt(const Args& a, const std::function<void()>& op, std::vector<double>* each = nullptr) {
  for (int i = 0; i < a.warmup; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    op();
  }
  std::vector<double> t(a.iters), tmax(a.iters);
  for (int i = 0; i < a.iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    op();
    t[i] = MPI_Wtime() - t0;
  }
  MPI_Allreduce(t.data(), tmax.data(), a.iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (each) *each = tmax;
  std::sort(tmax.begin(), tmax.end());
  return tmax[a.iters / 2];
}

// Element i of rank `me`'s result that a correct exact collective gives.
double exactResult(const Bench& b, size_t count, size_t i, int me) {
  if (b.a.allgather) return input(static_cast<int>(i / count), i % count);
  const size_t at = b.a.reduceScatter ? static_cast<size_t>(me) * count + i : i;
  double s = 0;
  for (int r = 0; r < gSize; ++r) s += input(r, at);
  return s;
}

// Rank 0 only: the same collective over the loopback transport with the same config and inputs.
// The loopback ranks share one host, where `auto` would sum a compressed call exactly in the
// shared segment; the replay only runs for a call that compressed (checkSize()), so it compresses
// as asked wherever its ranks are (localCompress), as the timed ranks on other hosts did.
std::vector<float> replay(const Bench& b, size_t count, const qcclTensorOpts_t& t) {
  std::vector<qcclComm_t> comms(gSize);
  qcclConfig_t cfg = b.cfg;
  cfg.localCompress = 1;
  qc(qcclCommInitLoopback(comms.data(), gSize, &cfg), nullptr, "qcclCommInitLoopback");
  std::vector<float> out(b.recvCount(count));
  std::vector<std::thread> threads;
  for (int r = 0; r < gSize; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> send(b.sendCount(count)), recv(b.recvCount(count));
      for (size_t i = 0; i < send.size(); ++i) send[i] = input(r, i);
      b.run(send.data(), recv.data(), count, t, comms[r]);
      if (r == 0) out.swap(recv);
    });
  }
  for (auto& th : threads) th.join();
  for (auto c : comms) qcclCommDestroy(c);
  return out;
}

// Largest |input| of any rank (see input()).
constexpr double kMaxInput = 4.0;

// What the library runs for a call of `count` elements with the options under test (allreduce):
// its own rule (selectAlgorithm), not a copy of it, so the bound and the model follow it.
int libraryAlgo(const Bench& b, size_t count) {
  qccl::SelectInput in;
  in.requested = static_cast<qccl::Algo>(b.opts.algo);
  in.codec.codec = static_cast<qccl::CodecId>(b.opts.codec);
  in.codec.bits = b.opts.bits;
  in.count = count;
  in.nranks = gSize;
  in.minCompressBytes = b.cfg.minCompressBytes;
  in.errorFeedback = b.cfg.errorFeedback != 0;
  in.hasId = true;
  return static_cast<int>(qccl::selectAlgorithm(in).algo);
}

// A sound per-element bound on |result - exact| for one call without residuals (see kHelp). f bounds
// one encode's error relative to the largest |value| in the bucket.
double errorBound(const Bench& b, size_t count) {
  double f = 1.0;  // onebit, signscale, dyn8: decoded value has the sign of v and |q| <= bucket max
  int codec = b.opts.codec;
  if (codec == qcclCodecFp16) f = std::ldexp(1.0, -11);
  if (codec == qcclCodecBf16) f = std::ldexp(1.0, -8);
  if (codec == qcclCodecMaxMin) f = 2.0 / ((1 << b.wireBits) - 1);  // step (max-min)/(2^k-1), max-min <= 2M
  double n = gSize, a = kMaxInput;
  if (b.a.allgather) return f * a + 1e-6;
  if (b.a.reduceScatter) return f * n * a + 1e-6;  // n worker encodes, no owner stage
  const int algo = libraryAlgo(b, count);
  if (algo == qcclAlgoAllgather) return f * n * a + 1e-6;
  if (algo == qcclAlgoRing) return n * f * n * a * std::pow(1 + f, n) + 1e-6;  // n casts of partial sums
  return f * n * a * (2 + f) + 1e-6;  // sra: n worker encodes, then the owner's encode of |sum| <= n(a + fa)
}

// -c 1: one more call on a fresh tensor id; counts wrong elements (see kHelp) and the error.
void checkSize(const Bench& b, const float* send, size_t count, uint64_t id, Row* row) {
  size_t rc = b.recvCount(count);
  std::vector<float> recv(rc), ref(rc);
  qcclTensorOpts_t t = b.opts;
  t.id = id;
  // A fresh tensor under auto would run its first trial (the flat path): check what was timed.
  if (row->ran == "hier") t.algo = qcclAlgoHier;
  b.run(send, recv.data(), count, t, b.comm);
  std::memcpy(ref.data(), recv.data(), rc * sizeof(float));
  MPI_Bcast(ref.data(), static_cast<int>(rc), MPI_FLOAT, 0, MPI_COMM_WORLD);
  uint64_t wrong = 0;
  const bool rs = b.a.reduceScatter;  // ranks hold different shards: no cross-rank comparison
  for (size_t i = 0; i < rc; ++i)
    wrong += (!rs && std::memcmp(&recv[i], &ref[i], sizeof(float)) != 0) || !std::isfinite(recv[i]);
  double err2 = 0, ref2 = 0;
  // A call auto summed in the shared segment is exact whatever codec it asked for.
  const bool lossless = t.codec == qcclCodecNone || row->ran == "shm";
  if (gRank == 0 || (rs && lossless)) {
    std::vector<float> rep;
    // hier's result depends on the host grouping, which a loopback replay in one process cannot
    // reproduce: it is checked across ranks and against the bound only.
    const bool replayable = !lossless && t.algo != qcclAlgoHier;
    if (replayable) rep = replay(b, count, t);
    const double bound = errorBound(b, count);
    for (size_t i = 0; i < rc; ++i) {
      double ex = exactResult(b, count, i, gRank);
      err2 += (recv[i] - ex) * (recv[i] - ex);
      ref2 += ex * ex;
      if (lossless
              ? recv[i] != static_cast<float>(ex)
              : (replayable && std::memcmp(&recv[i], &rep[i], sizeof(float)) != 0) || std::fabs(recv[i] - ex) > bound)
        ++wrong;
    }
  }
  MPI_Allreduce(&wrong, &row->wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  row->relErr = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  MPI_Bcast(&row->relErr, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  qc(qcclTensorRelease(b.comm, id), b.comm, "qcclTensorRelease");
}

namespace {

// The codec config of the bench's tensor options.
qccl::CodecConfig codecConfigOf(const Bench& b) {
  qccl::CodecConfig cc;
  cc.codec = static_cast<qccl::CodecId>(b.opts.codec);
  cc.bits = b.opts.bits;
  cc.bucket = static_cast<uint32_t>(b.cfg.bucket);
  cc.stochastic = b.cfg.stochastic != 0;
  return cc;
}

// One rank's buffers for the codec measurements: `count` floats of input, its residual, an output.
struct CodecWork {
  size_t count;
  qccl::CodecConfig cc;
  std::vector<float> x, res, out;
  std::vector<char> wire;
  CodecWork(const qccl::CodecConfig& c, size_t n)
      : count(n), cc(c), x(n), res(n, 0.0f), out(n, 0.0f), wire(qccl::encodedBytes(c, n)) {
    for (size_t i = 0; i < n; ++i) x[i] = input(gRank, i);
  }
  double encode() {
    auto t0 = std::chrono::steady_clock::now();
    qccl::encode(cc, x.data(), res.data(), count, wire.data(), wire.size());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double decodeAdd() {
    auto t0 = std::chrono::steady_clock::now();
    qccl::decodeAdd(wire.data(), wire.size(), out.data(), count);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Waits for `req` testing it once a millisecond, asleep in between (a blocking MPI call would spin
// on the shared cores and slow the ranks at work down).
void waitAsleep(MPI_Request* req) {
  for (int done = 0; !done;) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      timespec ms{0, 1000000};
      nanosleep(&ms, nullptr);
    }
  }
}

// A barrier every rank leaves at about the same moment: each polls it without sleeping, yielding
// its core between tests, so no rank starts a timed phase up to a millisecond after the others.
void barrierTogether() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) sched_yield();
  }
}

}  // namespace

// The codec under test on the run's largest size of fp32 per rank (1 to 64 MiB): as large calls
// do, it then streams from memory (with 16 MiB for a 64 MiB run the decodeAdd's output stayed in
// the L3 and measured twice as fast as inside the calls). In GB/s of fp32 per rank:
// - encode and decodeAdd on rank 0 alone, one thread, best of 5, while the other ranks sleep
//   (encGBps, decGBps: the codec's own throughput line, and the model's codec CPU);
// - then every rank at once on its own buffers: 5 encodes started together (a barrier), timed
//   until the last rank has finished them (a barrier polled asleep, so a rank done early gives its
//   core to the others), then 5 decodeAdds the same way (encGBpsAll, decGBpsAll). With ranks
//   sharing a machine it holds their shares of its cores and of its memory bandwidth at the most
//   contention they can see; the calls see less (bench/RESULTS.md, "The model's codec CPU").
void measureCodec(Bench* b) {
  if (b->opts.codec == qcclCodecNone) return;
  const size_t count = std::min<size_t>(16 << 20, std::max<size_t>(1 << 18, b->sendCount(b->a.maxBytes / 4)));
  CodecWork work(codecConfigOf(*b), count);
  constexpr int kReps = 5;
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);  // every rank has filled its buffers before rank 0 starts
  waitAsleep(&req);
  double rates[2] = {0, 0};
  if (gRank == 0) {
    double enc = 1e30, dec = 1e30;
    for (int rep = 0; rep < kReps; ++rep) {
      enc = std::min(enc, work.encode());
      dec = std::min(dec, work.decodeAdd());
    }
    rates[0] = 4.0 * count / enc / 1e9;
    rates[1] = 4.0 * count / dec / 1e9;
  }
  MPI_Ibcast(rates, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req);
  waitAsleep(&req);
  b->encGBps = rates[0];
  b->decGBps = rates[1];

  double own[2], slowest[2];
  for (int phase = 0; phase < 2; ++phase) {
    barrierTogether();
    auto t0 = std::chrono::steady_clock::now();
    for (int rep = 0; rep < kReps; ++rep) phase == 0 ? work.encode() : work.decodeAdd();
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    waitAsleep(&req);
    own[phase] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  MPI_Allreduce(own, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  b->encGBpsAll = 4.0 * kReps * count / slowest[0] / 1e9;
  b->decGBpsAll = 4.0 * kReps * count / slowest[1] / 1e9;
}

// fp32 bytes one rank encodes and decodes per call of the codec under test (for the model).
void codecBytes(const Bench& b, const char* algo, size_t count, double* enc, double* dec) {
  const double n = gSize, c = 4.0 * static_cast<double>(count);
  if (b.a.allgather) {
    *enc = c;
    *dec = c * n;
  } else if (std::strcmp(algo, "sra") == 0) {
    *enc = c;                // every other rank's shard once, then the owned shard's sum
    *dec = c * (2 - 1 / n);  // n - 1 contributions to the owned shard, then every shard of the result
  } else if (std::strcmp(algo, "allgather") == 0) {
    *enc = c;
    *dec = c * n;
  } else {  // ring with a cast: every step encodes and decodes one shard
    *enc = c * 2 * (n - 1) / n;
    *dec = c * 2 * (n - 1) / n;
  }
}

// Mean over ranks of a per-rank value.
double meanOverRanks(double v) {
  double sum = 0;
  MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / gSize;
}

// The process's CPU seconds, user + system, and the system part alone (the kernel's TCP/IP work:
// on the emulated cluster also the veth forwarding and shaping of the hosts' links).
struct CpuSeconds {
  double total = 0, sys = 0;
};
CpuSeconds processCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double sys = ru.ru_stime.tv_sec + 1e-6 * ru.ru_stime.tv_usec;
  return {ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + sys, sys};
}

// The scheduler's counters for this process: context switches (getrusage) and migrations between
// CPUs (/proc/self/sched, which kernels without CONFIG_SCHED_DEBUG do not have: -1).
struct SchedCounts {
  double nivcsw = 0, nvcsw = 0, migrations = -1;
};
SchedCounts schedCounts() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  SchedCounts c;
  c.nivcsw = static_cast<double>(ru.ru_nivcsw);
  c.nvcsw = static_cast<double>(ru.ru_nvcsw);
  if (FILE* f = std::fopen("/proc/self/sched", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), f)) {
      double v = 0;
      if (std::sscanf(line, " se.nr_migrations : %lf", &v) == 1) {
        c.migrations = v;
        break;
      }
    }
    std::fclose(f);
  }
  return c;
}

// The pipeline of one flat allreduce as the library cuts it (communicator.cc, executor.cc): chunk
// rounds and the bytes of one chunk's message. sra's rounds cover one shard, the allgather
// schedule's the whole tensor, the ring's 2(n - 1) steps of one shard each.
struct ChunkPlan {
  size_t rounds = 1, msgBytes = 0;
  int phases = 1;
};
ChunkPlan chunkPlan(const Bench& b, const char* algo, size_t count) {
  qccl::CodecConfig cc;
  cc.codec = static_cast<qccl::CodecId>(b.opts.codec);
  cc.bits = b.opts.bits;
  cc = qccl::resolveConfig(cc);
  const size_t chunkElems =
      qccl::Executor::chunkElemsFor(cc, b.cfg.chunkBytes ? b.cfg.chunkBytes : qccl::chunkBytesFor(cc.codec));
  const size_t n = static_cast<size_t>(gSize);
  const bool whole = std::strcmp(algo, "allgather") == 0;
  const size_t span = std::max<size_t>(1, whole ? count : (count + n - 1) / n);
  ChunkPlan c;
  c.rounds = (span + chunkElems - 1) / chunkElems;
  c.msgBytes = qccl::encodedBytes(cc, std::min(span, chunkElems));
  c.phases = std::strcmp(algo, "sra") == 0 ? 2 : 1;
  if (std::strcmp(algo, "ring") == 0) c.rounds *= 2 * (n - 1);
  return c;
}

Row benchSize(Bench& b, size_t size, uint64_t idx) {
  Row row;
  row.size = size;
  size_t count = b.a.allgather || b.a.reduceScatter ? size / 4 / gSize : size / 4;
  row.count = count;
  size_t rc = b.recvCount(count);
  std::vector<float> send(b.sendCount(count)), recv(rc);
  for (size_t i = 0; i < send.size(); ++i) send[i] = input(gRank, i);
  qcclTensorOpts_t t = b.opts;
  t.id = 1000 + idx;
  const bool allreduce = !b.a.allgather && !b.a.reduceScatter;
  if (allreduce && b.opts.algo == qcclAlgoAuto) {
    // auto's trials of hier against the flat path where ranks share hosts (qcclConfig_t.autoHier):
    // untimed, so that the timed calls run what auto keeps.
    for (int i = 0; i < QCCL_AUTO_TRIAL_CALLS; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      b.run(send.data(), recv.data(), count, t, b.comm);
    }
  }
  qcclStats_t s0, s1;
  qc(qcclCommGetStats(b.comm, &s0), b.comm, "stats");
  const CpuSeconds cpu0 = processCpuSeconds();
  const SchedCounts sched0 = schedCounts();
  row.timeS = timeIt(
      b.a, [&] { b.run(send.data(), recv.data(), count, t, b.comm); }, &row.times);
  const CpuSeconds cpu1 = processCpuSeconds();
  const SchedCounts sched1 = schedCounts();
  int cpuNow = sched_getcpu();
  row.rankCpus.assign(static_cast<size_t>(gSize), -1);
  MPI_Allgather(&cpuNow, 1, MPI_INT, row.rankCpus.data(), 1, MPI_INT, MPI_COMM_WORLD);
  qc(qcclCommGetStats(b.comm, &s1), b.comm, "stats");
  if (allreduce) {
    int ran = 0, native = 0;
    qc(qcclCommGetLastAlgo(b.comm, &ran, &native), b.comm, "qcclCommGetLastAlgo");
    row.ran = native == 3 ? "rd" : native == 2 ? "shm" : native ? "native" : algoName(ran);
  } else {
    row.ran = b.schedule();
  }
  const double calls = b.a.iters + b.a.warmup;
  double wire = static_cast<double>(s1.bytesSent - s0.bytesSent) / calls;
  MPI_Allreduce(&wire, &row.wireBytes, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double xhost = static_cast<double>(s1.bytesSentInterHost - s0.bytesSentInterHost) / calls;
  MPI_Allreduce(&xhost, &row.interHostBytes, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // In native rows qccl sent only the check's headers; the sum went through MPI's allreduce.
  row.ratio = row.wireBytes > 0 && row.ran != "native" ? b.fp32WireBytes(count) / row.wireBytes : 0.0;
  row.encS = meanOverRanks((s1.encodeSeconds - s0.encodeSeconds) / calls);
  row.decS = meanOverRanks((s1.decodeSeconds - s0.decodeSeconds) / calls);
  row.waitS = meanOverRanks((s1.waitSeconds - s0.waitSeconds) / calls);
  row.idleS = meanOverRanks((s1.idleSeconds - s0.idleSeconds) / calls);
  row.cpuS = meanOverRanks((cpu1.total - cpu0.total) / calls);
  row.sysS = meanOverRanks((cpu1.sys - cpu0.sys) / calls);
  row.nivcsw = meanOverRanks((sched1.nivcsw - sched0.nivcsw) / calls);
  row.nvcsw = meanOverRanks((sched1.nvcsw - sched0.nvcsw) / calls);
  {
    const double mine = sched0.migrations >= 0 && sched1.migrations >= 0 ? 1 : 0;
    double all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    const double m = meanOverRanks(mine > 0 ? (sched1.migrations - sched0.migrations) / calls : 0);
    row.migrations = all > 0 ? m : -1;
  }
  uint64_t mem = s1.residualBytes + s1.peakStagingBytes;
  MPI_Allreduce(&mem, &row.peakMem, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  qc(qcclTensorRelease(b.comm, t.id), b.comm, "qcclTensorRelease");
  if (allreduce && b.opts.codec != qcclCodecNone && (row.ran == "sra" || row.ran == "allgather")) {
    // The model's wire time for this row: its messages, with no codec, in the same run.
    const ChunkPlan c = chunkPlan(b, row.ran.c_str(), count);
    row.chunkRounds = static_cast<double>(c.rounds);
    row.probeBytes = static_cast<double>(c.msgBytes) * c.phases * static_cast<double>(c.rounds) * (gSize - 1);
    double cpu = 0;
    row.probeS = bench::timeWirePattern(
        c.msgBytes, c.phases, c.rounds, b.cfg.pipelineDepth,
        [&](const std::function<void()>& op) { return timeIt(b.a, op); }, &cpu);
    row.probeCpuS = meanOverRanks(cpu);
  }

  const bench::BaselineSet set = b.a.baselines == "mpi" ? bench::BaselineSet::kMpiOnly : bench::BaselineSet::kAll;
  row.baselines = bench::timeBaselines(b.collective(), send.data(), recv.data(), count, b.comm, 4000 + idx, set,
                                       [&](const std::function<void()>& op) { return timeIt(b.a, op); });
  row.best = bench::best(row.baselines);
  row.mpiTimeS = bench::timeOf(row.baselines, b.a.allgather       ? "mpi_allgather"
                                              : b.a.reduceScatter ? "mpi_reduce_scatter_block"
                                                                  : "mpi_allreduce");
  qcclTensorOpts_t f16 = QCCL_TENSOR_OPTS_INIT;
  f16.id = 2000 + idx;
  f16.codec = qcclCodecFp16;
  f16.algo = b.a.allgather ? -1 : (b.a.reduceScatter ? qcclAlgoSra : qcclAlgoRing);
  row.fp16TimeS = timeIt(b.a, [&] { b.run(send.data(), recv.data(), count, f16, b.comm); });
  qc(qcclTensorRelease(b.comm, f16.id), b.comm, "qcclTensorRelease");

  if (b.a.check) {
    checkSize(b, send.data(), count, 3000 + idx, &row);
    row.checked = true;
  }
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  uint64_t rss = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  MPI_Allreduce(&rss, &row.maxRss, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return row;
}

// Ranks that share this machine's cores: those running on the same kernel (its boot id), whatever
// host they stand for. The emulated cluster's hosts are network namespaces of one machine, each
// with its own orted, so MPI's shared-memory split sees one rank per node while all of them
// share the same 2 cores. Without a boot id (not Linux), MPI's shared-memory split.
int ranksOnThisMachine() {
  constexpr int kKey = 64;
  char key[kKey] = {};
  bool have = false;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    have = std::fgets(key, kKey, f) != nullptr;
    std::fclose(f);
  }
  int allHave = 0, mine = have ? 1 : 0;
  MPI_Allreduce(&mine, &allHave, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!allHave) {
    MPI_Comm node;
    int onNode = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &onNode);
    MPI_Comm_free(&node);
    return onNode;
  }
  std::vector<char> all(static_cast<size_t>(kKey) * static_cast<size_t>(gSize));
  MPI_Allgather(key, kKey, MPI_CHAR, all.data(), kKey, MPI_CHAR, MPI_COMM_WORLD);
  int same = 0;
  for (int r = 0; r < gSize; ++r) same += std::memcmp(all.data() + static_cast<size_t>(r) * kKey, key, kKey) == 0;
  return same;
}

// Fits the link from the rows' qccl_ring times and fills every compressed row's prediction: wire
// time from the row's replayed messages (sra, allgather) or the ring's line, codec CPU, pipelined.
bench::LinkFit applyModel(const Bench& b, std::vector<Row>* rows) {
  std::vector<double> w, t;
  for (const Row& r : *rows) {
    double ring = bench::timeOf(r.baselines, "qccl_ring");
    if (ring > 0) {
      w.push_back(b.fp32WireBytes(r.count));
      t.push_back(ring);
    }
  }
  bench::LinkFit fit = bench::fitRing(w, t, gSize);
  if (b.a.allgather || b.a.reduceScatter || b.opts.codec == qcclCodecNone) return fit;
  const int onMachine = ranksOnThisMachine();
  const double share =
      static_cast<double>(onMachine) / static_cast<double>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  for (Row& r : *rows) {
    if (r.ran != "sra" && r.ran != "allgather" && r.ran != "ring") continue;  // the flat schedules only
    const char* algo = r.ran.c_str();
    double enc = 0, dec = 0;
    codecBytes(b, algo, r.count, &enc, &dec);
    bench::CallModel m;
    r.codecModelS = bench::codecSeconds(enc, dec, b.encGBps, b.decGBps, share);
    // The same bytes at every rank's throughput at once (its wall time holds the CPU share): the
    // most memory contention the ranks can see, for comparison (codec_cpu_all_s).
    r.codecAllModelS = b.encGBpsAll > 0 ? bench::codecSeconds(enc, dec, b.encGBpsAll, b.decGBpsAll, 1.0) : -1;
    // Ranks on one kernel share its cores between the codec and the transport's own work (the
    // replay's CPU: copies, system calls, TCP): the call is CPU-bound when the two exceed the wire.
    m.cpuS = r.codecModelS + r.probeCpuS * std::max(1.0, share);
    m.fixedS = bench::roundsOf(algo, gSize) * fit.alpha;
    if (r.probeS > 0) {
      m.chunkRounds = r.chunkRounds;
      m.bytes = r.probeBytes;
      m.slowdown = fit.ok ? std::max(0.0, r.probeS - m.fixedS) / (r.probeBytes * fit.beta) : 1;
      r.wireModelS = r.probeS;
    } else if (fit.ok) {
      m.chunkRounds = static_cast<double>(chunkPlan(b, algo, r.count).rounds);
      r.chunkRounds = m.chunkRounds;
      m.bytes = r.wireBytes;
      r.wireModelS = m.fixedS + m.bytes * fit.beta;
    } else {
      continue;
    }
    r.cpuModelS = m.cpuS;
    r.predictedS = bench::pipelinedSeconds(r.wireModelS, m.cpuS, m.chunkRounds);
    r.breakevenGbit = fit.ok ? bench::breakEvenGbit(fit, b.fp32WireBytes(r.count), 2 * (gSize - 1), m) : -1;
  }
  return fit;
}

qcclComm_t makeComm(const Bench& b) {
  qcclComm_t comm = nullptr;
  if (b.a.transport == "ucx") {
    qcclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (gRank == 0) qc(qcclGetUniqueId(&id), nullptr, "qcclGetUniqueId");
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    qc(qcclCommInitRank(&comm, gSize, id, gRank, &b.cfg), nullptr, "qcclCommInitRank");
  } else {
    qc(qcclCommInitMpi(&comm, MPI_COMM_WORLD, &b.cfg), nullptr, "qcclCommInitMpi");
  }
  return comm;
}

void setup(Bench* b) {
  qc(qcclConfigInit(&b->cfg), nullptr, "qcclConfigInit (check the QCCL_* variables)");
  try {
    if (!b->a.codec.empty()) b->cfg.codec = static_cast<int>(qccl::parseCodecName(b->a.codec));
  } catch (const std::exception& e) {
    fatal(e.what());
  }
  if (b->a.bits > 0) b->cfg.bits = b->a.bits;
  if (!b->a.algo.empty()) b->cfg.algo = algoFromName(b->a.algo);
  b->opts.codec = b->cfg.codec;
  b->opts.bits = b->cfg.bits;
  try {
    qccl::CodecConfig cc;
    cc.codec = static_cast<qccl::CodecId>(b->cfg.codec);
    cc.bits = b->cfg.bits;
    b->wireBits = qccl::resolveConfig(cc).bits;
  } catch (const std::exception& e) {
    fatal(e.what());
  }
  // Allgather has two schedules: flat (any algo) and by host (--algo hier).
  b->opts.algo = b->a.allgather && b->cfg.algo != qcclAlgoHier ? -1 : b->cfg.algo;
}

}  // namespace collbench

using namespace collbench;

int runCollBench(const char* which, int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  Bench b;
  b.a.allgather = std::strcmp(which, "allgather") == 0;
  b.a.reduceScatter = std::strcmp(which, "reducescatter") == 0;
  if (!parseArgs(argc, argv, &b.a)) {
    MPI_Finalize();
    return 0;
  }
  setup(&b);
  b.comm = makeComm(b);
  measureCodec(&b);
  if (gRank == 0) printHeader(b);
  uint64_t idx = 0, wrong = 0;
  std::vector<Row> rows;
  for (size_t size = b.a.minBytes; size <= b.a.maxBytes; ++idx) {
    Row r = benchSize(b, size, idx);
    wrong += r.wrong;
    if (gRank == 0) printRow(b, r);
    rows.push_back(r);
    size_t next = static_cast<size_t>(static_cast<double>(size) * b.a.factor);
    if (next <= size) break;
    size = next;
  }
  const bench::LinkFit fit = applyModel(b, &rows);
  if (gRank == 0) printModel(b, fit, rows);
  bench::shutdownBaselines();
  qc(qcclCommDestroy(b.comm), nullptr, "qcclCommDestroy");
  if (gRank == 0 && b.a.check && !b.a.json && !b.a.csv)
    std::printf("# wrong elements in total: %llu%s\n", (unsigned long long)wrong, wrong ? " (FAILED)" : "");
  MPI_Finalize();
  return wrong == 0 ? 0 : 1;  // -c 1 fails the run on any wrong element, like nccl-tests
}
