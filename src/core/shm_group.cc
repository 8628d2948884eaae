// ShmGroup (shm_group.hpp): the segment, its futex barrier and the sums.
#include "core/shm_group.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

#include "qccl/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qccl {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x316d68736c636371ull;  // "qcclshm1"
constexpr uint32_t kVersion = 1;
constexpr size_t kAlign = 64;
constexpr size_t kDescBytes = kAlign;  // ShmGroup::kDescWords int64
static_assert(ShmGroup::kDescWords * sizeof(int64_t) <= kDescBytes, "descriptor slot");
constexpr auto kSpinFor = std::chrono::microseconds(20);
constexpr int kYields = 16;
constexpr auto kPeerCheckEvery = std::chrono::milliseconds(50);
constexpr long kSleepNs = 1000000;  // one futex sleep: 1 ms

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

long futexWait(std::atomic<uint32_t>* addr, uint32_t expected, long ns) {
  timespec ts{0, ns};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint64_t pidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Cores this process may run on: spinning pays only when every rank of the host has one.
int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// A process that exited but was not reaped yet still answers kill(pid, 0).
bool isZombie(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the command name may hold anything but ends here
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

[[noreturn]] void throwErrno(const std::string& what, int err) {
  QCCL_THROW(ErrorCode::kSystemError, "shared memory: " + what + ": " + std::strerror(err));
}

// out1[i] (and out2[i] when not null) = src[0][i] + src[1][i] + ... in rank order, blockwise
// through a buffer so that `out1` may alias a source (in place).
void sumRanks(const float* const* src, int n, float* out1, float* out2, size_t len) {
  constexpr size_t kBlock = 1024;
  alignas(kAlign) float acc[kBlock];
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t m = std::min(kBlock, len - b);
    const float* __restrict s0 = src[0] + b;
    if (n == 1) {
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i];
    } else {
      const float* __restrict s1 = src[1] + b;
      for (size_t i = 0; i < m; ++i) acc[i] = s0[i] + s1[i];
    }
    for (int q = 2; q < n; ++q) {
      const float* __restrict sq = src[q] + b;
      for (size_t i = 0; i < m; ++i) acc[i] += sq[i];
    }
    std::memcpy(out1 + b, acc, m * sizeof(float));
    if (out2 != nullptr) std::memcpy(out2 + b, acc, m * sizeof(float));
  }
}

}  // namespace

struct ShmGroup::Header {
  std::atomic<uint64_t> magic;  // stored last (release) by the creator; read first (acquire)
  uint32_t version;
  uint32_t nranks;
  uint64_t slotFloats;
  uint64_t bytes;
  alignas(kAlign) std::atomic<uint32_t> arrived;
  alignas(kAlign) std::atomic<uint32_t> generation;  // the futex word
  std::atomic<uint32_t> sleepers;
  alignas(kAlign) std::atomic<int32_t> poisoned;  // 1 + the first rank that failed, 0 while none did
};

// One per rank, after the header.
struct alignas(kAlign) ShmPeer {
  std::atomic<int32_t> pid;
  uint64_t pidns;
};

namespace {
size_t headerBytes(int nranks) {
  return roundUp(sizeof(ShmGroup::Header), kAlign) + sizeof(ShmPeer) * static_cast<size_t>(nranks);
}
size_t descSlotBytes() { return kDescBytes + ShmGroup::kSmallFloats * sizeof(float); }
size_t segmentBytes(int nranks, size_t slotFloats) {
  const size_t n = static_cast<size_t>(nranks);
  return headerBytes(nranks) + 2 * n * descSlotBytes() + 2 * n * slotFloats * sizeof(float);
}
}  // namespace

ShmPeer& ShmGroup::peer(int rank) const {
  return reinterpret_cast<ShmPeer*>(base_ + roundUp(sizeof(Header), kAlign))[rank];
}

int64_t* ShmGroup::descSlot(int phase, int rank) const {
  return reinterpret_cast<int64_t*>(base_ + headerBytes(nranks_) +
                                    (static_cast<size_t>(phase) * nranks_ + rank) * descSlotBytes());
}

float* ShmGroup::smallSlot(int phase, int rank) const {
  return reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(descSlot(phase, rank)) + kDescBytes);
}

float* ShmGroup::dataSlot(int phase, int rank) const {
  const size_t n = static_cast<size_t>(nranks_);
  return reinterpret_cast<float*>(base_ + headerBytes(nranks_) + 2 * n * descSlotBytes()) +
         (static_cast<size_t>(phase) * n + rank) * slotFloats_;
}

