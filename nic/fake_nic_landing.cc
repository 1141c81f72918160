// fake_nic_landing.cc: when an RDMA write's bytes land at the responder
// (FakeNicConfig::landing; issue 15 item 3, "destination read too early").
//
// IB spec vol. 1 9.5 (Transaction Ordering): a responder may not depend on
// the contents of an RDMA WRITE buffer before the last packet of a write
// with immediate completed there (its receive completion), or a later SEND
// or ATOMIC arrived. A real NIC places each packet when it arrives and the
// CPU may see the bytes in any order, so a program that spins on the last
// byte of a buffer as a "flag" works on most runs and reads torn data on
// others. With kAtOnce (the default) the fake lands everything in the step
// that executes the WR, so such a program always works; the other modes
// make the window visible:
//   kAtCompletion  the step after execution lands every byte and generates
//                  both completions;
//   kPieces        the message is cut into 1-8 sub-ranges at seeded
//                  offsets, landed one per step of the QP in a seeded
//                  order; the completions come with the last one.
// ExecuteWriteByPackets runs every check as it does for kAtOnce and copies
// each packet's payload into a snapshot (PendingLanding::bytes) instead of
// the responder's memory; the WR stays at the head of the send queue, so
// later WRs of the QP wait behind it, as RC ordering requires.
//
// Example:
//   FakeNicConfig config;
//   config.landing = Landing::kPieces;
//   FakeNic nic(config);
//   ... post a 4 KiB write with imm ...
//   nic.Step();   // executes: checks pass, nothing landed yet
//   nic.Step();   // lands one piece (say bytes 3000-4095, the "flag" too)
//   ...           // the last piece lands with both completions

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::PendingLanding;
using fake_nic_internal::RecvWqe;

const char* LandingName(Landing landing) {
  switch (landing) {
    case Landing::kAtOnce:
      return "once";
    case Landing::kAtCompletion:
      return "completion";
    case Landing::kPieces:
      return "pieces";
  }
  return "?";
}

void FakeNic::SetLanding(Landing landing) {
  std::lock_guard<std::mutex> lock(mu_);
  landing_ = landing;
}

Landing FakeNic::landing() {
  std::lock_guard<std::mutex> lock(mu_);
  return landing_;
}

