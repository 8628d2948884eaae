// qcclMomentum_t (qccl/qccl_momentum.h) under mpirun:
//  - codec none: the returned direction steps the parameters exactly as SGD with momentum (plain,
//    nesterov, dampening, weight decay) on the averaged gradient does, computed here on every rank
//    from every rank's gradient (the gradients are a known function of rank, step and parameters);
//  - onebit: a noisy quadratic per rank converges to the average minimizer, replicas bit-identical;
//  - bad arguments are refused.
// Exit status 0 when every check passed on every rank.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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

constexpr size_t kCount = 5000;

// Rank r's gradient: pulls the parameters towards a rank-specific target, plus a step-dependent wobble.
float gradient(int rank, int step, size_t i, float p) {
  float target = std::sin(0.001f * static_cast<float>(i) * static_cast<float>(rank + 1)) + 0.1f * rank;
  return (p - target) + 0.3f * std::cos(0.37f * static_cast<float>(step) + 0.01f * static_cast<float>(i) + rank);
}

uint64_t fnv1a(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool sameOnAllRanks(const std::vector<float>& v) {
  uint64_t h = fnv1a(v), lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

// torch.optim.SGD on the exactly averaged gradient (in double), for comparison.
void referenceStep(const qcclMomentumConfig_t& c, int step, std::vector<double>& p, std::vector<double>& buf,
                   double lr) {
  for (size_t i = 0; i < p.size(); i++) {
    double g = 0;
    for (int r = 0; r < gSize; r++) g += gradient(r, step, i, static_cast<float>(p[i]));
    double d = g / gSize + c.weightDecay * p[i];
    buf[i] = step == 0 ? d : c.momentum * buf[i] + (1.0 - c.dampening) * d;
    p[i] -= lr * (c.nesterov ? d + c.momentum * buf[i] : buf[i]);
  }
}

void checkExact(qcclComm_t comm, const qcclMomentumConfig_t& c, const char* name) {
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, kCount, &c) == qcclSuccess, "%s", name);
  std::vector<float> p(kCount, 0.5f), g(kCount);
  std::vector<double> pr(kCount, 0.5), br(kCount, 0.0);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = 11;
  opts.codec = qcclCodecNone;
  const double lr = 0.05;
  for (int step = 0; step < 30; step++) {
    for (size_t i = 0; i < kCount; i++) g[i] = gradient(gRank, step, i, p[i]);
    qcclResult_t r = qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr);
    EXPECT(r == qcclSuccess, "%s: %s", name, qcclGetLastError(comm));
    for (size_t i = 0; i < kCount; i++) p[i] -= static_cast<float>(lr) * g[i];
    referenceStep(c, step, pr, br, lr);
  }
  double worst = 0;
  for (size_t i = 0; i < kCount; i++) worst = std::max(worst, std::fabs(p[i] - pr[i]));
  EXPECT(worst < 1e-4, "%s: |param - reference| up to %g", name, worst);
  EXPECT(sameOnAllRanks(p), "%s: replicas differ", name);
  qcclMomentumDestroy(m);
}

void checkOnebitConverges(qcclComm_t comm) {
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  c.nesterov = 1;
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, kCount, &c) == qcclSuccess, "create");
  std::vector<float> p(kCount, 2.0f), g(kCount);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = 12;
  opts.codec = qcclCodecOneBit;
  opts.algo = qcclAlgoSra;
  auto distance = [&]() {  // to the minimizer of the averaged, wobble-free objective
    double s = 0;
    for (size_t i = 0; i < kCount; i++) {
      double t = 0;
      for (int r = 0; r < gSize; r++) t += std::sin(0.001 * static_cast<double>(i) * (r + 1)) + 0.1 * r;
      s += (p[i] - t / gSize) * (p[i] - t / gSize);
    }
    return std::sqrt(s);
  };
  const double before = distance();
  for (int step = 0; step < 150; step++) {
    for (size_t i = 0; i < kCount; i++) g[i] = gradient(gRank, step, i, p[i]);
    qcclResult_t r = qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr);
    EXPECT(r == qcclSuccess, "onebit: %s", qcclGetLastError(comm));
    for (size_t i = 0; i < kCount; i++) p[i] -= 0.05f * g[i];
  }
  const double after = distance();
  // The wobble alone keeps |p - minimizer| near 0.3 * lr-scaled oscillation; onebit must get there too.
  EXPECT(after < 0.1 * before, "onebit: distance %g -> %g", before, after);
  EXPECT(sameOnAllRanks(p), "onebit: replicas differ");
  float *u = nullptr, *b = nullptr;
  int* started = nullptr;
  EXPECT(qcclMomentumGetState(m, &u, &b, &started) == qcclSuccess && u && b && started && *started == 1, "state");
  qcclMomentumDestroy(m);
}

void checkBadArguments(qcclComm_t comm) {
  qcclMomentum_t m = nullptr;
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  c.momentum = 1.0f;
  EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument && m == nullptr, "momentum 1");
  c = QCCL_MOMENTUM_CONFIG_INIT;
  c.nesterov = 1;
  c.dampening = 0.1f;
  EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument, "nesterov with dampening");
  EXPECT(qcclMomentumCreate(&m, 10, nullptr) == qcclSuccess, "defaults");
  std::vector<float> g(10), p(10);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;  // id 0
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), 10, qcclFloat32, &opts, comm, nullptr) == qcclInvalidArgument,
         "id 0");
  opts.id = 13;
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), 9, qcclFloat32, &opts, comm, nullptr) == qcclInvalidArgument,
         "count");
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), 10, qcclFloat16, &opts, comm, nullptr) == qcclInvalidArgument,
         "dtype");
  qcclMomentumDestroy(m);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  qcclConfig_t cfg;
  qcclConfigInit(&cfg);
  cfg.timeoutSec = 60;
  qcclComm_t comm = nullptr;
  if (qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg) != qcclSuccess) {
    std::fprintf(stderr, "[rank %d] qcclCommInitMpi failed\n", gRank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  qcclMomentumConfig_t plain = QCCL_MOMENTUM_CONFIG_INIT, nesterov = plain, damp = plain;
  nesterov.nesterov = 1;
  nesterov.weightDecay = 1e-3f;
  damp.momentum = 0.8f;
  damp.dampening = 0.3f;
  damp.weightDecay = 1e-2f;
  checkExact(comm, plain, "momentum");
  checkExact(comm, nesterov, "nesterov + weight decay");
  checkExact(comm, damp, "dampening + weight decay");
  checkOnebitConverges(comm);
  checkBadArguments(comm);
  qcclCommDestroy(comm);
  int failures = gFailures;
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0) std::printf("capi_momentum_check: %s\n", failures ? "FAILED" : "ok");
  MPI_Finalize();
  return failures ? 1 : 0;
}
