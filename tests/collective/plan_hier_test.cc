// Hierarchical plans without any network, for hosts x ranks-per-host up to 8 x 8, uneven hosts and
// interleaved rank placement: sends match receives, and a simulation with contribution sets shows
// that every element is reduced exactly once from every rank and reaches every rank.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "core/plan_hier.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace {

using Key = std::tuple<int, int, int, size_t, size_t>;  // step, from, to, begin, end

void checkMatching(const std::vector<const Plan*>& plans) {
  std::map<Key, int> sends, recvs;
  for (const Plan* p : plans) {
    ASSERT_EQ(p->steps.size(), plans[0]->steps.size());
    for (size_t s = 0; s < p->steps.size(); ++s) {
      for (const Transfer& t : p->steps[s].sends) ++sends[Key(s, p->rank, t.peer, t.range.begin, t.range.end)];
      for (const Transfer& t : p->steps[s].recvs)
        if (!t.raw) ++recvs[Key(s, t.peer, p->rank, t.range.begin, t.range.end)];  // raw: its own values
    }
  }
  EXPECT_EQ(sends, recvs);
  for (auto& kv : sends) EXPECT_EQ(kv.second, 1);
}

using Sets = std::vector<std::vector<uint64_t>>;  // [rank][element]: bit r = rank r's contribution

// Runs one plan's steps in order on the sets. kSum / kAccumulate join sets and must never join a
// contribution twice; kCopy replaces. kSum's first receive replaces what the rank held.
void simulate(const std::vector<const Plan*>& plans, Sets* have) {
  const size_t steps = plans[0]->steps.size();
  for (size_t s = 0; s < steps; ++s) {
    const Sets before = *have;
    for (const Plan* p : plans) {
      const PlanStep& st = p->steps[s];
      std::map<size_t, bool> started;  // kSum: element already received once in this step
      for (const Transfer& t : st.recvs) {
        for (size_t i = t.range.begin; i < t.range.end; ++i) {
          const uint64_t in = before[t.peer][i];
          uint64_t& dst = (*have)[p->rank][t.dstOffset + i - t.range.begin];
          if (st.op == RecvOp::kCopy || (st.op == RecvOp::kSum && !started[i])) {
            dst = in;
            started[i] = true;
          } else {
            ASSERT_EQ(dst & in, 0u) << "element " << i << " reduced twice on rank " << p->rank << " step " << s;
            dst |= in;
          }
        }
      }
    }
  }
}

std::string describe(const std::vector<int>& hostOf) {
  std::string s;
  for (int h : hostOf) s += std::to_string(h) + ",";
  return s;
}

void checkHier(const std::vector<int>& hostOf, size_t count, size_t bucket) {
  SCOPED_TRACE("hosts " + describe(hostOf) + " count " + std::to_string(count));
  const int n = static_cast<int>(hostOf.size());
  std::vector<HierPlan> plans;
  for (int r = 0; r < n; ++r) plans.push_back(planHier(r, hostOf, count, bucket));
  std::vector<const Plan*> a, b, c;
  for (const HierPlan& p : plans) {
    a.push_back(&p.intraScatter);
    b.push_back(&p.inter);
    c.push_back(&p.intraGather);
    EXPECT_FALSE(p.laneOwners.empty()) << "a rank owns no lane (it would idle)";
    // Lanes cover the tensor.
    size_t pos = 0;
    for (const Range& l : p.lanes) {
      EXPECT_EQ(l.begin, pos);
      pos = l.end;
    }
    EXPECT_EQ(pos, count);
  }
  checkMatching(a);
  checkMatching(b);
  checkMatching(c);
  Sets have(n, std::vector<uint64_t>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) have[r][i] = uint64_t{1} << r;
  simulate(a, &have);
  // After the intra-host stage the owner of each lane holds exactly its host's ranks.
  const std::vector<int> hosts = normalizeHosts(hostOf);
  for (int r = 0; r < n; ++r) {
    uint64_t host = 0;
    for (int q = 0; q < n; ++q) host |= hosts[q] == hosts[r] ? uint64_t{1} << q : 0;
    for (int l : plans[r].laneOwners)
      for (size_t i = plans[r].lanes[l].begin; i < plans[r].lanes[l].end; ++i)
        ASSERT_EQ(have[r][i], host) << "rank " << r << " lane " << l << " element " << i;
  }
  simulate(b, &have);
  simulate(c, &have);
  const uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(have[r][i], all) << "rank " << r << " element " << i;
}

