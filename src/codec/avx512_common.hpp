// Preamble shared by the AVX-512 kernel files: the target attribute every function carries, so
// these files need no special compile flags and the dispatcher only calls them on CPUs with the ISA.
#pragma once

// GCC 12 reports -W(maybe-)uninitialized inside the AVX-512 intrinsic headers (their
// _mm512_undefined_* self-initialization); the warning is about the headers, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "codec/cpu_kernels.hpp"

#define QCCL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,popcnt")))
