// fake_nic_packets.cc: RDMA WRITE and RDMA WRITE with immediate as the wire
// carries them, packet by packet.
//
// The requester cuts a message into packets of the QP's path MTU
// (ibv_query_qp path_mtu; rdma_cm sets the port's active MTU, 1024 on rxe
// over a 1500-byte netdev): ONLY when it fits in one, otherwise FIRST,
// MIDDLE..., LAST (IB spec 9.4.3; rxe_req.c next_opcode). The RETH (va,
// rkey, DMA length) rides on FIRST / ONLY, the immediate on LAST / ONLY.
// The responder runs rxe's checks on every packet, in rxe_resp.c's order:
//   check_op_valid   (RESPST_CHK_OP_VALID)  qp_access_flags allow a write
//                                           (done for the whole message in
//                                           ExecuteSendWqe: same answer for
//                                           every packet)
//   check_resource   (RESPST_CHK_RESOURCE)  a packet with RXE_RWR_MASK takes
//                                           a receive: for write with imm
//                                           that is LAST / ONLY only
//                                           (rxe_opcode.c); none -> RNR NAK
//   check_rkey       (RESPST_CHK_RKEY)      a RETH packet: rkey, PD, access
//                                           and the whole [va, va + len)
//                                           (zero length: not checked,
//                                           C9-88)
//   execute          (RESPST_EXECUTE)       the payload lands at va + offset
//   complete         (RESPST_COMPLETE)      LAST / ONLY with a receive:
//                                           RECV_RDMA_WITH_IMM
// so where a message fails decides what each side sees: a multi-packet
// write with imm that fails check_rkey fails on FIRST, before any receive
// was taken; the responder goes to ERR (do_class_ac_error) and the receive
// is flushed (WR_FLUSH_ERR) instead of completing with the access error,
// which only an ONLY packet (check_resource before check_rkey) produces. An
// RNR NAK on LAST implicitly acknowledges the packets before it (IB spec
// 9.7.5.1.1): their bytes have landed, and a retry resends LAST only.
//
// The wire here is the call stack: one Step() carries every packet of the
// message from the requester to the responder and the ACK / NAK back, unless
// an RNR NAK parks the message. See docs/fidelity.md, "Differences that
// remain" for why there is no separately scheduled Wire yet.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::RecvWqe;
using fake_nic_internal::RequestPacket;
using fake_nic_internal::Ring;
using fake_nic_internal::Sge;

namespace fake_nic_internal {

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
    case IBV_MTU_1024:
    default:
      return 1024;
  }
}

RequestPacket MakeSendPacket(ibv_wr_opcode opcode, uint64_t length,
                             uint32_t mtu, uint32_t index) {
  RequestPacket p = MakeWritePacket(opcode, length, mtu, index);
  p.has_reth = false;
  p.has_imm = opcode == IBV_WR_SEND_WITH_IMM && p.ends_message;
  // rxe_opcode.c: SEND_FIRST, SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE carry
  // RXE_RWR_MASK (check_resource takes the receive there).
  p.takes_receive = index == 0;
  return p;
}

const char* PositionName(RequestPacket::Position position) {
  switch (position) {
    case RequestPacket::Position::kFirst:
      return "FIRST";
    case RequestPacket::Position::kMiddle:
      return "MIDDLE";
    case RequestPacket::Position::kLast:
      return "LAST";
    case RequestPacket::Position::kOnly:
      return "ONLY";
  }
  return "?";
}

}  // namespace fake_nic_internal

namespace {

uint64_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }


// Whether [addr, addr + length) overlaps any entry of the gather list.
bool Overlaps(const Sge* src, size_t nsrc, uint64_t addr, uint64_t length) {
  for (size_t i = 0; i < nsrc; ++i) {
    if (src[i].addr < addr + length && addr < src[i].addr + src[i].length) {
      return true;
    }
  }
  return false;
}

