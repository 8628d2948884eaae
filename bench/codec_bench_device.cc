// qccl-bench codec --device: the CUDA codec kernels on GPU 0, against a device-to-device
// cudaMemcpy timed in the same run on the same allocation sizes.
//
// Memory efficiency = (bytes the kernel must move / its time) / (bytes cudaMemcpy moves / its time):
//   encode with error feedback reads g and r, writes r and the wire bytes: 12n + wire;
//   decodeAdd reads the wire bytes and out, writes out: wire + 8n;  cudaMemcpy reads and writes 4n each.
// Times are CUDA-event times of one call (median of the timed iterations), launch overheads included.
// An idle GPU runs its SMs at a low clock and raises it under load, so the bench first keeps the GPU
// busy with copies for about half a second, and times cudaMemcpy both before and after the codec
// rows; the faster of the two is the baseline (the lower efficiency for the kernels).
//
// Before timing, every row is checked against the CPU codec on the same input: the wire bytes and
// the updated residual of one encode from a zero residual, and the output of one decodeAdd into a
// copy of the input. A row whose bytes differ is printed with same_bytes=NO and the command exits 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/codec_rows.hpp"
#include "qccl/codec.hpp"
#include "qccl/cuda_codec.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) QCCL_THROW(ErrorCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { check(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* f() const { return static_cast<float*>(p); }
  void* p = nullptr;
};

// Median CUDA-event time in seconds of fn() enqueued on `stream`.
template <typename F>
double medianSeconds(int warmup, int iters, cudaStream_t stream, F&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) fn();
  check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(a, stream), "cudaEventRecord");
    fn();
    check(cudaEventRecord(b, stream), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Gaussian input from 16 independent streams (the same values on every run and machine).
std::vector<float> gaussianInput(size_t n) {
  std::vector<float> g(n);
  const size_t parts = 16;
  for (size_t p = 0; p < parts; ++p) {
    std::mt19937 rng(static_cast<uint32_t>(1 + p));
    std::normal_distribution<float> nd;
    for (size_t i = n * p / parts; i < n * (p + 1) / parts; ++i) g[i] = nd(rng);
  }
  return g;
}

// Copies src to dst on `stream` until at least `seconds` of wall time have passed.
void keepBusy(void* dst, const void* src, size_t bytes, cudaStream_t stream, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int i = 0; i < 8; ++i)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync D2D");
    check(cudaStreamSynchronize(stream), "warm-up copies");
  }
}

bool sameBytes(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

}  // namespace

