// fake_nic_internal.h: the objects behind the rdma-core handles FakeNic hands
// out. Private to nic/fake_nic*.cc.
//
// Each object embeds the rdma-core struct it stands for (`base`) and FakeNic
// finds the object again without casting the caller's pointer: a QP or CQ by
// the slot its `base.handle` carries (the slot must hold the object whose
// `base` was passed; destroyed ones are retired, not freed, so a stale
// pointer is still our memory), the other objects through a map keyed by
// &base. A foreign or stale pointer is detected either way.
//
// Example:
//   Qp* qp = FindQp(ibv_qp_pointer);   // nullptr if not ours

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_INTERNAL_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_INTERNAL_H_

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "nic/fake_nic.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {
namespace fake_nic_internal {

// The timers of `timers` (each with a steady_clock `at`) due at `now`,
// removed and returned in the order they were armed: the one scan both
// kinds of real-time timer (transport, CM) fire by.
template <typename Timer>
std::vector<Timer> TakeDueTimers(std::vector<Timer>& timers,
                                 std::chrono::steady_clock::time_point now) {
  std::vector<Timer> due;
  auto keep = std::stable_partition(
      timers.begin(), timers.end(),
      [now](const Timer& t) { return t.at > now; });
  std::move(keep, timers.end(), std::back_inserter(due));
  timers.erase(keep, timers.end());
  return due;
}

// A FIFO for the send, receive and completion queues. It allocates nothing
// until first used and then only when it outgrows its capacity (one slot,
// then doubling), so a steady stream of WRs allocates nothing and a queue
// holds about as many slots as it ever had entries at once: a QP that keeps
// one WR outstanding holds one 192-byte send slot, not four (the rings'
// first four slots were 28 % of a used QP's memory at 10 000 pairs);
// std::deque allocated a 512-byte
// block (and its map) per queue up front and again as it went around, which
// was most of the memory of an idle QP. (rxe allocates the whole ring of
// max_send_wr + 1 slots at create, rxe_queue.c rxe_queue_init; the fake's
// memory is its own, not a NIC's, so it need not.)
//
// Entries are built in place (emplace_back hands out the slot) and consumed
// in place (front(), then pop_front advances the head): a WR is never moved
// between post and completion. Every free slot is kept in its cleared state,
// so a slot handed out needs no construction; pop_front clears the slot it
// frees with ClearSlot: the entry's own Clear() (which keeps out-of-line
// buffers for reuse) for one that has it, assignment from T() otherwise --
// except a plain struct such as ibv_wc, whose slot keeps the old bytes: its
// writer fills every field.
template <typename T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  // The i-th entry from the front (i < size()).
  const T& at(size_t i) const {
    return slots_[(head_ + i) & (capacity_ - 1)];
  }
  // A cleared slot at the back, counted in size() at once.
  T& emplace_back() {
    if (size_ == capacity_) Grow();
    T& slot = slots_[(head_ + size_) & (capacity_ - 1)];
    ++size_;
    return slot;
  }
  void push_back(T value) { emplace_back() = std::move(value); }
  // Gives back the slot emplace_back handed out last (a WR refused after
  // it was started).
  void pop_back() {
    --size_;
    ClearSlot(slots_[(head_ + size_) & (capacity_ - 1)]);
  }
  void pop_front() {
    ClearSlot(slots_[head_]);  // release what the entry holds now
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }
  void clear() {
    while (!empty()) pop_front();
  }

 private:
  template <typename U>
  static auto ClearSlot(U& slot) -> decltype(slot.Clear()) {
    slot.Clear();
  }
  template <typename U, typename... Ignored>
  static void ClearSlot(U& slot, Ignored...) {
    if constexpr (!std::is_trivially_copyable_v<U>) slot = U();
  }

  void Grow() {
    const uint32_t capacity = capacity_ == 0 ? 1 : 2 * capacity_;
    std::unique_ptr<T[]> slots(new T[capacity]);
    for (uint32_t i = 0; i < size_; ++i) {
      slots[i] = std::move(slots_[(head_ + i) & (capacity_ - 1)]);
    }
    slots_ = std::move(slots);
    capacity_ = capacity;
    head_ = 0;
  }

  // 24 bytes: a QP embeds three rings, a CQ one (the counts fit: a queue
  // is at most FakeDeviceCaps::max_qp_wr / max_cqe deep, an int).
  std::unique_ptr<T[]> slots_;
  uint32_t capacity_ = 0;  // 0 or a power of two
  uint32_t head_ = 0;
  uint32_t size_ = 0;
};

// The context handed out is ext.context, with a way back to its FakeNic:
// the data-path ops in its ops (post_send, post_recv, poll_cq,
// req_notify_cq) are trampolines, so rdma-core's inline ibv_post_send() &
// co. on fake objects reach the fake instead of a null pointer. It is the
// last member of an rdma-core verbs_context, marked extended (verbs.h
// verbs_get_ctx: abi_compat, sz), as a provider's is: the extended verbs
// inline in <infiniband/verbs.h> (ibv_create_qp_ex, ibv_create_cq_ex,
// ibv_query_device_ex, ...) look for their op in front of the context. The
// NIC fills none of those ops, so each answers EOPNOTSUPP or takes its
// legacy path until a library fills them (the drop-in libibverbs.so.1,
// verbs_dropin/ibverbs_ex.cc).
struct DeviceContext {
  verbs_context ext;
  FakeNic* nic;
  ibv_context* context() { return &ext.context; }
};

