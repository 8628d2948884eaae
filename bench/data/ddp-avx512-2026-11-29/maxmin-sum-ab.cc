// The AVX-512 maxmin 4-bit sum of 3 decodes with and without its multi-source kernel, in one process,
// 15 rounds alternating, medians. build as kernel-ab.cc; usage: maxmin-sum-ab [n]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "codec/cpu_kernels.hpp"
using namespace qccl;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  size_t n = argc > 1 ? atol(argv[1]) : (size_t)25600000;
  const cpu::Kernels* k = cpu::kernelsFor("avx512");
  cpu::Kernels off = *k;
  off.bucketDecodeSum[(int)CodecId::kMaxMin] = nullptr;
  CodecConfig cfg;
  cfg.codec = CodecId::kMaxMin;
  cfg.bits = 4;
  cfg.bucket = 512;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> in(n), out(n);
  for (auto& x : in) x = nd(rng);
  std::vector<uint8_t> w[3];
  for (auto& v : w) v.resize(encodedBytes(cfg, n));
  for (int j = 0; j < 3; ++j) cpu::encodeWith(*k, cfg, in.data(), nullptr, n, w[j].data(), w[j].size(), EncodeParams{});
  WireInfo infos[3];
  const void* ptrs[3];
  for (int j = 0; j < 3; ++j) {
    infos[j] = parseWire(w[j].data(), w[j].size());
    ptrs[j] = w[j].data();
  }
  std::vector<double> t[4];
  for (int it = 0; it < 15; ++it)
    for (int v = 0; v < 2; ++v) {
      const cpu::Kernels& kk = v ? off : *k;
      double a = now();
      cpu::decodeSumParsedWith(kk, infos, ptrs, 3, out.data(), n, 0.25f);
      double b = now();
      cpu::decodeSumParsedWith(kk, infos, ptrs, 3, out.data(), n, 0.25f, in.data());
      double c = now();
      t[v].push_back(b - a);
      t[2 + v].push_back(c - b);
    }
  for (auto& x : t) std::sort(x.begin(), x.end());
  printf("n=%zu maxmin4 sum of 3 decodes: sumfn %.2f ms, per-source %.2f ms | with a first term: %.2f / %.2f ms\n", n,
         t[0][7] * 1e3, t[1][7] * 1e3, t[2][7] * 1e3, t[3][7] * 1e3);
}
