// The C API over the loopback transport: one thread per rank in this process.
#include <gtest/gtest.h>

#include <atomic>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "loopback_ranks.hpp"
#include "qccl/qccl.h"
#include "qccl/qccl.hpp"

namespace {

using qccl_test::runRanks;

qcclConfig_t testConfig(double timeoutSec = 20.0) {
  qcclConfig_t cfg;
  EXPECT_EQ(qcclConfigInit(&cfg), qcclSuccess);
  cfg.timeoutSec = timeoutSec;
  return cfg;
}

// Small integers: every partial sum is exact in fp32, in any order.
float exactInput(int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 1001) * 3 - 1500 + rank); }

float smoothInput(int rank, size_t i) { return std::sin(0.001f * static_cast<float>(i) + rank) * (1.0f + rank); }

}  // namespace

TEST(CApi, ErrorStringsAndVersion) {
  for (int r = 0; r < qcclNumResults; ++r) {
    const char* s = qcclGetErrorString(static_cast<qcclResult_t>(r));
    ASSERT_NE(s, nullptr);
    EXPECT_GT(std::strlen(s), 3u);
  }
  EXPECT_STREQ(qcclGetErrorString(static_cast<qcclResult_t>(99)), "unknown qcclResult_t");
  int v = 0;
  EXPECT_EQ(qcclGetVersion(&v), qcclSuccess);
  EXPECT_EQ(v, QCCL_VERSION_MAJOR * 10000 + QCCL_VERSION_MINOR * 100 + QCCL_VERSION_PATCH);
  EXPECT_EQ(qcclGetVersion(nullptr), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("version is NULL"), std::string::npos);
}

TEST(CApi, ConfigInitReadsEnvironment) {
  qcclConfig_t cfg;
  ASSERT_EQ(qcclConfigInit(&cfg), qcclSuccess);
  EXPECT_EQ(cfg.structSize, sizeof(qcclConfig_t));
  EXPECT_GT(cfg.timeoutSec, 0.0);
  setenv("QCCL_CODEC", "onebit", 1);
  setenv("QCCL_TIMEOUT", "7.5", 1);
  setenv("QCCL_ALGO", "sra", 1);
  ASSERT_EQ(qcclConfigInit(&cfg), qcclSuccess) << qcclGetLastError(nullptr);
  EXPECT_EQ(cfg.codec, qcclCodecOneBit);
  EXPECT_DOUBLE_EQ(cfg.timeoutSec, 7.5);
  EXPECT_EQ(cfg.algo, qcclAlgoSra);
  setenv("QCCL_CODEC", "sevenbit", 1);
  EXPECT_EQ(qcclConfigInit(&cfg), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("QCCL_CODEC"), std::string::npos) << qcclGetLastError(nullptr);
  unsetenv("QCCL_CODEC");
  unsetenv("QCCL_TIMEOUT");
  unsetenv("QCCL_ALGO");
}