struct Device {
  ibv_device device;  // ibv_context::device points here
  DeviceContext context;
  FakeDeviceConfig config;
  bool up = true;
  // The context's asynchronous events (ibv_get_async_event(3)): queued here
  // and counted on async_fd, an eventfd in semaphore mode, so the program
  // can poll(2) ibv_context::async_fd. Under the NIC's mutex the count
  // equals the queue's length.
  int async_fd = -1;
  std::deque<ibv_async_event> async_events;
  int num_pds = 0;
  int num_cqs = 0;
  int num_qps = 0;
  int num_mrs = 0;
  int num_srqs = 0;
};

struct Pd {
  ibv_pd base;
  Device* device = nullptr;
  int num_users = 0;  // MRs and QPs
};

struct Mr {
  ibv_mr base;
  Pd* pd = nullptr;
  int access = 0;
  uint32_t ordinal = 0;  // 1, 2, ... in registration order (FakeNicEvent)
};

// A pending event is counted on the fd (an eventfd in semaphore mode) so the
// user can poll() it, and queued here so GetCqEvent knows which CQ it is.
struct CompChannel {
  ibv_comp_channel base;
  Device* device = nullptr;
  std::deque<Cq*> pending;
  int num_cqs = 0;
  // Threads blocked in GetCqEvent's read() (FakeNic::WaitForCqEvent): each
  // one's own eventfd, signalled with the channel's.
  std::vector<int> waiter_fds;
};

// The room rdma-core's extended objects take past ibv_qp / ibv_cq
// (ibv_qp_ex, ibv_cq_ex start with them), which a QP or CQ has when its NIC
// was made with FakeNicConfig::verbs_extension: allocated past the end of
// the Qp / Cq, whose base is its last member, as a provider's verbs_qp /
// verbs_cq holds it. Objects made with New(extension) and reused (the
// retired lists) only within one NIC, so all of a NIC's have it or none.
constexpr size_t kQpExtension = sizeof(ibv_qp_ex) - sizeof(ibv_qp);
constexpr size_t kCqExtension = sizeof(ibv_cq_ex) - sizeof(ibv_cq);

// Members in the order a completion and a poll touch them: the ring and
// its flags, then base (whose first cache line holds base.handle, which
// FindCq reads). The NIC finds a Cq from its ibv_cq by base.handle, never
// by address, so base can be last (see kCqExtension).
struct Cq {
  Ring<ibv_wc> entries;
  int depth = 0;
  bool armed = false;
  bool armed_solicited_only = false;
  bool overrun = false;
  // A completion was lost on this full CQ, which goes on
  // (Personality::cq_full_loses_the_completion_only): said once on stderr.
  bool lost_a_completion = false;
  CompChannel* channel = nullptr;
  size_t slot = 0;  // FakeNic::cq_slots_ index, also in base.handle
  Device* device = nullptr;
  unsigned int events_delivered = 0;
  unsigned int events_acked = 0;
  int num_qps = 0;
  unsigned int async_unacked = 0;  // IBV_EVENT_CQ_ERR got and not acked
  ibv_cq base;  // last: see kCqExtension

