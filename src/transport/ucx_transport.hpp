// UCX transport factory (only built when QCCL_HAVE_UCX).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "transport/bootstrap.hpp"
#include "transport/transport.hpp"

namespace qccl {

/// Joins `nranks` ranks over UCX (UCP tag API), bootstrapped through `id` (see bootstrap.hpp):
/// every rank publishes its UCP worker address through rank 0, then opens an endpoint to every
/// rank. The bootstrap connections stay open, so when a rank's process dies, requests that involve
/// it fail with Error(kRemoteError) instead of hanging (a vanished host shows as kTimeout).
/// UCX's own configuration (UCX_TLS, UCX_NET_DEVICES, ...) is read from the environment; where the
/// environment leaves a setting of ucxConfigDefaults() unset, qccl's default applies to its own
/// context. tcp and the shared-memory transports (posix, sysv, cma) all work. Collective over
/// the ranks; bootstrap errors are those of bootstrapConnect, UCX failures give
/// Error(kTransportError). The transport is used by one thread at a time; requests must be
/// destroyed before it.
TransportPtr makeUcxTransport(const UniqueId& id, int nranks, int rank, double timeoutSec);

/// The UCX settings (names without the UCX_ prefix, values) that qccl gives its own UCP context
/// because the environment does not set them (a UCX_<NAME> variable, even empty, keeps UCX's own
/// handling):
///   TLS=^cma: UCX 1.13's cma ends the whole process when the peer it reads from has died.
///   RNDV_THRESH=inf: every message goes eagerly. With the rendezvous protocol a large message
///   waits for the receiver's reply, which queues behind the receiver's own outgoing data on the
///   same link (and without cma, one host's rendezvous falls back to a slower copy); qccl's
///   messages are pipeline chunks whose receives are posted ahead, so eager costs no extra copy.
///   Measured in bench/RESULTS.md ("UCX: every message eager").
///   TX_SEG_SIZE=256K, RX_SEG_SIZE=512K (tcp's; UCX_TCP_* or UCX_* in the environment keeps UCX's 8K
///   and 64K): an eager message leaves in segments of at most TX_SEG_SIZE, each its own send, and
///   arrives through receives of RX_SEG_SIZE. On unshaped links between 4 emulated hosts the fp32
///   ring's 64 MiB took 0.82x the time; at 1 Gbit/s 0.94-1.00x (bench/RESULTS.md, "UCX: TCP segments").
std::vector<std::pair<std::string, std::string>> ucxConfigDefaults();

/// The fp32 ring's chunk over UCX (Transport::ringChunkBytes): 1 MiB, where the codec's default is
/// 4 MiB (options.hpp chunkBytesFor). With every message eager, at 64 MiB on 4 emulated hosts at
/// 1 Gbit/s: 848 ms against 914 with 4 MiB chunks (gloo 845); on one host 116 against 146.
constexpr size_t kUcxRingChunkBytes = size_t{1} << 20;

}  // namespace qccl
