// The loopback C API tests' rank runner: one thread per rank in this process.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "qccl/qccl.h"

namespace qccl_test {

// Runs fn(rank, comm) on one thread per rank and destroys the communicators afterwards.
inline void runRanks(int n, const qcclConfig_t* cfg, const std::function<void(int, qcclComm_t)>& fn) {
  std::vector<qcclComm_t> comms(n);
  ASSERT_EQ(qcclCommInitLoopback(comms.data(), n, cfg), qcclSuccess) << qcclGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r, comms[r]); });
  for (auto& t : threads) t.join();
  for (auto c : comms) EXPECT_EQ(qcclCommDestroy(c), qcclSuccess);
}

}  // namespace qccl_test
