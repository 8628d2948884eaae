// The interposer's MPI_Allreduce, shared by the C entry point and the Fortran ones (fortran.cc).
#pragma once

#include <mpi.h>

namespace qcclmpi {

/// MPI_Allreduce's contract. Compresses through qccl what is safe to compress, passes everything
/// else to PMPI_Allreduce unchanged (see interposer.cc for the rule).
int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

}  // namespace qcclmpi
