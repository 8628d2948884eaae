// Communicator: argument checks, the choice of algorithm and codec, per-tensor error-feedback
// state, dtype conversion into an fp32 work array (the recv buffer itself for fp32), then one plan
// run by the executor in place on that array, and the average / conversion back.
//
// A failure in the middle of a collective leaves the ranks out of step, so it marks the
// communicator failed and tells the peers; argument errors are raised before anything is sent
// and leave the communicator usable.
#include "core/communicator.hpp"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codec/codec_math.hpp"
#include "core/device_path.hpp"
#include "core/executor.hpp"
#include "core/plan.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace {

// Error-feedback state of one tensor: the worker residual covers the whole tensor, the owner
// residual only this rank's sra shard.
// Device tensors keep theirs in device memory.
struct TensorState {
  std::vector<float> worker;
  std::vector<float> owner;
  device::DeviceArray workerDev;
  device::DeviceArray ownerDev;
  uint64_t calls = 0;

  size_t bytes() const { return (worker.size() + owner.size() + workerDev.size() + ownerDev.size()) * sizeof(float); }
};

bool isCast(CodecId c) { return c == CodecId::kFp32 || c == CodecId::kFp16 || c == CodecId::kBf16; }

void toFloat(const void* in, DataType t, float* out, size_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(in);
  if (t == DataType::kFloat16) {
    for (size_t i = 0; i < n; ++i) out[i] = math::halfToFloat(h[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = math::bf16ToFloat(h[i]);
  }
}

void fromFloat(const float* in, DataType t, void* out, size_t n) {
  uint16_t* h = static_cast<uint16_t*>(out);
  if (t == DataType::kFloat16) {
    for (size_t i = 0; i < n; ++i) h[i] = math::floatToHalf(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) h[i] = math::floatToBf16(in[i]);
  }
}

void validateOptions(const Options& o) {
  validateConfig(o.codec);
  QCCL_CHECK(o.chunkBytes >= sizeof(float), ErrorCode::kInvalidArgument, "options: chunkBytes must be >= 4");
  QCCL_CHECK(o.pipelineDepth >= 1 && o.pipelineDepth <= 64, ErrorCode::kInvalidArgument,
             "options: pipelineDepth must be in [1, 64]");
  QCCL_CHECK(o.timeoutSec > 0.0, ErrorCode::kInvalidArgument, "options: timeoutSec must be > 0");
  QCCL_CHECK(o.warmupCalls >= 0, ErrorCode::kInvalidArgument, "options: warmupCalls must be >= 0");
  int a = static_cast<int>(o.algo);
  QCCL_CHECK(a >= 0 && a <= 3, ErrorCode::kInvalidArgument, "options: unknown algorithm");
}

void validateBuffers(const void* send, const void* recv, size_t count, DataType dtype, const char* what) {
  int t = static_cast<int>(dtype);
  QCCL_CHECK(t >= 0 && t <= 2, ErrorCode::kInvalidArgument, std::string(what) + ": unknown datatype");
  QCCL_CHECK(count == 0 || (send != nullptr && recv != nullptr), ErrorCode::kInvalidArgument,
             std::string(what) + ": null buffer with a non-zero count");
  QCCL_CHECK(count <= (size_t{1} << 40), ErrorCode::kInvalidArgument, std::string(what) + ": count too large");
}

}  // namespace

struct Communicator::Impl {
  TransportPtr transport;
  Options opts;
  Executor exec;
  bool failed = false;
  std::string failure;
  uint32_t seq = 0;
  uint64_t calls = 0;
  std::map<std::pair<uint64_t, size_t>, TensorState> tensors;
  uint64_t residualBytes = 0;
  std::unique_ptr<device::DeviceContext> dev;  // created by the first call on device buffers
  // Plans by (kind, count, alignment), so that repeated calls build nothing. Bounded: a trainer
  // has a fixed set of bucket sizes, anything else just rebuilds.
  std::map<std::tuple<int, size_t, size_t>, Plan> plans;
  static constexpr size_t kMaxCachedPlans = 256;

  Impl(TransportPtr t, Options o) : transport(std::move(t)), opts(std::move(o)), exec(*transport) {}

  void checkUsable() const {
    if (failed) QCCL_THROW(ErrorCode::kCommFailed, "communicator failed earlier: " + failure);
  }

  // The tensor's codec: its own codec and bits, else the communicator's. Bits of the
  // communicator's codec do not carry over to a different codec named by the tensor.
  CodecConfig codecFor(const TensorOpts& t) const {
    CodecConfig cfg = opts.codec;
    if (t.codec) {
      int c = static_cast<int>(*t.codec);
      QCCL_CHECK(c >= 0 && c < kNumCodecs, ErrorCode::kInvalidArgument, "tensor options: unknown codec");
      if (*t.codec != cfg.codec) {
        cfg.bits = 0;
        cfg.stochastic = false;
      }
      cfg.codec = *t.codec;
    }
    if (t.bits != 0) cfg.bits = t.bits;
    if (cfg.codec != CodecId::kMaxMin) cfg.stochastic = false;
    validateConfig(cfg);
    return resolveConfig(cfg);
  }

  // The one place that picks an algorithm for `auto`:
  //   - fp32 codec, or a tensor below minCompressBytes (fp32 bytes): uncompressed fp32 ring, which
  //     is bandwidth-optimal and exact up to the summation order;
  //   - fp16/bf16: the ring with that cast on the wire;
  //   - other codecs: sra for 3 or more ranks (each rank sends and receives ~2(n-1)/n compressed
  //     tensors), allgather for 2 ranks (the same bytes in one round and one quantization stage).
  // An explicit ring with a bucket codec is refused: the ring re-quantizes partial sums at every
  // hop, so its error would grow with the number of ranks.
  Algo pickAlgo(Algo requested, CodecConfig* cfg, size_t count) const {
    if (requested == Algo::kRing) {
      QCCL_CHECK(isCast(cfg->codec), ErrorCode::kInvalidArgument,
                 std::string("algorithm ring sends fp32, fp16 or bf16, not ") + codecName(cfg->codec) +
                     " (use sra or allgather)");
      return Algo::kRing;
    }
    if (requested != Algo::kAuto) return requested;
    if (cfg->codec == CodecId::kFp32 || count * sizeof(float) < opts.minCompressBytes) {
      *cfg = resolveConfig(CodecConfig{});
      return Algo::kRing;
    }
    if (isCast(cfg->codec)) return Algo::kRing;
    return transport->size() >= 3 ? Algo::kSra : Algo::kAllgather;
  }

  TensorState& state(uint64_t id, size_t count) {
    return tensors[std::make_pair(id, count)];  // created on first use
  }

  // Residual arrays are (re)created zeroed when the size they must cover changes.
  float* residual(std::vector<float>& v, size_t n) {
    if (v.size() != n) {
      residualBytes += n * sizeof(float);
      residualBytes -= v.size() * sizeof(float);
      v.assign(n, 0.0f);
    }
    return v.data();
  }
  float* residual(device::DeviceArray& v, size_t n) {
    size_t old = v.size();
    float* p = v.ensure(n);
    residualBytes += n * sizeof(float);
    residualBytes -= old * sizeof(float);
    return p;
  }

  // kind: an Algo for allreduce, or -1 for the allgather collective.
  const Plan& plan(int kind, size_t count, size_t align) {
    auto key = std::make_tuple(kind, count, align);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    if (plans.size() >= kMaxCachedPlans) plans.clear();
    const int rank = transport->rank(), size = transport->size();
    Plan p;
    switch (kind) {
      case static_cast<int>(Algo::kRing):
        p = planRing(rank, size, count, align);
        break;
      case static_cast<int>(Algo::kSra):
        p = planSra(rank, size, count, align);
        break;
      case static_cast<int>(Algo::kAllgather):
        p = planAllgatherReduce(rank, size, count);
        break;
      default:
        p = planAllgather(rank, size, count);
        break;
    }
    return plans.emplace(key, std::move(p)).first->second;
  }

  device::DeviceContext& deviceContext() {
    if (!dev) {
      dev = std::make_unique<device::DeviceContext>();
      // From now on staging is page-locked, so chunk copies to and from the device are async.
      exec.setHostAllocator(HostAllocator{device::pinnedAlloc, device::pinnedFree});
    }
    return *dev;
  }

  ExecParams params(const CodecConfig& cfg) const {
    ExecParams p;
    p.codec = cfg;
    p.seq = seq;
    p.chunkElems = Executor::chunkElemsFor(cfg, opts.chunkBytes);
    p.depth = opts.pipelineDepth;
    p.timeoutSec = opts.timeoutSec;
    return p;
  }

  // Runs `f`, which talks to the peers. Any failure in the middle of a collective leaves the ranks
  // out of step, so the communicator is marked failed and the peers are told (unless a peer's
  // notice is what failed us: it has reached everyone already).
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      markFailed(e.code(), e.what());
      throw;
    } catch (const std::bad_alloc&) {
      markFailed(ErrorCode::kSystemError, "out of memory");
      QCCL_THROW(ErrorCode::kSystemError, "out of memory during a collective");
    } catch (const std::exception& e) {
      markFailed(ErrorCode::kInternalError, e.what());
      QCCL_THROW(ErrorCode::kInternalError, e.what());
    }
  }

  void markFailed(ErrorCode code, const std::string& why) noexcept {
    if (failed) return;
    failed = true;
    try {
      failure = why;
    } catch (...) {
    }
    if (code != ErrorCode::kRemoteError) transport->sendAbort(code, why);
  }

  static constexpr int kCheckWords = 5;
  int64_t checkWords[2 * kCheckWords] = {};
  bool tryNative(const float* send, float* recv, size_t count, const TensorOpts& t, DataType dtype, RedOp op);
  void waitCollective(Request& r, Clock::time_point deadline, const char* what);
  Algo prepareAllreduce(const TensorOpts& t, RedOp op, size_t count, CodecConfig* cfg);
  void runAllreduce(float* work, size_t count, const TensorOpts& t, CodecConfig cfg, Algo algo, ChunkOps* ops);
  void allreduceImpl(const void* send, void* recv, size_t count, DataType dtype, RedOp op, const TensorOpts& t);
  void allreduceDevice(const void* send, void* recv, size_t count, DataType dtype, RedOp op, const TensorOpts& t,
                       void* stream);
  void runAllgather(const float* in, float* out, size_t count, const TensorOpts& t, ChunkOps* ops);
  void allgatherImpl(const void* send, void* recv, size_t count, DataType dtype, const TensorOpts& t);
  void allgatherDevice(const void* send, void* recv, size_t count, DataType dtype, const TensorOpts& t, void* stream);
};

