/* qccl momentum-corrected allreduce: SGD with momentum over a compressed allreduce.
 *
 * Included by qccl/qccl.h. Built purely on the public C API (qcclAllreduce).
 *
 * With a lossy codec, error feedback on the gradients and momentum applied afterwards integrate the
 * codec's error step after step (1-bit codecs then train worse than exact averaging, or diverge on
 * wide layers). A qcclMomentum_t applies momentum correction (Lin et al., "Deep Gradient
 * Compression", ICLR 2018): each rank keeps a local velocity of its own gradient,
 *   d = grad + weightDecay * param,  u = momentum * u + (1 - dampening) * d  (u = d on the first call),
 * sends u through qcclAllreduce (so error feedback works in velocity units) and keeps the average
 * B (bit-identical on every rank) as the momentum buffer. The call returns, in grad, the update
 * direction of torch.optim.SGD with that buffer:
 *   plain:    dir = B_t
 *   nesterov: dir = (B_t - momentum * B_{t-1}) / (1 - dampening) + momentum * B_t
 * so that the caller steps with param -= lr * dir. With codec none this is SGD with momentum on the
 * exactly averaged gradient, up to float rounding.
 *
 *   qcclMomentumConfig_t mc = QCCL_MOMENTUM_CONFIG_INIT;   // momentum 0.9
 *   qcclMomentum_t m;
 *   qcclMomentumCreate(&m, n, &mc);
 *   for (each step) {
 *     computeGradient(param, grad);
 *     qcclMomentumAllreduce(m, grad, param, n, qcclFloat32, &opts, comm, NULL);   // opts.id != 0
 *     for (i) param[i] -= lr * grad[i];
 *   }
 *   qcclMomentumDestroy(m);
 *
 * Algorithm: with opts->algo unset (-1 or qcclAlgoAuto), a 1-bit codec (onebit, signscale) on at most
 * 8 ranks uses qcclAlgoAllgather, one quantization stage instead of sra's two (measured in
 * examples/cpp/README.md); an explicit algo is respected.
 *
 * The local velocity differs across ranks by design; the returned direction is the same on every
 * rank, so replicas that start equal stay bit-identical. Host memory only (stream must be NULL);
 * float32 only. Invalid arguments return qcclInvalidArgument (the communicator's last-error text is
 * not changed by this object); errors of the allreduce itself are returned as they come, and the
 * object's state is then left as it was before the call.
 */
#ifndef QCCL_QCCL_MOMENTUM_H_
#define QCCL_QCCL_MOMENTUM_H_

#include <stddef.h>

#include "qccl/qccl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qcclMomentum* qcclMomentum_t;

/** SGD settings, the meaning of torch.optim.SGD's arguments of the same names. */
typedef struct {
  size_t structSize; /**< sizeof(qcclMomentumConfig_t) */
  float momentum;    /**< in (0, 1) */
  float dampening;   /**< in [0, 1); 0 with nesterov */
  float weightDecay; /**< >= 0, added to the gradient (L2, as SGD's weight_decay) */
  int nesterov;      /**< 0 or 1 */
} qcclMomentumConfig_t;
#define QCCL_MOMENTUM_CONFIG_INIT \
  { sizeof(qcclMomentumConfig_t), 0.9f, 0.0f, 0.0f, 0 }

/** A momentum state for one tensor of `count` float32 elements. A NULL config means the defaults. */
qcclResult_t qcclMomentumCreate(qcclMomentum_t* momentum, size_t count, const qcclMomentumConfig_t* config);
qcclResult_t qcclMomentumDestroy(qcclMomentum_t momentum);

/** grad (this rank's gradient of param, `count` elements) becomes the update direction described
 *  above. opts->id must be nonzero: it keys the allreduce's error-feedback state (in velocity
 *  units), so it must not be shared with other tensors. Collective over comm, like qcclAllreduce. */
qcclResult_t qcclMomentumAllreduce(qcclMomentum_t momentum, float* grad, const float* param, size_t count,
                                   qcclDataType_t datatype, const qcclTensorOpts_t* opts, qcclComm_t comm,
                                   void* stream);

/** The state, for checkpoints: this rank's local velocity and the averaged buffer (`count`
 *  elements each, owned by the object, writable to restore a checkpoint), and whether the first
 *  call has happened (*started, writable too). Any output pointer may be NULL. */
qcclResult_t qcclMomentumGetState(qcclMomentum_t momentum, float** localVelocity, float** buffer, int** started);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // QCCL_QCCL_MOMENTUM_H_
