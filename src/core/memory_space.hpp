// Where a call's buffers live. The communicator runs one code path for host and device buffers:
// everything that touches element data outside the executor (dtype conversions, copies, the
// average, residual arrays, scratch) goes through a MemorySpace. Host memory has one
// implementation (hostSpace()); device memory another (device_path.hpp), created on first use.
#pragma once

#include <cstddef>
#include <memory>

#include "core/executor.hpp"
#include "core/options.hpp"

namespace qccl {

/// A zero-initialized fp32 array owned by a memory space (residuals).
class FloatArray {
 public:
  virtual ~FloatArray() = default;
  virtual float* data() = 0;
  virtual size_t size() const = 0;
  /// Copies all elements to / from host memory (checkpoints); ordered after earlier calls.
  virtual void toHost(float* out) const = 0;
  virtual void fromHost(const float* in) = 0;
  /// Multiplies every element by `factor`.
  virtual void scale(float factor) = 0;
};

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual bool isDevice() const = 0;

  /// Brackets one call on buffers at `ptr`: the device space selects the pointer's device and
  /// orders its own stream after the caller's `stream` (a cudaStream_t); end() orders the
  /// caller's stream after qccl's work and restores the caller's device. No-ops on the host.
  virtual void begin(const void* /*ptr*/, void* /*stream*/) {}
  virtual void end() noexcept {}

  virtual std::unique_ptr<FloatArray> newArray(size_t n) = 0;
  /// Grow-only scratch buffer `index` (0 or 1) of at least n floats.
  virtual float* scratch(int index, size_t n) = 0;
  virtual void toFloat(const void* in, DataType t, float* out, size_t n) = 0;
  virtual void fromFloat(const float* in, DataType t, void* out, size_t n) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  /// d[i] = d[i] * s (a multiply, not a divide, identically on host and device).
  virtual void scale(float* d, size_t n, float s) = 0;
  /// The executor's codec operations for this space; null means the CPU codec on host memory.
  virtual ChunkOps* ops() = 0;
  /// A host pointer holding the n floats of `work` (work itself on the host), for the native
  /// path of the transport's library; fromHost() puts the result back.
  virtual float* hostView(float* work, size_t n) = 0;
  virtual void fromHostView(float* work, const float* host, size_t n) = 0;
  /// Bytes of scratch and staging this space holds now.
  virtual size_t bytesHeld() const = 0;
};

/// A new host memory space (one per communicator: its scratch belongs to that communicator).
std::unique_ptr<MemorySpace> makeHostSpace();

}  // namespace qccl
