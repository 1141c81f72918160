// fake_nic_fabric.cc: the sockets and the thread of the cross-process wire
// (fake_nic_fabric.h). What the frames mean is fake_nic_remote.cc's.
//
// Why a Unix-domain stream socket per Link: finding the listener, ordering,
// EOF on the peer's death (SIGKILL included: the kernel closes its
// descriptors) and no coordinator. Why shared-memory rings for the frames
// (the default transport): a socket costs a system call each way and a
// wake-up of the peer's fabric thread per message (the bare socketpair
// ping-pong alone misses the 5 us round trip here), while a ring polled by
// the application's own PollCq costs neither. The figures that back the
// choice are in docs/two-processes.md ("Why shared-memory rings with a
// Unix-domain socket beside them") and tools/bench/fabric_bench.cc.

#include "nic/fake_nic_fabric.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "nic/fake_nic_fabric_sequence.h"
#include "nic/unix_address.h"

namespace rpma_harness {
namespace fake_nic_internal {

namespace {

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// ---- shared-memory rings ----------------------------------------------------
//
// The memfd holds two byte rings: ring 0 carries the dialer's frames, ring 1
// the acceptor's. Each is a RingHeader (own page) and kRingCapacity bytes.
// `head` and `tail` count bytes in total (they never wrap); the producer
// owns head, the consumer tail, and each keeps its own copy: a value read
// from the shared header is the peer's word and is checked before use
// (0 <= head - tail <= capacity), exactly as the socket path checks a
// frame's length against kMaxFrameBody.
//
// No lost wake-up (the classic order): the consumer stores
// consumer_sleeping = 1, then re-reads head, and only then sleeps in poll()
// on the socket; the producer stores head, then writes a 1-byte doorbell on
// the socket if consumer_sleeping is set. The full fence between each
// store and load is their seq_cst order (a store and a load, both seq_cst,
// cannot both miss the other side's; atomic_thread_fence would do the
// same, but ThreadSanitizer does not support it). The
// same pair of orders, the other way round, guards producer_waiting (the
// producer found the ring full and waits for the consumer to free space).

// While the application polled within this window, the fabric thread does
// not advertise sleep (the producer rings no doorbell) and wakes after it
// at most, so a message is never stranded when the polling stops.
constexpr int64_t kPollerWindowNs = 200 * 1000;
std::atomic<int64_t> g_poller_window_ns{kPollerWindowNs};
constexpr uint64_t kRingCapacity = kShmRingCapacity;
constexpr size_t kRingHeaderSize = kShmRingHeaderSize;
using RingHeader = ShmRingHeader;
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the rings need address-free atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "the rings need address-free atomics");
static_assert(sizeof(RingHeader) <= kRingHeaderSize, "header page");

struct Ring {
  RingHeader* header = nullptr;
  uint8_t* data = nullptr;
};

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Process-wide counts of the shared-memory transport, printed at a
// Fabric's end with RPMA_HARNESS_FABRIC_STATS=1 (how often the doorbell
// path ran, who handled the frames).
struct ShmStats {
  std::atomic<uint64_t> doorbells{0};
  std::atomic<uint64_t> room_doorbells{0};  // of those: "the ring has room"
  std::atomic<uint64_t> full{0};       // a frame found the ring full (queued)
  std::atomic<uint64_t> pads{0};       // filler frames put before a frame
  std::atomic<uint64_t> assembled{0};  // frames taken copied (wrapped)
  std::atomic<uint64_t> frames_inline{0};  // by DrainInline (PollCq)
  std::atomic<uint64_t> frames_thread{0};  // by the fabric thread
};
ShmStats g_shm_stats;

// The Fabric whose frame handlers this thread runs now (HandOver).
thread_local Fabric* g_draining = nullptr;

// A full socket buffer already holds doorbells the peer has not read: it
// wakes anyway, so EAGAIN is fine.
void Doorbell(int fd) {
  g_shm_stats.doorbells.fetch_add(1, std::memory_order_relaxed);
  const char byte = 0;
  ssize_t n = send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)n;
}

}  // namespace

struct ShmLink {
  ~ShmLink() {
    if (map != nullptr) munmap(map, kShmMapSize);
  }
  uint64_t id = 0;
  void* map = nullptr;
  Ring in, out;
  // The Link's socket. Closed only after `dead` is set under drain_mu, so
  // a drain holding drain_mu may use it (doorbell, shutdown).
  int fd = -1;
  std::mutex drain_mu;
  // Consumer state (drain_mu).
  uint64_t in_tail = 0;
  std::atomic<uint64_t> taken{0};  // in_tail, for a lock-free "has data?"
  uint8_t header_bytes[sizeof(FrameHeader)];
  size_t header_have = 0;
  bool in_body = false;
  uint64_t body_want = 0;
  Frame partial;
  bool dead = false;
  std::atomic<bool> corrupt{false};
  // Bytes put in the out ring and not yet published (Fabric::mu_).
  bool publish_deferred = false;
  // Among the unpublished bytes is a frame the peer's NIC must act on
  // without its program (NeedsNoHostCpu): the publish rings the doorbell
  // even when the peer's fabric thread sleeps only briefly (Fabric::mu_).
  bool ring_anyway = false;
  // What the fabric thread saw at its last look (that thread only).
  bool thread_saw_data = false;
  uint64_t thread_taken = 0;
  // Producer state (Fabric::mu_).
  uint64_t out_head = 0;
  // The consumer's tail as last read. The shared tail is read (and
  // checked) at the link's first frame and then only when this copy says
  // the ring lacks room: a frame then moves no cache line of the tail
  // between the two processes (the producer does not read the line the
  // consumer writes at every drain). A stale copy only underestimates the
  // room.
  uint64_t out_tail_seen = 0;
  bool out_tail_read = false;

  // A hint (the peer may lie about head): a drain checks for real.
  bool HasData() const {
    return in.header->head.load(std::memory_order_seq_cst) !=
           taken.load(std::memory_order_relaxed);
  }
};

bool SendByteWithFd(int socket, char byte, int fd) {
  iovec iov = {&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof(control));
  msghdr message;
  memset(&message, 0, sizeof(message));
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&message);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(socket, &message, MSG_NOSIGNAL) == 1;
}

