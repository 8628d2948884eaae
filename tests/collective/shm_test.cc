// The shared-memory sum of `auto` on one host (core/shm_group.hpp): the segment's sums against a
// rank-order reference at sizes around every boundary, its check, and its failures (a peer that
// exits, a peer that never comes, an abort from another thread, segments that are not ours); then
// the communicator's use of it over loopback ranks (which share one host).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coll_test_util.hpp"
#include "core/memory_space.hpp"
#include "core/shm_group.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace {

using test::bitEqual;
using test::exactInput;
using test::gaussian;
using test::runRanks;

// ((x0 + x1) + x2) + ...: the order every element is summed in.
std::vector<float> rankOrderSum(const std::vector<std::vector<float>>& x) {
  std::vector<float> s = x[0];
  for (size_t q = 1; q < x.size(); ++q)
    for (size_t i = 0; i < s.size(); ++i) s[i] += x[q][i];
  return s;
}

// Segments for n ranks on threads: rank 0 creates, the others open by name.
std::vector<std::unique_ptr<ShmGroup>> makeGroups(int n, size_t slotFloats) {
  std::vector<std::unique_ptr<ShmGroup>> g;
  g.push_back(ShmGroup::create(n, slotFloats));
  for (int r = 1; r < n; ++r) g.push_back(ShmGroup::open(g[0]->name(), n, r));
  g[0]->unlink();
  return g;
}

void desc(int64_t* d, int64_t a) {
  for (int i = 0; i < ShmGroup::kDescWords; ++i) d[i] = a * 31 + i;
}

TEST(ShmGroup, SumsInRankOrderAtEveryBoundary) {
  const size_t slot = 256;  // small data slots: many chunks
  for (int n : {2, 3, 4, 5}) {
    auto g = makeGroups(n, slot);
    std::vector<size_t> counts = {0,
                                  1,
                                  15,
                                  16,
                                  17,
                                  ShmGroup::kSmallFloats - 1,
                                  ShmGroup::kSmallFloats,
                                  ShmGroup::kSmallFloats + 1,
                                  5 * slot,
                                  5 * slot + 1,
                                  40 * slot + 7,
                                  100003};
    for (size_t count : counts) {
      for (bool inPlace : {false, true}) {
        std::vector<std::vector<float>> x(n), out(n);
        for (int r = 0; r < n; ++r) x[r] = gaussian(count, static_cast<unsigned>(count * 7 + r));
        const std::vector<float> want = rankOrderSum(x);
        std::vector<std::thread> th;
        std::vector<int> bad(n, -2);
        for (int r = 0; r < n; ++r) {
          out[r] = inPlace ? x[r] : std::vector<float>(count, -1.0f);
          th.emplace_back([&, r] {
            int64_t d[ShmGroup::kDescWords];
            desc(d, static_cast<int64_t>(count));
            int word = -1;
            const float* in = inPlace ? out[r].data() : x[r].data();
            bad[r] = g[r]->allreduceSum(d, in, out[r].data(), count, &word, nullptr, nullptr);
          });
        }
        for (auto& t : th) t.join();
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(bad[r], -1);
          EXPECT_TRUE(bitEqual(out[r], want))
              << "n " << n << " count " << count << " rank " << r << " in place " << inPlace;
        }
      }
    }
  }
}