// After one copy of several packets faulted: memmove may have copied in
// any order (glibc copies large blocks backwards to avoid 4 KiB aliasing),
// so the packets before the fault may not have landed. Copies them again one
// by one (the same bytes: source and target do not overlap) until the one
// that faults, so what lands is what packet-by-packet copying lands. Returns
// false with *fault set; `bulk` false: nothing to redo.
bool RecopyByPackets(const Sge* src, size_t nsrc, uint8_t* dst, uint64_t length,
                     uint32_t mtu, bool bulk, uintptr_t* fault) {
  if (!bulk) return false;
  for (uint64_t offset = 0; offset < length; offset += mtu) {
    const uint64_t n = std::min<uint64_t>(mtu, length - offset);
    if (!GatherAt(src, nsrc, offset, dst + offset, n, fault)) return false;
  }
  // Cannot happen (the same copy faulted a moment ago), but a copy that now
  // succeeds is not a fault.
  return true;
}

}  // namespace

void FakeNic::ExecuteWriteByPackets(Qp* qp, Qp* responder) {
  using fake_nic_internal::MakeWritePacket;
  using fake_nic_internal::MtuBytes;
  using fake_nic_internal::PacketCount;
  SendWqe& head = qp->sq.front();
  const uint64_t length = head.total_length();
  const uint32_t mtu = MtuBytes(qp->attr.path_mtu);
  const uint32_t count = PacketCount(length, mtu);
  auto& resp = responder->responder;

  const Sge inline_source{Address(head.inline_data.data()),
                          static_cast<uint32_t>(head.inline_data.size()), 0};
  const Sge* source = head.is_inline ? &inline_source : head.sges.begin();
  const size_t num_source = head.is_inline ? 1 : head.sges.size();
  // FakeNicConfig::landing other than kAtOnce: the payload goes to a
  // snapshot, landed later by LandNextPiece (fake_nic_landing.cc).
  // A WR that began landing at once (RNR-parked on LAST when the mode
  // changed) keeps landing at once: its first packets are in place already.
  if (landing_ != Landing::kAtOnce && head.landing == nullptr &&
      head.next_packet == 0) {
    head.landing = std::make_unique<fake_nic_internal::PendingLanding>();
    head.landing->bytes.resize(length);
  }
  fake_nic_internal::PendingLanding* const deferred = head.landing.get();
  // rxe_req.c finish_packet: the requester copies each packet's payload
  // from its SGEs as it builds the packet, so a bad source SGE stops the
  // write at the first packet that reaches it (deferred landing checked
  // the SGEs up front, in ExecuteSendWqe).
  ibv_wc_status source_status = IBV_WC_SUCCESS;
  const uint32_t first_bad =
      deferred != nullptr
          ? count
          : FirstBadSourcePacket(qp, head, mtu, count, &source_status);

  for (uint32_t i = head.next_packet; i < count; ++i) {
    const RequestPacket packet = MakeWritePacket(head.opcode, length, mtu, i);
    if (i == first_bad) {
      RecordPacket(qp, head, packet, "not sent: local SGE");
      FailOnSourcePacket(qp, source_status, i);
      return;
    }
    const PacketAnswer answer =
        CheckWritePacket(responder, packet, head.rkey, head.remote_addr,
                         length, qp->next_psn);
    // check_resource passed (ACK, or check_rkey failing after it): the
    // packet took its receive.
    const bool took_receive =
        packet.takes_receive && (answer == PacketAnswer::kAck ||
                                 answer == PacketAnswer::kNakRemoteAccess);
    // A message-ending packet whose receive completion will be lost is
    // answered by nothing (CompleteMessageReceive): its line says so. (A
    // write landing later completes its receive at its last piece, whose
    // line says it then: LandNextPiece.)
    const bool unanswered =
        config_.trace_packets && took_receive &&
        (answer == PacketAnswer::kNakRemoteAccess ||
         (packet.ends_message && deferred == nullptr)) &&
        ReceiveCompletionLost(responder);
    const char* const traced_answer =
        unanswered ? fake_nic_internal::kUnansweredCqFull
                 : answer == PacketAnswer::kAck    ? "ACK"
                 : answer == PacketAnswer::kRnrNak ? "RNR NAK"
                 : answer == PacketAnswer::kNoAnswer
                     ? fake_nic_internal::kResetMidMessage
                 : answer == PacketAnswer::kResendFromFirst
                     ? "NAK PSN sequence error at the message's first PSN "
                       "(responder reset since): sent again from FIRST"
                 : answer == PacketAnswer::kNakInvalidRequest
                     ? "NAK invalid request (no FIRST since the responder's "
                       "reset)"
                     : "NAK remote access";
    // An ACKed packet's line waits for its copy, which may still fault
    // (FailWriteOnCopyFault records the line then).
    if (answer != PacketAnswer::kAck) {
      RecordPacket(qp, head, packet, traced_answer);
    }
    if (answer == PacketAnswer::kRnrNak) {
      if (i == 0) resp.first_rnr_naked = true;
      head.next_packet = i;  // the NAK acknowledged the packets before it
      RnrNakHead(qp, responder->min_rnr_timer);
      return;
    }
    if (answer == PacketAnswer::kNoAnswer) {
      RequesterTimesOut(qp, fake_nic_internal::kResetMidMessage);
      return;
    }
    if (answer == PacketAnswer::kResendFromFirst) {
      ResendFromFirst(qp);
      return;
    }
    if (answer == PacketAnswer::kNakInvalidRequest) {
      NakWrite(qp, responder, std::nullopt, packet.ends_message,
               IBV_WC_REM_INV_REQ_ERR,
               fake_nic_internal::kContinuationWithoutFirst);
      return;
    }
    if (answer == PacketAnswer::kNakRemoteAccess) {
      // An ONLY packet: check_resource took the receive before check_rkey
      // failed, so it completes with the error.
      NakWrite(
          qp, responder,
          took_receive ? std::optional(TakeReceive(responder)) : std::nullopt,
          packet.ends_message, IBV_WC_REM_ACCESS_ERR,
          "rkey/PD/bounds/REMOTE_WRITE check failed at the responder");
      return;
    }
    // execute: the payload lands.
    uintptr_t fault = 0;
    auto* target =
        deferred != nullptr
            ? deferred->bytes.data() + packet.offset
            : reinterpret_cast<uint8_t*>(resp.write_va + packet.offset);
    // A MIDDLE packet takes no receive, carries no RETH and cannot be RNR
    // NAKed: its only effect is its copy (and its trace line). With nobody
    // tracing packets, FIRST and every MIDDLE land in one copy -- the same
    // bytes as packet by packet unless source and target overlap (loopback:
    // chunked copies then differ from one memmove), so only then. The LAST
    // packet joins that copy when its source is good and the responder
    // would ACK it now (check_resource: a receive waits for an immediate;
    // check_rkey's verdict is FIRST's, kept in resp): then nothing can come
    // between the packets. One guarded copy instead of one per packet
    // (~1 KiB each at rdma_cm's MTU) is what keeps a large write near
    // memcpy's speed.
    uint64_t copy_length = packet.length;
    uint32_t last_copied = i;
    bool ends_message = packet.ends_message;
    bool took = took_receive;
    bool with_last = false;   // LAST is in this copy
    uint64_t last_length = 0;
    if (packet.has_reth && count > 1 && first_bad >= count - 1 &&
        !config_.trace_packets) {
      const RequestPacket last = MakeWritePacket(head.opcode, length, mtu,
                                                 count - 1);
      const bool last_acked =
          first_bad == count &&
          (!last.takes_receive || !responder->ReceiveQueue().empty());
      const uint64_t span = last_acked ? length : last.offset;
      if ((last_acked || count > 2) &&
          !Overlaps(source, num_source, Address(target), span)) {
        copy_length = span;
        last_copied = last_acked ? count - 1 : count - 2;
        if (last_acked) {
          with_last = true;
          last_length = last.length;
          ends_message = true;
          took = last.takes_receive;
        }
      }
    }
    if (copy_length > 0) {
      TapSourceRead(qp, head, packet.offset, copy_length, mtu);
      // (A deferred landing's buffer is the NIC's; LandNextPiece writes.)
      if (deferred == nullptr) TapNicWrite(target, copy_length);
    }
    if (copy_length > 0 &&
        !GatherAt(source, num_source, packet.offset, target, copy_length,
                  &fault)) {
      // What packet-by-packet copying lands: the packets before LAST again,
      // one by one (memmove may copy in any order), up to the one that
      // faults; a fault in LAST is LAST's own, so the loop sends LAST alone.
      const uint64_t before_last = copy_length - last_length;
      if (!RecopyByPackets(source, num_source, target, before_last, mtu,
                           with_last || before_last > packet.length,
                           &fault)) {
        // (A packet trace copies packet by packet: `packet` is the one
        // that faulted.)
        FailWriteOnCopyFault(qp, responder, packet, target, before_last,
                             fault, with_last ? false : took,
                             with_last ? false : ends_message);
        return;
      }
      if (with_last) {
        i = count - 2;
        continue;
      }
      // Without LAST: the same copy faulted a moment ago and now did not,
      // which is not a fault.
    }
    RecordPacket(qp, head, packet, traced_answer);
    i = last_copied;
    if (ends_message && deferred != nullptr) {
      StartLanding(qp, responder, took);
      return;
    }
    if (ends_message) {
      // Executed and completed where it sits; popping only advances the
      // head (nothing on this path touches the send or receive queue).
      const SendWqe& wqe = head;
      // Executed only when answered: a lost receive completion leaves the
      // WR to the requester's timeout, which records how it ends.
      if (!took || !ReceiveCompletionLost(responder)) {
        RecordExecuted(qp, wqe, IBV_WC_SUCCESS, "");
      }
      if (took) {
        // The receive is consumed but its SGEs are not touched; byte_len is
        // the RDMA length (ibv_poll_cq(3), IBV_WC_RECV_RDMA_WITH_IMM).
        const RecvWqe recv = TakeReceive(responder);
        if (!CompleteMessageReceive(responder, recv, wqe, IBV_WC_SUCCESS,
                                    IBV_WC_RECV_RDMA_WITH_IMM,
                                    static_cast<uint32_t>(length))) {
          // No ACK: the WR stays at the head, unanswered.
          UnansweredReceiveCqFull(qp);
          return;
        }
      }
      CompleteSend(qp, wqe, IBV_WC_SUCCESS, static_cast<uint32_t>(length));
      qp->sq.pop_front();
      return;
    }
  }
}

