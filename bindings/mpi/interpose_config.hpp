// Settings of libqccl_mpi.so, read once from the environment. The QCCL_* variables of the library
// (QCCL_CODEC, QCCL_MIN_COMPRESS, QCCL_WARMUP, ...) are parsed by qcclConfigInit, in the core; the
// variables that only the interposer reads are parsed here, and only here:
//
//   QCCL_INTERPOSE_REPORT  0|1  one line of counters per rank on stderr at MPI_Finalize (default 0)
//   QCCL_INTERPOSE_CHECK   0|1  every float sum first agrees across ranks on its count and route
//                               (one 4-word allreduce), so that ranks that disagree all get an error
//                               instead of waiting for each other (default 1)
//   QCCL_INTERPOSE_PERIOD  N    calls per training step, when learning the cycle cannot work
//                               (see sequence_keyer.hpp); 0 = learn it (default 0)
#pragma once

#include <cstddef>
#include <string>

#include "qccl/qccl.h"

namespace qcclmpi {

struct InterposeConfig {
  /// QCCL_CODEC names a lossy codec and every variable parsed: calls may be compressed.
  bool active = false;
  /// The communicator configuration, with what the interposer decides itself taken out of the
  /// core's hands: minCompressBytes 0 and warmupCalls 0 (see the fields below).
  qcclConfig_t qccl{};
  /// A float allreduce smaller than this many bytes is passed through (QCCL_MIN_COMPRESS).
  size_t minCompressBytes = 65536;
  /// The first this many compressible calls on each communicator are passed through (QCCL_WARMUP).
  /// Counted per communicator, not per tensor: the count must be the same on every rank, and which
  /// tensor a call carries is known only by its rank.
  int warmupCalls = 0;
  bool report = false;
  bool check = true;
  size_t pinnedPeriod = 0;
  /// Why the interposer is inactive although QCCL_CODEC is set (a bad value), or "".
  std::string error;
};

/// Parsed on the first call, then the same for the life of the process.
const InterposeConfig& config();

}  // namespace qcclmpi
