// _qccl: the thin nanobind layer over the C API (qccl/qccl.h).
//
// Arrays arrive through DLPack / the buffer protocol (numpy arrays, torch tensors) without
// copies. This layer checks what the C API cannot see (dtype, contiguity, device, sizes of the
// buffers it is handed) and turns every qcclResult_t into the Python qccl.Error, which the
// package registers at import. The friendlier argument handling lives in qccl/_core.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "codec/rotation.hpp"
#include "qccl/qccl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QCCL_EXT_AVX2 1
#endif

namespace nb = nanobind;

namespace {

// Carries a failed call out of C++; the translator below turns it into qccl.Error(message, code).
struct CallError {
  int code;
  std::string message;
};

nb::object& errorClass() {
  static nb::object cls;  // set once by qccl/__init__.py; lives until interpreter exit
  return cls;
}

void check(qcclResult_t r, qcclComm_t /*comm*/, const char* what) {
  if (r == qcclSuccess) return;
  // The library's message already names the call; fall back to the code's text. It is read from
  // this thread's copy: another thread may have aborted (and freed) the communicator meanwhile.
  std::string detail = qcclGetLastError(nullptr);
  if (detail.empty()) detail = std::string(what) + ": " + qcclGetErrorString(r);
  throw CallError{static_cast<int>(r), detail};
}

[[noreturn]] void invalid(const std::string& msg) { throw CallError{qcclInvalidArgument, msg}; }

using Array = nb::ndarray<>;
using ConstArray = nb::ndarray<nb::ro>;

template <typename A>
bool isCContiguous(const A& a) {
  if (a.size() == 0) return true;  // strides of an empty array mean nothing
  int64_t expected = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(d));
  }
  return true;
}

template <typename A>
qcclDataType_t dataType(const A& a) {
  const nb::dlpack::dtype dt = a.dtype();
  if (dt.lanes == 1 && dt.bits == 32 && dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float))
    return qcclFloat32;
  if (dt.lanes == 1 && dt.bits == 16 && dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float))
    return qcclFloat16;
  if (dt.lanes == 1 && dt.bits == 16 && dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat))
    return qcclBfloat16;
  invalid("unsupported dtype (code " + std::to_string(dt.code) + ", " + std::to_string(dt.bits) +
          " bits): qccl reduces float32, float16 and bfloat16");
}

// Validates one buffer and reports whether it lives on a CUDA device.
template <typename A>
bool checkBuffer(const A& a, const char* name) {
  if (!isCContiguous(a)) invalid(std::string(name) + " is not contiguous; call .contiguous() first");
  const int dev = a.device_type();
  if (dev == nb::device::cpu::value) return false;
  if (dev == nb::device::cuda::value) {
#if QCCL_HAVE_CUDA
    return true;
#else
    invalid(std::string(name) + " is a CUDA tensor but this qccl was built without CUDA (QCCL_CUDA=OFF)");
#endif
  }
  invalid(std::string(name) + ": only CPU and CUDA memory is supported (DLPack device type " + std::to_string(dev) +
          ")");
}

// ---------------------------------------------------------------------------------------------
// Momentum correction's per-parameter passes (qccl/momentum.py), fused: on a 25.6M-parameter
// model the separate torch operations (sent -= buf; u -= sent; u = d + mu u; g = u, then
// sent = x; x -= mu old) made 16 sweeps over memory per step; these make 6 and 4 (reads plus
// writes). Float32 CPU tensors only; momentum.py keeps the torch expressions for every other case.
// GCC vectorizes these loops from -O3 only; the development build (RelWithDebInfo) is -O2. At -O3 it
// would also split `sent[i] = x[i]` out of the corrected pass into a memcpy of its own, a second
// pass over memory (the reconciled pass took 15-17 ms instead of 10-12 on 25.6M elements), hence
// no-tree-loop-distribute-patterns.
// ---------------------------------------------------------------------------------------------
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3", "no-tree-loop-distribute-patterns")
#endif

float* f32Data(Array& a, size_t n, const char* name) {
  checkBuffer(a, name);
  if (a.device_type() != nb::device::cpu::value || dataType(a) != qcclFloat32 || a.size() != n)
    invalid(std::string(name) + ": expected a contiguous float32 CPU tensor of " + std::to_string(n) + " elements");
  return static_cast<float*>(a.data());
}

