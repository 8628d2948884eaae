// A micro-benchmark for run.sh here (not built by CMake): links the installed or built libqccl.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <qccl/codec.hpp>
#include <random>
#include <vector>
using namespace qccl;
// decodeSumParsed of one fp32 source with a raw first term (the fp32 ring's reduce-scatter sum),
// chunk by chunk as the executor calls it, over a buffer larger than the caches.
int main(int argc, char** argv) {
  size_t n = argc > 1 ? atol(argv[1]) : 16u << 20;
  size_t chunk = argc > 2 ? atol(argv[2]) : 262144;
  CodecConfig cfg;
  cfg.codec = CodecId::kFp32;
  std::vector<float> x(n), init(n), out(n), res(n);
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  for (auto& v : x) v = d(g);
  for (auto& v : init) v = d(g);
  std::vector<std::vector<uint8_t>> enc;
  std::vector<WireInfo> infos;
  for (size_t b = 0; b < n; b += chunk) {
    enc.emplace_back(encodedBytes(cfg, chunk));
    encode(cfg, x.data() + b, nullptr, chunk, enc.back().data(), enc.back().size());
    infos.push_back(parseWire(enc.back().data(), enc.back().size()));
  }
  std::vector<double> t;
  for (int it = 0; it < 15; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t c = 0; c < enc.size(); ++c) {
      const void* p = enc[c].data();
      decodeSumParsed(&infos[c], &p, 1, out.data() + c * chunk, chunk, 1.0f, init.data() + c * chunk);
    }
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  printf("n=%zu chunk=%zu init+fp32 sum: median %.2f ms (min %.2f)  out[5]=%g\n", n, chunk, t[7] * 1e3, t[0] * 1e3,
         out[5]);
}
