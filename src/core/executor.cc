#include "core/executor.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace {

// Same back-off as waitAll: yield for a while, then let the transport sleep briefly so that ranks
// sharing a core (threads, --oversubscribe) do not starve each other.
constexpr int kSpinRounds = 64;

Clock::time_point deadlineFrom(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void waitOne(Transport& t, Request& req, double timeoutSec, const char* what) {
  Clock::time_point deadline = deadlineFrom(timeoutSec);
  for (int round = 0;; ++round) {
    t.progress();
    if (req.test()) return;
    pollOrThrow(t, deadline, what);
    t.idle(round < kSpinRounds ? std::chrono::microseconds(0) : std::chrono::microseconds(50));
  }
}

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

// Tags only need to tell apart the streams of one call: messages between two ranks with the same
// tag are matched in order, and the header's seq catches calls that got out of step.
uint32_t makeTag(int step, size_t chunk) {
  return (static_cast<uint32_t>(step & 0xff) << 16) | static_cast<uint32_t>(chunk & 0xffff);
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

WireInfo checkHeader(const uint8_t* buf, size_t bytes, const ExecParams& p, size_t n, int peer, int me) {
  WireInfo info = parseWire(buf, bytes);
  std::string from = "rank " + std::to_string(me) + ": message from rank " + std::to_string(peer) + ": ";
  if (info.seq != p.seq)
    QCCL_THROW(ErrorCode::kMismatch, from + "belongs to call " + std::to_string(info.seq) +
                                         " but this rank is in call " + std::to_string(p.seq) +
                                         " (collectives called in a different order)");
  if (info.cfg.codec != p.codec.codec || info.cfg.bits != p.codec.bits || info.cfg.bucket != p.codec.bucket ||
      info.cfg.stochastic != p.codec.stochastic)
    QCCL_THROW(ErrorCode::kMismatch, from + "codec " + codecName(info.cfg.codec) + "/" + std::to_string(info.cfg.bits) +
                                         " bits/bucket " + std::to_string(info.cfg.bucket) + " but this rank uses " +
                                         codecName(p.codec.codec) + "/" + std::to_string(p.codec.bits) +
                                         " bits/bucket " + std::to_string(p.codec.bucket));
  if (info.count != n)
    QCCL_THROW(ErrorCode::kMismatch, from + "holds " + std::to_string(info.count) + " elements but this rank expects " +
                                         std::to_string(n) + " (element counts differ across ranks)");
  return info;
}

struct SendGroup {
  Range range;
  std::vector<int> peers;  // remote peers only
  bool self = false;
};

}  // namespace

Executor::Executor(Transport& transport) : t_(transport) {}
Executor::~Executor() = default;

size_t Executor::chunkElemsFor(const CodecConfig& codec, size_t chunkBytes) {
  size_t align = codec.bucket ? codec.bucket : 32;
  size_t elems = chunkBytes / sizeof(float);
  return std::max(align, elems / align * align);
}

void Executor::accountStaging(size_t grown) {
  stats_.stagingBytes += grown;
  stats_.peakStagingBytes = std::max(stats_.peakStagingBytes, stats_.stagingBytes);
}

uint8_t* Executor::slot(size_t index, size_t bytes) {
  if (slots_.size() <= index) slots_.resize(index + 1);
  std::vector<uint8_t>& s = slots_[index];
  if (s.size() < bytes) {
    accountStaging(bytes - s.size());
    s.resize(bytes);
  }
  return s.data();
}

void* Executor::extraBuffer(size_t index, size_t bytes) {
  if (extra_.size() <= index) extra_.resize(index + 1);
  std::vector<uint8_t>& s = extra_[index];
  if (s.size() < bytes) {
    accountStaging(bytes - s.size());
    s.resize(bytes);
  }
  return s.data();
}

void Executor::run(const Plan& plan, const float* src, float* dst, const ExecParams& params) {
  for (int s = 0; s < static_cast<int>(plan.steps.size()); ++s) runStep(plan, s, src, dst, params);
}

void Executor::runStep(const Plan& plan, int si, const float* src, float* dst, const ExecParams& p) {
  const PlanStep& st = plan.steps[si];
  const int me = plan.rank;
  const size_t C = p.chunkElems;
  const size_t D = static_cast<size_t>(std::max(1, p.depth));

  std::vector<SendGroup> groups;
  for (const Transfer& tr : st.sends) {
    if (groups.empty() || !(groups.back().range == tr.range)) groups.push_back(SendGroup{tr.range, {}, false});
    if (tr.peer == me) {
      groups.back().self = true;
    } else {
      groups.back().peers.push_back(tr.peer);
    }
  }
  const size_t nG = groups.size(), nR = st.recvs.size();
  std::vector<int> selfGroup(nR, -1);
  for (size_t r = 0; r < nR; ++r) {
    if (st.recvs[r].peer != me) continue;
    for (size_t g = 0; g < nG; ++g)
      if (groups[g].self && groups[g].range == st.recvs[r].range) selfGroup[r] = static_cast<int>(g);
    QCCL_CHECK(selfGroup[r] >= 0, ErrorCode::kInternalError, "plan: self receive without a matching self send");
  }

  // Receive slots have room for a somewhat longer message than expected, so that ranks that
  // disagree on the count are told so by the header check (kMismatch) rather than by the
  // transport's "message too long".
  auto capacity = [&](const Range& r) {
    size_t elems = r.size() + r.size() / 2 + 1024;
    return encodedBytes(p.codec, C ? std::min(C, elems) : elems);
  };
  std::vector<uint8_t*> gslot(nG * D), rslot(nR * D, nullptr);
  std::vector<size_t> gbytes(nG, 0);
  size_t next = 0;
  for (size_t g = 0; g < nG; ++g)
    for (size_t d = 0; d < D; ++d) gslot[g * D + d] = slot(next++, capacity(groups[g].range));
  for (size_t r = 0; r < nR; ++r)
    if (selfGroup[r] < 0)
      for (size_t d = 0; d < D; ++d) rslot[r * D + d] = slot(next++, capacity(st.recvs[r].range));

  std::vector<std::vector<RequestPtr>> sreq(nG * D);
  std::vector<RequestPtr> rreq(nR * D);
  auto postRecv = [&](size_t r, size_t k) {
    const Transfer& tr = st.recvs[r];
    rreq[r * D + k % D] = t_.irecv(tr.peer, makeTag(si, k), rslot[r * D + k % D], capacity(tr.range));
  };
  size_t J = 0;
  for (const SendGroup& g : groups) J = std::max(J, chunksOf(g.range, C));
  for (size_t r = 0; r < nR; ++r) {
    size_t K = chunksOf(st.recvs[r].range, C);
    J = std::max(J, K);
    if (selfGroup[r] < 0)
      for (size_t k = 0; k < std::min(D, K); ++k) postRecv(r, k);
  }

  for (size_t k = 0; k < J; ++k) {
    for (size_t g = 0; g < nG; ++g) {
      const SendGroup& grp = groups[g];
      if (k >= chunksOf(grp.range, C)) continue;
      std::vector<RequestPtr>& reqs = sreq[g * D + k % D];
      if (!reqs.empty()) {
        waitAll(t_, reqs, deadlineFrom(p.timeoutSec), "send");
        reqs.clear();
      }
      Range c = chunkOf(grp.range, C, k);
      float* res = nullptr;
      if (st.residual == Residual::kWorker && p.workerResidual) res = p.workerResidual + c.begin;
      if (st.residual == Residual::kOwner && p.ownerResidual) res = p.ownerResidual + (c.begin - plan.ownerRange.begin);
      EncodeParams ep;
      ep.seq = p.seq;
      ep.rngOffset = rngOffsetFor(p.seq, me, si, c.begin);
      uint8_t* buf = gslot[g * D + k % D];
      size_t bytes = p.ops ? p.ops->encode(p.codec, src + c.begin, res, c.size(), buf, capacity(grp.range), ep)
                           : encode(p.codec, src + c.begin, res, c.size(), buf, capacity(grp.range), ep);
      gbytes[g] = bytes;
      for (int peer : grp.peers) {
        reqs.push_back(t_.isend(peer, makeTag(si, k), buf, bytes));
        stats_.bytesSent += bytes;
      }
    }
    bool first = true;
    for (size_t r = 0; r < nR; ++r) {
      const Transfer& tr = st.recvs[r];
      size_t K = chunksOf(tr.range, C);
      if (k >= K) continue;
      Range c = chunkOf(tr.range, C, k);
      const uint8_t* buf;
      size_t bytes;
      if (selfGroup[r] >= 0) {
        buf = gslot[selfGroup[r] * D + k % D];
        bytes = gbytes[selfGroup[r]];
      } else {
        RequestPtr& req = rreq[r * D + k % D];
        waitOne(t_, *req, p.timeoutSec, "receive");
        bytes = req->bytes();
        stats_.bytesReceived += bytes;
        buf = rslot[r * D + k % D];
      }
      WireInfo info = checkHeader(buf, bytes, p, c.size(), tr.peer, me);
      float* out = dst + tr.dstOffset + (c.begin - tr.range.begin);
      bool add = !(st.op == RecvOp::kCopy || (st.op == RecvOp::kSum && first));
      if (p.ops) {
        p.ops->decode(info, buf, out, c.size(), add);
      } else if (add) {
        decodeAdd(buf, bytes, out, c.size());
      } else {
        decode(buf, bytes, out, c.size());
      }
      first = false;
      if (selfGroup[r] < 0 && k + D < K) postRecv(r, k + D);
    }
  }
  std::vector<RequestPtr> pending;
  for (auto& v : sreq)
    for (auto& rq : v) pending.push_back(std::move(rq));
  waitAll(t_, pending, deadlineFrom(p.timeoutSec), "send");
}

}  // namespace qccl
