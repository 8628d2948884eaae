// Loopback transport: n ranks as threads of one process. Each rank owns a mailbox guarded by a
// mutex; a send either fills the first matching posted receive or is buffered as an unexpected
// message, so receives see the sends of one (source, tag) in order, as MPI's non-overtaking rule.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/host_key.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

// Bounds one idle() wait so the caller re-checks its deadline regularly.
constexpr std::chrono::milliseconds kMaxIdle{2};

struct RecvState {
  void* buf = nullptr;
  size_t capacity = 0;
  size_t bytes = 0;
  std::string error;  // non-empty: the receive failed (set before `ready`)
  std::atomic<bool> ready{false};
};

struct Message {
  int src;
  uint32_t tag;
  std::vector<char> data;
};

struct PostedRecv {
  int src;
  uint32_t tag;
  std::shared_ptr<RecvState> state;
};

struct AbortNotice {
  int peer = -1;
  ErrorCode code = ErrorCode::kRemoteError;
  std::string reason;
};

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Message> unexpected;
  std::deque<PostedRecv> posted;
  uint64_t events = 0;  // bumped on every delivery and abort notice, for idle()
  bool hasAbort = false;
  AbortNotice abort;
  std::atomic<bool> abortFlag{false};  // lock-free fast path for pollAbort()
};

struct Group {
  explicit Group(int n) : boxes(n) {
    for (auto& b : boxes) b = std::make_unique<Mailbox>();
  }
  std::vector<std::unique_ptr<Mailbox>> boxes;
  std::vector<int> hosts;  // hostOfRanks()
};

// Copies a message into a posted receive; the caller holds the receiver's mailbox lock.
void deliver(RecvState& st, int src, uint32_t tag, const void* data, size_t bytes) {
  if (bytes > st.capacity) {
    st.error = "qccl loopback transport: message from rank " + std::to_string(src) + " tag " + std::to_string(tag) +
               " has " + std::to_string(bytes) + " bytes, more than the " + std::to_string(st.capacity) +
               " expected: the ranks disagree on the element count or the codec";
  } else {
    if (bytes > 0) std::memcpy(st.buf, data, bytes);
    st.bytes = bytes;
  }
  st.ready.store(true, std::memory_order_release);
}

class SendRequest final : public Request {
 public:
  explicit SendRequest(size_t bytes) : bytes_(bytes) {}
  bool test() override { return true; }
  size_t bytes() const override { return bytes_; }

 private:
  size_t bytes_;
};

class RecvRequest final : public Request {
 public:
  RecvRequest(std::shared_ptr<Group> group, int rank, std::shared_ptr<RecvState> state)
      : group_(std::move(group)), rank_(rank), state_(std::move(state)) {}

  ~RecvRequest() override {
    if (state_->ready.load(std::memory_order_acquire)) return;
    // Unpost it so that a later send cannot write into a buffer the caller may have freed.
    Mailbox& box = *group_->boxes[rank_];
    std::lock_guard<std::mutex> lock(box.mu);
    for (auto it = box.posted.begin(); it != box.posted.end(); ++it) {
      if (it->state == state_) {
        box.posted.erase(it);
        break;
      }
    }
  }

