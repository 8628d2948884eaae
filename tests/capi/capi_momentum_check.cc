// qcclMomentum_t (qccl/qccl_momentum.h) under mpirun:
//  - codec none: the returned direction steps the parameters exactly as SGD with momentum (plain,
//    nesterov, dampening, weight decay) on the averaged gradient does, computed here on every rank
//    from every rank's gradient (the gradients are a known function of rank, step and parameters);
//  - onebit: a noisy quadratic per rank converges to the average minimizer, replicas bit-identical;
//  - the rotation: exact with codec none, and closer to the exact average with onebit where a few
//    elements dominate their buckets; residualDecay scales the residual the call leaves;
//  - feedbackGain: the codec sees gain times the accumulated error, and the rest is kept; the same
//    for a tensor's own setting (qcclTensorSetFeedbackGain) on qcclAllreduce, Allgather, ReduceScatter;
//  - bad arguments are refused.
// Exit status 0 when every check passed on every rank.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "mpi_check.hpp"

namespace {

constexpr size_t kCount = 5000;

// Rank r's gradient: pulls the parameters towards a rank-specific target, plus a step-dependent wobble.
float gradient(int rank, int step, size_t i, float p) {
  float target = std::sin(0.001f * static_cast<float>(i) * static_cast<float>(rank + 1)) + 0.1f * rank;
  return (p - target) + 0.3f * std::cos(0.37f * static_cast<float>(step) + 0.01f * static_cast<float>(i) + rank);
}

bool sameOnAllRanks(const std::vector<float>& v) { return ::sameOnAllRanks(v.data(), v.size() * sizeof(float)); }

// torch.optim.SGD on the exactly averaged gradient (in double), for comparison.
void referenceStep(const qcclMomentumConfig_t& c, int step, std::vector<double>& p, std::vector<double>& buf,
                   double lr) {
  for (size_t i = 0; i < p.size(); i++) {
    double g = 0;
    for (int r = 0; r < gSize; r++) g += gradient(r, step, i, static_cast<float>(p[i]));
    double d = g / gSize + c.weightDecay * p[i];
    buf[i] = step == 0 ? d : c.momentum * buf[i] + (1.0 - c.dampening) * d;
    p[i] -= lr * (c.nesterov ? d + c.momentum * buf[i] : buf[i]);
  }
}

void checkExact(qcclComm_t comm, const qcclMomentumConfig_t& c, const char* name) {
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, kCount, &c) == qcclSuccess, "%s", name);
  std::vector<float> p(kCount, 0.5f), g(kCount);
  std::vector<double> pr(kCount, 0.5), br(kCount, 0.0);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = 11;
  opts.codec = qcclCodecNone;
  const double lr = 0.05;
  for (int step = 0; step < 30; step++) {
    for (size_t i = 0; i < kCount; i++) g[i] = gradient(gRank, step, i, p[i]);
    qcclResult_t r = qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr);
    EXPECT(r == qcclSuccess, "%s: %s", name, qcclGetLastError(comm));
    for (size_t i = 0; i < kCount; i++) p[i] -= static_cast<float>(lr) * g[i];
    referenceStep(c, step, pr, br, lr);
  }
  double worst = 0;
  for (size_t i = 0; i < kCount; i++) worst = std::max(worst, std::fabs(p[i] - pr[i]));
  EXPECT(worst < 1e-4, "%s: |param - reference| up to %g", name, worst);
  EXPECT(sameOnAllRanks(p), "%s: replicas differ", name);
  qcclMomentumDestroy(m);
}

