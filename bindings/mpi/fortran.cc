// Fortran callers of MPI_Allreduce.
//
// Open MPI's Fortran bindings never call the C MPI_Allreduce: `mpif.h` and `use mpi` call
// mpi_allreduce_ (libmpi_mpifh), `use mpi_f08` calls mpi_allreduce_f08_ (libmpi_usempif08), and
// both convert the handles and call PMPI_Allreduce directly (`nm -D` shows PMPI_Allreduce as their
// only Allreduce import). A C-only interposer would therefore miss every Fortran trainer. These are
// the Fortran entry points themselves: they convert the arguments exactly as Open MPI's
// ompi_allreduce_f does and call the interposer, which passes what it does not compress to
// PMPI_Allreduce, the function the binding would have called.
#include <dlfcn.h>
#include <mpi.h>

#include "interposer.hpp"

namespace qcclmpi {
namespace {

// Fortran's MPI_IN_PLACE and MPI_BOTTOM are addresses of common blocks whose symbol name depends
// on the compiler's mangling; Open MPI accepts all four spellings, and so does this.
struct Sentinels {
  const void* inPlace[4];
  const void* bottom[4];
};

const Sentinels& sentinels() {
  static const Sentinels s = [] {
    Sentinels r{};
    const char* const inPlace[4] = {"MPI_FORTRAN_IN_PLACE", "mpi_fortran_in_place", "mpi_fortran_in_place_",
                                    "mpi_fortran_in_place__"};
    const char* const bottom[4] = {"MPI_FORTRAN_BOTTOM", "mpi_fortran_bottom", "mpi_fortran_bottom_",
                                   "mpi_fortran_bottom__"};
    for (int i = 0; i < 4; ++i) {
      r.inPlace[i] = dlsym(RTLD_DEFAULT, inPlace[i]);
      r.bottom[i] = dlsym(RTLD_DEFAULT, bottom[i]);
    }
    return r;
  }();
  return s;
}

bool isOneOf(const void* p, const void* const (&set)[4]) {
  for (const void* s : set)
    if (s != nullptr && p == s) return true;
  return false;
}

void fortranAllreduce(void* send, void* recv, const MPI_Fint* count, const MPI_Fint* datatype, const MPI_Fint* op,
                      const MPI_Fint* comm, MPI_Fint* ierr) {
  const Sentinels& s = sentinels();
  const void* sendbuf = send;
  if (isOneOf(send, s.inPlace)) sendbuf = MPI_IN_PLACE;
  if (isOneOf(send, s.bottom)) sendbuf = MPI_BOTTOM;
  void* recvbuf = isOneOf(recv, s.bottom) ? MPI_BOTTOM : recv;
  int rc = allreduce(sendbuf, recvbuf, static_cast<int>(*count), PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                     PMPI_Comm_f2c(*comm));
  if (ierr != nullptr) *ierr = static_cast<MPI_Fint>(rc);  // `use mpi_f08` passes NULL when ierror is absent
}

}  // namespace
}  // namespace qcclmpi

#define QCCL_FORTRAN_ALLREDUCE(name)                                                                            \
  extern "C" __attribute__((visibility("default"))) void name(void* sendbuf, void* recvbuf, MPI_Fint* count,    \
                                                              MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm, \
                                                              MPI_Fint* ierr) {                                 \
    qcclmpi::fortranAllreduce(sendbuf, recvbuf, count, datatype, op, comm, ierr);                               \
  }

// gfortran's mangling first; the others are what other compilers and Open MPI itself also export.
QCCL_FORTRAN_ALLREDUCE(mpi_allreduce_)
QCCL_FORTRAN_ALLREDUCE(mpi_allreduce__)
QCCL_FORTRAN_ALLREDUCE(mpi_allreduce)
QCCL_FORTRAN_ALLREDUCE(MPI_ALLREDUCE)
// `use mpi_f08`: TYPE(MPI_Comm) etc. hold one INTEGER and are passed by reference like one.
QCCL_FORTRAN_ALLREDUCE(mpi_allreduce_f08_)
