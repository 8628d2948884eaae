// UCX transport: UCP tag messages, tag = (source rank << 32) | tag, matched with a full mask.
// Abort notices use the reserved low tag kMaxTag from any source.
//
// Endpoints use no UCX peer error handling: in UCX 1.13 it excludes the shared-memory transports
// (posix, sysv, cma), which halves intra-node bandwidth, and makes them unusable when UCX_TLS
// names only those. A dead peer is learnt instead from the bootstrap connections, which stay open
// (BootstrapLinks), and requests that involve it then fail with kRemoteError instead of waiting.
#include "transport/ucx_transport.hpp"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap.hpp"
#include "transport/host_key.hpp"

namespace qccl {
namespace {

constexpr ucp_tag_t kFullMask = ~ucp_tag_t(0);
constexpr ucp_tag_t kLowMask = 0xffffffffull;
// sendAbort() drives its notices for at most this long, so it never blocks for long.
constexpr std::chrono::milliseconds kAbortDrive{100};
// How often progress() looks at the bootstrap links for dead peers.
constexpr std::chrono::milliseconds kLivenessPeriod{2};
// Upper bound on flushing endpoints at destruction when a peer does not answer.
constexpr double kMaxCloseSec = 10.0;
// How long dropping an unfinished request waits for UCX to let go of the caller's buffer: longer
// for receives, which UCX would write into, than for sends, which it would only read.
constexpr std::chrono::milliseconds kDropRecvWait{1000};
constexpr std::chrono::milliseconds kDropSendWait{100};

[[noreturn]] void throwUcs(ucs_status_t st, const std::string& what) {
  throw Error(ErrorCode::kTransportError, "qccl ucx transport: " + what + ": " + ucs_status_string(st));
}

struct PeerState {
  int rank = 0;
  bool failed = false;  // its process is known to be gone
};

// UCX 1.13 reports a receive's length only to its callback, so every receive has one, and it
// stores the details in the request's own memory (UCP_PARAM_FIELD_REQUEST_SIZE), which lives
// until ucp_request_free. Receives never complete immediately (UCP_OP_ATTR_FLAG_NO_IMM_CMPL).
struct RecvSlot {
  size_t length;
  ucp_tag_t senderTag;
};

void recvCallback(void* request, ucs_status_t /*status*/, const ucp_tag_recv_info_t* info, void* /*user*/) {
  auto* slot = static_cast<RecvSlot*>(request);
  slot->length = info ? info->length : 0;
  slot->senderTag = info ? info->sender_tag : 0;
}

ucp_request_param_t recvParams() {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = recvCallback;
  return p;
}

class UcxTransport;

// One send or receive; `req_` is null once completed (or when UCX completed it at once). Objects
// are recycled by their transport (release()), so steady-state messaging allocates nothing.
class UcxRequest final : public Request {
 public:
  explicit UcxRequest(UcxTransport* owner) : owner_(owner) {}

  void reset(ucp_worker_h worker, const PeerState* peer, bool isRecv, uint32_t tag, size_t bytes, void* req,
             ucs_status_t status, size_t capacity) {
    worker_ = worker;
    peer_ = peer;
    isRecv_ = isRecv;
    tag_ = tag;
    bytes_ = bytes;
    req_ = req;
    status_ = status;
    capacity_ = capacity;
  }

  bool test() override {
    if (req_ != nullptr) {
      ucs_status_t st = ucp_request_check_status(req_);
      if (isRecv_ && st != UCS_INPROGRESS) bytes_ = static_cast<RecvSlot*>(req_)->length;
      if (st == UCS_INPROGRESS) {
        if (peer_->failed) {
          throw Error(ErrorCode::kRemoteError, "qccl ucx transport: the process of rank " +
                                                   std::to_string(peer_->rank) + " exited while a " + kind() +
                                                   " of tag " + std::to_string(tag_) + " was pending");
        }
        return false;
      }
      ucp_request_free(req_);
      req_ = nullptr;
      status_ = st;
    }
    if (status_ == UCS_OK) return true;
    std::string what = std::string(kind()) + " of tag " + std::to_string(tag_) + (isRecv_ ? " from" : " to") +
                       " rank " + std::to_string(peer_->rank);
    if (status_ == UCS_ERR_MESSAGE_TRUNCATED) {
      // UCX refuses the longer message without writing past the buffer.
      throw Error(ErrorCode::kMismatch, "qccl ucx transport: " + what + ": the message is longer than the " +
                                            std::to_string(capacity_) +
                                            " bytes expected: the ranks disagree on the element count or the codec");
    }
    if (peer_->failed || status_ == UCS_ERR_CONNECTION_RESET || status_ == UCS_ERR_ENDPOINT_TIMEOUT ||
        status_ == UCS_ERR_UNREACHABLE) {
      throw Error(ErrorCode::kRemoteError,
                  "qccl ucx transport: " + what + " failed, the peer is gone: " + ucs_status_string(status_));
    }
    throwUcs(status_, what);
  }
  size_t bytes() const override { return bytes_; }

