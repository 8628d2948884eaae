// The C API over real processes, started by mpirun. The communicator is built either from
// MPI_COMM_WORLD (--transport mpi) or over UCX from a unique id that rank 0 creates and
// MPI_Bcast's (--transport ucx). MPI itself is only the launcher and the referee here: it
// compares hashes of the results across ranks.
//
//   capi_mpi_check --transport mpi|ucx --case CASE [--shm 0|1]
//     (--shm 0 sets QCCL_SHM=0: on one host `auto` then takes the transport's path, the MPI
//     library's own allreduce and its cross-rank check, instead of the shared-memory sum)
//     basic               every algorithm and codec, exact or bit-identical results; auto with
//                         nothing to compress reports the path it should have taken
//     warmup              QCCL_WARMUP=2 (and QCCL_LOCAL_COMPRESS=1): a tensor's first two calls go
//                         uncompressed, the third on compresses (on every rank alike), with
//                         bit-identical results
//     mismatch-count      rank 0 passes another count: qcclMismatch / qcclRemoteError everywhere
//     mismatch-codec      rank 0 passes another codec: likewise
//     reducescatter       qcclReduceScatter: exact sums (fp32 and fp16 buffers, in place), lossy codecs
//                         bit for bit against the scatter stage computed here with the codec
//     epilogue            qcclAllreduceEpilogue and qcclAllreduceFused (a prologue too): bit for bit
//                         the prologue, qcclAllreduce and the update, each element rewritten once,
//                         the update inside the decodes for sra and allgather-reduce
//     mismatch-reducescatter  rank 0 passes another recvcount: qcclMismatch / qcclRemoteError everywhere
//     hier                qcclAlgoHier with QCCL_HOST_ID = rank / 2 (hosts of two ranks): exact fp32,
//                         allgather by host bit for bit the flat one,
//                         lossy codecs bit-identical across ranks; auto alternates flat and hier
//                         for QCCL_AUTO_TRIAL_CALLS calls, then every rank keeps the same one
//     mismatch-threshold  auto with counts on both sides of QCCL_MIN_COMPRESS: qcclMismatch on every
//                         rank from the cross-rank check, never a wait for the timeout
//     mismatch-small      auto, nothing compressed, one rank's count small enough to be summed inside
//                         the check (at most 4096) and the others' not: likewise, though the
//                         check's messages then differ in size
//     nbc-ring            (--shm 0, 2-3 ranks) auto's large fp32 sums go through MPI_Iallreduce with
//                         Open MPI's libnbc asked for its ring (coll_libnbc_iallreduce_algorithm,
//                         through the MPI tool interface): exact sums, the variable back at 0 after
//                         every call, and a value the application set itself left alone
//     ring-chunks         the fp32 ring's chunks with QCCL_CHUNK_BYTES unset: 1 MiB over UCX
//                         (Transport::ringChunkBytes), the codec's 4 MiB over MPI on one host; the
//                         same bytes sent as a communicator configured with that size, and exact sums
//     restart             a communicator fails, is destroyed, and a new one works (elastic restart)
//     watchdog            rank 0 is stuck in a call its peers never make; another thread's
//                         qcclCommAbort ends it with qcclCommFailed, and the peers hear of it
// Exit status 0 when every check passed on every rank.
// Only the C bindings of MPI (the C++ ones warn under -Wextra).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mpi_check.hpp"
#include "qccl/codec.hpp"

namespace {

bool gShm = true;                // --shm
std::string gTransport = "mpi";  // --transport

float exactInput(int rank, size_t i) { return static_cast<float>(static_cast<int>(i % 977) * 5 - 2000 + rank); }
float smoothInput(int rank, size_t i) { return std::cos(0.0007f * static_cast<float>(i) * (rank + 1)) + 0.01f * rank; }

qcclComm_t makeComm(const std::string& transport, double timeoutSec) {
  qcclConfig_t cfg;
  if (qcclConfigInit(&cfg) != qcclSuccess) return nullptr;
  cfg.timeoutSec = timeoutSec;
  return makeComm(transport, cfg);
}

void checkExactAllreduce(qcclComm_t comm, size_t count, int algo) {
  std::vector<float> send(count), recv(count, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = exactInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = qcclCodecNone;
  t.algo = algo;
  qcclStats_t s0{}, s1{};
  qcclCommGetStats(comm, &s0);
  qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "allreduce algo %d count %zu: %s", algo, count, qcclGetLastError(comm));
  qcclCommGetStats(comm, &s1);
  if (algo == qcclAlgoAuto && gSize >= 2 && !gShm && gTransport == "mpi") {
    // The check's messages are qccl's own: at least one of 7 header words (and the floats where it
    // carried the sum) per call, in bytesSent and bytesReceived.
    const uint64_t msg = 56 + (count <= 4096 ? 4 * count : 0);
    EXPECT(s1.bytesSent - s0.bytesSent >= msg && s1.bytesReceived - s0.bytesReceived >= msg,
           "auto count %zu: the check's %llu-byte messages are not in the stats (sent %llu, received %llu)", count,
           static_cast<unsigned long long>(msg), static_cast<unsigned long long>(s1.bytesSent - s0.bytesSent),
           static_cast<unsigned long long>(s1.bytesReceived - s0.bytesReceived));
  }
  if (algo == qcclAlgoAuto) {
    // Nothing to compress, every rank on this host: the shared-memory sum, else over MPI the
    // cross-rank check's own sum up to 4096 floats (3) and the MPI library's allreduce above it
    // (1), else qccl's fp32 ring.
    int ran = -1, path = -1;
    qcclCommGetLastAlgo(comm, &ran, &path);
    const int want = gSize >= 2 && gShm ? 2 : gTransport == "mpi" ? (count <= 4096 ? 3 : 1) : 0;
    EXPECT(path == want && (want != 0 || ran == qcclAlgoRing), "auto count %zu ran algo %d path %d, expected path %d",
           count, ran, path, want);
  }
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int k = 0; k < gSize; ++k) sum += exactInput(k, i);
    if (recv[i] != static_cast<float>(sum)) ++wrong;
  }
  EXPECT(wrong == 0, "allreduce algo %d count %zu: %zu wrong elements", algo, count, wrong);
  // Average, in place.
  t.id = 1;
  r = qcclAllreduce(send.data(), send.data(), count, qcclFloat32, qcclAvg, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "avg: %s", qcclGetLastError(comm));
  for (size_t i = 0; i < count && r == qcclSuccess; ++i) {
    double avg = recv[i] / static_cast<double>(gSize);
    if (std::fabs(send[i] - avg) > 1e-6 * std::fabs(avg) + 1e-6) {
      EXPECT(false, "avg algo %d element %zu: %g, expected %g", algo, i, send[i], avg);
      break;
    }
  }
}

