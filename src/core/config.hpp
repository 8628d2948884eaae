// Configuration: every QCCL_* environment variable qccl reads is parsed in config.cc, and nowhere
// else. This header is a leaf (options.hpp and the standard library only), so every layer may ask
// it, the codec and transport layers included.
#pragma once

#include <string>

#include "core/options.hpp"

namespace qccl {

/// Returns `base` with every QCCL_* variable that is set applied (qccl.h lists them), validated.
/// Throws Error(kInvalidArgument) naming the variable on a malformed or out-of-range value.
Options optionsFromEnv(Options base = {});

/// Parses "auto", "ring", "sra", "allgather", "hier". Throws Error(kInvalidArgument).
Algo parseAlgoName(const std::string& name);
const char* algoName(Algo a) noexcept;

namespace env {
/// QCCL_CPU_ISA: the best CPU kernel family the codecs may use, "scalar", "avx2" or "avx512";
/// empty when unset. An unknown value is ignored (it could only lower the choice).
std::string cpuIsaCap();
/// QCCL_SOCKET_IFNAME: the interface whose IPv4 address goes into a unique id; empty when unset.
std::string socketIfname();
/// QCCL_HOST_ID: overrides this process's host key (ranks with the same value share a host, for
/// the hierarchical algorithms); empty when unset.
std::string hostId();
/// QCCL_MPI_NBC_RING: whether the MPI transport asks Open MPI's nonblocking allreduce for its ring on
/// 2-3 ranks (mpi_transport.cc, NbcRing); true when unset. Throws Error(kInvalidArgument) on a
/// value that is not 0 or 1 (or false/true, off/on, no/yes).
bool mpiNbcRing();
}  // namespace env

}  // namespace qccl
