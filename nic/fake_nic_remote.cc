// fake_nic_remote.cc: what the frames of the cross-process fabric
// (fake_nic_fabric.h) mean to the NIC: the IB CM handshake with a peer in
// another process, the requester's half of a WR whose responder is there,
// the responder's half of a WR whose requester is there, and a peer's death.
//
// The rules are the in-process NIC's (fake_nic_cm.cc, fake_nic_data_path.cc,
// fake_nic_packets.cc), cited there; this file only changes where each half
// runs: the responder's checks (rkey, bounds, access, receive consumption,
// RNR) run in the responder's process on its own registered memory, and the
// requester completes its WR when the answer comes back. A WR waits "in
// flight" for that answer without any lock held, so two processes stepping
// each other cannot deadlock.
//
// Example (what a request looks like on the wire):
//   requester: ExecuteRemote -> kFrameRequest {token, opcode, rkey, va, ...}
//              + the message's bytes (writes, sends)
//   responder: OnRemoteRequest -> RespondToRemote -> kFrameAnswer {token,
//              ACK | RNR NAK | NAK status | no answer} + READ / atomic data
//   requester: OnRemoteAnswer -> CompleteSend, as the in-process NIC does.

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "nic/fake_nic_fabric.h"
#include "nic/fake_nic_fabric_sequence.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::AnswerFrame;
using fake_nic_internal::CmFrame;
using fake_nic_internal::CmState;
using fake_nic_internal::Frame;
using fake_nic_internal::FrameView;
using fake_nic_internal::GatherAt;
using fake_nic_internal::GuardedCopy;
using fake_nic_internal::RecvWqe;
using fake_nic_internal::RequestFrame;
using fake_nic_internal::RequestPacket;

namespace {

uint64_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

void CopyText(char* dst, size_t size, const std::string& text) {
  snprintf(dst, size, "%s", text.c_str());
}

// The fixed body of a frame, and where its tail starts; false if the frame
// is shorter than its body (a peer speaking another version).
template <typename Body>
bool ParseBody(const FrameView& frame, Body* body, const uint8_t** tail,
               size_t* tail_len) {
  if (frame.body_len < sizeof(Body)) return false;
  memcpy(body, frame.body, sizeof(Body));
  *tail = frame.body + sizeof(Body);
  *tail_len = frame.body_len - sizeof(Body);
  return true;
}

// ibv_mtu's sizes: what a request frame's MTU may be.
bool IsIbMtu(uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 ||
         mtu == 4096;
}

// What a request frame (input from another process) must hold whatever
// its QP type: an MTU IB allows, as many packets as the message has and at
// least one past where it resumes, and their bytes. The reason, or null.
const char* MalformedRequest(const RequestFrame& r, size_t payload_len) {
  if (!IsIbMtu(r.mtu)) return "malformed request (path MTU)";
  const auto opcode = static_cast<ibv_wr_opcode>(r.opcode);
  const bool carries_payload = fake_nic_internal::CarriesPayload(opcode);
  const uint32_t count =
      fake_nic_internal::RequestPackets(opcode, r.length, r.mtu);
  if (r.sent_packets > count || r.sent_packets <= r.first_packet) {
    return "malformed request (packet count)";
  }
  if (carries_payload &&
      payload_len !=
          std::min<uint64_t>(r.length, uint64_t{r.sent_packets} * r.mtu)) {
    return "malformed request (payload length)";
  }
  return nullptr;
}

// What the responder needs of the requester's WR (CompleteReceive's
// opcode, immediate and flags; a UC write's rkey and address).
fake_nic_internal::SendWqe RequestedWqe(const RequestFrame& r) {
  fake_nic_internal::SendWqe wqe;
  wqe.wr_id = r.wr_id;
  wqe.opcode = static_cast<ibv_wr_opcode>(r.opcode);
  wqe.imm_data = r.imm_data;
  wqe.send_flags = r.send_flags;
  wqe.rkey = r.rkey;
  wqe.remote_addr = r.remote_addr;
  return wqe;
}

}  // namespace

// ---- CM ---------------------------------------------------------------------

void FakeNic::SendCmFrame(CmId* id, uint32_t type, int status,
                          const std::vector<uint8_t>& private_data,
                          int rnr_retry) {
  CmFrame f;
  memset(&f, 0, sizeof(f));
  CopyText(f.src_addr, sizeof(f.src_addr), id->local_addr);
  CopyText(f.dst_addr, sizeof(f.dst_addr), id->remote_addr);
  f.src_port = id->local_port;
  f.dst_port = id->remote_port;
  f.qp_num = id->qp != nullptr ? id->qp->base.qp_num : id->param_qp_num;
  f.status = status;
  f.retry_count = id->req_retry_count;
  f.rnr_retry_count = static_cast<uint8_t>(
      rnr_retry >= 0 ? rnr_retry : id->req_rnr_retry_count);
  f.initiator_depth = id->initiator_depth;
  f.responder_resources = id->responder_resources;
  f.starting_psn = id->starting_psn;
  fabric_->Send(id->link, type, &f, sizeof(f), private_data.data(),
                private_data.size());
}

bool FakeNic::DialRemote(CmId* active,
                         const std::vector<uint8_t>& private_data) {
  uint64_t link = 0;
  if (fabric_->Dial(active->remote_addr, active->remote_port, &link) != 0) {
    return false;
  }
  active->link = link;
  id_by_link_[link] = active->handle;
  SendCmFrame(active, fake_nic_internal::kFrameReq, 0, private_data);
  return true;
}

