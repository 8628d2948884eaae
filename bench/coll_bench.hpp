// Shared between the parts of qccl-bench allreduce / allgather / reducescatter: the options,
// one row of results, the collective under test, and the report (coll_report.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "baselines.hpp"
#include "model.hpp"
#include "qccl/qccl.h"

namespace collbench {

extern int gRank, gSize;
extern const char kCollHelp[];

/// Exits the whole job with the communicator's last error when r is not qcclSuccess.
void qc(qcclResult_t r, qcclComm_t comm, const char* what);
const char* algoName(int a);

struct Args {
  bool allgather = false, reduceScatter = false;
  size_t minBytes = 1 << 20, maxBytes = 64 << 20;
  double factor = 2.0;
  int iters = 20, warmup = 5, check = 0;
  std::string codec, algo, transport = "mpi", baselines = "all";
  int bits = 0;
  bool json = false, csv = false;
};

struct Row {
  size_t size = 0, count = 0;
  double timeS = 0, mpiTimeS = 0, fp16TimeS = 0;
  std::vector<double> times;  // qccl's slowest-rank time of every timed call, in call order
  std::vector<bench::Baseline> baselines;
  bench::Baseline best;
  double wireBytes = 0, interHostBytes = 0, ratio = 0, relErr = 0;
  bool checked = false;
  uint64_t wrong = 0, peakMem = 0, maxRss = 0;
  // Per call, mean over ranks: seconds encoding, decoding, waiting (of which idle), process CPU.
  double encS = 0, decS = 0, waitS = 0, idleS = 0, cpuS = 0, sysS = 0;
  // Per call, mean over ranks: the scheduler's doing (ranks sharing cores): involuntary and
  // voluntary context switches, and migrations between CPUs (-1 where /proc/self/sched lacks them).
  double nivcsw = 0, nvcsw = 0, migrations = -1;
  std::vector<int> rankCpus;  // the CPU each rank was on when its timed calls ended (-1: unknown)
  // sra and allgather rows: the call's messages replayed with no codec (wire_probe.hpp), their bytes
  // to the other ranks and the replay's process CPU per rank (mean over ranks); the chunk rounds of
  // the call's pipeline.
  double probeS = 0, probeBytes = 0, probeCpuS = 0, chunkRounds = 1;
  // From the model, after every row ran: wire and CPU seconds (codec, plus the replay's transport
  // CPU where there is one, times the CPU share), their pipelined sum, the
  // break-even link rate (-1: no ring fit to scale the wire by).
  double wireModelS = -1, cpuModelS = -1, codecModelS = -1, predictedS = -1, breakevenGbit = -1;
  // The codec seconds at every rank's throughput at once (measureCodec), for comparison.
  double codecAllModelS = -1;
  std::string ran;  // what the timed calls ran (allreduce: qcclCommGetLastAlgo, "native" for the MPI library's)
};

struct Bench {
  Args a;
  qcclComm_t comm = nullptr;
  qcclConfig_t cfg{};
  qcclTensorOpts_t opts = QCCL_TENSOR_OPTS_INIT;  // the codec under test
  // Codec throughput, GB/s of fp32 per rank: rank 0 alone (the others asleep), and every rank at
  // once, the slowest rank's wall time (measureCodec).
  double encGBps = 0, decGBps = 0, encGBpsAll = 0, decGBpsAll = 0;
  int wireBits = 32;  // bits per element on the wire, for the reports

  // The collective under test (or the fp16 baseline) from send to recv.
  void run(const float* send, float* recv, size_t count, const qcclTensorOpts_t& t, qcclComm_t c) const {
    if (a.allgather)
      qc(qcclAllgather(send, recv, count, qcclFloat32, &t, c, nullptr), c, "qcclAllgather");
    else if (a.reduceScatter)
      qc(qcclReduceScatter(send, recv, count, qcclFloat32, qcclSum, &t, c, nullptr), c, "qcclReduceScatter");
    else
      qc(qcclAllreduce(send, recv, count, qcclFloat32, qcclSum, &t, c, nullptr), c, "qcclAllreduce");
  }
  // `count` is what run() takes: allgather's send count, reduce-scatter's receive count.
  size_t recvCount(size_t count) const { return a.allgather ? count * gSize : count; }
  size_t sendCount(size_t count) const { return a.reduceScatter ? count * gSize : count; }
  bench::Collective collective() const {
    return a.allgather ? bench::Collective::kAllgather
                       : (a.reduceScatter ? bench::Collective::kReduceScatter : bench::Collective::kAllreduce);
  }
  const char* name() const { return a.allgather ? "allgather" : (a.reduceScatter ? "reducescatter" : "allreduce"); }
  // The schedule asked for, as the reports name it (allreduce: the --algo, auto included).
  const char* schedule() const {
    return a.allgather ? (opts.algo == qcclAlgoHier ? "hier" : "allgather")
                       : (a.reduceScatter ? "scatter" : algoName(opts.algo));
  }
  // Bytes each rank sends in the fp32 ring (the uncompressed baseline's wire traffic).
  double fp32WireBytes(size_t count) const {
    if (a.reduceScatter) return 4.0 * count * (gSize - 1);  // n - 1 shards of count elements
    return a.allgather ? 4.0 * count * (gSize - 1) : 4.0 * count * 2.0 * (gSize - 1) / gSize;
  }
};

/// The report: table, CSV or JSON rows, and the model's lines after them.
const char* codecLabel(int codec);
void printHeader(const Bench& b);
void printRow(const Bench& b, const Row& r);
void printModel(const Bench& b, const bench::LinkFit& fit, const std::vector<Row>& rows);

}  // namespace collbench
