// fake_nic.h: a deterministic, in-process RDMA NIC (RC QPs + rdma_cm) that
// implements VerbsBackend without any RDMA hardware.
//
// The fake keeps rdma-core's types and return conventions (see
// verbs_backend.h) and models what a real reliable-connected NIC does with
// them: memory protection (lkey/rkey/PD/access checks), QP state machine,
// send/receive queue depths, RNR retries, completion queues and channels,
// and librdmacm's connection-management handshake. Two "hosts" in one
// process talk through an in-process fabric: an RDMA write copies real bytes
// from the requester's registered buffer into the responder's. With
// FakeNicConfig::fabric_dir, NICs of different processes also reach each
// other (fake_nic_fabric.h, fake_nic_remote.cc): the responder's half of a
// WR then runs in the responder's process.
//
// The NIC only works when driven, like absl's SimulatedClock:
//   - Step() performs one unit of work (execute or flush one WR, one RNR
//     retry, or deliver one CM message) and RunUntilIdle() loops it, so a test
//     controls every interleaving;
//   - StartBackgroundProgress() runs a thread that steps whenever work is
//     pending, for programs written like real clients and servers that block
//     in GetCqEvent / GetCmEvent.
// With a fixed seed and the same calls, the sequence of FakeNicEvent records
// is identical run after run (in manual mode; with background progress it
// also depends on how threads interleave with the progress thread). The
// seed only chooses keys and QP numbers; work is ordered deterministically.
//
// Behaviour that differs between real NICs is data, not code paths: a
// Personality (Spec, Rxe, Siw) selects it.
//
// Decisions worth knowing (each is cited where it is implemented):
//   - PostSend below RTS is EINVAL; in ERR posts are accepted and flushed.
//     PostRecv works from INIT on. Unmodelled RC opcodes (LOCAL_INV,
//     BIND_MW, SEND_WITH_INV) are EOPNOTSUPP; non-RC opcodes EINVAL.
//   - A send-queue slot frees when the NIC executes the WR, not at poll.
//   - Completion errors move the QP to ERR; its other WRs then flush. A
//     responder-side error (bad rkey, short receive) moves the responder QP
//     to ERR too. A responder that is gone / not RTR gives RETRY_EXC_ERR.
//   - rnr_retry N: N + 1 attempts, then RNR_RETRY_EXC_ERR; 7: the WR waits
//     (and the NIC is idle) until the responder posts a receive.
//   - A CQ overrun loses the CQE and PollCq returns -EOVERFLOW from then on
//     (rxe: the CQ goes on, and a lost receive completion puts the
//     responder in ERR without an ACK; Personality::
//     cq_full_loses_the_completion_only).
//   - Without background progress a blocking GetCqEvent / GetCmEvent runs
//     the NIC itself and fails with ETIMEDOUT (and says why on stderr) if
//     the NIC goes idle with no event for it.
//   - SRQs: a QP created with init_attr->srq takes its receives from the
//     SRQ (PostRecv on it is EINVAL); they complete on that QP's recv_cq;
//     a QP in ERR flushes none of the SRQ's receives; DestroySrq while a QP
//     uses it is EBUSY. No ODP (QueryDeviceEx), AdviseMr is EOPNOTSUPP.
//   - A QP's WRs run one at a time, a READ completing before the next WR
//     starts, so IBV_SEND_FENCE always holds. max_rd_atomic /
//     max_dest_rd_atomic come from rdma_conn_param as the IB CM pairs them.
//   - CM: Connect with no listener -> REJECTED, status 8; Reject -> REJECTED,
//     status 28; a device that is down -> UNREACHABLE, status -ETIMEDOUT;
//     resolving an address nobody owns -> EHOSTUNREACH (sync) or
//     ADDR_ERROR (async); LoseConnection -> CONNECT_ERROR at both ends.
//     Connect needs an id with an event channel (migrate a sync id first).
//
// Thread safety: every public method may be called from any thread; one
// mutex serialises them. Observers run with that mutex held.
//
// Example:
//   rpma_harness::FakeNic nic;                    // one device owning every IP
//   ibv_context* ctx;
//   nic.GetContextByAddress("10.0.0.1", /*local=*/true, &ctx);
//   ibv_pd* pd = nic.AllocPd(ctx);
//   ... build a connection with CreateId / BindAddr / Listen / Connect ...
//   nic.PostSend(qp, &wr, &bad_wr);
//   nic.RunUntilIdle();                           // the write happens here
//   nic.PollCq(cq, 1, &wc);

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nic/nic_tap.h"
#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

// Device limits, reported by QueryDevice and enforced at creation time.
struct FakeDeviceCaps {
  int max_qp = 256;
  int max_qp_wr = 4096;
  int max_sge = 16;
  uint32_t max_inline_data = 256;
  uint64_t max_mr_size = uint64_t{1} << 40;
  int max_mr = 4096;
  int max_pd = 256;
  int max_cq = 256;
  int max_cqe = 65536;
  // Shared receive queues (ibv_query_device(3) max_srq / max_srq_wr /
  // max_srq_sge), as generous as the QP limits.
  int max_srq = 256;
  int max_srq_wr = 4096;
  int max_srq_sge = 16;

  // ibv_query_device(3) max_qp_rd_atom / max_qp_init_rd_atom: the bound of
  // a QP's max_dest_rd_atomic / max_rd_atomic (ibv_modify_qp(3)).
  int max_qp_rd_atom = 16;
  uint64_t page_size_cap = 4096;
  // ibv_query_port(3) active_mtu; rdma_cm uses it as the path MTU, and the
  // data path cuts messages into packets of the QP's path MTU. rxe over a
  // 1500-byte netdev: IBV_MTU_1024 (rxe_net.c / rxe.c rxe_set_mtu).
  ibv_mtu active_mtu = IBV_MTU_1024;
  // The local ACK timeout rdma_cm gives a QP at RTS (ibv_query_qp timeout):
  // for RoCE the CM uses a packet life time of 18 (kernel cma.c
  // CMA_IBOE_PACKET_LIFETIME) and the QP timeout is one more (cm.c
  // cm_init_qp_rts_attr); 19 recorded on rxe.
  uint8_t cm_qp_timeout = 19;
  // ibv_query_port(3) link_layer. InfiniBand: the port has a LID and an
  // address vector may go without a GRH. Ethernet (RoCE, as rxe): no LID,
  // and an address vector needs a GRH (kernel core/verbs.c
  // rdma_check_ah_attr: EINVAL for a RoCE AH without IB_AH_GRH).
  uint8_t link_layer = IBV_LINK_LAYER_INFINIBAND;

  // What rxe (Linux 6.1) reports in ibv_query_device, recorded in the
  // soft-RoCE VM (tests/testdata/rxe_streams.txt, DeviceCapsAsReported;
  // rxe_param.h).
  static FakeDeviceCaps Rxe();
};

