// Data-parallel training of a small MLP through the qccl C API over MPI.
//
// Every rank draws its own batches from one synthetic task (labels from a fixed random teacher
// network), computes gradients on them, averages the flattened gradient across ranks with
// qcclAllreduce (or plain MPI_Allreduce with --codec mpi, the uncompressed baseline) and takes an SGD
// step. Rank 0 prints the loss curve and the final test accuracy. See README.md.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mlp.hpp"
#include "qccl/qccl.h"
#include "qccl/qccl_mpi.h"

namespace {

struct Args {
  std::string codec = "none";
  int bits = 0;
  std::string algo = "default";
  int steps = 400;
  int batch = 64;
  float lr = 0.02f;
  float momentum = 0.9f;
  int hidden = 256;
  int printEvery = 10;
  uint64_t seed = 1;
  bool check = false;
  std::string momentumMode = "dgc";   // dgc: qcclMomentumAllreduce; plain: allreduce the gradient, momentum after
  std::string schedule = "constant";  // constant, or cosine: lr * (1 + cos(pi * step / steps)) / 2
  int rotation = QCCL_MOMENTUM_ROTATION_AUTO;  // qcclMomentumConfig_t.rotation
  float residualDecay = 1.0f;                  // qcclMomentumConfig_t.residualDecay
  float feedbackGain = -1.0f;                  // qcclMomentumConfig_t.feedbackGain; < 0: the library's default
};

const char* kUsage =
    "usage: qccl-train-mlp [--codec none|fp16|bf16|onebit|signscale|maxmin|dyn8|mpi] [--bits 0|2|4|8]\n"
    "                      [--algo default|auto|ring|sra|allgather] [--steps N] [--batch B] [--lr X]\n"
    "                      [--momentum X] [--momentum-mode dgc|plain] [--hidden H] [--seed S]\n"
    "                      [--schedule constant|cosine] [--rotation B] [--residual-decay X]\n"
    "                      [--feedback-gain X] [--print-every K] [--check]\n"
    "  --codec mpi   average with MPI_Allreduce instead of qccl (the uncompressed baseline)\n"
    "  --bits 0      the communicator's default (4 for maxmin)\n"
    "  --batch       samples per rank per step\n"
    "  --momentum-mode dgc (default): qcclMomentumAllreduce compresses each rank's velocity (momentum\n"
    "                correction); plain: compress the gradient and apply momentum afterwards\n"
    "  --schedule    constant (default): lr every step; cosine: lr decays to 0 along half a cosine\n"
    "  --rotation B  the momentum-corrected allreduce rotates the velocity in blocks of B (a power of\n"
    "                two, 32-65536) before the codec; 0 = never; default: 512 for onebit and signscale\n"
    "  --residual-decay X  in (0, 1]: factor on its error-feedback residual after each exchange\n"
    "                (default 1, plain error feedback)\n"
    "  --feedback-gain X  in (0, 1]: the share of the accumulated codec error fed into each exchange\n"
    "                (qcclMomentumConfig_t.feedbackGain; default: the library's; 1 = plain error feedback)\n"
    "  --check       exit 1 unless the loss fell by a third and every rank ends with the same weights\n";

struct Named {
  const char* name;
  int value;
};
const Named kCodecs[] = {{"none", qcclCodecNone},           {"fp16", qcclCodecFp16},
                         {"bf16", qcclCodecBf16},           {"onebit", qcclCodecOneBit},
                         {"signscale", qcclCodecSignScale}, {"maxmin", qcclCodecMaxMin},
                         {"dyn8", qcclCodecDyn8},           {"mpi", -2}};
const Named kAlgos[] = {{"default", -1},
                        {"auto", qcclAlgoAuto},
                        {"ring", qcclAlgoRing},
                        {"sra", qcclAlgoSra},
                        {"allgather", qcclAlgoAllgather}};

template <size_t N>
bool lookup(const Named (&table)[N], const std::string& s, int* out) {
  for (const Named& n : table)
    if (s == n.name) return *out = n.value, true;
  return false;
}

bool parseInt(const char* s, long lo, long hi, int* out) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseFloat(const char* s, float lo, float hi, float* out) {
  char* end = nullptr;
  float v = std::strtof(s, &end);
  if (end == s || *end || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

// Returns an error message, or "" when argv is valid.
std::string parseArgs(int argc, char** argv, Args* a) {
  int dummy = 0;
  for (int i = 1; i < argc; i++) {
    std::string k = argv[i];
    if (k == "--check") {
      a->check = true;
      continue;
    }
    if (k == "-h" || k == "--help") return "help";
    if (i + 1 >= argc) return k + " needs a value";
    const char* v = argv[++i];
    bool ok = true;
    if (k == "--codec") {
      a->codec = v;
      ok = lookup(kCodecs, a->codec, &dummy);
    } else if (k == "--momentum-mode") {
      a->momentumMode = v;
      ok = a->momentumMode == "dgc" || a->momentumMode == "plain";
    } else if (k == "--schedule") {
      a->schedule = v;
      ok = a->schedule == "constant" || a->schedule == "cosine";
    } else if (k == "--algo") {
      a->algo = v;
      ok = lookup(kAlgos, a->algo, &dummy);
    } else if (k == "--bits") {
      ok = parseInt(v, 0, 8, &a->bits) && (a->bits == 0 || a->bits == 2 || a->bits == 4 || a->bits == 8);
    } else if (k == "--steps") {
      ok = parseInt(v, 1, 1000000, &a->steps);
    } else if (k == "--batch") {
      ok = parseInt(v, 1, 1 << 20, &a->batch);
    } else if (k == "--hidden") {
      ok = parseInt(v, 1, 1 << 16, &a->hidden);
    } else if (k == "--print-every") {
      ok = parseInt(v, 1, 1000000, &a->printEvery);
    } else if (k == "--seed") {
      int s = 0;
      ok = parseInt(v, 0, 0x7fffffff, &s);
      a->seed = static_cast<uint64_t>(s);
    } else if (k == "--lr") {
      ok = parseFloat(v, 1e-6f, 10.0f, &a->lr);
    } else if (k == "--momentum") {
      ok = parseFloat(v, 0.0f, 0.999f, &a->momentum);
    } else if (k == "--rotation") {
      ok = parseInt(v, 0, 65536, &a->rotation) &&
           (a->rotation == 0 || (a->rotation >= 32 && (a->rotation & (a->rotation - 1)) == 0));
    } else if (k == "--residual-decay") {
      ok = parseFloat(v, 1e-3f, 1.0f, &a->residualDecay);
    } else if (k == "--feedback-gain") {
      ok = parseFloat(v, 1e-3f, 1.0f, &a->feedbackGain);
    } else {
      return "unknown option " + k;
    }
    if (!ok) return "bad value '" + std::string(v) + "' for " + k;
  }
  return "";
}

uint64_t fnv1a(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

qcclTensorOpts_t tensorOpts(const Args& a) {
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;
  opts.id = 1;  // one flattened tensor: its error-feedback state lives across steps under this id
  lookup(kCodecs, a.codec, &opts.codec);
  opts.bits = a.bits;
  lookup(kAlgos, a.algo, &opts.algo);
  return opts;
}

// Averages the gradient across ranks; returns false (after printing why) on failure.
bool averageGradient(std::vector<float>& grad, const Args& a, qcclComm_t comm, int nranks) {
  if (a.codec == "mpi") {
    MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(grad.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (float& g : grad) g /= static_cast<float>(nranks);
    return true;
  }
  qcclTensorOpts_t opts = tensorOpts(a);
  qcclResult_t r = qcclAllreduce(grad.data(), grad.data(), grad.size(), qcclFloat32, qcclAvg, &opts, comm, nullptr);
  if (r != qcclSuccess) {
    std::fprintf(stderr, "qcclAllreduce failed: %s: %s\n", qcclGetErrorString(r), qcclGetLastError(comm));
    return false;
  }
  return true;
}

int train(const Args& a, int rank, int nranks) {
  qcclComm_t comm = nullptr;
  if (a.codec != "mpi") {
    qcclConfig_t cfg;
    qcclConfigInit(&cfg);
    // The whole model is one small tensor; compress it anyway, the point of the example. On one host
    // auto would otherwise sum exactly (copying fp32 there costs less than any codec's passes), so
    // local runs compress as asked too.
    cfg.minCompressBytes = 0;
    cfg.localCompress = 1;
    qcclResult_t r = qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg);
    if (r != qcclSuccess) {
      std::fprintf(stderr, "rank %d: qcclCommInitMpi failed: %s: %s\n", rank, qcclGetErrorString(r),
                   qcclGetLastError(nullptr));
      return 1;
    }
  }

  const Task task(a.seed);
  Mlp model(kInputs, a.hidden, kClasses, a.seed + 1);
  std::vector<float> grad(model.params.size()), velocity(model.params.size(), 0.0f);
  std::mt19937_64 rng(a.seed * 1000003 + static_cast<uint64_t>(rank));  // a different shard per rank
  Batch batch(a.batch);
  char dgcTag[128] = "";
  if (comm && a.momentum > 0 && a.momentumMode == "dgc") {
    const qcclMomentumConfig_t defaults = QCCL_MOMENTUM_CONFIG_INIT;
    std::snprintf(dgcTag, sizeof dgcTag,
                  " (momentum-corrected allreduce, rotation %s, residual decay %g, feedback gain %g)",
                  a.rotation == QCCL_MOMENTUM_ROTATION_AUTO ? "auto" : std::to_string(a.rotation).c_str(),
                  a.residualDecay, a.feedbackGain > 0 ? a.feedbackGain : defaults.feedbackGain);
  }
  if (rank == 0)
    std::printf(
        "# qccl-train-mlp: %d ranks, codec %s%s, %zu parameters, batch %d per rank, lr %g (%s), momentum %g%s\n"
        "# step loss\n",
        nranks, a.codec.c_str(), a.bits ? (" " + std::to_string(a.bits) + "-bit").c_str() : "", model.params.size(),
        a.batch, a.lr, a.schedule.c_str(), a.momentum, dgcTag);

  // With momentum and a qccl codec, qcclMomentumAllreduce exchanges each rank's velocity and returns
  // the step direction of SGD with momentum (see qccl/qccl_momentum.h).
  qcclMomentum_t mom = nullptr;
  if (comm && a.momentum > 0 && a.momentumMode == "dgc") {
    qcclMomentumConfig_t mc = QCCL_MOMENTUM_CONFIG_INIT;
    mc.momentum = a.momentum;
    mc.rotation = a.rotation;
    mc.residualDecay = a.residualDecay;
    if (a.feedbackGain > 0) mc.feedbackGain = a.feedbackGain;
    if (qcclMomentumCreate(&mom, model.params.size(), &mc) != qcclSuccess) {
      std::fprintf(stderr, "rank %d: qcclMomentumCreate failed\n", rank);
      return 1;
    }
  }
  const qcclTensorOpts_t opts = tensorOpts(a);

  std::vector<double> curve;
  double commSec = 0;
  bool ok = true;
  for (int step = 0; step < a.steps && ok; step++) {
    task.sample(rng, batch);
    double loss = model.lossAndGradient(batch, grad);
    double t0 = MPI_Wtime();
    if (mom) {
      qcclResult_t r =
          qcclMomentumAllreduce(mom, grad.data(), model.params.data(), grad.size(), qcclFloat32, &opts, comm, nullptr);
      if (r != qcclSuccess)
        std::fprintf(stderr, "qcclMomentumAllreduce failed: %s: %s\n", qcclGetErrorString(r), qcclGetLastError(comm));
      ok = r == qcclSuccess;
      int* block = nullptr;
      if (ok && step == 0 && rank == 0 && qcclMomentumGetRotation(mom, &block) == qcclSuccess)
        std::printf("# rotation in use: %s\n", *block ? (std::to_string(*block) + "-element blocks").c_str() : "none");
    } else {
      ok = averageGradient(grad, a, comm, nranks);
    }
    commSec += MPI_Wtime() - t0;
    const float lr = a.schedule == "cosine"
                         ? a.lr * 0.5f * (1.0f + std::cos(3.14159265f * static_cast<float>(step) / a.steps))
                         : a.lr;
    for (size_t i = 0; i < grad.size(); i++) {
      if (mom) {
        model.params[i] -= lr * grad[i];  // grad holds SGD's step direction now
        continue;
      }
      velocity[i] = a.momentum * velocity[i] + grad[i];
      model.params[i] -= lr * velocity[i];
    }
    MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    loss /= nranks;
    curve.push_back(loss);
    if (rank == 0 && (step % a.printEvery == 0 || step == a.steps - 1)) std::printf("%d %.4f\n", step, loss);
  }
  // Every rank learns of a failure anywhere, so none waits on a peer that stopped.
  int allOk = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &allOk, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (mom) qcclMomentumDestroy(mom);
  if (comm) qcclCommDestroy(comm);
  if (!allOk) return 1;

  uint64_t h = fnv1a(model.params), hMin = h, hMax = h;
  MPI_Allreduce(MPI_IN_PLACE, &hMin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hMax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  size_t w = std::max<size_t>(1, curve.size() / 10);
  double first = 0, last = 0;
  for (size_t i = 0; i < w; i++) first += curve[i] / w, last += curve[curve.size() - 1 - i] / w;
  int rc = 0;
  if (rank == 0) {
    std::printf("# loss %.4f -> %.4f (mean of first/last %zu steps), test accuracy %.2f%%, allreduce %.3f ms/step\n",
                first, last, w, 100.0 * model.accuracy(task.testSet()), 1e3 * commSec / a.steps);
    std::printf("# weights %s across ranks (hash %016llx)\n", hMin == hMax ? "identical" : "DIFFER",
                static_cast<unsigned long long>(hMin));
    if (a.check && (hMin != hMax || !(last < first * 2.0 / 3.0))) {
      std::fprintf(stderr, "check failed: %s\n", hMin != hMax ? "weights differ across ranks" : "loss did not fall");
      rc = 1;
    }
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  Args args;
  // Every rank parses the same argv, so all of them stop together on bad input.
  std::string err = parseArgs(argc, argv, &args);
  if (!err.empty()) {
    if (rank == 0) std::fprintf(stderr, "%s%s", err == "help" ? "" : ("qccl-train-mlp: " + err + "\n").c_str(), kUsage);
    MPI_Finalize();
    return err == "help" ? 0 : 2;
  }
  int rc = train(args, rank, nranks);
  MPI_Finalize();
  return rc;
}
