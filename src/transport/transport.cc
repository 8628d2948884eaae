// The waiting loop shared by every layer (deadline, progress, abort notices, cancellation,
// back-off) and the abort-notice format of the MPI and UCX transports.
#include "transport/transport.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

namespace qccl {
namespace {

void throwIfAborted(Transport& t, const char* what) {
  int peer = -1;
  ErrorCode code = ErrorCode::kRemoteError;
  std::string reason;
  if (t.pollAbort(&peer, &code, &reason)) {
    throw Error(ErrorCode::kRemoteError, std::string("qccl ") + t.name() + " transport: " + what + ": rank " +
                                             std::to_string(peer) + " aborted (" + errorCodeName(code) +
                                             "): " + reason);
  }
}

}  // namespace

std::vector<char> packAbortNotice(ErrorCode code, const std::string& reason) {
  const int32_t c = static_cast<int32_t>(code);
  const size_t len = std::min(reason.size(), kAbortNoticeBytes - sizeof c);
  std::vector<char> out(sizeof c + len);
  std::memcpy(out.data(), &c, sizeof c);
  std::memcpy(out.data() + sizeof c, reason.data(), len);
  return out;
}

void parseAbortNotice(const char* data, size_t bytes, ErrorCode* code, std::string* reason) {
  *code = ErrorCode::kRemoteError;
  reason->clear();
  bytes = std::min(bytes, kAbortNoticeBytes);
  if (bytes < sizeof(int32_t)) return;
  int32_t c = 0;
  std::memcpy(&c, data, sizeof c);
  if (c > 0 && c <= static_cast<int32_t>(ErrorCode::kTransportError)) *code = static_cast<ErrorCode>(c);
  reason->assign(data + sizeof c, bytes - sizeof c);
}

void Transport::idle(std::chrono::microseconds maxWait) {
  if (maxWait.count() > 0) {
    std::this_thread::sleep_for(maxWait);
  } else {
    std::this_thread::yield();
  }
}

Clock::time_point deadlineIn(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void pollWait(Transport& t, const WaitSpec& w) {
  if (w.cancel != nullptr && w.cancel->load(std::memory_order_relaxed)) {
    throw Error(ErrorCode::kCommFailed, std::string("qccl ") + t.name() + " transport: rank " +
                                            std::to_string(t.rank()) + ": " + w.what +
                                            ": the communicator was aborted (qcclCommAbort)");
  }
  if (w.hearAborts) throwIfAborted(t, w.what);
  if (Clock::now() >= w.deadline) {
    throw Error(ErrorCode::kTimeout, std::string("qccl ") + t.name() + " transport: rank " + std::to_string(t.rank()) +
                                         ": " + w.what + " timed out (QCCL_TIMEOUT)");
  }
}

void waitAll(Transport& t, std::vector<RequestPtr>& reqs, const WaitSpec& w) {
  // test() of a completed request is a flag check, so the loop keeps no list of finished ones.
  size_t before = 0;
  waitUntil(t, w, [&](bool* advanced) {
    size_t done = 0;
    for (RequestPtr& r : reqs) done += (!r || r->test()) ? 1 : 0;
    *advanced = done > before;
    before = done;
    return done == reqs.size();
  });
}

void waitAll(Transport& t, std::vector<RequestPtr>& reqs, Clock::time_point deadline, const char* what) {
  WaitSpec w;
  w.deadline = deadline;
  w.what = what;
  waitAll(t, reqs, w);
}

}  // namespace qccl
