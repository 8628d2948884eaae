/* qccl: quantized collective communication library. C API in the style of NCCL.
 *
 * Every function returns a qcclResult_t; none throws or aborts the process. After a failure,
 * qcclGetLastError(comm) returns the message of the most recent error on that communicator
 * (or of this thread, for a null comm).
 *
 * Quick start over MPI:
 *   qcclComm_t comm;
 *   qcclCommInitMpi(&comm, MPI_COMM_WORLD, NULL);            // qccl/qccl_mpi.h
 *   qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT; t.id = 7; t.codec = qcclCodecOneBit;
 *   qcclAllreduce(grad, grad, n, qcclFloat32, qcclAvg, &t, comm, NULL);
 *   qcclCommDestroy(comm);
 */
#ifndef QCCL_QCCL_H_
#define QCCL_QCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QCCL_VERSION_MAJOR 0
#define QCCL_VERSION_MINOR 1
#define QCCL_VERSION_PATCH 0

/** Result codes. Values equal qccl::ErrorCode in qccl/error.hpp. */
typedef enum {
  qcclSuccess = 0,
  qcclCudaError = 1,
  qcclSystemError = 2,
  qcclInternalError = 3,
  qcclInvalidArgument = 4,
  qcclInvalidUsage = 5,
  qcclRemoteError = 6,     /**< a peer failed or aborted */
  qcclTimeout = 7,         /**< a wait exceeded the timeout; the communicator is now failed */
  qcclMismatch = 8,        /**< ranks disagree on count, codec, datatype or call order */
  qcclMalformed = 9,       /**< bytes from the wire failed validation */
  qcclCommFailed = 10,     /**< the communicator failed earlier or was aborted */
  qcclTransportError = 11, /**< MPI or UCX reported an error */
  qcclNumResults = 12
} qcclResult_t;

typedef enum { qcclFloat32 = 0, qcclFloat16 = 1, qcclBfloat16 = 2 } qcclDataType_t;

typedef enum { qcclSum = 0, qcclAvg = 1 } qcclRedOp_t;

/** Codecs; values equal qccl::CodecId. qcclCodecDefault means "the communicator's config". */
typedef enum {
  qcclCodecDefault = -1,
  qcclCodecNone = 0, /**< fp32 on the wire */
  qcclCodecFp16 = 1,
  qcclCodecBf16 = 2,
  qcclCodecOneBit = 3,
  qcclCodecSignScale = 4,
  qcclCodecMaxMin = 5,
  qcclCodecDyn8 = 6
} qcclCodec_t;

typedef enum {
  qcclAlgoAuto = 0,     /**< documented rule from size and codec (see README, "Choosing an algorithm") */
  qcclAlgoRing = 1,     /**< uncompressed ring, fp32 or fp16/bf16 on the wire, reduced in fp32 */
  qcclAlgoSra = 2,      /**< compressed scatter-reduce + allgather, two-stage error feedback */
  qcclAlgoAllgather = 3 /**< every rank encodes once, every rank decodes all and sums */
} qcclAlgo_t;

typedef enum {
  qcclTransportAuto = 0,
  qcclTransportMpi = 1,
  qcclTransportUcx = 2,
  qcclTransportLoopback = 3
} qcclTransport_t;

/** Communicator configuration. Fill with qcclConfigInit (defaults, then QCCL_* environment
 *  overrides), change fields, pass to an init call. A NULL config means qcclConfigInit's result.
 *
 *  Environment variables (each overrides the field named):
 *    QCCL_CODEC        codec            none|fp16|bf16|onebit|signscale|maxmin|dyn8 (default none)
 *    QCCL_BITS         bits             maxmin bits 2|4|8 (default 4)
 *    QCCL_BUCKET       bucket           elements per bucket, multiple of 32 (default 512)
 *    QCCL_STOCHASTIC   stochastic       0|1 stochastic rounding for maxmin (default 0)
 *    QCCL_SEED         seed             stochastic rounding seed (default 0)
 *    QCCL_MIN_COMPRESS minCompressBytes below this tensor size auto sends fp32 (default 65536)
 *    QCCL_CHUNK_BYTES  chunkBytes       pipeline chunk, fp32 bytes (default 4 MiB)
 *    QCCL_PIPELINE     pipelineDepth    chunks in flight per peer (default 2)
 *    QCCL_TIMEOUT      timeoutSec       seconds any wait may take (default 300)
 *    QCCL_WARMUP       warmupCalls      first N calls per tensor uncompressed (default 0)
 *    QCCL_ALGO         algo             auto|ring|sra|allgather (default auto)
 *    QCCL_ERROR_FEEDBACK errorFeedback  0|1 (default 1)
 */
typedef struct {
  size_t structSize; /**< sizeof(qcclConfig_t), set by qcclConfigInit */
  int codec;         /**< qcclCodec_t default for tensors that do not name one */
  int bits;
  int bucket;
  int stochastic;
  uint64_t seed;
  size_t minCompressBytes;
  size_t chunkBytes;
  int pipelineDepth;
  double timeoutSec;
  int warmupCalls;
  int algo; /**< qcclAlgo_t */
  int errorFeedback;
} qcclConfig_t;

