#include "core/plan_hier.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace {

// Ranks of every host in rank order.
std::vector<std::vector<int>> localRanks(const std::vector<int>& hostOf) {
  int hosts = 0;
  for (int h : hostOf) hosts = std::max(hosts, h + 1);
  std::vector<std::vector<int>> out(hosts);
  for (size_t r = 0; r < hostOf.size(); ++r) out[hostOf[r]].push_back(static_cast<int>(r));
  return out;
}

Plan emptyPlan(int rank, int size, size_t count) {
  Plan p;
  p.rank = rank;
  p.size = size;
  p.count = count;
  return p;
}

}  // namespace

std::vector<int> normalizeHosts(const std::vector<int>& hostOf) {
  QCCL_CHECK(!hostOf.empty(), ErrorCode::kInvalidArgument, "host grouping: no ranks");
  std::map<int, int> index;
  std::vector<int> out(hostOf.size());
  for (size_t r = 0; r < hostOf.size(); ++r) {
    auto it = index.emplace(hostOf[r], static_cast<int>(index.size())).first;
    out[r] = it->second;
  }
  return out;
}

int hierLaneOwner(const std::vector<int>& hostOf, int host, int lane) {
  int local = 0;
  for (int h : hostOf) local += h == host;
  QCCL_CHECK(local > 0, ErrorCode::kInvalidArgument, "host grouping: host " + std::to_string(host) + " has no ranks");
  int want = lane % local;
  for (size_t r = 0; r < hostOf.size(); ++r)
    if (hostOf[r] == host && want-- == 0) return static_cast<int>(r);
  return -1;  // unreachable
}

HierPlan planHier(int rank, const std::vector<int>& hostOfIn, size_t count, size_t bucket) {
  const std::vector<int> hostOf = normalizeHosts(hostOfIn);
  const int size = static_cast<int>(hostOf.size());
  QCCL_CHECK(rank >= 0 && rank < size, ErrorCode::kInvalidArgument, "hier plan: rank out of range");
  const std::vector<std::vector<int>> local = localRanks(hostOf);
  HierPlan hp;
  hp.hosts = static_cast<int>(local.size());
  for (const auto& l : local) hp.lanesPerHost = std::max(hp.lanesPerHost, static_cast<int>(l.size()));
  hp.lanes = splitAligned(count, hp.lanesPerHost, bucket);
  const int H = hp.hosts, L = hp.lanesPerHost, me = hostOf[rank];
  auto owner = [&](int host, int lane) { return local[host][lane % local[host].size()]; };

  hp.intraScatter = emptyPlan(rank, size, count);
  hp.intraScatter.shards = hp.lanes;
  // One step per lane (a kSum step reduces one range), run together.
  hp.intraScatter.pipelineSteps = true;
  hp.intraScatter.sendsReadSource = true;  // lane l's step sends lane l of the source
  std::vector<PlanStep> scatter(L);
  for (int l = 0; l < L; ++l) {
    scatter[l].op = RecvOp::kSum;
    scatter[l].residual = Residual::kNone;
    scatter[l].sends.push_back({owner(me, l), hp.lanes[l], hp.lanes[l].begin});
  }
  hp.intraGather = emptyPlan(rank, size, count);
  hp.intraGather.shards = hp.lanes;
  hp.intraGather.pipelineSteps = true;
  std::vector<PlanStep> gather(L);  // one step per lane too: one stream per (step, peer)
  for (int l = 0; l < L; ++l) {
    if (owner(me, l) == rank) {
      hp.laneOwners.push_back(l);
      for (int q : local[me]) scatter[l].recvs.push_back({q, hp.lanes[l], hp.lanes[l].begin});
      // Self first, so that the owner's own copy is the decoded one like everybody else's.
      gather[l].sends.push_back({rank, hp.lanes[l], hp.lanes[l].begin});
      for (int q : local[me])
        if (q != rank) gather[l].sends.push_back({q, hp.lanes[l], hp.lanes[l].begin});
    }
    gather[l].op = RecvOp::kCopy;
    gather[l].recvs.push_back({owner(me, l), hp.lanes[l], hp.lanes[l].begin});
  }
  hp.intraScatter.steps = std::move(scatter);
  hp.intraGather.steps = std::move(gather);

  hp.inter = emptyPlan(rank, size, count);
  hp.inter.pipelineSteps = true;
  bool owns = false;
  for (int l = 0; l < L; ++l) {
    PlanStep sc, ga;
    sc.op = RecvOp::kSum;
    sc.residual = Residual::kWorker;
    ga.op = RecvOp::kCopy;
    ga.residual = Residual::kOwner;
    if (owner(me, l) == rank) {
      std::vector<Range> shards = splitAligned(hp.lanes[l].size(), H, bucket);
      for (Range& s : shards) {
        s.begin += hp.lanes[l].begin;
        s.end += hp.lanes[l].begin;
      }
      const Range mine = shards[me];
      if (!owns || mine.begin < hp.inter.ownerRange.begin) hp.inter.ownerRange.begin = mine.begin;
      if (!owns || mine.end > hp.inter.ownerRange.end) hp.inter.ownerRange.end = mine.end;
      owns = true;
      // As planSra's scatter: no send to itself, its own values raw and first in its sum.
      for (int i = 0; i + 1 < H; ++i) {
        const int j = (me + 1 + i) % H;
        sc.sends.push_back({owner(j, l), shards[j], shards[j].begin});
      }
      sc.recvs.push_back({rank, mine, mine.begin, true});
      for (int j = 0; j < H; ++j)
        if (j != me) sc.recvs.push_back({owner(j, l), mine, mine.begin});
      for (int i = 0; i < H; ++i) ga.sends.push_back({owner((me + i) % H, l), mine, mine.begin});
      for (int j = 0; j < H; ++j) ga.recvs.push_back({owner(j, l), shards[j], shards[j].begin});
      hp.inter.shards.insert(hp.inter.shards.end(), shards.begin(), shards.end());
    }
    hp.inter.steps.push_back(std::move(sc));
    hp.inter.steps.push_back(std::move(ga));
  }
  if (hp.inter.ownerRange.end < hp.inter.ownerRange.begin) hp.inter.ownerRange.end = hp.inter.ownerRange.begin;
  return hp;
}

