/* qcclCommInitMpi taking an MPI_Comm. Kept apart from qccl.h so that qccl.h needs no mpi.h. */
#ifndef QCCL_QCCL_MPI_H_
#define QCCL_QCCL_MPI_H_

#include <mpi.h>

#include "qccl/qccl.h"

/** Communicator over a duplicate of `mpiComm` (collective over it). */
static inline qcclResult_t qcclCommInitMpi(qcclComm_t* comm, MPI_Comm mpiComm, const qcclConfig_t* config) {
  return qcclCommInitMpiFortran(comm, (int64_t)MPI_Comm_c2f(mpiComm), config);
}

#endif /* QCCL_QCCL_MPI_H_ */