// The local pass: v = mu * w + keep * (g + wd * p); u = v; g = v (unless !kWriteG: the hook then
// sends u itself, out of place, and runs this as the exchange's prologue, localPrologue), where w is u - (sent - buf)
// reconciled (kReconcile) and u itself without. sent and buf are read only when reconciling, p only when wd != 0. The
// tensors must not overlap (momentum.py owns u and sent; g is the bucket, buf the optimizer's, p the parameter).
template <bool kReconcile, bool kWriteG>
void localPass(float* __restrict__ gp, float* __restrict__ up, const float* __restrict__ sp,
               const float* __restrict__ bp, const float* __restrict__ pp, size_t n, float mu, float keep, float wd) {
  if (pp == nullptr && keep == 1.0f) {
    for (size_t i = 0; i < n; ++i) {
      const float w = kReconcile ? up[i] - (sp[i] - bp[i]) : up[i];
      const float v = gp[i] + mu * w;  // torch.add(d, u, alpha=mu)
      up[i] = v;
      if (kWriteG) gp[i] = v;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float d = pp != nullptr ? gp[i] + wd * pp[i] : gp[i];
    const float w = kReconcile ? up[i] - (sp[i] - bp[i]) : up[i];
    const float v = mu * w + keep * d;
    up[i] = v;
    if (kWriteG) gp[i] = v;
  }
}

// The corrected pass: sent = x as it came in; x = (x - mu * r) / keep - wd * p, where r is the
// optimizer's buffer `old` reconciled, and sent's previous value (the last average) without
// (kFromSent; old is not read). p is read only when wd != 0.
template <bool kFromSent>
void correctedPass(float* __restrict__ xp, const float* __restrict__ op, float* __restrict__ sp,
                   const float* __restrict__ pp, size_t n, float mu, float keep, float wd) {
  const float inv = 1.0f / keep;
  if (pp == nullptr && keep == 1.0f) {
    for (size_t i = 0; i < n; ++i) {
      const float v = xp[i];
      const float r = kFromSent ? sp[i] : op[i];  // read before sp[i] is written
      sp[i] = v;
      xp[i] = v - mu * r;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float v = xp[i];
    const float r = kFromSent ? sp[i] : op[i];
    float y = keep == 1.0f ? v - mu * r : (v - mu * r) * inv;
    if (pp != nullptr) y -= wd * pp[i];
    sp[i] = v;
    xp[i] = y;
  }
}

// PackedSent: momentum.py's "sent" (the average the last exchange asked the optimizer for) held
// exactly in less memory. Where the exchange's last decode writes at most two distinct values per
// codec bucket (onebit and signscale after sra: each element is one of its bucket's two scaled
// signs), each block of 32 elements is the bits of two floats and a 32-bit mask: 12 bytes instead
// of 128 (25.6M elements: 10 MB instead of 102 MB per rank). The corrected pass without
// reconciliation reads the last average and writes this one, so with it packed that pass moves 1/10
// of sent's bytes, at the price of unpacking and packing (in the DDP step about 1 ms less per rank
// with AVX-512, 8 ms more with AVX2: bench/RESULTS.md). A block with more distinct values keeps its floats (`full_`),
// so any codec is exact; momentum.py unpacks a parameter whose blocks mostly need that. Blocks are aligned to the
// call's tensor, where codec buckets (multiples of 32 elements) start: block b holds the parameter's elements [32 b -
// phase, 32 (b + 1) - phase), phase = its offset in the call mod 32. Values are compared and restored by their bits
// (signed zeros and NaN payloads included).
class PackedSent {
 public:
  static constexpr size_t kBlock = 32;

  PackedSent(size_t n, size_t phase) { reset(n, phase); }

  size_t size() const { return n_; }
  size_t phase() const { return phase_; }
  size_t blocks() const { return blk_.size(); }
  size_t rawBlocks() const { return rawCount_; }

  void load(const float* src) {
    for (size_t b = 0; b < blk_.size(); ++b) put(b, src + begin(b));
  }
  void store(float* dst) const {
    for (size_t b = 0; b < blk_.size(); ++b) get(b, dst + begin(b));
  }
  float at(size_t i) const {
    const size_t b = blockOf(i);
    if (raw_[b]) return full_[i];
    return fromBits((blk_[b].mask >> (i - begin(b))) & 1u ? blk_[b].b : blk_[b].a);
  }
  // The same values, blocks aligned to another offset in the call (a rebuilt DDP bucket).
  void rephase(size_t phase) {
    if (phase % kBlock == phase_) return;
    std::vector<float> v(n_);
    store(v.data());
    reset(n_, phase);
    load(v.data());
  }
  // correctedPass<kFromSent> on x[0..m), the parameter's elements [off, off + m) (p: the whole
  // parameter, read only when wd != 0): each block's last average is unpacked into L1, the pass
  // reads it and writes this average there, and the block is packed again.
  void correct(float* x, size_t off, size_t m, const float* p, float mu, float keep, float wd);

 private:
  struct Block {
    uint32_t a, b, mask;  // element i of the block is b's float where bit i is set, else a's
  };
  static uint32_t toBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  }
  static float fromBits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  void reset(size_t n, size_t phase) {
    n_ = n;
    phase_ = phase % kBlock;
    const size_t nb = n == 0 ? 0 : blockOf(n - 1) + 1;
    blk_.assign(nb, Block{0, 0, 0});
    raw_.assign(nb, 0);
    full_.reset();
    rawCount_ = 0;
  }
  size_t blockOf(size_t i) const { return (i + phase_) / kBlock; }
  size_t begin(size_t b) const { return b == 0 ? 0 : b * kBlock - phase_; }
  size_t end(size_t b) const { return std::min(n_, (b + 1) * kBlock - phase_); }
  void get(size_t b, float* out) const;
  void put(size_t b, const float* in);
  void keepRaw(size_t b, const float* in);
  // Block b becomes k where its values pack (two), else its floats `in`.
  void settle(size_t b, Block k, bool two, const float* in) {
    if (!two) return keepRaw(b, in);
    blk_[b] = k;
    if (raw_[b]) {
      raw_[b] = 0;
      --rawCount_;
    }
  }
#ifdef QCCL_EXT_AVX2
  size_t correctBlocksAvx2(float* x, size_t b0, size_t b1, const float* p, float mu, float keep, float wd);
  size_t correctBlocksAvx512(float* x, size_t b0, size_t b1, const float* p, float mu, float keep, float wd);
#endif

  size_t n_ = 0, phase_ = 0;
  std::vector<Block> blk_;
  std::vector<uint8_t> raw_;
  std::unique_ptr<float[]> full_;  // raw blocks' values at their element index; allocated on first need
  size_t rawCount_ = 0;
};

// Bit i set where in[i]'s bits differ from u's (len <= 32).
uint32_t differsScalar(const float* in, size_t len, uint32_t u) {
  uint32_t m = 0;
  for (size_t i = 0; i < len; ++i) {
    uint32_t v;
    std::memcpy(&v, in + i, 4);
    m |= static_cast<uint32_t>(v != u) << i;
  }
  return m;
}

void unpackScalar(uint32_t a, uint32_t b, uint32_t mask, size_t len, float* out) {
  for (size_t i = 0; i < len; ++i) {
    const uint32_t v = (mask >> i) & 1u ? b : a;
    std::memcpy(out + i, &v, 4);
  }
}

#ifdef QCCL_EXT_AVX2
__attribute__((target("avx2"))) uint32_t differs32Avx2(const float* in, uint32_t u) {
  const __m256i vu = _mm256_set1_epi32(static_cast<int>(u));
  uint32_t eq = 0;
  for (int k = 0; k < 4; ++k) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 8 * k));
    eq |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, vu)))) << (8 * k);
  }
  return ~eq;
}

__attribute__((target("avx2"))) void unpack32Avx2(uint32_t a, uint32_t b, uint32_t mask, float* out) {
  const __m256i va = _mm256_set1_epi32(static_cast<int>(a)), vb = _mm256_set1_epi32(static_cast<int>(b));
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (int k = 0; k < 4; ++k) {
    const __m256i m = _mm256_set1_epi32(static_cast<int>((mask >> (8 * k)) & 0xffu));
    const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(m, sel), sel);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * k), _mm256_blendv_epi8(va, vb, on));
  }
}

// QCCL_CPU_ISA caps these kernels as it caps the library's codec kernels (scalar|avx2|avx512).
int isaCap() {
  static const int cap = [] {
    const char* e = std::getenv("QCCL_CPU_ISA");
    const std::string v = e != nullptr ? e : "";
    return v == "scalar" ? 0 : v == "avx2" ? 1 : 2;
  }();
  return cap;
}

bool haveAvx2() {
  static const bool yes = isaCap() >= 1 && __builtin_cpu_supports("avx2");
  return yes;
}

bool haveAvx512() {
  static const bool yes = isaCap() >= 2 && __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

uint32_t differs(const float* in, size_t len, uint32_t u) {
#ifdef QCCL_EXT_AVX2
  if (len == PackedSent::kBlock && haveAvx2()) return differs32Avx2(in, u);
#endif
  return differsScalar(in, len, u);
}

void PackedSent::get(size_t b, float* out) const {
  const size_t lo = begin(b), len = end(b) - lo;
  if (raw_[b]) {
    std::memcpy(out, full_.get() + lo, len * sizeof(float));
    return;
  }
  const Block& k = blk_[b];
#ifdef QCCL_EXT_AVX2
  if (len == kBlock && haveAvx2()) return unpack32Avx2(k.a, k.b, k.mask, out);
#endif
  unpackScalar(k.a, k.b, k.mask, len, out);
}

void PackedSent::put(size_t b, const float* in) {
  const size_t lo = begin(b), len = end(b) - lo;
  const uint32_t all = len == 32 ? ~0u : (1u << len) - 1u;
  const uint32_t a = toBits(in[0]), mask = differs(in, len, a) & all;
  const uint32_t other = mask != 0 ? toBits(in[__builtin_ctz(mask)]) : a;
  // two values at most: every element that is not a's is other's
  settle(b, Block{a, other, mask}, (mask & differs(in, len, other) & all) == 0, in);
}

void PackedSent::keepRaw(size_t b, const float* in) {
  if (!full_) full_.reset(new float[n_]);
  const size_t lo = begin(b);
  std::memcpy(full_.get() + lo, in, (end(b) - lo) * sizeof(float));
  if (!raw_[b]) {
    raw_[b] = 1;
    ++rawCount_;
  }
}

#ifdef QCCL_EXT_AVX2
// Lane i of row m is all ones where bit i of m is set: a byte of a block's mask as a blend mask.
struct LaneMasks {
  alignas(32) uint32_t row[256][8];
  LaneMasks() {
    for (int m = 0; m < 256; ++m)
      for (int i = 0; i < 8; ++i) row[m][i] = (m >> i) & 1 ? ~0u : 0u;
  }
};
const LaneMasks& laneMasks() {
  static const LaneMasks t;
  return t;
}

// correct() on the whole blocks [b0, b1) (x: block b0's first element), 8 lanes at a time with the
// last average unpacked in registers: the same operations in the same order as correctedPass (a
// multiply and a subtraction, no fused multiply-add), so the same bits; then this average, still in
// registers, packed. Returns b1.
__attribute__((target("avx2"))) size_t PackedSent::correctBlocksAvx2(float* x, size_t b0, size_t b1, const float* p,
                                                                     float mu, float keep, float wd) {
  const __m256 vmu = _mm256_set1_ps(mu), vinv = _mm256_set1_ps(1.0f / keep), vwd = _mm256_set1_ps(wd);
  const bool one = keep == 1.0f;
  const LaneMasks& lanes = laneMasks();
  alignas(32) float in[kBlock];
  for (size_t b = b0; b < b1; ++b, x += kBlock) {
    const size_t lo = begin(b);
    const float* pb = p != nullptr ? p + lo : nullptr;
    const float* rb = raw_[b] ? full_.get() + lo : nullptr;
    const Block k = blk_[b];
    const __m256 va = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(k.a)));
    const __m256 vb = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(k.b)));
    const uint32_t a = toBits(x[0]);  // this average's first value, before the pass rewrites x
    const __m256i ea = _mm256_set1_epi32(static_cast<int>(a));
    __m256i v[4];
    uint32_t eq = 0;
    for (int j = 0; j < 4; ++j) {
      __m256 r;
      if (rb != nullptr) {
        r = _mm256_loadu_ps(rb + 8 * j);
      } else {
        const __m256 on = _mm256_load_ps(reinterpret_cast<const float*>(lanes.row[(k.mask >> (8 * j)) & 0xffu]));
        r = _mm256_blendv_ps(va, vb, on);
      }
      const __m256 xv = _mm256_loadu_ps(x + 8 * j);
      v[j] = _mm256_castps_si256(xv);
      eq |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v[j], ea)))) << (8 * j);
      __m256 y = _mm256_sub_ps(xv, _mm256_mul_ps(vmu, r));
      if (!one) y = _mm256_mul_ps(y, vinv);
      if (pb != nullptr) y = _mm256_sub_ps(y, _mm256_mul_ps(vwd, _mm256_loadu_ps(pb + 8 * j)));
      _mm256_storeu_ps(x + 8 * j, y);
    }
    const uint32_t mask = ~eq;
    uint32_t other = a, stray = 0;  // stray: elements that are neither a nor other
    if (mask != 0) {
      for (int j = 0; j < 4; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(in + 8 * j), v[j]);
      other = toBits(in[__builtin_ctz(mask)]);
      const __m256i eo = _mm256_set1_epi32(static_cast<int>(other));
      uint32_t eqo = 0;
      for (int j = 0; j < 4; ++j)
        eqo |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v[j], eo)))) << (8 * j);
      stray = mask & ~eqo;
    }
    settle(b, Block{a, other, mask}, stray == 0, in);
  }
  return b1;
}

