// Every vectorized ISA the CPU supports must produce exactly the scalar path's wire bytes,
// residuals and decoded values, for every codec, on random data salted with edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/cpu_kernels.hpp"
#include "codec_test_util.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace test {
namespace {

// Random data where each bucket-sized block has a different character, so partial buckets,
// constant buckets, non-finite buckets and rounding ties all occur.
std::vector<float> edgeData(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<uint32_t> bitsDist;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    size_t block = (i / 96) % 15;  // not a bucket multiple: characters straddle buckets
    float x = nd(rng);
    switch (block) {
      case 0:
        v[i] = x;
        break;
      case 1:
        v[i] = 0.0f;
        break;
      case 2:
        v[i] = -0.0f;
        break;
      case 3:
        v[i] = 0.75f;
        break;
      case 4:
        v[i] = x * 0x1p-140f;
        break;  // subnormal
      case 5:
        v[i] = x * 1e37f;
        break;  // sums overflow
      case 6:
        v[i] = i % 37 == 0 ? NAN : x;
        break;  // NaN bucket
      case 7:
        v[i] = i % 41 == 0 ? (x < 0 ? -INFINITY : INFINITY) : x;
        break;  // Inf bucket
      case 8:
        v[i] = math::bitsFloat((bitsDist(rng) & 0x3fffe000u) | 0x1000u);
        break;  // fp16 ties
      case 9:
        v[i] = math::bitsFloat((bitsDist(rng) & 0xbfff0000u) | 0x8000u);
        break;  // bf16 ties
      case 10:
        v[i] = (float)(int)(x * 4) * 65504.0f / 8;
        break;  // near fp16 max
      case 11:
        v[i] = std::fabs(x);
        break;  // all >= 0
      case 12:
        v[i] = -std::fabs(x) - 1e-3f;
        break;  // all < 0
      case 13:
        v[i] = i % 3 == 0 ? 3.4e38f : 2.6e33f * (1.0f + std::fabs(x));
        break;  // one-sided near FLT_MAX: max - min is finite, min + levels * step is not
      default:
        v[i] = x * 1e-3f + 5.0f;
        break;  // offset range
    }
  }
  return v;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b, std::string* where) {
  for (size_t i = 0; i < a.size(); ++i)
    if (bitsOf(a[i]) != bitsOf(b[i])) {
      *where = "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
      return false;
    }
  return true;
}

struct IsaRun {
  std::vector<uint8_t> wire;
  std::vector<float> residual, decoded, decodedAdd;
};

IsaRun runWith(const cpu::Kernels& k, const CodecConfig& cfg, const std::vector<float>& g, const std::vector<float>* r0,
               const std::vector<float>& acc, uint64_t off, uint64_t span = 0, float gain = 1.0f) {
  IsaRun out;
  const size_t n = g.size();
  out.wire.resize(encodedBytes(cfg, n));
  if (r0) out.residual = *r0;
  EncodeParams p;
  p.rngOffset = off;
  p.spanElems = span;
  p.feedbackGain = gain;
  cpu::encodeWith(k, cfg, g.data(), r0 ? out.residual.data() : nullptr, n, out.wire.data(), out.wire.size(), p);
  out.decoded.resize(n);
  cpu::decodeWith(k, out.wire.data(), out.wire.size(), out.decoded.data(), n, false);
  out.decodedAdd = acc;
  cpu::decodeWith(k, out.wire.data(), out.wire.size(), out.decodedAdd.data(), n, true);
  return out;
}

void expectSame(const IsaRun& ref, const IsaRun& got) {
  ASSERT_EQ(ref.wire.size(), got.wire.size());
  for (size_t i = 0; i < ref.wire.size(); ++i) ASSERT_EQ(ref.wire[i], got.wire[i]) << "wire byte " << i;
  std::string where;
  EXPECT_TRUE(sameBits(ref.residual, got.residual, &where)) << "residual " << where;
  EXPECT_TRUE(sameBits(ref.decoded, got.decoded, &where)) << "decode " << where;
  EXPECT_TRUE(sameBits(ref.decodedAdd, got.decodedAdd, &where)) << "decodeAdd " << where;
}

