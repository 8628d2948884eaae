/* qccl: quantized collective communication library. C API in the style of NCCL.
 *
 * Every function returns a qcclResult_t; none throws or aborts the process. After a failure,
 * qcclGetLastError(comm) returns the message of the most recent error on that communicator
 * (or of this thread, for a null comm).
 *
 * Threads:
 *   - Calls on one communicator (collectives, qcclTensor*) are serialized by the library: a call
 *     made while another thread's call on the same communicator runs waits for it. Every rank must
 *     still issue the same collectives in the same order, so issuing them from several threads at
 *     once is only safe when the application orders them itself.
 *   - Different communicators may be used from different threads at the same time (over MPI this
 *     needs MPI_THREAD_MULTIPLE, as any concurrent use of MPI does).
 *   - qcclCommInterrupt, qcclCommAbort, qcclCommGetStats, qcclCommCount, qcclCommUserRank and
 *     qcclGetLastError may be called from any thread at any time, also while another thread is
 *     inside a collective on the same communicator: qcclCommInterrupt and qcclCommAbort make that
 *     collective return qcclCommFailed within milliseconds (the watchdog pattern); qcclCommAbort
 *     then tells the peers and frees the communicator once that call has returned.
 *   - A failed call records its message both on the communicator and for the calling thread: a
 *     thread whose call may race a qcclCommAbort reads it with qcclGetLastError(NULL).
 *   - Over MPI, qccl calls MPI from the thread that calls qccl; a qcclCommAbort or qcclCommDestroy
 *     from another thread than the collectives' needs MPI_THREAD_SERIALIZED or higher.
 *   - qcclCommDestroy waits for a running call on the communicator to return; using the handle
 *     after qcclCommDestroy or qcclCommAbort returned is an error of the application.
 *   - A communicator that failed (timeout, dead peer, mismatch, abort) stays failed; destroy it and
 *     create a new one (an elastic restart in the same process works).
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
#define QCCL_VERSION_MINOR 2
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
  qcclAlgoAuto = 0,      /**< documented rule from size and codec (see README, "Choosing an algorithm") */
  qcclAlgoRing = 1,      /**< uncompressed ring, fp32 or fp16/bf16 on the wire, reduced in fp32 */
  qcclAlgoSra = 2,       /**< compressed scatter-reduce + allgather, two-stage error feedback */
  qcclAlgoAllgather = 3, /**< every rank encodes once, every rank decodes all and sums */
  qcclAlgoHier = 4       /**< by host: fp32 reduce-scatter inside each host, compressed sra among the
                              ranks that own the same lane on every host, fp32 allgather inside each
                              host (host grouping: QCCL_HOST_ID, else the MPI library / host keys) */
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
 *    QCCL_CHUNK_BYTES  chunkBytes       pipeline chunk, fp32 bytes (default 0: by the codec on the
 *                                       wire, 4 MiB for fp32, onebit and signscale, 1 MiB for the
 *                                       others; the fp32 ring across hosts over Open MPI's TCP
 *                                       cuts them to messages within its eager limit, the fp32
 *                                       ring over UCX sends 1 MiB)
 *    QCCL_PIPELINE     pipelineDepth    chunks in flight per peer (default 2)
 *    QCCL_TIMEOUT      timeoutSec       seconds any wait may take (default 300)
 *    QCCL_WARMUP       warmupCalls      first N calls per tensor uncompressed (default 0)
 *    QCCL_ALGO         algo             auto|ring|sra|allgather|hier (default auto)
 *    QCCL_ERROR_FEEDBACK errorFeedback  0|1 (default 1)
 *    QCCL_MAX_RESIDUAL_BYTES maxResidualBytes  cap on per-tensor state, 0 = none (default 0)
 *    QCCL_INTRA_CODEC  intraCodec       hier inside a host: none|fp16|bf16 (default none = fp32)
 *    QCCL_AUTO_HIER    autoHier         0|1 auto tries hier where ranks share hosts (default 1)
 *    QCCL_AUTO_RING    autoRing         0|1 auto tries its fp32 ring against MPI_Iallreduce across
 *                                       hosts (default 1)
 *    QCCL_SHM          shm              0|1 auto sums in shared memory when all ranks share one host (default 1)
 *    QCCL_SHM_CHUNK_BYTES shmChunkBytes fp32 bytes per rank and step of that sum (default 1 MiB)
 *    QCCL_LOCAL_COMPRESS localCompress 0|1 compress host buffers when all ranks share one host (default 0)
 *  Read elsewhere, also only in src/core/config.cc:
 *    QCCL_CPU_ISA      cap on the CPU codec kernels: scalar|avx2|avx512 (default: the best present)
 *    QCCL_SOCKET_IFNAME interface whose IPv4 address goes into a unique id (default: first up,
 *                      non-loopback one)
 *    QCCL_MPI_NBC_RING 0|1 on 2-3 ranks, ask Open MPI's MPI_Iallreduce for its ring around qccl's own
 *                      uncompressed sums of 64 KiB and more (default 1)
 *    QCCL_HOST_ID      ranks with equal values share a host for host grouping (default: the MPI
 *                      library's shared-memory split; over UCX hostname + network namespace + boot id)
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
  /** Cap in bytes on the per-tensor state (residuals + bookkeeping); 0 = none. Beyond it the least
   *  recently used tensors lose their state, with a one-time warning on stderr. */
  size_t maxResidualBytes;
  /** hier: what the stages inside a host send: qcclCodecNone (fp32, default), qcclCodecFp16 or
   *  qcclCodecBf16 (no residual, like the ring's casts). New in 0.2.0. */
  int intraCodec;
  /** auto, where ranks share hosts (two hosts or more, one with two ranks or more): the first
   *  QCCL_AUTO_TRIAL_CALLS calls of each tensor with an id and at least 1 MiB of fp32 alternate
   *  between the flat path and hier; every rank then keeps the one that was faster on the slowest
   *  rank (qcclCommGetLastAlgo tells which ran). 0 = auto never runs hier. New in 0.2.0. */
  int autoHier;
  /** auto, every rank on one host (two ranks or more): the uncompressed sum and the check of each
   *  call that every rank makes the same call go through one shared-memory segment in /dev/shm
   *  (2 x (shmChunkBytes + 16 KiB) per rank), set up by the first auto allreduce; its name is
   *  removed as soon as every rank has mapped it. Used only when every rank allows it and maps it,
   *  else auto goes through the transport as before. qcclCommGetLastAlgo reports *native = 2.
   *  0 = never. New in 0.2.0. */
  int shm;
  size_t shmChunkBytes; /**< fp32 bytes each rank stages per step of the shared-memory sum, 64 .. 256 MiB */
  /** auto, every rank on one host with the shared segment (shm), host buffers: 0 (default) sums
   *  calls that ask for a lossy codec exactly in the segment too, because there copying fp32 costs
   *  less than any codec's passes over the data; 1 compresses them as asked (to measure a codec or
   *  its training on one host). Device buffers are compressed as asked either way. Every rank must
   *  set the same value (else qcclMismatch). New in 0.2.0. */
  int localCompress;
  /** auto over MPI, 4+ ranks whose fp32 ring crosses hosts over Open MPI's TCP (so its chunks fit
   *  the eager limit): an uncompressed tensor of 4 MiB or more may be summed in qccl's fp32 ring
   *  instead of MPI_Iallreduce. The first QCCL_AUTO_TRIAL_CALLS calls of each such tensor with an
   *  id alternate between the two (MPI_Iallreduce first) and every rank keeps the ring only where
   *  it was at least 5% faster on the slowest rank; an anonymous tensor takes the ring. 0 = always
   *  MPI_Iallreduce, no trial. Every rank must set the same value (else qcclMismatch). New in
   *  0.2.0. */
  int autoRing;
} qcclConfig_t;

