// The choice of algorithm and codec for one call, as a pure function of values every rank can
// agree on. The communicator makes sure they are agreed (select.cc explains how) before it acts
// on the result, so that no two ranks ever take different paths for the same call.
#pragma once

#include <cstddef>

#include "core/options.hpp"

namespace qccl {

/// What the choice depends on. Every field is the same on every rank when the ranks make the same
/// call with the same options; the communicator checks that across ranks where a wrong guess would
/// otherwise leave ranks on paths that cannot see each other (see Communicator).
struct SelectInput {
  Algo requested = Algo::kAuto;  ///< the tensor's algorithm, else the communicator's
  CodecConfig codec;             ///< the tensor's codec (validated, unresolved)
  size_t count = 0;              ///< elements
  int nranks = 1;
  size_t minCompressBytes = 0;   ///< Options::minCompressBytes
  bool errorFeedback = true;     ///< Options::errorFeedback
  bool warmup = false;           ///< the tensor is still in its first Options::warmupCalls calls
  bool hasId = false;            ///< TensorOpts::id != 0
  bool nativeAvailable = false;  ///< the transport can sum fp32 itself (MPI_Iallreduce)
  bool shmAvailable = false;     ///< every rank is on one host and maps the shared segment (shm_group.hpp)
  bool deviceBuffers = false;    ///< the call's buffers are device memory
  bool localCompress = false;    ///< Options::localCompress
  /// From this many bytes of fp32 data `auto` sums uncompressed tensors in its own ring rather
  /// than the transport's library (0: never). The communicator sets it where the ring crosses hosts
  /// with chunks at the transport's eager limit, on 4 ranks or more (kRingOverNativeBytes), and
  /// times the two on a tensor's first calls before it keeps the ring (communicator.cc, tune()).
  size_t ringOverNativeBytes = 0;
};

/// See SelectInput::ringOverNativeBytes. On 4 and 8 emulated hosts at 1 Gbit/s the fp32 ring at the
/// eager limit took 0.82-0.99x MPI_Iallreduce's time from 4 MiB to 64 MiB, and 1.00-1.39x at 1 MiB
/// (bench/RESULTS.md, "The ring's chunks at the eager limit").
constexpr size_t kRingOverNativeBytes = size_t{4} << 20;

/// What to run.
struct Selection {
  Algo algo = Algo::kRing;  ///< kRing, kSra, kAllgather or kHier (only when requested); never kAuto
  CodecConfig codec;        ///< resolved (resolveConfig): what goes on the wire
  bool native = false;      ///< hand the uncompressed sum to the transport's library instead of `algo`
  bool shm = false;         ///< sum through the shared segment instead of `algo` (never with native)
  bool errorFeedback = false;
  float feedbackGain = 1.0f;  ///< TensorOpts::feedbackGain, for the encodes that keep a residual
};

/// The rule of `auto`, and the checks of an explicit request:
///   - warm-up, codec fp32, or a tensor below minCompressBytes of fp32 data: uncompressed; `auto`
///     sums it in shared memory when every rank is on one host (shmAvailable), else hands it to the
///     transport's library when it has one (nativeAvailable) unless the tensor has
///     ringOverNativeBytes or more, else to the fp32 ring (bandwidth-optimal, exact up to the
///     summation order);
///   - `auto` with the shared segment and host buffers, whatever the codec (unless localCompress):
///     uncompressed in the segment too, since there no codec's passes over the data cost less than
///     copying fp32 (bench/RESULTS.md, "One host: compression does not pay");
///   - fp16/bf16: the ring with that cast on the wire;
///   - other codecs: sra on 3 or more ranks (each rank sends and receives ~2(n-1)/n compressed
///     tensors), allgather on 1-2 ranks (the same bytes in one round and one quantization stage).
/// Explicit kRing takes only the casts: the ring would re-quantize partial sums at every hop, so
/// a bucket codec's error would grow with the number of ranks (Error kInvalidArgument). Error
/// feedback applies to sra and allgather with any codec but fp32; it needs a tensor id (hasId),
/// else Error(kInvalidUsage): residuals of anonymous tensors would mix between tensors.
Selection selectAlgorithm(const SelectInput& in);

/// auto's choice after its trials (communicator.cc, "auto and hier"): `times` holds every rank's
/// best seconds of the first candidate (the flat path, or the library's allreduce) and of the
/// second (hier, or qccl's fp32 ring), in pairs (rank 0's first, rank 0's second, rank 1's ...).
/// True when the second's time on its slowest rank is below kTuneMargin x the first's on its
/// slowest rank. Any time missing (0) or not finite: false (keep the first, the incumbent).
constexpr float kTuneMargin = 0.95f;
bool preferSecond(const float* times, size_t nranks);

}  // namespace qccl
