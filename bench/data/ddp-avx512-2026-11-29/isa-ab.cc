// The AVX-512 and AVX2 sign kernels side by side in one process (the columns: avx512/avx2 ms, medians of
// 11 rounds): plain error feedback, error control (gain 0.5), the sum of 3 decodes with and without a first
// term, one decode-add. build as kernel-ab.cc; usage: isa-ab [n] [onebit|signscale]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
#include "codec/cpu_kernels.hpp"
using namespace qccl;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  size_t n = argc > 1 ? atol(argv[1]) : (size_t)25600000;
  CodecId codec = argc > 2 && std::string(argv[2]) == "signscale" ? CodecId::kSignScale : CodecId::kOneBit;
  const cpu::Kernels* ks[2] = {cpu::kernelsFor("avx512"), cpu::kernelsFor("avx2")};
  CodecConfig cfg;
  cfg.codec = codec;
  cfg.bucket = 512;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> in(n), res(n), out(n);
  for (auto& x : in) x = nd(rng);
  for (auto& x : res) x = 0.05f * nd(rng);
  std::vector<uint8_t> w[3];
  for (auto& v : w) v.resize(encodedBytes(cfg, n));
  for (int j = 0; j < 3; ++j)
    cpu::encodeWith(*ks[0], cfg, in.data(), nullptr, n, w[j].data(), w[j].size(), EncodeParams{});
  WireInfo infos[3];
  const void* ptrs[3];
  for (int j = 0; j < 3; ++j) {
    infos[j] = parseWire(w[j].data(), w[j].size());
    ptrs[j] = w[j].data();
  }
  const char* names[5] = {"encode ef", "encode gain.5", "decodeSum3", "decodeSum3+init", "decode1"};
  std::vector<double> t[2][5];
  EncodeParams g;
  g.feedbackGain = 0.5f;
  for (int it = 0; it < 11; ++it)
    for (int v = 0; v < 2; ++v) {
      const cpu::Kernels& kk = *ks[v];
      double a = now();
      cpu::encodeWith(kk, cfg, in.data(), res.data(), n, w[0].data(), w[0].size(), EncodeParams{});
      double b = now();
      t[v][0].push_back(b - a);
      a = b;
      cpu::encodeWith(kk, cfg, in.data(), res.data(), n, w[0].data(), w[0].size(), g);
      b = now();
      t[v][1].push_back(b - a);
      a = b;
      cpu::decodeSumParsedWith(kk, infos, ptrs, 3, out.data(), n, 0.25f);
      b = now();
      t[v][2].push_back(b - a);
      a = b;
      cpu::decodeSumParsedWith(kk, infos, ptrs, 3, out.data(), n, 0.25f, in.data());
      b = now();
      t[v][3].push_back(b - a);
      a = b;
      cpu::decodeParsedWith(kk, infos[0], ptrs[0], out.data(), n, true);
      b = now();
      t[v][4].push_back(b - a);
    }
  printf("n=%zu %s:", n, codec == CodecId::kOneBit ? "onebit" : "signscale");
  for (int r = 0; r < 5; ++r) {
    for (int v = 0; v < 2; ++v) std::sort(t[v][r].begin(), t[v][r].end());
    printf("  %s %.2f/%.2f", names[r], t[0][r][5] * 1e3, t[1][r][5] * 1e3);
  }
  printf("  (ms, avx512/avx2)\n");
}