void checkLossy(qcclComm_t comm, int codec, size_t count) {
  std::vector<float> send(count), recv(count);
  for (size_t i = 0; i < count; ++i) send[i] = smoothInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 100 + codec;
  t.codec = codec;
  for (int step = 0; step < 3; ++step) {
    qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
    EXPECT(r == qcclSuccess, "codec %d: %s", codec, qcclGetLastError(comm));
    EXPECT(sameOnAllRanks(recv.data(), count * sizeof(float)), "codec %d step %d: results differ across ranks", codec,
           step);
  }
  bool finite = true;
  for (float v : recv) finite = finite && std::isfinite(v);
  EXPECT(finite, "codec %d: non-finite result", codec);
  // auto on one host with the segment sums host buffers exactly whatever the codec; else compressed.
  int algo = -1, native = -1;
  qcclCommGetLastAlgo(comm, &algo, &native);
  const int want = gShm && gSize >= 2 ? 2 : 0;
  EXPECT(native == want, "codec %d under auto ran path %d, expected %d", codec, native, want);
}

void checkAllgather(qcclComm_t comm, size_t count) {
  std::vector<float> send(count), recv(count * gSize, -1.0f);
  for (size_t i = 0; i < count; ++i) send[i] = exactInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = qcclCodecNone;
  qcclResult_t r = qcclAllgather(send.data(), recv.data(), count, qcclFloat32, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "allgather: %s", qcclGetLastError(comm));
  size_t wrong = 0;
  for (int k = 0; k < gSize; ++k)
    for (size_t i = 0; i < count; ++i) wrong += recv[k * count + i] != exactInput(k, i);
  EXPECT(wrong == 0, "allgather: %zu wrong elements", wrong);
  t.codec = qcclCodecMaxMin;
  t.id = 9;
  r = qcclAllgather(send.data(), recv.data(), count, qcclFloat32, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "allgather maxmin: %s", qcclGetLastError(comm));
  EXPECT(sameOnAllRanks(recv.data(), recv.size() * sizeof(float)), "allgather maxmin differs across ranks");
}

void caseBasic(qcclComm_t comm) {
  int n = 0, rank = -1;
  EXPECT(qcclCommCount(comm, &n) == qcclSuccess && n == gSize, "count %d", n);
  EXPECT(qcclCommUserRank(comm, &rank) == qcclSuccess && rank == gRank, "rank %d", rank);
  for (int algo : {qcclAlgoRing, qcclAlgoSra, qcclAlgoAllgather, qcclAlgoAuto})
    for (size_t count : {size_t{0}, size_t{1}, size_t{256}, size_t{257}, size_t{1000}, size_t{4096}, size_t{4097},
                         size_t{(1 << 20) + 3}})
      checkExactAllreduce(comm, count, algo);
  for (int codec : {qcclCodecFp16, qcclCodecBf16, qcclCodecOneBit, qcclCodecSignScale, qcclCodecMaxMin, qcclCodecDyn8})
    checkLossy(comm, codec, 300007);
  checkAllgather(comm, 4099);
  qcclStats_t st;
  EXPECT(qcclCommGetStats(comm, &st) == qcclSuccess && st.calls > 0 && (gSize == 1 || st.bytesSent > 0),
         "stats: calls %llu sent %llu", (unsigned long long)st.calls, (unsigned long long)st.bytesSent);
}

