// The cross-rank check of `auto` over a transport whose library sums fp32 itself (MPI), carrying a
// small sum with it.
//
// Before `auto` hands a call to the library (MPI_Iallreduce) or to a compressed schedule, every
// rank must know that every other rank makes the same call the same way; else two ranks would wait
// on paths that cannot see each other. checkCall() exchanges each rank's description of the call
// (its words) by recursive doubling over qccl's own messages, so that every rank learns whether
// all words agree, in ceil(log2 n) rounds (plus two for the ranks beyond the largest power of
// two). An uncompressed fp32 call of at most kMaxFloats elements rides along: its floats follow the
// words in the same messages and are summed on the way, so such a call costs one latency-optimal
// exchange instead of a check and then a collective.
//
// Why messages and not a library collective of fixed size: the sum that rides along has the
// call's size, and a library collective whose size differs across ranks is erroneous (MPI); a
// receive here always has room for the largest message any rank can send (kMaxFloats floats), so a
// rank with another count is a mismatch that every rank reports, never a hang or a truncation.
//
// The result: every rank ends with the same verdict. Each message carries its sender's words and
// the lowest index of a word that the sender already knows to differ within its group; a rank
// compares the partner's words with its own and folds in the partner's verdict. After the last
// round each rank's group is every rank, so a disagreement anywhere reaches everyone. The sum is
// bit-identical on every rank: each round adds two partial sums (a + b == b + a in IEEE
// arithmetic) that both partners hold alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/transport.hpp"

namespace qccl {

struct CallCheck {
  static constexpr int kWords = 6;  ///< words describing a call (Communicator's callWords)
  /// The largest sum that rides along (16 KiB of fp32): above it the library's collective is
  /// faster than recursive doubling's log2(n) full-size rounds (bench/RESULTS.md, "Across hosts").
  static constexpr size_t kMaxFloats = 4096;
  /// Tags: the top kTags of the transport's tag range (tagLimit() - 1 - round).
  static constexpr uint32_t kTags = 34;
  /// How long each exchange polls before it starts yielding the core (WaitSpec::busyPoll): a round
  /// across hosts takes 40-100 us on the emulated cluster, and yielding within it cost about 20 us
  /// per call at 256 B (bench/RESULTS.md, "Across hosts"). Bounded, so a late peer costs at most
  /// this much CPU per round before the usual yield-then-sleep policy takes over.
  static constexpr std::chrono::microseconds kBusyPoll{250};
};

/// What checks moved, added up over calls (the communicator's bytesSent, bytesSentInterHost and
/// bytesReceived count these too: they are qccl's own messages, the small sums in them included).
struct CheckTraffic {
  uint64_t sent = 0;
  uint64_t messages = 0;       ///< messages sent
  uint64_t sentInterHost = 0;  ///< the part of `sent` that went to ranks on other hosts (hostOfRanks())
  uint64_t received = 0;
  /// The transport's hostOfRanks(), read by the first check that counts into this, not every call.
  std::vector<int> hostOf;
};

/// Runs the check on `t`: `words` (CallCheck::kWords) describe this rank's call. When `in` is not
/// null, `count` (<= CallCheck::kMaxFloats) floats of `in` are summed over all ranks into `out`
/// (may equal `in`), written only when every rank agreed. Returns -1 when every rank's words
/// agreed, else the index of a word on which two ranks differ (1, the count, where a message had
/// the wrong size). `scratch` holds the two message buffers between calls. When `traffic` is not
/// null, the bytes of every message sent and received are added to it as they go (a check that
/// fails has still sent them).
///
/// Waits go through waitUntil() with `w`. A peer's abort notice during the check (a peer that
/// found the disagreement first and gave up) does not end it at once: the exchange is given up to
/// a second to finish, so that every rank reports the disagreement itself; where the words agreed,
/// or the exchange does not finish, the abort (kRemoteError) is rethrown.
int checkCall(Transport& t, const WaitSpec& w, const int64_t* words, const float* in, float* out, size_t count,
              std::vector<float>& scratch, CheckTraffic* traffic = nullptr);

}  // namespace qccl
