// The C API (qccl/qccl.h) over the C++ core. Every entry point catches everything: an exception
// never crosses the C boundary, it becomes a qcclResult_t plus a last-error text stored both
// per communicator and per thread (a failed init has no communicator to hold its message).
//
// Threads (the contract is in qccl.h): calls on one communicator hold its call lock; abort,
// stats, size, rank and last-error reads take no call lock, so a watchdog thread can always reach
// them. qcclCommAbort raises the communicator's abort flag first (the running call's waits see
// it within milliseconds and return), then takes the call lock, tells the peers and frees.
#include "qccl/qccl.h"

#include "capi_internal.hpp"

#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/communicator.hpp"
#include "core/config.hpp"
#include "core/options.hpp"
#include "qccl/codec.hpp"
#include "qccl/error.hpp"
#include "transport/transport.hpp"
// QCCL_C_WITH_MPI / QCCL_C_WITH_UCX are set by bindings/c/CMakeLists.txt when those transports
// are part of the library.
#ifndef QCCL_C_WITH_MPI
#define QCCL_C_WITH_MPI 0
#endif
#ifndef QCCL_C_WITH_UCX
#define QCCL_C_WITH_UCX 0
#endif
#if QCCL_C_WITH_MPI
#include "transport/mpi_transport.hpp"
#endif
#if QCCL_C_WITH_UCX
#include "transport/bootstrap.hpp"
#include "transport/ucx_transport.hpp"
#endif

struct qcclComm {
  std::unique_ptr<qccl::Communicator> core;
  std::mutex callMu;  // held by every call that uses the core's collective state
  mutable std::mutex errorMu;
  std::string lastError;
};

