#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace bench {

LinkFit fitRing(const std::vector<double>& wireBytes, const std::vector<double>& seconds, int n) {
  LinkFit f;
  const size_t m = wireBytes.size();
  if (m < 2 || seconds.size() != m || n < 2) return f;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < m; ++i) {
    sx += wireBytes[i];
    sy += seconds[i];
    sxx += wireBytes[i] * wireBytes[i];
    sxy += wireBytes[i] * seconds[i];
  }
  const double den = static_cast<double>(m) * sxx - sx * sx;
  if (den <= 0) return f;
  f.beta = (static_cast<double>(m) * sxy - sx * sy) / den;
  const double intercept = (sy - f.beta * sx) / static_cast<double>(m);
  f.alpha = intercept > 0 ? intercept / (2.0 * (n - 1)) : 0.0;
  f.ok = f.beta > 0;
  return f;
}

int roundsOf(const char* algo, int n) {
  if (std::strcmp(algo, "sra") == 0) return 2;
  if (std::strcmp(algo, "allgather") == 0) return 1;
  return 2 * (n - 1);  // ring
}

double codecSeconds(double encodedBytes, double decodedBytes, double encGBps, double decGBps, double cpuShare) {
  if (encGBps <= 0 || decGBps <= 0) return 0;
  return (encodedBytes / (encGBps * 1e9) + decodedBytes / (decGBps * 1e9)) * (cpuShare > 1 ? cpuShare : 1);
}

double pipelinedSeconds(double wireS, double cpuS, double rounds) {
  const double k = rounds >= 1 ? rounds : 1;
  return std::max(wireS, cpuS) + std::min(wireS, cpuS) / k;
}

double CallModel::secondsAt(double gbit) const {
  const double wire = fixedS + bytes * slowdown * 8e-9 / gbit;
  return pipelinedSeconds(wire, cpuS, chunkRounds);
}

double breakEvenGbit(const LinkFit& fit, double w0, int r0, const CallModel& c) {
  if (!fit.ok) return 0;
  // Positive where compression pays at `gbit`: the ring's time minus the compressed call's.
  auto gain = [&](double gbit) { return r0 * fit.alpha + w0 * 8e-9 / gbit - c.secondsAt(gbit); };
  double lo = 1e-4, hi = 1e5;  // Gbit/s
  if (gain(lo) <= 0) return 0;
  if (gain(hi) > 0) return std::numeric_limits<double>::infinity();
  for (int i = 0; i < 200 && hi / lo > 1.0001; ++i) {
    const double mid = std::sqrt(lo * hi);
    (gain(mid) > 0 ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

}  // namespace bench
