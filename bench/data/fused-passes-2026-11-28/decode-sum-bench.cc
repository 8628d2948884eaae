// decodeSumParsed of SOURCES onebit encodings (1M elements each call, 25M in all), scale 1/4, with
// EPILOGUE=1 a corrected pass (x = v - 0.9 * sent; sent = v) as the epilogue: ./prog SOURCES EPILOGUE.
// Built against 2fce4e7's DecodeEpilogue (fn(ctx, values, n)); with -DDST_API against
// streamed-sums.diff's (fn(ctx, values, dst, n)).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "qccl/codec.hpp"
using namespace qccl;
static void epi(const void* ctx, float* v, const float* dst, size_t n) {
  float* sent = (float*)ctx;
  size_t first = 0;
  (void)dst;
  (void)first;
  for (size_t i = 0; i < n; ++i) {
    float x = v[i];
    v[i] = x - 0.9f * sent[i];
    sent[i] = x;
  }
}
int main(int argc, char** argv) {
  size_t n = 1 << 20;
  int src = atoi(argv[1]);
  int useEpi = atoi(argv[2]);
  size_t total = 25u << 20;
  CodecConfig c;
  c.codec = CodecId::kOneBit;
  std::vector<std::vector<uint8_t>> w(src);
  std::vector<WireInfo> info(src);
  std::vector<const void*> p(src);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(i * 0.1f);
  for (int j = 0; j < src; ++j) {
    w[j].resize(encodedBytes(c, n));
    EncodeParams ep;
    encode(c, g.data(), nullptr, n, w[j].data(), w[j].size(), ep);
    info[j] = parseWire(w[j].data(), w[j].size());
    p[j] = w[j].data();
  }
  std::vector<float> out(total), sent(total, 1.0f);
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off + n <= total; off += n) {
      DecodeEpilogue e;
      e.fn = nullptr;
      struct C {
        float* s;
        float* o;
      };
#ifdef DST_API
      e.fn = useEpi ? +[](const void* ctx, float* v, const float* dst, size_t m) { auto* cc = (const C*)ctx; epi(cc->s + (dst - cc->o), v, dst, m); } : nullptr;
#else
      e.fn = useEpi ? +[](const void* ctx, float* v, size_t m) { auto* cc = (const C*)ctx; epi(cc->s + (v - cc->o), v, v, m); } : nullptr;
#endif
      C cc{sent.data(), out.data()};
      e.ctx = &cc;
      decodeSumParsed(info.data(), p.data(), src, out.data() + off, n, 0.25f, nullptr, useEpi ? &e : nullptr);
    }
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
  }
  std::sort(t.begin(), t.end());
  printf("sources %d epi %d: median %.2f ms (min %.2f) for %zu M elements\n", src, useEpi, t[3], t[0], total >> 20);
}