void FakeNic::OnFabricFrame(uint64_t link, const FrameView& frame) {
  std::lock_guard<std::mutex> lock(mu_);
  // One wake-up of the background thread per frame, and only when the
  // frame made a step ready (StepLocked runs one exactly then): a frame
  // handled inline by a polling program (Fabric::DrainInline) must not
  // cost a futex and a context switch of a thread with nothing to do.
  // Every path that makes a step ready marks it (MarkMaybeReady), so
  // HasReadyWork at the end sees all of this frame's work.
  const WorkWakeDeferral wake_at_end(this, true);
  if (OnVerbsFrame(link, frame)) {
    WakeWaiters();
    return;
  }
  auto by_link = id_by_link_.find(link);
  CmId* id = nullptr;
  if (by_link != id_by_link_.end()) {
    auto it = ids_by_handle_.find(by_link->second);
    if (it != ids_by_handle_.end()) id = it->second;
  }
  CmFrame f;
  const uint8_t* tail = nullptr;
  size_t tail_len = 0;
  const bool is_cm = frame.type != fake_nic_internal::kFrameRequest &&
                     frame.type != fake_nic_internal::kFrameAnswer;
  memset(&f, 0, sizeof(f));
  // DREQ and DREP carry no body.
  if (is_cm && frame.body_len != 0 && !ParseBody(frame, &f, &tail, &tail_len)) {
    return;
  }
  f.src_addr[sizeof(f.src_addr) - 1] = '\0';
  f.dst_addr[sizeof(f.dst_addr) - 1] = '\0';

  switch (frame.type) {
    case fake_nic_internal::kFrameReq: {
      if (id != nullptr) return;  // one connection per link
      CmId* listener = FindListener(f.dst_addr, f.dst_port);
      if (listener == nullptr) {
        // The listener went away after the dial: REJ, invalid service id,
        // as for a connect nobody listens to (fake_nic_cm.cc Connect).
        CmFrame rej;
        memset(&rej, 0, sizeof(rej));
        rej.status = fake_nic_internal::kRejectInvalidServiceId;
        fabric_->Send(link, fake_nic_internal::kFrameRej, &rej, sizeof(rej));
        fabric_->Close(link);
        return;
      }
      // The same child id the in-process REQ makes (fake_nic_cm.cc Connect).
      Device* device = DeviceOwning(f.dst_addr);
      if (device == nullptr) device = listener->device;
      CmId* child = NewRequestId(listener, device, f.dst_addr, f.dst_port,
                                 f.src_addr, f.src_port, f.retry_count,
                                 f.rnr_retry_count, f.initiator_depth,
                                 f.responder_resources);
      child->link = link;
      child->remote_qp_num = f.qp_num;
      child->peer_starting_psn = f.starting_psn & 0xffffff;
      const uint64_t child_handle = child->handle;
      id_by_link_[link] = child_handle;
      DeliverCmEvent(child_handle, RDMA_CM_EVENT_CONNECT_REQUEST, 0, tail,
                     tail_len, listener->handle, f.qp_num,
                     fake_nic_internal::kMaxConnectPrivateData);
      break;
    }
    case fake_nic_internal::kFrameRep: {
      if (id == nullptr || id->state != CmState::kConnecting) return;
      id->remote_qp_num = f.qp_num;
      const uint64_t handle = id->handle;
      CmEvent* established =
          DeliverCmEvent(handle, RDMA_CM_EVENT_ESTABLISHED, 0, tail, tail_len,
                         0, f.qp_num, fake_nic_internal::kMaxAcceptPrivateData);
      if (established == nullptr) return;
      SetRepEventParams(established, f.initiator_depth, f.responder_resources,
                        f.rnr_retry_count);
      // As in-process: the REP is processed inside rdma_get_cm_event
      // (librdmacm ucma_process_conn_resp), then the RTU goes out.
      established->on_get = [this, handle, f] {
        auto a = ids_by_handle_.find(handle);
        if (a == ids_by_handle_.end() ||
            a->second->state != CmState::kConnecting) {
          return;
        }
        CmId* active = a->second;
        active->state = CmState::kConnected;
        if (active->qp != nullptr) {
          CmQpParams qp_params;
          qp_params.retry_cnt = active->req_retry_count;
          qp_params.rnr_retry = f.rnr_retry_count;
          qp_params.initiator_depth =
              std::min(active->initiator_depth, f.responder_resources);
          qp_params.responder_resources = f.initiator_depth;
          qp_params.peer_initiator_depth = f.initiator_depth;
          qp_params.dest_qp_num = f.qp_num;
          qp_params.rq_psn = f.starting_psn;
          qp_params.sq_psn = active->starting_psn;
          active->qp->link = active->link;
          CmModifyQpToRts(active->qp, qp_params, "REP processed");
        }
        if (id_by_link_.count(active->link) != 0) {
          SendCmFrame(active, fake_nic_internal::kFrameRtu, 0, {});
        }
        WakeWaiters();
      };
      break;
    }
    case fake_nic_internal::kFrameRtu:
      if (id == nullptr || id->state != CmState::kAccepted) return;
      id->state = CmState::kConnected;
      DeliverCmEvent(id->handle, RDMA_CM_EVENT_ESTABLISHED, 0, nullptr, 0, 0,
                     f.qp_num);
      break;
    case fake_nic_internal::kFrameRej:
      if (id == nullptr) return;
      if (id->state == CmState::kConnecting) {
        id->state = CmState::kRejected;
        DeliverCmEvent(id->handle, RDMA_CM_EVENT_REJECTED, f.status, tail,
                       tail_len, 0, 0,
                       fake_nic_internal::kMaxRejectPrivateData);
      } else if (id->state == CmState::kRequestReceived ||
                 id->state == CmState::kAccepted) {
        // The active side gave up mid-handshake (fake_nic_cm.cc ReleaseId).
        id->state = CmState::kRejected;
        if (id->qp != nullptr) SetQpState(id->qp, IBV_QPS_ERR, "REJ received");
        DeliverCmEvent(id->handle, RDMA_CM_EVENT_REJECTED, f.status, nullptr, 0,
                       0, 0, fake_nic_internal::kMaxRejectPrivateData);
      }
      break;
    case fake_nic_internal::kFrameDreq:
      if (id == nullptr) return;
      // fake_nic_cm.cc Disconnect's DREQ work, on this side of the link.
      DreqArrived(id, "DREQ received");
      if (!config_.personality.dreq_waits_for_peer_disconnect) {
        fabric_->Send(link, fake_nic_internal::kFrameDrep, nullptr, 0);
      }
      break;
    case fake_nic_internal::kFrameDrep:
      if (id != nullptr) DreqAnswered(id->handle, 0);
      break;
    case fake_nic_internal::kFrameRequest:
      if (id != nullptr) OnRemoteRequest(id->qp, id->link, frame);
      break;
    case fake_nic_internal::kFrameAnswer:
      if (id != nullptr) OnRemoteAnswer(id->qp, frame);
      break;
    case fake_nic_internal::kFrameRecvPosted:
      if (id != nullptr && id->qp != nullptr && !id->qp->sq.empty()) {
        TakeRetryWord(id->qp, f.status == fake_nic_internal::kRetryWordChanged);
      }
      break;
    default:
      break;
  }
  WakeWaiters();  // the background thread may have work now
}

