// Wire-format validation: every header field, truncation and count mismatches end in a clear Error.
#include <gtest/gtest.h>

#include <functional>

#include "codec_test_util.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace test {
namespace {

// Runs fn and returns the code of the qccl::Error it throws (kSuccess if none). The message must
// name the problem, so it is checked for a given substring as well.
ErrorCode codeOf(const std::function<void()>& fn, const std::string& mustContain = "") {
  try {
    fn();
  } catch (const Error& e) {
    if (!mustContain.empty()) {
      EXPECT_NE(std::string(e.what()).find(mustContain), std::string::npos) << e.what();
    }
    return e.code();
  }
  return ErrorCode::kSuccess;
}

WireHeader headerOf(const std::vector<uint8_t>& w) {
  WireHeader h;
  std::memcpy(&h, w.data(), sizeof(h));
  return h;
}

void putHeader(std::vector<uint8_t>* w, const WireHeader& h) { std::memcpy(w->data(), &h, sizeof(h)); }

// Decoding a corrupted buffer must fail with kMalformed through every entry point.
void expectMalformed(const std::vector<uint8_t>& w, size_t n, const std::string& what) {
  std::vector<float> out(n + 1, 1.0f);
  EXPECT_EQ(codeOf([&] { parseWire(w.data(), w.size()); }, what), ErrorCode::kMalformed);
  EXPECT_EQ(codeOf([&] { decode(w.data(), w.size(), out.data(), n); }, what), ErrorCode::kMalformed);
  EXPECT_EQ(codeOf([&] { decodeAdd(w.data(), w.size(), out.data(), n); }, what), ErrorCode::kMalformed);
  for (float f : out) ASSERT_EQ(f, 1.0f);  // nothing written on failure
}

class WireValidation : public ::testing::TestWithParam<CodecConfig> {
 protected:
  void SetUp() override {
    cfg_ = GetParam();
    g_ = gaussian(n_, 3);
    w_ = encodeVec(cfg_, g_, nullptr);
  }
  CodecConfig cfg_;
  const size_t n_ = 1000;
  std::vector<float> g_;
  std::vector<uint8_t> w_;
};

TEST_P(WireValidation, ValidBufferParses) {
  WireInfo info = parseWire(w_.data(), w_.size());
  CodecConfig r = resolveConfig(cfg_);
  EXPECT_EQ(info.cfg.codec, r.codec);
  EXPECT_EQ(info.cfg.bits, r.bits);
  EXPECT_EQ(info.cfg.bucket, r.bucket);
  EXPECT_EQ(info.count, n_);
  EXPECT_EQ(info.totalBytes, w_.size());
  // Trailing bytes beyond totalBytes are allowed (receive buffers may be larger).
  std::vector<uint8_t> longer = w_;
  longer.resize(w_.size() + 100, 0xAB);
  EXPECT_EQ(parseWire(longer.data(), longer.size()).totalBytes, w_.size());
}

TEST_P(WireValidation, EveryHeaderFieldIsChecked) {
  const WireHeader good = headerOf(w_);
  auto corrupt = [&](const std::function<void(WireHeader&)>& edit, const std::string& what) {
    SCOPED_TRACE(what);
    std::vector<uint8_t> w = w_;
    WireHeader h = good;
    edit(h);
    putHeader(&w, h);
    expectMalformed(w, n_, what);
  };
  corrupt([](WireHeader& h) { h.magic ^= 1; }, "magic");
  corrupt([](WireHeader& h) { h.version = 2; }, "version");
  corrupt([](WireHeader& h) { h.version = 0; }, "version");
  corrupt([](WireHeader& h) { h.codec = kNumCodecs; }, "codec");
  corrupt([](WireHeader& h) { h.codec = 0xff; }, "codec");
  corrupt([](WireHeader& h) { h.bits = 0; }, "bits");
  corrupt([](WireHeader& h) { h.bits = 3; }, "bits");
  corrupt([](WireHeader& h) { h.bits = h.bits == 32 ? 16 : 32; }, "bits");
  corrupt([](WireHeader& h) { h.flags |= 0x08; }, "flag");
  corrupt([](WireHeader& h) { h.flags |= 0x80; }, "flag");
  corrupt([](WireHeader& h) { h.bucket = h.bucket ? h.bucket + 1 : 512; }, "bucket");
  corrupt([](WireHeader& h) { h.bucket = h.bucket ? 0 : 32; }, "bucket");
  corrupt([](WireHeader& h) { h.bucket = h.bucket ? kMaxBucket + 32 : 64; }, "bucket");
  corrupt([](WireHeader& h) { h.count += 600; }, "payloadBytes");
  corrupt([](WireHeader& h) { h.count = ~0ull; }, "count");
  corrupt([](WireHeader& h) { h.count = 1ull << 62; }, "count");
  corrupt([](WireHeader& h) { h.payloadBytes += 4; }, "payloadBytes");
  corrupt([](WireHeader& h) { h.payloadBytes = 0; }, "payloadBytes");
  corrupt([](WireHeader& h) { h.payloadBytes = ~0ull; }, "payloadBytes");
  if (cfg_.codec != CodecId::kMaxMin) corrupt([](WireHeader& h) { h.flags |= kFlagStochastic; }, "stochastic");
  if (cfg_.codec == CodecId::kMaxMin)
    corrupt([](WireHeader& h) { h.codec = (uint8_t)CodecId::kOneBit; }, "");  // bits 4/2/8 invalid for onebit
}

TEST_P(WireValidation, SeqAndKnownFlagsAreNotErrors) {
  WireHeader h = headerOf(w_);
  h.seq = 0xdeadbeef;
  h.flags |= kFlagErrorFeedback | kFlagNonFinite;
  std::vector<uint8_t> w = w_;
  putHeader(&w, h);
  std::vector<float> out(n_);
  WireInfo info = decode(w.data(), w.size(), out.data(), n_);
  EXPECT_EQ(info.seq, 0xdeadbeefu);
  EXPECT_EQ(info.flags, h.flags);
}

TEST_P(WireValidation, TruncatedBuffersAreRejected) {
  for (size_t len : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, w_.size() / 2, w_.size() - 1}) {
    SCOPED_TRACE("length " + std::to_string(len));
    // A fresh allocation of exactly len bytes, so ASan catches any read past the end.
    std::vector<uint8_t> w(w_.begin(), w_.begin() + len);
    expectMalformed(w, n_, "truncated");
  }
  EXPECT_EQ(codeOf([] { parseWire(nullptr, 100); }), ErrorCode::kMalformed);
}

