// Error-feedback keys for MPI_Allreduce calls that carry no tensor identity.
//
// A buffer address is not a tensor: a fusion buffer carries a different group of tensors in every
// call, and a caching allocator hands one address to different tensors over time. What does
// identify a tensor in a data-parallel trainer is its place in the step: every step issues the same
// calls in the same order. The keyer learns that cycle from the calls themselves and keys each
// call by its position in it, validating every call against the call seen at that position one
// cycle earlier (element count and buffer addresses). Any call that does not fit ends the cycle:
// every key handed out so far becomes stale (the caller drops their residuals), and learning starts
// again from that call. Calls made while learning get no key (no error feedback).
//
// Learning: the cycle is the smallest period of the calls seen since the last break (the prefix
// function of Knuth-Morris-Pratt gives it in O(1) amortized time per call), confirmed once the
// calls have gone round it twice. A step whose calls are themselves a repetition of a shorter
// sequence (the same buffer with the same count k times and nothing else) cannot be told from k
// steps of that shorter sequence by any key that sees only the calls; Options::pinnedPeriod
// (QCCL_INTERPOSE_PERIOD) fixes the cycle length for such trainers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qcclmpi {

/// What the keyer compares: element count and buffer addresses (send 0 = in place; both addresses
/// 0 for calls the caller keys by count alone).
struct CallSig {
  size_t count = 0;
  uintptr_t recv = 0;
  uintptr_t send = 0;
  bool operator==(const CallSig& o) const { return count == o.count && recv == o.recv && send == o.send; }
  bool operator!=(const CallSig& o) const { return !(*this == o); }
};

class SequenceKeyer {
 public:
  struct Options {
    size_t maxPeriod = 4096;  ///< longest cycle learned; longer ones are never keyed
    size_t pinnedPeriod = 0;  ///< 0: learn the cycle; else its length, taken as given
  };
  struct Key {
    bool keyed = false;   ///< the call fits a confirmed cycle: `position` keys its state
    size_t position = 0;  ///< position in the cycle, < period()
    bool broke = false;   ///< this call ended a cycle: every earlier key's state is stale
  };

  SequenceKeyer() : SequenceKeyer(Options{}) {}
  explicit SequenceKeyer(Options o) : opts_(o) {}

  /// Observes the next call and returns its key.
  Key next(const CallSig& call);
  /// Length of the confirmed cycle, 0 while learning.
  size_t period() const { return cycle_.size(); }
  /// Cycles ended by a call that did not fit.
  uint64_t breaks() const { return breaks_; }

 private:
  Key learn(const CallSig& call);
  void forget();

  Options opts_;
  std::vector<CallSig> history_;  // calls since the last break, while learning
  std::vector<uint32_t> prefix_;  // prefix function of history_
  std::vector<CallSig> cycle_;    // confirmed cycle, by position
  size_t pos_ = 0;                // position of the next call in cycle_
  uint64_t breaks_ = 0;
};

}  // namespace qcclmpi
