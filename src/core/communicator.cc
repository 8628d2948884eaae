// Communicator: argument checks, the choice of path (select.hpp, agreed across ranks where it has
// to be), per-tensor state (tensor_state.hpp), dtype conversion into an fp32 work array (the recv
// buffer itself for fp32), then one plan run by the executor in place on that array, and the
// average / conversion back. One code path for host and device buffers, over a MemorySpace.
//
// A failure in the middle of a collective leaves the ranks out of step, so it marks the
// communicator failed and tells the peers first, then drops what is still outstanding (bounded);
// argument errors are raised before anything is sent and leave the communicator usable.
#include "core/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <tuple>
#include <utility>

#include "core/call_check.hpp"
#include "core/device_path.hpp"
#include "core/executor.hpp"
#include "core/memory_space.hpp"
#include "core/plan.hpp"
#include "core/plan_hier.hpp"
#include "core/select.hpp"
#include "core/shm_group.hpp"
#include "core/tensor_state.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace {

// After a failure, what the outstanding requests may still take in all (the notice is out).
constexpr std::chrono::milliseconds kDropBudget{200};
// In-place calls handed to the MPI library's allreduce from this size on are staged out of place
// (see allreduce()); below it the copy is not worth the scratch memory.
constexpr size_t kNativeStageMinBytes = size_t{256} << 10;

void validateBuffers(const void* send, const void* recv, size_t count, DataType dtype, const char* what) {
  QCCL_CHECK(isValid(dtype), ErrorCode::kInvalidArgument, std::string(what) + ": unknown datatype");
  QCCL_CHECK(count == 0 || (send != nullptr && recv != nullptr), ErrorCode::kInvalidArgument,
             std::string(what) + ": null buffer with a non-zero count");
  QCCL_CHECK(count <= (size_t{1} << 40), ErrorCode::kInvalidArgument, std::string(what) + ": count too large");
}

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The header tag of call `n` for tensor `id`: every message of the call carries it, so calls made
// in a different order, or with different tensor ids, on different ranks fail the header check.
uint32_t callTag(uint64_t n, uint64_t id) { return static_cast<uint32_t>(mix64(n ^ mix64(id))); }

// Two hosts or more, and one of them with two ranks or more: where hier differs from flat.
bool sharesHosts(const std::vector<int>& hostOfRank) {
  std::map<int, int> ranksOn;
  for (int h : hostOfRank) ++ranksOn[h];
  return ranksOn.size() >= 2 && ranksOn.size() < hostOfRank.size();
}

// Two ranks or more, all on one host: where `auto` sums in shared memory (shm_group.hpp).
bool allOnOneHost(const std::vector<int>& hostOfRank) {
  return hostOfRank.size() >= 2 &&
         std::all_of(hostOfRank.begin(), hostOfRank.end(), [&](int h) { return h == hostOfRank[0]; });
}

// Some neighbours of the ring (rank r sends to r + 1) on different hosts. The same answer on every
// rank, so every rank cuts the ring's chunks alike.
//
// Why the fp32 ring then cuts its chunks to the transport's eager limit (Transport::eagerBytes):
// over Open MPI's TCP a message above it waits for the receiver's reply, and that reply queues
// behind the receiver's own outgoing data on the same connection and link, so the rank that starts
// a step later waits longest. On 2 emulated hosts at 1 Gbit/s the fp32 ring's steps (8 MiB each
// way at 16 MiB, which plain MPI exchanges in 70 ms) ran at about half the line rate; eager chunks
// need no reply: 0.55-0.64x the time on 2 hosts, 0.85x on 4, level with gloo (bench/RESULTS.md,
// "The ring's chunks at the eager limit"). They cost 41-80% more CPU per call, so only the fp32
// ring takes them: the fp16 ring's 512 KB messages ran as fast uncut on 4 hosts and faster on 2
// at 16 MiB (73 against 84 ms), and sra's all-to-all, bound by codec work on 2 cores shared by 4
// ranks, spent 12-20% more CPU with eager chunks and was no faster.
bool ringCrossesHosts(const std::vector<int>& hostOfRank) {
  for (size_t r = 0; r < hostOfRank.size(); ++r)
    if (hostOfRank[r] != hostOfRank[(r + 1) % hostOfRank.size()]) return true;
  return false;
}

// Tags of the two exchanges that set the shared segment up (setupShm()).
constexpr uint64_t kShmSetupId = 0x73686d2d73657475ull;

// Enters a memory space for one call and always leaves it.
class SpaceScope {
 public:
  SpaceScope(MemorySpace& s, const void* ptr, void* stream) : s_(s) { s_.begin(ptr, stream); }
  ~SpaceScope() { s_.end(); }
  SpaceScope(const SpaceScope&) = delete;
  SpaceScope& operator=(const SpaceScope&) = delete;

 private:
  MemorySpace& s_;
};

}  // namespace

struct Communicator::Impl {
  TransportPtr transport;
  Options opts;
  Executor exec;
  // Spaces before the tensor states: residual arrays must die before the space that made them.
  std::unique_ptr<MemorySpace> host;
  std::unique_ptr<MemorySpace> dev;  // created by the first call on device buffers
  TensorStateStore tensors;
  std::atomic<bool> cancel{false};
  bool failed = false;
  std::string failure;
  uint64_t callNumber = 0;
  // Plans by (kind, count, alignment), so that repeated calls build nothing. Bounded: a trainer
  // has a fixed set of bucket sizes, anything else just rebuilds.
  std::map<std::tuple<int, size_t, size_t>, Plan> plans;
  static constexpr size_t kMaxCachedPlans = 256;
  std::map<std::pair<size_t, size_t>, HierPlan> hierPlans;  // by (count, alignment), same bound
  std::map<size_t, HierAllgatherPlan> hierGatherPlans;      // by count, same bound
  // The cross-rank check's two message buffers (call_check.hpp), kept between calls.
  static constexpr int kCheckWords = CallCheck::kWords;
  std::vector<float> checkScratch;
  CheckTraffic checkTraffic;  // the cross-rank checks' messages, in bytesSent/bytesReceived too
  // Published at the end of every call, so that stats() from another thread never races the call.
  WaitTimes nativeWaits;  // waits for the transport's own collectives (check, native allreduce)
  std::atomic<double> statEncode{0}, statDecode{0}, statWait{0}, statIdle{0};
  std::atomic<uint64_t> statBytesSent{0}, statBytesSentInterHost{0}, statMessagesSent{0}, statBytesReceived{0},
      statCalls{0}, statResidual{0}, statPeakResidual{0}, statStaging{0}, statPeakStaging{0}, statTensors{0},
      statEvictions{0};
  // An Algo, + kNativeFlag for the library's sum, kShmFlag for the segment's, kCheckFlag for a sum
  // that rode along with the cross-rank check (call_check.hpp).
  std::atomic<int> statLastAlgo{static_cast<int>(Algo::kAuto)};
  static constexpr int kNativeFlag = 256, kShmFlag = 512, kCheckFlag = 768;
  const bool hostsShared;  // where hier differs from flat (sharesHosts())
  const bool oneHost;      // every rank on one host (allOnOneHost())
  // The transport's eager limit where the ring crosses hosts, else 0 (runPlan cuts the fp32 ring's
  // chunks to it, decide() lets `auto` prefer that ring over the library's allreduce).
  const size_t ringEagerBytes;
  // The shared segment of `auto` on one host: set up by the first `auto` allreduce (setupShm()),
  // the same answer on every rank. 0: not tried yet, 1: in use, -1: off.
  int shmState = 0;
  std::unique_ptr<ShmGroup> shm;