// Behaviour on which real NICs disagree, as data (after
// google/rdma-unit-test's introspection tables).
struct Personality {
  std::string name;
  // PostSend / PostRecv return -errno instead of errno (siw does; mlx5 and
  // rxe return positive values, as ibv_post_send(3) documents).
  bool negative_errno = false;
  // rxe (rxe_comp.c make_send_cqe) sets IBV_WC_WITH_IMM on the requester's
  // success CQE of SEND_WITH_IMM / RDMA_WRITE_WITH_IMM and fills byte_len
  // with the WR's length for every opcode. The spec leaves both undefined on
  // send-side completions; Spec reports byte_len only for RDMA_READ/atomics.
  bool send_cqe_has_imm_flag_and_byte_len = false;
  // rxe sets IBV_WC_GRH on the responder's successful CQEs: every RoCE v2
  // packet carries a GRH (rxe_resp.c do_complete: RXE_GRH_MASK ->
  // IB_WC_GRH). Recorded on rxe in tests/testdata/rxe_streams.txt.
  bool recv_cqe_has_grh_flag = false;
  // rxe (rxe_queue.c rxe_queue_init) rounds a queue of n entries up to
  // roundup_pow_of_two(n + 1) slots and reports one less as its capacity;
  // the QP caps and cq->cqe written back are that real depth.
  bool round_queues_to_power_of_two_minus_one = false;
  // On IB and RoCE the CM messages have fixed-size private-data fields, and
  // rdma_cm reports the whole field: CONNECT_REQUEST 56 bytes, the active
  // side's ESTABLISHED (REP) 196, REJECTED 148, the bytes after the sender's
  // being zero (kernel cma.c cma_set_req_event_data / cma_set_rep_event_data
  // set private_data_len to the field size). iWARP's MPA carries the exact
  // length. Code that trusts private_data_len to be what the peer sent works
  // on siw and breaks on IB; this flag makes the fake break it too.
  bool cm_private_data_padded_to_field_size = true;
  // The responder's receive completion when a request that consumed it
  // fails at the responder. Spec values: ibv_poll_cq(3) (LOC_ACCESS_ERR is
  // "a protection error on a local data buffer during an RDMA Write with
  // Immediate", LOC_LEN_ERR a receive buffer too small, LOC_PROT_ERR an SGE
  // that names no valid MR). rxe's: rxe_resp.c rxe_receiver, the status
  // passed to do_class_ac_error for RKEY_VIOLATION, LENGTH, MALFORMED_WQE.
  ibv_wc_status recv_status_on_rkey_violation = IBV_WC_LOC_ACCESS_ERR;
  ibv_wc_status recv_status_on_short_buffer = IBV_WC_LOC_LEN_ERR;
  ibv_wc_status recv_status_on_bad_recv_sge = IBV_WC_LOC_PROT_ERR;
  // What the requester of a SEND longer than the receive sees. Spec: the
  // responder's "invalid request" NAK, REM_INV_REQ_ERR (ibv_poll_cq(3)). rxe
  // 6.1: copy_data (rxe_mr.c) refuses a packet longer than what is left of
  // the receive with -EINVAL, which send_data_in (rxe_resp.c) turns into
  // RESPST_ERR_MALFORMED_WQE: a "remote operational error" NAK (REM_OP_ERR)
  // and the receive LOC_QP_OP_ERR (recv_status_on_short_buffer); recorded.
  ibv_wc_status send_status_on_short_receive = IBV_WC_REM_INV_REQ_ERR;
  // A SEND / RDMA WRITE whose source SGE's lkey names no MR of the QP's PD.
  // Spec: LOC_PROT_ERR (ibv_poll_cq(3)). rxe 6.1: LOC_QP_OP_ERR (rxe_req.c
  // rxe_requester: finish_packet -> copy_data -> lookup_mr fails with
  // -EINVAL, and only -EFAULT is LOC_PROT_ERR); an SGE reaching past its MR
  // is LOC_PROT_ERR on both (rxe_mr_copy -EFAULT). An RDMA READ's local SGE
  // is LOC_PROT_ERR either way (rxe_comp.c do_read); recorded.
  ibv_wc_status send_status_on_bad_source_key = IBV_WC_LOC_PROT_ERR;
  // Opcodes the provider refuses at post time with EINVAL although the
  // ibv_post_send(3) table allows them on RC. siw (rdma-core
  // providers/siw/siw.c map_send_opcode) has no immediate data and no
  // atomics.
  std::vector<ibv_wr_opcode> opcodes_refused_at_post;
  // siw's push_recv_wqe refuses a receive with no SGE (EINVAL); the spec and
  // rxe accept one (useful for RDMA_WRITE_WITH_IMM, which writes no SGE).
  bool refuses_receive_without_sge = false;
  // rxe_mr.c rxe_mr_init: rkey = lkey when the MR grants any remote access
  // (IB_ACCESS_REMOTE), 0 otherwise. The spec leaves the rkey of an MR
  // without remote access unspecified; Spec hands out a distinct random key.
  bool rkey_zero_without_remote_access = false;
  bool rkey_equals_lkey = false;
  // Error completions (flushes included) carry opcode 0 (IBV_WC_SEND),
  // byte_len 0 and wc_flags 0 on rxe: rxe_comp.c make_send_cqe and
  // rxe_resp.c do_complete / flush_recv_wqe fill opcode only on success.
  // ibv_poll_cq(3) leaves opcode undefined on error; Spec reports the WR's
  // own opcode so traces stay readable.
  bool error_cqe_opcode_zero = false;
  // rxe_qp.c rxe_qp_init_req: the send WQE is sized
  // max(max_send_sge * 16, max_inline_data) bytes, and both caps granted are
  // derived from it: max_inline_data = that size, max_send_sge = size / 16.
  // (Asking for 1 SGE and no inline gets 16 bytes of inline.)
  bool send_caps_from_wqe_size = false;
  // ibv_post_send(3) allows IBV_SEND_INLINE on SEND and RDMA_WRITE only;
  // Spec refuses it on a READ or atomic (EINVAL). rxe's provider takes it
  // for any opcode (providers/rxe post_one_send copies the data in place of
  // the SGEs), and the READ response then has no SGE to land in: rxe_comp.c
  // do_read's copy_data fails, IBV_WC_LOC_PROT_ERR (recorded on rxe by
  // verbs_dropin/testdata/hostile_verbs.c; atomics share copy_data).
  bool inline_read_fails_at_completion = false;
  // An atomic whose remote address is not 8-byte aligned: the responder
  // NAKs it as an invalid request (the requester completes with
  // IBV_WC_REM_INV_REQ_ERR; fake_nic_responder.cc CheckTarget), which Spec
  // does. rxe's provider never sends it: EINVAL at post (rdma-core 44
  // providers/rxe/rxe.c validate_send_wr, remote_addr & 0x7; found by the
  // wide random differential against rxe, program 3000048).
  bool misaligned_atomic_refused_at_post = false;
  // An opcode ibv_post_send(3) does not define: Spec refuses it at post
  // (EINVAL). rxe's provider copies any opcode into the send queue, and
  // the requester finds no packet for it (rxe_req.c next_opcode fails):
  // the WR completes IBV_WC_LOC_QP_OP_ERR and the QP goes to ERR
  // (recorded: hostile_verbs post_send_opcode_200).
  bool unknown_opcode_fails_at_completion = false;
  // rxe_qp_chk_attr (rxe_qp.c) checks the port, the path MTU, the address
  // vector, max_rd_atomic and the ACK timeout, and no other value: access
  // flags the verbs do not define and a max_dest_rd_atomic above the
  // device's max_qp_rd_atom are taken (recorded: hostile_verbs
  // init_unknown_access_bit, rtr_max_dest_rd_atomic_above_max). Spec
  // refuses both (EINVAL).
  bool takes_unchecked_qp_attr_values = false;
  // ibv_create_qp(3) writes the granted capabilities back into the
  // caller's cap. rxe writes back the send and receive depths as asked,
  // while its queues hold the rounded depth (RealDepth) and ibv_query_qp
  // reports that; the SGE and inline counts come back as granted
  // (recorded: hostile_verbs qp_caps_*). Spec writes back the real depth.
  bool create_qp_reports_requested_depth = false;
  // rxe_qp.c rxe_qp_from_attr keeps max_rd_atomic and max_dest_rd_atomic
  // rounded up to a power of two, as ibv_query_qp then reports them (3 is
  // 4, 5 is 8; recorded: hostile_verbs query_depths_*).
  bool rd_atomic_depths_rounded_to_power_of_two = false;
  // ibv_query_qp's cur_qp_state: Spec reports the QP's state. rxe reports
  // what rxe_qp_from_attr stored, the target state of the last modify that
  // named IBV_QP_CUR_STATE, and 0 (RESET) before any did (recorded:
  // hostile_verbs query_rts, query_depths_*).
  bool query_qp_cur_state_as_last_named = false;
  // A new QP's path MTU, as ibv_query_qp reports it before RTR: Spec 0;
  // rxe IBV_MTU_256 (rxe_qp.c rxe_qp_init_misc sets attr.path_mtu = 1;
  // recorded: cm_verbs, a QP rejected before RTR).
  bool new_qp_path_mtu_256 = false;
  // rxe_comp.c rxe_completer, COMPST_ERROR_RETRY: comp.retry_cnt is counted
  // down only when it is not 7, so a QP with retry_cnt 7 sends an
  // unanswered request again for ever (the IB spec, 9.7.6.1.3, makes only
  // rnr_retry 7 infinite). Measured on rxe 6.1: no completion in 45 s
  // (docs/fidelity.md). Applies where the transport timer runs in real time
  // (FakeNic::RequesterWaitsForRetransmit).
  bool transport_retry_7_never_runs_out = false;
  // A completion that finds its CQ full is lost, IBV_EVENT_CQ_ERR is raised
  // and the CQ goes on: later polls return what it holds (rxe_cq.c
  // rxe_cq_post: queue_full -> event, -EBUSY, nothing written). The
  // requester ignores the failure (rxe_comp.c do_complete) and goes on; the
  // responder does not (rxe_resp.c do_complete -> RESPST_ERR_CQ_OVERFLOW ->
  // RESPST_ERROR): the message was placed and its receive consumed, the QP
  // goes to ERR and no ACK or NAK is sent, so the requester's transport
  // retries run out (RETRY_EXC_ERR). false (spec): the CQ is overrun for
  // good, every later poll fails with -EOVERFLOW, and the responder answers
  // as if the completion had been written. A fault rule's overrun
  // (FakeNic::OverrunCq) is for good under every personality.
  bool cq_full_loses_the_completion_only = false;
  // A UC responder drops a message it cannot take (no receive, a bad rkey,
  // a responder not RTR) silently, and the next message starts afresh (IB
  // spec 9.8.3: UC has no NAKs). rxe 6.1 does so only when the message
  // failed at its first packet. When a later packet is dropped (a
  // multi-packet write with imm that finds no receive at its LAST) or
  // never comes (its requester stopped at a bad source SGE), the
  // responder's expected opcode stays "middle", and check_op_seq
  // (rxe_resp.c) sends the next message's first packet to
  // do_class_d1e_error, which drops it and:
  //  - a cut write: nothing more; every later message is dropped the same
  //    way until the QP is reset;
  //  - a cut send, receive queue of its own: the receive starts again
  //    (class D1), and the message after the dropped one lands in it;
  //  - a cut send, SRQ: the receive taken from the SRQ at its first packet
  //    (get_srq_wqe) completes IBV_WC_REM_INV_REQ_ERR (class E), and every
  //    later message is dropped.
  // Recorded: verbs_dropin/testdata/uc_verbs.rxe.txt, write-imm-3k-no-recv,
  // cut-send, cut-send-srq.
  bool uc_cut_message_stalls_responder = false;
  // rxe_verbs.c rxe_post_send: for a user QP "utilize process context to do
  // protocol processing": the requester runs inside ibv_post_send, so the
  // packets are on the wire before it returns. With background progress
  // the fake executes at post for every personality (PostSend runs what it
  // can); in manual mode Step() stays the only thing that executes, so a
  // test keeps control. What this flag still decides: a post to a QP in ERR
  // flushes at once under background progress (RingSendDoorbellInErr: rxe
  // runs its completer inside that doorbell).
  bool executes_at_post = false;
  // What a DREQ does to the peer's QP. The kernel's rdma_cm moves only
  // kernel consumers' QPs to ERR (cma.c cma_ib_handler IB_CM_DREQ_RECEIVED
  // just reports RDMA_CM_EVENT_DISCONNECTED); a user-space QP stays in RTS
  // until its own rdma_disconnect (librdmacm ucma_modify_qp_err), recorded
  // on rxe (server state 3 in WritePostedBeforeDisconnectArrives). Spec
  // keeps the fake's older, stricter behaviour (the peer's QP goes to ERR
  // when the DREQ arrives, so its receives flush without the peer calling
  // rdma_disconnect).
  bool peer_qp_to_err_on_dreq = true;
  // A receive posted to a QP already in ERR: the spec flushes it (IB spec
  // C10-42; rdmavt's "post receive for QP in ERR state" fix). rxe 6.1
  // queues it and never completes it: rxe_post_recv does not run the
  // responder, whose flush ran once, when the QP entered ERR. Found by the
  // random differential (program 2, shrunk: a write refused by the
  // responder's access flags, then a receive).
  bool flushes_receives_posted_in_err = true;
  // Send WRs posted to a QP already in ERR. The spec flushes each (C10-42).
  // rxe 6.1 flushes them only when a requester run finds a WQE at its own
  // index (rxe_req.c rxe_requester, the QP_STATE_ERROR branch: req_next_wqe
  // returns NULL when req.wqe_index equals the producer index; else that
  // one WQE takes the err path, which advances req.wqe_index by one and runs
  // the completer, whose error branch, rxe_comp.c rxe_drain_resp_pkts,
  // flushes the whole ring). The index lags: it advances once per
  // ibv_post_send in ERR however many WRs were posted, and a failure on a
  // message's first packet leaves it on that WR. So once the ring (the
  // depth + 1 slots of rxe_queue.c) wraps the index can equal the producer
  // at a doorbell, and those WRs stay queued without a completion (until a
  // later doorbell hits; on rxe also rxe_comp.c retransmit_timer, seconds
  // later, which the fake does not model). Found by the random
  // differential (programs 500, 644, 748: a 7-slot send queue).
  bool sq_flush_follows_requester_index = false;
  // A QP that enters ERR with both queues holding WRs: which queue's
  // flushes come first. The spec orders neither (C10-42 flushes each queue
  // in its own order); the fake flushes the send queue first. rxe 6.1
  // flushes the receive queue first: rxe_qp.c rxe_qp_error schedules the
  // responder's task (whose check_resource flushes the RQ) before the
  // completer's (rxe_drain_resp_pkts flushes the SQ), and both run as
  // tasklets in that order, whichever path moved the QP to ERR. Seen on a
  // shared CQ; found by the random differential's duplex programs (6000005:
  // a receive, then a SEND that runs out of RNR retries and one behind it).
  // Except after an RNR wait (Qp::flush_send_queue_first, set by
  // FakeNic::RnrNakHead when rnr_wait_runs_retransmit_timer): the send
  // queue first there.
  bool flushes_receive_queue_first = false;
  // A post refused for the QP rather than for a WR of it returns EINVAL
  // with *bad_wr NULL on rxe, where the spec personality names the first
  // WR: a receive to a QP in RESET or attached to an SRQ (rdma-core
  // providers/rxe/rxe.c rxe_post_recv returns before its loop), and a send
  // to a QP below RTS. rxe_post_send queues every WR in the shared ring,
  // then its doorbell (post_send_db's write to the kernel; rxe_verbs.c
  // rxe_post_send: req.state < READY is -EINVAL) fails and that error is
  // returned, so those WRs keep their slots (a WR the loop refused first
  // is still *bad_wr, the return still EINVAL). Found by the random
  // differential's duplex programs (6000013: a send after RESET).
  bool refusal_for_the_qp_leaves_bad_wr_null = false;
  // Send WRs posted while the QP is in SQD (or below RTS, where
  // refusal_for_the_qp_leaves_bad_wr_null keeps them queued) start only at
  // a later ibv_post_send once it is back in RTS: rxe runs its requester
  // from the doorbell (rxe_verbs.c rxe_post_send), and the move to RTS
  // (rxe_qp.c rxe_qp_from_attr) only sets req.state. The spec personality
  // starts them when the QP returns to RTS. Found by the duplex programs
  // (6000107: a write posted in SQD, then SQD -> RTS, never completes).
  bool queued_sends_wait_for_a_doorbell = false;
  // A WR that the responder does not answer (in ERR, RESET, gone), with a
  // write or SEND behind it whose source fails its local checks: rxe's
  // requester builds that WR while the first waits for its ACK and takes
  // its err path (rxe_req.c finish_packet), after which the first WR is
  // never retried to its end: nothing completes and the QP stays in RTS
  // until it leaves RTS (ibv_modify_qp, rdma_disconnect). The spec
  // personality ends the first WR with RETRY_EXC_ERR. Found by the retry
  // programs (7000193: a zero-length write, then one with a bad lkey,
  // towards a QP in ERR), and recorded in 12 variants on rxe (either side
  // posting, zero-length or not, a SEND or writes first, the bad SGE in
  // the first packet or a later one): 11 stalled; one (7000270) ended the
  // first WR in RETRY_EXC_ERR in one run and stalled in another, so it is
  // a race in rxe, and the random programs keep away from it.
  bool local_error_behind_unanswered_wr_stalls = false;
  // A WR waiting out an RNR NAK: rxe's retransmit timer, armed when the
  // request went out (rxe_req.c update_state) and not pushed back by the
  // NAK (rxe_comp.c COMPST_RNR_RETRY leaves by `exit`, not COMPST_EXIT),
  // keeps running; when it runs out before the RNR timer, COMPST_ERROR_
  // RETRY counts retry_cnt down (unless 7) or ends the WR with
  // RETRY_EXC_ERR, and the resend waits for the RNR timer
  // (req.wait_for_rnr_timer). So with the QP's ACK timeout shorter than
  // the RNR wait its NAK asked for, each RNR cycle also costs one
  // transport retry, and the WR ends with whichever budget runs out first
  // -- even with rnr_retry 7. Both timers count in jiffies of
  // kernel_hz: the ACK timeout 4.096 us x 2^timeout rounded down, at least
  // 1 (rxe_qp.c, nsecs_to_jiffies); the RNR wait the IB spec's table
  // (rxe_comp.c rnrnak_usec) rounded up (rnrnak_jiffies). With equal
  // jiffies the two race on rxe; the fake then lets the RNR timer win, as
  // it does when the ACK timeout is longer (where rxe's timer, armed at
  // the first send, may still run out across several RNR cycles: not
  // modelled). The spec's requester counts RNR NAKs only (9.7.5.2.8).
  // Found by the retry programs 7000045 and 7000052 (rnr_retry 1,
  // retry_cnt 0: RETRY_EXC_ERR).
  bool rnr_wait_runs_retransmit_timer = false;
  uint32_t kernel_hz = 250;  // Debian 12's CONFIG_HZ
  // rdma_disconnect by one side: the kernel's IB CM does not answer a DREQ
  // by itself. The side that took it reports DISCONNECTED and answers with
  // a DREP only when its program calls rdma_disconnect (cma.c
  // rdma_disconnect: ib_send_cm_dreq fails in IB_CM_DREQ_RCVD, then
  // ib_send_cm_drep) or destroys its id (cm.c cm_destroy_id,
  // IB_CM_DREQ_RCVD), or its process exits; until then the side that
  // disconnected gets no DISCONNECTED of its own. If no DREP comes, its
  // DREQ's retries run out (cm.c cm_process_send_error, IB_CM_DREQ_ERROR)
  // and it gets DISCONNECTED with status -ETIMEDOUT (cma.c cma_ib_handler)
  // after dreq_timeout_ms, in real time, on a NIC that runs in the
  // background. Measured on rxe: no event within 3 s while the peer had
  // not disconnected, then DISCONNECTED once it did (tests/api_abuse.c,
  // group one-sided-disconnect). Spec keeps the fake's older answer: the
  // DREP at once.
  bool dreq_waits_for_peer_disconnect = false;
  // How long an unanswered DREQ is retried: the active side's CM timeout
  // (cm.c ib_send_cm_req: 2 x packet life time + the remote CM response
  // timeout, cm_convert_to_ms) times CMA_MAX_CM_RETRIES 15 + 1 sends. On
  // RoCE rdma_cm sets a packet life time of 18 (Linux 6.1 cma.c
  // CMA_IBOE_PACKET_LIFETIME; the QP's local ACK timeout of 19 recorded in
  // tools/softroce_vm/README.md is it + 1) and CMA_CM_RESPONSE_TIMEOUT 20:
  // 16 x (2 x 1024 + 4096) ms. Measured on rxe: DISCONNECTED with
  // -ETIMEDOUT 102.3 s after rdma_disconnect (the MAD layer's timers run a
  // little late).
  uint32_t dreq_timeout_ms = 16 * (2 * 1024 + 4096);
  // rdma_cm's RDMA_CM_EVENT_TIMEWAIT_EXIT: an id whose DREQ was answered (a
  // DREP, or the DREQ's timeout), or that answered one with its DREP,
  // enters the IB CM's timewait (cm.c cm_drep_handler, cm_send_drep_locked,
  // cm_process_send_error: cm_enter_timewait), which ends after
  // cm_convert_to_ms(av.timeout), av.timeout being the packet life time
  // + 1: 2^(19 - 8) ms on RoCE; then the id gets TIMEWAIT_EXIT (cma.c
  // cma_ib_handler, in RDMA_CM_DISCONNECT) unless it was destroyed. 0: none.
  // Measured on rxe: both ids 2.10-2.11 s after the answering
  // rdma_disconnect, 2.3 s after a DREQ's timeout. In real time, on a NIC
  // that runs in the background, as the DREQ's timeout. Spec keeps the
  // fake's older answer: none.
  uint32_t timewait_ms = 0;

