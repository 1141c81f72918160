// fake_nic_qp_state.cc: the RC QP state machine of the fake NIC:
// ibv_modify_qp(3) (the user's calls and rdma_cm's own transitions, which go
// through the same ModifyQpLocked) and the attributes ibv_query_qp(3)
// reports back.
//
// The transition table is ibv_modify_qp(3)'s ("required attributes" per
// transition for an RC QP), as the kernel enforces it for every provider
// (drivers/infiniband/core/verbs.c qp_state_table / ib_modify_qp_is_ok,
// which rxe calls from rxe_qp.c rxe_qp_chk_attr): a transition that is not
// in the table, a required attribute missing, or an attribute the
// transition does not allow is EINVAL.
//
// Example:
//   ibv_qp_attr attr{};
//   attr.qp_state = IBV_QPS_ERR;
//   nic.ModifyQp(qp, &attr, IBV_QP_STATE);   // outstanding WRs flush

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"

namespace rpma_harness {
namespace {

constexpr int kInitRequired =
    IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrRequired = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                             IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsRequired = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                             IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_TIMEOUT;
// Attributes RTS -> RTS, SQD -> RTS and RTR -> RTS may change (verbs.c
// qp_state_table, RC column).
constexpr int kRtsOptional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH |
                             IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                             IBV_QP_PATH_MIG_STATE;

struct Transition {
  bool valid = false;
  int required = 0;
  int optional = 0;
};

// What a QP type's column of qp_state_table asks at the transitions that
// differ between types.
struct TypeColumn {
  int rtr_required;  // INIT -> RTR
  int rts_required;  // RTR -> RTS
  int rts_optional;  // RTR/RTS/SQD -> RTS
  int sqd_optional;  // SQD -> SQD
};

// The RC column.
constexpr TypeColumn kRcColumn = {
    kRtrRequired, kRtsRequired, kRtsOptional,
    IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
        IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE | IBV_QP_TIMEOUT |
        IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
        IBV_QP_MAX_DEST_RD_ATOMIC};

// The UC column: no read/atomic depths, no RNR or transport timers (UC
// neither acknowledges nor retries). rxe refuses the RC-only attributes at
// RTR and RTS with EINVAL (recorded: verbs_dropin/testdata/uc_verbs.rxe.txt).
constexpr TypeColumn kUcColumn = {
    IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
    IBV_QP_SQ_PSN,
    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
        IBV_QP_PATH_MIG_STATE,
    IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
        IBV_QP_PATH_MIG_STATE};

// One row of a column of qp_state_table. SQE is not modelled (ibv_modify_qp(3):
// a send error moves an RC QP to ERR; a UC one goes to ERR here too, as on
// rxe), so no transition from or to it is valid.
Transition QpTransition(const TypeColumn& c, ibv_qp_state from,
                        ibv_qp_state to) {
  // Linux's table (kernel core/verbs.c qp_state_table, which
  // ib_modify_qp_is_ok reads for every driver, rxe_qp.c rxe_qp_chk_attr
  // included) lets every state go to RESET and to ERR but RESET, which
  // goes only to INIT (or stays). Found by the duplex programs (6000337:
  // rdma_disconnect, whose first step is an ibv_modify_qp to ERR, of a QP
  // in RESET fails with EINVAL on rxe).
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    return {from != IBV_QPS_SQE && !(to == IBV_QPS_ERR && from == IBV_QPS_RESET),
            0, 0};
  }
  switch (from) {
    case IBV_QPS_RESET:
      if (to == IBV_QPS_INIT) return {true, kInitRequired, 0};
      break;
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT) return {true, 0, kInitRequired};
      if (to == IBV_QPS_RTR) {
        return {true, c.rtr_required,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      }
      break;
    case IBV_QPS_RTR:
      if (to == IBV_QPS_RTS) return {true, c.rts_required, c.rts_optional};
      break;
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS) return {true, 0, c.rts_optional};
      if (to == IBV_QPS_SQD) return {true, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS) return {true, 0, c.rts_optional};
      if (to == IBV_QPS_SQD) return {true, 0, c.sqd_optional};
      break;
    default:
      break;
  }
  return {};
}

