#include "model.hpp"

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

double breakEvenGbit(const LinkFit& fit, double w0, int r0, double wc, int rc, double cpuS) {
  const double fixed = cpuS + (rc - r0) * fit.alpha;  // what compression adds besides bytes
  const double saved = w0 - wc;
  if (saved <= 0) return 0;
  if (fixed <= 0) return std::numeric_limits<double>::infinity();  // pays at any rate
  return saved * 8 / fixed / 1e9;
}

}  // namespace bench