void checkExactReduceScatter(qcclComm_t comm, size_t count) {
  std::vector<float> send(count * gSize), recv(count, -1.0f);
  for (size_t i = 0; i < send.size(); ++i) send[i] = exactInput(gRank, i);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.codec = qcclCodecNone;
  qcclResult_t r = qcclReduceScatter(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "reduce-scatter count %zu: %s", count, qcclGetLastError(comm));
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int k = 0; k < gSize; ++k) sum += exactInput(k, gRank * count + i);
    wrong += recv[i] != static_cast<float>(sum);
  }
  EXPECT(wrong == 0, "reduce-scatter count %zu: %zu wrong elements", count, wrong);
  // Average, in place: recvbuff is this rank's shard of sendbuff.
  r = qcclReduceScatter(send.data(), send.data() + gRank * count, count, qcclFloat32, qcclAvg, &t, comm, nullptr);
  EXPECT(r == qcclSuccess, "reduce-scatter avg: %s", qcclGetLastError(comm));
  wrong = 0;
  for (size_t i = 0; i < count && r == qcclSuccess; ++i)
    wrong += send[gRank * count + i] != recv[i] * (1.0f / static_cast<float>(gSize));
  EXPECT(wrong == 0, "reduce-scatter avg count %zu: %zu wrong elements", count, wrong);
}

// fp16 buffers of small integers: exact.
void checkHalfReduceScatter(qcclComm_t comm, size_t count) {
  auto half = [](int v) {  // fp16 bits of a small integer (|v| < 2048)
    if (v == 0) return uint16_t{0};
    uint16_t sign = v < 0 ? 0x8000 : 0;
    unsigned a = static_cast<unsigned>(v < 0 ? -v : v), e = 0;
    while ((a >> e) > 1) ++e;
    return static_cast<uint16_t>(sign | ((e + 15) << 10) | (((a << 10) >> e) & 0x3ff));
  };
  auto value = [](int rank, size_t i) { return static_cast<int>(i % 61) - 30 + rank; };
  std::vector<uint16_t> send(count * gSize), recv(count);
  for (size_t i = 0; i < send.size(); ++i) send[i] = half(value(gRank, i));
  qcclResult_t r = qcclReduceScatter(send.data(), recv.data(), count, qcclFloat16, qcclSum, nullptr, comm, nullptr);
  EXPECT(r == qcclSuccess, "reduce-scatter fp16: %s", qcclGetLastError(comm));
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    int sum = 0;
    for (int k = 0; k < gSize; ++k) sum += value(k, gRank * count + i);
    wrong += recv[i] != half(sum);
  }
  EXPECT(wrong == 0, "reduce-scatter fp16: %zu wrong elements", wrong);
}

// A lossy codec over 3 calls: this rank's shard must equal, bit for bit, its own values of the
// shard (exact) plus, in rank order, every other rank's encoding of it, each with that rank's worker
// residual (simulated here for the shard).
void checkLossyReduceScatter(qcclComm_t comm, int codec, size_t count) {
  qccl::CodecConfig cfg;
  cfg.codec = static_cast<qccl::CodecId>(codec);
  cfg = qccl::resolveConfig(cfg);
  std::vector<std::vector<float>> residual(gSize, std::vector<float>(count, 0.0f));
  std::vector<uint8_t> wire(qccl::encodedBytes(cfg, count));
  std::vector<float> send(count * gSize), recv(count), x(count), ref(count), d(count);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 200 + codec;
  t.codec = codec;
  t.algo = qcclAlgoSra;
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < send.size(); ++i) send[i] = smoothInput(gRank + step, i);
    qcclResult_t r = qcclReduceScatter(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
    EXPECT(r == qcclSuccess, "reduce-scatter codec %d: %s", codec, qcclGetLastError(comm));
    for (size_t i = 0; i < count; ++i) ref[i] = smoothInput(gRank + step, gRank * count + i);
    for (int q = 0; q < gSize; ++q) {
      if (q == gRank) continue;
      for (size_t i = 0; i < count; ++i) x[i] = smoothInput(q + step, gRank * count + i);
      qccl::encode(cfg, x.data(), residual[q].data(), count, wire.data(), wire.size());
      qccl::decode(wire.data(), wire.size(), d.data(), count);
      for (size_t i = 0; i < count; ++i) ref[i] = ref[i] + d[i];
    }
    EXPECT(std::memcmp(ref.data(), recv.data(), count * sizeof(float)) == 0,
           "reduce-scatter codec %d step %d: differs from the scatter stage's reference", codec, step);
  }
}

