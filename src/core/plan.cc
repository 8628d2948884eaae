#include "core/plan.hpp"

#include <algorithm>

namespace qccl {

std::vector<Range> splitAligned(size_t count, int parts, size_t align) {
  if (parts < 1) parts = 1;
  if (align == 0) align = 1;
  size_t units = (count + align - 1) / align;
  std::vector<Range> out(parts);
  for (int p = 0; p < parts; ++p) {
    size_t ub = units * static_cast<size_t>(p) / static_cast<size_t>(parts);
    size_t ue = units * static_cast<size_t>(p + 1) / static_cast<size_t>(parts);
    out[p].begin = std::min(count, ub * align);
    out[p].end = std::min(count, ue * align);
  }
  return out;
}

bool planNeedsDstInit(const Plan& plan) {
  for (const PlanStep& st : plan.steps)
    if (st.op == RecvOp::kAccumulate) return true;
  return false;
}

namespace {

// sra's scatter step on `shards` (shard p reduced by rank p, landing at dstOffset): every other
// rank's shard sent to it, next rank first so that the ranks do not all send to rank 0 first; no
// send to itself: the owner's own values enter its sum raw, first, then the others' in rank order.
PlanStep scatterStep(int rank, int size, const std::vector<Range>& shards, size_t dstOffset) {
  PlanStep scatter;
  scatter.op = RecvOp::kSum;
  scatter.residual = Residual::kWorker;
  for (int i = 0; i + 1 < size; ++i) {
    int p = (rank + 1 + i) % size;
    scatter.sends.push_back({p, shards[p], shards[p].begin});
  }
  scatter.recvs.push_back({rank, shards[rank], dstOffset, true});
  for (int q = 0; q < size; ++q)
    if (q != rank) scatter.recvs.push_back({q, shards[rank], dstOffset});
  return scatter;
}

}  // namespace

Plan planSra(int rank, int size, size_t count, size_t bucket) {
  Plan plan;
  plan.rank = rank;
  plan.size = size;
  plan.count = count;
  plan.shards = splitAligned(count, size, bucket);
  plan.ownerRange = plan.shards[rank];
  plan.steps.push_back(scatterStep(rank, size, plan.shards, plan.ownerRange.begin));
  PlanStep gather;
  gather.op = RecvOp::kCopy;
  gather.residual = Residual::kOwner;
  for (int i = 0; i < size; ++i) gather.sends.push_back({(rank + i) % size, plan.ownerRange, plan.ownerRange.begin});
  for (int q = 0; q < size; ++q) gather.recvs.push_back({q, plan.shards[q], plan.shards[q].begin});
  plan.steps.push_back(std::move(gather));
  plan.pipelineSteps = true;
  plan.lastStepWritesFinal = true;
  plan.readsSourceOnce = true;  // step 1 sends the reduced shard from dst
  return plan;
}

Plan planReduceScatter(int rank, int size, size_t shardCount) {
  Plan plan;
  plan.rank = rank;
  plan.size = size;
  plan.count = shardCount * static_cast<size_t>(size);
  for (int p = 0; p < size; ++p)
    plan.shards.push_back(Range{static_cast<size_t>(p) * shardCount, static_cast<size_t>(p + 1) * shardCount});
  plan.ownerRange = plan.shards[rank];
  plan.steps.push_back(scatterStep(rank, size, plan.shards, 0));
  plan.lastStepWritesFinal = true;
  plan.readsSourceOnce = true;
  return plan;
}

Plan planRing(int rank, int size, size_t count, size_t align) {
  Plan plan;
  plan.rank = rank;
  plan.size = size;
  plan.count = count;
  plan.shards = splitAligned(count, size, align);
  auto mod = [size](int x) { return ((x % size) + size) % size; };
  int right = mod(rank + 1), left = mod(rank - 1);
  // Reduce-scatter: each step sums this rank's own values of one chunk (raw, from the source) and
  // the partial sum arriving from the left, so dst never has to hold a copy of the source: step 0
  // sends from the source, later steps send what the step before summed.
  for (int s = 0; s + 1 < size; ++s) {
    PlanStep st;
    st.op = RecvOp::kSum;
    const Range& out = plan.shards[mod(rank - s)];
    const Range& in = plan.shards[mod(rank - s - 1)];
    st.sends.push_back({right, out, out.begin});
    Transfer own{rank, in, in.begin};
    own.raw = true;
    st.recvs.push_back(own);
    st.recvs.push_back({left, in, in.begin});
    plan.steps.push_back(std::move(st));
  }
  // After reduce-scatter this rank holds the full sum of chunk rank+1. The first allgather step
  // also quantizes it in place, so the owner keeps exactly the values it sends.
  for (int s = 0; s < std::max(1, size - 1); ++s) {
    PlanStep st;
    st.op = RecvOp::kCopy;
    const Range& out = plan.shards[mod(rank + 1 - s)];
    if (s == 0) {
      st.sends.push_back({rank, out, out.begin});
      st.recvs.push_back({rank, out, out.begin});
    }
    if (size > 1) {
      const Range& in = plan.shards[mod(rank - s)];
      st.sends.push_back({right, out, out.begin});
      st.recvs.push_back({left, in, in.begin});
    }
    plan.steps.push_back(std::move(st));
  }
  return plan;
}

namespace {
// One step in which every rank sends its whole encoded tensor to every rank (itself included) and
// receives all of them: summed into one buffer, or placed side by side (offset q * count).
Plan planEveryoneToEveryone(int rank, int size, size_t count, RecvOp op) {
  Plan plan;
  plan.rank = rank;
  plan.size = size;
  plan.count = count;
  plan.shards.assign(1, Range{0, count});
  PlanStep st;
  st.op = op;
  st.residual = Residual::kWorker;
  for (int i = 0; i < size; ++i) st.sends.push_back({(rank + 1 + i) % size, Range{0, count}, 0});
  for (int q = 0; q < size; ++q) {
    const size_t offset = op == RecvOp::kCopy ? static_cast<size_t>(q) * count : 0;
    st.recvs.push_back({q, Range{0, count}, offset});
  }
  plan.steps.push_back(std::move(st));
  plan.lastStepWritesFinal = true;
  plan.readsSourceOnce = true;
  return plan;
}
}  // namespace

Plan planAllgatherReduce(int rank, int size, size_t count) {
  return planEveryoneToEveryone(rank, size, count, RecvOp::kSum);
}

Plan planAllgather(int rank, int size, size_t count) {
  return planEveryoneToEveryone(rank, size, count, RecvOp::kCopy);
}

}  // namespace qccl
