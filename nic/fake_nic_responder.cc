// fake_nic_responder.cc: the responder, one function per rxe_resp.c check.
//
// Every request that reaches a responder QP -- from a requester in this NIC
// (fake_nic_data_path.cc ExecuteSendWqe, fake_nic_packets.cc
// ExecuteWriteByPackets / ExecuteSendByPackets) or from
// a peer process over the fabric (fake_nic_remote.cc RespondToRemote) --
// meets these functions and no other copy of their rules, in rxe's order:
//   CheckRequest        the QP answers at all (RTR / RTS / SQD), then
//                       check_op_valid (qp_access_flags)
//   CheckWritePacket    check_resource (a receive for a packet with
//                       RXE_RWR_MASK, else RNR NAK), then check_rkey on the
//                       RETH packet for the whole message
//   CheckTarget         check_rkey: the R_Key names an MR of the QP's PD
//                       granting the opcode's access over the range
//                       (RemoteMrOk); atomics 8-byte aligned first
//   ReceivePacket       send_data_in: one SEND packet into the receive
//   ExecuteAtomic       atomic_reply: read, compute, write back

#include <algorithm>
#include <string>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::RecvWqe;
using fake_nic_internal::RequestPacket;

FakeNic::RequestVerdict FakeNic::CheckRequest(const Qp* responder,
                                              ibv_wr_opcode opcode,
                                              const char** why) const {
  // A QP that is gone, in ERR or not yet RTR drops requests, so the
  // requester exhausts its transport retries (rxe_comp.c
  // COMPST_ERROR_RETRY -> IB_WC_RETRY_EXC_ERR); RTR, RTS and SQD answer
  // (fake_nic_internal::CanRespond).
  if (responder == nullptr || !fake_nic_internal::CanRespond(responder->base)) {
    *why = "responder does not answer";
    return RequestVerdict::kNoAnswer;
  }
  // check_op_valid (fake_nic_internal::RemoteAccessNeeded): an "invalid
  // request" NAK, before check_resource takes a receive.
  const unsigned int needed = fake_nic_internal::RemoteAccessNeeded(opcode);
  if ((responder->attr.qp_access_flags & needed) != needed) {
    *why = "responder QP's qp_access_flags refuse the operation";
    return RequestVerdict::kInvalidRequest;
  }
  return RequestVerdict::kAccept;
}

FakeNic::PacketAnswer FakeNic::CheckWritePacket(Qp* responder,
                                                const RequestPacket& packet,
                                                uint32_t rkey, uint64_t va,
                                                uint64_t length,
                                                uint32_t first_psn) {
  auto& resp = responder->responder;
  if (!packet.has_reth && !resp.write_started) {
    return ContinuationWithoutFirst(responder, packet.index, first_psn);
  }
  // check_resource: only a packet with RXE_RWR_MASK (LAST / ONLY WITH_IMM,
  // rxe_opcode.c) takes a receive; with an SRQ from it (IB spec 10.2.9,
  // rxe_resp.c get_srq_wqe).
  if (packet.takes_receive && responder->ReceiveQueue().empty()) {
    return PacketAnswer::kRnrNak;
  }
  // check_rkey on the RETH packet (FIRST / ONLY), for the whole message; a
  // 0-byte write checks no rkey (IB spec C9-88). The verdict, va and length
  // stay in the responder's context (rxe's qp->resp) for the packets after
  // it, which carry no RETH.
  if (packet.has_reth) {
    const char* why = nullptr;
    resp.write_started = true;
    resp.write_va = va;
    resp.write_length = length;
    resp.write_checked = CheckTarget(responder, IBV_WR_RDMA_WRITE, rkey, va,
                                     length, &why) == IBV_WC_SUCCESS;
  }
  return resp.write_checked ? PacketAnswer::kAck
                            : PacketAnswer::kNakRemoteAccess;
}

