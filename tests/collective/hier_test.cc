// Hierarchical allreduce (Algo::kHier) over loopback ranks grouped into emulated hosts: exact for
// fp32, bit for bit against sra's reference applied lane by lane to the host sums for the lossy
// codecs (with the residuals carried over calls), identical on every rank, in place and out of place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "coll_test_util.hpp"
#include "core/plan_hier.hpp"

namespace qccl {
namespace test {
namespace {

// runRanks over a loopback group whose transports report `hostOf`.
void runHosts(const std::vector<int>& hostOf, const Options& opts, const std::function<void(Communicator&, int)>& fn) {
  const int n = static_cast<int>(hostOf.size());
  std::vector<TransportPtr> ts = makeLoopbackGroup(n, hostOf);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<Communicator>(std::move(ts[r]), opts));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r], r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

Options testOptions() {
  Options o;
  o.timeoutSec = 20;
  o.chunkBytes = 16 << 10;  // several chunks per lane
  return o;
}

const std::vector<std::vector<int>> kShapes = {
    {0, 0, 1, 1}, {0, 0, 0, 1}, {0, 1, 1, 2, 2, 2}, {0, 1, 0, 1, 0, 1}, {0, 0, 1, 1, 2, 2, 3, 3}, {0, 1, 2}, {0, 0, 0}};

std::string describe(const std::vector<int>& h) {
  std::string s;
  for (int x : h) s += std::to_string(x);
  return s;
}

TEST(Hier, Fp32IsExactAndIdenticalOnEveryRank) {
  for (const auto& hosts : kShapes) {
    const int n = static_cast<int>(hosts.size());
    for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{100003}}) {
      SCOPED_TRACE("hosts " + describe(hosts) + " count " + std::to_string(count));
      runHosts(hosts, testOptions(), [&](Communicator& c, int r) {
        std::vector<float> buf = exactInput(count, r), avg = buf, in = buf, out(count, -7.0f);
        TensorOpts t;
        t.codec = CodecId::kFp32;
        t.algo = Algo::kHier;
        c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
        c.allreduce(avg.data(), avg.data(), count, DataType::kFloat32, RedOp::kAvg, t);
        // Out of place: no copy of the input first (the intra-host scatter reads it directly).
        c.allreduce(in.data(), out.data(), count, DataType::kFloat32, RedOp::kSum, t);
        EXPECT_TRUE(bitEqual(in, exactInput(count, r))) << "input modified out of place, rank " << r;
        EXPECT_TRUE(bitEqual(out, buf)) << "out of place differs from in place, rank " << r;
        std::vector<float> sum(count, 0.0f);
        for (int q = 0; q < n; ++q) {
          const std::vector<float> x = exactInput(count, q);
          for (size_t i = 0; i < count; ++i) sum[i] += x[i];
        }
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf[i], sum[i]) << "rank " << r << " element " << i;
          ASSERT_EQ(avg[i], sum[i] * (1.0f / static_cast<float>(n))) << "avg, rank " << r << " element " << i;
        }
      });
    }
  }
}

