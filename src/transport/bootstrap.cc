// Bootstrap over TCP sockets. Every socket is non-blocking and every wait is a poll() bounded by
// the caller's deadline, so a missing or stalled rank ends in an Error rather than a hang.
#include "transport/bootstrap.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/config.hpp"
#include "transport/transport.hpp"

namespace qccl {
namespace {

constexpr char kIdMagic[8] = {'Q', 'C', 'C', 'L', 'U', 'I', 'D', '1'};
constexpr size_t kHostOffset = 20;
constexpr size_t kMaxHost = 100;
constexpr uint32_t kHelloMagic = 0x48424351;  // "QCBH"
constexpr uint32_t kReplyMagic = 0x52424351;  // "QCBR"
constexpr uint32_t kMaxBlob = 1u << 20;
// How long rank 0 waits for a hello on an accepted connection: a stray client must not stall it.
constexpr double kHelloWaitSec = 10.0;
// After a mismatch, rank 0 keeps telling late ranks about it for at most this long.
constexpr double kErrorGraceSec = 3.0;

Clock::time_point after(double sec) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sec));
}

[[noreturn]] void throwSys(const std::string& what, int err) {
  throw Error(ErrorCode::kSystemError, "qccl bootstrap: " + what + ": " + std::strerror(err));
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Fd makeSocket() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throwSys("socket", errno);
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Waits for `events` on fd; false when the deadline passed first.
bool waitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throwSys("poll", errno);
  }
}

void sendAll(int fd, const void* buf, size_t len, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFd(fd, POLLOUT, deadline)) throw Error(ErrorCode::kTimeout, "qccl bootstrap: send timed out");
    } else {
      throwSys("send", errno);
    }
  }
}

void recvAll(int fd, void* buf, size_t len, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
    } else if (n == 0) {
      throw Error(ErrorCode::kRemoteError, "qccl bootstrap: the other side closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!waitFd(fd, POLLIN, deadline)) throw Error(ErrorCode::kTimeout, "qccl bootstrap: receive timed out");
    } else {
      throwSys("recv", errno);
    }
  }
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T get(int fd, Clock::time_point deadline) {
  T v;
  recvAll(fd, &v, sizeof v, deadline);
  return v;
}

std::string readBlob(int fd, Clock::time_point deadline) {
  uint32_t len = get<uint32_t>(fd, deadline);
  if (len > kMaxBlob) throw Error(ErrorCode::kMalformed, "qccl bootstrap: blob of " + std::to_string(len) + " bytes");
  std::string s(len, '\0');
  recvAll(fd, s.data(), len, deadline);
  return s;
}

sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw Error(ErrorCode::kSystemError, "qccl bootstrap: cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  sockaddr_in sa;
  std::memcpy(&sa, res->ai_addr, sizeof sa);
  ::freeaddrinfo(res);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
}

// Rank 0 may start later than the others: refused or failed attempts are retried until the deadline.
Fd connectRetry(const BootstrapAddress& a, Clock::time_point deadline) {
  sockaddr_in sa = resolve(a.host, a.port);
  int lastErr = 0;
  while (Clock::now() < deadline) {
    Fd fd = makeSocket();
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    if (rc < 0 && errno == EINPROGRESS) {
      if (waitFd(fd.get(), POLLOUT, deadline)) {
        socklen_t len = sizeof lastErr;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &lastErr, &len);
        rc = lastErr == 0 ? 0 : -1;
      } else {
        lastErr = ETIMEDOUT;
      }
    } else if (rc < 0) {
      lastErr = errno;
    }
    if (rc == 0) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error(ErrorCode::kTimeout, "qccl bootstrap: could not connect to rank 0 at " + a.host + ":" +
                                       std::to_string(a.port) + " (" + std::strerror(lastErr ? lastErr : ETIMEDOUT) +
                                       "); is rank 0 running with the same unique id?");
}

// Sockets bound by getUniqueId(), by port. Holding the port from the moment the id exists keeps
// other processes' automatic port choices off it. They are bound with SO_REUSEPORT and not
// listening: rank 0 listens on the same socket when it runs in this process, or binds the port
// again with SO_REUSEPORT when it is another process of the same user (fork + exec launchers).
std::mutex gReservedMutex;
std::map<int, Fd> gReserved;

