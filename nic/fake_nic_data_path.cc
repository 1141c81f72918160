// fake_nic_data_path.cc: the fake NIC's data path: PostSend / PostRecv with
// their post-time rules, QueryQp, and the execution of one WR per Step
// (memory protection, RNR, data movement, completions, flushes).
//
// Every behaviour the fake decides is cited beside the code: an rdma-core man
// page, an InfiniBand Architecture Specification (vol. 1) rule, or the Linux
// soft-RoCE driver (drivers/infiniband/sw/rxe/*.c).
//
// Example:
//   nic.PostSend(qp, &wr, &bad_wr);  // validated and queued (ibv_post_send(3))
//   nic.Step();                      // the NIC executes the WR

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::HarnessMemoryError;
using fake_nic_internal::AnsweredWithData;
using fake_nic_internal::IsAtomic;
using fake_nic_internal::RecvWqe;
using fake_nic_internal::Ring;
using fake_nic_internal::Sge;

namespace {

uint64_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// True when [addr, addr + len) lies inside the MR (ibv_reg_mr(3): an MR
// covers exactly [mr->addr, mr->addr + mr->length)).
bool InsideMr(const ibv_mr& mr, uint64_t addr, uint64_t len) {
  const uint64_t start = Address(mr.addr);
  if (addr < start) return false;
  const uint64_t offset = addr - start;
  return offset <= mr.length && len <= mr.length - offset;
}

bool IsImmOpcode(ibv_wr_opcode op) {
  return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// The requester's work-completion opcode for a send WR (ibv_poll_cq(3)).
ibv_wc_opcode WcOpcodeFor(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    default:
      return IBV_WC_SEND;
  }
}

// A contiguous range of bytes; an Sge is one too (32-bit length).
struct Span {
  uint64_t addr;
  uint64_t length;
};

template <typename A, typename B>
bool Overlap(const A& a, const B& b) {
  return a.length > 0 && b.length > 0 && a.addr < b.addr + b.length &&
         b.addr < a.addr + a.length;
}

// Which side of a copy faulted: memory the program unmapped or protected
// after registering it (fake_nic_user_memory.h).
enum class CopyFault { kNone, kSource, kDestination };

// Copies `length` bytes gathered from the `src` segments into the `dst`
// segments, in order. REQUIRES: both describe at least `length` bytes, all
// of it checked memory. The bytes move once, straight from source to
// destination (staging them cost a second copy and, at 1 MiB, an mmap per
// WR). In loopback a source and a destination may be the same memory; the
// result must then be as if the NIC had read everything before writing, so
// such a WR is staged. A copy that faults stops there and says which side
// faulted (the bytes before the fault have landed). `write` writes the
// destination (FakeNic::NicWrite for the program's memory; GuardedCopy into
// the NIC's own staging buffer).
template <typename Src, typename Dst, typename Write>
CopyFault MoveBytes(const Src* src, size_t nsrc, const Dst* dst, size_t ndst,
                    uint64_t length, const Write& write) {
  for (size_t i = 0; i < nsrc; ++i) {
    for (size_t j = 0; j < ndst; ++j) {
      if (!Overlap(src[i], dst[j])) continue;
      std::vector<uint8_t> staged(length);
      const Span buffer{reinterpret_cast<uintptr_t>(staged.data()), length};
      if (MoveBytes(src, nsrc, &buffer, 1, length,
                    fake_nic_internal::GuardedCopy) != CopyFault::kNone) {
        return CopyFault::kSource;
      }
      return MoveBytes(&buffer, 1, dst, ndst, length, write) ==
                     CopyFault::kNone
                 ? CopyFault::kNone
                 : CopyFault::kDestination;
    }
  }
  size_t si = 0, di = 0;
  uint64_t src_off = 0, dst_off = 0;
  while (length > 0) {
    while (si < nsrc && src_off == src[si].length) {
      ++si;
      src_off = 0;
    }
    while (di < ndst && dst_off == dst[di].length) {
      ++di;
      dst_off = 0;
    }
    if (si == nsrc || di == ndst) break;  // cannot happen (REQUIRES)
    const uint64_t n = std::min({uint64_t{src[si].length} - src_off,
                                 uint64_t{dst[di].length} - dst_off, length});
    const uint64_t from = src[si].addr + src_off;
    uintptr_t fault = 0;
    if (!write(reinterpret_cast<void*>(dst[di].addr + dst_off),
               reinterpret_cast<const void*>(from), n, &fault)) {
      return fault >= from && fault - from < n ? CopyFault::kSource
                                               : CopyFault::kDestination;
    }
    src_off += n;
    dst_off += n;
    length -= n;
  }
  return CopyFault::kNone;
}

}  // namespace


// ---- data path: posting -----------------------------------------------------

// The checks ibv_post_send(3) makes of one WR before it takes a send queue
// slot: 0, or the errno and *why. *length: the WR's byte count.
int FakeNic::SendWrRefusal(const Qp& q, const ibv_send_wr& w,
                           uint64_t* length, const char** why) const {
  const ibv_wr_opcode op = PostedOpcode(w);
  const auto& refused = config_.personality.opcodes_refused_at_post;
  if (std::find(refused.begin(), refused.end(), op) != refused.end()) {
    *why = "opcode not supported by this personality";
    return EINVAL;
  }
  switch (op) {
    // The RC column of the opcode table in ibv_post_send(3).
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      break;
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
    case IBV_WR_SEND_WITH_INV:
      // Valid on RC, but memory windows are not modelled.
      *why = "opcode not modelled by the fake";
      return EOPNOTSUPP;
    default:
      // (Personality::unknown_opcode_fails_at_completion: taken, and
      // failed by the requester, ExecuteSendWqe.)
      if (!config_.personality.unknown_opcode_fails_at_completion) {
        *why = "opcode not valid on an RC QP";
        return EINVAL;
      }
  }
  if (w.num_sge < 0 || w.num_sge > static_cast<int>(q.cap.max_send_sge) ||
      (w.num_sge > 0 && w.sg_list == nullptr)) {
    *why = "num_sge above max_send_sge";
    return EINVAL;
  }
  *length = 0;
  for (int i = 0; i < w.num_sge; ++i) *length += w.sg_list[i].length;
  if ((w.send_flags & IBV_SEND_INLINE) != 0) {
    // ibv_post_send(3): inline is for SEND and RDMA_WRITE only; the data is
    // copied now, so the lkey is not checked and the buffer may be reused.
    if (AnsweredWithData(op) &&
        !config_.personality.inline_read_fails_at_completion) {
      *why = "inline on a read/atomic";
      return EINVAL;
    }
    if (*length > q.cap.max_inline_data) {
      *why = "inline data above max_inline_data";
      return EINVAL;
    }
  }
  // Atomics operate on one 64-bit quantity (ibv_post_send(3): the local
  // SGE receives the original 8-byte value).
  if (IsAtomic(op) && (w.num_sge != 1 || *length != 8)) {
    *why = "atomic needs one 8-byte SGE";
    return EINVAL;
  }
  if (IsAtomic(op) && (w.wr.atomic.remote_addr & 7) != 0 &&
      config_.personality.misaligned_atomic_refused_at_post) {
    *why = "atomic's remote address not 8-byte aligned";
    return EINVAL;
  }
  return 0;
}

