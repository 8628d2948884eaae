// MPI transport: non-blocking point-to-point on a duplicated communicator.
//
// Every MPI call goes to its PMPI_* entry point: an MPI profiling-interface tool loaded into the
// process (qccl's own MPI_Allreduce interposer among them) must never see qccl's internal traffic,
// and the interposer must never re-enter itself through qccl.
//
// Receives are matched with MPI_Improbe before any byte lands: a message longer than the
// receive's capacity (a peer that disagrees on count or codec) is refused with kMismatch without
// receiving it. Posting the receive directly would be simpler, but a truncated receive is not safe
// to rely on (Open MPI 4.1's shared-memory single-copy path was seen writing past the buffer), and
// it forced receive slots sized for the largest encoding of twice the expected count. Unmatched
// receives wait in posting order; progress() probes them, each (peer, tag) in order, so MPI's
// non-overtaking rule holds exactly as with posted receives.
//
// Tags: MPI guarantees only MPI_TAG_UB >= 32767. The largest tag is kept for abort notices, which a
// standing receive from MPI_ANY_SOURCE catches; data tags are below it (tagLimit()).
#include "transport/mpi_transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "transport/host_key.hpp"

namespace qccl {
namespace {

// How long dropping an unfinished request waits for MPI to let go of the caller's buffer, unless
// limitDrops() set an earlier bound: longer for receives, which MPI would write into.
constexpr std::chrono::milliseconds kDropRecvWait{1000};
constexpr std::chrono::milliseconds kDropSendWait{200};

bool mpiUsable() {
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string mpiErrorText(int rc) {
  char buf[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (PMPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len));
}

[[noreturn]] void throwMpi(int rc, const std::string& what) {
  throw Error(ErrorCode::kTransportError, "qccl mpi transport: " + what + ": " + mpiErrorText(rc));
}

// Gives a request that will not be waited for a chance to finish until `until`, then hands it to
// MPI. A cancelled receive completes at once; a send cannot always be cancelled (ob1), so
// MPI_Request_free lets it finish in the background.
void dropRequest(MPI_Request* req, Clock::time_point until) {
  if (*req == MPI_REQUEST_NULL || !mpiUsable()) return;
  PMPI_Cancel(req);
  int flag = 0;
  while (Clock::now() < until) {
    if (PMPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) break;
    std::this_thread::yield();
  }
  if (*req != MPI_REQUEST_NULL) PMPI_Request_free(req);
}

class MpiTransport;

// A send, a receive (matched lazily, see the file comment) or a non-blocking collective.
class MpiRequest final : public Request {
 public:
  enum class Kind { kSend, kRecv, kCollective };

  explicit MpiRequest(MpiTransport* owner) : owner_(owner) {}

  void reset(Kind kind, int peer, uint32_t tag, void* buf, size_t bytes) {
    kind_ = kind;
    peer_ = peer;
    tag_ = tag;
    buf_ = buf;
    capacity_ = bytes;
    bytes_ = kind == Kind::kRecv ? 0 : bytes;
    done_ = false;
    matched_ = kind != Kind::kRecv;
    error_.clear();
    req_ = MPI_REQUEST_NULL;
  }

  MPI_Request* handle() { return &req_; }
  bool matched() const { return matched_; }
  int peer() const { return peer_; }
  uint32_t tag() const { return tag_; }

  // Tries to match this receive with MPI_Improbe; returns true once it is matched (or refused).
  bool tryMatch(MPI_Comm comm) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    int rc = PMPI_Improbe(peer_, static_cast<int>(tag_), comm, &flag, &msg, &st);
    if (rc != MPI_SUCCESS) {
      error_ = "MPI_Improbe from rank " + std::to_string(peer_) + ": " + mpiErrorText(rc);
      matched_ = true;
      return true;
    }
    if (!flag) return false;
    matched_ = true;
    int count = 0;
    PMPI_Get_count(&st, MPI_BYTE, &count);
    if (count < 0 || static_cast<size_t>(count) > capacity_) {
      // Left unreceived: the ranks disagree, the communicator fails, nothing more will be read.
      mismatch_ = true;
      error_ = "message from rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) + ") has " +
               std::to_string(count) + " bytes, more than the " + std::to_string(capacity_) +
               " expected: the ranks disagree on the element count or the codec";
      return true;
    }
    rc = PMPI_Imrecv(buf_, count, MPI_BYTE, &msg, &req_);
    if (rc != MPI_SUCCESS) error_ = "MPI_Imrecv from rank " + std::to_string(peer_) + ": " + mpiErrorText(rc);
    return true;
  }