// The peer process closed the link: it destroyed the id, or it exited or
// was killed (the kernel closes a dead process's sockets). What the
// survivor sees is what it sees when the peer's id and QP vanish
// (peer death as recorded on rxe: tools/softroce_vm/README.md "When the
// peer process dies"; see
// docs/two-processes.md, "Peer death").
void FakeNic::OnLinkClosed(uint64_t link) {
  std::lock_guard<std::mutex> lock(mu_);
  if (OnVerbsLinkClosed(link)) {
    WakeWaiters();
    return;
  }
  auto by_link = id_by_link_.find(link);
  if (by_link == id_by_link_.end()) return;
  auto it = ids_by_handle_.find(by_link->second);
  id_by_link_.erase(by_link);
  if (it == ids_by_handle_.end()) return;
  CmId* id = it->second;
  Qp* qp = id->qp;
  if (qp != nullptr && qp->link == link) PeerLinkDied(qp);
  switch (id->state) {
    case CmState::kConnected:
    case CmState::kAccepted:
      // The dead process's ids are destroyed by its kernel, which sends a
      // DREQ (cma.c rdma_destroy_id): DISCONNECTED, as for a DREQ.
      DreqArrived(id, "peer process gone");
      break;
    case CmState::kDisconnected:
      // Our DREQ reached the peer's kernel, which answers it as it
      // destroys the id (cm.c cm_destroy_id in IB_CM_DREQ_RCVD: the DREP).
      if (!id->disconnect_seen) DreqAnswered(id->handle, 0);
      break;
    case CmState::kConnecting:
      // The listener's process went before answering: its kernel rejects
      // the request it held (cm.c cm_destroy_id, IB_CM_REQ_RCVD).
      id->state = CmState::kRejected;
      DeliverCmEvent(id->handle, RDMA_CM_EVENT_REJECTED,
                     fake_nic_internal::kRejectConsumer, nullptr, 0, 0, 0,
                     fake_nic_internal::kMaxRejectPrivateData);
      break;
    case CmState::kRequestReceived:
      // The active side went mid-handshake (cm.c cm_destroy_id in
      // IB_CM_REQ_SENT: REJ, timeout).
      id->state = CmState::kRejected;
      if (qp != nullptr) SetQpState(qp, IBV_QPS_ERR, "peer process gone");
      DeliverCmEvent(id->handle, RDMA_CM_EVENT_REJECTED,
                     fake_nic_internal::kRejectTimeout, nullptr, 0, 0, 0,
                     fake_nic_internal::kMaxRejectPrivateData);
      break;
    default:
      break;
  }
  WakeWaiters();
}

// ---- data path: the requester's half ----------------------------------------

void FakeNic::EndHeadWr(Qp* qp, ibv_wc_status status, const char* why,
                        uint32_t byte_len) {
  SendWqe wqe = std::move(qp->sq.front());
  qp->sq.pop_front();
  RecordExecuted(qp, wqe, status, why);
  CompleteSend(qp, wqe, status, byte_len);
  // A completion error moves the QP to ERR (rxe_comp.c COMPST_ERROR:
  // do_complete, then rxe_qp_error); the rest of the queue then flushes.
  if (status != IBV_WC_SUCCESS) SetQpState(qp, IBV_QPS_ERR, why);
}

size_t FakeNic::WrsRequesterSendsBehindHead(const Qp* qp) const {
  constexpr uint32_t kMaxUnackedPsns = 128;  // rxe_param.h
  const uint32_t mtu = fake_nic_internal::MtuBytes(qp->attr.path_mtu);
  // A READ's or an atomic's request is one packet and needs an initiator
  // depth credit; a SEND's or a write's carries its payload.
  const auto packets = [&](const SendWqe& wqe) {
    return fake_nic_internal::RequestPackets(wqe.opcode, wqe.total_length(),
                                             mtu);
  };
  uint32_t psns = packets(qp->sq.front());
  uint32_t rd_atomic = qp->attr.max_rd_atomic;
  if (fake_nic_internal::AnsweredWithData(qp->sq.front().opcode) &&
      rd_atomic > 0) {
    rd_atomic--;
  }
  size_t sent = 0;
  for (size_t i = 1; i < qp->sq.size(); ++i) {
    const SendWqe& wqe = qp->sq.at(i);
    if ((wqe.send_flags & IBV_SEND_FENCE) || psns > kMaxUnackedPsns) break;
    if (fake_nic_internal::AnsweredWithData(wqe.opcode)) {
      if (rd_atomic == 0) break;
      rd_atomic--;
    }
    psns += packets(wqe);
    sent++;
  }
  return sent;
}

void FakeNic::RequesterSentPastHead(Qp* qp) {
  if (qp->sq_ring_slots == 0 || qp->sq.empty() || qp->head_passed) return;
  const size_t behind = WrsRequesterSendsBehindHead(qp);
  for (size_t i = 0; i <= behind; ++i) qp->AdvanceRequesterIndex();
  qp->head_passed = true;
}

void FakeNic::EndUnansweredHead(Qp* qp, const char* why) {
  RequesterSentPastHead(qp);
  EndHeadWr(qp, IBV_WC_RETRY_EXC_ERR, why);
}

// The QP's peer process is gone (its CM id's link or a verbs QP's link
// closed). Requests to a QP that is gone are never answered: one in flight
// times out as the requester exhausts its transport retries (rxe_comp.c
// COMPST_ERROR_RETRY); each later one does the same when it is sent.
void FakeNic::PeerLinkDied(Qp* qp) {
  qp->link_dead = true;
  if (!qp->sq.empty() && qp->sq.front().in_flight) {
    RequesterTimesOut(qp, "peer process gone");
  }
  MarkMaybeReady(qp);
}

// A request nobody answers -- the responder QP is gone, in ERR or not yet
// RTR (rxe_recv.c check_type_state drops it), or its process exited -- is
// sent again each time the local ACK timeout runs out, 4.096 us *
// 2^timeout (ibv_modify_qp(3) IBV_QP_TIMEOUT; IB spec 9.7.6.1.3), at most
// retry_cnt times; then the WR completes with RETRY_EXC_ERR and the QP
// goes to ERR (rxe_comp.c retransmit_timer sets COMPST_ERROR_RETRY, which
// retries while comp.retry_cnt lasts). A timeout of 0 is infinite: rxe
// arms no timer (rxe_qp.c rxe_qp_from_attr, qp_timeout_jiffies = 0) and
// the WR never completes. So a request that reached a peer before it was
// RTR lands when the timer sends it again, and a process may still finish
// what it does with the peer's other answers and exit cleanly:
// ibv_srq_pingpong's server has sends in flight to a client that already
// destroyed its QPs, needs none of them, and on rxe ends before their
// timers do.
//
// That time is real only where the NIC has real time: a QP moved with
// ibv_modify_qp (an rdma_cm QP's peer death is also a DISCONNECTED event,
// docs/two-processes.md "Peer death") on a NIC whose background thread
// runs. A sequenced or stepped NIC's time is its steps, so the WR ends at
// once, as the determinism of its traces needs.
bool FakeNic::RequesterWaitsForRetransmit(Qp* qp, const std::string& why) {
  if (qp->sq.empty()) return true;
  if (!RequesterTimersRunInRealTime(qp)) return false;
  SendWqe& head = qp->sq.front();
  const uint8_t timeout = qp->attr.timeout & 31;
  // A fresh token: nothing answers the try that went unanswered, and the
  // timer knows its WR by it.
  head.in_flight = true;
  head.token = next_token_++;
  if (timeout == 0) return true;  // no timer: in flight for ever
  TransportTimer timer;
  // In whole jiffies on a kernel's personality, as rxe's timer runs.
  timer.at = std::chrono::steady_clock::now() +
             std::chrono::nanoseconds(AckTimeoutJiffies(qp) * JiffyNs());
  timer.qp_num = qp->base.qp_num;
  timer.token = head.token;
  timer.why = why;
  const auto at = timer.at;
  transport_timers_.push_back(std::move(timer));
  TimerArmed(at);
  return true;
}

