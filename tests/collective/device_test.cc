// Device buffers (CUDA builds): allreduce, allgather and reduce-scatter on device memory over
// loopback ranks give the same bits as the host path on the same inputs, over several steps (the
// device residuals), with fp16/bf16 buffers, in place, and ordered on the caller's non-default
// stream: inputs are copied in and results copied out asynchronously on that stream from pinned
// memory, with no synchronization between the copies and the call, so a call that did not wait
// for the caller's stream, or a caller's stream that did not wait for qccl's work, reads or
// returns stale bytes. Skips when no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "coll_test_util.hpp"
#include "qccl/cuda_codec.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace test {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess)

// Host bytes of `x` in dtype `t` (fp32 values; the host path's own conversion is not used, the
// 16-bit inputs are plain truncations, identical for both paths).
std::vector<uint8_t> asBytes(const std::vector<float>& x, DataType t) {
  std::vector<uint8_t> b(x.size() * elementBytes(t));
  if (t == DataType::kFloat32) {
    std::memcpy(b.data(), x.data(), b.size());
    return b;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    uint16_t h;
    if (t == DataType::kBfloat16) {
      h = static_cast<uint16_t>(u >> 16);
    } else {  // the values are multiples of 1/4 below 2^9: exact in fp16
      const float v = x[i];
      const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
      if (v == 0.0f) {
        h = sign;
      } else {
        int e = 0;
        const float m = std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
        const auto mant = static_cast<uint16_t>(std::lround((m * 2.0f - 1.0f) * 1024.0f));
        h = static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | mant);
      }
    }
    std::memcpy(&b[i * 2], &h, 2);
  }
  return b;
}

// Pinned host memory, so that cudaMemcpyAsync is truly asynchronous on the caller's stream.
struct Pinned {
  explicit Pinned(size_t bytes) : n(bytes) {
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) p = nullptr;
  }
  ~Pinned() {
    if (p) cudaFreeHost(p);
  }
  void* p = nullptr;
  size_t n;
};

enum class Coll { kAllreduce, kAllgather, kReduceScatter };

struct DeviceCase {
  Coll coll;
  CodecId codec;
  Algo algo;
  DataType dtype;
  bool inPlace;
};

std::string caseName(const DeviceCase& c) {
  static const char* colls[] = {"allreduce", "allgather", "reducescatter"};
  static const char* types[] = {"fp32", "fp16", "bf16"};
  return std::string(colls[static_cast<int>(c.coll)]) + "/" + codecName(c.codec) + "/" +
         types[static_cast<int>(c.dtype)] + (c.inPlace ? "/inplace" : "") + (c.algo == Algo::kAuto ? "/auto" : "");
}

constexpr int kSteps = 3;  // several steps exercise the residuals (device memory on the device path)

// Element counts of one call's send and recv buffers.
std::pair<size_t, size_t> counts(const DeviceCase& c, size_t count, int n) {
  switch (c.coll) {
    case Coll::kAllgather:
      return {count, count * n};
    case Coll::kReduceScatter:
      return {count * n, count};
    default:
      return {count, count};
  }
}

void call(Communicator& comm, const DeviceCase& c, const void* send, void* recv, size_t count, const TensorOpts& t,
          void* stream) {
  switch (c.coll) {
    case Coll::kAllreduce:
      comm.allreduce(send, recv, count, c.dtype, RedOp::kAvg, t, stream);
      break;
    case Coll::kAllgather:
      comm.allgather(send, recv, count, c.dtype, t, stream);
      break;
    case Coll::kReduceScatter:
      comm.reduceScatter(send, recv, count, c.dtype, RedOp::kSum, t, stream);
      break;
  }
}

// The input of rank r at step s: exact small integers, different at each step.
std::vector<float> stepInput(size_t n, int r, int s) {
  std::vector<float> x = exactInput(n, r);
  for (float& v : x) v = v * 0.25f + static_cast<float>(s);
  return x;
}

struct Outcome {
  std::vector<std::vector<uint8_t>> recv;   // last step's result per rank
  std::vector<std::vector<uint8_t>> state;  // saveTensorState after the last step per rank
};