TEST(Hier, LossyCodecsMatchSraPerLaneOnTheHostSums) {
  const size_t count = 20011;
  const Options opts = testOptions();
  for (const auto& hosts : kShapes) {
    for (CodecId codec : {CodecId::kOneBit, CodecId::kMaxMin, CodecId::kFp16}) {
      SCOPED_TRACE("hosts " + describe(hosts) + " codec " + codecName(codec));
      const int n = static_cast<int>(hosts.size());
      CodecConfig cfg = opts.codec;
      cfg.codec = codec;
      cfg = resolveConfig(cfg);
      const int steps = 2;
      std::vector<std::vector<std::vector<float>>> out(steps, std::vector<std::vector<float>>(n));
      runHosts(hosts, opts, [&](Communicator& c, int r) {
        TensorOpts t;
        t.id = 5;
        t.codec = codec;
        t.algo = Algo::kHier;
        for (int s = 0; s < steps; ++s) {
          std::vector<float> buf = exactInput(count, r + 3 * s);
          if (s % 2 == 0) {
            c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
            out[s][r] = buf;
          } else {  // out of place, into a prefilled output; the input stays as it was
            out[s][r].assign(count, -7.0f);
            c.allreduce(buf.data(), out[s][r].data(), count, DataType::kFloat32, RedOp::kSum, t);
            EXPECT_TRUE(bitEqual(buf, exactInput(count, r + 3 * s))) << "input modified out of place";
          }
        }
      });
      // Reference: host sums (exact: small integers), then sra among the hosts on every lane, with
      // one residual state per lane (the same rank owns a lane in every call).
      const std::vector<int> norm = normalizeHosts(hosts);
      const HierPlan hp = planHier(0, hosts, count, cfg.bucket ? cfg.bucket : 32);  // the library's alignment
      std::vector<RefState> lanes(hp.lanes.size());
      for (int s = 0; s < steps; ++s) {
        std::vector<std::vector<float>> hostSum(hp.hosts, std::vector<float>(count, 0.0f));
        for (int r = 0; r < n; ++r) {
          const std::vector<float> x = exactInput(count, r + 3 * s);
          for (size_t i = 0; i < count; ++i) hostSum[norm[r]][i] += x[i];
        }
        std::vector<float> expect(count);
        for (size_t l = 0; l < hp.lanes.size(); ++l) {
          const Range lane = hp.lanes[l];
          std::vector<std::vector<float>> part;
          for (const auto& h : hostSum) part.emplace_back(h.begin() + lane.begin, h.begin() + lane.end);
          if (lane.size() == 0) continue;
          const std::vector<float> red = refSra(cfg, part, &lanes[l], true);
          std::copy(red.begin(), red.end(), expect.begin() + lane.begin);
        }
        for (int r = 0; r < n; ++r) EXPECT_TRUE(bitEqual(out[s][r], expect)) << "call " << s << " rank " << r;
      }
    }
  }
}

// The inter-host byte counter: none on one host, all of them when every rank is its own host, and
// on 2 hosts x 2 ranks hier sends about half of flat sra's inter-host bytes (each lane crosses the
// link with half the tensor, where flat sra sends every rank's share to both remote ranks).
TEST(Hier, InterHostBytesAreCountedPerPeerHost) {
  const size_t count = 100003;
  auto measure = [&](const std::vector<int>& hosts, Algo algo) {
    const int n = static_cast<int>(hosts.size());
    std::vector<CommStats> st(n);
    runHosts(hosts, testOptions(), [&](Communicator& c, int r) {
      std::vector<float> buf = exactInput(count, r);
      TensorOpts t;
      t.id = 5;
      t.codec = CodecId::kOneBit;
      t.algo = algo;
      c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
      st[r] = c.stats();
    });
    return st;
  };
  for (const CommStats& s : measure({0, 0, 0}, Algo::kSra)) {
    EXPECT_GT(s.bytesSent, 0u);
    EXPECT_EQ(s.bytesSentInterHost, 0u);
  }
  for (const CommStats& s : measure({0, 1, 2}, Algo::kSra)) {
    EXPECT_GT(s.bytesSent, 0u);
    EXPECT_EQ(s.bytesSentInterHost, s.bytesSent);
  }
  const std::vector<CommStats> flat = measure({0, 0, 1, 1}, Algo::kSra), hier = measure({0, 0, 1, 1}, Algo::kHier);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_GT(hier[r].bytesSentInterHost, 0u);
    EXPECT_LT(hier[r].bytesSentInterHost, hier[r].bytesSent);  // the fp32 intra-host stages dominate
    EXPECT_LT(static_cast<double>(hier[r].bytesSentInterHost), 0.6 * static_cast<double>(flat[r].bytesSentInterHost));
    EXPECT_GT(static_cast<double>(hier[r].bytesSentInterHost), 0.4 * static_cast<double>(flat[r].bytesSentInterHost));
  }
}

