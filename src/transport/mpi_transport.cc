// MPI transport: non-blocking point-to-point on a duplicated communicator. Abort notices travel on
// a reserved tag (kMaxTag) and are caught by a standing receive from MPI_ANY_SOURCE.
//
// Every MPI call goes to its PMPI_* entry point: an MPI profiling-interface tool loaded into the
// process (qccl's own MPI_Allreduce interposer among them) must never see qccl's internal traffic,
// and the interposer must never re-enter itself through qccl.
#include "transport/mpi_transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace qccl {
namespace {

constexpr int kAbortTag = static_cast<int>(kMaxTag);
// How long dropping an unfinished request waits for MPI to let go of the caller's buffer before
// handing the request to MPI_Request_free: longer for receives, which MPI would write into.
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

// Gives a request that will not be waited for a short chance to finish, then hands it to MPI.
// A cancelled receive completes at once; a send cannot always be cancelled (ob1), so MPI_Request_free
// lets it finish in the background.
void dropRequest(MPI_Request* req, std::chrono::milliseconds wait) {
  if (*req == MPI_REQUEST_NULL || !mpiUsable()) return;
  PMPI_Cancel(req);
  auto until = Clock::now() + wait;
  int flag = 0;
  while (Clock::now() < until) {
    if (PMPI_Test(req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) break;
    std::this_thread::yield();
  }
  if (*req != MPI_REQUEST_NULL) PMPI_Request_free(req);
}

class MpiRequest final : public Request {
 public:
  MpiRequest(bool isRecv, int peer, uint32_t tag, size_t bytes)
      : isRecv_(isRecv), peer_(peer), tag_(tag), bytes_(isRecv ? 0 : bytes) {}
  /// A non-blocking collective (peer -1). MPI forbids cancelling or freeing one that is still
  /// active, so an unfinished one is left to MPI (the communicator has failed by then).
  /// `unfinished` counts the transport's collectives that have not completed.
  MpiRequest(size_t bytes, std::shared_ptr<int> unfinished)
      : isRecv_(false), peer_(-1), tag_(0), bytes_(bytes), unfinished_(std::move(unfinished)) {
    ++*unfinished_;
  }
  ~MpiRequest() override {
    if (peer_ >= 0) dropRequest(&req_, isRecv_ ? kDropRecvWait : kDropSendWait);
  }

  MPI_Request* handle() { return &req_; }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status st;
    int rc = PMPI_Test(&req_, &flag, &st);
    if (rc != MPI_SUCCESS) {
      done_ = true;  // MPI completed (and freed) the failed request
      if (unfinished_) --*unfinished_;
      if (peer_ < 0) throwMpi(rc, "MPI_Iallreduce");
      throwMpi(rc, std::string(isRecv_ ? "receive from" : "send to") + " rank " + std::to_string(peer_) + " tag " +
                       std::to_string(tag_));
    }
    if (!flag) return false;
    done_ = true;
    if (unfinished_) --*unfinished_;
    if (isRecv_) {
      int count = 0;
      PMPI_Get_count(&st, MPI_BYTE, &count);
      bytes_ = count < 0 ? 0 : static_cast<size_t>(count);
    }
    return true;
  }
  size_t bytes() const override { return bytes_; }

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool isRecv_;
  int peer_;
  uint32_t tag_;
  size_t bytes_;
  bool done_ = false;
  std::shared_ptr<int> unfinished_;
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm user) {
    int rc = PMPI_Comm_dup(user, &comm_);
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Comm_dup");
    PMPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    PMPI_Comm_rank(comm_, &rank_);
    PMPI_Comm_size(comm_, &size_);
    int* tagUb = nullptr;
    int flag = 0;
    PMPI_Comm_get_attr(comm_, MPI_TAG_UB, &tagUb, &flag);
    if (!flag || tagUb == nullptr || *tagUb < kAbortTag) {
      PMPI_Comm_free(&comm_);
      throw Error(ErrorCode::kTransportError, "qccl mpi transport: MPI_TAG_UB is below " + std::to_string(kAbortTag) +
                                                  ", too small for qccl's tags");
    }
    abortIn_.resize(kAbortNoticeBytes);
    rc = PMPI_Irecv(abortIn_.data(), static_cast<int>(kAbortNoticeBytes), MPI_BYTE, MPI_ANY_SOURCE, kAbortTag, comm_,
                   &abortRecv_);
    if (rc != MPI_SUCCESS) {
      PMPI_Comm_free(&comm_);
      throwMpi(rc, "MPI_Irecv of the abort channel");
    }
  }