// correctBlocksAvx2 with 16 lanes: the mask's bits select the last average's values directly, and
// the comparisons that pack this average give masks.
__attribute__((target("avx512f"))) size_t PackedSent::correctBlocksAvx512(float* x, size_t b0, size_t b1,
                                                                          const float* p, float mu, float keep,
                                                                          float wd) {
  const __m512 vmu = _mm512_set1_ps(mu), vinv = _mm512_set1_ps(1.0f / keep), vwd = _mm512_set1_ps(wd);
  const bool one = keep == 1.0f;
  alignas(64) float in[kBlock];
  for (size_t b = b0; b < b1; ++b, x += kBlock) {
    const size_t lo = begin(b);
    const float* pb = p != nullptr ? p + lo : nullptr;
    const float* rb = raw_[b] ? full_.get() + lo : nullptr;
    const Block k = blk_[b];
    const __m512 va = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(k.a)));
    const __m512 vb = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(k.b)));
    const uint32_t a = toBits(x[0]);  // this average's first value, before the pass rewrites x
    __m512i v[2];
    for (int j = 0; j < 2; ++j) {
      const __m512 r = rb != nullptr ? _mm512_loadu_ps(rb + 16 * j)
                                     : _mm512_mask_blend_ps(static_cast<__mmask16>(k.mask >> (16 * j)), va, vb);
      const __m512 xv = _mm512_loadu_ps(x + 16 * j);
      v[j] = _mm512_castps_si512(xv);
      __m512 y = _mm512_sub_ps(xv, _mm512_mul_ps(vmu, r));
      if (!one) y = _mm512_mul_ps(y, vinv);
      if (pb != nullptr) y = _mm512_sub_ps(y, _mm512_mul_ps(vwd, _mm512_loadu_ps(pb + 16 * j)));
      _mm512_storeu_ps(x + 16 * j, y);
    }
    const __m512i ea = _mm512_set1_epi32(static_cast<int>(a));
    const uint32_t mask = ~(static_cast<uint32_t>(_mm512_cmpeq_epi32_mask(v[0], ea)) |
                            static_cast<uint32_t>(_mm512_cmpeq_epi32_mask(v[1], ea)) << 16);
    uint32_t other = a, stray = 0;  // stray: elements that are neither a nor other
    if (mask != 0) {
      _mm512_store_si512(in, v[0]);
      _mm512_store_si512(in + 16, v[1]);
      other = toBits(in[__builtin_ctz(mask)]);
      const __m512i eo = _mm512_set1_epi32(static_cast<int>(other));
      const uint32_t eq = static_cast<uint32_t>(_mm512_cmpeq_epi32_mask(v[0], eo)) |
                          static_cast<uint32_t>(_mm512_cmpeq_epi32_mask(v[1], eo)) << 16;
      stray = mask & ~eq;
    }
    settle(b, Block{a, other, mask}, stray == 0, in);
  }
  return b1;
}
#endif

void PackedSent::correct(float* x, size_t off, size_t m, const float* p, float mu, float keep, float wd) {
  alignas(32) float last[kBlock];
  for (size_t i = off, e = off + m; i < e;) {
    const size_t b = blockOf(i), lo = begin(b), to = std::min(e, end(b));
#ifdef QCCL_EXT_AVX2
    // whole blocks from here to the last one that ends at or before e
    const size_t whole = (e + phase_) / kBlock;
    if (i == lo && (b > 0 || phase_ == 0) && whole > b && haveAvx2()) {
      if (haveAvx512())
        correctBlocksAvx512(x + (i - off), b, whole, p, mu, keep, wd);
      else
        correctBlocksAvx2(x + (i - off), b, whole, p, mu, keep, wd);
      i = whole * kBlock - phase_;
      continue;
    }
#endif
    get(b, last);
    correctedPass<true>(x + (i - off), nullptr, last + (i - lo), p != nullptr ? p + i : nullptr, to - i, mu, keep, wd);
    put(b, last);
    i = to;
  }
}

// HookState(rotation=...) on a call that is one parameter: the local pass writes g = v and then
// rotates each whole block of g while it is in cache (g = H D v), and the corrected pass first
// rotates each whole block of the average back (x = (1/B) D H x) and then corrects it, instead of a
// pass over memory for each rotation (codec/rotation.hpp). The same operations on the same values
// as the passes and rotations done one after the other, so the same bits. block 0: no rotation.
std::vector<float> rotationSigns(int block) {
  if (block != 0 && !qccl::rotation::validBlock(block))
    invalid("rotation block must be 0 or a power of two from 32 to 65536, not " + std::to_string(block));
  return block != 0 ? qccl::rotation::signs(block) : std::vector<float>();
}

template <bool kReconcile>
void localRotated(float* gp, float* up, const float* sp, const float* bp, const float* pp, size_t n, float mu,
                  float keep, float wd, int block) {
  const std::vector<float> d = rotationSigns(block);
  nb::gil_scoped_release unlocked;
  const size_t b = static_cast<size_t>(block);
  size_t i = 0;
  auto pass = [&](size_t at, size_t m) {
    localPass<kReconcile, true>(gp + at, up + at, kReconcile ? sp + at : nullptr, kReconcile ? bp + at : nullptr,
                                pp != nullptr ? pp + at : nullptr, m, mu, keep, wd);
  };
  if (b != 0)
    for (; i + b <= n; i += b) {
      pass(i, b);
      qccl::rotation::walshHadamard(gp + i, b, nullptr, d.data());
    }
  if (i < n) pass(i, n - i);
}