  bool test() override {
    if (!state_->ready.load(std::memory_order_acquire)) return false;
    if (!state_->error.empty()) throw Error(ErrorCode::kMismatch, state_->error);
    return true;
  }
  size_t bytes() const override { return state_->bytes; }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
  std::shared_ptr<RecvState> state_;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->boxes.size()); }
  std::vector<int> hostOfRanks() const override { return group_->hosts; }
  const char* name() const override { return "loopback"; }

  RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) override {
    checkArgs(peer, tag, buf, bytes, "isend");
    Mailbox& box = *group_->boxes[peer];
    {
      std::lock_guard<std::mutex> lock(box.mu);
      auto it = box.posted.begin();
      while (it != box.posted.end() && !(it->src == rank_ && it->tag == tag)) ++it;
      if (it != box.posted.end()) {
        deliver(*it->state, rank_, tag, buf, bytes);
        box.posted.erase(it);
      } else {
        const char* p = static_cast<const char*>(buf);
        box.unexpected.push_back(Message{rank_, tag, std::vector<char>(p, p + bytes)});
      }
      ++box.events;
    }
    box.cv.notify_all();
    return RequestPtr(new SendRequest(bytes));
  }

  RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) override {
    checkArgs(peer, tag, buf, capacity, "irecv");
    auto state = std::make_shared<RecvState>();
    state->buf = buf;
    state->capacity = capacity;
    Mailbox& box = *group_->boxes[rank_];
    std::lock_guard<std::mutex> lock(box.mu);
    auto it = box.unexpected.begin();
    while (it != box.unexpected.end() && !(it->src == peer && it->tag == tag)) ++it;
    if (it != box.unexpected.end()) {
      deliver(*state, peer, tag, it->data.data(), it->data.size());
      box.unexpected.erase(it);
    } else {
      box.posted.push_back(PostedRecv{peer, tag, state});
    }
    return RequestPtr(new RecvRequest(group_, rank_, std::move(state)));
  }

  void idle(std::chrono::microseconds /*maxWait*/) override {
    // Every delivery and abort notice bumps `events` under the lock, so blocking here until it
    // changes never misses a wake-up; the time bound keeps the caller's deadline checks going.
    Mailbox& box = *group_->boxes[rank_];
    std::unique_lock<std::mutex> lock(box.mu);
    box.cv.wait_for(lock, kMaxIdle, [&] { return box.events != seenEvents_; });
    seenEvents_ = box.events;
  }

  void sendAbort(ErrorCode code, const std::string& reason) noexcept override {
    try {
      for (int r = 0; r < size(); ++r) {
        if (r == rank_) continue;
        Mailbox& box = *group_->boxes[r];
        {
          std::lock_guard<std::mutex> lock(box.mu);
          if (!box.hasAbort) {
            box.hasAbort = true;
            box.abort = AbortNotice{rank_, code, reason.substr(0, 200)};
            box.abortFlag.store(true, std::memory_order_release);
          }
          ++box.events;
        }
        box.cv.notify_all();
      }
    } catch (...) {
      // Best effort by contract: an allocation failure must not escape.
    }
  }

  bool pollAbort(int* peer, ErrorCode* code, std::string* reason) override {
    Mailbox& box = *group_->boxes[rank_];
    if (!box.abortFlag.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> lock(box.mu);
    if (peer) *peer = box.abort.peer;
    if (code) *code = box.abort.code;
    if (reason) *reason = box.abort.reason;
    return true;
  }

 private:
  void checkArgs(int peer, uint32_t tag, const void* buf, size_t bytes, const char* op) const {
    QCCL_CHECK(peer >= 0 && peer < size(), ErrorCode::kInvalidArgument,
               std::string("loopback ") + op + ": peer " + std::to_string(peer) + " out of range [0, " +
                   std::to_string(size()) + ")");
    QCCL_CHECK(tag < kMaxTag, ErrorCode::kInvalidArgument,
               std::string("loopback ") + op + ": tag " + std::to_string(tag) + " is reserved (>= kMaxTag)");
    QCCL_CHECK(buf != nullptr || bytes == 0, ErrorCode::kInvalidArgument,
               std::string("loopback ") + op + ": null buffer with non-zero size");
  }

  std::shared_ptr<Group> group_;
  int rank_;
  uint64_t seenEvents_ = 0;
};

}  // namespace

std::vector<TransportPtr> makeLoopbackGroup(int n, const std::vector<int>& hostOf) {
  QCCL_CHECK(n >= 1, ErrorCode::kInvalidArgument, "makeLoopbackGroup: n must be >= 1, got " + std::to_string(n));
  QCCL_CHECK(hostOf.empty() || hostOf.size() == static_cast<size_t>(n), ErrorCode::kInvalidArgument,
             "makeLoopbackGroup: hostOf must name the host of every rank");
  auto group = std::make_shared<Group>(n);
  std::vector<std::string> keys;
  for (int h : hostOf) keys.push_back(std::to_string(h));
  group->hosts = hostOf.empty() ? std::vector<int>(n, 0) : hostsFromKeys(keys);
  std::vector<TransportPtr> out;
  out.reserve(n);
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<LoopbackTransport>(group, r));
  return out;
}

}  // namespace qccl
