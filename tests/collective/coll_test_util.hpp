// Shared helpers of the collective tests: loopback ranks on threads, exact inputs, and a
// single-process reference simulation of each algorithm written from the algorithm's definition
// with the CPU codec functions (it does not use the executor or the plan code).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/communicator.hpp"
#include "qccl/codec.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace test {

/// Makes `n` loopback communicators, rank r's with optionsOf(r), and runs fn(comm, rank) on one
/// thread per rank. An exception escaping fn fails the test (it is caught and reported, never left
/// to terminate).
inline void runRanks(int n, const std::function<Options(int)>& optionsOf,
                     const std::function<void(Communicator&, int)>& fn) {
  std::vector<TransportPtr> ts = makeLoopbackGroup(n);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<Communicator>(std::move(ts[r]), optionsOf(r)));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r], r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

/// runRanks with the same options on every rank.
inline void runRanks(int n, const Options& opts, const std::function<void(Communicator&, int)>& fn) {
  runRanks(
      n, [&](int) { return opts; }, fn);
}

/// value = i * stride + rank, folded so that sums of up to 8 ranks stay exact integers in fp32.
inline std::vector<float> exactInput(size_t count, int rank) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(static_cast<int>(i % 2053) - 1000 + rank);
  return v;
}

/// n draws of a standard normal from `seed`.
inline std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// Shards as the sra definition states them: ceil(count / align) units split as evenly as
/// integer division gives, rank p taking units [p*U/n, (p+1)*U/n).
inline std::vector<std::pair<size_t, size_t>> refShards(size_t count, int n, size_t align) {
  size_t units = (count + align - 1) / align;
  std::vector<std::pair<size_t, size_t>> s;
  for (int p = 0; p < n; ++p) {
    size_t b = std::min(count, units * p / n * align), e = std::min(count, units * (p + 1) / n * align);
    s.emplace_back(b, e);
  }
  return s;
}

/// decode(encode(x)) with the residual updated in place (null: no error feedback).
inline std::vector<float> quantize(const CodecConfig& cfg, const float* x, float* res, size_t n) {
  std::vector<uint8_t> buf(encodedBytes(cfg, n));
  encode(cfg, x, res, n, buf.data(), buf.size());
  std::vector<float> out(n);
  decode(buf.data(), buf.size(), out.data(), n);
  return out;
}

/// Error-feedback state of the reference, one per rank.
struct RefState {
  std::vector<std::vector<float>> worker;  // per rank, count
  std::vector<std::vector<float>> owner;   // per rank, its shard
};

/// sra: every rank q != p quantizes shard p with its worker residual; owner p starts from its own
/// values of the shard, exact, adds the n - 1 decoded contributions in rank order, adds its owner
/// residual, quantizes once, and everyone takes that decoded shard.
inline std::vector<float> refSra(const CodecConfig& cfg, const std::vector<std::vector<float>>& x, RefState* st,
                                 bool ef) {
  int n = static_cast<int>(x.size());
  size_t count = x[0].size();
  auto shards = refShards(count, n, cfg.bucket ? cfg.bucket : 32);
  if (st->worker.empty()) {
    st->worker.assign(n, std::vector<float>(count, 0.0f));
    for (int p = 0; p < n; ++p) st->owner.emplace_back(shards[p].second - shards[p].first, 0.0f);
  }
  std::vector<float> result(count);
  for (int p = 0; p < n; ++p) {
    size_t b = shards[p].first, m = shards[p].second - b;
    std::vector<float> acc(x[p].begin() + b, x[p].begin() + b + m);
    for (int q = 0; q < n; ++q) {
      if (q == p) continue;
      std::vector<float> d = quantize(cfg, x[q].data() + b, ef ? st->worker[q].data() + b : nullptr, m);
      for (size_t i = 0; i < m; ++i) acc[i] = acc[i] + d[i];
    }
    std::vector<float> out = quantize(cfg, acc.data(), ef ? st->owner[p].data() : nullptr, m);
    std::copy(out.begin(), out.end(), result.begin() + b);
  }
  return result;
}

/// ring: chunk c (of n chunks aligned to 32) starts as rank c's data and travels c+1, ..., c-1;
/// every hop sends it through the cast and the receiver adds its own value; the last rank casts
/// the full sum once more and that is everyone's result. No error feedback.
inline std::vector<float> refRing(const CodecConfig& cfg, const std::vector<std::vector<float>>& x) {
  int n = static_cast<int>(x.size());
  size_t count = x[0].size();
  auto shards = refShards(count, n, 32);
  std::vector<float> result(count);
  for (int c = 0; c < n; ++c) {
    size_t b = shards[c].first, m = shards[c].second - b;
    std::vector<float> acc(x[c].begin() + b, x[c].begin() + b + m);
    for (int j = 1; j < n; ++j) {
      std::vector<float> d = quantize(cfg, acc.data(), nullptr, m);
      const float* own = x[(c + j) % n].data() + b;
      for (size_t i = 0; i < m; ++i) acc[i] = own[i] + d[i];
    }
    std::vector<float> out = quantize(cfg, acc.data(), nullptr, m);
    std::copy(out.begin(), out.end(), result.begin() + b);
  }
  return result;
}

/// allgather-reduce: every rank quantizes the whole tensor once with its worker residual; the
/// result is the sum of the n decoded tensors in rank order.
inline std::vector<float> refAllgatherReduce(const CodecConfig& cfg, const std::vector<std::vector<float>>& x,
                                             RefState* st, bool ef) {
  int n = static_cast<int>(x.size());
  size_t count = x[0].size();
  if (st->worker.empty()) st->worker.assign(n, std::vector<float>(count, 0.0f));
  std::vector<float> acc(count);
  for (int q = 0; q < n; ++q) {
    std::vector<float> d = quantize(cfg, x[q].data(), ef ? st->worker[q].data() : nullptr, count);
    for (size_t i = 0; i < count; ++i) acc[i] = q == 0 ? d[i] : acc[i] + d[i];
  }
  return acc;
}

}  // namespace test
}  // namespace qccl
