// Momentum-corrected allreduce (qccl/qccl_momentum.h), on top of the public C API only.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "capi_internal.hpp"
#include "codec/rotation.hpp"
#include "qccl/qccl.h"

struct qcclMomentum {
  qcclMomentumConfig_t config;
  std::vector<float> velocity;  // this rank's local velocity u
  std::vector<float> buffer;    // the averaged velocity B of the last call
  std::vector<float> next;      // the new velocity of a call, until it succeeds (then swapped in)
  std::vector<float> rotated;   // the rotated velocity, when the tensor is rotated
  std::vector<float> signs;     // the rotation's diagonal D, one block, built on first use
  int block = -1;               // the rotation in use: -1 until the first call decides, 0 none
  int started = 0;
};

namespace {

// A 1-bit codec's velocity goes through one quantization stage (allgather) rather than two (sra,
// whose owners re-quantize the averaged velocity) up to this many ranks: with two stages the
// momentum-corrected MLP example trained worse than exact averaging late in training, with one it
// tracked it (examples/cpp/README.md). Allgather sends (n - 1) encoded copies per rank against sra's
// 2 (n - 1) / n, so beyond 8 ranks sra's bytes win. An explicit opts->algo is always respected.
constexpr int kMaxAllgatherRanks = 8;

// A config built against the header before `rotation` ends where that field begins.
constexpr size_t kConfigSizeV1 = offsetof(qcclMomentumConfig_t, rotation);
// ... and one built before `feedbackGain` where that field begins.
constexpr size_t kConfigSizeV2 = offsetof(qcclMomentumConfig_t, feedbackGain);
constexpr int kAutoRotationBlock = qccl::rotation::kDefaultBlock;
using qccl::rotation::oneBitLoss;
using qccl::rotation::rotateBackBlock;
using qccl::rotation::walshHadamard;

bool validRotation(int r) { return r == 0 || r == QCCL_MOMENTUM_ROTATION_AUTO || qccl::rotation::validBlock(r); }

bool validConfig(const qcclMomentumConfig_t& c) {
  return validRotation(c.rotation) && c.residualDecay > 0.0f && c.residualDecay <= 1.0f && c.feedbackGain > 0.0f &&
         c.feedbackGain <= 1.0f && c.momentum > 0.0f && c.momentum < 1.0f && c.dampening >= 0.0f &&
         c.dampening < 1.0f && c.weightDecay >= 0.0f && std::isfinite(c.weightDecay) &&
         (c.nesterov == 0 || c.nesterov == 1) && !(c.nesterov && c.dampening != 0.0f);
}

// Auto rotation, at a tensor's first call: rotate from then on when the codec's loss on the rotated
// velocities, summed over ranks, is below kAutoRotationGain of its loss on them as they are. The sums
// go through one uncompressed allreduce, so every rank takes the same decision.
constexpr double kAutoRotationGain = qccl::rotation::kAutoGain;

qcclResult_t decideRotation(const std::vector<float>& u, const std::vector<float>& rotated, bool twoMeans,
                            qcclComm_t comm, int* block) {
  // ||H x||^2 = n ||x||^2: the rotated loss in the units of the plain one.
  float loss[2] = {static_cast<float>(oneBitLoss(u.data(), u.size(), twoMeans)),
                   static_cast<float>(oneBitLoss(rotated.data(), rotated.size(), twoMeans) / kAutoRotationBlock)};
  qcclTensorOpts_t o = QCCL_TENSOR_OPTS_INIT;
  o.codec = qcclCodecNone;
  qcclResult_t r = qcclAllreduce(loss, loss, 2, qcclFloat32, qcclSum, &o, comm, nullptr);
  if (r != qcclSuccess) return r;
  *block = loss[1] < kAutoRotationGain * loss[0] ? kAutoRotationBlock : 0;
  return qcclSuccess;
}

}  // namespace

