// Process-wide counters of the interposer and the QCCL_INTERPOSE_REPORT line printed from them.
#pragma once

#include <atomic>
#include <cstdint>

namespace qcclmpi {

struct Counters {
  std::atomic<uint64_t> calls{0}, compressed{0}, keyed{0}, cycleBreaks{0}, keyDisagreements{0};
  std::atomic<uint64_t> passedType{0}, passedOp{0}, passedSize{0}, passedComm{0}, passedWarmup{0}, passedOff{0};
  std::atomic<uint64_t> reentered{0}, errors{0};
  std::atomic<uint64_t> inputBytes{0}, wireBytes{0}, ringBytes{0};
  std::atomic<uint64_t> commsCreated{0}, commsFreed{0}, exactOnHost{0};
};

Counters& counters();

/// One line on stderr for this rank; MPI must still be usable (called from the finalize hook).
void printReport();

}  // namespace qcclmpi