namespace {

std::shared_ptr<ShmLink> MapRings(int memfd, bool dialer) {
  void* map =
      mmap(nullptr, kShmMapSize, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (map == MAP_FAILED) return nullptr;
  auto shm = std::make_shared<ShmLink>();
  shm->map = map;
  auto* base = static_cast<uint8_t*>(map);
  Ring ring0{reinterpret_cast<RingHeader*>(base), base + 2 * kRingHeaderSize};
  Ring ring1{reinterpret_cast<RingHeader*>(base + kRingHeaderSize),
             base + 2 * kRingHeaderSize + kRingCapacity};
  shm->out = dialer ? ring0 : ring1;
  shm->in = dialer ? ring1 : ring0;
  return shm;
}

// Dialer: a sealed memfd (the peer can neither shrink it under our mapping,
// which would SIGBUS us, nor grow it) mapped here and passed as the first
// byte of the stream. Null when any step fails: the link uses the socket.
std::shared_ptr<ShmLink> OfferRings(int fd) {
  const int memfd =
      memfd_create("rpma-harness-link", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0) return nullptr;
  std::shared_ptr<ShmLink> shm;
  if (ftruncate(memfd, kShmMapSize) == 0 &&
      fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ==
          0) {
    shm = MapRings(memfd, true);
  }
  if (shm == nullptr) {
    close(memfd);
    return nullptr;
  }
  // Until the peer's fabric thread runs, it counts as asleep: doorbells.
  shm->in.header->consumer_sleeping.store(1);
  shm->out.header->consumer_sleeping.store(1);
  // A fresh connection's buffer is empty: one byte goes at once.
  const bool sent = SendByteWithFd(fd, 'R', memfd);
  close(memfd);
  return sent ? shm : nullptr;
}

// Producer: the ring's free bytes, at least `want` of them if the consumer
// has freed them (the shared tail is read again, and checked, when the
// copy of it says less; an impossible one sets `corrupt`: 0). REQUIRES
// Fabric::mu_.
uint64_t RingRoom(ShmLink* shm, uint64_t want) {
  uint64_t used = shm->out_head - shm->out_tail_seen;
  if (!shm->out_tail_read || kRingCapacity - used < want) {
    const uint64_t tail = shm->out.header->tail.load(std::memory_order_acquire);
    used = shm->out_head - tail;
    if (used > kRingCapacity) {
      shm->corrupt.store(true);
      return 0;
    }
    shm->out_tail_seen = tail;
    shm->out_tail_read = true;
  }
  return kRingCapacity - used;
}

// Producer: before a frame of `total` bytes that would wrap, fills the
// ring's end with a kFramePad frame if there is room for both, so the
// frame lies whole at offset 0 and the consumer hands it over in place
// (without, a 1 MiB write in the 2 MiB ring wrapped every other time and
// was copied once more to be assembled). A frame that does not fit with
// the filler now (the ring holds unread frames, or the frame is nearly the
// ring's size) wraps as before. REQUIRES Fabric::mu_.
void RingPadToWrap(ShmLink* shm, uint64_t total) {
  const uint64_t to_end = kRingCapacity - shm->out_head % kRingCapacity;
  if (total <= to_end || to_end < sizeof(FrameHeader) ||
      to_end + total > kRingCapacity ||
      RingRoom(shm, to_end + total) < to_end + total) {
    return;
  }
  const FrameHeader pad{static_cast<uint32_t>(to_end - sizeof(FrameHeader)),
                        kFramePad};
  memcpy(shm->out.data + shm->out_head % kRingCapacity, &pad, sizeof(pad));
  shm->out_head += to_end;
  g_shm_stats.pads.fetch_add(1, std::memory_order_relaxed);
}

// Producer: copies what fits; REQUIRES Fabric::mu_. Sets `corrupt` when the
// consumer's tail is impossible.
size_t RingPut(ShmLink* shm, const void* data, size_t length) {
  if (length == 0) return 0;
  const uint64_t room = RingRoom(shm, length);  // 0 when corrupt
  const size_t n = static_cast<size_t>(std::min<uint64_t>(length, room));
  const size_t at = static_cast<size_t>(shm->out_head % kRingCapacity);
  const size_t first = std::min(n, static_cast<size_t>(kRingCapacity - at));
  const auto* p = static_cast<const uint8_t*>(data);
  memcpy(shm->out.data + at, p, first);
  memcpy(shm->out.data, p + first, n - first);
  shm->out_head += n;
  return n;
}

// Producer: makes what RingPut copied visible, then rings if the consumer
// sleeps (a seq_cst store, then a seq_cst load: see the order above).
void RingPublish(ShmLink* shm) {
  // seq_cst store and load (not a fence: TSan has none): in their single
  // total order with the consumer's seq_cst flag store and head load, one
  // side sees the other's write.
  shm->out.header->head.store(shm->out_head, std::memory_order_seq_cst);
  const bool ring_anyway = shm->ring_anyway;
  shm->ring_anyway = false;
  if (shm->out.header->consumer_sleeping.load(std::memory_order_seq_cst) != 0 ||
      ring_anyway) {
    Doorbell(shm->fd);
  }
}

// A frame the peer's NIC must act on though its program may never call
// into the library again: a request that completes nothing at the
// responder -- an RDMA WRITE lands, a READ or an atomic is answered --
// which a real NIC does with no host CPU (IB spec 9.4.3-9.4.5: neither
// consumes a receive WQE nor makes a responder completion). A program may
// wait for such a write by spinning on its own buffer, as perftest's
// ib_write_lat does (perftest_resources.c run_iter_lat_write), without
// polling a CQ: the peer's fabric thread must take the frame now, not at
// the end of its poll-mode window. Everything else makes a completion
// the peer's program polls or waits for, which drains the ring itself.
bool NeedsNoHostCpu(uint32_t type, const void* body, size_t body_len) {
  if (type != kFrameRequest || body_len < sizeof(RequestFrame)) return false;
  RequestFrame request;
  memcpy(&request, body, sizeof(request));
  switch (request.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return true;
    default:
      return false;
  }
}

void ReportCorrupt(ShmLink* shm, const char* what, uint64_t a, uint64_t b) {
  if (shm->corrupt.exchange(true) && what == nullptr) return;
  fprintf(stderr,
          "fake_nic fabric: link %llu: the peer's shared ring is corrupt (%s: "
          "%llu, %llu; ring capacity %llu): link closed\n",
          static_cast<unsigned long long>(shm->id), what,
          static_cast<unsigned long long>(a),
          static_cast<unsigned long long>(b),
          static_cast<unsigned long long>(kRingCapacity));
}

// Consumer: hands every whole frame the ring holds to `sink` (a callable
// taking a const FrameView&), in ring order. A frame that lies whole and
// unwrapped in the ring goes in place; one split by the wrap, or not all
// there yet, is assembled in `partial` (a partial one stays there). The
// ring's bytes are given back (the tail) only after the sink returns, so
// the producer cannot reuse them while a handler reads them. REQUIRES
// shm->drain_mu. On a corrupt ring: a message, the socket shut down (both
// fabric threads then see the link end), false.
// `released` runs after each tail store (the handlers' deferred answers go
// out then: Fabric::HandOver).
template <typename Sink, typename Released>
bool TakeFrames(ShmLink* shm, Sink&& sink, Released&& released) {
  if (shm->dead || shm->corrupt.load()) return true;
  bool freed = false;
  bool ok = true;
  const uint8_t* data = shm->in.data;
  for (;;) {
    const uint64_t head = shm->in.header->head.load(std::memory_order_acquire);
    const uint64_t available = head - shm->in_tail;
    if (available > kRingCapacity) {
      ReportCorrupt(shm, "head - tail", head, shm->in_tail);
      ok = false;
      break;
    }
    if (available == 0) break;
    uint64_t left = available;
    while (left > 0 && ok) {
      const size_t at = static_cast<size_t>(shm->in_tail % kRingCapacity);
      const size_t contiguous = static_cast<size_t>(kRingCapacity - at);
      if (!shm->in_body && shm->header_have == 0 &&
          left >= sizeof(FrameHeader) && contiguous >= sizeof(FrameHeader)) {
        // The header is copied out once; only the copy is trusted.
        FrameHeader header;
        memcpy(&header, data + at, sizeof(header));
        const uint64_t whole = sizeof(header) + uint64_t{header.body_length};
        if (header.body_length <= kMaxFrameBody && whole <= left &&
            whole <= contiguous) {
          if (header.type != kFramePad) {
            sink(FrameView{header.type, data + at + sizeof(header),
                           header.body_length});
          }
          shm->in_tail += whole;
          left -= whole;
          continue;
        }
      }
      size_t n;
      if (!shm->in_body) {
        n = std::min<size_t>({static_cast<size_t>(left),
                              sizeof(FrameHeader) - shm->header_have,
                              contiguous});
        memcpy(shm->header_bytes + shm->header_have, data + at, n);
        shm->header_have += n;
        if (shm->header_have == sizeof(FrameHeader)) {
          FrameHeader header;
          memcpy(&header, shm->header_bytes, sizeof(header));
          shm->header_have = 0;
          // As the socket path: no frame is longer than kMaxFrameBody.
          if (header.body_length > kMaxFrameBody) {
            ReportCorrupt(shm, "frame body length", header.body_length,
                          kMaxFrameBody);
            ok = false;
          }
          shm->in_body = true;
          shm->body_want = header.body_length;
          shm->partial.type = header.type;
          shm->partial.body.clear();
          // Grown as bytes come: a lying length costs no memory up front.
          shm->partial.body.reserve(
              std::min<uint64_t>(header.body_length, uint64_t{4} << 20));
        }
      } else {
        n = static_cast<size_t>(std::min<uint64_t>(
            {left, shm->body_want - shm->partial.body.size(), contiguous}));
        shm->partial.body.insert(shm->partial.body.end(), data + at,
                                 data + at + n);
      }
      shm->in_tail += n;
      left -= n;
      if (ok && shm->in_body && shm->partial.body.size() == shm->body_want) {
        if (shm->partial.type != kFramePad) {
          g_shm_stats.assembled.fetch_add(1, std::memory_order_relaxed);
          sink(shm->partial.view());
        }
        // A large frame's buffer is not kept for the link's life.
        if (shm->partial.body.capacity() > (size_t{64} << 10)) {
          shm->partial.body = std::vector<uint8_t>();
        }
        shm->partial.body.clear();
        shm->in_body = false;
      }
    }
    shm->in.header->tail.store(shm->in_tail, std::memory_order_seq_cst);
    shm->taken.store(shm->in_tail, std::memory_order_relaxed);
    freed = true;
    released();
    if (!ok) break;
  }
  if (freed) {
    // The seq_cst tail store above, then this seq_cst load (the order).
    if (shm->in.header->producer_waiting.load(std::memory_order_seq_cst) != 0 &&
        shm->in.header->producer_waiting.exchange(0) != 0) {
      g_shm_stats.room_doorbells.fetch_add(1, std::memory_order_relaxed);
      Doorbell(shm->fd);
    }
  }
  if (!ok) shutdown(shm->fd, SHUT_RDWR);
  return ok;
}

}  // namespace

Fabric::Fabric(std::string dir, OnFrame on_frame, OnClosed on_closed)
    : dir_(std::move(dir)),
      on_frame_(std::move(on_frame)),
      on_closed_(std::move(on_closed)) {
  // Read once per NIC; a process's peers may pick the other transport (the
  // acceptor follows the dialer).
  // env RPMA_HARNESS_FABRIC_TRANSPORT=shm|socket: how this process's NIC
  //   carries frames to its fabric peers: shared-memory rings with a socket
  //   doorbell (shm, the default) or the Unix socket alone. Any other value is
  //   reported and shm is used.
  const char* transport = getenv("RPMA_HARNESS_FABRIC_TRANSPORT");
  if (transport != nullptr && strcmp(transport, "socket") == 0) {
    use_shm_ = false;
  } else if (transport != nullptr && *transport != '\0' &&
             strcmp(transport, "shm") != 0) {
    fprintf(stderr,
            "fake_nic fabric: RPMA_HARNESS_FABRIC_TRANSPORT=%s is neither "
            "'shm' nor 'socket': using shm\n",
            transport);
  }
}

void Fabric::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  // A ReportWait waiting for a flush the stopped thread will never do.
  flushed_cv_.notify_all();
  Wake();
  if (thread_.joinable()) thread_.join();
}

