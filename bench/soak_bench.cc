// qccl-bench soak: many collectives of random sizes, codecs, algorithms and tensor ids, every one
// checked, and the memory qccl holds tracked over the run. Ranks are started by mpirun; --transport
// picks what qccl runs over (MPI is the launcher and the referee).
//
// Inputs are built so that the exact sum is known in closed form and every codec but maxmin
// reproduces it bit for bit: within each bucket every rank holds +a or -a with one sign pattern
// common to all ranks (a differs per rank and bucket), so each encode of onebit, signscale, dyn8,
// fp16 and bf16 is exact, the owner's sum is again two-valued, and every residual stays exactly 0.
// maxmin decodes its two levels to within a few ulps, so it is checked against a tolerance that
// any misplaced or mixed-up data exceeds by orders of magnitude.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qccl/qccl.h"
#include "qccl/qccl_mpi.h"

namespace {

const char kSoakHelp[] =
    "usage: qccl-bench soak [options]   (start ranks with mpirun)\n"
    "  --calls N          collectives to run (default 10000)\n"
    "  --max-bytes B      largest tensor, fp32 bytes, K/M suffixes (default 16M)\n"
    "  --ids N            distinct tensor ids (default 64); each id keeps one codec\n"
    "  --transport T      mpi|ucx (default mpi)\n"
    "  --seed S           the run's random sequence (default 1)\n"
    "  --bucket N         the communicator's bucket (default 512, the inputs' pattern); another value\n"
    "                     makes the codecs lossy on these inputs, so the check must report wrong elements\n"
    "  --json             one JSON summary line at the end\n"
    "Every call is checked on every rank: wrong = an element that differs from the exact sum (maxmin:\n"
    "by more than 1e-5 of the largest possible value) or is not finite; mismatched = a call whose\n"
    "result bytes differ across ranks. Memory = residual + staging bytes qccl holds, max over ranks.\n";

int gRank = 0, gSize = 1;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "qccl-bench soak [rank %d]: %s\n", gRank, msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct CodecChoice {
  int codec;
  int bits;
  const char* name;
};
const CodecChoice kCodecs[] = {
    {qcclCodecNone, 0, "none"},      {qcclCodecFp16, 0, "fp16"},           {qcclCodecBf16, 0, "bf16"},
    {qcclCodecOneBit, 0, "onebit"},  {qcclCodecSignScale, 0, "signscale"}, {qcclCodecMaxMin, 2, "maxmin2"},
    {qcclCodecMaxMin, 4, "maxmin4"}, {qcclCodecMaxMin, 8, "maxmin8"},      {qcclCodecDyn8, 0, "dyn8"}};
constexpr int kNumCodecs = sizeof(kCodecs) / sizeof(kCodecs[0]);
constexpr size_t kBucket = 512;  // the communicator's bucket: inputs are two-valued per bucket

// Sign of element i of call c (common to all ranks) and magnitude of rank r in i's bucket.
float magnitude(uint64_t call, int rank, size_t bucket) {
  const uint64_t kmax = std::max<uint64_t>(1, 256 / static_cast<uint64_t>(gSize));  // sums stay <= 16
  return static_cast<float>(1 + mix(call * 0x10001ull ^ (bucket << 20) ^ static_cast<uint64_t>(rank)) % kmax) / 16.0f;
}
bool negative(uint64_t call, size_t i) { return (mix(call ^ (i * 0x2545F4914F6CDD1Dull)) & 1) != 0; }

struct Call {
  uint64_t number;
  size_t count;
  uint64_t id;
  CodecChoice codec;
  int algo;
  int op;
};

// The same sequence on every rank: drawn from the shared seed.
Call draw(std::mt19937_64& rng, uint64_t number, size_t maxCount, int ids) {
  Call c;
  c.number = number;
  if (rng() % 2 == 0) {
    c.count = static_cast<size_t>(rng() % (maxCount + 1));
  } else {  // log-uniform: small tensors too
    double l = std::ldexp(static_cast<double>(rng() >> 11), -53) * std::log2(static_cast<double>(maxCount));
    c.count = static_cast<size_t>(std::exp2(l));
  }
  c.id = 1 + rng() % static_cast<uint64_t>(ids);
  c.codec = kCodecs[c.id % kNumCodecs];
  const bool cast = c.codec.codec == qcclCodecNone || c.codec.codec == qcclCodecFp16 || c.codec.codec == qcclCodecBf16;
  const int algos[] = {qcclAlgoAuto, qcclAlgoSra, qcclAlgoAllgather, qcclAlgoRing};
  c.algo = algos[rng() % (cast ? 4 : 3)];
  c.op = rng() % 4 == 0 ? qcclAvg : qcclSum;
  return c;
}

uint64_t fnv(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

size_t parseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  double m = 1;
  if (end && (*end == 'K' || *end == 'k')) m = 1024.0;
  if (end && (*end == 'M' || *end == 'm')) m = 1048576.0;
  if (!(v >= 0)) die(std::string("bad size ") + s);
  return static_cast<size_t>(v * m);
}

}  // namespace

