#include "baselines.hpp"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#if QCCL_BENCH_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace bench {
namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "qccl-bench baselines: %s\n", msg.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void check(qcclResult_t r, qcclComm_t comm, const char* what) {
  if (r != qcclSuccess) die(std::string(what) + ": " + qcclGetLastError(comm));
}

#if QCCL_BENCH_GLOO
// gloo over TCP: one context (its own full mesh of connections) per gloo variant, so that no
// variant can ever see another's messages. Debian's libgloo (0.0~git20220518) builds the slot of
// its unbound-buffer collectives as `prefix || tag`, a logical or, so gloo::allreduce uses the
// same slots on every call whatever its tag; sharing one context with the classic algorithms'
// slots left 4 ranks hung at 64 MiB. Rendezvous through a file store in a directory that rank 0
// creates and broadcasts (the ranks of the emulated cluster share this machine's files).
struct Gloo {
  std::shared_ptr<gloo::transport::Device> dev;
  std::map<std::string, std::shared_ptr<gloo::rendezvous::Context>> ctx;
  std::string dir;
  uint32_t tag = 0;
};
std::unique_ptr<Gloo> gGloo;

Gloo& glooDevice() {
  if (gGloo) return *gGloo;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char dir[256] = {};
  if (rank == 0) {
    std::snprintf(dir, sizeof dir, "/tmp/qccl-bench-gloo-XXXXXX");
    if (mkdtemp(dir) == nullptr) die("mkdtemp for gloo's file store failed");
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  auto g = std::make_unique<Gloo>();
  g->dir = dir;
  gloo::transport::tcp::attr attr;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    attr.iface = ifname;
  } else {
    attr.hostname = "127.0.0.1";
  }
  try {
    g->dev = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    die(std::string("gloo: ") + e.what());
  }
  gGloo = std::move(g);
  return *gGloo;
}

