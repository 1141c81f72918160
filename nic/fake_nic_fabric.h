// fake_nic_fabric.h: the cross-process wire of the fake NIC. Private to
// nic/fake_nic*.cc.
//
// With FakeNicConfig::fabric_dir set (RPMA_HARNESS_FABRIC for the default
// backend), FakeNics in different processes of one host meet through that
// directory:
//   - a listening id publishes a Unix-domain stream socket
//     <dir>/l-<addr>-<port> (<addr> "any" for a wildcard bind);
//   - a Connect that finds no listener in its own process dials that socket;
//     the accepted stream is the connection's Link and carries its CM
//     messages (REQ, REP, RTU, REJ, DREQ, DREP) and its data path (one
//     request frame per WR with its payload, one answer frame back);
//   - the end of a Link's stream (close, exit, SIGKILL) is the peer's death.
// No daemon: every Link is a direct stream between the two processes.
//
// Transport (RPMA_HARNESS_FABRIC_TRANSPORT, read when a Fabric is made):
// "shm" (the default) carries a Link's frames through two single-producer /
// single-consumer byte rings in a memfd the dialer creates and passes with
// SCM_RIGHTS as the first byte of the stream; the socket then carries only
// 1-byte doorbells (sent only when the consumer advertised that it sleeps)
// and the peer's death (EOF). "socket" carries the frames on the stream
// itself. A sequenced fabric always dials with "socket"; an acceptor takes
// whichever the dialer chose (a first byte with a memfd: rings).
//
// Threading: one fabric thread per NIC polls the listening sockets and the
// Links. It reads whole frames without any NIC lock held and hands each to
// the NIC's frame handler (which takes the NIC's mutex); on the rings, an
// application thread in PollCq may hand them over instead (DrainInline),
// under the link's drain lock, so a link's frames keep their order. Send()
// never blocks: it writes what the socket (or ring) takes now and queues
// the rest, which the fabric thread writes when the socket drains (or the
// consumer's doorbell says the ring has room). So no thread holding a NIC's
// mutex ever waits for another process, and two processes stepping each
// other cannot deadlock.
//
// Sequenced mode (JoinSequencer; fake_nic_fabric_sequence.h): frames and
// link ends are queued as pending steps instead of handed to the NIC, and
// the fabric thread also speaks to the Sequencer: it answers its syncs
// (after reading every byte the peers wrote), runs the steps it grants
// (through SequenceHooks) and reports a step's end once what it sent is
// written.
//
// Example:
//   Fabric fabric(dir, on_frame, on_closed, on_accepted);
//   fabric.Start();
//   int err = fabric.Publish("any", 7204);        // a listener
//   uint64_t link = 0;
//   fabric.Dial("127.0.0.1", 7204, &link);        // an active side
//   fabric.Send(link, kFrameReq, &req, sizeof(req), pdata, n);

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_H_

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nic/fake_nic_fabric_trust.h"

