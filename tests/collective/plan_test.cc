// Plans without any network: matching sends and receives, coverage, single reduction.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "core/executor.hpp"
#include "core/plan.hpp"
#include "qccl/codec.hpp"

namespace qccl {
namespace {

TEST(Plan, SplitAlignedCoversAndAligns) {
  for (size_t count : {0, 1, 7, 31, 32, 33, 1000, 4097}) {
    for (int parts = 1; parts <= 9; ++parts) {
      for (size_t align : {1, 32, 512}) {
        auto r = splitAligned(count, parts, align);
        ASSERT_EQ(r.size(), static_cast<size_t>(parts));
        size_t pos = 0;
        for (int p = 0; p < parts; ++p) {
          EXPECT_EQ(r[p].begin, pos);
          EXPECT_LE(r[p].begin, r[p].end);
          if (r[p].end != count) {
            EXPECT_EQ(r[p].end % align, 0u);
          }
          pos = r[p].end;
        }
        EXPECT_EQ(pos, count);
      }
    }
  }
}

TEST(Plan, SplitAlignedIsBalanced) {
  auto r = splitAligned(1000 * 512, 3, 512);
  for (auto& x : r) EXPECT_NEAR(static_cast<double>(x.size()), 1000.0 * 512 / 3, 512.0);
}

using Key = std::tuple<int, int, int, size_t, size_t>;  // step, from, to, begin, end

// Collects every rank's plan and checks that each send has exactly one matching receive.
void checkMatching(const std::vector<Plan>& plans) {
  std::map<Key, int> sends, recvs;
  for (const Plan& p : plans) {
    ASSERT_EQ(p.steps.size(), plans[0].steps.size());
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (const Transfer& t : p.steps[s].sends) ++sends[Key(s, p.rank, t.peer, t.range.begin, t.range.end)];
      for (const Transfer& t : p.steps[s].recvs)
        if (!t.raw) ++recvs[Key(s, t.peer, p.rank, t.range.begin, t.range.end)];  // raw: its own values
    }
  }
  EXPECT_EQ(sends, recvs);
  for (auto& kv : sends) EXPECT_EQ(kv.second, 1);
}

// A scatter step's receives: this rank's own values raw first, then every other rank in rank order,
// all of the owner's range; no send to itself.
void checkScatterRecvs(const PlanStep& st, int rank, int n, const Range& own) {
  EXPECT_EQ(st.op, RecvOp::kSum);
  ASSERT_EQ(st.recvs.size(), static_cast<size_t>(n));
  EXPECT_EQ(st.recvs[0].peer, rank);
  EXPECT_TRUE(st.recvs[0].raw);
  for (int q = 0, i = 1; q < n; ++q) {
    if (q == rank) continue;
    EXPECT_EQ(st.recvs[static_cast<size_t>(i)].peer, q);
    EXPECT_FALSE(st.recvs[static_cast<size_t>(i)].raw);
    ++i;
  }
  for (const Transfer& t : st.recvs) EXPECT_TRUE(t.range == own);
  for (const Transfer& t : st.sends) EXPECT_NE(t.peer, rank);
}

TEST(Plan, SraMatchesReducesOnceAndCovers) {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {0, 1, 7, 1000, 100003}) {
      std::vector<Plan> plans;
      for (int r = 0; r < n; ++r) plans.push_back(planSra(r, n, count, 64));
      checkMatching(plans);
      for (const Plan& p : plans) {
        ASSERT_EQ(p.steps.size(), 2u);
        // Step 0: the owner sums its own values of its shard (raw, first), then one contribution
        // from every other rank, in rank order; it encodes nothing for itself.
        checkScatterRecvs(p.steps[0], p.rank, n, p.ownerRange);
        // Step 1: the rank ends up with every shard exactly once, i.e. the whole tensor.
        std::vector<int> covered(count, 0);
        for (const Transfer& t : p.steps[1].recvs)
          for (size_t i = t.range.begin; i < t.range.end; ++i) ++covered[t.dstOffset + i - t.range.begin];
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(covered[i], 1) << "element " << i;
        // The step-1 sends are one encoding (same range) and include the owner itself. They
        // forward exactly what step 0 reduced, which is what lets the executor pipeline the steps.
        for (const Transfer& t : p.steps[1].sends) EXPECT_TRUE(t.range == p.ownerRange);
        EXPECT_TRUE(p.pipelineSteps);
      }
    }
  }
}

