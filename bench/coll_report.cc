// The report of qccl-bench allreduce / allgather / reducescatter: help text, table, CSV and JSON
// rows, and the alpha-beta model's predictions after them.
#include <cmath>
#include <cstdio>
#include <string>

#include "coll_bench.hpp"
#include "qccl/codec.hpp"

namespace collbench {

extern const char kCollHelp[];
const char kCollHelp[] =
    "usage: qccl-bench allreduce|allgather|reducescatter [options]   (start ranks with mpirun)\n"
    "  -b, --minbytes N   first size in bytes of fp32 data, K/M/G suffixes (default 1M)\n"
    "  -e, --maxbytes N   last size (default 64M)\n"
    "  -f, --stepfactor F multiply the size by F each step (default 2)\n"
    "  -n, --iters N      timed iterations per size (default 20)\n"
    "  -w, --warmup N     untimed iterations first (default 5)\n"
    "  -c, --check 0|1    check results (default 0)\n"
    "  --codec NAME       none|fp16|bf16|onebit|signscale|maxmin|dyn8 (default: QCCL_CODEC or none)\n"
    "  --bits N           maxmin bits 2|4|8\n"
    "  --algo NAME        auto|ring|sra|allgather (allreduce only; default: QCCL_ALGO or auto)\n"
    "  --transport T      mpi|ucx: what qccl runs over; for ucx rank 0 creates the unique id and\n"
    "                     MPI_Bcast's it (default mpi)\n"
    "  --baselines B      all|mpi: the uncompressed peers timed in every row (default all)\n"
    "  --json | --csv     one JSON object per size / CSV with a header; else a table\n"
    "Sizes: for allreduce the size is the tensor (count = size/4); for allgather it is the gathered\n"
    "result, as in nccl-tests (each rank sends size/4/nranks elements); for reducescatter it is the\n"
    "send buffer (each rank receives count = size/4/nranks elements).\n"
    "Time is the median over iterations of the slowest rank's time (JSON times_s: that time for\n"
    "every timed call, in call order). algbw = size/time;\n"
    "busbw = algbw * 2(n-1)/n (allreduce) or (n-1)/n (allgather, reducescatter). wire_bytes = bytes this rank sent\n"
    "per call (max over ranks, headers included; auto's cross-rank check over MPI counts too, with the\n"
    "sum it carries in rd rows); ratio = the fp32 ring's per-rank bytes / wire_bytes (0 in native rows:\n"
    "auto handed the uncompressed sum to MPI_Iallreduce, whose bytes qccl does not see);\n"
    "inter_host_bytes (JSON, CSV) = the part of wire_bytes sent to ranks on other hosts (max over ranks).\n"
    "ran (algo_ran in JSON, CSV) = what the timed calls ran: for allreduce the schedule the library reports\n"
    "  (qcclCommGetLastAlgo; native = the MPI library's allreduce, shm = qccl's shared-memory sum when every\n"
    "  rank is on one host, rd = a sum of at most 4096 floats carried by auto's cross-rank check over MPI).\n"
    "  Under --algo auto the timed calls follow\n"
    "  QCCL_AUTO_TRIAL_CALLS untimed ones, in which auto tries hier where ranks share hosts (QCCL_AUTO_HIER).\n"
    "Baselines, timed in the same run on the same buffers (--baselines all): MPI_Allreduce,\n"
    "MPI_Iallreduce+MPI_Wait, qccl's fp32 ring, and gloo (torch's gloo allreduce, ring-chunked and,\n"
    "for power-of-two ranks, halving-doubling; over TCP, GLOO_SOCKET_IFNAME or 127.0.0.1). For\n"
    "allgather: MPI_Allgather, qccl's fp32 allgather, gloo's allgather. For reducescatter:\n"
    "MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block+MPI_Wait, qccl's fp32 reduce-scatter (no\n"
    "gloo: torch's gloo backend has no reduce_scatter). best_uncompressed is the\n"
    "fastest of them and speedup_vs_best (x_best) = its time / qccl's time: the figure to quote.\n"
    "mpi_time_s / fp16_time_s: MPI_Allreduce (or MPI_Allgather) and qccl's fp16 ring, as before.\n"
    "For reducescatter the same keys hold its peers: mpi_time_s MPI_Reduce_scatter_block,\n"
    "mpi_iallreduce_time_s MPI_Ireduce_scatter_block, qccl_ring_time_s qccl's fp32 reduce-scatter,\n"
    "fp16_time_s qccl's fp16 reduce-scatter.\n"
    "CPU per call (mean over ranks, from qccl's counters): encode, decode, wait (transport progress,\n"
    "polling) and idle (the part of wait spent yielding or sleeping); cpu_s = process user+system.\n"
    "JSON cpu also: process_s / process_sys_s (user+system / system seconds), nivcsw / nvcsw\n"
    "(involuntary / voluntary context switches) and migrations (between CPUs; -1 where\n"
    "/proc/self/sched has none) per call, and rank_cpus: the CPU each rank ran on after its calls.\n"
    "-c 1: a fresh tensor (no residual yet) is reduced once more and checked; wrong is reported only\n"
    "  for checked rows (null / '-' otherwise). An element is wrong when\n"
    "  (a) its bits differ from rank 0's result on any rank (not for reducescatter, whose ranks hold\n"
    "      different shards), or it is NaN/Inf; or\n"
    "  (b) codec none: it differs from the exact sum (inputs are multiples of 2^-10 below 8 in\n"
    "      magnitude, so every fp32 partial sum is exact in any order); or\n"
    "  (c) lossy codecs, on rank 0: it differs from a replay of the same collective with the same\n"
    "      config and inputs over qccl's in-process loopback transport (results are deterministic and\n"
    "      do not depend on the transport), or |result - exact| exceeds a sound worst-case bound:\n"
    "      with A = 4 (largest |input|) and f the codec's error per encode relative to the bucket's\n"
    "      largest |value| (fp16 2^-11, bf16 2^-8, maxmin 2/(2^bits-1), onebit/signscale/dyn8 1),\n"
    "      sra: f n A (2+f); allgather algo: f n A; ring (casts): n f n A (1+f)^n; allgather\n"
    "      collective: f A; reducescatter: f n A. The bound catches scale, placement and NaN errors; the replay "
    "catches\n"
    "      any deviation from the plan. hier is not replayed (its result depends on the hosts).\n"
    "  Reducescatter checks (b) on every rank, (c) on rank 0's shard.\n"
    "  rel_err = ||result - exact||_2 / ||exact||_2 against the exact sum (gathered inputs).\n"
    "  The exit status is 1 when any element was wrong.\n"
    "Codec throughput: rank 0 encodes and decodeAdds 64 MiB of fp32 (out of cache) on one thread,\n"
    "best of 5, while the other ranks sleep (they poll a non-blocking broadcast every millisecond,\n"
    "never spin); then every rank at once, 5 encodes and then 5 decodeAdds started together, the\n"
    "slowest rank's wall time (encode_gbps_all, decode_gbps_all in the model rows).\n"
    "Model (allreduce; bench/model.hpp): an alpha-beta fit of the link from qccl's fp32 ring rows\n"
    "(the qccl_ring baseline at two sizes or more). Per compressed row: wire_s = for sra and allgather\n"
    "rows the call's own messages (chunk sizes, chunk rounds, sra's two phases per round, the pipeline\n"
    "depth) replayed with no codec over MPI point-to-point right after the row (wire_from \"probe\":\n"
    "n - 1 concurrent flows per rank do not move bytes at the ring's rate); for ring rows the ring's\n"
    "line, rounds*alpha + wire_bytes*beta (\"ring_fit\"). codec_cpu_s = bytes encoded and decoded at\n"
    "the measured throughput, times ranks-on-this-machine / cores, at least 1 (ranks on one kernel\n"
    "share its cores, the emulated cluster's hosts included); codec_cpu_all_s = the same bytes at\n"
    "the throughput of every rank at once (encode_gbps_all / decode_gbps_all), the most memory\n"
    "contention the ranks can see, for comparison; cpu_s = codec_cpu_s plus the replay's\n"
    "process CPU per rank times that share (the transport's copies, system calls and TCP work\n"
    "run on the same cores; the replay waits as qccl does, not spinning). predicted_s = max(wire, cpu) +\n"
    "min(wire, cpu) / chunk_rounds (the pipeline overlaps one round's wire with another's codec).\n"
    "breakeven_gbit: the link rate below which the codec beats the fp32 ring, with the probe's time\n"
    "scaled as 1 / rate (needs the ring fit; null when it pays at any rate or there is no fit).\n"
    "Printed after the rows (JSON: objects with \"model\").\n"
    "peak_mem_bytes = max over ranks of qccl's residual + peak staging bytes; max_rss_bytes = the\n"
    "largest process max RSS.\n";

const char* codecLabel(int codec) { return qccl::codecName(static_cast<qccl::CodecId>(codec)); }

void printHeader(const Bench& b) {
  const Args& a = b.a;
  if (a.csv) {
    std::printf(
        "size,count,codec,bits,algo,transport,nranks,time_s,algbw,busbw,wire_bytes,ratio,rel_err,wrong,"
        "peak_mem_bytes,max_rss_bytes,best_uncompressed,best_uncompressed_time_s,speedup_vs_best,mpi_time_s,"
        "mpi_iallreduce_time_s,qccl_ring_time_s,gloo_time_s,fp16_time_s,speedup_vs_mpi,speedup_vs_fp16,"
        "encode_s,decode_s,wait_s,idle_s,cpu_s,inter_host_bytes,algo_ran\n");
  } else if (!a.json) {
    std::printf("# qccl-bench %s: %d ranks, transport %s, codec %s, bits %d, algo %s, check %d, baselines %s%s\n",
                b.name(), gSize, a.transport.c_str(), codecLabel(b.opts.codec), b.wireBits, algoName(b.opts.algo),
                a.check, a.baselines.c_str(), bench::haveGloo() ? " (gloo in)" : " (no gloo in this build)");
    if (b.opts.codec != qcclCodecNone)
      std::printf(
          "# codec throughput (rank 0, one thread, other ranks asleep): encode %.2f GB/s, decodeAdd %.2f GB/s; "
          "every rank at once: %.2f / %.2f GB/s per rank\n",
          b.encGBps, b.decGBps, b.encGBpsAll, b.decGBpsAll);
    std::printf("#%11s %10s %10s %7s %7s %11s %6s %6s %-22s %10s %6s %6s %9s %6s %8s %7s %7s %7s %7s %s\n", "size",
                "count", "time_us", "algbw", "busbw", "wire_B", "ratio", "x_best", "best", "best_us", "x_mpi", "x_fp16",
                "rel_err", "wrong", "peak_MB", "enc_ms", "dec_ms", "wait_ms", "idle_ms", "ran");
  }
}

// The gloo variant that ran fastest, or -1.
double glooTime(const Row& r, std::string* name) {
  double best = -1;
  for (const bench::Baseline& x : r.baselines) {
    if (x.name.rfind("gloo", 0) == 0 && x.timeS >= 0 && (best < 0 || x.timeS < best)) {
      best = x.timeS;
      if (name) *name = x.name;
    }
  }
  return best;
}

std::string wrongText(const Row& r, const char* none) {
  return r.checked ? std::to_string(static_cast<unsigned long long>(r.wrong)) : std::string(none);
}

void printRow(const Bench& b, const Row& r) {
  double algbw = r.size / r.timeS / 1e9;
  double factor = b.a.allgather || b.a.reduceScatter ? (gSize - 1.0) / gSize : 2.0 * (gSize - 1.0) / gSize;
  double busbw = algbw * factor, xm = r.mpiTimeS / r.timeS, xf = r.fp16TimeS / r.timeS;
  double xb = r.best.timeS > 0 ? r.best.timeS / r.timeS : 0;
  const char* codec = codecLabel(b.opts.codec);
  const char* algo = b.schedule();
  std::string glooName = "none";
  const double gloo = glooTime(r, &glooName);
  const double iall = bench::timeOf(r.baselines, b.a.reduceScatter ? "mpi_ireduce_scatter_block" : "mpi_iallreduce");
  const double ring = bench::timeOf(r.baselines, b.a.allgather       ? "qccl_allgather"
                                                 : b.a.reduceScatter ? "qccl_reduce_scatter"
                                                                     : "qccl_ring");
  if (b.a.json) {
    std::string base, each;
    for (double t : r.times) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%s%.6g", each.empty() ? "" : ",", t);
      each += buf;
    }
    for (const bench::Baseline& x : r.baselines)
      base += std::string(base.empty() ? "" : ",") + "\"" + x.name + "\":" + std::to_string(x.timeS);
    std::string cpus;
    for (int c : r.rankCpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
    std::printf(
        "{\"collective\":\"%s\",\"size\":%zu,\"count\":%zu,\"codec\":\"%s\",\"bits\":%d,\"algo\":\"%s\","
        "\"transport\":\"%s\",\"nranks\":%d,\"time_s\":%.9g,\"times_s\":[%s],\"algbw\":%.6g,\"busbw\":%.6g,"
        "\"algo_ran\":\"%s\",\"wire_bytes\":%.0f,\"inter_host_bytes\":%.0f,\"ratio\":%.6g,\"rel_err\":%.6g,\"wrong\":%"
        "s,\"checked\":%s,"
        "\"peak_mem_bytes\":%llu,"
        "\"max_rss_bytes\":%llu,\"best_uncompressed\":\"%s\",\"best_uncompressed_time_s\":%.9g,"
        "\"speedup_vs_best\":%.6g,\"baselines\":{%s},\"mpi_time_s\":%.9g,\"mpi_iallreduce_time_s\":%.9g,"
        "\"qccl_ring_time_s\":%.9g,\"gloo_time_s\":%.9g,\"gloo_algo\":\"%s\",\"fp16_time_s\":%.9g,"
        "\"speedup_vs_mpi\":%.6g,\"speedup_vs_fp16\":%.6g,\"encode_gbps\":%.6g,\"decode_gbps\":%.6g,"
        "\"cpu\":{\"encode_s\":%.6g,\"decode_s\":%.6g,\"wait_s\":%.6g,\"idle_s\":%.6g,\"process_s\":%.6g,"
        "\"process_sys_s\":%.6g,\"nivcsw\":%.6g,\"nvcsw\":%.6g,\"migrations\":%.6g,\"rank_cpus\":[%s]}}\n",
        b.name(), r.size, r.count, codec, b.wireBits, algo, b.a.transport.c_str(), gSize, r.timeS, each.c_str(), algbw,
        busbw, r.ran.c_str(), r.wireBytes, r.interHostBytes, r.ratio, r.relErr, wrongText(r, "null").c_str(),
        r.checked ? "true" : "false", (unsigned long long)r.peakMem, (unsigned long long)r.maxRss, r.best.name.c_str(),
        r.best.timeS, xb, base.c_str(), r.mpiTimeS, iall, ring, gloo, glooName.c_str(), r.fp16TimeS, xm, xf, b.encGBps,
        b.decGBps, r.encS, r.decS, r.waitS, r.idleS, r.cpuS, r.sysS, r.nivcsw, r.nvcsw, r.migrations, cpus.c_str());
  } else if (b.a.csv) {
    std::printf(
        "%zu,%zu,%s,%d,%s,%s,%d,%.9g,%.6g,%.6g,%.0f,%.6g,%.6g,%s,%llu,%llu,%s,%.9g,%.6g,%.9g,%.9g,%.9g,%.9g,%.9g,%.6g,"
        "%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.0f,%s\n",
        r.size, r.count, codec, b.wireBits, algo, b.a.transport.c_str(), gSize, r.timeS, algbw, busbw, r.wireBytes,
        r.ratio, r.relErr, wrongText(r, "").c_str(), (unsigned long long)r.peakMem, (unsigned long long)r.maxRss,
        r.best.name.c_str(), r.best.timeS, xb, r.mpiTimeS, iall, ring, gloo, r.fp16TimeS, xm, xf, r.encS, r.decS,
        r.waitS, r.idleS, r.cpuS, r.interHostBytes, r.ran.c_str());
  } else {
    std::printf(
        "%12zu %10zu %10.1f %7.2f %7.2f %11.0f %6.2f %6.2f %-22s %10.1f %6.2f %6.2f %9.2e %6s %8.1f %7.2f %7.2f "
        "%7.2f %7.2f %s\n",
        r.size, r.count, r.timeS * 1e6, algbw, busbw, r.wireBytes, r.ratio, xb, r.best.name.c_str(), r.best.timeS * 1e6,
        xm, xf, r.relErr, wrongText(r, "-").c_str(), r.peakMem / 1048576.0, r.encS * 1e3, r.decS * 1e3, r.waitS * 1e3,
        r.idleS * 1e3, r.ran.c_str());
  }
  std::fflush(stdout);
}

void printModel(const Bench& b, const bench::LinkFit& fit, const std::vector<Row>& rows) {
  if (b.a.json) {
    if (fit.ok)
      std::printf("{\"model\":\"fit\",\"alpha_s\":%.6g,\"beta_s_per_byte\":%.6g,\"link_gbit\":%.6g}\n", fit.alpha,
                  fit.beta, fit.gbit());
  } else if (!b.a.csv) {
    if (fit.ok)
      std::printf("# model: alpha %.1f us per round, link %.3f Gbit/s per rank (fit of the fp32 ring rows)\n",
                  fit.alpha * 1e6, fit.gbit());
    else
      std::printf("# model: no link fit (needs the qccl_ring baseline at two sizes or more): no break-even%s\n",
                  b.opts.codec != qcclCodecNone ? ", and no prediction for ring rows" : "");
    if (b.opts.codec != qcclCodecNone && !b.a.allgather && !b.a.reduceScatter)
      std::printf("#%11s %12s %12s %8s %12s %12s %7s %7s %12s\n", "size", "measured_us", "predicted_us", "pred/meas",
                  "wire_us", "cpu_us", "rounds", "probe", "breakeven_Gb");
  }
  if (b.opts.codec == qcclCodecNone || b.a.allgather || b.a.reduceScatter) return;
  for (const Row& r : rows) {
    if (r.predictedS < 0) continue;
    const bool probed = r.probeS > 0;
    if (b.a.json) {
      const bool known = r.breakevenGbit >= 0 && !std::isinf(r.breakevenGbit);
      const std::string be = known ? std::to_string(r.breakevenGbit) : "null";
      std::printf(
          "{\"model\":\"row\",\"size\":%zu,\"codec\":\"%s\",\"bits\":%d,\"algo_ran\":\"%s\",\"measured_s\":%.9g,"
          "\"predicted_s\":%.9g,\"predicted_over_measured\":%.6g,\"wire_s\":%.9g,\"wire_from\":\"%s\","
          "\"wire_probe_bytes\":%.0f,\"cpu_s\":%.9g,\"codec_cpu_s\":%.9g,\"codec_cpu_all_s\":%.9g,"
          "\"encode_gbps_all\":%.6g,\"decode_gbps_all\":%.6g,\"chunk_rounds\":%.0f,\"breakeven_gbit\":%s,"
          "\"breakeven_any_rate\":%s}\n",
          r.size, codecLabel(b.opts.codec), b.wireBits, r.ran.c_str(), r.timeS, r.predictedS, r.predictedS / r.timeS,
          r.wireModelS, probed ? "probe" : "ring_fit", probed ? r.probeBytes : r.wireBytes, r.cpuModelS, r.codecModelS,
          r.codecAllModelS, b.encGBpsAll, b.decGBpsAll, r.chunkRounds, be.c_str(),
          std::isinf(r.breakevenGbit) ? "true" : "false");
    } else if (!b.a.csv) {
      std::printf("#%11zu %12.1f %12.1f %8.2f %12.1f %12.1f %7.0f %7s %12.2f\n", r.size, r.timeS * 1e6,
                  r.predictedS * 1e6, r.predictedS / r.timeS, r.wireModelS * 1e6, r.cpuModelS * 1e6, r.chunkRounds,
                  probed ? "yes" : "no", r.breakevenGbit);
    }
  }
}

}  // namespace collbench