/** Per-call tensor options. id keys the error-feedback state (with the element count). */
typedef struct {
  uint64_t id; /**< caller's stable tensor id */
  int codec;   /**< qcclCodec_t; qcclCodecDefault = the communicator's */
  int bits;    /**< 0 = the communicator's */
  int algo;    /**< qcclAlgo_t; -1 = the communicator's */
} qcclTensorOpts_t;
#define QCCL_TENSOR_OPTS_INIT \
  { 0, qcclCodecDefault, 0, -1 }

/** Opaque 128-byte id that lets ranks find each other without MPI (NCCL-style). */
typedef struct {
  char internal[128];
} qcclUniqueId;

typedef struct qcclComm* qcclComm_t;

/** Counters of one communicator, for benchmarks. */
typedef struct {
  uint64_t bytesSent; /**< payload + headers qccl itself sent from this rank (not the bytes of the
                           MPI library's own allreduce, which `auto` uses when nothing is compressed) */
  uint64_t bytesReceived;
  uint64_t calls;         /**< collectives completed */
  uint64_t residualBytes; /**< error-feedback memory held now */
  uint64_t stagingBytes;  /**< staging buffers held now */
  uint64_t peakStagingBytes;
} qcclStats_t;

const char* qcclGetErrorString(qcclResult_t result);
/** Message of the last error on comm (or of this thread when comm is NULL); "" if none. */
const char* qcclGetLastError(qcclComm_t comm);
qcclResult_t qcclGetVersion(int* version);

qcclResult_t qcclConfigInit(qcclConfig_t* config);

/** Rank 0 calls this and hands the id to every rank (it opens rank 0's bootstrap address). */
qcclResult_t qcclGetUniqueId(qcclUniqueId* uniqueId);
/** An id every rank can build alone from a known address, e.g. torchrun's MASTER_ADDR and a port. */
qcclResult_t qcclUniqueIdFromAddress(qcclUniqueId* uniqueId, const char* host, int port);
/** Joins `nranks` ranks over UCX, bootstrapped through the id. Collective over all ranks. */
qcclResult_t qcclCommInitRank(qcclComm_t* comm, int nranks, qcclUniqueId commId, int rank, const qcclConfig_t* config);
/** From an MPI communicator given as its Fortran handle (MPI_Comm_c2f; mpi4py: comm.py2f()).
 *  qccl duplicates it, so the application's own traffic is not disturbed. qccl/qccl_mpi.h has
 *  qcclCommInitMpi taking an MPI_Comm. Collective over the MPI communicator. */
qcclResult_t qcclCommInitMpiFortran(qcclComm_t* comm, int64_t mpiCommF, const qcclConfig_t* config);
/** `nranks` communicators in this process, comms[i] to be used by thread i (tests, examples). */
qcclResult_t qcclCommInitLoopback(qcclComm_t* comms, int nranks, const qcclConfig_t* config);

/** Frees the communicator and its per-tensor state. */
qcclResult_t qcclCommDestroy(qcclComm_t comm);
/** Marks the communicator failed, tells the peers (best effort), then frees it. */
qcclResult_t qcclCommAbort(qcclComm_t comm);
qcclResult_t qcclCommCount(const qcclComm_t comm, int* count);
qcclResult_t qcclCommUserRank(const qcclComm_t comm, int* rank);
qcclResult_t qcclCommGetStats(const qcclComm_t comm, qcclStats_t* stats);
/** Frees the error-feedback state of tensor `id` (all element counts). */
qcclResult_t qcclTensorRelease(qcclComm_t comm, uint64_t id);

/** recvbuff[i] = op over ranks of sendbuff[i]. In place when sendbuff == recvbuff. opts may be NULL
 *  (id 0, the communicator's codec). stream is a cudaStream_t for device buffers, else NULL.
 *  The result is bit-identical on every rank. */
qcclResult_t qcclAllreduce(const void* sendbuff, void* recvbuff, size_t count, qcclDataType_t datatype, qcclRedOp_t op,
                           const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream);

/** recvbuff[r * sendcount + i] = rank r's sendbuff[i]. With a lossy codec every rank receives the
 *  decoded values (its own slot included); opts->id keys the error feedback of the sender. */
qcclResult_t qcclAllgather(const void* sendbuff, void* recvbuff, size_t sendcount, qcclDataType_t datatype,
                           const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream);

#ifdef __cplusplus
}  // extern "C"
#endif

/* ---- Momentum-corrected allreduce --------------------------------------------------------------
 * qcclMomentum_t: SGD with momentum (nesterov, dampening, weight decay) over a compressed
 * allreduce, with the compression applied to each rank's velocity (momentum correction). Declared
 * in qccl/qccl_momentum.h, implemented in bindings/c/qccl_momentum.cc on top of qcclAllreduce. */
#include "qccl/qccl_momentum.h"

#endif  // QCCL_QCCL_H_