int runSoakBench(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  long calls = 10000;
  size_t maxBytes = 16 << 20;
  int ids = 64;
  uint64_t seed = 1;
  std::string transport = "mpi";
  bool json = false;
  int bucket = static_cast<int>(kBucket);
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      if (gRank == 0) std::fputs(kSoakHelp, stdout);
      MPI_Finalize();
      return 0;
    }
    if (k == "--json") {
      json = true;
      continue;
    }
    if (i + 1 >= argc) die("option " + k + " needs a value");
    const char* v = argv[++i];
    if (k == "--calls")
      calls = std::atol(v);
    else if (k == "--max-bytes")
      maxBytes = parseBytes(v);
    else if (k == "--ids")
      ids = std::atoi(v);
    else if (k == "--transport")
      transport = v;
    else if (k == "--seed")
      seed = std::strtoull(v, nullptr, 10);
    else if (k == "--bucket")
      bucket = std::atoi(v);
    else
      die("unknown option " + k);
  }
  if (calls < 1 || ids < 1 || maxBytes < 4) die("--calls, --ids and --max-bytes must be positive");

  qcclConfig_t cfg;
  if (qcclConfigInit(&cfg) != qcclSuccess) die(qcclGetLastError(nullptr));
  cfg.bucket = bucket;
  cfg.timeoutSec = 120;
  qcclComm_t comm = nullptr;
  qcclResult_t r;
  if (transport == "ucx") {
    qcclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (gRank == 0 && qcclGetUniqueId(&id) != qcclSuccess) die(qcclGetLastError(nullptr));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    r = qcclCommInitRank(&comm, gSize, id, gRank, &cfg);
  } else {
    r = qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg);
  }
  if (r != qcclSuccess) die(std::string("init: ") + qcclGetLastError(nullptr));

  std::mt19937_64 rng(seed);
  const size_t maxCount = maxBytes / sizeof(float);
  std::vector<float> buf(maxCount), mine, exact;
  uint64_t wrong = 0, mismatched = 0, elements = 0, failures = 0;
  uint64_t peakMem = 0, memAtTenth = 0;
  long perCodec[kNumCodecs] = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < calls; ++n) {
    Call c = draw(rng, static_cast<uint64_t>(n), maxCount, ids);
    const size_t buckets = (c.count + kBucket - 1) / kBucket;
    mine.resize(buckets);
    exact.resize(buckets);
    for (size_t b = 0; b < buckets; ++b) {
      mine[b] = magnitude(c.number, gRank, b);
      float sum = 0;  // exact: multiples of 1/16 up to 16
      for (int q = 0; q < gSize; ++q) sum += magnitude(c.number, q, b);
      exact[b] = sum;
    }
    for (size_t i = 0; i < c.count; ++i) buf[i] = negative(c.number, i) ? -mine[i / kBucket] : mine[i / kBucket];
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = c.id;
    t.codec = c.codec.codec;
    t.bits = c.codec.bits;
    t.algo = c.algo;
    r = qcclAllreduce(buf.data(), buf.data(), c.count, qcclFloat32, static_cast<qcclRedOp_t>(c.op), &t, comm, nullptr);
    if (r != qcclSuccess) {
      ++failures;
      die("call " + std::to_string(n) + " (" + c.codec.name + ", " + std::to_string(c.count) +
          " elements): " + qcclGetLastError(comm));
    }
    ++perCodec[c.id % kNumCodecs];
    const bool lossyLevels = c.codec.codec == qcclCodecMaxMin;
    const float inv = 1.0f / static_cast<float>(gSize);
    for (size_t i = 0; i < c.count; ++i) {
      const float sum = negative(c.number, i) ? -exact[i / kBucket] : exact[i / kBucket];
      const float want = c.op == qcclAvg ? sum * inv : sum;
      const float got = buf[i];
      bool bad = !std::isfinite(got);
      if (!bad && lossyLevels) bad = std::fabs(got - want) > 1e-5f * 16.0f;
      if (!bad && !lossyLevels) bad = std::memcmp(&got, &want, sizeof(float)) != 0;
      wrong += bad ? 1 : 0;
    }
    elements += c.count;
    uint64_t h = fnv(buf.data(), c.count * sizeof(float)), lo = 0, hi = 0;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    mismatched += lo != hi ? 1 : 0;
    qcclStats_t st;
    qcclCommGetStats(comm, &st);
    uint64_t mem = st.residualBytes + st.stagingBytes;
    peakMem = std::max(peakMem, mem);
    if (n + 1 == std::max(1L, calls / 10)) memAtTenth = peakMem;
    if (gRank == 0 && !json && (n + 1) % 1000 == 0) {
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("soak: %ld calls, %.0f s, wrong %llu, mismatched %llu, rank-0 memory %.1f MiB (peak %.1f)\n", n + 1,
                  sec, static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(mismatched),
                  mem / 1048576.0, peakMem / 1048576.0);
      std::fflush(stdout);
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t totals[3] = {wrong, mismatched, elements}, sums[3] = {0, 0, 0};
  MPI_Allreduce(totals, sums, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  uint64_t mems[2] = {peakMem, memAtTenth}, maxMems[2] = {0, 0};
  MPI_Allreduce(mems, maxMems, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  qcclStats_t st;
  qcclCommGetStats(comm, &st);
  if (gRank == 0) {
    std::string mix;
    for (int k = 0; k < kNumCodecs; ++k)
      mix += std::string(k ? ", " : "") + "\"" + kCodecs[k].name + "\": " + std::to_string(perCodec[k]);
    std::printf(
        "{\"bench\": \"soak\", \"transport\": \"%s\", \"ranks\": %d, \"calls\": %ld, \"seconds\": %.1f, "
        "\"elements_checked_per_rank\": %llu, \"wrong\": %llu, \"mismatched_calls\": %llu, "
        "\"peak_memory_bytes\": %llu, \"peak_memory_after_first_tenth_bytes\": %llu, \"tensors_at_end\": %llu, "
        "\"calls_per_codec\": {%s}}\n",
        transport.c_str(), gSize, calls, sec, static_cast<unsigned long long>(sums[2] / gSize),
        static_cast<unsigned long long>(sums[0]), static_cast<unsigned long long>(sums[1] / gSize),
        static_cast<unsigned long long>(maxMems[0]), static_cast<unsigned long long>(maxMems[1]),
        static_cast<unsigned long long>(st.tensors), mix.c_str());
  }
  qcclCommDestroy(comm);
  MPI_Finalize();
  return sums[0] == 0 && sums[1] == 0 && failures == 0 ? 0 : 1;
}
