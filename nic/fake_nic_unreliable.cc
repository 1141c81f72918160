// Unreliable Connected QPs (IBV_QPT_UC): the requester sends a message's
// packets and completes the WR once they are out -- no ACK, no NAK, no
// retry (IB spec 9.8.3) -- and the responder takes what it can and drops
// what it cannot, silently. What rxe 6.1 does, case by case, is recorded by
// verbs_dropin/testdata/uc_verbs.c (uc_verbs.rxe.txt); each rule below
// names its case there.
//
// The responder's checks are the RC responder's (CheckRequest,
// CheckWritePacket, ReceivePacket: fake_nic_responder.cc); only what
// follows a failed check differs. The same DeliverUnreliable serves a
// requester in this process (ExecuteUnreliable) and one in another process
// (RespondUnreliably, fake_nic_remote.cc).

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::RecvWqe;
using fake_nic_internal::RequestPacket;
using fake_nic_internal::SendWqe;
using fake_nic_internal::Sge;

void FakeNic::ExecuteUnreliable(Qp* qp) {
  SendWqe& head = qp->sq.front();
  // UC has no RDMA READ and no atomics (IB spec 9.8.3, table 38 opcodes).
  // rxe takes them at ibv_post_send and fails them here: LOC_QP_OP_ERR,
  // the QP to ERR (rxe_req.c: no opcode for the QP type; recorded,
  // read-and-atomic).
  if (fake_nic_internal::AnsweredWithData(head.opcode)) {
    EndHeadWr(qp, IBV_WC_LOC_QP_OP_ERR, "UC has no RDMA READ or atomics");
    return;
  }
  // Toward another process: the packets go in one request frame, and the
  // WR completes as it leaves (ExecuteRemote).
  if (qp->link != 0) {
    ExecuteRemote(qp);
    return;
  }
  const uint64_t length = head.total_length();
  const uint32_t mtu = fake_nic_internal::MtuBytes(qp->attr.path_mtu);
  const uint32_t count = fake_nic_internal::PacketCount(length, mtu);
  // rxe_req.c finish_packet reads each packet from the SGEs as it builds
  // it: the packets before a bad source SGE go out, then the WR fails.
  ibv_wc_status source_status = IBV_WC_SUCCESS;
  const uint32_t sent =
      FirstBadSourcePacket(qp, head, mtu, count, &source_status);
  const uint64_t payload_len =
      std::min<uint64_t>(length, uint64_t{sent} * mtu);
  if (!GatherHeadPayload(qp, payload_len, mtu)) return;
  if (sent > 0) {
    DeliverUnreliable(qp->peer, head, length, mtu, sent,
                      remote_payload_.data());
  }
  ReleaseLargePayload();
  if (sent < count) {
    FailOnSourcePacket(qp, source_status, sent);
    return;
  }
  // The packets are out: done, whatever the responder made of them
  // (recorded: every requester completion of uc_verbs.rxe.txt is a
  // success, its byte_len the message's).
  CompleteUnreliableHead(qp);
}

void FakeNic::CompleteUnreliableHead(Qp* qp) {
  EndHeadWr(qp, IBV_WC_SUCCESS, "",
            static_cast<uint32_t>(qp->sq.front().total_length()));
}

void FakeNic::UcMessageAfterCut(Qp* responder, const SendWqe& wqe) {
  // rxe_resp.c check_op_seq (UC): a first packet while a SEND or WRITE is
  // under way is RESPST_ERR_MISSING_OPCODE_LAST_D1E; do_class_d1e_error
  // drops the packet either way.
  if (responder->uc_cut == Qp::UcCut::kSend && responder->srq == nullptr) {
    // Class D1: the receive (still at the head of the QP's queue, rxe's
    // resp.wqe) is reset to its start and resp.opcode to none: the next
    // message is taken afresh.
    responder->uc_cut = Qp::UcCut::kNone;
    return;
  }
  if (responder->uc_cut == Qp::UcCut::kSend && !responder->rq.empty()) {
    // Class E: the receive the cut message took from the SRQ (held in the
    // QP's own queue since the cut: HoldCutReceive) completes with
    // REM_INV_REQ_ERR. resp.opcode stays: later messages meet the same
    // check with no receive held, and are dropped.
    RecvWqe held = std::move(responder->rq.front());
    responder->rq.pop_front();
    CompleteMessageReceive(responder, held, wqe, IBV_WC_REM_INV_REQ_ERR,
                           IBV_WC_RECV, 0);
  }
}