/** Calls of a tensor that auto spends timing the flat path against hier (see autoHier), or, with one
 *  rank per host over MPI, an uncompressed tensor of 4 MiB or more on 4+ ranks: MPI_Iallreduce
 *  against qccl's fp32 ring (README, "auto"). */
#define QCCL_AUTO_TRIAL_CALLS 4

/** Per-call tensor options.
 *  id: the caller's stable id of the tensor, the same on every rank (like its name). It keys the
 *  error-feedback state; a new element count for a known id replaces that state. Every message of
 *  a call carries a tag derived from the id, so ranks that call tensors in a different order fail
 *  with qcclMismatch instead of mixing them. id 0 means "no id": such a call keeps no state, so a
 *  lossy codec with error feedback refuses it with qcclInvalidUsage (set an id, or set
 *  QCCL_ERROR_FEEDBACK=0); uncompressed and fp16/bf16-ring calls need no id. */
typedef struct {
  uint64_t id; /**< caller's stable tensor id; 0 = none */
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
  uint64_t bytesSent; /**< payload + headers qccl itself sent from this rank, the messages of
                           `auto`'s cross-rank check included (not the bytes of the MPI library's
                           own allreduce, which `auto` uses when nothing is compressed) */
  uint64_t bytesReceived;
  uint64_t calls;         /**< collectives completed */
  uint64_t residualBytes; /**< error-feedback memory held now */
  uint64_t stagingBytes;  /**< staging buffers held now */
  uint64_t peakStagingBytes;
  uint64_t tensors;           /**< tensor ids that hold state now */
  uint64_t evictions;         /**< states dropped by maxResidualBytes so far */
  uint64_t peakResidualBytes; /**< largest residualBytes so far */
  /* Where the calls' wall time went, in seconds since the communicator was created (a CPU budget):
   * encoding, validating + decoding, and waiting for the transport; idleSeconds is the part of the
   * wait spent yielding or sleeping, the rest drives progress. */
  double encodeSeconds;
  double decodeSeconds;
  double waitSeconds;
  double idleSeconds;
  uint64_t bytesSentInterHost; /**< the part of bytesSent that went to ranks on other hosts (hosts as
                                    `hier` groups them); new in 0.2.0 */
  uint64_t messagesSent;       /**< the messages of bytesSent (an fp32 stream's chunks after its
                                    first carry no header: count its chunks here); new in 0.2.0 */
} qcclStats_t;

