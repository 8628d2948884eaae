// An alpha-beta model of the link, fitted from the run's own uncompressed rows, that predicts each
// compressed row's time as wire time plus codec CPU time, and the link rate at which compression
// stops paying.
//
// Fit: qccl's fp32 ring sends W = 2(n-1)/n * S bytes per rank in 2(n-1) rounds, so its time is
// T(S) = 2(n-1) alpha + W beta; alpha and beta come from a least-squares line through the ring's
// rows (at least two sizes). A compressed row with W_c measured wire bytes per rank and R rounds
// then takes R alpha + W_c beta on the wire, plus the codec's CPU time: the bytes it encodes and
// decodes per rank over the single-thread throughputs measured with every other rank idle, times
// the CPU share (ranks on this machine, i.e. on the same kernel, / cores, at least 1: the ranks of
// the emulated cluster share two cores although MPI sees each namespace as a node of its own).
#pragma once

#include <cstddef>
#include <vector>

namespace bench {

struct LinkFit {
  bool ok = false;
  double alpha = 0;  ///< seconds per round
  double beta = 0;   ///< seconds per byte sent by one rank
  double gbit() const { return beta > 0 ? 8e-9 / beta : 0; }
};

/// Fits (ring wire bytes per rank, ring time) pairs of one run; n is the number of ranks.
LinkFit fitRing(const std::vector<double>& wireBytes, const std::vector<double>& seconds, int n);

/// Rounds of a collective whose messages a rank waits for in sequence.
int roundsOf(const char* algo, int n);

/// Codec CPU seconds of one call per rank: fp32 bytes encoded and decoded at the measured GB/s,
/// times the CPU share.
double codecSeconds(double encodedBytes, double decodedBytes, double encGBps, double decGBps, double cpuShare);

/// The link rate (Gbit/s) below which the compressed call is faster than the fp32 ring under the
/// model: solves R_c alpha + W_c / B + cpu = R alpha + W_0 / B for B. 0 when it never pays,
/// infinity when it pays at any rate (fewer rounds save more than the codec costs).
double breakEvenGbit(const LinkFit& fit, double w0, int r0, double wc, int rc, double cpuS);

}  // namespace bench
