/* A minimal PMPI tool of the usual kind (a profiler, a tracer): it defines MPI_Allreduce and
 * MPI_Bcast, counts the calls, forwards them to PMPI_*, and prints the counts when the process
 * exits. Preloaded next to libqccl_mpi.so, it shows which order of the two lets each see what
 * (README.md, "Other PMPI tools"); preloaded alone into a Fortran program, it shows that Open
 * MPI's Fortran bindings never call the C MPI_Allreduce or MPI_Bcast. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static long long allreduceCalls = 0;
static long long bcastCalls = 0;

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  ++allreduceCalls;
  return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  ++bcastCalls;
  return PMPI_Bcast(buffer, count, datatype, root, comm);
}

/* At exit rather than in MPI_Finalize, which a Fortran program does not call through C either. */
__attribute__((destructor)) static void report(void) {
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  fprintf(stderr, "other-tool: rank %s: MPI_Allreduce calls %lld, MPI_Bcast calls %lld\n", rank ? rank : "?",
          allreduceCalls, bcastCalls);
}
