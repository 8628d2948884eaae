// Host-only calls create no CUDA context. In a CUDA build of qccl, a process that passes only host
// buffers must not pay for a context (hundreds of MB of GPU memory per rank, and a rank count of
// contexts on a shared GPU): the device check of each call goes through the driver this process
// has loaded, if any, never through the CUDA runtime. This runs in its own process (contexts are
// per process) and checks, in order:
//   1. host-only calls on loopback ranks do not even load the driver (libcuda.so.1);
//   2. with the driver loaded and initialized by the process (as a framework would), host-only calls
//      leave the primary context of every device inactive (needs a GPU; skipped without one);
//   3. a device buffer is still recognized as one afterwards, and its call gives the host result.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "coll_test_util.hpp"

namespace qccl {
namespace test {
namespace {

void hostOnlyCalls() {
  const size_t count = 50000;
  Options opts;
  opts.minCompressBytes = 0;
  opts.algo = Algo::kSra;  // compressed, with residuals (auto on one host sums exactly)
  runRanks(2, opts, [&](Communicator& c, int r) {
    TensorOpts t;
    t.id = 5;
    t.codec = CodecId::kOneBit;
    std::vector<float> x = exactInput(count, r), y(count), g(count * 2);
    c.allreduce(x.data(), y.data(), count, DataType::kFloat32, RedOp::kAvg, t);
    c.allgather(x.data(), g.data(), count, DataType::kFloat32, t);
    c.reduceScatter(g.data(), y.data(), count, DataType::kFloat32, RedOp::kSum, TensorOpts{});
    std::vector<uint8_t> st = c.saveTensorState(5);
    c.loadTensorState(5, st.data(), st.size());
  });
}

using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDevicePrimaryCtxGetState = int (*)(int, unsigned*, int*);

TEST(DeviceContext, HostOnlyCallsCreateNoContext) {
  // Under a tool that loads the driver first (compute-sanitizer), step 1 has nothing to check.
  const bool loadedBefore = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr;
  hostOnlyCalls();
  if (!loadedBefore) {
    EXPECT_EQ(dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD), nullptr) << "host-only calls loaded the CUDA driver";
  }

  void* lib = dlopen("libcuda.so.1", RTLD_LAZY);
  if (lib == nullptr) GTEST_SKIP() << "no CUDA driver on this machine: step 1 checked, steps 2-3 need a GPU";
  auto cuInit = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto cuDeviceGetCount = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  auto cuDeviceGet = reinterpret_cast<CuDeviceGet>(dlsym(lib, "cuDeviceGet"));
  auto primaryState = reinterpret_cast<CuDevicePrimaryCtxGetState>(dlsym(lib, "cuDevicePrimaryCtxGetState"));
  ASSERT_TRUE(cuInit && cuDeviceGetCount && cuDeviceGet && primaryState);
  int devices = 0;
  if (cuInit(0) != 0 || cuDeviceGetCount(&devices) != 0 || devices == 0)
    GTEST_SKIP() << "no CUDA device: step 1 checked, steps 2-3 need a GPU";

  hostOnlyCalls();  // now through the loaded driver's pointer query
  for (int i = 0; i < devices; ++i) {
    int dev = 0;
    unsigned flags = 0;
    int active = 1;
    ASSERT_EQ(cuDeviceGet(&dev, i), 0);
    ASSERT_EQ(primaryState(dev, &flags, &active), 0);
    EXPECT_EQ(active, 0) << "host-only calls created the primary context of device " << i;
  }

  // A device buffer is recognized (the driver query, no runtime call of qccl's before it).
  const size_t count = 4099;
  std::vector<std::vector<float>> want(2), got(2);
  runRanks(2, Options{}, [&](Communicator& c, int r) {
    want[r] = exactInput(count, r);
    c.allreduce(want[r].data(), want[r].data(), count, DataType::kFloat32, RedOp::kSum, TensorOpts{});
  });
  runRanks(2, Options{}, [&](Communicator& c, int r) {
    std::vector<float> x = exactInput(count, r);
    float* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, count * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d, x.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
    c.allreduce(d, d, count, DataType::kFloat32, RedOp::kSum, TensorOpts{}, nullptr);
    got[r].resize(count);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got[r].data(), d, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d);
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(bitEqual(got[r], want[r])) << "rank " << r;
}

}  // namespace
}  // namespace test
}  // namespace qccl
