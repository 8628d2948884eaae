// The C API over real processes, started by mpirun. The communicator is built either from
// MPI_COMM_WORLD (--transport mpi) or over UCX from a unique id that rank 0 creates and
// MPI_Bcast's (--transport ucx). MPI itself is only the launcher and the referee here: it
// compares hashes of the results across ranks.
//
//   capi_mpi_check --transport mpi|ucx --case basic|mismatch-count|mismatch-codec
// Exit status 0 when every check passed on every rank.
// Only the C bindings of MPI (the C++ ones warn under -Wextra).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qccl/qccl_mpi.h"

namespace {

int gRank = 0;
int gSize = 1;
int gFailures = 0;

#define EXPECT(cond, ...)                                                                            \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "[rank %d] %s:%d: check failed: %s: ", gRank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                             \
      std::fprintf(stderr, "\n");                                                                    \
      ++gFailures;                                                                                   \
    }                                                                                                \
  } while (0)

float exactInput(int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 977) * 5 - 2000 + rank); }
float smoothInput(int rank, size_t i) { return std::cos(0.0007f * static_cast<float>(i) * (rank + 1)) + 0.01f * rank; }

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// True when every rank holds the same bytes (min and max of the hash agree).
bool sameOnAllRanks(const void* data, size_t bytes) {
  uint64_t h = fnv1a(data, bytes), lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

qcclComm_t makeComm(const std::string& transport, double timeoutSec) {
  qcclConfig_t cfg;
  if (qcclConfigInit(&cfg) != qcclSuccess) return nullptr;
  cfg.timeoutSec = timeoutSec;
  qcclComm_t comm = nullptr;
  qcclResult_t r;
  if (transport == "ucx") {
    qcclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (gRank == 0 && qcclGetUniqueId(&id) != qcclSuccess)
      std::fprintf(stderr, "qcclGetUniqueId: %s\n", qcclGetLastError(nullptr));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    r = qcclCommInitRank(&comm, gSize, id, gRank, &cfg);
  } else {
    r = qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg);
  }
  if (r != qcclSuccess) std::fprintf(stderr, "[rank %d] init: %s\n", gRank, qcclGetLastError(nullptr));
  return comm;
}

void checkExactAllreduce(qcclComm_t comm, size_t count, int algo) {
  std::vector<float> send(count), recv(count, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = exactInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = qcclCodecNone;
  t.algo = algo;
  qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "allreduce algo %d count %zu: %s", algo, count, qcclGetLastError(comm));
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int k = 0; k < gSize; ++k) sum += exactInput(k, i);
    if (recv[i] != static_cast<float>(sum)) ++wrong;
  }
  EXPECT(wrong == 0, "allreduce algo %d count %zu: %zu wrong elements", algo, count, wrong);
  // Average, in place.
  t.id = 1;
  r = qcclAllreduce(send.data(), send.data(), count, qcclFloat32, qcclAvg, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "avg: %s", qcclGetLastError(comm));
  for (size_t i = 0; i < count && r == qcclSuccess; ++i) {
    double avg = recv[i] / static_cast<double>(gSize);
    if (std::fabs(send[i] - avg) > 1e-6 * std::fabs(avg) + 1e-6) {
      EXPECT(false, "avg algo %d element %zu: %g, expected %g", algo, i, send[i], avg);
      break;
    }
  }
}

void checkLossy(qcclComm_t comm, int codec, size_t count) {
  std::vector<float> send(count), recv(count);
  for (size_t i = 0; i < count; ++i) send[i] = smoothInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 100 + codec;
  t.codec = codec;
  for (int step = 0; step < 3; ++step) {
    qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
    EXPECT(r == qcclSuccess, "codec %d: %s", codec, qcclGetLastError(comm));
    EXPECT(sameOnAllRanks(recv.data(), count * sizeof(float)), "codec %d step %d: results differ across ranks", codec,
           step);
  }
  bool finite = true;
  for (float v : recv) finite = finite && std::isfinite(v);
  EXPECT(finite, "codec %d: non-finite result", codec);
}

