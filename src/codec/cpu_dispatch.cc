// Chooses the CPU kernels once per process: the best ISA the CPU supports, capped by QCCL_CPU_ISA.
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <string>

#include "codec/cpu_kernels.hpp"
#include "core/config.hpp"

namespace qccl {
namespace cpu {
namespace {

// 0 scalar, 1 avx2, 2 avx512.
int isaRank(const char* name) {
  if (std::strcmp(name, "scalar") == 0) return 0;
  if (std::strcmp(name, "avx2") == 0) return 1;
  if (std::strcmp(name, "avx512") == 0) return 2;
  return -1;
}

#if defined(__x86_64__) || defined(__i386__)
// clang 14's __builtin_cpu_supports does not know "f16c": read CPUID leaf 1, ECX bit 29.
bool hasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif

bool cpuHas(int rank) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (rank == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") && hasF16c();
  if (rank == 2)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("popcnt") && hasF16c();
#endif
  return rank == 0;
}

const Kernels* byRank(int rank) {
  if (!cpuHas(rank)) return nullptr;
  if (rank == 2) return avx512Kernels();
  if (rank == 1) return avx2Kernels();
  return &scalarKernels();
}

const Kernels& choose() {
  int cap = 2;
  // An unknown QCCL_CPU_ISA value is ignored rather than fatal: it only ever lowers the choice.
  const std::string want = env::cpuIsaCap();
  if (!want.empty() && isaRank(want.c_str()) >= 0) cap = isaRank(want.c_str());
  for (int r = cap; r > 0; --r)
    if (const Kernels* k = byRank(r)) return *k;
  return scalarKernels();
}

}  // namespace

const Kernels& activeKernels() {
  static const Kernels& k = choose();
  return k;
}

const Kernels* kernelsFor(const char* isa) {
  int r = isaRank(isa);
  return r < 0 ? nullptr : byRank(r);
}

}  // namespace cpu
}  // namespace qccl
