// Momentum-corrected allreduce (qccl/qccl_momentum.h), on top of the public C API only.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "capi_internal.hpp"
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
constexpr int kAutoRotationBlock = 512;  // the codecs' default bucket
constexpr int kMinRotationBlock = 32, kMaxRotationBlock = 65536;

bool validRotation(int r) {
  return r == 0 || r == QCCL_MOMENTUM_ROTATION_AUTO ||
         (r >= kMinRotationBlock && r <= kMaxRotationBlock && (r & (r - 1)) == 0);
}

bool validConfig(const qcclMomentumConfig_t& c) {
  return validRotation(c.rotation) && c.residualDecay > 0.0f && c.residualDecay <= 1.0f && c.feedbackGain > 0.0f &&
         c.feedbackGain <= 1.0f && c.momentum > 0.0f && c.momentum < 1.0f && c.dampening >= 0.0f &&
         c.dampening < 1.0f && c.weightDecay >= 0.0f && std::isfinite(c.weightDecay) &&
         (c.nesterov == 0 || c.nesterov == 1) && !(c.nesterov && c.dampening != 0.0f);
}

// The rotation's diagonal for a block of n: element i's sign is the top bit of splitmix64(i), the
// same on every rank and in every run.
std::vector<float> rotationSigns(int n) {
  std::vector<float> d(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) {
    uint64_t z = static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    d[static_cast<size_t>(i)] = (z >> 63) != 0 ? -1.0f : 1.0f;
  }
  return d;
}

// Four floats in SSE registers (GCC and Clang vector extensions; no ISA beyond the baseline).
// Loads and stores go through memcpy, so no alignment is assumed.
typedef float F4 __attribute__((vector_size(16)));
typedef int I4 __attribute__((vector_size(16)));
#if defined(__clang__)
#define QCCL_SHUFFLE4(v, a, b, c, d) __builtin_shufflevector(v, v, a, b, c, d)
#else
#define QCCL_SHUFFLE4(v, a, b, c, d) __builtin_shuffle(v, (I4){a, b, c, d})
#endif

inline F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, F4 v) { std::memcpy(p, &v, sizeof v); }

// In place, the unnormalized Walsh-Hadamard transform of n floats (n a power of two, >= 8), H H = n I,
// stage by stage (h = 1, 2, 4, ...), each butterfly (x, y) -> (x + y, x - y). The input is read from
// `src` (a itself when NULL); `pre`, when given, multiplies it element-wise first (the diagonal D).
// The first three stages run in registers, eight elements at a time: x - y is computed as
// x + (-1 * y), which IEEE makes the same bits.
void walshHadamard(float* a, size_t n, const float* src, const float* pre) {
  if (!src) src = a;
  const F4 alt = {1.0f, -1.0f, 1.0f, -1.0f}, pairs = {1.0f, 1.0f, -1.0f, -1.0f};
  for (size_t i = 0; i < n; i += 8) {
    F4 v[2];
    for (int k = 0; k < 2; k++) {
      F4 x = load4(src + i + 4 * k);
      if (pre) x = x * load4(pre + i + 4 * k);
      x = QCCL_SHUFFLE4(x, 0, 0, 2, 2) + QCCL_SHUFFLE4(x, 1, 1, 3, 3) * alt;       // h = 1
      v[k] = QCCL_SHUFFLE4(x, 0, 1, 0, 1) + QCCL_SHUFFLE4(x, 2, 3, 2, 3) * pairs;  // h = 2
    }
    store4(a + i, v[0] + v[1]);  // h = 4
    store4(a + i + 4, v[0] - v[1]);
  }
  // Then two stages per pass (h and 2h): each group of four elements j, j + h, j + 2h, j + 3h takes
  // the same butterflies in the same order as two passes would, with half the loads and stores.
  size_t h = 8;
  for (; 4 * h <= n; h *= 4)
    for (size_t i = 0; i < n; i += 4 * h)
      for (size_t j = i; j < i + h; j += 4) {
        const F4 x0 = load4(a + j), x1 = load4(a + j + h), x2 = load4(a + j + 2 * h), x3 = load4(a + j + 3 * h);
        const F4 s0 = x0 + x1, d0 = x0 - x1, s1 = x2 + x3, d1 = x2 - x3;
        store4(a + j, s0 + s1);
        store4(a + j + h, d0 + d1);
        store4(a + j + 2 * h, s0 - s1);
        store4(a + j + 3 * h, d0 - d1);
      }
  if (h < n)  // an odd number of stages left: the last one alone
    for (size_t j = 0; j < h; j += 4) {
      const F4 x = load4(a + j), y = load4(a + j + h);
      store4(a + j, x + y);
      store4(a + j + h, x - y);
    }
}

// In place, the inverse of the rotation for one block of n: x = (1/n) D H x (1/n a power of two,
// exact).
void rotateBackBlock(float* x, size_t n, const float* d) {
  const F4 inv = F4{} + 1.0f / static_cast<float>(n);
  walshHadamard(x, n, nullptr, nullptr);
  for (size_t i = 0; i < n; i += 4) store4(x + i, load4(x + i) * (load4(d + i) * inv));
}

// What a 1-bit codec loses of x (squared error), bucket by bucket: onebit sends the mean of a bucket's
// positive and of its negative elements, signscale each sign with the mean magnitude.
double oneBitLoss(const float* x, size_t count, bool twoMeans) {
  double loss = 0;
  for (size_t b = 0; b < count; b += kAutoRotationBlock) {
    const size_t e = std::min(count, b + kAutoRotationBlock);
    double pos = 0, neg = 0, mag = 0, sq = 0;
    size_t npos = 0, nneg = 0;
    for (size_t i = b; i < e; i++) {
      const double v = x[i];
      sq += v * v;
      mag += std::fabs(v);
      if (v > 0) pos += v, npos++;
      if (v < 0) neg += v, nneg++;
    }
    if (twoMeans)
      loss += sq - (npos ? pos * pos / static_cast<double>(npos) : 0.0) -
              (nneg ? neg * neg / static_cast<double>(nneg) : 0.0);
    else
      loss += sq - mag * mag / static_cast<double>(e - b);
  }
  return loss;
}

// Auto rotation, at a tensor's first call: rotate from then on when the codec's loss on the rotated
// velocities, summed over ranks, is below kAutoRotationGain of its loss on them as they are. The sums
// go through one uncompressed allreduce, so every rank takes the same decision.
constexpr double kAutoRotationGain = 0.9;

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
    if (m->signs.size() != n) m->signs = rotationSigns(static_cast<int>(n));
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