TEST(CApi, BadConfigIsRejected) {
  qcclComm_t comms[2] = {nullptr, nullptr};
  qcclConfig_t cfg = testConfig();
  cfg.structSize = 3;
  EXPECT_EQ(qcclCommInitLoopback(comms, 2, &cfg), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("structSize"), std::string::npos);
  cfg = testConfig();
  cfg.codec = 42;
  EXPECT_EQ(qcclCommInitLoopback(comms, 2, &cfg), qcclInvalidArgument);
  cfg = testConfig();
  cfg.bucket = 100;  // not a multiple of 32
  EXPECT_EQ(qcclCommInitLoopback(comms, 2, &cfg), qcclInvalidArgument);
  cfg = testConfig();
  cfg.timeoutSec = -1;
  EXPECT_EQ(qcclCommInitLoopback(comms, 2, &cfg), qcclInvalidArgument);
  cfg = testConfig();
  cfg.algo = 9;
  EXPECT_EQ(qcclCommInitLoopback(comms, 2, &cfg), qcclInvalidArgument);
  cfg = testConfig();
  cfg.intraCodec = qcclCodecOneBit;  // only fp32 and the casts inside a host
  EXPECT_EQ(qcclCommInitLoopback(comms, 2, &cfg), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("intraCodec"), std::string::npos) << qcclGetLastError(nullptr);
  EXPECT_EQ(comms[0], nullptr);
  EXPECT_EQ(qcclCommInitLoopback(comms, 0, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclCommInitLoopback(nullptr, 2, nullptr), qcclInvalidArgument);
}

TEST(CApi, BadArgumentsGiveClearErrors) {
  qcclConfig_t cfg = testConfig();
  qcclComm_t comm = nullptr;
  ASSERT_EQ(qcclCommInitLoopback(&comm, 1, &cfg), qcclSuccess);
  float buf[4] = {1, 2, 3, 4};
  auto lastErr = [&] { return std::string(qcclGetLastError(comm)); };
  EXPECT_EQ(qcclAllreduce(nullptr, buf, 4, qcclFloat32, qcclSum, nullptr, comm, nullptr), qcclInvalidArgument);
  EXPECT_NE(lastErr().find("sendbuff is NULL"), std::string::npos) << lastErr();
  EXPECT_EQ(qcclAllreduce(buf, nullptr, 4, qcclFloat32, qcclSum, nullptr, comm, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclAllreduce(buf, buf, 4, static_cast<qcclDataType_t>(7), qcclSum, nullptr, comm, nullptr),
            qcclInvalidArgument);
  EXPECT_NE(lastErr().find("datatype"), std::string::npos);
  EXPECT_EQ(qcclAllreduce(buf, buf, 4, qcclFloat32, static_cast<qcclRedOp_t>(5), nullptr, comm, nullptr),
            qcclInvalidArgument);
  EXPECT_EQ(qcclAllreduce(buf, buf, static_cast<size_t>(-4), qcclFloat32, qcclSum, nullptr, comm, nullptr),
            qcclInvalidArgument);
  EXPECT_NE(lastErr().find("negative"), std::string::npos) << lastErr();
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = 17;
  EXPECT_EQ(qcclAllreduce(buf, buf, 4, qcclFloat32, qcclSum, &t, comm, nullptr), qcclInvalidArgument);
  EXPECT_NE(lastErr().find("opts->codec"), std::string::npos);
  t = QCCL_TENSOR_OPTS_INIT;
  t.algo = 12;
  EXPECT_EQ(qcclAllreduce(buf, buf, 4, qcclFloat32, qcclSum, &t, comm, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclAllreduce(buf, buf, 4, qcclFloat32, qcclSum, nullptr, nullptr, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclAllgather(nullptr, buf, 2, qcclFloat32, nullptr, comm, nullptr), qcclInvalidArgument);
  // Zero elements need no buffers.
  EXPECT_EQ(qcclAllreduce(nullptr, nullptr, 0, qcclFloat32, qcclSum, nullptr, comm, nullptr), qcclSuccess) << lastErr();
  int n = -1, r = -1;
  EXPECT_EQ(qcclCommCount(comm, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclCommCount(nullptr, &n), qcclInvalidArgument);
  EXPECT_EQ(qcclCommCount(comm, &n), qcclSuccess);
  EXPECT_EQ(qcclCommUserRank(comm, &r), qcclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(qcclCommGetStats(comm, nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclCommDestroy(comm), qcclSuccess);
  EXPECT_EQ(qcclCommDestroy(nullptr), qcclInvalidArgument);
  EXPECT_EQ(qcclUniqueIdFromAddress(nullptr, "127.0.0.1", 1234), qcclInvalidArgument);
  qcclUniqueId id;
  EXPECT_EQ(qcclUniqueIdFromAddress(&id, "127.0.0.1", 0), qcclInvalidArgument);
  qcclComm_t c2 = nullptr;
  EXPECT_EQ(qcclCommInitRank(&c2, 2, id, 5, &cfg), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(nullptr)).find("rank = 5"), std::string::npos);
}

// fp16 / bf16 bits of a float that both formats hold exactly (small integers here).
uint16_t toHalf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) == 0) return static_cast<uint16_t>(b >> 16);
  uint32_t exp = ((b >> 23) & 0xffu) - 127 + 15;
  return static_cast<uint16_t>(((b >> 16) & 0x8000u) | (exp << 10) | ((b >> 13) & 0x3ffu));
}
uint16_t toBf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}

TEST(CApi, HalfInputsAreReducedExactly) {
  const int n = 3;
  const size_t count = 5003;
  qcclConfig_t cfg = testConfig();
  auto value = [](int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 61) - 30 + rank); };
  for (qcclDataType_t dt : {qcclFloat16, qcclBfloat16}) {
    auto conv = dt == qcclFloat16 ? toHalf : toBf16;
    runRanks(n, &cfg, [&](int rank, qcclComm_t comm) {
      std::vector<uint16_t> send(count), recv(count);
      for (size_t i = 0; i < count; ++i) send[i] = conv(value(rank, i));
      qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
      t.codec = qcclCodecNone;
      ASSERT_EQ(qcclAllreduce(send.data(), recv.data(), count, dt, qcclSum, &t, comm, nullptr), qcclSuccess)
          << qcclGetLastError(comm);
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += value(r, i);
        ASSERT_EQ(recv[i], conv(sum)) << "dtype " << dt << " element " << i;
      }
    });
  }
}