 protected:
  void release() noexcept override;

 private:
  const char* kind() const { return isRecv_ ? "receive" : "send"; }

  UcxTransport* owner_;
  ucp_worker_h worker_ = nullptr;
  const PeerState* peer_ = nullptr;
  bool isRecv_ = false;
  uint32_t tag_ = 0;
  size_t bytes_ = 0;
  size_t capacity_ = 0;
  void* req_ = nullptr;
  ucs_status_t status_ = UCS_OK;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(int nranks, int rank, double timeoutSec)
      : rank_(rank), size_(nranks), timeoutSec_(timeoutSec), peers_(nranks) {
    for (int r = 0; r < nranks; ++r) peers_[r].rank = r;
  }

  // Separate from the constructor so that the destructor cleans up whatever was made before a throw.
  void init(const UniqueId& id) {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);  // honours UCX_TLS and friends
    if (st != UCS_OK) throwUcs(st, "ucp_config_read");
    // qccl's defaults where the environment sets nothing (ucxConfigDefaults says why).
    for (const auto& [name, value] : ucxConfigDefaults()) {
      st = ucp_config_modify(config, name.c_str(), value.c_str());
      if (st != UCS_OK) {
        ucp_config_release(config);
        throwUcs(st, "ucp_config_modify(" + name + "=" + value + ")");
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_REQUEST_SIZE;
    params.features = UCP_FEATURE_TAG;
    params.request_size = sizeof(RecvSlot);
    params.estimated_num_eps = static_cast<size_t>(size_);
    st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (st != UCS_OK) throwUcs(st, "ucp_init");

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) throwUcs(st, "ucp_worker_create");

    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    st = ucp_worker_query(worker_, &attr);
    if (st != UCS_OK) throwUcs(st, "ucp_worker_query");
    std::string mine(reinterpret_cast<const char*>(attr.address), attr.address_length);
    ucp_worker_release_address(worker_, attr.address);

    // The blob: the host key's length (4 bytes), the key, then the worker address.
    const std::string key = localHostKey();
    const uint32_t keyLen = static_cast<uint32_t>(key.size());
    std::string blob(reinterpret_cast<const char*>(&keyLen), sizeof keyLen);
    blob += key + mine;
    BootstrapResult boot = bootstrapConnect(id, size_, rank_, blob, timeoutSec_);
    links_ = std::move(boot.links);
    eps_.assign(size_, nullptr);
    std::vector<std::string> keys(size_);
    for (int r = 0; r < size_; ++r) {
      const std::string& b = boot.blobs[r];
      uint32_t len = 0;
      QCCL_CHECK(b.size() >= sizeof len, ErrorCode::kMalformed, "bootstrap: short blob of rank " + std::to_string(r));
      std::memcpy(&len, b.data(), sizeof len);
      QCCL_CHECK(len <= b.size() - sizeof len, ErrorCode::kMalformed,
                 "bootstrap: host key of rank " + std::to_string(r) + " overruns its blob");
      keys[r] = b.substr(sizeof len, len);
      const std::string addr = b.substr(sizeof len + len);
      QCCL_CHECK(!addr.empty(), ErrorCode::kMalformed, "bootstrap: empty UCX address of rank " + std::to_string(r));
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      ep.address = reinterpret_cast<const ucp_address_t*>(addr.data());
      st = ucp_ep_create(worker_, &ep, &eps_[r]);
      if (st != UCS_OK) throwUcs(st, "ucp_ep_create to rank " + std::to_string(r));
    }
    hosts_ = hostsFromKeys(keys);
    postAbortRecv();
    handshake(1);
    flushEndpoints();
    handshake(2);
  }