extern "C" {

qcclResult_t qcclMomentumCreate(qcclMomentum_t* momentum, size_t count, const qcclMomentumConfig_t* config) {
  if (!momentum) return qcclInvalidArgument;
  *momentum = nullptr;
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  if (config) {
    if (config->structSize != sizeof(qcclMomentumConfig_t) && config->structSize != kConfigSizeV1 &&
        config->structSize != kConfigSizeV2)
      return qcclInvalidArgument;
    std::memcpy(&c, config, config->structSize);  // an older config keeps the defaults of the newer fields
    c.structSize = sizeof(qcclMomentumConfig_t);
  }
  if (!validConfig(c)) return qcclInvalidArgument;
  auto* m = new (std::nothrow) qcclMomentum;
  if (!m) return qcclSystemError;
  try {
    m->velocity.assign(count, 0.0f);
    m->buffer.assign(count, 0.0f);
  } catch (const std::bad_alloc&) {
    delete m;
    return qcclSystemError;
  }
  m->config = c;
  *momentum = m;
  return qcclSuccess;
}

qcclResult_t qcclMomentumDestroy(qcclMomentum_t momentum) {
  delete momentum;
  return qcclSuccess;
}

qcclResult_t qcclMomentumAllreduce(qcclMomentum_t m, float* grad, const float* param, size_t count,
                                   qcclDataType_t datatype, const qcclTensorOpts_t* opts, qcclComm_t comm,
                                   void* stream) {
  if (!m || !comm || !opts || opts->id == 0 || datatype != qcclFloat32 || stream != nullptr ||
      count != m->velocity.size() || (count > 0 && (!grad || !param)))
    return qcclInvalidArgument;
  const qcclMomentumConfig_t& c = m->config;
  const float keep = 1.0f - c.dampening;
  // The new local velocity goes to a copy first, so a failed allreduce leaves the state untouched.
  // Its storage, and the rotated copy's, persist across calls: allocating them per call cost more
  // in page faults than the rotation itself on 25.6M elements.
  std::vector<float>& u = m->next;
  try {
    u.resize(count);
  } catch (const std::bad_alloc&) {
    return qcclSystemError;
  }
  // This rank's new velocity on [lo, hi).
  auto velocity = [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
      float d = c.weightDecay != 0.0f ? grad[i] + c.weightDecay * param[i] : grad[i];
      u[i] = m->started ? c.momentum * m->velocity[i] + keep * d : d;
    }
  };
  // The direction from the averaged velocity in grad on [lo, hi), and the new buffer.
  auto direction = [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
      const float now = grad[i];
      if (c.nesterov) {
        // torch.optim.SGD: d = (B_t - mu * B_{t-1}) / (1 - dampening) (the buffer's increment), dir = d + mu * B_t.
        const float d = m->started ? (now - c.momentum * m->buffer[i]) / keep : now;
        grad[i] = d + c.momentum * now;
      }
      m->buffer[i] = now;
    }
  };
  // Out of place: the averaged velocity lands in grad, u stays this rank's.
  qcclTensorOpts_t o = *opts;
  int nranks = 0;
  if (qcclCommCount(comm, &nranks) != qcclSuccess) return qcclInvalidArgument;
  // The codec and algorithm the call uses: the tensor's, or the communicator's where it defers.
  const int codec = qccl::capi::resolvedCodec(comm, o.codec);
  const bool oneBit = codec == qcclCodecOneBit || codec == qcclCodecSignScale;
  if (qccl::capi::resolvedAlgo(comm, o.algo) == qcclAlgoAuto && oneBit && nranks <= kMaxAllgatherRanks)
    o.algo = qcclAlgoAllgather;  // one quantization stage: see kMaxAllgatherRanks
  // The rotation (qccl_momentum.h): explicit, or auto, decided at the first call (-1 until then).
  int block = m->block;
  if (c.rotation != QCCL_MOMENTUM_ROTATION_AUTO)
    block = c.rotation;
  else if (block < 0 && (!oneBit || count < static_cast<size_t>(kAutoRotationBlock)))
    block = 0;
  if (!validRotation(block)) return qcclInvalidArgument;  // a bad value restored through qcclMomentumGetRotation
  const size_t n = static_cast<size_t>(block < 0 ? kAutoRotationBlock : block);  // block < 0: auto, to decide
  const float* send = u.data();
  const size_t whole = n > 0 ? count - count % n : 0;  // elements in whole blocks (the rest goes unrotated)
  if (block != 0 && count >= n) {
    if (m->signs.size() != n) m->signs = qccl::rotation::signs(static_cast<int>(n));
    std::vector<float>& w = m->rotated;
    try {
      w.resize(count);
    } catch (const std::bad_alloc&) {
      return qcclSystemError;
    }
    // Each block's velocity is rotated (w = H D u) while it is still in cache.
    for (size_t b = 0; b < whole; b += n) {
      velocity(b, b + n);
      walshHadamard(w.data() + b, n, u.data() + b, m->signs.data());
    }
    velocity(whole, count);
    if (whole < count) std::memcpy(w.data() + whole, u.data() + whole, (count - whole) * sizeof(float));
    if (block < 0) {
      const qcclResult_t r = decideRotation(u, w, codec == qcclCodecOneBit, comm, &block);
      if (r != qcclSuccess) return r;
    }
    if (block > 0) send = w.data();
  } else {
    velocity(0, count);
  }
  // Error control (qccl_momentum.h): the call's encodes see feedbackGain of the accumulated error,
  // and keep the rest in the residual.
  const qcclResult_t r =
      qccl::capi::allreduceWithGain(send, grad, count, qcclFloat32, qcclAvg, &o, comm, nullptr, c.feedbackGain);
  if (r != qcclSuccess) return r;
  m->block = block;
  // Each rotated block is rotated back (x = (1/n) D H x) and turned into the direction while in
  // cache; the rest (all of it without the rotation) goes as it came.
  const size_t rotatedEnd = block > 0 && count >= n ? whole : 0;
  for (size_t b = 0; b < rotatedEnd; b += n) {
    rotateBackBlock(grad + b, n, m->signs.data());
    direction(b, b + n);
  }
  direction(rotatedEnd, count);
  m->velocity.swap(u);
  m->started = 1;
  // Residual decay (qccl_momentum.h): forget part of what the codec dropped. A codec without
  // residuals (none, the casts) has no state under this id, and the call does nothing.
  if (c.residualDecay != 1.0f) return qcclTensorStateScale(comm, o.id, c.residualDecay, nullptr);
  return qcclSuccess;
}

qcclResult_t qcclMomentumGetRotation(qcclMomentum_t m, int** block) {
  if (!m || !block) return qcclInvalidArgument;
  *block = &m->block;
  return qcclSuccess;
}

qcclResult_t qcclMomentumGetState(qcclMomentum_t m, float** localVelocity, float** buffer, int** started) {
  if (!m) return qcclInvalidArgument;
  if (localVelocity) *localVelocity = m->velocity.data();
  if (buffer) *buffer = m->buffer.data();
  if (started) *started = &m->started;
  return qcclSuccess;
}

}  // extern "C"