Algo Communicator::Impl::prepareAllreduce(const TensorOpts& t, RedOp op, size_t count, CodecConfig* cfg) {
  *cfg = codecFor(t);
  Algo requested = t.algo ? *t.algo : opts.algo;
  QCCL_CHECK(static_cast<int>(requested) >= 0 && static_cast<int>(requested) <= 3, ErrorCode::kInvalidArgument,
             "allreduce: unknown algorithm");
  QCCL_CHECK(op == RedOp::kSum || op == RedOp::kAvg, ErrorCode::kInvalidArgument, "allreduce: unknown reduction");
  return pickAlgo(requested, cfg, count);
}

void Communicator::Impl::runAllreduce(float* work, size_t count, const TensorOpts& t, CodecConfig cfg, Algo algo,
                                      ChunkOps* ops) {
  TensorState* st = nullptr;
  bool ef = opts.errorFeedback && cfg.codec != CodecId::kFp32 && algo != Algo::kRing;
  if (ef || opts.warmupCalls > 0) st = &state(t.id, count);
  if (st != nullptr && st->calls < static_cast<uint64_t>(opts.warmupCalls)) {
    cfg = resolveConfig(CodecConfig{});
    algo = Algo::kRing;
    ef = false;
  }
  ExecParams p = params(cfg);
  p.ops = ops;
  size_t align = algo == Algo::kSra && cfg.bucket ? cfg.bucket : 32;
  const Plan& plan = this->plan(static_cast<int>(algo), count, align);
  if (ef && algo == Algo::kSra) {
    size_t m = plan.ownerRange.size();
    p.ownerResidual = ops ? residual(st->ownerDev, m) : residual(st->owner, m);
  }
  if (ef) p.workerResidual = ops ? residual(st->workerDev, count) : residual(st->worker, count);
  guarded([&] { exec.run(plan, work, work, p); });
  if (st != nullptr) ++st->calls;
}

