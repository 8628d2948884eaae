// Collective schedules as plain data, built by pure functions (no transport, no codec).
//
// A Plan is a list of steps. In each step a rank encodes every send range once (whatever the
// number of peers it goes to) and sends the bytes to each peer; it receives one message stream per
// recv transfer and decodes it into the destination in the order the recvs are listed, which fixes
// the floating-point summation order. A transfer to or from the rank itself stands for "use my own
// encoding": it keeps the algorithms uniform and the results identical on every rank. A receive
// marked `raw` stands for "my own source values, unquantized": the owner of an sra shard sums its
// own contribution exactly instead of encoding it for itself (one encode of 1/n of the tensor
// less per call, and one quantization error less in every sum).
#pragma once

#include <cstddef>
#include <vector>

namespace qccl {

/// Half-open element range [begin, end).
struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

/// Splits [0, count) into `parts` contiguous ranges whose inner boundaries are multiples of `align`,
/// as balanced as the alignment allows. Trailing ranges may be empty when count is small.
std::vector<Range> splitAligned(size_t count, int parts, size_t align);

/// One message stream: `range` of the source (sends) or of the sender's data (recvs).
struct Transfer {
  int peer = 0;
  Range range;
  size_t dstOffset = 0;  ///< recvs: destination element where range.begin lands
  /// recvs from this rank only: take `range` of this rank's source values as they are (no
  /// encoding, no residual). Only as the first receive of a kSum step.
  bool raw = false;
};

/// What a step does with what it receives.
enum class RecvOp {
  kCopy,        ///< dst = decoded
  kAccumulate,  ///< dst += decoded (dst already holds this rank's own data)
  kSum,         ///< dst = first decoded, then += the others, in recv order (all recvs share one range)
};

/// Which error-feedback residual the sends of a step use.
enum class Residual { kNone, kWorker, kOwner };

struct PlanStep {
  std::vector<Transfer> sends;  ///< consecutive sends with the same range are encoded once
  std::vector<Transfer> recvs;
  RecvOp op = RecvOp::kCopy;
  Residual residual = Residual::kNone;
};

struct Plan {
  int rank = 0;
  int size = 1;
  size_t count = 0;
  std::vector<Range> shards;  ///< sra: shard p is reduced by rank p; ring: the ring's chunks
  Range ownerRange;           ///< sra: this rank's shard (owner residual covers it)
  std::vector<PlanStep> steps;
  /// The executor may run all steps together, chunk round by chunk round: every step's sends of
  /// chunk k depend only on chunk k (or earlier) of earlier steps' receives.
  bool pipelineSteps = false;
  /// Every step's sends read the call's source, not only the first step's: the steps are
  /// independent (none sends what another receives), as in hier's intra-host scatter, one step per
  /// lane. Out of place, dst then needs no copy of the source.
  bool sendsReadSource = false;
  /// The last step's receives write every element of dst for the last time: kCopy receives each
  /// element once, a kSum's last receive ends its sum, and nothing reads dst afterwards. An
  /// average's 1/n may then be applied there, while the decoded values are in cache
  /// (ExecParams::outScale), instead of in a pass of its own.
  bool lastStepWritesFinal = false;
  /// Every element of the source is read once, in the first step, and by nothing else: by the
  /// encode of its chunk (allgather-reduce: the self receive decodes this rank's own encoding), or
  /// by the raw receive that starts its owner's sum (sra's and reduce-scatter's own shard). A
  /// prologue may then rewrite each chunk of the source right before that read
  /// (ExecParams::prologue).
  bool readsSourceOnce = false;
};

/// True if the plan reads this rank's own data from dst (a kAccumulate step adds to it), so that an
/// out-of-place run must copy src into dst first. The library's plans never do: their sums take
/// this rank's own values raw from src, so they run straight from src into dst (Executor::run).
bool planNeedsDstInit(const Plan& plan);

/// Compressed scatter-reduce then allgather. Shard boundaries are multiples of `bucket` so that a
/// shard encodes into whole buckets. Step 0: every rank encodes shard p != rank (worker residual)
/// for p; the owner sums its own values of its shard (raw, exact) and then the n - 1 decoded
/// contributions of the others in rank order. Step 1: the owner encodes its reduced shard (owner
/// residual) once, decodes it itself and sends it to all. The steps are pipelined: the owner
/// forwards reduced chunk k while later chunks are still being scattered.
Plan planSra(int rank, int size, size_t count, size_t bucket);

/// Reduce-scatter with fixed shards: rank p owns [p * shardCount, (p + 1) * shardCount) of the source
/// (NCCL's layout). The one step is sra's step 0 on these shards: every rank encodes shard p != rank
/// once (worker residual) for p, and the owner sums its own raw values and then the n - 1 decodings
/// in rank order into dst[0, shardCount).
/// With shardCount a multiple of sra's bucket alignment the shards, the encodings and the sums equal
/// those of planSra's scatter stage bit for bit. There is no owner stage, so no owner residual.
Plan planReduceScatter(int rank, int size, size_t shardCount);

/// Bandwidth-optimal ring: n-1 reduce-scatter steps, then the final owner of each chunk quantizes
/// it in place (a self transfer) and n-1 allgather steps forward it (copy). Each reduce-scatter
/// step is a sum of this rank's own values of the chunk (raw) and the partial sum from the left,
/// so the ring runs out of place without a copy of the source. Chunk c is reduced in the order
/// c, c+1, ..., c+n-1 and owned by rank c-1.
Plan planRing(int rank, int size, size_t count, size_t align = 1);

/// Allreduce by allgather: every rank encodes [0, count) once (worker residual) and sends it to
/// all; every rank sums all n encodings in rank order.
Plan planAllgatherReduce(int rank, int size, size_t count);

/// Allgather collective: rank q's [0, count) lands at dst offset q * count on every rank.
Plan planAllgather(int rank, int size, size_t count);

}  // namespace qccl
