// Options defaults and QCCL_* environment overrides, parsed in this one place.
#pragma once

#include "core/communicator.hpp"

namespace qccl {

/// Returns `base` with every QCCL_* variable that is set applied (see qccl.h for the list).
/// Throws Error(kInvalidArgument) naming the variable on a malformed value.
Options optionsFromEnv(Options base = {});

/// Parses "auto", "ring", "sra", "allgather". Throws Error(kInvalidArgument).
Algo parseAlgoName(const std::string& name);
const char* algoName(Algo a) noexcept;

}  // namespace qccl
