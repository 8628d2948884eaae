// qccl-bench: microbenchmarks in nccl-tests conventions. Subcommands: codec, allreduce, allgather, reducescatter,
// soak, faults.
#include <cstdio>
#include <cstring>

int runCodecBench(int argc, char** argv);                    // codec_bench.cc
int runCollBench(const char* which, int argc, char** argv);  // coll_bench.cc
int runSoakBench(int argc, char** argv);                     // soak_bench.cc
int runFaultBench(int argc, char** argv);                    // fault_bench.cc

static int usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s <subcommand> [options]\n"
               "  codec      encode/decode throughput of every codec against memcpy\n"
               "  allreduce  compressed allreduce against MPI_Allreduce and the fp16 ring\n"
               "  allgather  compressed allgather\n"
               "  reducescatter  compressed reduce-scatter against MPI_Reduce_scatter_block\n"
               "  soak       many checked calls of random sizes, codecs and tensor ids; memory over time\n"
               "  faults     kill a random rank mid-collective (UCX): how fast every survivor errors\n"
               "Run '%s <subcommand> --help' for its options.\n",
               prog, prog);
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage(argv[0]);
  const char* sub = argv[1];
#ifdef QCCL_BENCH_CODEC
  if (std::strcmp(sub, "codec") == 0) return runCodecBench(argc - 1, argv + 1);
#endif
#ifdef QCCL_BENCH_COLL
  if (std::strcmp(sub, "allreduce") == 0 || std::strcmp(sub, "allgather") == 0 ||
      std::strcmp(sub, "reducescatter") == 0)
    return runCollBench(sub, argc - 1, argv + 1);
  if (std::strcmp(sub, "soak") == 0) return runSoakBench(argc - 1, argv + 1);
#endif
#ifdef QCCL_BENCH_FAULTS
  if (std::strcmp(sub, "faults") == 0) return runFaultBench(argc - 1, argv + 1);
#endif
  std::fprintf(stderr, "%s: unknown or unavailable subcommand '%s'\n", argv[0], sub);
  return usage(argv[0]);
}