FakeNic::PacketAnswer FakeNic::ContinuationWithoutFirst(Qp* responder,
                                                        uint32_t index,
                                                        uint32_t first_psn) {
  // As a requester parked on an RNR NAK of its LAST finds when the
  // responder was reset meanwhile (rxe_qp.c rxe_qp_reset starts resp
  // over). What rxe did, by the PSN R the new RTR set against the
  // message's first PSN F (hostile_verbs.c reset_mid_message_*, recorded
  // on rxe, Linux 6.1):
  //   R == F: rxe_resp.c check_psn NAKs the packet with a sequence error
  //     at F, and the requester sends the whole message again from FIRST
  //     (it lands, its receive completes, the write succeeds);
  //   R == this packet's PSN: check_op_seq finds a LAST (or MIDDLE) with
  //     no FIRST before it, a class C error: NAK invalid request, the
  //     requester REM_INV_REQ_ERR, the responder to ERR;
  //   F < R < this packet's PSN: the requester's retries run out
  //     (RETRY_EXC_ERR; with retry_cnt 7 it never ends) and the responder
  //     goes to ERR (the packet at R, a MIDDLE without FIRST);
  //   R anywhere else: the packets are out of sequence, the requester's
  //     retries run out, the responder stays as it is.
  // R is resp.psn (Qp::expected_psn), which the new RTR set to its rq_psn:
  // the parked write is the only request that can have come since.
  const uint32_t d = (responder->expected_psn - first_psn) & 0xffffff;
  if (d == 0) return PacketAnswer::kResendFromFirst;
  if (d == index) return PacketAnswer::kNakInvalidRequest;
  if (d < index) {
    SetQpState(responder, IBV_QPS_ERR,
               "a packet of a message begun before the QP's reset");
  }
  return PacketAnswer::kNoAnswer;
}

bool FakeNic::OutOfPsnSequence(const std::string& text) {
  for (const char* why : fake_nic_internal::kOutOfSequence) {
    if (text == why) return true;
  }
  return false;
}

const char* FakeNic::OutOfSequenceText(SequenceAnswer answer) {
  switch (answer) {
    case SequenceAnswer::kNoAnswer:
      return fake_nic_internal::kOutOfSequence[0];
    case SequenceAnswer::kAckedUnexecuted:
      return fake_nic_internal::kOutOfSequence[1];
    case SequenceAnswer::kNakInvalidRequest:
      return fake_nic_internal::kOutOfSequence[2];
    case SequenceAnswer::kInSequence:
      break;
  }
  return "";
}

FakeNic::SequenceAnswer FakeNic::CheckRequestPsn(
    Qp* responder, ibv_wr_opcode opcode, uint32_t first_psn, uint32_t count,
    uint32_t psns, uint32_t* answered) {
  // rxe_resp.c check_psn against resp.psn (R), the message's PSNs F..L,
  // and what the requester's completer (rxe_comp.c check_psn / check_ack)
  // makes of the answer. Recorded on rxe, Linux 6.1: psn_verbs.c, two QPs
  // whose rq_psn and sq_psn disagree.
  const uint32_t expected = responder->expected_psn;
  if (first_psn == expected) {
    fake_nic_internal::TakeInSequence(responder, opcode, psns);
    return SequenceAnswer::kInSequence;
  }
  // psn_compare: the 24-bit difference, signed.
  const auto compare = [](uint32_t a, uint32_t b) {
    return static_cast<int32_t>((a - b) << 8);
  };
  const uint32_t last = (first_psn + count - 1) & 0xffffff;
  SequenceAnswer answer = SequenceAnswer::kNoAnswer;
  uint32_t at = count;  // the packet answered (count: none)
  if (compare(first_psn, expected) > 0 || opcode == IBV_WR_RDMA_READ ||
      fake_nic_internal::IsAtomic(opcode)) {
    // F ahead of R: a NAK "PSN sequence error" at R, which the completer
    // ignores (R is before the WR's PSNs), then silence
    // (resp.sent_psn_nak). A READ or atomic behind R is a duplicate with
    // no responder resource to replay: dropped (class D). The retries run
    // out: RETRY_EXC_ERR, the responder untouched.
  } else if (compare(last, expected) >= 0) {
    // F behind R, L at or past it: the packets before R are duplicates
    // (re-ACKed only when they ask for an ACK: none before LAST), the one
    // at R a MIDDLE or LAST with no FIRST (check_op_seq, class C): NAK
    // invalid request, the responder to ERR. (A SEND sent again after an
    // RNR NAK to a responder reset since, R at its LAST: rxe's responder
    // went to ERR in one of two runs and stayed in RTS in the other, the
    // NAK the same -- a race, left out of hostile_verbs' recording; the
    // fake follows do_class_ac_error.)
    answer = SequenceAnswer::kNakInvalidRequest;
    at = (expected - first_psn) & 0xffffff;
  } else {
    // The whole message behind R: its LAST is a duplicate, ACKed at
    // ack_psn - 1 (duplicate_request, C9-105). At or past L, the completer
    // takes it for the WR's ACK: success, nothing executed. Before it,
    // ignored (or a partial ACK the resends never pass): RETRY_EXC_ERR.
    if (compare((responder->ack_psn - 1) & 0xffffff, last) >= 0) {
      answer = SequenceAnswer::kAckedUnexecuted;
      at = count - 1;
    }
  }
  *answered = at;
  return answer;
}