HierAllgatherPlan planHierAllgather(int rank, const std::vector<int>& hostOfIn, size_t count) {
  const std::vector<int> hostOf = normalizeHosts(hostOfIn);
  const int size = static_cast<int>(hostOf.size());
  QCCL_CHECK(rank >= 0 && rank < size, ErrorCode::kInvalidArgument, "hier allgather plan: rank out of range");
  const std::vector<std::vector<int>> local = localRanks(hostOf);
  const int H = static_cast<int>(local.size()), me = hostOf[rank];
  std::vector<int> localIndex(size);
  for (const auto& l : local)
    for (size_t i = 0; i < l.size(); ++i) localIndex[l[i]] = static_cast<int>(i);
  // The rank of host h that holds block b after the inter plan.
  auto holder = [&](int h, int b) {
    return hostOf[b] == h ? b : local[h][static_cast<size_t>(localIndex[b]) % local[h].size()];
  };
  auto block = [&](int b) { return Range{static_cast<size_t>(b) * count, static_cast<size_t>(b + 1) * count}; };

  HierAllgatherPlan p;
  p.inter = emptyPlan(rank, size, count);
  p.inter.shards.assign(1, Range{0, count});
  PlanStep st;
  st.op = RecvOp::kCopy;
  st.residual = Residual::kWorker;
  st.sends.push_back({rank, Range{0, count}, 0});  // self first: this rank keeps its own decoding
  for (int i = 1; i < H; ++i) st.sends.push_back({holder((me + i) % H, rank), Range{0, count}, 0});
  st.recvs.push_back({rank, Range{0, count}, static_cast<size_t>(rank) * count});
  for (int b = 0; b < size; ++b)
    if (hostOf[b] != me && holder(me, b) == rank) st.recvs.push_back({b, Range{0, count}, block(b).begin});
  p.inter.steps.push_back(std::move(st));

  p.intra = emptyPlan(rank, size, count * static_cast<size_t>(size));
  p.intra.pipelineSteps = true;
  for (int b = 0; b < size; ++b) {
    PlanStep s;
    s.op = RecvOp::kCopy;
    s.residual = Residual::kNone;
    const int h = holder(me, b);
    if (h == rank) {
      for (int q : local[me])
        if (q != rank) s.sends.push_back({q, block(b), block(b).begin});
    } else {
      s.recvs.push_back({h, block(b), block(b).begin});
    }
    p.intra.steps.push_back(std::move(s));
  }
  return p;
}

}  // namespace qccl