bool FakeNic::TransportRetriesEndless(const Qp* qp) const {
  return qp->retry_cnt == 7 &&
         config_.personality.transport_retry_7_never_runs_out;
}

bool FakeNic::SpendTransportRetry(Qp* qp, const char* why) {
  const bool endless = TransportRetriesEndless(qp);
  if (!endless && qp->sq.front().transport_retries >= qp->retry_cnt) {
    EndUnansweredHead(qp, why);
    MarkMaybeReady(qp);
    return false;
  }
  if (!endless) qp->sq.front().transport_retries++;
  return true;
}

void FakeNic::ResendFromFirst(Qp* qp) {
  // rxe_comp.c takes the NAK as one of retry_cnt's retries
  // (COMPST_ERROR_RETRY), as the transport timer counts them.
  if (!SpendTransportRetry(qp, fake_nic_internal::kResetMidMessage)) return;
  qp->sq.front().next_packet = 0;
  MarkMaybeReady(qp);
}

void FakeNic::RequesterTimesOut(Qp* qp, const std::string& why) {
  if (qp->sq.empty() || qp->sq.front().stalled()) return;
  // As in one process (ExecuteSendWqe's no-answer branch).
  if (StallsBehindUnansweredHead(qp)) return;
  if (RequesterWaitsForRetransmit(qp, why)) return;
  EndUnansweredHead(qp, why.c_str());
}

void FakeNic::FireTransportTimersLocked() {
  bool fired = false;
  for (const TransportTimer& timer : fake_nic_internal::TakeDueTimers(
           transport_timers_, std::chrono::steady_clock::now())) {
    Qp* qp = FindQpByNum(timer.qp_num);
    if (timer.rnr_tick) {
      // RetryAtRnrTick's tick: the parked head is resent, if it is still
      // the one parked (a receive may have unparked it, ERR flushed it).
      if (qp == nullptr || qp->rnr_tick_token != timer.token) continue;
      qp->rnr_tick_token = 0;
      if (qp->sq.empty() || !qp->sq.front().waiting_for_receive) continue;
      qp->sq.front().waiting_for_receive = false;
      MarkMaybeReady(qp);
      fired = true;
      continue;
    }
    // Only the try still unanswered: the QP may have been destroyed, moved
    // to ERR or RESET, or the WR flushed meanwhile.
    if (qp == nullptr || qp->sq.empty() || !qp->sq.front().in_flight ||
        qp->sq.front().token != timer.token) {
      continue;
    }
    fired = true;
    if (!SpendTransportRetry(qp, timer.why.c_str())) continue;
    // The request goes out again (rxe_req.c req_retry): the scheduler
    // executes the head once more, from its first unacknowledged packet.
    qp->sq.front().in_flight = false;
    MarkMaybeReady(qp);
  }
  if (fired) WakeWaiters();
}

// Into the NIC's scratch buffer (under mu_), kept between WRs: no
// allocation and no zero-filling of the message each time. The requester's
// own memory faulting is ibv_poll_cq(3)'s IBV_WC_LOC_PROT_ERR, as in one
// process.
// A buffer grown for a large message is not kept for the NIC's life.
void FakeNic::ReleaseLargePayload() {
  if (remote_payload_.size() > (size_t{4} << 20)) {
    remote_payload_ = std::vector<uint8_t>();
  }
}

bool FakeNic::GatherHeadPayload(Qp* qp, uint64_t length, uint32_t mtu) {
  if (remote_payload_.size() < length) remote_payload_.resize(length);
  if (length == 0) return true;
  SendWqe& head = qp->sq.front();
  TapSourceRead(qp, head, 0, length, mtu);
  const fake_nic_internal::Sge inline_source{
      Address(head.inline_data.data()),
      static_cast<uint32_t>(head.inline_data.size()), 0};
  uintptr_t fault = 0;
  const bool gathered =
      head.is_inline ? GatherAt(&inline_source, 1, 0, remote_payload_.data(),
                                length, &fault)
                     : GatherAt(head.sges.begin(), head.sges.size(), 0,
                                remote_payload_.data(), length, &fault);
  if (gathered) return true;
  const std::string why =
      fake_nic_internal::HarnessMemoryError("the requester's", head.wr_id);
  EndHeadWr(qp, IBV_WC_LOC_PROT_ERR, why.c_str());
  return false;
}

void FakeNic::ExecuteRemote(Qp* qp) {
  SendWqe& head = qp->sq.front();
  const bool unreliable = qp->base.qp_type == IBV_QPT_UC;
  // A responder that is gone drops requests (fake_nic_data_path.cc); a UC
  // requester does not notice (fake_nic_unreliable.cc).
  if (qp->link_dead || !LinkAlive(qp->link)) {
    qp->link_dead = true;
    if (unreliable) {
      CompleteUnreliableHead(qp);
      return;
    }
    RequesterTimesOut(qp, "responder does not answer (peer process gone)");
    return;
  }
  RequestFrame r;
  memset(&r, 0, sizeof(r));
  r.token = next_token_++;
  r.wr_id = head.wr_id;
  r.remote_addr = head.remote_addr;
  r.length = head.total_length();
  r.compare_add = head.compare_add;
  r.swap = head.swap;
  r.rkey = head.rkey;
  r.imm_data = head.imm_data;
  r.opcode = head.opcode;
  r.send_flags = head.send_flags;
  r.first_packet = head.next_packet;
  r.first_psn = qp->next_psn;
  r.resent_after_rnr = head.rnr_started ? 1 : 0;
  r.mtu = fake_nic_internal::MtuBytes(qp->attr.path_mtu);
  // The message's bytes travel with the request; READ and atomics carry
  // none (their data comes back in the answer).
  const bool carries_payload = fake_nic_internal::CarriesPayload(head.opcode);
  // rxe_req.c finish_packet: each packet's payload is read from the SGEs
  // as the packet is built, so the message goes out up to the packet
  // before the first bad source SGE (FirstBadSourcePacket); OnRemoteAnswer
  // then fails the WR there, unless the responder NAKed an earlier packet.
  const uint32_t count =
      fake_nic_internal::RequestPackets(head.opcode, r.length, r.mtu);
  r.sent_packets = count;
  ibv_wc_status source_status = IBV_WC_SUCCESS;
  if (carries_payload) {
    r.sent_packets =
        FirstBadSourcePacket(qp, head, r.mtu, count, &source_status);
    if (r.sent_packets == 0) {
      FailOnSourcePacket(qp, source_status, 0);
      return;
    }
  }
  const size_t payload_len =
      carries_payload
          ? std::min<uint64_t>(r.length, uint64_t{r.sent_packets} * r.mtu)
          : 0;
  if (!GatherHeadPayload(qp, payload_len, r.mtu)) return;
  uint8_t* const payload = remote_payload_.data();
  head.token = r.token;
  head.in_flight = true;
  head.waiting_for_receive = false;
  // A "retry now" that came before this request answers nothing of it.
  head.retry_told = false;
  head.retry_told_changed = false;
  const bool sent =
      fabric_->Send(qp->link, fake_nic_internal::kFrameRequest, &r, sizeof(r),
                    payload_len > 0 ? payload : nullptr, payload_len);
  ReleaseLargePayload();
  if (!sent) qp->link_dead = true;
  if (unreliable) {
    // UC: the WR completes as its packets leave; no answer is awaited
    // (the responder's, if any, finds no WR in flight and is dropped).
    if (r.sent_packets < count) {
      FailOnSourcePacket(qp, source_status, r.sent_packets);
    } else {
      CompleteUnreliableHead(qp);
    }
    return;
  }
  if (!sent) {
    RequesterTimesOut(qp, "responder does not answer (peer process gone)");
  }
}

