// Encode with a momentum prologue: the prologue over each 1M-element chunk first, then the encode
// (before), against the prologue inside the encode (EncodeParams::prologue, after).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "qccl/codec.hpp"
using namespace qccl;
struct Ctx {
  float* u0;
  const float* g;
  float* in0;
};
static void pro(const void* c, float* x, size_t n) {  // x: the message (= u), v = g + 0.9 * u
  const Ctx* k = static_cast<const Ctx*>(c);
  const float* g = k->g + (x - k->in0);
  for (size_t i = 0; i < n; ++i) x[i] = g[i] + 0.9f * x[i];
}
int main(int argc, char** argv) {
  const int inside = atoi(argv[1]);
  const size_t total = 25u << 20, chunk = 1u << 20;
  CodecConfig c;
  c.codec = CodecId::kOneBit;
  std::vector<float> u(total), g(total), res(total, 0.0f);
  for (size_t i = 0; i < total; ++i) {
    u[i] = std::sin(i * 0.01f);
    g[i] = std::cos(i * 0.013f);
  }
  std::vector<uint8_t> w(encodedBytes(c, chunk));
  Ctx ctx{u.data(), g.data(), u.data()};
  DecodeEpilogue e;
  e.fn = &pro;
  e.ctx = &ctx;
  std::vector<double> t;
  for (int rep = 0; rep < 9; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off < total; off += chunk) {
      EncodeParams ep;
      if (inside)
        ep.prologue = &e;
      else
        pro(&ctx, u.data() + off, chunk);
      encode(c, u.data() + off, res.data() + off, chunk, w.data(), w.size(), ep);
    }
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
  }
  std::sort(t.begin(), t.end());
  printf("%s: median %.1f ms (min %.1f) for 25M elements\n", inside ? "inside the encode" : "chunk first", t[4], t[0]);
}
