// selectAlgorithm: the rule of `auto` and the checks of explicit requests, as a pure function.
#include <gtest/gtest.h>

#include <limits>

#include "core/select.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace {

SelectInput input(CodecId codec, size_t count, int nranks) {
  SelectInput in;
  in.codec.codec = codec;
  in.count = count;
  in.nranks = nranks;
  in.minCompressBytes = 64 << 10;
  in.hasId = true;
  return in;
}

TEST(Select, AutoUncompressedGoesNativeWhenTheTransportHasIt) {
  SelectInput in = input(CodecId::kFp32, 1 << 20, 4);
  in.nativeAvailable = true;
  Selection s = selectAlgorithm(in);
  EXPECT_TRUE(s.native);
  EXPECT_EQ(s.codec.codec, CodecId::kFp32);
  EXPECT_FALSE(s.errorFeedback);
  in.nativeAvailable = false;
  s = selectAlgorithm(in);
  EXPECT_FALSE(s.native);
  EXPECT_EQ(s.algo, Algo::kRing);
}

// Where the communicator sets ringOverNativeBytes (a ring across hosts at the eager limit, 4 ranks or
// more), uncompressed tensors from that size on take qccl's fp32 ring; smaller ones, compressed
// ones and warm-up calls below it stay as they were.
TEST(Select, AutoUncompressedTakesTheRingFromRingOverNativeBytes) {
  SelectInput in = input(CodecId::kFp32, kRingOverNativeBytes / 4, 4);
  in.nativeAvailable = true;
  in.ringOverNativeBytes = kRingOverNativeBytes;
  Selection s = selectAlgorithm(in);
  EXPECT_FALSE(s.native);
  EXPECT_FALSE(s.shm);
  EXPECT_EQ(s.algo, Algo::kRing);
  EXPECT_EQ(s.codec.codec, CodecId::kFp32);
  EXPECT_FALSE(s.errorFeedback);
  in.count = kRingOverNativeBytes / 4 - 1;
  EXPECT_TRUE(selectAlgorithm(in).native);
  in.count = kRingOverNativeBytes;
  in.codec.codec = CodecId::kOneBit;
  s = selectAlgorithm(in);
  EXPECT_FALSE(s.native);
  EXPECT_EQ(s.algo, Algo::kSra);
  in.warmup = true;  // a warm-up call of a large tensor: uncompressed, in the ring too
  s = selectAlgorithm(in);
  EXPECT_FALSE(s.native);
  EXPECT_EQ(s.algo, Algo::kRing);
  EXPECT_EQ(s.codec.codec, CodecId::kFp32);
  in.ringOverNativeBytes = 0;
  EXPECT_TRUE(selectAlgorithm(in).native);
}

TEST(Select, AutoBelowTheThresholdIsUncompressedWhateverTheCodec) {
  SelectInput in = input(CodecId::kOneBit, 10000, 4);  // 40000 bytes < 64 KiB
  in.nativeAvailable = true;
  Selection s = selectAlgorithm(in);
  EXPECT_TRUE(s.native);
  EXPECT_EQ(s.codec.codec, CodecId::kFp32);
  in.count = 20000;  // 80000 bytes: compressed
  s = selectAlgorithm(in);
  EXPECT_FALSE(s.native);
  EXPECT_EQ(s.algo, Algo::kSra);
  EXPECT_EQ(s.codec.codec, CodecId::kOneBit);
  EXPECT_TRUE(s.errorFeedback);
}

// One host with the shared segment: host buffers are summed exactly there whatever the codec;
// device buffers, localCompress and explicit schedules compress as asked; the tensor-id check
// still applies, so that a program that runs on one host runs on many.
TEST(Select, AutoOnOneHostSumsHostBuffersExactlyWhateverTheCodec) {
  for (CodecId c : {CodecId::kFp16, CodecId::kOneBit, CodecId::kMaxMin}) {
    SelectInput in = input(c, 1 << 20, 4);
    in.shmAvailable = true;
    in.nativeAvailable = true;
    Selection s = selectAlgorithm(in);
    EXPECT_TRUE(s.shm);
    EXPECT_FALSE(s.native);
    EXPECT_EQ(s.codec.codec, CodecId::kFp32);
    EXPECT_FALSE(s.errorFeedback);
    in.localCompress = true;
    EXPECT_FALSE(selectAlgorithm(in).shm);
    EXPECT_EQ(selectAlgorithm(in).codec.codec, c);
    in.localCompress = false;
    in.deviceBuffers = true;
    EXPECT_FALSE(selectAlgorithm(in).shm);
    EXPECT_EQ(selectAlgorithm(in).codec.codec, c);
    in.deviceBuffers = false;
    in.requested = Algo::kSra;
    EXPECT_FALSE(selectAlgorithm(in).shm);
    EXPECT_EQ(selectAlgorithm(in).algo, Algo::kSra);
  }
  SelectInput in = input(CodecId::kOneBit, 1 << 20, 4);
  in.shmAvailable = true;
  in.hasId = false;
  EXPECT_THROW(selectAlgorithm(in), Error);
}

