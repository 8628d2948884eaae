// Writes the seed corpus for qccl-fuzz-decode: valid encodings of every codec at a few sizes
// (including NaN and partial buckets), each prefixed by the fuzzer's variant byte.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "qccl/codec.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  int written = 0;
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
        std::string path = std::string(argv[1]) + "/seed_" + std::to_string(written++);
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(buf.data(), 1, buf.size(), f) != buf.size()) {
          std::perror(path.c_str());
          return 1;
        }
        std::fclose(f);
      }
    }
  }
  std::printf("wrote %d seeds to %s\n", written, argv[1]);
  return 0;
}