void ShmGroup::map(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throwErrno("mmap of " + std::to_string(bytes) + " bytes", err);
  base_ = static_cast<unsigned char*>(p);
  hdr_ = reinterpret_cast<Header*>(base_);
  bytes_ = bytes;
  spin_ = usableCores() >= nranks_;
}

std::unique_ptr<ShmGroup> ShmGroup::create(int nranks, size_t slotFloats) {
  QCCL_CHECK(nranks >= 1 && nranks <= kMaxRanks, ErrorCode::kInvalidArgument, "shared memory: bad rank count");
  slotFloats = roundUp(std::max<size_t>(slotFloats, 16), 16);
  const size_t bytes = segmentBytes(nranks, slotFloats);
  std::random_device rd;
  char name[64];
  std::snprintf(name, sizeof name, "/qccl-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throwErrno(std::string("shm_open ") + name, errno);
  std::unique_ptr<ShmGroup> g(new ShmGroup);
  g->name_ = name;
  g->owner_ = true;
  g->nranks_ = nranks;
  g->rank_ = 0;
  g->slotFloats_ = slotFloats;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    g->unlink();
    throwErrno("ftruncate to " + std::to_string(bytes) + " bytes", err);
  }
  // Reserve the pages now: on a small /dev/shm this fails here instead of a SIGBUS on first touch.
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    ::close(fd);
    g->unlink();
    throwErrno("reserving " + std::to_string(bytes) + " bytes in /dev/shm", err);
  }
  try {
    g->map(fd, bytes);
  } catch (...) {
    g->unlink();
    throw;
  }
  Header* h = new (g->base_) Header;
  h->version = kVersion;
  h->nranks = static_cast<uint32_t>(nranks);
  h->slotFloats = slotFloats;
  h->bytes = bytes;
  h->arrived.store(0);
  h->generation.store(0);
  h->sleepers.store(0);
  h->poisoned.store(0);
  for (int r = 0; r < nranks; ++r) {
    ShmPeer* p = new (&g->peer(r)) ShmPeer;
    p->pid.store(0);
    p->pidns = 0;
  }
  g->peer(0).pidns = pidNamespace();
  g->peer(0).pid.store(static_cast<int32_t>(getpid()));
  h->magic.store(kMagic, std::memory_order_release);
  return g;
}

std::unique_ptr<ShmGroup> ShmGroup::open(const std::string& name, int nranks, int rank) {
  QCCL_CHECK(nranks >= 1 && rank >= 1 && rank < nranks, ErrorCode::kInvalidArgument, "shared memory: bad rank");
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throwErrno("shm_open " + name, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throwErrno("fstat " + name, err);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < headerBytes(nranks)) {
    ::close(fd);
    QCCL_THROW(ErrorCode::kSystemError, "shared memory: segment " + name + " is too small to be qccl's");
  }
  std::unique_ptr<ShmGroup> g(new ShmGroup);
  g->name_ = name;
  g->nranks_ = nranks;
  g->rank_ = rank;
  g->map(fd, bytes);
  Header* h = g->hdr_;
  QCCL_CHECK(h->magic.load(std::memory_order_acquire) == kMagic && h->version == kVersion &&
                 h->nranks == static_cast<uint32_t>(nranks) && h->bytes == bytes && h->slotFloats >= 16 &&
                 segmentBytes(nranks, h->slotFloats) == bytes,
             ErrorCode::kSystemError,
             "shared memory: segment " + name + " is not qccl's for " + std::to_string(nranks) + " ranks");
  g->slotFloats_ = h->slotFloats;
  g->peer(rank).pidns = pidNamespace();
  g->peer(rank).pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
  return g;
}

ShmGroup::~ShmGroup() {
  unlink();  // the creator's name, if a failure left it (unlink() is a no-op once it ran)
  if (base_ != nullptr) munmap(base_, bytes_);
}

void ShmGroup::unlink() noexcept {
  if (owner_ && !name_.empty()) shm_unlink(name_.c_str());
  owner_ = false;
}

void ShmGroup::poison() noexcept {
  if (hdr_ == nullptr) return;
  int32_t none = 0;
  hdr_->poisoned.compare_exchange_strong(none, rank_ + 1);
  futexWakeAll(&hdr_->generation);  // sleepers wake and look; the generation itself stays
}

