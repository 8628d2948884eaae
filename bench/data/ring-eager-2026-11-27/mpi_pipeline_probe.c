// Plain MPI, no qccl: two ranks exchange BYTES MiB in chunks of CHUNK KiB, with at most SD sends
// and RD receives outstanding (a send of chunk k is posted once the send of chunk k - SD is done, a
// receive once chunk k - RD has arrived), 12 times; prints the slowest rank's ms of the last 10.
//   mpicc -O2 -o /tmp/probe bench/data/ring-eager-2026-11-27/mpi_pipeline_probe.c
//   QCCL_CLUSTER_PREFIX=q13 QCCL_CLUSTER_NET=10.199.113 bench/cluster/up 2 1gbit
//   bench/cluster/launch -n 2 -- /tmp/probe BYTES CHUNK SD RD
// Results on 2 emulated hosts at 1 Gbit/s: notes.md.
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
// chunks with send depth SD and recv depth RD; order: loop k: (send k if allowed) then wait recv k
static void waitone(MPI_Request* r) {
  int f = 0;
  while (1) {
    MPI_Test(r, &f, MPI_STATUS_IGNORE);
    if (f) return;
    sched_yield();
  }
}
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t bytes = (size_t)atol(argv[1]) << 20, chunk = (size_t)atol(argv[2]) << 10;
  int SD = atoi(argv[3]), RD = atoi(argv[4]);
  char* s = malloc(bytes);
  char* r = malloc(bytes);
  memset(s, 1, bytes);
  memset(r, 0, bytes);
  int peer = 1 - rank, n = (bytes + chunk - 1) / chunk;
  MPI_Request* ss = calloc(n, sizeof(MPI_Request));
  MPI_Request* rr = calloc(n, sizeof(MPI_Request));
  double ts[12];
  for (int it = 0; it < 12; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < RD && k < n; ++k) MPI_Irecv(r + k * chunk, chunk, MPI_BYTE, peer, k, MPI_COMM_WORLD, &rr[k]);
    int sent = 0;
    for (int k = 0; k < n; ++k) {
      while (sent < n && sent < k + SD) {
        if (sent >= SD) waitone(&ss[sent - SD]);
        MPI_Isend(s + sent * chunk, chunk, MPI_BYTE, peer, sent, MPI_COMM_WORLD, &ss[sent]);
        ++sent;
      }
      waitone(&rr[k]);
      if (k + RD < n) MPI_Irecv(r + (k + RD) * chunk, chunk, MPI_BYTE, peer, k + RD, MPI_COMM_WORLD, &rr[k + RD]);
    }
    MPI_Waitall(n, ss, MPI_STATUSES_IGNORE);
    double t = MPI_Wtime() - t0, mx;
    MPI_Allreduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ts[it] = mx;
  }
  if (rank == 0) {
    printf("%zuMiB chunk %zuKiB SD %d RD %d:", bytes >> 20, chunk >> 10, SD, RD);
    for (int i = 2; i < 12; ++i) printf(" %.0f", ts[i] * 1e3);
    printf("\n");
  }
  MPI_Finalize();
}