  ~UcxTransport() override {
    if (worker_ != nullptr) {
      if (abortRecv_ != nullptr) {
        ucp_request_cancel(worker_, abortRecv_);
        ucp_request_free(abortRecv_);
      }
      for (void* r : abortSends_) ucp_request_free(r);
      closeEndpoints();
      ucp_worker_destroy(worker_);
    }
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "ucx"; }
  std::vector<int> hostOfRanks() const override { return hosts_; }
  size_t ringChunkBytes() const override { return kUcxRingChunkBytes; }
  void limitDrops(Clock::time_point until) override { dropLimit_ = until; }

  // --- used by UcxRequest ---
  Clock::time_point dropDeadline(std::chrono::milliseconds own) const {
    return std::min(Clock::now() + own, dropLimit_);
  }
  void recycle(UcxRequest* r) { pool_.emplace_back(r); }

  RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) override {
    checkArgs(peer, tag, buf, bytes, "isend");
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_tag_send_nbx(eps_[peer], buf, bytes, fullTag(rank_, tag), &p);
    return wrap(r, peer, false, tag, bytes, 0);
  }

  RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) override {
    checkArgs(peer, tag, buf, capacity, "irecv");
    ucp_request_param_t p = recvParams();
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, buf, capacity, fullTag(peer, tag), kFullMask, &p);
    return wrap(r, peer, true, tag, 0, capacity);
  }

  void progress() override {
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
    }
    // A poll() on the bootstrap sockets costs a system call: a few hundred per second suffice.
    auto now = Clock::now();
    if (links_ && now >= nextLivenessCheck_) {
      nextLivenessCheck_ = now + kLivenessPeriod;
      links_->poll(&linkEvents_);
      for (int r : linkEvents_.dead) {
        peers_[r].failed = true;
        // A dead member fails the collective for every survivor, not only for those with a
        // request towards it: the others may wait on a live rank that has itself given up.
        if (!death_.have) {
          death_.have = true;
          death_.peer = r;
          death_.code = ErrorCode::kRemoteError;
          death_.reason = "its process is gone (the bootstrap connection closed without a goodbye)";
        }
      }
      if (linkEvents_.abort && !linkAbort_.have) {
        // The same notice usually arrives on the data path too, with its reason; keep whichever
        // comes first (pollAbort prefers the data path's when both are there).
        linkAbort_.have = true;
        linkAbort_.peer = linkEvents_.abortFrom;
        const int32_t c = linkEvents_.abortCode;  // from the wire: only known codes pass
        linkAbort_.code = c > 0 && c <= static_cast<int32_t>(ErrorCode::kTransportError) ? static_cast<ErrorCode>(c)
                                                                                         : ErrorCode::kRemoteError;
        linkAbort_.reason =
            linkEvents_.abortReason.empty() ? "(notice through the bootstrap connection)" : linkEvents_.abortReason;
      }
    }
  }

  void sendAbort(ErrorCode code, const std::string& reason) noexcept override {
    if (abortSent_ || worker_ == nullptr) return;
    abortSent_ = true;
    try {
      abortOut_ = packAbortNotice(code, reason);
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || peers_[p].failed) continue;
        ucp_request_param_t prm{};
        ucs_status_ptr_t r =
            ucp_tag_send_nbx(eps_[p], abortOut_.data(), abortOut_.size(), fullTag(rank_, kMaxTag), &prm);
        if (UCS_PTR_IS_PTR(r)) abortSends_.push_back(r);
      }
      if (links_) links_->sendAbort(static_cast<int32_t>(code), reason);
      auto until = Clock::now() + kAbortDrive;
      while (Clock::now() < until && !abortSendsDone()) progress();
    } catch (...) {
      // Best effort by contract.
    }
  }

  bool pollAbort(int* peer, ErrorCode* code, std::string* reason) override {
    if (!abort_.have && abortRecv_ != nullptr) {
      ucs_status_t st = ucp_request_check_status(abortRecv_);
      if (st != UCS_INPROGRESS) {
        RecvSlot slot = *static_cast<RecvSlot*>(abortRecv_);
        ucp_request_free(abortRecv_);
        abortRecv_ = nullptr;
        if (st == UCS_OK) parseAbort(slot);
      }
    }
    if (abort_.have) return abort_.report(peer, code, reason);
    if (linkAbort_.have) return linkAbort_.report(peer, code, reason);
    return death_.report(peer, code, reason);
  }

 private:
  static ucp_tag_t fullTag(int rank, uint32_t tag) { return (static_cast<ucp_tag_t>(rank) << 32) | tag; }

  RequestPtr wrap(ucs_status_ptr_t r, int peer, bool isRecv, uint32_t tag, size_t bytes, size_t capacity) {
    if (UCS_PTR_IS_ERR(r) && UCS_PTR_STATUS(r) != UCS_ERR_MESSAGE_TRUNCATED) {
      // Failing on the spot because the peer is gone (a dead endpoint, possibly before the
      // bootstrap link has told us) is reported like a later failure, from test().
      const ucs_status_t st = UCS_PTR_STATUS(r);
      const bool peerGone = peers_[peer].failed || st == UCS_ERR_CONNECTION_RESET || st == UCS_ERR_ENDPOINT_TIMEOUT ||
                            st == UCS_ERR_UNREACHABLE;
      if (!peerGone) throwUcs(st, isRecv ? "ucp_tag_recv_nbx" : "ucp_tag_send_nbx");
    }
    void* req = UCS_PTR_IS_PTR(r) ? r : nullptr;
    UcxRequest* out;
    if (pool_.empty()) {
      out = new UcxRequest(this);
    } else {
      out = pool_.back().release();
      pool_.pop_back();
    }
    out->reset(worker_, &peers_[peer], isRecv, tag, bytes, req, UCS_PTR_IS_PTR(r) ? UCS_OK : UCS_PTR_STATUS(r),
               capacity);
    return RequestPtr(out);
  }

  // Sends one small message to every rank and receives one from every rank. UCX wires endpoints up
  // lazily, and a wireup needs both sides to progress: without this, the first message to a peer
  // that is busy elsewhere (an abort notice, typically) could not leave before the endpoint is
  // closed. Afterwards a small message is handed to the wire (socket, shared-memory queue) at once.
  //
  // The exchange alone does not finish the wireup: a small message can travel over a lane that is
  // usable before its peer has answered the wireup request (REQ) sent on another lane, so a rank
  // could leave with its REQ still waiting in a TCP endpoint's queue while the peer stops
  // progressing UCX. Destroying the worker after an abort then ends the process (UCX 1.13: "got
  // REQ message" in ucp_ep_purge_lanes; about 1 abort in 10 on a loaded 2-core host, 1 in 2 with
  // UCX_LOG_LEVEL=debug). So round 1 is followed by a flush of every endpoint, which completes
  // only once its wireup has, and round 2 tells each rank that its peers have flushed too.
  void handshake(int round) {
    const ucp_tag_t tag = static_cast<ucp_tag_t>(kMaxTag) + static_cast<ucp_tag_t>(round);
    std::vector<uint32_t> in(static_cast<size_t>(size_), 0);
    const uint32_t mine = static_cast<uint32_t>(rank_);
    std::vector<void*> reqs;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      ucp_request_param_t rp = recvParams();
      ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, &in[p], sizeof(uint32_t), fullTag(p, tag), kFullMask, &rp);
      if (UCS_PTR_IS_ERR(r)) throwUcs(UCS_PTR_STATUS(r), "handshake receive");
      reqs.push_back(r);
      ucp_request_param_t sp{};
      r = ucp_tag_send_nbx(eps_[p], &mine, sizeof mine, fullTag(rank_, tag), &sp);
      if (UCS_PTR_IS_ERR(r)) throwUcs(UCS_PTR_STATUS(r), "handshake send to rank " + std::to_string(p));
      if (UCS_PTR_IS_PTR(r)) reqs.push_back(r);
    }
    const ucs_status_t worst =
        waitBootstrapRequests(reqs, "the endpoint handshake (round " + std::to_string(round) + ") with every rank");
    if (worst != UCS_OK) throwUcs(worst, "endpoint handshake");
    for (int p = 0; p < size_; ++p) {
      QCCL_CHECK(p == rank_ || in[p] == static_cast<uint32_t>(p), ErrorCode::kMalformed,
                 "qccl ucx transport: handshake: rank " + std::to_string(p) + " sent " + std::to_string(in[p]));
    }
  }

  // Flushes every endpoint, within the communicator's timeout (see handshake()).
  void flushEndpoints() {
    std::vector<void*> reqs;
    ucs_status_t worst = UCS_OK;
    for (int p = 0; p < size_; ++p) {
      ucp_request_param_t fp{};
      ucs_status_ptr_t r = ucp_ep_flush_nbx(eps_[p], &fp);
      if (UCS_PTR_IS_PTR(r)) {
        reqs.push_back(r);
      } else if (UCS_PTR_STATUS(r) != UCS_OK) {
        worst = UCS_PTR_STATUS(r);
      }
    }
    const ucs_status_t st = waitBootstrapRequests(reqs, "flushing the endpoints after the handshake");
    if (worst == UCS_OK) worst = st;
    if (worst != UCS_OK) throwUcs(worst, "endpoint flush");
  }

  // Progresses until every request is done, within the communicator's timeout, then frees them:
  // a timeout throws, otherwise the worst status is returned.
  ucs_status_t waitBootstrapRequests(std::vector<void*>& reqs, const std::string& what) {
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeoutSec_));
    bool done = false;
    while (!done) {
      progress();
      done = true;
      for (void* r : reqs) done = done && ucp_request_check_status(r) != UCS_INPROGRESS;
      if (!done && Clock::now() >= until) break;
    }
    ucs_status_t worst = UCS_OK;
    for (void* r : reqs) {
      ucs_status_t st = ucp_request_check_status(r);
      if (st == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
      if (st != UCS_OK) worst = st;
      ucp_request_free(r);
    }
    reqs.clear();
    if (!done)
      throw Error(ErrorCode::kTimeout,
                  "qccl ucx transport: rank " + std::to_string(rank_) + ": " + what + " timed out");
    return worst;
  }

  void postAbortRecv() {
    abortIn_.assign(kAbortNoticeBytes, 0);
    ucp_request_param_t p = recvParams();
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, abortIn_.data(), kAbortNoticeBytes, kMaxTag, kLowMask, &p);
    if (UCS_PTR_IS_ERR(r)) throwUcs(UCS_PTR_STATUS(r), "posting the abort receive");
    abortRecv_ = r;
  }

  void parseAbort(const RecvSlot& info) {
    abort_.set(static_cast<int>(info.senderTag >> 32), abortIn_.data(), info.length);
  }

  bool abortSendsDone() {
    for (void* r : abortSends_) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
    }
    return true;
  }

  // Flushes live endpoints (so that messages already handed to UCX reach their peers) and
  // force-closes failed ones, within a bounded time.
  void closeEndpoints() {
    std::vector<void*> pending;
    for (int r = 0; r < static_cast<int>(eps_.size()); ++r) {
      if (eps_[r] == nullptr) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      // After a failure nothing is left to deliver (the notice went out when it happened), and a
      // flush would wait for peers that are shutting down too: close at once.
      const bool failed = abortSent_ || abort_.have || linkAbort_.have || death_.have;
      p.flags = peers_[r].failed || failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t req = ucp_ep_close_nbx(eps_[r], &p);
      if (UCS_PTR_IS_PTR(req)) pending.push_back(req);
    }
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(std::min(timeoutSec_, kMaxCloseSec)));
    while (Clock::now() < until) {
      bool done = true;
      for (void* r : pending) done = done && ucp_request_check_status(r) != UCS_INPROGRESS;
      if (done) break;
      ucp_worker_progress(worker_);
    }
    for (void* r : pending) ucp_request_free(r);
    quiesce();
  }

  // A force-closed endpoint discards its lanes in the background: progress the worker until it has
  // been idle for a while (bounded) before it is destroyed.
  void quiesce() {
    constexpr auto kIdle = std::chrono::milliseconds(20);
    constexpr auto kMax = std::chrono::milliseconds(500);
    const auto start = Clock::now();
    auto lastWork = start;
    for (auto now = start; now - lastWork < kIdle && now - start < kMax; now = Clock::now()) {
      if (ucp_worker_progress(worker_) != 0) lastWork = Clock::now();
    }
  }

  void checkArgs(int peer, uint32_t tag, const void* buf, size_t bytes, const char* op) const {
    QCCL_CHECK(peer >= 0 && peer < size_, ErrorCode::kInvalidArgument,
               std::string("ucx ") + op + ": peer " + std::to_string(peer) + " out of range [0, " +
                   std::to_string(size_) + ")");
    QCCL_CHECK(tag < kMaxTag, ErrorCode::kInvalidArgument,
               std::string("ucx ") + op + ": tag " + std::to_string(tag) + " is reserved (>= kMaxTag)");
    QCCL_CHECK(buf != nullptr || bytes == 0, ErrorCode::kInvalidArgument,
               std::string("ucx ") + op + ": null buffer with non-zero size");
  }

  int rank_;
  int size_;
  std::vector<int> hosts_;  // hostOfRanks()
  double timeoutSec_;
  std::vector<PeerState> peers_;  // sized once: requests hold pointers to its elements
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::unique_ptr<BootstrapLinks> links_;
  Clock::time_point nextLivenessCheck_{};
  void* abortRecv_ = nullptr;
  std::vector<char> abortIn_;
  std::vector<char> abortOut_;
  std::vector<void*> abortSends_;
  bool abortSent_ = false;
  ReceivedAbort abort_;
  ReceivedAbort linkAbort_;
  ReceivedAbort death_;  // the first rank learnt dead through the bootstrap links
  LinkEvents linkEvents_;
  Clock::time_point dropLimit_ = Clock::time_point::max();
  std::vector<std::unique_ptr<UcxRequest>> pool_;
};