// `auto` with nothing to compress hands the sum to the library underneath when the transport has
// one (MPI: MPI_Iallreduce on qccl's duplicate communicator): the same bytes as the fp32 ring, with
// the library's tuned algorithms, so qccl is never the slower choice when compression cannot pay.
// The call's description (order, count, requested codec, datatype, op) is compared first, by a
// minimum over ranks of every word and of its negation, so a mismatch fails on every rank at once.
bool Communicator::Impl::tryNative(const float* send, float* recv, size_t count, const TensorOpts& t, DataType dtype,
                                   RedOp op) {
  if (count > static_cast<size_t>(INT32_MAX)) return false;
  const CodecConfig asked = codecFor(t);
  const int64_t mine[kCheckWords] = {static_cast<int64_t>(seq), static_cast<int64_t>(count),
                                     static_cast<int64_t>(asked.codec) * 256 + asked.bits,
                                     static_cast<int64_t>(dtype) * 16 + static_cast<int64_t>(op), 0x51434c4c};
  // The words live in the communicator: a collective that a timeout abandons may still write them.
  int64_t* words = checkWords;
  for (int i = 0; i < kCheckWords; ++i) {
    words[i] = mine[i];
    words[kCheckWords + i] = -mine[i];
  }
  RequestPtr check = transport->iallreduceMin(words, 2 * kCheckWords);
  if (!check) return false;
  static const char* const kField[kCheckWords] = {"call order", "count", "codec", "datatype or reduction", "operation"};
  guarded([&] {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts.timeoutSec));
    // A peer that finds the mismatch first sends its abort notice while this rank's check may
    // still be in flight; MPI forbids abandoning a collective, so these waits end by completion
    // or by the deadline only, not by a notice.
    waitCollective(*check, deadline, "allreduce (check of the call across ranks)");
    for (int i = 0; i < kCheckWords; ++i) {
      QCCL_CHECK(words[i] == mine[i] && -words[kCheckWords + i] == mine[i], ErrorCode::kMismatch,
                 std::string("allreduce: ranks disagree on the ") + kField[i] + " of call " + std::to_string(seq));
    }
    RequestPtr sum = transport->iallreduceSum(send, recv, count);
    QCCL_CHECK(sum != nullptr, ErrorCode::kInternalError, "allreduce: the transport's allreduce went away");
    waitCollective(*sum, deadline, "allreduce");
  });
  return true;
}

