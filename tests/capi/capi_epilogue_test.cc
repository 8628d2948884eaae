// qcclAllreduceEpilogue and qcclAllreduceFused over the loopback transport: the result is bit for
// bit the prologue over the input, qcclAllreduce, and the epilogue over the result; every element is
// handed to each function exactly once; and where the schedule allows it the functions run inside
// its encodes and decodes, piece by piece.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
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

// Bit for bit equal (memcmp of no bytes would take the null data() of empty vectors).
bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A momentum-correction-like update with state of its own: y = (x - 0.9 s) * 1.25 - 0.01 p;
// s = x. Element-wise and nonlinear in the index, so a piece handed over at the wrong offset, twice
// or not at all changes the bits.
struct Update {
  std::vector<float> state, param;
  std::vector<int> visits;
  size_t pieces = 0;
  explicit Update(size_t n, int rank) : state(n), param(n), visits(n, 0) {
    for (size_t i = 0; i < n; ++i) {
      state[i] = std::cos(0.37f * static_cast<float>(i) + static_cast<float>(rank));
      param[i] = 0.5f + 0.001f * static_cast<float>(i % 977);
    }
  }
  void apply(float* x, size_t first, size_t count) {
    ++pieces;
    for (size_t k = 0; k < count; ++k) {
      const size_t i = first + k;
      const float v = x[k];
      x[k] = (v - 0.9f * state[i]) * 1.25f - 0.01f * param[i];
      state[i] = v;
      ++visits[i];
    }
  }
  static void call(void* user, float* values, size_t first, size_t count) {
    static_cast<Update*>(user)->apply(values, first, count);
  }
};

float input(int rank, size_t i, int call) {
  return std::sin(0.013f * static_cast<float>(i) + static_cast<float>(rank) * 0.7f + static_cast<float>(call)) *
         (1.0f + 0.25f * static_cast<float>(rank));
}

struct Case {
  int algo, codec, bits, op;
};

std::string name(const Case& c) {
  return "algo " + std::to_string(c.algo) + " codec " + std::to_string(c.codec) + " bits " + std::to_string(c.bits) +
         " op " + std::to_string(c.op);
}

// Three calls of the same tensor (so residuals carry over) on two loopback groups: plain allreduce
// then the update over the whole result, against the epilogue. Returns the most pieces one call's
// epilogue took on rank 0.
size_t compare(int ranks, size_t n, const Case& c, bool outOfPlace) {
  qcclConfig_t cfg;
  EXPECT_EQ(qcclConfigInit(&cfg), qcclSuccess);
  cfg.timeoutSec = 30;
  std::vector<std::vector<float>> want(ranks), got(ranks);
  std::vector<std::vector<float>> wantState(ranks), gotState(ranks);
  std::atomic<size_t> maxPieces{0};
  for (int variant = 0; variant < 2; ++variant) {
    runRanks(ranks, &cfg, [&](int r, qcclComm_t comm) {
      qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
      t.id = 11;
      t.codec = c.codec;
      t.bits = c.bits;
      t.algo = c.algo;
      Update u(n, r);
      std::vector<float> send(n), recv(n), all;
      for (int call = 0; call < 3; ++call) {
        for (size_t i = 0; i < n; ++i) send[i] = input(r, i, call);
        float* out = outOfPlace ? recv.data() : send.data();
        if (variant == 0) {
          ASSERT_EQ(qcclAllreduce(send.data(), out, n, qcclFloat32, static_cast<qcclRedOp_t>(c.op), &t, comm, nullptr),
                    qcclSuccess)
              << qcclGetLastError(comm);
          if (n > 0) u.apply(out, 0, n);
        } else {
          const size_t before = u.pieces;
          ASSERT_EQ(
              qcclAllreduceEpilogue(send.data(), out, n, static_cast<qcclRedOp_t>(c.op), &t, &Update::call, &u, comm),
              qcclSuccess)
              << qcclGetLastError(comm);
          if (r == 0 && u.pieces - before > maxPieces.load()) maxPieces.store(u.pieces - before);
        }
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(u.visits[i], call + 1) << "element " << i << " " << name(c);
        all.insert(all.end(), out, out + n);
      }
      (variant == 0 ? want : got)[r] = all;
      (variant == 0 ? wantState : gotState)[r] = u.state;
    });
  }
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(sameBits(want[r], got[r])) << "rank " << r << " n " << n << " " << name(c);
    EXPECT_TRUE(sameBits(wantState[r], gotState[r])) << "rank " << r << " n " << n << " " << name(c);
  }
  return maxPieces.load();
}

}  // namespace

