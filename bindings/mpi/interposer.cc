// libqccl_mpi.so: MPI_Allreduce through qccl, by the MPI profiling interface.
//
// The rule, in the order it is checked (every input to it is the same on every rank of a correct
// MPI program, given the same QCCL_* settings, so every rank decides alike without talking to the
// others; ensureReady checks the settings once per communicator):
//   1. QCCL_CODEC names a lossy codec (else: a pure pass-through);
//   2. op is MPI_SUM;
//   3. every basic element of the datatype's signature is a float (datatype_sig.hpp);
//   4. count > 0, on an intracommunicator of 2 or more ranks;
//   5. the floats are at least QCCL_MIN_COMPRESS bytes (and fit MPI_Pack's int for derived types);
//   6. the communicator is past its first QCCL_WARMUP such calls.
// Calls that fail any test go to PMPI_Allreduce untouched, bit-exact. Calls that pass 1-4 (float
// sums, large or small) all feed the communicator's call cycle, which keys error feedback
// (sequence_keyer.hpp): small ones by their count only, since their buffers are often temporaries,
// large ones by count and addresses.
#include "interposer.hpp"

#include <climits>
#include <cstdio>
#include <mutex>

#include "comm_context.hpp"
#include "datatype_sig.hpp"
#include "interpose_config.hpp"
#include "report.hpp"