void Communicator::Impl::waitCollective(Request& r, Clock::time_point deadline, const char* what) {
  for (int round = 0; !r.test(); ++round) {
    transport->progress();
    QCCL_CHECK(Clock::now() < deadline, ErrorCode::kTimeout,
               std::string(what) + " timed out on rank " + std::to_string(transport->rank()) + " (QCCL_TIMEOUT)");
    transport->idle(std::chrono::microseconds(round < 64 ? 0 : 50));
  }
}

void Communicator::Impl::allreduceImpl(const void* send, void* recv, size_t count, DataType dtype, RedOp op,
                                       const TensorOpts& t) {
  CodecConfig cfg;
  Algo algo = prepareAllreduce(t, op, count, &cfg);
  ++seq;
  const Algo requested = t.algo ? *t.algo : opts.algo;
  const bool mayNative = requested == Algo::kAuto && algo == Algo::kRing && cfg.codec == CodecId::kFp32;
  float* work;
  bool done = false;
  if (dtype == DataType::kFloat32) {
    work = static_cast<float*>(recv);
    // Out of place, the library copies as part of its algorithm: no memmove first.
    done = mayNative && tryNative(static_cast<const float*>(send), work, count, t, dtype, op);
    if (!done && send != recv && count > 0) std::memmove(work, send, count * sizeof(float));
  } else {
    work = static_cast<float*>(exec.extraBuffer(0, count * sizeof(float)));
    toFloat(send, dtype, work, count);
    done = mayNative && tryNative(work, work, count, t, dtype, op);
  }
  if (!done) runAllreduce(work, count, t, cfg, algo, nullptr);
  if (op == RedOp::kAvg) {
    // A multiply by 1/n (not a divide), as the device path's cuda::scale does.
    const float inv = 1.0f / static_cast<float>(transport->size());
    for (size_t i = 0; i < count; ++i) work[i] = work[i] * inv;
  }
  if (dtype != DataType::kFloat32) fromFloat(work, dtype, recv, count);
  ++calls;
}

