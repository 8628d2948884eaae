/* CPU cost of qcclMomentumAllreduce's error control: one rank, codec onebit (allgather), N float32
 * elements, no rotation, feedbackGain 1 against 0.5, calls of the two alternating, median wall time
 * of R calls each after 3 warm-up calls.
 *   mpicc -O2 -I include gain_cost.c -L BUILD -lqccl -Wl,-rpath,BUILD -o gain_cost
 *   mpirun -np 1 ./gain_cost [N] [R] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qccl/qccl_mpi.h"

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 25600000;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  qcclComm_t comm;
  qcclConfig_t cfg;
  qcclConfigInit(&cfg);
  cfg.localCompress = 1;
  if (qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg) != qcclSuccess) return 1;
  float* g = malloc(n * sizeof(float));
  float* p = calloc(n, sizeof(float));
  double* t[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
  const float gains[2] = {1.0f, 0.5f};
  qcclMomentum_t m[2];
  qcclTensorOpts_t o[2];
  for (int k = 0; k < 2; k++) {
    qcclMomentumConfig_t mc = QCCL_MOMENTUM_CONFIG_INIT;
    mc.rotation = 0;
    mc.feedbackGain = gains[k];
    if (qcclMomentumCreate(&m[k], n, &mc) != qcclSuccess) return 1;
    o[k] = (qcclTensorOpts_t)QCCL_TENSOR_OPTS_INIT;
    o[k].id = 1 + (uint64_t)k;
    o[k].codec = qcclCodecOneBit;
  }
  for (int r = -3; r < reps; r++) {
    for (int k = 0; k < 2; k++) { /* the two settings alternate, call by call */
      for (size_t i = 0; i < n; i++) g[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      double t0 = MPI_Wtime();
      if (qcclMomentumAllreduce(m[k], g, p, n, qcclFloat32, &o[k], comm, NULL) != qcclSuccess) return 1;
      if (r >= 0) t[k][r] = MPI_Wtime() - t0;
    }
  }
  for (int k = 0; k < 2; k++) {
    qsort(t[k], (size_t)reps, sizeof(double), cmp);
    printf("feedbackGain %g: %zu elements, median %.1f ms per call (min %.1f, max %.1f, %d calls)\n", gains[k], n,
           1e3 * t[k][reps / 2], 1e3 * t[k][0], 1e3 * t[k][reps - 1], reps);
    qcclMomentumDestroy(m[k]);
  }
  qcclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