  // The device's limits (ibv_query_device): a personality is the whole
  // NIC, so Personality::Rxe() reports and enforces rxe's (max_sge 32,
  // max_qp_wr 1048576, ...). FakeNicConfig::caps overrides them.
  FakeDeviceCaps caps;

  static Personality Spec();  // IB spec behaviour; the default.
  static Personality Rxe();   // soft-RoCE (Linux 6.1), caps included.
  // soft-iWARP (rdma-core providers/siw): negative errno from posts, no
  // immediate data or atomics, exact-length private data.
  static Personality Siw();
};

// One RDMA device on the in-process fabric. Every device routes to every
// address some device owns.
struct FakeDeviceConfig {
  std::string name;
  std::vector<std::string> addresses;  // numeric IPv4 / IPv6 addresses
  bool owns_every_address = false;     // loopback-style catch-all
};

// When an RDMA write's (with or without imm) bytes land at the responder
// (issue 15 item 3, "destination read too early"). IB spec vol. 1 9.5
// (Transaction Ordering): the responder may not depend on the contents of
// an RDMA WRITE buffer until the last packet of a write with immediate
// completed (its receive completion), or a later SEND or ATOMIC arrived; a
// real NIC places packets as they arrive, and the order in which their
// bytes become visible to the CPU is not defined. A program that reads the
// destination earlier sees whatever has landed.
enum class Landing {
  kAtOnce,        // every byte lands when the WR executes (the default)
  kAtCompletion,  // the bytes land in the step that generates both
                  // completions, one step after execution
  kPieces,        // in 1-8 seeded sub-ranges, in a seeded order, one per
                  // step of the QP; completions after the last one
};
const char* LandingName(Landing landing);  // "once", "completion", "pieces"

struct FakeNicConfig {
  uint64_t seed = 1;
  Personality personality = Personality::Spec();
  // When set, these limits instead of personality.caps (a test that needs a
  // small max_qp_wr, a benchmark that needs 20 000 QPs). The NIC's config()
  // always has it set: to personality.caps when it was not.
  std::optional<FakeDeviceCaps> caps;
  // Every QP and CQ with the room of rdma-core's ibv_qp_ex / ibv_cq_ex
  // past its ibv_qp / ibv_cq, as a provider's verbs_qp / verbs_cq has
  // (fake_nic_internal.h kQpExtension): the drop-in libibverbs.so.1 sets
  // it, and its extended verbs fill the room (ibv_qp_to_qp_ex(qp)->qp_base
  // is qp). Off, no object pays the 192 / 160 bytes: with it on for every
  // NIC, tools/bench's BM_Scaling counted 2.26 KB of heap per QP instead of
  // 1.79 KB at 10 000 pairs, and ran slower there.
  bool verbs_extension = false;
  // Empty means one device "fake0" that owns every address.
  std::vector<FakeDeviceConfig> devices;
  // The device this process uses to reach remote addresses
  // (GetContextByAddress with local=false, ResolveAddr on an unbound id);
  // empty means the first device. It models the host's routing table.
  std::string route_device;
  // A blocking GetCqEvent / GetCmEvent without background progress first
  // runs the NIC until an event arrives or it is idle; then it waits this
  // long for another thread to make work before failing with ETIMEDOUT.
  int idle_block_timeout_ms = 0;
  // With background progress a blocking getter waits like rdma-core's, that
  // is forever by default (0). A positive value makes it fail with ETIMEDOUT
  // after that long, so a test with a lost event fails instead of hanging.
  int background_block_timeout_ms = 0;
  // How Step() picks among QPs with work: in turn (creation order), or at
  // random from the seed, which interleaves the completions of different
  // QPs differently per seed (still the same order for the same seed).
  bool random_schedule = false;
  // Adds a kPacket record per request packet of a write or a SEND (position,
  // offset, the responder's ACK / NAK). Off by default: traces and their
  // sequence numbers stay as they were without it.
  bool trace_packets = false;
  // Adds a kLanded record when a write from a requester in another process
  // has landed in this process's memory (the responder's half,
  // fake_nic_remote.cc), for the crash checker's journal
  // (rpma/crash_journal.h). Off by default, for the same reason.
  bool record_landings = false;
  // Joins the cross-process fabric rooted at this directory (created, mode
  // 0700): Connect reaches listeners of other processes on it, and their
  // connections carry the data path (fake_nic_fabric.h;
  // docs/two-processes.md, "How processes meet: the fabric"). Empty: the
  // in-process fabric only. Needs background progress
  // (StartBackgroundProgress), as the default backend has, or
  // fabric_sequenced.
  std::string fabric_dir;
  // With fabric_dir: join the fabric's Sequencer (<fabric_dir>/sequencer,
  // started by the launcher's --sequence; fake_nic_fabric_sequence.h):
  // every NIC step runs only when granted, there is no progress thread,
  // and trace lines carry the global step number instead of the clock.
  // The default backend sets it from RPMA_HARNESS_FABRIC_SEQUENCE.
  bool fabric_sequenced = false;
  // Appends every event record to this file as
  // "<CLOCK_MONOTONIC ns> <process_label> <ToString(event)>", one write per
  // line (O_APPEND: processes may share the file). Empty: no file.
  std::string trace_path;
  std::string process_label;
  // See Landing. The responder's checks (rkey, PD, bounds, access, RNR) and
  // the read of the source still run when the WR executes, exactly as with
  // kAtOnce; a piece whose target was deregistered or unmapped since is a
  // REM_ACCESS_ERR when it would land. The source bytes are snapshotted at
  // execution (ibv_post_send(3): the source may not change before the
  // completion) and the head WR stays at the front of its send
  // queue, later WRs behind it, until its last piece landed. The seed
  // decides the pieces (a stream of its own: keys and QP numbers do not
  // change). In-process peers only: a write to another process lands at
  // once. FakeNic::SetLanding changes it later (the usage checker's
  // `landing=` option).
  Landing landing = Landing::kAtOnce;
};

// A send WR about to be carried out (first attempt only), as a fault
// injector sees it. imm_data is in network byte order, as posted.
struct ExecuteInfo {
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint64_t length = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm_data = 0;
  bool signaled = false;
};

// What the NIC does with that WR instead of (or before) carrying it out.
struct ExecuteVerdict {
  enum class Kind {
    kProceed,         // execute normally
    kFail,            // complete with `status`; no data moves; QP to ERR
    kTear,            // `torn_bytes` land at the responder, then `status`
    kDelay,           // wait `delay_steps` more steps, then execute
    kLoseConnection,  // the connection dies first (both QPs to ERR)
    kOverrunCq,       // execute, but the requester's CQ overruns
  };
  Kind kind = Kind::kProceed;
  ibv_wc_status status = IBV_WC_SUCCESS;
  uint64_t torn_bytes = 0;
  int delay_steps = 0;
  std::string reason;  // recorded with the kFault event
};

// One observable thing the NIC did. Later work builds trace/replay on this.
struct FakeNicEvent {
  enum class Kind {
    kPostSend,    // a send WR was queued (opcode: ibv_wr_opcode)
    kPostRecv,    // a receive WR was queued
    kPostFailed,  // a post was refused (status: positive errno)
    kExecute,     // a send WR was carried out and its bytes moved
    kRnrNak,      // the responder had no receive; the WR will retry
    kCompletion,  // a CQE was added (opcode: ibv_wc_opcode)
    kCqOverrun,   // a CQE was lost because the CQ was full
    kQpState,     // a QP changed state (opcode: new ibv_qp_state)
    kCmEvent,     // a CM event was queued (opcode: rdma_cm_event_type)
    kFault,       // a fault hook fired
    kPacket,      // one request packet and the responder's answer (text);
                  // only with FakeNicConfig::trace_packets. Also one per
                  // piece landed with a FakeNicConfig::landing other than
                  // kAtOnce ("landed (pieces) piece 2/5 offset 130")
    kLanded,      // a remote requester's write landed here (qp_num: the
                  // requester's QP; remote_addr, byte_len: where); only
                  // with FakeNicConfig::record_landings
  };
  uint64_t seq = 0;
  Kind kind = Kind::kPostSend;
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
  int opcode = 0;
  int status = 0;  // ibv_wc_status, errno or rdma_cm_event status
  uint64_t byte_len = 0;
  uint64_t local_addr = 0;   // first local SGE, as posted
  uint64_t remote_addr = 0;  // as posted
  // The same addresses as (MR, offset): MRs are numbered 1, 2, ... in
  // registration order (0: no live MR matched the key), so records compare
  // equal across processes even though heap addresses move (ASLR).
  uint32_t local_mr = 0;
  uint64_t local_offset = 0;
  uint32_t remote_mr = 0;
  uint64_t remote_offset = 0;
  std::string text;
};