template <bool kFromSent>
void correctedRotated(float* xp, const float* op, float* sp, const float* pp, size_t n, float mu, float keep, float wd,
                      int block) {
  const std::vector<float> d = rotationSigns(block);
  nb::gil_scoped_release unlocked;
  const size_t b = static_cast<size_t>(block);
  size_t i = 0;
  auto pass = [&](size_t at, size_t m) {
    correctedPass<kFromSent>(xp + at, kFromSent ? nullptr : op + at, sp + at, pp != nullptr ? pp + at : nullptr, m, mu,
                             keep, wd);
  };
  if (b != 0)
    for (; i + b <= n; i += b) {
      qccl::rotation::rotateBackBlock(xp + i, b, d.data());
      pass(i, b);
    }
  if (i < n) pass(i, n - i);
}

// Reconciled (the default): u = mu * (u - (sent - buf)) + keep * (g + wd * p); g = u; sent is left
// as it was (corrected() rewrites it before it is read again).
void momentumLocal(Array g, Array u, Array sent, Array buf, Array p, float mu, float keep, float wd, int block) {
  const size_t n = g.size();
  float* gp = f32Data(g, n, "g");
  float* up = f32Data(u, n, "u");
  const float* sp = f32Data(sent, n, "sent");
  const float* bp = f32Data(buf, n, "buf");
  const float* pp = wd != 0.0f ? f32Data(p, n, "p") : nullptr;
  localRotated<true>(gp, up, sp, bp, pp, n, mu, keep, wd, block);
}

// Reconciled: sent = x; x = (x - mu * old) / keep - wd * p.
void momentumCorrected(Array x, Array old, Array sent, Array p, float mu, float keep, float wd, int block) {
  const size_t n = x.size();
  float* xp = f32Data(x, n, "x");
  const float* op = f32Data(old, n, "old");
  float* sp = f32Data(sent, n, "sent");
  const float* pp = wd != 0.0f ? f32Data(p, n, "p") : nullptr;
  correctedRotated<false>(xp, op, sp, pp, n, mu, keep, wd, block);
}

// Without reconciliation (HookState(..., reconcile=False)) each pass reads only the tensors it
// writes, two passes over memory fewer per step than the pair above: u = mu * u + keep * (g + wd * p);
// g = u.
void momentumLocalPlain(Array g, Array u, Array p, float mu, float keep, float wd, int block) {
  const size_t n = g.size();
  float* gp = f32Data(g, n, "g");
  float* up = f32Data(u, n, "u");
  const float* pp = wd != 0.0f ? f32Data(p, n, "p") : nullptr;
  localRotated<false>(gp, up, nullptr, nullptr, pp, n, mu, keep, wd, block);
}

// Without reconciliation: x = (x - mu * sent) / keep - wd * p; sent = x as it came in (the average
// just received becomes the one the next step's direction is taken from).
void momentumCorrectedFromSent(Array x, Array sent, Array p, float mu, float keep, float wd, int block) {
  const size_t n = x.size();
  float* xp = f32Data(x, n, "x");
  float* sp = f32Data(sent, n, "sent");
  const float* pp = wd != 0.0f ? f32Data(p, n, "p") : nullptr;
  correctedRotated<true>(xp, nullptr, sp, pp, n, mu, keep, wd, block);
}

// The corrected pass as the epilogue of the exchange (qcclAllreduceEpilogue): each parameter's
// segment of the bucket is corrected bucket by bucket while the decode has it in cache, instead of
// in a pass over the whole bucket after the call (momentum.py, MomentumCorrection.fused_correction).
// The same correctedPass on the same values, so the same bits.
// One parameter's elements [begin, begin + n) of the call's tensor and its settings.
struct Segment {
  size_t begin = 0, n = 0;
  const float* p = nullptr;  // read only when wd != 0
  float mu = 0, keep = 1, wd = 0;
};

struct CorrectSegment : Segment {
  float* sent = nullptr;
  PackedSent* packed = nullptr;  // instead of sent (from sent only)
  const float* old = nullptr;    // the optimizer's buffer when reconciling, else null (from sent)
};

// fn(segment, x, off, m) for each part of values[0..count) (elements [first, first + count) of the
// call's tensor) inside a segment: x is its first value there, off its offset in the segment, m its
// length. Segments are sorted and disjoint: the walk starts at the last one beginning at or before
// `first`.
template <typename S, typename F>
void forEachPart(const std::vector<S>& segs, float* values, size_t first, size_t count, F&& fn) {
  const size_t end = first + count;
  auto it = std::upper_bound(segs.begin(), segs.end(), first, [](size_t v, const S& sg) { return v < sg.begin; });
  if (it != segs.begin()) --it;
  for (; it != segs.end() && it->begin < end; ++it) {
    const size_t lo = std::max(first, it->begin), hi = std::min(end, it->begin + it->n);
    if (lo < hi) fn(*it, values + (lo - first), lo - it->begin, hi - lo);
  }
}

// The local pass as the exchange's prologue (qcclAllreduceFused): the call's input is the local
// momentum u itself, and each piece of it becomes v = mu * w + keep * (g + wd * p) right before the
// encode reads it (momentum.py, MomentumCorrection.local with defer=True). localPass on the same
// values, so the same bits.
struct LocalSegment : Segment {
  const float* g = nullptr;
  const float* sent = nullptr;  // with buf: reconciling
  const float* buf = nullptr;
};

struct FusedPasses {
  std::vector<CorrectSegment> corrected;
  std::vector<LocalSegment> local;
};

void localPrologue(void* user, float* values, size_t first, size_t count) {
  forEachPart(static_cast<const FusedPasses*>(user)->local, values, first, count,
              [](const LocalSegment& sg, float* u, size_t off, size_t m) {
                float* g = const_cast<float*>(sg.g + off);  // only read: kWriteG is false
                const float* pp = sg.p != nullptr ? sg.p + off : nullptr;
                if (sg.buf != nullptr)
                  localPass<true, false>(g, u, sg.sent + off, sg.buf + off, pp, m, sg.mu, sg.keep, sg.wd);
                else
                  localPass<false, false>(g, u, nullptr, nullptr, pp, m, sg.mu, sg.keep, sg.wd);
              });
}