void FakeNic::DeliverUnreliable(Qp* responder, const SendWqe& wqe,
                                uint64_t length, uint32_t mtu,
                                uint32_t sent_packets,
                                const uint8_t* payload) {
  const uint32_t count = fake_nic_internal::PacketCount(length, mtu);
  const bool is_write = wqe.opcode == IBV_WR_RDMA_WRITE ||
                        wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  auto dropped = [&](uint32_t index, const char* why) {
    // Said in a packet trace (FakeNicConfig::trace_packets) only: nothing
    // comes back to the requester.
    if (config_.trace_packets) {
      FakeNicEvent event;
      event.kind = FakeNicEvent::Kind::kPacket;
      event.qp_num = responder != nullptr ? responder->base.qp_num : 0;
      event.wr_id = wqe.wr_id;
      event.opcode = wqe.opcode;
      event.text = std::string("UC responder dropped the message at packet ") +
                   std::to_string(index) + ": " + why;
      Record(std::move(event));
    }
    // rxe_resp.c check_op_seq: a message cut after its first packet leaves
    // the responder expecting its middle (UcMessageAfterCut;
    // Personality::uc_cut_message_stalls_responder). A send's receive
    // from an SRQ left it at the first packet (get_srq_wqe): held by the
    // QP from now on.
    if (index > 0 && responder != nullptr &&
        config_.personality.uc_cut_message_stalls_responder) {
      responder->uc_cut = is_write ? Qp::UcCut::kWrite : Qp::UcCut::kSend;
      if (!is_write) HoldCutReceive(responder);
    }
  };
  // Not RTR/RTS or gone: the packets are dropped (rxe_recv.c
  // check_type_state, before the responder; recorded, send-to-init).
  // Refused by the QP's access flags: dropped too (rxe_resp.c
  // check_op_valid, UC: drop_msg), but the responder's state machine
  // checks the opcode sequence first (RESPST_CHK_OP_SEQ before
  // RESPST_CHK_OP_VALID), so a refused message still ends a cut one
  // (recorded, cut-send-refused-write, -srq).
  const char* refused = nullptr;
  const RequestVerdict verdict = CheckRequest(responder, wqe.opcode, &refused);
  if (verdict == RequestVerdict::kNoAnswer) {
    dropped(0, refused);
    return;
  }
  if (responder->uc_cut != Qp::UcCut::kNone) {
    dropped(0, "a message cut earlier left it expecting a middle packet");
    UcMessageAfterCut(responder, wqe);
    return;
  }
  if (verdict != RequestVerdict::kAccept) {
    dropped(0, refused);
    return;
  }
  auto& rq = responder->ReceiveQueue();
  if (is_write) {
    auto& resp = responder->responder;
    // A packet that took a receive from an SRQ (a write with imm's ONLY or
    // LAST: check_resource runs before check_rkey and the copy) and then
    // failed the rkey check or its copy completes that receive with the
    // rkey violation's status; the QP stays as it is (rxe_resp.c
    // RESPST_ERR_RKEY_VIOLATION, "UC/SRQ Class D"; recorded,
    // srq-write-imm-bad-rkey). A receive of the QP's own queue stays
    // posted (class E).
    auto fail_receive_taken = [&](const RequestPacket& packet) {
      if (!packet.takes_receive || responder->srq == nullptr) return;
      RecvWqe taken = TakeReceive(responder);
      CompleteMessageReceive(responder, taken, wqe,
                             config_.personality.recv_status_on_rkey_violation,
                             IBV_WC_RECV_RDMA_WITH_IMM, 0);
    };
    for (uint32_t i = 0; i < sent_packets; ++i) {
      const RequestPacket packet =
          fake_nic_internal::MakeWritePacket(wqe.opcode, length, mtu, i);
      // A bad rkey at the first packet, or no receive for the immediate at
      // the last: that packet and the rest are dropped, the receive stays
      // posted (recorded: write-imm-bad-rkey, write-imm-3k-no-recv).
      // (A UC message is delivered from its first packet: no PSN is asked.)
      const PacketAnswer verdict = CheckWritePacket(
          responder, packet, wqe.rkey, wqe.remote_addr, length,
          /*first_psn=*/0);
      if (verdict != PacketAnswer::kAck) {
        if (verdict == PacketAnswer::kNakRemoteAccess) {
          fail_receive_taken(packet);
        }
        dropped(i, verdict == PacketAnswer::kRnrNak
                       ? "no receive for the immediate data"
                   : verdict == PacketAnswer::kNoAnswer
                       ? "no FIRST packet seen"
                       : "rkey/PD/bounds/REMOTE_WRITE check failed");
        return;
      }
      if (packet.length > 0) {
        uintptr_t fault = 0;
        if (!NicWrite(reinterpret_cast<void*>(resp.write_va + packet.offset),
                      payload + packet.offset, packet.length, &fault)) {
          fail_receive_taken(packet);
          dropped(i, "the responder's memory faulted");
          return;
        }
      }
      if (!packet.ends_message) continue;
      RecordLanded(responder, wqe, length);
      if (packet.takes_receive) {
        // A full receive CQ puts the responder in ERR (no answer on UC).
        RecvWqe recv = TakeReceive(responder);
        if (!CompleteMessageReceive(responder, recv, wqe, IBV_WC_SUCCESS,
                                    IBV_WC_RECV_RDMA_WITH_IMM,
                                    static_cast<uint32_t>(length))) {
          return;
        }
      }
    }
    if (sent_packets < count) dropped(sent_packets, "the requester stopped");
    return;
  }
  // SEND / SEND_WITH_IMM. No receive: dropped whole (check_resource on the
  // first packet; recorded, send-no-recv, send-3k-no-recv).
  if (rq.empty()) {
    dropped(0, "no receive posted");
    return;
  }
  const RecvWqe& recv = rq.front();
  uint64_t capacity = 0;
  for (const Sge& sge : recv.sges) capacity += sge.length;
  for (uint32_t i = 0; i < sent_packets; ++i) {
    const RequestPacket packet =
        fake_nic_internal::MakeSendPacket(wqe.opcode, length, mtu, i);
    ibv_wc_status recv_status = IBV_WC_SUCCESS;
    std::string why;
    if (ReceivePacket(responder, recv, capacity, packet,
                      payload + packet.offset, wqe.wr_id, &recv_status,
                      &why) != IBV_WC_SUCCESS) {
      // A receive too short, or a bad receive SGE: a malformed WQE, which
      // rxe answers as on RC without the NAK -- the receive completes in
      // error and the responder goes to ERR (rxe_resp.c
      // RESPST_ERR_MALFORMED_WQE, class A for every QP type; recorded,
      // send-too-long, send-3k-too-long).
      RecvWqe taken = TakeReceive(responder);
      CompleteReceive(responder, taken, wqe, recv_status, IBV_WC_RECV, 0);
      SetQpState(responder, IBV_QPS_ERR, why.c_str());
      return;
    }
  }
  // A message cut by the requester leaves its receive in progress.
  if (sent_packets < count) {
    dropped(sent_packets, "the requester stopped");
    return;
  }
  RecvWqe taken = TakeReceive(responder);
  CompleteMessageReceive(responder, taken, wqe, IBV_WC_SUCCESS, IBV_WC_RECV,
                         static_cast<uint32_t>(length));
}

}  // namespace rpma_harness