void ShmGroup::checkPeers() {
  const uint64_t ns = peer(rank_).pidns;
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    const int32_t pid = peer(q).pid.load(std::memory_order_acquire);
    if (pid <= 0 || ns == 0 || peer(q).pidns != ns) continue;  // not ours to judge
    if ((::kill(pid, 0) != 0 && errno == ESRCH) || isZombie(pid)) {
      QCCL_THROW(ErrorCode::kRemoteError, "shared memory: rank " + std::to_string(q) + " (pid " + std::to_string(pid) +
                                              ") exited during a collective");
    }
  }
}

void ShmGroup::throwIfPoisoned() const {
  const int32_t p = hdr_->poisoned.load(std::memory_order_acquire);
  if (p != 0) {
    QCCL_THROW(ErrorCode::kRemoteError, "shared memory: rank " + std::to_string(p - 1) + " failed during a collective");
  }
}

void ShmGroup::barrier(const Poll& poll, Times* t) {
  Header& h = *hdr_;
  const uint32_t g = h.generation.load(std::memory_order_acquire);
  throwIfPoisoned();
  // A barrier that completed is never reported as a failure, even when a rank that left it first
  // has failed since (say on the disagreement every rank is about to find): the generation moves
  // only when every rank has arrived, and the poison word is looked at only while it has not.
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(nranks_)) {
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.store(g + 1, std::memory_order_seq_cst);
    if (h.sleepers.load(std::memory_order_seq_cst) != 0) futexWakeAll(&h.generation);
    return;
  }
  const SteadyClock::time_point start = SteadyClock::now();
  struct Account {
    Times* t;
    SteadyClock::time_point start;
    double idle = 0;
    ~Account() {
      if (t == nullptr) return;
      t->wait += std::chrono::duration<double>(SteadyClock::now() - start).count();
      t->idle += idle;
    }
  } account{t, start};
  if (spin_) {
    for (int i = 0;; ++i) {
      if (h.generation.load(std::memory_order_acquire) != g) return;
      cpuRelax();
      if ((i & 63) == 63 && SteadyClock::now() - start > kSpinFor) break;
    }
  }
  // Then give the core away a few times before sleeping: where ranks share cores, the rank that
  // has yet to arrive is often the one waiting for this core (4 local ranks on 2 cores: 5 us per
  // small call with the yields, 17 us going to sleep at once; bench/RESULTS.md).
  for (int i = 0; i < kYields; ++i) {
    sched_yield();
    if (h.generation.load(std::memory_order_acquire) != g) return;
  }
  SteadyClock::time_point lastPeerCheck = start;
  for (;;) {
    const SteadyClock::time_point s0 = SteadyClock::now();
    h.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (h.generation.load(std::memory_order_seq_cst) == g) futexWait(&h.generation, g, kSleepNs);
    h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    const SteadyClock::time_point s1 = SteadyClock::now();
    account.idle += std::chrono::duration<double>(s1 - s0).count();
    if (h.generation.load(std::memory_order_acquire) != g) return;
    throwIfPoisoned();
    if (poll) poll();
    if (s1 - lastPeerCheck >= kPeerCheckEvery) {
      checkPeers();
      lastPeerCheck = s1;
    }
  }
}

int ShmGroup::compare(const int64_t* desc, int* word) const {
  const int b = static_cast<int>((phase_ - 1) % 2);
  for (int q = 0; q < nranks_; ++q) {
    const int64_t* d = descSlot(b, q);
    for (int i = 0; i < kDescWords; ++i) {
      if (d[i] != desc[i]) {
        if (word != nullptr) *word = i;
        return q;
      }
    }
  }
  return -1;
}

int ShmGroup::beginPhase(const int64_t* desc) {
  const int b = static_cast<int>(phase_++ % 2);
  if (desc != nullptr) std::memcpy(descSlot(b, rank_), desc, kDescWords * sizeof(int64_t));
  return b;
}

int ShmGroup::arrive(const int64_t* desc, int* word, const Poll& poll, Times* t) {
  barrier(poll, t);
  return desc != nullptr ? compare(desc, word) : -1;
}

float* ShmGroup::slot(int phase, int rank, bool small) const {
  return small ? smallSlot(phase, rank) : dataSlot(phase, rank);
}

int ShmGroup::check(const int64_t* desc, int* word, const Poll& poll, Times* t) {
  beginPhase(desc);
  return arrive(desc, word, poll, t);
}