// Reduce-scatter (NCCL layout) and allgather through the segment, around the small size and the
// window of a step, in place and not.
TEST(ShmGroup, ReduceScatterAndAllgatherAtEveryBoundary) {
  const size_t slot = 256;
  for (int n : {2, 3, 4}) {
    auto g = makeGroups(n, slot);
    const size_t nn = static_cast<size_t>(n);
    for (size_t count : {size_t{0}, size_t{1}, ShmGroup::kSmallFloats / nn, ShmGroup::kSmallFloats / nn + 1, slot / nn,
                         slot / nn + 1, slot, slot + 3, 5 * slot + 1, size_t{20011}}) {
      for (bool inPlace : {false, true}) {
        std::vector<std::vector<float>> x(n), rs(n), ag(n);
        for (int r = 0; r < n; ++r) x[r] = gaussian(count * nn, static_cast<unsigned>(count * 3 + r));
        const std::vector<float> sum = rankOrderSum(x);
        std::vector<int> bad(n, -2), bad2(n, -2);
        std::vector<std::thread> th;
        for (int r = 0; r < n; ++r) {
          th.emplace_back([&, r] {
            int64_t d[ShmGroup::kDescWords];
            desc(d, static_cast<int64_t>(count) + 1);
            std::vector<float> buf = x[r];
            const size_t me = static_cast<size_t>(r);
            float* out = inPlace ? buf.data() + me * count : nullptr;
            if (!inPlace) {
              rs[r].assign(count, -1.0f);
              out = rs[r].data();
            }
            bad[r] = g[r]->reduceScatterSum(d, buf.data(), out, count, nullptr, nullptr, nullptr);
            if (inPlace) rs[r].assign(out, out + count);
            // Allgather of each rank's reduced shard: every rank ends with the whole sum.
            ag[r].assign(count * nn, -1.0f);
            if (inPlace) std::copy(rs[r].begin(), rs[r].end(), ag[r].begin() + static_cast<long>(me * count));
            const float* in = inPlace ? ag[r].data() + me * count : rs[r].data();
            bad2[r] = g[r]->allgather(d, in, ag[r].data(), count, nullptr, nullptr, nullptr);
          });
        }
        for (auto& t : th) t.join();
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(bad[r], -1);
          EXPECT_EQ(bad2[r], -1);
          const std::vector<float> want(sum.begin() + static_cast<long>(r * count),
                                        sum.begin() + static_cast<long>((r + 1) * count));
          EXPECT_TRUE(bitEqual(rs[r], want)) << "n " << n << " count " << count << " rank " << r;
          EXPECT_TRUE(bitEqual(ag[r], sum)) << "n " << n << " count " << count << " rank " << r;
        }
      }
    }
  }
}

TEST(ShmGroup, EveryRankSeesTheSameDisagreement) {
  const int n = 4;
  auto g = makeGroups(n, 1024);
  // Rank 2 differs in word 1 (the count in the communicator's descriptor): every rank names rank 2.
  for (size_t count : {size_t{100}, size_t{50000}}) {
    std::vector<int> bad(n, -2), word(n, -1);
    std::vector<std::vector<float>> x(n, std::vector<float>(count + 1, 1.0f));
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        int64_t d[ShmGroup::kDescWords];
        desc(d, 7);
        if (r == 2) d[1] += 1;
        bad[r] =
            g[r]->allreduceSum(d, x[r].data(), x[r].data(), r == 2 ? count + 1 : count, &word[r], nullptr, nullptr);
      });
    }
    for (auto& t : th) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(bad[r], r == 2 ? 0 : 2) << "rank " << r;  // the first rank that differs from its own
      EXPECT_EQ(word[r], 1);
    }
    // The check alone, afterwards, still works (the group stays in step after a disagreement).
    th.clear();
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        int64_t d[ShmGroup::kDescWords];
        desc(d, 9);
        bad[r] = g[r]->check(d, &word[r], nullptr, nullptr);
      });
    }
    for (auto& t : th) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(bad[r], -1);
  }
}

TEST(ShmGroup, APeerThatExitsIsAnErrorNotAHang) {
  auto g0 = ShmGroup::create(2, 1024);
  const pid_t child = fork();
  if (child == 0) {
    // Map the segment as rank 1, then exit without ever arriving.
    try {
      auto g1 = ShmGroup::open(g0->name(), 2, 1);
      _exit(0);
    } catch (...) {
      _exit(3);
    }
  }
  ASSERT_GT(child, 0);
  int64_t d[ShmGroup::kDescWords];
  desc(d, 1);
  std::vector<float> x(100000, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g0->allreduceSum(d, x.data(), x.data(), x.size(), nullptr, nullptr, nullptr);
    ADD_FAILURE() << "the sum returned without its peer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("exited"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  int status = 0;
  waitpid(child, &status, 0);  // it stayed a zombie until here: the check must see through that
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  g0->unlink();
}

TEST(ShmGroup, PollEndsAWaitAndPoisonWakesThePeers) {
  auto g = makeGroups(3, 1024);
  int64_t d[ShmGroup::kDescWords];
  desc(d, 1);
  // Rank 0 waits for ranks that never come; its poll throws after 50 ms.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(g[0]->check(
                   d, nullptr,
                   [&] {
                     if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(50))
                       QCCL_THROW(ErrorCode::kTimeout, "test deadline");
                   },
                   nullptr),
               Error);
  // Rank 1 waits, rank 2 poisons the segment: rank 1 ends with kRemoteError naming rank 2.
  std::thread poisoner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    g[2]->poison();
  });
  try {
    g[1]->check(d, nullptr, nullptr, nullptr);
    ADD_FAILURE() << "the check returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError);
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  poisoner.join();
}

