// avx512 kernels (not yet vectorized: the scalar reference is used until they land).
#include "codec/cpu_kernels.hpp"

namespace qccl {
namespace cpu {

const Kernels* avx512Kernels() { return nullptr; }

}  // namespace cpu
}  // namespace qccl