  bool test() override;
  size_t bytes() const override { return bytes_; }

 protected:
  void release() noexcept override;

 private:
  MpiTransport* owner_;
  Kind kind_ = Kind::kSend;
  int peer_ = 0;
  uint32_t tag_ = 0;
  void* buf_ = nullptr;
  size_t capacity_ = 0;
  size_t bytes_ = 0;
  bool done_ = false;
  bool matched_ = true;
  bool mismatch_ = false;
  std::string error_;  // set when matching failed; reported by test()
  MPI_Request req_ = MPI_REQUEST_NULL;
};

// A control variable of the MPI tool interface bound to no object (MPI_T initialized): a handle to
// it with its type, scope and element count. False where the library has no such variable.
struct Cvar {
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int scope = 0;
  int count = 0;
};

bool openCvar(const char* wanted, Cvar* out) {
  int index = -1;
  char name[128], desc[8];
  int nameLen = sizeof name, descLen = sizeof desc, verbosity = 0, bind = 0;
  MPI_T_enum enumType = MPI_T_ENUM_NULL;
  if (MPI_T_cvar_get_index(wanted, &index) != MPI_SUCCESS ||
      MPI_T_cvar_get_info(index, name, &nameLen, &verbosity, &out->type, &enumType, desc, &descLen, &bind,
                          &out->scope) != MPI_SUCCESS ||
      bind != MPI_T_BIND_NO_OBJECT) {
    return false;
  }
  if (MPI_T_cvar_handle_alloc(index, nullptr, &out->handle, &out->count) != MPI_SUCCESS) {
    out->handle = MPI_T_CVAR_HANDLE_NULL;
    return false;
  }
  return true;
}

// Reads one such variable once: an integer of any width (`*number`) or a string (`*text`).
bool readCvar(const char* wanted, uint64_t* number, std::string* text) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return false;
  bool ok = false;
  Cvar v;
  if (openCvar(wanted, &v)) {
    if (v.type == MPI_CHAR && text != nullptr && v.count > 0 && v.count <= 65536) {
      std::vector<char> buf(static_cast<size_t>(v.count) + 1, '\0');
      ok = MPI_T_cvar_read(v.handle, buf.data()) == MPI_SUCCESS;
      if (ok) *text = buf.data();
    } else if (number != nullptr && v.count == 1) {
      if (v.type == MPI_INT || v.type == MPI_UNSIGNED) {
        unsigned x = 0;
        ok = MPI_T_cvar_read(v.handle, &x) == MPI_SUCCESS;
        *number = x;
      } else if (v.type == MPI_UNSIGNED_LONG || v.type == MPI_UNSIGNED_LONG_LONG || v.type == MPI_COUNT ||
                 v.type == MPI_LONG || v.type == MPI_LONG_LONG) {
        unsigned long long x = 0;
        ok = MPI_T_cvar_read(v.handle, &x) == MPI_SUCCESS;
        *number = x;
      }
    }
    MPI_T_cvar_handle_free(&v.handle);
  }
  MPI_T_finalize();
  return ok;
}