TEST(ShmGroup, RefusesSegmentsThatAreNotOurs) {
  EXPECT_THROW(ShmGroup::open("/qccl-no-such-segment", 2, 1), Error);
  auto g = ShmGroup::create(2, 1024);
  EXPECT_THROW(ShmGroup::open(g->name(), 3, 1), Error);  // made for 2 ranks
  const std::string other = "/qccl-test-foreign-" + std::to_string(getpid());
  int fd = shm_open(other.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  close(fd);
  EXPECT_THROW(ShmGroup::open(other, 2, 1), Error);  // zeros: no magic
  shm_unlink(other.c_str());
  g->unlink();
  EXPECT_THROW(ShmGroup::open(g->name(), 2, 1), Error);  // the name is gone once unlinked
}

// The communicator: loopback ranks share one host, so `auto` with nothing to compress sums in
// shared memory, in rank order, bit-identical on every rank, for every dtype and both reductions.
TEST(ShmAllreduce, AutoSumsInSharedMemory) {
  for (int n : {2, 3, 4}) {
    Options opts;
    opts.shmChunkBytes = 4096;  // 1024 floats per step: several steps below
    for (size_t count : {size_t{0}, size_t{1}, size_t{4096}, size_t{4097}, size_t{70001}}) {
      std::vector<std::vector<float>> x(n), out(n);
      for (int r = 0; r < n; ++r) x[r] = gaussian(count, static_cast<unsigned>(count + r));
      const std::vector<float> want = rankOrderSum(x);
      std::vector<int> paths(n, -1);
      runRanks(n, opts, [&](Communicator& c, int r) {
        out[r].assign(count, 0.0f);
        c.allreduce(x[r].data(), out[r].data(), count, DataType::kFloat32, RedOp::kSum, TensorOpts{});
        c.lastAlgo(&paths[r]);
      });
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(paths[r], 2) << "n " << n << " count " << count;
        EXPECT_TRUE(bitEqual(out[r], want)) << "n " << n << " count " << count << " rank " << r;
      }
    }
  }
}

TEST(ShmAllreduce, HalfPrecisionAverageAndCompressedCallsAround) {
  const int n = 3;
  const size_t count = 30000;
  Options opts;
  opts.codec.codec = CodecId::kOneBit;  // compressed from minCompressBytes (64 KiB = 16384 floats)
  opts.localCompress = true;            // which, on one host, takes localCompress
  runRanks(n, opts, [&](Communicator& c, int r) {
    TensorOpts t;
    t.id = 11;
    // A compressed call (sra, checked in the segment first), then small uncompressed ones.
    std::vector<float> g = exactInput(count, r);
    c.allreduce(g.data(), g.data(), count, DataType::kFloat32, RedOp::kSum, t);
    int path = -1;
    EXPECT_EQ(c.lastAlgo(&path), Algo::kSra);
    EXPECT_EQ(path, 0);
    std::vector<float> v = exactInput(1000, r);
    c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, RedOp::kAvg, TensorOpts{});
    c.lastAlgo(&path);
    EXPECT_EQ(path, 2);
    for (size_t i = 0; i < v.size(); ++i) {
      float sum = 0;
      for (int q = 0; q < n; ++q) sum += exactInput(1000, q)[i];
      ASSERT_EQ(v[i], sum * (1.0f / n)) << i;
    }
    // fp16 in and out: converted to fp32, summed in the segment, converted back.
    std::vector<uint16_t> h(5000), hout(5000);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(0x3c00 + (i % 7));  // 1.0 .. 1.0068
    c.allreduce(h.data(), hout.data(), h.size(), DataType::kFloat16, RedOp::kSum, TensorOpts{});
    c.lastAlgo(&path);
    EXPECT_EQ(path, 2);
    std::vector<float> hf(h.size()), want(h.size());
    auto space = makeHostSpace();
    space->toFloat(h.data(), DataType::kFloat16, hf.data(), h.size());
    for (size_t i = 0; i < h.size(); ++i) want[i] = (hf[i] + hf[i]) + hf[i];
    std::vector<uint16_t> want16(h.size());
    space->fromFloat(want.data(), DataType::kFloat16, want16.data(), h.size());
    EXPECT_EQ(hout, want16);
  });
}