int FakeNic::PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  auto lock = LockHot();
  Qp* q = FindQp(qp);
  if (q == nullptr || bad_wr == nullptr) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return PostErrno(EINVAL);
  }
  // A QP that sends at post (the end of this function) has its WRs in
  // flight before the background thread could step them, so each WR's
  // MarkMaybeReady would wake that thread for nothing: the wake is held
  // until this call returns and made then only for work that is left.
  const bool sends_at_post = background_running_;
  const WorkWakeDeferral wake_on_return(this, sends_at_post);
  // ibv_post_send(3) / rxe_verbs.c rxe_post_send: a QP below RTS refuses
  // sends with EINVAL. A QP in ERR accepts them and completes them with
  // IBV_WC_WR_FLUSH_ERR (IB spec C10-42, as cited by the rdmavt "post WR to a
  // QP in Error state" fix; rxe only refuses state < RTS). SQD accepts them
  // too (rxe: req.state DRAIN >= READY) and starts them once back in RTS.
  const bool below_rts = q->base.state != IBV_QPS_RTS &&
                         q->base.state != IBV_QPS_ERR &&
                         q->base.state != IBV_QPS_SQD;
  // Personality::refusal_for_the_qp_leaves_bad_wr_null: rxe's provider
  // queues the WRs and its doorbell is what fails.
  const bool doorbell_refuses =
      below_rts && config_.personality.refusal_for_the_qp_leaves_bad_wr_null;
  // Personality::queued_sends_wait_for_a_doorbell: this call's doorbell
  // starts whatever waits in the send queue when the QP is in RTS; posted
  // in SQD (or below RTS) the WRs wait for a later one.
  if (config_.personality.queued_sends_wait_for_a_doorbell) {
    q->sq_waits_for_doorbell = q->base.state != IBV_QPS_RTS &&
                               q->base.state != IBV_QPS_ERR;
    if (q->base.state == IBV_QPS_RTS) MarkMaybeReady(q);
  }
  auto refuse = [&](ibv_send_wr* w, int err, const char* why) {
    *bad_wr = w;
    // The doorbell rings after the loop stopped at `w`, and its error is
    // what the call returns (providers/rxe/rxe.c rxe_post_send: err ? err
    // : rc).
    if (doorbell_refuses) err = EINVAL;
    FakeNicEvent event;
    event.kind = FakeNicEvent::Kind::kPostFailed;
    event.qp_num = q->base.qp_num;
    event.wr_id = w ? w->wr_id : 0;
    event.opcode = w ? PostedOpcode(*w) : 0;
    event.status = err;
    event.text = why;
    Record(std::move(event));
    RingSendDoorbellInErr(q);
    // The WRs before `w` were posted: they go as they would have.
    if (w != wr && background_running_ && !below_rts) RunRequesterNow(q);
    return PostErrno(err);
  };
  if (below_rts && !doorbell_refuses) {
    return refuse(wr, EINVAL, "qp not in RTS");
  }
  // ibv_wr_complete(3): "the entire posting will be aborted" on a failure.
  // A chain marked kSendWholeChain is checked WR by WR, and against the
  // room left in the send queue, before any of it takes a slot; refused,
  // none of it was posted (*bad_wr is its head).
  const bool whole = wr != nullptr && (wr->send_flags & kSendWholeChain) != 0;
  if (whole) {
    size_t count = 0;
    for (ibv_send_wr* w = wr; w != nullptr; w = w->next, ++count) {
      const char* why = nullptr;
      uint64_t length = 0;
      if (const int err = SendWrRefusal(*q, *w, &length, &why)) {
        const int rc = refuse(w, err, why);
        *bad_wr = wr;
        return rc;
      }
    }
    if (q->sq.size() + count > q->cap.max_send_wr) {
      return refuse(wr, ENOMEM, "send queue full");
    }
  }
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    const ibv_wr_opcode op = PostedOpcode(*w);
    // Every check reads the WR itself, so that a WR that passes them is
    // built once, in place in its send queue slot (Ring::emplace_back).
    const char* why = nullptr;
    uint64_t length = 0;
    if (const int err = SendWrRefusal(*q, *w, &length, &why)) {
      return refuse(w, err, why);
    }
    const bool is_inline = (w->send_flags & IBV_SEND_INLINE) != 0;
    // rxe_verbs.c post_one_send: a full send queue is ENOMEM. A slot is
    // taken until the NIC executes (or flushes) the WR.
    if (q->sq.size() >= q->cap.max_send_wr) {
      return refuse(w, ENOMEM, "send queue full");
    }
    SendWqe& wqe = q->sq.emplace_back();
    wqe.wr_id = w->wr_id;
    wqe.opcode = op;
    wqe.send_flags = w->send_flags & ~kSendWholeChain;
    wqe.imm_data = w->imm_data;
    wqe.sges.assign(w->sg_list, w->num_sge);
    if (is_inline) {
      wqe.is_inline = true;
      wqe.inline_data.resize(length);
      uint8_t* to = wqe.inline_data.data();
      for (const Sge& sge : wqe.sges) {
        if (sge.length == 0) continue;
        memcpy(to, reinterpret_cast<const void*>(sge.addr), sge.length);
        to += sge.length;
      }
    }
    if (IsAtomic(op)) {
      wqe.compare_add = w->wr.atomic.compare_add;
      wqe.swap = w->wr.atomic.swap;
      wqe.remote_addr = w->wr.atomic.remote_addr;
      wqe.rkey = w->wr.atomic.rkey;
    } else {
      wqe.remote_addr = w->wr.rdma.remote_addr;
      wqe.rkey = w->wr.rdma.rkey;
    }
    // IB spec 10.7.3.1 (quoted in rxe_comp.c do_complete): a success
    // completion only if the WR is signaled or the QP has sq_sig_all.
    wqe.signaled = q->sq_sig_all || (w->send_flags & IBV_SEND_SIGNALED);
    RecordLazily([&](FakeNicEvent* event) {
      event->kind = FakeNicEvent::Kind::kPostSend;
      event->qp_num = q->base.qp_num;
      event->wr_id = wqe.wr_id;
      event->opcode = op;
      event->byte_len = length;
      DescribeAddresses(event, wqe.sges, wqe.rkey, wqe.remote_addr);
    });
    if (q->sq_ring_slots != 0)
      q->sq_prod = (q->sq_prod + 1) & (q->sq_ring_slots - 1);
    MarkMaybeReady(q);
  }
  if (doorbell_refuses) {
    // Every WR is in the ring, keeping its slot (they go if the QP reaches
    // RTS and a later doorbell rings); the doorbell fails, *bad_wr NULL.
    return refuse(nullptr, EINVAL, "qp not in RTS (doorbell)");
  }
  RingSendDoorbellInErr(q);
  // Under background progress the posting thread runs the requester
  // itself, as rxe does inside ibv_post_send (rxe_verbs.c rxe_post_send),
  // whatever the personality: the work is done before anyone has to be
  // woken for it (a
  // progress-thread wake per post was a futex and a contended mutex in
  // every blocking round trip, issue 28). A NIC may execute a WR any time
  // after it was posted, and under background progress when it does so was
  // never fixed. Toward a peer in another process the request frame is the
  // doorbell.
  if (background_running_) RunRequesterNow(q);
  return 0;
}

int FakeNic::PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  auto lock = LockHot();
  Qp* q = FindQp(qp);
  if (q == nullptr || bad_wr == nullptr) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return PostErrno(EINVAL);
  }
  auto refuse = [&](ibv_recv_wr* w, int err, const char* why) {
    *bad_wr = w;
    FakeNicEvent event;
    event.kind = FakeNicEvent::Kind::kPostFailed;
    event.qp_num = q->base.qp_num;
    event.wr_id = w ? w->wr_id : 0;
    event.status = err;
    event.text = why;
    Record(std::move(event));
    return PostErrno(err);
  };
  // Receives may be posted from INIT on, so they are ready before the peer's
  // first send; in RESET they are refused (rxe_verbs.c rxe_post_recv:
  // state < INIT is EINVAL). In ERR they are accepted and flushed (IB spec
  // C10-42; rdmavt's "post receive for QP in ERR state" fix).
  // Personality::refusal_for_the_qp_leaves_bad_wr_null: rxe's provider
  // returns before it looks at a WR (providers/rxe/rxe.c rxe_post_recv).
  ibv_recv_wr* const named =
      config_.personality.refusal_for_the_qp_leaves_bad_wr_null ? nullptr : wr;
  // A QP attached to an SRQ has no receive queue of its own: rxe_verbs.c
  // rxe_post_recv refuses with EINVAL (IB spec C10-97.2.1).
  if (q->srq != nullptr) {
    return refuse(named, EINVAL, "qp uses an SRQ: post to the SRQ");
  }
  if (q->base.state == IBV_QPS_RESET) {
    return refuse(named, EINVAL, "qp in RESET");
  }
  for (ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
    if (w->num_sge < 0 || w->num_sge > static_cast<int>(q->cap.max_recv_sge) ||
        (w->num_sge > 0 && w->sg_list == nullptr)) {
      return refuse(w, EINVAL, "num_sge above max_recv_sge");
    }
    if (w->num_sge == 0 && config_.personality.refuses_receive_without_sge) {
      return refuse(w, EINVAL, "receive without SGE refused by personality");
    }
    if (q->rq.size() + q->stranded_recvs >= q->cap.max_recv_wr) {
      return refuse(w, ENOMEM, "receive queue full");
    }
    // Personality::flushes_receives_posted_in_err: a receive posted in ERR
    // stays in the queue (taking a slot) and never completes.
    const bool stranded = q->base.state == IBV_QPS_ERR &&
                          !config_.personality.flushes_receives_posted_in_err;
    RecvWqe& wqe =
        stranded ? q->stranded_rq.emplace_back() : q->rq.emplace_back();
    wqe.wr_id = w->wr_id;
    wqe.sges.assign(w->sg_list, w->num_sge);
    RecordLazily([&](FakeNicEvent* event) {
      event->kind = FakeNicEvent::Kind::kPostRecv;
      event->qp_num = q->base.qp_num;
      event->wr_id = wqe.wr_id;
      DescribeAddresses(event, wqe.sges, 0, 0);
    });
    if (stranded) {
      q->stranded_recvs++;
      continue;
    }
    // In ERR the receive flushes; a peer's WR parked on RNR may go now.
    // Only those can gain ready work from a receive (QpHasReadyWork: a QP
    // in ERR with receives, or an RTS head parked waiting for one), so only
    // they are marked: a mark on an idle QP costs the next step a scan.
    if (q->base.state == IBV_QPS_ERR) MarkMaybeReady(q);
    if (q->peer != nullptr && !q->peer->sq.empty()) MarkMaybeReady(q->peer);
    if (q->remote_waits_for_receive) TellRemoteToRetry(q);
  }
  return 0;
}