namespace {
// RPMA_HARNESS_FABRIC_STATS=1 (see ~Fabric): the counts at the end, and
// every failed dial said.
bool FabricStatsOn() {
  const char* stats = getenv("RPMA_HARNESS_FABRIC_STATS");
  return stats != nullptr && strcmp(stats, "1") == 0;
}
}  // namespace

Fabric::~Fabric() {
  Stop();
  if (node_ != 0) Unpublish("node", static_cast<uint16_t>(node_));
  if (node_lock_fd_ >= 0) close(node_lock_fd_);  // the number is free again
  // env RPMA_HARNESS_FABRIC_STATS=1|0: 1: at the end of each fabric, print
  //   the shared-memory transport's counts (doorbells, who handled the
  //   frames) and say every failed dial with what its name was then; 0 or
  //   empty: not. Any other value is reported, not printed.
  const char* stats = getenv("RPMA_HARNESS_FABRIC_STATS");
  if (stats != nullptr && *stats != '\0' && strcmp(stats, "0") != 0 &&
      strcmp(stats, "1") != 0) {
    fprintf(stderr,
            "fake_nic fabric: RPMA_HARNESS_FABRIC_STATS=%s: expected 1 (print "
            "the counts) or 0; not printing them\n",
            stats);
  }
  if (FabricStatsOn()) {
    fprintf(stderr,
            "fake_nic fabric stats (pid %d): %llu doorbells sent (%llu of "
            "them for room), %llu frames found the ring full, %llu filler "
            "frames sent, %llu frames taken assembled (wrapped or partial), "
            "%llu ring frames handled by PollCq, %llu by the fabric thread\n",
            static_cast<int>(getpid()),
            static_cast<unsigned long long>(g_shm_stats.doorbells.load()),
            static_cast<unsigned long long>(g_shm_stats.room_doorbells.load()),
            static_cast<unsigned long long>(g_shm_stats.full.load()),
            static_cast<unsigned long long>(g_shm_stats.pads.load()),
            static_cast<unsigned long long>(g_shm_stats.assembled.load()),
            static_cast<unsigned long long>(g_shm_stats.frames_inline.load()),
            static_cast<unsigned long long>(g_shm_stats.frames_thread.load()));
  }
  for (auto& [id, link] : links_) close(link.fd);
  for (auto& [path, fd] : listeners_) {
    close(fd);
    unlink(path.c_str());
  }
  for (int fd : retired_listeners_) close(fd);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (seq_fd_ >= 0) close(seq_fd_);
}

std::string Fabric::ListenerPath(const std::string& dir,
                                 const std::string& addr, uint16_t port) {
  return dir + "/l-" + addr + "-" + std::to_string(port);
}

bool Fabric::AcceptedPeerAllowed(int fd) {
  std::string why;
  if (FabricPeerAllowed(fd, trust_, &why)) return true;
  fprintf(stderr, "fake_nic fabric: refusing a connection to %s: %s\n",
          dir_.c_str(), why.c_str());
  close(fd);
  return false;
}