const char* qcclGetErrorString(qcclResult_t result);
/** Message of the last error on comm (or of this thread when comm is NULL); "" if none. The text
 *  is a copy owned by the calling thread, valid until its next qcclGetLastError call. */
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

/** Frees the communicator and its per-tensor state (after a running call on it returned). */
qcclResult_t qcclCommDestroy(qcclComm_t comm);
/** Watchdog: makes the collective running on comm (in another thread) and every later call on it
 *  return qcclCommFailed, within milliseconds; does not free it. Callable from any thread at any
 *  time. The thread that owns comm then calls qcclCommAbort or qcclCommDestroy. */
qcclResult_t qcclCommInterrupt(qcclComm_t comm);
/** Marks the communicator failed, tells the peers (best effort), then frees it. Callable from any
 *  thread, also while another thread is inside a collective on comm: that collective returns
 *  qcclCommFailed within milliseconds, and qcclCommAbort returns after it. */
qcclResult_t qcclCommAbort(qcclComm_t comm);
qcclResult_t qcclCommCount(const qcclComm_t comm, int* count);
qcclResult_t qcclCommUserRank(const qcclComm_t comm, int* rank);
qcclResult_t qcclCommGetStats(const qcclComm_t comm, qcclStats_t* stats);
/** The schedule the last allreduce on comm ran (*algo: a qcclAlgo_t, never qcclAlgoAuto once a
 *  call completed; qcclAlgoAuto before the first), and *native = 1 when it handed the sum to the
 *  MPI library instead (auto with nothing to compress), 2 when it summed in qccl's shared-memory
 *  segment (auto with nothing to compress, every rank on one host; QCCL_SHM), 3 when the sum rode
 *  along with auto's cross-rank check of the call, a recursive doubling over qccl's own messages
 *  (fp32 host buffers of at most 4096 elements, nothing to compress, over MPI without the
 *  segment), 0 otherwise. Either pointer may be NULL. Callable from any thread. Tells what auto chose (see autoHier).
 * New in 0.2.0. */
