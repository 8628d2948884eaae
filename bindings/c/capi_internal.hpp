// For the C bindings inside libqccl (qccl_momentum.cc): what a call's tensor options resolve to on
// a communicator, where they leave the choice to its config.
#pragma once

#include <cstddef>

#include "qccl/qccl.h"

namespace qccl {
namespace capi {

/// The qcclCodec_t a call with `codec` uses: `codec` itself, or the communicator's for
/// qcclCodecDefault. Returns -1 for a null communicator.
int resolvedCodec(qcclComm_t comm, int codec);

/// The qcclAlgo_t a call with `algo` uses: `algo` itself, or the communicator's for -1.
/// Returns -1 for a null communicator.
int resolvedAlgo(qcclComm_t comm, int algo);

/// qcclAllreduce (average) of float32 host buffers with error control: the call's encodes see
/// `gain` times the tensor's residuals and keep the rest (TensorOpts::feedbackGain). For
/// qcclMomentumAllreduce.
qcclResult_t allreduceAvgWithGain(qcclComm_t comm, const float* send, float* recv, size_t count,
                                  const qcclTensorOpts_t* opts, float gain);

}  // namespace capi
}  // namespace qccl
