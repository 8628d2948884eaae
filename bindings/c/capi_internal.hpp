// For the C bindings inside libqccl (qccl_momentum.cc): what a call's tensor options resolve to on
// a communicator, where they leave the choice to its config.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "qccl/qccl.h"

namespace qccl {
namespace capi {

/// The qcclCodec_t a call with `codec` uses: `codec` itself, or the communicator's for
/// qcclCodecDefault. Returns -1 for a null communicator.
int resolvedCodec(qcclComm_t comm, int codec);

/// The qcclAlgo_t a call with `algo` uses: `algo` itself, or the communicator's for -1.
/// Returns -1 for a null communicator.
int resolvedAlgo(qcclComm_t comm, int algo);

/// What holdResiduals took out of a tensor's error-feedback residuals.
struct HeldResiduals {
  std::vector<float> values;  ///< the worker residual's part (workerCount), then the owner's
  size_t workerCount = 0, ownerCount = 0;
  uint64_t ownerBegin = 0;
  bool any = false;  ///< false: the tensor had no residual, nothing was held
};

/// The error-feedback residuals of tensor `id` (a host tensor of `count` elements) held back from
/// its next call, for qcclMomentumConfig_t.feedbackGain: each residual r becomes gain * r, and the
/// rest, r - gain * r, goes to `held`. Under the communicator's call lock.
qcclResult_t holdResiduals(qcclComm_t comm, uint64_t id, size_t count, float gain, HeldResiduals* held);
/// Adds what holdResiduals held back to the residuals the call left, each where the call kept it
/// (a residual the call replaced, by another owner range or an eviction, gets nothing).
qcclResult_t restoreResiduals(qcclComm_t comm, uint64_t id, size_t count, const HeldResiduals& held);

}  // namespace capi
}  // namespace qccl
