// The executor on hand-made messages: what an fp32 stream puts on the wire after its first chunk,
// and how a receiver treats bare chunks of the wrong size.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/executor.hpp"
#include "core/plan.hpp"
#include "qccl/codec.hpp"
#include "qccl/error.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

constexpr size_t kChunk = 512, kCount = 3 * kChunk - 7;  // three chunks, the last one short
constexpr uint32_t kSeq = 9;

// Rank 0 receives [0, kCount) from rank 1 into dst (one kCopy step), in chunks of kChunk.
Plan receivePlan() {
  Plan plan;
  plan.rank = 0;
  plan.size = 2;
  plan.count = kCount;
  PlanStep st;
  st.op = RecvOp::kCopy;
  st.recvs.push_back({1, Range{0, kCount}, 0});
  plan.steps.push_back(st);
  return plan;
}

ExecParams params() {
  ExecParams p;
  p.codec = resolveConfig(CodecConfig{});
  p.seq = kSeq;
  p.chunkElems = kChunk;
  p.timeoutSec = 10;
  return p;
}

Range chunk(size_t k) { return Range{k * kChunk, std::min(kCount, (k + 1) * kChunk)}; }

// Rank 1's side by hand: chunk 0 encoded, the others as `bytesOf(k)` bytes of the bare floats.
// Tag k: step 0's chunk k (the executor's tag layout for step 0).
template <class BytesOf>
void sendByHand(Transport& t, const std::vector<float>& x, BytesOf bytesOf) {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<RequestPtr> reqs;
  const CodecConfig cfg = resolveConfig(CodecConfig{});
  EncodeParams ep;
  ep.seq = kSeq;
  for (size_t k = 0; k < 3; ++k) {
    const Range c = chunk(k);
    if (k == 0) {
      bufs.emplace_back(encodedBytes(cfg, c.size()));
      encode(cfg, x.data(), nullptr, c.size(), bufs.back().data(), bufs.back().size(), ep);
    } else {
      bufs.emplace_back(bytesOf(k));
      std::memcpy(bufs.back().data(), x.data() + c.begin, std::min(bufs.back().size(), c.size() * sizeof(float)));
    }
    reqs.push_back(t.isend(0, static_cast<uint32_t>(k), bufs.back().data(), bufs.back().size()));
  }
  try {
    waitAll(t, reqs, deadlineIn(5), "send");
  } catch (const Error&) {
    // The receiver gave up on a bad chunk; what it left unreceived is not this side's concern.
  }
}

std::vector<float> values() {
  std::vector<float> x(kCount);
  for (size_t i = 0; i < kCount; ++i) x[i] = static_cast<float>(i) * 0.5f - 100.0f;
  return x;
}

TEST(Executor, Fp32ChunksAfterTheFirstAreBareFloats) {
  std::vector<TransportPtr> ts = makeLoopbackGroup(2);
  const std::vector<float> x = values();
  std::vector<float> dst(kCount, -1.0f);
  std::thread peer([&] { sendByHand(*ts[1], x, [](size_t k) { return chunk(k).size() * sizeof(float); }); });
  Executor ex(*ts[0]);
  ex.run(receivePlan(), dst.data(), dst.data(), params());
  peer.join();
  EXPECT_EQ(0, std::memcmp(dst.data(), x.data(), kCount * sizeof(float)));
  EXPECT_EQ(ex.stats().bytesReceived, kWireHeaderBytes + kCount * sizeof(float)) << "one header per stream";
}

TEST(Executor, Fp32BareChunkOfTheWrongSizeIsAMismatch) {
  for (long delta : {-4L, -1L, 4L}) {  // a short chunk, a torn float, a long chunk
    SCOPED_TRACE("delta " + std::to_string(delta));
    std::vector<TransportPtr> ts = makeLoopbackGroup(2);
    const std::vector<float> x = values();
    std::vector<float> dst(kCount + 16, -1.0f);  // 16 guard elements after the call's
    std::thread peer([&] {
      sendByHand(*ts[1], x, [&](size_t k) {
        const size_t right = chunk(k).size() * sizeof(float);
        return k == 2 ? static_cast<size_t>(static_cast<long>(right) + delta) : right;
      });
    });
    Executor ex(*ts[0]);
    ErrorCode code = ErrorCode::kSuccess;
    std::string what;
    try {
      ex.run(receivePlan(), dst.data(), dst.data(), params());
    } catch (const Error& e) {
      code = e.code();
      what = e.what();
      ex.abandon();
    }
    peer.join();
    EXPECT_EQ(code, ErrorCode::kMismatch) << what;
    // Chunks 0 and 1 arrived whole; nothing was written past the call's elements (the transport
    // refuses a long message into dst).
    EXPECT_EQ(0, std::memcmp(dst.data(), x.data(), 2 * kChunk * sizeof(float)));
    for (size_t i = kCount; i < dst.size(); ++i) ASSERT_EQ(dst[i], -1.0f) << "guard element " << i;
  }
}

}  // namespace
}  // namespace qccl
