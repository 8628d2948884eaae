#include "qccl/error.hpp"

#include <string>

namespace qccl {

const char* errorCodeName(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kSuccess:
      return "qcclSuccess";
    case ErrorCode::kCudaError:
      return "qcclCudaError";
    case ErrorCode::kSystemError:
      return "qcclSystemError";
    case ErrorCode::kInternalError:
      return "qcclInternalError";
    case ErrorCode::kInvalidArgument:
      return "qcclInvalidArgument";
    case ErrorCode::kInvalidUsage:
      return "qcclInvalidUsage";
    case ErrorCode::kRemoteError:
      return "qcclRemoteError";
    case ErrorCode::kTimeout:
      return "qcclTimeout";
    case ErrorCode::kMismatch:
      return "qcclMismatch";
    case ErrorCode::kMalformed:
      return "qcclMalformed";
    case ErrorCode::kCommFailed:
      return "qcclCommFailed";
    case ErrorCode::kTransportError:
      return "qcclTransportError";
  }
  return "qcclUnknownError";
}

namespace detail {
void throwError(ErrorCode code, const char* file, int line, const std::string& msg) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw Error(code, std::string(errorCodeName(code)) + ": " + msg + " (" + base + ":" + std::to_string(line) + ")");
}
}  // namespace detail

}  // namespace qccl