int ShmGroup::allreduceSum(const int64_t* desc, const float* in, float* out, size_t count, int* word, const Poll& poll,
                           Times* t) {
  const float* src[kMaxRanks];
  const int n = nranks_;
  if (count <= kSmallFloats) {
    const int b = beginPhase(desc);
    if (count > 0) std::memcpy(smallSlot(b, rank_), in, count * sizeof(float));
    const int bad = arrive(desc, word, poll, t);
    if (bad >= 0 || count == 0) return bad;
    for (int q = 0; q < n; ++q) src[q] = smallSlot(b, q);
    sumRanks(src, n, out, nullptr, count);
    return -1;
  }
  for (size_t done = 0; done < count;) {
    const size_t len = std::min(slotFloats_, count - done);
    const size_t per = roundUp((len + static_cast<size_t>(n) - 1) / static_cast<size_t>(n), 16);
    const size_t mb = std::min(per * static_cast<size_t>(rank_), len), me = std::min(mb + per, len);
    const int64_t* first = done == 0 ? desc : nullptr;  // the call's first phase carries the check
    const int b = beginPhase(first);
    float* mine = dataSlot(b, rank_);
    // What the other ranks sum: everything but this rank's own shard, which it reads from `in`.
    std::memcpy(mine, in + done, mb * sizeof(float));
    std::memcpy(mine + me, in + done + me, (len - me) * sizeof(float));
    if (const int bad = arrive(first, word, poll, t); bad >= 0) return bad;
    for (int q = 0; q < n; ++q) src[q] = (q == rank_ ? in + done : dataSlot(b, q)) + mb;
    sumRanks(src, n, out + done + mb, mine + mb, me - mb);
    barrier(poll, t);
    for (int q = 0; q < n; ++q) {
      if (q == rank_) continue;
      const size_t qb = std::min(per * static_cast<size_t>(q), len), qe = std::min(qb + per, len);
      std::memcpy(out + done + qb, dataSlot(b, q) + qb, (qe - qb) * sizeof(float));
    }
    done += len;
  }
  return -1;
}

int ShmGroup::reduceScatterSum(const int64_t* desc, const float* in, float* out, size_t recvCount, int* word,
                               const Poll& poll, Times* t) {
  const float* src[kMaxRanks];
  const size_t n = static_cast<size_t>(nranks_), me = static_cast<size_t>(rank_);
  const bool small = recvCount * n <= kSmallFloats;
  const size_t window = small ? std::max<size_t>(recvCount, 1) : std::max<size_t>(slotFloats_ / n, 1);
  for (size_t o = 0; o == 0 || o < recvCount; o += window) {
    const size_t w = std::min(window, recvCount - o);
    const int64_t* first = o == 0 ? desc : nullptr;  // the call's first phase carries the check
    const int b = beginPhase(first);
    float* mine = slot(b, rank_, small);
    for (size_t s = 0; s < n && w > 0; ++s)  // w is 0 only for an empty call (null buffers allowed)
      if (s != me) std::memcpy(mine + s * w, in + s * recvCount + o, w * sizeof(float));
    if (const int bad = arrive(first, word, poll, t); bad >= 0) return bad;
    if (w == 0) break;
    for (size_t q = 0; q < n; ++q)
      src[q] = q == me ? in + me * recvCount + o : slot(b, static_cast<int>(q), small) + me * w;
    sumRanks(src, nranks_, out + o, nullptr, w);
  }
  return -1;
}

int ShmGroup::allgather(const int64_t* desc, const float* in, float* out, size_t count, int* word, const Poll& poll,
                        Times* t) {
  const size_t n = static_cast<size_t>(nranks_), me = static_cast<size_t>(rank_);
  const bool small = count <= kSmallFloats;
  const size_t window = small ? std::max<size_t>(count, 1) : slotFloats_;
  for (size_t o = 0; o == 0 || o < count; o += window) {
    const size_t w = std::min(window, count - o);
    const int64_t* first = o == 0 ? desc : nullptr;  // the call's first phase carries the check
    const int b = beginPhase(first);
    if (w > 0) std::memcpy(slot(b, rank_, small), in + o, w * sizeof(float));  // 0: an empty call (null buffers)
    if (const int bad = arrive(first, word, poll, t); bad >= 0) return bad;
    if (w == 0) break;
    for (size_t q = 0; q < n; ++q)
      if (q != me) std::memcpy(out + q * count + o, slot(b, static_cast<int>(q), small), w * sizeof(float));
    if (out + me * count != in) std::memmove(out + me * count + o, in + o, w * sizeof(float));
  }
  return -1;
}

}  // namespace qccl