ibv_wc_status FakeNic::CheckTarget(Qp* responder, ibv_wr_opcode opcode,
                                   uint32_t rkey, uint64_t va, uint64_t length,
                                   const char** why) {
  if (opcode == IBV_WR_RDMA_READ || opcode == IBV_WR_RDMA_WRITE ||
      opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    // A 0-byte READ or WRITE checks no rkey (C9-88).
    const bool read = opcode == IBV_WR_RDMA_READ;
    if (length > 0 &&
        !RemoteMrOk(responder, rkey, va, length,
                    read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE)) {
      *why = read ? "rkey/PD/bounds/REMOTE_READ check failed at the responder"
                  : "rkey/PD/bounds/REMOTE_WRITE check failed at the "
                    "responder";
      return IBV_WC_REM_ACCESS_ERR;
    }
    return IBV_WC_SUCCESS;
  }
  // Atomics: the target must be 8-byte aligned (rxe_resp.c: misaligned
  // atomic -> "invalid request" NAK) and the MR must allow REMOTE_ATOMIC.
  if (va % 8 != 0) {
    *why = "misaligned atomic";
    return IBV_WC_REM_INV_REQ_ERR;
  }
  if (!RemoteMrOk(responder, rkey, va, 8, IBV_ACCESS_REMOTE_ATOMIC)) {
    *why = "rkey/PD/bounds/REMOTE_ATOMIC check failed at the responder";
    return IBV_WC_REM_ACCESS_ERR;
  }
  return IBV_WC_SUCCESS;
}

bool FakeNic::ExecuteAtomic(ibv_wr_opcode opcode, uint64_t va,
                            uint64_t compare_add, uint64_t swap,
                            uint64_t* original) {
  // rxe_resp.c atomic_reply: the original value goes back in the response,
  // the updated one stays (IB spec 9.4.5: FETCH_ADD adds, CMP_SWP swaps
  // when equal). Guarded: memory the program protected is a fault, not a
  // crash.
  uintptr_t fault = 0;
  auto* target = reinterpret_cast<void*>(va);
  if (!fake_nic_internal::GuardedCopy(original, target, 8, &fault)) {
    return false;
  }
  uint64_t updated = *original;
  if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    updated = *original + compare_add;
  } else if (*original == compare_add) {
    updated = swap;
  }
  return NicWrite(target, &updated, 8, &fault);
}

ibv_wc_status FakeNic::ReceivePacket(Qp* responder, const RecvWqe& recv,
                                     uint64_t capacity,
                                     const RequestPacket& packet,
                                     const uint8_t* payload, uint64_t wr_id,
                                     ibv_wc_status* recv_status,
                                     std::string* why) {
  const uint32_t index = packet.index;
  // send_data_in -> copy_data: a packet longer than what is left of the
  // receive is refused whole (rxe_mr.c: length > resid), so only the
  // packets before it have landed.
  if (packet.length > capacity - std::min(capacity, packet.offset)) {
    *recv_status = config_.personality.recv_status_on_short_buffer;
    *why = "send longer than the posted receive (packet " +
           std::to_string(index) + ")";
    return config_.personality.send_status_on_short_receive;
  }
  // Then SGE by SGE: a receive SGE that fails its lookup or range check
  // stops the copy there (the pieces before it in this packet landed):
  // RESPST_ERR_MALFORMED_WQE, a "remote operational error" NAK.
  uintptr_t fault = 0;
  const SgeWalk walk =
      ScatterPacket(responder, recv.sges, IBV_ACCESS_LOCAL_WRITE, packet.offset,
                    payload, packet.length, &fault);
  if (walk == SgeWalk::kOk) return IBV_WC_SUCCESS;
  *recv_status = config_.personality.recv_status_on_bad_recv_sge;
  *why = walk == SgeWalk::kFault
             ? fake_nic_internal::HarnessMemoryError("the responder's", wr_id)
             : "receive SGE fails lkey/PD/bounds/access (packet " +
                   std::to_string(index) + ")";
  return IBV_WC_REM_OP_ERR;
}

}  // namespace rpma_harness
