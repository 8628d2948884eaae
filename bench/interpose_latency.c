/* Time per MPI_Allreduce call for small messages, the calls where anything an interposer adds would
 * show. Each case alternates blocks of MPI_Allreduce (through an interposer, when one is preloaded)
 * with blocks of PMPI_Allreduce (MPI itself) in the same process, so that both see the same load on
 * a shared machine; the difference is what the interposer costs. bench/interpose_overhead.sh runs it
 * plain and with libqccl_mpi.so preloaded.
 *   qccl-mpi-latency [-n CALLS] [-r REPEATS]
 * Prints, per case, the median over REPEATS blocks of CALLS calls (each block started after a
 * barrier, the slowest rank's time) for MPI_Allreduce and for PMPI_Allreduce, and their difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char* name;
  MPI_Datatype type;
  MPI_Op op;
  int count;
} Case;

typedef int (*AllreduceFn)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm);

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Mean seconds per call of one block, the slowest rank's. */
static double block(AllreduceFn fn, const Case* k, void* buf, int calls) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < calls; ++i) fn(MPI_IN_PLACE, buf, k->count, k->type, k->op, MPI_COMM_WORLD);
  double sec = (MPI_Wtime() - t0) / calls;
  PMPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return sec;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int calls = 20000, repeats = 9, rank = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-n") == 0) calls = atoi(argv[i + 1]);
    if (strcmp(argv[i], "-r") == 0) repeats = atoi(argv[i + 1]);
  }
  if (calls < 1 || repeats < 1 || repeats > 100) {
    fprintf(stderr, "usage: qccl-mpi-latency [-n CALLS] [-r REPEATS (1..100)]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Case cases[] = {{"float sum 1", MPI_FLOAT, MPI_SUM, 1},
                        {"float sum 256", MPI_FLOAT, MPI_SUM, 256},
                        {"float sum 16000", MPI_FLOAT, MPI_SUM, 16000},
                        {"float max 1", MPI_FLOAT, MPI_MAX, 1},
                        {"int sum 1", MPI_INT, MPI_SUM, 1},
                        {"double sum 1", MPI_DOUBLE, MPI_SUM, 1}};
  static double buf[16000];
  if (rank == 0)
    printf("# case               MPI_us    PMPI_us    diff_us   (median of %d blocks of %d calls)\n", repeats, calls);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const Case* k = &cases[c];
    double viaMpi[100], viaPmpi[100];
    memset(buf, 0, sizeof(buf));
    block(MPI_Allreduce, k, buf, calls / 10 + 1);  // warm-up of both paths
    block(PMPI_Allreduce, k, buf, calls / 10 + 1);
    for (int r = 0; r < repeats; ++r) {
      viaMpi[r] = block(MPI_Allreduce, k, buf, calls);
      viaPmpi[r] = block(PMPI_Allreduce, k, buf, calls);
    }
    qsort(viaMpi, (size_t)repeats, sizeof(double), cmpDouble);
    qsort(viaPmpi, (size_t)repeats, sizeof(double), cmpDouble);
    const double m = 1e6 * viaMpi[repeats / 2], p = 1e6 * viaPmpi[repeats / 2];
    if (rank == 0) printf("%-20s %8.3f %10.3f %10.3f\n", k->name, m, p, m - p);
  }
  MPI_Finalize();
  return 0;
}
