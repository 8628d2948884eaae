// UCX transport factory (only built when QCCL_HAVE_UCX).
#pragma once

#include "qccl/qccl.h"
#include "transport/transport.hpp"

namespace qccl {

/// Joins `nranks` ranks over UCX (UCP tag API), bootstrapped through `id` (see bootstrap.hpp):
/// every rank publishes its UCP worker address through rank 0, then opens an endpoint to every
/// rank with peer failure handling, so a dead peer makes requests that involve it fail with
/// Error(kRemoteError) instead of hanging. UCX's own configuration (UCX_TLS, UCX_NET_DEVICES, ...)
/// is read from the environment and never overridden. Collective over the ranks; bootstrap errors
/// are those of bootstrapAllgather, and UCX failures give Error(kTransportError).
/// The transport is used by one thread at a time; requests must be destroyed before it.
TransportPtr makeUcxTransport(const qcclUniqueId& id, int nranks, int rank, double timeoutSec);

}  // namespace qccl