// Options::intraCodec fp16/bf16: the stages inside a host send half the bytes, every rank gets the
// same result, and it stays within the cast's rounding of the exact sum (fp32 inter-host stage).
TEST(Hier, IntraCodecCastsHalveTheIntraHostBytes) {
  const size_t count = 100003;
  const std::vector<int> hosts = {0, 0, 1, 1};
  auto run = [&](CodecId intra, std::vector<std::vector<float>>* out) {
    Options o = testOptions();
    o.intraCodec = intra;
    std::vector<CommStats> st(hosts.size());
    out->assign(hosts.size(), {});
    runHosts(hosts, o, [&](Communicator& c, int r) {
      std::vector<float> x = exactInput(count, r);
      for (float& v : x) v *= 0.001f;
      TensorOpts t;
      t.codec = CodecId::kFp32;
      t.algo = Algo::kHier;
      c.allreduce(x.data(), x.data(), count, DataType::kFloat32, RedOp::kSum, t);
      (*out)[r] = x;
      st[r] = c.stats();
    });
    return st;
  };
  std::vector<std::vector<float>> exact, half;
  const std::vector<CommStats> s32 = run(CodecId::kFp32, &exact);
  for (CodecId intra : {CodecId::kFp16, CodecId::kBf16}) {
    SCOPED_TRACE(codecName(intra));
    const std::vector<CommStats> s16 = run(intra, &half);
    const double tol = intra == CodecId::kFp16 ? 2e-3 : 1.6e-2;  // a few roundings of 2^-11 / 2^-8
    for (size_t r = 0; r < hosts.size(); ++r) {
      ASSERT_EQ(half[r], half[0]) << "rank " << r << " differs from rank 0";
      const double intra32 = static_cast<double>(s32[r].bytesSent - s32[r].bytesSentInterHost);
      const double intra16 = static_cast<double>(s16[r].bytesSent - s16[r].bytesSentInterHost);
      EXPECT_LT(intra16, 0.55 * intra32) << "rank " << r;
      EXPECT_GT(intra16, 0.45 * intra32) << "rank " << r;
    }
    double worst = 0;
    for (size_t i = 0; i < count; ++i) {
      const double e = std::abs(static_cast<double>(half[0][i]) - exact[0][i]);
      worst = std::max(worst, e / std::max(1e-3, std::abs(static_cast<double>(exact[0][i]))));
    }
    EXPECT_LT(worst, tol);
    EXPECT_GT(worst, 0.0);  // the cast did round something
  }
}

// Hierarchical allgather: bit for bit the flat allgather's result with every codec, over calls
// (error feedback on the same residual), on every host shape; and fewer inter-host bytes.
TEST(Hier, AllgatherMatchesFlatBitForBit) {
  const size_t count = 5003;
  for (const auto& hosts : kShapes) {
    const int n = static_cast<int>(hosts.size());
    for (CodecId codec : {CodecId::kFp32, CodecId::kOneBit, CodecId::kMaxMin, CodecId::kFp16}) {
      SCOPED_TRACE("hosts " + describe(hosts) + " codec " + codecName(codec));
      std::vector<CommStats> flatStats(n), hierStats(n);
      runHosts(hosts, testOptions(), [&](Communicator& c, int r) {
        for (int step = 0; step < 3; ++step) {
          std::vector<float> x(count);
          for (size_t i = 0; i < count; ++i) x[i] = std::sin(0.001f * static_cast<float>(i * (r + 1) + step));
          std::vector<float> flat(count * n), hier(count * n);
          TensorOpts tf, th;
          tf.id = 1;
          th.id = 2;
          tf.codec = th.codec = codec;
          tf.algo = Algo::kAllgather;
          th.algo = Algo::kHier;
          const CommStats s0 = c.stats();
          c.allgather(x.data(), flat.data(), count, DataType::kFloat32, tf);
          const CommStats s1 = c.stats();
          c.allgather(x.data(), hier.data(), count, DataType::kFloat32, th);
          const CommStats s2 = c.stats();
          ASSERT_TRUE(bitEqual(flat, hier)) << "rank " << r << " step " << step;
          if (codec == CodecId::kFp32) {
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(hier[static_cast<size_t>(r) * count + i], x[i]);
          }
          flatStats[r].bytesSentInterHost += s1.bytesSentInterHost - s0.bytesSentInterHost;
          hierStats[r].bytesSentInterHost += s2.bytesSentInterHost - s1.bytesSentInterHost;
        }
      });
      uint64_t flatX = 0, hierX = 0;
      for (int r = 0; r < n; ++r) {
        flatX += flatStats[r].bytesSentInterHost;
        hierX += hierStats[r].bytesSentInterHost;
      }
      EXPECT_LE(hierX, flatX);
      const std::vector<int> h = normalizeHosts(hosts);
      const bool shared = *std::max_element(h.begin(), h.end()) > 0 && n > *std::max_element(h.begin(), h.end()) + 1;
      if (shared) {
        EXPECT_LT(hierX, flatX);  // some host has 2+ ranks: blocks cross once per host
      }
    }
  }
}

