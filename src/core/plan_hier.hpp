// Hierarchical allreduce as plain data: three plans, each run by the executor with its own codec
// (intra-host levels uncompressed or a cast, the inter-host level compressed).
//
// Ranks are grouped by host (hostOf[r] = host of rank r). The tensor is cut into `lanes`, as many
// as the largest host has ranks (L), with bucket-aligned boundaries. On a host with L_h ranks
// (local ranks in rank order), lane l is owned by local rank l mod L_h: every rank owns at least
// one lane, and a host with fewer ranks than the largest one gives some of its ranks a second lane
// (padding by reuse: no rank idles, no host needs as many ranks as the others).
//
//   1. intraScatter (step l for lane l, run together): every rank sends lane l to its host's owner
//      of lane l; the owner sums the L_h contributions in local rank order. No residual.
//   2. inter (steps 2l, 2l+1 for lane l): the owners of lane l, one per host, run sra on it among
//      themselves: lane l split into H bucket-aligned shards, shard j reduced by host j's owner
//      (its own host's values raw, then the other hosts' in host order, worker residual; as in
//      planSra), then encoded once by that owner (owner
//      residual) and sent to the H owners, itself included. A rank that owns no part of lane l
//      has empty steps there, so step indices (and tags) agree on every rank. ownerRange is the
//      hull of the rank's inter shards (the owner residual covers it).
//   3. intraGather (step l for lane l, run together): the owner of lane l sends the reduced lane to every rank of its
//      host, itself included (a self transfer: with a lossy intra codec every rank, the owner too,
//      keeps the decoded values), so results are identical on every rank.
//
// Deadlock freedom: each plan is the shape of an existing one (sra's scatter, sra itself over
// groups, and an allgather), run one after the other on every rank.
#pragma once

#include <cstddef>
#include <vector>

#include "core/plan.hpp"

namespace qccl {

struct HierPlan {
  int hosts = 1;
  int lanesPerHost = 1;         ///< L: ranks of the largest host
  std::vector<Range> lanes;     ///< L bucket-aligned ranges covering [0, count)
  std::vector<int> laneOwners;  ///< lanes owned by this rank on its host
  Plan intraScatter;
  Plan inter;
  Plan intraGather;
};

/// Host of every rank renumbered 0..H-1 in the order of each host's lowest rank (any distinct
/// values name hosts). Throws Error(kInvalidArgument) for an empty vector.
std::vector<int> normalizeHosts(const std::vector<int>& hostOf);

/// The owner of lane `lane` on host `host` (hostOf already normalized).
int hierLaneOwner(const std::vector<int>& hostOf, int host, int lane);

/// The three plans of rank `rank` (see above). hostOf[r] names rank r's host (normalized here).
HierPlan planHier(int rank, const std::vector<int>& hostOf, size_t count, size_t bucket);

/// Hierarchical allgather (rank q's `count` elements land at offset q * count of the output), as
/// two plans run one after the other:
///   1. inter (source: this rank's input; destination: the output): every rank encodes its own
///      block once (worker residual) and sends it to itself and, on every other host, to the rank
///      that holds its lane there (local rank l mod that host's rank count, l its own local
///      rank); it receives the blocks of the remote ranks whose lane it holds. One step.
///   2. intra (in place on the output, sent as they are): on each host the holder of block b (its
///      owner, or the rank that received it) sends it to the host's other ranks. One step per
///      block (one stream per step and peer), run together.
/// Every block crosses the slow links once per remote host instead of once per remote rank, and
/// every rank ends with the decodings of the same encodings: the result is bit for bit the flat
/// allgather's with the same codec and residuals, when the intra plan forwards fp32.
struct HierAllgatherPlan {
  Plan inter;
  Plan intra;
};
HierAllgatherPlan planHierAllgather(int rank, const std::vector<int>& hostOf, size_t count);

}  // namespace qccl