// The corrected pass as the exchange's epilogue, on each piece of the average the decode finished.
void correctEpilogue(void* user, float* values, size_t first, size_t count) {
  forEachPart(static_cast<const FusedPasses*>(user)->corrected, values, first, count,
              [](const CorrectSegment& sg, float* x, size_t off, size_t m) {
                if (sg.packed != nullptr) return sg.packed->correct(x, off, m, sg.p, sg.mu, sg.keep, sg.wd);
                const float* pp = sg.p != nullptr ? sg.p + off : nullptr;
                if (sg.old != nullptr)
                  correctedPass<false>(x, sg.old + off, sg.sent + off, pp, m, sg.mu, sg.keep, sg.wd);
                else
                  correctedPass<true>(x, nullptr, sg.sent + off, pp, m, sg.mu, sg.keep, sg.wd);
              });
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// The block rotation before a 1-bit codec (HookState(rotation=...); codec/rotation.hpp, the C API's
// momentum correction does the same): in place over x's whole blocks of `block` elements (the rest is
// left as it is), x = H D x, or back, x = (1/block) D H x.
void rotateBlocks(Array x, int block, bool back) {
  if (!qccl::rotation::validBlock(block))
    invalid("rotation block must be a power of two from 32 to 65536, not " + std::to_string(block));
  const size_t n = x.size();
  float* xp = f32Data(x, n, "x");
  const std::vector<float> d = qccl::rotation::signs(block);
  nb::gil_scoped_release unlocked;
  qccl::rotation::rotate(xp, n, static_cast<size_t>(block), d.data(), back);
}

// What a 1-bit codec would lose of x, squared, in buckets of `bucket` (onebit: two_means; signscale not).
double oneBitLoss(Array x, bool twoMeans, int bucket) {
  if (bucket <= 0) invalid("bucket must be positive");
  const size_t n = x.size();
  const float* xp = f32Data(x, n, "x");
  nb::gil_scoped_release unlocked;
  return qccl::rotation::oneBitLoss(xp, n, twoMeans, static_cast<size_t>(bucket));
}

// reconcile="auto" (momentum.py, "Reconciliation"): how far the optimizer's buffer moved away from
// the average the last exchange asked for (sent), on `samples` elements spaced evenly from `offset`:
// max |buf - sent| over max (|buf| + |sent| + |kw * p|), kw = keep * wd (p read only when kw != 0).
// Without anything changing the gradient between the hook and opt.step(), the two differ by the
// rounding of the optimizer's arithmetic only. Infinity where a sampled value is not finite.
template <typename Sent>
double drift(const float* bp, Sent sent, const float* pp, size_t n, float kw, size_t samples, size_t offset) {
  if (n == 0 || samples == 0) return 0.0;
  const size_t stride = std::max<size_t>(1, n / samples);
  double dev = 0.0, scale = 0.0;
  for (size_t k = 0, i = offset % stride; k < samples && i < n; ++k, i += stride) {
    const double b = bp[i], s = sent(i), w = pp != nullptr ? static_cast<double>(kw) * pp[i] : 0.0;
    if (!std::isfinite(b) || !std::isfinite(s) || !std::isfinite(w)) return INFINITY;
    dev = std::max(dev, std::fabs(b - s));
    scale = std::max(scale, std::fabs(b) + std::fabs(s) + std::fabs(w));
  }
  if (dev == 0.0) return 0.0;
  return scale > 0.0 ? dev / scale : INFINITY;
}

double momentumDrift(Array buf, Array sent, Array p, float kw, size_t samples, size_t offset) {
  const size_t n = buf.size();
  const float* bp = f32Data(buf, n, "buf");
  const float* sp = f32Data(sent, n, "sent");
  const float* pp = kw != 0.0f ? f32Data(p, n, "p") : nullptr;
  return drift(
      bp, [sp](size_t i) { return sp[i]; }, pp, n, kw, samples, offset);
}

// momentumCorrectedFromSent with sent packed, on x = elements [off, off + x.size()) of the
// parameter (p: all of it, read only when wd != 0), as the epilogue runs it on each decoded piece.
void momentumCorrectedPacked(Array x, PackedSent& sent, size_t off, Array p, float mu, float keep, float wd) {
  const size_t m = x.size();
  float* xp = f32Data(x, m, "x");
  if (off > sent.size() || m > sent.size() - off)
    invalid("x: elements [" + std::to_string(off) + ", " + std::to_string(off + m) + ") of a sent of " +
            std::to_string(sent.size()));
  const float* pp = wd != 0.0f ? f32Data(p, sent.size(), "p") : nullptr;
  nb::gil_scoped_release unlocked;
  sent.correct(xp, off, m, pp, mu, keep, wd);
}

// momentumDrift with the last average packed.
double momentumDriftPacked(Array buf, const PackedSent& sent, Array p, float kw, size_t samples, size_t offset) {
  const size_t n = buf.size();
  const float* bp = f32Data(buf, n, "buf");
  if (sent.size() != n)
    invalid("sent: expected " + std::to_string(n) + " elements, not " + std::to_string(sent.size()));
  const float* pp = kw != 0.0f ? f32Data(p, n, "p") : nullptr;
  return drift(
      bp, [&sent](size_t i) { return sent.at(i); }, pp, n, kw, samples, offset);
}

qcclConfig_t makeConfig(const nb::dict& overrides) {
  qcclConfig_t c;
  check(qcclConfigInit(&c), nullptr, "qcclConfigInit");
  for (auto [k, v] : overrides) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "codec")
      c.codec = nb::cast<int>(v);
    else if (key == "bits")
      c.bits = nb::cast<int>(v);
    else if (key == "bucket")
      c.bucket = nb::cast<int>(v);
    else if (key == "stochastic")
      c.stochastic = nb::cast<bool>(v) ? 1 : 0;
    else if (key == "seed")
      c.seed = nb::cast<uint64_t>(v);
    else if (key == "min_compress_bytes")
      c.minCompressBytes = nb::cast<size_t>(v);
    else if (key == "chunk_bytes")
      c.chunkBytes = nb::cast<size_t>(v);
    else if (key == "pipeline_depth")
      c.pipelineDepth = nb::cast<int>(v);
    else if (key == "timeout")
      c.timeoutSec = nb::cast<double>(v);
    else if (key == "warmup_calls")
      c.warmupCalls = nb::cast<int>(v);
    else if (key == "algo")
      c.algo = nb::cast<int>(v);
    else if (key == "error_feedback")
      c.errorFeedback = nb::cast<bool>(v) ? 1 : 0;
    else if (key == "intra_codec")
      c.intraCodec = nb::cast<int>(v);
    else if (key == "auto_hier")
      c.autoHier = nb::cast<bool>(v) ? 1 : 0;
    else if (key == "shm")
      c.shm = nb::cast<bool>(v) ? 1 : 0;
    else if (key == "shm_chunk_bytes")
      c.shmChunkBytes = nb::cast<size_t>(v);
    else if (key == "local_compress")
      c.localCompress = nb::cast<bool>(v) ? 1 : 0;
    else if (key == "auto_ring")
      c.autoRing = nb::cast<bool>(v) ? 1 : 0;
    else
      invalid("unknown config field '" + key + "'");
  }
  return c;
}

nb::dict configToDict(const qcclConfig_t& c) {
  nb::dict d;
  d["codec"] = c.codec;
  d["bits"] = c.bits;
  d["bucket"] = c.bucket;
  d["stochastic"] = c.stochastic != 0;
  d["seed"] = c.seed;
  d["min_compress_bytes"] = c.minCompressBytes;
  d["chunk_bytes"] = c.chunkBytes;
  d["pipeline_depth"] = c.pipelineDepth;
  d["timeout"] = c.timeoutSec;
  d["warmup_calls"] = c.warmupCalls;
  d["algo"] = c.algo;
  d["error_feedback"] = c.errorFeedback != 0;
  d["intra_codec"] = c.intraCodec;
  d["auto_hier"] = c.autoHier != 0;
  d["shm"] = c.shm != 0;
  d["shm_chunk_bytes"] = c.shmChunkBytes;
  d["local_compress"] = c.localCompress != 0;
  d["auto_ring"] = c.autoRing != 0;
  return d;
}

qcclUniqueId idFromBytes(const nb::bytes& b) {
  qcclUniqueId id;
  if (b.size() != sizeof(id.internal))
    invalid("unique id must be " + std::to_string(sizeof(id.internal)) + " bytes, got " + std::to_string(b.size()));
  std::memcpy(id.internal, b.c_str(), sizeof(id.internal));
  return id;
}

nb::bytes idToBytes(const qcclUniqueId& id) { return nb::bytes(id.internal, sizeof(id.internal)); }

