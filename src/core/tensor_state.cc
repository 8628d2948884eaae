#include "core/tensor_state.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace {

// save()'s record: this header, then the worker and the owner residual as little-endian floats.
// Version 2 appends where the owner residual starts in the tensor; version 1 records still load.
constexpr uint32_t kRecordMagic = 0x53544351u;  // "QCTS"
constexpr uint32_t kRecordVersion = 2;
struct RecordHeaderV1 {
  uint32_t magic;
  uint32_t version;
  uint64_t count;
  uint64_t workerElems;  // 0 or count
  uint64_t ownerElems;
  uint64_t calls;
  uint32_t nranks;
  uint32_t rank;
};
static_assert(sizeof(RecordHeaderV1) == 48, "record header layout");
struct RecordHeader : RecordHeaderV1 {
  uint64_t ownerBegin;
};
static_assert(sizeof(RecordHeader) == 56, "record header layout");

size_t arrayBytes(const std::unique_ptr<FloatArray>& a) { return a ? a->size() * sizeof(float) : 0; }

}  // namespace

size_t TensorState::bytes() const {
  return TensorStateStore::kBookkeepingBytes + arrayBytes(worker) + arrayBytes(owner);
}

TensorStateStore::TensorStateStore(size_t maxBytes) : maxBytes_(maxBytes) {}

void TensorStateStore::account(long long delta) {
  stats_.bytes = static_cast<uint64_t>(static_cast<long long>(stats_.bytes) + delta);
  if (stats_.bytes > stats_.peakBytes) stats_.peakBytes = stats_.bytes;
}

TensorState& TensorStateStore::acquire(uint64_t id, size_t count, MemorySpace& space) {
  QCCL_CHECK(id != 0, ErrorCode::kInternalError, "tensor state: id 0 has no state");
  auto it = states_.find(id);
  if (it != states_.end() && (it->second.count != count || it->second.device != space.isDevice())) {
    account(-static_cast<long long>(it->second.bytes()));
    states_.erase(it);
    it = states_.end();
    ++stats_.replacements;
  }
  if (it == states_.end()) {
    makeRoom(kBookkeepingBytes, nullptr);
    it = states_.emplace(id, TensorState{}).first;
    it->second.id = id;
    it->second.count = count;
    it->second.device = space.isDevice();
    account(static_cast<long long>(it->second.bytes()));
  }
  it->second.lastUse = ++tick_;
  stats_.tensors = states_.size();
  return it->second;
}

float* TensorStateStore::worker(TensorState& st, MemorySpace& space) {
  if (!st.worker) {
    makeRoom(st.count * sizeof(float), &st);
    st.worker = space.newArray(st.count);
    account(static_cast<long long>(arrayBytes(st.worker)));
  }
  return st.worker->data();
}

float* TensorStateStore::owner(TensorState& st, size_t n, uint64_t begin, MemorySpace& space) {
  if (st.owner && st.owner->size() == n && st.ownerBegin == TensorState::kAnyBegin) st.ownerBegin = begin;
  if (!st.owner || st.owner->size() != n || st.ownerBegin != begin) {
    account(-static_cast<long long>(arrayBytes(st.owner)));
    st.owner.reset();
    makeRoom(n * sizeof(float), &st);
    st.owner = space.newArray(n);
    st.ownerBegin = begin;
    account(static_cast<long long>(arrayBytes(st.owner)));
  }
  return st.owner->data();
}

void TensorStateStore::finish(TensorState& st) { ++st.calls; }

// Evicts least recently used states (never `keep`) until `more` bytes fit under the cap, before
// they are allocated, so that the memory held never exceeds the cap (unless one state alone does).
void TensorStateStore::makeRoom(size_t more, const TensorState* keep) {
  if (maxBytes_ == 0 || stats_.bytes + more <= maxBytes_) return;
  if (!warned_) {
    warned_ = true;
    std::fprintf(stderr,
                 "qccl: per-tensor state (%llu bytes) exceeds QCCL_MAX_RESIDUAL_BYTES=%llu: evicting the least "
                 "recently used tensors; their error feedback restarts from zero (warned once; see the "
                 "communicator's stats for the count)\n",
                 static_cast<unsigned long long>(stats_.bytes), static_cast<unsigned long long>(maxBytes_));
  }
  while (stats_.bytes + more > maxBytes_) {
    auto victim = states_.end();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if (&it->second == keep) continue;
      if (victim == states_.end() || it->second.lastUse < victim->second.lastUse) victim = it;
    }
    if (victim == states_.end()) break;  // only the state in use is left: it stays
    account(-static_cast<long long>(victim->second.bytes()));
    states_.erase(victim);
    ++stats_.evictions;
  }
  stats_.tensors = states_.size();
}

bool TensorStateStore::release(uint64_t id) {
  auto it = states_.find(id);
  if (it == states_.end()) return false;
  account(-static_cast<long long>(it->second.bytes()));
  states_.erase(it);
  stats_.tensors = states_.size();
  return true;
}

void TensorStateStore::releaseAll() {
  states_.clear();
  gains_.clear();
  stats_.bytes = 0;
  stats_.tensors = 0;
}