namespace rpma_harness {
namespace fake_nic_internal {

struct ShmLink;  // fake_nic_fabric.cc: one Link's mapping and ring states

// Frame types. Every frame is a FrameHeader, a fixed body (the struct
// named in the comment) and a variable tail (private data or payload).
enum FrameType : uint32_t {
  kFrameReq = 1,      // CmFrame + private data: a connection request
  kFrameRep = 2,      // CmFrame + private data: rdma_accept
  kFrameRtu = 3,      // CmFrame: the active side processed the REP
  kFrameRej = 4,      // CmFrame + private data: rdma_reject (status = reason)
  kFrameDreq = 5,     // CmFrame: rdma_disconnect / rdma_destroy_id
  kFrameDrep = 6,     // CmFrame: the answer to a DREQ
  kFrameRequest = 7,  // RequestFrame + payload: one send WR
  kFrameAnswer = 8,   // AnswerFrame + payload (READ data, atomic value)
  kFrameRecvPosted = 9,  // CmFrame: a receive is posted (rnr_retry 7 wait),
                         // or (status kRetryWordChanged) the QP changed
  // Shared-memory rings only: filler up to the ring's end (the body means
  // nothing), so that the next frame starts whole at offset 0 instead of
  // wrapping; the consumer skips it.
  kFramePad = 10,
  // BindFrame: the first frame of a link a QP made with ibv_create_qp
  // dials at RTR (fake_nic_verbs.cc): the link carries that QP's requests
  // to dst_qp_num, and their answers back.
  kFrameBind = 11,
};

// The largest body a frame may announce: a 2 GiB message (rxe's
// max_msg_sz) plus its fixed part; a larger one closes the link.
constexpr uint32_t kMaxFrameBody = (1u << 31) + 4096;

struct FrameHeader {
  uint32_t body_length;  // fixed body + tail
  uint32_t type;
};

// Both ends are processes of one host running the same code: the bodies
// are plain structs, copied as bytes.
// A kFrameRecvPosted CmFrame's status when the responder QP changed (its
// state, its access flags) rather than took a receive: the parked requester
// resends at its RNR timer's next tick (FakeNic::TakeRetryWord). 0, what
// every word carried before, is a receive's.
constexpr int32_t kRetryWordChanged = 1;

struct CmFrame {
  char src_addr[48];
  char dst_addr[48];
  uint16_t src_port;
  uint16_t dst_port;
  uint32_t qp_num;  // the sender's QP (0: none yet)
  int32_t status;   // REJ: the IB CM reject reason
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t initiator_depth;
  uint8_t responder_resources;
  uint32_t starting_psn;  // REQ / REP: the sender's first send PSN
};

struct RequestFrame {
  uint64_t token;  // echoed by the answer: which WR it is for
  uint64_t wr_id;
  uint64_t remote_addr;
  uint64_t length;  // of the whole message
  uint64_t compare_add;
  uint64_t swap;
  uint32_t rkey;
  uint32_t imm_data;  // network byte order, as posted
  uint32_t opcode;    // ibv_wr_opcode
  uint32_t send_flags;
  uint32_t first_packet;  // a retry after an RNR NAK resumes here
  uint32_t mtu;           // path MTU in bytes
  // Packets of the message the requester built: all of them, or (SEND /
  // WRITE) those before the first whose source SGE fails its check
  // (rxe_req.c finish_packet): the message then stops there. The payload
  // is the bytes of packets [0, sent_packets).
  uint32_t sent_packets;
  // The PSN of the message's first packet (24 bits): a responder reset
  // since that packet answers a later one by it (CheckWritePacket).
  uint32_t first_psn;
  // 1: the WR was RNR NAKed before (SendWqe::rnr_started). A responder
  // reset since that NAK takes it for a new request and checks first_psn
  // (FakeNic::CheckRequestPsn).
  uint32_t resent_after_rnr;
};

struct BindFrame {
  uint32_t src_qp_num;  // the dialling QP
  uint32_t dst_qp_num;  // the QP its RTR named (dest_qp_num)
};
struct AnswerFrame {
  enum Kind : uint32_t {
    kAck = 0,       // the message is done (READ / atomic data in the tail)
    kRnrNak = 1,    // no receive: retry from `acked_packets`
    kNak = 2,       // a responder-detected error: `status`
    kNoAnswer = 3,  // the responder QP drops requests (not RTR / gone)
    kResend = 4,    // a PSN sequence NAK at the message's first PSN: send
                    // the message again from its first packet
  };
  uint64_t token;
  uint32_t kind;
  // ibv_wc_status for the requester (kNak); the RNR wait the NAK asks for,
  // the responder's min_rnr_timer (kRnrNak).
  int32_t status;
  // kRnrNak: the packets before the NAKed one; kNak: the NAKed packet;
  // kAck: the packets taken (RequestFrame::sent_packets).
  uint32_t acked_packets;
  // On the wire the frame is the struct up to `why`, then why_len bytes
  // of `why` (no NUL; 0 for an ACK), then the tail: an ACK is 24 bytes,
  // not 120 (fake_nic_remote.cc SendAnswer / ParseAnswer).
  uint32_t why_len;
  char why[100];
};

// The shared-memory transport's mapping (a memfd of kShmMapSize bytes,
// sealed against shrinking and growing): ring 0 carries the dialer's
// frames, ring 1 the acceptor's; each is a ShmRingHeader on its own page
// (ring 0's at offset 0, ring 1's at kShmRingHeaderSize) and
// kShmRingCapacity data bytes (ring 0's at 2 * kShmRingHeaderSize, ring
// 1's right after). The bytes are the same stream of frames the socket
// carries. `head` and `tail` count bytes in total (they never wrap; byte n
// is at n % kShmRingCapacity).
//
// 2 MiB per direction: a 1 MiB write (fabric_bench's BM_FabricWrite1MiB)
// fits whole, so its producer never waits for the consumer; a larger frame
// streams through (pipe semantics).
constexpr uint64_t kShmRingCapacity = uint64_t{2} << 20;
constexpr size_t kShmRingHeaderSize = 4096;
constexpr size_t kShmMapSize = 2 * kShmRingHeaderSize + 2 * kShmRingCapacity;

// Sends `byte` on the Unix-domain `socket` with `fd` attached
// (SCM_RIGHTS): how the dialer passes the rings' memfd (also used by
// fake_nic_fabric_shm_test's raw peer). True if the byte went.
bool SendByteWithFd(int socket, char byte, int fd);

struct ShmRingHeader {
  std::atomic<uint64_t> head;  // written by the producer
  char pad0[56];
  std::atomic<uint64_t> tail;  // written by the consumer
  char pad1[56];
  // The consumer is about to sleep in poll(): the producer rings the
  // socket (one byte) after it publishes.
  std::atomic<uint32_t> consumer_sleeping;
  // The producer found the ring full: the consumer rings after it frees.
  std::atomic<uint32_t> producer_waiting;
};

// A frame as its handler sees it: the bytes stay where they are (a frame
// whole and contiguous in a shared-memory ring is handed over in place,
// with no copy and no allocation) and are valid only during the call. In a
// ring the peer could still write them: a handler copies the fixed body
// out before it checks it (ParseBody) and reads each byte of the tail once.
struct FrameView {
  uint32_t type = 0;
  const uint8_t* body = nullptr;  // fixed body + tail
  size_t body_len = 0;
};

// A frame that owns its bytes (the socket path, a frame split by the
// ring's wrap, the sequenced queue).
struct Frame {
  uint32_t type = 0;
  std::vector<uint8_t> body;  // fixed body + tail
  FrameView view() const { return FrameView{type, body.data(), body.size()}; }
};

// How long the fabric thread trusts that the program polls (poll mode:
// its rings ask for no doorbell, and it looks again only after this long);
// 200 us unless a test stretches it (0 restores it), so that a frame that
// waited for the window instead of its doorbell shows as a missed deadline.
void SetPollerWindowForTesting(int64_t ns);

class Fabric {
 public:
  using OnFrame = std::function<void(uint64_t link, const FrameView& frame)>;
  using OnClosed = std::function<void(uint64_t link)>;