void checkOnebitConverges(qcclComm_t comm) {
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  c.nesterov = 1;
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, kCount, &c) == qcclSuccess, "create");
  std::vector<float> p(kCount, 2.0f), g(kCount);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = 12;
  opts.codec = qcclCodecOneBit;
  opts.algo = qcclAlgoSra;
  auto distance = [&]() {  // to the minimizer of the averaged, wobble-free objective
    double s = 0;
    for (size_t i = 0; i < kCount; i++) {
      double t = 0;
      for (int r = 0; r < gSize; r++) t += std::sin(0.001 * static_cast<double>(i) * (r + 1)) + 0.1 * r;
      s += (p[i] - t / gSize) * (p[i] - t / gSize);
    }
    return std::sqrt(s);
  };
  const double before = distance();
  for (int step = 0; step < 150; step++) {
    for (size_t i = 0; i < kCount; i++) g[i] = gradient(gRank, step, i, p[i]);
    qcclResult_t r = qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr);
    EXPECT(r == qcclSuccess, "onebit: %s", qcclGetLastError(comm));
    for (size_t i = 0; i < kCount; i++) p[i] -= 0.05f * g[i];
  }
  const double after = distance();
  // The wobble alone keeps |p - minimizer| near 0.3 * lr-scaled oscillation; onebit must get there too.
  EXPECT(after < 0.1 * before, "onebit: distance %g -> %g", before, after);
  EXPECT(sameOnAllRanks(p), "onebit: replicas differ");
  float *u = nullptr, *b = nullptr;
  int* started = nullptr;
  EXPECT(qcclMomentumGetState(m, &u, &b, &started) == qcclSuccess && u && b && started && *started == 1, "state");
  int* block = nullptr;
  // The first velocity is dominated by p - target, smooth and of one sign per bucket: not rotated.
  EXPECT(qcclMomentumGetRotation(m, &block) == qcclSuccess && block && *block == 0, "auto rotation chose %d",
         block ? *block : -2);
  qcclMomentumDestroy(m);
}

// Rotation: codec none with an explicit block still steps like SGD on the exact average (rotating and
// rotating back is exact up to float rounding; 5000 elements leave a tail outside the blocks). On
// buckets in which a few elements dominate, onebit's average of one call is closer to the exact one
// with the rotation than without, and auto chooses it; on smooth, same-signed buckets it is the other
// way round, and auto does not rotate.
// codec: the tensor option; qcclCodecDefault with a communicator whose config names onebit.
double oneCallError(qcclComm_t comm, int rotation, bool heavy, uint64_t id, int* chosen, int codec = qcclCodecOneBit) {
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  c.rotation = rotation;
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, kCount, &c) == qcclSuccess, "create, rotation %d", rotation);
  // Every rank sends a multiple of one pattern, so the average is that pattern times a known factor.
  auto value = [heavy](int rank, size_t i) {
    const float scale = 1.0f + 0.1f * static_cast<float>(rank);
    if (heavy) {  // zero-mean buckets, one element in 32 thirty times larger than the rest
      const float v = std::sin(0.7f * static_cast<float>(i));
      return scale * (i % 32 == 5 ? 30.0f * v : v);
    }
    return scale * (1.0f + 0.2f * std::sin(0.001f * static_cast<float>(i)));  // smooth, positive
  };
  std::vector<float> g(kCount), p(kCount, 0.0f);
  for (size_t i = 0; i < kCount; i++) g[i] = value(gRank, i);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = id;
  opts.codec = codec;
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr) == qcclSuccess,
         "rotation %d: %s", rotation, qcclGetLastError(comm));
  double num = 0, den = 0;
  for (size_t i = 0; i < kCount; i++) {
    double exact = 0;
    for (int r = 0; r < gSize; r++) exact += value(r, i);
    exact /= gSize;
    num += (g[i] - exact) * (g[i] - exact);
    den += exact * exact;
  }
  EXPECT(sameOnAllRanks(g), "rotation %d: the average differs across ranks", rotation);
  int* block = nullptr;
  EXPECT(qcclMomentumGetRotation(m, &block) == qcclSuccess && block != nullptr, "qcclMomentumGetRotation");
  *chosen = block ? *block : -2;
  qcclTensorRelease(comm, opts.id);
  qcclMomentumDestroy(m);
  return std::sqrt(num / den);
}

