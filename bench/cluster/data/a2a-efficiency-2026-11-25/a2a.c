// An Isend/Irecv all-to-all of M bytes per peer, ROUNDS times after a warm-up round; rank 0 prints
// the slowest rank's round and its share of M x (n - 1) at RATE bit/s. Usage: a2a M ROUNDS RATE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t msg = strtoul(argv[1], 0, 0);
  int rounds = atoi(argv[2]);
  double rate = atof(argv[3]);
  char* sb = malloc(msg * n);
  char* rb = malloc(msg * n);
  MPI_Request q[64];
  for (int it = -1; it < rounds; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int m = 0;
    for (int i = 1; i < n; ++i) {
      int p = (r + i) % n, s = (r - i + n) % n;
      MPI_Irecv(rb + msg * s, msg, MPI_BYTE, s, 0, MPI_COMM_WORLD, &q[m++]);
      MPI_Isend(sb + msg * p, msg, MPI_BYTE, p, 0, MPI_COMM_WORLD, &q[m++]);
    }
    MPI_Waitall(m, q, MPI_STATUSES_IGNORE);
    double t = MPI_Wtime() - t0, tmax;
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (r == 0 && it >= 0) printf("msg %zu round %.3f s eff %.2f\n", msg, tmax, msg * (n - 1) * 8.0 / rate / tmax);
  }
  MPI_Finalize();
}
