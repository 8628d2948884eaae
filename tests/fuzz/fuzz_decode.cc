// libFuzzer target for the wire decoder: arbitrary bytes go to parseWire / decode / decodeAdd.
//
// Input layout: byte 0 selects the variant, the rest is the wire buffer.
//   bit 0      decode with count = header count (reaches the payload decoders) or a derived count
//   bits 1..2  count adjustment in the derived case (0, +1, -1, x2), to exercise kMismatch
//   bit 3      place the wire bytes at an odd address
//   bit 4      encode the remaining bytes as floats with a config from byte 1, then decode them
// Anything but a qccl::Error escaping, or any sanitizer report, is a crash.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "qccl/codec.hpp"
#include "qccl/error.hpp"

namespace {

size_t countFor(uint8_t mode, const uint8_t* wire, size_t size) {
  uint64_t count = 0;
  if (size >= 24) std::memcpy(&count, wire + 16, 8);
  if (!(mode & 1)) {
    int adj = (mode >> 1) & 3;
    count = adj == 0 ? count : adj == 1 ? count + 1 : adj == 2 ? count - 1 : count * 2;
  }
  // A valid payload holds at least one element per 8 bits; a larger count must fail validation
  // before the output is touched, so an exactly sized smaller buffer still catches overruns.
  const uint64_t cap = 8 * (uint64_t)size + 64;
  return (size_t)(count > cap ? cap : count);
}

void decodeBoth(const uint8_t* wire, size_t size, size_t n) {
  std::vector<float> d(n), a(n, 0.0f);
  try {
    qccl::parseWire(wire, size);
  } catch (const qccl::Error&) {
  }
  bool decoded = false;
  try {
    qccl::decode(wire, size, d.data(), n);
    decoded = true;
  } catch (const qccl::Error&) {
  }
  try {
    qccl::decodeAdd(wire, size, a.data(), n);
    if (!decoded) std::abort();  // decodeAdd accepted what decode rejected
  } catch (const qccl::Error&) {
    if (decoded) std::abort();
    return;
  }
  // decodeAdd onto zeros equals decode, up to the sign of zero and the NaN payload.
  for (size_t i = 0; i < n; ++i)
    if (!(d[i] == a[i] || (std::isnan(d[i]) && std::isnan(a[i])))) std::abort();
}

void encodeThenDecode(const uint8_t* data, size_t size) {
  if (size < 2) return;
  qccl::CodecConfig cfg;
  cfg.codec = static_cast<qccl::CodecId>(data[0] % qccl::kNumCodecs);
  cfg.bits = cfg.codec == qccl::CodecId::kMaxMin ? 2 << (data[0] / 8 % 3) : 0;
  cfg.stochastic = cfg.codec == qccl::CodecId::kMaxMin && (data[0] & 0x80);
  cfg.bucket = 32u * (1u + data[1] % 32);
  const size_t n = (size - 2) / 4;
  std::vector<float> g(n), r(n, 0.0f), d(n);
  if (n) std::memcpy(g.data(), data + 2, n * 4);
  std::vector<uint8_t> wire(qccl::encodedBytes(cfg, n));
  qccl::encode(cfg, g.data(), r.data(), n, wire.data(), wire.size());
  qccl::WireInfo info = qccl::decode(wire.data(), wire.size(), d.data(), n);  // must not throw
  if (info.count != n || info.totalBytes != wire.size()) std::abort();
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(r[i])) std::abort();  // residuals are always finite
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  if (mode & 0x10) {
    encodeThenDecode(data, size);
    return 0;
  }
  const size_t n = countFor(mode, data, size);
  if (mode & 0x08) {
    std::vector<uint8_t> shifted(size + 1);
    if (size) std::memcpy(shifted.data() + 1, data, size);
    decodeBoth(shifted.data() + 1, size, n);
  } else {
    decodeBoth(data, size, n);
  }
  return 0;
}
