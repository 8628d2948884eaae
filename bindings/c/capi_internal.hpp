// For the C bindings inside libqccl (qccl_momentum.cc): what a call's tensor options resolve to on
// a communicator, where they leave the choice to its config.
#pragma once

#include "qccl/qccl.h"

namespace qccl {
namespace capi {

/// The qcclCodec_t a call with `codec` uses: `codec` itself, or the communicator's for
/// qcclCodecDefault. Returns -1 for a null communicator.
int resolvedCodec(qcclComm_t comm, int codec);

/// The qcclAlgo_t a call with `algo` uses: `algo` itself, or the communicator's for -1.
/// Returns -1 for a null communicator.
int resolvedAlgo(qcclComm_t comm, int algo);

}  // namespace capi
}  // namespace qccl