void caseHier(qcclComm_t comm) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{(1 << 20) + 3}}) checkExactAllreduce(comm, count, qcclAlgoHier);
  for (int codec : {qcclCodecOneBit, qcclCodecMaxMin}) {
    const size_t count = 300007;
    std::vector<float> send(count), recv(count);
    for (size_t i = 0; i < count; ++i) send[i] = smoothInput(gRank, i);
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = 300 + codec;
    t.codec = codec;
    t.algo = qcclAlgoHier;
    for (int step = 0; step < 3; ++step) {
      qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
      EXPECT(r == qcclSuccess, "hier codec %d: %s", codec, qcclGetLastError(comm));
      EXPECT(sameOnAllRanks(recv.data(), count * sizeof(float)), "hier codec %d step %d: results differ", codec, step);
    }
  }
  // auto where ranks share hosts: trials alternate the flat path and hier (flat first), then all
  // ranks keep the same one; results identical on every rank throughout, exact for fp32.
  for (int codec : {qcclCodecNone, qcclCodecOneBit}) {
    const size_t count = 300007;  // above the 1 MiB auto tries hier from
    std::vector<float> send(count), recv(count);
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.id = 600 + codec;
    t.codec = codec;
    int kept = -1;
    for (int call = 0; call < QCCL_AUTO_TRIAL_CALLS + 3; ++call) {
      for (size_t i = 0; i < count; ++i)
        send[i] = codec == qcclCodecNone ? exactInput(gRank + call, i) : smoothInput(gRank + call, i);
      qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
      EXPECT(r == qcclSuccess, "auto codec %d call %d: %s", codec, call, qcclGetLastError(comm));
      EXPECT(sameOnAllRanks(recv.data(), count * sizeof(float)), "auto codec %d call %d: results differ", codec, call);
      int algo = -1, native = -1;
      EXPECT(qcclCommGetLastAlgo(comm, &algo, &native) == qcclSuccess, "qcclCommGetLastAlgo");
      const int path = algo + 16 * native;
      EXPECT(sameOnAllRanks(&path, sizeof path), "auto codec %d call %d: ranks ran different paths", codec, call);
      if (call < QCCL_AUTO_TRIAL_CALLS) {
        EXPECT((algo == qcclAlgoHier) == (call % 2 == 1), "auto codec %d trial %d ran algo %d", codec, call, algo);
      } else if (kept < 0) {
        kept = path;
      } else {
        EXPECT(path == kept, "auto codec %d call %d: the choice changed", codec, call);
      }
      if (codec == qcclCodecNone) {
        for (size_t i = 0; i < count; ++i) {
          double sum = 0;
          for (int q = 0; q < gSize; ++q) sum += exactInput(q + call, i);
          if (recv[i] != static_cast<float>(sum)) {
            EXPECT(false, "auto fp32 call %d element %zu: %g, expected %g", call, i, recv[i], sum);
            break;
          }
        }
      }
    }
  }
  // Allgather by host: bit for bit the flat allgather, with and without a codec.
  for (int codec : {qcclCodecNone, qcclCodecOneBit}) {
    const size_t count = 70001;
    std::vector<float> send(count), flat(count * gSize), hier(count * gSize);
    for (size_t i = 0; i < count; ++i) send[i] = smoothInput(gRank, i);
    qcclTensorOpts_t tf = QCCL_TENSOR_OPTS_INIT, th = QCCL_TENSOR_OPTS_INIT;
    tf.id = 400 + codec;
    th.id = 500 + codec;
    tf.codec = th.codec = codec;
    tf.algo = qcclAlgoAllgather;
    th.algo = qcclAlgoHier;
    for (int step = 0; step < 2; ++step) {
      qcclResult_t r = qcclAllgather(send.data(), flat.data(), count, qcclFloat32, &tf, comm, nullptr);
      EXPECT(r == qcclSuccess, "flat allgather codec %d: %s", codec, qcclGetLastError(comm));
      r = qcclAllgather(send.data(), hier.data(), count, qcclFloat32, &th, comm, nullptr);
      EXPECT(r == qcclSuccess, "hier allgather codec %d: %s", codec, qcclGetLastError(comm));
      EXPECT(std::memcmp(flat.data(), hier.data(), flat.size() * sizeof(float)) == 0,
             "hier allgather codec %d step %d differs from the flat one", codec, step);
    }
  }
}

// epilogue: qcclAllreduceEpilogue against qcclAllreduce followed by the same update, on two tensor
// ids fed the same inputs (so their residuals evolve alike), three calls each: the same bits, every
// element updated exactly once, and inside the decodes (many pieces) for sra and allgather-reduce.
struct EpilogueUpdate {
  std::vector<float> state, velocity;
  std::vector<int> visits, preVisits;
  size_t pieces = 0;
  explicit EpilogueUpdate(size_t n) : state(n), velocity(n), visits(n, 0), preVisits(n, 0) {
    for (size_t i = 0; i < n; ++i) {
      state[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(gRank));
      velocity[i] = std::cos(0.3f * static_cast<float>(i) - static_cast<float>(gRank));
    }
  }
  // The prologue (qcclAllreduceFused): send = 0.9 * velocity + send; velocity = send.
  void pre(float* x, size_t first, size_t count) {
    for (size_t k = 0; k < count; ++k) {
      x[k] = 0.9f * velocity[first + k] + x[k];
      velocity[first + k] = x[k];
      ++preVisits[first + k];
    }
  }
  static void prologue(void* user, float* values, size_t first, size_t count) {
    static_cast<EpilogueUpdate*>(user)->pre(values, first, count);
  }
  void apply(float* x, size_t first, size_t count) {
    ++pieces;
    for (size_t k = 0; k < count; ++k) {
      const float v = x[k];
      x[k] = (v - 0.9f * state[first + k]) * 1.5f;
      state[first + k] = v;
      ++visits[first + k];
    }
  }
  static void call(void* user, float* values, size_t first, size_t count) {
    static_cast<EpilogueUpdate*>(user)->apply(values, first, count);
  }
};