int Fabric::Start() {
  const int err = Prepare();
  if (err != 0) return err;
  StartThread();
  return 0;
}

void Fabric::StartThread() {
  thread_ = std::thread([this] { Run(); });
}

int Fabric::CheckDirectory(FabricTrust* trust) const {
  std::string why;
  const int err = CheckFabricDirectory(dir_, trust, &why);
  if (err != 0) {
    fprintf(stderr, "fake_nic fabric: refusing %s: %s\n", dir_.c_str(),
            why.c_str());
  }
  return err;
}

int Fabric::Prepare() {
  trust_ = FabricTrustFromEnvironment();
  if (const int err = CheckDirectory(&trust_)) return err;
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return errno;
  return 0;
}

void SetPollerWindowForTesting(int64_t ns) {
  g_poller_window_ns.store(ns > 0 ? ns : kPollerWindowNs,
                           std::memory_order_relaxed);
}

void Fabric::BlockingWaitBegins() {
  // Always a new epoch: the thread's next look must not count the polls
  // this thread made just before it blocked. Counting them put the fabric
  // thread in poll mode (no doorbell asked for, a 200 us ppoll) for a
  // thread that was asleep whenever that look came after this call and
  // poll_mode_ still read false here: two-process blocking round trips
  // waited out that window (program_bench processes_blocking ~300 us).
  block_epoch_.fetch_add(1, std::memory_order_relaxed);
  if (!poll_mode_.load(std::memory_order_relaxed)) return;
  Wake();
}

void Fabric::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

// Every listen checks the directory again under the rules joining applied
// (fake_nic_fabric_trust.h): one swapped for a symbolic link or opened to
// others since is refused, and one removed since this NIC joined (a /tmp
// cleaner; the chaos test's remove_fabric) is made again, 0700 -- "created
// if missing" holds for a listen at any time. A removal racing the listen
// itself is retried twice.
int Fabric::Publish(const std::string& addr, uint16_t port) {
  int err = ENOENT;
  for (int attempt = 0; attempt < 3 && err == ENOENT; ++attempt) {
    FabricTrust trust = trust_;  // the fabric thread reads trust_
    if (const int refused = CheckDirectory(&trust)) return refused;
    err = PublishIn(addr, port);
  }
  if (err == ENOENT) {
    fprintf(stderr, "fake_nic fabric: cannot listen in %s: %s\n", dir_.c_str(),
            strerror(err));
  }
  return err;
}

int Fabric::PublishIn(const std::string& addr, uint16_t port) {
  const std::string path = ListenerPath(dir_, addr, port);
  // A path of any length (unix_address.h: longer than sun_path, it is
  // reached through its directory).
  const UnixAddress address(path);
  if (address.error() != 0) {
    if (address.error() != ENOENT) {  // ENOENT: Publish makes the directory
      fprintf(stderr, "fake_nic fabric: cannot address %s: %s\n", path.c_str(),
              strerror(address.error()));
    }
    return address.error();
  }
  // A file already there: a live listener answers a connect (the port is
  // taken); a dead one's stale file refuses it and is replaced below.
  {
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return errno;
    const bool alive = connect(probe, address.addr(), address.len()) == 0;
    close(probe);
    if (alive) return EADDRINUSE;
  }
  // Bound and listening under a private name first, then renamed into
  // place: the public name never names a socket that is bound but not yet
  // listening (a client dialling in that window would be refused, as if
  // nobody listened), and rename(2) replaces a stale file atomically.
  // (Not "l-...": the launcher takes an l- file as "the server listens".)
  static std::atomic<unsigned> staged{0};
  const std::string staging =
      dir_ + "/s-" + std::to_string(getpid()) + "-" + std::to_string(staged++);
  const UnixAddress staging_address(staging);
  if (staging_address.error() != 0) return staging_address.error();
  unlink(staging.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (bind(fd, staging_address.addr(), staging_address.len()) != 0 ||
      listen(fd, 128) != 0 || rename(staging.c_str(), path.c_str()) != 0) {
    const int err = errno;
    close(fd);
    unlink(staging.c_str());
    return err;
  }
  SetNonBlocking(fd);
  {
    std::lock_guard<std::mutex> lock(mu_);
    listeners_[path] = fd;
  }
  Wake();
  return 0;
}

void Fabric::Unpublish(const std::string& addr, uint16_t port) {
  const std::string path = ListenerPath(dir_, addr, port);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(path);
  if (it == listeners_.end()) return;
  // The thread may be in poll() on this fd: it is closed by the thread,
  // between two polls, so its number cannot be reused under a poll.
  unlink(path.c_str());
  shutdown(it->second, SHUT_RDWR);
  retired_listeners_.push_back(it->second);
  listeners_.erase(it);
  Wake();
}

int Fabric::ClaimNode(uint32_t* node) {
  if (node_ != 0) {
    *node = node_;
    return 0;
  }
  for (uint32_t n = 1; n <= 255; ++n) {
    const std::string path = dir_ + "/node-" + std::to_string(n) + ".lock";
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      continue;
    }
    const int err = Publish("node", static_cast<uint16_t>(n));
    if (err != 0) {
      close(fd);
      return err;
    }
    node_lock_fd_ = fd;
    node_ = n;
    *node = n;
    return 0;
  }
  return EAGAIN;
}

int Fabric::DialNode(uint32_t node, uint64_t* link) {
  return DialPath("node", static_cast<uint16_t>(node), /*wildcard=*/false,
                  link);
}

int Fabric::Dial(const std::string& addr, uint16_t port, uint64_t* link) {
  return DialPath(addr, port, /*wildcard=*/true, link);
}

int Fabric::DialPath(const std::string& addr, uint16_t port, bool wildcard,
                     uint64_t* link) {
  int last = ECONNREFUSED;
  for (const std::string& a : {addr, std::string("any")}) {
    if (a == "any" && !wildcard && addr != "any") break;
    const std::string path = ListenerPath(dir_, a, port);
    const UnixAddress address(path);
    if (address.error() != 0) {
      fprintf(stderr, "fake_nic fabric: cannot address %s: %s\n", path.c_str(),
              strerror(address.error()));
      return address.error();
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      const int err = errno;
      fprintf(stderr, "fake_nic fabric: cannot dial %s: socket: %s\n",
              path.c_str(), strerror(err));
      return err;
    }
    if (connect(fd, address.addr(), address.len()) != 0) {
      const int err = errno;
      close(fd);
      // No file: nobody listens there. ECONNREFUSED: a listener's file
      // whose process is gone (or no socket at all). Both are the
      // REJECTED a connect to a port nobody listens on gets; anything else
      // is not, and is said (the connect still gets REJECTED).
      // With RPMA_HARNESS_FABRIC_STATS=1 every failed dial is said, with
      // what the name was then (for a refusal that should not be).
      if ((err != ENOENT && err != ECONNREFUSED) || FabricStatsOn()) {
        struct stat st;
        const bool there = lstat(path.c_str(), &st) == 0;
        fprintf(stderr, "fake_nic fabric: cannot dial %s: %s (%s)\n",
                path.c_str(), strerror(err),
                !there                 ? "no such name now"
                : S_ISSOCK(st.st_mode) ? "a socket is there now"
                                       : "something else is there now");
      }
      // The address's own listener's answer wins over the wildcard's.
      if (last == ECONNREFUSED || last == ENOENT) last = err;
      continue;
    }
    // The listener must be this user's (or the shared group's) process:
    // a listener file is only a name (fake_nic_fabric_trust.h).
    std::string why;
    if (!FabricPeerAllowed(fd, trust_, &why)) {
      fprintf(stderr, "fake_nic fabric: not dialling %s: %s\n", path.c_str(),
              why.c_str());
      close(fd);
      return ECONNREFUSED;
    }
    // Sequenced mode stays on the socket: it is about determinism, and its
    // sync reads the peers' bytes from sockets (DrainForSync).
    std::shared_ptr<ShmLink> shm;
    if (use_shm_ && seq_fd_ < 0) shm = OfferRings(fd);
    SetNonBlocking(fd);
    std::lock_guard<std::mutex> lock(mu_);
    *link = AddLink(fd);
    if (shm != nullptr) {
      shm->id = *link;
      shm->fd = fd;
      links_[*link].shm = shm;
      AddShmLocked(std::move(shm));
    }
    Wake();
    return 0;
  }
  return last == ENOENT ? ECONNREFUSED : last;
}