class CApiRanks : public ::testing::TestWithParam<int> {};

TEST_P(CApiRanks, AllreduceSumAndAvgAreExact) {
  const int n = GetParam();
  qcclConfig_t cfg = testConfig();
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{(1 << 17) + 3}}) {
    for (int algo : {qcclAlgoRing, qcclAlgoSra, qcclAlgoAllgather, qcclAlgoAuto}) {
      runRanks(n, &cfg, [&](int rank, qcclComm_t comm) {
        std::vector<float> send(count), recv(count, -1.0f), inplace(count);
        for (size_t i = 0; i < count; ++i) inplace[i] = send[i] = exactInput(rank, i);
        qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
        t.codec = qcclCodecNone;
        t.algo = algo;
        ASSERT_EQ(qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr), qcclSuccess)
            << qcclGetLastError(comm);
        t.id = 1;
        ASSERT_EQ(qcclAllreduce(inplace.data(), inplace.data(), count, qcclFloat32, qcclAvg, &t, comm, nullptr),
                  qcclSuccess)
            << qcclGetLastError(comm);
        for (size_t i = 0; i < count; ++i) {
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += exactInput(r, i);
          ASSERT_EQ(recv[i], static_cast<float>(sum)) << "algo " << algo << " count " << count << " i " << i;
          ASSERT_NEAR(inplace[i], sum / n, 1e-6 * std::fabs(sum / n) + 1e-6) << "avg, i " << i;
          ASSERT_EQ(send[i], exactInput(rank, i)) << "out-of-place allreduce wrote its input";
        }
      });
    }
  }
}

TEST_P(CApiRanks, LossyCodecsAreBitIdenticalAcrossRanks) {
  const int n = GetParam();
  qcclConfig_t cfg = testConfig();
  const size_t count = 70001;
  for (int codec :
       {qcclCodecFp16, qcclCodecBf16, qcclCodecOneBit, qcclCodecSignScale, qcclCodecMaxMin, qcclCodecDyn8}) {
    std::vector<std::vector<float>> out(n, std::vector<float>(count));
    runRanks(n, &cfg, [&](int rank, qcclComm_t comm) {
      std::vector<float> send(count);
      for (size_t i = 0; i < count; ++i) send[i] = smoothInput(rank, i);
      qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
      t.id = 42;
      t.codec = codec;
      t.algo = qcclAlgoSra;
      // Twice, so the second call runs with the residuals of the first.
      for (int step = 0; step < 2; ++step)
        ASSERT_EQ(qcclAllreduce(send.data(), out[rank].data(), count, qcclFloat32, qcclSum, &t, comm, nullptr),
                  qcclSuccess)
            << qcclGetLastError(comm);
    });
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < count; ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += smoothInput(r, i);
      err2 += (out[0][i] - sum) * (out[0][i] - sum);
      ref2 += sum * sum;
    }
    // Sign codecs lose most of the magnitude detail in one step; the bound only catches garbage.
    EXPECT_LT(std::sqrt(err2 / ref2), 1.0) << "codec " << codec;
    for (int r = 1; r < n; ++r)
      EXPECT_EQ(std::memcmp(out[0].data(), out[r].data(), count * sizeof(float)), 0)
          << "codec " << codec << " rank " << r;
  }
}

