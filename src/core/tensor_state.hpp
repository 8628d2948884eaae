// Per-tensor state of a communicator: the error-feedback residuals and the warm-up counter of each
// tensor, keyed by the caller's tensor id alone.
//
// The rules that keep residuals from leaking between tensors or growing without bound:
//   - id 0 is "no id" and never has state (the algorithm selection refuses a lossy codec with
//     error feedback for it), so distinct anonymous tensors can never share a residual;
//   - a known id called with a new element count, or from the other memory space (host/device),
//     gets fresh state: the old residuals no longer line up with the tensor, they are freed;
//   - an optional cap (Options::maxResidualBytes) evicts the least recently used tensors, never the
//     one in use, with a one-time warning; evictions are counted in the stats;
//   - release(id) frees one tensor's state, and the communicator frees all of it when it dies.
// State can be saved, loaded (checkpoints) and scaled (a loss-scale change under mixed precision).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/memory_space.hpp"

namespace qccl {

struct TensorState {
  uint64_t id = 0;
  size_t count = 0;
  bool device = false;
  std::unique_ptr<FloatArray> worker;  ///< covers the tensor (count elements)
  std::unique_ptr<FloatArray> owner;   ///< covers this rank's owned range (sra's shard, hier's inter shard)
  uint64_t ownerBegin = 0;             ///< where that range starts in the tensor (kAnyBegin: not known yet)
  uint64_t calls = 0;                  ///< calls that reached the compression decision
  uint64_t lastUse = 0;                ///< store tick of the last use (LRU)
  /// auto's choice between the flat schedule and hier (communicator.cc, "auto and hier"): trials
  /// run so far, the best time of each candidate on this rank, and the choice once made.
  struct Tune {
    uint32_t trials = 0;
    float best[2] = {0, 0};  ///< seconds; 0 = no trial yet
    int choice = -1;         ///< -1 undecided, 0 flat, 1 hier
  } tune;

  static constexpr uint64_t kAnyBegin = ~uint64_t{0};

  /// Bytes this state holds: its arrays plus a fixed charge for the bookkeeping.
  size_t bytes() const;
};

struct TensorStateStats {
  uint64_t tensors = 0;  ///< ids with state
  uint64_t bytes = 0;    ///< TensorState::bytes() summed
  uint64_t peakBytes = 0;
  uint64_t evictions = 0;     ///< states dropped by the cap
  uint64_t replacements = 0;  ///< states replaced by a new count or memory space
};

class TensorStateStore {
 public:
  /// Charged per state on top of its arrays: the map node and the state object itself, so that a
  /// cap also bounds a trainer that keeps creating ids whose tensors never need residuals.
  static constexpr size_t kBookkeepingBytes = 128;

  /// maxBytes 0: no cap.
  explicit TensorStateStore(size_t maxBytes = 0);
  TensorStateStore(const TensorStateStore&) = delete;
  TensorStateStore& operator=(const TensorStateStore&) = delete;

  /// The state of `id` (nonzero) for `count` elements in `space`: the existing one, or a new empty
  /// one (no arrays yet, zero calls) when there is none or the existing one has another count or
  /// memory space. The reference stays valid until the next acquire/release/load of this store.
  TensorState& acquire(uint64_t id, size_t count, MemorySpace& space);
  /// The worker residual of `st` (count elements), created zeroed on first use. Allocations first
  /// evict least recently used states (never `st`) as far as the cap requires.
  float* worker(TensorState& st, MemorySpace& space);
  /// The owner residual of `st` for the n elements from `begin`, created zeroed on first use or
  /// when the range changes (another schedule owns another range: its residual would land on the
  /// wrong elements). A residual loaded from a record that did not say its range adopts the first.
  float* owner(TensorState& st, size_t n, uint64_t begin, MemorySpace& space);
  /// Counts a completed call of `st`.
  void finish(TensorState& st);

  /// Frees the state of `id`; false when it had none.
  bool release(uint64_t id);
  void releaseAll();

  /// The state of `id` as bytes (a versioned record; residuals copied to the host); empty when
  /// `id` has no state. `nranks` and `rank` go into the record: an owner residual only fits the
  /// same rank of a communicator of the same size.
  std::vector<uint8_t> save(uint64_t id, int nranks, int rank) const;
  /// Replaces the state of `id` by a record from save(). The record is untrusted: every field is
  /// checked (Error kMalformed), and a record of another rank or communicator size is refused
  /// (kInvalidArgument).
  void load(uint64_t id, const void* data, size_t bytes, MemorySpace& space, int nranks, int rank);
  /// Multiplies the residuals of `id` by `factor` (e.g. new loss scale / old loss scale); false
  /// when `id` has no state. factor must be finite.
  bool scale(uint64_t id, float factor);

  /// Error control of `id`'s calls (EncodeParams::feedbackGain), in (0, 1]; 1 removes the setting.
  /// A setting, not state: it outlives replaced, evicted and loaded states, and only clearGain()
  /// or releaseAll() drop it.
  void setGain(uint64_t id, float gain);
  /// The gain set for `id`, else 1.
  float gain(uint64_t id) const;
  void clearGain(uint64_t id) { gains_.erase(id); }

  TensorStateStats stats() const;

 private:
  void account(long long delta);
  void makeRoom(size_t more, const TensorState* keep);

  size_t maxBytes_;
  std::unordered_map<uint64_t, TensorState> states_;
  std::unordered_map<uint64_t, float> gains_;
  uint64_t tick_ = 0;
  TensorStateStats stats_;
  bool warned_ = false;
};

}  // namespace qccl