// Open MPI's nonblocking allreduce (coll/libnbc) chooses, on fewer than 4 ranks, a binomial
// reduce to one rank and then a broadcast: the whole vector crosses each link one way and then the
// other, never both at once. On 2 emulated hosts at 1 Gbit/s a 16 MiB MPI_Iallreduce took 255-262 ms
// that way and 138-147 ms with libnbc's ring, where gloo took 140 ms (bench/RESULTS.md, "auto
// across 2 and 3 hosts"). libnbc reads its choice from the control variable coll_libnbc_iallreduce_algorithm
// (0: its own rule, 1: ring) when a call starts, and the MPI tool interface can set it at run time.
// So qccl's own MPI_Iallreduce of at least kMinBytes on 2-3 ranks runs with it set to the ring, and
// then restores it; only where it was 0, so a user's own setting wins. Another thread's
// MPI_Iallreduce started in that window would also get the ring: a valid sum, maybe rounded
// differently on 3 ranks. In place too (the communicator stages only calls of 256 KiB and more out
// of place): libnbc's ring sums in place exactly (capi_mpi_check --case nbc-ring, 40000 floats).
// Other MPI libraries have no such variable, and nothing changes there.
class NbcRing {
 public:
  static constexpr size_t kMinBytes = size_t(64) << 10;  // libnbc's own binomial threshold

  NbcRing(int size, bool wanted) {
    if (!wanted || (size != 2 && size != 3)) return;
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
    initialized_ = true;
    Cvar v;
    if (!openCvar("coll_libnbc_iallreduce_algorithm", &v)) return;
    if (v.type == MPI_INT && v.count == 1 && v.scope != MPI_T_SCOPE_CONSTANT && v.scope != MPI_T_SCOPE_READONLY) {
      handle_ = v.handle;
    } else {
      MPI_T_cvar_handle_free(&v.handle);
    }
  }
  ~NbcRing() {
    if (handle_ != MPI_T_CVAR_HANDLE_NULL) MPI_T_cvar_handle_free(&handle_);
    if (initialized_) MPI_T_finalize();
  }
  NbcRing(const NbcRing&) = delete;
  NbcRing& operator=(const NbcRing&) = delete;

  bool active() const { return handle_ != MPI_T_CVAR_HANDLE_NULL; }

  /// start() (which starts the MPI_Iallreduce), with the ring chosen where it applies.
  template <class Start>
  int run(size_t bytes, Start&& start) {
    int old = -1;
    const int ring = 1;
    if (!active() || bytes < kMinBytes || MPI_T_cvar_read(handle_, &old) != MPI_SUCCESS || old != 0 ||
        MPI_T_cvar_write(handle_, &ring) != MPI_SUCCESS) {
      return start();
    }
    const int rc = start();
    MPI_T_cvar_write(handle_, &old);
    return rc;
  }