TEST(Plan, ReduceScatterMatchesAndReducesEveryShardOnce) {
  for (int n = 1; n <= 8; ++n) {
    for (size_t shard : {0, 1, 7, 64, 1000}) {
      std::vector<Plan> plans;
      for (int r = 0; r < n; ++r) plans.push_back(planReduceScatter(r, n, shard));
      checkMatching(plans);
      // Every element of every rank's source is sent exactly once, to the rank that owns it.
      std::vector<int> sent(shard * n, 0);
      for (const Plan& p : plans) {
        ASSERT_EQ(p.steps.size(), 1u);
        EXPECT_EQ(p.steps[0].op, RecvOp::kSum);
        EXPECT_EQ(p.steps[0].residual, Residual::kWorker);
        EXPECT_EQ(p.ownerRange.begin, static_cast<size_t>(p.rank) * shard);
        EXPECT_EQ(p.ownerRange.size(), shard);
        checkScatterRecvs(p.steps[0], p.rank, n, p.ownerRange);
        for (const Transfer& t : p.steps[0].recvs) EXPECT_EQ(t.dstOffset, 0u);
        // Every element is sent once to its owner, or (the own shard) taken raw.
        std::vector<int> mine(shard * n, 0);
        for (const Transfer& t : p.steps[0].sends) {
          EXPECT_TRUE(t.range == plans[t.peer].ownerRange);
          for (size_t i = t.range.begin; i < t.range.end; ++i) ++mine[i];
        }
        for (size_t i = p.ownerRange.begin; i < p.ownerRange.end; ++i) ++mine[i];
        for (size_t i = 0; i < shard * n; ++i) ASSERT_EQ(mine[i], 1) << "rank " << p.rank << " element " << i;
      }
      // Aligned shards: the same transfers as sra's scatter stage (hence the same encodings and sums).
      if (shard % 64 == 0) {
        for (int r = 0; r < n; ++r) {
          Plan sra = planSra(r, n, shard * n, 64);
          const PlanStep& a = sra.steps[0];
          const PlanStep& b = plans[r].steps[0];
          ASSERT_EQ(a.sends.size(), b.sends.size());
          for (size_t i = 0; i < a.sends.size(); ++i) {
            EXPECT_EQ(a.sends[i].peer, b.sends[i].peer);
            EXPECT_TRUE(a.sends[i].range == b.sends[i].range);
          }
          ASSERT_EQ(a.recvs.size(), b.recvs.size());
          for (size_t i = 0; i < a.recvs.size(); ++i) {
            EXPECT_EQ(a.recvs[i].peer, b.recvs[i].peer);
            EXPECT_EQ(a.recvs[i].raw, b.recvs[i].raw);
            EXPECT_TRUE(a.recvs[i].range == b.recvs[i].range);
          }
        }
      }
    }
  }
}