// allgather and reduce-scatter under `auto` on one host: summed and gathered in the segment when
// nothing is compressed (fp32 and fp16 buffers), checked there and compressed otherwise.
TEST(ShmAllreduce, AllgatherAndReduceScatterGoThroughTheSegment) {
  const int n = 3;
  const size_t count = 7001;
  Options opts;
  opts.shmChunkBytes = 4096;
  std::vector<std::vector<float>> x(n);
  for (int r = 0; r < n; ++r) x[r] = gaussian(count * n, 40u + r);
  const std::vector<float> sum = rankOrderSum(x);
  runRanks(n, opts, [&](Communicator& c, int r) {
    const size_t me = static_cast<size_t>(r);
    std::vector<float> rs(count);
    c.reduceScatter(x[r].data(), rs.data(), count, DataType::kFloat32, RedOp::kSum, TensorOpts{});
    EXPECT_TRUE(bitEqual(rs, std::vector<float>(sum.begin() + static_cast<long>(me * count),
                                                sum.begin() + static_cast<long>((me + 1) * count))));
    // The first call set the segment up (two small allgathers through the transport); after it
    // nothing goes through the transport.
    const uint64_t setupBytes = c.stats().bytesSent;
    EXPECT_LT(setupBytes, 1024u);
    std::vector<float> all(count * n);
    c.allgather(rs.data(), all.data(), count, DataType::kFloat32, TensorOpts{});
    EXPECT_TRUE(bitEqual(all, sum));
    EXPECT_EQ(c.stats().bytesSent, setupBytes);
    // fp16 buffers: converted, moved in the segment, converted back.
    std::vector<uint16_t> h(count, static_cast<uint16_t>(0x3c00 + r)), hall(count * n);
    c.allgather(h.data(), hall.data(), count, DataType::kFloat16, TensorOpts{});
    for (int q = 0; q < n; ++q) ASSERT_EQ(hall[static_cast<size_t>(q) * count + 5], 0x3c00 + q);
    // A reduce-scatter that asks for a lossy codec is moved there exactly too (no localCompress).
    TensorOpts t;
    t.id = 8;
    t.codec = CodecId::kOneBit;
    c.reduceScatter(x[r].data(), rs.data(), count, DataType::kFloat32, RedOp::kSum, t);
    EXPECT_TRUE(bitEqual(rs, std::vector<float>(sum.begin() + static_cast<long>(me * count),
                                                sum.begin() + static_cast<long>((me + 1) * count))));
    EXPECT_EQ(c.stats().bytesSent, setupBytes);
    EXPECT_EQ(c.stats().tensors, 0u);
  });
  // With localCompress, a compressed reduce-scatter is checked in the segment and then sent as before.
  opts.localCompress = true;
  runRanks(n, opts, [&](Communicator& c, int r) {
    TensorOpts t;
    t.id = 8;
    t.codec = CodecId::kOneBit;
    std::vector<float> big = gaussian(30000 * n, 7u + r), shard(30000);
    c.reduceScatter(big.data(), shard.data(), 30000, DataType::kFloat32, RedOp::kSum, t);
    EXPECT_GT(c.stats().bytesSent, 1000u + 1024u);
    EXPECT_EQ(c.stats().tensors, 1u);
  });
}

// Ranks whose calls differ end in kMismatch on every rank, at once, whether the difference is the
// count (both sides uncompressed), or compressed on one side and not on the other.
TEST(ShmAllreduce, DisagreementsAreMismatchOnEveryRank) {
  const int n = 3;
  for (int kind = 0; kind < 2; ++kind) {
    Options opts;
    opts.codec.codec = CodecId::kOneBit;
    opts.localCompress = true;  // so that 20000 floats are compressed
    opts.timeoutSec = 60;
    std::vector<int> codes(n, -1);
    const auto t0 = std::chrono::steady_clock::now();
    runRanks(n, opts, [&](Communicator& c, int r) {
      // kind 0: counts 1000 vs 1001; kind 1: 20000 floats (compressed) vs 10000 (below 64 KiB)
      const size_t count = kind == 0 ? (r == 1 ? 1001 : 1000) : (r == 1 ? 10000 : 20000);
      std::vector<float> x(count, 1.0f);
      TensorOpts t;
      t.id = 3;
      try {
        c.allreduce(x.data(), x.data(), count, DataType::kFloat32, RedOp::kSum, t);
      } catch (const Error& e) {
        codes[r] = static_cast<int>(e.code());
      }
    });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
    for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], static_cast<int>(ErrorCode::kMismatch)) << "kind " << kind;
  }
  // An allgather against a reduce-scatter of the same count, and allgathers of different counts.
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<int> codes(n, -1);
    runRanks(n, Options{}, [&](Communicator& c, int r) {
      std::vector<float> in(3000, 1.0f), out(9000);
      try {
        if (kind == 0 && r == 2) {
          c.reduceScatter(out.data(), in.data(), 3000, DataType::kFloat32, RedOp::kSum, TensorOpts{});
        } else {
          c.allgather(in.data(), out.data(), kind == 1 && r == 0 ? 2999 : 3000, DataType::kFloat32, TensorOpts{});
        }
      } catch (const Error& e) {
        codes[r] = static_cast<int>(e.code());
      }
    });
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(codes[r], static_cast<int>(ErrorCode::kMismatch)) << "collective kind " << kind;
  }
}