Fd takeReserved(int port) {
  std::lock_guard<std::mutex> lock(gReservedMutex);
  auto it = gReserved.find(port);
  if (it == gReserved.end()) return Fd();
  Fd fd = std::move(it->second);
  gReserved.erase(it);
  return fd;
}

Fd listenOn(int port, int backlog) {
  Fd fd = takeReserved(port);
  if (fd.get() >= 0) {
    if (::listen(fd.get(), backlog) < 0) throwSys("listen", errno);
    return fd;
  }
  fd = makeSocket();
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) {
    throwSys("rank 0 cannot bind port " + std::to_string(port), errno);
  }
  if (::listen(fd.get(), backlog) < 0) throwSys("listen", errno);
  return fd;
}

std::string pickHost() {
  const std::string wantName = env::socketIfname();
  const char* want = wantName.c_str();
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) < 0) throwSys("getifaddrs", errno);
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    bool match = want && *want ? std::strcmp(i->ifa_name, want) == 0 : !(i->ifa_flags & IFF_LOOPBACK);
    if (!match) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    found = buf;
  }
  ::freeifaddrs(list);
  if (found.empty() && want && *want) {
    throw Error(ErrorCode::kInvalidArgument, std::string("qccl bootstrap: QCCL_SOCKET_IFNAME=") + want +
                                                 ": no IPv4 address on an interface that is up");
  }
  return found.empty() ? "127.0.0.1" : found;
}

void writeId(UniqueId* id, const std::string& host, int port, uint64_t nonce) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  std::memcpy(id->internal + 8, &nonce, sizeof nonce);
  uint16_t p = static_cast<uint16_t>(port);
  std::memcpy(id->internal + 16, &p, sizeof p);
  std::memcpy(id->internal + kHostOffset, host.data(), host.size());
}

struct Joined {
  Fd fd;
  int rank;
};

// Sends rank 0's verdict: an error, or every blob.
void sendReply(int fd, ErrorCode code, const std::string& msg, const std::vector<std::string>& blobs,
               Clock::time_point deadline) {
  std::string out;
  put<uint32_t>(out, kReplyMagic);
  put<int32_t>(out, static_cast<int32_t>(code));
  if (code != ErrorCode::kSuccess) {
    put<uint32_t>(out, static_cast<uint32_t>(msg.size()));
    out += msg;
  } else {
    for (const auto& b : blobs) {
      put<uint32_t>(out, static_cast<uint32_t>(b.size()));
      out += b;
    }
  }
  sendAll(fd, out.data(), out.size(), deadline);
}

// Rank 0's half. Stray connections (wrong magic, silence, another job's nonce) are dropped and do
// not count; a rank of this job with a different nranks or a bad rank fails the whole bootstrap.
std::vector<std::string> rootGather(const BootstrapAddress& a, int nranks, const std::string& local,
                                    Clock::time_point deadline, BootstrapLinks* links) {
  std::vector<std::string> blobs(nranks);
  std::vector<char> seen(nranks, 0);
  blobs[0] = local;
  seen[0] = 1;
  if (nranks == 1) return blobs;
  Fd listener = listenOn(a.port, std::max(nranks, 16));
  std::vector<Joined> joined;
  ErrorCode err = ErrorCode::kSuccess;
  std::string errMsg;
  Clock::time_point until = deadline;
  // Ranks that claim a larger nranks are waited for too (within the grace), so that they hear
  // about the mismatch instead of timing out.
  int expect = nranks;
  while (static_cast<int>(joined.size()) < expect - 1 && waitFd(listener.get(), POLLIN, until)) {
    Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) continue;
    int peerRank = -1, peerN = -1;
    std::string blob;
    try {
      auto helloDeadline = std::min(deadline, after(kHelloWaitSec));
      if (get<uint32_t>(fd.get(), helloDeadline) != kHelloMagic) continue;
      if (get<uint64_t>(fd.get(), helloDeadline) != a.nonce) {
        sendReply(fd.get(), ErrorCode::kMismatch, "rank 0 serves a different unique id", {}, helloDeadline);
        continue;
      }
      peerN = get<int32_t>(fd.get(), helloDeadline);
      peerRank = get<int32_t>(fd.get(), helloDeadline);
      blob = readBlob(fd.get(), helloDeadline);
    } catch (const Error&) {
      continue;  // not one of ours, or it went away: it does not count
    }
    std::string bad;
    if (peerN > expect && peerN <= (1 << 16)) expect = peerN;
    if (peerN != nranks) {
      bad = "rank " + std::to_string(peerRank) + " was started with nranks=" + std::to_string(peerN) +
            " but rank 0 with nranks=" + std::to_string(nranks);
    } else if (peerRank <= 0 || peerRank >= nranks) {
      bad = "rank " + std::to_string(peerRank) + " is out of range for nranks=" + std::to_string(nranks);
    } else if (seen[peerRank]) {
      bad = "two processes joined as rank " + std::to_string(peerRank);
    }
    if (!bad.empty() && err == ErrorCode::kSuccess) {
      err = ErrorCode::kMismatch;
      errMsg = "qccl bootstrap: " + bad;
      until = std::min(deadline, after(kErrorGraceSec));
    }
    if (peerRank > 0 && peerRank < nranks && !seen[peerRank]) {
      seen[peerRank] = 1;
      blobs[peerRank] = std::move(blob);
    }
    joined.push_back(Joined{std::move(fd), peerRank});
  }
  if (err == ErrorCode::kSuccess && static_cast<int>(joined.size()) < nranks - 1) {
    err = ErrorCode::kTimeout;
    errMsg = "qccl bootstrap: only " + std::to_string(joined.size() + 1) + " of " + std::to_string(nranks) +
             " ranks joined rank 0 before the timeout";
  }
  for (auto& j : joined) {
    try {
      sendReply(j.fd.get(), err, errMsg, blobs, after(kHelloWaitSec));
    } catch (const Error&) {
      // That rank is gone; the others still get their answer, and UCX will report the dead peer.
    }
  }
  if (err != ErrorCode::kSuccess) throw Error(err, errMsg);
  for (auto& j : joined) links->adopt(j.rank, j.fd.release());
  return blobs;
}

