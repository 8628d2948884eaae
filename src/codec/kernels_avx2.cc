// avx2 kernels (not yet vectorized: the scalar reference is used until they land).
#include "codec/cpu_kernels.hpp"

namespace qccl {
namespace cpu {

const Kernels* avx2Kernels() { return nullptr; }

}  // namespace cpu
}  // namespace qccl