TEST(Plan, RingReducesEveryElementOnceFromEveryRank) {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {0, 1, 7, 1000}) {
      std::vector<Plan> plans;
      for (int r = 0; r < n; ++r) plans.push_back(planRing(r, n, count, 32));
      checkMatching(plans);
      // Simulate contributions as bit sets: element i of rank r starts with {r} in the source; dst
      // starts empty (out of place, nothing is copied). A raw receive takes the source, a sum's first
      // receive replaces, later ones join.
      std::vector<std::vector<uint32_t>> have(n, std::vector<uint32_t>(count, 0u));
      for (size_t s = 0; s < plans[0].steps.size(); ++s) {
        auto before = have;
        for (const Plan& p : plans) {
          const PlanStep& st = p.steps[s];
          ASSERT_NE(st.op, RecvOp::kAccumulate) << "the ring must not need dst to hold the source";
          for (size_t j = 0; j < st.recvs.size(); ++j) {
            const Transfer& t = st.recvs[j];
            if (t.raw) {
              ASSERT_EQ(t.peer, p.rank);
              ASSERT_EQ(j, 0u);
              ASSERT_EQ(st.op, RecvOp::kSum);
            }
            for (size_t i = t.range.begin; i < t.range.end; ++i) {
              // A send of step 0 reads the source ({sender}); later sends read what dst holds.
              const uint32_t in = t.raw ? 1u << p.rank : s == 0 ? 1u << t.peer : before[t.peer][i];
              ASSERT_NE(in, 0u) << "rank " << p.rank << " step " << s << " reads an element never written";
              if (st.op == RecvOp::kSum && j > 0) {
                ASSERT_EQ(have[p.rank][i] & in, 0u) << "element reduced twice";
                have[p.rank][i] |= in;
              } else {
                have[p.rank][i] = in;
              }
            }
          }
        }
      }
      for (const Plan& p : plans) EXPECT_FALSE(planNeedsDstInit(p));
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(have[r][i], (1u << n) - 1) << "rank " << r << " elem " << i;
    }
  }
}

// A ring across hosts cuts its chunks to the transport's eager limit (communicator.cc): the largest
// whole number of buckets whose message leaves the transport's headroom, never above the codec's
// own chunk; nothing changes without a limit or when not even one bucket fits.
TEST(Plan, EagerChunksFitTheLimit) {
  for (CodecId codec : {CodecId::kFp32, CodecId::kFp16, CodecId::kBf16, CodecId::kOneBit, CodecId::kMaxMin}) {
    CodecConfig cfg;
    cfg.codec = codec;
    cfg.bits = codec == CodecId::kMaxMin ? 4 : 0;
    cfg = resolveConfig(cfg);
    const size_t align = cfg.bucket ? cfg.bucket : 32;
    const size_t big = Executor::chunkElemsFor(cfg, size_t{4} << 20);
    for (size_t eager : {size_t{4096}, size_t{65536}, size_t{1} << 20}) {
      SCOPED_TRACE(std::string(codecName(codec)) + " eager " + std::to_string(eager));
      const size_t c = Executor::eagerChunkElems(cfg, eager, big);
      const size_t room = eager - Executor::kEagerHeadroom;
      ASSERT_GT(c, 0u);
      EXPECT_EQ(c % align, 0u);
      EXPECT_LE(c, big);
      if (encodedBytes(cfg, align) > room) {
        EXPECT_EQ(c, big);  // nothing fits: the codec's chunk stands
        continue;
      }
      EXPECT_LE(encodedBytes(cfg, c), room);
      if (c < big) {
        EXPECT_GT(encodedBytes(cfg, c + align), room);
      }
    }
    EXPECT_EQ(Executor::eagerChunkElems(cfg, 0, big), big);
    EXPECT_EQ(Executor::eagerChunkElems(cfg, Executor::kEagerHeadroom, big), big);
    EXPECT_EQ(Executor::eagerChunkElems(cfg, 65536, align), align);  // one bucket, fitting or not
  }
  CodecConfig fp32;
  fp32 = resolveConfig(fp32);
  // fp32 under Open MPI's 64 KiB: 16320 floats, a 65312-byte message with its header, below 65408.
  const size_t c = Executor::eagerChunkElems(fp32, 65536, size_t{1} << 20);
  EXPECT_EQ(c, (65536 - Executor::kEagerHeadroom - kWireHeaderBytes) / 4 / 32 * 32);
}

TEST(Plan, AllgatherPlansMatchAndCover) {
  for (int n = 1; n <= 8; ++n) {
    std::vector<Plan> gather, reduce;
    for (int r = 0; r < n; ++r) {
      gather.push_back(planAllgather(r, n, 100));
      reduce.push_back(planAllgatherReduce(r, n, 100));
    }
    checkMatching(gather);
    checkMatching(reduce);
    for (const Plan& p : gather) {
      ASSERT_EQ(p.steps[0].recvs.size(), static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) EXPECT_EQ(p.steps[0].recvs[q].dstOffset, static_cast<size_t>(q) * 100);
    }
  }
}

}  // namespace
}  // namespace qccl
