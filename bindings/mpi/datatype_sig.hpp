// Which datatypes the interposer may compress, decided from the type signature alone.
//
// MPI requires only the type signatures of an allreduce to match across ranks: one rank may pass
// 1000 x MPI_FLOAT and another 100 x a contiguous type of 10 floats. So the decision looks only at
// the signature: a datatype qualifies when every basic element of it is a 4-byte IEEE float
// (MPI_FLOAT, or Fortran's MPI_REAL / MPI_REAL4), and then one element of it holds
// MPI_Type_size / 4 floats, whatever its layout in memory. Both numbers are the same on every rank
// of a correct program, so every rank takes the same decision without talking to the others.
#pragma once

#include <mpi.h>

#include <cstddef>

namespace qcclmpi {

struct FloatLayout {
  size_t floatsPerElement = 0;  ///< 0: some basic element is not a float (pass the call through)
  bool contiguous = false;      ///< a named float type: the buffer is the float array itself; else
                                ///< the data is packed into a float array and unpacked afterwards
};

/// The float layout of `type`, from its envelope and contents (walked recursively).
FloatLayout floatLayout(MPI_Datatype type);

}  // namespace qcclmpi
