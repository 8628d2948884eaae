// Allreduce over loopback ranks: every codec x every algorithm x ranks 1..8 x sizes, checked
// exactly (lossless paths), against the reference simulation (lossy paths), and bit for bit
// across ranks.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "coll_test_util.hpp"
#include "core/config.hpp"

namespace qccl {
namespace test {
namespace {

struct CodecCase {
  CodecId codec;
  int bits;
};

const CodecCase kCodecs[] = {{CodecId::kFp32, 0},   {CodecId::kFp16, 0},      {CodecId::kBf16, 0},
                             {CodecId::kOneBit, 0}, {CodecId::kSignScale, 0}, {CodecId::kMaxMin, 2},
                             {CodecId::kMaxMin, 4}, {CodecId::kMaxMin, 8},    {CodecId::kDyn8, 0}};
const Algo kAlgos[] = {Algo::kAuto, Algo::kRing, Algo::kSra, Algo::kAllgather};

bool isCastCodec(CodecId c) { return c == CodecId::kFp32 || c == CodecId::kFp16 || c == CodecId::kBf16; }

// Which algorithm `auto` must pick (the rule documented in communicator.cc).
Algo expectedAuto(CodecId c, size_t count, int n, size_t minCompress) {
  if (c == CodecId::kFp32 || count * 4 < minCompress || isCastCodec(c)) return Algo::kRing;
  return n >= 3 ? Algo::kSra : Algo::kAllgather;
}

// One allreduce of exactInput on n ranks, compared with the reference. Returns false on failure.
void checkOne(const CodecCase& cc, Algo algo, int n, size_t count, const Options& opts, bool inPlace) {
  SCOPED_TRACE("codec " + std::string(codecName(cc.codec)) + "/" + std::to_string(cc.bits) + " algo " + algoName(algo) +
               " ranks " + std::to_string(n) + " count " + std::to_string(count) +
               (inPlace ? " in place" : " out of place"));
  CodecConfig cfg = opts.codec;
  cfg.codec = cc.codec;
  cfg.bits = cc.bits;
  cfg = resolveConfig(cfg);
  std::vector<std::vector<float>> x, out(n);
  for (int r = 0; r < n; ++r) x.push_back(exactInput(count, r));

  if (algo == Algo::kRing && !isCastCodec(cc.codec)) {
    // The ring refuses bucket codecs on every rank, before any message is sent.
    runRanks(n, opts, [&](Communicator& c, int r) {
      TensorOpts t;
      t.codec = cc.codec;
      t.bits = cc.bits;
      t.algo = algo;
      std::vector<float> buf = x[r];
      try {
        c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
        ADD_FAILURE() << "ring accepted a bucket codec";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      }
      EXPECT_FALSE(c.failed());
    });
    return;
  }

  runRanks(n, opts, [&](Communicator& c, int r) {
    TensorOpts t;
    t.id = 42;
    t.codec = cc.codec;
    t.bits = cc.bits;
    t.algo = algo;
    std::vector<float> in = x[r];
    out[r].assign(count, -7.0f);
    if (inPlace) {
      c.allreduce(in.data(), in.data(), count, DataType::kFloat32, RedOp::kSum, t);
      out[r] = in;
    } else {
      c.allreduce(in.data(), out[r].data(), count, DataType::kFloat32, RedOp::kSum, t);
      EXPECT_TRUE(bitEqual(in, x[r])) << "input modified out of place";
    }
  });

  for (int r = 1; r < n; ++r) EXPECT_TRUE(bitEqual(out[r], out[0])) << "rank " << r << " differs from rank 0";
  Algo eff = algo == Algo::kAuto ? expectedAuto(cc.codec, count, n, opts.minCompressBytes) : algo;
  CodecConfig effCfg = cfg;
  if (algo == Algo::kAuto && eff == Algo::kRing && !isCastCodec(cc.codec)) effCfg = resolveConfig(CodecConfig{});
  if (algo == Algo::kAuto && count * 4 < opts.minCompressBytes) effCfg = resolveConfig(CodecConfig{});
  std::vector<float> ref;
  RefState st;
  if (eff == Algo::kRing) {
    ref = refRing(effCfg, x);
  } else if (eff == Algo::kSra) {
    ref = refSra(effCfg, x, &st, opts.errorFeedback);
  } else {
    ref = refAllgatherReduce(effCfg, x, &st, opts.errorFeedback);
  }
  if (effCfg.codec == CodecId::kFp32) {
    // Lossless: the exact integer sum, whatever the order.
    for (size_t i = 0; i < count; ++i) {
      float exact = 0;
      for (int r = 0; r < n; ++r) exact += x[r][i];
      ASSERT_EQ(out[0][i], exact) << "element " << i;
    }
  }
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[0][i], ref[i]) << "element " << i << " vs reference";
}

class AllreduceMatrix : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Small sizes over the full cross product. A small bucket and chunk make 1000 elements span
// many buckets, several chunks per message and more chunks than pipeline slots.
TEST_P(AllreduceMatrix, SmallSizesAllRanks) {
  const CodecCase cc = kCodecs[std::get<0>(GetParam())];
  const Algo algo = kAlgos[std::get<1>(GetParam())];
  Options opts;
  opts.codec.bucket = 64;
  opts.chunkBytes = 256;
  opts.minCompressBytes = 2048;  // auto: 0, 1, 7 stay fp32, 1000 elements compress
  opts.localCompress = true;     // loopback ranks share one host: compress as asked
  opts.timeoutSec = 30;
  for (int n = 1; n <= 8; ++n)
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) checkOne(cc, algo, n, count, opts, n % 2);
}

INSTANTIATE_TEST_SUITE_P(Coll, AllreduceMatrix, ::testing::Combine(::testing::Range(0, 9), ::testing::Range(0, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           const CodecCase& cc = kCodecs[std::get<0>(info.param)];
                           std::string name = std::string(codecName(cc.codec)) +
                                              (cc.bits ? std::to_string(cc.bits) : std::string()) + "_" +
                                              algoName(kAlgos[std::get<1>(info.param)]);
                           return name;
                         });

// Pipeline depths 1 (no overlap: every slot is reused right away) and 3, with many chunks.
TEST(AllreducePipeline, DepthsOneAndThree) {
  for (int depth : {1, 3}) {
    Options opts;
    opts.codec.bucket = 32;
    opts.chunkBytes = 128;
    opts.pipelineDepth = depth;
    opts.timeoutSec = 30;
    SCOPED_TRACE("depth " + std::to_string(depth));
    checkOne({CodecId::kOneBit, 0}, Algo::kSra, 4, 5000, opts, true);
    checkOne({CodecId::kFp16, 0}, Algo::kRing, 5, 5000, opts, false);
    checkOne({CodecId::kMaxMin, 8}, Algo::kAllgather, 3, 5000, opts, true);
  }
}

// 2^20 + 3 elements for a subset of combinations (the full product would take minutes on two
// cores): each algorithm with a lossless and a lossy codec, at 2, 3 and 8 ranks, with 256 KiB
// chunks so that every message is pipelined.
TEST(AllreduceLarge, SelectedCombinations) {
  const size_t count = (size_t{1} << 20) + 3;
  Options opts;
  opts.chunkBytes = 256 << 10;
  opts.timeoutSec = 60;
  opts.localCompress = true;  // loopback ranks share one host: compress as asked
  struct Combo {
    CodecCase cc;
    Algo algo;
    int n;
  };
  const Combo combos[] = {
      {{CodecId::kFp32, 0}, Algo::kAuto, 8},      {{CodecId::kFp16, 0}, Algo::kRing, 3},
      {{CodecId::kOneBit, 0}, Algo::kSra, 8},     {{CodecId::kMaxMin, 4}, Algo::kSra, 3},
      {{CodecId::kDyn8, 0}, Algo::kAllgather, 2}, {{CodecId::kSignScale, 0}, Algo::kAuto, 2},
  };
  for (const Combo& c : combos) checkOne(c.cc, c.algo, c.n, count, opts, true);
}

}  // namespace
}  // namespace test
}  // namespace qccl
