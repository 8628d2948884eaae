// qccl C++ API: a thin RAII layer over the C API (qccl/qccl.h). Failures throw qccl::Error
// (qccl/error.hpp) carrying the C result code and the communicator's last-error text.
//
//   qccl::Comm comm = qccl::Comm::fromMpi(MPI_COMM_WORLD);     // needs qccl/qccl_mpi.h first
//   qccl::TensorOptions t; t.id = 7; t.codec = qcclCodecOneBit;
//   comm.allreduce(grad.data(), grad.data(), grad.size(), qcclAvg, t);
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "qccl/error.hpp"
#include "qccl/qccl.h"

namespace qccl {

/// Throws Error(result, message) unless result is qcclSuccess. `comm` may be null.
inline void checkResult(qcclResult_t result, qcclComm_t comm = nullptr) {
  if (result == qcclSuccess) return;
  std::string msg = qcclGetLastError(comm);
  if (msg.empty()) msg = qcclGetErrorString(result);
  throw Error(static_cast<ErrorCode>(result), msg);
}

/// Per-tensor options; the defaults take the communicator's codec, bits and algorithm.
struct TensorOptions {
  uint64_t id = 0;  ///< stable tensor id; keys the error-feedback state with the count
  qcclCodec_t codec = qcclCodecDefault;
  int bits = 0;   ///< 0: the communicator's
  int algo = -1;  ///< qcclAlgo_t; -1: the communicator's

  qcclTensorOpts_t toC() const { return qcclTensorOpts_t{id, static_cast<int>(codec), bits, algo}; }
};

/// Defaults plus QCCL_* environment overrides (qcclConfigInit).
inline qcclConfig_t defaultConfig() {
  qcclConfig_t c;
  checkResult(qcclConfigInit(&c));
  return c;
}

/// An owning communicator handle. Movable, not copyable; destroys the communicator when it dies.
class Comm {
 public:
  Comm() = default;
  /// Takes ownership of a handle from the C API.
  explicit Comm(qcclComm_t handle) : handle_(handle) {}
  ~Comm() { reset(); }
  Comm(Comm&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      reset();
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

#ifdef QCCL_QCCL_MPI_H_
  /// Over a duplicate of `mpiComm`; collective over it. Include qccl/qccl_mpi.h before this header.
  static Comm fromMpi(MPI_Comm mpiComm, const qcclConfig_t* config = nullptr) {
    qcclComm_t h = nullptr;
    checkResult(qcclCommInitMpi(&h, mpiComm, config));
    return Comm(h);
  }
#endif
  /// Over an MPI communicator given as its Fortran handle (MPI_Comm_c2f).
  static Comm fromMpiFortran(int64_t mpiCommF, const qcclConfig_t* config = nullptr) {
    qcclComm_t h = nullptr;
    checkResult(qcclCommInitMpiFortran(&h, mpiCommF, config));
    return Comm(h);
  }
  /// Over UCX, bootstrapped through an id from qcclGetUniqueId on rank 0. Collective.
  static Comm fromUniqueId(const qcclUniqueId& id, int nranks, int rank, const qcclConfig_t* config = nullptr) {
    qcclComm_t h = nullptr;
    checkResult(qcclCommInitRank(&h, nranks, id, rank, config));
    return Comm(h);
  }
  /// `nranks` communicators in this process; element i belongs to thread i.
  static std::vector<Comm> loopback(int nranks, const qcclConfig_t* config = nullptr) {
    std::vector<qcclComm_t> h(nranks > 0 ? nranks : 0);
    checkResult(qcclCommInitLoopback(h.data(), nranks, config));
    std::vector<Comm> out;
    for (qcclComm_t c : h) out.emplace_back(c);
    return out;
  }

  qcclComm_t get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }

  int rank() const {
    int r = 0;
    checkResult(qcclCommUserRank(handle_, &r), handle_);
    return r;
  }
  int size() const {
    int n = 0;
    checkResult(qcclCommCount(handle_, &n), handle_);
    return n;
  }
  qcclStats_t stats() const {
    qcclStats_t s;
    checkResult(qcclCommGetStats(handle_, &s), handle_);
    return s;
  }
  /// The schedule the last allreduce ran, and whether the sum bypassed qccl's messages: the MPI
  /// library's own, or qccl's shared-memory sum on one host (qcclCommGetLastAlgo tells which).
  qcclAlgo_t lastAlgo(bool* native = nullptr) const {
    int a = 0, n = 0;
    checkResult(qcclCommGetLastAlgo(handle_, &a, &n), handle_);
    if (native != nullptr) *native = n != 0;
    return static_cast<qcclAlgo_t>(a);
  }

  /// recv[i] = op over ranks of send[i]; in place when send == recv. Bit-identical on every rank.
  void allreduce(const void* send, void* recv, size_t count, qcclDataType_t dtype, qcclRedOp_t op,
                 const TensorOptions& t = {}, void* stream = nullptr) {
    qcclTensorOpts_t c = t.toC();
    checkResult(qcclAllreduce(send, recv, count, dtype, op, &c, handle_, stream), handle_);
  }
  /// fp32 convenience overload.
  void allreduce(const float* send, float* recv, size_t count, qcclRedOp_t op = qcclSum, const TensorOptions& t = {}) {
    allreduce(send, recv, count, qcclFloat32, op, t);
  }
  /// allreduce of fp32 host buffers, then fn(user, values, first, count) over every element of the
  /// result once, inside the last decode where the schedule allows it (qcclAllreduceEpilogue).
  void allreduceEpilogue(const float* send, float* recv, size_t count, qcclRedOp_t op, qcclEpilogueFn_t fn, void* user,
                         const TensorOptions& t = {}) {
    qcclTensorOpts_t c = t.toC();
    checkResult(qcclAllreduceEpilogue(send, recv, count, op, &c, fn, user, handle_), handle_);
  }
  /// recv[r * sendCount + i] = rank r's send[i].
  void allgather(const void* send, void* recv, size_t sendCount, qcclDataType_t dtype, const TensorOptions& t = {},
                 void* stream = nullptr) {
    qcclTensorOpts_t c = t.toC();
    checkResult(qcclAllgather(send, recv, sendCount, dtype, &c, handle_, stream), handle_);
  }
  /// Frees the error-feedback state of tensor `id`.
  void releaseTensor(uint64_t id) { checkResult(qcclTensorRelease(handle_, id), handle_); }

  /// Marks the communicator failed, tells the peers, and frees it. Never throws.
  void abort() noexcept {
    if (handle_ != nullptr) qcclCommAbort(std::exchange(handle_, nullptr));
  }
  /// Destroys the communicator now (the destructor does the same). Never throws.
  void reset() noexcept {
    if (handle_ != nullptr) qcclCommDestroy(std::exchange(handle_, nullptr));
  }

 private:
  qcclComm_t handle_ = nullptr;
};

}  // namespace qccl