namespace {

using qccl::ErrorCode;

thread_local std::string tlsLastError;

// Sizes above this are a negative int64 cast to size_t, or would overflow the byte count.
constexpr size_t kMaxCount = static_cast<size_t>(INT64_MAX) / 8;

// Called from catch handlers: it must not throw, even when the message cannot be stored.
void recordError(qcclComm* comm, const std::string& msg) noexcept {
  try {
    tlsLastError = msg;
    if (comm != nullptr) {
      std::lock_guard<std::mutex> lock(comm->errorMu);
      comm->lastError = msg;
    }
  } catch (...) {
  }
}

qcclResult_t fail(qcclComm* comm, const char* fn, const char* sep, const char* what, qcclResult_t code) noexcept {
  try {
    recordError(comm, std::string(fn) + sep + what);
  } catch (...) {  // no memory for the message: the code alone must do
  }
  return code;
}

// Runs `body` and turns any exception into a result code plus last-error text.
template <typename F>
qcclResult_t guarded(qcclComm* comm, const char* fn, F&& body) noexcept {
  try {
    body();
    return qcclSuccess;
  } catch (const qccl::Error& e) {
    return fail(comm, fn, ": ", e.what(), static_cast<qcclResult_t>(e.code()));
  } catch (const std::bad_alloc&) {
    return fail(comm, fn, ": out of memory", "", qcclSystemError);
  } catch (const std::exception& e) {
    return fail(comm, fn, ": internal error: ", e.what(), qcclInternalError);
  } catch (...) {
    return fail(comm, fn, ": internal error: unknown exception", "", qcclInternalError);
  }
}

[[noreturn]] void invalid(const std::string& msg) { throw qccl::Error(ErrorCode::kInvalidArgument, msg); }

// For calls that use the communicator's collective state: its call lock spans the body and the
// recording of the body's error, so that a concurrent qcclCommAbort frees the communicator only
// after both.
template <typename F>
qcclResult_t lockedCall(qcclComm* comm, const char* fn, F&& body) noexcept {
  if (comm == nullptr || !comm->core) return guarded(nullptr, fn, [] { invalid("comm is NULL"); });
  std::unique_lock<std::mutex> lock(comm->callMu, std::defer_lock);
  try {
    lock.lock();
  } catch (...) {
    return fail(comm, fn, ": cannot lock the communicator", "", qcclInternalError);
  }
  return guarded(comm, fn, std::forward<F>(body));
}

void requireComm(const qcclComm* comm) {
  if (comm == nullptr || !comm->core) invalid("comm is NULL");
}

qccl::CodecId codecFromInt(int v, const char* what) {
  if (v < 0 || v >= qccl::kNumCodecs) invalid(std::string(what) + " = " + std::to_string(v) + " is not a qcclCodec_t");
  return static_cast<qccl::CodecId>(v);
}

qccl::Algo algoFromInt(int v, const char* what) {
  if (v < 0 || v >= static_cast<int>(qccl::Algo::kCount))
    invalid(std::string(what) + " = " + std::to_string(v) + " is not a qcclAlgo_t");
  return static_cast<qccl::Algo>(v);
}

// A C caller may pass any int where an enum is expected; reading such a value as the C++ enum
// type is undefined behaviour, so enum arguments are inspected as plain ints first.
template <typename E>
int enumValue(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized here");
  int v;
  std::memcpy(&v, &e, sizeof(v));
  return v;
}

qccl::DataType dtypeFromC(const qcclDataType_t& t) {
  int v = enumValue(t);
  if (v < 0 || v >= static_cast<int>(qccl::DataType::kCount))
    invalid("datatype = " + std::to_string(v) + " is not a qcclDataType_t");
  return static_cast<qccl::DataType>(v);
}

qccl::RedOp opFromC(const qcclRedOp_t& op) {
  int v = enumValue(op);
  if (v < 0 || v >= static_cast<int>(qccl::RedOp::kCount))
    invalid("op = " + std::to_string(v) + " is not a qcclRedOp_t");
  return static_cast<qccl::RedOp>(v);
}

static_assert(sizeof(qcclUniqueId) == sizeof(qccl::UniqueId), "the C and internal unique ids are the same bytes");
qccl::UniqueId idFromC(const qcclUniqueId& c) {
  qccl::UniqueId id;
  std::memcpy(id.internal, c.internal, sizeof id.internal);
  return id;
}
void idToC(const qccl::UniqueId& id, qcclUniqueId* c) { std::memcpy(c->internal, id.internal, sizeof c->internal); }

// The one place where qcclConfig_t and qccl::Options meet, both directions.
void optionsToConfig(const qccl::Options& o, qcclConfig_t* c) {
  std::memset(c, 0, sizeof(*c));
  c->structSize = sizeof(qcclConfig_t);
  c->codec = static_cast<int>(o.codec.codec);
  c->bits = o.codec.bits;
  c->bucket = static_cast<int>(o.codec.bucket);
  c->stochastic = o.codec.stochastic ? 1 : 0;
  c->seed = o.codec.seed;
  c->minCompressBytes = o.minCompressBytes;
  c->chunkBytes = o.chunkBytes;
  c->pipelineDepth = o.pipelineDepth;
  c->timeoutSec = o.timeoutSec;
  c->warmupCalls = o.warmupCalls;
  c->algo = static_cast<int>(o.algo);
  c->errorFeedback = o.errorFeedback ? 1 : 0;
  c->maxResidualBytes = o.maxResidualBytes;
  c->intraCodec = static_cast<int>(o.intraCodec);
  c->autoHier = o.autoHier ? 1 : 0;
  c->shm = o.shm ? 1 : 0;
  c->shmChunkBytes = o.shmChunkBytes;
  c->localCompress = o.localCompress ? 1 : 0;
  c->autoRing = o.autoRing ? 1 : 0;
}

static_assert(QCCL_AUTO_TRIAL_CALLS == qccl::kTuneTrials, "qccl.h and options.hpp disagree");

qccl::Options configToOptions(const qcclConfig_t* c) {
  if (c == nullptr) return qccl::optionsFromEnv();
  if (c->structSize != sizeof(qcclConfig_t))
    invalid("config->structSize = " + std::to_string(c->structSize) + ", expected " +
            std::to_string(sizeof(qcclConfig_t)) + " (fill the config with qcclConfigInit first)");
  qccl::Options o;
  o.codec.codec = codecFromInt(c->codec, "config->codec");
  if (c->bits < 0) invalid("config->bits = " + std::to_string(c->bits) + " is negative");
  o.codec.bits = c->bits;
  // Checked here for every codec: a tensor may later name a bucketed codec the config does not.
  if (c->bucket < 32 || c->bucket % 32 != 0 || static_cast<uint32_t>(c->bucket) > qccl::kMaxBucket)
    invalid("config->bucket = " + std::to_string(c->bucket) + " must be a multiple of 32 in 32.." +
            std::to_string(qccl::kMaxBucket));
  o.codec.bucket = static_cast<uint32_t>(c->bucket);
  o.codec.stochastic = c->stochastic != 0;
  o.codec.seed = c->seed;
  qccl::validateConfig(o.codec);
  o.minCompressBytes = c->minCompressBytes;
  if (c->chunkBytes != 0 && (c->chunkBytes < 4 || c->chunkBytes > qccl::kMaxChunkBytes))
    invalid("config->chunkBytes = " + std::to_string(c->chunkBytes) + " is neither 0 (by codec) nor in 4 .. 1 GiB");
  o.chunkBytes = c->chunkBytes;
  if (c->pipelineDepth < 1 || c->pipelineDepth > qccl::kMaxPipelineDepth)
    invalid("config->pipelineDepth = " + std::to_string(c->pipelineDepth) + " is not in 1..64");
  o.pipelineDepth = c->pipelineDepth;
  if (!(c->timeoutSec > 0.0)) invalid("config->timeoutSec = " + std::to_string(c->timeoutSec) + " must be positive");
  o.timeoutSec = c->timeoutSec;
  if (c->warmupCalls < 0) invalid("config->warmupCalls = " + std::to_string(c->warmupCalls) + " is negative");
  o.warmupCalls = c->warmupCalls;
  o.algo = algoFromInt(c->algo, "config->algo");
  o.errorFeedback = c->errorFeedback != 0;
  o.maxResidualBytes = c->maxResidualBytes;
  o.intraCodec = codecFromInt(c->intraCodec, "config->intraCodec");
  o.autoHier = c->autoHier != 0;
  o.shm = c->shm != 0;
  if (c->shmChunkBytes < 64 || c->shmChunkBytes > qccl::kMaxShmChunkBytes)
    invalid("config->shmChunkBytes = " + std::to_string(c->shmChunkBytes) + " is not in 64 .. 256 MiB");
  o.shmChunkBytes = c->shmChunkBytes;
  o.localCompress = c->localCompress != 0;
  o.autoRing = c->autoRing != 0;
  qccl::validate(o);
  return o;
}

qccl::TensorOpts tensorOptsFromC(const qcclTensorOpts_t* t) {
  qccl::TensorOpts o;
  if (t == nullptr) return o;
  o.id = t->id;
  if (t->codec != qcclCodecDefault) o.codec = codecFromInt(t->codec, "opts->codec");
  if (t->bits < 0) invalid("opts->bits = " + std::to_string(t->bits) + " is negative");
  o.bits = t->bits;
  if (t->algo != -1) o.algo = algoFromInt(t->algo, "opts->algo");
  return o;
}

void checkCount(size_t count, const char* what) {
  if (count > kMaxCount) invalid(std::string(what) + " = " + std::to_string(count) + " is too large (negative?)");
}

std::unique_ptr<qcclComm> wrap(std::unique_ptr<qccl::Communicator> core) {
  auto c = std::make_unique<qcclComm>();
  c->core = std::move(core);
  return c;
}

}  // namespace