bool ValidMtu(int mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096; }

constexpr int kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

}  // namespace

int FakeNic::ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  std::lock_guard<std::mutex> lock(mu_);
  Qp* q = FindQp(qp);
  if (q == nullptr || attr == nullptr) return EINVAL;
  return ModifyQpLocked(q, *attr, attr_mask, "ibv_modify_qp");
}

bool FakeNic::QpMayMoveTo(const Qp* qp, ibv_qp_state next) const {
  return QpTransition(qp->base.qp_type == IBV_QPT_UC ? kUcColumn : kRcColumn,
                      qp->base.state, next)
      .valid;
}

int FakeNic::ModifyQpLocked(Qp* qp, const ibv_qp_attr& attr, int attr_mask,
                            const char* why) {
  const ibv_qp_state current = qp->base.state;
  // ib_modify_qp_is_ok: IBV_QP_CUR_STATE, when given, must name the state
  // the QP is in (the kernel takes it as the "from" state; we have only one
  // truth), and without IBV_QP_STATE the QP stays where it is.
  if ((attr_mask & IBV_QP_CUR_STATE) && attr.cur_qp_state != current) {
    return EINVAL;
  }
  const ibv_qp_state next =
      (attr_mask & IBV_QP_STATE) ? attr.qp_state : current;
  if (next < IBV_QPS_RESET || next > IBV_QPS_ERR) return EINVAL;
  const Transition t = QpTransition(
      qp->base.qp_type == IBV_QPT_UC ? kUcColumn : kRcColumn, current, next);
  if (!t.valid) return EINVAL;
  const int given = attr_mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
  if ((given & t.required) != t.required) return EINVAL;
  if (given & ~(t.required | t.optional)) return EINVAL;

  // Values (rxe_qp.c rxe_qp_chk_attr): one port, the device's read/atomic
  // depth, a path MTU the enum knows, access flags the verbs define.
  if ((attr_mask & IBV_QP_PORT) && attr.port_num != 1) return EINVAL;
  if ((attr_mask & IBV_QP_PATH_MTU) && !ValidMtu(attr.path_mtu)) return EINVAL;
  // A RoCE address vector routes by GID: without a GRH it is refused
  // (kernel core/verbs.c rdma_check_ah_attr), e.g. ibv_rc_pingpong on rxe
  // without -g fails to move its QP to RTR.
  if ((attr_mask & IBV_QP_AV) && !attr.ah_attr.is_global &&
      config_.caps->link_layer == IBV_LINK_LAYER_ETHERNET) {
    return EINVAL;
  }
  // (Personality::takes_unchecked_qp_attr_values: rxe takes both.)
  const bool unchecked = config_.personality.takes_unchecked_qp_attr_values;
  if ((attr_mask & IBV_QP_ACCESS_FLAGS) &&
      (attr.qp_access_flags & ~kKnownAccess) && !unchecked) {
    return EINVAL;
  }
  if ((attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
      attr.max_rd_atomic > config_.caps->max_qp_rd_atom) {
    return EINVAL;
  }
  if ((attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
      attr.max_dest_rd_atomic > config_.caps->max_qp_rd_atom && !unchecked) {
    return EINVAL;
  }
  // The local ACK timeout is a 5-bit field (IB spec 11.2.4.2; rxe_qp.c
  // rxe_qp_chk_attr: timeout > 31 is EINVAL; recorded, rts_timeout_32).
  if ((attr_mask & IBV_QP_TIMEOUT) && attr.timeout > 31) return EINVAL;
  if (attr_mask & IBV_QP_AV) {
    // The address vector's port must be one of the device's (kernel
    // uverbs_cmd.c modify_qp, rdma_is_port_valid; recorded, rtr_ah_port_2),
    // and a GRH's source GID index must name an entry of the port's GID
    // table: past its end EINVAL, an empty entry ENODATA (core/verbs.c
    // rdma_fill_sgid_attr, rdma_get_gid_attr; recorded, rtr_sgid_index_200).
    if (attr.ah_attr.port_num != 1) return EINVAL;
    ibv_gid_entry entry;
    if (attr.ah_attr.is_global) {
      const int gid = GidEntry(qp->device, attr.ah_attr.grh.sgid_index, &entry);
      if (gid != 0) return gid;
    }
  }

  // Store what was given; everything ibv_query_qp(3) reports comes from here.
  ibv_qp_attr& a = qp->attr;
  if (attr_mask & IBV_QP_PKEY_INDEX) a.pkey_index = attr.pkey_index;
  if (attr_mask & IBV_QP_PORT) a.port_num = attr.port_num;
  if (attr_mask & IBV_QP_ACCESS_FLAGS) a.qp_access_flags = attr.qp_access_flags;
  if (attr_mask & IBV_QP_AV) {
    a.ah_attr = attr.ah_attr;
    // RoCE: the kernel resolves a connected QP's destination through the
    // IP route and sets the GRH's hop limit to the route's (core/verbs.c
    // _ib_modify_qp -> ib_resolve_eth_dmac, rdma_addr_find_l2_eth_by_grh):
    // the host's default TTL, 64 (recorded: hostile_verbs query_rts).
    if (a.ah_attr.is_global &&
        config_.caps->link_layer == IBV_LINK_LAYER_ETHERNET) {
      a.ah_attr.grh.hop_limit = 64;
    }
  }
  if (attr_mask & IBV_QP_ALT_PATH) a.alt_ah_attr = attr.alt_ah_attr;
  if (attr_mask & IBV_QP_PATH_MTU) a.path_mtu = attr.path_mtu;
  if (attr_mask & IBV_QP_DEST_QPN) a.dest_qp_num = attr.dest_qp_num;
  if (attr_mask & IBV_QP_RQ_PSN) {
    a.rq_psn = attr.rq_psn & 0xffffff;
    qp->expected_psn = a.rq_psn;  // rxe_qp_from_attr: resp.psn
  }
  if (attr_mask & IBV_QP_SQ_PSN) {
    a.sq_psn = attr.sq_psn & 0xffffff;
    qp->next_psn = a.sq_psn;
  }
  // (Personality::rd_atomic_depths_rounded_to_power_of_two.)
  const auto depth = [this](uint8_t asked) -> uint8_t {
    if (!config_.personality.rd_atomic_depths_rounded_to_power_of_two ||
        asked == 0) {
      return asked;
    }
    uint32_t rounded = 1;
    while (rounded < asked) rounded <<= 1;
    // rxe stores it in a u8 (qp->attr): 129..255 round to 256, which
    // reads back 0.
    return static_cast<uint8_t>(rounded);
  };
  if (attr_mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    a.max_dest_rd_atomic = depth(attr.max_dest_rd_atomic);
  }
  if (attr_mask & IBV_QP_MAX_QP_RD_ATOMIC) {
    a.max_rd_atomic = depth(attr.max_rd_atomic);
  }
  if (attr_mask & IBV_QP_MIN_RNR_TIMER) a.min_rnr_timer = attr.min_rnr_timer;
  if (attr_mask & IBV_QP_TIMEOUT) a.timeout = attr.timeout;
  // 3-bit fields on the wire (IB spec 9.7.5.2.8 / 12.7.38).
  if (attr_mask & IBV_QP_RETRY_CNT) a.retry_cnt = attr.retry_cnt & 7;
  if (attr_mask & IBV_QP_RNR_RETRY) a.rnr_retry = attr.rnr_retry & 7;
  if (attr_mask & IBV_QP_PATH_MIG_STATE) {
    a.path_mig_state = attr.path_mig_state;
  }
  if (attr_mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) {
    a.en_sqd_async_notify = attr.en_sqd_async_notify;
  }
  qp->rnr_retry = a.rnr_retry;
  qp->retry_cnt = a.retry_cnt;
  qp->min_rnr_timer = a.min_rnr_timer;
  qp->dest_qp_num = a.dest_qp_num;

  if (next == IBV_QPS_RTR && current == IBV_QPS_INIT) {
    // The fabric is in-process: the QP that dest_qp_num names is the peer
    // (an address vector that routes elsewhere is not modelled). rdma_cm
    // links the pair itself before it moves the QPs. A QP whose peer is in
    // another process (fake_nic_remote.cc) names a QP number of that
    // process, which may also be one of ours: never link it here.
    if (qp->id == nullptr) {
      LinkVerbsQp(qp);  // fake_nic_verbs.cc: by address and QP number
    } else if (qp->peer == nullptr && qp->link == 0) {
      Qp* peer = FindQpByNum(a.dest_qp_num);
      if (peer != nullptr && peer != qp) {
        if (peer->peer == nullptr) peer->peer = qp;
        qp->peer = peer;
      }
    }
  }
  if (next == IBV_QPS_RESET && current != IBV_QPS_RESET) {
    // ibv_modify_qp(3) / IB spec 10.3.1: RESET empties both work queues
    // without completions and forgets the attributes (rxe_qp.c
    // rxe_qp_reset).
    ResetQpQueues(qp);
    qp->uc_cut = Qp::UcCut::kNone;
    const uint8_t port = a.port_num;
    memset(&a, 0, sizeof(a));
    a.port_num = port;
  }
  // A peer's WR parked on an RNR NAK (rnr_retry 7) retries on rxe every
  // RNR timer, so it sees a changed responder (access flags, state) at its
  // next retry (found by the random differential, programs 53 and 180).
  if (qp->peer != nullptr && !qp->peer->sq.empty() &&
      qp->peer->sq.front().waiting_for_receive) {
    RetryAtRnrTick(qp->peer);
  }
  // The same for a peer in another process (found by the one-process /
  // two-process differential: tests/conformance_fixture.h
  // "fake_rxe_fabric").
  if (qp->remote_waits_for_receive) TellRemoteToRetry(qp, /*changed=*/true);
  if (next == IBV_QPS_ERR) FlushStrandedReceives(qp);
  if (next == IBV_QPS_ERR && current == IBV_QPS_ERR) {
    // ERR to ERR runs rxe_qp_error again: WRs a doorbell in ERR left
    // queued flush now (duplex program 6000021).
    qp->RunErrorTasks(false);
    MarkMaybeReady(qp);
  }
  if (next != current) SetQpState(qp, next, why);
  a.qp_state = next;
  // (Personality::query_qp_cur_state_as_last_named: rxe_qp_from_attr
  // stores attr->qp_state there only when IBV_QP_CUR_STATE is given.)
  if (!config_.personality.query_qp_cur_state_as_last_named ||
      (attr_mask & IBV_QP_CUR_STATE)) {
    a.cur_qp_state = next;
  }
  return 0;
}

void FakeNic::FlushStrandedReceives(Qp* qp) {
  // Every ibv_modify_qp to ERR, from ERR too, runs rxe_qp_error (rxe_qp.c
  // rxe_qp_from_attr), whose responder run flushes the whole receive queue
  // (rxe_resp.c check_resource in QP_STATE_ERROR): the receives stranded
  // by Personality::flushes_receives_posted_in_err flush now. Found by
  // the random differential (program 936; and duplex program 6000044,
  // where the ibv_modify_qp is librdmacm's in rdma_disconnect).
  if (qp->stranded_rq.empty()) return;
  while (!qp->stranded_rq.empty()) {
    qp->rq.push_back(std::move(qp->stranded_rq.front()));
    qp->stranded_rq.pop_front();
  }
  qp->stranded_recvs = 0;
  MarkMaybeReady(qp);
}

void FakeNic::ResetQpQueues(Qp* qp) {
  // A peer process's requester parked on this QP's RNR NAK resends at its
  // RNR timer's next tick (RetryAtRnrTick), told while the link that
  // tells it is still open (UnlinkVerbsQp below closes it; the next RTR
  // opens another, on which a receive posted then tells it again).
  if (qp->remote_waits_for_receive) TellRemoteToRetry(qp, /*changed=*/true);
  qp->responder = fake_nic_internal::ResponderState();
  qp->ack_psn = 0;
  qp->resume_packet = 0;
  qp->resume_wr_id = 0;
  qp->resume_length = 0;
  while (!qp->sq.empty()) qp->sq.pop_front();
  while (!qp->rq.empty()) qp->rq.pop_front();
  qp->stranded_recvs = 0;
  qp->stranded_rq.clear();
  // rxe_qp.c rxe_qp_reset: the rings start over.
  qp->sq_prod = 0;
  qp->req_index = 0;
  qp->head_passed = false;
  qp->sq_flushable = 0;
  DetachFromPeer(qp);
  UnlinkVerbsQp(qp);  // a QP made with ibv_create_qp connects again at RTR
}

}  // namespace rpma_harness

namespace rpma_harness {

// rdma_cm's own transitions, through the same table as the user's: librdmacm
// moves a new QP to INIT in rdma_create_qp (cma.c ucma_init_conn_qp), and to
// INIT (again, with the CM's attributes), RTR and RTS in rdma_accept / on the
// REP (ucma_modify_qp_rtr / ucma_modify_qp_rts), each time with the attributes
// the kernel's rdma_init_qp_attr returns:
//   - INIT: pkey 0, port 1; access flags 0 before the IB CM id exists
//     (cma.c cma_ib_init_qp_attr), then REMOTE_WRITE, plus REMOTE_READ and
//     REMOTE_ATOMIC when the peer's initiator depth is non-zero (cm.c
//     cm_init_qp_init_attr);
//   - RTR: the port's active MTU, the peer's QP number, max_dest_rd_atomic =
//     our responder resources, min_rnr_timer 0 (cm.c cm_init_qp_rtr_attr);
//   - RTS: retry counts from the CM exchange, max_rd_atomic = our initiator
//     depth, the timeout the CM computed (cm.c cm_init_qp_rts_attr).
uint8_t FakeNic::RdDepth(int requested) const {
  return static_cast<uint8_t>(
      std::min(requested, config_.caps->max_qp_rd_atom));
}

int FakeNic::CmModifyQpToInit(Qp* qp, int access_flags, const char* why) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = access_flags;
  return ModifyQpLocked(
      qp, attr,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
      why);
}

int FakeNic::CmModifyQpToRts(Qp* qp, const CmQpParams& params,
                             const char* why) {
  const int access = IBV_ACCESS_REMOTE_WRITE |
                     (params.peer_initiator_depth > 0
                          ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                          : 0);
  int ret = CmModifyQpToInit(qp, access, why);
  if (ret != 0) return ret;
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = config_.caps->active_mtu;
  rtr.dest_qp_num = params.dest_qp_num;
  rtr.rq_psn = params.rq_psn;  // ModifyQpLocked keeps 24 bits
  rtr.max_dest_rd_atomic = params.responder_resources;
  rtr.min_rnr_timer = 0;
  rtr.ah_attr.port_num = 1;
  rtr.ah_attr.is_global = 1;
  ret = ModifyQpLocked(qp, rtr,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                       why);
  if (ret != 0) return ret;
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = params.sq_psn;
  rts.max_rd_atomic = params.initiator_depth;
  rts.retry_cnt = params.retry_cnt;
  rts.rnr_retry = params.rnr_retry;
  rts.timeout = qp->id != nullptr && qp->id->ack_timeout_set
                    ? qp->id->ack_timeout
                    : config_.caps->cm_qp_timeout;
  return ModifyQpLocked(qp, rts,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                            IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_TIMEOUT,
                        why);
}

}  // namespace rpma_harness