  Impl(TransportPtr t, Options o)
      : transport(std::move(t)),
        opts(std::move(o)),
        exec(*transport),
        host(makeHostSpace()),
        tensors(opts.maxResidualBytes),
        hostsShared(sharesHosts(transport->hostOfRanks())),
        oneHost(allOnOneHost(transport->hostOfRanks())),
        ringEagerBytes(ringCrossesHosts(transport->hostOfRanks()) ? transport->eagerBytes() : 0) {}
  ~Impl() { tensors.releaseAll(); }

  void checkUsable() const {
    if (failed) QCCL_THROW(ErrorCode::kCommFailed, "communicator failed earlier: " + failure);
    if (cancel.load()) QCCL_THROW(ErrorCode::kCommFailed, "communicator was aborted (qcclCommAbort)");
  }

  MemorySpace& spaceFor(const void* send, const void* recv, size_t count, const char* what) {
    const bool d = count > 0 && device::isDevicePointer(recv);
    QCCL_CHECK(d == (count > 0 && device::isDevicePointer(send)), ErrorCode::kInvalidArgument,
               std::string(what) + ": send and recv must both be host or both be device memory");
    if (!d) return *host;
    if (!dev) {
      dev = device::makeDeviceSpace();
      // From now on staging is page-locked, so chunk copies to and from the device are async.
      exec.setHostAllocator(HostAllocator{device::pinnedAlloc, device::pinnedFree});
    }
    return *dev;
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
    return cfg;
  }

  // kind: an Algo for allreduce, -1 for the allgather collective, -2 for reduce-scatter (count is
  // then the shard's).
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
      case -2:
        p = planReduceScatter(rank, size, count);
        break;
      default:
        p = planAllgather(rank, size, count);
        break;
    }
    return plans.emplace(key, std::move(p)).first->second;
  }

  const HierAllgatherPlan& hierGatherPlan(size_t count) {
    auto it = hierGatherPlans.find(count);
    if (it != hierGatherPlans.end()) return it->second;
    if (hierGatherPlans.size() >= kMaxCachedPlans) hierGatherPlans.clear();
    HierAllgatherPlan p = planHierAllgather(transport->rank(), transport->hostOfRanks(), count);
    return hierGatherPlans.emplace(count, std::move(p)).first->second;
  }

  const HierPlan& hierPlan(size_t count, size_t align) {
    auto key = std::make_pair(count, align);
    auto it = hierPlans.find(key);
    if (it != hierPlans.end()) return it->second;
    if (hierPlans.size() >= kMaxCachedPlans) hierPlans.clear();
    HierPlan p = planHier(transport->rank(), transport->hostOfRanks(), count, align);
    return hierPlans.emplace(key, std::move(p)).first->second;
  }

  ExecParams params(const CodecConfig& cfg, uint32_t seq, ChunkOps* ops) const {
    ExecParams p;
    p.codec = cfg;
    p.seq = seq;
    p.chunkElems = Executor::chunkElemsFor(cfg, opts.chunkBytes ? opts.chunkBytes : chunkBytesFor(cfg.codec));
    p.depth = opts.pipelineDepth;
    p.timeoutSec = opts.timeoutSec;
    p.cancel = &cancel;
    p.ops = ops;
    return p;
  }

  WaitSpec waitSpec(const char* what) {
    WaitSpec w;
    w.times = &nativeWaits;
    w.deadline = deadlineIn(opts.timeoutSec);
    w.what = what;
    w.cancel = &cancel;
    return w;
  }

  // Runs `f`, which talks to the peers. Any failure in the middle of a collective leaves the ranks
  // out of step: the communicator is marked failed and the peers are told (unless a peer's notice
  // is what failed us: it has reached everyone already), and only then is what is still
  // outstanding dropped, within kDropBudget.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      fail(e.code(), e.what());
      throw;
    } catch (const std::bad_alloc&) {
      fail(ErrorCode::kSystemError, "out of memory");
      QCCL_THROW(ErrorCode::kSystemError, "out of memory during a collective");
    } catch (const std::exception& e) {
      fail(ErrorCode::kInternalError, e.what());
      QCCL_THROW(ErrorCode::kInternalError, e.what());
    }
  }

  void fail(ErrorCode code, const std::string& why) noexcept {
    markFailed(code, why);
    transport->limitDrops(Clock::now() + kDropBudget);
    exec.abandon();
    publishStats();
  }

  void markFailed(ErrorCode code, const std::string& why) noexcept {
    if (failed) return;
    failed = true;
    try {
      failure = why;
    } catch (...) {
    }
    transport->markFailed();
    if (code != ErrorCode::kRemoteError) transport->sendAbort(code, why);
    if (shm) shm->poison();
  }

  void publishStats() noexcept {
    const ExecStats& e = exec.stats();
    const TensorStateStats t = tensors.stats();
    // The shared segment counts with its part per rank (every rank maps all of it).
    const uint64_t spaces = host->bytesHeld() + (dev ? dev->bytesHeld() : 0) +
                            (shm ? shm->bytes() / static_cast<uint64_t>(shm->size()) : 0);
    statBytesSent.store(e.bytesSent + checkTraffic.sent);
    statBytesSentInterHost.store(e.bytesSentInterHost + checkTraffic.sentInterHost);
    statMessagesSent.store(e.messagesSent + checkTraffic.messages);
    statBytesReceived.store(e.bytesReceived + checkTraffic.received);
    statResidual.store(t.bytes);
    statPeakResidual.store(t.peakBytes);
    statTensors.store(t.tensors);
    statEvictions.store(t.evictions);
    statStaging.store(e.stagingBytes + spaces);
    statEncode.store(e.encodeSec);
    statDecode.store(e.decodeSec);
    statWait.store(e.waits.wait + nativeWaits.wait);
    statIdle.store(e.waits.idle + nativeWaits.idle);
    const uint64_t peak = e.peakStagingBytes + spaces;
    if (peak > statPeakStaging.load()) statPeakStaging.store(peak);
  }

  // A small sum that may ride along with the cross-rank check (agree()): the call's fp32 host input
  // and output (`host`: it is one; the pointers may be null for 0 elements); `done` is set when the
  // check computed the sum too.
  struct Fuse {
    bool host = false;
    const float* in = nullptr;
    float* out = nullptr;
    bool done = false;
  };
  Selection decide(const TensorOpts& t, size_t count, DataType dtype, RedOp op, MemorySpace& space, TensorState** state,
                   int* trial, Fuse* fuse, int64_t* shmDesc);
  /// The error control of a call's residual encodes: the call's own gain, else the tensor's setting.
  float gainFor(const TensorOpts& t) const { return t.feedbackGain ? *t.feedbackGain : tensors.gain(t.id); }
  Selection tune(TensorState& st, const TensorOpts& t, const Selection& first, const Selection& second, int* trial);
  void agree(const TensorOpts& t, size_t count, DataType dtype, RedOp op, const CodecConfig& asked, const Selection& s,
             Fuse* fuse);
  // Collectives the shared segment's check tells apart (callWords()).
  enum Kind : int { kAllreduce = 0, kAllgather = 1, kReduceScatter = 2 };
  void callWords(const TensorOpts& t, size_t count, DataType dtype, RedOp op, const CodecConfig& asked,
                 const Selection& s, bool fused, int64_t* words, Kind kind = kAllreduce) const;
  bool shmFor(const TensorOpts& t);
  [[noreturn]] void throwDisagreement(int word, const char* what = "allreduce") const;
  void setupShm();
  void runShm(const int64_t* desc, const float* in, float* out, size_t count, Kind kind = kAllreduce);
  void waitCollective(Request& r, const char* what);
  void runNative(const float* in, float* out, size_t count);
  // With op kAvg, hands the executor the 1/n to apply in the last decode (ExecParams::outScale)
  // where the plan and the memory space allow it; returns whether it did, else the caller scales.
  bool averageInDecode(const Plan& plan, ExecParams& p, RedOp op) const {
    if (op != RedOp::kAvg || !plan.lastStepWritesFinal || p.ops != nullptr) return false;
    p.outScale = 1.0f / static_cast<float>(transport->size());
    return true;
  }
  // Returns averageInDecode()'s answer for `op`.
  // `epi`: the call's epilogue, run inside the last decode when the plan writes its final values
  // there into host memory (*epiRan set), else left to the caller.
  bool runPlan(const Plan& plan, const float* src, float* dst, const Selection& s, TensorState* st, uint32_t seq,
               MemorySpace& space, RedOp op = RedOp::kSum, const DecodeEpilogue* epi = nullptr, bool* epiRan = nullptr,
               const DecodeEpilogue* pro = nullptr);
  void runHier(size_t count, const float* in, float* work, const Selection& s, TensorState* st, uint32_t seq,
               MemorySpace& space);
  // `epi`: an epilogue (Communicator::allreduce with fn); `pro`: a prologue over the (writable) send
  // buffer, run before anything reads it: at each chunk's encode where the plan encodes its source
  // once, else over the whole buffer first.
  void allreduce(const void* send, void* recv, size_t count, DataType dtype, RedOp op, const TensorOpts& t,
                 void* stream, const DecodeEpilogue* epi = nullptr, const DecodeEpilogue* pro = nullptr);
  Selection decideOther(const TensorOpts& t, size_t count, size_t total, MemorySpace& space, TensorState** state,
                        const char* what);
  void allgather(const void* send, void* recv, size_t count, DataType dtype, const TensorOpts& t, void* stream);
  void reduceScatter(const void* send, void* recv, size_t count, DataType dtype, RedOp op, const TensorOpts& t,
                     void* stream);
};

