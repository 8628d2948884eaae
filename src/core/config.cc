// Every QCCL_* environment variable qccl reads, parsed here and nowhere else. This file, the
// qcclConfig_t comment in qccl.h and the README's table list the same variables; keep them in sync.
//
//   QCCL_CODEC, QCCL_BITS, QCCL_BUCKET, QCCL_STOCHASTIC, QCCL_SEED    Options::codec
//   QCCL_MIN_COMPRESS, QCCL_CHUNK_BYTES, QCCL_PIPELINE, QCCL_TIMEOUT  Options (sizes, time)
//   QCCL_WARMUP, QCCL_ALGO, QCCL_ERROR_FEEDBACK, QCCL_MAX_RESIDUAL_BYTES, QCCL_INTRA_CODEC,
//   QCCL_AUTO_HIER, QCCL_AUTO_RING, QCCL_SHM, QCCL_SHM_CHUNK_BYTES, QCCL_LOCAL_COMPRESS
//   QCCL_CPU_ISA        cap on the CPU codec kernels (env::cpuIsaCap, read once by the dispatcher)
//   QCCL_SOCKET_IFNAME  interface of the UCX bootstrap address (env::socketIfname)
//   QCCL_HOST_ID        this process's host key for host grouping (env::hostId)
#include "core/config.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "qccl/error.hpp"

namespace qccl {
namespace {

[[noreturn]] void badValue(const char* var, const char* value, const char* expected) {
  QCCL_THROW(ErrorCode::kInvalidArgument, std::string(var) + "='" + value + "' is not valid: expected " + expected);
}

// Whole-string unsigned integer in [lo, hi]; rejects signs, blanks and trailing garbage.
uint64_t parseUnsigned(const char* var, const char* value, uint64_t lo, uint64_t hi, const char* expected) {
  if (value[0] < '0' || value[0] > '9') badValue(var, value, expected);
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(value, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) badValue(var, value, expected);
  return v;
}

// Byte sizes accept an optional K, M or G suffix (powers of 1024), as in "4M".
size_t parseBytes(const char* var, const char* value, uint64_t lo) {
  std::string s(value);
  uint64_t mult = 1;
  if (!s.empty()) {
    char last = s.back();
    if (last == 'K' || last == 'k') mult = 1ull << 10;
    if (last == 'M' || last == 'm') mult = 1ull << 20;
    if (last == 'G' || last == 'g') mult = 1ull << 30;
    if (mult != 1) s.pop_back();
  }
  const char* expected = "a byte count, optionally with a K, M or G suffix";
  if (s.empty()) badValue(var, value, expected);
  uint64_t v = parseUnsigned(var, s.c_str(), 0, (1ull << 50) / mult, expected);
  if (v * mult < lo) badValue(var, value, expected);
  return static_cast<size_t>(v * mult);
}

bool parseBool(const char* var, const char* value) {
  std::string s(value);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  badValue(var, value, "0 or 1");
}

double parsePositiveSeconds(const char* var, const char* value) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(value, &end);
  if (errno != 0 || end == value || *end != '\0' || !std::isfinite(v) || v <= 0.0)
    badValue(var, value, "a positive number of seconds");
  return v;
}

}  // namespace

