// SequenceKeyer without MPI: which calls get which error-feedback key.
#include "sequence_keyer.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace qcclmpi {
namespace {

CallSig sig(size_t count, uintptr_t recv = 0x1000, uintptr_t send = 0) { return CallSig{count, recv, send}; }

struct Trace {
  std::vector<SequenceKeyer::Key> keys;
};

Trace run(SequenceKeyer& k, const std::vector<CallSig>& calls) {
  Trace t;
  for (const CallSig& c : calls) t.keys.push_back(k.next(c));
  return t;
}

std::vector<CallSig> repeat(const std::vector<CallSig>& step, int times) {
  std::vector<CallSig> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), step.begin(), step.end());
  return out;
}

TEST(SequenceKeyer, DistinctCallsAreKeyedFromTheSecondStepOn) {
  SequenceKeyer k;
  const std::vector<CallSig> step = {sig(100, 0x10), sig(200, 0x20), sig(300, 0x30)};
  Trace t = run(k, repeat(step, 4));
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(t.keys[i].keyed) << i;  // learning: one round and most of a second
  for (size_t i = 5; i < t.keys.size(); ++i) {
    ASSERT_TRUE(t.keys[i].keyed) << i;
    EXPECT_EQ(t.keys[i].position, i % 3) << i;
    EXPECT_FALSE(t.keys[i].broke);
  }
  EXPECT_EQ(k.period(), 3u);
  EXPECT_EQ(k.breaks(), 0u);
}

// A fusion buffer: one address, the same count, different tensors. Positions tell them apart.
TEST(SequenceKeyer, FusionBufferCallsGetOnePositionEach) {
  SequenceKeyer k;
  const std::vector<CallSig> step = {sig(4096), sig(4096), sig(4096), sig(1000)};
  Trace t = run(k, repeat(step, 6));
  // The first three calls look like a cycle of one until the fourth breaks it; from the break on
  // the true cycle is learned and every later call keyed by its own position.
  EXPECT_EQ(k.period(), 4u);
  EXPECT_EQ(k.breaks(), 1u);
  EXPECT_TRUE(t.keys[3].broke);
  for (size_t i = 11; i < t.keys.size(); ++i) {
    ASSERT_TRUE(t.keys[i].keyed) << i;
    // Position counts from the break (call 3): call i is at (i - 3) % 4.
    EXPECT_EQ(t.keys[i].position, (i - 3) % 4) << i;
  }
  // Steady state: the three 4096-float calls of a step never share a position.
  EXPECT_NE(t.keys[20].position, t.keys[21].position);
  EXPECT_NE(t.keys[21].position, t.keys[22].position);
  EXPECT_NE(t.keys[20].position, t.keys[22].position);
}

TEST(SequenceKeyer, ADifferentCallBreaksTheCycleAndDropsEveryKey) {
  SequenceKeyer k;
  const std::vector<CallSig> step = {sig(10, 0x10), sig(20, 0x20)};
  run(k, repeat(step, 3));
  ASSERT_EQ(k.period(), 2u);
  SequenceKeyer::Key broke = k.next(sig(10, 0x99));  // same count, another buffer: a caching allocator
  EXPECT_TRUE(broke.broke);
  EXPECT_FALSE(broke.keyed);
  EXPECT_EQ(k.period(), 0u);
  EXPECT_EQ(k.breaks(), 1u);
}

TEST(SequenceKeyer, AddressesThatNeverRepeatAreNeverKeyed) {
  SequenceKeyer k;
  for (uintptr_t i = 0; i < 1000; ++i) EXPECT_FALSE(k.next(sig(64, 0x1000 + 64 * (i * 7919 % 1000))).keyed);
}

TEST(SequenceKeyer, InPlaceAndOutOfPlaceAreDifferentCalls) {
  SequenceKeyer k;
  run(k, repeat({sig(10, 0x10, 0)}, 3));
  ASSERT_EQ(k.period(), 1u);
  EXPECT_TRUE(k.next(sig(10, 0x10, 0x20)).broke);
}

// One buffer, one count, k tensors per step and nothing else: no key that sees only the calls can
// tell the tensors apart; a pinned period can.
TEST(SequenceKeyer, PinnedPeriodSeparatesIdenticalCalls) {
  SequenceKeyer learned;
  Trace a = run(learned, repeat({sig(512), sig(512)}, 4));
  EXPECT_EQ(learned.period(), 1u);  // the documented limit
  SequenceKeyer::Options o;
  o.pinnedPeriod = 2;
  SequenceKeyer pinned(o);
  Trace b = run(pinned, repeat({sig(512), sig(512)}, 4));
  EXPECT_EQ(pinned.period(), 2u);
  EXPECT_FALSE(b.keys[1].keyed);
  for (size_t i = 2; i < b.keys.size(); ++i) {
    ASSERT_TRUE(b.keys[i].keyed);
    EXPECT_EQ(b.keys[i].position, i % 2);
  }
}

TEST(SequenceKeyer, PinnedPeriodStillValidatesEveryCall) {
  SequenceKeyer::Options o;
  o.pinnedPeriod = 2;
  SequenceKeyer k(o);
  run(k, repeat({sig(1), sig(2)}, 2));
  SequenceKeyer::Key key = k.next(sig(3));
  EXPECT_TRUE(key.broke);
  EXPECT_FALSE(key.keyed);
}

TEST(SequenceKeyer, CyclesLongerThanTheLimitAreNotKeyed) {
  SequenceKeyer::Options o;
  o.maxPeriod = 8;
  SequenceKeyer k(o);
  std::vector<CallSig> step;
  for (size_t i = 0; i < 9; ++i) step.push_back(sig(i + 1));
  Trace t = run(k, repeat(step, 5));
  for (const SequenceKeyer::Key& key : t.keys) EXPECT_FALSE(key.keyed);
}

TEST(SequenceKeyer, LearnsACycleWhoseStartRepeatsInside) {
  SequenceKeyer k;
  // a b a c: the first call comes back inside the step.
  const std::vector<CallSig> step = {sig(1), sig(2), sig(1), sig(3)};
  Trace t = run(k, repeat(step, 5));
  EXPECT_EQ(k.period(), 4u);
  EXPECT_EQ(k.breaks(), 0u);
  for (size_t i = 8; i < t.keys.size(); ++i) {
    ASSERT_TRUE(t.keys[i].keyed) << i;
    EXPECT_EQ(t.keys[i].position, i % 4);
  }
}

}  // namespace
}  // namespace qcclmpi
