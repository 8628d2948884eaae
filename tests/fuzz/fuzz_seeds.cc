// Writes the seed corpus for qccl-fuzz-decode: valid encodings of every codec at a few sizes
// (including NaN and partial buckets), each prefixed by the fuzzer's variant byte, and encode-path
// inputs near the fp32 limits.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "qccl/codec.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  int written = 0;
  auto writeSeed = [&](const std::vector<uint8_t>& buf) {
    std::string path = std::string(argv[1]) + "/seed_" + std::to_string(written++);
    FILE* f = std::fopen(path.c_str(), "wb");
    bool ok = f && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    if (!ok) std::perror(path.c_str());
    if (f) std::fclose(f);
    return ok;
  };
  for (int c = 0; c < qccl::kNumCodecs; ++c) {
    for (int bits : {0, 2, 8}) {
      qccl::CodecConfig cfg;
      cfg.codec = static_cast<qccl::CodecId>(c);
      if (bits && cfg.codec != qccl::CodecId::kMaxMin) continue;
      cfg.bits = bits;
      cfg.bucket = 64;
      for (size_t n : {1, 33, 100, 129}) {
        std::vector<float> g(n);
        for (size_t i = 0; i < n; ++i) g[i] = std::sin(0.7f * (float)i) * (float)(i + 1);
        if (n == 100) g[70] = NAN;
        std::vector<uint8_t> buf(1 + qccl::encodedBytes(cfg, n));
        buf[0] = (uint8_t)(written % 2 ? 0x01 : 0x09);  // exact count; aligned or odd address
        qccl::encode(cfg, g.data(), nullptr, n, buf.data() + 1, buf.size() - 1);
        if (!writeSeed(buf)) return 1;
      }
    }
  }
  // Encode-path seeds (variant byte 0x10): a codec byte, a bucket byte, then floats near the fp32
  // limits, one-sided and mixed, where a statistic, a level or a residual can overflow. The first
  // is the fuzzer's find of a maxmin 4-bit bucket in [2.6e33, FLT_MAX] whose top level was Inf.
  const std::vector<std::vector<float>> extremes = {
      {3.40282347e38f, 3.3999e38f, 1.87e38f, 2.6e33f, 2.99e38f},
      {-3.40282347e38f, -2.6e33f, -1e38f, -3e38f},
      {3.40282347e38f, -3.40282347e38f, 1.0f, -1e-40f},
      {3e38f, 3e38f, 3e38f, 3e38f, 3e38f, 3e38f},
  };
  for (int sel = 0; sel < 256; sel += 9) {  // every codec, every maxmin width, both roundings
    for (const std::vector<float>& x : extremes) {
      std::vector<uint8_t> buf(3 + 4 * x.size());
      buf[0] = 0x10;
      buf[1] = (uint8_t)sel;
      buf[2] = (uint8_t)(sel % 32);
      std::memcpy(buf.data() + 3, x.data(), 4 * x.size());
      if (!writeSeed(buf)) return 1;
    }
  }
  std::printf("wrote %d seeds to %s\n", written, argv[1]);
  return 0;
}