std::vector<const cpu::Kernels*> vectorIsas() {
  std::vector<const cpu::Kernels*> v;
  for (const char* isa : {"avx2", "avx512"})
    if (const cpu::Kernels* k = cpu::kernelsFor(isa)) v.push_back(k);
  return v;
}

class IsaEquivalence : public ::testing::TestWithParam<CodecConfig> {};

TEST_P(IsaEquivalence, EncodeDecodeMatchScalar) {
  const auto isas = vectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector ISA on this CPU";
  const CodecConfig cfg = GetParam();
  const cpu::Kernels& scalar = cpu::scalarKernels();
  for (size_t n : {1ul, 15ul, 16ul, 33ul, 512ul, 1000ul, 4128ul, 4037ul, 70001ul}) {
    std::vector<float> g = edgeData(n, (uint32_t)n), r = gaussian(n, 2, 0.05f), acc = gaussian(n, 3);
    for (bool withRes : {false, true}) {
      IsaRun ref = runWith(scalar, cfg, g, withRes ? &r : nullptr, acc, n * 7);
      for (const cpu::Kernels* k : isas) {
        SCOPED_TRACE(std::string(k->isa) + " n=" + std::to_string(n) + (withRes ? " ef" : ""));
        expectSame(ref, runWith(*k, cfg, g, withRes ? &r : nullptr, acc, n * 7));
      }
    }
  }
}

// Hostile payloads (valid header, random payload bytes, NaN/odd statistics) decode the same way.
TEST_P(IsaEquivalence, RandomPayloadDecodesMatchScalar) {
  const auto isas = vectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector ISA on this CPU";
  const CodecConfig cfg = GetParam();
  std::mt19937 rng(17);
  for (size_t n : {16ul, 512ul, 2048ul + 32, 3001ul}) {
    std::vector<float> g(n, 1.0f);
    std::vector<uint8_t> w = encodeVec(cfg, g, nullptr);
    for (size_t i = kWireHeaderBytes; i < w.size(); ++i) w[i] = (uint8_t)rng();
    std::vector<float> acc = gaussian(n, 4);
    std::vector<float> refD(n), refA = acc;
    cpu::decodeWith(cpu::scalarKernels(), w.data(), w.size(), refD.data(), n, false);
    cpu::decodeWith(cpu::scalarKernels(), w.data(), w.size(), refA.data(), n, true);
    for (const cpu::Kernels* k : isas) {
      SCOPED_TRACE(std::string(k->isa) + " n=" + std::to_string(n));
      std::vector<float> d(n), a = acc;
      cpu::decodeWith(*k, w.data(), w.size(), d.data(), n, false);
      cpu::decodeWith(*k, w.data(), w.size(), a.data(), n, true);
      std::string where;
      EXPECT_TRUE(sameBits(refD, d, &where)) << where;
      EXPECT_TRUE(sameBits(refA, a, &where)) << where;
    }
  }
}