// On one host, `auto` sums host buffers exactly in the segment whatever codec they ask for: no
// codec's passes cost less than copying fp32 there. No residual is kept, nothing but the segment's
// set-up goes through the transport, and an explicit schedule still compresses.
TEST(ShmAllreduce, LossyCodecsAreSummedExactlyOnOneHost) {
  const int n = 3;
  const size_t count = 70001;
  std::vector<std::vector<float>> x(n);
  for (int r = 0; r < n; ++r) x[r] = gaussian(count, 90u + static_cast<unsigned>(r));
  const std::vector<float> want = rankOrderSum(x);
  // One allreduce of rank r's input as tensor 4 under `algo`; returns the path it took.
  auto sum = [&](Communicator& c, int r, std::vector<float>& out, Algo algo) {
    TensorOpts t;
    t.id = 4;
    t.algo = algo;
    out.assign(count, 0.0f);
    c.allreduce(x[r].data(), out.data(), count, DataType::kFloat32, RedOp::kSum, t);
    int path = -1;
    c.lastAlgo(&path);
    return path;
  };
  for (CodecId codec : {CodecId::kFp16, CodecId::kOneBit, CodecId::kSignScale, CodecId::kMaxMin, CodecId::kDyn8}) {
    SCOPED_TRACE(codecName(codec));
    Options opts;
    opts.codec.codec = codec;
    runRanks(n, opts, [&](Communicator& c, int r) {
      std::vector<float> out;
      EXPECT_EQ(sum(c, r, out, Algo::kAuto), 2);
      EXPECT_TRUE(bitEqual(out, want));
      const uint64_t sent = c.stats().bytesSent;  // the segment's set-up alone
      EXPECT_LT(sent, 1024u);
      EXPECT_EQ(c.stats().tensors, 0u);
      TensorOpts g;
      g.id = 5;
      std::vector<float> all(count * n);
      c.allgather(x[r].data(), all.data(), count, DataType::kFloat32, g);
      for (int q = 0; q < n; ++q)
        EXPECT_EQ(std::memcmp(all.data() + static_cast<size_t>(q) * count, x[q].data(), count * sizeof(float)), 0);
      EXPECT_EQ(c.stats().bytesSent, sent);
      EXPECT_EQ(c.stats().tensors, 0u);
      if (codec == CodecId::kOneBit) {
        EXPECT_EQ(sum(c, r, out, Algo::kSra), 0);
        EXPECT_GT(c.stats().bytesSent, sent + 1000);
        EXPECT_FALSE(bitEqual(out, want));
      }
    });
  }
  // localCompress: auto compresses as asked, checked in the segment first.
  Options opts;
  opts.codec.codec = CodecId::kOneBit;
  opts.localCompress = true;
  runRanks(n, opts, [&](Communicator& c, int r) {
    std::vector<float> out;
    EXPECT_EQ(sum(c, r, out, Algo::kAuto), 0);
    EXPECT_EQ(c.lastAlgo(nullptr), Algo::kSra);
    EXPECT_FALSE(bitEqual(out, want));
    EXPECT_EQ(c.stats().tensors, 1u);
  });
}

