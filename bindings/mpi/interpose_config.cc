#include "interpose_config.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace qcclmpi {
namespace {

// Whole-string unsigned integer no larger than `hi`, or false.
bool parseCount(const char* s, unsigned long long hi, unsigned long long* out) {
  if (s[0] < '0' || s[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > hi) return false;
  *out = v;
  return true;
}

void parseSwitch(const char* var, bool* out, std::string* error) {
  const char* v = std::getenv(var);
  if (v == nullptr) return;
  if (std::strcmp(v, "1") == 0 || std::strcmp(v, "0") == 0) {
    *out = v[0] == '1';
  } else {
    *error = std::string(var) + "='" + v + "' is not valid: expected 0 or 1";
  }
}

InterposeConfig load() {
  InterposeConfig c;
  parseSwitch("QCCL_INTERPOSE_REPORT", &c.report, &c.error);
  parseSwitch("QCCL_INTERPOSE_CHECK", &c.check, &c.error);
  if (const char* v = std::getenv("QCCL_INTERPOSE_PERIOD")) {
    unsigned long long p = 0;
    if (parseCount(v, 1u << 20, &p)) {
      c.pinnedPeriod = static_cast<size_t>(p);
    } else {
      c.error = std::string("QCCL_INTERPOSE_PERIOD='") + v + "' is not valid: expected an integer in [0, 1048576]";
    }
  }
  if (qcclConfigInit(&c.qccl) != qcclSuccess) {
    c.error = qcclGetLastError(nullptr);
    return c;
  }
  c.minCompressBytes = c.qccl.minCompressBytes;
  c.warmupCalls = c.qccl.warmupCalls;
  c.qccl.minCompressBytes = 0;
  c.qccl.warmupCalls = 0;
  c.active = c.error.empty() && c.qccl.codec != qcclCodecNone;
  return c;
}

}  // namespace

const InterposeConfig& config() {
  static const InterposeConfig c = load();  // thread-safe initialization (C++11)
  return c;
}

}  // namespace qcclmpi