void checkAllgather(qcclComm_t comm, size_t count) {
  std::vector<float> send(count), recv(count * gSize, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = exactInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = qcclCodecNone;
  qcclResult_t r = qcclAllgather(send.data(), recv.data(), count, qcclFloat32, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "allgather: %s", qcclGetLastError(comm));
  size_t wrong = 0;
  for (int k = 0; k < gSize; ++k)
    for (size_t i = 0; i < count; ++i) wrong += recv[k * count + i] != exactInput(k, i);
  EXPECT(wrong == 0, "allgather: %zu wrong elements", wrong);
  t.codec = qcclCodecMaxMin;
  t.id = 9;
  r = qcclAllgather(send.data(), recv.data(), count, qcclFloat32, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "allgather maxmin: %s", qcclGetLastError(comm));
  EXPECT(sameOnAllRanks(recv.data(), recv.size() * sizeof(float)), "allgather maxmin differs across ranks");
}

void caseBasic(qcclComm_t comm) {
  int n = 0, rank = -1;
  EXPECT(qcclCommCount(comm, &n) == qcclSuccess && n == gSize, "count %d", n);
  EXPECT(qcclCommUserRank(comm, &rank) == qcclSuccess && rank == gRank, "rank %d", rank);
  for (int algo : {qcclAlgoRing, qcclAlgoSra, qcclAlgoAllgather, qcclAlgoAuto})
    for (size_t count : {size_t{1}, size_t{1000}, size_t{(1 << 20) + 3}}) checkExactAllreduce(comm, count, algo);
  for (int codec : {qcclCodecFp16, qcclCodecBf16, qcclCodecOneBit, qcclCodecSignScale, qcclCodecMaxMin, qcclCodecDyn8})
    checkLossy(comm, codec, 300007);
  checkAllgather(comm, 4099);
  qcclStats_t st;
  EXPECT(qcclCommGetStats(comm, &st) == qcclSuccess && st.calls > 0 && (gSize == 1 || st.bytesSent > 0),
         "stats: calls %llu sent %llu", (unsigned long long)st.calls, (unsigned long long)st.bytesSent);
}

// Rank 0 disagrees with the others; every rank must see an error, none may hang.
void caseMismatch(qcclComm_t comm, bool countMismatch) {
  size_t count = (countMismatch && gRank == 0) ? 100000 : 100003;
  std::vector<float> buf(count, 1.0f);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = (!countMismatch && gRank == 0) ? qcclCodecOneBit : qcclCodecMaxMin;
  t.algo = qcclAlgoSra;
  qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  std::fprintf(stderr, "[rank %d] mismatch result: %s: %s\n", gRank, qcclGetErrorString(r), qcclGetLastError(comm));
  EXPECT(r != qcclSuccess, "a mismatched allreduce succeeded");
  EXPECT(std::strlen(qcclGetLastError(comm)) > 0, "no error text");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  std::string transport = "mpi", which = "basic";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--transport") == 0) transport = argv[i + 1];
    if (std::strcmp(argv[i], "--case") == 0) which = argv[i + 1];
  }
  bool mismatch = which.rfind("mismatch", 0) == 0;
  qcclComm_t comm = makeComm(transport, mismatch ? 5.0 : 60.0);
  EXPECT(comm != nullptr, "no communicator");
  if (comm != nullptr) {
    if (which == "basic") {
      caseBasic(comm);
    } else if (mismatch) {
      caseMismatch(comm, which == "mismatch-count");
    } else {
      EXPECT(false, "unknown case %s", which.c_str());
    }
    // A failed communicator may not be able to say goodbye to its peers; abort does not wait.
    if (mismatch)
      qcclCommAbort(comm);
    else
      EXPECT(qcclCommDestroy(comm) == qcclSuccess, "destroy: %s", qcclGetLastError(nullptr));
  }
  int total = 0;
  MPI_Allreduce(&gFailures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0)
    std::printf("capi_mpi_check %s/%s on %d ranks: %s\n", transport.c_str(), which.c_str(), gSize,
                total == 0 ? "PASSED" : "FAILED");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