Options optionsFromEnv(Options base) {
  Options o = base;
  const char* v = nullptr;
  if ((v = std::getenv("QCCL_CODEC")) != nullptr) {
    try {
      o.codec.codec = parseCodecName(v);
    } catch (const Error&) {
      badValue("QCCL_CODEC", v, "none|fp16|bf16|onebit|signscale|maxmin|dyn8");
    }
  }
  if ((v = std::getenv("QCCL_BITS")) != nullptr) {
    uint64_t b = parseUnsigned("QCCL_BITS", v, 0, 32, "2, 4 or 8");
    if (b != 2 && b != 4 && b != 8) badValue("QCCL_BITS", v, "2, 4 or 8");
    o.codec.bits = static_cast<int>(b);
  }
  if ((v = std::getenv("QCCL_BUCKET")) != nullptr) {
    const char* expected = "a multiple of 32 in [32, 65536]";
    uint64_t b = parseUnsigned("QCCL_BUCKET", v, 32, kMaxBucket, expected);
    if (b % 32 != 0) badValue("QCCL_BUCKET", v, expected);
    o.codec.bucket = static_cast<uint32_t>(b);
  }
  if ((v = std::getenv("QCCL_STOCHASTIC")) != nullptr) o.codec.stochastic = parseBool("QCCL_STOCHASTIC", v);
  if ((v = std::getenv("QCCL_SEED")) != nullptr)
    o.codec.seed = parseUnsigned("QCCL_SEED", v, 0, UINT64_MAX, "an unsigned 64-bit integer");
  if ((v = std::getenv("QCCL_MIN_COMPRESS")) != nullptr) o.minCompressBytes = parseBytes("QCCL_MIN_COMPRESS", v, 0);
  if ((v = std::getenv("QCCL_CHUNK_BYTES")) != nullptr) {
    o.chunkBytes = parseBytes("QCCL_CHUNK_BYTES", v, sizeof(float));
    if (o.chunkBytes > kMaxChunkBytes) badValue("QCCL_CHUNK_BYTES", v, "a byte count from 4 to 1G");
  }
  if ((v = std::getenv("QCCL_PIPELINE")) != nullptr)
    o.pipelineDepth =
        static_cast<int>(parseUnsigned("QCCL_PIPELINE", v, 1, kMaxPipelineDepth, "an integer in [1, 64]"));
  if ((v = std::getenv("QCCL_TIMEOUT")) != nullptr) o.timeoutSec = parsePositiveSeconds("QCCL_TIMEOUT", v);
  if ((v = std::getenv("QCCL_WARMUP")) != nullptr)
    o.warmupCalls = static_cast<int>(parseUnsigned("QCCL_WARMUP", v, 0, INT32_MAX, "a non-negative integer"));
  if ((v = std::getenv("QCCL_ALGO")) != nullptr) {
    try {
      o.algo = parseAlgoName(v);
    } catch (const Error&) {
      badValue("QCCL_ALGO", v, "auto|ring|sra|allgather|hier");
    }
  }
  if ((v = std::getenv("QCCL_INTRA_CODEC")) != nullptr) {
    CodecId c = CodecId::kOneBit;
    try {
      c = parseCodecName(v);
    } catch (const Error&) {
    }
    if (c != CodecId::kFp32 && c != CodecId::kFp16 && c != CodecId::kBf16)
      badValue("QCCL_INTRA_CODEC", v, "none|fp16|bf16");
    o.intraCodec = c;
  }
  if ((v = std::getenv("QCCL_ERROR_FEEDBACK")) != nullptr) o.errorFeedback = parseBool("QCCL_ERROR_FEEDBACK", v);
  if ((v = std::getenv("QCCL_AUTO_HIER")) != nullptr) o.autoHier = parseBool("QCCL_AUTO_HIER", v);
  if ((v = std::getenv("QCCL_AUTO_RING")) != nullptr) o.autoRing = parseBool("QCCL_AUTO_RING", v);
  if ((v = std::getenv("QCCL_SHM")) != nullptr) o.shm = parseBool("QCCL_SHM", v);
  if ((v = std::getenv("QCCL_SHM_CHUNK_BYTES")) != nullptr) {
    o.shmChunkBytes = parseBytes("QCCL_SHM_CHUNK_BYTES", v, 64);
    if (o.shmChunkBytes > kMaxShmChunkBytes) badValue("QCCL_SHM_CHUNK_BYTES", v, "a byte count from 64 to 256M");
  }
  if ((v = std::getenv("QCCL_LOCAL_COMPRESS")) != nullptr) o.localCompress = parseBool("QCCL_LOCAL_COMPRESS", v);
  if ((v = std::getenv("QCCL_MAX_RESIDUAL_BYTES")) != nullptr)
    o.maxResidualBytes = parseBytes("QCCL_MAX_RESIDUAL_BYTES", v, 0);
  validate(o);
  return o;
}