// Same steps as allreduceImpl, with the conversions and the codec on the device and the caller's
// stream. The last kernels (average, conversion) are left enqueued, as with any stream-ordered call.
void Communicator::Impl::allreduceDevice(const void* send, void* recv, size_t count, DataType dtype, RedOp op,
                                         const TensorOpts& t, void* stream) {
  CodecConfig cfg;
  Algo algo = prepareAllreduce(t, op, count, &cfg);
  device::DeviceContext& dc = deviceContext();
  ++seq;
  float* work;
  if (dtype == DataType::kFloat32) {
    work = static_cast<float*>(recv);
    if (send != recv) dc.copy(work, send, count * sizeof(float), stream);
  } else {
    work = dc.buffer(0, count);
    dc.toFloat(send, dtype, work, count, stream);
  }
  runAllreduce(work, count, t, cfg, algo, dc.ops(stream));
  if (op == RedOp::kAvg) dc.scale(work, count, 1.0f / static_cast<float>(transport->size()), stream);
  if (dtype != DataType::kFloat32) dc.fromFloat(work, dtype, recv, count, stream);
  ++calls;
}

void Communicator::Impl::runAllgather(const float* in, float* out, size_t count, const TensorOpts& t, ChunkOps* ops) {
  CodecConfig cfg = codecFor(t);
  TensorState* st = nullptr;
  bool ef = opts.errorFeedback && cfg.codec != CodecId::kFp32;
  if (ef || opts.warmupCalls > 0) st = &state(t.id, count);
  if (st != nullptr && st->calls < static_cast<uint64_t>(opts.warmupCalls)) {
    cfg = resolveConfig(CodecConfig{});
    ef = false;
  }
  ExecParams p = params(cfg);
  p.ops = ops;
  if (ef) p.workerResidual = ops ? residual(st->workerDev, count) : residual(st->worker, count);
  const Plan& plan = this->plan(-1, count, 1);
  guarded([&] { exec.run(plan, in, out, p); });
  if (st != nullptr) ++st->calls;
}

void Communicator::Impl::allgatherImpl(const void* send, void* recv, size_t count, DataType dtype,
                                       const TensorOpts& t) {
  const size_t size = static_cast<size_t>(transport->size());
  codecFor(t);  // validates before the call counts
  ++seq;
  const float* in = static_cast<const float*>(send);
  float* out = static_cast<float*>(recv);
  if (dtype != DataType::kFloat32) {
    float* tmp = static_cast<float*>(exec.extraBuffer(0, count * sizeof(float)));
    toFloat(send, dtype, tmp, count);
    in = tmp;
    out = static_cast<float*>(exec.extraBuffer(1, count * size * sizeof(float)));
  }
  runAllgather(in, out, count, t, nullptr);
  if (dtype != DataType::kFloat32) fromFloat(out, dtype, recv, count * size);
  ++calls;
}

