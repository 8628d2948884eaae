// Momentum-corrected allreduce (qccl/qccl_momentum.h), on top of the public C API only.
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "qccl/qccl.h"

struct qcclMomentum {
  qcclMomentumConfig_t config;
  std::vector<float> velocity;  // this rank's local velocity u
  std::vector<float> buffer;    // the averaged velocity B of the last call
  int started = 0;
};

namespace {

// A 1-bit codec's velocity goes through one quantization stage (allgather) rather than two (sra,
// whose owners re-quantize the averaged velocity) up to this many ranks: with two stages the
// momentum-corrected MLP example trained worse than exact averaging late in training, with one it
// tracked it (examples/cpp/README.md). Allgather sends (n - 1) encoded copies per rank against sra's
// 2 (n - 1) / n, so beyond 8 ranks sra's bytes win. An explicit opts->algo is always respected.
constexpr int kMaxAllgatherRanks = 8;

bool validConfig(const qcclMomentumConfig_t& c) {
  return c.structSize == sizeof(qcclMomentumConfig_t) && c.momentum > 0.0f && c.momentum < 1.0f &&
         c.dampening >= 0.0f && c.dampening < 1.0f && c.weightDecay >= 0.0f && std::isfinite(c.weightDecay) &&
         (c.nesterov == 0 || c.nesterov == 1) && !(c.nesterov && c.dampening != 0.0f);
}

}  // namespace

extern "C" {

qcclResult_t qcclMomentumCreate(qcclMomentum_t* momentum, size_t count, const qcclMomentumConfig_t* config) {
  if (!momentum) return qcclInvalidArgument;
  *momentum = nullptr;
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  if (config) c = *config;
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
  std::vector<float> u(count);
  for (size_t i = 0; i < count; i++) {
    float d = c.weightDecay != 0.0f ? grad[i] + c.weightDecay * param[i] : grad[i];
    u[i] = m->started ? c.momentum * m->velocity[i] + keep * d : d;
  }
  // Out of place: the averaged velocity lands in grad, u stays this rank's.
  qcclTensorOpts_t o = *opts;
  int nranks = 0;
  if (qcclCommCount(comm, &nranks) != qcclSuccess) return qcclInvalidArgument;
  if ((o.algo < 0 || o.algo == qcclAlgoAuto) && (o.codec == qcclCodecOneBit || o.codec == qcclCodecSignScale) &&
      nranks <= kMaxAllgatherRanks)
    o.algo = qcclAlgoAllgather;  // one quantization stage: see kMaxAllgatherRanks
  qcclResult_t r = qcclAllreduce(u.data(), grad, count, qcclFloat32, qcclAvg, &o, comm, nullptr);
  if (r != qcclSuccess) return r;
  for (size_t i = 0; i < count; i++) {
    const float now = grad[i];
    if (c.nesterov) {
      // torch.optim.SGD: d = (B_t - mu * B_{t-1}) / (1 - dampening) (the buffer's increment), dir = d + mu * B_t.
      const float d = m->started ? (now - c.momentum * m->buffer[i]) / keep : now;
      grad[i] = d + c.momentum * now;
    }
    m->buffer[i] = now;
  }
  m->velocity.swap(u);
  m->started = 1;
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