// ibv_post_srq_recv(3), with PostRecv's rules (rxe_srq.c / rxe_verbs.c
// rxe_post_srq_recv: num_sge above the SRQ's max_sge is EINVAL, a full SRQ
// ENOMEM). A WR parked on an RNR wait at a peer of an attached QP may go.
int FakeNic::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  auto lock = LockHot();
  Srq* s = FindSrq(srq);
  if (s == nullptr || bad_wr == nullptr) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return PostErrno(EINVAL);
  }
  auto refuse = [&](ibv_recv_wr* w, int err, const char* why) {
    *bad_wr = w;
    FakeNicEvent event;
    event.kind = FakeNicEvent::Kind::kPostFailed;
    event.wr_id = w ? w->wr_id : 0;
    event.status = err;
    event.text = std::string("srq: ") + why;
    Record(std::move(event));
    return PostErrno(err);
  };
  for (ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
    if (w->num_sge < 0 || w->num_sge > static_cast<int>(s->max_sge) ||
        (w->num_sge > 0 && w->sg_list == nullptr)) {
      return refuse(w, EINVAL, "num_sge above max_sge");
    }
    if (w->num_sge == 0 && config_.personality.refuses_receive_without_sge) {
      return refuse(w, EINVAL, "receive without SGE refused by personality");
    }
    if (s->rq.size() >= s->max_wr) {
      return refuse(w, ENOMEM, "shared receive queue full");
    }
    RecvWqe wqe;
    wqe.wr_id = w->wr_id;
    for (int i = 0; i < w->num_sge; ++i) {
      wqe.sges.push_back(
          {w->sg_list[i].addr, w->sg_list[i].length, w->sg_list[i].lkey});
    }
    RecordLazily([&](FakeNicEvent* event) {
      event->kind = FakeNicEvent::Kind::kPostRecv;
      event->wr_id = wqe.wr_id;
      event->text = "srq";
      DescribeAddresses(event, wqe.sges, 0, 0);
    });
    s->rq.push_back(std::move(wqe));
    for (Qp* q : s->qps) {
      MarkMaybeReady(q->peer);
      if (q->remote_waits_for_receive) TellRemoteToRetry(q);
    }
  }
  return 0;
}

int FakeNic::QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int /*attr_mask*/,
                     ibv_qp_init_attr* init_attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Qp* q = FindQp(qp);
  if (q == nullptr || attr == nullptr) return EINVAL;
  // ibv_query_qp(3) may fill more than attr_mask asks for; we fill it all,
  // with what ibv_modify_qp (the user's or rdma_cm's) set
  // (fake_nic_qp_state.cc).
  *attr = q->attr;
  attr->qp_state = q->base.state;
  if (!config_.personality.query_qp_cur_state_as_last_named) {
    attr->cur_qp_state = q->base.state;
  }
  attr->cap = q->cap;
  attr->sq_draining = 0;
  if (init_attr != nullptr) {
    memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = q->base.qp_context;
    init_attr->send_cq = q->base.send_cq;
    init_attr->recv_cq = q->base.recv_cq;
    init_attr->cap = q->cap;
    init_attr->qp_type = q->base.qp_type;
    init_attr->sq_sig_all = q->sq_sig_all ? 1 : 0;
  }
  return 0;
}

// ---- data path: execution ---------------------------------------------------

namespace fake_nic_internal {

// Responder-side states that accept requests: RTR, RTS and SQD (a QP's
// receive side works from RTR on and SQD drains only the send queue; INIT,
// ERR and RESET drop incoming packets).
bool CanRespond(const ibv_qp& qp) {
  return qp.state == IBV_QPS_RTR || qp.state == IBV_QPS_RTS ||
         qp.state == IBV_QPS_SQD;
}

// rxe_resp.c check_op_valid (RC): a request the responder QP's
// qp_access_flags do not allow is an "invalid request" NAK
// (RESPST_ERR_UNSUPPORTED_OPCODE -> IB_WC_REM_INV_REQ_ERR at the requester),
// checked before check_resource takes a receive, so the receive is flushed
// when the responder goes to ERR.
int RemoteAccessNeeded(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_ACCESS_REMOTE_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_ACCESS_REMOTE_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_ACCESS_REMOTE_ATOMIC;
    default:
      return 0;
  }
}