Outcome runHost(int n, const Options& opts, const DeviceCase& c, const TensorOpts& t, size_t count) {
  Outcome o{std::vector<std::vector<uint8_t>>(n), std::vector<std::vector<uint8_t>>(n)};
  runRanks(n, opts, [&](Communicator& comm, int r) {
    auto [sn, rn] = counts(c, count, n);
    const size_t eb = elementBytes(c.dtype);
    std::vector<uint8_t> send, recv(rn * eb);
    for (int s = 0; s < kSteps; ++s) {
      send = asBytes(stepInput(sn, r, s), c.dtype);
      if (c.inPlace) {
        std::vector<uint8_t> buf = send;
        if (c.coll == Coll::kAllreduce) {
          call(comm, c, buf.data(), buf.data(), count, t, nullptr);
          recv = buf;
        } else {  // reduce-scatter in place: recv is rank r's shard of send
          call(comm, c, buf.data(), buf.data() + r * count * eb, count, t, nullptr);
          recv.assign(buf.begin() + r * count * eb, buf.begin() + (r + 1) * count * eb);
        }
      } else {
        call(comm, c, send.data(), recv.data(), count, t, nullptr);
      }
    }
    o.recv[r] = recv;
    if (t.id != 0) o.state[r] = comm.saveTensorState(t.id);
  });
  return o;
}