// onebitComm: a communicator whose config names onebit, used with qcclCodecDefault.
void checkRotation(qcclComm_t comm, qcclComm_t onebitComm) {
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  c.rotation = 64;
  checkExact(comm, c, "codec none, rotation 64");
  for (bool heavy : {true, false}) {
    int chosen[3] = {0, 0, 0};
    const double plain = oneCallError(comm, 0, heavy, 30, &chosen[0]);
    const double rotated = oneCallError(comm, 512, heavy, 31, &chosen[1]);
    const double automatic = oneCallError(comm, QCCL_MOMENTUM_ROTATION_AUTO, heavy, 32, &chosen[2]);
    if (gRank == 0)
      std::printf("onebit, %s buckets: relative error %.3f without rotation, %.3f with, %.3f auto (block %d)\n",
                  heavy ? "heavy-tailed" : "smooth", plain, rotated, automatic, chosen[2]);
    EXPECT(chosen[0] == 0 && chosen[1] == 512, "explicit rotations reported as %d and %d", chosen[0], chosen[1]);
    if (heavy) {
      EXPECT(rotated < 0.8 * plain, "heavy-tailed: relative error %g with the rotation, %g without", rotated, plain);
      EXPECT(chosen[2] == 512 && automatic == rotated, "heavy-tailed: auto chose %d", chosen[2]);
    } else {
      EXPECT(plain < 0.8 * rotated, "smooth: relative error %g without the rotation, %g with", plain, rotated);
      EXPECT(chosen[2] == 0 && automatic == plain, "smooth: auto chose %d", chosen[2]);
    }
    // A tensor that leaves the codec to the communicator's config (onebit) gets the same choice,
    // and the same bits as naming onebit itself.
    int byConfig = -2;
    const double viaConfig =
        oneCallError(onebitComm, QCCL_MOMENTUM_ROTATION_AUTO, heavy, 34, &byConfig, qcclCodecDefault);
    EXPECT(byConfig == chosen[2] && viaConfig == automatic,
           "%s, codec from the config: auto chose %d (error %g), naming onebit chose %d (error %g)",
           heavy ? "heavy-tailed" : "smooth", byConfig, viaConfig, chosen[2], automatic);
  }
  // A value restored through qcclMomentumGetRotation is checked at the next call.
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, kCount, nullptr) == qcclSuccess, "create");
  int* block = nullptr;
  qcclMomentumGetRotation(m, &block);
  *block = 7;
  std::vector<float> g(kCount, 1.0f), p(kCount, 0.0f);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = 33;
  opts.codec = qcclCodecOneBit;
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr) == qcclInvalidArgument,
         "a restored rotation of 7");
  qcclMomentumDestroy(m);
}

// The residual of opts->id after a call is residualDecay times the residual plain error feedback
// leaves (the direction of that call is the same), and a config of the size before the newer fields
// is accepted.
void checkResidualDecay(qcclComm_t comm) {
  const float decays[] = {1.0f, 0.5f};
  std::vector<std::vector<uint8_t>> records;
  std::vector<std::vector<float>> dirs;
  for (int k = 0; k < 2; k++) {
    qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
    c.residualDecay = decays[k];
    qcclMomentum_t m = nullptr;
    EXPECT(qcclMomentumCreate(&m, kCount, &c) == qcclSuccess, "create, decay %g", decays[k]);
    std::vector<float> p(kCount, 0.25f), g(kCount);
    for (size_t i = 0; i < kCount; i++) g[i] = gradient(gRank, 0, i, p[i]);
    qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
    opts.id = 20 + static_cast<uint64_t>(k);
    opts.codec = qcclCodecOneBit;
    opts.algo = qcclAlgoAllgather;  // the worker's residual only
    EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), kCount, qcclFloat32, &opts, comm, nullptr) == qcclSuccess,
           "decay %g: %s", decays[k], qcclGetLastError(comm));
    size_t bytes = 0;
    EXPECT(qcclTensorStateSave(comm, opts.id, nullptr, &bytes) == qcclSuccess && bytes > kCount * sizeof(float),
           "decay %g: state of %zu bytes", decays[k], bytes);
    std::vector<uint8_t> rec(bytes);
    EXPECT(qcclTensorStateSave(comm, opts.id, rec.data(), &bytes) == qcclSuccess, "save");
    records.push_back(rec);
    dirs.push_back(g);
    qcclTensorRelease(comm, opts.id);
    qcclMomentumDestroy(m);
  }
  EXPECT(dirs[0] == dirs[1], "the first call's direction depends on the decay");
  if (records[0].size() == records[1].size() && records[0].size() > kCount * sizeof(float)) {
    const size_t head = records[0].size() - kCount * sizeof(float);
    EXPECT(std::memcmp(records[0].data(), records[1].data(), head) == 0, "record headers differ");
    std::vector<float> plain(kCount), decayed(kCount);
    std::memcpy(plain.data(), records[0].data() + head, kCount * sizeof(float));
    std::memcpy(decayed.data(), records[1].data() + head, kCount * sizeof(float));
    size_t wrong = 0, nonzero = 0;
    for (size_t i = 0; i < kCount; i++) {
      wrong += decayed[i] != 0.5f * plain[i];
      nonzero += plain[i] != 0.0f;
    }
    EXPECT(wrong == 0, "%zu of %zu residuals are not half the plain ones", wrong, kCount);
    EXPECT(nonzero > kCount / 2, "onebit left only %zu nonzero residuals", nonzero);
  } else {
    EXPECT(false, "records of %zu and %zu bytes", records[0].size(), records[1].size());
  }
  // A config built against the header before rotation and residualDecay: accepted, with their defaults.
  qcclMomentumConfig_t old = QCCL_MOMENTUM_CONFIG_INIT;
  old.structSize = offsetof(qcclMomentumConfig_t, rotation);
  old.rotation = 48;  // beyond its structSize: never read
  old.residualDecay = -7.0f;
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, 10, &old) == qcclSuccess && m != nullptr, "a config of the older size");
  qcclMomentumDestroy(m);
}

