// A host emulation of one CUDA warp: 32 threads, one per lane, running the same warp-synchronous
// code as the kernels (cuda/bucket_*.cuh), with ballot and shuffles implemented as a barrier
// exchange. It lets the kernels' index and packing logic be checked against the CPU codec on a
// machine without a GPU. Not fast: every collective is a condition-variable barrier.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/codec_math.hpp"

namespace qccl {
namespace testing {

class WarpEmulator {
 public:
  static constexpr int kLanes = 32;

  /// Runs body(lane) on 32 threads and joins them.
  void run(const std::function<void(uint32_t)>& body) {
    arrived_ = 0;
    for (auto& r : round_) r = 0;
    std::vector<std::thread> lanes;
    for (uint32_t l = 0; l < kLanes; ++l) lanes.emplace_back([&body, l] { body(l); });
    for (auto& t : lanes) t.join();
    for (int l = 1; l < kLanes; ++l) {
      if (round_[l] != round_[0]) {
        std::fprintf(stderr, "warp emulator: lanes executed different numbers of collectives\n");
        std::abort();
      }
    }
  }

  /// The collective under ballot and shuffles: every lane offers a value, every lane gets all 32.
  /// Slots are double-buffered by round parity, so one barrier per round suffices: a lane can only
  /// write round k+2 (the same buffer as round k) after every lane has arrived at round k+1, that
  /// is, after every lane has finished reading round k.
  void exchange(uint32_t lane, uint32_t value, uint32_t all[kLanes]) {
    std::unique_lock<std::mutex> lk(mu_);
    const int par = round_[lane]++ & 1;
    slots_[par][lane] = value;
    if (++arrived_ == kLanes) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      const uint64_t g = gen_;
      // A lane that skips a collective the others execute would hang the warp on a GPU: report it.
      if (!cv_.wait_for(lk, std::chrono::seconds(60), [&] { return gen_ != g; })) {
        std::fprintf(stderr, "warp emulator: lane %u waited 60 s at a collective (divergent warp)\n", lane);
        std::abort();
      }
    }
    for (int l = 0; l < kLanes; ++l) all[l] = slots_[par][l];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
  int round_[kLanes] = {};
  uint32_t slots_[2][kLanes] = {};
};

/// The warp policy of cuda/warp.cuh, on the emulator.
struct HostWarp {
  WarpEmulator* emu;
  uint32_t laneId;

  uint32_t lane() const { return laneId; }
  uint32_t ballot(bool p) const {
    uint32_t all[WarpEmulator::kLanes];
    emu->exchange(laneId, p ? 1u : 0u, all);
    uint32_t b = 0;
    for (int l = 0; l < WarpEmulator::kLanes; ++l) b |= (all[l] & 1u) << l;
    return b;
  }
  bool any(bool p) const { return ballot(p) != 0; }
  uint32_t shflXorU32(uint32_t v, int h) const {
    uint32_t all[WarpEmulator::kLanes];
    emu->exchange(laneId, v, all);
    return all[laneId ^ static_cast<uint32_t>(h)];
  }
  float shflXor(float v, int h) const { return math::bitsFloat(shflXorU32(math::floatBits(v), h)); }
  float shflIdx(float v, int src) const {
    uint32_t all[WarpEmulator::kLanes];
    emu->exchange(laneId, math::floatBits(v), all);
    return math::bitsFloat(all[src]);
  }
  // Only one emulated warp runs at a time and the caller reads the flag after run() joins.
  void setFlag(uint32_t* flag) const { *flag |= 1u; }
};

}  // namespace testing
}  // namespace qccl
