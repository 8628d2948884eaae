// An alpha-beta model of the link, fitted from the run's own uncompressed rows, that predicts each
// compressed row's time from its wire time and codec CPU time, and the link rate at which
// compression stops paying.
//
// Fit: qccl's fp32 ring sends W = 2(n-1)/n * S bytes per rank in 2(n-1) rounds, so its time is
// T(S) = 2(n-1) alpha + W beta; alpha and beta come from a least-squares line through the ring's
// rows (at least two sizes).
//
// Wire time of a compressed row: the ring (a cast) sends one message at a time to one peer, the
// pattern of the fit: R alpha + W_c beta. sra and allgather send to every peer at once, and n - 1
// concurrent flows per rank move bytes at a different rate than one (measured on the emulated
// cluster: 0.57-0.67 of the link for 4 MiB rounds, close to 1.0 for small ones): their wire time
// is an uncompressed all-to-all with the row's own message sizes, rounds and depth, timed in the
// same run (wirePatternS), or the ring's line when there is none.
//
// Codec CPU: the bytes each rank encodes and decodes over the single-thread throughputs measured
// with every other rank idle, times the CPU share (ranks on this machine, i.e. on the same kernel,
// / cores, at least 1: the ranks of the emulated cluster share two cores although MPI sees each
// namespace as a node of its own).
//
// The two overlap: a schedule of K chunk rounds moves round k + 1 while it encodes or decodes
// round k, a two-stage pipeline of time max(W, C) + min(W, C) / K.
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

/// A two-stage pipeline of `rounds` equal rounds: max(wire, cpu) + min(wire, cpu) / rounds.
double pipelinedSeconds(double wireS, double cpuS, double rounds);

/// One compressed call under the model, at the fitted link rate: the wire's fixed part (rounds *
/// alpha), the part that scales with 1 / rate (bytes * beta * slowdown, where slowdown is the
/// pattern's time over the ring's for the same bytes), the codec CPU and the chunk rounds.
struct CallModel {
  double fixedS = 0;
  double bytes = 0;
  double slowdown = 1;
  double cpuS = 0;
  double chunkRounds = 1;
  /// Predicted seconds with the link at `gbit` instead of the fitted rate.
  double secondsAt(double gbit) const;
};

/// The link rate (Gbit/s) below which the compressed call is faster than the fp32 ring (w0 bytes
/// in r0 rounds) under the model: 0 when it never pays, infinity when it pays at any rate up to
/// 100 Tbit/s. Found by bisection on the rate.
double breakEvenGbit(const LinkFit& fit, double w0, int r0, const CallModel& c);

}  // namespace bench
