// The uncompressed peers qccl-bench times in the same run, on the same buffers, so that every row
// is compared with the best of them and never with a weak one.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "qccl/qccl.h"

namespace bench {

/// One uncompressed way to run the collective, and its median time.
struct Baseline {
  std::string name;   ///< "mpi_allreduce", "mpi_iallreduce", "qccl_ring", "gloo_ring_chunked", ...
  double timeS = -1;  ///< median of the slowest rank's time; < 0: not run
};

/// The collective being timed.
enum class Collective { kAllreduce, kAllgather, kReduceScatter };

/// Which baselines run: every available one, or only the MPI library's blocking one (--baselines mpi).
enum class BaselineSet { kAll, kMpiOnly };

/// Times the uncompressed peers of an allreduce, allgather or reduce-scatter of `count` elements
/// per rank (allgather: sent; reduce-scatter: received, `send` holding nranks * count): `timer` runs its argument
/// warm-up + iterations times and returns the median. `send` holds this rank's input; `recv` has room for the result.
/// gloo is created on first use (tcp device on GLOO_SOCKET_IFNAME if set, else the loopback address; a file store in a
/// directory rank 0 creates) and reused; without gloo in the build it is left out. Reduce-scatter has no gloo baseline
/// (torch's gloo backend has no reduce_scatter either).
std::vector<Baseline> timeBaselines(Collective coll, const float* send, float* recv, size_t count, qcclComm_t comm,
                                    uint64_t tensorId, BaselineSet set,
                                    const std::function<double(const std::function<void()>&)>& timer);

/// The fastest baseline that ran (name "none" when none did).
Baseline best(const std::vector<Baseline>& all);

/// Time of the baseline called `name`, or -1.
double timeOf(const std::vector<Baseline>& all, const std::string& name);

/// Frees gloo's context (before MPI_Finalize).
void shutdownBaselines();

/// True when this build times gloo.
bool haveGloo();

}  // namespace bench