// Owns one qcclComm_t. destroy()/abort() free it early; the destructor frees what is left.
//
// Threads (Python's hook worker runs collectives while the main thread may destroy, abort or read
// stats): calls hold the handle's shared lock while they use the communicator; destroy() takes it
// exclusively, so it waits for a running call; abort() first interrupts the communicator (the
// running call returns within milliseconds), then takes it exclusively and frees.
class Comm {
 public:
  explicit Comm(qcclComm_t c) : comm_(c) {}
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (qcclComm_t c = comm_.exchange(nullptr)) qcclCommDestroy(c);
  }

  // Runs fn(comm) with the GIL released, under the shared lock.
  template <typename F>
  qcclResult_t call(F&& fn) const {
    nb::gil_scoped_release unlocked;
    std::shared_lock<std::shared_mutex> lock(mu_);
    qcclComm_t c = comm_.load();
    if (c == nullptr) return qcclInvalidUsage;
    return fn(c);
  }
  // Like call(), with the error turned into qccl.Error.
  template <typename F>
  void run(const char* what, F&& fn) const {
    qcclResult_t r = call(std::forward<F>(fn));
    if (r == qcclInvalidUsage && !alive()) throw CallError{qcclInvalidUsage, "the communicator was destroyed"};
    check(r, nullptr, what);
  }

  bool alive() const { return comm_.load() != nullptr; }
  int rank() const {
    int r = -1;
    run("qcclCommUserRank", [&](qcclComm_t c) { return qcclCommUserRank(c, &r); });
    return r;
  }
  int size() const {
    int n = 0;
    run("qcclCommCount", [&](qcclComm_t c) { return qcclCommCount(c, &n); });
    return n;
  }
  void destroy() {
    nb::gil_scoped_release unlocked;
    qcclComm_t c = comm_.exchange(nullptr);
    if (c == nullptr) return;
    std::unique_lock<std::shared_mutex> lock(mu_);
    qcclResult_t r = qcclCommDestroy(c);
    if (r != qcclSuccess) {
      nb::gil_scoped_acquire held;
      check(r, nullptr, "qcclCommDestroy");
    }
  }
  void abort() {
    nb::gil_scoped_release unlocked;
    qcclComm_t c = comm_.exchange(nullptr);
    if (c == nullptr) return;
    qcclCommInterrupt(c);  // a running call returns now, so the exclusive lock below is quick
    std::unique_lock<std::shared_mutex> lock(mu_);
    qcclResult_t r = qcclCommAbort(c);
    if (r != qcclSuccess) {
      nb::gil_scoped_acquire held;
      check(r, nullptr, "qcclCommAbort");
    }
  }
  // Without the lock: qcclCommInterrupt is safe while another thread is inside a call.
  void interrupt() {
    if (qcclComm_t c = comm_.load()) check(qcclCommInterrupt(c), nullptr, "qcclCommInterrupt");
  }

 private:
  mutable std::shared_mutex mu_;
  std::atomic<qcclComm_t> comm_;
};

nb::dict stats(const Comm& self) {
  qcclStats_t s;
  self.run("qcclCommGetStats", [&](qcclComm_t c) { return qcclCommGetStats(c, &s); });
  nb::dict d;
  d["bytes_sent"] = s.bytesSent;
  d["bytes_sent_inter_host"] = s.bytesSentInterHost;
  d["messages_sent"] = s.messagesSent;
  d["bytes_received"] = s.bytesReceived;
  d["calls"] = s.calls;
  d["residual_bytes"] = s.residualBytes;
  d["staging_bytes"] = s.stagingBytes;
  d["peak_staging_bytes"] = s.peakStagingBytes;
  d["tensors"] = s.tensors;
  d["evictions"] = s.evictions;
  d["peak_residual_bytes"] = s.peakResidualBytes;
  d["encode_seconds"] = s.encodeSeconds;
  d["decode_seconds"] = s.decodeSeconds;
  d["wait_seconds"] = s.waitSeconds;
  d["idle_seconds"] = s.idleSeconds;
  return d;
}

// (algo, path) of the last allreduce: see qcclCommGetLastAlgo (path 1: the MPI library, 2: shared memory).
nb::tuple lastAlgo(const Comm& self) {
  int algo = 0, native = 0;
  self.run("qcclCommGetLastAlgo", [&](qcclComm_t c) { return qcclCommGetLastAlgo(c, &algo, &native); });
  return nb::make_tuple(algo, native);
}

qcclTensorOpts_t tensorOpts(uint64_t id, int codec, int bits, int algo) {
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = id;
  t.codec = codec;
  t.bits = bits;
  t.algo = algo;
  return t;
}

void allreduce(Comm& self, ConstArray send, Array recv, int op, uint64_t id, int codec, int bits, int algo,
               uintptr_t stream) {
  const bool sendCuda = checkBuffer(send, "input");
  const bool recvCuda = checkBuffer(recv, "output");
  if (sendCuda != recvCuda) invalid("input and output must be on the same device");
  const qcclDataType_t dt = dataType(send);
  if (dataType(recv) != dt) invalid("input and output dtypes differ");
  if (send.size() != recv.size())
    invalid("input has " + std::to_string(send.size()) + " elements but output has " + std::to_string(recv.size()));
  if (op != qcclSum && op != qcclAvg) invalid("op must be sum or avg");
  const qcclTensorOpts_t t = tensorOpts(id, codec, bits, algo);
  self.run("qcclAllreduce", [&](qcclComm_t c) {
    return qcclAllreduce(send.data(), recv.data(), send.size(), dt, static_cast<qcclRedOp_t>(op), &t, c,
                         sendCuda ? reinterpret_cast<void*>(stream) : nullptr);
  });
}

// A segment tuple's common fields: begin and n (t[0], t[1]; within `size` elements), the parameter
// (t[pAt], or None: then wd must be 0), and mu, keep and wd (the tuple's last three).
void parseSegment(const nb::tuple& t, size_t pAt, size_t size, const char* what, const char* where, Segment& sg) {
  sg.begin = nb::cast<size_t>(t[0]);
  sg.n = nb::cast<size_t>(t[1]);
  if (sg.begin > size || sg.n > size - sg.begin) invalid(std::string(what) + ": outside " + where);
  const size_t last = t.size() - 1;
  sg.mu = nb::cast<float>(t[last - 2]);
  sg.keep = nb::cast<float>(t[last - 1]);
  sg.wd = nb::cast<float>(t[last]);
  if (sg.wd == 0.0f) return;  // p is not read
  if (t[pAt].is_none()) invalid(std::string(what) + ": weight decay without the parameter");
  Array p = nb::cast<Array>(t[pAt]);
  sg.p = f32Data(p, sg.n, "p");
}