namespace {

// An answer frame's wire form (fake_nic_fabric.h AnswerFrame): the fixed
// fields, why_len bytes of text, the tail.
constexpr size_t kAnswerFixed = offsetof(AnswerFrame, why);

// False if the frame is shorter than its fields or its text says.
bool ParseAnswer(const FrameView& frame, AnswerFrame* a, const uint8_t** tail,
                 size_t* tail_len) {
  if (frame.body_len < kAnswerFixed) return false;
  memcpy(a, frame.body, kAnswerFixed);
  const size_t why_len = a->why_len;
  if (why_len >= sizeof(a->why) || frame.body_len - kAnswerFixed < why_len) {
    return false;
  }
  memcpy(a->why, frame.body + kAnswerFixed, why_len);
  a->why[why_len] = '\0';
  *tail = frame.body + kAnswerFixed + why_len;
  *tail_len = frame.body_len - kAnswerFixed - why_len;
  return true;
}

}  // namespace

// CheckRequestPsn's answers reach the requester's record whole.
static_assert([] {
  for (const char* why : fake_nic_internal::kOutOfSequence) {
    if (std::char_traits<char>::length(why) >= sizeof(AnswerFrame::why)) {
      return false;
    }
  }
  return true;
}());

void FakeNic::SendAnswer(uint64_t link, AnswerFrame* answer,
                         const std::vector<uint8_t>& data) {
  answer->why[sizeof(answer->why) - 1] = '\0';
  answer->why_len = static_cast<uint32_t>(strlen(answer->why));
  fabric_->Send(link, fake_nic_internal::kFrameAnswer, answer,
                kAnswerFixed + answer->why_len, data.data(), data.size());
}

void FakeNic::OnRemoteAnswer(Qp* qp, const FrameView& frame) {
  AnswerFrame a;
  const uint8_t* data = nullptr;
  size_t data_len = 0;
  if (!ParseAnswer(frame, &a, &data, &data_len)) return;
  // A WR flushed meanwhile (the QP went to ERR) has no answer to take.
  if (qp == nullptr || qp->sq.empty() || !qp->sq.front().in_flight ||
      qp->sq.front().token != a.token) {
    return;
  }
  SendWqe& head = qp->sq.front();
  head.in_flight = false;
  MarkMaybeReady(qp);
  auto end_with = [&](ibv_wc_status status, const char* why,
                      uint32_t byte_len) {
    EndHeadWr(qp, status, why, byte_len);
  };
  const bool carries_payload = fake_nic_internal::CarriesPayload(head.opcode);
  const uint32_t mtu = fake_nic_internal::MtuBytes(qp->attr.path_mtu);
  const uint32_t count = fake_nic_internal::RequestPackets(
      head.opcode, head.total_length(), mtu);
  switch (a.kind) {
    case AnswerFrame::kAck: {
      if (carries_payload && a.acked_packets < count) {
        // The message stopped at a bad source SGE (ExecuteRemote): the
        // packets before it were taken, this one never went out.
        ibv_wc_status status = IBV_WC_LOC_PROT_ERR;
        const uint32_t bad =
            FirstBadSourcePacket(qp, head, mtu, count, &status);
        if (bad == count) status = IBV_WC_LOC_PROT_ERR;  // the MR changed since
        FailOnSourcePacket(qp, status, a.acked_packets);
        return;
      }
      const uint64_t length = head.total_length();
      const bool atomic = fake_nic_internal::IsAtomic(head.opcode);
      if ((head.opcode == IBV_WR_RDMA_READ && length > 0) || atomic) {
        // rxe_comp.c do_read / do_atomic: each response packet goes into
        // the local SGEs as it arrives (copy_data, LOCAL_WRITE), so a bad
        // SGE stops the copy at the packet reaching it, the bytes before
        // it in place; the remote side has done its part. The same
        // function takes an in-process response (TakeResponse,
        // fake_nic_data_path.cc).
        const uint64_t expected = atomic ? 8 : length;
        if (data_len != expected) {
          end_with(IBV_WC_REM_OP_ERR,
                   "malformed answer from the peer process (response data)", 0);
          return;
        }
        std::string why;
        const Response taken = TakeResponse(
            qp, head, expected, mtu,
            [&](uint64_t offset, uint64_t n, uint8_t* out) {
              std::memcpy(out, data + offset, n);
              return true;
            },
            &why);
        if (taken != Response::kTaken) {
          if (taken != Response::kBadSge) {
            why = fake_nic_internal::HarnessMemoryError("the requester's",
                                                        head.wr_id);
          }
          end_with(IBV_WC_LOC_PROT_ERR, why.c_str(), 0);
          return;
        }
        if (atomic) {
          end_with(IBV_WC_SUCCESS, "", 8);
          return;
        }
      }
      // (An ACK's why is empty, but a duplicate's: CheckRequestPsn.)
      end_with(IBV_WC_SUCCESS, a.why, static_cast<uint32_t>(length));
      return;
    }
    case AnswerFrame::kRnrNak: {
      // The NAK acknowledged the packets before it (fake_nic_packets.cc):
      // never fewer than were acknowledged before, never past the message.
      const uint64_t total = fake_nic_internal::PacketCount(
          head.total_length(), fake_nic_internal::MtuBytes(qp->attr.path_mtu));
      if (a.acked_packets < head.next_packet || a.acked_packets >= total) {
        end_with(IBV_WC_REM_OP_ERR,
                 "malformed answer from the peer process (RNR NAK)", 0);
        return;
      }
      head.next_packet = a.acked_packets;
      // An RNR NAK's `status` is the RNR wait it asks for (AETH timer).
      RnrNakHead(qp, static_cast<uint8_t>(a.status & 31));
      return;
    }
    case AnswerFrame::kNak:
      // rxe_req.c update_state passes a WR only on its last packet, so a
      // NAK of an earlier one leaves the requester's index on it
      // (CompleteSend, Personality::sq_flush_follows_requester_index).
      qp->failed_on_last_packet = a.acked_packets + 1 >= count;
      end_with(static_cast<ibv_wc_status>(a.status), a.why, 0);
      return;
    case AnswerFrame::kResend:
      // Only a packet past FIRST is answered so (ContinuationWithoutFirst).
      if (head.next_packet == 0) {
        end_with(IBV_WC_REM_OP_ERR,
                 "malformed answer from the peer process (sequence NAK)", 0);
        return;
      }
      ResendFromFirst(qp);
      return;
    case AnswerFrame::kNoAnswer:
      // The responder dropped the request (not RTR, or its QP is gone):
      // nothing comes back on a real link, and the requester's transport
      // timer decides (RequesterWaitsForRetransmit).
      RequesterTimesOut(qp, a.why);
      return;
    default:
      end_with(IBV_WC_RETRY_EXC_ERR, a.why, 0);
      return;
  }
}

