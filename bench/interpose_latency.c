/* Time per MPI_Allreduce call for small messages, the calls where anything an interposer adds would
 * show. Run it plain and with libqccl_mpi.so preloaded (bench/interpose_overhead.sh does both) to
 * measure what the interposer costs the calls it passes through.
 *   qccl-mpi-latency [-n CALLS] [-r REPEATS]
 * Prints one line per case: the median and the minimum over REPEATS of the mean time of CALLS calls,
 * each repeat started after a barrier. Every rank's time is the slowest rank's (MPI_MAX). */
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

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int calls = 20000, repeats = 7, rank = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-n") == 0) calls = atoi(argv[i + 1]);
    if (strcmp(argv[i], "-r") == 0) repeats = atoi(argv[i + 1]);
  }
  if (calls < 1 || repeats < 1 || repeats > 100) {
    fprintf(stderr, "usage: qccl-mpi-latency [-n CALLS] [-r REPEATS (1..100)]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Case cases[] = {{"float sum 1", MPI_FLOAT, MPI_SUM, 1},         {"float sum 256", MPI_FLOAT, MPI_SUM, 256},
                        {"float sum 16000", MPI_FLOAT, MPI_SUM, 16000}, {"float max 1", MPI_FLOAT, MPI_MAX, 1},
                        {"int sum 1", MPI_INT, MPI_SUM, 1},             {"double sum 1", MPI_DOUBLE, MPI_SUM, 1}};
  static double buf[16000];
  if (rank == 0) printf("# case                 median_us     min_us  (%d calls x %d repeats)\n", calls, repeats);
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const Case* k = &cases[c];
    double t[100];
    for (int i = 0; i < 1000; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, k->count, k->type, k->op, MPI_COMM_WORLD);
    for (int r = 0; r < repeats; ++r) {
      memset(buf, 0, sizeof(buf));
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < calls; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, k->count, k->type, k->op, MPI_COMM_WORLD);
      double sec = (MPI_Wtime() - t0) / calls;
      PMPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      t[r] = sec;
    }
    qsort(t, (size_t)repeats, sizeof(double), cmpDouble);
    if (rank == 0) printf("%-20s %10.3f %10.3f\n", k->name, 1e6 * t[repeats / 2], 1e6 * t[0]);
  }
  MPI_Finalize();
  return 0;
}