// The residuals of a record (worker, then owner), past its header of `head` bytes.
std::vector<float> recordResiduals(const std::vector<uint8_t>& rec, size_t head) {
  std::vector<float> r(rec.size() > head ? (rec.size() - head) / sizeof(float) : 0);
  if (!r.empty()) std::memcpy(r.data(), rec.data() + head, r.size() * sizeof(float));
  return r;
}

std::vector<uint8_t> saveState(qcclComm_t comm, uint64_t id) {
  size_t bytes = 0;
  std::vector<uint8_t> rec;
  if (qcclTensorStateSave(comm, id, nullptr, &bytes) != qcclSuccess || bytes == 0) return rec;
  rec.resize(bytes);
  if (qcclTensorStateSave(comm, id, rec.data(), &bytes) != qcclSuccess) rec.clear();
  return rec;
}

// Error control's residual rule, e_gain = e_plain + (e0 - g e0), checked on the records of the
// tensor with gain g (`withGain`), the plain one whose residual was scaled by g (`plain`) and the
// first one's before that call (`before`), each past a header of `head` bytes. Returns the residual
// count and sets *held to how many of them held something back; 0 when the records do not line up.
size_t checkHeldBack(const char* name, const std::vector<uint8_t>& withGain, const std::vector<uint8_t>& plain,
                     const std::vector<uint8_t>& before, size_t head, float gain, size_t* held) {
  *held = 0;
  const bool aligned = head > 0 && withGain.size() == plain.size() && withGain.size() == before.size();
  EXPECT(aligned, "%s: records of %zu, %zu and %zu bytes", name, withGain.size(), plain.size(), before.size());
  if (!aligned) return 0;
  const std::vector<float> eg = recordResiduals(withGain, head), ep = recordResiduals(plain, head),
                           e0 = recordResiduals(before, head);
  size_t wrong = 0;
  for (size_t i = 0; i < eg.size(); i++) {
    const float scaled = gain * e0[i];
    const float want = ep[i] + (e0[i] - scaled);
    wrong += std::fabs(eg[i] - want) > 1e-6f * (std::fabs(want) + std::fabs(e0[i]));
    *held += e0[i] - scaled != 0.0f;
  }
  EXPECT(wrong == 0, "%s: %zu of %zu residuals are not the plain ones plus the held part", name, wrong, eg.size());
  return eg.size();
}

