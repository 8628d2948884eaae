// An application that uses qccl itself while libqccl_mpi.so is loaded: qccl's own MPI traffic
// (its transport's sends and receives, and the MPI_Iallreduce of `auto` with nothing to compress)
// goes to PMPI_* and must never reach the interposer. Only the application's own MPI_Allreduce
// calls may be counted. Run with QCCL_CODEC=onebit, so that the interposer is active.
#include "interpose_test_util.hpp"
#include "qccl/qccl_mpi.h"

using namespace itest;

int main(int argc, char** argv) {
  init(&argc, &argv);
  qcclComm_t comm = nullptr;
  qcclConfig_t cfg;
  qcclConfigInit(&cfg);
  EXPECT(qcclCommInitMpi(&comm, MPI_COMM_WORLD, &cfg) == qcclSuccess, "init: %s", qcclGetLastError(nullptr));
  const size_t n = 100000;
  std::vector<float> buf(n);
  int appCalls = 0;
  const qcclMpiInterposeStats_t s0 = stats();
  for (int round = 0; round < 5 && comm != nullptr; ++round) {
    // auto with codec none: the MPI library's own allreduce, after a cross-rank check (both MPI_Iallreduce).
    for (int codec : {qcclCodecNone, qcclCodecOneBit, qcclCodecMaxMin}) {
      for (size_t i = 0; i < n; ++i) buf[i] = input(gRank, i);
      qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
      t.id = 7 + static_cast<uint64_t>(codec);
      t.codec = codec;
      qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), n, qcclFloat32, qcclSum, &t, comm, nullptr);
      EXPECT(r == qcclSuccess, "qcclAllreduce codec %d: %s", codec, qcclGetLastError(comm));
    }
    // The application's own call, which the interposer does see (and compresses).
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    ++appCalls;
  }
  const qcclMpiInterposeStats_t s1 = stats();
  EXPECT(s1.calls - s0.calls == static_cast<uint64_t>(appCalls),
         "the interposer saw %llu calls, the application made %d", (unsigned long long)(s1.calls - s0.calls), appCalls);
  EXPECT(s1.compressed - s0.compressed == static_cast<uint64_t>(appCalls), "compressed %llu",
         (unsigned long long)(s1.compressed - s0.compressed));
  EXPECT(s1.reentered == 0, "re-entered %llu", (unsigned long long)s1.reentered);
  if (comm != nullptr) qcclCommDestroy(comm);
  return finish("interpose_qccl_app");
}