namespace qcclmpi {
namespace {

// Residual state of calls that fit no cycle lives under this id for one call, then is dropped.
constexpr uint64_t kUnkeyedId = uint64_t{1} << 62;

// Depth of interposer frames on this thread: a call made from inside one (an error handler that the
// interposer invoked, or anything below it that calls MPI_Allreduce rather than PMPI_Allreduce) is
// passed straight through, never compressed and never blocked on a communicator's mutex.
thread_local int tDepth = 0;

struct DepthGuard {
  DepthGuard() { ++tDepth; }
  ~DepthGuard() { --tDepth; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

struct Call {
  const void* send;
  void* recv;
  int count;
  MPI_Datatype type;
  MPI_Comm comm;
  FloatLayout layout;
  size_t floats;
  int commSize;
};

int pass(std::atomic<uint64_t>& reason, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
         MPI_Comm comm) {
  reason++;
  return PMPI_Allreduce(send, recv, count, type, op, comm);
}

int passCall(std::atomic<uint64_t>& reason, const Call& c) {
  return pass(reason, c.send, c.recv, c.count, c.type, MPI_SUM, c.comm);
}

// An error class of our own, so that MPI_Error_string (and mpi4py's exception) says where it came from.
int errorCode() {
  static int code = [] {
    int cls = MPI_ERR_OTHER, c = MPI_ERR_OTHER;
    if (PMPI_Add_error_class(&cls) == MPI_SUCCESS && PMPI_Add_error_code(cls, &c) == MPI_SUCCESS) {
      PMPI_Add_error_string(c,
                            "qccl: compressed MPI_Allreduce failed (ranks disagree, a peer failed or "
                            "QCCL_TIMEOUT passed; the reason is on stderr)");
      return c;
    }
    return static_cast<int>(MPI_ERR_OTHER);
  }();
  return code;
}

// Called without any context mutex held: the error handler may call MPI again.
int fail(const Call& c, const char* what) {
  counters().errors++;
  int rank = 0;
  PMPI_Comm_rank(c.comm, &rank);
  std::fprintf(stderr, "qccl-mpi: rank %d: MPI_Allreduce of %zu floats failed: %s\n", rank, c.floats, what);
  std::fflush(stderr);
  const int code = errorCode();
  PMPI_Comm_call_errhandler(c.comm, code);
  return code;
}

// Every rank keys its calls on its own (buffer addresses are per process), and qccl fails a call
// whose ranks name different tensors. So a key is used only when every rank holds the same one:
// each compressed call first gathers every rank's key over the qccl communicator (one float each,
// uncompressed; QCCL_TIMEOUT and dead peers apply as to any qccl call). Where they differ, every
// rank runs the call unkeyed and drops its error-feedback state, as at a cycle break.
qcclResult_t agreeOnKey(CommContext& ctx, const Call& c, SequenceKeyer::Key& key) {
  constexpr size_t kExactInFloat = size_t{1} << 24;
  if (key.keyed && key.position >= kExactInFloat) key.keyed = false;
  const float mine = key.keyed ? static_cast<float>(key.position) : -1.0f;
  ctx.keys.resize(static_cast<size_t>(c.commSize));
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.codec = qcclCodecNone;
  const qcclResult_t rc = qcclAllgather(&mine, ctx.keys.data(), 1, qcclFloat32, &opts, ctx.qccl, nullptr);
  if (rc != qcclSuccess) return rc;
  for (float k : ctx.keys)
    if (k != mine) {
      counters().keyDisagreements++;
      key.keyed = false;
      dropErrorFeedback(ctx);
      break;
    }
  return qcclSuccess;
}

// Runs the call through qccl; with ctx.mu held by `lock`, which it releases.
int compress(CommContext& ctx, std::unique_lock<std::mutex>& lock, const Call& c, SequenceKeyer::Key key) {
  if (const qcclResult_t rc = agreeOnKey(ctx, c, key); rc != qcclSuccess) {
    ctx.failed = true;
    char msg[512];
    std::snprintf(msg, sizeof(msg), "exchanging the error-feedback key: %s: %s", qcclGetErrorString(rc),
                  qcclGetLastError(ctx.qccl));
    lock.unlock();
    return fail(c, msg);
  }
  const bool inPlace = c.send == MPI_IN_PLACE;
  const void* in = inPlace ? c.recv : c.send;
  float* work = static_cast<float*>(c.recv);
  // Derived datatypes only, whose size the caller has checked against INT_MAX.
  const int bytes = c.layout.contiguous ? 0 : static_cast<int>(c.floats * sizeof(float));
  if (!c.layout.contiguous) {
    ctx.pack.resize(c.floats);
    int pos = 0;
    if (PMPI_Pack(in, c.count, c.type, ctx.pack.data(), bytes, &pos, c.comm) != MPI_SUCCESS || pos != bytes) {
      lock.unlock();
      return fail(c, "MPI_Pack of the derived datatype did not give the floats of its signature");
    }
    work = ctx.pack.data();
    in = work;
  }
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = key.keyed ? key.position + 1 : kUnkeyedId;
  if (key.keyed && key.position + 1 > ctx.keyedPositions) ctx.keyedPositions = key.position + 1;
  qcclStats_t before{}, after{};
  qcclCommGetStats(ctx.qccl, &before);
  const qcclResult_t rc = qcclAllreduce(in, work, c.floats, qcclFloat32, qcclSum, &opts, ctx.qccl, nullptr);
  qcclCommGetStats(ctx.qccl, &after);
  if (!key.keyed) qcclTensorRelease(ctx.qccl, kUnkeyedId);
  int algo = 0, path = 0;
  qcclCommGetLastAlgo(ctx.qccl, &algo, &path);
  Counters& k = counters();
  k.compressed++;
  if (key.keyed) k.keyed++;
  if (rc == qcclSuccess && path == 2) {
    k.exactOnHost++;  // summed exactly in shared memory: nothing was compressed, no bytes saved
  } else {
    k.inputBytes += c.floats * sizeof(float);
    k.wireBytes += after.bytesSent - before.bytesSent;
    k.ringBytes += 2 * static_cast<uint64_t>(c.commSize - 1) * c.floats * sizeof(float) / c.commSize;
  }
  if (rc != qcclSuccess) {
    ctx.failed = true;
    char msg[512];
    std::snprintf(msg, sizeof(msg), "%s: %s", qcclGetErrorString(rc), qcclGetLastError(ctx.qccl));
    lock.unlock();
    return fail(c, msg);
  }
  if (!c.layout.contiguous) {
    int pos = 0;
    if (PMPI_Unpack(work, bytes, &pos, c.recv, c.count, c.type, c.comm) != MPI_SUCCESS) {
      lock.unlock();
      return fail(c, "MPI_Unpack into the derived datatype failed");
    }
  }
  return MPI_SUCCESS;
}

// QCCL_INTERPOSE_CHECK: before any rank commits to a route, every rank learns whether all of them
// make the same float sum (count and route). Without it, ranks of an erroneous program that
// disagree would wait in different collectives: the compressing ones fail after QCCL_TIMEOUT, the
// others stay in PMPI_Allreduce unless the error handler ends the job.
bool agree(const Call& c, bool large, char* why, size_t whySize) {
  const int64_t n = static_cast<int64_t>(c.floats), route = large ? 1 : 0;
  const int64_t mine[4] = {n, route, -n, -route};
  int64_t all[4];
  if (PMPI_Allreduce(mine, all, 4, MPI_INT64_T, MPI_MIN, c.comm) != MPI_SUCCESS) {
    std::snprintf(why, whySize, "the agreement step (QCCL_INTERPOSE_CHECK) failed in MPI");
    return false;
  }
  if (all[0] == -all[2] && all[1] == -all[3]) return true;
  std::snprintf(why, whySize,
                "ranks disagree on this float sum (QCCL_INTERPOSE_CHECK): counts from %lld to %lld floats, %s",
                static_cast<long long>(all[0]), static_cast<long long>(-all[2]),
                all[1] != -all[3] ? "some compress it and some do not" : "all route it alike");
  return false;
}

// A float sum on an intracommunicator: it joins the communicator's call cycle, then is compressed
// or passed through.
int floatSum(const Call& c, bool large) {
  char why[256];
  if (config().check && !agree(c, large, why, sizeof(why))) return fail(c, why);
  CommContext* ctx = contextFor(c.comm);
  if (ctx == nullptr) return passCall(counters().passedOff, c);
  std::unique_lock<std::mutex> lock(ctx->mu);
  CallSig sig;
  sig.count = c.floats;
  if (large) {
    sig.recv = reinterpret_cast<uintptr_t>(c.recv);
    sig.send = c.send == MPI_IN_PLACE ? 0 : reinterpret_cast<uintptr_t>(c.send);
  }
  const SequenceKeyer::Key key = ctx->keyer.next(sig);
  if (key.broke) {
    counters().cycleBreaks++;
    dropErrorFeedback(*ctx);
  }
  if (!large) {
    lock.unlock();
    return passCall(counters().passedSize, c);
  }
  if (ctx->compressible++ < static_cast<uint64_t>(config().warmupCalls)) {
    lock.unlock();
    return passCall(counters().passedWarmup, c);
  }
  if (!ensureReady(*ctx, c.comm)) {
    lock.unlock();
    return passCall(counters().passedOff, c);
  }
  return compress(*ctx, lock, c, key);
}

// Counting and the report when the interposer does not compress; the one complaint about a bad
// setting, once per process.
void noteInactiveCall() {
  static std::once_flag once;
  std::call_once(once, [] {
    const InterposeConfig& cfg = config();
    if (!cfg.error.empty())
      std::fprintf(stderr, "qccl-mpi: %s; MPI_Allreduce calls are passed through uncompressed\n", cfg.error.c_str());
    if (cfg.report) ensureFinalizeHook();
  });
  counters().calls++;
  counters().passedOff++;
}

}  // namespace

int allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  const InterposeConfig& cfg = config();
  if (!cfg.active) {
    if (cfg.report || !cfg.error.empty()) noteInactiveCall();
    return PMPI_Allreduce(send, recv, count, type, op, comm);
  }
  Counters& k = counters();
  k.calls++;
  if (tDepth > 0) return pass(k.reentered, send, recv, count, type, op, comm);
  DepthGuard guard;
  if (op != MPI_SUM) return pass(k.passedOp, send, recv, count, type, op, comm);
  Call c{send, recv, count, type, comm, floatLayout(type), 0, 0};
  if (c.layout.floatsPerElement == 0) return pass(k.passedType, send, recv, count, type, op, comm);
  int inter = 1;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
      PMPI_Comm_size(comm, &c.commSize) != MPI_SUCCESS || c.commSize < 2)
    return pass(k.passedComm, send, recv, count, type, op, comm);
  if (count <= 0) return pass(k.passedSize, send, recv, count, type, op, comm);
  c.floats = static_cast<size_t>(count) * c.layout.floatsPerElement;
  const size_t bytes = c.floats * sizeof(float);
  // A derived datatype is packed, and MPI_Pack counts bytes in an int; the limit depends only on
  // the signature, so every rank agrees on it too.
  const bool fits = c.layout.contiguous || bytes <= static_cast<size_t>(INT_MAX);
  return floatSum(c, fits && bytes >= cfg.minCompressBytes);
}

}  // namespace qcclmpi

extern "C" __attribute__((visibility("default"))) int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return qcclmpi::allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}