TEST(Select, AutoPicksRingForCastsSraForThreeRanksAllgatherForTwo) {
  EXPECT_EQ(selectAlgorithm(input(CodecId::kFp16, 1 << 20, 4)).algo, Algo::kRing);
  EXPECT_FALSE(selectAlgorithm(input(CodecId::kFp16, 1 << 20, 4)).errorFeedback);
  EXPECT_EQ(selectAlgorithm(input(CodecId::kMaxMin, 1 << 20, 3)).algo, Algo::kSra);
  EXPECT_EQ(selectAlgorithm(input(CodecId::kMaxMin, 1 << 20, 2)).algo, Algo::kAllgather);
  EXPECT_EQ(selectAlgorithm(input(CodecId::kDyn8, 1 << 20, 1)).algo, Algo::kAllgather);
}

TEST(Select, WarmupSendsUncompressedAndKeepsExplicitAlgorithmsOffTheNativePath) {
  SelectInput in = input(CodecId::kOneBit, 1 << 20, 4);
  in.nativeAvailable = true;
  in.warmup = true;
  Selection s = selectAlgorithm(in);
  EXPECT_TRUE(s.native);
  EXPECT_EQ(s.codec.codec, CodecId::kFp32);
  in.requested = Algo::kSra;
  s = selectAlgorithm(in);
  EXPECT_FALSE(s.native) << "an explicit algorithm is qccl's own, also while warming up";
  EXPECT_EQ(s.algo, Algo::kRing);
  EXPECT_EQ(s.codec.codec, CodecId::kFp32);
}

TEST(Select, ExplicitRingRefusesBucketCodecs) {
  SelectInput in = input(CodecId::kOneBit, 1 << 20, 4);
  in.requested = Algo::kRing;
  try {
    selectAlgorithm(in);
    FAIL() << "ring accepted onebit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  in.codec.codec = CodecId::kBf16;
  EXPECT_EQ(selectAlgorithm(in).algo, Algo::kRing);
}

TEST(Select, ErrorFeedbackNeedsATensorId) {
  for (Algo a : {Algo::kAuto, Algo::kSra, Algo::kAllgather}) {
    SelectInput in = input(CodecId::kSignScale, 1 << 20, 4);
    in.requested = a;
    in.hasId = false;
    try {
      selectAlgorithm(in);
      FAIL() << "no id accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidUsage);
      EXPECT_NE(std::string(e.what()).find("tensor id"), std::string::npos) << e.what();
    }
    in.errorFeedback = false;
    EXPECT_FALSE(selectAlgorithm(in).errorFeedback) << "without error feedback no id is needed";
  }
  // Calls that keep no residual need no id either.
  SelectInput in = input(CodecId::kFp16, 1 << 20, 4);
  in.hasId = false;
  EXPECT_NO_THROW(selectAlgorithm(in));
  in = input(CodecId::kOneBit, 100, 4);  // below the threshold
  in.hasId = false;
  EXPECT_NO_THROW(selectAlgorithm(in));
}

TEST(Select, IsAFunctionOfItsInputs) {
  // The same inputs give the same answer: the property the cross-rank agreement relies on.
  for (CodecId c : {CodecId::kFp32, CodecId::kFp16, CodecId::kOneBit, CodecId::kMaxMin}) {
    for (size_t count : {size_t{0}, size_t{16383}, size_t{16384}, size_t{1} << 22}) {
      for (int n : {1, 2, 3, 8}) {
        SelectInput in = input(c, count, n);
        in.nativeAvailable = (count & 1) == 0;
        Selection a = selectAlgorithm(in), b = selectAlgorithm(in);
        EXPECT_EQ(a.algo, b.algo);
        EXPECT_EQ(a.native, b.native);
        EXPECT_EQ(a.codec.codec, b.codec.codec);
        EXPECT_EQ(a.errorFeedback, b.errorFeedback);
        EXPECT_NE(a.algo, Algo::kAuto);
      }
    }
  }
}

}  // namespace
}  // namespace qccl

namespace qccl {
namespace {

// auto's choice after its trials: the slowest rank of each candidate decides, the second (hier, or
// the fp32 ring) needs to be at least 5% faster, and a missing or broken time keeps the first.
TEST(Select, PreferSecondComparesTheSlowestRanksWithAMargin) {
  const float faster[] = {1.0f, 0.5f, 1.2f, 0.6f};  // first max 1.2, second max 0.6
  EXPECT_TRUE(preferSecond(faster, 2));
  const float slowRank[] = {1.0f, 0.5f, 1.0f, 1.5f};  // one rank slow in the second: 1.5 > 1.0
  EXPECT_FALSE(preferSecond(slowRank, 2));
  const float close[] = {1.0f, 0.96f, 1.0f, 0.96f};  // 4% faster: within the margin
  EXPECT_FALSE(preferSecond(close, 2));
  const float edge[] = {1.0f, 0.94f, 1.0f, 0.94f};
  EXPECT_TRUE(preferSecond(edge, 2));
  const float missing[] = {1.0f, 0.5f, 0.0f, 0.5f};
  EXPECT_FALSE(preferSecond(missing, 2));
  const float nan[] = {1.0f, 0.5f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_FALSE(preferSecond(nan, 2));
  const float inf[] = {std::numeric_limits<float>::infinity(), 0.5f, 1.0f, 0.5f};
  EXPECT_FALSE(preferSecond(inf, 2));
  EXPECT_FALSE(preferSecond(faster, 0));
}

}  // namespace
}  // namespace qccl
