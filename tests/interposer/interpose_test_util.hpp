// Helpers of the interposer tests: real MPI programs, started by mpirun with libqccl_mpi.so
// preloaded. They call MPI_Allreduce as any application does and look at the interposer's counters
// through dlsym, so they build without it; their own bookkeeping (comparing results across ranks)
// calls PMPI_Allreduce, which the interposer never sees, so the counters count only the calls under
// test.
#pragma once

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <dlfcn.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../mpi_expect.hpp"
#include "qccl_mpi_interpose.h"

namespace itest {

/// The interposer's counters now; exits when the interposer is not loaded (the test would prove nothing).
inline qcclMpiInterposeStats_t stats() {
  using Fn = int (*)(qcclMpiInterposeStats_t*, size_t);
  static Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "qcclMpiInterposeGetStats"));
  qcclMpiInterposeStats_t s{};
  if (fn == nullptr || fn(&s, sizeof(s)) != 0) {
    std::fprintf(stderr, "[rank %d] libqccl_mpi.so is not loaded (LD_PRELOAD it)\n", gRank);
    PMPI_Abort(MPI_COMM_WORLD, 3);
  }
  return s;
}

/// True when every rank of comm holds the same bytes.
inline bool sameOnAllRanks(const void* data, size_t bytes, MPI_Comm comm = MPI_COMM_WORLD) {
  uint64_t h = fnv1a(data, bytes), lo = 0, hi = 0;
  PMPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
  PMPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
  return lo == hi;
}

/// A smooth gradient-like input, different on every rank.
inline float input(int rank, size_t i) {
  return std::sin(0.001f * static_cast<float>(i) * static_cast<float>(rank + 1)) + 0.1f * static_cast<float>(rank);
}

/// ||got - want|| / ||want||, in double.
inline double relErr(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// The exact sum of `input` over ranks, by the MPI library itself.
inline std::vector<float> exactSum(size_t n, MPI_Comm comm = MPI_COMM_WORLD) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<float> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = input(rank, i);
  PMPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm);
  return out;
}

inline void init(int* argc, char*** argv, int required = MPI_THREAD_SINGLE) {
  int provided = 0;
  MPI_Init_thread(argc, argv, required, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  if (provided < required) {
    std::fprintf(stderr, "[rank %d] MPI gave thread level %d, %d needed\n", gRank, provided, required);
    PMPI_Abort(MPI_COMM_WORLD, 3);
  }
}

/// Sums the failures of every rank, finalizes, and returns the exit status.
inline int finish(const char* name) {
  int total = 0;
  PMPI_Allreduce(&gFailures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0) std::printf("%s: %s (%d failed checks)\n", name, total == 0 ? "PASS" : "FAIL", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

/// Argument after `--case`, or "".
inline std::string caseArg(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--case") == 0) return argv[i + 1];
  return "";
}

}  // namespace itest
