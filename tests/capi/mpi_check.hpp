// Shared pieces of the C API checks that run under mpirun (capi_mpi_check, capi_momentum_check,
// capi_device_check): EXPECT and the rest of ../mpi_expect.hpp, a cross-rank byte comparison, and the
// communicator over MPI_COMM_WORLD or over UCX from a unique id broadcast with MPI.
#pragma once

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "../mpi_expect.hpp"
#include "qccl/qccl_mpi.h"

/// True when every rank holds the same bytes (min and max of the hash agree).
inline bool sameOnAllRanks(const void* data, size_t bytes) {
  uint64_t h = fnv1a(data, bytes), lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

/// A communicator of every rank: over MPI_COMM_WORLD (transport "mpi") or over UCX from a unique
/// id that rank 0 creates and broadcasts (transport "ucx"). Null, with the error printed, on failure.
inline qcclComm_t makeComm(const std::string& transport, const qcclConfig_t& cfg) {
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
