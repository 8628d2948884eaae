// The checks of the test programs that run under mpirun (tests/capi, tests/interposer): this
// process's rank and size, a failure counter with EXPECT, and a byte hash for comparing ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

inline int gRank = 0;
inline int gSize = 1;
inline int gFailures = 0;

#define EXPECT(cond, ...)                                                                            \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "[rank %d] %s:%d: check failed: %s: ", gRank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                             \
      std::fprintf(stderr, "\n");                                                                    \
      ++gFailures;                                                                                   \
    }                                                                                                \
  } while (0)

inline uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
