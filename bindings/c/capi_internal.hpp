// For the C bindings inside libqccl (qccl_momentum.cc): what a call's tensor options resolve to on
// a communicator, where they leave the choice to its config.
#pragma once

#include <cstddef>
#include <optional>

#include "qccl/qccl.h"

namespace qccl {
namespace capi {

/// The qcclCodec_t a call with `codec` uses: `codec` itself, or the communicator's for
/// qcclCodecDefault. Returns -1 for a null communicator.
int resolvedCodec(qcclComm_t comm, int codec);

/// The qcclAlgo_t a call with `algo` uses: `algo` itself, or the communicator's for -1.
/// Returns -1 for a null communicator.
int resolvedAlgo(qcclComm_t comm, int algo);

/// qcclAllreduce with error control: the call's encodes see `gain` times the tensor's residuals and
/// keep the rest (TensorOpts::feedbackGain); no gain: the tensor's setting (qcclTensorSetFeedbackGain),
/// which is qcclAllreduce itself. For qcclMomentumAllreduce.
qcclResult_t allreduceWithGain(const void* sendbuff, void* recvbuff, size_t count, qcclDataType_t datatype,
                               qcclRedOp_t op, const qcclTensorOpts_t* opts, qcclComm_t comm, void* stream,
                               std::optional<float> gain);

}  // namespace capi
}  // namespace qccl