 private:
  bool initialized_ = false;
  MPI_T_cvar_handle handle_ = MPI_T_CVAR_HANDLE_NULL;
};

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm user, const MpiTransportOptions& options) {
    // Read before anything is acquired: a malformed QCCL_MPI_NBC_RING throws.
    const bool nbcRing = options.nbcRing < 0 ? env::mpiNbcRing() : options.nbcRing != 0;
    int rc = PMPI_Comm_dup(user, &comm_);
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Comm_dup");
    PMPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    PMPI_Comm_rank(comm_, &rank_);
    PMPI_Comm_size(comm_, &size_);
    int* tagUb = nullptr;
    int flag = 0;
    PMPI_Comm_get_attr(comm_, MPI_TAG_UB, &tagUb, &flag);
    int ub = flag && tagUb != nullptr ? *tagUb : 0;
    if (options.tagUpperBound > 0) ub = std::min(ub, options.tagUpperBound);
    if (ub < static_cast<int>(kMinTagLimit)) {
      PMPI_Comm_free(&comm_);
      throw Error(ErrorCode::kTransportError, "qccl mpi transport: MPI_TAG_UB is " + std::to_string(ub) +
                                                  ", below the 32767 the MPI standard guarantees");
    }
    abortTag_ = ub;
    tagLimit_ = static_cast<uint32_t>(std::min<int64_t>(ub, kMaxTag));
    abortIn_.resize(kAbortNoticeBytes);
    rc = PMPI_Irecv(abortIn_.data(), static_cast<int>(kAbortNoticeBytes), MPI_BYTE, MPI_ANY_SOURCE, abortTag_, comm_,
                    &abortRecv_);
    if (rc != MPI_SUCCESS) {
      PMPI_Comm_free(&comm_);
      throwMpi(rc, "MPI_Irecv of the abort channel");
    }
    hosts_ = findHosts();
    eagerBytes_ = mpiTcpEagerBytes();
    nbcRing_ = std::make_unique<NbcRing>(size_, nbcRing);
  }

  ~MpiTransport() override {
    if (!mpiUsable()) return;  // after MPI_Finalize nothing can be released any more
    if (abortRecv_ != MPI_REQUEST_NULL) {
      int flag = 0;
      if (PMPI_Test(&abortRecv_, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) abort_.have = true;
    }
    dropRequest(&abortRecv_, dropDeadline(kDropRecvWait));
    for (auto& r : abortSends_) dropRequest(&r, dropDeadline(kDropSendWait));
    // The duplicate is freed only after a clean life. A collective abandoned after a failure may
    // still be running on it (freeing it under the collective would crash). And after any failure
    // or abort notice, messages may still be on their way to it (every rank that fails tells every
    // other, and each takes only the first notice): Open MPI keeps a message for a context id that
    // was freed and hands it to the next communicator given that id, so a freed duplicate would
    // pass stale notices, or worse, to the communicator the application creates next. Such a
    // duplicate is left to MPI_Finalize, and its context id is not reused.
    if (unfinishedColls_ == 0 && !failed_ && !abortSent_ && !abort_.have) PMPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }
  std::vector<int> hostOfRanks() const override { return hosts_; }
  uint32_t tagLimit() const override { return tagLimit_; }
  void limitDrops(Clock::time_point until) override { dropLimit_ = until; }

  RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) override {
    checkArgs(peer, tag, buf, bytes, "isend");
    RequestPtr out = acquire(MpiRequest::Kind::kSend, peer, tag, const_cast<void*>(buf), bytes);
    auto* req = static_cast<MpiRequest*>(out.get());
    int rc = PMPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag), comm_, req->handle());
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Isend to rank " + std::to_string(peer));
    return out;
  }

  RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) override {
    checkArgs(peer, tag, buf, capacity, "irecv");
    RequestPtr out = acquire(MpiRequest::Kind::kRecv, peer, tag, buf, capacity);
    unmatched_.push_back(static_cast<MpiRequest*>(out.get()));
    matchPending();
    return out;
  }

  void progress() override { matchPending(); }
  size_t eagerBytes() const override { return eagerBytes_; }
  bool hasNativeAllreduce() const override { return true; }

  RequestPtr iallreduceSum(const float* send, float* recv, size_t count) override {
    if (count > static_cast<size_t>(INT_MAX)) return nullptr;
    RequestPtr out = acquire(MpiRequest::Kind::kCollective, -1, 0, recv, count * sizeof(float));
    const void* in = send == recv ? MPI_IN_PLACE : send;
    MPI_Request* handle = static_cast<MpiRequest*>(out.get())->handle();
    int rc = nbcRing_->run(count * sizeof(float), [&] {
      return PMPI_Iallreduce(in, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_, handle);
    });
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Iallreduce");
    ++unfinishedColls_;
    return out;
  }

  void markFailed() noexcept override { failed_ = true; }

  void sendAbort(ErrorCode code, const std::string& reason) noexcept override {
    if (abortSent_ || !mpiUsable()) return;
    abortSent_ = true;
    try {
      abortOut_ = packAbortNotice(code, reason);
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        MPI_Request r = MPI_REQUEST_NULL;
        if (PMPI_Isend(abortOut_.data(), static_cast<int>(abortOut_.size()), MPI_BYTE, p, abortTag_, comm_, &r) ==
            MPI_SUCCESS) {
          abortSends_.push_back(r);
        }
      }
    } catch (...) {
      // Best effort by contract.
    }
  }

  bool pollAbort(int* peer, ErrorCode* code, std::string* reason) override {
    if (!abort_.have && abortRecv_ != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Status st;
      if (PMPI_Test(&abortRecv_, &flag, &st) == MPI_SUCCESS && flag) {
        int count = 0;
        PMPI_Get_count(&st, MPI_BYTE, &count);
        abort_.set(st.MPI_SOURCE, abortIn_.data(), count < 0 ? 0 : static_cast<size_t>(count));
      }
    }
    return abort_.report(peer, code, reason);
  }

  // --- used by MpiRequest ---
  MPI_Comm comm() const { return comm_; }
  Clock::time_point dropDeadline(std::chrono::milliseconds own) const {
    return std::min(Clock::now() + own, dropLimit_);
  }
  void collectiveDone() { --unfinishedColls_; }
  void forget(MpiRequest* r) {
    auto it = std::find(unmatched_.begin(), unmatched_.end(), r);
    if (it != unmatched_.end()) unmatched_.erase(it);
  }
  void recycle(MpiRequest* r) { pool_.emplace_back(r); }

  // Probes the unmatched receives in posting order. A (peer, tag) whose oldest receive finds no
  // message blocks its younger receives for this pass: they must not overtake it.
  void matchPending() {
    if (unmatched_.empty()) return;
    blocked_.clear();
    for (size_t i = 0; i < unmatched_.size();) {
      MpiRequest* r = unmatched_[i];
      const std::pair<int, uint32_t> key{r->peer(), r->tag()};
      if (std::find(blocked_.begin(), blocked_.end(), key) == blocked_.end() && r->tryMatch(comm_)) {
        unmatched_.erase(unmatched_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      blocked_.push_back(key);
      ++i;
    }
  }

 private:
  RequestPtr acquire(MpiRequest::Kind kind, int peer, uint32_t tag, void* buf, size_t bytes) {
    MpiRequest* r;
    if (pool_.empty()) {
      r = new MpiRequest(this);
    } else {
      r = pool_.back().release();
      pool_.pop_back();
    }
    r->reset(kind, peer, tag, buf, bytes);
    return RequestPtr(r);
  }

  void checkArgs(int peer, uint32_t tag, const void* buf, size_t bytes, const char* op) const {
    QCCL_CHECK(peer >= 0 && peer < size_, ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": peer " + std::to_string(peer) + " out of range [0, " +
                   std::to_string(size_) + ")");
    QCCL_CHECK(tag < tagLimit_, ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": tag " + std::to_string(tag) + " is not below tagLimit() " +
                   std::to_string(tagLimit_));
    QCCL_CHECK(buf != nullptr || bytes == 0, ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": null buffer with non-zero size");
    QCCL_CHECK(bytes <= static_cast<size_t>(INT_MAX), ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": " + std::to_string(bytes) + " bytes exceed MPI's int count");
  }

  struct PoolDeleter {
    void operator()(MpiRequest* r) const;
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  // Host grouping (host_key.hpp): the MPI library's shared-memory split names each host by its
  // lowest rank, unless QCCL_HOST_ID is set on a rank. Every rank runs the same two collectives
  // either way, so ranks that disagree on QCCL_HOST_ID only group differently, never hang.
  std::vector<int> findHosts() {
    MPI_Comm node;
    int rc = PMPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    int leader = rank_;
    rc = PMPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
    PMPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Allreduce over the host");
    constexpr int kKeyBytes = 256;
    std::string mine = env::hostId().empty() ? "mpi:" + std::to_string(leader) : localHostKey();
    mine.resize(kKeyBytes, '\0');
    std::vector<char> all(static_cast<size_t>(kKeyBytes) * static_cast<size_t>(size_));
    rc = PMPI_Allgather(mine.data(), kKeyBytes, MPI_CHAR, all.data(), kKeyBytes, MPI_CHAR, comm_);
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Allgather of the host keys");
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.emplace_back(all.data() + static_cast<size_t>(r) * kKeyBytes, kKeyBytes);
    return hostsFromKeys(keys);
  }

  int rank_ = 0;
  int size_ = 0;
  std::vector<int> hosts_;  // hostOfRanks()
  size_t eagerBytes_ = 0;   // eagerBytes()
  int abortTag_ = 0;
  uint32_t tagLimit_ = 0;
  MPI_Request abortRecv_ = MPI_REQUEST_NULL;
  std::vector<char> abortIn_;
  std::vector<char> abortOut_;
  std::vector<MPI_Request> abortSends_;
  int unfinishedColls_ = 0;
  bool abortSent_ = false;
  bool failed_ = false;  // the communicator over it failed (markFailed)
  Clock::time_point dropLimit_ = Clock::time_point::max();
  std::vector<MpiRequest*> unmatched_;
  std::vector<std::pair<int, uint32_t>> blocked_;
  std::vector<std::unique_ptr<MpiRequest, PoolDeleter>> pool_;
  ReceivedAbort abort_;
  std::unique_ptr<NbcRing> nbcRing_;
};

// Recycled requests are deleted with the transport; they hold no MPI handle by then.
void MpiTransport::PoolDeleter::operator()(MpiRequest* r) const { delete r; }

bool MpiRequest::test() {
  if (done_) return true;
  if (!matched_) return false;
  if (!error_.empty()) {
    throw Error(mismatch_ ? ErrorCode::kMismatch : ErrorCode::kTransportError, "qccl mpi transport: " + error_);
  }
  int flag = 0;
  MPI_Status st;
  int rc = PMPI_Test(&req_, &flag, &st);
  if (rc != MPI_SUCCESS) {
    done_ = true;  // MPI completed (and freed) the failed request
    if (kind_ == Kind::kCollective) {
      owner_->collectiveDone();
      throwMpi(rc, "MPI_Iallreduce");
    }
    throwMpi(rc, std::string(kind_ == Kind::kRecv ? "receive from" : "send to") + " rank " + std::to_string(peer_) +
                     " tag " + std::to_string(tag_));
  }
  if (!flag) return false;
  done_ = true;
  if (kind_ == Kind::kCollective) owner_->collectiveDone();
  if (kind_ == Kind::kRecv) {
    int count = 0;
    PMPI_Get_count(&st, MPI_BYTE, &count);
    bytes_ = count < 0 ? 0 : static_cast<size_t>(count);
  }
  return true;
}

void MpiRequest::release() noexcept {
  if (!matched_) owner_->forget(this);
  if (!done_ && req_ != MPI_REQUEST_NULL) {
    if (kind_ == Kind::kCollective) {
      // MPI forbids cancelling or freeing an active collective: it is left to MPI, and the
      // transport keeps its communicator (see ~MpiTransport). The object is not reused.
      return;
    }
    dropRequest(&req_, owner_->dropDeadline(kind_ == Kind::kRecv ? kDropRecvWait : kDropSendWait));
  }
  req_ = MPI_REQUEST_NULL;
  try {
    owner_->recycle(this);
  } catch (...) {
    delete this;
  }
}

}  // namespace

size_t mpiTcpEagerBytes() {
  uint64_t limit = 0;
  if (!mpiUsable() || !readCvar("btl_tcp_eager_limit", &limit, nullptr)) return 0;
  // A btl list that leaves tcp out ("self,vader", "^tcp") means the limit is not the one in use.
  std::string btl;
  if (readCvar("btl", nullptr, &btl) && !btl.empty()) {
    const bool listed = btl.find("tcp") != std::string::npos;
    if (btl[0] == '^' ? listed : !listed) return 0;
  }
  return static_cast<size_t>(std::min<uint64_t>(limit, INT_MAX));
}

TransportPtr makeMpiTransport(int64_t mpiCommFortran, const MpiTransportOptions& options) {
  QCCL_CHECK(mpiUsable(), ErrorCode::kInvalidUsage, "makeMpiTransport: MPI is not initialized (or already finalized)");
  MPI_Comm comm = PMPI_Comm_f2c(static_cast<MPI_Fint>(mpiCommFortran));
  QCCL_CHECK(comm != MPI_COMM_NULL, ErrorCode::kInvalidArgument, "makeMpiTransport: null MPI communicator");
  return std::make_unique<MpiTransport>(comm, options);
}

}  // namespace qccl