TEST_P(CApiRanks, AllgatherPlacesEveryRankSlot) {
  const int n = GetParam();
  const size_t count = 1037;
  // Loopback ranks share one host: by default the blocks move through the shared segment (the
  // transport carries only its set-up); with shm = 0 through qccl's messages.
  for (int shm : {1, 0}) {
    qcclConfig_t cfg = testConfig();
    cfg.shm = shm;
    runRanks(n, &cfg, [&](int rank, qcclComm_t comm) {
      std::vector<float> send(count), recv(count * n, -1.0f);
      for (size_t i = 0; i < count; ++i) send[i] = exactInput(rank, i);
      ASSERT_EQ(qcclAllgather(send.data(), recv.data(), count, qcclFloat32, nullptr, comm, nullptr), qcclSuccess)
          << qcclGetLastError(comm);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[r * count + i], exactInput(r, i)) << "slot " << r;
      qcclStats_t st;
      ASSERT_EQ(qcclCommGetStats(comm, &st), qcclSuccess);
      EXPECT_GE(st.calls, 1u);
      if (n > 1 && shm == 0) {
        EXPECT_GE(st.bytesSent, count * sizeof(float));
      } else if (n > 1) {
        EXPECT_LT(st.bytesSent, count * sizeof(float));
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CApiRanks, ::testing::Values(1, 2, 3, 4));

TEST(CApi, MismatchedCountFailsOnEveryRank) {
  qcclConfig_t cfg = testConfig(5.0);
  std::vector<qcclResult_t> res(3, qcclSuccess);
  runRanks(3, &cfg, [&](int rank, qcclComm_t comm) {
    size_t count = rank == 1 ? 5000 : 4000;
    std::vector<float> buf(count, 1.0f);
    res[rank] = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, nullptr, comm, nullptr);
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(res[r] == qcclMismatch || res[r] == qcclRemoteError) << "rank " << r << ": " << res[r];
}

TEST(CApi, MismatchedCodecFailsOnEveryRank) {
  qcclConfig_t cfg = testConfig(5.0);
  std::vector<qcclResult_t> res(3, qcclSuccess);
  runRanks(3, &cfg, [&](int rank, qcclComm_t comm) {
    std::vector<float> buf(100003, 1.0f);
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = 3;
    t.codec = rank == 0 ? qcclCodecOneBit : qcclCodecMaxMin;
    t.algo = qcclAlgoSra;
    res[rank] = qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, &t, comm, nullptr);
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(res[r] == qcclMismatch || res[r] == qcclRemoteError) << "rank " << r << ": " << res[r];
}

// An anonymous call (opts == NULL, id 0) with a lossy communicator codec keeps no residual, so it
// is refused; the communicator stays usable.
TEST(CApi, LossyCodecNeedsATensorId) {
  qcclConfig_t cfg = testConfig(5.0);
  cfg.codec = qcclCodecOneBit;
  cfg.minCompressBytes = 0;
  runRanks(2, &cfg, [&](int, qcclComm_t comm) {
    std::vector<float> buf(4096, 1.0f);
    EXPECT_EQ(qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, nullptr, comm, nullptr),
              qcclInvalidUsage);
    EXPECT_NE(std::string(qcclGetLastError(comm)).find("tensor id"), std::string::npos) << qcclGetLastError(comm);
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = 42;
    EXPECT_EQ(qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, &t, comm, nullptr), qcclSuccess)
        << qcclGetLastError(comm);
  });
}

// qcclGetLastError hands out a copy owned by the calling thread: a later, longer error on the same
// communicator must not invalidate the text a caller is still reading (under ASan the old
// c_str() of the communicator's string was a use after free here).
TEST(CApi, LastErrorIsACopyOwnedByTheCaller) {
  qcclConfig_t cfg = testConfig(5.0);
  std::vector<qcclComm_t> comms(1);
  ASSERT_EQ(qcclCommInitLoopback(comms.data(), 1, &cfg), qcclSuccess);
  float x = 0;
  ASSERT_EQ(qcclAllreduce(nullptr, &x, 1, qcclFloat32, qcclSum, nullptr, comms[0], nullptr), qcclInvalidArgument);
  const char* first = qcclGetLastError(comms[0]);
  const std::string saved = first;
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = 77;  // a much longer message follows
  ASSERT_EQ(qcclAllreduce(&x, &x, 1, qcclFloat32, qcclSum, &t, comms[0], nullptr), qcclInvalidArgument);
  std::thread([&] {
    // Another thread reading the communicator's text does not disturb this thread's copy either.
    EXPECT_NE(std::string(qcclGetLastError(comms[0])), saved);
  }).join();
  EXPECT_EQ(std::string(first), saved);
  EXPECT_EQ(qcclCommDestroy(comms[0]), qcclSuccess);
}

// The watchdog pattern: rank 1 never joins; a second thread aborts rank 0's communicator while its
// call is stuck. The call returns qcclCommFailed within milliseconds of the abort (not the 60 s
// timeout) and qcclCommAbort frees the communicator after the call has returned.
TEST(CApi, AbortFromAnotherThreadEndsAStuckCall) {
  qcclConfig_t cfg = testConfig(60.0);
  std::vector<qcclComm_t> comms(2);
  ASSERT_EQ(qcclCommInitLoopback(comms.data(), 2, &cfg), qcclSuccess);
  std::atomic<bool> returned{false};
  qcclResult_t abortResult = qcclInternalError;
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(returned.load());
    abortResult = qcclCommAbort(comms[0]);
  });
  std::vector<float> buf(100000, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, nullptr, comms[0], nullptr);
  returned = true;
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  watchdog.join();
  EXPECT_EQ(r, qcclCommFailed);
  EXPECT_EQ(abortResult, qcclSuccess);
  EXPECT_LT(sec, 30.0);
  // The peer hears of it.
  r = qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, nullptr, comms[1], nullptr);
  EXPECT_EQ(r, qcclRemoteError) << qcclGetLastError(comms[1]);
  EXPECT_EQ(qcclCommDestroy(comms[1]), qcclSuccess);
}