std::vector<std::string> peerGather(const BootstrapAddress& a, int nranks, int rank, const std::string& local,
                                    Clock::time_point deadline, BootstrapLinks* links) {
  Fd fd = connectRetry(a, deadline);
  std::string hello;
  put<uint32_t>(hello, kHelloMagic);
  put<uint64_t>(hello, a.nonce);
  put<int32_t>(hello, nranks);
  put<int32_t>(hello, rank);
  put<uint32_t>(hello, static_cast<uint32_t>(local.size()));
  hello += local;
  sendAll(fd.get(), hello.data(), hello.size(), deadline);
  try {
    if (get<uint32_t>(fd.get(), deadline) != kReplyMagic) {
      throw Error(ErrorCode::kMalformed, "qccl bootstrap: rank 0 sent a malformed reply");
    }
    int32_t code = get<int32_t>(fd.get(), deadline);
    if (code != 0) {
      std::string msg = readBlob(fd.get(), deadline);
      bool known = code > 0 && code <= static_cast<int32_t>(ErrorCode::kTransportError);
      throw Error(known ? static_cast<ErrorCode>(code) : ErrorCode::kRemoteError, msg + " (reported by rank 0)");
    }
    std::vector<std::string> blobs(nranks);
    for (auto& b : blobs) b = readBlob(fd.get(), deadline);
    links->adopt(0, fd.release());
    return blobs;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kTimeout) {
      throw Error(ErrorCode::kTimeout, "qccl bootstrap: rank " + std::to_string(rank) +
                                           " joined rank 0 but got no answer before the timeout "
                                           "(are all " +
                                           std::to_string(nranks) + " ranks started?)");
    }
    throw;
  }
}

}  // namespace

void getUniqueId(UniqueId* id) {
  QCCL_CHECK(id != nullptr, ErrorCode::kInvalidArgument, "getUniqueId: null id");
  std::string host = pickHost();
  Fd fd = makeSocket();
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) throwSys("bind", errno);
  socklen_t len = sizeof sa;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) < 0) throwSys("getsockname", errno);
  std::random_device rd;
  uint64_t nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                   static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                   (static_cast<uint64_t>(::getpid()) << 16);
  writeId(id, host, ntohs(sa.sin_port), nonce);
  std::lock_guard<std::mutex> lock(gReservedMutex);
  gReserved[ntohs(sa.sin_port)] = std::move(fd);
}