// The path of one allreduce: selectAlgorithm() on the call's inputs, with the tensor's warm-up
// state looked up only when the call would otherwise compress or auto may try hier (so other
// never-compressed tensors keep no state); then auto's choice between flat and hier (tune()).
// `auto` over a transport with a native path then agrees on the result across ranks. *trial is the
// candidate this call times for tune() (0 flat, 1 hier), or -1. `fuse` (agree()) may compute a
// small uncompressed sum with the check. Where every rank is on one host, `auto` sets up the shared
// segment on its first call and from then on checks every call there instead (shmDesc gets the
// call's description, ShmGroup::kDescWords words; shmDesc[0] stays -1 when there is no such check).
Selection Communicator::Impl::decide(const TensorOpts& t, size_t count, DataType dtype, RedOp op, MemorySpace& space,
                                     TensorState** state, int* trial, Fuse* fuse, int64_t* shmDesc) {
  QCCL_CHECK(isValid(op), ErrorCode::kInvalidArgument, "allreduce: unknown reduction");
  SelectInput in;
  in.requested = t.algo ? *t.algo : opts.algo;
  QCCL_CHECK(isValid(in.requested), ErrorCode::kInvalidArgument, "allreduce: unknown algorithm");
  in.codec = codecFor(t);
  in.shmAvailable = shmFor(t);
  in.deviceBuffers = space.isDevice();
  in.localCompress = opts.localCompress;
  in.count = count;
  in.nranks = transport->size();
  in.minCompressBytes = opts.minCompressBytes;
  in.errorFeedback = opts.errorFeedback;
  in.hasId = t.id != 0;
  in.nativeAvailable = count <= static_cast<size_t>(INT32_MAX) && transport->hasNativeAllreduce();
  if (opts.autoRing && ringEagerBytes > 0 && transport->size() >= 4 && !space.isDevice())
    in.ringOverNativeBytes = kRingOverNativeBytes;
  Selection s = selectAlgorithm(in);
  *state = nullptr;
  *trial = -1;
  const bool compresses = !s.native && (s.codec.codec != CodecId::kFp32 || s.algo != Algo::kRing);
  const bool tunable = in.requested == Algo::kAuto && opts.autoHier && t.id != 0 &&
                       count * sizeof(float) >= kTuneMinBytes && hostsShared;
  // The ring over the library's allreduce (SelectInput::ringOverNativeBytes) wins on slow links and
  // loses where the link is fast and the CPU is the limit, so it is timed too ("auto and hier").
  // ringOverNativeBytes only ever turns an uncompressed `auto` selection (fp32 ring) away from the
  // library's path, so that path being available and this selection not taking it is the whole test.
  const bool raceNative = !tunable && t.id != 0 && in.ringOverNativeBytes > 0 && in.nativeAvailable &&
                          in.requested == Algo::kAuto && !s.native && !s.shm && s.codec.codec == CodecId::kFp32;
  if (t.id != 0 && (s.errorFeedback || (compresses && opts.warmupCalls > 0) || tunable || raceNative)) {
    TensorState& st = tensors.acquire(t.id, count, space);
    *state = &st;
    if (compresses && st.calls < static_cast<uint64_t>(opts.warmupCalls)) {
      in.warmup = true;
      s = selectAlgorithm(in);
    }
    if (tunable && !in.warmup) {
      SelectInput h = in;
      h.requested = Algo::kHier;
      if (s.codec.codec == CodecId::kFp32) h.codec = CodecConfig{};  // uncompressed stays uncompressed
      s = tune(st, t, s, selectAlgorithm(h), trial);
    } else if (raceNative) {
      SelectInput nat = in;
      nat.ringOverNativeBytes = 0;
      s = tune(st, t, selectAlgorithm(nat), s, trial);
    }
  }
  shmDesc[0] = -1;
  if (in.shmAvailable) {
    callWords(t, count, dtype, op, in.codec, s, false, shmDesc);
  } else if (in.requested == Algo::kAuto && in.nativeAvailable) {
    agree(t, count, dtype, op, in.codec, s, fuse);
  }
  return s;
}