Outcome runDevice(int n, const Options& opts, const DeviceCase& c, const TensorOpts& t, size_t count) {
  Outcome o{std::vector<std::vector<uint8_t>>(n), std::vector<std::vector<uint8_t>>(n)};
  runRanks(n, opts, [&](Communicator& comm, int r) {
    auto [sn, rn] = counts(c, count, n);
    const size_t eb = elementBytes(c.dtype);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    uint8_t *send = nullptr, *recv = nullptr;
    CUDA_OK(cudaMalloc(&send, sn * eb));
    CUDA_OK(cudaMalloc(&recv, rn * eb));
    Pinned in(sn * eb), out(rn * eb);
    ASSERT_TRUE(in.p && out.p);
    // Keeps the caller's stream busy for a while before each input copy (memsets of 1 GiB), so
    // that work qccl started without waiting for the stream would read the buffer before the copy.
    void* busy = nullptr;
    const size_t busyBytes = size_t{256} << 20;
    CUDA_OK(cudaMalloc(&busy, busyBytes));
    for (int s = 0; s < kSteps; ++s) {
      std::vector<uint8_t> x = asBytes(stepInput(sn, r, s), c.dtype);
      std::memcpy(in.p, x.data(), x.size());
      for (int k = 0; k < 4; ++k) CUDA_OK(cudaMemsetAsync(busy, s + k, busyBytes, stream));
      CUDA_OK(cudaMemcpyAsync(send, in.p, sn * eb, cudaMemcpyHostToDevice, stream));
      uint8_t* dst = recv;
      if (c.inPlace) dst = c.coll == Coll::kAllreduce ? send : send + r * count * eb;
      call(comm, c, send, dst, count, t, stream);
      CUDA_OK(cudaMemcpyAsync(out.p, dst, rn * eb, cudaMemcpyDeviceToHost, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
    }
    o.recv[r].assign(static_cast<uint8_t*>(out.p), static_cast<uint8_t*>(out.p) + rn * eb);
    if (t.id != 0) o.state[r] = comm.saveTensorState(t.id);
    cudaFree(busy);
    cudaFree(send);
    cudaFree(recv);
    cudaStreamDestroy(stream);
  });
  return o;
}

class Device : public ::testing::TestWithParam<DeviceCase> {};

TEST_P(Device, MatchesHostPathBitForBit) {
  if (!cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const DeviceCase c = GetParam();
  SCOPED_TRACE(caseName(c));
  const int n = 3;
  const size_t count = c.coll == Coll::kAllreduce ? 100003 : 20011;
  Options opts;
  opts.chunkBytes = 64 << 10;  // several chunks per call: the per-chunk staging is exercised
  opts.minCompressBytes = 0;
  // Under auto, ranks on one host sum exactly through shared memory; any other algorithm
  // compresses (allgather and reduce-scatter take Options::algo only for that choice).
  opts.algo = c.algo == Algo::kAuto ? Algo::kAuto : Algo::kSra;
  // Device buffers are compressed as asked under auto on one host; host buffers too with this.
  opts.localCompress = true;
  TensorOpts t;
  t.codec = c.codec;
  if (c.coll == Coll::kAllreduce) t.algo = c.algo;
  if (c.codec != CodecId::kFp32 && c.codec != CodecId::kFp16 && c.codec != CodecId::kBf16) t.id = 11;
  Outcome want = runHost(n, opts, c, t, count);
  Outcome got = runDevice(n, opts, c, t, count);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(got.recv[r].size(), want.recv[r].size());
    EXPECT_TRUE(got.recv[r] == want.recv[r]) << "rank " << r << ": results differ from the host path";
    EXPECT_TRUE(got.state[r] == want.state[r]) << "rank " << r << ": saved residuals differ from the host path";
    if (t.id != 0 && c.algo != Algo::kAuto) {
      EXPECT_FALSE(want.state[r].empty()) << "rank " << r << ": no state to compare";
    }
  }
  // The results are the same on every rank (allreduce, allgather).
  if (c.coll != Coll::kReduceScatter) {
    for (int r = 1; r < n; ++r) EXPECT_TRUE(got.recv[r] == got.recv[0]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Device,
    ::testing::Values(DeviceCase{Coll::kAllreduce, CodecId::kFp32, Algo::kRing, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kFp16, Algo::kRing, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kOneBit, Algo::kSra, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kOneBit, Algo::kSra, DataType::kFloat32, true},
                      DeviceCase{Coll::kAllreduce, CodecId::kSignScale, Algo::kSra, DataType::kFloat16, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kMaxMin, Algo::kAllgather, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kDyn8, Algo::kSra, DataType::kBfloat16, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kFp32, Algo::kSra, DataType::kFloat16, true},
                      DeviceCase{Coll::kAllreduce, CodecId::kOneBit, Algo::kAuto, DataType::kFloat32, false},
                      // Nothing to compress under auto: the exact sum through the shared segment,
                      // from a host copy of the input (out of place, in place, 16-bit).
                      DeviceCase{Coll::kAllreduce, CodecId::kFp32, Algo::kAuto, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllreduce, CodecId::kFp32, Algo::kAuto, DataType::kFloat32, true},
                      DeviceCase{Coll::kAllreduce, CodecId::kFp32, Algo::kAuto, DataType::kFloat16, false},
                      DeviceCase{Coll::kAllgather, CodecId::kDyn8, Algo::kSra, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllgather, CodecId::kOneBit, Algo::kSra, DataType::kFloat16, false},
                      DeviceCase{Coll::kAllgather, CodecId::kFp32, Algo::kSra, DataType::kFloat32, false},
                      DeviceCase{Coll::kAllgather, CodecId::kOneBit, Algo::kAuto, DataType::kFloat32, false},
                      DeviceCase{Coll::kReduceScatter, CodecId::kOneBit, Algo::kSra, DataType::kFloat32, false},
                      DeviceCase{Coll::kReduceScatter, CodecId::kMaxMin, Algo::kSra, DataType::kFloat32, true},
                      DeviceCase{Coll::kReduceScatter, CodecId::kFp32, Algo::kSra, DataType::kBfloat16, false},
                      DeviceCase{Coll::kReduceScatter, CodecId::kOneBit, Algo::kAuto, DataType::kFloat32, false}),
    [](const ::testing::TestParamInfo<DeviceCase>& i) {
      std::string s = caseName(i.param);
      for (char& ch : s)
        if (ch == '/') ch = '_';
      return s + "_" + std::to_string(i.index);
    });

TEST(DeviceArgs, HostAndDeviceBuffersMixedAreRefused) {
  if (!cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device";
  const size_t count = 1000;
  runRanks(2, Options{}, [&](Communicator& comm, int) {
    float* d = nullptr;
    CUDA_OK(cudaMalloc(&d, count * 4));
    std::vector<float> h(count, 1.0f);
    TensorOpts t;
    t.codec = CodecId::kFp32;
    try {
      comm.allreduce(h.data(), d, count, DataType::kFloat32, RedOp::kSum, t, nullptr);
      ADD_FAILURE() << "a host send with a device recv was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
    // The communicator stays usable: a device call after the refused one works.
    CUDA_OK(cudaMemcpy(d, h.data(), count * 4, cudaMemcpyHostToDevice));
    comm.allreduce(d, d, count, DataType::kFloat32, RedOp::kSum, t, nullptr);
    std::vector<float> back(count);
    CUDA_OK(cudaMemcpy(back.data(), d, count * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(back[17], 2.0f);
    cudaFree(d);
  });
}

}  // namespace
}  // namespace test
}  // namespace qccl