  Fabric(std::string dir, OnFrame on_frame, OnClosed on_closed);
  ~Fabric();  // stops the thread, closes every socket, unlinks what it
              // published
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Creates the directory (mode 0700) if missing and starts the thread.
  // Returns 0 or a positive errno (with a message on stderr).
  int Start();
  // Start() in two halves, so that a sequenced NIC joins its Sequencer
  // only once nothing can fail any more: Prepare (the directory, the
  // wake-up fd; 0 or an errno), then JoinSequencer, then StartThread.
  int Prepare();
  void StartThread();
  // Joins the thread: no frame handler runs after it returns.
  void Stop();
  // Publishes the listener <addr>:<port>. EADDRINUSE when a live process
  // listens there already. The directory may be of any length (a longer
  // path than sun_path holds is bound through the directory: unix_address.h).
  // The directory is checked again under the joining rules (a removed one
  // is made again; one that now breaks a rule refuses the listen).
  int Publish(const std::string& addr, uint16_t port);
  void Unpublish(const std::string& addr, uint16_t port);
  // Connects to the listener at addr:port (or the wildcard one on port).
  // ECONNREFUSED when nobody listens (a stale socket file is removed).
  int Dial(const std::string& addr, uint16_t port, uint64_t* link);

  // Verbs without rdma_cm (fake_nic_verbs.cc): a NIC whose program creates
  // QPs with ibv_create_qp takes a node number of the fabric, 1..255, the
  // first whose lock file <dir>/node-<n>.lock nobody holds (flock, so a
  // killed process's number is free again), and publishes the listener
  // <dir>/l-node-<n> where the peers' QPs dial it. 0 or an errno (EAGAIN:
  // all 255 taken).
  int ClaimNode(uint32_t* node);
  // Connects to node `node`'s listener (no wildcard fallback).
  int DialNode(uint32_t node, uint64_t* link);
  // Queues one frame on `link`; false if the link is closed. Never blocks.
  bool Send(uint64_t link, uint32_t type, const void* body, size_t body_len,
            const void* tail = nullptr, size_t tail_len = 0);
  // Closes our end once what is queued is written (the peer sees EOF).
  void Close(uint64_t link);
  // From an application thread polling the NIC (PollCq), with no NIC lock
  // held: handles the frames waiting in every shared-memory ring on this
  // thread, so a busy-polling program sees a peer's request without a
  // thread hand-off. A ring another thread drains is skipped (try-lock).
  // Lock order: a link's drain lock, then the NIC's mutex, then mu_.
  // A no-op when sequenced or on the socket transport. `polling`: the
  // caller polls (the fabric thread then leaves the rings to it for a
  // window); false for a blocked waiter woken by a doorbell (RingSockets),
  // which goes back to sleep.
  void DrainInline(bool polling = true);
  // From an application thread about to block in the NIC (an event wait;
  // the NIC's mutex may be held: this takes no lock). While the
  // application polls, the fabric thread leaves the rings to the poller and
  // looks itself only every window (200 us); a thread that stops polling to
  // block would wait out that window for the frame it waits for. This ends
  // the polled state at once: the fabric thread drains again and asks for
  // doorbells until some thread polls again. A program that blocks in
  // poll(2) on a channel's fd itself is not seen: its frames wait one
  // window at most. A frame that completes nothing at the peer (an RDMA
  // WRITE, READ or atomic request) rings the doorbell even while polled:
  // a program may wait for a write by spinning on its buffer and never
  // poll (fake_nic_fabric.cc NeedsNoHostCpu).
  void BlockingWaitBegins();
  // For a thread about to block for a completion (FakeNic::WaitForCqEvent,
  // after BlockingWaitBegins): appends the sockets of the shared-memory
  // links, each as a pollfd for POLLIN. A doorbell on one -- the peer
  // published a frame while this process slept -- wakes that thread too,
  // and it drains the rings itself (DrainInline) instead of waiting for the
  // fabric thread to hand the frame over: one thread hand-off less per
  // frame. The fabric thread still reads the doorbell (the thread only
  // polls the socket), so nothing it counts on is taken from it; a socket
  // closed or reused meanwhile only wakes the thread once for nothing. None
  // when sequenced or on the socket transport.
  void RingSockets(std::vector<struct pollfd>* fds);
  // Whether new Links dial with shared-memory rings (the transport knob).
  bool uses_shm() const { return use_shm_; }