TEST(CApiEpilogue, IsTheAllreduceFollowedByTheFunction) {
  const Case cases[] = {
      {qcclAlgoSra, qcclCodecOneBit, 0, qcclAvg},
      {qcclAlgoSra, qcclCodecMaxMin, 4, qcclSum},
      {qcclAlgoSra, qcclCodecNone, 0, qcclAvg},
      {qcclAlgoAllgather, qcclCodecOneBit, 0, qcclAvg},
      {qcclAlgoAllgather, qcclCodecSignScale, 0, qcclSum},
      {qcclAlgoRing, qcclCodecNone, 0, qcclAvg},
      {qcclAlgoRing, qcclCodecFp16, 0, qcclSum},
      {qcclAlgoAuto, qcclCodecNone, 0, qcclAvg},
      {qcclAlgoAuto, qcclCodecOneBit, 0, qcclAvg},
      {qcclAlgoHier, qcclCodecOneBit, 0, qcclAvg},
  };
  for (const Case& c : cases)
    for (int ranks : {1, 3, 4})
      for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{1000}, size_t{70001}})
        for (bool outOfPlace : {false, true}) {
          SCOPED_TRACE(name(c) + " ranks " + std::to_string(ranks) + " n " + std::to_string(n) +
                       (outOfPlace ? " out of place" : " in place"));
          compare(ranks, n, c, outOfPlace);
        }
}

// The schedules that write each final value in one decode run the function there, bucket by bucket
// (many pieces per call), not in one pass over the result afterwards.
TEST(CApiEpilogue, RunsInsideTheLastDecode) {
  for (int algo : {qcclAlgoSra, qcclAlgoAllgather}) {
    SCOPED_TRACE("algo " + std::to_string(algo));
    EXPECT_GT(compare(4, 70001, Case{algo, qcclCodecOneBit, 0, qcclAvg}, false), 8u);
  }
  // The ring finishes its elements over several steps: one pass over the result after the call.
  EXPECT_EQ(compare(3, 70001, Case{qcclAlgoRing, qcclCodecNone, 0, qcclSum}, true), 1u);
}

TEST(CApiEpilogue, BadArguments) {
  qcclConfig_t cfg;
  ASSERT_EQ(qcclConfigInit(&cfg), qcclSuccess);
  qcclComm_t comm = nullptr;
  ASSERT_EQ(qcclCommInitLoopback(&comm, 1, &cfg), qcclSuccess);
  float buf[4] = {1, 2, 3, 4};
  Update u(4, 0);
  EXPECT_EQ(qcclAllreduceEpilogue(buf, buf, 4, qcclSum, nullptr, nullptr, nullptr, comm), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(comm)).find("fn is NULL"), std::string::npos) << qcclGetLastError(comm);
  EXPECT_EQ(qcclAllreduceEpilogue(nullptr, buf, 4, qcclSum, nullptr, &Update::call, &u, comm), qcclInvalidArgument);
  EXPECT_EQ(qcclAllreduceEpilogue(buf, buf, 4, static_cast<qcclRedOp_t>(9), nullptr, &Update::call, &u, comm),
            qcclInvalidArgument);
  EXPECT_EQ(qcclAllreduceEpilogue(buf, buf, 4, qcclSum, nullptr, &Update::call, &u, nullptr), qcclInvalidArgument);
  EXPECT_EQ(u.pieces, 0u);
  // Zero elements: nothing to hand over.
  EXPECT_EQ(qcclAllreduceEpilogue(buf, buf, 0, qcclSum, nullptr, &Update::call, &u, comm), qcclSuccess);
  EXPECT_EQ(u.pieces, 0u);
  // The communicator stays usable after argument errors.
  EXPECT_EQ(qcclAllreduceEpilogue(buf, buf, 4, qcclSum, nullptr, &Update::call, &u, comm), qcclSuccess)
      << qcclGetLastError(comm);
  for (int v : u.visits) EXPECT_EQ(v, 1);
  EXPECT_EQ(qcclCommDestroy(comm), qcclSuccess);
}

