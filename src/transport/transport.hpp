// Point-to-point transport interface (internal). Non-blocking sends and receives of byte
// buffers between ranks, plus a control channel that carries an abort notice to every peer.
//
// Implementations: MPI (mpi_transport.cc), UCX (ucx_transport.cc), loopback threads
// (loopback_transport.cc). Every wait goes through waitUntil(), which has a deadline, hears abort
// notices and can be cancelled from another thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "qccl/error.hpp"

namespace qccl {

/// Upper bound of data tags on every transport; a transport may offer fewer (Transport::tagLimit).
/// MPI guarantees only tags up to 32767, so callers fold their tags into tagLimit().
constexpr uint32_t kMaxTag = 1u << 24;
/// The smallest tagLimit() a transport may report (MPI's guaranteed MPI_TAG_UB, 32767, minus the
/// tag the MPI transport keeps for abort notices).
constexpr uint32_t kMinTagLimit = 32767;

using Clock = std::chrono::steady_clock;

/// One outstanding send or receive. Owned through RequestPtr, whose deleter calls release(): a
/// transport may then drop an unfinished request (bounded by limitDrops) and recycle the object,
/// so that steady-state messaging allocates nothing. Requests must die before their transport.
class Request {
 public:
  /// True once complete. Throws Error (kTransportError, kRemoteError, kMismatch, ...) if it failed.
  virtual bool test() = 0;
  /// Bytes transferred (for a receive: bytes actually received, valid after completion).
  virtual size_t bytes() const = 0;

 protected:
  virtual ~Request() = default;
  /// Called when the owner lets go. The default deletes the request.
  virtual void release() noexcept { delete this; }
  friend struct RequestDeleter;
};

struct RequestDeleter {
  void operator()(Request* r) const noexcept {
    if (r != nullptr) r->release();
  }
};
using RequestPtr = std::unique_ptr<Request, RequestDeleter>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "ucx" or "loopback".
  virtual const char* name() const = 0;

  /// Starts sending `bytes` bytes to `peer` under `tag` (< kMaxTag). `buf` must stay valid until done.
  virtual RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) = 0;
  /// Starts receiving at most `capacity` bytes from `peer` under `tag`. A longer message fails the
  /// request with Error(kMismatch) and is never written past `capacity` bytes: to qccl a message
  /// longer than expected means that the ranks disagree on the count or the codec.
  virtual RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) = 0;
  /// Data tags must be below this (at least kMinTagLimit, at most kMaxTag).
  virtual uint32_t tagLimit() const { return kMaxTag; }
  /// From now on, destroying an unfinished request waits for the transport to let go of its
  /// buffer no later than `until` (after a failure: the abort notice has gone out, what is left is
  /// bounded clean-up). Default: each request waits its own transport-specific time.
  virtual void limitDrops(Clock::time_point until) { (void)until; }
  /// Called once when the communicator over this transport fails (on every failure path, before
  /// any abort notice goes out): a transport that cannot drop messages still addressed to it, such
  /// as MPI's, keeps what they would be delivered to (see MpiTransport's destructor).
  virtual void markFailed() noexcept {}
  /// Drives communication (UCX worker progress); cheap when there is nothing to do.
  virtual void progress() {}
  /// Called by waiting loops when nothing completed: may block up to `maxWait` for new activity
  /// (an arrival, an abort notice) instead of spinning. The default sleeps for `maxWait`, or
  /// yields when it is zero.
  virtual void idle(std::chrono::microseconds maxWait);

  /// Optional collectives of the library underneath, used by `auto` when nothing is compressed
  /// (same bytes, the library's tuned algorithm). hasNativeAllreduce() says whether the transport
  /// has them; each returns null when it has not.
  virtual bool hasNativeAllreduce() const { return false; }
  /// iallreduceSum: recv = fp32 sum over all ranks of send (in place when send == recv); the
  /// result is the same on every rank.
  virtual RequestPtr iallreduceSum(const float* /*send*/, float* /*recv*/, size_t /*count*/) { return nullptr; }

  /// Messages of at most this many bytes to a rank on another host leave at once; a longer one
  /// first waits for the receiver's reply (a rendezvous), which travels on the same connection as
  /// the receiver's own outgoing data, behind whatever of it is queued. 0: no such limit to heed.
  virtual size_t eagerBytes() const { return 0; }
  /// The fp32 ring's chunk in bytes on this transport where it differs from the codec's default
  /// (options.hpp chunkBytesFor); 0: that default. A chunk size set in the options wins.
  virtual size_t ringChunkBytes() const { return 0; }

  /// Host index of every rank (0..H-1 in the order of each host's lowest rank; host_key.hpp says
  /// how transports find it). Default: one host.
  virtual std::vector<int> hostOfRanks() const { return std::vector<int>(static_cast<size_t>(size()), 0); }

  /// Best effort: tells every peer that this rank failed with `code` and `reason` (truncated).
  /// Never blocks for long and never throws.
  virtual void sendAbort(ErrorCode code, const std::string& reason) noexcept = 0;
  /// True if a peer's abort notice has arrived; fills its rank, code and reason. Sticky: once a
  /// notice has arrived, every later call returns the first one again.
  virtual bool pollAbort(int* peer, ErrorCode* code, std::string* reason) = 0;
};
using TransportPtr = std::unique_ptr<Transport>;