  static std::string ListenerPath(const std::string& dir,
                                  const std::string& addr, uint16_t port);

  // ---- sequenced mode (fake_nic_fabric_sequence.h) ----
  // What the NIC does for the Sequencer; called on the fabric thread with
  // no fabric lock held.
  struct SequenceHooks {
    // Run one granted step: kind is SequenceMessage::GrantKind.
    std::function<void(uint32_t kind, uint64_t step)> grant;
    std::function<void()> release;            // a releasable wait ends empty
    std::function<uint64_t()> local_pending;  // NIC steps ready (0 / 1)
    // The sequencer went away: nobody grants steps any more; every wait on
    // the fabric must end (may be empty).
    std::function<void()> lost;
  };
  // Before Start(): connects to <dir>/sequencer and joins as `label`. From
  // then on frames and link ends are queued as pending steps instead of
  // handed to OnFrame / OnClosed. 0 or an errno (message on stderr).
  int JoinSequencer(const std::string& label, SequenceHooks hooks);
  bool sequenced() const { return seq_fd_ >= 0; }
  uint32_t node() const { return node_; }
  // From the application thread (no NIC lock held): waits until what this
  // process sent is written to its peers, then reports the wait.
  void ReportWait(const char* where, bool releasable);
  // The two halves of ReportWait, for a NIC that decides under its own lock
  // whether to report: WaitFlushed from the application thread with no NIC
  // lock held; SendWait with or without it (it takes only the send lock).
  void WaitFlushed();
  // The same, for at most timeout_ms; false if frames are still queued.
  bool WaitFlushedFor(int timeout_ms);
  void SendWait(const char* where, bool releasable);
  // From the grant hook: the step ended the application thread's wait.
  void ReportRun();
  // The oldest pending frame step, lowest link first: a frame, or the
  // link's end (`closed`). False when none is pending.
  bool PopPending(uint64_t* link, Frame* frame, bool* closed);