uint64_t Fabric::AddLink(int fd, bool accepted) {
  const uint64_t id = next_link_++;
  links_[id].fd = fd;
  links_[id].first_byte_pending = accepted;
  return id;
}

bool Fabric::ReadFirstByte(Link* link) {
  char byte = 0;
  iovec iov = {&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr message;
  memset(&message, 0, sizeof(message));
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  const ssize_t n =
      recvmsg(link->fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return errno == EAGAIN || errno == EINTR;  // still to come
  if (n == 0) return false;
  link->first_byte_pending = false;
  int memfd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr;
       c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (memfd < 0) {
        memfd = fd;
      } else {
        close(fd);
      }
    }
  }
  if (memfd < 0) {
    if ((message.msg_flags & MSG_CTRUNC) != 0) return false;
    link->in.push_back(static_cast<uint8_t>(byte));  // a frame's first byte
    return true;
  }
  // The peer's memfd is input too: it must be the size both sides map and
  // sealed against shrinking (a shrunk file under our mapping is SIGBUS).
  struct stat st;
  const int seals = fcntl(memfd, F_GET_SEALS);
  if (fstat(memfd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) != kShmMapSize || seals < 0 ||
      (seals & F_SEAL_SHRINK) == 0 || (seals & F_SEAL_SEAL) == 0) {
    fprintf(stderr,
            "fake_nic fabric: a peer's shared ring is not a sealed memfd of "
            "%zu bytes: link closed\n",
            kShmMapSize);
    close(memfd);
    return false;
  }
  std::shared_ptr<ShmLink> shm = MapRings(memfd, false);
  close(memfd);
  if (shm == nullptr) return false;
  uint64_t id = 0;
  for (auto& [key, value] : links_) {
    if (&value == link) id = key;
  }
  shm->id = id;
  shm->fd = link->fd;
  link->shm = shm;
  AddShmLocked(std::move(shm));
  return true;
}

void Fabric::AddShmLocked(std::shared_ptr<ShmLink> shm) {
  std::lock_guard<std::mutex> lock(shm_mu_);
  shm_list_.push_back(std::move(shm));
  shm_links_.fetch_add(1);
}

void Fabric::RemoveShmLocked(const ShmLink* shm) {
  std::lock_guard<std::mutex> lock(shm_mu_);
  for (auto it = shm_list_.begin(); it != shm_list_.end(); ++it) {
    if (it->get() == shm) {
      shm_list_.erase(it);
      shm_links_.fetch_sub(1);
      return;
    }
  }
}

bool Fabric::Send(uint64_t id, uint32_t type, const void* body, size_t body_len,
                  const void* tail, size_t tail_len) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it == links_.end() || it->second.closing) return false;
  Link& link = it->second;
  FrameHeader header{static_cast<uint32_t>(body_len + tail_len), type};
  size_t sent = 0;
  // Published now, or by FlushShmLocked once the ring has room.
  if (link.shm != nullptr && NeedsNoHostCpu(type, body, body_len)) {
    link.shm->ring_anyway = true;
  }
  if (link.shm != nullptr && link.out.empty()) {
    ShmLink* shm = link.shm.get();
    if (shm->corrupt.load()) return true;  // the link is ending
    RingPadToWrap(shm, sizeof(header) + body_len + tail_len);
    const void* parts[3] = {&header, body, tail};
    const size_t lengths[3] = {sizeof(header), body_len, tail_len};
    for (int i = 0; i < 3; ++i) {
      const size_t n = RingPut(shm, parts[i], lengths[i]);
      sent += n;
      if (n < lengths[i]) break;
    }
    if (shm->corrupt.load()) {
      ReportCorrupt(shm, "consumer tail, our head",
                    shm->out.header->tail.load(), shm->out_head);
      shutdown(shm->fd, SHUT_RDWR);
      return true;
    }
    if (sent > 0) {
      if (g_draining == this) {  // a handler's answer: HandOver publishes
        if (!shm->publish_deferred) {
          shm->publish_deferred = true;
          deferred_.push_back(link.shm);
        }
      } else {
        RingPublish(shm);
      }
    }
    if (sent == sizeof(header) + body_len + tail_len) return true;
    g_shm_stats.full.fetch_add(1, std::memory_order_relaxed);
  } else if (link.out.empty() && !link.first_byte_pending) {
    // Straight from the caller's buffers; only what the socket does not
    // take now is copied into the queue.
    iovec parts[3] = {{&header, sizeof(header)},
                      {const_cast<void*>(body), body_len},
                      {const_cast<void*>(tail), tail_len}};
    msghdr message;
    memset(&message, 0, sizeof(message));
    message.msg_iov = parts;
    message.msg_iovlen = tail_len > 0 ? 3 : 2;
    const ssize_t n = sendmsg(link.fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) sent = static_cast<size_t>(n);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // peer gone
    const size_t total = sizeof(header) + body_len + tail_len;
    if (sent == total) return true;
  }
  // Queue the unsent rest of header, body and tail.
  auto queue = [&](const void* data, size_t len) {
    const auto* p = static_cast<const uint8_t*>(data);
    const size_t skip = std::min(sent, len);
    sent -= skip;
    link.out.insert(link.out.end(), p + skip, p + len);
  };
  const bool was_waiting = !link.out.empty();
  queue(&header, sizeof(header));
  queue(body, body_len);
  if (tail_len > 0) queue(tail, tail_len);
  if (link.shm != nullptr) {
    // The ring is full: the consumer rings when it frees space.
    FlushShmLocked(&link);
    return true;
  }
  if (!was_waiting) Wake();  // the thread writes the rest
  return true;
}

