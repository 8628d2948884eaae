// UCX transport factory (only built when QCCL_HAVE_UCX).
#pragma once

#include "transport/bootstrap.hpp"
#include "transport/transport.hpp"

namespace qccl {

/// Joins `nranks` ranks over UCX (UCP tag API), bootstrapped through `id` (see bootstrap.hpp):
/// every rank publishes its UCP worker address through rank 0, then opens an endpoint to every
/// rank. The bootstrap connections stay open, so when a rank's process dies, requests that involve
/// it fail with Error(kRemoteError) instead of hanging (a vanished host shows as kTimeout).
/// UCX's own configuration (UCX_TLS, UCX_NET_DEVICES, ...) is read from the environment and never
/// overridden; tcp and the shared-memory transports (posix, sysv, cma) both work. Collective over
/// the ranks; bootstrap errors are those of bootstrapConnect, UCX failures give
/// Error(kTransportError). The transport is used by one thread at a time; requests must be
/// destroyed before it.
TransportPtr makeUcxTransport(const UniqueId& id, int nranks, int rank, double timeoutSec);

}  // namespace qccl