// auto where ranks share hosts: the first kTuneTrials calls of a tensor alternate flat (sra for a
// lossy codec, the fp32 ring for fp32 over loopback) and hier, flat first; then every rank keeps the
// same one. Every call's result is identical on every rank, and exact for fp32 on either schedule.
TEST(Hier, AutoTriesFlatAndHierThenEveryRankKeepsTheSame) {
  const size_t count = 300000;  // 1.2 MB of fp32: above kTuneMinBytes
  const int calls = static_cast<int>(kTuneTrials) + 3;
  for (const auto& hosts : std::vector<std::vector<int>>{{0, 0, 1, 1}, {0, 0, 0, 1}, {0, 1, 0, 1, 2, 2}}) {
    for (CodecId codec : {CodecId::kOneBit, CodecId::kFp32}) {
      SCOPED_TRACE("hosts " + describe(hosts) + " codec " + codecName(codec));
      const int n = static_cast<int>(hosts.size());
      const Algo flat = codec == CodecId::kFp32 ? Algo::kRing : Algo::kSra;
      std::vector<std::vector<Algo>> ran(n);
      std::vector<std::vector<std::vector<float>>> out(calls, std::vector<std::vector<float>>(n));
      runHosts(hosts, testOptions(), [&](Communicator& c, int r) {
        TensorOpts t;
        t.id = 11;
        t.codec = codec;
        for (int k = 0; k < calls; ++k) {
          std::vector<float> buf = exactInput(count, r + k);
          c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
          ran[r].push_back(c.lastAlgo());
          out[k][r] = std::move(buf);
        }
      });
      for (int k = 0; k < calls; ++k) {
        for (int r = 1; r < n; ++r) EXPECT_TRUE(bitEqual(out[k][r], out[k][0])) << "call " << k << " rank " << r;
        EXPECT_EQ(ran[0][k], ran[n - 1][k]) << "call " << k;
        if (k < static_cast<int>(kTuneTrials)) {
          EXPECT_EQ(ran[0][k], k % 2 == 0 ? flat : Algo::kHier) << "trial " << k;
        } else {
          EXPECT_TRUE(ran[0][k] == flat || ran[0][k] == Algo::kHier) << "call " << k;
          EXPECT_EQ(ran[0][k], ran[0][kTuneTrials]) << "call " << k << ": the choice stays";
        }
        if (codec == CodecId::kFp32) {
          std::vector<float> sum(count, 0.0f);
          for (int q = 0; q < n; ++q) {
            const std::vector<float> x = exactInput(count, q + k);
            for (size_t i = 0; i < count; ++i) sum[i] += x[i];
          }
          EXPECT_TRUE(bitEqual(out[k][0], sum)) << "fp32 call " << k << " is exact";
        }
      }
    }
  }
}

