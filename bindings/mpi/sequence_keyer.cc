#include "sequence_keyer.hpp"

namespace qcclmpi {

SequenceKeyer::Key SequenceKeyer::next(const CallSig& call) {
  if (!cycle_.empty()) {
    if (call == cycle_[pos_]) {
      Key k{true, pos_, false};
      pos_ = (pos_ + 1) % cycle_.size();
      return k;
    }
    ++breaks_;
    cycle_.clear();
    Key k = learn(call);
    k.broke = true;
    return k;
  }
  return learn(call);
}

SequenceKeyer::Key SequenceKeyer::learn(const CallSig& call) {
  const size_t t = history_.size();
  history_.push_back(call);
  if (opts_.pinnedPeriod > 0) {
    // The first pinnedPeriod calls define the cycle; keys start with its second round, whose calls
    // are then validated like any other.
    if (history_.size() == opts_.pinnedPeriod) {
      cycle_.swap(history_);
      pos_ = 0;
      forget();
    }
    return Key{};
  }
  // Longest proper border of history_[0..t] (prefix function); the smallest period is what is left.
  uint32_t k = t > 0 ? prefix_[t - 1] : 0;
  while (k > 0 && history_[k] != call) k = prefix_[k - 1];
  if (t > 0 && history_[k] == call) ++k;
  prefix_.push_back(k);
  const size_t len = t + 1, period = len - k;
  if (period <= opts_.maxPeriod && len >= 2 * period) {
    // Gone round twice: history_ is period-periodic, so its first `period` calls are the cycle by
    // position, and this call (which matched the one a cycle earlier) already has its key.
    cycle_.assign(history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(period));
    pos_ = len % period;
    forget();
    return Key{true, t % period, false};
  }
  if (len >= 2 * opts_.maxPeriod) forget();  // no cycle short enough: start over, nothing keyed
  return Key{};
}

void SequenceKeyer::forget() {
  history_.clear();
  prefix_.clear();
}

}  // namespace qcclmpi