void FakeNic::NakWrite(Qp* qp, Qp* responder,
                       const std::optional<RecvWqe>& receive,
                       bool ends_message, ibv_wc_status status,
                       const std::string& why) {
  // The receive completes with the error -- or, its CQ full, the responder
  // answers nothing at all (CompleteMessageReceive).
  if (receive.has_value() &&
      !CompleteMessageReceive(responder, *receive, qp->sq.front(),
                              config_.personality.recv_status_on_rkey_violation,
                              IBV_WC_RECV_RDMA_WITH_IMM, 0)) {
    UnansweredReceiveCqFull(qp);
    return;
  }
  SendWqe wqe = std::move(qp->sq.front());
  qp->sq.pop_front();
  RecordExecuted(qp, wqe, status, why.c_str());
  SetQpState(responder, IBV_QPS_ERR, why.c_str());
  qp->failed_on_last_packet = ends_message;
  CompleteSend(qp, wqe, status, 0);
  SetQpState(qp, IBV_QPS_ERR, why.c_str());
}

void FakeNic::FailWriteOnCopyFault(Qp* qp, Qp* responder,
                                   const RequestPacket& packet,
                                   const uint8_t* target, uint64_t copy_length,
                                   uintptr_t fault, bool took_receive,
                                   bool ends_message) {
  const uint64_t target_addr = Address(target);
  if (fault >= target_addr && fault - target_addr < copy_length) {
    RecordPacket(qp, qp->sq.front(), packet,
                 took_receive && ReceiveCompletionLost(responder)
                     ? fake_nic_internal::kUnansweredCqFull
                     : fake_nic_internal::kNakResponderMemory);
    // The responder's memory faulted: answered as its own protection
    // failure (the rkey-violation NAK, REM_ACCESS_ERR); a receive the
    // packet took completes with the error as on a failed check_rkey.
    NakWrite(
        qp, responder,
        took_receive ? std::optional(TakeReceive(responder)) : std::nullopt,
        ends_message, IBV_WC_REM_ACCESS_ERR,
        fake_nic_internal::HarnessMemoryError("the responder's",
                                              qp->sq.front().wr_id));
  } else {
    // The requester's own memory faulted: a local protection error
    // (ibv_poll_cq(3) IBV_WC_LOC_PROT_ERR), the QP to ERR, as when a
    // local SGE fails its checks. The message was cut: the responder's
    // receive, if taken, is flushed with its QP.
    RecordPacket(qp, qp->sq.front(), packet,
                 fake_nic_internal::kNotSentRequesterMemory);
    SendWqe wqe = std::move(qp->sq.front());
    qp->sq.pop_front();
    const std::string why =
        fake_nic_internal::HarnessMemoryError("the requester's", wqe.wr_id);
    if (took_receive) {
      RecvWqe recv = TakeReceive(responder);
      CompleteReceive(responder, recv, wqe, IBV_WC_WR_FLUSH_ERR,
                      IBV_WC_RECV_RDMA_WITH_IMM, 0);
      SetQpState(responder, IBV_QPS_ERR, "requester memory fault");
    }
    RecordExecuted(qp, wqe, IBV_WC_LOC_PROT_ERR, why.c_str());
    CompleteSend(qp, wqe, IBV_WC_LOC_PROT_ERR, 0);
    SetQpState(qp, IBV_QPS_ERR, "local memory fault");
  }
}