// feedbackGain g: a call sends u + g e (e the accumulated error) and leaves e + u - C(u + g e). Checked
// against plain error feedback (gain 1) whose residual is scaled by g before its second call: both
// codec inputs are then the same, so the directions must be bit-identical, and the gain's residual
// must be the plain one plus the part held back, e - g e. Over allgather (the worker's residual) and
// sra (the owner's too).
void checkFeedbackGain(qcclComm_t comm) {
  const float gain = 0.3f;
  size_t head = 0;  // the record header's size, from an allgather record (worker residual only)
  for (int algo : {static_cast<int>(qcclAlgoAllgather), static_cast<int>(qcclAlgoSra)}) {
    const char* name = algo == qcclAlgoSra ? "sra" : "allgather";
    qcclMomentumConfig_t cg = QCCL_MOMENTUM_CONFIG_INIT, c1 = cg;
    cg.feedbackGain = gain;
    c1.feedbackGain = 1.0f;
    cg.rotation = c1.rotation = 0;
    qcclMomentum_t mg = nullptr, m1 = nullptr;
    EXPECT(qcclMomentumCreate(&mg, kCount, &cg) == qcclSuccess, "%s: create, gain %g", name, gain);
    EXPECT(qcclMomentumCreate(&m1, kCount, &c1) == qcclSuccess, "%s: create, gain 1", name);
    qcclTensorOpts_t og = QCCL_TENSOR_OPTS_INIT;
    og.id = 40 + static_cast<uint64_t>(algo);
    og.codec = qcclCodecOneBit;
    og.algo = algo;
    qcclTensorOpts_t o1 = og;
    o1.id = og.id + 100;
    std::vector<float> p(kCount, 0.25f), gg(kCount), g1(kCount);
    std::vector<uint8_t> first;
    for (int step = 0; step < 2; step++) {
      for (size_t i = 0; i < kCount; i++) gg[i] = g1[i] = gradient(gRank, step, i, p[i]);
      if (step == 1) {
        first = saveState(comm, og.id);
        EXPECT(qcclTensorStateScale(comm, o1.id, gain, nullptr) == qcclSuccess, "%s: scale", name);
      }
      EXPECT(qcclMomentumAllreduce(mg, gg.data(), p.data(), kCount, qcclFloat32, &og, comm, nullptr) == qcclSuccess,
             "%s: gain %g: %s", name, gain, qcclGetLastError(comm));
      EXPECT(qcclMomentumAllreduce(m1, g1.data(), p.data(), kCount, qcclFloat32, &o1, comm, nullptr) == qcclSuccess,
             "%s: gain 1: %s", name, qcclGetLastError(comm));
      EXPECT(gg == g1, "%s, call %d: the directions differ", name, step + 1);
      for (size_t i = 0; i < kCount; i++) p[i] -= 0.05f * gg[i];
    }
    const std::vector<uint8_t> rg = saveState(comm, og.id), r1 = saveState(comm, o1.id);
    if (algo == qcclAlgoAllgather && rg.size() > kCount * sizeof(float)) head = rg.size() - kCount * sizeof(float);
    size_t held = 0;
    if (const size_t residuals = checkHeldBack(name, rg, r1, first, head, gain, &held)) {
      // (One rank: sra's worker residual stays zero and its owner's covers the tensor.)
      EXPECT(held > kCount / 2, "%s: only %zu of %zu residuals held anything back", name, held, residuals);
      if (algo == qcclAlgoSra)
        EXPECT(residuals > kCount, "sra: %zu residuals, no owner residual beside the worker's", residuals);
    }
    qcclTensorRelease(comm, og.id);
    qcclTensorRelease(comm, o1.id);
    qcclMomentumDestroy(mg);
    qcclMomentumDestroy(m1);
  }
  // A config built against the header before feedbackGain: accepted, with its default.
  qcclMomentumConfig_t old = QCCL_MOMENTUM_CONFIG_INIT;
  old.structSize = offsetof(qcclMomentumConfig_t, feedbackGain);
  old.feedbackGain = -7.0f;  // beyond its structSize: never read
  qcclMomentum_t m = nullptr;
  EXPECT(qcclMomentumCreate(&m, 10, &old) == qcclSuccess && m != nullptr, "a config of the size before feedbackGain");
  qcclMomentumDestroy(m);
}