void caseEpilogue(qcclComm_t comm) {
  struct C {
    int algo, codec;
  };
  const C cases[] = {{qcclAlgoSra, qcclCodecOneBit},       {qcclAlgoSra, qcclCodecMaxMin},
                     {qcclAlgoAllgather, qcclCodecOneBit}, {qcclAlgoAuto, qcclCodecNone},
                     {qcclAlgoRing, qcclCodecNone},        {qcclAlgoAuto, qcclCodecOneBit}};
  uint64_t id = 500;
  for (const C& c : cases)
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{300001}}) {
      qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
      t.codec = c.codec;
      t.algo = c.algo;
      EpilogueUpdate plain(n), fused(n);
      std::vector<float> a(n), b(n), sa(n), sb(n);
      size_t fusedPieces = 0;
      const uint64_t idPlain = ++id, idFused = ++id;
      for (int call = 0; call < 3; ++call) {
        // Odd calls: out of place with a prologue too (qcclAllreduceFused); even: in place, epilogue only.
        const bool pro = call % 2 == 1;
        for (size_t i = 0; i < n; ++i)
          sa[i] = sb[i] = a[i] = b[i] = smoothInput(gRank, i + 7 * static_cast<size_t>(call));
        t.id = idPlain;
        if (pro && n > 0) plain.pre(sa.data(), 0, n);
        qcclResult_t r =
            qcclAllreduce(pro ? sa.data() : a.data(), a.data(), n, qcclFloat32, qcclAvg, &t, comm, nullptr);
        EXPECT(r == qcclSuccess, "allreduce algo %d codec %d n %zu: %s", c.algo, c.codec, n, qcclGetLastError(comm));
        if (n > 0) plain.apply(a.data(), 0, n);
        t.id = idFused;
        const size_t before = fused.pieces;
        r = pro ? qcclAllreduceFused(sb.data(), b.data(), n, qcclAvg, &t, &EpilogueUpdate::prologue,
                                     &EpilogueUpdate::call, &fused, comm)
                : qcclAllreduceEpilogue(b.data(), b.data(), n, qcclAvg, &t, &EpilogueUpdate::call, &fused, comm);
        EXPECT(r == qcclSuccess, "epilogue algo %d codec %d n %zu: %s", c.algo, c.codec, n, qcclGetLastError(comm));
        fusedPieces = std::max(fusedPieces, fused.pieces - before);
        EXPECT(n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0,
               "epilogue algo %d codec %d n %zu call %d: result differs from allreduce + pass", c.algo, c.codec, n,
               call);
        int wrongVisits = 0;
        for (size_t i = 0; i < n; ++i)
          wrongVisits += fused.visits[i] != call + 1 || fused.preVisits[i] != (call + 1) / 2;
        EXPECT(wrongVisits == 0, "epilogue algo %d codec %d n %zu: %d elements not updated exactly once", c.algo,
               c.codec, n, wrongVisits);
      }
      EXPECT(n == 0 || (std::memcmp(plain.state.data(), fused.state.data(), n * sizeof(float)) == 0 &&
                        std::memcmp(plain.velocity.data(), fused.velocity.data(), n * sizeof(float)) == 0),
             "epilogue algo %d codec %d n %zu: the update's state differs", c.algo, c.codec, n);
      if (n == 300001 && (c.algo == qcclAlgoSra || c.algo == qcclAlgoAllgather))
        EXPECT(fusedPieces > 16, "epilogue algo %d codec %d: %zu pieces, expected it inside the decodes", c.algo,
               c.codec, fusedPieces);
      qcclTensorRelease(comm, idPlain);
      qcclTensorRelease(comm, idFused);
    }
}

void caseReduceScatter(qcclComm_t comm) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{(1 << 18) + 3}}) checkExactReduceScatter(comm, count);
  checkHalfReduceScatter(comm, 4099);
  for (int codec : {qcclCodecFp16, qcclCodecOneBit, qcclCodecMaxMin, qcclCodecDyn8})
    checkLossyReduceScatter(comm, codec, 300007);
}

