// QCCL_* environment overrides: every variable in qccl.h's list is parsed, bad values are refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace {

const char* const kVars[] = {"QCCL_CODEC",
                             "QCCL_BITS",
                             "QCCL_BUCKET",
                             "QCCL_STOCHASTIC",
                             "QCCL_SEED",
                             "QCCL_MIN_COMPRESS",
                             "QCCL_CHUNK_BYTES",
                             "QCCL_PIPELINE",
                             "QCCL_TIMEOUT",
                             "QCCL_WARMUP",
                             "QCCL_ALGO",
                             "QCCL_ERROR_FEEDBACK",
                             "QCCL_MAX_RESIDUAL_BYTES",
                             "QCCL_INTRA_CODEC",
                             "QCCL_AUTO_HIER",
                             "QCCL_AUTO_RING",
                             "QCCL_SHM",
                             "QCCL_SHM_CHUNK_BYTES",
                             "QCCL_LOCAL_COMPRESS",
                             "QCCL_CPU_ISA",
                             "QCCL_SOCKET_IFNAME",
                             "QCCL_MPI_NBC_RING"};

// Clears every QCCL_* variable before and after each test so that tests do not leak settings.
class Env : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : kVars) unsetenv(v);
  }
};

TEST_F(Env, MpiNbcRing) {
  EXPECT_TRUE(env::mpiNbcRing());
  setenv("QCCL_MPI_NBC_RING", "0", 1);
  EXPECT_FALSE(env::mpiNbcRing());
  setenv("QCCL_MPI_NBC_RING", "on", 1);
  EXPECT_TRUE(env::mpiNbcRing());
  setenv("QCCL_MPI_NBC_RING", "maybe", 1);
  EXPECT_THROW(env::mpiNbcRing(), Error);
}

TEST_F(Env, DefaultsWithoutVariables) {
  Options o = optionsFromEnv();
  EXPECT_EQ(o.codec.codec, CodecId::kFp32);
  EXPECT_EQ(o.codec.bucket, 512u);
  EXPECT_EQ(o.minCompressBytes, size_t{64} << 10);
  EXPECT_EQ(o.chunkBytes, 0u);  // by codec (chunkBytesFor)
  EXPECT_EQ(o.pipelineDepth, 2);
  EXPECT_EQ(o.timeoutSec, 300.0);
  EXPECT_EQ(o.warmupCalls, 0);
  EXPECT_EQ(o.algo, Algo::kAuto);
  EXPECT_TRUE(o.errorFeedback);
  EXPECT_EQ(o.intraCodec, CodecId::kFp32);
  EXPECT_TRUE(o.autoHier);
  EXPECT_TRUE(o.autoRing);
  EXPECT_TRUE(o.shm);
  EXPECT_EQ(o.shmChunkBytes, size_t{1} << 20);
  EXPECT_FALSE(o.localCompress);
}

TEST_F(Env, EveryVariableOverrides) {
  setenv("QCCL_CODEC", "maxmin", 1);
  setenv("QCCL_BITS", "8", 1);
  setenv("QCCL_BUCKET", "1024", 1);
  setenv("QCCL_STOCHASTIC", "1", 1);
  setenv("QCCL_SEED", "12345678901", 1);
  setenv("QCCL_MIN_COMPRESS", "1M", 1);
  setenv("QCCL_CHUNK_BYTES", "262144", 1);
  setenv("QCCL_PIPELINE", "4", 1);
  setenv("QCCL_TIMEOUT", "2.5", 1);
  setenv("QCCL_WARMUP", "10", 1);
  setenv("QCCL_ALGO", "sra", 1);
  setenv("QCCL_ERROR_FEEDBACK", "0", 1);
  setenv("QCCL_MAX_RESIDUAL_BYTES", "256M", 1);
  setenv("QCCL_INTRA_CODEC", "bf16", 1);
  setenv("QCCL_AUTO_HIER", "0", 1);
  setenv("QCCL_AUTO_RING", "0", 1);
  setenv("QCCL_SHM", "0", 1);
  setenv("QCCL_SHM_CHUNK_BYTES", "64K", 1);
  setenv("QCCL_LOCAL_COMPRESS", "1", 1);
  Options o = optionsFromEnv();
  EXPECT_EQ(o.codec.codec, CodecId::kMaxMin);
  EXPECT_EQ(o.codec.bits, 8);
  EXPECT_EQ(o.codec.bucket, 1024u);
  EXPECT_TRUE(o.codec.stochastic);
  EXPECT_EQ(o.codec.seed, 12345678901ull);
  EXPECT_EQ(o.minCompressBytes, size_t{1} << 20);
  EXPECT_EQ(o.chunkBytes, size_t{262144});
  EXPECT_EQ(o.pipelineDepth, 4);
  EXPECT_EQ(o.timeoutSec, 2.5);
  EXPECT_EQ(o.warmupCalls, 10);
  EXPECT_EQ(o.algo, Algo::kSra);
  EXPECT_FALSE(o.errorFeedback);
  EXPECT_EQ(o.maxResidualBytes, size_t{256} << 20);
  EXPECT_EQ(o.intraCodec, CodecId::kBf16);
  EXPECT_FALSE(o.autoHier);
  EXPECT_FALSE(o.autoRing);
  EXPECT_FALSE(o.shm);
  EXPECT_EQ(o.shmChunkBytes, size_t{64} << 10);
  EXPECT_TRUE(o.localCompress);
}