// Sorts segments by begin; overlapping ones are an error.
template <typename S>
void sortDisjoint(std::vector<S>& segs, const char* overlap) {
  std::sort(segs.begin(), segs.end(), [](const S& a, const S& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < segs.size(); ++i)
    if (segs[i].begin < segs[i - 1].begin + segs[i - 1].n) invalid(overlap);
}

// allreduce of a float32 CPU tensor with momentum correction's corrected pass fused into its last
// decode: `segments` are (begin, n, sent, old or None, p or None, mu, keep, wd) over elements of
// recv, disjoint; each one's recv[begin:begin + n] gets correctedPass with those tensors (n
// elements each; old None: from sent; p None: wd must be 0).
void allreduceCorrected(Comm& self, Array send, Array recv, int op, uint64_t id, int codec, int bits, int algo,
                        const nb::list& segments, const nb::list& local) {
  if (checkBuffer(send, "input") || checkBuffer(recv, "output") || recv.device_type() != nb::device::cpu::value)
    invalid("the corrected allreduce takes CPU tensors");
  if (dataType(send) != qcclFloat32 || dataType(recv) != qcclFloat32)
    invalid("the corrected allreduce takes float32 tensors");
  if (send.size() != recv.size())
    invalid("input has " + std::to_string(send.size()) + " elements but output has " + std::to_string(recv.size()));
  if (op != qcclSum && op != qcclAvg) invalid("op must be sum or avg");
  FusedPasses passes;
  std::vector<CorrectSegment>& segs = passes.corrected;
  segs.reserve(segments.size());
  for (nb::handle h : segments) {
    nb::tuple t = nb::cast<nb::tuple>(h);
    if (t.size() != 8) invalid("segment: expected (begin, n, sent, old, p, mu, keep, wd)");
    CorrectSegment sg;
    parseSegment(t, 4, recv.size(), "segment", "the output", sg);
    if (nb::isinstance<PackedSent>(t[2])) {
      sg.packed = nb::cast<PackedSent*>(t[2]);
      if (sg.packed->size() != sg.n)
        invalid("segment: sent holds " + std::to_string(sg.packed->size()) + " elements, not " + std::to_string(sg.n));
      if (!t[3].is_none()) invalid("segment: a packed sent takes no old (it is the corrected pass from sent)");
      sg.packed->rephase(sg.begin % PackedSent::kBlock);  // its blocks where the codec's buckets start
    } else {
      Array sent = nb::cast<Array>(t[2]);
      sg.sent = f32Data(sent, sg.n, "sent");
    }
    if (!t[3].is_none()) {
      Array old = nb::cast<Array>(t[3]);
      sg.old = f32Data(old, sg.n, "old");
    }
    segs.push_back(sg);
  }
  sortDisjoint(segs, "segments overlap");
  // (begin, n, g, sent or None, buf or None, p or None, mu, keep, wd): the local pass on send.
  std::vector<LocalSegment>& ls = passes.local;
  for (nb::handle h : local) {
    nb::tuple t = nb::cast<nb::tuple>(h);
    if (t.size() != 9) invalid("local segment: expected (begin, n, g, sent, buf, p, mu, keep, wd)");
    LocalSegment sg;
    parseSegment(t, 5, send.size(), "local segment", "the input", sg);
    Array g = nb::cast<Array>(t[2]);
    sg.g = f32Data(g, sg.n, "g");
    if (t[3].is_none() != t[4].is_none()) invalid("local segment: sent and buf go together");
    if (!t[3].is_none()) {
      Array sent = nb::cast<Array>(t[3]), buf = nb::cast<Array>(t[4]);
      sg.sent = f32Data(sent, sg.n, "sent");
      sg.buf = f32Data(buf, sg.n, "buf");
    }
    ls.push_back(sg);
  }
  sortDisjoint(ls, "local segments overlap");
  if (!ls.empty() && send.data() == recv.data()) invalid("the local pass needs the input apart from the output");
  if (ls.empty() && segs.empty()) invalid("neither segments nor local segments");
  const qcclTensorOpts_t t = tensorOpts(id, codec, bits, algo);
  self.run("qcclAllreduceFused", [&](qcclComm_t c) {
    return qcclAllreduceFused(static_cast<float*>(send.data()), static_cast<float*>(recv.data()), send.size(),
                              static_cast<qcclRedOp_t>(op), &t, ls.empty() ? nullptr : &localPrologue,
                              segs.empty() ? nullptr : &correctEpilogue, &passes, c);
  });
}

void allgather(Comm& self, ConstArray send, Array recv, uint64_t id, int codec, int bits, int algo, uintptr_t stream) {
  const bool sendCuda = checkBuffer(send, "input");
  const bool recvCuda = checkBuffer(recv, "output");
  if (sendCuda != recvCuda) invalid("input and output must be on the same device");
  const qcclDataType_t dt = dataType(send);
  if (dataType(recv) != dt) invalid("input and output dtypes differ");
  const size_t n = static_cast<size_t>(self.size());
  if (recv.size() != send.size() * n)
    invalid("output must hold size * input elements (" + std::to_string(send.size() * n) + "), got " +
            std::to_string(recv.size()));
  const qcclTensorOpts_t t = tensorOpts(id, codec, bits, algo);
  self.run("qcclAllgather", [&](qcclComm_t c) {
    return qcclAllgather(send.data(), recv.data(), send.size(), dt, &t, c,
                         sendCuda ? reinterpret_cast<void*>(stream) : nullptr);
  });
}

void reduceScatter(Comm& self, ConstArray send, Array recv, int op, uint64_t id, int codec, int bits, int algo,
                   uintptr_t stream) {
  const bool sendCuda = checkBuffer(send, "input");
  const bool recvCuda = checkBuffer(recv, "output");
  if (sendCuda != recvCuda) invalid("input and output must be on the same device");
  const qcclDataType_t dt = dataType(send);
  if (dataType(recv) != dt) invalid("input and output dtypes differ");
  const size_t n = static_cast<size_t>(self.size());
  if (send.size() != recv.size() * n)
    invalid("input must hold size * output elements (" + std::to_string(recv.size() * n) + "), got " +
            std::to_string(send.size()));
  if (op != qcclSum && op != qcclAvg) invalid("op must be sum or avg");
  const qcclTensorOpts_t t = tensorOpts(id, codec, bits, algo);
  self.run("qcclReduceScatter", [&](qcclComm_t c) {
    return qcclReduceScatter(send.data(), recv.data(), recv.size(), dt, static_cast<qcclRedOp_t>(op), &t, c,
                             sendCuda ? reinterpret_cast<void*>(stream) : nullptr);
  });
}

Comm* initMpi(int64_t fortranHandle, const nb::dict& cfg) {
  const qcclConfig_t c = makeConfig(cfg);
  qcclComm_t comm = nullptr;
  qcclResult_t r;
  {
    nb::gil_scoped_release unlocked;
    r = qcclCommInitMpiFortran(&comm, fortranHandle, &c);
  }
  check(r, nullptr, "qcclCommInitMpiFortran");
  return new Comm(comm);
}

Comm* initRank(int nranks, const nb::bytes& uid, int rank, const nb::dict& cfg) {
  const qcclConfig_t c = makeConfig(cfg);
  const qcclUniqueId id = idFromBytes(uid);
  qcclComm_t comm = nullptr;
  qcclResult_t r;
  {
    nb::gil_scoped_release unlocked;
    r = qcclCommInitRank(&comm, nranks, id, rank, &c);
  }
  check(r, nullptr, "qcclCommInitRank");
  return new Comm(comm);
}

std::vector<Comm*> initLoopback(int nranks, const nb::dict& cfg) {
  if (nranks < 1) invalid("nranks must be at least 1");
  const qcclConfig_t c = makeConfig(cfg);
  std::vector<qcclComm_t> comms(static_cast<size_t>(nranks), nullptr);
  check(qcclCommInitLoopback(comms.data(), nranks, &c), nullptr, "qcclCommInitLoopback");
  std::vector<Comm*> out;
  for (qcclComm_t x : comms) out.push_back(new Comm(x));
  return out;
}

}  // namespace