// Rank 0 passes another recvcount (both large enough to be chunked alike at first).
void caseMismatchReduceScatter(qcclComm_t comm) {
  size_t count = gRank == 0 ? (3 << 20) : (4 << 20);
  std::vector<float> send(count * gSize, 1.0f), recv(count);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 8;
  t.codec = qcclCodecOneBit;
  t.algo = qcclAlgoSra;
  qcclResult_t r = qcclReduceScatter(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  std::fprintf(stderr, "[rank %d] reduce-scatter mismatch: %s: %s\n", gRank, qcclGetErrorString(r),
               qcclGetLastError(comm));
  EXPECT(r == qcclMismatch || r == qcclRemoteError, "expected a mismatch or a peer's notice, got %s",
         qcclGetErrorString(r));
  EXPECT(r != qcclMismatch || std::strstr(qcclGetLastError(comm), "count") != nullptr, "message without the count: %s",
         qcclGetLastError(comm));
  int mismatches = r == qcclMismatch ? 1 : 0, total = 0;
  MPI_Allreduce(&mismatches, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT(total >= 1, "no rank detected the mismatch itself");
}

// Rank 0 disagrees with the others; every rank must see an error, none may hang: the rank that
// detects it reports qcclMismatch, the others hear its notice (qcclRemoteError) or detect it too.
void caseMismatch(qcclComm_t comm, bool countMismatch) {
  size_t count = (countMismatch && gRank == 0) ? 100000 : 100003;
  std::vector<float> buf(count, 1.0f);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 5;
  t.codec = (!countMismatch && gRank == 0) ? qcclCodecOneBit : qcclCodecMaxMin;
  t.algo = qcclAlgoSra;
  qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  std::fprintf(stderr, "[rank %d] mismatch result: %s: %s\n", gRank, qcclGetErrorString(r), qcclGetLastError(comm));
  EXPECT(r == qcclMismatch || r == qcclRemoteError, "expected a mismatch or a peer's notice, got %s",
         qcclGetErrorString(r));
  EXPECT(std::strlen(qcclGetLastError(comm)) > 0, "no error text");
  int mismatches = r == qcclMismatch ? 1 : 0, total = 0;
  MPI_Allreduce(&mismatches, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT(total >= 1, "no rank detected the mismatch itself");
}

// auto: one rank's tensor is below QCCL_MIN_COMPRESS (64 KiB, so uncompressed), the others' above
// it (compressed). Before any rank acts on its choice, the cross-rank check finds the disagreement:
// every rank returns qcclMismatch (a timeout would be qcclTimeout).
// `small`: nothing compressed, but rank 0's call is small enough to be summed inside the check
// itself and the others' are not (they would go on to a second collective): the same.
void caseMismatchThreshold(qcclComm_t comm, bool small) {
  size_t count = gRank == 0 ? (small ? 200 : 10000) : (small ? 5000 : 20000);
  std::vector<float> buf(count, 1.0f);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 6;
  t.codec = small ? qcclCodecNone : qcclCodecOneBit;
  t.algo = qcclAlgoAuto;
  auto t0 = std::chrono::steady_clock::now();
  qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[rank %d] threshold mismatch after %.3f s: %s: %s\n", gRank, sec, qcclGetErrorString(r),
               qcclGetLastError(comm));
  EXPECT(r == qcclMismatch, "expected qcclMismatch, got %s", qcclGetErrorString(r));
  EXPECT(std::strstr(qcclGetLastError(comm), "count") != nullptr, "message does not name the count: %s",
         qcclGetLastError(comm));
}

// QCCL_WARMUP=2 (set by main): the first two calls of a tensor are uncompressed (shared memory or
// the MPI library, by --shm), every later one compressed. A warm-up call on a path other than
// qccl's messages once never counted, so over MPI the tensor never left its warm-up.
void caseWarmup(qcclComm_t comm, bool shm, const std::string& transport) {
  const size_t count = 100000;
  std::vector<float> buf(count);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 21;
  t.codec = qcclCodecOneBit;
  for (int call = 0; call < 5; ++call) {
    for (size_t i = 0; i < count; ++i) buf[i] = exactInput(gRank + call, i);
    qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
    EXPECT(r == qcclSuccess, "warm-up call %d: %s", call, qcclGetLastError(comm));
    EXPECT(sameOnAllRanks(buf.data(), count * sizeof(float)), "call %d: results differ across ranks", call);
    int algo = -1, native = -1;
    qcclCommGetLastAlgo(comm, &algo, &native);
    const int uncompressed = shm ? 2 : transport == "mpi" ? 1 : 0;
    if (call < 2) {
      EXPECT(native == uncompressed && (native != 0 || algo == qcclAlgoRing),
             "warm-up call %d ran algo %d path %d, expected path %d", call, algo, native, uncompressed);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        double sum = 0;
        for (int q = 0; q < gSize; ++q) sum += exactInput(q + call, i);
        wrong += buf[i] != static_cast<float>(sum);
      }
      EXPECT(wrong == 0, "warm-up call %d: %zu elements differ from the exact sum", call, wrong);
    } else {
      EXPECT(native == 0 && algo == (gSize >= 3 ? qcclAlgoSra : qcclAlgoAllgather),
             "call %d after the warm-up ran algo %d path %d, not compressed", call, algo, native);
    }
  }
}

// A communicator fails (a mismatch), is destroyed, and a fresh one over the same processes works.
// The control variable qccl sets around its own MPI_Iallreduce on 2-3 ranks (NbcRing in
// mpi_transport.cc). Where the MPI library has no such variable there is nothing to observe but
// the sums.
int nbcVariable(MPI_T_cvar_handle h) {
  int v = -1;
  if (h != MPI_T_CVAR_HANDLE_NULL) MPI_T_cvar_read(h, &v);
  return v;
}

// The fp32 ring's chunk when the configuration names none: the messages a call sends (one per
// chunk) equal those of a communicator configured with the expected chunk, and differ from those
// of the other size, on a 16 MiB tensor whose ring steps hold 4 MiB each on 4 ranks. The bytes are
// the same for every chunk size: an fp32 stream's later chunks carry no header.
void caseRingChunks(const std::string& transport) {
  const size_t kMiB = size_t{1} << 20;
  const size_t want = transport == "ucx" ? kMiB : 4 * kMiB, other = transport == "ucx" ? 4 * kMiB : kMiB;
  const size_t count = 4 * kMiB;
  std::vector<float> send(count), recv(count);
  for (size_t i = 0; i < count; ++i) send[i] = exactInput(gRank, i);
  uint64_t sent[3] = {0, 0, 0}, bytes[3] = {0, 0, 0};
  const size_t chunks[3] = {0, want, other};
  for (int c = 0; c < 3; ++c) {
    qcclConfig_t cfg;
    EXPECT(qcclConfigInit(&cfg) == qcclSuccess, "qcclConfigInit");
    cfg.timeoutSec = 60;
    cfg.chunkBytes = chunks[c];
    qcclComm_t comm = makeComm(transport, cfg);
    EXPECT(comm != nullptr, "no communicator");
    if (comm == nullptr) return;
    qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
    t.codec = qcclCodecNone;
    t.algo = qcclAlgoRing;
    qcclStats_t s0{}, s1{};
    qcclCommGetStats(comm, &s0);
    std::fill(recv.begin(), recv.end(), -1.0f);
    qcclResult_t r = qcclAllreduce(send.data(), recv.data(), count, qcclFloat32, qcclSum, &t, comm, nullptr);
    EXPECT(r == qcclSuccess, "ring, chunk %zu: %s", chunks[c], qcclGetLastError(comm));
    qcclCommGetStats(comm, &s1);
    sent[c] = s1.messagesSent - s0.messagesSent;
    bytes[c] = s1.bytesSent - s0.bytesSent;
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int q = 0; q < gSize; ++q) sum += exactInput(q, i);
      if (recv[i] != sum) {
        EXPECT(false, "ring, chunk %zu: element %zu is %g, not %g", chunks[c], i, recv[i], sum);
        break;
      }
    }
    EXPECT(qcclCommDestroy(comm) == qcclSuccess, "destroy: %s", qcclGetLastError(nullptr));
  }
  EXPECT(sent[0] == sent[1], "%s: %llu messages sent with the default chunk, %llu with %zu bytes", transport.c_str(),
         static_cast<unsigned long long>(sent[0]), static_cast<unsigned long long>(sent[1]), want);
  EXPECT(sent[0] != sent[2], "%s: the default chunk sent as many messages as %zu-byte chunks (%llu)", transport.c_str(),
         other, static_cast<unsigned long long>(sent[2]));
  EXPECT(bytes[0] == bytes[1] && bytes[1] == bytes[2], "%s: bytes sent differ by chunk size (%llu, %llu, %llu)",
         transport.c_str(), static_cast<unsigned long long>(bytes[0]), static_cast<unsigned long long>(bytes[1]),
         static_cast<unsigned long long>(bytes[2]));
}