// The variables the lower layers use are read here too (config.cc is the only reader).
TEST_F(Env, LowerLayerVariablesAreReadInOnePlace) {
  EXPECT_EQ(env::cpuIsaCap(), "");
  EXPECT_EQ(env::socketIfname(), "");
  setenv("QCCL_CPU_ISA", "scalar", 1);
  setenv("QCCL_SOCKET_IFNAME", "eth7", 1);
  EXPECT_EQ(env::cpuIsaCap(), "scalar");
  EXPECT_EQ(env::socketIfname(), "eth7");
}

TEST_F(Env, OverridesApplyToTheGivenBase) {
  Options base;
  base.warmupCalls = 3;
  setenv("QCCL_CODEC", "none", 1);
  Options o = optionsFromEnv(base);
  EXPECT_EQ(o.warmupCalls, 3);
  EXPECT_EQ(o.codec.codec, CodecId::kFp32);
}

TEST_F(Env, BadValuesAreInvalidArguments) {
  const std::vector<std::pair<const char*, const char*>> bad = {{"QCCL_CODEC", "zip"},
                                                                {"QCCL_BITS", "3"},
                                                                {"QCCL_BITS", "4x"},
                                                                {"QCCL_BUCKET", "100"},
                                                                {"QCCL_BUCKET", "-32"},
                                                                {"QCCL_BUCKET", "131072"},
                                                                {"QCCL_STOCHASTIC", "maybe"},
                                                                {"QCCL_SEED", "-1"},
                                                                {"QCCL_MIN_COMPRESS", "1T"},
                                                                {"QCCL_CHUNK_BYTES", "0"},
                                                                {"QCCL_CHUNK_BYTES", ""},
                                                                {"QCCL_PIPELINE", "0"},
                                                                {"QCCL_TIMEOUT", "0"},
                                                                {"QCCL_TIMEOUT", "nan"},
                                                                {"QCCL_TIMEOUT", "5s"},
                                                                {"QCCL_WARMUP", "-2"},
                                                                {"QCCL_ALGO", "tree"},
                                                                {"QCCL_ERROR_FEEDBACK", "2"},
                                                                {"QCCL_CHUNK_BYTES", "2G"},
                                                                {"QCCL_CHUNK_BYTES", "3"},
                                                                {"QCCL_PIPELINE", "65"},
                                                                {"QCCL_MAX_RESIDUAL_BYTES", "lots"},
                                                                {"QCCL_INTRA_CODEC", "onebit"},
                                                                {"QCCL_INTRA_CODEC", "zip"}};
  for (auto [var, value] : bad) {
    setenv(var, value, 1);
    try {
      optionsFromEnv();
      ADD_FAILURE() << var << "=" << value << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << "message does not name " << var;
    }
    unsetenv(var);
  }
}

TEST(AlgoNames, RoundTrip) {
  for (Algo a : {Algo::kAuto, Algo::kRing, Algo::kSra, Algo::kAllgather}) EXPECT_EQ(parseAlgoName(algoName(a)), a);
  EXPECT_THROW(parseAlgoName("Ring"), Error);
}

}  // namespace
}  // namespace qccl
