// Host grouping: which ranks share a host (and so shared memory). Each rank computes a key for its
// host; ranks with equal keys are on one host. The MPI transport asks the MPI library instead
// (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) unless QCCL_HOST_ID is set; the UCX transport
// exchanges keys at bootstrap.
#pragma once

#include <string>
#include <vector>

namespace qccl {

/// This process's host key: QCCL_HOST_ID when set (the emulated cluster, or any launcher that
/// knows better), else "<hostname>/<network namespace>/<boot id>". The namespace matters because
/// the emulated cluster's hosts are network namespaces of one machine, which share the hostname
/// and the boot id but not a network stack; the boot id tells apart machines with one hostname.
std::string localHostKey();

/// Host index of every rank from every rank's key: equal keys, equal index; indices 0..H-1 in the
/// order of each host's lowest rank.
std::vector<int> hostsFromKeys(const std::vector<std::string>& keys);

}  // namespace qccl