// Where hier cannot differ from flat, below kTuneMinBytes, without an id, or with autoHier off,
// auto never runs hier.
TEST(Hier, AutoStaysFlatWhereHierDoesNotApply) {
  struct Case {
    std::vector<int> hosts;
    size_t count;
    uint64_t id;
    bool autoHier;
  };
  const std::vector<Case> cases = {{{0, 1, 2}, 300000, 7, true},       // one rank per host
                                   {{0, 0, 0}, 300000, 7, true},       // one host
                                   {{0, 0, 1, 1}, 100000, 7, true},    // 400 KB < kTuneMinBytes
                                   {{0, 0, 1, 1}, 300000, 0, true},    // no id (fp32: allowed)
                                   {{0, 0, 1, 1}, 300000, 7, false}};  // QCCL_AUTO_HIER=0
  for (const Case& k : cases) {
    SCOPED_TRACE("hosts " + describe(k.hosts) + " count " + std::to_string(k.count) + " id " + std::to_string(k.id) +
                 " autoHier " + std::to_string(k.autoHier));
    Options o = testOptions();
    o.autoHier = k.autoHier;
    runHosts(k.hosts, o, [&](Communicator& c, int r) {
      std::vector<float> buf = exactInput(k.count, r);
      TensorOpts t;
      t.id = k.id;
      for (int call = 0; call < 3; ++call) {
        c.allreduce(buf.data(), buf.data(), k.count, DataType::kFloat32, RedOp::kSum, t);
        EXPECT_NE(c.lastAlgo(), Algo::kHier) << "call " << call;
      }
      EXPECT_EQ(c.stats().tensors, 0u) << "no state kept for fp32 tensors that never try hier";
    });
  }
}

TEST(Hier, MismatchedCountFailsOnEveryRank) {
  Options opts = testOptions();
  opts.timeoutSec = 5;
  std::vector<int> failed(4, 0);
  runHosts({0, 0, 1, 1}, opts, [&](Communicator& c, int r) {
    const size_t count = r == 3 ? 5000 : 4000;
    std::vector<float> buf(count, 1.0f);
    TensorOpts t;
    t.id = 2;
    t.codec = CodecId::kOneBit;
    t.algo = Algo::kHier;
    try {
      c.allreduce(buf.data(), buf.data(), count, DataType::kFloat32, RedOp::kSum, t);
    } catch (const Error& e) {
      failed[r] = e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError;
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(failed[r]) << "rank " << r;
}

// Error control (Communicator::setFeedbackGain) reaches hier's inter-host stage: a tensor with gain
// g gives, on its second call, the bits of a plain tensor whose residuals were scaled by g before it
// (the codec sees x + g e either way), and differs on the third (it kept the other (1 - g) e).
TEST(Hier, FeedbackGainReachesTheInterHostStage) {
  runHosts({0, 0, 1, 1}, testOptions(), [&](Communicator& c, int r) {
    const size_t count = 30011;
    TensorOpts a, b;
    a.id = 5;
    b.id = 6;
    a.codec = b.codec = CodecId::kOneBit;
    a.algo = b.algo = Algo::kHier;
    c.setFeedbackGain(a.id, 0.5f);
    EXPECT_EQ(c.feedbackGain(a.id), 0.5f);
    EXPECT_EQ(c.feedbackGain(b.id), 1.0f);
    for (int call = 0; call < 3; ++call) {
      if (call == 1) {
        EXPECT_TRUE(c.scaleTensorState(b.id, 0.5f));
      }
      std::vector<float> x = gaussian(count, 100 * call + r), ya(count), yb(count);
      c.allreduce(x.data(), ya.data(), count, DataType::kFloat32, RedOp::kAvg, a);
      c.allreduce(x.data(), yb.data(), count, DataType::kFloat32, RedOp::kAvg, b);
      if (call < 2) {
        EXPECT_TRUE(bitEqual(ya, yb)) << "call " << call << ", rank " << r;
      } else {
        EXPECT_FALSE(bitEqual(ya, yb)) << "rank " << r << ": the held-back error was not kept";
      }
    }
    c.releaseTensor(a.id);  // frees the setting too
    EXPECT_EQ(c.feedbackGain(a.id), 1.0f);
    EXPECT_THROW(c.setFeedbackGain(a.id, 0.0f), Error);
    EXPECT_THROW(c.setFeedbackGain(0, 0.5f), Error);
  });
}

}  // namespace
}  // namespace test
}  // namespace qccl
