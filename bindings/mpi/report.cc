#include "report.hpp"

#include <mpi.h>

#include <cstdio>

#include "qccl_mpi_interpose.h"

namespace qcclmpi {

Counters& counters() {
  static Counters* c = new Counters;  // never destroyed: MPI may still call in while the process exits
  return *c;
}

namespace {

void snapshot(qcclMpiInterposeStats_t* s) {
  const Counters& c = counters();
  s->calls = c.calls.load();
  s->compressed = c.compressed.load();
  s->keyed = c.keyed.load();
  s->cycleBreaks = c.cycleBreaks.load();
  s->keyDisagreements = c.keyDisagreements.load();
  s->passedType = c.passedType.load();
  s->passedOp = c.passedOp.load();
  s->passedSize = c.passedSize.load();
  s->passedComm = c.passedComm.load();
  s->passedWarmup = c.passedWarmup.load();
  s->passedOff = c.passedOff.load();
  s->reentered = c.reentered.load();
  s->errors = c.errors.load();
  s->inputBytes = c.inputBytes.load();
  s->wireBytes = c.wireBytes.load();
  s->ringBytes = c.ringBytes.load();
  s->exactOnHost = c.exactOnHost.load();
  s->commsCreated = c.commsCreated.load();
  s->commsFreed = c.commsFreed.load();
}

double mb(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

}  // namespace

void printReport() {
  qcclMpiInterposeStats_t s;
  snapshot(&s);
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  const uint64_t passed = s.passedType + s.passedOp + s.passedSize + s.passedComm + s.passedWarmup + s.passedOff;
  const uint64_t saved = s.ringBytes > s.wireBytes ? s.ringBytes - s.wireBytes : 0;
  // One fprintf: lines of different ranks interleave, never their parts.
  std::fprintf(stderr,
               "qccl-mpi: rank %d/%d: MPI_Allreduce calls %llu: compressed %llu (error feedback %llu, cycle breaks "
               "%llu, keys that differed across ranks %llu, errors %llu, summed exactly on one host %llu), passed "
               "through %llu (datatype %llu, op %llu, "
               "size %llu, communicator %llu, "
               "warm-up %llu, off %llu), re-entered %llu; %.2f MB of floats compressed, %.2f MB sent instead of "
               "%.2f MB (%.2f MB saved); qccl communicators created %llu, freed %llu\n",
               rank, size, (unsigned long long)s.calls, (unsigned long long)s.compressed, (unsigned long long)s.keyed,
               (unsigned long long)s.cycleBreaks, (unsigned long long)s.keyDisagreements, (unsigned long long)s.errors,
               (unsigned long long)s.exactOnHost, (unsigned long long)passed, (unsigned long long)s.passedType,
               (unsigned long long)s.passedOp, (unsigned long long)s.passedSize, (unsigned long long)s.passedComm,
               (unsigned long long)s.passedWarmup, (unsigned long long)s.passedOff, (unsigned long long)s.reentered,
               mb(s.inputBytes), mb(s.wireBytes), mb(s.ringBytes), mb(saved), (unsigned long long)s.commsCreated,
               (unsigned long long)s.commsFreed);
  std::fflush(stderr);
}

}  // namespace qcclmpi

extern "C" __attribute__((visibility("default"))) int qcclMpiInterposeGetStats(qcclMpiInterposeStats_t* stats,
                                                                               size_t structSize) {
  if (stats == nullptr || structSize != sizeof(qcclMpiInterposeStats_t)) return -1;
  qcclmpi::snapshot(stats);
  return 0;
}