void UcxRequest::release() noexcept {
  if (req_ != nullptr) {
    // A receive already matched by a rendezvous cannot be cancelled: let it land while the
    // caller's buffer still exists rather than have UCX write into freed memory later.
    ucp_request_cancel(worker_, req_);
    auto until = owner_->dropDeadline(isRecv_ ? kDropRecvWait : kDropSendWait);
    while (ucp_request_check_status(req_) == UCS_INPROGRESS && !peer_->failed && Clock::now() < until) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(req_);  // UCX releases it once it has completed
    req_ = nullptr;
  }
  try {
    owner_->recycle(this);
  } catch (...) {
    delete this;
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ucxConfigDefaults() {
  std::vector<std::pair<std::string, std::string>> out;
  if (std::getenv("UCX_TLS") == nullptr) out.emplace_back("TLS", "^cma");
  if (std::getenv("UCX_RNDV_THRESH") == nullptr) out.emplace_back("RNDV_THRESH", "inf");
  // TCP's segment sizes; ucp_config_modify takes a transport's setting without its prefix (it applies
  // to every transport that has one, and only tcp does), the environment names it either way.
  if (std::getenv("UCX_TCP_TX_SEG_SIZE") == nullptr && std::getenv("UCX_TX_SEG_SIZE") == nullptr)
    out.emplace_back("TX_SEG_SIZE", "256K");
  if (std::getenv("UCX_TCP_RX_SEG_SIZE") == nullptr && std::getenv("UCX_RX_SEG_SIZE") == nullptr)
    out.emplace_back("RX_SEG_SIZE", "512K");
  return out;
}

TransportPtr makeUcxTransport(const UniqueId& id, int nranks, int rank, double timeoutSec) {
  QCCL_CHECK(
      nranks >= 1 && rank >= 0 && rank < nranks, ErrorCode::kInvalidArgument,
      "makeUcxTransport: rank " + std::to_string(rank) + " is not in [0, nranks=" + std::to_string(nranks) + ")");
  QCCL_CHECK(nranks <= (1 << 20), ErrorCode::kInvalidArgument, "makeUcxTransport: too many ranks");
  QCCL_CHECK(timeoutSec > 0, ErrorCode::kInvalidArgument, "makeUcxTransport: timeout must be positive");
  auto t = std::make_unique<UcxTransport>(nranks, rank, timeoutSec);
  t->init(id);
  return t;
}

}  // namespace qccl