 private:
  struct Link {
    int fd = -1;
    // The shared-memory rings (null: frames on the socket itself).
    std::shared_ptr<ShmLink> shm;
    bool first_byte_pending = false;  // accepted: may carry the memfd
    std::vector<uint8_t> in;          // bytes read, not yet a whole frame
    std::vector<uint8_t> out;         // bytes queued, not yet written
    size_t out_offset = 0;
    bool closing = false;  // Close() called: shut down once `out` drains
  };
  void Run();
  void Wake();
  uint64_t AddLink(int fd, bool accepted = false);  // REQUIRES mu_
  // Shared-memory transport (fake_nic_fabric.cc).
  // The accepted link's first byte: the memfd (rings) or a frame's byte.
  int DialPath(const std::string& addr, uint16_t port, bool wildcard,
               uint64_t* link);
  bool ReadFirstByte(Link* link);  // REQUIRES mu_; false at EOF / error
  // Unsequenced: the frames go to on_frame_ under the drain lock, so the
  // fabric thread and an inline drain never reorder a link's frames (each
  // as it is taken, in place when it lies whole in the ring). Sequenced:
  // they are copied into `frames`. Returns how many frames it took.
  size_t HandOver(uint64_t id, ShmLink* shm, std::vector<Frame>* frames);
  // Writes queued bytes into the ring; REQUIRES mu_.
  void FlushShmLocked(Link* link);
  // Publishes the rings HandOver's handlers wrote to (takes mu_).
  void PublishDeferred();
  std::vector<std::shared_ptr<ShmLink>> deferred_;  // guarded by mu_
  // Reads what `fd` has; false at EOF or on an error.
  bool ReadFrames(uint64_t id, int fd, std::vector<Frame>* frames);
  // Writes queued bytes; REQUIRES mu_.
  void FlushLocked(Link* link);
  // Sequenced mode: frames read and link ends go to pending_.
  void Deliver(uint64_t id, std::vector<Frame>* frames, bool open);
  // kSync: takes every waiting connection and every byte the peers wrote.
  void DrainForSync();
  void OnSequencerReadable();
  void SendToSequencer(uint32_t type, uint32_t a, uint64_t b, uint64_t c,
                       const std::string& text);
  bool AllFlushedLocked() const;  // REQUIRES mu_
  // SO_PEERCRED of an accepted socket against trust_; closes a refused one.
  bool AcceptedPeerAllowed(int fd);

  const std::string dir_;
  // Who may join (fake_nic_fabric_trust.h): read when the fabric starts.
  FabricTrust trust_;
  bool use_shm_ = true;
  // DrainInline calls so far (a hint, not an exact count: pollers on
  // several threads may lose an increment). While it moves, the
  // application polls and the fabric thread does not advertise sleep (no
  // doorbells needed). A counter, not a clock: the poll path reads no time.
  std::atomic<uint64_t> inline_polls_{0};
  std::atomic<int> shm_links_{0};  // Links on rings: DrainInline has work
  // The fabric thread counts on a poller now (it advertises no sleep).
  std::atomic<bool> poll_mode_{false};
  // BlockingWaitBegins calls: the fabric thread forgets the polls it saw.
  std::atomic<uint64_t> block_epoch_{0};
  // The Links on rings, for DrainInline. shm_mu_ is a leaf lock (nothing is
  // taken under it), so DrainInline never waits for mu_, which the fabric
  // thread holds at each of its wake-ups (that contention was a futex in
  // one round trip of seven). Changed under mu_ then shm_mu_.
  std::mutex shm_mu_;
  std::vector<std::shared_ptr<ShmLink>> shm_list_;  // guarded by shm_mu_
  // CheckFabricDirectory on dir_, saying on stderr why a refusal refuses.
  int CheckDirectory(FabricTrust* trust) const;
  // Whether application threads may take frames from the rings (DrainInline,
  // RingSockets): there are shared-memory links, and no Sequencer orders
  // the frames.
  bool RingsInUse() const {
    return shm_links_.load(std::memory_order_relaxed) != 0 && seq_fd_ < 0;
  }
  // Publish's one attempt in the directory as it is (ENOENT: it is gone).
  int PublishIn(const std::string& addr, uint16_t port);
  void AddShmLocked(std::shared_ptr<ShmLink> shm);  // REQUIRES mu_
  void RemoveShmLocked(const ShmLink* shm);         // REQUIRES mu_
  const OnFrame on_frame_;
  const OnClosed on_closed_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::mutex mu_;  // below the NIC's mutex: never held while calling out
  bool stop_ = false;
  uint64_t next_link_ = 1;
  std::map<uint64_t, Link> links_;
  std::map<std::string, int> listeners_;  // path -> listening fd
  std::vector<int> retired_listeners_;    // unpublished, closed by Run()

  // Sequenced mode.
  struct PendingItem {
    bool closed = false;
    Frame frame;
  };
  int seq_fd_ = -1;
  // ClaimNode: the node number and its lock file (held until exit).
  uint32_t node_ = 0;
  int node_lock_fd_ = -1;
  SequenceHooks seq_hooks_;
  std::mutex seq_send_mu_;  // one message at a time on seq_fd_
  std::string seq_in_;      // fabric thread only
  std::map<uint64_t, std::deque<PendingItem>> pending_;  // guarded by mu_
  uint64_t pending_count_ = 0;                           // guarded by mu_
  bool done_pending_ = false;  // fabric thread: a step's kDone is owed
  bool seq_lost_ = false;      // fabric thread: the sequencer went away
  std::condition_variable flushed_cv_;  // with mu_: AllFlushedLocked()
};

}  // namespace fake_nic_internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_H_