  ~MpiTransport() override {
    if (!mpiUsable()) return;  // after MPI_Finalize nothing can be released any more
    dropRequest(&abortRecv_, kDropRecvWait);
    for (auto& r : abortSends_) dropRequest(&r, kDropSendWait);
    // A collective abandoned by a timeout may still be running on the duplicate: freeing it under
    // the collective would crash, so it is left to MPI_Finalize.
    if (*unfinishedColls_ == 0) PMPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) override {
    checkArgs(peer, tag, buf, bytes, "isend");
    auto req = std::make_unique<MpiRequest>(false, peer, tag, bytes);
    int rc = PMPI_Isend(buf, static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag), comm_, req->handle());
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Isend to rank " + std::to_string(peer));
    return req;
  }

  RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) override {
    checkArgs(peer, tag, buf, capacity, "irecv");
    auto req = std::make_unique<MpiRequest>(true, peer, tag, capacity);
    int rc = PMPI_Irecv(buf, static_cast<int>(capacity), MPI_BYTE, peer, static_cast<int>(tag), comm_, req->handle());
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Irecv from rank " + std::to_string(peer));
    return req;
  }

  RequestPtr iallreduceSum(const float* send, float* recv, size_t count) override {
    if (count > static_cast<size_t>(INT_MAX)) return nullptr;
    auto req = std::make_unique<MpiRequest>(count * sizeof(float), unfinishedColls_);
    const void* in = send == recv ? MPI_IN_PLACE : send;
    int rc = PMPI_Iallreduce(in, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_, req->handle());
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Iallreduce");
    return req;
  }

  RequestPtr iallreduceMin(int64_t* words, int n) override {
    auto req = std::make_unique<MpiRequest>(static_cast<size_t>(n) * sizeof(int64_t), unfinishedColls_);
    int rc = PMPI_Iallreduce(MPI_IN_PLACE, words, n, MPI_INT64_T, MPI_MIN, comm_, req->handle());
    if (rc != MPI_SUCCESS) throwMpi(rc, "MPI_Iallreduce");
    return req;
  }

  void sendAbort(ErrorCode code, const std::string& reason) noexcept override {
    if (abortSent_ || !mpiUsable()) return;
    abortSent_ = true;
    try {
      abortOut_ = packAbortNotice(code, reason);
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        MPI_Request r = MPI_REQUEST_NULL;
        if (PMPI_Isend(abortOut_.data(), static_cast<int>(abortOut_.size()), MPI_BYTE, p, kAbortTag, comm_, &r) ==
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
      if (PMPI_Test(&abortRecv_, &flag, &st) == MPI_SUCCESS && flag) parseAbort(st);
    }
    return abort_.report(peer, code, reason);
  }

 private:
  void parseAbort(const MPI_Status& st) {
    int count = 0;
    PMPI_Get_count(&st, MPI_BYTE, &count);
    abort_.set(st.MPI_SOURCE, abortIn_.data(), count < 0 ? 0 : static_cast<size_t>(count));
  }

  void checkArgs(int peer, uint32_t tag, const void* buf, size_t bytes, const char* op) const {
    QCCL_CHECK(peer >= 0 && peer < size_, ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": peer " + std::to_string(peer) + " out of range [0, " +
                   std::to_string(size_) + ")");
    QCCL_CHECK(tag < kMaxTag, ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": tag " + std::to_string(tag) + " is reserved (>= kMaxTag)");
    QCCL_CHECK(buf != nullptr || bytes == 0, ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": null buffer with non-zero size");
    QCCL_CHECK(bytes <= static_cast<size_t>(INT_MAX), ErrorCode::kInvalidArgument,
               std::string("mpi ") + op + ": " + std::to_string(bytes) + " bytes exceed MPI's int count");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  MPI_Request abortRecv_ = MPI_REQUEST_NULL;
  std::vector<char> abortIn_;
  std::vector<char> abortOut_;
  std::vector<MPI_Request> abortSends_;
  std::shared_ptr<int> unfinishedColls_ = std::make_shared<int>(0);
  bool abortSent_ = false;
  ReceivedAbort abort_;
};

}  // namespace

TransportPtr makeMpiTransport(int64_t mpiCommFortran) {
  QCCL_CHECK(mpiUsable(), ErrorCode::kInvalidUsage, "makeMpiTransport: MPI is not initialized (or already finalized)");
  MPI_Comm comm = PMPI_Comm_f2c(static_cast<MPI_Fint>(mpiCommFortran));
  QCCL_CHECK(comm != MPI_COMM_NULL, ErrorCode::kInvalidArgument, "makeMpiTransport: null MPI communicator");
  return std::make_unique<MpiTransport>(comm);
}

}  // namespace qccl