qcclResult_t qcclCommGetLastAlgo(const qcclComm_t comm, int* algo, int* native);
/** Frees the error-feedback state of tensor `id`. */
qcclResult_t qcclTensorRelease(qcclComm_t comm, uint64_t id);

/** The error-feedback state of tensor `id` (residuals and call count) as a record for a checkpoint.
 *  With buf == NULL, *bytes receives the record's size (0 when the tensor has no state). Otherwise
 *  *bytes is the capacity of buf on input (qcclInvalidArgument when too small) and the record's
 *  size on output. A record only fits the same rank of a communicator of the same size. */
qcclResult_t qcclTensorStateSave(qcclComm_t comm, uint64_t id, void* buf, size_t* bytes);
/** Replaces the state of tensor `id` by a record from qcclTensorStateSave (validated: a malformed
 *  record is qcclMalformed, one of another rank or size qcclInvalidArgument). The tensor's next call
 *  must use the record's element count, else its state starts from zero. `device` != 0 places the
 *  residuals in device memory (for a tensor whose calls pass device buffers). */
qcclResult_t qcclTensorStateLoad(qcclComm_t comm, uint64_t id, const void* buf, size_t bytes, int device);
/** Multiplies the residuals of tensor `id` by `factor` (finite). Residuals are kept in the units of
 *  the tensor: when a mixed-precision loss scale changes from S to S', scale them by S'/S.
 *  *found (may be NULL) is set to 1 when the tensor had state, else 0. */
qcclResult_t qcclTensorStateScale(qcclComm_t comm, uint64_t id, float factor, int* found);
/** Error control for tensor `id` (EControl's, Gao, Islamov and Stich, ICLR 2024, without its
 *  gradient-difference term): the encodes of its calls that keep a residual e send x + gain * e
 *  instead of x + e and keep the rest, e <- e + x - C(x + gain * e), so a codec's accumulated error
 *  is fed back in part instead of all at once; nothing is dropped. `gain` in (0, 1] (else
 *  qcclInvalidArgument); 1 is plain error feedback, the default. Applies to qcclAllreduce (and its
 *  Epilogue and Fused forms), qcclAllgather and qcclReduceScatter on host buffers; a call with
 *  device buffers and a gain below 1 fails with qcclInvalidUsage. Ranks may differ. The setting is
 *  kept until qcclTensorRelease(comm, id); qcclTensorStateSave does not record it. id 0: qcclInvalidArgument.
 *  New in 0.2.0. */
qcclResult_t qcclTensorSetFeedbackGain(qcclComm_t comm, uint64_t id, float gain);

/** Device buffers (builds with CUDA), for qcclAllreduce, qcclAllgather and qcclReduceScatter: send
 *  and recv buffers must both be host memory or both device memory (else qcclInvalidArgument). The
 *  call runs on the device the buffers live on (restoring the caller's current device), on qccl's
 *  own stream, which first waits for the work enqueued on `stream` before the call; `stream` then
 *  waits for qccl's work, so the results are ready in the order of `stream` (synchronize it before
 *  reading them on the host). The results are the bits the same call on host buffers gives, and
 *  residuals of such tensors live in device memory. A process that only ever passes host buffers
 *  creates no CUDA context. Verified on one H100 (cuda/README.md, "What ran on a GPU"). */

/** recvbuff[i] = op over ranks of sendbuff[i]. In place when sendbuff == recvbuff. opts may be NULL
 *  (id 0, the communicator's codec). stream is a cudaStream_t for device buffers, else NULL.
 *  The result is bit-identical on every rank. */
qcclResult_t qcclAllreduce(const void* sendbuff, void* recvbuff, size_t count, qcclDataType_t datatype, qcclRedOp_t op,
                           const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream);

/** qcclAllreduceEpilogue's function: rewrites values[0..count), elements [first, first + count) of
 *  the result, in place. It runs on the calling thread and must not call qccl or unwind. */
typedef void (*qcclEpilogueFn_t)(void* user, float* values, size_t first, size_t count);

