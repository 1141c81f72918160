// fake_nic_names.cc: personalities and the human-readable names used in
// FakeNicEvent records and logs.
//
// Example:
//   FakeNicConfig config;
//   config.personality = Personality::Rxe();
//   std::cout << ToString(event);  // "#12 completion qp=0x1a2b3c ..."

#include <cinttypes>
#include <cstdio>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"

namespace rpma_harness {

Personality Personality::Spec() {
  Personality p;
  p.name = "spec";
  return p;
}

Personality Personality::Rxe() {
  Personality p;
  p.name = "rxe";
  p.caps = FakeDeviceCaps::Rxe();
  // rxe_comp.c make_send_cqe: IB_WC_WITH_IMM for SEND_WITH_IMM and
  // RDMA_WRITE_WITH_IMM, byte_len = wqe->dma.length for every send CQE.
  p.send_cqe_has_imm_flag_and_byte_len = true;
  p.recv_cqe_has_grh_flag = true;
  // rxe_queue.c rxe_queue_init: num_slots = roundup_pow_of_two(n + 1),
  // capacity reported back = num_slots - 1 (rxe_qp.c writes it to the caps).
  p.round_queues_to_power_of_two_minus_one = true;
  // rxe_resp.c rxe_receiver: do_class_ac_error(.., IB_WC_REM_ACCESS_ERR)
  // for an rkey violation, IB_WC_LOC_QP_OP_ERR for a malformed receive WQE.
  // A SEND longer than its receive is a malformed WQE too, not
  // RESPST_ERR_LENGTH: copy_data (rxe_mr.c) returns -EINVAL for a packet
  // longer than what is left, and send_data_in maps only -ENOSPC to
  // ERR_LENGTH; recorded (receive 2, requester REM_OP_ERR 11).
  p.recv_status_on_rkey_violation = IBV_WC_REM_ACCESS_ERR;
  p.recv_status_on_short_buffer = IBV_WC_LOC_QP_OP_ERR;
  p.recv_status_on_bad_recv_sge = IBV_WC_LOC_QP_OP_ERR;
  p.send_status_on_short_receive = IBV_WC_REM_OP_ERR;
  // rxe_req.c rxe_requester: finish_packet's copy_data fails lookup_mr
  // with -EINVAL -> IB_WC_LOC_QP_OP_ERR; recorded (status 2).
  p.send_status_on_bad_source_key = IBV_WC_LOC_QP_OP_ERR;
  p.rkey_zero_without_remote_access = true;
  p.rkey_equals_lkey = true;
  p.error_cqe_opcode_zero = true;
  p.send_caps_from_wqe_size = true;
  p.inline_read_fails_at_completion = true;
  p.misaligned_atomic_refused_at_post = true;
  p.unknown_opcode_fails_at_completion = true;
  p.takes_unchecked_qp_attr_values = true;
  p.create_qp_reports_requested_depth = true;
  p.rd_atomic_depths_rounded_to_power_of_two = true;
  p.query_qp_cur_state_as_last_named = true;
  p.new_qp_path_mtu_256 = true;
  p.transport_retry_7_never_runs_out = true;
  p.cq_full_loses_the_completion_only = true;
  p.uc_cut_message_stalls_responder = true;
  p.executes_at_post = true;
  p.peer_qp_to_err_on_dreq = false;
  p.flushes_receives_posted_in_err = false;
  p.sq_flush_follows_requester_index = true;
  p.flushes_receive_queue_first = true;
  p.refusal_for_the_qp_leaves_bad_wr_null = true;
  p.queued_sends_wait_for_a_doorbell = true;
  p.local_error_behind_unanswered_wr_stalls = true;
  p.rnr_wait_runs_retransmit_timer = true;
  p.dreq_waits_for_peer_disconnect = true;
  p.timewait_ms = 2048;  // cm_convert_to_ms(19)
  return p;
}

FakeDeviceCaps FakeDeviceCaps::Rxe() {
  FakeDeviceCaps caps;
  caps.max_qp = 1048560;
  caps.max_qp_wr = 1048576;
  caps.max_sge = 32;
  caps.max_inline_data = 512;  // rxe_param.h RXE_MAX_INLINE_DATA
  caps.max_mr_size = ~uint64_t{0};
  caps.max_mr = 524287;
  caps.max_pd = 1048576;
  caps.max_cq = 1048576;
  caps.max_cqe = 32767;
  caps.max_qp_rd_atom = 128;
  caps.page_size_cap = 0xfffff000u;
  caps.link_layer = IBV_LINK_LAYER_ETHERNET;  // soft-RoCE
  return caps;
}

Personality Personality::Siw() {
  Personality p;
  p.name = "siw";
  // The siw provider returns negative errno values from its post functions;
  // verbs_backend.h warns callers to treat any non-zero value as failure.
  p.negative_errno = true;
  // iWARP's MPA request/reply carry the private data's exact length.
  p.cm_private_data_padded_to_field_size = false;
  // providers/siw/siw.c: map_send_opcode maps these to "unsupported" and
  // push_send_wqe returns -EINVAL; push_recv_wqe returns -EINVAL for
  // num_sge == 0.
  p.opcodes_refused_at_post = {
      IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND_WITH_IMM,
      IBV_WR_ATOMIC_CMP_AND_SWP,  IBV_WR_ATOMIC_FETCH_AND_ADD,
      IBV_WR_LOCAL_INV,           IBV_WR_BIND_MW};
  p.refuses_receive_without_sge = true;
  return p;
}

namespace fake_nic_internal {

const char* WcStatusName(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR:
      return "MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR:
      return "BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
      return "LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR:
      return "LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return "REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR:
      return "REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR:
      return "INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR:
      return "INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR:
      return "FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR:
      return "GENERAL_ERR";
    default:
      return "UNKNOWN_STATUS";
  }
}

const char* WcOpcodeName(int opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "RDMA_READ";
    case IBV_WC_COMP_SWAP:
      return "COMP_SWAP";
    case IBV_WC_FETCH_ADD:
      return "FETCH_ADD";
    case IBV_WC_BIND_MW:
      return "BIND_MW";
    case IBV_WC_LOCAL_INV:
      return "LOCAL_INV";
    case IBV_WC_RECV:
      return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
    default:
      return "UNKNOWN_WC_OPCODE";
  }
}