NB_MODULE(_qccl, m) {
  m.doc() = "Low-level bindings of the qccl C API; use the qccl package instead.";
  // Communicators held by DDP hook threads (daemons) may outlive the interpreter's teardown; that
  // is expected, not a reference counting bug, so nanobind's exit-time report would only mislead.
  nb::set_leak_warnings(false);
  m.attr("HAVE_CUDA") = static_cast<bool>(QCCL_HAVE_CUDA);
  m.attr("HAVE_MPI") = static_cast<bool>(QCCL_HAVE_MPI);
  m.attr("HAVE_UCX") = static_cast<bool>(QCCL_HAVE_UCX);
  m.attr("UNIQUE_ID_BYTES") = sizeof(qcclUniqueId::internal);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const CallError& e) {
      if (errorClass().is_valid()) {
        nb::object exc = errorClass()(e.message, e.code);
        PyErr_SetObject(errorClass().ptr(), exc.ptr());
      } else {
        PyErr_SetString(PyExc_RuntimeError, e.message.c_str());
      }
    }
  });

  m.def("_set_error_class", [](nb::object cls) { errorClass() = std::move(cls); });
  m.def("version", [] {
    int v = 0;
    check(qcclGetVersion(&v), nullptr, "qcclGetVersion");
    return v;
  });
  m.def("error_string", [](int code) { return std::string(qcclGetErrorString(static_cast<qcclResult_t>(code))); });
  m.def(
      "config_defaults", [] { return configToDict(makeConfig(nb::dict())); },
      "The communicator configuration after QCCL_* environment overrides.");
  m.def("get_unique_id", [] {
    qcclUniqueId id;
    check(qcclGetUniqueId(&id), nullptr, "qcclGetUniqueId");
    return idToBytes(id);
  });
  m.def("unique_id_from_address", [](const std::string& host, int port) {
    qcclUniqueId id;
    check(qcclUniqueIdFromAddress(&id, host.c_str(), port), nullptr, "qcclUniqueIdFromAddress");
    return idToBytes(id);
  });

  nb::class_<Comm>(m, "Comm")
      .def_prop_ro("rank", &Comm::rank)
      .def_prop_ro("size", &Comm::size)
      .def_prop_ro("alive", &Comm::alive)
      .def("destroy", &Comm::destroy)
      .def("abort", &Comm::abort)
      .def("interrupt", &Comm::interrupt)
      .def("stats", &stats)
      .def("last_algo", &lastAlgo)
      .def("release",
           [](Comm& self, uint64_t id) {
             self.run("qcclTensorRelease", [&](qcclComm_t c) { return qcclTensorRelease(c, id); });
           })
      .def("save_tensor_state",
           [](Comm& self, uint64_t id) {
             std::vector<uint8_t> rec;
             self.run("qcclTensorStateSave", [&](qcclComm_t c) {
               size_t bytes = 0;
               qcclResult_t r = qcclTensorStateSave(c, id, nullptr, &bytes);
               if (r != qcclSuccess || bytes == 0) return r;
               rec.resize(bytes);
               return qcclTensorStateSave(c, id, rec.data(), &bytes);
             });
             return nb::bytes(reinterpret_cast<const char*>(rec.data()), rec.size());
           })
      .def(
          "load_tensor_state",
          [](Comm& self, uint64_t id, const nb::bytes& data, bool device) {
            std::string rec(data.c_str(), data.size());
            self.run("qcclTensorStateLoad",
                     [&](qcclComm_t c) { return qcclTensorStateLoad(c, id, rec.data(), rec.size(), device ? 1 : 0); });
          },
          nb::arg("id"), nb::arg("data"), nb::arg("device") = false)
      .def("scale_tensor_state",
           [](Comm& self, uint64_t id, float factor) {
             int found = 0;
             self.run("qcclTensorStateScale",
                      [&](qcclComm_t c) { return qcclTensorStateScale(c, id, factor, &found); });
             return found != 0;
           })
      .def("set_feedback_gain",
           [](Comm& self, uint64_t id, float gain) {
             self.run("qcclTensorSetFeedbackGain",
                      [&](qcclComm_t c) { return qcclTensorSetFeedbackGain(c, id, gain); });
           })
      .def("allreduce", &allreduce, nb::arg("send").noconvert(), nb::arg("recv").noconvert(), nb::arg("op"),
           nb::arg("id"), nb::arg("codec"), nb::arg("bits"), nb::arg("algo"), nb::arg("stream"))
      .def("allreduce_corrected", &allreduceCorrected, nb::arg("send").noconvert(), nb::arg("recv").noconvert(),
           nb::arg("op"), nb::arg("id"), nb::arg("codec"), nb::arg("bits"), nb::arg("algo"), nb::arg("segments"),
           nb::arg("local") = nb::list())
      .def("allgather", &allgather, nb::arg("send").noconvert(), nb::arg("recv").noconvert(), nb::arg("id"),
           nb::arg("codec"), nb::arg("bits"), nb::arg("algo"), nb::arg("stream"))
      .def("reduce_scatter", &reduceScatter, nb::arg("send").noconvert(), nb::arg("recv").noconvert(), nb::arg("op"),
           nb::arg("id"), nb::arg("codec"), nb::arg("bits"), nb::arg("algo"), nb::arg("stream"));

  m.def("_rotate", &rotateBlocks, nb::arg("x").noconvert(), nb::arg("block"), nb::arg("back"));
  m.def("_onebit_loss", &oneBitLoss, nb::arg("x").noconvert(), nb::arg("two_means"), nb::arg("bucket"));
  m.def("_momentum_local", &momentumLocal, nb::arg("g").noconvert(), nb::arg("u").noconvert(),
        nb::arg("sent").noconvert(), nb::arg("buf").noconvert(), nb::arg("p").noconvert(), nb::arg("mu"),
        nb::arg("keep"), nb::arg("wd"), nb::arg("block") = 0);
  m.def("_momentum_corrected", &momentumCorrected, nb::arg("x").noconvert(), nb::arg("old").noconvert(),
        nb::arg("sent").noconvert(), nb::arg("p").noconvert(), nb::arg("mu"), nb::arg("keep"), nb::arg("wd"),
        nb::arg("block") = 0);
  m.def("_momentum_local_plain", &momentumLocalPlain, nb::arg("g").noconvert(), nb::arg("u").noconvert(),
        nb::arg("p").noconvert(), nb::arg("mu"), nb::arg("keep"), nb::arg("wd"), nb::arg("block") = 0);
  m.def("_momentum_corrected_from_sent", &momentumCorrectedFromSent, nb::arg("x").noconvert(),
        nb::arg("sent").noconvert(), nb::arg("p").noconvert(), nb::arg("mu"), nb::arg("keep"), nb::arg("wd"),
        nb::arg("block") = 0);
  nb::class_<PackedSent>(m, "_PackedSent")
      .def(
          "__init__",
          [](PackedSent* self, Array src, size_t phase) {
            const size_t n = src.size();
            const float* sp = f32Data(src, n, "src");
            new (self) PackedSent(n, phase);
            nb::gil_scoped_release unlocked;
            self->load(sp);
          },
          nb::arg("src").noconvert(), nb::arg("phase") = 0)
      .def_prop_ro("size", &PackedSent::size)
      .def_prop_ro("phase", &PackedSent::phase)
      .def_prop_ro("blocks", &PackedSent::blocks)
      .def_prop_ro("raw_blocks", &PackedSent::rawBlocks)
      .def(
          "store",
          [](const PackedSent& self, Array dst) {
            float* dp = f32Data(dst, self.size(), "dst");
            nb::gil_scoped_release unlocked;
            self.store(dp);
          },
          nb::arg("dst").noconvert())
      .def("rephase", &PackedSent::rephase, nb::arg("phase"))
      .def("__getitem__", [](const PackedSent& self, size_t i) {
        if (i >= self.size()) throw nb::index_error();
        return self.at(i);
      });
  // Whether the packed corrected pass has its AVX-512 path here (momentum.py packs by default then:
  // in the DDP step its AVX2 path cost 8 ms more per rank than the tensor pass, its AVX-512 path
  // 1 ms less; bench/RESULTS.md, "optimizer='s last average packed").
  m.def("_packed_sent_fast", [] {
#ifdef QCCL_EXT_AVX2
    return haveAvx512();
#else
    return false;
#endif
  });
  m.def("_momentum_corrected_packed", &momentumCorrectedPacked, nb::arg("x").noconvert(), nb::arg("sent"),
        nb::arg("off"), nb::arg("p").noconvert(), nb::arg("mu"), nb::arg("keep"), nb::arg("wd"));
  m.def("_momentum_drift_packed", &momentumDriftPacked, nb::arg("buf").noconvert(), nb::arg("sent"),
        nb::arg("p").noconvert(), nb::arg("kw"), nb::arg("samples"), nb::arg("offset"));
  m.def("_momentum_drift", &momentumDrift, nb::arg("buf").noconvert(), nb::arg("sent").noconvert(),
        nb::arg("p").noconvert(), nb::arg("kw"), nb::arg("samples"), nb::arg("offset"));

  m.def("init_mpi", &initMpi, nb::arg("fortran_handle"), nb::arg("config"), nb::rv_policy::take_ownership);
  m.def("init_rank", &initRank, nb::arg("nranks"), nb::arg("unique_id"), nb::arg("rank"), nb::arg("config"),
        nb::rv_policy::take_ownership);
  m.def("init_loopback", &initLoopback, nb::arg("nranks"), nb::arg("config"), nb::rv_policy::take_ownership);
}
