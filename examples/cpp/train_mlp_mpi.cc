// Data-parallel training of the MLP of mlp.hpp with nothing but MPI: every rank computes the
// gradient of its own batch and the gradient is summed with MPI_Allreduce. It does not include or
// link qccl. Run with libqccl_mpi.so preloaded, its MPI_Allreduce is compressed with no change to
// the program (README.md, "Drop-in MPI_Allreduce"); see README.md in this directory.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mlp.hpp"

namespace {

struct Args {
  int steps = 400;
  int batch = 64;
  float lr = 0.02f;
  float momentum = 0.9f;
  int hidden = 256;
  int printEvery = 10;
  uint64_t seed = 1;
  long fusionBytes = 0;
  bool syncTiming = false;
  bool check = false;
};

const char* kUsage =
    "usage: train-mlp-mpi [--steps N] [--batch B] [--lr X] [--momentum X] [--hidden H] [--seed S]\n"
    "                     [--print-every K] [--fusion-bytes F] [--sync-timing] [--check]\n"
    "  --fusion-bytes F  0 (default): one in-place MPI_Allreduce of the whole flattened gradient; else the\n"
    "                    gradient goes through one F-byte buffer, F bytes per call, the way a fusion buffer\n"
    "                    carries different tensors at one address\n"
    "  --sync-timing     MPI_Barrier before each timed step, so the MPI_Allreduce time excludes waiting\n"
    "                    for the slowest rank\n"
    "  --check           exit 1 unless the loss fell by a third and every rank ends with the same weights\n";

bool parseNumber(const char* s, double lo, double hi, double* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || *end || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

// Returns an error message, "help", or "" when argv is valid.
std::string parseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; i++) {
    std::string k = argv[i];
    if (k == "--check" || k == "--sync-timing") {
      (k == "--check" ? a->check : a->syncTiming) = true;
      continue;
    }
    if (k == "-h" || k == "--help") return "help";
    if (i + 1 >= argc) return k + " needs a value";
    const char* v = argv[++i];
    double x = 0;
    bool ok = true;
    if (k == "--steps" && (ok = parseNumber(v, 1, 1e6, &x))) {
      a->steps = static_cast<int>(x);
    } else if (k == "--batch" && (ok = parseNumber(v, 1, 1 << 20, &x))) {
      a->batch = static_cast<int>(x);
    } else if (k == "--hidden" && (ok = parseNumber(v, 1, 1 << 20, &x))) {
      a->hidden = static_cast<int>(x);
    } else if (k == "--print-every" && (ok = parseNumber(v, 1, 1e6, &x))) {
      a->printEvery = static_cast<int>(x);
    } else if (k == "--seed" && (ok = parseNumber(v, 0, 2147483647, &x))) {
      a->seed = static_cast<uint64_t>(x);
    } else if (k == "--fusion-bytes" && (ok = parseNumber(v, 0, 1 << 30, &x))) {
      a->fusionBytes = static_cast<long>(x);
      ok = a->fusionBytes % 4 == 0;
    } else if (k == "--lr" && (ok = parseNumber(v, 1e-6, 10, &x))) {
      a->lr = static_cast<float>(x);
    } else if (k == "--momentum" && (ok = parseNumber(v, 0, 0.999, &x))) {
      a->momentum = static_cast<float>(x);
    } else if (ok) {
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

// Sums the gradient across ranks; returns the seconds spent inside MPI_Allreduce.
double sumGradient(std::vector<float>& grad, std::vector<float>& fusion) {
  double t0 = MPI_Wtime();
  if (fusion.empty()) {
    MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(grad.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return MPI_Wtime() - t0;
  }
  double sec = 0;
  for (size_t off = 0; off < grad.size(); off += fusion.size()) {
    const size_t n = std::min(fusion.size(), grad.size() - off);
    std::memcpy(fusion.data(), grad.data() + off, n * sizeof(float));
    t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, fusion.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    sec += MPI_Wtime() - t0;
    std::memcpy(grad.data() + off, fusion.data(), n * sizeof(float));
  }
  return sec;
}

int train(const Args& a, int rank, int nranks) {
  const Task task(a.seed);
  Mlp model(kInputs, a.hidden, kClasses, a.seed + 1);
  std::vector<float> grad(model.params.size()), velocity(model.params.size(), 0.0f);
  std::vector<float> fusion(static_cast<size_t>(a.fusionBytes) / sizeof(float));
  std::mt19937_64 rng(a.seed * 1000003 + static_cast<uint64_t>(rank));  // a different shard per rank
  Batch batch(a.batch);
  if (rank == 0)
    std::printf(
        "# train-mlp-mpi: %d ranks, %zu parameters (%.2f MiB gradient), batch %d per rank, lr %g, momentum %g, "
        "fusion %ld bytes\n# step loss\n",
        nranks, model.params.size(), model.params.size() * 4.0 / (1 << 20), a.batch, a.lr, a.momentum, a.fusionBytes);
  std::vector<double> curve, commSec;
  for (int step = 0; step < a.steps; step++) {
    task.sample(rng, batch);
    double loss = model.lossAndGradient(batch, grad);
    if (a.syncTiming) MPI_Barrier(MPI_COMM_WORLD);
    commSec.push_back(sumGradient(grad, fusion));
    const float inv = 1.0f / static_cast<float>(nranks);
    for (size_t i = 0; i < grad.size(); i++) {
      velocity[i] = a.momentum * velocity[i] + grad[i] * inv;
      model.params[i] -= a.lr * velocity[i];
    }
    MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    loss /= nranks;
    curve.push_back(loss);
    if (rank == 0 && (step % a.printEvery == 0 || step == a.steps - 1)) std::printf("%d %.4f\n", step, loss);
  }
  uint64_t h = fnv1a(model.params), hMin = h, hMax = h;
  MPI_Allreduce(MPI_IN_PLACE, &hMin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hMax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  // Mean and median over steps of this rank's MPI_Allreduce time, then the slowest rank's of each.
  double comm[2] = {0, 0};
  for (double t : commSec) comm[0] += t / commSec.size();
  std::sort(commSec.begin(), commSec.end());
  comm[1] = commSec[commSec.size() / 2];
  MPI_Allreduce(MPI_IN_PLACE, comm, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  size_t w = std::max<size_t>(1, curve.size() / 10);
  double first = 0, last = 0;
  for (size_t i = 0; i < w; i++) first += curve[i] / w, last += curve[curve.size() - 1 - i] / w;
  int rc = 0;
  if (rank == 0) {
    std::printf(
        "# loss %.4f -> %.4f (mean of first/last %zu steps), test accuracy %.2f%%, MPI_Allreduce %.3f ms/step "
        "(mean; median %.3f ms; slowest rank)\n",
        first, last, w, 100.0 * model.accuracy(task.testSet()), 1e3 * comm[0], 1e3 * comm[1]);
    std::printf("# weights %s across ranks\n", hMin == hMax ? "identical" : "DIFFER");
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
  std::string err = parseArgs(argc, argv, &args);  // every rank parses the same argv
  if (!err.empty()) {
    if (rank == 0) std::fprintf(stderr, "%s%s", err == "help" ? "" : ("train-mlp-mpi: " + err + "\n").c_str(), kUsage);
    MPI_Finalize();
    return err == "help" ? 0 : 2;
  }
  int rc = train(args, rank, nranks);
  MPI_Finalize();
  return rc;
}