// Contiguous placement: hosts of the given sizes, ranks numbered host by host.
std::vector<int> contiguous(const std::vector<int>& sizes) {
  std::vector<int> out;
  for (size_t h = 0; h < sizes.size(); ++h) out.insert(out.end(), sizes[h], static_cast<int>(h) * 7 + 3);
  return out;
}

TEST(PlanHier, EvenHostsUpTo8x8) {
  for (int hosts = 1; hosts <= 8; ++hosts)
    for (int per = 1; per <= 8; ++per)
      for (size_t count : {size_t{0}, size_t{1}, size_t{100}, size_t{5003}})
        checkHier(contiguous(std::vector<int>(hosts, per)), count, 32);
}

TEST(PlanHier, UnevenHosts) {
  const std::vector<std::vector<int>> shapes = {
      {3, 1}, {1, 3}, {8, 1}, {2, 3, 1}, {5, 8, 2, 7}, {1, 2, 3, 4, 5, 6, 7, 8}, {8, 8, 8, 8, 8, 8, 8, 1}, {4, 4, 3}};
  for (const auto& s : shapes)
    for (size_t count : {size_t{0}, size_t{7}, size_t{1000}, size_t{4099}}) checkHier(contiguous(s), count, 64);
}

TEST(PlanHier, InterleavedPlacement) {
  // Rank r on host r mod H (round-robin launchers), and an arbitrary placement.
  for (int hosts = 2; hosts <= 4; ++hosts) {
    std::vector<int> hostOf;
    for (int r = 0; r < 3 * hosts + 1; ++r) hostOf.push_back(r % hosts);
    checkHier(hostOf, 3001, 32);
  }
  checkHier({5, 5, 9, 1, 9, 5, 1, 1}, 777, 32);
}

TEST(PlanHier, OneHostIsAReduceScatterAndAllgatherAndEachHostOneRankIsSra) {
  // One rank per host: the intra stages are self transfers only and inter is sra's shape.
  const HierPlan p = planHier(1, {0, 1, 2}, 999, 32);
  ASSERT_EQ(p.inter.steps.size(), 2u);
  Plan sra = planSra(1, 3, 999, 32);
  ASSERT_EQ(p.inter.steps[0].sends.size(), sra.steps[0].sends.size());
  for (size_t i = 0; i < sra.steps[0].sends.size(); ++i) {
    EXPECT_EQ(p.inter.steps[0].sends[i].peer, sra.steps[0].sends[i].peer);
    EXPECT_TRUE(p.inter.steps[0].sends[i].range == sra.steps[0].sends[i].range);
  }
  EXPECT_TRUE(p.inter.ownerRange == sra.ownerRange);
  for (const Transfer& t : p.intraScatter.steps[0].sends) EXPECT_EQ(t.peer, 1);
  // One host: the inter steps only talk to the rank itself.
  const HierPlan q = planHier(2, {4, 4, 4, 4}, 999, 32);
  for (const PlanStep& st : q.inter.steps)
    for (const Transfer& t : st.sends) EXPECT_EQ(t.peer, 2);
}

