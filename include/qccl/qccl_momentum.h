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
 * Algorithm: where the call's algorithm is auto (opts->algo qcclAlgoAuto, or -1 with the
 * communicator's config at auto), a 1-bit codec (onebit, signscale) on at most 8 ranks uses
 * qcclAlgoAllgather, one quantization stage instead of sra's two (measured in
 * examples/cpp/README.md); an explicit algo is respected. The codec is opts->codec, or the
 * communicator's config for qcclCodecDefault, here and for the rotation below.
 *
 * Rotation: a 1-bit codec sends one sign per element and one or two scales per bucket. With one
 * scale the part of a bucket it delivers in one call is ||x||_1^2 / (n ||x||_2^2): 2/pi for Gaussian
 * values, far less for a bucket in which a few elements dominate. The rest waits in the error-feedback residual, and
 * the momentum iteration acts on a stale velocity. On the example's 2048-wide hidden layer that
 * share was 0.27-0.30, the residual grew to 2-4x the local velocity, and the 1-bit runs broke
 * into loss spikes after ~140 steps. With config->rotation = B the velocity is sent as H D u in
 * blocks of B elements (H the Walsh-Hadamard matrix, D a fixed diagonal of random signs, the same on
 * every rank) and the average is rotated back, (1/B) D H y: the rotation spreads a block's large
 * elements over all of it, so the codec sees near-Gaussian buckets (Suresh et al., "Distributed
 * Mean Estimation with Limited Communication", ICML 2017). The residuals are kept in the rotated
 * domain, so a tensor's codec and rotation must stay the same from call to call (a checkpoint
 * restores them with qcclMomentumGetRotation). Elements past the last whole block are sent as they are.
 * The rotation does not always help: onebit sends a bucket's positive and negative elements at their
 * own means, nearly exact for a bucket of similar values, and the rotation turns such a bucket into
 * Gaussian values (a 1-bit quantizer then loses 1 - 2/pi of their energy). So the default,
 * QCCL_MOMENTUM_ROTATION_AUTO, decides at the tensor's first call, where the codec is onebit or
 * signscale: every rank computes what the codec would lose of its velocity in blocks of 512 with and
 * without the rotation, one uncompressed allreduce sums both over the ranks, and the tensor is
 * rotated from then on if the rotated loss is below 0.9 of the other.
 * Cost: two transforms of log2(B) stages each, on data in cache (each block is rotated as its
 * velocity is computed, and rotated back as its direction is), and one more buffer of `count`
 * floats: on one rank of the 2-core AVX2 development machine, +42-47 ms per call on 25.6M elements
 * (63-68 ms without) before those passes were fused, and about 30% less after (bench/RESULTS.md,
 * "Cost, fused passes"). On the example's wide layer the rotation
 * took the 1-bit runs from 1.56x exact averaging's final loss to 1.10x at a constant learning rate,
 * and to 1.009x with a cosine schedule (examples/cpp/README.md).
 *
 * Residual decay: after each exchange the error-feedback residual of opts->id is multiplied by
 * config->residualDecay (qcclTensorStateScale), so that what the codec dropped is carried into the
 * next call only in part, as in ECQ-SGD (Wu et al., "Error Compensated Quantized SGD", ICML 2018).
 * The sum of the exchanged velocities then no longer telescopes to the exact sum, and the forgotten
 * part is mostly along the velocity: measured, it acts like a smaller step (examples/cpp/README.md).
 * The default is 1, plain error feedback.
 *
 * Error control: plain error feedback sends the velocity plus the whole accumulated error e, the
 * part of earlier velocities the codec has not delivered yet, and keeps what this call's codec
 * drops: e <- (u + e) - C(u + e). With config->feedbackGain = g < 1 a call sends u + g e and keeps
 * the rest of e as well: e <- e + u - C(u + g e) (EControl without its gradient-difference term:
 * Gao, Islamov and Stich, "EControl: Fast Distributed Optimization with Compression and Error
 * Control", ICLR 2024). Unlike residual decay nothing is forgotten: the velocities the calls deliver
 * still sum to the velocities sent, only later. A 1-bit codec's error on a bucket dominated by the
 * error itself stops feeding back on itself at full strength. The default is 0.5: on the example's
 * wide layer at a constant learning rate the 1-bit runs went from 1.10x exact averaging's final
 * loss to 0.94x, and on its default model from 1.003x to 0.999x (examples/cpp/README.md). It acts
 * on every residual of opts->id (with sra, the owners' too), for any codec with error feedback,
 * inside the encode, with no extra pass over memory: the AVX2 onebit/signscale kernels do it
 * themselves, the other kernels see each bucket's residual split in L1. Cost on one rank of the
 * 2-core development machine, onebit on 25.6M elements: +2.8-4.1 ms per call in the AVX2 kernel,
 * +12-14 ms through the split (87-91 ms without; bench/RESULTS.md, "Error control"). The same
 * control for plain calls is a setting of the tensor: qcclTensorSetFeedbackGain (qccl.h).
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
  /** Elements per block of the rotation (see "Rotation" above): a power of two from 32 to 65536, 0 =
   *  none, QCCL_MOMENTUM_ROTATION_AUTO (the default) = 512 or none, decided at the first call where
   *  the codec (opts->codec, or the config's for qcclCodecDefault) is onebit or signscale, none
   *  otherwise. */
  int rotation;
  /** In (0, 1]: the factor on the error-feedback residual after each exchange (see "Residual
   *  decay" above); 1 (the default) = plain error feedback. */
  float residualDecay;
  /** In (0, 1]: the share of the accumulated codec error fed into each exchange (see "Error
   *  control" above); 0.5 by default, 1 = plain error feedback. */
  float feedbackGain;
} qcclMomentumConfig_t;
/** A config whose structSize ends before `rotation` or before `feedbackGain` (built against an
 *  older header) gets the defaults of the fields it lacks. */
#define QCCL_MOMENTUM_ROTATION_AUTO (-1)
#define QCCL_MOMENTUM_CONFIG_INIT \
  { sizeof(qcclMomentumConfig_t), 0.9f, 0.0f, 0.0f, 0, QCCL_MOMENTUM_ROTATION_AUTO, 1.0f, 0.5f }

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
/** The rotation in use (*block: elements per block, 0 = none, QCCL_MOMENTUM_ROTATION_AUTO until the
 *  first call has decided), owned by the object and writable, to restore a checkpoint along with
 *  qcclMomentumGetState and the tensor's qcclTensorStateSave record. */
qcclResult_t qcclMomentumGetRotation(qcclMomentum_t momentum, int** block);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // QCCL_QCCL_MOMENTUM_H_