// Calls long enough to stream from memory take other paths: the AVX2 sign encodes stage v in a
// scratch buffer (BucketCtx::streaming) and, from kPrefetchEncodeElems, prefetch the next bucket
// (BucketCtx::prefetch), and a plain decode writes with non-temporal stores (kStreamDecodeElems).
// All must give the in-cache paths' bits, non-finite buckets included.
TEST_P(IsaEquivalence, LongCallsStreamTheSameBits) {
  const CodecConfig cfg = GetParam();
  static_assert(cpu::kStreamDecodeElems >= cpu::kStreamEncodeElems, "one size covers both");
  static_assert(cpu::kPrefetchEncodeElems > cpu::kStreamDecodeElems, "the second size prefetches");
  std::vector<const cpu::Kernels*> all = vectorIsas();
  // Every vector ISA's encode of n elements against the scalar one; returns the scalar run.
  const auto encodesAgree = [&](size_t n, uint32_t gSeed, uint32_t rSeed, uint32_t accSeed, uint64_t off,
                                const char* what, uint64_t span = 0) {
    std::vector<float> g = edgeData(n, gSeed), r = gaussian(n, rSeed, 0.05f), acc = gaussian(n, accSeed);
    IsaRun ref = runWith(cpu::scalarKernels(), cfg, g, &r, acc, off);
    for (const cpu::Kernels* k : all) {
      SCOPED_TRACE(std::string(k->isa) + what);
      expectSame(ref, runWith(*k, cfg, g, &r, acc, off, span));
    }
    return ref;
  };
  encodesAgree(cpu::kPrefetchEncodeElems + 4037, 98, 4, 7, 13, " encode with prefetches");
  // A short piece of a long range (a schedule's chunk): staged and prefetched like the long call.
  encodesAgree(8192 + 37, 97, 3, 8, 17, " a chunk of a long range", cpu::kPrefetchEncodeElems);
  const size_t n = cpu::kStreamDecodeElems + 4037;
  const IsaRun ref = encodesAgree(n, 99, 5, 6, 11, " encode");
  all.push_back(&cpu::scalarKernels());
  const WireInfo info = parseWire(ref.wire.data(), ref.wire.size());
  DecodeEpilogue keep;  // changes nothing, but keeps the decode on its in-cache path
  keep.fn = [](const void*, float*, size_t) {};
  for (const cpu::Kernels* k : all)
    for (float scale : {1.0f, 0.25f}) {
      SCOPED_TRACE(std::string(k->isa) + " decode, scale " + std::to_string(scale));
      std::vector<float> cached(n), streamed(n + 4), shifted(n);
      cpu::decodeParsedWith(*k, info, ref.wire.data(), cached.data(), n, false, scale, &keep);
      cpu::decodeParsedWith(*k, info, ref.wire.data(), streamed.data(), n, false, scale);
      // 4 bytes off 16-byte alignment: the ordinary stores again
      cpu::decodeParsedWith(*k, info, ref.wire.data(), streamed.data() + 1, n, false, scale);
      std::copy(streamed.begin() + 1, streamed.begin() + 1 + n, shifted.begin());
      cpu::decodeParsedWith(*k, info, ref.wire.data(), streamed.data(), n, false, scale);
      streamed.resize(n);
      std::string where;
      EXPECT_TRUE(sameBits(cached, streamed, &where)) << where;
      EXPECT_TRUE(sameBits(cached, shifted, &where)) << where;
    }
}

// Error control (EncodeParams::feedbackGain): a vector kernel that does it itself
// (Kernels::bucketEncodeGain: the AVX2 and AVX-512 sign encodes) gives the bits and residuals of the scalar
// kernel under encodeWith's generic error control, in cache, streamed and prefetched, on the edge
// data (non-finite and overflowing buckets take its fallback) and on buckets that are not a
// multiple of 32 elements.
TEST_P(IsaEquivalence, ErrorControlMatchesScalar) {
  const auto isas = vectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector ISA on this CPU";
  const CodecConfig cfg = GetParam();
  for (size_t n : {33ul, 512ul, 1000ul, 4037ul, 70001ul, cpu::kPrefetchEncodeElems + 4037})
    for (float gain : {0.3f, 0.5f})
      for (uint64_t span : {uint64_t{0}, uint64_t{cpu::kPrefetchEncodeElems}}) {
        if (span != 0 && n > 4037) continue;
        std::vector<float> g = edgeData(n, static_cast<uint32_t>(n) + 5), r = gaussian(n, 9, 0.05f),
                           acc = gaussian(n, 10);
        IsaRun ref = runWith(cpu::scalarKernels(), cfg, g, &r, acc, n * 3, span, gain);
        for (const cpu::Kernels* k : isas) {
          SCOPED_TRACE(std::string(k->isa) + " n=" + std::to_string(n) + " gain " + std::to_string(gain) +
                       (span ? " (a chunk of a long range)" : ""));
          expectSame(ref, runWith(*k, cfg, g, &r, acc, n * 3, span, gain));
        }
      }
}