Algo parseAlgoName(const std::string& name) {
  if (name == "auto") return Algo::kAuto;
  if (name == "ring") return Algo::kRing;
  if (name == "sra") return Algo::kSra;
  if (name == "allgather") return Algo::kAllgather;
  if (name == "hier") return Algo::kHier;
  QCCL_THROW(ErrorCode::kInvalidArgument, "unknown algorithm '" + name + "' (expected auto|ring|sra|allgather|hier)");
}

void validate(const Options& o) {
  validateConfig(o.codec);
  // Checked for every codec: a tensor may later name a bucketed codec the default does not.
  QCCL_CHECK(o.codec.bucket >= 32 && o.codec.bucket <= kMaxBucket && o.codec.bucket % 32 == 0,
             ErrorCode::kInvalidArgument, "options: bucket must be a multiple of 32 in [32, 65536]");
  QCCL_CHECK(o.chunkBytes == 0 || (o.chunkBytes >= sizeof(float) && o.chunkBytes <= kMaxChunkBytes),
             ErrorCode::kInvalidArgument,
             "options: chunkBytes must be 0 (by codec) or in [4, 1 GiB], got " + std::to_string(o.chunkBytes));
  QCCL_CHECK(o.pipelineDepth >= 1 && o.pipelineDepth <= kMaxPipelineDepth, ErrorCode::kInvalidArgument,
             "options: pipelineDepth must be in [1, 64], got " + std::to_string(o.pipelineDepth));
  QCCL_CHECK(o.timeoutSec > 0.0 && std::isfinite(o.timeoutSec), ErrorCode::kInvalidArgument,
             "options: timeoutSec must be a positive number of seconds");
  QCCL_CHECK(o.warmupCalls >= 0, ErrorCode::kInvalidArgument, "options: warmupCalls must be >= 0");
  QCCL_CHECK(isValid(o.algo), ErrorCode::kInvalidArgument, "options: unknown algorithm");
  QCCL_CHECK(o.shmChunkBytes >= 64 && o.shmChunkBytes <= kMaxShmChunkBytes, ErrorCode::kInvalidArgument,
             "options: shmChunkBytes must be in [64, 256 MiB], got " + std::to_string(o.shmChunkBytes));
  QCCL_CHECK(o.intraCodec == CodecId::kFp32 || o.intraCodec == CodecId::kFp16 || o.intraCodec == CodecId::kBf16,
             ErrorCode::kInvalidArgument,
             std::string("options: intraCodec must be none (fp32), fp16 or bf16, got ") + codecName(o.intraCodec));
}

namespace env {

std::string cpuIsaCap() {
  const char* v = std::getenv("QCCL_CPU_ISA");
  return v != nullptr ? std::string(v) : std::string();
}

std::string socketIfname() {
  const char* v = std::getenv("QCCL_SOCKET_IFNAME");
  return v != nullptr ? std::string(v) : std::string();
}

std::string hostId() {
  const char* v = std::getenv("QCCL_HOST_ID");
  return v != nullptr ? std::string(v) : std::string();
}

bool mpiNbcRing() {
  const char* v = std::getenv("QCCL_MPI_NBC_RING");
  return v == nullptr || parseBool("QCCL_MPI_NBC_RING", v);
}

}  // namespace env

const char* algoName(Algo a) noexcept {
  switch (a) {
    case Algo::kAuto:
      return "auto";
    case Algo::kRing:
      return "ring";
    case Algo::kSra:
      return "sra";
    case Algo::kAllgather:
      return "allgather";
    case Algo::kHier:
      return "hier";
    case Algo::kCount:
      break;
  }
  return "unknown";
}

}  // namespace qccl