const char* ToString(FakeNicEvent::Kind kind);
std::string ToString(const FakeNicEvent& event);

// rdma-core enum values by the names traces print ("SUCCESS",
// "RDMA_WRITE_WITH_IMM", "RECV_RDMA_WITH_IMM", "ERR", "ESTABLISHED").
const char* WcStatusName(int status);
const char* WcOpcodeName(int opcode);
const char* WrOpcodeName(int opcode);
const char* QpStateName(int state);
const char* CmEventName(int event);

namespace fake_nic_internal {
struct Device;
struct Pd;
struct Mr;
struct CompChannel;
struct Cq;
struct Qp;
struct Srq;
struct EventChannel;
struct CmId;
struct CmEvent;
struct SendWqe;
struct RecvWqe;
struct RequestPacket;
struct Sge;
class SgeList;
class Fabric;
struct Frame;
struct FrameView;
struct RequestFrame;
struct AnswerFrame;
}  // namespace fake_nic_internal

class FakeNic final : public VerbsBackend {
 public:
  FakeNic();
  explicit FakeNic(FakeNicConfig config);
  ~FakeNic() override;
  FakeNic(const FakeNic&) = delete;
  FakeNic& operator=(const FakeNic&) = delete;

  const char* Name() const override { return "fake"; }

