#include "core/call_check.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "qccl/error.hpp"

namespace qccl {
namespace {

// A message, in floats: the sender's words, its verdict (an int64: the lowest index of a word it
// knows to differ, kWords when none), then the floats of the sum.
constexpr size_t kHeadFloats = 2 * (CallCheck::kWords + 1);
constexpr size_t kMsgFloats = kHeadFloats + CallCheck::kMaxFloats;
constexpr int64_t kAgreed = CallCheck::kWords;
constexpr int64_t kCountWord = 1;

// One recursive-doubling exchange at a time: post the receive, send, wait for both, then compare.
class Exchanger {
 public:
  Exchanger(Transport& t, const WaitSpec& w, const int64_t* words, float* mine, float* theirs, size_t bytes,
            CheckTraffic* traffic)
      : t_(t), w_(w), words_(words), mine_(mine), theirs_(theirs), bytes_(bytes), traffic_(traffic) {
    if (traffic_ != nullptr && traffic_->hostOf.empty()) traffic_->hostOf = t_.hostOfRanks();
  }

  int64_t verdict() const { return verdict_; }
  const std::exception_ptr& remote() const { return remote_; }

  // Exchanges with `peer` in `round`. True when the peer's message was received and every rank
  // of both groups agrees so far, so that its floats may be used.
  bool run(int peer, uint32_t round, bool send, bool recv) {
    std::memcpy(mine_ + kHeadFloats - 2, &verdict_, sizeof verdict_);
    const uint32_t tag = t_.tagLimit() - 1 - round;
    RequestPtr r = recv ? t_.irecv(peer, tag, theirs_, kMsgFloats * sizeof(float)) : nullptr;
    RequestPtr s = send ? t_.isend(peer, tag, mine_, bytes_) : nullptr;
    if (send && traffic_ != nullptr) {
      traffic_->sent += bytes_;
      ++traffic_->messages;
      if (otherHost(peer)) traffic_->sentInterHost += bytes_;
    }
    bool rDone = !recv, sDone = !send, refused = false;
    auto done = [&](bool* advanced) {
      if (!rDone) {
        try {
          rDone = r->test();
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kMismatch) throw;
          rDone = refused = true;  // longer than any rank may send: not from a rank that agrees
        }
        if (rDone) *advanced = true;
      }
      if (!sDone) sDone = s->test();
      return rDone && sDone;
    };
    wait(done);
    if (!recv) return false;
    const size_t got = refused ? 0 : r->bytes();
    if (traffic_ != nullptr) traffic_->received += got;
    if (got < kHeadFloats * sizeof(float)) {
      verdict_ = std::min(verdict_, kCountWord);
      return false;
    }
    int64_t head[CallCheck::kWords + 1];
    std::memcpy(head, theirs_, sizeof head);
    for (int i = 0; i < CallCheck::kWords; ++i) {
      if (head[i] != words_[i]) verdict_ = std::min<int64_t>(verdict_, i);
    }
    const int64_t theirVerdict = head[CallCheck::kWords];
    verdict_ = std::min(verdict_, theirVerdict >= 0 && theirVerdict <= kAgreed ? theirVerdict : kCountWord);
    if (got != bytes_) verdict_ = std::min(verdict_, kCountWord);
    return verdict_ == kAgreed;
  }

 private:
  bool otherHost(int peer) const {
    const std::vector<int>& h = traffic_->hostOf;
    const size_t me = static_cast<size_t>(t_.rank()), p = static_cast<size_t>(peer);
    return me < h.size() && p < h.size() && h[p] != h[me];
  }

  // waitUntil(), except that a peer's abort notice switches to a grace period of at most a second
  // without hearing aborts (see checkCall()); any failure after that is the abort.
  template <class Done>
  void wait(Done& done) {
    if (remote_) {
      try {
        waitUntil(t_, w_, done);
      } catch (const Error&) {
        std::rethrow_exception(remote_);
      }
      return;
    }
    try {
      waitUntil(t_, w_, done);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kRemoteError) throw;
      remote_ = std::current_exception();
      w_.hearAborts = false;
      w_.deadline = std::min(w_.deadline, deadlineIn(1.0));
      try {
        waitUntil(t_, w_, done);
      } catch (const Error&) {
        std::rethrow_exception(remote_);
      }
    }
  }

  Transport& t_;
  WaitSpec w_;
  const int64_t* words_;
  float* mine_;
  float* theirs_;
  size_t bytes_;
  CheckTraffic* traffic_;
  int64_t verdict_ = kAgreed;
  std::exception_ptr remote_;
};

}  // namespace

int checkCall(Transport& t, const WaitSpec& w, const int64_t* words, const float* in, float* out, size_t count,
              std::vector<float>& scratch, CheckTraffic* traffic) {
  QCCL_CHECK(in == nullptr || (out != nullptr && count <= CallCheck::kMaxFloats), ErrorCode::kInternalError,
             "check of the call: a sum of " + std::to_string(count) + " elements cannot ride along");
  const size_t n = in != nullptr ? count : 0;
  if (scratch.size() < 2 * kMsgFloats) scratch.assign(2 * kMsgFloats, 0.0f);
  float* mine = scratch.data();
  float* theirs = mine + kMsgFloats;
  float* acc = mine + kHeadFloats;
  std::memcpy(mine, words, CallCheck::kWords * sizeof(int64_t));
  if (n > 0) std::memcpy(acc, in, n * sizeof(float));
  const auto add = [&] {
    const float* b = theirs + kHeadFloats;
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + b[i];
  };
  Exchanger ex(t, w, words, mine, theirs, (kHeadFloats + n) * sizeof(float), traffic);

  // Recursive doubling over the largest power of two p <= size; each of the first 2 * (size - p)
  // ranks pairs up first (the even one hands its part to the odd one and gets the result last).
  const int size = t.size(), me = t.rank();
  int p = 1;
  while (p <= size / 2) p *= 2;
  const int extra = size - p;
  int v = me - extra;  // this rank's place among the p, or -1 while it waits for the result
  if (me < 2 * extra) {
    if (me % 2 == 0) {
      ex.run(me + 1, 0, true, false);
      v = -1;
    } else {
      if (ex.run(me - 1, 0, false, true)) add();
      v = me / 2;
    }
  }
  uint32_t round = 1;
  for (int mask = 1; v >= 0 && mask < p; mask <<= 1, ++round) {
    const int pv = v ^ mask;
    const int peer = pv < extra ? 2 * pv + 1 : pv + extra;
    if (ex.run(peer, round, true, true)) add();
  }
  if (me < 2 * extra) {
    if (me % 2 == 1) {
      ex.run(me - 1, CallCheck::kTags - 1, true, false);
    } else if (ex.run(me + 1, CallCheck::kTags - 1, false, true) && n > 0) {
      std::memcpy(acc, theirs + kHeadFloats, n * sizeof(float));
    }
  }
  const int64_t verdict = ex.verdict();
  if (verdict == kAgreed && ex.remote()) std::rethrow_exception(ex.remote());
  if (verdict != kAgreed) return static_cast<int>(verdict);
  if (n > 0) std::memcpy(out, acc, n * sizeof(float));
  return -1;
}

}  // namespace qccl
