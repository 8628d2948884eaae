// What the interposer keeps per user communicator, and its lifetime.
//
// A CommContext is attached to the user's communicator as an MPI attribute, so MPI itself says when
// the communicator goes away: the attribute's delete callback runs inside MPI_Comm_free (and
// MPI_Comm_disconnect) and frees the qccl communicator with it. Communicators still alive at
// MPI_Finalize are freed by the delete callback of an attribute on MPI_COMM_SELF, which MPI runs
// first thing in MPI_Finalize while everything still works; it also prints the report. Neither
// needs MPI_Init or MPI_Finalize to be intercepted, so the interposer leaves both to other tools.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "qccl/qccl.h"
#include "sequence_keyer.hpp"

namespace qcclmpi {

struct CommContext {
  enum class State { kNew, kReady, kOff };

  explicit CommContext(SequenceKeyer::Options keyerOptions) : keyer(keyerOptions) {}

  /// Serializes the calls on this communicator (MPI_THREAD_MULTIPLE); calls on different
  /// communicators run concurrently.
  std::mutex mu;
  State state = State::kNew;
  qcclComm_t qccl = nullptr;  ///< created by the first compressed call (collective over the comm)
  bool failed = false;        ///< a compressed call failed: `qccl` is aborted, not destroyed, at the end
  SequenceKeyer keyer;        ///< error-feedback keys: positions in the cycle of float sums
  size_t keyedPositions = 0;  ///< positions that may hold error-feedback state in `qccl`
  uint64_t compressible = 0;  ///< calls large enough to compress so far (QCCL_WARMUP counts these)
  std::vector<float> pack;    ///< derived datatypes are packed into this float array
  std::vector<float> keys;    ///< every rank's key of the current call (see agreeOnKey)
};

/// The context of `comm`, created on first use (a local operation). nullptr once MPI_Finalize has
/// begun. Must not be called with any context's mutex held.
CommContext* contextFor(MPI_Comm comm);

/// With c.mu held: creates the qccl communicator on the first compressed call (collective over
/// comm: every rank reaches it in the same MPI_Allreduce, since the decision to compress is the
/// same everywhere), after checking that every rank has the same settings. Returns whether calls
/// on comm are compressed; the answer is the same on every rank of comm.
bool ensureReady(CommContext& c, MPI_Comm comm);

/// With c.mu held: frees the error-feedback state of every position keyed so far.
void dropErrorFeedback(CommContext& c);

/// Registers the MPI_Finalize hook that prints the report, if it is not registered yet.
void ensureFinalizeHook();

}  // namespace qcclmpi
