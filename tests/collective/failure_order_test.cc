// What a failing rank does first. Dropping an unfinished request can take a while (MPI and UCX
// wait for the library to let go of the buffer), so the peers must be told before anything is
// dropped: a recording transport around the loopback one logs both events in order.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "coll_test_util.hpp"
#include "qccl/error.hpp"

namespace qccl {
namespace test {
namespace {

struct Log {
  std::mutex mu;
  std::vector<std::string> events;
  void add(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(e);
  }
};

class RecordingRequest final : public Request {
 public:
  RecordingRequest(RequestPtr inner, Log* log) : inner_(std::move(inner)), log_(log) {}
  bool test() override { return done_ = done_ || inner_->test(); }
  size_t bytes() const override { return inner_->bytes(); }

 protected:
  void release() noexcept override {
    if (!done_) log_->add("drop");
    delete this;
  }

 private:
  RequestPtr inner_;
  Log* log_;
  bool done_ = false;
};

class RecordingTransport final : public Transport {
 public:
  RecordingTransport(TransportPtr inner, Log* log) : inner_(std::move(inner)), log_(log) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* name() const override { return "recording"; }
  RequestPtr isend(int peer, uint32_t tag, const void* buf, size_t bytes) override {
    return RequestPtr(new RecordingRequest(inner_->isend(peer, tag, buf, bytes), log_));
  }
  RequestPtr irecv(int peer, uint32_t tag, void* buf, size_t capacity) override {
    return RequestPtr(new RecordingRequest(inner_->irecv(peer, tag, buf, capacity), log_));
  }
  void progress() override { inner_->progress(); }
  void idle(std::chrono::microseconds maxWait) override { inner_->idle(maxWait); }
  void sendAbort(ErrorCode code, const std::string& reason) noexcept override {
    log_->add("abort");
    inner_->sendAbort(code, reason);
  }
  bool pollAbort(int* peer, ErrorCode* code, std::string* reason) override {
    return inner_->pollAbort(peer, code, reason);
  }

 private:
  TransportPtr inner_;
  Log* log_;
};

// Rank 2 passes a longer count. Rank 0 receives rank 2's chunk late in its receive order (its
// receives from the others are posted and possibly pending), fails with kMismatch, and must send
// its notice before it drops any of them.
TEST(FailureOrder, NoticeGoesOutBeforeAnyRequestIsDropped) {
  const int n = 3;
  size_t drops = 0;
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<Log> logs(n);
    std::vector<TransportPtr> raw = makeLoopbackGroup(n);
    std::vector<std::unique_ptr<Communicator>> comms;
    Options opts;
    opts.timeoutSec = 10;
    opts.chunkBytes = 4096;  // many chunks: requests are in flight when the mismatch shows
    for (int r = 0; r < n; ++r)
      comms.push_back(
          std::make_unique<Communicator>(TransportPtr(new RecordingTransport(std::move(raw[r]), &logs[r])), opts));
    std::vector<ErrorCode> codes(n, ErrorCode::kSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        const size_t count = r == 2 ? 70000 : 60000;
        std::vector<float> x = exactInput(count, r);
        TensorOpts t;
        t.id = 4;
        t.codec = CodecId::kMaxMin;
        t.algo = Algo::kSra;
        try {
          comms[r]->allreduce(x.data(), x.data(), count, DataType::kFloat32, RedOp::kSum, t);
        } catch (const Error& e) {
          codes[r] = e.code();
        }
      });
    }
    for (auto& th : threads) th.join();
    int detectors = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_NE(codes[r], ErrorCode::kSuccess) << "rank " << r;
      if (codes[r] != ErrorCode::kMismatch) continue;
      ++detectors;
      const std::vector<std::string>& ev = logs[r].events;
      ASSERT_FALSE(ev.empty()) << "rank " << r;
      EXPECT_EQ(ev.front(), "abort") << "rank " << r << " dropped a request before telling its peers";
      drops += ev.size() - 1;
    }
    EXPECT_GE(detectors, 1);
  }
  EXPECT_GT(drops, 0u) << "no request was outstanding at the failure: the test would not see the order";
}

}  // namespace
}  // namespace test
}  // namespace qccl
