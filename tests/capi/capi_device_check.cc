// The C API on device buffers over real processes started by mpirun, the ranks sharing the GPUs of
// one machine (rank r on GPU r % count): allreduce, allgather and reduce-scatter of cudaMalloc'ed
// buffers on a non-default stream, with inputs copied in and results copied out asynchronously on
// that stream, give the same bytes as the same calls on host buffers (each path with its own
// tensor ids, so each has its own residuals), and the same bytes on every rank.
//
//   capi_device_check --transport mpi|ucx
// Exit status 0 when every check passed on every rank, 77 (skipped) on a machine without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_check.hpp"

namespace {

#define CUDA(x)                                                                                                 \
  do {                                                                                                          \
    cudaError_t e_ = (x);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                    \
      std::fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", gRank, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                             \
    }                                                                                                           \
  } while (0)

qcclComm_t makeDeviceCheckComm(const std::string& transport) {
  qcclConfig_t cfg;
  if (qcclConfigInit(&cfg) != qcclSuccess) return nullptr;
  cfg.timeoutSec = 60;
  cfg.minCompressBytes = 0;
  cfg.chunkBytes = 256 << 10;  // several chunks per call
  cfg.localCompress = 1;       // on one host, host buffers are compressed as asked too (as device ones are)
  return makeComm(transport, cfg);
}

enum Coll { kAllreduce, kAllgather, kReduceScatter };

struct Case {
  const char* name;
  Coll coll;
  int codec;
  int algo;
};

float input(int rank, int step, size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(step) * 13) % 1009) - 500 + rank) * 0.125f;
}

// Three calls of `c` on host buffers (tensor id `id`) or device buffers (id + 1000); returns the
// last result's bytes.
std::vector<float> run(qcclComm_t comm, const Case& c, uint64_t id, size_t count, bool device) {
  const size_t sendN = c.coll == kReduceScatter ? count * gSize : count;
  const size_t recvN = c.coll == kAllgather ? count * gSize : count;
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = device ? id + 1000 : id;
  t.codec = c.codec;
  t.algo = c.algo;
  std::vector<float> send(sendN), recv(recvN, -1.0f);
  float *sendD = nullptr, *recvD = nullptr, *pinIn = nullptr, *pinOut = nullptr;
  cudaStream_t stream = nullptr;
  if (device) {
    CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA(cudaMalloc(&sendD, sendN * 4));
    CUDA(cudaMalloc(&recvD, recvN * 4));
    CUDA(cudaMallocHost(&pinIn, sendN * 4));
    CUDA(cudaMallocHost(&pinOut, recvN * 4));
  }
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < sendN; ++i) send[i] = input(gRank, step, i);
    qcclResult_t r;
    const void* s = send.data();
    void* d = recv.data();
    if (device) {
      std::memcpy(pinIn, send.data(), sendN * 4);
      CUDA(cudaMemcpyAsync(sendD, pinIn, sendN * 4, cudaMemcpyHostToDevice, stream));
      s = sendD;
      d = recvD;
    }
    if (c.coll == kAllreduce) {
      r = qcclAllreduce(s, d, count, qcclFloat32, qcclAvg, &t, comm, stream);
    } else if (c.coll == kAllgather) {
      r = qcclAllgather(s, d, count, qcclFloat32, &t, comm, stream);
    } else {
      r = qcclReduceScatter(s, d, count, qcclFloat32, qcclSum, &t, comm, stream);
    }
    EXPECT(r == qcclSuccess, "%s (%s): %s", c.name, device ? "device" : "host", qcclGetLastError(nullptr));
    if (device) {
      CUDA(cudaMemcpyAsync(pinOut, recvD, recvN * 4, cudaMemcpyDeviceToHost, stream));
      CUDA(cudaStreamSynchronize(stream));
      std::memcpy(recv.data(), pinOut, recvN * 4);
    }
  }
  if (device) {
    cudaFree(sendD);
    cudaFree(recvD);
    cudaFreeHost(pinIn);
    cudaFreeHost(pinOut);
    cudaStreamDestroy(stream);
  }
  return recv;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  std::string transport = "mpi";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--transport") == 0) transport = argv[i + 1];

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (gRank == 0) std::printf("capi_device_check: no CUDA device, skipped\n");
    MPI_Finalize();
    return 77;
  }
  CUDA(cudaSetDevice(gRank % devices));
  qcclComm_t comm = makeDeviceCheckComm(transport);
  if (comm == nullptr) {
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  const Case cases[] = {
      {"allreduce fp32 ring", kAllreduce, qcclCodecNone, qcclAlgoRing},
      {"allreduce fp32 auto", kAllreduce, qcclCodecNone, qcclAlgoAuto},
      {"allreduce onebit sra", kAllreduce, qcclCodecOneBit, qcclAlgoSra},
      {"allreduce maxmin allgather", kAllreduce, qcclCodecMaxMin, qcclAlgoAllgather},
      {"allreduce dyn8 sra", kAllreduce, qcclCodecDyn8, qcclAlgoSra},
      {"allreduce onebit auto", kAllreduce, qcclCodecOneBit, qcclAlgoAuto},
      {"allgather onebit", kAllgather, qcclCodecOneBit, -1},
      {"allgather fp32", kAllgather, qcclCodecNone, -1},
      {"reducescatter onebit", kReduceScatter, qcclCodecOneBit, -1},
  };
  const size_t count = 300007;
  uint64_t id = 1;
  for (const Case& c : cases) {
    std::vector<float> host = run(comm, c, id, count, false);
    std::vector<float> dev = run(comm, c, id, count, true);
    ++id;
    EXPECT(std::memcmp(host.data(), dev.data(), host.size() * 4) == 0, "%s: device result differs from the host path",
           c.name);
    if (c.coll != kReduceScatter) EXPECT(sameOnAllRanks(dev.data(), dev.size() * 4), "%s: ranks differ", c.name);
    if (gRank == 0) std::printf("%-28s checked\n", c.name);
  }
  qcclCommDestroy(comm);
  int total = 0;
  MPI_Allreduce(&gFailures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0)
    std::printf("capi_device_check (%s, %d ranks, %d GPU(s)): %s\n", transport.c_str(), gSize, devices,
                total == 0 ? "PASS" : "FAIL");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