// Hierarchical allgather: sends match receives in both plans; a simulation of which block each
// output slot holds shows every rank ends with every block, each delivered once, only from a rank
// that held it; and each block crosses to a remote host once (not once per remote rank).
void checkHierAllgather(const std::vector<int>& hostOf, size_t count) {
  SCOPED_TRACE("hosts " + describe(hostOf) + " count " + std::to_string(count));
  const int n = static_cast<int>(hostOf.size());
  const std::vector<int> hosts = normalizeHosts(hostOf);
  std::vector<HierAllgatherPlan> plans;
  for (int r = 0; r < n; ++r) plans.push_back(planHierAllgather(r, hostOf, count));
  std::vector<const Plan*> a, b;
  for (const HierAllgatherPlan& p : plans) {
    a.push_back(&p.inter);
    b.push_back(&p.intra);
  }
  checkMatching(a);
  checkMatching(b);
  std::vector<std::vector<int>> have(n, std::vector<int>(n, -1)), deliveries(n, std::vector<int>(n, 0));
  std::map<std::pair<int, int>, int> crossings;  // (block, destination host) -> inter-host sends
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(plans[r].inter.steps.size(), 1u);
    for (const Transfer& t : plans[r].inter.steps[0].sends) {
      EXPECT_TRUE(t.range == (Range{0, count}));
      if (hosts[t.peer] != hosts[r]) ++crossings[{r, hosts[t.peer]}];
    }
    for (const Transfer& t : plans[r].inter.steps[0].recvs) {
      EXPECT_EQ(t.dstOffset, static_cast<size_t>(t.peer) * count);  // block q lands at q * count
      have[r][t.peer] = t.peer;
      ++deliveries[r][t.peer];
    }
  }
  for (auto& kv : crossings) EXPECT_EQ(kv.second, 1) << "block " << kv.first.first << " to host " << kv.first.second;
  const std::vector<std::vector<int>> afterInter = have;
  for (int r = 0; r < n; ++r)
    for (size_t step = 0; step < plans[r].intra.steps.size(); ++step)
      for (const Transfer& t : plans[r].intra.steps[step].recvs) {
        const int blk = static_cast<int>(step);  // step b forwards block b
        EXPECT_TRUE(t.range == (Range{step * count, (step + 1) * count}));
        ASSERT_EQ(afterInter[t.peer][blk], blk) << "rank " << t.peer << " forwards block " << blk << " it lacks";
        EXPECT_EQ(hosts[t.peer], hosts[r]) << "the intra plan leaves the host";
        have[r][blk] = blk;
        ++deliveries[r][blk];
      }
  for (int r = 0; r < n; ++r)
    for (int blk = 0; blk < n; ++blk) {
      EXPECT_EQ(have[r][blk], blk) << "rank " << r << " lacks block " << blk;
      EXPECT_EQ(deliveries[r][blk], 1) << "rank " << r << " block " << blk;
    }
}

TEST(PlanHier, AllgatherEvenUnevenAndInterleaved) {
  for (int hosts = 1; hosts <= 8; ++hosts)
    for (int per = 1; per <= 8; ++per)
      for (size_t count : {size_t{0}, size_t{1}, size_t{100}})
        checkHierAllgather(contiguous(std::vector<int>(hosts, per)), count);
  for (const auto& shape : std::vector<std::vector<int>>{{3, 1}, {1, 3}, {2, 3, 1}, {5, 8, 2, 7}, {8, 8, 8, 1}})
    checkHierAllgather(contiguous(shape), 17);
  checkHierAllgather({5, 5, 9, 1, 9, 5, 1, 1}, 33);
  std::vector<int> roundRobin;
  for (int r = 0; r < 10; ++r) roundRobin.push_back(r % 3);
  checkHierAllgather(roundRobin, 9);
}

TEST(PlanHier, BadHostVectorsAreRefused) {
  EXPECT_THROW(planHier(0, {}, 10, 32), Error);
  EXPECT_THROW(planHier(3, {0, 0}, 10, 32), Error);
}

}  // namespace
}  // namespace qccl