void FakeNic::StartLanding(Qp* qp, Qp* responder, bool took_receive) {
  SendWqe& head = qp->sq.front();
  PendingLanding& l = *head.landing;
  const uint64_t length = head.total_length();
  l.remote_addr = head.remote_addr;
  l.rkey = head.rkey;
  if (took_receive) {
    // check_resource took it; it completes with the last piece.
    l.took_receive = true;
    l.recv_wr_id = TakeReceive(responder).wr_id;
  }
  head.waiting_for_receive = false;
  // The seed's own splitmix64 stream (NextRandom32's mixer), so keys, QP
  // numbers and PSNs do not depend on the landing mode.
  auto next = [this]() {
    uint64_t z = (landing_rng_state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::vector<uint64_t> cuts = {0, length};
  if (landing_ == Landing::kPieces && length > 1) {
    const uint64_t wanted = std::min<uint64_t>(length, 2 + next() % 7);
    for (uint64_t i = 1; i < wanted; ++i)
      cuts.push_back(1 + next() % (length - 1));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  }
  l.pieces.clear();
  for (size_t i = 0; i + 1 < cuts.size() || l.pieces.empty(); ++i) {
    if (i + 1 >= cuts.size()) {
      l.pieces.push_back({0, 0});  // a zero-length write: one empty piece
      break;
    }
    l.pieces.push_back({cuts[i], cuts[i + 1] - cuts[i]});
  }
  // Fisher-Yates with the same stream: the order the pieces land in.
  for (size_t i = l.pieces.size(); i > 1; --i) {
    std::swap(l.pieces[i - 1], l.pieces[next() % i]);
  }
  l.next = 0;
  l.started = true;
}

void FakeNic::LandNextPiece(Qp* qp) {
  SendWqe& head = qp->sq.front();
  PendingLanding& l = *head.landing;
  Qp* responder = qp->peer;
  auto receive = [&]() {
    RecvWqe recv;
    recv.wr_id = l.recv_wr_id;
    return recv;
  };
  // The responder stopped answering mid-message (it left RTR/RTS, or is
  // gone): the requester runs out of transport retries, as for a new WR
  // (rxe_comp.c COMPST_ERROR_RETRY); a receive it took is flushed.
  const char* refused = nullptr;
  if (CheckRequest(responder, head.opcode, &refused) ==
      RequestVerdict::kNoAnswer) {
    if (l.took_receive && responder != nullptr) {
      CompleteReceive(responder, receive(), head, IBV_WC_WR_FLUSH_ERR,
                      IBV_WC_RECV_RDMA_WITH_IMM, 0);
    }
    EndUnansweredHead(qp,
                      "responder stopped answering while the write landed");
    return;
  }
  const PendingLanding::Piece piece = l.pieces[l.next];
  const uint64_t target = l.remote_addr + piece.offset;
  // The MR was checked at execution; one deregistered since then must not
  // be written (nothing lands outside a registered region), and a target
  // unmapped since is a fault, not a crash: both answered as a failed
  // check_rkey at that packet (REM_ACCESS_ERR, responder to ERR).
  std::string why;
  uintptr_t fault = 0;
  const char* rkey_why = nullptr;
  if (piece.length > 0 &&
      CheckTarget(responder, IBV_WR_RDMA_WRITE, l.rkey, target, piece.length,
                  &rkey_why) != IBV_WC_SUCCESS) {
    why =
        "rkey/PD/bounds/REMOTE_WRITE check failed at the responder "
        "while the write landed (MR deregistered?)";
  } else if (piece.length > 0 &&
             !NicWrite(reinterpret_cast<void*>(target),
                       l.bytes.data() + piece.offset, piece.length, &fault)) {
    why = fake_nic_internal::HarnessMemoryError("the responder's", head.wr_id);
  }
  if (!why.empty()) {
    // Every packet was sent: the requester's index passed the WR.
    NakWrite(qp, responder,
             l.took_receive ? std::optional(receive()) : std::nullopt,
             /*ends_message=*/true, IBV_WC_REM_ACCESS_ERR, why);
    return;
  }
  // The last piece's receive completion, lost to a full CQ, means no answer
  // (CompleteMessageReceive), which the piece's line says.
  const bool last = l.next + 1 == l.pieces.size();
  const bool lost = last && l.took_receive && ReceiveCompletionLost(responder);
  // (The trace line is built only when someone records: RecordLazily.)
  RecordLazily([&](FakeNicEvent* event) {
    event->kind = FakeNicEvent::Kind::kPacket;
    event->qp_num = qp->base.qp_num;
    event->wr_id = head.wr_id;
    event->opcode = head.opcode;
    event->byte_len = piece.length;
    // As (MR, offset) too: traces compare across processes (ASLR).
    DescribeAddresses(event, fake_nic_internal::SgeList(), l.rkey, target);
    event->text = std::string("landed (") + LandingName(landing_) + ") piece " +
                  std::to_string(l.next + 1) + "/" +
                  std::to_string(l.pieces.size()) + " offset " +
                  std::to_string(piece.offset) +
                  (lost ? std::string("; ") +
                              fake_nic_internal::kUnansweredCqFull
                        : std::string());
  });
  if (++l.next < l.pieces.size()) return;
  // The last piece: the write completes as kAtOnce completes it -- its
  // receive's completion lost to a full CQ included (ExecuteWriteByPackets).
  if (lost) {
    l.took_receive = false;
    CompleteMessageReceive(responder, receive(), head, IBV_WC_SUCCESS,
                           IBV_WC_RECV_RDMA_WITH_IMM,
                           static_cast<uint32_t>(head.total_length()));
    UnansweredReceiveCqFull(qp);
    return;
  }
  SendWqe wqe = std::move(qp->sq.front());
  qp->sq.pop_front();
  const uint32_t length = static_cast<uint32_t>(wqe.total_length());
  RecordExecuted(qp, wqe, IBV_WC_SUCCESS, "");
  if (wqe.landing->took_receive) {
    CompleteReceive(responder, receive(), wqe, IBV_WC_SUCCESS,
                    IBV_WC_RECV_RDMA_WITH_IMM, length);
  }
  CompleteSend(qp, wqe, IBV_WC_SUCCESS, length);
}

void FakeNic::AbandonLanding(Qp* qp, const SendWqe& wqe) {
  // The QP went to ERR with the message half placed: what landed stays, the
  // rest never will; the receive its LAST packet took is flushed with the
  // responder's QP, as when a requester memory fault cuts a message
  // (fake_nic_packets.cc).
  const PendingLanding& l = *wqe.landing;
  Qp* responder = qp->peer;
  if (!l.started || !l.took_receive || responder == nullptr) return;
  RecvWqe recv;
  recv.wr_id = l.recv_wr_id;
  CompleteReceive(responder, recv, wqe, IBV_WC_WR_FLUSH_ERR,
                  IBV_WC_RECV_RDMA_WITH_IMM, 0);
  if (responder->base.state != IBV_QPS_ERR) {
    SetQpState(responder, IBV_QPS_ERR, "requester flushed a landing write");
  }
}

}  // namespace rpma_harness