int runDeviceCodecBench(size_t bytes, int iters, int warmup, uint32_t bucket, const char* only, bool json) {
  if (!cuda::deviceAvailable()) {
    std::fprintf(stderr, "qccl-bench codec --device: no CUDA device\n");
    return 2;
  }
  int failures = 0;
  try {
    const size_t n = bytes / 4;
    int device = 0, driver = 0, runtime = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

    const std::vector<float> g = gaussianInput(n);
    size_t maxWire = 0;
    for (const CodecRow& row : kCodecRows) {
      CodecConfig cfg;
      cfg.codec = row.codec;
      cfg.bits = row.bits;
      cfg.bucket = bucket;
      maxWire = std::max(maxWire, encodedBytes(resolveConfig(cfg), n));
    }
    DeviceBuffer gD(n * 4), rD(n * 4), accD(n * 4), wireD(maxWire), wsD(4096);
    check(cudaMemcpy(gD.p, g.data(), n * 4, cudaMemcpyHostToDevice), "input H2D");

    const auto timeMemcpy = [&] {
      return medianSeconds(warmup, iters, stream, [&] {
        check(cudaMemcpyAsync(accD.p, gD.p, n * 4, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync D2D");
      });
    };
    keepBusy(accD.p, gD.p, n * 4, stream, 0.5);
    const double memcpyBefore = timeMemcpy();
    struct Row {
      const CodecRow* row;
      CodecConfig cfg;
      size_t wireBytes;
      double encS, decS;
      bool same;
    };
    std::vector<Row> rows;
    std::vector<uint8_t> wireH, wireBack;
    std::vector<float> rH(n), rBack(n), accH(n), accBack(n);
    for (const CodecRow& row : kCodecRows) {
      if (only != nullptr && *only != '\0' && std::string(row.label).rfind(only, 0) != 0) continue;
      CodecConfig cfg;
      cfg.codec = row.codec;
      cfg.bits = row.bits;
      cfg.stochastic = row.stochastic;
      cfg.bucket = bucket;
      cfg.seed = 1234;
      cfg = resolveConfig(cfg);
      const size_t wireBytes = encodedBytes(cfg, n);
      const size_t wsBytes = cuda::encodeWorkspaceBytes(cfg, n);
      QCCL_CHECK(wsBytes <= 4096, ErrorCode::kInternalError, "encode workspace larger than the bench allocated");
      EncodeParams params;

      // The bytes, against the CPU codec: one encode from a zero residual, one decodeAdd.
      check(cudaMemsetAsync(rD.p, 0, n * 4, stream), "cudaMemsetAsync");
      cuda::encode(cfg, gD.f(), rD.f(), n, wireD.p, maxWire, params, wsD.p, wsBytes, stream);
      check(cudaMemcpyAsync(accD.p, gD.p, n * 4, cudaMemcpyDeviceToDevice, stream), "D2D");
      wireH.assign(wireBytes, 0);
      std::fill(rH.begin(), rH.end(), 0.0f);
      encode(cfg, g.data(), rH.data(), n, wireH.data(), wireH.size(), params);
      const WireInfo info = parseWire(wireH.data(), wireH.size());
      cuda::decodeAdd(info, wireD.p, accD.f(), n, stream);
      wireBack.assign(wireBytes, 0);
      check(cudaMemcpyAsync(wireBack.data(), wireD.p, wireBytes, cudaMemcpyDeviceToHost, stream), "D2H");
      check(cudaMemcpyAsync(rBack.data(), rD.p, n * 4, cudaMemcpyDeviceToHost, stream), "D2H");
      check(cudaMemcpyAsync(accBack.data(), accD.p, n * 4, cudaMemcpyDeviceToHost, stream), "D2H");
      accH = g;
      decodeAdd(wireH.data(), wireH.size(), accH.data(), n);
      check(cudaStreamSynchronize(stream), "check");
      const bool same = sameBytes(wireBack.data(), wireH.data(), wireBytes) &&
                        sameBytes(rBack.data(), rH.data(), n * 4) && sameBytes(accBack.data(), accH.data(), n * 4);
      if (!same) ++failures;

      const double encS = medianSeconds(warmup, iters, stream, [&] {
        cuda::encode(cfg, gD.f(), rD.f(), n, wireD.p, maxWire, params, wsD.p, wsBytes, stream);
      });
      const double decS =
          medianSeconds(warmup, iters, stream, [&] { cuda::decodeAdd(info, wireD.p, accD.f(), n, stream); });
      rows.push_back({&row, cfg, wireBytes, encS, decS, same});
    }
    const double memcpyAfter = timeMemcpy();
    const double memcpyS = std::min(memcpyBefore, memcpyAfter);
    const double memcpyRate = 8.0 * n / memcpyS;  // bytes read + written per second
    if (!json) {
      std::printf("# qccl-bench codec --device: %s (sm_%d%d, %d SMs), driver %d, runtime %d\n", prop.name, prop.major,
                  prop.minor, prop.multiProcessorCount, driver, runtime);
      std::printf("# %zu fp32 elements (%.1f MiB), bucket %u, CUDA-event median of %d (warm-up %d)\n", n,
                  n * 4.0 / (1 << 20), bucket, iters, warmup);
      std::printf(
          "# cudaMemcpy D2D %.1f GB/s read+write (%.3f ms; %.3f ms before the rows, %.3f ms after them, the\n"
          "# faster is the baseline); enc/dec GB/s are fp32 input bytes per second;\n",
          memcpyRate / 1e9, memcpyS * 1e3, memcpyBefore * 1e3, memcpyAfter * 1e3);
      std::printf(
          "# mem_eff = bytes moved per second / cudaMemcpy's; same_bytes: wire, residual and decodeAdd vs CPU\n");
      std::printf("%-10s %4s %10s %10s %10s %10s %8s %8s %10s\n", "codec", "bits", "enc_ms", "dec_ms", "enc_GB/s",
                  "dec_GB/s", "enc_eff", "dec_eff", "same_bytes");
    }

    for (const Row& r : rows) {
      const CodecConfig& cfg = r.cfg;
      const size_t wireBytes = r.wireBytes;
      const double encS = r.encS, decS = r.decS;
      const bool same = r.same;
      const double encEff = ((12.0 * n + wireBytes) / encS) / memcpyRate;
      const double decEff = ((8.0 * n + wireBytes) / decS) / memcpyRate;
      const double encGbps = 4.0 * n / encS / 1e9, decGbps = 4.0 * n / decS / 1e9;
      if (json) {
        std::printf(
            "{\"device\":\"%s\",\"driver\":%d,\"runtime\":%d,\"codec\":\"%s\",\"label\":\"%s\",\"bits\":%d,"
            "\"bucket\":%u,\"bytes\":%zu,\"wire_bytes\":%zu,\"encode_ms\":%.4f,\"decode_add_ms\":%.4f,"
            "\"memcpy_ms\":%.4f,\"memcpy_before_ms\":%.4f,\"memcpy_after_ms\":%.4f,\"encode_gbps\":%.2f,\"decode_"
            "gbps\":%.2f,\"memcpy_rw_gbps\":%.2f,"
            "\"encode_mem_eff\":%.3f,\"decode_mem_eff\":%.3f,\"same_bytes\":%s}\n",
            prop.name, driver, runtime, codecName(cfg.codec), r.row->label, cfg.bits, bucket, n * 4, wireBytes,
            encS * 1e3, decS * 1e3, memcpyS * 1e3, memcpyBefore * 1e3, memcpyAfter * 1e3, encGbps, decGbps,
            memcpyRate / 1e9, encEff, decEff, same ? "true" : "false");
      } else {
        std::printf("%-10s %4d %10.3f %10.3f %10.1f %10.1f %8.2f %8.2f %10s\n", r.row->label, cfg.bits, encS * 1e3,
                    decS * 1e3, encGbps, decGbps, encEff, decEff, same ? "yes" : "NO");
      }
      std::fflush(stdout);
    }
    cudaStreamDestroy(stream);
  } catch (const Error& e) {
    std::fprintf(stderr, "qccl-bench codec --device: %s\n", e.what());
    return 1;
  }
  if (failures > 0) std::fprintf(stderr, "qccl-bench codec --device: %d row(s) differ from the CPU codec\n", failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace bench
}  // namespace qccl