// The C++ wrapper: the same call, and its errors as qccl::Error.
TEST(CApiEpilogue, CxxWrapper) {
  std::vector<qccl::Comm> comms = qccl::Comm::loopback(2);
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> out(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> x(5000, static_cast<float>(r + 1));
      Update u(x.size(), 0);
      qccl::TensorOptions t;
      t.id = 3;
      t.codec = qcclCodecNone;
      t.algo = qcclAlgoAllgather;
      comms[r].allreduceEpilogue(x.data(), x.data(), x.size(), qcclSum, &Update::call, &u, t);
      for (int v : u.visits) EXPECT_EQ(v, 1);
      out[r] = x;
    });
  for (auto& t : threads) t.join();
  Update ref(5000, 0);
  std::vector<float> want(5000, 3.0f);
  ref.apply(want.data(), 0, want.size());
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(sameBits(out[r], want));
  EXPECT_THROW(comms[0].allreduceEpilogue(out[0].data(), out[0].data(), 4, qcclSum, nullptr, nullptr), qccl::Error);
}

// qcclAllreduceFused: a prologue over the input, then the allreduce, then the epilogue, bit for bit;
// each input element rewritten exactly once; in allgather-reduce and sra with a lossy codec the
// prologue runs chunk by chunk at the one read of each chunk (its encode, or the owner's raw sum: several
// pieces with small chunks), elsewhere once over the input.
namespace {
struct Both {
  Update post;
  std::vector<float> velocity;
  std::vector<int> visits;
  size_t pieces = 0;
  Both(size_t n, int rank) : post(n, rank), velocity(n), visits(n, 0) {
    for (size_t i = 0; i < n; ++i) velocity[i] = std::sin(0.21f * static_cast<float>(i) - static_cast<float>(rank));
  }
  // send = 0.9 * velocity + send; velocity = send (a momentum update that produces the message)
  void pre(float* x, size_t first, size_t count) {
    ++pieces;
    for (size_t k = 0; k < count; ++k) {
      const size_t i = first + k;
      x[k] = 0.9f * velocity[i] + x[k];
      velocity[i] = x[k];
      ++visits[i];
    }
  }
  static void prologue(void* user, float* values, size_t first, size_t count) {
    static_cast<Both*>(user)->pre(values, first, count);
  }
  static void epilogue(void* user, float* values, size_t first, size_t count) {
    static_cast<Both*>(user)->post.apply(values, first, count);
  }
};

size_t compareFused(int ranks, size_t n, const Case& c, bool outOfPlace, bool withEpilogue) {
  qcclConfig_t cfg;
  EXPECT_EQ(qcclConfigInit(&cfg), qcclSuccess);
  cfg.timeoutSec = 30;
  cfg.chunkBytes = 64 << 10;  // several chunks per call
  std::vector<std::vector<float>> want(ranks), got(ranks);
  std::atomic<size_t> maxPieces{0};
  for (int variant = 0; variant < 2; ++variant) {
    runRanks(ranks, &cfg, [&](int r, qcclComm_t comm) {
      qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
      t.id = 12;
      t.codec = c.codec;
      t.bits = c.bits;
      t.algo = c.algo;
      Both b(n, r);
      std::vector<float> send(n), recv(n), all;
      for (int call = 0; call < 3; ++call) {
        for (size_t i = 0; i < n; ++i) send[i] = input(r, i, call);
        float* out = outOfPlace ? recv.data() : send.data();
        if (variant == 0) {
          if (n > 0) b.pre(send.data(), 0, n);
          ASSERT_EQ(qcclAllreduce(send.data(), out, n, qcclFloat32, static_cast<qcclRedOp_t>(c.op), &t, comm, nullptr),
                    qcclSuccess)
              << qcclGetLastError(comm);
          if (n > 0 && withEpilogue) b.post.apply(out, 0, n);
        } else {
          const size_t before = b.pieces;
          ASSERT_EQ(qcclAllreduceFused(send.data(), out, n, static_cast<qcclRedOp_t>(c.op), &t, &Both::prologue,
                                       withEpilogue ? &Both::epilogue : nullptr, &b, comm),
                    qcclSuccess)
              << qcclGetLastError(comm);
          if (r == 0 && b.pieces - before > maxPieces.load()) maxPieces.store(b.pieces - before);
        }
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.visits[i], call + 1) << "element " << i << " " << name(c);
        all.insert(all.end(), out, out + n);
        all.insert(all.end(), b.velocity.begin(), b.velocity.end());
      }
      (variant == 0 ? want : got)[r] = all;
    });
  }
  for (int r = 0; r < ranks; ++r)
    EXPECT_TRUE(sameBits(want[r], got[r])) << "rank " << r << " n " << n << " " << name(c);
  return maxPieces.load();
}
}  // namespace