bool NeedsReceive(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

bool IsAtomic(ibv_wr_opcode op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool CarriesPayload(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
         op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
}

}  // namespace fake_nic_internal

using fake_nic_internal::CanRespond;
using fake_nic_internal::NeedsReceive;
using fake_nic_internal::RemoteAccessNeeded;

void FakeNic::RingSendDoorbellInErr(Qp* qp) {
  // rdma-core providers/rxe rxe_post_send rings the doorbell (post_send_db)
  // after every ibv_post_send, even one that failed part-way; in ERR that
  // doorbell is the only thing that flushes what was posted
  // (Personality::sq_flush_follows_requester_index).
  if (qp->base.state != IBV_QPS_ERR || qp->sq_ring_slots == 0) return;
  if (qp->RequesterRunInErr()) {
    qp->sq_flushable = qp->sq.size();
    // rxe runs the completer inside the doorbell, so the ring is free again
    // when ibv_post_send returns; with background progress the fake flushes
    // now too (Personality::executes_at_post), in manual mode at Step().
    if (config_.personality.executes_at_post && background_running_) {
      while (qp->sq_flushable > 0 && !qp->sq.empty()) ExecuteOrFlushOne(qp);
    }
    MarkMaybeReady(qp);
  }
}

bool FakeNic::QpHasReadyWork(Qp* qp) {
  if (qp->base.state == IBV_QPS_ERR) {
    const bool sq_work = qp->sq_ring_slots == 0
                             ? !qp->sq.empty()
                             : qp->sq_flushable > 0 && !qp->sq.empty();
    return sq_work || !qp->rq.empty();
  }
  if (qp->base.state != IBV_QPS_RTS || qp->sq.empty()) return false;
  // (A cold member, read only under the personality that needs it.)
  if (config_.personality.queued_sends_wait_for_a_doorbell &&
      qp->sq_waits_for_doorbell) {
    return false;
  }
  const SendWqe& head = qp->sq.front();
  // In another process's hands: its answer (fake_nic_remote.cc) goes on.
  if (head.in_flight) return false;
  if (!head.waiting_for_receive) return true;
  // A remote responder tells us when a receive is posted.
  if (qp->link != 0) return qp->link_dead;
  // Parked by an RNR NAK with rnr_retry 7: ready again once the responder
  // has a receive, or once the responder can no longer answer at all.
  // (A responder that cannot answer is seen at the RNR timer's tick when
  // one is armed, RetryAtRnrTick; a tick armed while the NIC ran in real
  // time and never fired, its background thread stopped since, waits no
  // more.)
  Qp* peer = qp->peer;
  return peer == nullptr || !peer->ReceiveQueue().empty() ||
         (!CanRespond(peer->base) &&
          (qp->rnr_tick_token == 0 || !RequesterTimersRunInRealTime(qp)));
}

void FakeNic::MarkMaybeReady(Qp* qp) {
  if (qp == nullptr) return;
  BumpPollEpoch();
  const size_t slot = qp->slot;
  const size_t word = slot / 64;
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if ((marked_[word] & bit) == 0) {
    marked_[word] |= bit;
    marked_summary_[word / 64] |= uint64_t{1} << (word % 64);
    ++marked_count_;
    last_marked_ = slot;
  }
  // Marked already or not: it may have become ready just now (an answer, a
  // receive for a parked write), and the background thread may sleep.
  if (work_waiters_ > 0 && !defer_work_wake_ && QpHasReadyWork(qp)) {
    work_cv_.notify_all();
  }
}

void FakeNic::UnmarkReady(size_t slot) {
  const size_t word = slot / 64;
  const uint64_t bit = uint64_t{1} << (slot % 64);
  if ((marked_[word] & bit) == 0) return;
  marked_[word] &= ~bit;
  --marked_count_;
  if (marked_[word] == 0) {
    marked_summary_[word / 64] &= ~(uint64_t{1} << (word % 64));
  }
}

size_t FakeNic::NextMarked(size_t from) const {
  size_t word = from / 64;
  if (word >= marked_.size()) return kNoSlot;
  const uint64_t here = marked_[word] & (~uint64_t{0} << (from % 64));
  if (here != 0) return word * 64 + static_cast<size_t>(__builtin_ctzll(here));
  // The next non-zero word after `word`, found through the summary.
  ++word;
  for (size_t s = word / 64; s < marked_summary_.size(); ++s) {
    uint64_t bits = marked_summary_[s];
    if (s == word / 64) bits &= ~uint64_t{0} << (word % 64);
    if (bits == 0) continue;
    const size_t w = s * 64 + static_cast<size_t>(__builtin_ctzll(bits));
    return w * 64 + static_cast<size_t>(__builtin_ctzll(marked_[w]));
  }
  return kNoSlot;
}

bool FakeNic::HasReadyWork() {
  if (!cm_work_.empty()) return true;
  for (size_t s = NextMarked(0); s != kNoSlot; s = NextMarked(s + 1)) {
    if (QpHasReadyWork(qp_slots_[s])) return true;
    UnmarkReady(s);
  }
  return false;
}

bool FakeNic::AnyReadyWork() {
  if (!cm_work_.empty()) return true;
  for (size_t s = NextMarked(0); s != kNoSlot; s = NextMarked(s + 1)) {
    if (QpHasReadyWork(qp_slots_[s])) return true;
  }
  return false;
}

bool FakeNic::RunOneCmWorkLocked() {
  if (cm_work_.empty()) return false;
  CmWork work = std::move(cm_work_.front());
  cm_work_.pop_front();
  work.run();
  return true;
}

bool FakeNic::StepLocked() {
  if (RunOneCmWorkLocked()) return true;
  if (config_.random_schedule) {
    // Any QP with work may go next; the seed decides which.
    std::vector<Qp*> ready;
    for (size_t s = NextMarked(0); s != kNoSlot; s = NextMarked(s + 1)) {
      if (QpHasReadyWork(qp_slots_[s])) {
        ready.push_back(qp_slots_[s]);
      } else {
        UnmarkReady(s);
      }
    }
    if (ready.empty()) return false;
    Qp* qp = ready[NextRandom32() % ready.size()];
    ExecuteOrFlushOne(qp);
    MarkMaybeReady(qp);  // it may have more
    return true;
  }
  // In turn, in creation order: the first QP with work from the cursor on,
  // wrapping around once. With one QP marked that is the one, from any
  // cursor: it runs without the scan (the same choice, the same cursor).
  if (marked_count_ == 1 &&
      (marked_[last_marked_ / 64] >> (last_marked_ % 64)) & 1) {
    const size_t s = last_marked_;
    Qp* qp = qp_slots_[s];
    if (!QpHasReadyWork(qp)) {
      UnmarkReady(s);
      return false;
    }
    slot_cursor_ = s + 1;
    ExecuteOrFlushOne(qp);
    MarkMaybeReady(qp);  // it may have more
    return true;
  }
  for (int pass = 0; pass < 2; ++pass) {
    const size_t end = pass == 0 ? kNoSlot : slot_cursor_;
    for (size_t s = NextMarked(pass == 0 ? slot_cursor_ : 0);
         s != kNoSlot && s < end; s = NextMarked(s + 1)) {
      Qp* qp = qp_slots_[s];
      if (!QpHasReadyWork(qp)) {
        UnmarkReady(s);
        continue;
      }
      slot_cursor_ = s + 1;
      ExecuteOrFlushOne(qp);
      MarkMaybeReady(qp);  // it may have more
      // The scan unmarked the idle QPs before `s`: when `s` is the only one
      // left, the next step goes to it directly.
      if (marked_count_ == 1) last_marked_ = s;
      return true;
    }
  }
  return false;
}

void FakeNic::ExecuteOrFlushOne(Qp* qp) {
  if (qp->base.state != IBV_QPS_ERR) {
    ExecuteSendWqe(qp);
    return;
  }
  // Error state (IB spec C10-42): outstanding and later WRs complete
  // with IBV_WC_WR_FLUSH_ERR, each queue in posting order, the send queue
  // first unless Personality::flushes_receive_queue_first. The opcode is
  // undefined for error CQEs (ibv_poll_cq(3)); we report the WR's own
  // opcode so traces stay readable.
  if (config_.personality.flushes_receive_queue_first &&
      !qp->flush_send_queue_first && !qp->rq.empty()) {
    FlushOneReceive(qp);
    return;
  }
  if (!qp->sq.empty() && (qp->sq_ring_slots == 0 || qp->sq_flushable > 0)) {
    if (qp->sq_flushable > 0) --qp->sq_flushable;
    SendWqe wqe = std::move(qp->sq.front());
    qp->sq.pop_front();
    CompleteSend(qp, wqe, IBV_WC_WR_FLUSH_ERR, 0);
    if (wqe.landing != nullptr) AbandonLanding(qp, wqe);
    return;
  }
  if (qp->rq.empty()) return;  // sends left without a completion (see above)
  FlushOneReceive(qp);
}

bool FakeNic::SourceFails(Qp* qp, const SendWqe& wqe, uint32_t* packet,
                          ibv_wc_status* status) {
  const uint32_t mtu = fake_nic_internal::MtuBytes(qp->attr.path_mtu);
  const uint32_t packets =
      fake_nic_internal::PacketCount(wqe.total_length(), mtu);
  *packet = FirstBadSourcePacket(qp, wqe, mtu, packets, status);
  return *packet < packets;
}

bool FakeNic::StallsBehindUnansweredHead(Qp* qp) {
  if (!config_.personality.local_error_behind_unanswered_wr_stalls) {
    return false;
  }
  // The WRs the requester builds while the head waits for its ACK: writes
  // and SENDs (no fence); it stops at a READ or an atomic, whose local
  // SGE only the response touches (a conservative bound: rxe may send
  // those and go on).
  for (size_t i = 1; i < qp->sq.size(); ++i) {
    const SendWqe& wqe = qp->sq.at(i);
    if (AnsweredWithData(wqe.opcode)) return false;
    uint32_t packet = 0;
    ibv_wc_status unused = IBV_WC_SUCCESS;
    if (!SourceFails(qp, wqe, &packet, &unused)) continue;
    // The head stays in flight for good (QpHasReadyWork: no timer, no
    // answer frees it); the requester's index has passed every WR up to the
    // failed one (rxe_req.c err). Called once per head: its caller runs
    // when the head gets no answer, which a head in flight for good never
    // gets again.
    SendWqe& head = qp->sq.front();
    head.in_flight = true;
    head.token = SendWqe::kStalledToken;
    for (size_t k = 0; k <= i; ++k) qp->AdvanceRequesterIndex();
    FakeNicEvent event;
    event.kind = FakeNicEvent::Kind::kExecute;
    event.qp_num = qp->base.qp_num;
    event.wr_id = head.wr_id;
    event.opcode = head.opcode;
    event.text =
        "no answer, and a later WR failed locally: the requester stalls "
        "(Personality::local_error_behind_unanswered_wr_stalls)";
    Record(std::move(event));
    return true;
  }
  return false;
}

void FakeNic::FlushOneReceive(Qp* qp) {
  RecvWqe wqe = std::move(qp->rq.front());
  qp->rq.pop_front();
  ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = wqe.wr_id;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp->base.qp_num;
  AddCqe(qp->recv_cq, wc, false);
}

void FakeNic::CompleteSend(Qp* qp, const SendWqe& wqe, ibv_wc_status status,
                           uint32_t byte_len) {
  // rxe_req.c: the requester's index passes a WR once its last packet is
  // sent (update_state), or on a local error (the err path); a NAK of an
  // earlier packet leaves it there (Personality::
  // sq_flush_follows_requester_index).
  // (sq_ring_slots first: a hot member, and 0 where no ring is modelled,
  // so the cold head_passed is not read on that path.)
  if (qp->sq_ring_slots != 0 && qp->head_passed) {
    qp->head_passed = false;  // passed already, when the requester sent on
  } else if (status == IBV_WC_SUCCESS ||
             (status != IBV_WC_WR_FLUSH_ERR && qp->failed_on_last_packet)) {
    qp->AdvanceRequesterIndex();
  }
  if (status != IBV_WC_WR_FLUSH_ERR) {
    qp->next_psn =
        (qp->next_psn + fake_nic_internal::WrPsns(*qp, wqe)) & 0xffffff;
  }
  qp->failed_on_last_packet = true;
  // A READ's responder runs from a scheduled tasklet (rxe_resp.c
  // rxe_resp_queue_pkt: must_sched for RDMA_READ_REQUEST), so the answer
  // that ends a READ in error reaches the completer while the requester's
  // task is still busy: rxe_qp_error's rxe_run_task(&qp->req.task, 1)
  // finds it BUSY and arms it (rxe_task.c rxe_do_task, TASK_STATE_ARMED),
  // and the requester takes its err path once more before it stops. Flushes
  // and the retry counters' errors are the completer's own, not an answer.
  // Recorded on rxe: regression program 1000015 (duplex seed 6000021).
  if (wqe.opcode == IBV_WR_RDMA_READ && status != IBV_WC_SUCCESS &&
      status != IBV_WC_WR_FLUSH_ERR && status != IBV_WC_RETRY_EXC_ERR &&
      status != IBV_WC_RNR_RETRY_EXC_ERR) {
    qp->requester_runs_twice_in_err = true;
  }
  // IB spec 10.7.3.1 (quoted in rxe_comp.c do_complete): an error completion is
  // always generated, even for an unsignaled WR.
  if (!wqe.signaled && status == IBV_WC_SUCCESS) return;
  // Written in place in the CQ's ring (CqeSlot), or built aside for AddCqe
  // to report when the CQ has no room.
  ibv_wc lost;
  ibv_wc* const slot = CqeSlot(qp->send_cq);
  ibv_wc& wc = slot != nullptr ? *slot : lost;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = wqe.wr_id;
  wc.status = status;
  wc.opcode = WcOpcodeFor(wqe.opcode);
  wc.qp_num = qp->base.qp_num;
  if (status == IBV_WC_SUCCESS) {
    if (config_.personality.send_cqe_has_imm_flag_and_byte_len) {
      wc.byte_len = static_cast<uint32_t>(wqe.total_length());
      if (IsImmOpcode(wqe.opcode)) wc.wc_flags |= IBV_WC_WITH_IMM;
    } else if (AnsweredWithData(wqe.opcode)) {
      wc.byte_len = byte_len;
    }
  }
  if (slot != nullptr) {
    CommitCqe(qp->send_cq, wc, false);
  } else {
    AddCqe(qp->send_cq, wc, false);
  }
}

// One send WR at the head of `qp`'s send queue meets the responder. The
// checks follow the order of rxe's responder state machine (rxe_resp.c:
// check_resource (RNR) before check_length before check_rkey).
void FakeNic::ExecuteSendWqe(Qp* qp) {
  // An executed write still landing (FakeNicConfig::landing): this step of
  // the QP lands its next piece.
  if (qp->sq.front().landing != nullptr && qp->sq.front().landing->started) {
    LandNextPiece(qp);
    return;
  }
  SendWqe& head = qp->sq.front();
  // The execute hook (FaultInjector's execute rules), once per WR; a WR
  // delayed by a hook since removed still waits out its delay. Nobody
  // hooked: two tests.
  if ((head.delay_steps_left > 0 || (execute_hook_ && !head.hook_consulted)) &&
      ApplyExecuteHook(qp)) {
    return;
  }
  const uint32_t qp_num = qp->base.qp_num;

  // An inline READ or atomic (taken at post only by a personality with
  // inline_read_fails_at_completion): its response has nowhere to land.
  if (head.is_inline && AnsweredWithData(head.opcode)) {
    EndHeadWr(qp, IBV_WC_LOC_PROT_ERR,
              "inline READ/atomic: no local SGE to land in");
    return;
  }

  // An opcode the verbs do not define (taken at post only by a
  // personality with unknown_opcode_fails_at_completion): the requester has
  // no packet for it (rxe_req.c next_opcode), before any SGE is read.
  if (!fake_nic_internal::IsVerbsOpcode(head.opcode)) {
    EndHeadWr(qp, IBV_WC_LOC_QP_OP_ERR, "no packet for this opcode");
    return;
  }

  // Local protection (ibv_poll_cq(3) IBV_WC_LOC_PROT_ERR; rxe copy_data
  // fails the same way): every non-empty SGE must name a live MR of this
  // QP's PD and lie inside it, and a destination the NIC writes (RDMA_READ
  // data, atomic result) needs LOCAL_WRITE. Inline data was copied at post
  // time: nothing to check.
  //
  // In one process rxe's order is kept: SEND and WRITE payloads are read
  // from the SGEs packet by packet (rxe_req.c finish_packet; see
  // FirstBadSourcePacket), READ responses written into them packet by packet
  // (rxe_comp.c do_read; below), so what the packets before a bad SGE did
  // stays done; an atomic's local SGE is written when its response comes
  // (rxe_comp.c do_atomic), after the remote value changed. Toward a peer
  // in another process the same holds (ExecuteRemote ships the packets
  // before a bad source SGE; OnRemoteAnswer writes READ and atomic
  // responses packet by packet). Deferred landing (writes) checks the SGEs
  // here, before anything is sent.
  const bool is_write = head.opcode == IBV_WR_RDMA_WRITE ||
                        head.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool is_send =
      head.opcode == IBV_WR_SEND || head.opcode == IBV_WR_SEND_WITH_IMM;
  const bool checked_per_packet =
      is_send || AnsweredWithData(head.opcode) ||
      (is_write && (qp->link != 0 || landing_ == Landing::kAtOnce));
  if (!head.is_inline && !checked_per_packet) {
    if (is_send || is_write) {
      // Any bad source SGE (one "packet" as long as the message), with the
      // status rxe's requester gives it.
      ibv_wc_status status = IBV_WC_SUCCESS;
      if (FirstBadSourcePacket(qp, head, ~uint32_t{0}, 1, &status) == 0) {
        EndHeadWr(qp, status, "local SGE fails lkey/PD/bounds check");
        return;
      }
    } else if (!LocalSgesOk(qp, head.sges, IBV_ACCESS_LOCAL_WRITE)) {
      EndHeadWr(qp, IBV_WC_LOC_PROT_ERR,
                "local SGE fails lkey/PD/bounds/access check");
      return;
    }
  }

  // Unreliable Connected: no ACKs, no retries (fake_nic_unreliable.cc).
  if (qp->base.qp_type == IBV_QPT_UC) {
    ExecuteUnreliable(qp);
    return;
  }

  // The responder must exist and answer; a QP that is gone, in ERR or not
  // yet RTR drops requests, so the requester exhausts its transport retries
  // (rxe_comp.c COMPST_ERROR_RETRY -> IB_WC_RETRY_EXC_ERR): in real time
  // where the NIC has it, at once on a stepped or sequenced NIC
  // (RequesterWaitsForRetransmit).
  // The responder is in another process: the same checks run there.
  if (qp->link != 0) {
    ExecuteRemote(qp);
    return;
  }
  Qp* responder = qp->peer;
  // check_psn, before check_op_valid (rxe_resp.c), once per new request: a
  // write resumed past its RNR-NAKed packet (ContinuationWithoutFirst when
  // its responder was reset since), or a message sent again after an RNR
  // NAK of its first packet to a responder not reset since, was taken at
  // its first try.
  if (head.next_packet == 0 && responder != nullptr &&
      !(head.rnr_started && responder->responder.first_rnr_naked) &&
      fake_nic_internal::CanRespond(responder->base)) {
    if (qp->next_psn == responder->expected_psn) {
      // In sequence, the common case, without a call.
      fake_nic_internal::TakeInSequence(responder, head.opcode,
                                        fake_nic_internal::WrPsns(*qp, head));
    } else if (HeadOutOfSequence(qp, responder)) {
      return;
    }
  }
  const char* refused = nullptr;
  const RequestVerdict verdict = CheckRequest(responder, head.opcode, &refused);
  if (verdict == RequestVerdict::kNoAnswer) {
    // rxe's requester builds each packet from the source SGEs as it sends
    // it (rxe_req.c finish_packet: LOC_PROT_ERR / LOC_QP_OP_ERR), all of a
    // message's packets before any answer can come: a bad source SGE fails
    // the WR locally whether or not the responder would answer (retry
    // program 7000010). A READ's or an atomic's local SGE is only written
    // by the response (rxe_comp.c do_read / do_atomic).
    uint32_t packet = 0;
    ibv_wc_status local = IBV_WC_SUCCESS;
    if ((is_send || is_write) && SourceFails(qp, head, &packet, &local)) {
      FailOnSourcePacket(qp, local, packet);
      return;
    }
    if (StallsBehindUnansweredHead(qp)) return;
    if (!RequesterWaitsForRetransmit(qp, refused)) {
      EndUnansweredHead(qp, refused);
    }
    return;
  }
  if (verdict == RequestVerdict::kInvalidRequest) {
    // The requester builds FIRST from the source SGEs before it goes out
    // (rxe_req.c finish_packet): a bad SGE within it fails the WR locally,
    // and the responder never sees the request (disconnect program
    // 8000134: a one-byte write with a bad lkey towards a QP without
    // remote write; ExecuteRemote already did so across processes). A bad
    // SGE in a later packet comes too late: the NAK of FIRST ends the WR.
    uint32_t packet = 0;
    ibv_wc_status local = IBV_WC_SUCCESS;
    if ((is_send || is_write) && SourceFails(qp, head, &packet, &local) &&
        packet == 0) {
      FailOnSourcePacket(qp, local, 0);
      return;
    }
    SendWqe wqe = std::move(qp->sq.front());
    qp->sq.pop_front();
    const char* why = refused;
    FakeNicEvent event;
    event.kind = FakeNicEvent::Kind::kExecute;
    event.qp_num = qp_num;
    event.wr_id = wqe.wr_id;
    event.opcode = wqe.opcode;
    event.status = IBV_WC_REM_INV_REQ_ERR;
    event.text = why;
    Record(std::move(event));
    SetQpState(responder, IBV_QPS_ERR, why);
    // The NAK answered the message's first packet: the requester index
    // passes the WR only if that packet ended it (rxe_req.c update_state;
    // Personality::sq_flush_follows_requester_index). Found by wide seed
    // 3000102: a two-packet write to a QP without remote write.
    qp->failed_on_last_packet =
        fake_nic_internal::RequestPackets(
            wqe.opcode, wqe.total_length(),
            fake_nic_internal::MtuBytes(qp->attr.path_mtu)) == 1;
    CompleteSend(qp, wqe, IBV_WC_REM_INV_REQ_ERR, 0);
    SetQpState(qp, IBV_QPS_ERR, why);
    return;
  }

  if (is_write) {
    ExecuteWriteByPackets(qp, responder);
    return;
  }
  if (is_send) {
    ExecuteSendByPackets(qp, responder);
    return;
  }

  // With an SRQ the receive comes from it (IB spec 10.2.9; rxe_resp.c
  // get_srq_wqe), so an empty SRQ is an RNR NAK like an empty RQ.
  Ring<RecvWqe>& responder_rq = responder->ReceiveQueue();
  if (NeedsReceive(head.opcode) && responder_rq.empty()) {
    RnrNakHead(qp, responder->min_rnr_timer);
    return;
  }
  head.waiting_for_receive = false;
  ExecuteReadOrAtomic(qp, responder);
}

// The head WR, an RDMA READ or an atomic, that the responder accepted
// (ExecuteSendWqe checked the QP and check_op_valid): check_rkey, execute,
// and the response into the local SGEs as rxe's completer writes it.
void FakeNic::ExecuteReadOrAtomic(Qp* qp, Qp* responder) {
  const uint32_t qp_num = qp->base.qp_num;
  SendWqe wqe = std::move(qp->sq.front());
  qp->sq.pop_front();
  const uint64_t length = wqe.total_length();
  FakeNicEvent executed;
  executed.kind = FakeNicEvent::Kind::kExecute;
  executed.qp_num = qp_num;
  executed.wr_id = wqe.wr_id;
  executed.opcode = wqe.opcode;
  executed.byte_len = length;
  DescribeAddresses(&executed, wqe.sges, wqe.rkey, wqe.remote_addr);

  // A responder-detected error NAKs the request: the requester completes
  // with `requester_status`, and the responder QP goes to ERR too (rxe_resp.c
  // do_class_ac_error sets resp.goto_error, then rxe_qp_error).
  auto nak = [&](ibv_wc_status requester_status, const char* why) {
    executed.status = requester_status;
    executed.text = why;
    Record(std::move(executed));
    SetQpState(responder, IBV_QPS_ERR, why);
    CompleteSend(qp, wqe, requester_status, 0);
    SetQpState(qp, IBV_QPS_ERR, why);
  };

  // The requester's own memory faulted mid-copy (HarnessMemoryError): a
  // local protection error (ibv_poll_cq(3) IBV_WC_LOC_PROT_ERR: the WR's
  // buffers are not valid for the operation), the QP to ERR, as when a
  // local SGE fails its checks.
  auto local_fault = [&]() {
    executed.status = IBV_WC_LOC_PROT_ERR;
    executed.text = HarnessMemoryError("the requester's", wqe.wr_id);
    Record(std::move(executed));
    CompleteSend(qp, wqe, IBV_WC_LOC_PROT_ERR, 0);
    SetQpState(qp, IBV_QPS_ERR, "local memory fault");
  };
  // The responder's memory faulted: answered as the responder's own
  // protection failure (the rkey-violation NAK, REM_ACCESS_ERR).
  auto remote_fault = [&](ibv_wc_status requester_status) {
    const std::string why = HarnessMemoryError("the responder's", wqe.wr_id);
    nak(requester_status, why.c_str());
  };
  // A local SGE failed the response's copy_data: IBV_WC_LOC_PROT_ERR, the
  // requester's QP to ERR (the responder is not told).
  auto bad_sge = [&](const std::string& why) {
    executed.status = IBV_WC_LOC_PROT_ERR;
    executed.text = why;
    Record(std::move(executed));
    CompleteSend(qp, wqe, IBV_WC_LOC_PROT_ERR, 0);
    SetQpState(qp, IBV_QPS_ERR, why.c_str());
  };

  switch (wqe.opcode) {
    // SEND / SEND_WITH_IMM: ExecuteSendByPackets above.
    // RDMA_WRITE / RDMA_WRITE_WITH_IMM: ExecuteWriteByPackets above.
    case IBV_WR_RDMA_READ: {
      const char* why = nullptr;
      const ibv_wc_status target = CheckTarget(responder, wqe.opcode, wqe.rkey,
                                               wqe.remote_addr, length, &why);
      if (target != IBV_WC_SUCCESS) {
        nak(target, why);
        return;
      }
      if (length > 0) {
        if (qp->link == 0 &&
            !LocalSgesOk(qp, wqe.sges, IBV_ACCESS_LOCAL_WRITE)) {
          // A local SGE fails: the response packets go in one by one and
          // the READ stops at the one reaching it (TakeResponse). The
          // responder's bytes are read as each packet is built.
          std::string why;
          switch (TakeResponse(
              qp, wqe, length, fake_nic_internal::MtuBytes(qp->attr.path_mtu),
              [&](uint64_t offset, uint64_t n, uint8_t* out) {
                uintptr_t fault = 0;
                return fake_nic_internal::GuardedCopy(
                    out,
                    reinterpret_cast<const void*>(wqe.remote_addr + offset),
                    n, &fault);
              },
              &why)) {
            case Response::kRemoteFault:
              remote_fault(IBV_WC_REM_ACCESS_ERR);
              return;
            case Response::kLocalFault:
              local_fault();
              return;
            case Response::kBadSge:
              bad_sge(why);
              return;
            case Response::kTaken:
              break;  // cannot happen: LocalSgesOk found a bad SGE
          }
        }
        const Span remote{wqe.remote_addr, length};
        const CopyFault copied = MoveBytes(
            &remote, 1, wqe.sges.begin(), wqe.sges.size(), length,
            [this](void* dst, const void* src, size_t n, uintptr_t* fault) {
              return NicWrite(dst, src, n, fault);
            });
        if (copied == CopyFault::kSource) {
          remote_fault(IBV_WC_REM_ACCESS_ERR);
          return;
        }
        if (copied == CopyFault::kDestination) {
          local_fault();
          return;
        }
      }
      Record(std::move(executed));
      CompleteSend(qp, wqe, IBV_WC_SUCCESS, static_cast<uint32_t>(length));
      return;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: {
      const char* why = nullptr;
      const ibv_wc_status target = CheckTarget(responder, wqe.opcode, wqe.rkey,
                                               wqe.remote_addr, 8, &why);
      if (target != IBV_WC_SUCCESS) {
        nak(target, why);
        return;
      }
      uint64_t original = 0;
      if (!ExecuteAtomic(wqe.opcode, wqe.remote_addr, wqe.compare_add, wqe.swap,
                         &original)) {
        remote_fault(IBV_WC_REM_ACCESS_ERR);
        return;
      }
      // The original value goes to the local SGE when the response
      // arrives: a bad SGE fails then, the remote value already changed.
      std::string bad;
      switch (TakeResponse(
          qp, wqe, 8, fake_nic_internal::MtuBytes(qp->attr.path_mtu),
          [&](uint64_t, uint64_t, uint8_t* out) {
            std::memcpy(out, &original, 8);
            return true;
          },
          &bad)) {
        case Response::kLocalFault:
          local_fault();
          return;
        case Response::kBadSge:
        case Response::kRemoteFault:  // (the fetch cannot fault)
          bad_sge(bad);
          return;
        case Response::kTaken:
          break;
      }
      Record(std::move(executed));
      CompleteSend(qp, wqe, IBV_WC_SUCCESS, 8);
      return;
    }
    default: {
      // Post-time checks let only READ and atomics come this far.
      const char* why = "opcode not executable";
      executed.status = IBV_WC_LOC_QP_OP_ERR;
      executed.text = why;
      Record(std::move(executed));
      CompleteSend(qp, wqe, IBV_WC_LOC_QP_OP_ERR, 0);
      SetQpState(qp, IBV_QPS_ERR, why);
      return;
    }
  }
}

FakeNic::Response FakeNic::TakeResponse(
    Qp* qp, const SendWqe& wqe, uint64_t length, uint32_t mtu,
    const std::function<bool(uint64_t, uint64_t, uint8_t*)>& fetch,
    std::string* why) {
  const bool atomic = fake_nic_internal::IsAtomic(wqe.opcode);
  uint8_t payload[4096];  // one response packet (an IB MTU is <= 4096)
  for (uint64_t offset = 0; offset < length; offset += mtu) {
    const uint64_t n = std::min<uint64_t>(mtu, length - offset);
    if (!fetch(offset, n, payload)) return Response::kRemoteFault;
    uintptr_t fault = 0;
    const SgeWalk walk = ScatterPacket(qp, wqe.sges, IBV_ACCESS_LOCAL_WRITE,
                                       offset, payload, n, &fault);
    if (walk == SgeWalk::kOk) continue;
    if (walk == SgeWalk::kFault) return Response::kLocalFault;
    *why = atomic ? std::string("local SGE fails lkey/PD/bounds/LOCAL_WRITE "
                                "check (atomic response)")
                  : "local SGE fails lkey/PD/bounds/LOCAL_WRITE check "
                    "(response packet " +
                        std::to_string(offset / mtu) + ")";
    return Response::kBadSge;
  }
  return Response::kTaken;
}

// Receiver not ready: the responder answers with an RNR NAK and the
// requester retries. rnr_retry 7 means retry forever (IB spec; rxe_comp.c
// COMPST_RNR_RETRY only decrements when rnr_retry != 7); otherwise a NAK
// that finds no retries left completes the WR with
// IBV_WC_RNR_RETRY_EXC_ERR, so rnr_retry N means N + 1 attempts. Each
// attempt is one Step(); the RNR wait is only compared with the ACK
// timeout (Personality::rnr_wait_runs_retransmit_timer).
void FakeNic::RnrNakHead(Qp* qp, uint8_t rnr_timer) {
  SendWqe& head = qp->sq.front();
  const uint32_t qp_num = qp->base.qp_num;
  if (!head.rnr_started) {
    head.rnr_started = true;
    head.rnr_retries_left = qp->rnr_retry;
  }
  // rxe: the retransmit timer runs out during the wait, once per cycle.
  const bool timer_runs_out = RetransmitBeatsRnrWait(qp, rnr_timer);
  const bool endless_transport = TransportRetriesEndless(qp);
  ibv_wc_status fails = IBV_WC_SUCCESS;
  if (qp->rnr_retry != 7 && head.rnr_retries_left == 0) {
    fails = IBV_WC_RNR_RETRY_EXC_ERR;
  } else if (timer_runs_out && !endless_transport &&
             head.transport_retries >= qp->retry_cnt) {
    fails = IBV_WC_RETRY_EXC_ERR;  // rxe_comp.c COMPST_ERROR_RETRY
  }
  if (fails != IBV_WC_SUCCESS) {
    // The NAK answered packet head.next_packet (a SEND's FIRST, a write
    // with imm's LAST): rxe_req.c update_state passes the WR only when
    // that packet ended it (CompleteSend, Personality::
    // sq_flush_follows_requester_index). Found by the duplex programs
    // (6000212: a two-packet SEND refused with RNR at its FIRST).
    qp->failed_on_last_packet =
        head.next_packet + 1 >=
        fake_nic_internal::PacketCount(
            head.total_length(),
            fake_nic_internal::MtuBytes(qp->attr.path_mtu));
    // rxe: after an RNR wait the resend, and the NAK that ends it, run in
    // the requester's task that the RNR timer scheduled; its completer
    // fails the WR, and the requester, finding its QP in ERR, runs the
    // completer again at once, which flushes the send queue before the
    // responder's task flushes the receives (rxe_comp.c COMPST_ERROR,
    // rxe_qp_error; rxe_req.c rxe_requester's err path). A WR that fails
    // on the NAK to its first try (from ibv_post_send) or on its
    // retransmit timer keeps the usual order. Found by the rnr programs
    // (10000052: rnr_retry 2, RNR_RETRY_EXC_ERR, then the sends flushed
    // before the receives).
    if (fails == IBV_WC_RNR_RETRY_EXC_ERR && qp->rnr_retry > 0 &&
        config_.personality.rnr_wait_runs_retransmit_timer) {
      qp->flush_send_queue_first = true;
    }
    // A WR that waited out an RNR NAK (rnr_retry > 0; it fails at its first
    // NAK otherwise): the completer that took the NAK only armed the RNR
    // timer, and the requester went on with the WRs behind it (after each
    // timer it resends the head whole and them again: rxe_req.c req_retry
    // puts req.wqe_index back at the consumer). Found by the rnr programs
    // (10000001: seven WRs in a seven-slot ring; three posted in ERR after
    // the head's end flushed on rxe and stayed queued on the fake).
    if (qp->rnr_retry > 0) RequesterSentPastHead(qp);
    EndHeadWr(qp, fails,
              fails == IBV_WC_RNR_RETRY_EXC_ERR
                  ? "RNR retries exhausted"
                  : "transport retries exhausted during RNR waits");
    return;
  }
  if (qp->rnr_retry != 7) head.rnr_retries_left--;
  if (timer_runs_out && !endless_transport) head.transport_retries++;
  // Parked until a receive comes: nothing else ends the wait. (Unless a
  // peer process already said a receive came, while the request was out:
  // its word and this NAK travel on different links.)
  if (qp->rnr_retry == 7 && (!timer_runs_out || endless_transport)) {
    head.waiting_for_receive = !head.retry_told || head.retry_told_changed;
    if (head.waiting_for_receive) {
      ParkOnRnrTimer(qp, rnr_timer);
      if (head.retry_told) RetryAtRnrTick(qp);  // the change came first
    }
  }
  head.retry_told = false;
  head.retry_told_changed = false;
  FakeNicEvent event;
  event.kind = FakeNicEvent::Kind::kRnrNak;
  event.qp_num = qp_num;
  event.wr_id = head.wr_id;
  event.opcode = head.opcode;
  event.text = qp->rnr_retry == 7
                   ? "waiting for a receive (rnr_retry 7)"
                   : "retries left: " + std::to_string(head.rnr_retries_left);
  if (timer_runs_out && !endless_transport) {
    event.text += ", transport retries used: " +
                  std::to_string(head.transport_retries);
  }
  Record(std::move(event));
}

uint64_t FakeNic::JiffyNs() const {
  // A kernel's timers (the personality whose requester runs rxe's
  // retransmit timer through RNR waits counts both in jiffies of
  // kernel_hz); the spec's count in its own units.
  const Personality& p = config_.personality;
  if (!p.rnr_wait_runs_retransmit_timer || p.kernel_hz == 0) return 1;
  return 1000000000ull / p.kernel_hz;
}

uint64_t FakeNic::AckTimeoutJiffies(const Qp* qp) const {
  // rxe_qp.c rxe_qp_from_attr: nsecs_to_jiffies(4096 << timeout), at least
  // 1 (IB spec 9.7.6.1.3: 4.096 us * 2^timeout).
  return std::max<uint64_t>(
      1, (uint64_t{4096} << std::min<uint8_t>(qp->attr.timeout & 31, 31)) /
             JiffyNs());
}

uint64_t FakeNic::RnrWaitJiffies(uint8_t rnr_timer) const {
  // rxe_comp.c rnrnak_usec: the IB spec's RNR timer table (9.7.5.2.8,
  // table 45), in microseconds; 0 is the longest. rnrnak_jiffies:
  // usecs_to_jiffies (rounds up), at least 1.
  static const uint32_t kRnrUs[32] = {
      655360, 10,    20,    30,    40,    60,     80,     120,
      160,    240,   320,   480,   640,   960,    1280,   1920,
      2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  const uint64_t jiffy_ns = JiffyNs();
  return std::max<uint64_t>(
      1, (uint64_t{kRnrUs[rnr_timer & 31]} * 1000 + jiffy_ns - 1) / jiffy_ns);
}

bool FakeNic::RetransmitBeatsRnrWait(const Qp* qp, uint8_t rnr_timer) const {
  const Personality& p = config_.personality;
  if (!p.rnr_wait_runs_retransmit_timer || qp->attr.timeout == 0 ||
      p.kernel_hz == 0) {
    return false;  // timeout 0: rxe arms no retransmit timer
  }
  return AckTimeoutJiffies(qp) < RnrWaitJiffies(rnr_timer);
}

bool FakeNic::RequesterTimersRunInRealTime(const Qp* qp) const {
  return qp->id == nullptr && background_running_ && !sequenced_;
}

void FakeNic::ParkOnRnrTimer(Qp* qp, uint8_t rnr_timer) {
  qp->rnr_tick_token = 0;  // a tick armed for an earlier park is stale
  if (!RequesterTimersRunInRealTime(qp)) {
    qp->rnr_period_ns = 0;
    return;
  }
  qp->rnr_parked_at = std::chrono::steady_clock::now();
  qp->rnr_period_ns = RnrWaitJiffies(rnr_timer) * JiffyNs();
}

void FakeNic::RetryAtRnrTick(Qp* qp) {
  SendWqe& head = qp->sq.front();
  if (!head.waiting_for_receive) return;
  if (qp->rnr_period_ns == 0 || !RequesterTimersRunInRealTime(qp)) {
    head.waiting_for_receive = false;
    MarkMaybeReady(qp);
    return;
  }
  if (qp->rnr_tick_token != 0) return;  // the next tick is armed already
  // The parked WR is resent at every tick from the NAK on, and NAKed again
  // while nothing changed (so the fake parks it instead): the first tick
  // after now is the first resend that sees the change. A program that
  // moves its responder through RESET, INIT and RTR to RTS (ibv_modify_qp
  // four times, microseconds apart) is answered halfway only when a tick
  // falls inside those calls, as on rxe. Found by the recorded
  // hostile_verbs program under load: reset_mid_send_sq0_rq3 with a resend
  // at once after RTR, NAKed for its PSN into ERR, and RTS then refused.
  const auto now = std::chrono::steady_clock::now();
  const uint64_t since = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          now - qp->rnr_parked_at)
          .count());
  const uint64_t ticks = since / qp->rnr_period_ns + 1;
  TransportTimer tick;
  tick.at = qp->rnr_parked_at + std::chrono::nanoseconds(ticks *
                                                        qp->rnr_period_ns);
  tick.qp_num = qp->base.qp_num;
  tick.token = next_token_++;
  tick.rnr_tick = true;
  qp->rnr_tick_token = tick.token;
  const auto at = tick.at;
  transport_timers_.push_back(std::move(tick));
  TimerArmed(at);
}

bool FakeNic::ApplyExecuteHook(Qp* qp) {
  SendWqe& head = qp->sq.front();
  if (head.delay_steps_left > 0) {
    head.delay_steps_left--;
    return true;
  }
  if (head.hook_consulted || !execute_hook_) return false;
  head.hook_consulted = true;
  ExecuteInfo info;
  info.qp_num = qp->base.qp_num;
  info.wr_id = head.wr_id;
  info.opcode = head.opcode;
  info.length = head.total_length();
  info.remote_addr = head.remote_addr;
  info.rkey = head.rkey;
  info.imm_data = head.imm_data;
  info.signaled = head.signaled;
  const ExecuteVerdict verdict = execute_hook_(info);
  if (verdict.kind == ExecuteVerdict::Kind::kProceed) return false;

  FakeNicEvent fault;
  fault.kind = FakeNicEvent::Kind::kFault;
  fault.qp_num = info.qp_num;
  fault.wr_id = info.wr_id;
  fault.opcode = info.opcode;
  fault.status = verdict.status;
  fault.text = "fault: " + verdict.reason;
  Record(std::move(fault));

  // The requester's WR ends in `status` with no data moved, or (torn) with
  // only part of it; a responder-detected error (the REM_* statuses) moves
  // the responder QP to ERR as well, as a NAK would (rxe_resp.c
  // do_class_ac_error); a link-level one (RETRY_EXC_ERR, ...) does not.
  auto end_with = [&](ibv_wc_status status, const std::string& why) {
    SendWqe wqe = std::move(qp->sq.front());
    qp->sq.pop_front();
    FakeNicEvent executed;
    executed.kind = FakeNicEvent::Kind::kExecute;
    executed.qp_num = info.qp_num;
    executed.wr_id = wqe.wr_id;
    executed.opcode = wqe.opcode;
    executed.status = status;
    executed.byte_len = verdict.kind == ExecuteVerdict::Kind::kTear
                            ? std::min(verdict.torn_bytes, info.length)
                            : 0;
    executed.text = why;
    DescribeAddresses(&executed, wqe.sges, wqe.rkey, wqe.remote_addr);
    Record(std::move(executed));
    CompleteSend(qp, wqe, status, 0);
    if (status == IBV_WC_SUCCESS) return;
    const bool remote = status == IBV_WC_REM_ACCESS_ERR ||
                        status == IBV_WC_REM_OP_ERR ||
                        status == IBV_WC_REM_INV_REQ_ERR;
    if (remote && qp->peer != nullptr) {
      SetQpState(qp->peer, IBV_QPS_ERR, why.c_str());
    }
    SetQpState(qp, IBV_QPS_ERR, why.c_str());
  };

  switch (verdict.kind) {
    case ExecuteVerdict::Kind::kProceed:
      return false;
    case ExecuteVerdict::Kind::kDelay:
      head.delay_steps_left = std::max(0, verdict.delay_steps);
      return true;
    case ExecuteVerdict::Kind::kOverrunCq: {
      OverrunLocked(qp->send_cq);
      FakeNicEvent overrun;
      overrun.kind = FakeNicEvent::Kind::kCqOverrun;
      overrun.qp_num = info.qp_num;
      overrun.wr_id = info.wr_id;
      overrun.text = "fault: cq overrun";
      Record(std::move(overrun));
      return false;  // the WR still executes; its completion is lost
    }
    case ExecuteVerdict::Kind::kLoseConnection:
      LoseConnectionLocked(qp);
      return true;  // the QP is in ERR now: the WR flushes next
    case ExecuteVerdict::Kind::kFail:
      end_with(verdict.status, "fault: " + verdict.reason);
      return true;
    case ExecuteVerdict::Kind::kTear: {
      // Only a write whose whole target is valid can tear (otherwise the
      // normal checks decide); the first torn_bytes land, the message never
      // completes at the responder (its receive stays posted).
      Qp* responder = qp->peer;
      const bool is_write = head.opcode == IBV_WR_RDMA_WRITE ||
                            head.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
      const char* why = nullptr;
      if (!is_write || info.length == 0 ||
          CheckRequest(responder, head.opcode, &why) !=
              RequestVerdict::kAccept ||
          (!head.is_inline && !LocalSgesOk(qp, head.sges, 0)) ||
          CheckTarget(responder, head.opcode, head.rkey, head.remote_addr,
                      info.length, &why) != IBV_WC_SUCCESS) {
        return false;
      }
      uint64_t left = std::min(verdict.torn_bytes, info.length);
      auto* dst = reinterpret_cast<uint8_t*>(head.remote_addr);
      // A fault ends the torn part early (the WR ends in error anyway).
      uintptr_t fault = 0;
      if (head.is_inline) {
        if (!NicWrite(dst, head.inline_data.data(), left, &fault)) {
          HarnessMemoryError("the responder's", head.wr_id);
        }
      } else {
        for (const Sge& sge : head.sges) {
          const uint64_t n = std::min<uint64_t>(sge.length, left);
          if (n == 0) break;
          if (!NicWrite(dst, reinterpret_cast<const void*>(sge.addr), n,
                        &fault)) {
            HarnessMemoryError("a torn write's", head.wr_id);
            break;
          }
          dst += n;
          left -= n;
        }
      }
      end_with(verdict.status == IBV_WC_SUCCESS ? IBV_WC_RETRY_EXC_ERR
                                                : verdict.status,
               "fault: torn write: " + verdict.reason);
      return true;
    }
  }
  return false;
}

void FakeNic::DescribeAddresses(FakeNicEvent* event, const SgeList& sges,
                                uint32_t rkey, uint64_t remote_addr) {
  // Two key lookups per WR that only a reader of the records needs.
  if (!Observed()) return;
  if (!sges.empty()) {
    const Sge& first = sges.front();
    event->local_addr = first.addr;
    const Mr* mr = FindMrByLkey(first.lkey);
    if (mr != nullptr && first.addr >= Address(mr->base.addr)) {
      event->local_mr = mr->ordinal;
      event->local_offset = first.addr - Address(mr->base.addr);
    }
  }
  event->remote_addr = remote_addr;
  const Mr* remote = rkey != 0 ? FindMrByRkey(rkey) : nullptr;
  if (remote != nullptr && remote_addr >= Address(remote->base.addr)) {
    event->remote_mr = remote->ordinal;
    event->remote_offset = remote_addr - Address(remote->base.addr);
  }
}

bool FakeNic::LocalSgesOk(Qp* qp, const SgeList& sges, int needed_access) {
  for (const Sge& sge : sges) {
    if (sge.length == 0) continue;  // no memory is accessed
    const Mr* mr = FindMrByLkey(sge.lkey);
    if (mr == nullptr) return false;
    if (mr->pd != qp->pd) return false;
    if ((mr->access & needed_access) != needed_access) return false;
    if (!InsideMr(mr->base, sge.addr, sge.length)) return false;
  }
  return true;
}

// rxe_resp.c check_rkey: the R_Key must name a live MR of
// the responder QP's PD that grants `needed_access` over the whole range.
bool FakeNic::RemoteMrOk(Qp* responder, uint32_t rkey, uint64_t addr,
                         uint64_t length, int needed_access) {
  const Mr* mr = FindMrByRkey(rkey);
  if (mr == nullptr) return false;
  return mr->pd == responder->pd && (mr->access & needed_access) &&
         InsideMr(mr->base, addr, length);
}

}  // namespace rpma_harness