// Elastic restart in one process: a communicator fails, is destroyed, a new one works.
TEST(CApi, NewCommunicatorAfterAFailedOne) {
  qcclConfig_t cfg = testConfig(5.0);
  for (int round = 0; round < 3; ++round) {
    std::vector<qcclResult_t> res(3);
    runRanks(3, &cfg, [&](int rank, qcclComm_t comm) {
      size_t count = rank == 0 ? 5000 : 4000;
      std::vector<float> buf(count, 1.0f);
      res[rank] = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, nullptr, comm, nullptr);
    });
    for (qcclResult_t r : res) EXPECT_NE(r, qcclSuccess);
  }
  runRanks(3, &cfg, [&](int rank, qcclComm_t comm) {
    std::vector<float> buf(4000, static_cast<float>(rank + 1));
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = 8;
    t.codec = qcclCodecOneBit;
    for (int step = 0; step < 2; ++step) {
      std::vector<float> x(100000, static_cast<float>(rank));
      EXPECT_EQ(qcclAllreduce(x.data(), x.data(), x.size(), qcclFloat32, qcclSum, &t, comm, nullptr), qcclSuccess);
    }
    EXPECT_EQ(qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, nullptr, comm, nullptr),
              qcclSuccess);
    EXPECT_EQ(buf[17], 6.0f);
  });
}

