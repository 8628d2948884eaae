// Point-to-point transport interface (internal). Non-blocking sends and receives of byte
// buffers between ranks, plus a control channel that carries an abort notice to every peer.
//
// Implementations: MPI (mpi_transport.cc), UCX (ucx_transport.cc), loopback threads
// (loopback_transport.cc). Every wait goes through waitAll(), which has a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qccl/error.hpp"

namespace qccl {

/// Data tags are < kMaxTag; the transport reserves tags at and above it for control messages.
constexpr uint32_t kMaxTag = 1u << 24;

/// One outstanding send or receive.
class Request {
 public:
  virtual ~Request() = default;
  /// True once complete. Throws Error (kTransportError, kRemoteError, ...) if it failed.
  virtual bool test() = 0;
  /// Bytes transferred (for a receive: bytes actually received, valid after completion).
  virtual size_t bytes() const = 0;
};
using RequestPtr = std::unique_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "ucx" or "loopback".
  virtual const char* name() const = 0;

  /// Starts sending `bytes` bytes to `peer` under `tag` (< kMaxTag). `buf` must stay valid until done.
  virtual RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) = 0;
  /// Starts receiving at most `capacity` bytes from `peer` under `tag`. A longer message is an error.
  virtual RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) = 0;
  /// Drives communication (UCX worker progress); cheap when there is nothing to do.
  virtual void progress() {}
  /// Called by waiting loops when nothing completed: may block up to `maxWait` for new activity
  /// (an arrival, an abort notice) instead of spinning. The default sleeps for `maxWait`, or
  /// yields when it is zero.
  virtual void idle(std::chrono::microseconds maxWait);

  /// Optional collectives of the library underneath, used by `auto` when nothing is compressed
  /// (same bytes, the library's tuned algorithm). Each returns null when the transport has none.
  /// iallreduceSum: recv = fp32 sum over all ranks of send (in place when send == recv); the
  /// result is the same on every rank.
  virtual RequestPtr iallreduceSum(const float* /*send*/, float* /*recv*/, size_t /*count*/) { return nullptr; }
  /// iallreduceMin: in-place element-wise minimum of `n` int64 words over all ranks.
  virtual RequestPtr iallreduceMin(int64_t* /*words*/, int /*n*/) { return nullptr; }

  /// Best effort: tells every peer that this rank failed with `code` and `reason` (truncated).
  /// Never blocks for long and never throws.
  virtual void sendAbort(ErrorCode code, const std::string& reason) noexcept = 0;
  /// True if a peer's abort notice has arrived; fills its rank, code and reason. Sticky: once a
  /// notice has arrived, every later call returns the first one again.
  virtual bool pollAbort(int* peer, ErrorCode* code, std::string* reason) = 0;
};
using TransportPtr = std::unique_ptr<Transport>;

using Clock = std::chrono::steady_clock;

/// Waits for every request in `reqs` (null entries are skipped), calling progress() and
/// pollAbort() while it spins. Throws Error(kTimeout) at `deadline`, Error(kRemoteError) when a
/// peer aborted, or what a request's test() threw. `what` names the operation in messages.
void waitAll(Transport& t, std::vector<RequestPtr>& reqs, Clock::time_point deadline, const char* what);

/// One step of a hand-written wait loop: progress(), then throws Error(kRemoteError) if a peer
/// aborted, or Error(kTimeout) if `deadline` has passed.
void pollOrThrow(Transport& t, Clock::time_point deadline, const char* what);

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
std::vector<TransportPtr> makeLoopbackGroup(int n);

}  // namespace qccl
