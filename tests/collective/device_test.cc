// Device buffers (CUDA builds): allreduce and allgather on device memory over loopback ranks give
// the same bits as the host path on the same inputs. Skips when no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "coll_test_util.hpp"
#include "qccl/cuda_codec.hpp"

namespace qccl {
namespace test {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess)

struct DeviceCase {
  CodecId codec;
  Algo algo;
  DataType dtype;
};

// Host-path results for the same inputs and options.
std::vector<std::vector<float>> hostResults(int n, const Options& opts, const TensorOpts& t, size_t count) {
  std::vector<std::vector<float>> out(n);
  runRanks(n, opts, [&](Communicator& c, int r) {
    out[r] = exactInput(count, r);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> buf = exactInput(count, r);
      c.allreduce(buf.data(), out[r].data(), count, DataType::kFloat32, RedOp::kAvg, t);
    }
  });
  return out;
}

TEST(Device, AllreduceMatchesHostPath) {
  if (!cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const int n = 3;
  const size_t count = 100003;
  Options opts;
  opts.chunkBytes = 64 << 10;
  opts.minCompressBytes = 0;
  for (DeviceCase dc : {DeviceCase{CodecId::kFp32, Algo::kRing, DataType::kFloat32},
                        DeviceCase{CodecId::kOneBit, Algo::kSra, DataType::kFloat32},
                        DeviceCase{CodecId::kMaxMin, Algo::kAllgather, DataType::kFloat32}}) {
    SCOPED_TRACE(codecName(dc.codec));
    TensorOpts t;
    t.id = 3;
    t.codec = dc.codec;
    t.algo = dc.algo;
    auto want = hostResults(n, opts, t, count);
    std::vector<std::vector<float>> got(n, std::vector<float>(count));
    runRanks(n, opts, [&](Communicator& c, int r) {
      cudaStream_t stream;
      CUDA_OK(cudaStreamCreate(&stream));
      float *in = nullptr, *out = nullptr;
      CUDA_OK(cudaMalloc(&in, count * 4));
      CUDA_OK(cudaMalloc(&out, count * 4));
      std::vector<float> x = exactInput(count, r);
      for (int step = 0; step < 3; ++step) {  // three steps exercise the device residuals
        CUDA_OK(cudaMemcpy(in, x.data(), count * 4, cudaMemcpyHostToDevice));
        c.allreduce(in, out, count, DataType::kFloat32, RedOp::kAvg, t, stream);
      }
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaMemcpy(got[r].data(), out, count * 4, cudaMemcpyDeviceToHost));
      cudaFree(in);
      cudaFree(out);
      cudaStreamDestroy(stream);
    });
    for (int r = 0; r < n; ++r) EXPECT_TRUE(bitEqual(got[r], want[r])) << "rank " << r;
  }
}

TEST(Device, AllgatherMatchesHostPath) {
  if (!cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const int n = 2;
  const size_t count = 5000;
  TensorOpts t;
  t.codec = CodecId::kDyn8;
  std::vector<std::vector<float>> want(n), got(n, std::vector<float>(count * n));
  runRanks(n, Options{}, [&](Communicator& c, int r) {
    std::vector<float> x = exactInput(count, r);
    want[r].resize(count * n);
    c.allgather(x.data(), want[r].data(), count, DataType::kFloat32, t);
  });
  runRanks(n, Options{}, [&](Communicator& c, int r) {
    std::vector<float> x = exactInput(count, r);
    float *in = nullptr, *out = nullptr;
    CUDA_OK(cudaMalloc(&in, count * 4));
    CUDA_OK(cudaMalloc(&out, count * n * 4));
    CUDA_OK(cudaMemcpy(in, x.data(), count * 4, cudaMemcpyHostToDevice));
    c.allgather(in, out, count, DataType::kFloat32, t, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got[r].data(), out, count * n * 4, cudaMemcpyDeviceToHost));
    cudaFree(in);
    cudaFree(out);
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(bitEqual(got[r], want[r])) << "rank " << r;
}

}  // namespace
}  // namespace test
}  // namespace qccl