FakeNic::SgeWalk FakeNic::ScatterPacket(Qp* owner, const SgeList& sges,
                                        int access, uint64_t offset,
                                        const uint8_t* payload, uint64_t length,
                                        uintptr_t* fault) {
  for (const Sge& sge : sges) {
    if (length == 0) break;
    if (offset >= sge.length) {  // zero-length SGEs are skipped too
      offset -= sge.length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(sge.length - offset, length);
    // lookup_mr: the key, the PD, the access (any of `access`'s bits).
    const Mr* mr = FindMrByLkey(sge.lkey);
    if (mr == nullptr || mr->pd != owner->pd ||
        (access != 0 && (mr->access & access) == 0)) {
      return SgeWalk::kNoMr;
    }
    // rxe_mr_copy -> mr_check_range: this piece inside the MR.
    const uint64_t addr = sge.addr + offset;
    const uint64_t start = Address(mr->base.addr);
    if (addr < start || addr - start > mr->base.length ||
        n > mr->base.length - (addr - start)) {
      return SgeWalk::kOutOfRange;
    }
    if (payload != nullptr) {
      if (!NicWrite(reinterpret_cast<void*>(addr), payload, n, fault)) {
        return SgeWalk::kFault;
      }
      payload += n;
    }
    length -= n;
    offset = 0;
  }
  return SgeWalk::kOk;
}

uint32_t FakeNic::FirstBadSourcePacket(Qp* qp, const SendWqe& wqe, uint32_t mtu,
                                       uint32_t count, ibv_wc_status* status) {
  if (wqe.is_inline) return count;  // copied at post time
  uint64_t message_offset = 0;      // of this SGE's first byte
  for (const Sge& sge : wqe.sges) {
    if (sge.length == 0) continue;
    const Mr* mr = FindMrByLkey(sge.lkey);
    if (mr == nullptr || mr->pd != qp->pd) {
      // copy_data looks the MR up when a packet first reaches the SGE.
      *status = config_.personality.send_status_on_bad_source_key;
      return static_cast<uint32_t>(message_offset / mtu);
    }
    // How much of the SGE, from its start, lies inside the MR: pieces are
    // cut at packet boundaries, so the first piece reaching past the MR is
    // the one holding the SGE's byte `inside` (mr_check_range, -EFAULT).
    const uint64_t start = Address(mr->base.addr);
    const uint64_t end = start + mr->base.length;
    const uint64_t inside =
        sge.addr < start || sge.addr > end
            ? 0
            : std::min<uint64_t>(sge.length, end - sge.addr);
    if (inside < sge.length) {
      *status = IBV_WC_LOC_PROT_ERR;
      return static_cast<uint32_t>((message_offset + inside) / mtu);
    }
    message_offset += sge.length;
  }
  return count;
}

void FakeNic::FailOnSourcePacket(Qp* qp, ibv_wc_status status, uint32_t index) {
  SendWqe wqe = std::move(qp->sq.front());
  qp->sq.pop_front();
  const std::string why =
      std::string(status == IBV_WC_LOC_PROT_ERR
                      ? "local SGE reaches outside its MR"
                      : "local SGE's lkey names no MR of the QP's PD") +
      " (packet " + std::to_string(index) + ")";
  RecordExecuted(qp, wqe, status, why.c_str());
  // rxe_req.c err: the requester's index passes the WR, the QP to ERR.
  CompleteSend(qp, wqe, status, 0);
  SetQpState(qp, IBV_QPS_ERR, why.c_str());
}

bool FakeNic::HeadOutOfSequence(Qp* qp, Qp* responder) {
  SendWqe& head = qp->sq.front();
  const uint64_t length = head.total_length();
  const uint32_t mtu = fake_nic_internal::MtuBytes(qp->attr.path_mtu);
  const uint32_t count =
      fake_nic_internal::RequestPackets(head.opcode, length, mtu);
  uint32_t at = count;
  const SequenceAnswer answer =
      CheckRequestPsn(responder, head.opcode, qp->next_psn, count,
                      fake_nic_internal::WrPsns(*qp, head), &at);
  if (answer == SequenceAnswer::kInSequence) return false;
  const char* const why = OutOfSequenceText(answer);
  if (fake_nic_internal::CarriesPayload(head.opcode)) {
    ibv_wc_status source_status = IBV_WC_SUCCESS;
    const uint32_t buildable =
        FirstBadSourcePacket(qp, head, mtu, count, &source_status);
    if (fake_nic_internal::SourceFaultComesFirst(
            answer != SequenceAnswer::kNoAnswer, at, buildable, count)) {
      FailOnSourcePacket(qp, source_status, buildable);
      return true;
    }
  }
  switch (answer) {
    case SequenceAnswer::kNoAnswer:
      RequesterTimesOut(qp, why);
      return true;
    case SequenceAnswer::kAckedUnexecuted: {
      SendWqe wqe = std::move(qp->sq.front());
      qp->sq.pop_front();
      RecordExecuted(qp, wqe, IBV_WC_SUCCESS, why);
      CompleteSend(qp, wqe, IBV_WC_SUCCESS, static_cast<uint32_t>(length));
      return true;
    }
    case SequenceAnswer::kNakInvalidRequest:
      NakWrite(qp, responder, std::nullopt, at + 1 == count,
               IBV_WC_REM_INV_REQ_ERR, why);
      return true;
    case SequenceAnswer::kInSequence:
      break;
  }
  return false;
}

void FakeNic::ExecuteSendByPackets(Qp* qp, Qp* responder) {
  using fake_nic_internal::MakeSendPacket;
  using fake_nic_internal::MtuBytes;
  using fake_nic_internal::PacketCount;
  SendWqe& head = qp->sq.front();
  const uint64_t length = head.total_length();
  const uint32_t mtu = MtuBytes(qp->attr.path_mtu);
  const uint32_t count = PacketCount(length, mtu);
  ibv_wc_status source_status = IBV_WC_SUCCESS;
  const uint32_t first_bad =
      FirstBadSourcePacket(qp, head, mtu, count, &source_status);
  if (first_bad == 0) {
    // The first packet is never built: nothing reaches the responder.
    RecordPacket(qp, head, MakeSendPacket(head.opcode, length, mtu, 0),
                 "not sent: local SGE");
    FailOnSourcePacket(qp, source_status, 0);
    return;
  }
  // check_resource on FIRST / ONLY: a receive, or an RNR NAK (with an SRQ
  // the receive comes from it, IB spec 10.2.9; rxe_resp.c get_srq_wqe).
  Ring<RecvWqe>& rq = responder->ReceiveQueue();
  if (rq.empty()) {
    RecordPacket(qp, head, MakeSendPacket(head.opcode, length, mtu, 0),
                 "RNR NAK");
    responder->responder.first_rnr_naked = true;
    RnrNakHead(qp, responder->min_rnr_timer);
    return;
  }
  head.waiting_for_receive = false;
  // The receive stays at the head of its queue until the message ends
  // (rxe advances the consumer index in do_complete).
  const RecvWqe& recv = rq.front();
  uint64_t capacity = 0;
  for (const Sge& sge : recv.sges) capacity += sge.length;

  const Sge inline_source{Address(head.inline_data.data()),
                          static_cast<uint32_t>(head.inline_data.size()), 0};
  const Sge* source = head.is_inline ? &inline_source : head.sges.begin();
  const size_t num_source = head.is_inline ? 1 : head.sges.size();

  // A responder-detected error: the receive completes with `recv_status`,
  // the requester with `requester_status`, both QPs to ERR (rxe_resp.c
  // do_class_ac_error, then RESPST_COMPLETE and RESPST_ERROR).
  auto nak = [&](const RequestPacket& packet, ibv_wc_status recv_status,
                 ibv_wc_status requester_status, const std::string& why) {
    if (config_.trace_packets) {
      RecordPacketLine(
          qp, head, packet,
          (ReceiveCompletionLost(responder)
               ? why + "; " + fake_nic_internal::kUnansweredCqFull
               : why)
              .c_str());
    }
    RecvWqe taken = TakeReceive(responder);
    if (!CompleteMessageReceive(responder, taken, head, recv_status,
                                IBV_WC_RECV, 0)) {
      UnansweredReceiveCqFull(qp);  // no NAK
      return;
    }
    SendWqe wqe = std::move(qp->sq.front());
    qp->sq.pop_front();
    RecordExecuted(qp, wqe, requester_status, why.c_str());
    SetQpState(responder, IBV_QPS_ERR, why.c_str());
    qp->failed_on_last_packet = packet.ends_message;
    CompleteSend(qp, wqe, requester_status, 0);
    SetQpState(qp, IBV_QPS_ERR, why.c_str());
  };

  uint8_t payload[4096];  // one packet: MtuBytes() <= 4096
  for (uint32_t i = 0; i < count; ++i) {
    const RequestPacket packet = MakeSendPacket(head.opcode, length, mtu, i);
    if (i == first_bad) {
      // rxe_req.c finish_packet: this packet is never sent; the receive the
      // FIRST packet took stays in progress (no completion, the bytes of
      // the packets before in place) and the responder stays as it is.
      RecordPacket(qp, head, packet, "not sent: local SGE");
      HoldCutReceive(responder);
      FailOnSourcePacket(qp, source_status, i);
      return;
    }
    uintptr_t fault = 0;
    if (packet.length > 0) {
      TapSourceRead(qp, head, packet.offset, packet.length, mtu);
    }
    if (packet.length > 0 && !GatherAt(source, num_source, packet.offset,
                                       payload, packet.length, &fault)) {
      // The requester's own memory faulted (HarnessMemoryError): a local
      // protection error; the message was cut, so the receive is flushed
      // with the responder's QP.
      RecordPacket(qp, head, packet,
                   fake_nic_internal::kNotSentRequesterMemory);
      const std::string why =
          fake_nic_internal::HarnessMemoryError("the requester's", head.wr_id);
      RecvWqe taken = TakeReceive(responder);
      SendWqe wqe = std::move(qp->sq.front());
      qp->sq.pop_front();
      CompleteReceive(responder, taken, wqe, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV,
                      0);
      SetQpState(responder, IBV_QPS_ERR, "requester memory fault");
      RecordExecuted(qp, wqe, IBV_WC_LOC_PROT_ERR, why.c_str());
      CompleteSend(qp, wqe, IBV_WC_LOC_PROT_ERR, 0);
      SetQpState(qp, IBV_QPS_ERR, "local memory fault");
      return;
    }
    ibv_wc_status recv_status = IBV_WC_SUCCESS;
    std::string why;
    const ibv_wc_status status =
        ReceivePacket(responder, recv, capacity, packet, payload, head.wr_id,
                      &recv_status, &why);
    if (status != IBV_WC_SUCCESS) {
      nak(packet, recv_status, status, why);
      return;
    }
    RecordPacket(qp, head, packet,
                 config_.trace_packets && packet.ends_message &&
                         ReceiveCompletionLost(responder)
                     ? fake_nic_internal::kUnansweredCqFull
                     : "ACK");
  }
  // LAST / ONLY: RESPST_COMPLETE. byte_len is the message's length, the
  // immediate (SEND_WITH_IMM) came on this packet (ibv_poll_cq(3)).
  const bool lost = ReceiveCompletionLost(responder);
  RecvWqe taken = TakeReceive(responder);
  if (!lost) RecordExecuted(qp, qp->sq.front(), IBV_WC_SUCCESS, "");
  if (!CompleteMessageReceive(responder, taken, qp->sq.front(),
                              IBV_WC_SUCCESS, IBV_WC_RECV,
                              static_cast<uint32_t>(length))) {
    // No ACK: the WR stays at the head, unanswered.
    UnansweredReceiveCqFull(qp);
    return;
  }
  SendWqe wqe = std::move(qp->sq.front());
  qp->sq.pop_front();
  CompleteSend(qp, wqe, IBV_WC_SUCCESS, static_cast<uint32_t>(length));
}

void FakeNic::RunRequesterNow(Qp* qp) {
  while (qp->base.state == IBV_QPS_RTS && !qp->sq.empty() &&
         QpHasReadyWork(qp)) {
    const size_t before = qp->sq.size();
    ExecuteSendWqe(qp);
    if (qp->sq.size() == before) break;  // RNR NAK, delay: retried by Step()
  }
  MarkMaybeReady(qp);
  MarkMaybeReady(qp->peer);
}

void FakeNic::RecordPacketLine(Qp* qp, const SendWqe& wqe,
                               const RequestPacket& packet,
                               const char* answer) {
  RecordLazily([&](FakeNicEvent* event) {
    event->kind = FakeNicEvent::Kind::kPacket;
    event->qp_num = qp->base.qp_num;
    event->wr_id = wqe.wr_id;
    event->opcode = wqe.opcode;
    event->byte_len = packet.length;
    event->text =
        std::string(fake_nic_internal::PositionName(packet.position)) + " #" +
        std::to_string(packet.index) + " offset " +
        std::to_string(packet.offset) + ": " + answer;
  });
}

void FakeNic::RecordExecuted(Qp* qp, const SendWqe& wqe, ibv_wc_status status,
                             const char* why) {
  if (!Observed()) {  // as RecordLazily: the sequence advances all the same
    next_seq_++;
    WakeWaiters();
    return;
  }
  FakeNicEvent executed;
  executed.kind = FakeNicEvent::Kind::kExecute;
  executed.qp_num = qp->base.qp_num;
  executed.wr_id = wqe.wr_id;
  executed.opcode = wqe.opcode;
  executed.status = status;
  executed.byte_len = wqe.total_length();
  executed.text = why;
  DescribeAddresses(&executed, wqe.sges, wqe.rkey, wqe.remote_addr);
  Record(std::move(executed));
}

bool FakeNic::ReceiveCompletionLost(const Qp* responder) const {
  // A CQ a fault rule overran (FakeNic::OverrunCq) only fails its polls.
  return config_.personality.cq_full_loses_the_completion_only &&
         !responder->recv_cq->overrun && CqHasNoRoom(responder->recv_cq);
}

void FakeNic::UnansweredReceiveCqFull(Qp* qp) {
  // rxe_resp.c do_complete: rxe_cq_post failing (a full CQ) sends the
  // responder to RESPST_ERROR before any ACK is built, so the requester
  // hears nothing (recv_cq_overrun in verbs_dropin/testdata/async_events.c,
  // on rxe). A retransmission meets a responder in ERR.
  qp->sq.front().landing.reset();
  RequesterTimesOut(qp, fake_nic_internal::kReceiveCqFull);
}

bool FakeNic::CompleteMessageReceive(Qp* responder, const RecvWqe& recv,
                                     const SendWqe& wqe, ibv_wc_status status,
                                     ibv_wc_opcode opcode, uint32_t byte_len) {
  const bool overflows = ReceiveCompletionLost(responder);
  CompleteReceive(responder, recv, wqe, status, opcode, byte_len);
  if (!overflows) return true;
  SetQpState(responder, IBV_QPS_ERR, fake_nic_internal::kReceiveCqFull);
  return false;
}

void FakeNic::CompleteReceive(Qp* responder, const RecvWqe& recv,
                              const SendWqe& wqe, ibv_wc_status status,
                              ibv_wc_opcode opcode, uint32_t byte_len) {
  // Written in place in the CQ's ring (CqeSlot), or built aside for
  // AddCqe to report when the CQ has no room.
  ibv_wc lost;
  ibv_wc* const slot = CqeSlot(responder->recv_cq);
  ibv_wc& wc = slot != nullptr ? *slot : lost;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = recv.wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = responder->base.qp_num;
  const bool with_imm = wqe.opcode == IBV_WR_SEND_WITH_IMM ||
                        wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (status == IBV_WC_SUCCESS && with_imm) {
    // ibv_poll_cq(3): imm_data is in network byte order, passed through.
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = wqe.imm_data;
  }
  if (status == IBV_WC_SUCCESS && config_.personality.recv_cqe_has_grh_flag) {
    wc.wc_flags |= IBV_WC_GRH;
  }
  const bool solicited = wqe.send_flags & IBV_SEND_SOLICITED;
  if (slot != nullptr) {
    CommitCqe(responder->recv_cq, wc, solicited);
  } else {
    AddCqe(responder->recv_cq, wc, solicited);
  }
}

}  // namespace rpma_harness