std::vector<uint8_t> TensorStateStore::save(uint64_t id, int nranks, int rank) const {
  auto it = states_.find(id);
  if (it == states_.end()) return {};
  const TensorState& st = it->second;
  RecordHeader h{};
  h.magic = kRecordMagic;
  h.version = kRecordVersion;
  h.count = st.count;
  h.workerElems = st.worker ? st.worker->size() : 0;
  h.ownerElems = st.owner ? st.owner->size() : 0;
  h.calls = st.calls;
  h.nranks = static_cast<uint32_t>(nranks);
  h.rank = static_cast<uint32_t>(rank);
  h.ownerBegin = st.owner ? st.ownerBegin : 0;
  std::vector<uint8_t> out(sizeof h + (h.workerElems + h.ownerElems) * sizeof(float));
  std::memcpy(out.data(), &h, sizeof h);
  float* p = reinterpret_cast<float*>(out.data() + sizeof h);  // out's storage is malloc-aligned
  if (st.worker) st.worker->toHost(p);
  if (st.owner) st.owner->toHost(p + h.workerElems);
  return out;
}

void TensorStateStore::load(uint64_t id, const void* data, size_t bytes, MemorySpace& space, int nranks, int rank) {
  QCCL_CHECK(id != 0, ErrorCode::kInvalidArgument, "tensor state: id 0 has no state to load");
  QCCL_CHECK(data != nullptr || bytes == 0, ErrorCode::kInvalidArgument, "tensor state: null record");
  RecordHeader h{};
  QCCL_CHECK(bytes >= sizeof(RecordHeaderV1), ErrorCode::kMalformed,
             "tensor state record: " + std::to_string(bytes) + " bytes, shorter than its header");
  std::memcpy(&h, data, sizeof(RecordHeaderV1));
  QCCL_CHECK(h.magic == kRecordMagic, ErrorCode::kMalformed, "tensor state record: bad magic");
  QCCL_CHECK(h.version == 1 || h.version == kRecordVersion, ErrorCode::kMalformed,
             "tensor state record: unsupported version " + std::to_string(h.version));
  const size_t headerBytes = h.version == 1 ? sizeof(RecordHeaderV1) : sizeof(RecordHeader);
  QCCL_CHECK(bytes >= headerBytes, ErrorCode::kMalformed,
             "tensor state record: " + std::to_string(bytes) + " bytes, shorter than its header");
  if (h.version == 1) {
    h.ownerBegin = TensorState::kAnyBegin;  // not recorded: the first schedule that runs adopts it
  } else {
    std::memcpy(&h.ownerBegin, static_cast<const uint8_t*>(data) + sizeof(RecordHeaderV1), sizeof h.ownerBegin);
    QCCL_CHECK(h.ownerElems == 0 || (h.ownerBegin <= h.count && h.ownerElems <= h.count - h.ownerBegin),
               ErrorCode::kMalformed, "tensor state record: owner residual outside the tensor");
  }
  QCCL_CHECK(h.workerElems == 0 || h.workerElems == h.count, ErrorCode::kMalformed,
             "tensor state record: worker residual does not cover the tensor");
  QCCL_CHECK(h.ownerElems <= h.count, ErrorCode::kMalformed, "tensor state record: owner residual too large");
  const uint64_t elems = h.workerElems + h.ownerElems;
  QCCL_CHECK(h.count <= (uint64_t{1} << 40) && (bytes - headerBytes) / sizeof(float) == elems &&
                 (bytes - headerBytes) % sizeof(float) == 0,
             ErrorCode::kMalformed, "tensor state record: size does not match its header");
  QCCL_CHECK(h.nranks == static_cast<uint32_t>(nranks) && h.rank == static_cast<uint32_t>(rank),
             ErrorCode::kInvalidArgument,
             "tensor state record: saved by rank " + std::to_string(h.rank) + " of " + std::to_string(h.nranks) +
                 ", loaded by rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  std::vector<float> host(elems);
  if (elems > 0) std::memcpy(host.data(), static_cast<const uint8_t*>(data) + headerBytes, elems * sizeof(float));
  for (float v : host) QCCL_CHECK(std::isfinite(v), ErrorCode::kMalformed, "tensor state record: non-finite residual");

  release(id);
  TensorState& st = acquire(id, static_cast<size_t>(h.count), space);
  if (h.workerElems > 0) {
    worker(st, space);
    st.worker->fromHost(host.data());
  }
  if (h.ownerElems > 0) {
    owner(st, static_cast<size_t>(h.ownerElems), h.ownerBegin, space);
    st.owner->fromHost(host.data() + h.workerElems);
  }
  st.calls = h.calls;
}

bool TensorStateStore::scale(uint64_t id, float factor) {
  QCCL_CHECK(std::isfinite(factor), ErrorCode::kInvalidArgument, "tensor state: scale factor must be finite");
  auto it = states_.find(id);
  if (it == states_.end()) return false;
  if (it->second.worker) it->second.worker->scale(factor);
  if (it->second.owner) it->second.owner->scale(factor);
  return true;
}

void TensorStateStore::setGain(uint64_t id, float gain) {
  QCCL_CHECK(gain > 0.0f && gain <= 1.0f, ErrorCode::kInvalidArgument, "tensor state: feedback gain must be in (0, 1]");
  QCCL_CHECK(id != 0, ErrorCode::kInvalidArgument, "tensor state: id 0 keeps no state, so it takes no feedback gain");
  if (gain == 1.0f)
    gains_.erase(id);
  else
    gains_[id] = gain;
}

float TensorStateStore::gain(uint64_t id) const {
  auto it = gains_.find(id);
  return it == gains_.end() ? 1.0f : it->second;
}

TensorStateStats TensorStateStore::stats() const { return stats_; }

}  // namespace qccl