// qcclTensorSetFeedbackGain: the same check as checkFeedbackGain on plain calls, where the gain is a
// setting of the tensor: qcclAllreduce over allgather and sra, qcclAllgather and qcclReduceScatter.
// A tensor with the gain set, called twice, must give the output bits of a tensor without it whose
// residual is scaled by the gain before its second call, and keep that one's residual plus e - g e.
// After qcclTensorRelease the setting is gone: both tensors give the same bits again.
void checkTensorFeedbackGain(qcclComm_t comm) {
  const float gain = 0.4f;
  const size_t per = kCount / static_cast<size_t>(gSize), total = per * static_cast<size_t>(gSize);
  enum Kind { kAllreduceAllgather, kAllreduceSra, kAllgather, kReduceScatter };
  const char* names[] = {"allreduce (allgather)", "allreduce (sra)", "allgather", "reduce-scatter"};
  size_t head = 0;
  for (int kind : {kAllreduceAllgather, kAllreduceSra, kAllgather, kReduceScatter}) {
    const char* name = names[kind];
    const size_t in = kind == kAllgather ? per : total;
    const size_t outCount = kind == kAllgather ? total : kind == kReduceScatter ? per : total;
    qcclTensorOpts_t oa = QCCL_TENSOR_OPTS_INIT;
    oa.id = 60 + static_cast<uint64_t>(kind);
    oa.codec = qcclCodecOneBit;
    oa.algo = kind == kAllreduceSra ? qcclAlgoSra : qcclAlgoAllgather;
    qcclTensorOpts_t ob = oa;
    ob.id = oa.id + 100;
    auto call = [&](const qcclTensorOpts_t& o, const std::vector<float>& x, std::vector<float>& y) {
      if (kind == kAllgather) return qcclAllgather(x.data(), y.data(), in, qcclFloat32, &o, comm, nullptr);
      if (kind == kReduceScatter)
        return qcclReduceScatter(x.data(), y.data(), per, qcclFloat32, qcclAvg, &o, comm, nullptr);
      return qcclAllreduce(x.data(), y.data(), in, qcclFloat32, qcclAvg, &o, comm, nullptr);
    };
    EXPECT(qcclTensorSetFeedbackGain(comm, oa.id, gain) == qcclSuccess, "%s: set the gain: %s", name,
           qcclGetLastError(comm));
    std::vector<float> x(in), ya(outCount), yb(outCount);
    std::vector<uint8_t> first;
    for (int round = 0; round < 2; round++) {  // 0: with the gain on oa; 1: after qcclTensorRelease
      for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < in; i++) x[i] = gradient(gRank, step + 2 * round, i, 0.1f);
        if (step == 1 && round == 0) {
          first = saveState(comm, oa.id);
          EXPECT(qcclTensorStateScale(comm, ob.id, gain, nullptr) == qcclSuccess, "%s: scale", name);
        }
        EXPECT(call(oa, x, ya) == qcclSuccess, "%s: %s", name, qcclGetLastError(comm));
        EXPECT(call(ob, x, yb) == qcclSuccess, "%s: %s", name, qcclGetLastError(comm));
        EXPECT(ya == yb, "%s, round %d, call %d: the outputs differ", name, round, step + 1);
      }
      if (round == 0) {
        const std::vector<uint8_t> ra = saveState(comm, oa.id), rb = saveState(comm, ob.id);
        if (kind == kAllreduceAllgather && ra.size() > total * sizeof(float)) head = ra.size() - total * sizeof(float);
        size_t held = 0;
        const size_t residuals = checkHeldBack(name, ra, rb, first, head, gain, &held);
        // (One rank's reduce-scatter encodes nothing: its shard never leaves it.)
        if (residuals > 0 && (kind != kReduceScatter || gSize > 1))
          EXPECT(held > residuals / 4, "%s: only %zu of %zu residuals held anything back", name, held, residuals);
      }
      qcclTensorRelease(comm, oa.id);  // frees the state and the setting
      qcclTensorRelease(comm, ob.id);
    }
  }
  // Bad settings: refused, and a refused one leaves no setting behind.
  for (float bad : {0.0f, -0.5f, 1.5f, std::nanf(""), std::numeric_limits<float>::infinity()})
    EXPECT(qcclTensorSetFeedbackGain(comm, 70, bad) == qcclInvalidArgument, "gain %g accepted", bad);
  EXPECT(qcclTensorSetFeedbackGain(comm, 0, 0.5f) == qcclInvalidArgument, "id 0 accepted a gain");
  EXPECT(qcclTensorSetFeedbackGain(nullptr, 70, 0.5f) == qcclInvalidArgument, "a NULL comm accepted a gain");
  EXPECT(qcclTensorSetFeedbackGain(comm, 70, 1.0f) == qcclSuccess, "gain 1 (plain error feedback) refused");
}