// decodeSumParsed (the executor's kSum receive) is, bit for bit, the decodes added one after the
// other in source order and then scaled, for every ISA, codec, source count and odd size.
TEST_P(IsaEquivalence, DecodeSumIsTheDecodesAddedInOrder) {
  const CodecConfig cfg = GetParam();
  std::vector<const cpu::Kernels*> all = vectorIsas();
  all.insert(all.begin(), &cpu::scalarKernels());
  for (size_t n : {1ul, 33ul, 512ul, 1000ul, 4037ul, 9001ul}) {
    for (size_t sources : {1ul, 2ul, 3ul, 5ul, 9ul}) {  // 9: two groups of kMaxSumSources
      std::vector<std::vector<uint8_t>> wires;
      std::vector<WireInfo> infos;
      std::vector<const void*> ptrs;
      for (size_t j = 0; j < sources; ++j) {
        std::vector<float> g =
            j % 2 ? gaussian(n, static_cast<uint32_t>(11 * j + n), 3.0f) : edgeData(n, static_cast<uint32_t>(n + j));
        wires.push_back(encodeVec(cfg, g, nullptr));
      }
      for (const auto& w : wires) {
        infos.push_back(parseWire(w.data(), w.size()));
        ptrs.push_back(w.data());
      }
      for (float scale : {1.0f, 0.25f, 1.0f / 3.0f}) {
        for (const cpu::Kernels* k : all) {
          SCOPED_TRACE(std::string(k->isa) + " n=" + std::to_string(n) + " sources=" + std::to_string(sources) +
                       " scale=" + std::to_string(scale));
          std::vector<float> ref(n, 7.0f), got(n, -7.0f);
          for (size_t j = 0; j < sources; ++j)
            cpu::decodeParsedWith(*k, infos[j], ptrs[j], ref.data(), n, j > 0, j + 1 == sources ? scale : 1.0f);
          cpu::decodeSumParsedWith(*k, infos.data(), ptrs.data(), sources, got.data(), n, scale);
          std::string where;
          EXPECT_TRUE(sameBits(ref, got, &where)) << where;
        }
        // With a first term given raw (sra's owner: its own values), in its own buffer and in place.
        const std::vector<float> init = gaussian(n, static_cast<uint32_t>(n + 99), 2.0f);
        for (const cpu::Kernels* k : all) {
          SCOPED_TRACE(std::string(k->isa) + " init n=" + std::to_string(n) + " sources=" + std::to_string(sources) +
                       " scale=" + std::to_string(scale));
          std::vector<float> ref = init, got(n, -7.0f), inPlace = init;
          for (size_t j = 0; j < sources; ++j) cpu::decodeParsedWith(*k, infos[j], ptrs[j], ref.data(), n, true);
          for (float& v : ref) v = v * scale;
          cpu::decodeSumParsedWith(*k, infos.data(), ptrs.data(), sources, got.data(), n, scale, init.data());
          cpu::decodeSumParsedWith(*k, infos.data(), ptrs.data(), sources, inPlace.data(), n, scale, inPlace.data());
          std::string where;
          EXPECT_TRUE(sameBits(ref, got, &where)) << where;
          EXPECT_TRUE(sameBits(ref, inPlace, &where)) << "in place " << where;
          std::vector<float> alone(n, -7.0f), want = init;
          for (float& v : want) v = v * scale;
          cpu::decodeSumParsedWith(*k, infos.data(), ptrs.data(), 0, alone.data(), n, scale, init.data());
          EXPECT_TRUE(sameBits(want, alone, &where)) << "no sources " << where;
        }
      }
    }
  }
}

