#include "comm_context.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "interpose_config.hpp"
#include "qccl/qccl_mpi.h"
#include "report.hpp"

namespace qcclmpi {
namespace {

// Lock order: the registry mutex is never held across an MPI call that may run attribute
// callbacks (which take it themselves), and is taken before a context's mutex, never after.
struct Registry {
  std::mutex mu;        // guards `live` and `finalized`
  std::once_flag keys;  // creates the keyvals
  std::mutex create;    // serializes get-or-create of contexts; no callback takes it
  int commKey = MPI_KEYVAL_INVALID;
  int selfKey = MPI_KEYVAL_INVALID;
  bool finalized = false;
  std::vector<CommContext*> live;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: MPI may call the callbacks late in exit
  return *r;
}

// Frees c and its qccl communicator; c is no longer in the registry.
void retire(CommContext* c) {
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->qccl != nullptr) {
      // A failed communicator's peers may be gone or out of step: abort does not wait for them.
      if (c->failed) {
        qcclCommAbort(c->qccl);
      } else {
        qcclCommDestroy(c->qccl);
      }
      c->qccl = nullptr;
      counters().commsFreed++;
    }
  }
  delete c;
}

int deleteCommContext(MPI_Comm, int, void* attr, void*) {
  Registry& r = registry();
  auto* c = static_cast<CommContext*>(attr);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.finalized) return MPI_SUCCESS;  // the finalize hook has freed every context already
    auto it = std::find(r.live.begin(), r.live.end(), c);
    if (it != r.live.end()) r.live.erase(it);
  }
  retire(c);
  return MPI_SUCCESS;
}

// MPI_COMM_SELF's attributes are deleted first in MPI_Finalize, while MPI still works.
int atFinalize(MPI_Comm, int, void*, void*) {
  Registry& r = registry();
  std::vector<CommContext*> live;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    live.swap(r.live);
    r.finalized = true;
  }
  for (CommContext* c : live) retire(c);
  if (config().report) printReport();
  return MPI_SUCCESS;
}

// The keyval of the contexts and the MPI_Finalize hook on MPI_COMM_SELF, once.
void createKeys(Registry& r) {
  std::call_once(r.keys, [&r] {
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, atFinalize, &r.selfKey, nullptr) == MPI_SUCCESS)
      PMPI_Comm_set_attr(MPI_COMM_SELF, r.selfKey, nullptr);
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteCommContext, &r.commKey, nullptr) != MPI_SUCCESS)
      r.commKey = MPI_KEYVAL_INVALID;
  });
}

bool finalized(Registry& r) {
  std::lock_guard<std::mutex> lock(r.mu);
  return r.finalized;
}

// Settings that change what goes on the wire or which calls are compressed. Each word w is sent
// as w and -w under MPI_MIN, so one allreduce yields the minimum and the maximum of every word.
constexpr int kWords = 14;
void settingsWords(int64_t* w) {
  const InterposeConfig& cfg = config();
  const qcclConfig_t& q = cfg.qccl;
  const int64_t v[kWords] = {q.codec,
                             q.bits,
                             q.bucket,
                             q.stochastic,
                             static_cast<int64_t>(q.seed & 0xffffffffu),
                             static_cast<int64_t>(q.seed >> 32),
                             static_cast<int64_t>(std::min<size_t>(cfg.minCompressBytes, size_t{1} << 62)),
                             static_cast<int64_t>(std::min<size_t>(q.chunkBytes, size_t{1} << 62)),
                             q.pipelineDepth,
                             cfg.warmupCalls,
                             q.algo,
                             q.errorFeedback,
                             static_cast<int64_t>(cfg.pinnedPeriod),
                             cfg.check ? 1 : 0};
  for (int i = 0; i < kWords; ++i) {
    w[i] = v[i];
    w[kWords + i] = -v[i];
  }
}

int commRank(MPI_Comm comm) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  return rank;
}

// The two agreement steps of ensureReady. Each receives into its own frame and reads the result
// there: under MPI_THREAD_MULTIPLE another thread's MPI progress may complete the receive, ordered
// by libmpi's own atomics, which ThreadSanitizer does not see (tests/tsan-mpi-threads.supp names
// these frames, as it does the interposer's agree).
// 1 when every rank holds the same QCCL_* settings, 0 when they differ, -1 when MPI failed.
__attribute__((noinline)) int agreeOnSettings(MPI_Comm comm) {
  int64_t mine[2 * kWords], all[2 * kWords];
  settingsWords(mine);
  if (PMPI_Allreduce(mine, all, 2 * kWords, MPI_INT64_T, MPI_MIN, comm) != MPI_SUCCESS) return -1;
  return std::memcmp(mine, all, sizeof(mine)) == 0 ? 1 : 0;
}

// Whether every rank passed `ok` (false also when MPI failed).
__attribute__((noinline)) bool agreeAllOk(MPI_Comm comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  if (PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) return false;
  return all != 0;
}

}  // namespace

CommContext* contextFor(MPI_Comm comm) {
  Registry& r = registry();
  createKeys(r);
  if (r.commKey == MPI_KEYVAL_INVALID || finalized(r)) return nullptr;
  std::lock_guard<std::mutex> create(r.create);
  void* value = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, r.commKey, &value, &found) != MPI_SUCCESS) return nullptr;
  if (found) return static_cast<CommContext*>(value);
  SequenceKeyer::Options ko;
  ko.pinnedPeriod = config().pinnedPeriod;
  auto* c = new CommContext(ko);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.push_back(c);
  }
  if (PMPI_Comm_set_attr(comm, r.commKey, c) != MPI_SUCCESS) {
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.erase(std::find(r.live.begin(), r.live.end(), c));
    delete c;
    return nullptr;
  }
  return c;
}

bool ensureReady(CommContext& c, MPI_Comm comm) {
  if (c.state != CommContext::State::kNew) return c.state == CommContext::State::kReady;
  c.state = CommContext::State::kOff;
  const int same = agreeOnSettings(comm);
  if (same < 0) return false;
  // The result is the same on every rank, so every rank takes the same branch.
  if (same == 0) {
    if (commRank(comm) == 0)
      std::fprintf(stderr,
                   "qccl-mpi: the QCCL_* settings differ across the ranks of a communicator; its MPI_Allreduce "
                   "calls are passed through uncompressed\n");
    return false;
  }
  qcclResult_t rc = qcclCommInitMpi(&c.qccl, comm, &config().qccl);
  if (rc != qcclSuccess) {
    std::fprintf(stderr, "qccl-mpi: rank %d: qcclCommInitMpi failed: %s: %s\n", commRank(comm), qcclGetErrorString(rc),
                 qcclGetLastError(nullptr));
    c.qccl = nullptr;
  }
  const bool allOk = agreeAllOk(comm, c.qccl != nullptr);
  if (c.qccl != nullptr) counters().commsCreated++;
  if (!allOk) {
    if (c.qccl != nullptr) {
      qcclCommDestroy(c.qccl);
      c.qccl = nullptr;
      counters().commsFreed++;
    }
    return false;
  }
  c.state = CommContext::State::kReady;
  return true;
}

void dropErrorFeedback(CommContext& c) {
  if (c.qccl != nullptr)
    for (size_t p = 0; p < c.keyedPositions; ++p) qcclTensorRelease(c.qccl, static_cast<uint64_t>(p) + 1);
  c.keyedPositions = 0;
}

void ensureFinalizeHook() { createKeys(registry()); }

}  // namespace qcclmpi