// ---- data path: the responder's half ----------------------------------------

void FakeNic::OnRemoteRequest(Qp* responder, uint64_t link,
                              const FrameView& frame) {
  RequestFrame r;
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
  if (!ParseBody(frame, &r, &payload, &payload_len)) return;
  AnswerFrame answer;
  memset(&answer, 0, sizeof(answer));
  answer.token = r.token;
  std::vector<uint8_t> data;
  if (responder == nullptr) {
    answer.kind = AnswerFrame::kNoAnswer;
    CopyText(answer.why, sizeof(answer.why), "responder QP is gone");
  } else {
    RespondToRemote(responder, r, payload, payload_len, &answer, &data);
  }
  SendAnswer(link, &answer, data);
}

// The responder's checks, in rxe_resp.c's order and with the in-process
// NIC's outcomes (fake_nic_data_path.cc ExecuteSendWqe, fake_nic_packets.cc
// ExecuteWriteByPackets; each rule is cited there).
void FakeNic::RespondToRemote(Qp* responder, const RequestFrame& r,
                              const uint8_t* payload, size_t payload_len,
                              AnswerFrame* answer, std::vector<uint8_t>* data) {
  const auto opcode = static_cast<ibv_wr_opcode>(r.opcode);
  if (responder->base.qp_type == IBV_QPT_UC) {
    RespondUnreliably(responder, r, payload, payload_len, answer);
    return;
  }
  auto nak = [&](ibv_wc_status status, const std::string& why) {
    answer->kind = AnswerFrame::kNak;
    answer->status = status;
    CopyText(answer->why, sizeof(answer->why), why);
    SetQpState(responder, IBV_QPS_ERR, why.c_str());
  };
  // The receive's completion found its CQ full (CompleteMessageReceive):
  // neither ACK nor NAK.
  auto receive_cq_full = [&]() {
    answer->kind = AnswerFrame::kNoAnswer;
    CopyText(answer->why, sizeof(answer->why),
             fake_nic_internal::kReceiveCqFull);
  };
  // check_psn of a new request, before check_op_valid (as ExecuteSendWqe):
  // not a write resumed past its RNR-NAKed packet, nor a message sent again
  // after an RNR NAK of its first packet to this responder not reset since.
  if (r.first_packet == 0 &&
      !(r.resent_after_rnr != 0 && responder->responder.first_rnr_naked) &&
      fake_nic_internal::CanRespond(responder->base) &&
      MalformedRequest(r, payload_len) == nullptr) {
    const uint32_t count =
        fake_nic_internal::RequestPackets(opcode, r.length, r.mtu);
    uint32_t at = count;
    const SequenceAnswer sequence = CheckRequestPsn(
        responder, opcode, r.first_psn & 0xffffff, count,
        fake_nic_internal::PsnsOf(opcode, r.length, r.mtu), &at);
    if (sequence != SequenceAnswer::kInSequence) {
      const char* const why = OutOfSequenceText(sequence);
      if (fake_nic_internal::CarriesPayload(opcode) &&
          fake_nic_internal::SourceFaultComesFirst(
              sequence != SequenceAnswer::kNoAnswer, at, r.sent_packets,
              count)) {
        // The requester fails the WR at the packet it could not build
        // (OnRemoteAnswer).
        answer->kind = AnswerFrame::kAck;
        answer->acked_packets = r.sent_packets;
        return;
      }
      if (sequence == SequenceAnswer::kNoAnswer) {
        answer->kind = AnswerFrame::kNoAnswer;
        CopyText(answer->why, sizeof(answer->why), why);
      } else if (sequence == SequenceAnswer::kAckedUnexecuted) {
        answer->kind = AnswerFrame::kAck;  // nothing lands
        answer->acked_packets = count;
        // (The requester records it as one process does.)
        CopyText(answer->why, sizeof(answer->why), why);
      } else {
        answer->acked_packets = at;
        nak(IBV_WC_REM_INV_REQ_ERR, why);
      }
      return;
    }
  }
  const char* refused = nullptr;
  switch (CheckRequest(responder, opcode, &refused)) {
    case RequestVerdict::kNoAnswer:
      answer->kind = AnswerFrame::kNoAnswer;
      CopyText(answer->why, sizeof(answer->why), refused);
      return;
    case RequestVerdict::kInvalidRequest:
      nak(IBV_WC_REM_INV_REQ_ERR, refused);
      return;
    case RequestVerdict::kAccept:
      break;
  }
  const SendWqe wqe = RequestedWqe(r);
  const uint64_t length = r.length;
  // The request is input from another process (MalformedRequest), and a
  // write resumes past its first packet only where this responder's RNR NAK
  // left that same write.
  answer->acked_packets = r.first_packet;
  if (const char* malformed = MalformedRequest(r, payload_len)) {
    nak(IBV_WC_REM_INV_REQ_ERR, malformed);
    return;
  }
  const uint32_t count =
      fake_nic_internal::RequestPackets(opcode, length, r.mtu);
  // A write's packet this responder never saw begin, answered as
  // CheckWritePacket answers one (ContinuationWithoutFirst); false for
  // any other answer.
  auto answered_continuation = [&](PacketAnswer verdict) {
    switch (verdict) {
      case PacketAnswer::kResendFromFirst:
        answer->kind = AnswerFrame::kResend;
        answer->acked_packets = 0;
        return true;
      case PacketAnswer::kNakInvalidRequest:
        nak(IBV_WC_REM_INV_REQ_ERR,
            fake_nic_internal::kContinuationWithoutFirst);
        return true;
      case PacketAnswer::kNoAnswer:
        answer->kind = AnswerFrame::kNoAnswer;
        CopyText(answer->why, sizeof(answer->why),
                 fake_nic_internal::kResetMidMessage);
        return true;
      default:
        return false;
    }
  };
  if (r.first_packet != 0 && responder->resume_packet == 0 &&
      (opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
    // Nothing to resume: this responder was reset since its RNR NAK.
    answered_continuation(ContinuationWithoutFirst(
        responder, r.first_packet, r.first_psn & 0xffffff));
    return;
  }
  if (r.first_packet != 0 && (r.first_packet != responder->resume_packet ||
                              r.wr_id != responder->resume_wr_id ||
                              length != responder->resume_length)) {
    nak(IBV_WC_REM_INV_REQ_ERR, "malformed request (resumed packet)");
    return;
  }
  responder->resume_packet = 0;
  auto& rq = responder->ReceiveQueue();
  auto take_receive = [&]() { return TakeReceive(responder); };

  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: {
      auto& resp = responder->responder;
      for (uint32_t i = r.first_packet; i < r.sent_packets; ++i) {
        const RequestPacket packet =
            fake_nic_internal::MakeWritePacket(opcode, length, r.mtu, i);
        const PacketAnswer verdict =
            CheckWritePacket(responder, packet, r.rkey, r.remote_addr, length,
                             r.first_psn & 0xffffff);
        if (verdict == PacketAnswer::kRnrNak) {
          answer->kind = AnswerFrame::kRnrNak;
          answer->status = responder->min_rnr_timer;  // the NAK's timer
          answer->acked_packets = i;
          if (i == 0) resp.first_rnr_naked = true;
          responder->remote_waits_for_receive = true;
          responder->resume_wr_id = r.wr_id;
          responder->resume_length = length;
          responder->resume_packet = i;
          return;
        }
        if (answered_continuation(verdict)) return;
        const bool took_receive = packet.takes_receive;
        bool ok = verdict == PacketAnswer::kAck;
        if (ok && packet.length > 0) {
          uintptr_t fault = 0;
          ok = NicWrite(reinterpret_cast<void*>(resp.write_va + packet.offset),
                        payload + packet.offset, packet.length, &fault);
        }
        if (!ok) {
          if (took_receive &&
              !CompleteMessageReceive(
                  responder, take_receive(), wqe,
                  config_.personality.recv_status_on_rkey_violation,
                  IBV_WC_RECV_RDMA_WITH_IMM, 0)) {
            receive_cq_full();
            return;
          }
          answer->acked_packets = i;
          nak(IBV_WC_REM_ACCESS_ERR,
              verdict == PacketAnswer::kAck
                  ? fake_nic_internal::HarnessMemoryError("the responder's",
                                                          r.wr_id)
                  : "rkey/PD/bounds/REMOTE_WRITE check failed at the "
                    "responder");
          return;
        }
        // Before the receive completes: the bytes were there first.
        if (packet.ends_message) RecordLanded(responder, wqe, length);
        if (packet.ends_message && took_receive &&
            !CompleteMessageReceive(responder, take_receive(), wqe,
                                    IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
                                    static_cast<uint32_t>(length))) {
          receive_cq_full();
          return;
        }
      }
      answer->kind = AnswerFrame::kAck;
      answer->acked_packets = r.sent_packets;
      return;
    }
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: {
      if (rq.empty()) {
        answer->kind = AnswerFrame::kRnrNak;
        answer->status = responder->min_rnr_timer;  // the NAK's timer
        answer->acked_packets = r.first_packet;
        responder->remote_waits_for_receive = true;
        responder->responder.first_rnr_naked = true;
        return;
      }
      // Packet by packet into the receive at the head of its queue, which
      // stays there until the message ends (as ExecuteSendByPackets).
      const RecvWqe& recv = rq.front();
      uint64_t capacity = 0;
      for (const auto& sge : recv.sges) capacity += sge.length;
      for (uint32_t i = 0; i < r.sent_packets; ++i) {
        const RequestPacket packet =
            fake_nic_internal::MakeSendPacket(opcode, length, r.mtu, i);
        ibv_wc_status recv_status = IBV_WC_SUCCESS;
        std::string why;
        const ibv_wc_status status = ReceivePacket(
            responder, recv, capacity, packet,
            payload == nullptr ? nullptr : payload + packet.offset, r.wr_id,
            &recv_status, &why);
        if (status != IBV_WC_SUCCESS) {
          if (!CompleteMessageReceive(responder, take_receive(), wqe,
                                      recv_status, IBV_WC_RECV, 0)) {
            receive_cq_full();
            return;
          }
          answer->acked_packets = i;
          nak(status, why);
          return;
        }
      }
      answer->kind = AnswerFrame::kAck;
      answer->acked_packets = r.sent_packets;
      // A message cut short by the requester leaves its receive in
      // progress (ExecuteSendByPackets).
      if (r.sent_packets < count) {
        HoldCutReceive(responder);
        return;
      }
      if (!CompleteMessageReceive(responder, take_receive(), wqe,
                                  IBV_WC_SUCCESS, IBV_WC_RECV,
                                  static_cast<uint32_t>(length))) {
        receive_cq_full();
      }
      return;
    }
    case IBV_WR_RDMA_READ: {
      const char* why = nullptr;
      const ibv_wc_status target =
          CheckTarget(responder, opcode, r.rkey, r.remote_addr, length, &why);
      if (target != IBV_WC_SUCCESS) {
        nak(target, why);
        return;
      }
      if (length > 0) {
        data->resize(length);
        uintptr_t fault = 0;
        if (!GuardedCopy(data->data(),
                         reinterpret_cast<const void*>(r.remote_addr), length,
                         &fault)) {
          data->clear();
          nak(IBV_WC_REM_ACCESS_ERR, fake_nic_internal::HarnessMemoryError(
                                         "the responder's", r.wr_id));
          return;
        }
      }
      answer->kind = AnswerFrame::kAck;
      return;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: {
      const char* why = nullptr;
      const ibv_wc_status target =
          CheckTarget(responder, opcode, r.rkey, r.remote_addr, 8, &why);
      if (target != IBV_WC_SUCCESS) {
        nak(target, why);
        return;
      }
      uint64_t original = 0;
      if (!ExecuteAtomic(opcode, r.remote_addr, r.compare_add, r.swap,
                         &original)) {
        nak(IBV_WC_REM_ACCESS_ERR,
            fake_nic_internal::HarnessMemoryError("the responder's", r.wr_id));
        return;
      }
      data->resize(8);
      memcpy(data->data(), &original, 8);
      answer->kind = AnswerFrame::kAck;
      return;
    }
    default:
      nak(IBV_WC_REM_INV_REQ_ERR, "opcode not executable");
      return;
  }
}

void FakeNic::RecordLanded(Qp* responder, const SendWqe& wqe,
                           uint64_t length) {
  if (!config_.record_landings) return;
  FakeNicEvent landed;
  landed.kind = FakeNicEvent::Kind::kLanded;
  landed.qp_num = responder->dest_qp_num;  // the requester
  landed.wr_id = wqe.wr_id;
  landed.opcode = wqe.opcode;
  landed.byte_len = length;
  landed.remote_addr = wqe.remote_addr;
  Record(std::move(landed));
}

// A request frame from another process's UC QP (fake_nic_unreliable.cc).
void FakeNic::RespondUnreliably(Qp* responder,
                                const RequestFrame& r,
                                const uint8_t* payload, size_t payload_len,
                                AnswerFrame* answer) {
  // Whatever happens, nothing is owed the requester: it completed its WR
  // when the frame left (ExecuteRemote).
  answer->kind = AnswerFrame::kAck;
  answer->acked_packets = r.sent_packets;
  // The request is input from another process: a UC opcode, from the
  // message's first packet (UC never resumes), and well formed
  // (MalformedRequest). Anything else is dropped, as a malformed packet is.
  const auto opcode = static_cast<ibv_wr_opcode>(r.opcode);
  if (opcode != IBV_WR_SEND && opcode != IBV_WR_SEND_WITH_IMM &&
      opcode != IBV_WR_RDMA_WRITE && opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
    return;
  }
  if (r.first_packet != 0 || MalformedRequest(r, payload_len) != nullptr) {
    return;
  }
  DeliverUnreliable(responder, RequestedWqe(r), r.length, r.mtu,
                    r.sent_packets, payload);
}

void FakeNic::TakeRetryWord(Qp* qp, bool changed) {
  SendWqe& head = qp->sq.front();
  // Parked, and the responder changed: at the RNR timer's tick, as in one
  // process (ModifyQp).
  if (changed && !head.in_flight && head.waiting_for_receive) {
    RetryAtRnrTick(qp);
    return;
  }
  // Still waiting for the answer the word overtook: remembered for it (a
  // receive's word outweighs a change's).
  if (head.in_flight) {
    head.retry_told_changed =
        changed && (!head.retry_told || head.retry_told_changed);
    head.retry_told = true;
  }
  head.waiting_for_receive = false;
  MarkMaybeReady(qp);
}

// The peer's requester parked on our RNR NAK (rnr_retry 7) retries now: a
// receive was posted, or the QP changed (state, access flags) in a way its
// next RNR-timer retry would see (rxe_comp.c rnr_nak_timer).
void FakeNic::TellRemoteToRetry(Qp* qp, bool changed) {
  // A receive ends the peer's wait. A change only brings its resend to its
  // RNR timer's next tick, after which a receive posted here must still
  // tell it (as in one process, where a receive wakes the WR at once).
  if (!changed) qp->remote_waits_for_receive = false;
  if (qp->link == 0 || qp->link_dead) return;
  CmFrame f;
  memset(&f, 0, sizeof(f));
  f.qp_num = qp->base.qp_num;
  f.status = changed ? fake_nic_internal::kRetryWordChanged : 0;
  fabric_->Send(qp->link, fake_nic_internal::kFrameRecvPosted, &f, sizeof(f));
}

// ---- sequenced mode
// -----------------------------------------------------------

int FakeNic::SequencedWait(std::unique_lock<std::mutex>& lock,
                           const std::function<bool()>* ready, const char* what,
                           bool releasable) {
  if (seq_lost_) {
    errno = EIO;
    return -1;
  }
  // The deadlock report names the call the program is in.
  SeqWaiter w;
  w.ready = ready;
  w.releasable = releasable;
  w.where = strcmp(what, "GetCmEvent") == 0   ? "rdma_get_cm_event"
            : strcmp(what, "GetCqEvent") == 0 ? "ibv_get_cq_event"
                                              : what;
  seq_waiters_.push_back(&w);
  // Unlocked: the fabric thread may need mu_ to flush what this thread sent.
  // No step is granted to a process that runs; a process already reported
  // waiting may get a step meanwhile, which then tests this waiter too.
  lock.unlock();
  fabric_->WaitFlushed();
  lock.lock();
  // Under mu_, so that kWait and the grant hook's kRun (also sent under
  // mu_) reach the Sequencer in the order they were decided in.
  if (!w.go && !seq_lost_ && seq_leaving_ == 0) {
    // The first waiter reports the process waiting; a later one updates
    // where it waits and whether an empty release would help.
    std::string where;
    bool any_releasable = false;
    SequencerWaitLocked(&where, &any_releasable);
    fabric_->SendWait(where.c_str(), any_releasable);
    seq_reported_wait_ = true;
  }
  event_waiters_++;
  while (!w.go) event_cv_.wait(lock);
  event_waiters_--;
  seq_waiters_.remove(&w);
  if (seq_leaving_ > 0) seq_leaving_--;
  if (seq_lost_ && !w.released) {
    errno = EIO;
    return -1;
  }
  return w.released ? 1 : 0;
}

int FakeNic::SequencedWaiters() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(seq_waiters_.size());
}