void checkBadArguments(qcclComm_t comm) {
  qcclMomentum_t m = nullptr;
  qcclMomentumConfig_t c = QCCL_MOMENTUM_CONFIG_INIT;
  c.momentum = 1.0f;
  EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument && m == nullptr, "momentum 1");
  c = QCCL_MOMENTUM_CONFIG_INIT;
  c.nesterov = 1;
  c.dampening = 0.1f;
  EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument, "nesterov with dampening");
  for (float d : {0.0f, -0.5f, 1.5f, std::nanf("")}) {
    c = QCCL_MOMENTUM_CONFIG_INIT;
    c.residualDecay = d;
    EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument && m == nullptr, "residual decay %g", d);
    c = QCCL_MOMENTUM_CONFIG_INIT;
    c.feedbackGain = d;
    EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument && m == nullptr, "feedback gain %g", d);
  }
  for (int r : {-2, 1, 16, 48, 131072}) {
    c = QCCL_MOMENTUM_CONFIG_INIT;
    c.rotation = r;
    EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument && m == nullptr, "rotation %d", r);
  }
  c = QCCL_MOMENTUM_CONFIG_INIT;
  c.structSize = sizeof(c) + 8;
  EXPECT(qcclMomentumCreate(&m, 10, &c) == qcclInvalidArgument && m == nullptr, "unknown structSize");
  EXPECT(qcclMomentumCreate(&m, 10, nullptr) == qcclSuccess, "defaults");
  std::vector<float> g(10), p(10);
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;  // id 0
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), 10, qcclFloat32, &opts, comm, nullptr) == qcclInvalidArgument,
         "id 0");
  opts.id = 13;
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), 9, qcclFloat32, &opts, comm, nullptr) == qcclInvalidArgument,
         "count");
  EXPECT(qcclMomentumAllreduce(m, g.data(), p.data(), 10, qcclFloat16, &opts, comm, nullptr) == qcclInvalidArgument,
         "dtype");
  qcclMomentumDestroy(m);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  qcclConfig_t cfg;
  qcclConfigInit(&cfg);
  cfg.timeoutSec = 60;
  qcclComm_t comm = nullptr;
  if (qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg) != qcclSuccess) {
    std::fprintf(stderr, "[rank %d] qcclCommInitMpi failed\n", gRank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  qcclMomentumConfig_t plain = QCCL_MOMENTUM_CONFIG_INIT, nesterov = plain, damp = plain;
  nesterov.nesterov = 1;
  nesterov.weightDecay = 1e-3f;
  damp.momentum = 0.8f;
  damp.dampening = 0.3f;
  damp.weightDecay = 1e-2f;
  checkExact(comm, plain, "momentum");
  checkExact(comm, nesterov, "nesterov + weight decay");
  checkExact(comm, damp, "dampening + weight decay");
  checkOnebitConverges(comm);
  qcclConfig_t onebitCfg = cfg;
  onebitCfg.codec = qcclCodecOneBit;
  qcclComm_t onebitComm = nullptr;
  if (qcclCommInitMpi(&onebitComm, MPI_COMM_WORLD, &onebitCfg) != qcclSuccess) {
    std::fprintf(stderr, "[rank %d] qcclCommInitMpi (onebit config) failed\n", gRank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  checkRotation(comm, onebitComm);
  qcclCommDestroy(onebitComm);
  checkResidualDecay(comm);
  checkFeedbackGain(comm);
  checkTensorFeedbackGain(comm);
  checkBadArguments(comm);
  qcclCommDestroy(comm);
  int failures = gFailures;
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0) std::printf("capi_momentum_check: %s\n", failures ? "FAILED" : "ok");
  MPI_Finalize();
  return failures ? 1 : 0;
}