// Ranks that disagree on localCompress would take different paths for the same call: kMismatch
// on every rank, not a hang.
TEST(ShmAllreduce, LocalCompressMustAgree) {
  const int n = 3;
  std::vector<int> codes(n, -1);
  const auto optionsOf = [](int r) {
    Options o;
    o.codec.codec = CodecId::kOneBit;
    o.localCompress = r == 2;
    o.timeoutSec = 60;
    return o;
  };
  runRanks(n, optionsOf, [&](Communicator& c, int r) {
    std::vector<float> x(20000, 1.0f);
    TensorOpts t;
    t.id = 3;
    try {
      c.allreduce(x.data(), x.data(), x.size(), DataType::kFloat32, RedOp::kSum, t);
    } catch (const Error& e) {
      codes[r] = static_cast<int>(e.code());
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[r], static_cast<int>(ErrorCode::kMismatch)) << "rank " << r;
}

// Every rank must allow the segment: one rank with shm off, and every rank takes the transport.
TEST(ShmAllreduce, OneRankWithoutItTurnsItOffEverywhere) {
  const int n = 3;
  std::vector<int> paths(n, -1);
  std::vector<std::vector<float>> out(n);
  const auto optionsOf = [](int r) {
    Options o;
    o.shm = r != 1;
    return o;
  };
  runRanks(n, optionsOf, [&](Communicator& c, int r) {
    out[r] = exactInput(5000, r);
    c.allreduce(out[r].data(), out[r].data(), 5000, DataType::kFloat32, RedOp::kSum, TensorOpts{});
    c.lastAlgo(&paths[r]);
    if (r == 0) {
      EXPECT_EQ(c.stats().bytesSent > 0, true);  // the ring's messages
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(paths[r], 0);
    EXPECT_TRUE(bitEqual(out[r], out[0]));
  }
}

// One call on both ranks of a pair, so that the segment is up.
void callTogether(Communicator& c0, Communicator& c1, std::vector<float>& a, std::vector<float>& b) {
  std::thread t1([&] { c1.allreduce(b.data(), b.data(), b.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{}); });
  c0.allreduce(a.data(), a.data(), a.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
  t1.join();
}

// qcclCommAbort's pattern: a rank stuck in the segment (its peers never call) is ended from another
// thread within milliseconds, and the peers' next call hears of it instead of waiting.
TEST(ShmAllreduce, AbortFromAnotherThreadEndsAStuckCall) {
  const int n = 2;
  std::vector<TransportPtr> ts = makeLoopbackGroup(n);
  Options opts;
  opts.timeoutSec = 120;
  Communicator c0(std::move(ts[0]), opts), c1(std::move(ts[1]), opts);
  std::vector<float> a(100, 1.0f), b(100, 1.0f);
  callTogether(c0, c1, a, b);
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c0.requestAbort();
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c0.allreduce(a.data(), a.data(), a.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
    ADD_FAILURE() << "the stuck call returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCommFailed) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  watchdog.join();
  try {
    c1.allreduce(b.data(), b.data(), b.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
    ADD_FAILURE() << "the peer's call returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  }
}

// Names in /dev/shm that this process created.
size_t ourSegments() {
  size_t n = 0;
  const std::string prefix = "qccl-" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0 ? 1 : 0;
    closedir(d);
  }
  return n;
}

// A set-up that fails half-way (rank 0 created the segment, its peer never came, the call was
// aborted) leaves no name behind in /dev/shm; a set-up that completed does not either.
TEST(ShmAllreduce, NoNameIsLeftBehind) {
  {
    std::vector<TransportPtr> ts = makeLoopbackGroup(2);
    Options opts;
    opts.timeoutSec = 60;
    Communicator c0(std::move(ts[0]), opts), c1(std::move(ts[1]), opts);
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_EQ(ourSegments(), 1u);  // rank 0 created it and waits in the set-up exchange
      c0.requestAbort();
    });
    std::vector<float> a(100, 1.0f);
    EXPECT_THROW(c0.allreduce(a.data(), a.data(), a.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{}), Error);
    watchdog.join();
    EXPECT_EQ(ourSegments(), 0u);
  }
  runRanks(3, Options{}, [&](Communicator& c, int r) {
    std::vector<float> a(100, static_cast<float>(r));
    c.allreduce(a.data(), a.data(), a.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
    EXPECT_EQ(a[0], 3.0f);
  });
  EXPECT_EQ(ourSegments(), 0u);
}

TEST(ShmAllreduce, APeerThatNeverComesTimesOut) {
  const int n = 2;
  std::vector<TransportPtr> ts = makeLoopbackGroup(n);
  Options opts;
  opts.timeoutSec = 0.5;
  Communicator c0(std::move(ts[0]), opts), c1(std::move(ts[1]), opts);
  std::vector<float> a(100, 1.0f), b(100, 1.0f);
  callTogether(c0, c1, a, b);
  try {
    c0.allreduce(a.data(), a.data(), a.size(), DataType::kFloat32, RedOp::kSum, TensorOpts{});
    ADD_FAILURE() << "returned without the peer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  }
}

}  // namespace
}  // namespace qccl