// The context of gloo variant `name`, connected on first use.
const std::shared_ptr<gloo::rendezvous::Context>& glooContext(const std::string& name) {
  Gloo& g = glooDevice();
  auto it = g.ctx.find(name);
  if (it != g.ctx.end()) return it->second;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  try {
    gloo::rendezvous::FileStore files(g.dir);
    gloo::rendezvous::PrefixStore store(name, files);
    ctx->setTimeout(std::chrono::seconds(600));
    ctx->connectFullMesh(store, g.dev);
  } catch (const std::exception& e) {
    die(std::string("gloo (") + name + "): " + e.what());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return g.ctx.emplace(name, std::move(ctx)).first->second;
}

void glooBaselines(bool allgather, const float* send, float* recv, size_t count,
                   const std::function<double(const std::function<void()>&)>& timer, std::vector<Baseline>* out) {
  if (allgather) {
    const auto& ctx = glooContext("gloo_allgather");
    out->push_back({"gloo_allgather", timer([&] {
                      gloo::AllgatherOptions opts(ctx);
                      opts.setInput(const_cast<float*>(send), count);
                      opts.setOutput(recv, count * static_cast<size_t>(ctx->size));
                      opts.setTag(gGloo->tag++);
                      gloo::allgather(opts);
                    })});
    return;
  }
  // In place on recv: gloo's classic algorithms reduce their buffers in place. The values grow from
  // iteration to iteration, which does not change the time of a float add.
  std::memcpy(recv, send, count * sizeof(float));
  // What torch.distributed's gloo backend calls for allreduce.
  const auto& ctx = glooContext("gloo_allreduce");
  out->push_back({"gloo_allreduce", timer([&] {
                    gloo::AllreduceOptions opts(ctx);
                    opts.setOutput(recv, count);
                    opts.setReduceFunction(
                        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
                    opts.setTag(gGloo->tag++);
                    gloo::allreduce(opts);
                  })});
  // gloo's own choices for large buffers.
  const auto& rc = glooContext("gloo_ring_chunked");
  out->push_back({"gloo_ring_chunked", timer([&] {
                    gloo::AllreduceRingChunked<float> algo(rc, {recv}, static_cast<int>(count));
                    algo.run();
                  })});
  const int n = ctx->size;
  if ((n & (n - 1)) == 0) {  // halving-doubling is gloo's pick for power-of-two rank counts
    const auto& hd = glooContext("gloo_halving_doubling");
    out->push_back({"gloo_halving_doubling", timer([&] {
                      gloo::AllreduceHalvingDoubling<float> algo(hd, {recv}, static_cast<int>(count));
                      algo.run();
                    })});
  }
}
#endif

// Reduce-scatter: the MPI library's blocking and non-blocking calls, and qccl's fp32 path.
void reduceScatterBaselines(const float* send, float* recv, size_t count, qcclComm_t comm, uint64_t tensorId,
                            BaselineSet set, const std::function<double(const std::function<void()>&)>& timer,
                            std::vector<Baseline>* out) {
  const int c = static_cast<int>(count);
  out->push_back({"mpi_reduce_scatter_block",
                  timer([&] { MPI_Reduce_scatter_block(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); })});
  if (set == BaselineSet::kMpiOnly) return;
  out->push_back({"mpi_ireduce_scatter_block", timer([&] {
                    MPI_Request r;
                    MPI_Ireduce_scatter_block(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
                    MPI_Wait(&r, MPI_STATUS_IGNORE);
                  })});
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = tensorId;
  t.codec = qcclCodecNone;
  out->push_back({"qccl_reduce_scatter", timer([&] {
                    check(qcclReduceScatter(send, recv, count, qcclFloat32, qcclSum, &t, comm, nullptr), comm,
                          "qcclReduceScatter");
                  })});
}

}  // namespace

bool haveGloo() { return QCCL_BENCH_GLOO != 0; }

std::vector<Baseline> timeBaselines(Collective coll, const float* send, float* recv, size_t count, qcclComm_t comm,
                                    uint64_t tensorId, BaselineSet set,
                                    const std::function<double(const std::function<void()>&)>& timer) {
  std::vector<Baseline> out;
  if (coll == Collective::kReduceScatter) {
    reduceScatterBaselines(send, recv, count, comm, tensorId, set, timer, &out);
    return out;
  }
  const bool allgather = coll == Collective::kAllgather;
  const int c = static_cast<int>(count);
  if (allgather) {
    out.push_back(
        {"mpi_allgather", timer([&] { MPI_Allgather(send, c, MPI_FLOAT, recv, c, MPI_FLOAT, MPI_COMM_WORLD); })});
  } else {
    out.push_back({"mpi_allreduce", timer([&] { MPI_Allreduce(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); })});
  }
  if (set == BaselineSet::kMpiOnly) return out;
  if (!allgather) {
    out.push_back({"mpi_iallreduce", timer([&] {
                     MPI_Request r;
                     MPI_Iallreduce(send, recv, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
                     MPI_Wait(&r, MPI_STATUS_IGNORE);
                   })});
  }
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = tensorId;
  t.codec = qcclCodecNone;
  t.algo = allgather ? -1 : qcclAlgoRing;
  out.push_back({allgather ? "qccl_allgather" : "qccl_ring", timer([&] {
                   if (allgather)
                     check(qcclAllgather(send, recv, count, qcclFloat32, &t, comm, nullptr), comm, "qcclAllgather");
                   else
                     check(qcclAllreduce(send, recv, count, qcclFloat32, qcclSum, &t, comm, nullptr), comm,
                           "qcclAllreduce");
                 })});
#if QCCL_BENCH_GLOO
  glooBaselines(allgather, send, recv, count, timer, &out);
#endif
  return out;
}

Baseline best(const std::vector<Baseline>& all) {
  Baseline b{"none", -1};
  for (const Baseline& x : all)
    if (x.timeS >= 0 && (b.timeS < 0 || x.timeS < b.timeS)) b = x;
  return b;
}

double timeOf(const std::vector<Baseline>& all, const std::string& name) {
  for (const Baseline& x : all)
    if (x.name == name) return x.timeS;
  return -1;
}

void shutdownBaselines() {
#if QCCL_BENCH_GLOO
  if (!gGloo) return;
  gGloo->ctx.clear();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::string cmd = "rm -rf '" + gGloo->dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "qccl-bench: could not remove %s\n", gGloo->dir.c_str());
  }
  gGloo.reset();
#endif
}

}  // namespace bench