void Fabric::FlushShmLocked(Link* link) {
  ShmLink* shm = link->shm.get();
  for (;;) {
    const size_t n = RingPut(shm, link->out.data() + link->out_offset,
                             link->out.size() - link->out_offset);
    if (shm->corrupt.load()) {
      ReportCorrupt(shm, "consumer tail, our head",
                    shm->out.header->tail.load(), shm->out_head);
      shutdown(shm->fd, SHUT_RDWR);
      link->out.clear();
      link->out_offset = 0;
      return;
    }
    link->out_offset += n;
    if (n > 0) RingPublish(shm);
    if (link->out_offset == link->out.size()) {
      link->out.clear();
      link->out_offset = 0;
      return;
    }
    // Full: ask for a doorbell when space frees, then look again (the
    // consumer may have freed it before it could see the flag).
    shm->out.header->producer_waiting.store(1, std::memory_order_seq_cst);
    if (shm->out_head - shm->out.header->tail.load() == kRingCapacity) return;
  }
}

void Fabric::FlushLocked(Link* link) {
  if (link->first_byte_pending) return;  // the transport is not known yet
  if (link->shm != nullptr) {
    FlushShmLocked(link);
    return;
  }
  while (link->out_offset < link->out.size()) {
    const ssize_t n =
        send(link->fd, link->out.data() + link->out_offset,
             link->out.size() - link->out_offset, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      // The peer is gone: what is queued is lost, as packets to a dead
      // host are; the reader sees the EOF.
      link->out.clear();
      link->out_offset = 0;
      return;
    }
    link->out_offset += static_cast<size_t>(n);
  }
  link->out.clear();
  link->out_offset = 0;
}

void Fabric::Close(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it == links_.end()) return;
  it->second.closing = true;
  Wake();
}

size_t Fabric::HandOver(uint64_t id, ShmLink* shm, std::vector<Frame>* frames) {
  size_t n = 0;
  if (seq_fd_ >= 0) {  // queued as pending steps by Deliver: copies
    TakeFrames(
        shm,
        [&](const FrameView& view) {
          Frame frame;
          frame.type = view.type;
          frame.body.assign(view.body, view.body + view.body_len);
          frames->push_back(std::move(frame));
          ++n;
        },
        [] {});
    return n;
  }
  // The handlers run on frames still in the ring, whose bytes are given
  // back only after them: an answer a handler sends meanwhile (a write's
  // ACK) is made visible only once they are. Otherwise the peer could
  // take the ACK, post its next write and find the ring still holding the
  // message just acknowledged: with 1 MiB writes in a 2 MiB ring that
  // raced at every write and, lost, sent the next write through the full
  // ring's doorbell path at a third of the speed.
  Fabric* const outer = g_draining;
  g_draining = this;
  TakeFrames(
      shm,
      [&](const FrameView& view) {
        on_frame_(id, view);
        ++n;
      },
      [this] { PublishDeferred(); });
  g_draining = outer;
  PublishDeferred();
  return n;
}

void Fabric::PublishDeferred() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::shared_ptr<ShmLink>& shm : deferred_) {
    shm->publish_deferred = false;
    // A link retired meanwhile may have its socket closed: not published
    // (it ends anyway).
    auto it = links_.find(shm->id);
    if (it == links_.end() || it->second.shm != shm) continue;
    RingPublish(shm.get());
  }
  deferred_.clear();
  if (AllFlushedLocked()) flushed_cv_.notify_all();
}

void Fabric::DrainInline(bool polling) {
  if (!RingsInUse()) return;
  // Not an atomic increment: a lost one among racing pollers still moves it.
  if (polling) {
    inline_polls_.store(inline_polls_.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
  }
  // The links with data, taken out of the leaf lock (each drain takes the
  // NIC's mutex); a few on the stack, the rest on the heap.
  constexpr size_t kOnStack = 4;
  std::shared_ptr<ShmLink> on_stack[kOnStack];
  std::vector<std::shared_ptr<ShmLink>> more;
  size_t count = 0;
  {
    std::lock_guard<std::mutex> lock(shm_mu_);
    for (const std::shared_ptr<ShmLink>& shm : shm_list_) {
      if (!shm->HasData()) continue;
      if (count < kOnStack) {
        on_stack[count] = shm;
      } else {
        more.push_back(shm);
      }
      ++count;
    }
  }
  if (count == 0) return;
  for (size_t i = 0; i < count; ++i) {
    const std::shared_ptr<ShmLink>& shm =
        i < kOnStack ? on_stack[i] : more[i - kOnStack];
    // Another thread draining this ring hands its frames over in order.
    std::unique_lock<std::mutex> drain(shm->drain_mu, std::try_to_lock);
    if (!drain.owns_lock()) continue;
    std::vector<Frame> frames;
    const size_t n = HandOver(shm->id, shm.get(), &frames);
    g_shm_stats.frames_inline.fetch_add(n, std::memory_order_relaxed);
  }
}

void Fabric::RingSockets(std::vector<pollfd>* fds) {
  if (!RingsInUse()) return;
  std::lock_guard<std::mutex> lock(shm_mu_);
  for (const std::shared_ptr<ShmLink>& shm : shm_list_) {
    fds->push_back({shm->fd, POLLIN, 0});
  }
}

bool Fabric::ReadFrames(uint64_t id, int fd, std::vector<Frame>* frames) {
  uint8_t buffer[65536];
  bool open = true;
  std::vector<uint8_t> in;
  std::shared_ptr<ShmLink> shm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(id);
    if (it == links_.end()) return false;
    Link& link = it->second;
    if (link.first_byte_pending) {
      if (!ReadFirstByte(&link)) return false;
      if (link.first_byte_pending) return true;  // nothing came yet
      if (!link.out.empty()) FlushLocked(&link);
    }
    shm = link.shm;
    in.swap(link.in);
  }
  if (shm != nullptr) {
    // The socket carries doorbells (their bytes mean nothing) and the end.
    for (;;) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || errno != EAGAIN) open = false;
      break;
    }
    {
      // A doorbell may say the ring has room again.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = links_.find(id);
      if (it != links_.end() && !it->second.out.empty()) {
        FlushLocked(&it->second);
      }
    }
    std::lock_guard<std::mutex> drain(shm->drain_mu);
    // At the end, every byte the peer wrote before it went is in the ring:
    // taken (and handed over) before the link's end is.
    g_shm_stats.frames_thread.fetch_add(HandOver(id, shm.get(), frames),
                                        std::memory_order_relaxed);
    if (!open) shm->dead = true;
    return open;
  }
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) {
      in.insert(in.end(), buffer, buffer + n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) open = false;
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  size_t at = 0;
  while (in.size() - at >= sizeof(FrameHeader)) {
    FrameHeader header;
    memcpy(&header, in.data() + at, sizeof(header));
    // The peer is another process: a length no frame can have (the
    // largest is a 2 GiB message plus its fixed part) ends the link instead
    // of buffering for ever.
    if (header.body_length > kMaxFrameBody) {
      open = false;
      break;
    }
    if (in.size() - at - sizeof(header) < header.body_length) break;
    Frame frame;
    frame.type = header.type;
    const uint8_t* start = in.data() + at + sizeof(header);
    frame.body.assign(start, start + header.body_length);
    frames->push_back(std::move(frame));
    at += sizeof(header) + header.body_length;
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(at));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it != links_.end()) it->second.in.swap(in);
  return open;
}