extern "C" {

const char* qcclGetErrorString(qcclResult_t result) {
  switch (enumValue(result)) {
    case qcclSuccess:
      return "no error";
    case qcclCudaError:
      return "CUDA error";
    case qcclSystemError:
      return "system error (out of memory, socket, ...)";
    case qcclInternalError:
      return "internal error (a bug in qccl)";
    case qcclInvalidArgument:
      return "invalid argument";
    case qcclInvalidUsage:
      return "invalid usage";
    case qcclRemoteError:
      return "a peer failed or aborted";
    case qcclTimeout:
      return "timeout: the communicator is now failed";
    case qcclMismatch:
      return "ranks disagree on count, codec, datatype or call order";
    case qcclMalformed:
      return "malformed data from the wire";
    case qcclCommFailed:
      return "the communicator failed earlier or was aborted";
    case qcclTransportError:
      return "transport (MPI or UCX) error";
    case qcclNumResults:
      break;
  }
  return "unknown qcclResult_t";
}

const char* qcclGetLastError(qcclComm_t comm) {
  if (comm == nullptr) return tlsLastError.c_str();
  // A copy owned by this thread: the communicator's text may change under another thread's call.
  thread_local std::string copy;
  try {
    std::lock_guard<std::mutex> lock(comm->errorMu);
    copy = comm->lastError;
  } catch (...) {
    copy.clear();
  }
  return copy.c_str();
}

qcclResult_t qcclGetVersion(int* version) {
  return guarded(nullptr, "qcclGetVersion", [&] {
    if (version == nullptr) invalid("version is NULL");
    *version = QCCL_VERSION_MAJOR * 10000 + QCCL_VERSION_MINOR * 100 + QCCL_VERSION_PATCH;
  });
}

qcclResult_t qcclConfigInit(qcclConfig_t* config) {
  return guarded(nullptr, "qcclConfigInit", [&] {
    if (config == nullptr) invalid("config is NULL");
    optionsToConfig(qccl::optionsFromEnv(), config);
  });
}

qcclResult_t qcclGetUniqueId(qcclUniqueId* uniqueId) {
  return guarded(nullptr, "qcclGetUniqueId", [&] {
    if (uniqueId == nullptr) invalid("uniqueId is NULL");
#if QCCL_C_WITH_UCX
    qccl::UniqueId id;
    qccl::getUniqueId(&id);
    idToC(id, uniqueId);
#else
    throw qccl::Error(ErrorCode::kInvalidUsage, "qccl was built without the UCX transport");
#endif
  });
}

qcclResult_t qcclUniqueIdFromAddress(qcclUniqueId* uniqueId, const char* host, int port) {
  return guarded(nullptr, "qcclUniqueIdFromAddress", [&] {
    if (uniqueId == nullptr) invalid("uniqueId is NULL");
    if (host == nullptr || host[0] == '\0') invalid("host is NULL or empty");
    if (port <= 0 || port > 65535) invalid("port = " + std::to_string(port) + " is not in 1..65535");
#if QCCL_C_WITH_UCX
    qccl::UniqueId id;
    qccl::uniqueIdFromAddress(&id, host, port);
    idToC(id, uniqueId);
#else
    throw qccl::Error(ErrorCode::kInvalidUsage, "qccl was built without the UCX transport");
#endif
  });
}

qcclResult_t qcclCommInitRank(qcclComm_t* comm, int nranks, qcclUniqueId commId, int rank, const qcclConfig_t* config) {
  return guarded(nullptr, "qcclCommInitRank", [&] {
    if (comm == nullptr) invalid("comm is NULL");
    *comm = nullptr;
    if (nranks < 1) invalid("nranks = " + std::to_string(nranks) + " must be at least 1");
    if (rank < 0 || rank >= nranks)
      invalid("rank = " + std::to_string(rank) + " is not in 0.." + std::to_string(nranks - 1));
    qccl::Options opts = configToOptions(config);
#if QCCL_C_WITH_UCX
    auto transport = qccl::makeUcxTransport(idFromC(commId), nranks, rank, opts.timeoutSec);
    *comm = wrap(std::make_unique<qccl::Communicator>(std::move(transport), opts)).release();
#else
    (void)commId;
    (void)opts;
    throw qccl::Error(ErrorCode::kInvalidUsage, "qccl was built without the UCX transport");
#endif
  });
}

qcclResult_t qcclCommInitMpiFortran(qcclComm_t* comm, int64_t mpiCommF, const qcclConfig_t* config) {
  return guarded(nullptr, "qcclCommInitMpiFortran", [&] {
    if (comm == nullptr) invalid("comm is NULL");
    *comm = nullptr;
    qccl::Options opts = configToOptions(config);
#if QCCL_C_WITH_MPI
    auto transport = qccl::makeMpiTransport(mpiCommF);
    *comm = wrap(std::make_unique<qccl::Communicator>(std::move(transport), opts)).release();
#else
    (void)mpiCommF;
    (void)opts;
    throw qccl::Error(ErrorCode::kInvalidUsage, "qccl was built without the MPI transport");
#endif
  });
}

qcclResult_t qcclCommInitLoopback(qcclComm_t* comms, int nranks, const qcclConfig_t* config) {
  return guarded(nullptr, "qcclCommInitLoopback", [&] {
    if (comms == nullptr) invalid("comms is NULL");
    if (nranks < 1 || nranks > 1024) invalid("nranks = " + std::to_string(nranks) + " is not in 1..1024");
    for (int i = 0; i < nranks; ++i) comms[i] = nullptr;
    qccl::Options opts = configToOptions(config);
    std::vector<qccl::TransportPtr> transports = qccl::makeLoopbackGroup(nranks);
    // Communicator construction may talk to the peers, so each rank is built on its own thread.
    std::vector<std::unique_ptr<qccl::Communicator>> cores(nranks);
    std::vector<std::exception_ptr> errors(nranks);
    std::vector<std::thread> threads;
    for (int i = 0; i < nranks; ++i) {
      threads.emplace_back([&, i] {
        try {
          cores[i] = std::make_unique<qccl::Communicator>(std::move(transports[i]), opts);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    std::vector<std::unique_ptr<qcclComm>> handles;
    for (auto& c : cores) handles.push_back(wrap(std::move(c)));
    for (int i = 0; i < nranks; ++i) comms[i] = handles[i].release();
  });
}

qcclResult_t qcclCommDestroy(qcclComm_t comm) {
  return guarded(nullptr, "qcclCommDestroy", [&] {
    if (comm == nullptr) invalid("comm is NULL");
    { std::lock_guard<std::mutex> wait(comm->callMu); }  // a running call returns first
    delete comm;
  });
}

qcclResult_t qcclCommInterrupt(qcclComm_t comm) {
  return guarded(nullptr, "qcclCommInterrupt", [&] {
    requireComm(comm);
    comm->core->requestAbort();
  });
}

qcclResult_t qcclCommAbort(qcclComm_t comm) {
  return guarded(nullptr, "qcclCommAbort", [&] {
    if (comm == nullptr) invalid("comm is NULL");
    if (comm->core) comm->core->requestAbort();  // lock-free: ends a running call's waits
    {
      std::lock_guard<std::mutex> lock(comm->callMu);
      if (comm->core) comm->core->abort("qcclCommAbort called by the application");
    }
    delete comm;
  });
}

qcclResult_t qcclCommCount(const qcclComm_t comm, int* count) {
  return guarded(comm, "qcclCommCount", [&] {
    requireComm(comm);
    if (count == nullptr) invalid("count is NULL");
    *count = comm->core->size();
  });
}

qcclResult_t qcclCommUserRank(const qcclComm_t comm, int* rank) {
  return guarded(comm, "qcclCommUserRank", [&] {
    requireComm(comm);
    if (rank == nullptr) invalid("rank is NULL");
    *rank = comm->core->rank();
  });
}

qcclResult_t qcclCommGetStats(const qcclComm_t comm, qcclStats_t* stats) {
  return guarded(comm, "qcclCommGetStats", [&] {
    requireComm(comm);
    if (stats == nullptr) invalid("stats is NULL");
    qccl::CommStats s = comm->core->stats();
    stats->bytesSent = s.bytesSent;
    stats->bytesSentInterHost = s.bytesSentInterHost;
    stats->messagesSent = s.messagesSent;
    stats->bytesReceived = s.bytesReceived;
    stats->calls = s.calls;
    stats->residualBytes = s.residualBytes;
    stats->stagingBytes = s.stagingBytes;
    stats->peakStagingBytes = s.peakStagingBytes;
    stats->tensors = s.tensors;
    stats->evictions = s.evictions;
    stats->peakResidualBytes = s.peakResidualBytes;
    stats->encodeSeconds = s.encodeSeconds;
    stats->decodeSeconds = s.decodeSeconds;
    stats->waitSeconds = s.waitSeconds;
    stats->idleSeconds = s.idleSeconds;
  });
}

qcclResult_t qcclCommGetLastAlgo(const qcclComm_t comm, int* algo, int* native) {
  return guarded(comm, "qcclCommGetLastAlgo", [&] {
    requireComm(comm);
    int path = 0;
    const qccl::Algo a = comm->core->lastAlgo(&path);
    if (algo != nullptr) *algo = static_cast<int>(a);
    if (native != nullptr) *native = path;
  });
}

qcclResult_t qcclTensorRelease(qcclComm_t comm, uint64_t id) {
  return lockedCall(comm, "qcclTensorRelease", [&] { comm->core->releaseTensor(id); });
}

qcclResult_t qcclTensorStateSave(qcclComm_t comm, uint64_t id, void* buf, size_t* bytes) {
  return lockedCall(comm, "qcclTensorStateSave", [&] {
    if (bytes == nullptr) invalid("bytes is NULL");
    std::vector<uint8_t> record = comm->core->saveTensorState(id);
    if (buf != nullptr) {
      if (*bytes < record.size())
        invalid("buffer of " + std::to_string(*bytes) + " bytes is smaller than the record's " +
                std::to_string(record.size()));
      if (!record.empty()) std::memcpy(buf, record.data(), record.size());
    }
    *bytes = record.size();
  });
}

qcclResult_t qcclTensorStateLoad(qcclComm_t comm, uint64_t id, const void* buf, size_t bytes, int device) {
  return lockedCall(comm, "qcclTensorStateLoad", [&] {
    if (buf == nullptr && bytes > 0) invalid("buf is NULL");
    comm->core->loadTensorState(id, buf, bytes, device != 0);
  });
}

qcclResult_t qcclTensorStateScale(qcclComm_t comm, uint64_t id, float factor, int* found) {
  return lockedCall(comm, "qcclTensorStateScale", [&] {
    bool had = comm->core->scaleTensorState(id, factor);
    if (found != nullptr) *found = had ? 1 : 0;
  });
}

qcclResult_t qcclTensorSetFeedbackGain(qcclComm_t comm, uint64_t id, float gain) {
  return lockedCall(comm, "qcclTensorSetFeedbackGain", [&] {
    if (!(gain > 0.0f && gain <= 1.0f)) invalid("gain must be in (0, 1]");
    comm->core->setFeedbackGain(id, gain);
  });
}

qcclResult_t qcclAllreduce(const void* sendbuff, void* recvbuff, size_t count, qcclDataType_t datatype, qcclRedOp_t op,
                           const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream) {
  return qccl::capi::allreduceWithGain(sendbuff, recvbuff, count, datatype, op, opts, comm, stream, std::nullopt);
}

qcclResult_t qcclAllreduceEpilogue(const float* sendbuff, float* recvbuff, size_t count, qcclRedOp_t op,
                                   const qcclTensorOpts_t* opts, qcclEpilogueFn_t fn, void* user, qcclComm_t comm) {
  return lockedCall(comm, "qcclAllreduceEpilogue", [&] {
    checkCount(count, "count");
    qccl::RedOp rop = opFromC(op);
    if (count > 0 && sendbuff == nullptr) invalid("sendbuff is NULL with count > 0");
    if (count > 0 && recvbuff == nullptr) invalid("recvbuff is NULL with count > 0");
    if (fn == nullptr) invalid("fn is NULL");
    qccl::TensorOpts t = tensorOptsFromC(opts);
    comm->core->allreduce(sendbuff, recvbuff, count, rop, t, fn, user);
  });
}

qcclResult_t qcclAllreduceFused(float* sendbuff, float* recvbuff, size_t count, qcclRedOp_t op,
                                const qcclTensorOpts_t* opts, qcclEpilogueFn_t prologue, qcclEpilogueFn_t epilogue,
                                void* user, qcclComm_t comm) {
  return lockedCall(comm, "qcclAllreduceFused", [&] {
    checkCount(count, "count");
    qccl::RedOp rop = opFromC(op);
    if (count > 0 && sendbuff == nullptr) invalid("sendbuff is NULL with count > 0");
    if (count > 0 && recvbuff == nullptr) invalid("recvbuff is NULL with count > 0");
    if (prologue == nullptr && epilogue == nullptr) invalid("prologue and epilogue are both NULL");
    qccl::TensorOpts t = tensorOptsFromC(opts);
    comm->core->allreduce(sendbuff, recvbuff, count, rop, t, prologue, epilogue, user);
  });
}

qcclResult_t qcclAllgather(const void* sendbuff, void* recvbuff, size_t sendcount, qcclDataType_t datatype,
                           const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream) {
  return lockedCall(comm, "qcclAllgather", [&] {
    checkCount(sendcount, "sendcount");
    qccl::DataType dt = dtypeFromC(datatype);
    size_t n = static_cast<size_t>(comm->core->size());
    if (sendcount > kMaxCount / n) invalid("sendcount * nranks overflows");
    if (sendcount > 0 && sendbuff == nullptr) invalid("sendbuff is NULL with sendcount > 0");
    if (sendcount > 0 && recvbuff == nullptr) invalid("recvbuff is NULL with sendcount > 0");
    // An in-place allgather must place sendbuff at this rank's slot, as NCCL requires.
    if (sendcount > 0) {
      auto* s = static_cast<const char*>(sendbuff);
      auto* r = static_cast<const char*>(recvbuff);
      size_t bytes = sendcount * qccl::elementBytes(dt);
      if (s < r + bytes * n && r < s + bytes && s != r + bytes * static_cast<size_t>(comm->core->rank()))
        invalid("sendbuff overlaps recvbuff but is not recvbuff + rank * sendcount");
    }
    qccl::TensorOpts t = tensorOptsFromC(opts);
    comm->core->allgather(sendbuff, recvbuff, sendcount, dt, t, stream);
  });
}

qcclResult_t qcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, qcclDataType_t datatype,
                               qcclRedOp_t op, const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream) {
  return lockedCall(comm, "qcclReduceScatter", [&] {
    checkCount(recvcount, "recvcount");
    qccl::DataType dt = dtypeFromC(datatype);
    qccl::RedOp rop = opFromC(op);
    size_t n = static_cast<size_t>(comm->core->size());
    if (recvcount > kMaxCount / n) invalid("recvcount * nranks overflows");
    if (recvcount > 0 && sendbuff == nullptr) invalid("sendbuff is NULL with recvcount > 0");
    if (recvcount > 0 && recvbuff == nullptr) invalid("recvbuff is NULL with recvcount > 0");
    // An in-place reduce-scatter must place recvbuff at this rank's shard, as NCCL requires.
    if (recvcount > 0) {
      auto* s = static_cast<const char*>(sendbuff);
      auto* r = static_cast<const char*>(recvbuff);
      size_t bytes = recvcount * qccl::elementBytes(dt);
      if (r < s + bytes * n && s < r + bytes && r != s + bytes * static_cast<size_t>(comm->core->rank()))
        invalid("recvbuff overlaps sendbuff but is not sendbuff + rank * recvcount");
    }
    qccl::TensorOpts t = tensorOptsFromC(opts);
    comm->core->reduceScatter(sendbuff, recvbuff, recvcount, dt, rop, t, stream);
  });
}

}  // extern "C"

namespace qccl {
namespace capi {

int resolvedCodec(qcclComm_t comm, int codec) {
  if (comm == nullptr || !comm->core) return -1;
  return codec == qcclCodecDefault ? static_cast<int>(comm->core->options().codec.codec) : codec;
}

int resolvedAlgo(qcclComm_t comm, int algo) {
  if (comm == nullptr || !comm->core) return -1;
  return algo < 0 ? static_cast<int>(comm->core->options().algo) : algo;
}

qcclResult_t allreduceWithGain(const void* sendbuff, void* recvbuff, size_t count, qcclDataType_t datatype,
                               qcclRedOp_t op, const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream,
                               std::optional<float> gain) {
  return lockedCall(comm, "qcclAllreduce", [&] {
    checkCount(count, "count");
    qccl::DataType dt = dtypeFromC(datatype);
    qccl::RedOp rop = opFromC(op);
    if (count > 0 && sendbuff == nullptr) invalid("sendbuff is NULL with count > 0");
    if (count > 0 && recvbuff == nullptr) invalid("recvbuff is NULL with count > 0");
    qccl::TensorOpts t = tensorOptsFromC(opts);
    t.feedbackGain = gain;
    comm->core->allreduce(sendbuff, recvbuff, count, dt, rop, t, stream);
  });
}

}  // namespace capi
}  // namespace qccl