/// Where waits add up their time (seconds), for a CPU breakdown. `idle` is the part spent in
/// Transport::idle() (yielding or sleeping); the rest of `wait` is progress and polling.
struct WaitTimes {
  double wait = 0;
  double idle = 0;
};

/// How one wait ends when its condition does not come true.
struct WaitSpec {
  Clock::time_point deadline;  ///< Error(kTimeout) after it
  const char* what = "wait";   ///< names the operation in messages
  /// Set by another thread (qcclCommAbort) to end the wait with Error(kCommFailed). May be null.
  const std::atomic<bool>* cancel = nullptr;
  /// A peer's abort notice ends the wait with Error(kRemoteError).
  bool hearAborts = true;
  /// Accumulates the wait's time when not null.
  WaitTimes* times = nullptr;
  /// Polls without yielding for this long from the start of the wait, as the MPI library's own
  /// blocking collectives do, before the yield-then-sleep rounds of waitUntil(). For short
  /// latency-bound exchanges only (the cross-rank check of a call): 0 for everything else.
  std::chrono::microseconds busyPoll{0};
};

/// A deadline `seconds` from now.
Clock::time_point deadlineIn(double seconds);

/// Throws if the wait must end: cancelled, a peer aborted, or the deadline passed. Also progress().
void pollWait(Transport& t, const WaitSpec& w);

/// The one waiting loop of qccl: calls progress() and done(&advanced) until done returns true.
/// While nothing advances it yields for a few rounds, then lets the transport sleep in idle() for
/// up to 50 us at a time, so that ranks sharing a core do not starve each other. Ends by
/// pollWait()'s errors or by what done() throws.
template <class Done>
void waitUntil(Transport& t, const WaitSpec& w, Done&& done) {
  constexpr int kSpinRounds = 64;
  const Clock::time_point start = w.times || w.busyPoll.count() > 0 ? Clock::now() : Clock::time_point{};
  const Clock::time_point pollUntil = start + w.busyPoll;
  struct Account {  // adds the wait's time on every way out, errors included
    const WaitSpec& w;
    Clock::time_point start;
    ~Account() {
      if (w.times) w.times->wait += std::chrono::duration<double>(Clock::now() - start).count();
    }
  } account{w, start};
  for (int round = 0;; ++round) {
    t.progress();
    bool advanced = false;
    if (done(&advanced)) return;
    pollWait(t, w);
    if (advanced) round = 0;
    if (w.busyPoll.count() > 0 && Clock::now() < pollUntil) continue;
    const auto maxWait = round < kSpinRounds ? std::chrono::microseconds(0) : std::chrono::microseconds(50);
    if (w.times) {
      const Clock::time_point i0 = Clock::now();
      t.idle(maxWait);
      w.times->idle += std::chrono::duration<double>(Clock::now() - i0).count();
    } else {
      t.idle(maxWait);
    }
  }
}

/// Waits for every request in `reqs` (null entries are skipped). Allocates nothing.
void waitAll(Transport& t, std::vector<RequestPtr>& reqs, const WaitSpec& w);
/// waitAll with only a deadline and a name.
void waitAll(Transport& t, std::vector<RequestPtr>& reqs, Clock::time_point deadline, const char* what);

/// Abort notices on the wire (MPI, UCX): an int32 error code, then the reason's bytes.
constexpr size_t kAbortNoticeBytes = 256;
/// The notice for `code` and `reason` (truncated to fit kAbortNoticeBytes).
std::vector<char> packAbortNotice(ErrorCode code, const std::string& reason);
/// Reads a notice of `bytes` bytes from a peer. Untrusted: a short notice or an unknown code reads
/// as kRemoteError; the reason is taken only as far as `bytes` (<= kAbortNoticeBytes) goes.
void parseAbortNotice(const char* data, size_t bytes, ErrorCode* code, std::string* reason);

/// The first abort notice a transport received, kept for pollAbort() (sticky).
struct ReceivedAbort {
  bool have = false;
  int peer = -1;
  ErrorCode code = ErrorCode::kRemoteError;
  std::string reason;

  /// Records the notice of `bytes` bytes that `from` sent (see parseAbortNotice).
  void set(int from, const char* data, size_t bytes) {
    have = true;
    peer = from;
    parseAbortNotice(data, bytes, &code, &reason);
  }
  /// pollAbort()'s answer: false if none arrived, else fills the non-null outputs.
  bool report(int* outPeer, ErrorCode* outCode, std::string* outReason) const {
    if (!have) return false;
    if (outPeer) *outPeer = peer;
    if (outCode) *outCode = code;
    if (outReason) *outReason = reason;
    return true;
  }
};

/// Loopback: `n` transports that talk through shared memory queues, one per thread. Sends are
/// buffered (they complete at once); receives match by (source, tag) in the order of the sends.
/// Each transport is used by one thread at a time. Throws Error(kInvalidArgument) for n < 1.
/// `hostOf` (empty: one host) is what hostOfRanks() reports, to emulate hosts in tests.
std::vector<TransportPtr> makeLoopbackGroup(int n, const std::vector<int>& hostOf = {});

}  // namespace qccl