void Fabric::Run() {
  uint64_t seen_polls = 0;                 // inline_polls_ when last looked
  uint64_t seen_block_epoch = 0;           // block_epoch_ when last looked
  int64_t polls_moved_ns = INT64_MIN / 2;  // when it was seen to move
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;  // 0: the wake fd; ~0: a listener
    std::vector<uint64_t> closed;
    std::vector<std::shared_ptr<ShmLink>> rings;  // polled this round
    std::vector<std::pair<int, std::shared_ptr<ShmLink>>> retired;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      for (int fd : retired_listeners_) close(fd);
      retired_listeners_.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      ids.push_back(0);
      for (auto& [path, fd] : listeners_) {
        fds.push_back({fd, POLLIN, 0});
        ids.push_back(~uint64_t{0});
      }
      bool retired_a_link = false;
      for (auto it = links_.begin(); it != links_.end();) {
        Link& link = it->second;
        if (link.closing && link.out.empty()) {
          retired_a_link = true;
          // Our end goes: the peer reads what we wrote, then EOF. A ring's
          // socket closes below, once no drain can use it (lock order).
          if (link.shm != nullptr) {
            RemoveShmLocked(link.shm.get());
            retired.push_back({link.fd, link.shm});
          } else {
            close(link.fd);
          }
          it = links_.erase(it);
          continue;
        }
        // A ring's producer waits for doorbells, not for POLLOUT.
        const bool socket_out = !link.out.empty() && link.shm == nullptr &&
                                !link.first_byte_pending;
        fds.push_back({link.fd,
                       static_cast<short>(POLLIN | (socket_out ? POLLOUT : 0)),
                       0});
        ids.push_back(it->first);
        if (link.shm != nullptr) rings.push_back(link.shm);
        ++it;
      }
      // A closed link was what WaitFlushedFor (a process's exit) waited
      // for; without this it waited out its whole timeout (2 s at exit).
      if (retired_a_link && seq_fd_ < 0 && AllFlushedLocked()) {
        flushed_cv_.notify_all();
      }
      if (seq_fd_ >= 0) {
        if (AllFlushedLocked()) flushed_cv_.notify_all();
        if (!seq_lost_) {
          fds.push_back({seq_fd_, POLLIN, 0});
          ids.push_back(~uint64_t{1});
        }
      }
    }
    // A granted step's kDone goes once what the step sent is written.
    if (done_pending_) {
      bool flushed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        flushed = AllFlushedLocked();
      }
      if (flushed) {
        done_pending_ = false;
        SendToSequencer(SequenceMessage::kDone, 0, 0, 0, "");
      }
    }
    for (auto& [fd, shm] : retired) {
      {
        std::lock_guard<std::mutex> drain(shm->drain_mu);
        shm->dead = true;
      }
      close(fd);
    }
    // Sleep or not (no lost wake-up: the consumer's half of the order).
    // While the application polls (DrainInline), the rings need no
    // doorbell: do not advertise sleep and look again after the window. A
    // sequenced fabric always advertises (its frames wait for a sync).
    int64_t timeout_ns = -1;
    bool polled = false;
    if (!rings.empty()) {
      // Polled: DrainInline ran since this thread last saw the counter
      // move, less than a window ago -- unless a thread began to block
      // since (BlockingWaitBegins): then the polls seen so far count for
      // nothing, and only a poll after this look counts.
      const uint64_t epoch = block_epoch_.load(std::memory_order_relaxed);
      const uint64_t polls = inline_polls_.load(std::memory_order_relaxed);
      const int64_t now = NowNs();
      if (epoch != seen_block_epoch) {
        seen_block_epoch = epoch;
        seen_polls = polls;
        polls_moved_ns = INT64_MIN / 2;
      } else if (polls != seen_polls) {
        seen_polls = polls;
        polls_moved_ns = now;
      }
      const int64_t window =
          g_poller_window_ns.load(std::memory_order_relaxed);
      polled = seq_fd_ < 0 && now - polls_moved_ns < window;
      poll_mode_.store(polled, std::memory_order_relaxed);
      for (const auto& shm : rings) {
        shm->in.header->consumer_sleeping.store(polled ? 0 : 1);
      }
      // (seq_cst flag stores above, seq_cst head loads in HasData.)
      bool waiting = false;
      for (const auto& shm : rings) waiting = waiting || shm->HasData();
      // While polled, the poller takes what waits; this thread looks again
      // after the window (not at once: it would spin against the poller).
      if (polled) {
        timeout_ns = window;
      } else if (waiting && seq_fd_ < 0) {
        timeout_ns = 0;
      }
    }
    timespec timeout = {static_cast<time_t>(timeout_ns / 1000000000),
                        static_cast<long>(timeout_ns % 1000000000)};
    if (ppoll(fds.data(), fds.size(), timeout_ns < 0 ? nullptr : &timeout,
              nullptr) < 0 &&
        errno != EINTR) {
      return;
    }
    // Rings with data whose socket stayed quiet (no doorbell was asked for).
    // While polled, the poller takes the frames: this thread steps in only
    // for a ring that had data at its last look and that nobody drained
    // since (a whole window without progress: the polling stopped). Taking
    // them sooner would race the poller for every frame whose arrival
    // falls on this thread's wake-up -- with 1 MiB writes, whose round
    // trip is about one window, the two locked in phase and the thread
    // took most frames, at a third of the speed.
    if (seq_fd_ < 0) {
      for (const auto& shm : rings) {
        const bool has = shm->HasData();
        const uint64_t taken = shm->taken.load(std::memory_order_relaxed);
        const bool stale = shm->thread_saw_data && taken == shm->thread_taken;
        shm->thread_saw_data = has;
        shm->thread_taken = taken;
        if (!has || (polled && !stale)) continue;
        std::unique_lock<std::mutex> drain(shm->drain_mu, std::defer_lock);
        if (polled) {
          if (!drain.try_lock()) continue;
        } else {
          drain.lock();
        }
        std::vector<Frame> frames;
        g_shm_stats.frames_thread.fetch_add(
            HandOver(shm->id, shm.get(), &frames), std::memory_order_relaxed);
      }
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (ids[i] == 0) {
        uint64_t count;
        ssize_t n = read(wake_fd_, &count, sizeof(count));
        (void)n;
        continue;
      }
      if (ids[i] == ~uint64_t{1}) {
        OnSequencerReadable();
        continue;
      }
      if (ids[i] == ~uint64_t{0}) {
        const int fd =
            accept4(fds[i].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 && AcceptedPeerAllowed(fd)) {
          std::lock_guard<std::mutex> lock(mu_);
          AddLink(fd, /*accepted=*/true);
        }
        continue;
      }
      if (fds[i].revents & POLLOUT) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = links_.find(ids[i]);
        if (it != links_.end()) FlushLocked(&it->second);
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        std::vector<Frame> frames;
        const bool open = ReadFrames(ids[i], fds[i].fd, &frames);
        Deliver(ids[i], &frames, open);
      }
    }
  }
}

void Fabric::Deliver(uint64_t id, std::vector<Frame>* frames, bool open) {
  if (seq_fd_ < 0) {
    for (const Frame& frame : *frames) on_frame_(id, frame.view());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seq_fd_ >= 0) {
      for (Frame& frame : *frames) {
        PendingItem item;
        item.frame = std::move(frame);
        pending_[id].push_back(std::move(item));
        ++pending_count_;
      }
      if (!open) {
        PendingItem item;
        item.closed = true;
        pending_[id].push_back(std::move(item));
        ++pending_count_;
      }
    }
    if (!open) {
      auto it = links_.find(id);
      if (it != links_.end()) {
        // A ring's `dead` was set by ReadFrames under its drain lock.
        if (it->second.shm != nullptr) RemoveShmLocked(it->second.shm.get());
        close(it->second.fd);
        links_.erase(it);
        // It may have been the last one a process's exit waited for.
        if (seq_fd_ < 0 && AllFlushedLocked()) flushed_cv_.notify_all();
      }
    }
  }
  if (!open && seq_fd_ < 0) on_closed_(id);
}