/** qcclAllreduce of float32 host buffers, then fn(user, ...) over every element of the result
 *  exactly once (in pieces of any size and order) before the call returns: an update fused into the
 *  reduction, such as an optimizer step or momentum correction. Where the schedule writes each
 *  element's final value in its last step (sra, allgather-reduce), fn runs inside that step's
 *  decodes on each bucket while it is in cache, which saves a separate pass's reads and writes of
 *  recvbuff; elsewhere (the ring, the MPI library's or the shared-memory sum, hier, one rank) it
 *  runs once over the whole result after the sum. Either way recvbuff ends bit for bit as qcclAllreduce followed by fn
 * over it. Device buffers and other dtypes: qcclInvalidArgument. After a failure the contents of recvbuff are
 * undefined, as for qcclAllreduce, and fn may have run on parts of it. */
qcclResult_t qcclAllreduceEpilogue(const float* sendbuff, float* recvbuff, size_t count, qcclRedOp_t op,
                                   const qcclTensorOpts_t* opts, qcclEpilogueFn_t fn, void* user, qcclComm_t comm);

/** qcclAllreduceEpilogue with a prologue too (either function may be NULL, not both):
 *  prologue(user, values, first, count) rewrites elements [first, first + count) of sendbuff in
 *  place, each exactly once, before anything reads them, such as a momentum update that produces
 *  what the call sends. Where the schedule reads each input element once (allgather-reduce and
 *  sra with a lossy codec), it runs on each pipeline chunk right before that read: the chunk's
 *  encode, or, for this rank's own shard in sra, the start of its sum; elsewhere over the whole
 *  input first. Either way the result is bit for bit the prologue over sendbuff, then
 *  qcclAllreduce, then the epilogue. Same restrictions as qcclAllreduceEpilogue. */
qcclResult_t qcclAllreduceFused(float* sendbuff, float* recvbuff, size_t count, qcclRedOp_t op,
                                const qcclTensorOpts_t* opts, qcclEpilogueFn_t prologue, qcclEpilogueFn_t epilogue,
                                void* user, qcclComm_t comm);

/** recvbuff[r * sendcount + i] = rank r's sendbuff[i]. With a lossy codec every rank receives the
 *  decoded values (its own slot included); opts->id keys the error feedback of the sender.
 *  opts->algo qcclAlgoHier gathers by host (each block crosses to another host once), with the
 *  same result bit for bit; any other algo is the flat allgather. */
qcclResult_t qcclAllgather(const void* sendbuff, void* recvbuff, size_t sendcount, qcclDataType_t datatype,
                           const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream);

/** Reduce-scatter in NCCL's layout: recvbuff[i] = op over ranks r of rank r's
 *  sendbuff[rank * recvcount + i]; sendbuff holds nranks * recvcount elements. In place when
 *  recvbuff == sendbuff + rank * recvcount. recvcount must be the same on every rank (otherwise
 *  qcclMismatch, or qcclRemoteError from the peer that found it, on every rank).
 *  With a lossy codec each rank encodes the shards it sends with error feedback (opts->id keys
 *  the residual of the whole send buffer) and the owner sums the decoded contributions in rank
 *  order, as the first stage of qcclAlgoSra does; the owner does not re-encode, so there is no
 *  second quantization and no owner residual. Under qcclAlgoAuto a send buffer below
 *  minCompressBytes of fp32 goes uncompressed; any other algo compresses at every size. */
qcclResult_t qcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, qcclDataType_t datatype,
                               qcclRedOp_t op, const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream);

#ifdef __cplusplus
}  // extern "C"
#endif

/* ---- Momentum-corrected allreduce --------------------------------------------------------------
 * qcclMomentum_t: SGD with momentum (nesterov, dampening, weight decay) over a compressed
 * allreduce, with the compression applied to each rank's velocity (momentum correction). Declared
 * in qccl/qccl_momentum.h, implemented in bindings/c/qccl_momentum.cc on top of qcclAllreduce. */
#include "qccl/qccl_momentum.h"

#endif  // QCCL_QCCL_H_
