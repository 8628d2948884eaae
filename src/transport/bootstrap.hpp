// NCCL-style bootstrap without MPI: a 128-byte unique id names rank 0's TCP address; every rank
// connects there once, and rank 0 hands back everyone's blob (e.g. a UCX worker address).
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qccl {

/// Opaque 128-byte id that lets ranks find each other without MPI. The C API's UniqueId has
/// the same size and bytes; bindings/c converts between them, so this layer never sees qccl.h.
struct UniqueId {
  char internal[128];
};

/// Rank 0's side: an id naming this host and a free port, with a random 64-bit nonce. The host is
/// the IPv4 address of the interface named by QCCL_SOCKET_IFNAME if set (Error(kInvalidArgument)
/// when it has none), else of the first non-loopback interface that is up, else 127.0.0.1.
/// The port is picked by the kernel and released again, so rank 0 can bind it later.
void getUniqueId(UniqueId* id);

/// An id built from a known address alone (torchrun's MASTER_ADDR and a port): the same inputs
/// give the same id, nonce included, on every rank. `host` is an IPv4 address or a host name of
/// at most 100 characters; `port` in 1..65535. Bad input throws Error(kInvalidArgument).
void uniqueIdFromAddress(UniqueId* id, const char* host, int port);

/// The fields of an id; throws Error(kInvalidArgument) when `id` was not made by the functions above.
struct BootstrapAddress {
  std::string host;
  int port = 0;
  uint64_t nonce = 0;
};
BootstrapAddress parseUniqueId(const UniqueId& id);

/// What poll() learnt since its last call.
struct LinkEvents {
  std::vector<int> dead;  ///< ranks whose process is gone
  bool abort = false;     ///< a rank's abort notice arrived
  int abortFrom = -1;
  int32_t abortCode = 0;    ///< its ErrorCode value
  std::string abortReason;  ///< its reason (at most kMaxLinkReason bytes)
};

/// The bootstrap connections, kept open after the exchange so that ranks learn when a process
/// dies: the kernel closes a dead process's sockets, and a connection that closes without a
/// goodbye means that rank is gone. They also carry abort notices: a plain TCP write reaches the
/// peer's socket buffer at once and survives the writer closing everything right after, which the
/// data transport does not promise for a message to a peer that is busy elsewhere. Rank 0 holds a
/// connection to every rank and relays each death and notice to the others; the other ranks hold
/// their connection to rank 0. A host that vanishes without closing its sockets is not seen here
/// (the operation's timeout covers that).
class BootstrapLinks {
 public:
  BootstrapLinks(int rank, int nranks);
  /// Says goodbye on every connection and closes them.
  ~BootstrapLinks();
  BootstrapLinks(const BootstrapLinks&) = delete;
  BootstrapLinks& operator=(const BootstrapLinks&) = delete;

  /// Takes ownership of the connected socket `fd` to `peer`.
  void adopt(int peer, int fd);
  /// Reads what has arrived, without blocking, into `out` (cleared first). Never throws.
  void poll(LinkEvents* out) noexcept;
  /// The ranks learnt dead since the last call (poll() without the notices).
  std::vector<int> poll() noexcept;
  /// Tells every rank (through rank 0 unless this is rank 0) that this rank aborted with `code`
  /// and `reason` (cut to kMaxLinkReason bytes). The reason travels with the notice, so a peer
  /// that hears of the abort here first still reports why.
  void sendAbort(int32_t code, const std::string& reason) noexcept;
  static constexpr size_t kMaxLinkReason = 240;

 private:
  void lost(int peer, LinkEvents* out) noexcept;
  void tell(int peer, char type, int32_t who, int32_t code = 0, const std::string& reason = {}) noexcept;

  int rank_;
  std::vector<int> fds_;            // by rank; -1 when there is none
  std::vector<std::string> inbox_;  // bytes of incomplete notices, by rank
  std::vector<pollfd> pfds_;        // reused by poll()
};

/// Collective over `nranks` ranks: returns every rank's `local` blob (at most 1 MiB), indexed by
/// rank, and the links that stay open. Rank 0 listens on the id's port (all interfaces); the
/// others connect, retrying until the deadline. Rank 0 checks the nonce, nranks and ranks: a
/// mismatch or duplicate gives Error(kMismatch) on rank 0 and on every rank that reached it;
/// missing ranks give Error(kTimeout) after `timeoutSec`. Socket failures give Error(kSystemError).
struct BootstrapResult {
  std::vector<std::string> blobs;
  std::unique_ptr<BootstrapLinks> links;
};
BootstrapResult bootstrapConnect(const UniqueId& id, int nranks, int rank, const std::string& local, double timeoutSec);

/// bootstrapConnect() without the links (they say goodbye at once).
std::vector<std::string> bootstrapAllgather(const UniqueId& id, int nranks, int rank, const std::string& local,
                                            double timeoutSec);

}  // namespace qccl