// ---- sequenced mode
// ----------------------------------------------------------

int Fabric::JoinSequencer(const std::string& label, SequenceHooks hooks) {
  const std::string path = SequencerPath(dir_);
  const UnixAddress address(path);
  if (address.error() != 0) return address.error();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (connect(fd, address.addr(), address.len()) != 0) {
    const int err = errno;
    fprintf(stderr,
            "fake_nic fabric: RPMA_HARNESS_FABRIC_SEQUENCE is set but no "
            "sequencer answers at %s (%s): the sequenced mode needs the "
            "launcher's --sequence (tools/multiprocess); running unsequenced\n",
            path.c_str(), strerror(err));
    close(fd);
    return err;
  }
  seq_fd_ = fd;
  SendToSequencer(SequenceMessage::kHello, static_cast<uint32_t>(getpid()), 0,
                  0, label);
  // The Sequencer answers kHello at once (its thread does nothing else
  // long); a refused or silent join runs unsequenced, said on one line. The
  // 10 s bound is for a sequencer that is stuck, not a timing assumption.
  SequenceMessage answer;
  size_t got = 0;
  while (got < sizeof(answer)) {
    pollfd p = {fd, POLLIN, 0};
    const int ready = poll(&p, 1, 10000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = recv(fd, reinterpret_cast<char*>(&answer) + got,
                           sizeof(answer) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(answer) || answer.type != SequenceMessage::kWelcome) {
    const bool refused =
        got == sizeof(answer) && answer.type == SequenceMessage::kRefused;
    fprintf(stderr,
            "fake_nic fabric: the sequencer at %s %s '%s' "
            "(RPMA_HARNESS_PROCESS_NAME must be one of the launcher's "
            "labels, once); running unsequenced\n",
            path.c_str(), refused ? "refused" : "did not answer",
            label.c_str());
    close(fd);
    seq_fd_ = -1;
    return refused ? ECONNREFUSED : ETIMEDOUT;
  }
  seq_hooks_ = std::move(hooks);
  return 0;
}

void Fabric::SendToSequencer(uint32_t type, uint32_t a, uint64_t b, uint64_t c,
                             const std::string& text) {
  SequenceMessage m;
  m.type = type;
  m.a = a;
  m.b = b;
  m.c = c;
  snprintf(m.text, sizeof(m.text), "%s", text.c_str());
  std::lock_guard<std::mutex> lock(seq_send_mu_);
  const char* data = reinterpret_cast<const char*>(&m);
  size_t done = 0;
  while (done < sizeof(m)) {
    const ssize_t n =
        send(seq_fd_, data + done, sizeof(m) - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the sequencer is gone (the launcher ended)
    done += static_cast<size_t>(n);
  }
}

bool Fabric::AllFlushedLocked() const {
  // A handler's answers (a message's ACK) wait in deferred_ until its ring
  // is given back (HandOver), while the completion the message made may
  // already be polled: a process that then exits must not leave before
  // they are published, or its peer's request is never answered
  // (ibv_srq_pingpong's server saw RETRY_EXC_ERR under load).
  if (!deferred_.empty()) return false;
  for (const auto& [id, link] : links_) {
    if (!link.out.empty() || link.closing) return false;
  }
  return true;
}

void Fabric::ReportWait(const char* where, bool releasable) {
  WaitFlushed();
  SendWait(where, releasable);
}

void Fabric::WaitFlushed() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!AllFlushedLocked()) {
    Wake();
    flushed_cv_.wait(lock, [this] { return AllFlushedLocked() || stop_; });
  }
}

bool Fabric::WaitFlushedFor(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (AllFlushedLocked()) return true;
  Wake();
  return flushed_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                              [this] { return AllFlushedLocked() || stop_; });
}

void Fabric::SendWait(const char* where, bool releasable) {
  SendToSequencer(SequenceMessage::kWait, releasable ? 1 : 0, 0, 0, where);
}

void Fabric::ReportRun() {
  SendToSequencer(SequenceMessage::kRun, 0, 0, 0, "");
}

bool Fabric::PopPending(uint64_t* link, Frame* frame, bool* closed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->second.empty()) continue;
    PendingItem item = std::move(it->second.front());
    it->second.pop_front();
    --pending_count_;
    *link = it->first;
    *closed = item.closed;
    *frame = std::move(item.frame);
    if (it->second.empty()) pending_.erase(it);
    return true;
  }
  return false;
}

void Fabric::DrainForSync() {
  // Every peer that wrote to us has finished writing (it reported its wait
  // or its step's end only after its sockets drained), and a reaped peer's
  // sockets are closed: reading until EAGAIN sees all of it.
  std::vector<int> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [path, fd] : listeners_) listeners.push_back(fd);
  }
  for (int lfd : listeners) {
    for (;;) {
      const int fd =
          accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      if (!AcceptedPeerAllowed(fd)) continue;
      std::lock_guard<std::mutex> lock(mu_);
      AddLink(fd, /*accepted=*/true);
    }
  }
  std::vector<std::pair<uint64_t, int>> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, link] : links_) {
      if (!link.closing) links.push_back({id, link.fd});
    }
  }
  for (const auto& [id, fd] : links) {
    std::vector<Frame> frames;
    const bool open = ReadFrames(id, fd, &frames);
    Deliver(id, &frames, open);
  }
}

void Fabric::OnSequencerReadable() {
  char buffer[4096];
  const ssize_t n = recv(seq_fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    // The launcher is gone: nobody grants steps any more.
    fprintf(stderr,
            "fake_nic fabric: the sequencer went away (its launcher "
            "ended?); this process's waits on the fabric end with EIO\n");
    seq_lost_ = true;  // keep polling the rest, not this fd
    if (seq_hooks_.lost) seq_hooks_.lost();
    return;
  }
  seq_in_.append(buffer, static_cast<size_t>(n));
  while (seq_in_.size() >= sizeof(SequenceMessage)) {
    SequenceMessage m;
    memcpy(&m, seq_in_.data(), sizeof(m));
    seq_in_.erase(0, sizeof(m));
    switch (m.type) {
      case SequenceMessage::kSync: {
        DrainForSync();
        const uint64_t local = seq_hooks_.local_pending();
        uint64_t frames;
        {
          std::lock_guard<std::mutex> lock(mu_);
          frames = pending_count_;
        }
        SendToSequencer(SequenceMessage::kSyncReply, m.a, local, frames, "");
        break;
      }
      case SequenceMessage::kGrant:
        seq_hooks_.grant(m.a, m.b);
        done_pending_ = true;
        break;
      case SequenceMessage::kRelease:
        seq_hooks_.release();
        break;
      default:
        break;
    }
  }
}

}  // namespace fake_nic_internal
}  // namespace rpma_harness