const char* WrOpcodeName(int opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND:
      return "SEND";
    case IBV_WR_SEND_WITH_IMM:
      return "SEND_WITH_IMM";
    case IBV_WR_RDMA_READ:
      return "RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return "ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return "ATOMIC_FETCH_AND_ADD";
    case IBV_WR_LOCAL_INV:
      return "LOCAL_INV";
    case IBV_WR_BIND_MW:
      return "BIND_MW";
    case IBV_WR_SEND_WITH_INV:
      return "SEND_WITH_INV";
    default:
      return "UNKNOWN_WR_OPCODE";
  }
}

const char* QpStateName(int state) {
  switch (state) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERR";
    default:
      return "UNKNOWN_STATE";
  }
}

const char* CmEventName(int event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "DEVICE_REMOVAL";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "TIMEWAIT_EXIT";
    default:
      return "UNKNOWN_CM_EVENT";
  }
}

}  // namespace fake_nic_internal

const char* WcStatusName(int status) {
  return fake_nic_internal::WcStatusName(status);
}
const char* WcOpcodeName(int opcode) {
  return fake_nic_internal::WcOpcodeName(opcode);
}
const char* WrOpcodeName(int opcode) {
  return fake_nic_internal::WrOpcodeName(opcode);
}
const char* QpStateName(int state) {
  return fake_nic_internal::QpStateName(state);
}
const char* CmEventName(int event) {
  return fake_nic_internal::CmEventName(event);
}

const char* ToString(FakeNicEvent::Kind kind) {
  switch (kind) {
    case FakeNicEvent::Kind::kPostSend:
      return "post_send";
    case FakeNicEvent::Kind::kPostRecv:
      return "post_recv";
    case FakeNicEvent::Kind::kPostFailed:
      return "post_failed";
    case FakeNicEvent::Kind::kExecute:
      return "execute";
    case FakeNicEvent::Kind::kRnrNak:
      return "rnr_nak";
    case FakeNicEvent::Kind::kCompletion:
      return "completion";
    case FakeNicEvent::Kind::kCqOverrun:
      return "cq_overrun";
    case FakeNicEvent::Kind::kQpState:
      return "qp_state";
    case FakeNicEvent::Kind::kCmEvent:
      return "cm_event";
    case FakeNicEvent::Kind::kFault:
      return "fault";
    case FakeNicEvent::Kind::kPacket:
      return "packet";
    case FakeNicEvent::Kind::kLanded:
      return "landed";
  }
  return "unknown";
}

std::string ToString(const FakeNicEvent& event) {
  const char* opcode = "";
  const char* status = "";
  switch (event.kind) {
    case FakeNicEvent::Kind::kPostSend:
    case FakeNicEvent::Kind::kExecute:
    case FakeNicEvent::Kind::kRnrNak:
    case FakeNicEvent::Kind::kPostFailed:
    case FakeNicEvent::Kind::kLanded:
      opcode = WrOpcodeName(event.opcode);
      break;
    case FakeNicEvent::Kind::kCompletion:
    case FakeNicEvent::Kind::kCqOverrun:
      opcode = WcOpcodeName(event.opcode);
      status = WcStatusName(event.status);
      break;
    case FakeNicEvent::Kind::kQpState:
      opcode = QpStateName(event.opcode);
      break;
    case FakeNicEvent::Kind::kCmEvent:
      opcode = CmEventName(event.opcode);
      break;
    default:
      break;
  }
  // Addresses print as MR ordinal + offset when an MR matched, so the text
  // is the same in every run of the same program.
  auto where = [](uint32_t mr, uint64_t offset, uint64_t raw) {
    char text[64];
    if (mr != 0) {
      snprintf(text, sizeof(text), "mr%u+0x%" PRIx64, mr, offset);
    } else {
      snprintf(text, sizeof(text), "0x%" PRIx64, raw);
    }
    return std::string(text);
  };
  char buf[512];
  snprintf(
      buf, sizeof(buf),
      "#%" PRIu64 " %s qp=0x%06x wr_id=%" PRIu64
      " op=%s status=%d%s%s len=%" PRIu64 " laddr=%s raddr=%s",
      event.seq, ToString(event.kind), event.qp_num, event.wr_id, opcode,
      event.status, *status ? "/" : "", status, event.byte_len,
      where(event.local_mr, event.local_offset, event.local_addr).c_str(),
      where(event.remote_mr, event.remote_offset, event.remote_addr).c_str());
  std::string out = buf;
  if (!event.text.empty()) out += " " + event.text;
  return out;
}

}  // namespace rpma_harness