void FakeNic::SequencerWaitLocked(std::string* where, bool* releasable) const {
  where->clear();
  *releasable = false;
  for (const SeqWaiter* w : seq_waiters_) {
    if (w->go) continue;
    if (!where->empty()) *where += " and ";
    *where += w->where;
    *releasable = *releasable || w->releasable;
  }
}

// One granted step on the fabric thread: a unit of local NIC work
// (StepLocked: a WR, CM work) or the oldest frame / link end that came in.
// Then, before any waiting application thread can go on, kRun if the step
// ended a wait: every waiter's predicate is tested.
void FakeNic::OnSequencerGrant(uint32_t kind, uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq_step_ = step;
    if (kind == fake_nic_internal::SequenceMessage::kLocal) StepLocked();
  }
  if (kind == fake_nic_internal::SequenceMessage::kFrame) {
    uint64_t link = 0;
    Frame frame;
    bool closed = false;
    if (fabric_->PopPending(&link, &frame, &closed)) {
      if (closed) {
        OnLinkClosed(link);
      } else {
        OnFabricFrame(link, frame.view());
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  int woken = 0;
  for (SeqWaiter* w : seq_waiters_) {
    if (w->go) continue;
    if (w->ready == nullptr || (*w->ready)()) {
      w->go = true;
      ++woken;
    }
  }
  if (woken == 0) return;
  seq_leaving_ += woken;
  if (seq_reported_wait_) {
    fabric_->ReportRun();
    seq_reported_wait_ = false;
  }
  event_cv_.notify_all();
}

void FakeNic::OnSequencerRelease() {
  std::lock_guard<std::mutex> lock(mu_);
  // The Sequencer now counts this process as running.
  seq_reported_wait_ = false;
  int woken = 0;
  for (SeqWaiter* w : seq_waiters_) {
    if (w->go || !w->releasable) continue;
    w->go = true;
    w->released = true;
    ++woken;
  }
  seq_leaving_ += woken;
  if (woken > 0) {
    event_cv_.notify_all();
    return;
  }
  // Nobody to release (the releasable waiter was woken by a step in
  // between): the threads still waiting report the process waiting again.
  std::string where;
  bool releasable = false;
  SequencerWaitLocked(&where, &releasable);
  if (!where.empty() && seq_leaving_ == 0) {
    fabric_->SendWait(where.c_str(), releasable);
    seq_reported_wait_ = true;
  }
}

void FakeNic::OnSequencerLost() {
  std::lock_guard<std::mutex> lock(mu_);
  seq_lost_ = true;
  for (SeqWaiter* w : seq_waiters_) w->go = true;
  event_cv_.notify_all();
}

uint64_t FakeNic::SequencerLocalPending() {
  std::lock_guard<std::mutex> lock(mu_);
  return HasReadyWork() ? 1 : 0;
}

}  // namespace rpma_harness
