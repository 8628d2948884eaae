// ShmGroup: an uncompressed allreduce through one shared-memory segment, for a communicator whose
// ranks all live on one host, and the cross-rank check of `auto` calls in the same segment.
//
// Why: on one host the uncompressed path of `auto` used to be the MPI library's MPI_Iallreduce (or,
// over UCX, qccl's ring of messages). Both move every byte through the transport, which copies it
// twice per hop (into a FIFO or the kernel, out again), and the MPI path also paid a second small
// collective for the check. Here each rank copies its input into the segment once, sums one shard
// of every rank's copy, and copies the summed shards out: about 4.5 passes over the tensor per rank
// (bench/RESULTS.md, "One host: the shared-memory sum", has the numbers).
//
// Segment: a header (barrier words, the ranks' pids), per rank two descriptor slots with room for a
// small input, and per rank two data slots of `slotFloats`. Writes of phase e go to slot e % 2: a
// rank writes phase e only after the barrier of phase e - 1, which every rank reaches only after it
// read phase e - 2, so no slot is overwritten while it is read (double buffering, no second barrier).
//
// One call:
//   - count <= kSmallFloats: every rank writes its descriptor and input, one barrier, every rank
//     compares the descriptors and sums the inputs itself in rank order (the same bits everywhere);
//   - larger: per chunk of up to slotFloats elements, every rank copies the shards other ranks sum
//     into its slot, barrier (the first one also checks the descriptors), rank r sums shard r in
//     rank order from the slots and its own input and writes it to its slot and its output, barrier,
//     every rank copies the other shards out. Each element is summed by one rank: bit-identical.
//   - check only (a call that runs another path): descriptor, one barrier, compare.
//   - reduce-scatter: per step a window of every shard, each rank copying in the windows of the
//     shards other ranks own, one barrier, each rank sums its own window in rank order; allgather:
//     per step a window of every rank's block copied in, one barrier, copied out by every rank.
//     One barrier a step is enough: a rank reads the step's slots before it arrives at the next
//     barrier, and nobody writes them again before that one.
// Waits spin briefly where the host has a core per rank, then yield the core a few times, then
// sleep on a futex; while asleep they wake every millisecond to run the caller's poll (aborts,
// deadline) and every 50 ms check that every peer process still exists, so a dead peer is an
// error, not a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "transport/transport.hpp"

namespace qccl {

struct ShmPeer;

class ShmGroup {
 public:
  /// Words of a call's descriptor (the cross-rank check of communicator.cc).
  static constexpr int kDescWords = 8;
  /// Calls of at most this many floats take the one-barrier path.
  static constexpr size_t kSmallFloats = 4096;
  /// Ranks one segment serves at most.
  static constexpr int kMaxRanks = 4096;

  /// Rank 0 (of the group): creates a segment under a fresh name for `nranks` ranks with data slots
  /// of `slotFloats` (rounded to 16), reserving its memory (posix_fallocate: a full /dev/shm is an
  /// error here, never a SIGBUS later). Throws Error(kSystemError) saying what failed.
  static std::unique_ptr<ShmGroup> create(int nranks, size_t slotFloats);
  /// Every other rank: maps the segment `name` as rank `rank`. Throws Error(kSystemError) when it
  /// cannot, or when the segment is not one of ours for `nranks` ranks.
  static std::unique_ptr<ShmGroup> open(const std::string& name, int nranks, int rank);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  const std::string& name() const { return name_; }
  /// Removes the name (rank 0, once every rank has mapped it): the memory lives as long as a rank
  /// maps it, and nothing is left in /dev/shm after a crash. The creator's destructor removes it
  /// too if nobody did (a set-up that failed half-way).
  void unlink() noexcept;
  /// Bytes mapped.
  size_t bytes() const { return bytes_; }
  int rank() const { return rank_; }
  int size() const { return nranks_; }

  /// Called while a wait sleeps (about every millisecond): throws to end the wait.
  using Poll = std::function<void()>;
  /// Where waits add their seconds (may be null): all of it, and the part asleep.
  using Times = WaitTimes;

  /// The check alone: publishes `desc`, waits for every rank, and returns the lowest rank whose
  /// descriptor differs from this rank's in some word, or -1 (then *word is untouched), with the
  /// first differing word in *word. Every rank sees the same descriptors.
  int check(const int64_t* desc, int* word, const Poll& poll, Times* t);
  /// The sum over ranks of `in` into `out` (in place when equal), `count` floats, with the check
  /// of `desc` on the way (as check()). Returns check()'s answer; on a mismatch `out` is untouched.
  int allreduceSum(const int64_t* desc, const float* in, float* out, size_t count, int* word, const Poll& poll,
                   Times* t);

  /// Reduce-scatter in NCCL's layout: out[i] = sum over ranks q, in rank order, of q's
  /// in[rank * recvCount + i]; `in` holds size() * recvCount floats (in place when out == in +
  /// rank * recvCount). With the check of `desc`, as allreduceSum.
  int reduceScatterSum(const int64_t* desc, const float* in, float* out, size_t recvCount, int* word, const Poll& poll,
                       Times* t);
  /// Allgather: out[q * count + i] = rank q's in[i] (in place when in == out + rank * count). With
  /// the check of `desc`, as allreduceSum.
  int allgather(const int64_t* desc, const float* in, float* out, size_t count, int* word, const Poll& poll, Times* t);

  /// Marks the segment failed by this rank and wakes every waiter (they throw kRemoteError).
  void poison() noexcept;

  struct Header;  ///< the segment's first bytes (shm_group.cc)

 private:
  ShmGroup() = default;
  ShmPeer& peer(int rank) const;
  void throwIfPoisoned() const;
  void map(int fd, size_t bytes);
  void barrier(const Poll& poll, Times* t);
  /// Starts this rank's next phase: its slot parity, with `desc` (the call's first phase, else
  /// null) written to its descriptor slot.
  int beginPhase(const int64_t* desc);
  /// Ends this rank's writes of a phase: waits for every rank, then compares the descriptors when
  /// `desc` is not null (compare()'s answer), else -1.
  int arrive(const int64_t* desc, int* word, const Poll& poll, Times* t);
  float* slot(int phase, int rank, bool small) const;
  void checkPeers();
  int compare(const int64_t* desc, int* word) const;
  int64_t* descSlot(int phase, int rank) const;
  float* smallSlot(int phase, int rank) const;
  float* dataSlot(int phase, int rank) const;

  std::string name_;
  Header* hdr_ = nullptr;
  unsigned char* base_ = nullptr;
  size_t bytes_ = 0;
  int nranks_ = 0;
  int rank_ = 0;
  size_t slotFloats_ = 0;
  bool owner_ = false;
  bool spin_ = false;
  uint64_t phase_ = 0;  // phases this rank published (the slot of the next is phase_ % 2)
};

}  // namespace qccl
