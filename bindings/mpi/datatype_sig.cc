#include "datatype_sig.hpp"

#include <vector>

namespace qcclmpi {
namespace {

bool isFloatNamed(MPI_Datatype t) {
  if (t == MPI_FLOAT) return true;
  if (t != MPI_REAL && t != MPI_REAL4) return false;
  int size = 0;
  return PMPI_Type_size(t, &size) == MPI_SUCCESS && size == 4;  // REAL is 4 bytes with gfortran
}

// Whether every basic element of `t` is a float. Types built on F90 parameterized types or
// anything else with no datatype arguments are refused rather than interpreted.
bool allFloats(MPI_Datatype t, int depth) {
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return false;
  if (combiner == MPI_COMBINER_NAMED) return isFloatNamed(t);
  if (nd <= 0 || depth > 64) return false;
  std::vector<int> ints(static_cast<size_t>(ni) + 1);
  std::vector<MPI_Aint> aints(static_cast<size_t>(na) + 1);
  std::vector<MPI_Datatype> types(static_cast<size_t>(nd));
  if (PMPI_Type_get_contents(t, ni, na, nd, ints.data(), aints.data(), types.data()) != MPI_SUCCESS) return false;
  bool ok = true;
  for (MPI_Datatype& sub : types) {
    ok = ok && allFloats(sub, depth + 1);
    // get_contents hands out new handles for derived types; the caller frees them.
    int subNi = 0, subNa = 0, subNd = 0, subCombiner = 0;
    PMPI_Type_get_envelope(sub, &subNi, &subNa, &subNd, &subCombiner);
    if (subCombiner != MPI_COMBINER_NAMED) PMPI_Type_free(&sub);
  }
  return ok;
}

}  // namespace

FloatLayout floatLayout(MPI_Datatype type) {
  FloatLayout l;
  if (type == MPI_FLOAT) {  // the common case, without a single MPI call
    l.floatsPerElement = 1;
    l.contiguous = true;
    return l;
  }
  if (type == MPI_DATATYPE_NULL || !allFloats(type, 0)) return l;
  int size = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0 || size % 4 != 0) return l;
  l.floatsPerElement = static_cast<size_t>(size) / 4;
  l.contiguous = isFloatNamed(type);
  return l;
}

}  // namespace qcclmpi