  // `new (extension) Cq()`: with kCqExtension bytes past the end when
  // `extension`.
  static void* operator new(size_t size, bool extension) {
    return ::operator new(size + (extension ? kCqExtension : 0));
  }
  static void operator delete(void* p) { ::operator delete(p); }
  static void operator delete(void* p, bool) { ::operator delete(p); }
};
static_assert(offsetof(Cq, base) + sizeof(ibv_cq) == sizeof(Cq),
              "the extension room must follow Cq::base");

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// Copies `length` bytes of the gather list `src`, from message offset
// `offset` on, into `dst` with GuardedCopy (memmove semantics: in loopback
// a packet's source and target may overlap); false on a fault (*fault: the
// address) or when the list ends first. The one gather of a message's
// bytes: the write and send packet loops, a frame to another process, a
// UC message. Inline: once per write on the data path.
inline bool GatherAt(const Sge* src, size_t nsrc, uint64_t offset,
                     uint8_t* dst, uint64_t length, uintptr_t* fault) {
  for (size_t i = 0; i < nsrc && length > 0; ++i) {
    if (offset >= src[i].length) {
      offset -= src[i].length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(src[i].length - offset, length);
    if (!GuardedCopy(dst, reinterpret_cast<const void*>(src[i].addr + offset),
                     n, fault)) {
      return false;
    }
    dst += n;
    length -= n;
    offset = 0;
  }
  return length == 0;
}

// A WR's SGE list. Up to kInline entries live in the WQE itself, so posting
// the usual one- or two-SGE WR allocates nothing (a std::vector per WR was a
// tenth of a round trip); longer lists spill to the heap, behind one pointer
// (48 bytes in all, where an embedded std::vector made it 64: the list is
// in every send and receive slot).
class SgeList {
 public:
  static constexpr uint32_t kInline = 2;

  void push_back(const Sge& sge) {
    if (size_ < kInline) {
      inline_[size_++] = sge;
      return;
    }
    if (heap_ == nullptr) heap_ = std::make_unique<std::vector<Sge>>();
    if (size_ == kInline) heap_->assign(inline_, inline_ + kInline);
    heap_->push_back(sge);
    ++size_;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Sge* begin() const {
    return size_ <= kInline ? inline_ : heap_->data();
  }
  const Sge* end() const { return begin() + size_; }
  const Sge& front() const { return *begin(); }
  const Sge& operator[](size_t i) const { return begin()[i]; }
  // The WR's own list (REQUIRES: n >= 0 and, when n > 0, list non-null).
  void assign(const ibv_sge* list, int n) {
    clear();
    if (n <= static_cast<int>(kInline)) {
      // Field by field into the slot: a temporary Sge built from two 8-byte
      // stores and read back as one 16-byte load stalled store forwarding
      // (a fifth of PostSend's time in perf).
      for (int i = 0; i < n; ++i) {
        inline_[i].addr = list[i].addr;
        inline_[i].length = list[i].length;
        inline_[i].lkey = list[i].lkey;
      }
      size_ = static_cast<uint32_t>(n);
      return;
    }
    for (int i = 0; i < n; ++i) {
      push_back({list[i].addr, list[i].length, list[i].lkey});
    }
  }
  // Empty again; a spilled list keeps its heap buffer for the next WR.
  void clear() {
    size_ = 0;
    if (heap_ != nullptr) heap_->clear();
  }

 private:
  Sge inline_[kInline];
  // All entries once there are more than kInline; allocated at the first
  // spill and kept (cleared) for the slot's next WR.
  std::unique_ptr<std::vector<Sge>> heap_;
  uint32_t size_ = 0;
};

// What an executed RDMA write still has to land (FakeNicConfig::landing).
struct PendingLanding {
  struct Piece {
    uint64_t offset = 0;  // in the message
    uint64_t length = 0;
  };
  std::vector<uint8_t> bytes;  // the source, snapshotted at execution
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  std::vector<Piece> pieces;  // in landing order
  size_t next = 0;
  bool started = false;       // executed: the pieces are set
  bool took_receive = false;  // a receive was taken at execution: its wr_id
  uint64_t recv_wr_id = 0;
};

// A send slot's plain members: everything but the three that own memory.
// SendWqe::Clear() resets them all by assigning a value-initialised
// SendWqeFields, so a member added here is reset without anyone
// remembering to (the old hand-written Clear() needed a size check as a
// reminder). No padding (`reserved` fills the tail; static_assert below):
// a cleared entry compares equal byte for byte to a fresh one, which
// fake_nic_layout_test checks.
struct SendWqeFields {
  uint64_t wr_id = 0;
  uint64_t remote_addr = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // Cross-process (fake_nic_remote.cc): sent to the peer's process and
  // waiting for its answer, which carries `token` (see in_flight).
  uint64_t token = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned int send_flags = 0;
  uint32_t imm_data = 0;  // network byte order, as posted
  uint32_t rkey = 0;
  // RNR state: attempts left (see rnr_started).
  int rnr_retries_left = 0;
  // Fault injection: steps left to wait (see hook_consulted).
  int delay_steps_left = 0;
  // Packets of the message already acknowledged (fake_nic_packets.cc); a
  // retry after an RNR NAK resumes here.
  uint32_t next_packet = 0;
  bool is_inline = false;
  bool signaled = false;
  // RNR: attempts started, and whether the WR is parked until the
  // responder posts a receive (rnr_retry == 7).
  bool rnr_started = false;
  bool waiting_for_receive = false;
  bool hook_consulted = false;  // the execute hook was asked
  bool in_flight = false;
  // In flight for good, with this token no answer or timer carries
  // (Personality::local_error_behind_unanswered_wr_stalls): nothing but
  // the QP leaving RTS ends it, and nobody waits for it.
  static constexpr uint64_t kStalledToken = ~uint64_t{0};
  bool stalled() const { return in_flight && token == kStalledToken; }
  // Transport retries spent on requests nobody answered (the responder QP
  // is gone, not yet RTR, or its process exited): see
  // FakeNic::RequesterWaitsForRetransmit.
  uint8_t transport_retries = 0;
  // The peer process said "retry now" (a receive posted, its QP changed or
  // reset: TellRemoteToRetry) while this WR was in flight: its RNR NAK,
  // arriving on another link after the word, must not park it for good.
  bool retry_told = false;
  // ...and every word since said the QP changed, none that a receive came:
  // the NAK parks it, to be resent at its RNR timer's next tick
  // (FakeNic::RetryAtRnrTick), as the word would have had it parked.
  bool retry_told_changed = false;
  uint8_t reserved[3] = {};  // no padding: see above
};
static_assert(std::is_trivially_copyable_v<SendWqeFields> &&
                  std::has_unique_object_representations_v<SendWqeFields>,
              "SendWqeFields must stay plain and without padding: put a "
              "member that owns memory in SendWqe, resize `reserved`");

struct SendWqe : SendWqeFields {
  SgeList sges;
  std::vector<uint8_t> inline_data;  // copied at post time
  // Landing other than kAtOnce (fake_nic_landing.cc): executed and checked,
  // its bytes not yet (all) landed. Null otherwise: one pointer test per
  // step is what the default mode pays.
  std::unique_ptr<PendingLanding> landing;
  uint64_t total_length() const {
    if (is_inline) return inline_data.size();
    uint64_t total = 0;
    for (const Sge& sge : sges) total += sge.length;
    return total;
  }
  // Back to a default-constructed entry, keeping the SGE list's and the
  // inline data's buffers (Ring::pop_front).
  void Clear() {
    static_cast<SendWqeFields&>(*this) = SendWqeFields();
    sges.clear();
    inline_data.clear();
    landing.reset();
  }
};
// Only the three members Clear() resets by hand besides the fields.
static_assert(sizeof(SendWqe) == sizeof(SendWqeFields) + sizeof(SgeList) +
                                     sizeof(std::vector<uint8_t>) +
                                     sizeof(std::unique_ptr<PendingLanding>),
              "a member added to SendWqe must be reset in Clear(): put a "
              "plain one in SendWqeFields");

// One request packet of an RC message (IB spec 9.2 / rxe_opcode.c).
struct RequestPacket {
  enum class Position { kFirst, kMiddle, kLast, kOnly };
  Position position = Position::kOnly;
  uint32_t index = 0;          // in the message (PSN - first PSN)
  uint64_t offset = 0;         // of its payload in the message
  uint32_t length = 0;         // payload bytes (<= path MTU)
  bool has_reth = false;       // FIRST / ONLY: va, rkey, DMA length
  bool has_imm = false;        // LAST / ONLY of a *_WITH_IMM
  bool takes_receive = false;  // RXE_RWR_MASK
  bool ends_message = false;   // LAST / ONLY
};
uint32_t MtuBytes(ibv_mtu mtu);
// Inline: both run once or twice per write on the data path.
inline uint32_t PacketCount(uint64_t length, uint32_t mtu) {
  if (length == 0) return 1;
  // Every IB MTU is a power of two (ibv_mtu): a shift, not a 64-bit divide
  // (the divide was the hottest instruction of a one-packet write).
  if ((mtu & (mtu - 1)) == 0) {
    return static_cast<uint32_t>((length + mtu - 1) >> __builtin_ctz(mtu));
  }
  return static_cast<uint32_t>((length + mtu - 1) / mtu);
}

inline RequestPacket MakeWritePacket(ibv_wr_opcode opcode, uint64_t length,
                                     uint32_t mtu, uint32_t index) {
  RequestPacket p;
  const uint32_t count = PacketCount(length, mtu);
  p.index = index;
  p.offset = uint64_t{index} * mtu;
  p.length = static_cast<uint32_t>(
      std::min<uint64_t>(mtu, length > p.offset ? length - p.offset : 0));
  const bool first = index == 0;
  const bool last = index + 1 == count;
  p.position = count == 1 ? RequestPacket::Position::kOnly
               : first    ? RequestPacket::Position::kFirst
               : last     ? RequestPacket::Position::kLast
                          : RequestPacket::Position::kMiddle;
  p.has_reth = first;
  const bool with_imm = opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  p.has_imm = with_imm && last;
  // rxe_opcode.c: RDMA_WRITE_LAST_WITH_IMMEDIATE and
  // RDMA_WRITE_ONLY_WITH_IMMEDIATE carry RXE_RWR_MASK.
  p.takes_receive = with_imm && last;
  p.ends_message = last;
  return p;
}

// A SEND / SEND_WITH_IMM packet: no RETH; FIRST / ONLY take the receive
// (rxe_opcode.c: SEND_FIRST, SEND_ONLY* carry RXE_RWR_MASK), the immediate
// rides on LAST / ONLY.
RequestPacket MakeSendPacket(ibv_wr_opcode opcode, uint64_t length,
                             uint32_t mtu, uint32_t index);
const char* PositionName(RequestPacket::Position position);

// The responder's context of the RDMA WRITE in progress (rxe's qp->resp):
// what its RETH packet said and check_rkey's verdict, for the packets after
// it. RESET starts it over (rxe_qp.c rxe_qp_reset).
struct ResponderState {
  uint64_t write_va = 0;
  uint64_t write_length = 0;
  bool write_checked = false;
  bool write_started = false;  // a RETH packet came since the last RESET
  // A request's first packet (a SEND's FIRST, a write with imm's ONLY) was
  // RNR NAKed since the last RESET: that request passed its PSN check, so
  // the one its requester sends again after the RNR wait is no new
  // request. A requester that sends one again and finds this false meets
  // a responder reset since, to which the message is new (checked by
  // FakeNic::CheckRequestPsn against the PSN its new RTR expects).
  bool first_rnr_naked = false;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  SgeList sges;
  void Clear() {  // Ring::pop_front; keeps a spilled SGE list's buffer
    wr_id = 0;
    sges.clear();
  }
};
// wr_id and the list only: a new member must be reset in Clear().
static_assert(sizeof(RecvWqe) == sizeof(uint64_t) + sizeof(SgeList),
              "reset the new member in Clear()");

struct Qp;

// A shared receive queue (ibv_create_srq(3)): receives posted to it are
// consumed, in order, by whichever attached QP needs one next, and complete
// on that QP's recv_cq with that QP's qp_num (IB spec 10.2.9, "Shared
// Receive Queues"; rxe_resp.c get_srq_wqe).
struct Srq {
  ibv_srq base;
  Device* device = nullptr;
  Pd* pd = nullptr;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  // ibv_modify_srq(3)'s srq_limit: armed while non-zero; the responder
  // raises IBV_EVENT_SRQ_LIMIT_REACHED and disarms it (TakeReceive).
  uint32_t limit = 0;
  unsigned int async_unacked = 0;  // events got and not acked
  Ring<RecvWqe> rq;
  std::vector<Qp*> qps;  // attached QPs
};

// Members in two groups, then base. Cold (first): the ibv_modify_qp(3)
// record, the retry counts and RNR timer (read on RNR and error paths),
// the cross-process resume state, the stranded receives and the
// requester-index model. Hot (the 160 bytes before base): what a post, a
// write's execution and its completions read -- the CQs, the PD, the
// peer, the rings, the caps, the scheduler slot, the link test, the
// responder state. base comes last (see kQpExtension), its first line,
// which holds handle, qp_num and state, right after the hot members; its
// mutex and cond, which the fake never uses, fill the next two. A 10
// 000-QP run touches each QP's lines once per operation, so the fewer the
// better (before this order a write touched six or seven lines of its QP;
// with cold after hot and base last, tools/bench's 1000-pair figure was
// ~8 % slower than this order). The NIC finds a Qp from its ibv_qp by
// base.handle (FindQp), never by address.
struct Qp {
  // ---- cold
  // rxe's producer index, the requester's req.wqe_index, and how many WRs
  // at sq's front the completer may flush in ERR (the rest stay queued
  // without a completion); only when sq_ring_slots != 0.
  uint32_t sq_prod = 0;
  uint32_t req_index = 0;
  size_t sq_flushable = 0;
  uint8_t rnr_retry = 7;
  uint8_t retry_cnt = 7;
  uint8_t min_rnr_timer = 0;
  // A UC responder that took a message's first packet and never its last
  // keeps expecting a middle packet (rxe's resp.opcode stays FIRST or
  // MIDDLE): what that message was decides what the next message's first
  // packet meets (FakeNic::UcMessageAfterCut;
  // Personality::uc_cut_message_stalls_responder). RESET clears it.
  enum class UcCut : uint8_t { kNone, kSend, kWrite };
  UcCut uc_cut = UcCut::kNone;
  // Personality::queued_sends_wait_for_a_doorbell: WRs were posted while
  // the QP was not in RTS; they start at the next PostSend in RTS.
  bool sq_waits_for_doorbell = false;
  // A READ's answer ended it in error: entering ERR, the requester runs
  // twice (CompleteSend sets it, SetQpState spends it).
  bool requester_runs_twice_in_err = false;
  // This move to ERR came inside a requester run an RNR timer started:
  // the send queue flushes first, whatever Personality::
  // flushes_receive_queue_first says (FakeNic::RnrNakHead).
  bool flush_send_queue_first = false;
  // The requester's index has already passed the head WR, and the WRs it
  // sent behind it (FakeNic::RequesterSentPastHead): the head's completion
  // does not move it again (CompleteSend clears it).
  bool head_passed = false;
  uint32_t dest_qp_num = 0;
  // The PSN of the head WR's first packet: sq_psn when ibv_modify_qp sets
  // it (rxe_qp.c rxe_qp_from_attr: req.psn), advanced by the PSNs of each
  // WR the requester finished (CompleteSend; a flushed WR sent nothing).
  uint32_t next_psn = 0;
  // The responder's rxe resp.psn: the PSN the next new request must carry
  // (set by ibv_modify_qp's rq_psn, advanced past each request taken in
  // sequence; FakeNic::CheckRequestPsn), and resp.ack_psn: the PSN after
  // the last request packet executed (0 on a new or reset QP; a READ
  // leaves it), from which a duplicate's ACK is made.
  uint32_t expected_psn = 0;
  uint32_t ack_psn = 0;
  uint32_t resume_packet = 0;  // 0: nothing to resume; see resume_wr_id
  // In real time (FakeNic::RequesterTimersRunInRealTime): when the head WR
  // parked on an RNR NAK (rnr_retry 7) and its RNR timer's period
  // (FakeNic::ParkOnRnrTimer; 0: not parked in real time), and the token
  // of the tick armed to resend it (FakeNic::RetryAtRnrTick; 0: none).
  std::chrono::steady_clock::time_point rnr_parked_at{};
  uint64_t rnr_period_ns = 0;
  uint64_t rnr_tick_token = 0;
  // The write this responder last RNR-NAKed for a peer in another process:
  // the only request allowed to resume past its first packet (a frame is
  // input: a resumed packet reuses the rkey and bounds checked on FIRST).
  uint64_t resume_wr_id = 0;
  uint64_t resume_length = 0;
  Device* device = nullptr;
  CmId* id = nullptr;
  Ring<RecvWqe> stranded_rq;  // the stranded receives, in posting order
  // Everything ibv_modify_qp(3) set (fake_nic_qp_state.cc); rnr_retry,
  // retry_cnt, min_rnr_timer and dest_qp_num mirror it for the data path.
  ibv_qp_attr attr{};
  // ---- hot: the 160 bytes before base (static_assert below)
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Pd* pd = nullptr;
  Qp* peer = nullptr;
  Srq* srq = nullptr;  // receives come from here instead of rq
  Ring<SendWqe> sq;
  Ring<RecvWqe> rq;
  ibv_qp_cap cap{};
  // Personality::sq_flush_follows_requester_index: rxe's send ring of
  // sq_ring_slots (0: not modelled); see sq_prod.
  uint32_t sq_ring_slots = 0;
  size_t slot = 0;  // FakeNic::qp_slots_ index (creation order), base.handle
  // Cross-process: the fabric link to the peer QP in another process (0:
  // the peer, if any, is `peer`, in this NIC), whether it is dead, and
  // whether that peer's requester waits for us to post a receive (RNR,
  // rnr_retry 7).
  uint64_t link = 0;
  ResponderState responder;  // fake_nic_packets.cc
  // Receives posted in ERR that the personality never completes (they keep
  // their queue slot until RESET); see Personality.
  uint32_t stranded_recvs = 0;
  bool sq_sig_all = false;
  // Set by the packet path before it completes a WR with an error: whether
  // the failing packet ended the message (rxe_req.c update_state advances
  // req.wqe_index on a message's last packet only).
  bool failed_on_last_packet = true;
  bool link_dead = false;
  bool remote_waits_for_receive = false;
  void AdvanceRequesterIndex() {
    if (sq_ring_slots != 0) req_index = (req_index + 1) & (sq_ring_slots - 1);
  }
  // rxe_requester in QP_STATE_ERROR: a WQE at req.wqe_index (it is not the
  // producer index) takes the err path: req.wqe_index + 1, completer runs.
  // Returns whether it ran the completer.
  bool RequesterRunInErr() {
    if (sq_ring_slots == 0 || req_index == sq_prod) return false;
    AdvanceRequesterIndex();
    return true;
  }
  // rxe_qp.c rxe_qp_error, run by every move to ERR (from ERR too:
  // rxe_qp_from_attr calls it for any IB_QPS_ERR): the requester runs once
  // (twice after a READ's error answer, see CompleteSend) and the completer
  // flushes the whole send ring (rxe_comp.c rxe_drain_resp_pkts).
  void RunErrorTasks(bool requester_twice) {
    if (sq_ring_slots == 0) return;
    RequesterRunInErr();
    if (requester_twice) RequesterRunInErr();
    sq_flushable = sq.size();
  }
  // Where an incoming SEND / WRITE_WITH_IMM takes its receive from.
  Ring<RecvWqe>& ReceiveQueue() { return srq != nullptr ? srq->rq : rq; }
  ibv_qp base;  // last: see kQpExtension

  // `new (extension) Qp()`: with kQpExtension bytes past the end when
  // `extension`.
  static void* operator new(size_t size, bool extension) {
    return ::operator new(size + (extension ? kQpExtension : 0));
  }
  static void operator delete(void* p) { ::operator delete(p); }
  static void operator delete(void* p, bool) { ::operator delete(p); }
};
static_assert(offsetof(Qp, base) + sizeof(ibv_qp) == sizeof(Qp),
              "the extension room must follow Qp::base");
// The hot members fit the 160 bytes before base (a new hot member goes in
// their group, a cold one in the cold group).
static_assert(offsetof(Qp, base) - offsetof(Qp, send_cq) <= 160,
              "the hot members of Qp outgrew their cache lines");

struct EventChannel {
  rdma_event_channel base;
  std::deque<CmEvent*> queue;  // owned by FakeNic::outstanding_events_
  int num_ids = 0;
};

enum class CmState {
  kIdle,
  kAddrBound,      // BindAddr done
  kAddrResolved,   // ResolveAddr done
  kRouteResolved,  // ResolveRoute done
  kListening,
  kConnecting,       // Connect sent, no answer yet
  kRequestReceived,  // passive id created by a CONNECT_REQUEST
  kAccepted,         // passive: Accept sent, RTU not yet seen
  kConnected,
  kDisconnected,
  kRejected,
};

// Packed (the one-byte and four-byte members together): 24 bytes less
// than in declaration-by-topic order, at 20 000 ids for 10 000 pairs.
struct CmId {
  rdma_cm_id base;
  uint64_t handle = 0;
  EventChannel* channel = nullptr;
  Device* device = nullptr;
  Qp* qp = nullptr;
  std::string local_addr;
  std::string remote_addr;
  uint64_t peer_handle = 0;
  uint64_t listener_handle = 0;
  // Cross-process: the fabric link to the peer id (0: in-process peer) and
  // the peer's QP number from its REQ / REP.
  uint64_t link = 0;
  uint32_t remote_qp_num = 0;
  CmState state = CmState::kIdle;
  int unacked_events = 0;
  uint16_t local_port = 0;
  uint16_t remote_port = 0;
  // What the REQ carried (passive) or what we sent (active): librdmacm/IB CM
  // derive both QPs' retry counts from these (drivers/infiniband/core/cm.c,
  // cm_req_handler / cm_rep_handler).
  uint8_t req_retry_count = 7;
  uint8_t req_rnr_retry_count = 7;
  // The initiator depth the peer's REQ (passive) or REP (active) carried:
  // the IB CM grants REMOTE_READ and REMOTE_ATOMIC only when it is non-zero
  // (cm.c cm_init_qp_init_attr).
  uint8_t peer_initiator_depth = 0;
  // The responder resources the peer's REQ carried (passive side): the
  // CONNECT_REQUEST event's initiator_depth (cm.c cm_format_req_event).
  uint8_t peer_responder_resources = 0;
  // rdma_conn_param::qp_num of Connect / Accept on an id with no QP (the
  // program connects a QP of its own): the QP number the REQ / REP carry.
  uint32_t param_qp_num = 0;
  // The PSNs the IB CM sets up: this side's first send PSN (cma.c
  // id_priv->seq_num, random), sent in its REQ (active) or REP (passive)
  // as the starting PSN. It becomes the QP's sq_psn, and the peer's
  // (REQ or REP) its rq_psn (cm.c ib_cm_init_qp_attr), so each QP's rq_psn
  // is its peer's sq_psn. A passive id keeps the REQ's until its Accept;
  // the active side takes the REP's as it arrives.
  uint32_t starting_psn = 0;
  uint32_t peer_starting_psn = 0;  // passive: the REQ's starting PSN
  // Ours, from the rdma_conn_param of Connect / Accept (RDMA_MAX_INIT_DEPTH /
  // RDMA_MAX_RESP_RES already replaced by the device's limit).
  uint8_t initiator_depth = 0;
  uint8_t responder_resources = 0;
  // rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT): the QP's timeout at RTS
  // instead of the CM's (cma.c rdma_set_ack_timeout, cma_modify_qp_rts).
  uint8_t ack_timeout = 0;
  bool ack_timeout_set = false;
  bool disconnect_seen = false;  // DISCONNECTED/CONNECT_ERROR queued for us
  // A DREQ taken and not yet answered with a DREP (Personality::
  // dreq_waits_for_peer_disconnect): our rdma_disconnect or
  // rdma_destroy_id sends it.
  bool drep_owed = false;
  bool timewait_armed = false;  // FakeNic::EnterTimewait ran for it
  // In FakeNic::bound_ under BoundKey(local_addr, local_port): BindAddr
  // set both, and nothing changes them on a bound id (ResolveAddr picks a
  // source address for an unbound one only). The key is not kept: 32 bytes
  // per id.
  bool bound = false;
};

struct CmEvent {
  rdma_cm_event base;
  std::vector<uint8_t> private_data;
  uint64_t counted_on = 0;  // handle of the id whose unacked_events counts it
  bool got = false;         // handed out by GetCmEvent, awaiting AckCmEvent
  // Work librdmacm does inside rdma_get_cm_event when it hands this event
  // out (the active side's REP processing); runs with the NIC's mutex held.
  std::function<void()> on_get;
};

// Why a request went unanswered when the responder's receive CQ was full
// (Personality::cq_full_loses_the_completion_only; rxe_resp.c do_complete,
// RESPST_ERR_CQ_OVERFLOW).
constexpr char kReceiveCqFull[] =
    "receive CQ full: completion lost, responder to ERR, no ACK";
// The trace's answer for the packet (or landed piece) whose receive
// completion found its CQ full: neither ACK nor NAK went.
constexpr char kUnansweredCqFull[] = "no answer: receive CQ full";
// The trace's answer for the packet whose payload copy faulted in the
// requester's own memory (unmapped or protected after registration,
// HarnessMemoryError): the packet was never built, as a bad source SGE's
// (rxe_req.c finish_packet).
constexpr char kNotSentRequesterMemory[] =
    "not sent: the requester's memory faulted";
// The trace's answer for the packet whose payload copy faulted in the
// responder's memory: NAKed as its own protection failure.
constexpr char kNakResponderMemory[] =
    "NAK remote access (the responder's memory faulted)";
// A packet continuing a write its responder never saw begin
// (FakeNic::CheckWritePacket).
// What a request out of PSN sequence gets (FakeNic::CheckRequestPsn), by
// its FakeNic::SequenceAnswer: kNoAnswer, kAckedUnexecuted,
// kNakInvalidRequest. Each travels whole in an answer frame's `why`
// (static_assert in fake_nic_remote.cc), so both paths record the same.
constexpr const char* kOutOfSequence[] = {
    "request out of PSN sequence: not answered",
    "request behind the responder's PSN: a duplicate's ACK completes it, "
    "nothing executed",
    "request behind the responder's PSN: NAK invalid request at the "
    "expected PSN (no FIRST)",
};
constexpr char kResetMidMessage[] =
    "no answer: the responder was reset since the message began";
// The invalid-request NAK of such a packet at the PSN its responder expects
// (FakeNic::ContinuationWithoutFirst).
constexpr char kContinuationWithoutFirst[] =
    "a packet continuing a message begun before the responder's reset (no "
    "FIRST since)";

// The IB CM message's private-data size (include/rdma/ib_cm.h), minus the
// rdma_cm header for a REQ on RDMA_PS_TCP (cma.c cma_connect_ib).
constexpr size_t kMaxConnectPrivateData = 56;
constexpr size_t kMaxAcceptPrivateData = 196;
constexpr size_t kMaxRejectPrivateData = 148;

// IB CM reject reasons (include/rdma/ib_cm.h enum ib_cm_rej_reason),
// delivered as rdma_cm_event.status of RDMA_CM_EVENT_REJECTED.
constexpr int kRejectInvalidServiceId = 8;  // no listener on that port
constexpr int kRejectTimeout = 4;           // the peer gave up
constexpr int kRejectConsumer = 28;         // rdma_reject by the peer

std::string BoundKey(const std::string& addr, uint16_t port);
void FillSockaddr(const std::string& addr, uint16_t port,
                  sockaddr_storage* out);

// Responder rules shared by the in-process and the cross-process data path
// (fake_nic_data_path.cc).
bool CanRespond(const ibv_qp& qp);
int RemoteAccessNeeded(ibv_wr_opcode op);
bool NeedsReceive(ibv_wr_opcode op);
bool IsAtomic(ibv_wr_opcode op);  // compare-and-swap, fetch-and-add
// The message's bytes travel with the request (IB spec 9.4: WRITE and SEND
// packets carry payload; READ and atomic requests carry none, their data
// comes back in the response).
bool CarriesPayload(ibv_wr_opcode op);
// A READ or an atomic: the answer brings data back into the local SGE
// (rxe_comp.c do_read, do_atomic), and the request needs an initiator depth
// credit (max_rd_atomic). Of the opcodes an RC send queue holds
// (FakeNic::SendWrRefusal), exactly those that do not carry payload.
inline bool AnsweredWithData(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
         op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
// An opcode the requester has packets for (the RC column of
// ibv_post_send(3)'s table). Another reaches a send queue only under
// Personality::unknown_opcode_fails_at_completion, and fails there.
inline bool IsVerbsOpcode(ibv_wr_opcode op) {
  return CarriesPayload(op) || AnsweredWithData(op);
}
// The request packets a message takes: a SEND's or a write's payload cut at
// the path MTU (PacketCount: a 0-byte message is one packet); a READ's or an
// atomic's request is one packet whatever its length.
// (Any other opcode, as a hostile frame from another process may name, is
// one packet too.)
inline uint32_t RequestPackets(ibv_wr_opcode op, uint64_t length,
                               uint32_t mtu) {
  return CarriesPayload(op) ? PacketCount(length, mtu) : 1;
}

// The requester builds a message's packets up to the one answered (every
// one of them when nothing answers) before the answer can come (rxe_req.c
// finish_packet): true when the first packet it cannot build (a bad source
// SGE), `buildable` (count: none), is among them, and fails the WR first.
inline bool SourceFaultComesFirst(bool answered, uint32_t at,
                                  uint32_t buildable, uint32_t count) {
  return buildable < count && (!answered || at >= buildable);
}

// The PSNs a WR takes: one per request packet, and an RDMA READ one per
// response packet (IB spec 9.7.1; rxe_req.c update_wqe_psn).
inline uint32_t PsnsOf(ibv_wr_opcode op, uint64_t length, uint32_t mtu) {
  return op == IBV_WR_RDMA_READ ? PacketCount(length, mtu)
                                : RequestPackets(op, length, mtu);
}

// The PSNs `wqe` takes on `qp`'s path MTU (PsnsOf): the one count of the
// requester (CompleteSend advances next_psn by it) and of the responder's
// check (ExecuteSendWqe, HeadOutOfSequence). A message within the smallest
// MTU, 256 bytes, takes one: the MTU is not looked up on that path.
inline uint32_t WrPsns(const Qp& qp, const SendWqe& wqe) {
  const uint64_t length = wqe.total_length();
  return length <= 256
             ? 1
             : PsnsOf(wqe.opcode, length, MtuBytes(qp.attr.path_mtu));
}

// A request of `psns` PSNs taken in sequence (FakeNic::CheckRequestPsn):
// the responder's PSN moves past it (rxe_resp.c execute, read_reply), and
// its ack_psn with it, except after a READ (read_reply leaves it).
inline void TakeInSequence(Qp* responder, ibv_wr_opcode op, uint32_t psns) {
  responder->expected_psn = (responder->expected_psn + psns) & 0xffffff;
  if (op != IBV_WR_RDMA_READ) responder->ack_psn = responder->expected_psn;
}

// Parses a numeric IPv4/IPv6 address into its canonical text form; sets
// *wildcard for 0.0.0.0 / ::. False if `text` is not an address.
bool ParseAddress(const char* text, std::string* normalized, bool* wildcard);

// Event fds (eventfd, semaphore mode): one count per pending event.
void SignalFd(int fd);
void ConsumeFd(int fd);  // REQUIRES: the count is positive (never blocks)

// Names for logs and FakeNicEvent::text. Our own tables: the fake must not
// call into libibverbs / librdmacm (ibv_wc_status_str, rdma_event_str).
const char* WcStatusName(int status);
const char* WcOpcodeName(int opcode);
const char* WrOpcodeName(int opcode);
const char* QpStateName(int state);
const char* CmEventName(int event);

}  // namespace fake_nic_internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_INTERNAL_H_
