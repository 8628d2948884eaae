// The owner's sum step of sra on one 16 MiB shard in 4 MiB chunks, one thread: encoding its own
// values for itself and summing 4 encodings (before) against summing 3 onto its own values (after).
// g++ -O2 -std=c++17 -Iinclude decode_sum_mb.cc -Lbuild-release -lqccl -Wl,-rpath,$PWD/build-release -o mb
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "qccl/codec.hpp"
using namespace qccl;
int main() {
  CodecConfig cfg;
  cfg.codec = CodecId::kOneBit;
  cfg = resolveConfig(cfg);
  const size_t N = 4u << 20, C = 1u << 20;  // 16 MiB shard, 4 MiB chunks
  std::vector<float> src(N * 4), dst(N * 4), res(N, 0.f);
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  for (auto& v : src) v = d(g);
  std::vector<std::vector<uint8_t>> w(4, std::vector<uint8_t>(encodedBytes(cfg, C)));
  for (int j = 0; j < 4; ++j) encode(cfg, src.data() + j * C, nullptr, C, w[j].data(), w[j].size());
  std::vector<WireInfo> inf;
  std::vector<const void*> p;
  for (int j = 0; j < 4; ++j) {
    inf.push_back(parseWire(w[j].data(), w[j].size()));
    p.push_back(w[j].data());
  }
  float* own = src.data() + N;  // the own shard, in the source
  float* out = dst.data() + N;  // the same offset in the destination
  auto t = [&](const char* name, auto f) {
    double best = 1e9;
    for (int it = 0; it < 15; ++it) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-40s %.2f ms\n", name, best * 1e3);
  };
  t("old, in place: encode own chunk + sum of 4", [&] {
    for (size_t k = 0; k < N; k += C) {
      encode(cfg, own + k, res.data() + k, C, w[0].data(), w[0].size());
      decodeSumParsed(inf.data(), p.data(), 4, own + k, C);
    }
  });
  t("old: encode own chunk + sum of 4", [&] {
    for (size_t k = 0; k < N; k += C) {
      encode(cfg, own + k, res.data() + k, C, w[0].data(), w[0].size());
      decodeSumParsed(inf.data(), p.data(), 4, out + k, C);
    }
  });
  t("new: init + sum of 3", [&] {
    for (size_t k = 0; k < N; k += C) decodeSumParsed(inf.data() + 1, p.data() + 1, 3, out + k, C, 1.0f, own + k);
  });
  t("new, dst offset +64 B", [&] {
    for (size_t k = 0; k < N; k += C) decodeSumParsed(inf.data() + 1, p.data() + 1, 3, out + 16 + k, C, 1.0f, own + k);
  });
  t("new, in place (init == out)", [&] {
    for (size_t k = 0; k < N; k += C) decodeSumParsed(inf.data() + 1, p.data() + 1, 3, own + k, C, 1.0f, own + k);
  });
  t("memcpy 16 MiB", [&] { std::memcpy(out, own, N * 4); });
  t("encode own 16 MiB with residual", [&] {
    for (size_t k = 0; k < N; k += C) encode(cfg, own + k, res.data() + k, C, w[0].data(), w[0].size());
  });
}