void uniqueIdFromAddress(UniqueId* id, const char* host, int port) {
  QCCL_CHECK(id != nullptr && host != nullptr, ErrorCode::kInvalidArgument, "uniqueIdFromAddress: null argument");
  size_t len = std::strlen(host);
  QCCL_CHECK(len > 0 && len <= kMaxHost, ErrorCode::kInvalidArgument,
             "uniqueIdFromAddress: host must have 1 to 100 characters");
  QCCL_CHECK(port > 0 && port < 65536, ErrorCode::kInvalidArgument,
             "uniqueIdFromAddress: port " + std::to_string(port) + " is not in 1..65535");
  // FNV-1a over "host:port": the same on every rank, different across jobs on other ports.
  std::string key = std::string(host) + ":" + std::to_string(port);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  writeId(id, host, port, h);
}

BootstrapAddress parseUniqueId(const UniqueId& id) {
  const char* p = id.internal;
  QCCL_CHECK(std::memcmp(p, kIdMagic, sizeof kIdMagic) == 0, ErrorCode::kInvalidArgument,
             "not a qccl unique id (bad magic): make it with qcclGetUniqueId or UniqueIdFromAddress");
  BootstrapAddress a;
  std::memcpy(&a.nonce, p + 8, sizeof a.nonce);
  uint16_t port = 0;
  std::memcpy(&port, p + 16, sizeof port);
  a.port = port;
  const char* host = p + kHostOffset;
  size_t len = strnlen(host, kMaxHost + 1);
  QCCL_CHECK(len > 0 && len <= kMaxHost && a.port > 0, ErrorCode::kInvalidArgument,
             "malformed qccl unique id (host or port)");
  a.host.assign(host, len);
  return a;
}

BootstrapResult bootstrapConnect(const UniqueId& id, int nranks, int rank, const std::string& local,
                                 double timeoutSec) {
  QCCL_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, ErrorCode::kInvalidArgument,
             "bootstrap: rank " + std::to_string(rank) + " is not in [0, nranks=" + std::to_string(nranks) + ")");
  QCCL_CHECK(timeoutSec > 0, ErrorCode::kInvalidArgument, "bootstrap: timeout must be positive");
  QCCL_CHECK(local.size() <= kMaxBlob, ErrorCode::kInvalidArgument, "bootstrap: blob larger than 1 MiB");
  BootstrapAddress a = parseUniqueId(id);
  auto deadline = after(timeoutSec);
  BootstrapResult out;
  out.links = std::make_unique<BootstrapLinks>(rank, nranks);
  out.blobs = rank == 0 ? rootGather(a, nranks, local, deadline, out.links.get())
                        : peerGather(a, nranks, rank, local, deadline, out.links.get());
  return out;
}

std::vector<std::string> bootstrapAllgather(const UniqueId& id, int nranks, int rank, const std::string& local,
                                            double timeoutSec) {
  return bootstrapConnect(id, nranks, rank, local, timeoutSec).blobs;
}

// Liveness notices on the kept connections: one type byte, the int32 rank it is about, an int32
// error code. 'B': the sender leaves in good order. 'D' (from rank 0 only): that rank died. 'A':
// that rank aborted; a uint16 length and that many bytes of reason follow the nine bytes.
constexpr size_t kNoticeBytes = 9;
constexpr size_t kReasonLenBytes = 2;

BootstrapLinks::BootstrapLinks(int rank, int nranks) : rank_(rank), fds_(nranks, -1), inbox_(nranks) {}

BootstrapLinks::~BootstrapLinks() {
  // The hub forwards deaths and notices it has not relayed yet before it says goodbye: after the
  // goodbye the others could only learn of them by timing out.
  if (rank_ == 0) {
    LinkEvents ignored;
    poll(&ignored);
  }
  for (size_t p = 0; p < fds_.size(); ++p) {
    if (fds_[p] < 0) continue;
    tell(static_cast<int>(p), 'B', rank_);
    ::close(fds_[p]);
  }
}

void BootstrapLinks::adopt(int peer, int fd) {
  if (peer < 0 || peer >= static_cast<int>(fds_.size())) {
    ::close(fd);
    return;
  }
  if (fds_[peer] >= 0) ::close(fds_[peer]);
  fds_[peer] = fd;
}

