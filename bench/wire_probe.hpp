// The message pattern of a compressed sra or allgather call, replayed with no codec, for the
// alpha-beta model: how long this link takes to move the call's messages in the call's order.
#pragma once

#include <cstddef>
#include <functional>

namespace bench {

/// One replay: `rounds` rounds of `phases` phases; in each phase every rank sends one message of
/// `bytes` to every other rank (the next rank first, as qccl's plans do), then waits for the one
/// from every other rank. Receives are posted `depth` rounds ahead, and a phase's send buffers
/// are reused after `depth` rounds, as qccl's pipeline keeps `pipelineDepth` chunks per peer in
/// flight. sra has two phases per chunk round (the scatter, then the gather of the reduced chunk),
/// the allgather schedule one. Plain MPI point-to-point on a duplicate of MPI_COMM_WORLD, collective
/// over it. A wait polls as qccl's transport waits (transport.hpp: 64 rounds of MPI_Testall, then
/// 50 us sleeps between them), so that the process's CPU time counts the work of moving the bytes
/// (copies, system calls, the kernel's TCP work in the process's context), not a spinning wait.
/// `timer` times the replay (the bench's warm-ups, barriers and median of the slowest rank).
/// Returns 0 for fewer than two ranks or nothing to send; *cpuS (if given): this rank's process CPU
/// seconds (user + system) per replay, the mean over every replay the timer ran.
double timeWirePattern(size_t bytes, int phases, size_t rounds, int depth,
                       const std::function<double(const std::function<void()>&)>& timer, double* cpuS = nullptr);

}  // namespace bench
