/* Counters of libqccl_mpi.so, the MPI_Allreduce interposer (see README.md, "Drop-in MPI_Allreduce").
 *
 * A program never needs this header to be compressed: loading libqccl_mpi.so (LD_PRELOAD, or linking
 * it before libmpi) is all it takes. The header is for programs and tests that want to see what the
 * interposer did, e.g. through dlsym(RTLD_DEFAULT, "qcclMpiInterposeGetStats") so that they still
 * run without it. The counters count from the first MPI_Allreduce on, in this process, when
 * QCCL_CODEC names a lossy codec or QCCL_INTERPOSE_REPORT=1; otherwise they stay 0. */
#ifndef QCCL_QCCL_MPI_INTERPOSE_H_
#define QCCL_QCCL_MPI_INTERPOSE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint64_t calls;            /**< MPI_Allreduce calls that reached the interposer (C and Fortran) */
  uint64_t compressed;       /**< calls that qccl carried */
  uint64_t keyed;            /**< compressed calls with error feedback (a position in the learned cycle) */
  uint64_t cycleBreaks;      /**< calls that did not fit the learned cycle: error-feedback state dropped */
  uint64_t keyDisagreements; /**< compressed calls whose ranks held different keys (their buffers
                                  moved differently): run without error feedback, state dropped */
  uint64_t passedType;       /**< passed to PMPI_Allreduce: a basic element of the datatype is not a float */
  uint64_t passedOp;         /**< ... the operation is not MPI_SUM */
  uint64_t passedSize;       /**< ... count is 0 or the floats are below QCCL_MIN_COMPRESS */
  uint64_t passedComm;       /**< ... an intercommunicator or a single rank */
  uint64_t passedWarmup;     /**< ... among the first QCCL_WARMUP compressible calls of the communicator */
  uint64_t passedOff;        /**< ... compression is off: no lossy QCCL_CODEC, settings that differ across
                                  ranks, a failed qccl communicator set-up, or after MPI_Finalize began */
  uint64_t reentered;        /**< calls made while this thread was inside the interposer: passed through */
  uint64_t errors;           /**< compressed calls that failed (the communicator's error handler was called) */
  uint64_t inputBytes;       /**< float bytes of the compressed calls */
  uint64_t wireBytes;        /**< bytes qccl sent from this rank for them */
  uint64_t ringBytes;        /**< bytes an uncompressed ring allreduce sends from a rank for them: 2(n-1)/n x input */
  uint64_t commsCreated;     /**< qccl communicators created (one per user communicator that compressed) */
  uint64_t commsFreed;       /**< ... and freed (MPI_Comm_free, or at MPI_Finalize) */
  uint64_t exactOnHost;      /**< carried calls that qccl summed exactly in its shared-memory segment
                                  (every rank on one host, QCCL_LOCAL_COMPRESS=0: compression does not
                                  pay there); counted in `compressed`, not in the byte counts */
} qcclMpiInterposeStats_t;

/** Copies the counters of this process into *stats. structSize = sizeof(qcclMpiInterposeStats_t).
 *  Returns 0, or -1 when stats is NULL or structSize does not match. */
int qcclMpiInterposeGetStats(qcclMpiInterposeStats_t* stats, size_t structSize);

#ifdef __cplusplus
}
#endif

#endif /* QCCL_QCCL_MPI_INTERPOSE_H_ */