TEST_P(WireValidation, WrongCountIsAMismatch) {
  std::vector<float> out(n_ + 1, 0.0f);
  EXPECT_EQ(codeOf([&] { decode(w_.data(), w_.size(), out.data(), n_ - 1); }, "count"), ErrorCode::kMismatch);
  EXPECT_EQ(codeOf([&] { decodeAdd(w_.data(), w_.size(), out.data(), n_ + 1); }, "count"), ErrorCode::kMismatch);
  EXPECT_EQ(codeOf([&] { decode(w_.data(), w_.size(), nullptr, n_); }), ErrorCode::kInvalidArgument);
}

TEST_P(WireValidation, EncodeRejectsSmallOutput) {
  std::vector<uint8_t> out(w_.size() - 1);
  EXPECT_EQ(codeOf([&] { encode(cfg_, g_.data(), nullptr, n_, out.data(), out.size()); }, "capacity"),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { encode(cfg_, nullptr, nullptr, n_, w_.data(), w_.size()); }), ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(All, WireValidation, ::testing::ValuesIn(allConfigs(512)),
                         [](const auto& info) { return configName(info.param); });

TEST(CodecConfigTest, InvalidConfigsAreRejected) {
  auto bad = [](CodecId c, int bits, uint32_t bucket, bool sr) {
    CodecConfig cfg;
    cfg.codec = c;
    cfg.bits = bits;
    cfg.bucket = bucket;
    cfg.stochastic = sr;
    return codeOf([&] { validateConfig(cfg); });
  };
  EXPECT_EQ(bad(CodecId::kMaxMin, 3, 512, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kMaxMin, 16, 512, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kOneBit, 2, 512, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kFp16, 8, 512, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kOneBit, 0, 100, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kOneBit, 0, 0, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kDyn8, 0, kMaxBucket + 32, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kOneBit, 0, 512, true), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(static_cast<CodecId>(7), 0, 512, false), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad(CodecId::kMaxMin, 2, 32, true), ErrorCode::kSuccess);
  EXPECT_EQ(bad(CodecId::kDyn8, 8, kMaxBucket, false), ErrorCode::kSuccess);
  EXPECT_EQ(bad(CodecId::kFp32, 0, 7, false), ErrorCode::kSuccess);  // the casts have no buckets
}

TEST(CodecConfigTest, ResolveFillsWireBits) {
  const int want[kNumCodecs] = {32, 16, 16, 1, 1, 4, 8};
  for (int c = 0; c < kNumCodecs; ++c) {
    CodecConfig cfg;
    cfg.codec = static_cast<CodecId>(c);
    EXPECT_EQ(resolveConfig(cfg).bits, want[c]) << codecName(cfg.codec);
  }
}

TEST(CodecConfigTest, NamesRoundTrip) {
  for (int c = 0; c < kNumCodecs; ++c) {
    CodecId id = static_cast<CodecId>(c);
    EXPECT_EQ(parseCodecName(codecName(id)), id);
  }
  EXPECT_EQ(parseCodecName("none"), CodecId::kFp32);
  EXPECT_EQ(codeOf([] { parseCodecName("int3"); }, "int3"), ErrorCode::kInvalidArgument);
  std::string isa = cpuIsaName();
  EXPECT_TRUE(isa == "scalar" || isa == "avx2" || isa == "avx512") << isa;
}

}  // namespace
}  // namespace test
}  // namespace qccl
