// MPI transport factory (only built when QCCL_HAVE_MPI).
#pragma once

#include <cstdint>

#include "transport/transport.hpp"

namespace qccl {

/// Knobs of the MPI transport (tests).
struct MpiTransportOptions {
  /// Use at most this MPI_TAG_UB (0: the library's own). Lets tests run with the smallest upper
  /// bound the MPI standard allows (32767) on a library that offers more.
  int tagUpperBound = 0;
  /// Whether a large fp32 sum on 2-3 ranks asks Open MPI's nonblocking allreduce for its ring
  /// (see NbcRing in mpi_transport.cc): 1 yes, 0 no, -1 (default) QCCL_MPI_NBC_RING, else yes.
  int nbcRing = -1;
};

/// A transport over a duplicate of the MPI communicator whose Fortran handle is `mpiCommFortran`
/// (MPI_Comm_c2f), so qccl's messages never match the application's. The duplicate returns errors
/// instead of aborting (MPI_ERRORS_RETURN); they surface as Error(kTransportError) with MPI's text.
/// Collective over the communicator (MPI_Comm_dup). MPI must be initialized, and calls into the
/// transport must respect the thread level the application initialized MPI with. Requests must
/// be destroyed before the transport; the transport must be destroyed before MPI_Finalize.
/// Throws Error(kInvalidUsage) when MPI is not initialized or already finalized.
TransportPtr makeMpiTransport(int64_t mpiCommFortran, const MpiTransportOptions& options = {});

/// Open MPI's eager limit over TCP (the control variable btl_tcp_eager_limit, read through the MPI
/// tool interface; it counts the library's own message header), or 0 where the MPI library has no
/// such variable or its btl selection excludes tcp. What the MPI transport's eagerBytes() reports.
size_t mpiTcpEagerBytes();

}  // namespace qccl
