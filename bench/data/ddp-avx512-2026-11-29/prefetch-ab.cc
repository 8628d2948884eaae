// The AVX-512 onebit encode with and without BucketCtx::prefetch, bucket by bucket through the kernel
// table, in one process. Measured with the intermediate version in prefetch.diff applied (the kept
// kernel does not prefetch; without the diff both columns run the same code). build as kernel-ab.cc;
// usage: prefetch-ab [gain]
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
  size_t n = 25600000;
  float gain = argc > 1 ? atof(argv[1]) : 1.0f;
  const cpu::Kernels* k = cpu::kernelsFor("avx512");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> in(n), res(n), scratch(512);
  for (auto& x : in) x = nd(rng);
  for (auto& x : res) x = 0.05f * nd(rng);
  std::vector<uint8_t> w(n);  // plenty
  std::vector<double> t[2];
  for (int it = 0; it < 11; ++it)
    for (int v = 0; v < 2; ++v) {
      cpu::BucketCtx ctx;
      ctx.scratch = scratch.data();
      ctx.streaming = true;
      ctx.prefetch = v == 0;
      ctx.gain = gain;
      double a = now();
      uint8_t* p = w.data();
      for (size_t b = 0; b < n; b += 512) {
        k->bucketEncode[(int)CodecId::kOneBit](ctx, in.data() + b, res.data() + b, 512, b, p);
        p += 8 + 64;
      }
      t[v].push_back(now() - a);
    }
  for (auto& x : t) std::sort(x.begin(), x.end());
  printf("gain %.1f onebit 25.6M encode: prefetch %.2f ms, none %.2f ms\n", gain, t[0][5] * 1e3, t[1][5] * 1e3);
}
