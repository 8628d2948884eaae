// Waiting loops shared by every transport: deadline, progress, abort polling and back-off.
#include "transport/transport.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

namespace qccl {
namespace {

// After this many fruitless rounds a waiter stops yielding and sleeps in idle(): several ranks
// share few cores in tests (mpirun --oversubscribe), and a spinning rank starves its peers.
constexpr int kSpinRounds = 64;
constexpr std::chrono::microseconds kIdleWait{50};

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

void throwIfLate(Transport& t, Clock::time_point deadline, const char* what, size_t pending, size_t total) {
  if (Clock::now() < deadline) return;
  std::string msg =
      std::string("qccl ") + t.name() + " transport: rank " + std::to_string(t.rank()) + ": " + what + " timed out";
  if (total > 0) msg += " with " + std::to_string(pending) + " of " + std::to_string(total) + " requests pending";
  throw Error(ErrorCode::kTimeout, msg + " (QCCL_TIMEOUT)");
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

void waitAll(Transport& t, std::vector<RequestPtr>& reqs, Clock::time_point deadline, const char* what) {
  // Completed requests are skipped on later rounds; `done` keeps their positions.
  std::vector<char> done(reqs.size(), 0);
  size_t remaining = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i]) {
      ++remaining;
    } else {
      done[i] = 1;
    }
  }
  for (int round = 0; remaining > 0; ++round) {
    t.progress();
    bool advanced = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!done[i] && reqs[i]->test()) {
        done[i] = 1;
        --remaining;
        advanced = true;
      }
    }
    if (remaining == 0) break;
    throwIfAborted(t, what);
    throwIfLate(t, deadline, what, remaining, reqs.size());
    if (advanced) round = 0;
    t.idle(round < kSpinRounds ? std::chrono::microseconds(0) : kIdleWait);
  }
}

void pollOrThrow(Transport& t, Clock::time_point deadline, const char* what) {
  t.progress();
  throwIfAborted(t, what);
  throwIfLate(t, deadline, what, 0, 0);
}

}  // namespace qccl