  // ---- VerbsBackend ---------------------------------------------------------
  int GetContextByAddress(const char* addr, bool local,
                          ibv_context** ctx) override;
  int QueryDevice(ibv_context* ctx, ibv_device_attr* attr) override;
  ibv_pd* AllocPd(ibv_context* ctx) override;
  int DeallocPd(ibv_pd* pd) override;
  ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) override;
  int DeregMr(ibv_mr* mr) override;
  ibv_comp_channel* CreateCompChannel(ibv_context* ctx) override;
  int DestroyCompChannel(ibv_comp_channel* channel) override;
  ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                   ibv_comp_channel* channel, int comp_vector) override;
  int DestroyCq(ibv_cq* cq) override;
  int ReqNotifyCq(ibv_cq* cq, int solicited_only) override;
  int GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                 void** cq_context) override;
  void AckCqEvents(ibv_cq* cq, unsigned int nevents) override;
  int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override;
  int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override;
  int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  int QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
              ibv_qp_init_attr* init_attr) override;
  rdma_event_channel* CreateEventChannel() override;
  void DestroyEventChannel(rdma_event_channel* channel) override;
  int CreateId(rdma_event_channel* channel, rdma_cm_id** id,
               void* context) override;
  int DestroyId(rdma_cm_id* id) override;
  int ResolveAddr(rdma_cm_id* id, const char* addr, const char* port,
                  int timeout_ms) override;
  int ResolveRoute(rdma_cm_id* id, int timeout_ms) override;
  int BindAddr(rdma_cm_id* id, const char* addr, const char* port) override;
  int Listen(rdma_cm_id* id, int backlog) override;
  int GetCmEvent(rdma_event_channel* channel, rdma_cm_event** event) override;
  int AckCmEvent(rdma_cm_event* event) override;
  int CreateQp(rdma_cm_id* id, ibv_pd* pd,
               ibv_qp_init_attr* init_attr) override;
  void DestroyQp(rdma_cm_id* id) override;
  int Connect(rdma_cm_id* id, rdma_conn_param* param) override;
  int Accept(rdma_cm_id* id, rdma_conn_param* param) override;
  int Reject(rdma_cm_id* id, const void* private_data,
             uint8_t private_data_len) override;
  int Disconnect(rdma_cm_id* id) override;
  int MigrateId(rdma_cm_id* id, rdma_event_channel* channel) override;
  int SetOption(rdma_cm_id* id, int level, int optname, void* optval,
                size_t optlen) override;
  int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override;

  // ---- verbs without rdma_cm (issue 22; fake_nic_verbs.cc) ----
  int ListDevices(std::vector<ibv_context*>* contexts) override;
  int QueryPort(ibv_context* ctx, uint8_t port_num,
                ibv_port_attr* attr) override;
  int QueryGid(ibv_context* ctx, uint8_t port_num, uint32_t index,
               ibv_gid_entry* entry) override;
  ibv_qp* CreateVerbsQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) override;
  int DestroyVerbsQp(ibv_qp* qp) override;

  // ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----
  ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* init_attr) override;
  int DestroySrq(ibv_srq* srq) override;
  int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  // Reports no on-demand paging (odp_caps all zero) and no extended
  // capability flags, as rxe in Linux 6.1 does (rxe has no ODP there).
  int QueryDeviceEx(ibv_context* ctx, ibv_device_attr_ex* attr) override;
  // EOPNOTSUPP: no ODP, so no advice (rdma-core's ibv_advise_mr returns
  // EOPNOTSUPP for a provider without advise_mr, which rxe is).
  int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags,
               ibv_sge* sg_list, uint32_t num_sge) override;

  // ---- asynchronous events, SRQ attributes (issue 22) ----
  // The events rxe in Linux 6.1 raises: IBV_EVENT_CQ_ERR when a completion
  // finds its CQ full (rxe_cq.c rxe_cq_post), IBV_EVENT_SRQ_LIMIT_REACHED
  // when taking a receive leaves an armed SRQ below its limit (rxe_resp.c
  // get_srq_wqe), IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE when the
  // device goes down / up (rxe_net.c rxe_port_down / rxe_port_up;
  // SetDeviceUp here). Nothing else: rxe raises no QP event there.
  int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) override;
  void AckAsyncEvent(ibv_async_event* event) override;
  int ModifySrq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) override;
  int QuerySrq(ibv_srq* srq, ibv_srq_attr* attr) override;

  // ---- progress -------------------------------------------------------------

  // Performs one unit of work; false when there was nothing to do. CM
  // messages go first, then QPs take turns in creation order.
  bool Step();
  // Steps until idle or `max_steps`; returns the number of steps taken.
  size_t RunUntilIdle(size_t max_steps = 1000000);
  // True when Step() would return false.
  bool Idle();
  // Idle, and no send WR waits for a peer process's answer (fabric): what
  // this NIC owes is done until a program or another NIC gives it work.
  bool Quiescent();
  // A human-readable snapshot for a hung test: every QP (state, queue
  // occupancy, peer), CQ occupancy, pending CM work and queued CM events.
  std::string DebugString();
  // Sequenced mode: how many application threads wait on the fabric now
  // (for tests that must know a thread is parked before they go on).
  int SequencedWaiters();
  // How many objects of each kind the NIC holds now (a leak check: after a
  // program deleted everything it made, every count but devices is 0).
  struct Holdings {
    size_t pds = 0, mrs = 0, comp_channels = 0, cqs = 0, qps = 0, srqs = 0;
    size_t event_channels = 0, cm_ids = 0, cm_events = 0, cm_work = 0;
    bool Empty() const {
      return pds + mrs + comp_channels + cqs + qps + srqs + event_channels +
                 cm_ids + cm_events + cm_work ==
             0;
    }
  };
  Holdings CurrentHoldings();
  // A thread that steps whenever work is pending (it sleeps on a condition
  // variable otherwise). Blocking GetCqEvent / GetCmEvent then wait like
  // their rdma-core counterparts.
  void StartBackgroundProgress();
  void StopBackgroundProgress();

  // ---- observation ----------------------------------------------------------

  // Registers `tap` (nic/nic_tap.h) for what `what` asks (NicTap::kEvents,
  // kSourceReads, kNicWrites); returns a handle for RemoveTap. Taps are told
  // in the order they were added. REQUIRES: `tap` is not null and outlives
  // its registration.
  int AddTap(NicTap* tap, unsigned what);
  void RemoveTap(int handle);
  // An events-only tap made of a function (the NIC owns the adapter).
  // REQUIRES: the observer does not call back into this FakeNic (it runs
  // with the NIC's mutex held, which is what keeps the record ordered).
  int AddObserver(std::function<void(const FakeNicEvent&)> observer);
  void RemoveObserver(int handle) { RemoveTap(handle); }
  using SourceRead = NicSourceRead;
  // A kExecute event's text says its WR was a request out of its
  // responder's PSN sequence (CheckRequestPsn): the usage checker's psn.
  static bool OutOfPsnSequence(const std::string& text);

  // ---- fault hooks ----------------------------------------------------------

  // The connection of the QP `qp_num` dies: both QPs go to ERR (outstanding
  // WRs flush) and both ids get RDMA_CM_EVENT_CONNECT_ERROR. False if no
  // connected QP has that number.
  bool LoseConnection(uint32_t qp_num);
  // Writes out what this NIC queued for its fabric peers (answers, ACKs),
  // waiting at most timeout_ms: what a real NIC has already put on the
  // wire when the program sees its completion. For a process about to exit
  // (rpma/fake_backend.cc registers it with atexit). Returns whether
  // everything went.
  bool FlushFabric(int timeout_ms);
  // A device that is down keeps its addresses (they still resolve) but does
  // not answer: Connect to it ends in RDMA_CM_EVENT_UNREACHABLE.
  bool SetDeviceUp(const std::string& device_name, bool up);
  // Consulted once for every send WR just before its first execution
  // attempt; nullptr removes it. REQUIRES: the hook does not call back into
  // this FakeNic (it runs with the NIC's mutex held).
  void SetExecuteHook(std::function<ExecuteVerdict(const ExecuteInfo&)> hook);
  // Adds a kFault record (a fault decided outside the NIC, e.g. by a
  // wrapping backend) to the event stream, in order with the NIC's own.
  void RecordFault(uint32_t qp_num, uint64_t wr_id, int status,
                   std::string text);
  // Marks the CQ overrun, as if a completion had been lost: PollCq fails
  // from now on. False if `cq` is not this NIC's.
  bool OverrunCq(ibv_cq* cq);
  const FakeNicConfig& config() const { return config_; }
  // The limits in force: config().caps, or the personality's.
  const FakeDeviceCaps& caps() const { return *config_.caps; }
  // FakeNicConfig::landing from now on (a WR already landing keeps its
  // pieces).
  void SetLanding(Landing landing);
  Landing landing();

 private:
  using Device = fake_nic_internal::Device;
  using Pd = fake_nic_internal::Pd;
  using Mr = fake_nic_internal::Mr;
  using CompChannel = fake_nic_internal::CompChannel;
  using Cq = fake_nic_internal::Cq;
  using Qp = fake_nic_internal::Qp;
  using Srq = fake_nic_internal::Srq;
  using EventChannel = fake_nic_internal::EventChannel;
  using CmId = fake_nic_internal::CmId;
  using CmEvent = fake_nic_internal::CmEvent;
  using SendWqe = fake_nic_internal::SendWqe;
  using Sge = fake_nic_internal::Sge;
  using SgeList = fake_nic_internal::SgeList;

  struct CmWork {
    std::string what;
    std::function<void()> run;
  };
  // A few recent lookups in front of a hashed map: a program posts with the
  // same handful of keys again and again, and a hash lookup (a division)
  // per call was a fifth of a round trip. Cleared whenever such an object is
  // destroyed, so a stale key still misses. (QPs and CQs need none: see
  // cq_slots_.)
  template <typename K, typename V>
  struct LookupCache {
    static constexpr size_t kSize = 8;
    K keys[kSize] = {};
    V* values[kSize] = {};
    static size_t Slot(K key) {
      const uint64_t k = (uint64_t)(key);
      return static_cast<size_t>((k >> 4) ^ (k >> 10) ^ k) % kSize;
    }
    V* Find(K key) const {
      const size_t i = Slot(key);
      return keys[i] == key ? values[i] : nullptr;
    }
    void Put(K key, V* value) {
      const size_t i = Slot(key);
      keys[i] = key;
      values[i] = value;
    }
    void Clear() { *this = LookupCache(); }
  };

  // Everything below REQUIRES mu_ held.
  void Record(FakeNicEvent event);
  // Records the event `build` fills in, building it only when someone
  // observes the records; the sequence advances (and waiters wake) either
  // way, so observed runs number their events as unobserved ones do.
  template <typename Build>
  void RecordLazily(Build&& build) {
    if (!Observed()) {
      next_seq_++;
      WakeWaiters();
      return;
    }
    FakeNicEvent event;
    build(&event);
    Record(std::move(event));
  }
  Mr* FindMrByLkey(uint32_t lkey);
  Mr* FindMrByRkey(uint32_t rkey);
  uint32_t NextRandom32();
  uint32_t NewKey();
  uint32_t NewQpNum();
  // An RC QP in RESET on p's device (rdma_create_qp and ibv_create_qp);
  // 0 or the errno. DestroyQpLocked undoes it.
  int NewQpLocked(Pd* p, ibv_qp_init_attr* init_attr, Qp** out);
  void DestroyQpLocked(Qp* qp);
  // A device's place in devices_ and its node GUID (fake_nic_verbs.cc).
  size_t DeviceIndex(const Device* device) const;
  uint64_t DeviceGuid(const Device* device) const;
  uint32_t GidTableLength() const;
  Device* FindDevice(ibv_context* ctx);
  Device* DeviceOwning(const std::string& addr);
  Device* RouteDevice();
  Pd* FindPd(ibv_pd* pd);
  Cq* FindCq(ibv_cq* cq);
  Qp* FindQp(ibv_qp* qp);
  Qp* FindQpByNum(uint32_t qp_num);
  Srq* FindSrq(ibv_srq* srq);
  void FillDeviceAttr(const Device* device, ibv_device_attr* attr) const;
  CmId* FindId(rdma_cm_id* id);
  EventChannel* FindEventChannel(rdma_event_channel* channel);
  int PostErrno(int errno_value) const;
  // The checks of one send WR at post (fake_nic_data_path.cc).
  int SendWrRefusal(const Qp& q, const ibv_send_wr& w,
                    uint64_t* length, const char** why) const;
  int RealDepth(int requested) const;

  bool StepLocked();
  // At most this many steps run inside one PollCq that found its CQ empty
  // (background progress), so that a poll returns in bounded time.
  static constexpr int kStepsPerEmptyPoll = 16;
  // Empty polls under background progress; while it grows, the progress
  // thread leaves the work to the pollers, looking again every
  // kPollerGraceUs.
  // Its own cache line: pollers bump it, the progress thread reads it. A
  // poll that needs no mutex counts one in kEmptyPollsPerCount (a shared
  // counter bumped at every such poll was half of a polling round trip).
  alignas(64) std::atomic<uint64_t> empty_polls_{0};
  static constexpr uint32_t kEmptyPollsPerCount = 64;
  static constexpr int kPollerGraceUs = 200;
  // A poll that comes back empty needs no mutex when nothing changed since
  // the same thread's last empty poll of the same CQ (background progress
  // only): `poll_epoch_` moves whenever a poll could find something new --
  // a completion or an overrun on any CQ (CommitCqe, AddCqe), work that may
  // be ready (MarkMaybeReady, QueueCmWork: what wakes the progress thread
  // too), a CQ destroyed, progress stopped -- and the thread remembers
  // (this NIC's serial, the CQ, the epoch) of its last empty poll. Two
  // threads spinning on one NIC otherwise take its mutex at every poll and
  // stall each other's posts (issue 28). Manual stepping and the sequenced
  // fabric never take this path.
  // REQUIRES mu_ held (so a plain store suffices); free in manual mode,
  // where no poll skips the mutex (StartBackgroundProgress moves the epoch
  // when it turns the skipping on).
  void BumpPollEpoch() {
    if (!lockless_empty_polls_.load(std::memory_order_relaxed)) return;
    poll_epoch_.store(poll_epoch_.load(std::memory_order_relaxed) + 1,
                      std::memory_order_release);
  }
  alignas(64) std::atomic<uint64_t> poll_epoch_{1};
  std::atomic<bool> lockless_empty_polls_{false};
  static inline std::atomic<uint64_t> next_serial_{1};
  const uint64_t serial_ = next_serial_.fetch_add(1);
  // The scheduler keeps every QP that may have work in a bitmap over QP
  // slots (creation order), so a step costs the same with 1 or 10 000 QPs
  // instead of a scan of all of them. Invariant: a QP for which
  // QpHasReadyWork() holds is marked; anything that can make it hold (a
  // post, a state change of the QP or its peer, a peer detaching, a step of
  // the QP) marks it. A marked QP found idle is unmarked.
  static constexpr size_t kNoSlot = ~size_t{0};
  void MarkMaybeReady(Qp* qp);
  void UnmarkReady(size_t slot);
  size_t NextMarked(size_t from) const;  // kNoSlot when none
  bool QpHasReadyWork(Qp* qp);
  // After a PostSend to a QP in ERR (Personality::
  // sq_flush_follows_requester_index): the doorbell's requester run.
  void RingSendDoorbellInErr(Qp* qp);
  bool HasReadyWork();
  // HasReadyWork without unmarking anything (the wake-up test).
  bool AnyReadyWork();
  void ExecuteOrFlushOne(Qp* qp);
  // In ERR: the receive queue's head completes with IBV_WC_WR_FLUSH_ERR.
  void FlushOneReceive(Qp* qp);
  void ExecuteSendWqe(Qp* qp);
  // ExecuteSendWqe's READ and atomics, once the responder accepted them.
  void ExecuteReadOrAtomic(Qp* qp, Qp* responder);
  // The completer's half of a READ or an atomic (rxe_comp.c do_read /
  // do_atomic), in one process or from a peer's answer: the response's
  // `length` bytes (8 for an atomic) go into `wqe`'s local SGEs packet by
  // packet (path MTU `mtu`; copy_data, LOCAL_WRITE), so a bad SGE stops the
  // copy at the packet that reaches it, the bytes before it in place.
  // `fetch(offset, n, out)` gives a response packet's bytes; false: the
  // responder's memory faulted. kBadSge sets *why.
  enum class Response { kTaken, kRemoteFault, kLocalFault, kBadSge };
  Response TakeResponse(
      Qp* qp, const SendWqe& wqe, uint64_t length, uint32_t mtu,
      const std::function<bool(uint64_t, uint64_t, uint8_t*)>& fetch,
      std::string* why);
  // fake_nic_packets.cc: the head WR (an RDMA write, with or without imm)
  // packet by packet against `responder`'s per-packet checks.
  void ExecuteWriteByPackets(Qp* qp, Qp* responder);
  // A NAK of the head write (rxe_resp.c: check_rkey failing, REM_ACCESS_ERR;
  // check_op_seq, REM_INV_REQ_ERR; also a SEND's, CheckRequestPsn):
  // `receive`, the one the packet took if any, completes with the
  // personality's status for an rkey violation first (or, its CQ full,
  // nothing is answered: UnansweredReceiveCqFull), the WR is popped with
  // `status` and both QPs go to ERR. `ends_message`: the NAKed packet was
  // the message's last (a landing piece: all packets were sent).
  void NakWrite(Qp* qp, Qp* responder,
                const std::optional<fake_nic_internal::RecvWqe>& receive,
                bool ends_message, ibv_wc_status status,
                const std::string& why);
  // A write's payload copy faulted at `fault` while landing [target, +
  // copy_length): the error completions of ExecuteWriteByPackets (the
  // head WR popped, both QPs' states as rxe leaves them). `packet` is the
  // one whose copy faulted: its trace line says which side's memory did.
  void FailWriteOnCopyFault(Qp* qp, Qp* responder,
                            const fake_nic_internal::RequestPacket& packet,
                            const uint8_t* target, uint64_t copy_length,
                            uintptr_t fault, bool took_receive,
                            bool ends_message);
  // fake_nic_packets.cc: the head SEND / SEND_WITH_IMM packet by packet (the
  // receive taken at FIRST / ONLY, scattered into per packet).
  void ExecuteSendByPackets(Qp* qp, Qp* responder);
  // rxe_mr.c copy_data over one packet's bytes [offset, offset + length) of
  // a message and the SGE list `sges` of `owner`: SGE by SGE, each piece's
  // MR looked up (lkey, PD, `access`) and range-checked before its bytes
  // move, so the pieces before a failing one have moved. `payload` null:
  // checks only. kFault: memory the program protected (*fault).
  enum class SgeWalk { kOk, kNoMr, kOutOfRange, kFault };
  SgeWalk ScatterPacket(Qp* owner, const SgeList& sges, int access,
                        uint64_t offset, const uint8_t* payload,
                        uint64_t length, uintptr_t* fault);
  // The first packet (of `count`, path MTU `mtu`) whose source bytes fail
  // rxe_req.c's per-packet copy_data, and the requester's status for it;
  // `count` when none does (inline data: none).
  // Personality::local_error_behind_unanswered_wr_stalls (false without
  // it): whether a write or SEND behind `qp`'s unanswered head fails its
  // local checks; if so the head stays in flight for good.
  bool StallsBehindUnansweredHead(Qp* qp);
  // Whether a write's or SEND's source fails its local checks, at which of
  // the message's packets (in the QP's path MTU) and with what status.
  bool SourceFails(Qp* qp, const SendWqe& wqe, uint32_t* packet,
                   ibv_wc_status* status);
  uint32_t FirstBadSourcePacket(Qp* qp, const SendWqe& wqe, uint32_t mtu,
                                uint32_t count, ibv_wc_status* status);
  // ---- the responder (fake_nic_responder.cc): rxe_resp.c's checks, one
  // function each, run for a requester of this NIC and of a peer process
  // alike.
  // The QP answers at all (RTR / RTS / SQD), then check_op_valid.
  enum class RequestVerdict { kAccept, kNoAnswer, kInvalidRequest };
  RequestVerdict CheckRequest(const Qp* responder, ibv_wr_opcode opcode,
                              const char** why) const;
  // One packet of an RDMA WRITE whose message began at PSN `first_psn`: a
  // packet continuing a message the responder never saw begin
  // (ContinuationWithoutFirst), then check_resource, then check_rkey on the
  // RETH packet (kept in responder->responder for the packets after it).
  enum class PacketAnswer {
    kAck,
    kRnrNak,
    kNakRemoteAccess,
    kNakInvalidRequest,
    kNoAnswer,
    kResendFromFirst,
  };
  PacketAnswer CheckWritePacket(Qp* responder,
                                const fake_nic_internal::RequestPacket& packet,
                                uint32_t rkey, uint64_t va, uint64_t length,
                                uint32_t first_psn);
  // Packet `index` (> 0) of a write that began at PSN `first_psn` reaches a
  // responder with no write begun: it was reset (and brought back to RTR)
  // since the FIRST packet. rxe answers by the PSN its new RTR expects.
  PacketAnswer ContinuationWithoutFirst(Qp* responder, uint32_t index,
                                        uint32_t first_psn);
  // check_psn of a new request (its first packet; not a resumed or resent
  // one) of `count` request packets and `psns` PSNs from `first_psn`,
  // against the PSN `responder` expects: kInSequence (taken: the expected
  // PSN moves past it), or what a request out of sequence gets --
  // kNoAnswer (the requester's retries run out), kAckedUnexecuted (a
  // duplicate's ACK of LAST completes it, nothing executed) or
  // kNakInvalidRequest (a MIDDLE or LAST at the expected PSN; the
  // responder to ERR); the answered packet's index in `*answered` (count:
  // none). A bad source SGE may come first (SourceFaultComesFirst).
  enum class SequenceAnswer {
    kInSequence,
    kNoAnswer,
    kAckedUnexecuted,
    kNakInvalidRequest,
  };
  SequenceAnswer CheckRequestPsn(Qp* responder, ibv_wr_opcode opcode,
                                 uint32_t first_psn, uint32_t count,
                                 uint32_t psns, uint32_t* answered);
  // The trace's text for an answer other than kInSequence
  // (fake_nic_internal::kOutOfSequence).
  static const char* OutOfSequenceText(SequenceAnswer answer);
  // ExecuteSendWqe's check_psn of the head WR, a new request to
  // `responder` in this process: false when it is in sequence; otherwise
  // its answer is enacted and true.
  bool HeadOutOfSequence(Qp* qp, Qp* responder);
  // check_rkey of a READ or WRITE (`length` bytes) or an atomic (aligned,
  // 8 bytes): IBV_WC_SUCCESS, or the requester's status of the NAK and why.
  ibv_wc_status CheckTarget(Qp* responder, ibv_wr_opcode opcode, uint32_t rkey,
                            uint64_t va, uint64_t length, const char** why);
  // atomic_reply on the checked target; false when its memory faulted.
  bool ExecuteAtomic(ibv_wr_opcode opcode, uint64_t va, uint64_t compare_add,
                     uint64_t swap, uint64_t* original);
  // send_data_in: one SEND packet lands in `recv` (of `capacity` bytes) at
  // its offset, or the NAK's requester status is returned with the
  // receive's status and the reason.
  ibv_wc_status ReceivePacket(Qp* responder,
                              const fake_nic_internal::RecvWqe& recv,
                              uint64_t capacity,
                              const fake_nic_internal::RequestPacket& packet,
                              const uint8_t* payload, uint64_t wr_id,
                              ibv_wc_status* recv_status, std::string* why);
  // The requester's own SGE failed at packet `index`: the WR completes with
  // `status`, the QP to ERR; what the earlier packets did stays done.
  void FailOnSourcePacket(Qp* qp, ibv_wc_status status, uint32_t index);
  // Landing other than kAtOnce (fake_nic_landing.cc): cuts the executed
  // head WR's snapshot into pieces, and lands the next one (completing the
  // WR after the last).
  void StartLanding(Qp* qp, Qp* responder, bool took_receive);
  void LandNextPiece(Qp* qp);
  // A head WR still landing is flushed: the receive it took is flushed too.
  void AbandonLanding(Qp* qp, const SendWqe& wqe);
  // A packet's trace line (FakeNicConfig::trace_packets); one test when off.
  void RecordPacket(Qp* qp, const SendWqe& wqe,
                    const fake_nic_internal::RequestPacket& packet,
                    const char* answer) {
    if (config_.trace_packets) RecordPacketLine(qp, wqe, packet, answer);
  }
  void RecordPacketLine(Qp* qp, const SendWqe& wqe,
                        const fake_nic_internal::RequestPacket& packet,
                        const char* answer);
  void RecordExecuted(Qp* qp, const SendWqe& wqe, ibv_wc_status status,
                      const char* why);
  // Tells the source-read taps, if any, of bytes [offset, offset + length)
  // of `wqe`'s source (fake_nic_taps.cc).
  void TapSourceRead(const Qp* qp, const SendWqe& wqe, uint64_t offset,
                     uint64_t length, uint32_t mtu) {
    if (!source_read_taps_.empty()) {
      TapSourceReadSlow(qp, wqe, offset, length, mtu);
    }
  }
  void TapSourceReadSlow(const Qp* qp, const SendWqe& wqe, uint64_t offset,
                         uint64_t length, uint32_t mtu);
  // The NIC writes `n` bytes of `src` at `dst`, the program's memory: the
  // write taps are told, then one guarded copy (fake_nic_user_memory.h),
  // false with *fault set if it faulted. Every byte this NIC writes into a
  // program's memory goes through here.
  bool NicWrite(void* dst, const void* src, size_t n, uintptr_t* fault);
  // The write taps alone, for a copy that writes the program's memory
  // without NicWrite (several packets gathered in one copy).
  void TapNicWrite(const void* dst, uint64_t n) {
    if (n == 0) return;
    for (NicTap* tap : write_taps_) {
      tap->OnNicWrite(reinterpret_cast<uintptr_t>(dst), n);
    }
  }
  void CompleteReceive(Qp* responder, const fake_nic_internal::RecvWqe& recv,
                       const SendWqe& wqe, ibv_wc_status status,
                       ibv_wc_opcode opcode, uint32_t byte_len);
  // Whether CompleteMessageReceive would lose the responder's receive
  // completion now (asked before the trace says how a packet is answered).
  bool ReceiveCompletionLost(const Qp* responder) const;
  // The receive a message ended in (or failed in, at a responder error)
  // completes (CompleteReceive). False when its CQ was full and the
  // personality makes that the responder's error (Personality::
  // cq_full_loses_the_completion_only): the completion is lost and the
  // responder is in ERR; the caller then sends no answer, neither ACK nor
  // NAK: UnansweredReceiveCqFull.
  bool CompleteMessageReceive(Qp* responder,
                              const fake_nic_internal::RecvWqe& recv,
                              const SendWqe& wqe, ibv_wc_status status,
                              ibv_wc_opcode opcode, uint32_t byte_len);
  // The head WR's message lost its receive completion to a full CQ
  // (CompleteMessageReceive false): the responder, in ERR, answers nothing,
  // so the requester's retry timer decides (RequesterTimesOut,
  // kReceiveCqFull). A landing under way is dropped: a retransmission
  // starts the message again.
  void UnansweredReceiveCqFull(Qp* qp);
  // The responder answered the head WR with an RNR NAK asking for the
  // RNR wait `rnr_timer` (its min_rnr_timer, IB spec table 45): one retry
  // used (or parked until a receive, rnr_retry 7), or RNR_RETRY_EXC_ERR
  // (or, Personality::rnr_wait_runs_retransmit_timer, RETRY_EXC_ERR).
  void RnrNakHead(Qp* qp, uint8_t rnr_timer);
  // rxe's requester does not wait on a head WR that is answered late or
  // never (an RNR NAK it waits out, a request nobody answers): it sends
  // the head whole and goes on with the WRs behind it. When such a head
  // ends, or its QP is moved to ERR while it waits, the requester's index
  // (Personality::sq_flush_follows_requester_index) has passed the head
  // and WrsRequesterSendsBehindHead more (once per head: Qp::head_passed).
  void RequesterSentPastHead(Qp* qp);
  // How many WRs behind the head rxe's requester sends in one run (rxe_req.c
  // rxe_requester): up to the producer, stopping at a fenced WR
  // (req_next_wqe), at a READ or atomic past max_rd_atomic
  // (check_init_depth) and past RXE_MAX_UNACKED_PSNS packets.
  size_t WrsRequesterSendsBehindHead(const Qp* qp) const;
  // The head WR's request went unanswered and its transport retries ran
  // out: RETRY_EXC_ERR (rxe_comp.c COMPST_ERROR_RETRY), the QP to ERR.
  void EndUnansweredHead(Qp* qp, const char* why);
  // Personality::rnr_wait_runs_retransmit_timer: whether `qp`'s ACK
  // timeout runs out before an RNR wait of `rnr_timer`.
  bool RetransmitBeatsRnrWait(const Qp* qp, uint8_t rnr_timer) const;
  // rxe's timer periods in jiffies (Personality::kernel_hz, with
  // rnr_wait_runs_retransmit_timer; otherwise in the spec's units, one
  // "jiffy" a nanosecond): the ACK timeout of `qp`
  // (rxe_qp.c rxe_qp_from_attr: nsecs_to_jiffies(4096 << timeout), at least
  // 1) and the RNR wait an RNR NAK carrying `rnr_timer` asks for (rxe_comp.c
  // rnrnak_jiffies: IB spec table 45, usecs_to_jiffies rounding up, at least
  // 1), and a jiffy in nanoseconds.
  uint64_t AckTimeoutJiffies(const Qp* qp) const;
  uint64_t RnrWaitJiffies(uint8_t rnr_timer) const;
  uint64_t JiffyNs() const;
  // Whether `qp`'s requester runs its timers in real time: an
  // ibv_modify_qp QP (an rdma_cm QP's waits end with its connection's
  // events) on a NIC whose background thread runs; a sequenced or stepped
  // NIC's time is its steps.
  bool RequesterTimersRunInRealTime(const Qp* qp) const;
  // The head WR of `qp` parked on an RNR NAK (rnr_retry 7) asking for
  // `rnr_timer`: in real time, when and how often its RNR timer ticks.
  void ParkOnRnrTimer(Qp* qp, uint8_t rnr_timer);
  // The responder of `qp`'s parked head WR changed (its state, its access
  // flags) in a way the next resend sees: rxe resends at the RNR timer's
  // next tick (rxe_comp.c rnr_nak_timer), which a real-time requester
  // waits for; otherwise it resends at once.
  void RetryAtRnrTick(Qp* qp);
  // Transmission order (fake_nic_packets.cc): runs `qp`'s requester now, WR
  // after WR, until its send queue is empty or its head cannot go on (RNR,
  // a delay fault, a state that does not send).
  void RunRequesterNow(Qp* qp);
  // Applies execute_hook_ to the head WR; true when the verdict consumed
  // this step (the WR failed, was torn, or waits).
  bool ApplyExecuteHook(Qp* qp);
  void LoseConnectionLocked(Qp* qp);
  void CompleteSend(Qp* qp, const SendWqe& wqe, ibv_wc_status status,
                    uint32_t byte_len);
  void DescribeAddresses(FakeNicEvent* event, const SgeList& sges,
                         uint32_t rkey, uint64_t remote_addr);
  bool LocalSgesOk(Qp* qp, const SgeList& sges, int needed_access);
  bool RemoteMrOk(Qp* responder, uint32_t rkey, uint64_t addr, uint64_t length,
                  int needed_access);
  void AddCqe(Cq* cq, const ibv_wc& wc, bool solicited);
  // The CQ is overrun (a completion lost, or a fault rule says so): polls
  // fail from now on and IBV_EVENT_CQ_ERR is raised, as rxe_cq_post raises
  // it for each completion that finds the queue full.
  void OverrunLocked(Cq* cq);
  // IBV_EVENT_CQ_ERR on `cq`: a completion found it full.
  void RaiseCqErrLocked(Cq* cq);
  // Queues an asynchronous event on the device's context (ibv_async_event
  // names its CQ, QP, SRQ or port).
  void RaiseAsyncEventLocked(Device* device, const ibv_async_event& event);
  // A CQ or SRQ is destroyed: its events not yet got go (uverbs drops them
  // from the async file's list as the object goes).
  void DropAsyncEventsLocked(Device* device, const void* object);
  // The count of got-and-not-acked events of the CQ or SRQ an event names
  // (nullptr: a port event, or the object is gone).
  unsigned int* UnackedAsyncLocked(const ibv_async_event& event);
  // The responder takes the receive at the head of its queue (the QP's or
  // its SRQ's); every path that consumes one for a message goes through
  // here, which raises the SRQ's limit event.
  fake_nic_internal::RecvWqe TakeReceive(Qp* responder);
  // A SEND cut short after its FIRST packet (a bad source SGE further on)
  // leaves the receive its FIRST took in progress, without a completion.
  // From the QP's own receive queue it stays at the head. From an SRQ rxe
  // has taken it out already (rxe_resp.c get_srq_wqe, at FIRST: into the
  // QP's resp.srq_wqe), so it is gone from the SRQ, and the QP holds it
  // (here: in its own, otherwise unused, receive queue): only a flush ends
  // it (the QP to ERR: check_resource completes resp.wqe first) or a RESET
  // drops it. Srq program 13000293 on rxe.
  void HoldCutReceive(Qp* responder);
  // A completion written in place: CqeSlot hands out the CQ ring's next
  // slot (nullptr when the CQ is overrun or full: build the entry aside and
  // AddCqe it, which reports the loss); the caller fills every field, then
  // CommitCqe applies the personality, records it and signals the channel.
  bool CqHasNoRoom(const Cq* cq) const;
  ibv_wc* CqeSlot(Cq* cq);
  void CommitCqe(Cq* cq, ibv_wc& wc, bool solicited);
  void SetQpState(Qp* qp, ibv_qp_state state, const char* why);
  // ibv_modify_qp(3) for the user and for rdma_cm (fake_nic_qp_state.cc).
  int ModifyQpLocked(Qp* qp, const ibv_qp_attr& attr, int attr_mask,
                     const char* why);
  void ResetQpQueues(Qp* qp);
  // Whether ibv_modify_qp may move `qp` to `next` at all (the state table).
  bool QpMayMoveTo(const Qp* qp, ibv_qp_state next) const;
  // ibv_modify_qp to ERR: receives stranded by Personality::
  // flushes_receives_posted_in_err go back to the receive queue to flush.
  void FlushStrandedReceives(Qp* qp);
  // rdma_disconnect's own move of the local QP to ERR (an ibv_modify_qp):
  // 0 or its errno.
  int DisconnectQpToErr(Qp* qp);
  struct CmQpParams {
    uint32_t dest_qp_num = 0;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;
    uint8_t initiator_depth = 0;       // ours: max_rd_atomic
    uint8_t responder_resources = 0;   // ours: max_dest_rd_atomic
    uint8_t peer_initiator_depth = 0;  // decides REMOTE_READ / ATOMIC
    uint32_t rq_psn = 0;  // the peer's starting PSN (CmId::peer_starting_psn)
    uint32_t sq_psn = 0;  // ours (CmId::starting_psn)
  };
  int CmModifyQpToInit(Qp* qp, int access_flags, const char* why);
  // librdmacm's RDMA_MAX_INIT_DEPTH / RDMA_MAX_RESP_RES (0xff) mean the
  // device's limit; larger requests are clamped to it.
  uint8_t RdDepth(int requested) const;
  int CmModifyQpToRts(Qp* qp, const CmQpParams& params, const char* why);
  // While one lives (mu_ held throughout), the background thread is not
  // woken; at its end it is woken once, and only if a step is ready. A
  // scope that records many times -- a fabric frame's handling
  // (OnFabricFrame), a PostSend whose WRs go out at post -- then costs one
  // futex at most instead of one per record.
  class WorkWakeDeferral {
   public:
    WorkWakeDeferral(FakeNic* nic, bool on)
        : nic_(on ? nic : nullptr), was_deferred_(on && nic->defer_work_wake_) {
      if (nic_ != nullptr) nic_->defer_work_wake_ = true;
    }
    // A deferral inside another leaves the wake to the outer one.
    ~WorkWakeDeferral() {
      if (nic_ == nullptr) return;
      nic_->defer_work_wake_ = was_deferred_;
      if (!was_deferred_ && nic_->work_waiters_ > 0 && nic_->HasReadyWork()) {
        nic_->work_cv_.notify_all();
      }
    }
    WorkWakeDeferral(const WorkWakeDeferral&) = delete;
    WorkWakeDeferral& operator=(const WorkWakeDeferral&) = delete;

   private:
    FakeNic* const nic_;
    const bool was_deferred_;
  };
  // CM work an API call queues (a REQ, REP, DREQ, an address resolved) is
  // done before the call returns, on the caller's thread, when background
  // progress runs: one of the orders the background thread could have
  // taken, without waking it or contending for mu_ with it (a connection
  // cost ~8 futex calls; tools/bench/conn_bench). As RunRequesterNow does
  // for a post (rxe sends in ibv_post_send); CM work is FIFO and a step
  // takes it before any QP's (StepLocked), so the order is the step's. Off
  // in manual-step and sequenced modes, where who steps decides. Declared
  // after the call's lock, so it runs under it; the background thread is
  // woken once at its end, if it can step (WorkWakeDeferral).
  class CmWorkNow {
   public:
    explicit CmWorkNow(FakeNic* nic)
        : nic_(nic->background_running_ && !nic->sequenced_ ? nic : nullptr),
          defer_(nic, nic_ != nullptr) {}
    ~CmWorkNow() {
      if (nic_ == nullptr) return;
      while (nic_->RunOneCmWorkLocked()) {
      }
    }
    CmWorkNow(const CmWorkNow&) = delete;
    CmWorkNow& operator=(const CmWorkNow&) = delete;

   private:
    FakeNic* const nic_;
    WorkWakeDeferral defer_;  // destroyed after the loop above: one wake
  };
  // Runs the first queued CM work, if any (StepLocked and CmWorkNow): the
  // one place CM work is taken.
  bool RunOneCmWorkLocked();
  // A timer (transport, CM) was armed for `at`: the background thread is
  // woken only if it sleeps past it (it sleeps until its first timer), not
  // for every timer a connection or an in-flight WR arms.
  void TimerArmed(std::chrono::steady_clock::time_point at) {
    if (work_waiters_ > 0 && at < background_wakes_at_) work_cv_.notify_all();
  }
  // Notifies the condition variables that have waiters. Inline: the data
  // path calls it once per sequence number (five times per round trip).
  // The background thread is woken only for work it can do (a QP marked
  // and ready, CM work): a record that changes nothing it could step must
  // not cost a futex, a context switch and a contended mutex (two polling
  // processes on the fabric paid ~16 futex calls per round trip for it).
  // A QP that becomes ready later is marked then, and MarkMaybeReady wakes.
  void WakeWaiters() {
    if (work_waiters_ > 0 && !defer_work_wake_ && AnyReadyWork()) {
      work_cv_.notify_all();
    }
    if (event_waiters_ > 0) event_cv_.notify_all();
  }
  std::string DebugStringLocked();
  std::cv_status WaitForEventUntil(
      std::unique_lock<std::mutex>& lock,
      std::chrono::steady_clock::time_point deadline);
  // GetCqEvent's wait with background progress: read(2) on the thread's
  // own eventfd, interrupted by signals as libibverbs' read is.
  int WaitForCqEvent(std::unique_lock<std::mutex>& lock,
                     ibv_comp_channel* channel, CompChannel** ch);
  int BlockUntil(std::unique_lock<std::mutex>& lock,
                 const std::function<bool()>& ready, const char* what);

  void QueueCmWork(std::string what, std::function<void()> run);
  // `ib_cm_field_size`: the private-data field of the IB CM message that
  // carried the event (0: none); see Personality.
  // Returns the queued event (nullptr if it was dropped).
  CmEvent* DeliverCmEvent(uint64_t id_handle, rdma_cm_event_type type,
                          int status, const void* private_data,
                          size_t private_data_len, uint64_t listen_handle,
                          uint32_t remote_qp_num, size_t ib_cm_field_size = 0);
  void DetachFromPeer(Qp* qp);
  void ReleaseId(CmId* id);  // REQUIRES: no QP, no unacked events
  void SetLocalAddress(CmId* id, Device* device, const std::string& addr,
                       uint16_t port);
  // The listening id bound to addr:port, or to a wildcard address on that
  // port; nullptr when nobody listens there.
  CmId* FindListener(const std::string& addr, uint16_t port);
  // A connection request arriving at `listener`: a new id in
  // kRequestReceived bound to device / local_addr:local_port, its peer at
  // remote_addr:remote_port, with the requester's retry counts and
  // initiator depth; registered with the NIC (fake_nic_cm.cc).
  CmId* NewRequestId(CmId* listener, Device* device,
                     const std::string& local_addr, uint16_t local_port,
                     const std::string& remote_addr, uint16_t remote_port,
                     uint8_t retry_count, uint8_t rnr_retry_count,
                     uint8_t initiator_depth, uint8_t responder_resources);
  int CmFail(int errno_value);
  // librdmacm's checks of Connect's / Accept's rdma_conn_param on `id`
  // (cma.c ucma_valid_param): 0 or EINVAL.
  int ConnParamRefusal(const CmId& id, const rdma_conn_param* param) const;
  // A REJ (reason 28) from the passive id `c` with `data` as its private
  // data: rdma_reject, and a failed rdma_accept.
  void SendReject(CmId* c, std::vector<uint8_t> data);
  // The REP's parameters on the active side's ESTABLISHED.
  static void SetRepEventParams(fake_nic_internal::CmEvent* event,
                                uint8_t rep_initiator_depth,
                                uint8_t rep_responder_resources,
                                uint8_t rep_rnr_retry);

  // ---- the cross-process fabric (fake_nic_remote.cc) ----
  // Frames arriving on a Link and its end; both take mu_.
  void OnFabricFrame(uint64_t link, const fake_nic_internal::FrameView& frame);
  // ExecuteRemote's gather buffer (guarded by mu_).
  std::vector<uint8_t> remote_payload_;
  void OnLinkClosed(uint64_t link);
  // The REQ found no listener in this process: dial one on the fabric.
  // False when nobody listens there either.
  bool DialRemote(CmId* active, const std::vector<uint8_t>& private_data);
  // Sends a CM frame about `id` on its link.
  // `rnr_retry`: the REP's (-1: the id's REQ value).
  void SendCmFrame(CmId* id, uint32_t type, int status,
                   const std::vector<uint8_t>& private_data,
                   int rnr_retry = -1);
  // The requester's half when the peer QP is in another process: the head
  // WR goes out as one request frame and waits in flight for the answer.
  void ExecuteRemote(Qp* qp);
  // A request for `qp` (nullptr: gone) that came on `link`, answered there;
  // an answer for `qp`'s in-flight WR.
  void OnRemoteRequest(Qp* qp, uint64_t link,
                       const fake_nic_internal::FrameView& frame);
  void OnRemoteAnswer(Qp* qp, const fake_nic_internal::FrameView& frame);
  // Verbs QPs across processes (fake_nic_verbs.cc): a frame on a link that
  // a BindFrame opened, the end of such a link, and RTR's linking.
  bool OnVerbsFrame(uint64_t link, const fake_nic_internal::FrameView& frame);
  bool OnVerbsLinkClosed(uint64_t link);
  void LinkVerbsQp(Qp* qp);
  void UnlinkVerbsQp(Qp* qp);
  bool AddressReaches(Qp* qp, uint32_t dest_qp_num);
  int GidEntry(const Device* device, uint32_t index, ibv_gid_entry* entry);
  bool ClaimFabricNode();
  uint16_t LidOf(const Device* device);
  // Whether requests sent on `link` still reach a responder.
  bool LinkAlive(uint64_t link) const;
  // Sends `answer` (its text trimmed to why_len) with `data` as its tail.
  void SendAnswer(uint64_t link, fake_nic_internal::AnswerFrame* answer,
                  const std::vector<uint8_t>& data);
  // The responder's checks on this process's memory for a remote request.
  void RespondToRemote(Qp* responder, const fake_nic_internal::RequestFrame& r,
                       const uint8_t* payload, size_t payload_len,
                       fake_nic_internal::AnswerFrame* answer,
                       std::vector<uint8_t>* data);
  // A receive was posted on `qp` (or its SRQ), or (`changed`) `qp` changed
  // in a way a resend sees: a remote requester parked on an RNR wait
  // (rnr_retry 7) may go (TakeRetryWord).
  void TellRemoteToRetry(Qp* qp, bool changed = false);
  // remote_payload_ given back when a large message grew it.
  void ReleaseLargePayload();
  // A write from another process landed at `responder` (a kLanded record,
  // with FakeNicConfig::record_landings).
  void RecordLanded(Qp* responder, const fake_nic_internal::SendWqe& wqe,
                    uint64_t length);
  // The head WR's first `length` bytes into remote_payload_; false (the WR
  // ended in LOC_PROT_ERR) when the requester's memory faulted.
  bool GatherHeadPayload(Qp* qp, uint64_t length, uint32_t mtu);
  // The head WR ends with `status` (recorded, completed; an error moves the
  // QP to ERR).
  void EndHeadWr(Qp* qp, ibv_wc_status status, const char* why,
                 uint32_t byte_len = 0);
  // The head WR's request went unanswered (the responder QP is gone, not
  // yet RTR, or its process closed the link). True: the requester's
  // transport timer runs (in real time, for an ibv_modify_qp QP on a NIC
  // that runs in the background) and the request is sent again when it
  // runs out, up to retry_cnt times; false: the caller ends the WR in
  // RETRY_EXC_ERR at once (fake_nic_remote.cc).
  bool RequesterWaitsForRetransmit(Qp* qp, const std::string& why);
  // RequesterWaitsForRetransmit, or the head WR in flight ends at once.
  void RequesterTimesOut(Qp* qp, const std::string& why);
  // retry_cnt 7 retries for ever (Personality::
  // transport_retry_7_never_runs_out).
  bool TransportRetriesEndless(const Qp* qp) const;
  // One of the head WR's transport retries spent (a timeout, or a sequence
  // NAK); none left: the WR ends RETRY_EXC_ERR (EndUnansweredHead, `why`)
  // and false.
  bool SpendTransportRetry(Qp* qp, const char* why);
  // A PSN sequence NAK at the head WR's first PSN (ContinuationWithout-
  // First): the message again from its first packet, one transport retry
  // spent (RETRY_EXC_ERR when none is left).
  void ResendFromFirst(Qp* qp);
  // A peer process's "retry now" (kFrameRecvPosted) for `qp`'s head WR:
  // unparks it, or, while its request is still out, tells the RNR NAK
  // that may follow on another link not to park it.
  // `changed`: the word says the responder changed (its RNR timer's tick
  // resends, RetryAtRnrTick), not that a receive came.
  void TakeRetryWord(Qp* qp, bool changed);
  // A QP whose peer's link closed (fake_nic_remote.cc).
  void PeerLinkDied(Qp* qp);
  // ---- Unreliable Connected (fake_nic_unreliable.cc) ----
  // The head WR of a UC QP: its packets go out and it completes.
  void ExecuteUnreliable(Qp* qp);
  // The head WR of a UC QP went out whole: it completes (no answer).
  void CompleteUnreliableHead(Qp* qp);
  // A request frame from another process's UC QP (RespondToRemote).
  void RespondUnreliably(Qp* responder, const fake_nic_internal::RequestFrame& r,
                         const uint8_t* payload, size_t payload_len,
                         fake_nic_internal::AnswerFrame* answer);
  // The first packet of a UC message at a responder still expecting the
  // middle of a message cut earlier (Qp::uc_cut): it is dropped, and the
  // cut message's receive restarts or completes in error, as rxe's
  // do_class_d1e_error has it.
  void UcMessageAfterCut(Qp* responder,
                         const fake_nic_internal::SendWqe& wqe);
  // A UC message's packets [0, sent_packets) at `responder` (in this
  // process or from another's request frame): what lands, what is dropped.
  void DeliverUnreliable(Qp* responder, const fake_nic_internal::SendWqe& wqe,
                         uint64_t length, uint32_t mtu, uint32_t sent_packets,
                         const uint8_t* payload);
  // The transport timers that ran out (the background thread's loop).
  void FireTransportTimersLocked();
  struct TransportTimer {
    std::chrono::steady_clock::time_point at;
    uint32_t qp_num = 0;
    uint64_t token = 0;  // the unanswered try's (SendWqe::token)
    std::string why;
    // An RNR timer's tick for a parked head (RetryAtRnrTick; token is
    // Qp::rnr_tick_token), not a retransmit timer.
    bool rnr_tick = false;
  };
  std::vector<TransportTimer> transport_timers_;  // few: one a dead peer's QP
  // rdma_cm's real-time timers of a disconnect: a DREQ no DREP answered
  // (Personality::dreq_timeout_ms: its id gets DISCONNECTED with
  // -ETIMEDOUT, unless it has had one) and an id's timewait (Personality::
  // timewait_ms: TIMEWAIT_EXIT). Destroying the id cancels both.
  struct CmTimer {
    std::chrono::steady_clock::time_point at;
    uint64_t handle = 0;
    bool timewait = false;  // else the DREQ's timeout
  };
  std::vector<CmTimer> cm_timers_;
  // The earliest timer of either kind; false when none is armed.
  bool NextTimerLocked(std::chrono::steady_clock::time_point* at) const;
  // The CM timers that ran out (the background thread's loop).
  void FireCmTimersLocked();
  // The DREQ `c` sent waits for its DREP: arms its timeout.
  void ArmDreqTimer(fake_nic_internal::CmId* c);
  // `c` enters the IB CM's timewait: TIMEWAIT_EXIT after Personality::
  // timewait_ms (once; none when it is 0).
  void EnterTimewait(fake_nic_internal::CmId* c);
  // `c`'s DISCONNECTED with `status`, once (CmId::disconnect_seen).
  void DeliverDisconnectedOnce(fake_nic_internal::CmId* c, int status);
  // A DREQ reached `c` (its peer's rdma_disconnect or rdma_destroy_id, or
  // the peer process's end): DISCONNECTED; `c` owes the DREP when the
  // personality waits for it, and its QP goes to ERR when the personality
  // says so (`why` names the move).
  void DreqArrived(fake_nic_internal::CmId* c, const char* why);
  // The answer to the DREQ the id `handle` sent came (a DREP, the peer's
  // end, or with -ETIMEDOUT its timeout): DISCONNECTED once, and timewait.
  void DreqAnswered(uint64_t handle, int status);
  // `c` took a DREQ it has not answered (CmId::drep_owed): the DREP goes
  // now, `c` enters timewait, and the peer that disconnected gets its
  // DISCONNECTED.
  void SendDrep(fake_nic_internal::CmId* c);
  // ---- sequenced mode (fake_nic_remote.cc; fake_nic_fabric_sequence.h) ----
  // The application thread waits on the fabric: reports it, then blocks
  // until a granted step ends the wait (`ready` holds, or any step of this
  // process when `ready` is null) or the Sequencer releases it (`releasable`
  // only). Returns 1 when released, -1 when the Sequencer is gone (errno
  // EIO), else 0. Several threads may wait at once; the process reports
  // kWait when its first waiter comes and no other thread of it was told to
  // go and is still leaving, kRun when a step ends any wait. REQUIRES
  // sequenced_.
  int SequencedWait(std::unique_lock<std::mutex>& lock,
                    const std::function<bool()>* ready, const char* what,
                    bool releasable);
  void OnSequencerGrant(uint32_t kind, uint64_t step);  // fabric thread
  void OnSequencerRelease();                            // fabric thread
  uint64_t SequencerLocalPending();                     // fabric thread
  void OnSequencerLost();                               // fabric thread
  // kWait's text and flag for all current waiters. REQUIRES mu_ held.
  void SequencerWaitLocked(std::string* where, bool* releasable) const;

  // The data-path calls (post, poll) take mu_ spinning on try_lock a moment
  // before they sleep for it: two threads polling one NIC on two cores
  // otherwise meet in futex waits and wakes at nearly every poll (perf on
  // //tools/bench:program_bench threads_polling: ~35% of the time in
  // lll_lock_wait / lll_lock_wake, issue 28), while a holder keeps mu_ for
  // well under a microsecond.
  // Only under background progress, where threads poll: in manual mode
  // (threads calling Step) spinning only takes the core from the holder.
  std::unique_lock<std::mutex> LockHot() {
    if (!lockless_empty_polls_.load(std::memory_order_relaxed)) {
      return std::unique_lock<std::mutex>(mu_);
    }
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    for (int i = 0; i < kLockSpins && !lock.owns_lock(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
      if (lock.try_lock()) break;
    }
    if (!lock.owns_lock()) lock.lock();
    return lock;
  }
  static constexpr int kLockSpins = 2000;

  // True when someone looks at FakeNicEvent records (an event tap: the
  // RPMA_HARNESS_LOG log, a trace file, an observer): only then are their
  // address details worked out.
  bool Observed() const { return !event_taps_.empty(); }
  // Nobody watching costs a test per stream, not a second data path: with
  // no event tap an executed WR builds no event object (the sequence still
  // advances, so the numbering is the same either way), with no
  // source-read or NIC-write tap those calls are one empty-vector test,
  // and with no execute hook ApplyExecuteHook returns at its first test.

  const FakeNicConfig config_;
  std::mutex mu_;
  std::condition_variable work_cv_;   // background thread: work may exist
  std::condition_variable event_cv_;  // blocked getters: an event may exist
  // Threads waiting on each condition variable: a notify with nobody
  // waiting is a futex call the data path does not need to make.
  int work_waiters_ = 0;
  // Set while a WorkWakeDeferral lives.
  bool defer_work_wake_ = false;
  int event_waiters_ = 0;
  uint64_t rng_state_;
  Landing landing_;             // FakeNicConfig::landing, SetLanding
  uint64_t landing_rng_state_;  // the seed's stream for Landing::kPieces
  uint64_t next_seq_ = 1;
  uint64_t next_handle_ = 1;
  uint32_t next_mr_ordinal_ = 1;
  size_t slot_cursor_ = 0;  // the in-turn schedule resumes at this slot
  uint16_t next_ephemeral_port_ = 40000;

  std::vector<std::unique_ptr<Device>> devices_;
  std::map<const void*, std::unique_ptr<Pd>> pds_;
  std::map<const void*, std::unique_ptr<Mr>> mrs_;
  // Looked up on every post and poll: hashed, so the cost does not grow
  // with the number of QPs, CQs and MRs.
  std::unordered_map<uint32_t, Mr*> mrs_by_lkey_;
  std::unordered_map<uint32_t, Mr*> mrs_by_rkey_;
  std::map<const void*, std::unique_ptr<CompChannel>> comp_channels_;
  // The owners of the live CQs and QPs, by slot (nullptr: destroyed, or
  // a CQ slot free for reuse): an entry of 8 bytes instead of a hashed
  // node of 40 per object; the slot tables below find them.
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Qp>> qps_;
  // Handles validated without a hashed lookup (FindQp / FindCq): the
  // ibv_qp / ibv_cq handed out carries its slot in `handle`, and a handle is
  // ours when the slot holds the object whose `base` it is. A destroyed
  // object is not freed but retired: emptied at once (its rings and buffers
  // released), and reused only after kRetiredKept later destroys, oldest
  // first, so a stale handle still points at our memory and fails the check
  // even when the program creates a new QP / CQ right after the destroy.
  static constexpr size_t kRetiredKept = 64;
  std::vector<Cq*> cq_slots_;  // by Cq::slot; nullptr once destroyed
  std::vector<size_t> free_cq_slots_;
  std::deque<std::unique_ptr<Qp>> retired_qps_;
  std::deque<std::unique_ptr<Cq>> retired_cqs_;
  // Hashed, not ordered (nothing walks them in order): a node of 32
  // bytes instead of 64 per QP / id (3 nodes per QP at 10 000 pairs).
  std::unordered_map<uint32_t, Qp*> qps_by_num_;
  std::map<const void*, std::unique_ptr<Srq>> srqs_;
  std::vector<Qp*> qp_order_;             // creation order (DebugString)
  std::vector<Qp*> qp_slots_;             // by Qp::slot; nullptr once destroyed
  std::vector<size_t> free_qp_slots_;     // destroyed QPs' slots, taken again
  std::vector<uint64_t> marked_;          // one bit per slot
  std::vector<uint64_t> marked_summary_;  // one bit per non-zero marked_ word
  // How many bits of marked_ are set, and a slot whose bit was set last or
  // that the scan left as the only one marked: when the count is 1 and that
  // slot's bit is set, it is the only marked QP and StepLocked runs it
  // without a scan (the scan would find it from any cursor).
  size_t marked_count_ = 0;
  size_t last_marked_ = 0;
  LookupCache<uint32_t, Mr> lkey_cache_;
  LookupCache<uint32_t, Mr> rkey_cache_;
  std::map<const void*, std::unique_ptr<EventChannel>> event_channels_;
  // See qps_by_num_.
  std::unordered_map<const void*, std::unique_ptr<CmId>> ids_;
  std::unordered_map<uint64_t, CmId*> ids_by_handle_;
  std::map<std::string, uint64_t> bound_;  // "addr|port" -> id handle
  std::map<const void*, std::unique_ptr<CmEvent>> outstanding_events_;
  std::deque<CmWork> cm_work_;
  // The taps (nic/nic_tap.h), in the order added: the RPMA_HARNESS_LOG log
  // and the trace file (FakeNicConfig::trace_path) first, made at
  // construction. `owned` holds an adapter the NIC made (those two,
  // AddObserver's). The three lists are what the data path walks, rebuilt
  // on every AddTap / RemoveTap.
  struct TapEntry {
    int handle = 0;
    NicTap* tap = nullptr;
    unsigned what = 0;
    std::unique_ptr<NicTap> owned;
  };
  std::vector<TapEntry> taps_;
  std::vector<NicTap*> event_taps_;
  std::vector<NicTap*> source_read_taps_;
  std::vector<NicTap*> write_taps_;
  int next_tap_ = 1;
  int AddTapLocked(NicTap* tap, unsigned what, std::unique_ptr<NicTap> owned);
  // The constructor's taps: the RPMA_HARNESS_LOG log, the trace file.
  void AddBuiltInTaps();
  class LogTap;
  class TraceFileTap;
  std::function<ExecuteVerdict(const ExecuteInfo&)> execute_hook_;

  bool background_running_ = false;
  bool stop_background_ = false;
  std::thread background_;

  // The cross-process fabric (FakeNicConfig::fabric_dir), or null.
  std::unique_ptr<fake_nic_internal::Fabric> fabric_;
  std::map<uint64_t, uint64_t> id_by_link_;  // link -> CmId handle
  // Verbs QPs across processes: link -> the local QP number it serves
  // (the links a QP dialed and the ones that dialed it), and this NIC's
  // fabric node (0: none claimed yet; Fabric::ClaimNode).
  std::map<uint64_t, uint32_t> verbs_qp_by_link_;
  uint32_t fabric_node_ = 0;
  uint64_t next_token_ = 1;
  // Sequenced mode (guarded by mu_ once threads run).
  bool sequenced_ = false;
  uint64_t seq_step_ = 0;  // the last step granted to this process
  // Every application thread waiting on the fabric, each with its own
  // predicate and go flag; all are re-tested after every granted step.
  struct SeqWaiter {
    const std::function<bool()>* ready = nullptr;
    std::string where;
    bool releasable = false;
    bool go = false;
    bool released = false;
  };
  std::list<SeqWaiter*> seq_waiters_;
  // Waiters told to go that have not left SequencedWait yet: they run
  // (the Sequencer was told kRun), so a new waiter does not report kWait.
  int seq_leaving_ = 0;
  bool seq_reported_wait_ = false;  // kWait sent, no kRun / kRelease since
  bool seq_lost_ = false;           // the Sequencer went away
  // While the background thread waits: when it wakes by itself (its first
  // timer; max() when it has none). See TimerArmed. Last: the members above
  // keep their places (the data path's are laid out for it).
  std::chrono::steady_clock::time_point background_wakes_at_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_H_