// Sources that disagree on the count or the codec are kMismatch, before anything is written.
TEST(DecodeSum, MismatchedSourcesAreRejected) {
  CodecConfig one;
  one.codec = CodecId::kOneBit;
  one.bucket = 512;
  CodecConfig four;
  four.codec = CodecId::kMaxMin;
  four.bits = 4;
  four.bucket = 512;
  std::vector<float> g = gaussian(1000, 1), shortG = gaussian(999, 2);
  std::vector<uint8_t> a = encodeVec(one, g, nullptr), b = encodeVec(four, g, nullptr),
                       c = encodeVec(one, shortG, nullptr);
  std::vector<float> out(1000, 5.0f);
  for (const auto* other : {&b, &c}) {
    WireInfo infos[2] = {parseWire(a.data(), a.size()), parseWire(other->data(), other->size())};
    const void* ptrs[2] = {a.data(), other->data()};
    try {
      decodeSumParsed(infos, ptrs, 2, out.data(), 1000);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
    }
    for (float v : out) ASSERT_EQ(v, 5.0f);
  }
  WireInfo info = parseWire(a.data(), a.size());
  const void* ptr = a.data();
  EXPECT_THROW(decodeSumParsed(&info, &ptr, 0, out.data(), 1000), Error);
}

// dyn8 codes are decided by comparisons with the thresholds: values exactly on and one ulp around
// every threshold (times a bucket absmax of 1 and of 3), and a dense sweep of magnitudes, must get
// the scalar path's codes.
TEST(IsaEquivalenceDyn8, ThresholdEdges) {
  const auto isas = vectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector ISA on this CPU";
  math::Dyn8Tables t;
  math::fillDyn8Tables(&t);
  CodecConfig cfg;
  cfg.codec = CodecId::kDyn8;
  cfg.bucket = 128;
  for (float scale : {1.0f, 3.0f}) {
    std::vector<float> g;
    for (int k = 0; k < 127; ++k) {
      if (g.size() % 128 == 0) g.push_back(scale);  // the bucket's absmax
      float th = t.threshold[k] * scale;
      for (float x : {th, std::nextafter(th, 0.0f), std::nextafter(th, 2.0f * scale)}) {
        if (g.size() % 128 == 0) g.push_back(scale);
        g.push_back(g.size() % 2 ? x : -x);
      }
    }
    // Plus a log-uniform sweep over [1e-8, 1] of the absmax, every decade densely covered.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> expo(-8.0f, 0.0f);
    for (int i = 0; i < 40000; ++i) {
      if (g.size() % 128 == 0) g.push_back(scale);
      g.push_back(std::pow(10.0f, expo(rng)) * scale * (i % 3 ? 1.0f : -1.0f));
    }
    while (g.size() % 128) g.push_back(0.0f);
    std::vector<float> r(g.size(), 0.0f), acc(g.size(), 0.0f);
    IsaRun ref = runWith(cpu::scalarKernels(), cfg, g, &r, acc, 0);
    for (const cpu::Kernels* k : isas) {
      SCOPED_TRACE(std::string(k->isa) + " scale " + std::to_string(scale));
      expectSame(ref, runWith(*k, cfg, g, &r, acc, 0));
    }
  }
}

std::vector<CodecConfig> isaConfigs() {
  std::vector<CodecConfig> v = allConfigs(512);
  for (uint32_t b : {32u, 96u, 640u, 1056u, 4096u})
    for (const CodecConfig& c : allConfigs(b))
      if (c.codec > CodecId::kBf16) v.push_back(c);
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, IsaEquivalence, ::testing::ValuesIn(isaConfigs()),
                         [](const auto& info) { return configName(info.param); });

TEST(CpuIsa, ActiveIsaIsSupportedAndCapped) {
  const char* name = cpuIsaName();
  ASSERT_NE(cpu::kernelsFor(name), nullptr) << name;
  if (const char* env = std::getenv("QCCL_CPU_ISA")) {
    if (std::string(env) == "scalar") {
      EXPECT_STREQ(name, "scalar");
    }
    if (std::string(env) == "avx2") {
      EXPECT_STRNE(name, "avx512");
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace qccl