// A notice: its type ('B' goodbye, 'D' death, 'A' abort), the rank it is about, an error code;
// an abort notice then carries its reason.
void BootstrapLinks::tell(int peer, char type, int32_t who, int32_t code, const std::string& reason) noexcept {
  char msg[kNoticeBytes + kReasonLenBytes + kMaxLinkReason];
  msg[0] = type;
  std::memcpy(msg + 1, &who, sizeof who);
  std::memcpy(msg + 5, &code, sizeof code);
  size_t len = kNoticeBytes;
  if (type == 'A') {
    const uint16_t n = static_cast<uint16_t>(std::min(reason.size(), kMaxLinkReason));
    std::memcpy(msg + kNoticeBytes, &n, sizeof n);
    std::memcpy(msg + kNoticeBytes + kReasonLenBytes, reason.data(), n);
    len += kReasonLenBytes + n;
  }
  // A few hundred bytes on an idle socket: a full send buffer would mean the peer is stuck anyway.
  (void)::send(fds_[peer], msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void BootstrapLinks::sendAbort(int32_t code, const std::string& reason) noexcept {
  for (size_t p = 0; p < fds_.size(); ++p) {
    if (fds_[p] >= 0) tell(static_cast<int>(p), 'A', rank_, code, reason);
  }
}

void BootstrapLinks::lost(int peer, LinkEvents* out) noexcept {
  ::close(fds_[peer]);
  fds_[peer] = -1;
  out->dead.push_back(peer);
  if (rank_ != 0) return;
  for (size_t p = 0; p < fds_.size(); ++p) {
    if (fds_[p] >= 0) tell(static_cast<int>(p), 'D', peer);
  }
}

std::vector<int> BootstrapLinks::poll() noexcept {
  LinkEvents ev;
  poll(&ev);
  return std::move(ev.dead);
}

void BootstrapLinks::poll(LinkEvents* out) noexcept {
  out->dead.clear();
  out->abort = false;
  out->abortReason.clear();
  try {
    pfds_.clear();
    for (size_t p = 0; p < fds_.size(); ++p) {
      if (fds_[p] >= 0) pfds_.push_back(pollfd{fds_[p], POLLIN, 0});
    }
    if (pfds_.empty() || ::poll(pfds_.data(), pfds_.size(), 0) <= 0) return;
    for (const pollfd& pf : pfds_) {
      if (pf.revents == 0) continue;
      int peer = static_cast<int>(std::find(fds_.begin(), fds_.end(), pf.fd) - fds_.begin());
      char buf[512];
      ssize_t n = ::recv(pf.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n > 0) inbox_[peer].append(buf, static_cast<size_t>(n));
      bool bye = false;
      while (inbox_[peer].size() >= kNoticeBytes && !bye) {
        const std::string& in = inbox_[peer];
        int32_t who = -1, code = 0;
        std::memcpy(&who, in.data() + 1, sizeof who);
        std::memcpy(&code, in.data() + 5, sizeof code);
        const char type = in[0];
        size_t len = kNoticeBytes;
        std::string reason;
        if (type == 'A') {
          if (in.size() < kNoticeBytes + kReasonLenBytes) break;  // the rest is still on its way
          uint16_t n = 0;
          std::memcpy(&n, in.data() + kNoticeBytes, sizeof n);
          // A length beyond the bound is not a notice this code wrote: the link is garbage.
          if (n > kMaxLinkReason) {
            n = 0;
            code = 0;
          }
          len += kReasonLenBytes + n;
          if (in.size() < len) break;
          reason.assign(in.data() + kNoticeBytes + kReasonLenBytes, n);
        }
        inbox_[peer].erase(0, len);
        if (type == 'B') bye = true;
        bool valid = who >= 0 && who < static_cast<int>(fds_.size()) && who != rank_;
        if (type == 'D' && peer == 0 && valid) out->dead.push_back(who);
        // Rank 0 hears notices from the rank itself and relays them; the others hear them from 0.
        if (type == 'A' && valid && (peer == 0 || (rank_ == 0 && who == peer))) {
          if (!out->abort) {
            out->abort = true;
            out->abortFrom = who;
            out->abortCode = code;
            out->abortReason = reason;
          }
          if (rank_ == 0) {
            for (size_t p = 0; p < fds_.size(); ++p)
              if (fds_[p] >= 0 && static_cast<int>(p) != who) tell(static_cast<int>(p), 'A', who, code, reason);
          }
        }
      }
      if (bye) {
        ::close(fds_[peer]);
        fds_[peer] = -1;
      } else if (n <= 0) {
        lost(peer, out);
      }
    }
  } catch (...) {
    // Allocation failure: liveness is best effort, the operation's timeout still applies.
  }
}

}  // namespace qccl