void caseNbcRing(qcclComm_t comm) {
  int provided = 0;
  MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
  int index = -1, count = 0;
  MPI_T_cvar_handle h = MPI_T_CVAR_HANDLE_NULL;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, nullptr, &h, &count) != MPI_SUCCESS) {
    h = MPI_T_CVAR_HANDLE_NULL;
    if (gRank == 0) std::printf("nbc-ring: the MPI library has no coll_libnbc_iallreduce_algorithm\n");
  }
  EXPECT(h == MPI_T_CVAR_HANDLE_NULL || nbcVariable(h) == 0, "the variable starts at %d", nbcVariable(h));
  // Above libnbc's 64 KiB, and below it (where qccl leaves the library's choice alone); 40000 floats
  // also go to the library in place (the in-place average), below the size the communicator stages.
  for (size_t n : {size_t{(1 << 20) + 3}, size_t{300000}, size_t{40000}, size_t{5000}}) {
    checkExactAllreduce(comm, n, qcclAlgoAuto);
    EXPECT(h == MPI_T_CVAR_HANDLE_NULL || nbcVariable(h) == 0, "count %zu: the variable is %d after the call", n,
           nbcVariable(h));
  }
  if (h != MPI_T_CVAR_HANDLE_NULL) {
    const int binomial = 2, zero = 0;
    EXPECT(MPI_T_cvar_write(h, &binomial) == MPI_SUCCESS, "could not set the variable");
    checkExactAllreduce(comm, (1 << 20) + 3, qcclAlgoAuto);
    EXPECT(nbcVariable(h) == binomial, "the application's setting %d became %d", binomial, nbcVariable(h));
    MPI_T_cvar_write(h, &zero);
    MPI_T_cvar_handle_free(&h);
  }
  MPI_T_finalize();
}