// Checkpoint and loss-scale support through the C API: save, scale and load a tensor's state.
TEST(CApi, TensorStateSaveLoadScale) {
  qcclConfig_t cfg = testConfig(10.0);
  cfg.minCompressBytes = 0;
  cfg.localCompress = 1;  // loopback ranks share one host: compress as asked
  runRanks(3, &cfg, [&](int rank, qcclComm_t comm) {
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = 5;
    t.codec = qcclCodecOneBit;
    std::vector<float> x(3000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * i + rank);
    ASSERT_EQ(qcclAllreduce(x.data(), x.data(), x.size(), qcclFloat32, qcclSum, &t, comm, nullptr), qcclSuccess);
    size_t bytes = 0;
    ASSERT_EQ(qcclTensorStateSave(comm, 5, nullptr, &bytes), qcclSuccess);
    ASSERT_GT(bytes, 3000 * sizeof(float));
    std::vector<uint8_t> rec(bytes);
    size_t small = bytes - 1;
    EXPECT_EQ(qcclTensorStateSave(comm, 5, rec.data(), &small), qcclInvalidArgument);
    ASSERT_EQ(qcclTensorStateSave(comm, 5, rec.data(), &bytes), qcclSuccess);
    size_t none = 123;
    ASSERT_EQ(qcclTensorStateSave(comm, 6, nullptr, &none), qcclSuccess);
    EXPECT_EQ(none, 0u);
    int found = -1;
    ASSERT_EQ(qcclTensorStateScale(comm, 5, 0.5f, &found), qcclSuccess);
    EXPECT_EQ(found, 1);
    ASSERT_EQ(qcclTensorStateScale(comm, 6, 0.5f, &found), qcclSuccess);
    EXPECT_EQ(found, 0);
    ASSERT_EQ(qcclTensorStateLoad(comm, 5, rec.data(), rec.size(), 0), qcclSuccess);
    std::vector<uint8_t> again(bytes);
    ASSERT_EQ(qcclTensorStateSave(comm, 5, again.data(), &bytes), qcclSuccess);
    EXPECT_EQ(again, rec) << "load restored the saved state exactly";
    rec[0] ^= 0xff;
    EXPECT_EQ(qcclTensorStateLoad(comm, 5, rec.data(), rec.size(), 0), qcclMalformed);
    qcclStats_t st;
    ASSERT_EQ(qcclCommGetStats(comm, &st), qcclSuccess);
    EXPECT_EQ(st.tensors, 1u);
  });
}

TEST(CApi, TimeoutFailsTheCommunicator) {
  qcclConfig_t cfg = testConfig(0.5);
  runRanks(2, &cfg, [&](int rank, qcclComm_t comm) {
    if (rank == 1) return;  // never joins
    float buf[64] = {};
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(qcclAllreduce(buf, buf, 64, qcclFloat32, qcclSum, nullptr, comm, nullptr), qcclTimeout);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    EXPECT_EQ(qcclAllreduce(buf, buf, 64, qcclFloat32, qcclSum, nullptr, comm, nullptr), qcclCommFailed);
    EXPECT_GT(std::strlen(qcclGetLastError(comm)), 0u);
  });
}

TEST(CApi, AbortReachesThePeers) {
  qcclConfig_t cfg = testConfig(10.0);
  std::vector<qcclComm_t> comms(2);
  ASSERT_EQ(qcclCommInitLoopback(comms.data(), 2, &cfg), qcclSuccess);
  ASSERT_EQ(qcclCommAbort(comms[1]), qcclSuccess);
  float buf[64] = {};
  auto t0 = std::chrono::steady_clock::now();
  qcclResult_t r = qcclAllreduce(buf, buf, 64, qcclFloat32, qcclSum, nullptr, comms[0], nullptr);
  EXPECT_TRUE(r == qcclRemoteError || r == qcclCommFailed)
      << qcclGetErrorString(r) << ": " << qcclGetLastError(comms[0]);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(qcclCommDestroy(comms[0]), qcclSuccess);
}

TEST(CppApi, CommWrapsTheCApi) {
  std::vector<qccl::Comm> comms = qccl::Comm::loopback(2);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> out(2, std::vector<float>(100));
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> in(100, static_cast<float>(r + 1));
      qccl::TensorOptions t;
      t.codec = qcclCodecNone;
      comms[r].allreduce(in.data(), out[r].data(), in.size(), qcclSum, t);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(out[0][0], 3.0f);
  EXPECT_EQ(out[1][99], 3.0f);
  EXPECT_EQ(comms[1].rank(), 1);
  EXPECT_EQ(comms[0].size(), 2);
  try {
    comms[0].allreduce(nullptr, out[0].data(), 100, qcclSum);
    FAIL() << "expected qccl::Error";
  } catch (const qccl::Error& e) {
    EXPECT_EQ(e.code(), qccl::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("sendbuff"), std::string::npos);
  }
  EXPECT_THROW(qccl::Comm::loopback(0), qccl::Error);
}