// Sets up the shared segment of a communicator whose ranks are all on one host, collectively, on
// the first `auto` allreduce (every rank makes it, whether or not its own Options::shm allows the
// segment, so that every rank reaches the same answer). Two fp32 allgathers through qccl's own
// messages: (whether this rank allows it, whether rank 0 created the segment, its name as one
// float per byte), then whether each rank mapped it. The segment is used only when all allowed it
// and all mapped it; rank 0 removes the name after the second round either way, so nothing stays
// behind in /dev/shm. A failure to create or map it is not an error (the call goes on through the
// transport), only a one-line note on stderr.
void Communicator::Impl::setupShm() {
  shmState = -1;
  // A peer that gave up before this call (its abort notice is here) is reported as such, not as
  // the failed send to it that the exchange below would otherwise run into first.
  transport->progress();
  pollWait(*transport, waitSpec("allreduce (shared-memory set-up)"));
  constexpr size_t kNameFloats = 48;
  const int n = transport->size(), me = transport->rank();
  const size_t width = 2 + kNameFloats;
  std::vector<float> mine(width, 0.0f), all(width * static_cast<size_t>(n), 0.0f);
  std::unique_ptr<ShmGroup> g;
  std::string why;
  mine[0] = opts.shm ? 1.0f : 0.0f;
  if (me == 0 && opts.shm) {
    try {
      g = ShmGroup::create(n, opts.shmChunkBytes / sizeof(float));
      if (g->name().size() <= kNameFloats) {
        mine[1] = 1.0f;
        for (size_t i = 0; i < g->name().size(); ++i) mine[2 + i] = static_cast<unsigned char>(g->name()[i]);
      }
    } catch (const Error& e) {
      why = e.what();
    }
  }
  const ExecParams p1 = params(resolveConfig(CodecConfig{}), callTag(callNumber + 1, kShmSetupId), host->ops());
  exec.run(plan(-1, width, 1), mine.data(), all.data(), p1);
  bool usable = all[1] == 1.0f;
  for (int r = 0; r < n; ++r) usable = usable && all[static_cast<size_t>(r) * width] == 1.0f;
  bool mapped = me == 0 ? g != nullptr : false;
  if (usable && me != 0) {
    std::string name;
    for (size_t i = 0; i < kNameFloats && all[2 + i] != 0.0f; ++i)
      name += static_cast<char>(static_cast<int>(all[2 + i]));
    try {
      g = ShmGroup::open(name, n, me);
      mapped = true;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  const float ok = usable && mapped ? 1.0f : 0.0f;
  std::vector<float> oks(static_cast<size_t>(n), 0.0f);
  const ExecParams p2 = params(resolveConfig(CodecConfig{}), callTag(callNumber + 1, kShmSetupId + 1), host->ops());
  exec.run(plan(-1, 1, 1), &ok, oks.data(), p2);
  if (me == 0 && g) g->unlink();
  const bool allMapped = std::all_of(oks.begin(), oks.end(), [](float v) { return v == 1.0f; });
  if (!why.empty())
    std::fprintf(stderr, "qccl: rank %d: no shared-memory sum on this host (%s); going through the transport\n", me,
                 why.c_str());
  if (usable && allMapped) {
    shm = std::move(g);
    shmState = 1;
  }
}

// auto and hier, auto and the ring. hier sends each host's data across the slow links once instead of once per rank,
// at the price of two more passes inside each host; which one wins depends on the link rate, the
// codec's ratio and the CPU, which only a measurement knows (bench/RESULTS.md, "auto and hier": at
// 2 hosts x 2 ranks, fp32, hier is 1.34x the best uncompressed path at 1 Gbit/s and 0.57x unshaped;
// onebit hier is 1.79x sra at 100 Mbit/s and 0.55x at 1 Gbit/s). So where ranks share hosts, the first kTuneTrials
// calls of a tensor alternate (flat first) and time both; the next call exchanges every rank's best time of each (an
// fp32 allgather of two floats: the same bytes on every rank), and every rank keeps hier only when it was at least 5%
// faster on the slowest rank. The choice lives in the tensor's state (not in checkpoints: a restored tensor tries
// again). While the two alternate, the owner residual starts from zero at each switch (TensorStateStore::owner); the
// worker residual carries over, as both schedules owe it for the same elements.
// The same trial decides between the library's allreduce (`first`) and qccl's fp32 ring (`second`) for the uncompressed
// tensors that SelectInput::ringOverNativeBytes gives the ring, where no hier trial runs: at 1 Gbit/s the ring at the
// eager limit is level with gloo where MPI_Iallreduce is up to 1.24x slower, while on unshaped links between 4
// emulated hosts it took 1.3-1.8x MPI_Iallreduce's time (bench/RESULTS.md, "UCX: every message eager").
Selection Communicator::Impl::tune(TensorState& st, const TensorOpts& t, const Selection& first,
                                   const Selection& second, int* trial) {
  TensorState::Tune& tu = st.tune;
  if (tu.choice < 0 && tu.trials < kTuneTrials) {
    *trial = static_cast<int>(tu.trials % 2);
    return *trial == 1 ? second : first;
  }
  if (tu.choice < 0) {
    const size_t n = static_cast<size_t>(transport->size());
    const float mine[2] = {tu.best[0], tu.best[1]};
    std::vector<float> all(2 * n);
    const ExecParams p = params(resolveConfig(CodecConfig{}), callTag(callNumber + 1, ~t.id), host->ops());
    guarded([&] { exec.run(plan(-1, 2, 1), mine, all.data(), p); });
    tu.choice = preferSecond(all.data(), n) ? 1 : 0;
  }
  return tu.choice == 1 ? second : first;
}

// The cross-rank check of `auto` over a transport with a native path (call_check.hpp): every rank
// learns whether all ranks describe the call alike (its words, and the path this rank chose) before
// any rank acts on its choice, so a disagreement (counts on both sides of minCompressBytes,
// different codecs, warm-up or thresholds) is kMismatch on every rank instead of two paths that
// wait for each other. An uncompressed fp32 host call of at most CallCheck::kMaxFloats elements
// puts its floats in the check's messages (`fuse`; that it fused is one of the words), and once
// every rank agrees the sum is its result: a small call costs one recursive-doubling exchange
// instead of a check and then the library's collective.
// The words of the cross-rank check: the call's description and the path this rank chose (the
// check of agree() over MPI, and ShmGroup's on one host; the last words stay 0 for the latter).
void Communicator::Impl::callWords(const TensorOpts& t, size_t count, DataType dtype, RedOp op,
                                   const CodecConfig& asked, const Selection& s, bool fused, int64_t* words,
                                   Kind kind) const {
  const int64_t w[kCheckWords] = {
      static_cast<int64_t>(callNumber & 0x3fffffffffffffffull),
      static_cast<int64_t>(count),
      static_cast<int64_t>(asked.codec) * 256 + asked.bits,
      static_cast<int64_t>(dtype) * 16 + static_cast<int64_t>(op),
      static_cast<int64_t>(mix64(t.id) >> 2),
      (s.native ? 1 : 0) | (static_cast<int64_t>(s.algo) << 1) | (static_cast<int64_t>(s.codec.codec) << 4) |
          (static_cast<int64_t>(s.codec.bits) << 8) | (static_cast<int64_t>(s.errorFeedback) << 16) |
          (static_cast<int64_t>(s.codec.bucket) << 17) | (static_cast<int64_t>(fused) << 40) |
          (static_cast<int64_t>(s.shm) << 41) | (static_cast<int64_t>(kind) << 42)};
  static_assert(kCheckWords <= ShmGroup::kDescWords, "the check's words fit the shared segment's descriptor");
  for (int i = 0; i < ShmGroup::kDescWords; ++i) words[i] = i < kCheckWords ? w[i] : 0;
}

void Communicator::Impl::throwDisagreement(int word, const char* what) const {
  static const char* const kField[kCheckWords] = {"call order", "count",      "codec", "datatype or reduction",
                                                  "tensor id",  "chosen path"};
  const int i = word >= 0 && word < kCheckWords ? word : kCheckWords - 1;
  QCCL_THROW(ErrorCode::kMismatch,
             std::string(what) + ": ranks disagree on the " + kField[i] + " of call " + std::to_string(callNumber) +
                 (i == 5 ? " (their QCCL_MIN_COMPRESS, QCCL_LOCAL_COMPRESS, warm-up or error-feedback "
                           "settings, or where their buffers live, host or device, differ)"
                         : ""));
}

void Communicator::Impl::agree(const TensorOpts& t, size_t count, DataType dtype, RedOp op, const CodecConfig& asked,
                               const Selection& s, Fuse* fuse) {
  const bool fused = fuse != nullptr && fuse->host && s.native && count <= CallCheck::kMaxFloats;
  int64_t mine[ShmGroup::kDescWords];
  callWords(t, count, dtype, op, asked, s, fused, mine);
  guarded([&] {
    WaitSpec w = waitSpec("allreduce (check of the call across ranks)");
    w.busyPoll = CallCheck::kBusyPoll;
    int bad = -1;
    try {
      bad = checkCall(*transport, w, mine, fused && count > 0 ? fuse->in : nullptr, fused ? fuse->out : nullptr, count,
                      checkScratch, &checkTraffic);
    } catch (...) {
      // A receive the transport could not take back may still land in the abandoned messages (as
      // with the executor's slots after a failure): their memory is leaked, never reused.
      (void)new std::vector<float>(std::move(checkScratch));
      checkScratch = std::vector<float>();
      throw;
    }
    if (bad >= 0) throwDisagreement(bad);
    if (fused) fuse->done = true;
  });
}

// Waits for a collective of the library underneath. A peer's abort notice or qcclCommAbort ends
// the wait: the collective is then abandoned to MPI (it can no longer complete), the communicator
// fails, and its duplicate MPI communicator is left to MPI_Finalize.
void Communicator::Impl::waitCollective(Request& r, const char* what) {
  waitUntil(*transport, waitSpec(what), [&](bool*) { return r.test(); });
}

// The sum through the shared segment (in == out: in place), or with in == null only the check of
// the call, before a path that goes through the transport. A disagreement is kMismatch on every
// rank: they all compare the same descriptors after the same barrier.
void Communicator::Impl::runShm(const int64_t* desc, const float* in, float* out, size_t count, Kind kind) {
  guarded([&] {
    static const char* const kWhat[] = {"allreduce", "allgather", "reduce-scatter"};
    static const char* const kWaitWhat[] = {"allreduce (shared memory)", "allgather (shared memory)",
                                            "reduce-scatter (shared memory)"};
    const WaitSpec w = waitSpec(kWaitWhat[kind]);
    const ShmGroup::Poll poll = [&] {
      transport->progress();
      pollWait(*transport, w);
    };
    int word = -1;
    int bad = -1;
    if (in == nullptr) {
      bad = shm->check(desc, &word, poll, &nativeWaits);
    } else if (kind == kAllgather) {
      bad = shm->allgather(desc, in, out, count, &word, poll, &nativeWaits);
    } else if (kind == kReduceScatter) {
      bad = shm->reduceScatterSum(desc, in, out, count, &word, poll, &nativeWaits);
    } else {
      bad = shm->allreduceSum(desc, in, out, count, &word, poll, &nativeWaits);
    }
    if (bad >= 0) throwDisagreement(word, kWhat[kind]);
  });
}

// Every collective under `auto` on one host: sets the segment up on the first such call and says
// whether the call goes through it: checked there and, when nothing is compressed (and, for
// allgather and reduce-scatter, the buffers are on the host), moved there.
bool Communicator::Impl::shmFor(const TensorOpts& t) {
  if ((t.algo ? *t.algo : opts.algo) != Algo::kAuto || !oneHost) return false;
  if (shmState == 0) guarded([&] { setupShm(); });
  return shmState == 1;
}

void Communicator::Impl::runNative(const float* in, float* out, size_t count) {
  guarded([&] {
    RequestPtr sum = transport->iallreduceSum(in, out, count);
    QCCL_CHECK(sum != nullptr, ErrorCode::kInternalError, "allreduce: the transport's allreduce went away");
    waitCollective(*sum, "allreduce");
  });
}

bool Communicator::Impl::runPlan(const Plan& plan, const float* src, float* dst, const Selection& s, TensorState* st,
                                 uint32_t seq, MemorySpace& space, RedOp op, const DecodeEpilogue* epi, bool* epiRan,
                                 const DecodeEpilogue* pro) {
  ExecParams p = params(s.codec, seq, space.ops());
  p.prologue = pro;
  p.feedbackGain = s.feedbackGain;
  if (s.algo == Algo::kRing && s.codec.codec == CodecId::kFp32 && opts.chunkBytes == 0) {
    if (const size_t b = transport->ringChunkBytes()) p.chunkElems = Executor::chunkElemsFor(s.codec, b);
    p.chunkElems = Executor::eagerChunkElems(s.codec, ringEagerBytes, p.chunkElems);
  }
  const bool fused = averageInDecode(plan, p, op);
  if (epi != nullptr && plan.lastStepWritesFinal && p.ops == nullptr) {
    p.epilogue = epi;
    *epiRan = true;
  }
  if (s.errorFeedback) {
    if (s.algo == Algo::kSra)
      p.ownerResidual = tensors.owner(*st, plan.ownerRange.size(), plan.ownerRange.begin, space);
    p.workerResidual = tensors.worker(*st, space);
  }
  guarded([&] { exec.run(plan, src, dst, p); });
  if (st != nullptr) tensors.finish(*st);
  return fused;
}

// The three plans of plan_hier.hpp on `work`, one after the other (the intra-host scatter reads `in`,
// which may be `work` or the caller's input: every later plan reads what an earlier one wrote): the intra-host ones in
// Options::intraCodec (fp32 or a cast) without residuals, the inter-host one with the call's codec and the tensor's
// residuals. They reuse tags, which is safe: a run drains every receive it posted before the next run starts, and
// messages of one (peer, tag) are matched in order.
void Communicator::Impl::runHier(size_t count, const float* in, float* work, const Selection& s, TensorState* st,
                                 uint32_t seq, MemorySpace& space) {
  const HierPlan& hp = hierPlan(count, s.codec.bucket ? s.codec.bucket : 32);
  CodecConfig intraCodec;
  intraCodec.codec = opts.intraCodec;
  const ExecParams intra = params(resolveConfig(intraCodec), seq, space.ops());
  ExecParams inter = params(s.codec, seq, space.ops());
  if (s.errorFeedback) {
    inter.ownerResidual = tensors.owner(*st, hp.inter.ownerRange.size(), hp.inter.ownerRange.begin, space);
    inter.workerResidual = tensors.worker(*st, space);
    inter.feedbackGain = s.feedbackGain;
  }
  guarded([&] {
    exec.run(hp.intraScatter, in, work, intra);
    exec.run(hp.inter, work, work, inter);
    exec.run(hp.intraGather, work, work, intra);
  });
  if (st != nullptr) tensors.finish(*st);
}

void Communicator::Impl::allreduce(const void* send, void* recv, size_t count, DataType dtype, RedOp op,
                                   const TensorOpts& t, void* stream, const DecodeEpilogue* epi,
                                   const DecodeEpilogue* pro) {
  MemorySpace& space = spaceFor(send, recv, count, "allreduce");
  QCCL_CHECK((epi == nullptr && pro == nullptr) || (dtype == DataType::kFloat32 && !space.isDevice()),
             ErrorCode::kInvalidArgument, "allreduce: an epilogue or a prologue takes float32 host buffers");
  bool epiRan = false;
  // The prologue over the whole input, where no encode takes it chunk by chunk: before anything
  // reads the input.
  auto prologueFirst = [&] {
    if (pro != nullptr && count > 0) pro->fn(pro->ctx, static_cast<float*>(const_cast<void*>(send)), count);
  };
  SpaceScope scope(space, recv, stream);
  TensorState* st = nullptr;
  int trial = -1;
  Fuse fuse;  // a small fp32 host call may be summed by the cross-rank check itself
  // (not with a prologue: the check would read the input before it)
  if (dtype == DataType::kFloat32 && !space.isDevice() && pro == nullptr) {
    fuse.host = true;
    fuse.in = static_cast<const float*>(send);
    fuse.out = static_cast<float*>(recv);
  }
  int64_t desc[ShmGroup::kDescWords];
  Selection s = decide(t, count, dtype, op, space, &st, &trial, &fuse, desc);
  s.feedbackGain = gainFor(t);
  const uint32_t seq = callTag(++callNumber, t.id);
  const Clock::time_point start = Clock::now();
  float* work;
  if (dtype == DataType::kFloat32) {
    work = static_cast<float*>(recv);
  } else {
    work = space.scratch(0, count);
    space.toFloat(send, dtype, work, count);
  }
  bool scaled = false;  // the average's 1/n already applied
  if (s.shm || s.native) {
    prologueFirst();
    // Out of place on the host, the segment and the library copy as part of their algorithm: no
    // copy first. A call summed by the check (agree(), fuse.done) is complete already.
    const bool direct = dtype == DataType::kFloat32 && !space.isDevice();
    if (!fuse.done) {
      // The host copy of the input: of the converted scratch for 16-bit buffers, of `send` itself
      // for fp32 device buffers (work is recv there, which holds the input only in place).
      float* input = dtype == DataType::kFloat32 ? const_cast<float*>(static_cast<const float*>(send)) : work;
      float* h = direct ? work : space.hostView(input, count);
      const float* in = direct ? static_cast<const float*>(send) : h;
      if (s.shm) {
        runShm(desc, in, h, count);
      } else {
        // In place, Open MPI's MPI_Iallreduce (MPI_IN_PLACE) took 2.35x as long as out of place:
        // 842 against 358 ms for 25 MiB on 4 hosts at 1 Gbit/s (bench/RESULTS.md, "The native sum
        // in place"). A DDP hook's buckets are reduced in place, so large ones are copied first.
        if (in == h && !space.isDevice() && count * sizeof(float) >= kNativeStageMinBytes) {
          float* staged = space.scratch(1, count);
          std::memcpy(staged, in, count * sizeof(float));
          in = staged;
        }
        runNative(in, h, count);
      }
      if (!direct) space.fromHostView(work, h, count);
    }
    if (st != nullptr) tensors.finish(*st);  // a warm-up call counts as a call of its tensor
  } else {
    if (desc[0] >= 0) runShm(desc, nullptr, nullptr, 0);  // the check, on one host
    size_t align = s.algo == Algo::kSra && s.codec.bucket ? s.codec.bucket : 32;
    if (s.algo == Algo::kHier) {
      prologueFirst();
      // The intra-host scatter reads the input and every later stage what an earlier one wrote, so
      // host memory needs no copy first; the device path keeps it.
      const float* in = work;
      if (dtype == DataType::kFloat32) {
        if (space.isDevice())
          space.copy(work, send, count * sizeof(float));
        else
          in = static_cast<const float*>(send);
      }
      runHier(count, in, work, s, st, seq, space);
    } else {
      const Plan& pl = plan(static_cast<int>(s.algo), count, align);
      // sra, the ring and allgather-reduce read send and write recv directly: no copy of the
      // tensor first (a 64 MiB memcpy per call was a fifth of the CPU of onebit on 4 emulated
      // hosts). The device path keeps the copy.
      const float* in = work;
      // A prologue at each chunk's one read (its encode, or its owner's raw sum), where the plan
      // reads the input only there.
      const bool proInEncode = pro != nullptr && pl.readsSourceOnce && s.codec.codec != CodecId::kFp32 &&
                               !planNeedsDstInit(pl) && !space.isDevice();
      if (!proInEncode) prologueFirst();
      if (dtype == DataType::kFloat32) {
        if (planNeedsDstInit(pl) || space.isDevice())
          space.copy(work, send, count * sizeof(float));
        else
          in = static_cast<const float*>(send);
      }
      scaled = runPlan(pl, in, work, s, st, seq, space, op, epi, &epiRan, proInEncode ? pro : nullptr);
    }
  }
  if (trial >= 0) {
    const float sec = std::chrono::duration<float>(Clock::now() - start).count();
    float& best = st->tune.best[trial];
    if (best == 0 || sec < best) best = sec;
    ++st->tune.trials;
  }
  statLastAlgo.store(static_cast<int>(s.algo) + (fuse.done  ? kCheckFlag
                                                 : s.native ? kNativeFlag
                                                 : s.shm    ? kShmFlag
                                                            : 0));
  if (op == RedOp::kAvg && !scaled) space.scale(work, count, 1.0f / static_cast<float>(transport->size()));
  if (dtype != DataType::kFloat32) space.fromFloat(work, dtype, recv, count);
  // Paths that do not end in one of qccl's decodes: the epilogue over the finished result.
  if (epi != nullptr && !epiRan && count > 0) epi->fn(epi->ctx, static_cast<float*>(recv), count);
}

// The selection of allgather and reduce-scatter: one schedule, the tensor's codec (fp32 during
// warm-up; under `auto` also below minCompressBytes when `total` elements of fp32 are fewer, and for
// host buffers on one host with the segment unless Options::localCompress), error feedback for any
// codec but fp32, which needs a tensor id.
Selection Communicator::Impl::decideOther(const TensorOpts& t, size_t count, size_t total, MemorySpace& space,
                                          TensorState** state, const char* what) {
  Selection s;
  s.codec = resolveConfig(codecFor(t));
  const Algo requested = t.algo ? *t.algo : opts.algo;
  QCCL_CHECK(isValid(requested), ErrorCode::kInvalidArgument, std::string(what) + ": unknown algorithm");
  if (total != 0 && requested == Algo::kAuto && total * sizeof(float) < opts.minCompressBytes)
    s.codec = resolveConfig(CodecConfig{});
  s.errorFeedback = opts.errorFeedback && s.codec.codec != CodecId::kFp32;
  *state = nullptr;
  QCCL_CHECK(!s.errorFeedback || t.id != 0, ErrorCode::kInvalidUsage,
             std::string(what) + ": codec " + codecName(s.codec.codec) +
                 " keeps an error-feedback residual per tensor, and this call has no tensor id: set a nonzero "
                 "tensor id, the same on every rank, or turn error feedback off");
  // On one host, host buffers move exactly through the segment whatever the codec (selectAlgorithm).
  // Every rank reaches shmFor() here or right after, so its set-up stays collective.
  if (requested == Algo::kAuto && !opts.localCompress && !space.isDevice() && shmFor(t)) {
    s.codec = resolveConfig(CodecConfig{});
    s.errorFeedback = false;
  }
  if (t.id != 0 && (s.errorFeedback || (opts.warmupCalls > 0 && s.codec.codec != CodecId::kFp32))) {
    *state = &tensors.acquire(t.id, count, space);
    if ((*state)->calls < static_cast<uint64_t>(opts.warmupCalls)) {
      s.codec = resolveConfig(CodecConfig{});
      s.errorFeedback = false;
    }
  }
  return s;
}

void Communicator::Impl::allgather(const void* send, void* recv, size_t count, DataType dtype, const TensorOpts& t,
                                   void* stream) {
  MemorySpace& space = spaceFor(send, recv, count, "allgather");
  SpaceScope scope(space, recv, stream);
  const size_t n = static_cast<size_t>(transport->size());
  TensorState* st = nullptr;
  Selection s = decideOther(t, count, 0, space, &st, "allgather");
  s.feedbackGain = gainFor(t);
  const bool hier = (t.algo ? *t.algo : opts.algo) == Algo::kHier;
  s.algo = Algo::kAllgather;
  int64_t desc[ShmGroup::kDescWords];
  const bool viaShm = shmFor(t);
  s.shm = viaShm && s.codec.codec == CodecId::kFp32 && !space.isDevice();
  if (viaShm) callWords(t, count, dtype, RedOp::kSum, codecFor(t), s, false, desc, kAllgather);
  const uint32_t seq = callTag(++callNumber, t.id);
  const float* in = static_cast<const float*>(send);
  float* out = static_cast<float*>(recv);
  if (dtype != DataType::kFloat32) {
    float* tmp = space.scratch(0, count);
    space.toFloat(send, dtype, tmp, count);
    in = tmp;
    out = space.scratch(1, count * n);
  }
  if (viaShm) runShm(desc, s.shm ? in : nullptr, out, count, kAllgather);  // the sum, or the check alone
  if (s.shm) {
    if (st != nullptr) tensors.finish(*st);
  } else if (hier) {
    // By host (plan_hier.hpp): the inter plan with the call's codec and residual, then the intra
    // plan forwarding the decoded blocks as fp32, so every rank ends with the same values.
    const HierAllgatherPlan& hp = hierGatherPlan(count);
    ExecParams inter = params(s.codec, seq, space.ops());
    if (s.errorFeedback) {
      inter.workerResidual = tensors.worker(*st, space);
      inter.feedbackGain = s.feedbackGain;
    }
    const ExecParams exact = params(resolveConfig(CodecConfig{}), seq, space.ops());
    guarded([&] {
      exec.run(hp.inter, in, out, inter);
      exec.run(hp.intra, out, out, exact);
    });
    if (st != nullptr) tensors.finish(*st);
  } else {
    runPlan(plan(-1, count, 1), in, out, s, st, seq, space);
  }
  if (dtype != DataType::kFloat32) space.fromFloat(out, dtype, recv, count * n);
}

// One step of sra's scatter on NCCL's fixed shards. The element count goes into the call's header
// tag, so ranks that disagree on it fail on the first message even when their chunks look alike.
void Communicator::Impl::reduceScatter(const void* send, void* recv, size_t count, DataType dtype, RedOp op,
                                       const TensorOpts& t, void* stream) {
  QCCL_CHECK(isValid(op), ErrorCode::kInvalidArgument, "reduce-scatter: unknown reduction");
  MemorySpace& space = spaceFor(send, recv, count, "reduce-scatter");
  SpaceScope scope(space, recv, stream);
  const size_t n = static_cast<size_t>(transport->size());
  TensorState* st = nullptr;
  Selection s = decideOther(t, count * n, count * n, space, &st, "reduce-scatter");
  s.algo = Algo::kSra;  // the worker residual only: the plan has no owner stage
  int64_t desc[ShmGroup::kDescWords];
  const bool viaShm = shmFor(t);
  s.shm = viaShm && s.codec.codec == CodecId::kFp32 && !space.isDevice();
  if (viaShm) callWords(t, count, dtype, op, codecFor(t), s, false, desc, kReduceScatter);
  const uint32_t seq = callTag(++callNumber, t.id ^ mix64(count + 1));
  const float* in = static_cast<const float*>(send);
  float* out = static_cast<float*>(recv);
  if (dtype != DataType::kFloat32) {
    float* tmp = space.scratch(0, count * n);
    space.toFloat(send, dtype, tmp, count * n);
    in = tmp;
    out = space.scratch(1, count);
  }
  if (viaShm) runShm(desc, s.shm ? in : nullptr, out, count, kReduceScatter);  // the sum, or the check alone
  bool scaled = false;  // the average's 1/n already applied, in the last decode
  if (!s.shm) {
    ExecParams p = params(s.codec, seq, space.ops());
    if (s.errorFeedback) {
      p.workerResidual = tensors.worker(*st, space);
      p.feedbackGain = gainFor(t);
    }
    const Plan& rs = plan(-2, count, 1);
    scaled = averageInDecode(rs, p, op);
    guarded([&] { exec.run(rs, in, out, p); });
  }
  if (st != nullptr) tensors.finish(*st);
  if (op == RedOp::kAvg && !scaled) space.scale(out, count, 1.0f / static_cast<float>(n));
  if (dtype != DataType::kFloat32) space.fromFloat(out, dtype, recv, count);
}

Communicator::Communicator(TransportPtr transport, Options options) {
  QCCL_CHECK(transport != nullptr, ErrorCode::kInvalidArgument, "communicator: null transport");
  validate(options);
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
  QCCL_CHECK(!opts.feedbackGain || (*opts.feedbackGain > 0.0f && *opts.feedbackGain <= 1.0f),
             ErrorCode::kInvalidArgument, "allreduce: feedbackGain must be in (0, 1]");
  m.allreduce(send, recv, count, dtype, op, opts, stream);
  m.statCalls.fetch_add(1);
  m.publishStats();
}

namespace {
// Communicator::allreduce's epilogue as the decodes call it: the element index from the pointer.
struct EpilogueCall {
  const float* base;
  Communicator::EpilogueFn fn;
  void* user;
  static void run(const void* ctx, float* out, size_t n) {
    const auto* e = static_cast<const EpilogueCall*>(ctx);
    e->fn(e->user, out, static_cast<size_t>(out - e->base), n);
  }
};
}  // namespace

void Communicator::allreduce(const float* send, float* recv, size_t count, RedOp op, const TensorOpts& opts,
                             EpilogueFn fn, void* user) {
  QCCL_CHECK(fn != nullptr, ErrorCode::kInvalidArgument, "allreduce: null epilogue function");
  // Without a prologue nothing writes send.
  allreduce(const_cast<float*>(send), recv, count, op, opts, nullptr, fn, user);
}

void Communicator::allreduce(float* send, float* recv, size_t count, RedOp op, const TensorOpts& opts,
                             EpilogueFn prologue, EpilogueFn epilogue, void* user) {
  Impl& m = *impl_;
  m.checkUsable();
  QCCL_CHECK(prologue != nullptr || epilogue != nullptr, ErrorCode::kInvalidArgument,
             "allreduce: neither a prologue nor an epilogue function");
  validateBuffers(send, recv, count, DataType::kFloat32, "allreduce");
  const EpilogueCall epiCall{recv, epilogue, user}, proCall{send, prologue, user};
  DecodeEpilogue epi, pro;
  epi.fn = pro.fn = &EpilogueCall::run;
  epi.ctx = &epiCall;
  pro.ctx = &proCall;
  m.allreduce(send, recv, count, DataType::kFloat32, op, opts, nullptr, epilogue ? &epi : nullptr,
              prologue ? &pro : nullptr);
  m.statCalls.fetch_add(1);
  m.publishStats();
}

void Communicator::allgather(const void* send, void* recv, size_t sendCount, DataType dtype, const TensorOpts& opts,
                             void* stream) {
  Impl& m = *impl_;
  m.checkUsable();
  validateBuffers(send, recv, sendCount, dtype, "allgather");
  QCCL_CHECK(sendCount <= (size_t{1} << 40) / static_cast<size_t>(size()), ErrorCode::kInvalidArgument,
             "allgather: count too large");
  m.allgather(send, recv, sendCount, dtype, opts, stream);
  m.statCalls.fetch_add(1);
  m.publishStats();
}

void Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, RedOp op,
                                 const TensorOpts& opts, void* stream) {
  Impl& m = *impl_;
  m.checkUsable();
  QCCL_CHECK(recvCount <= (size_t{1} << 40) / static_cast<size_t>(size()), ErrorCode::kInvalidArgument,
             "reduce-scatter: count too large");
  validateBuffers(send, recv, recvCount, dtype, "reduce-scatter");
  m.reduceScatter(send, recv, recvCount, dtype, op, opts, stream);
  m.statCalls.fetch_add(1);
  m.publishStats();
}

void Communicator::releaseTensor(uint64_t id) {
  impl_->tensors.release(id);
  impl_->tensors.clearGain(id);
  impl_->publishStats();
}

std::vector<uint8_t> Communicator::saveTensorState(uint64_t id) const {
  return impl_->tensors.save(id, size(), rank());
}

void Communicator::loadTensorState(uint64_t id, const void* data, size_t bytes, bool device) {
  Impl& m = *impl_;
  QCCL_CHECK(!device || m.dev, ErrorCode::kInvalidUsage,
             "tensor state: load into device memory after a first call on device buffers");
  m.tensors.load(id, data, bytes, device ? *m.dev : *m.host, size(), rank());
  m.publishStats();
}

bool Communicator::scaleTensorState(uint64_t id, float factor) { return impl_->tensors.scale(id, factor); }

void Communicator::setFeedbackGain(uint64_t id, float gain) { impl_->tensors.setGain(id, gain); }

float Communicator::feedbackGain(uint64_t id) const { return impl_->tensors.gain(id); }

void Communicator::requestAbort() noexcept { impl_->cancel.store(true); }

void Communicator::abort(const std::string& reason) noexcept {
  impl_->cancel.store(true);
  impl_->markFailed(ErrorCode::kCommFailed, reason);
}

bool Communicator::failed() const { return impl_->failed || impl_->cancel.load(); }

Algo Communicator::lastAlgo(int* path) const {
  const int v = impl_->statLastAlgo.load();
  if (path != nullptr) *path = v / Impl::kNativeFlag;
  return static_cast<Algo>(v % Impl::kNativeFlag);
}

CommStats Communicator::stats() const {
  const Impl& m = *impl_;
  CommStats s;
  s.bytesSent = m.statBytesSent.load();
  s.bytesSentInterHost = m.statBytesSentInterHost.load();
  s.messagesSent = m.statMessagesSent.load();
  s.bytesReceived = m.statBytesReceived.load();
  s.calls = m.statCalls.load();
  s.residualBytes = m.statResidual.load();
  s.peakResidualBytes = m.statPeakResidual.load();
  s.stagingBytes = m.statStaging.load();
  s.peakStagingBytes = m.statPeakStaging.load();
  s.tensors = m.statTensors.load();
  s.evictions = m.statEvictions.load();
  s.encodeSeconds = m.statEncode.load();
  s.decodeSeconds = m.statDecode.load();
  s.waitSeconds = m.statWait.load();
  s.idleSeconds = m.statIdle.load();
  return s;
}

}  // namespace qccl