void Communicator::Impl::allgatherDevice(const void* send, void* recv, size_t count, DataType dtype,
                                         const TensorOpts& t, void* stream) {
  const size_t size = static_cast<size_t>(transport->size());
  codecFor(t);
  device::DeviceContext& dc = deviceContext();
  ++seq;
  const float* in = static_cast<const float*>(send);
  float* out = static_cast<float*>(recv);
  if (dtype != DataType::kFloat32) {
    float* tmp = dc.buffer(0, count);
    dc.toFloat(send, dtype, tmp, count, stream);
    in = tmp;
    out = dc.buffer(1, count * size);
  }
  runAllgather(in, out, count, t, dc.ops(stream));
  if (dtype != DataType::kFloat32) dc.fromFloat(out, dtype, recv, count * size, stream);
  ++calls;
}

Communicator::Communicator(TransportPtr transport, Options options) {
  QCCL_CHECK(transport != nullptr, ErrorCode::kInvalidArgument, "communicator: null transport");
  validateOptions(options);
  impl_ = std::make_unique<Impl>(std::move(transport), std::move(options));
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->transport->rank(); }
int Communicator::size() const { return impl_->transport->size(); }
const Options& Communicator::options() const { return impl_->opts; }
Transport& Communicator::transport() { return *impl_->transport; }

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType dtype, RedOp op,
                             const TensorOpts& opts, void* stream) {
  Impl& m = *impl_;
  m.checkUsable();
  validateBuffers(send, recv, count, dtype, "allreduce");
  const bool dev = count > 0 && device::isDevicePointer(recv);
  QCCL_CHECK(dev == (count > 0 && device::isDevicePointer(send)), ErrorCode::kInvalidArgument,
             "allreduce: send and recv must both be host or both be device memory");
  if (dev) {
    m.allreduceDevice(send, recv, count, dtype, op, opts, stream);
  } else {
    m.allreduceImpl(send, recv, count, dtype, op, opts);
  }
}

void Communicator::allgather(const void* send, void* recv, size_t sendCount, DataType dtype, const TensorOpts& opts,
                             void* stream) {
  Impl& m = *impl_;
  m.checkUsable();
  validateBuffers(send, recv, sendCount, dtype, "allgather");
  QCCL_CHECK(sendCount <= (size_t{1} << 40) / static_cast<size_t>(size()), ErrorCode::kInvalidArgument,
             "allgather: count too large");
  const bool dev = sendCount > 0 && device::isDevicePointer(recv);
  QCCL_CHECK(dev == (sendCount > 0 && device::isDevicePointer(send)), ErrorCode::kInvalidArgument,
             "allgather: send and recv must both be host or both be device memory");
  if (dev) {
    m.allgatherDevice(send, recv, sendCount, dtype, opts, stream);
  } else {
    m.allgatherImpl(send, recv, sendCount, dtype, opts);
  }
}

void Communicator::releaseTensor(uint64_t id) {
  Impl& m = *impl_;
  for (auto it = m.tensors.lower_bound(std::make_pair(id, size_t{0}));
       it != m.tensors.end() && it->first.first == id;) {
    m.residualBytes -= it->second.bytes();
    it = m.tensors.erase(it);
  }
}

void Communicator::abort(const std::string& reason) noexcept { impl_->markFailed(ErrorCode::kCommFailed, reason); }

bool Communicator::failed() const { return impl_->failed; }

CommStats Communicator::stats() const {
  const Impl& m = *impl_;
  CommStats s;
  const ExecStats& e = m.exec.stats();
  s.bytesSent = e.bytesSent;
  s.bytesReceived = e.bytesReceived;
  s.calls = m.calls;
  s.residualBytes = m.residualBytes;
  const uint64_t devBytes = m.dev ? m.dev->bytesHeld() : 0;
  s.stagingBytes = e.stagingBytes + devBytes;
  s.peakStagingBytes = e.peakStagingBytes + devBytes;
  return s;
}

}  // namespace qccl
