#include "core/executor.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace {

WaitSpec waitSpec(const ExecParams& p, const char* what, WaitTimes* times) {
  WaitSpec w;
  w.deadline = deadlineIn(p.timeoutSec);
  w.what = what;
  w.cancel = p.cancel;
  w.times = times;
  return w;
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Chunk k of a range. An empty range still has one (empty) chunk: its header-only message lets
// the receiver check seq, codec and count even when this rank has nothing to contribute.
size_t chunksOf(const Range& r, size_t chunkElems) {
  if (r.size() == 0 || chunkElems == 0) return 1;
  return (r.size() + chunkElems - 1) / chunkElems;
}

Range chunkOf(const Range& r, size_t chunkElems, size_t k) {
  if (chunkElems == 0) return r;
  size_t b = std::min(r.end, r.begin + k * chunkElems);
  return Range{b, std::min(r.end, b + chunkElems)};
}

// The tag of chunk k of step s (see executor.hpp): the chunk's low 7 bits (a stream has at most
// kMaxPipelineDepth = 64 chunks in flight), the step above them, folded into the tag limit.
constexpr uint32_t kChunkTagBits = 7;
uint32_t makeTag(int step, size_t chunk, uint32_t tagLimit) {
  const uint32_t steps = tagLimit >> kChunkTagBits;  // >= 255 with MPI's guaranteed tag range
  return ((static_cast<uint32_t>(step) % steps) << kChunkTagBits) |
         static_cast<uint32_t>(chunk & ((1u << kChunkTagBits) - 1));
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A distinct Philox stream for every (call, rank, step, chunk), so stochastic rounding errors of
// different messages are independent, and reproducible for the same call.
uint64_t rngOffsetFor(uint32_t seq, int rank, int step, size_t begin) {
  return splitmix64(
      seq ^ splitmix64(static_cast<uint64_t>(rank) ^ splitmix64(static_cast<uint64_t>(step) ^ splitmix64(begin))));
}

// Strings are built only on the error path: a received chunk allocates nothing.
[[noreturn]] void headerMismatch(const WireInfo& info, const ExecParams& p, size_t n, int peer, int me) {
  std::string from = "rank " + std::to_string(me) + ": message from rank " + std::to_string(peer) + ": ";
  // A count is the more concrete disagreement: report it first, naming the other possible cause.
  if (info.count != n)
    QCCL_THROW(ErrorCode::kMismatch, from + "holds " + std::to_string(info.count) + " elements but this rank expects " +
                                         std::to_string(n) + " (element counts differ across ranks" +
                                         (info.seq != p.seq ? ", or the ranks called their collectives in a "
                                                              "different order)"
                                                            : ")"));
  if (info.seq != p.seq)
    QCCL_THROW(ErrorCode::kMismatch, from + "belongs to another call (tag " + std::to_string(info.seq) + " against " +
                                         std::to_string(p.seq) +
                                         "): the ranks called their collectives in a different order, with "
                                         "different tensor ids or with different reduce-scatter counts");
  QCCL_THROW(ErrorCode::kMismatch, from + "codec " + codecName(info.cfg.codec) + "/" + std::to_string(info.cfg.bits) +
                                       " bits/bucket " + std::to_string(info.cfg.bucket) + " but this rank uses " +
                                       codecName(p.codec.codec) + "/" + std::to_string(p.codec.bits) + " bits/bucket " +
                                       std::to_string(p.codec.bucket));
}

// A headerless fp32 chunk of the wrong size (see StepState::bare).
[[noreturn]] void bareMismatch(size_t bytes, size_t n, int peer, int me) {
  QCCL_THROW(ErrorCode::kMismatch, "rank " + std::to_string(me) + ": message from rank " + std::to_string(peer) + ": " +
                                       std::to_string(bytes) + " bytes where this rank expects " + std::to_string(n) +
                                       " fp32 elements (" + std::to_string(n * sizeof(float)) +
                                       " bytes): element counts or codecs differ across ranks");
}

WireInfo checkHeader(const uint8_t* buf, size_t bytes, const ExecParams& p, size_t n, int peer, int me) {
  WireInfo info = parseWire(buf, bytes);
  if (info.seq != p.seq || info.count != n || info.cfg.codec != p.codec.codec || info.cfg.bits != p.codec.bits ||
      info.cfg.bucket != p.codec.bucket || info.cfg.stochastic != p.codec.stochastic)
    headerMismatch(info, p, n, peer, me);
  return info;
}

struct SendGroup {
  Range range;
  std::vector<int> peers;  // remote peers only
  bool self = false;
};

}  // namespace

// Per-step bookkeeping, kept between calls so that a step allocates nothing once the shapes
// have been seen (vectors are cleared, never shrunk).
struct Executor::StepState {
  // The step being run.
  const Plan* plan = nullptr;
  const PlanStep* step = nullptr;
  int si = 0;
  const float* src = nullptr;  // what the step's sends encode: the call's source in step 0, then dst
  const float* own = nullptr;  // the call's source: raw receives (Transfer::raw) take it in any step
  float* dst = nullptr;
  const ExecParams* p = nullptr;
  size_t C = 0, D = 1, nG = 0, nR = 0;
  size_t rounds = 0;  // chunk rounds of this step

  // Send slots hold exactly what this rank encodes.
  size_t sendCapacity(const Range& r) const { return encodedBytes(p->codec, C ? std::min(C, r.size()) : r.size()); }
  // Receive slots hold exactly one chunk of the expected encoding (see executor.hpp).
  size_t recvCapacity(const Range& r) const { return encodedBytes(p->codec, C ? std::min(C, r.size()) : r.size()); }

  std::vector<SendGroup> groups;
  // Per receive: the send group whose encoding a self receive takes, kRemote for a peer's
  // message, kRaw for this rank's own source values (Transfer::raw).
  // kIdentity: an fp32 self receive that would write back the very values it sent (the ring's
  // first allgather step, which quantizes a lossy codec's sum in place): nothing to do.
  static constexpr int kRemote = -1, kRaw = -2, kIdentity = -3;
  std::vector<int> selfGroup;
  std::vector<uint8_t*> gslot, rslot;
  std::vector<size_t> gbytes;
  std::vector<std::vector<RequestPtr>> sreq;
  std::vector<RequestPtr> rreq;
  std::vector<RequestPtr> pending;
  std::vector<WireInfo> sumInfo;    // recvSumChunk: one parsed header per receive stream
  std::vector<const void*> sumBuf;  // and its bytes

  // fp32 streams (see executor.hpp, "Raw fp32"): chunk 0 carries the header, every later chunk is
  // the bare floats. `gdirect[g]`: group g sends chunks k >= 1 straight from the buffer it reads,
  // without a copy into its slot. `rdirect[r]`: receive r (kCopy) takes chunks k >= 1 straight
  // into dst.
  bool raw = false;
  std::vector<uint8_t> gdirect, rdirect;
  // A chunk k >= 1 of an fp32 stream: no header on the wire.
  bool bare(size_t k) const { return raw && k > 0; }

  // Drops every outstanding request (after a failure; the staging they point at stays alive).
  void reset() noexcept {
    for (auto& v : sreq) v.clear();
    for (auto& r : rreq) r.reset();
    pending.clear();
  }
};

Executor::Executor(Transport& transport) : t_(transport), hostOf_(transport.hostOfRanks()) {}
Executor::~Executor() {
  scratch_.clear();                // outstanding requests go before the memory they point at
  if (!poisoned_) releaseSlots();  // after a failure the slots are leaked on purpose (abandon())
}

void Executor::releaseSlots() {
  for (Slot& s : slots_) {
    if (s.ptr == nullptr) continue;
    if (alloc_.release) {
      alloc_.release(s.ptr);
    } else {
      delete[] s.ptr;
    }
    stats_.stagingBytes -= s.bytes;
    s = Slot{};
  }
}

void Executor::setHostAllocator(HostAllocator a) {
  releaseSlots();
  alloc_ = a;
}

size_t Executor::chunkElemsFor(const CodecConfig& codec, size_t chunkBytes) {
  size_t align = codec.bucket ? codec.bucket : 32;
  size_t elems = chunkBytes / sizeof(float);
  return std::max(align, elems / align * align);
}

size_t Executor::eagerChunkElems(const CodecConfig& codec, size_t eagerBytes, size_t maxElems) {
  const size_t align = codec.bucket ? codec.bucket : 32;
  if (eagerBytes <= kEagerHeadroom || maxElems < align) return maxElems;
  const size_t room = eagerBytes - kEagerHeadroom;
  // encodedBytes grows with the count: the largest number of buckets that fits, by bisection.
  size_t lo = 0, hi = maxElems / align;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (encodedBytes(codec, mid * align) <= room) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo == 0 ? maxElems : lo * align;
}

void Executor::accountStaging(size_t grown) {
  stats_.stagingBytes += grown;
  stats_.peakStagingBytes = std::max(stats_.peakStagingBytes, stats_.stagingBytes);
}

uint8_t* Executor::slot(size_t index, size_t bytes) {
  if (slots_.size() <= index) slots_.resize(index + 1);
  Slot& s = slots_[index];
  if (s.bytes < bytes) {
    // Slots are staging between messages only: their content need not survive a resize.
    uint8_t* fresh = alloc_.alloc ? static_cast<uint8_t*>(alloc_.alloc(bytes)) : new uint8_t[bytes];
    if (s.ptr != nullptr) {
      if (alloc_.release) {
        alloc_.release(s.ptr);
      } else {
        delete[] s.ptr;
      }
    }
    stats_.stagingBytes -= s.bytes;
    accountStaging(bytes);
    s.ptr = fresh;
    s.bytes = bytes;
  }
  return s.ptr;
}

void Executor::run(const Plan& plan, const float* src, float* dst, const ExecParams& params) {
  QCCL_CHECK(
      (params.outScale == 1.0f && params.epilogue == nullptr) || (plan.lastStepWritesFinal && params.ops == nullptr),
      ErrorCode::kInternalError,
      "executor: outScale or an epilogue on a plan whose last step does not write dst's final values");
  QCCL_CHECK(params.prologue == nullptr ||
                 (plan.readsSourceOnce && params.ops == nullptr && params.codec.codec != CodecId::kFp32),
             ErrorCode::kInternalError, "executor: a prologue on a plan that does not read its source once");
  if (plan.pipelineSteps) {
    runSteps(plan, 0, plan.steps.size(), src, dst, params);
  } else {
    for (size_t s = 0; s < plan.steps.size(); ++s) runSteps(plan, s, s + 1, src, dst, params);
  }
}

void Executor::abandon() noexcept {
  for (auto& st : scratch_) st->reset();
  // A peer may still read these slots through a rendezvous it matched before it heard of the
  // failure (a get from this process's memory): they are never freed or reused.
  poisoned_ = true;
}

// Runs steps [first, last) together, chunk round by chunk round: in round k every step sends its
// chunk k, then receives its chunk k, in step order. A step's sends only read what earlier steps
// received in the same or earlier rounds (sra: the owner forwards reduced chunk k while chunk
// k+1 is still being scattered), so this is the plan's order with the step boundaries pipelined.
void Executor::runSteps(const Plan& plan, size_t first, size_t last, const float* src, float* dst,
                        const ExecParams& p) {
  while (scratch_.size() < last - first) scratch_.push_back(std::make_unique<StepState>());
  size_t rounds = 0, slotBase = 0;
  for (size_t s = first; s < last; ++s) {
    StepState& S = *scratch_[s - first];
    S.plan = &plan;
    S.step = &plan.steps[s];
    S.si = static_cast<int>(s);
    S.src = s == 0 || plan.sendsReadSource ? src : dst;  // a later step sends what earlier steps received
    S.own = src;
    S.dst = dst;
    S.p = &p;
    S.C = p.chunkElems;
    S.D = static_cast<size_t>(std::max(1, p.depth));
    slotBase = prepareStep(S, slotBase);
    rounds = std::max(rounds, S.rounds);
  }
  planDirect(first, last, dst);
  for (size_t s = first; s < last; ++s) postFirstRecvs(*scratch_[s - first]);
  for (size_t k = 0; k < rounds; ++k) {
    for (size_t s = 0; s < last - first; ++s) {
      StepState& S = *scratch_[s];
      for (size_t g = 0; g < S.nG; ++g)
        if (k < chunksOf(S.groups[g].range, S.C)) sendChunk(S, g, k);
      if (S.step->op == RecvOp::kSum && S.nR > 1 && p.ops == nullptr) {
        if (k < chunksOf(S.step->recvs[0].range, S.C)) recvSumChunk(S, k);
        continue;
      }
      bool firstRecv = true;
      for (size_t r = 0; r < S.nR; ++r) {
        if (k >= chunksOf(S.step->recvs[r].range, S.C)) continue;
        recvChunk(S, r, k, firstRecv);
        firstRecv = false;
      }
    }
  }
  for (size_t s = 0; s < last - first; ++s) finishStep(*scratch_[s]);
}

// Waits for the step's last sends, so that its slots are free for the next call.
void Executor::finishStep(StepState& S) {
  S.pending.clear();
  for (size_t i = 0; i < S.nG * S.D; ++i) {
    for (auto& rq : S.sreq[i]) S.pending.push_back(std::move(rq));
    S.sreq[i].clear();
  }
  waitAll(t_, S.pending, waitSpec(*S.p, "send", &stats_.waits));
  S.pending.clear();
}

// Groups the sends by range (one encoding each), matches self receives to their encoding, assigns
// staging slots from `slotBase` on and posts the first `depth` receives of every stream. Returns
// the next free slot index.
size_t Executor::prepareStep(StepState& S, size_t slotBase) {
  const PlanStep& st = *S.step;
  const int me = S.plan->rank;
  S.nG = 0;
  for (const Transfer& tr : st.sends) {
    if (S.nG == 0 || !(S.groups[S.nG - 1].range == tr.range)) {
      if (S.groups.size() <= S.nG) S.groups.emplace_back();
      S.groups[S.nG].range = tr.range;
      S.groups[S.nG].peers.clear();
      S.groups[S.nG].self = false;
      ++S.nG;
    }
    if (tr.peer == me) {
      S.groups[S.nG - 1].self = true;
    } else {
      S.groups[S.nG - 1].peers.push_back(tr.peer);
    }
  }
  S.nR = st.recvs.size();
  S.raw = S.p->codec.codec == CodecId::kFp32;
  for (size_t r = 1; r < S.nR && st.op == RecvOp::kSum; ++r)
    QCCL_CHECK(st.recvs[r].range == st.recvs[0].range && st.recvs[r].dstOffset == st.recvs[0].dstOffset,
               ErrorCode::kInternalError, "plan: the receives of a sum step differ in range");
  S.selfGroup.assign(S.nR, StepState::kRemote);
  for (size_t r = 0; r < S.nR; ++r) {
    QCCL_CHECK(!st.recvs[r].raw || (st.recvs[r].peer == me && r == 0 && st.op == RecvOp::kSum),
               ErrorCode::kInternalError, "plan: a raw receive must be the first receive of a sum step, from itself");
    if (st.recvs[r].raw) {
      S.selfGroup[r] = StepState::kRaw;
      continue;
    }
    if (st.recvs[r].peer != me) continue;
    for (size_t g = 0; g < S.nG; ++g)
      if (S.groups[g].self && S.groups[g].range == st.recvs[r].range) S.selfGroup[r] = static_cast<int>(g);
    QCCL_CHECK(S.selfGroup[r] >= 0, ErrorCode::kInternalError, "plan: self receive without a matching self send");
  }
  // fp32 is lossless: a self copy of a range onto itself, with no residual to fold in, changes
  // nothing. Its group then has no self receive left to feed.
  if (S.raw && st.op == RecvOp::kCopy && S.src == S.dst &&
      (st.residual == Residual::kNone || (st.residual == Residual::kWorker && !S.p->workerResidual) ||
       (st.residual == Residual::kOwner && !S.p->ownerResidual))) {
    for (size_t r = 0; r < S.nR; ++r) {
      const int g = S.selfGroup[r];
      if (g < 0 || st.recvs[r].dstOffset != st.recvs[r].range.begin) continue;
      S.selfGroup[r] = StepState::kIdentity;
      bool fed = false;  // another self receive still takes this group's encoding
      for (size_t q = 0; q < S.nR; ++q) fed = fed || S.selfGroup[q] == g;
      if (!fed) S.groups[static_cast<size_t>(g)].self = false;
    }
  }
  S.gslot.assign(S.nG * S.D, nullptr);
  S.rslot.assign(S.nR * S.D, nullptr);
  S.gbytes.assign(S.nG, 0);
  size_t next = slotBase;
  // A stream of K chunks needs min(depth, K) slots: chunk k uses slot k % depth.
  for (size_t g = 0; g < S.nG; ++g) {
    const size_t K = std::min(S.D, chunksOf(S.groups[g].range, S.C));
    for (size_t d = 0; d < K; ++d) S.gslot[g * S.D + d] = slot(next++, S.sendCapacity(S.groups[g].range));
  }
  for (size_t r = 0; r < S.nR; ++r) {
    if (S.selfGroup[r] != StepState::kRemote) continue;
    const size_t K = std::min(S.D, chunksOf(st.recvs[r].range, S.C));
    for (size_t d = 0; d < K; ++d) S.rslot[r * S.D + d] = slot(next++, S.recvCapacity(st.recvs[r].range));
  }
  if (S.sreq.size() < S.nG * S.D) S.sreq.resize(S.nG * S.D);
  if (S.rreq.size() < S.nR * S.D) S.rreq.resize(S.nR * S.D);
  S.rounds = 0;
  for (size_t g = 0; g < S.nG; ++g) S.rounds = std::max(S.rounds, chunksOf(S.groups[g].range, S.C));
  for (size_t r = 0; r < S.nR; ++r) S.rounds = std::max(S.rounds, chunksOf(st.recvs[r].range, S.C));
  return next;
}

// Which fp32 streams of steps [first, last) may skip their slots (StepState::gdirect, rdirect).
// A send straight from memory is still being read while later chunks arrive, and a receive into
// dst lands `depth` chunks ahead of the plan's order, so either is allowed only where nothing else
// of these steps touches the same elements of dst meanwhile: a direct send's range must not be
// written by any receive of the steps (unless it reads the source, which is not dst), a direct
// receive's range must not be read by any send or raw receive. The steps after them start only
// once these sends have completed (finishStep). Device buffers (ops) always go through slots.
void Executor::planDirect(size_t first, size_t last, const float* dst) {
  auto overlaps = [](size_t b0, size_t e0, size_t b1, size_t e1) { return b0 < e1 && b1 < e0; };
  for (size_t s = 0; s < last - first; ++s) {
    StepState& S = *scratch_[s];
    S.gdirect.assign(S.nG, 0);
    S.rdirect.assign(S.nR, 0);
    if (!S.raw || S.p->ops != nullptr) continue;
    for (size_t g = 0; g < S.nG; ++g) {
      const SendGroup& grp = S.groups[g];
      if (grp.self || grp.peers.empty()) continue;
      bool clash = false;
      if (S.src == dst) {
        for (size_t o = 0; o < last - first && !clash; ++o) {
          const StepState& O = *scratch_[o];
          for (size_t r = 0; r < O.nR && !clash; ++r) {
            if (O.selfGroup[r] == StepState::kIdentity) continue;
            const Transfer& tr = O.step->recvs[r];
            clash = overlaps(grp.range.begin, grp.range.end, tr.dstOffset, tr.dstOffset + tr.range.size());
          }
        }
      }
      S.gdirect[g] = !clash;
    }
    if (S.step->op != RecvOp::kCopy) continue;
    for (size_t r = 0; r < S.nR; ++r) {
      if (S.selfGroup[r] != StepState::kRemote) continue;
      const Transfer& tr = S.step->recvs[r];
      const size_t b = tr.dstOffset, e = tr.dstOffset + tr.range.size();
      bool clash = false;
      for (size_t o = 0; o < last - first && !clash; ++o) {
        const StepState& O = *scratch_[o];
        if (O.src == dst)
          for (size_t g = 0; g < O.nG && !clash; ++g)
            clash = overlaps(b, e, O.groups[g].range.begin, O.groups[g].range.end);
        if (O.own == dst)
          for (size_t q = 0; q < O.nR && !clash; ++q)
            if (O.selfGroup[q] == StepState::kRaw)
              clash = overlaps(b, e, O.step->recvs[q].range.begin, O.step->recvs[q].range.end);
      }
      S.rdirect[r] = !clash;
    }
  }
}

void Executor::postFirstRecvs(StepState& S) {
  for (size_t r = 0; r < S.nR; ++r) {
    if (S.selfGroup[r] != StepState::kRemote) continue;
    const size_t K = chunksOf(S.step->recvs[r].range, S.C);
    for (size_t k = 0; k < std::min(S.D, K); ++k) postRecv(S, r, k);
  }
}

void Executor::postRecv(StepState& S, size_t r, size_t k) {
  const Transfer& tr = S.step->recvs[r];
  size_t i = r * S.D + k % S.D;
  const uint32_t tag = makeTag(S.si, k, t_.tagLimit());
  if (S.bare(k)) {  // the bare floats: into dst, or behind the header's room in the slot
    const Range c = chunkOf(tr.range, S.C, k);
    void* into = S.rdirect[r] ? static_cast<void*>(S.dst + tr.dstOffset + (c.begin - tr.range.begin))
                              : static_cast<void*>(S.rslot[i] + kWireHeaderBytes);
    S.rreq[i] = t_.irecv(tr.peer, tag, into, c.size() * sizeof(float));
    return;
  }
  S.rreq[i] = t_.irecv(tr.peer, tag, S.rslot[i], S.recvCapacity(tr.range));
}

// Encodes chunk k of send group g once (after the slot's previous sends completed) and sends it
// to every remote peer of the group.
void Executor::sendChunk(StepState& S, size_t g, size_t k) {
  const ExecParams& p = *S.p;
  const SendGroup& grp = S.groups[g];
  std::vector<RequestPtr>& reqs = S.sreq[g * S.D + k % S.D];
  if (!reqs.empty()) {
    waitAll(t_, reqs, waitSpec(p, "send", &stats_.waits));
    reqs.clear();
  }
  Range c = chunkOf(grp.range, S.C, k);
  float* res = nullptr;
  if (S.step->residual == Residual::kWorker && p.workerResidual) res = p.workerResidual + c.begin;
  if (S.step->residual == Residual::kOwner && p.ownerResidual)
    res = p.ownerResidual + (c.begin - S.plan->ownerRange.begin);
  EncodeParams ep;
  ep.seq = p.seq;
  ep.rngOffset = rngOffsetFor(p.seq, S.plan->rank, S.si, c.begin);
  ep.spanElems = grp.range.size();  // a chunk of a large range comes from memory (the kernels prefetch)
  if (res != nullptr) ep.feedbackGain = p.feedbackGain;
  uint8_t* buf = S.gslot[g * S.D + k % S.D];
  const void* wire = buf;
  size_t bytes;
  if (S.bare(k) && S.gdirect[g]) {  // the floats as they are, no copy (planDirect)
    wire = S.src + c.begin;
    bytes = c.size() * sizeof(float);
  } else {
    size_t cap = S.sendCapacity(grp.range);
    if (p.prologue != nullptr && S.si == 0)  // the first step's sends read the source
      p.prologue->fn(p.prologue->ctx, const_cast<float*>(S.src + c.begin), c.size());
    const Clock::time_point t0 = Clock::now();
    bytes = p.ops ? p.ops->encode(p.codec, S.src + c.begin, res, c.size(), buf, cap, ep)
                  : encode(p.codec, S.src + c.begin, res, c.size(), buf, cap, ep);
    stats_.encodeSec += since(t0);
    S.gbytes[g] = bytes;  // a self receive takes the whole encoding
    if (S.bare(k)) {
      wire = buf + kWireHeaderBytes;
      bytes -= kWireHeaderBytes;
    }
  }
  for (int peer : grp.peers) {
    reqs.push_back(t_.isend(peer, makeTag(S.si, k, t_.tagLimit()), wire, bytes));
    stats_.bytesSent += bytes;
    ++stats_.messagesSent;
    if (hostOf_[static_cast<size_t>(peer)] != hostOf_[static_cast<size_t>(t_.rank())])
      stats_.bytesSentInterHost += bytes;
  }
}

const uint8_t* Executor::takeChunk(StepState& S, size_t r, size_t k, WireInfo* info) {
  const ExecParams& p = *S.p;
  const Transfer& tr = S.step->recvs[r];
  const Range c = chunkOf(tr.range, S.C, k);
  const uint8_t* buf;
  size_t bytes;
  const int self = S.selfGroup[r];
  if (self >= 0) {
    buf = S.gslot[self * S.D + k % S.D];
    bytes = S.gbytes[self];
  } else {
    RequestPtr& req = S.rreq[r * S.D + k % S.D];
    Request& one = *req;
    waitUntil(t_, waitSpec(p, "receive", &stats_.waits), [&](bool*) { return one.test(); });
    bytes = req->bytes();
    req.reset();
    stats_.bytesReceived += bytes;
    buf = S.rslot[r * S.D + k % S.D];
    if (S.bare(k)) {
      // No header: chunk 0 of this stream had one and passed checkHeader, so only the size is
      // left to check. The floats are behind the slot's header room, or already in dst; decoders
      // take the parsed info and read only the payload (the header room is not written).
      if (bytes != c.size() * sizeof(float)) bareMismatch(bytes, c.size(), tr.peer, S.plan->rank);
      info->cfg = p.codec;
      info->seq = p.seq;
      info->flags = 0;
      info->count = c.size();
      info->totalBytes = kWireHeaderBytes + bytes;
      return buf;
    }
  }
  try {
    *info = checkHeader(buf, bytes, p, c.size(), tr.peer, S.plan->rank);
  } catch (const Error&) {
    // A peer that aborted may have left bytes of its failed call behind (or torn down memory a
    // rendezvous still reads): its notice, when there is one, is the cause to report.
    WaitSpec w;
    w.deadline = Clock::time_point::max();
    w.what = "receive";
    pollWait(t_, w);
    throw;
  }
  return buf;
}

// Waits for chunk k of receive stream r (or takes this rank's own encoding), validates its
// header, decodes it into place and reposts the slot for chunk k + depth.
void Executor::recvChunk(StepState& S, size_t r, size_t k, bool first) {
  const ExecParams& p = *S.p;
  const Transfer& tr = S.step->recvs[r];
  const Range c = chunkOf(tr.range, S.C, k);
  float* out = S.dst + tr.dstOffset + (c.begin - tr.range.begin);
  const RecvOp op = S.step->op;
  if (S.selfGroup[r] == StepState::kRaw) {  // the first term of a sum: this rank's own values
    if (p.prologue != nullptr) p.prologue->fn(p.prologue->ctx, const_cast<float*>(S.own + c.begin), c.size());
    const Clock::time_point t0 = Clock::now();
    if (p.ops) {
      p.ops->copyFloats(S.own + c.begin, out, c.size());
    } else {
      const bool last = static_cast<size_t>(S.si) + 1 == S.plan->steps.size() && r + 1 == S.nR;
      decodeSumParsed(nullptr, nullptr, 0, out, c.size(), last ? p.outScale : 1.0f, S.own + c.begin,
                      last ? p.epilogue : nullptr);
    }
    stats_.decodeSec += since(t0);
    return;
  }
  // The last write of these elements (Plan::lastStepWritesFinal): the average's 1/n goes in here.
  const bool last = static_cast<size_t>(S.si) + 1 == S.plan->steps.size() &&
                    (op == RecvOp::kCopy || (op == RecvOp::kSum && r + 1 == S.nR));
  const bool direct = S.selfGroup[r] == StepState::kIdentity || (S.bare(k) && S.rdirect[r]);
  if (direct) {  // the values are in place already: at most the average's 1/n is left to apply
    WireInfo unused;
    if (S.selfGroup[r] != StepState::kIdentity) takeChunk(S, r, k, &unused);
    if (last && (p.outScale != 1.0f || p.epilogue != nullptr)) {
      const Clock::time_point t0 = Clock::now();
      decodeSumParsed(nullptr, nullptr, 0, out, c.size(), p.outScale, out, p.epilogue);
      stats_.decodeSec += since(t0);
    }
    if (S.selfGroup[r] == StepState::kRemote && k + S.D < chunksOf(tr.range, S.C)) postRecv(S, r, k + S.D);
    return;
  }
  WireInfo info;
  const uint8_t* buf = takeChunk(S, r, k, &info);
  const Clock::time_point t0 = Clock::now();
  bool add = !(op == RecvOp::kCopy || (op == RecvOp::kSum && first));
  if (p.ops) {
    p.ops->decode(info, buf, out, c.size(), add);
  } else {
    decodeParsed(info, buf, out, c.size(), add, last ? p.outScale : 1.0f, last ? p.epilogue : nullptr);
  }
  stats_.decodeSec += since(t0);
  if (S.selfGroup[r] == StepState::kRemote && k + S.D < chunksOf(tr.range, S.C)) postRecv(S, r, k + S.D);
}

// kSum: every stream holds the same range, summed in receive order. Waiting for all of chunk k
// first and decoding them together writes the chunk once, bucket by bucket in cache, instead of
// reading and writing it once per stream (the sum and its order are the same: decodeSumParsed).
void Executor::recvSumChunk(StepState& S, size_t k) {
  const ExecParams& p = *S.p;
  const Range range = S.step->recvs[0].range;
  const Range c = chunkOf(range, S.C, k);
  // A raw first receive (this rank's own values) starts the sum instead of a decoding.
  const size_t first = S.selfGroup[0] == StepState::kRaw ? 1 : 0;
  const float* init = first ? S.own + c.begin : nullptr;
  if (first && p.prologue != nullptr) p.prologue->fn(p.prologue->ctx, const_cast<float*>(init), c.size());
  S.sumInfo.resize(S.nR - first);
  S.sumBuf.resize(S.nR - first);
  for (size_t r = first; r < S.nR; ++r) S.sumBuf[r - first] = takeChunk(S, r, k, &S.sumInfo[r - first]);
  const Clock::time_point t0 = Clock::now();
  float* out = S.dst + S.step->recvs[0].dstOffset + (c.begin - range.begin);
  const bool last = static_cast<size_t>(S.si) + 1 == S.plan->steps.size();
  decodeSumParsed(S.sumInfo.data(), S.sumBuf.data(), S.nR - first, out, c.size(), last ? p.outScale : 1.0f, init,
                  last ? p.epilogue : nullptr);
  stats_.decodeSec += since(t0);
  for (size_t r = 0; r < S.nR; ++r)
    if (S.selfGroup[r] == StepState::kRemote && k + S.D < chunksOf(range, S.C)) postRecv(S, r, k + S.D);
}

}  // namespace qccl
