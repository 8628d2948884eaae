// qccl-bench codec: single-threaded encode / decodeAdd throughput of every codec, against memcpy
// measured in the same run on the same buffers, plus compression ratio and error-feedback quality.
//
// Memory efficiency = (bytes the codec must move / its time) / (bytes memcpy moves / memcpy time):
//   encode (with error feedback) reads g and r, writes r and the wire bytes: 12n + wire;
//   decodeAdd reads the wire bytes and out, writes out: wire + 8n;  memcpy reads and writes 4n each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/codec_rows.hpp"
#include "qccl/codec.hpp"
#include "qccl/error.hpp"

namespace {

struct BenchOptions {
  size_t bytes = 64ull << 20;
  int iters = 10;
  int warmup = 2;
  uint32_t bucket = 512;
  bool json = false;
  bool device = false;
  std::string only;  // run only rows whose label starts with this
};

using Row = qccl::bench::CodecRow;
const auto& kRows = qccl::bench::kCodecRows;

int usage() {
  std::fprintf(stderr,
               "usage: qccl-bench codec [options]\n"
               "  -b SIZE     fp32 bytes per buffer (K/M/G suffixes; default 64M)\n"
               "  -n N        timed iterations, the median is reported (default 10)\n"
               "  -w N        warm-up iterations (default 2)\n"
               "  --bucket N  elements per bucket (default 512)\n"
               "  --codec L   only rows whose label starts with L (fp32 fp16 bf16 onebit signscale\n"
               "              maxmin2 maxmin4 maxmin8 maxmin4sr dyn8)\n"
               "  --json      one JSON object per row\n"
               "  --device    the CUDA kernels on GPU 0 (CUDA builds): encode and decodeAdd against a\n"
               "              device-to-device cudaMemcpy, every row's bytes checked against the CPU codec\n"
               "QCCL_CPU_ISA=scalar|avx2|avx512 caps the vector ISA.\n");
  return 2;
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return v > 0 ? (size_t)v : 0;
}

bool parseArgs(int argc, char** argv, BenchOptions* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool hasNext = i + 1 < argc;
    if (a == "--json") {
      o->json = true;
    } else if (a == "--device") {
      o->device = true;
    } else if (a == "-b" && hasNext) {
      o->bytes = parseSize(argv[++i]);
    } else if (a == "-n" && hasNext) {
      o->iters = std::atoi(argv[++i]);
    } else if (a == "-w" && hasNext) {
      o->warmup = std::atoi(argv[++i]);
    } else if (a == "--bucket" && hasNext) {
      o->bucket = (uint32_t)std::atoi(argv[++i]);
    } else if (a == "--codec" && hasNext) {
      o->only = argv[++i];
    } else {
      return false;
    }
  }
  return o->bytes >= 4 && o->iters >= 1 && o->warmup >= 0;
}

template <typename F>
double medianSeconds(int warmup, int iters, F&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void fillGaussian(std::vector<float>* v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (float& x : *v) x = nd(rng);
}

// ||sum_t decoded_t - sum_t g_t|| / ||sum_t g_t|| over `steps` fresh Gaussian gradients.
double relL2(const qccl::CodecConfig& cfg, size_t n, int steps, bool ef) {
  std::vector<float> g(n), r(n, 0.0f), d(n);
  std::vector<double> sumG(n, 0.0), sumD(n, 0.0);
  std::vector<uint8_t> wire(qccl::encodedBytes(cfg, n));
  qccl::EncodeParams p;
  for (int t = 0; t < steps; ++t) {
    fillGaussian(&g, 100 + t);
    p.rngOffset = (uint64_t)t * n;
    qccl::encode(cfg, g.data(), ef ? r.data() : nullptr, n, wire.data(), wire.size(), p);
    qccl::decode(wire.data(), wire.size(), d.data(), n);
    for (size_t i = 0; i < n; ++i) {
      sumG[i] += g[i];
      sumD[i] += d[i];
    }
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (sumD[i] - sumG[i]) * (sumD[i] - sumG[i]);
    den += sumG[i] * sumG[i];
  }
  return std::sqrt(num / den);
}

struct Result {
  size_t wireBytes;
  double encS, decS, encEff, decEff, ratio, relL2Ef, relL2NoEf;
};

Result measure(const qccl::CodecConfig& cfg, const BenchOptions& o, const std::vector<float>& g, std::vector<float>* r,
               std::vector<float>* acc, std::vector<uint8_t>* wire, double memcpyS) {
  const size_t n = g.size();
  Result res;
  res.wireBytes = qccl::encodedBytes(cfg, n);
  res.encS =
      medianSeconds(o.warmup, o.iters, [&] { qccl::encode(cfg, g.data(), r->data(), n, wire->data(), wire->size()); });
  res.decS = medianSeconds(o.warmup, o.iters, [&] { qccl::decodeAdd(wire->data(), wire->size(), acc->data(), n); });
  const double memcpyRate = 2.0 * 4 * n / memcpyS;
  res.encEff = ((12.0 * n + res.wireBytes) / res.encS) / memcpyRate;
  res.decEff = ((8.0 * n + res.wireBytes) / res.decS) / memcpyRate;
  res.ratio = qccl::compressionRatio(cfg, n);
  // Quality on at most 1M elements: the error statistics do not depend on the buffer size.
  const size_t qn = std::min<size_t>(n, 1u << 20);
  res.relL2Ef = relL2(cfg, qn, 10, true);
  res.relL2NoEf = relL2(cfg, qn, 10, false);
  return res;
}

}  // namespace