TEST(CApiEpilogue, FusedIsThePrologueTheAllreduceAndTheEpilogue) {
  const Case cases[] = {
      {qcclAlgoAllgather, qcclCodecOneBit, 0, qcclAvg}, {qcclAlgoAllgather, qcclCodecMaxMin, 2, qcclSum},
      {qcclAlgoAllgather, qcclCodecNone, 0, qcclAvg},   {qcclAlgoSra, qcclCodecOneBit, 0, qcclAvg},
      {qcclAlgoRing, qcclCodecNone, 0, qcclSum},        {qcclAlgoAuto, qcclCodecNone, 0, qcclAvg},
      {qcclAlgoHier, qcclCodecSignScale, 0, qcclAvg},
  };
  for (const Case& c : cases)
    for (int ranks : {1, 3})
      for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{70001}})
        for (bool outOfPlace : {false, true})
          for (bool withEpilogue : {false, true}) {
            SCOPED_TRACE(name(c) + " ranks " + std::to_string(ranks) + " n " + std::to_string(n) +
                         (outOfPlace ? " out of place" : " in place") + (withEpilogue ? " + epilogue" : ""));
            compareFused(ranks, n, c, outOfPlace, withEpilogue);
          }
  // At the encodes, chunk by chunk (70,001 elements in 64 KiB chunks: 5 of them); in sra at the
  // encodes of the two other shards and the start of the own shard's sum (3 shards of about 23,300
  // elements: 2 chunks each, 6 pieces); once elsewhere.
  EXPECT_EQ(compareFused(3, 70001, Case{qcclAlgoAllgather, qcclCodecOneBit, 0, qcclAvg}, true, false), 5u);
  EXPECT_EQ(compareFused(3, 70001, Case{qcclAlgoSra, qcclCodecOneBit, 0, qcclAvg}, true, false), 6u);
  EXPECT_EQ(compareFused(3, 70001, Case{qcclAlgoAllgather, qcclCodecNone, 0, qcclAvg}, true, false), 1u);
}

TEST(CApiEpilogue, FusedBadArguments) {
  qcclConfig_t cfg;
  ASSERT_EQ(qcclConfigInit(&cfg), qcclSuccess);
  qcclComm_t comm = nullptr;
  ASSERT_EQ(qcclCommInitLoopback(&comm, 1, &cfg), qcclSuccess);
  float buf[4] = {1, 2, 3, 4};
  EXPECT_EQ(qcclAllreduceFused(buf, buf, 4, qcclSum, nullptr, nullptr, nullptr, nullptr, comm), qcclInvalidArgument);
  EXPECT_NE(std::string(qcclGetLastError(comm)).find("both NULL"), std::string::npos) << qcclGetLastError(comm);
  Both b(4, 0);
  EXPECT_EQ(qcclAllreduceFused(buf, buf, 4, qcclSum, nullptr, &Both::prologue, nullptr, &b, comm), qcclSuccess)
      << qcclGetLastError(comm);
  for (int v : b.visits) EXPECT_EQ(v, 1);
  EXPECT_EQ(qcclCommDestroy(comm), qcclSuccess);
}