void caseRestart(const std::string& transport) {
  for (int round = 0; round < 2; ++round) {
    qcclComm_t comm = makeComm(transport, 5.0);
    EXPECT(comm != nullptr, "round %d: no communicator", round);
    if (comm == nullptr) return;
    caseMismatch(comm, true);
    qcclCommDestroy(comm);
  }
  qcclComm_t comm = makeComm(transport, 60.0);
  EXPECT(comm != nullptr, "no communicator after the failures");
  if (comm == nullptr) return;
  for (int algo : {qcclAlgoRing, qcclAlgoSra, qcclAlgoAuto}) checkExactAllreduce(comm, 100003, algo);
  checkLossy(comm, qcclCodecOneBit, 100003);
  EXPECT(qcclCommDestroy(comm) == qcclSuccess, "destroy: %s", qcclGetLastError(nullptr));
}

// Rank 0 calls an allreduce its peers never make (they are busy elsewhere). A watchdog thread on
// rank 0 aborts the communicator: the stuck call returns qcclCommFailed long before the 60 s
// timeout, and the peers' next call on the communicator hears the notice (qcclRemoteError).
void caseWatchdog(qcclComm_t comm) {
  std::vector<float> buf(300000, 1.0f);
  qcclTensorOpts_t t = QCCL_TENSOR_OPTS_INIT;
  t.id = 7;
  t.codec = qcclCodecOneBit;
  if (gRank == 0) {
    std::atomic<bool> returned{false};
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT(!returned.load(), "the call returned before it was aborted");
      EXPECT(qcclCommAbort(comm) == qcclSuccess, "abort: %s", qcclGetLastError(nullptr));
    });
    auto t0 = std::chrono::steady_clock::now();
    qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, &t, comm, nullptr);
    returned = true;
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[rank 0] stuck call returned after %.3f s: %s\n", sec, qcclGetErrorString(r));
    EXPECT(r == qcclCommFailed, "expected qcclCommFailed, got %s", qcclGetErrorString(r));
    EXPECT(sec < 30.0, "the stuck call ran %.1f s, towards its 60 s timeout", sec);
    watchdog.join();  // qcclCommAbort freed the communicator
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 has aborted by now
    qcclResult_t r = qcclAllreduce(buf.data(), buf.data(), buf.size(), qcclFloat32, qcclSum, &t, comm, nullptr);
    EXPECT(r == qcclRemoteError, "expected qcclRemoteError from rank 0's notice, got %s: %s", qcclGetErrorString(r),
           qcclGetLastError(comm));
    qcclCommDestroy(comm);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  // The watchdog case aborts from a second thread while the first one is inside qccl.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  std::string transport = "mpi", which = "basic";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--transport") == 0) transport = argv[i + 1];
    if (std::strcmp(argv[i], "--case") == 0) which = argv[i + 1];
  }
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--shm") == 0) gShm = std::strcmp(argv[i + 1], "0") != 0;
  if (!gShm) setenv("QCCL_SHM", "0", 1);
  gTransport = transport;
  const bool shm = gShm;
  const bool mismatch = which.rfind("mismatch", 0) == 0;
  if (which == "hier") setenv("QCCL_HOST_ID", std::to_string(gRank / 2).c_str(), 1);
  if (which == "warmup") {
    setenv("QCCL_WARMUP", "2", 1);
    setenv("QCCL_LOCAL_COMPRESS", "1", 1);  // on one host, compress once the warm-up is over
  }
  if (which == "restart") {
    caseRestart(transport);
  } else if (which == "ring-chunks") {
    caseRingChunks(transport);
  } else {
    qcclComm_t comm = makeComm(transport, mismatch ? 5.0 : 60.0);
    EXPECT(comm != nullptr, "no communicator");
    if (comm != nullptr) {
      if (which == "basic") {
        caseBasic(comm);
      } else if (which == "hier") {
        caseHier(comm);
      } else if (which == "nbc-ring") {
        caseNbcRing(comm);
      } else if (which == "warmup") {
        caseWarmup(comm, shm, transport);
      } else if (which == "epilogue") {
        caseEpilogue(comm);
      } else if (which == "reducescatter") {
        caseReduceScatter(comm);
      } else if (which == "mismatch-reducescatter") {
        caseMismatchReduceScatter(comm);
      } else if (which == "mismatch-threshold" || which == "mismatch-small") {
        caseMismatchThreshold(comm, which == "mismatch-small");
      } else if (mismatch) {
        caseMismatch(comm, which == "mismatch-count");
      } else if (which == "watchdog") {
        EXPECT(provided >= MPI_THREAD_SERIALIZED, "MPI thread level %d", provided);
        caseWatchdog(comm);
        comm = nullptr;  // freed inside
      } else {
        EXPECT(false, "unknown case %s", which.c_str());
      }
      // A failed communicator may not be able to say goodbye to its peers; abort does not wait.
      if (comm != nullptr && mismatch) {
        qcclCommAbort(comm);
      } else if (comm != nullptr) {
        EXPECT(qcclCommDestroy(comm) == qcclSuccess, "destroy: %s", qcclGetLastError(nullptr));
      }
    }
  }
  int total = 0;
  MPI_Allreduce(&gFailures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0)
    std::printf("capi_mpi_check %s/%s on %d ranks: %s\n", transport.c_str(), which.c_str(), gSize,
                total == 0 ? "PASSED" : "FAILED");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