int runCodecBench(int argc, char** argv) {
  BenchOptions o;
  if (!parseArgs(argc, argv, &o)) return usage();
  if (o.device) {
#if QCCL_BENCH_DEVICE
    return qccl::bench::runDeviceCodecBench(o.bytes, o.iters, o.warmup, o.bucket, o.only.c_str(), o.json);
#else
    std::fprintf(stderr, "qccl-bench codec --device: this build has no CUDA (configure with QCCL_CUDA=ON)\n");
    return 2;
#endif
  }
  const size_t n = o.bytes / 4;
  std::vector<float> g(n), r(n, 0.0f), acc(n, 0.0f), copy(n);
  fillGaussian(&g, 1);
  const double memcpyS =
      medianSeconds(o.warmup, o.iters, [&] { std::memcpy(copy.data(), g.data(), n * sizeof(float)); });
  const double memcpyGbps = 4.0 * n / memcpyS / 1e9;
  if (!o.json) {
    std::printf("# qccl-bench codec: %zu fp32 elements (%.1f MiB), bucket %u, isa %s, median of %d (warm-up %d)\n", n,
                n * 4.0 / (1 << 20), o.bucket, qccl::cpuIsaName(), o.iters, o.warmup);
    std::printf("# memcpy %.2f GB/s; GB/s are fp32 input bytes per second; mem_eff against memcpy read+write\n",
                memcpyGbps);
    std::printf("%-10s %4s %8s %10s %10s %8s %8s %10s %10s\n", "codec", "bits", "ratio", "enc_GB/s", "dec_GB/s",
                "enc_eff", "dec_eff", "relL2_ef", "relL2_noef");
  }
  try {
    std::vector<uint8_t> wire;
    for (const Row& row : kRows) {
      if (!o.only.empty() && std::string(row.label).rfind(o.only, 0) != 0) continue;
      qccl::CodecConfig cfg;
      cfg.codec = row.codec;
      cfg.bits = row.bits;
      cfg.stochastic = row.stochastic;
      cfg.bucket = o.bucket;
      cfg.seed = 1234;
      cfg = qccl::resolveConfig(cfg);
      wire.assign(qccl::encodedBytes(cfg, n), 0);
      std::fill(r.begin(), r.end(), 0.0f);
      Result m = measure(cfg, o, g, &r, &acc, &wire, memcpyS);
      double encGbps = 4.0 * n / m.encS / 1e9, decGbps = 4.0 * n / m.decS / 1e9;
      if (o.json) {
        std::printf(
            "{\"codec\":\"%s\",\"label\":\"%s\",\"bits\":%d,\"stochastic\":%s,\"bucket\":%u,\"bytes\":%zu,"
            "\"count\":%zu,\"wire_bytes\":%zu,\"encode_gbps\":%.3f,\"decode_gbps\":%.3f,\"memcpy_gbps\":%.3f,"
            "\"encode_mem_eff\":%.3f,\"decode_mem_eff\":%.3f,\"ratio\":%.4f,\"rel_l2\":%.6g,\"rel_l2_no_ef\":%.6g,"
            "\"isa\":\"%s\"}\n",
            qccl::codecName(cfg.codec), row.label, cfg.bits, row.stochastic ? "true" : "false", o.bucket, n * 4, n,
            m.wireBytes, encGbps, decGbps, memcpyGbps, m.encEff, m.decEff, m.ratio, m.relL2Ef, m.relL2NoEf,
            qccl::cpuIsaName());
      } else {
        std::printf("%-10s %4d %8.2f %10.2f %10.2f %8.2f %8.2f %10.4g %10.4g\n", row.label, cfg.bits, m.ratio, encGbps,
                    decGbps, m.encEff, m.decEff, m.relL2Ef, m.relL2NoEf);
      }
      std::fflush(stdout);
    }
  } catch (const qccl::Error& e) {
    std::fprintf(stderr, "qccl-bench codec: %s\n", e.what());
    return 1;
  }
  return 0;
}
