// qccl error type for the C++ API. The C API maps every Error to a qcclResult_t.
#pragma once

#include <stdexcept>
#include <string>

namespace qccl {

/// Error categories; values equal the C API's qcclResult_t codes.
enum class ErrorCode : int {
  kSuccess = 0,
  kCudaError = 1,        ///< a CUDA runtime call failed
  kSystemError = 2,      ///< an OS call (socket, memory) failed
  kInternalError = 3,    ///< a bug in qccl
  kInvalidArgument = 4,  ///< a bad argument from the caller
  kInvalidUsage = 5,     ///< a call that is not allowed in the current state
  kRemoteError = 6,      ///< a peer reported an error or aborted
  kTimeout = 7,          ///< a wait exceeded the configured timeout
  kMismatch = 8,         ///< ranks disagree on count, codec, datatype or call order
  kMalformed = 9,        ///< bytes from the wire failed validation
  kCommFailed = 10,      ///< the communicator failed earlier or was aborted
  kTransportError = 11,  ///< MPI or UCX returned an error
};

/// Short name of an error code ("qcclTimeout", ...).
const char* errorCodeName(ErrorCode code) noexcept;

/// The one exception type qccl throws.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
[[noreturn]] void throwError(ErrorCode code, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace qccl

/// Throws qccl::Error(code, "file:line: msg") when cond is false.
#define QCCL_CHECK(cond, code, msg)                                             \
  do {                                                                          \
    if (!(cond)) ::qccl::detail::throwError((code), __FILE__, __LINE__, (msg)); \
  } while (0)

/// Throws qccl::Error(code, "file:line: msg") unconditionally.
#define QCCL_THROW(code, msg) ::qccl::detail::throwError((code), __FILE__, __LINE__, (msg))
