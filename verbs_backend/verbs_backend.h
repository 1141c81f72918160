// verbs_backend.h: the one seam between the rpma layer and a NIC.
//
// The rpma layer (rpma/) never calls libibverbs or librdmacm directly; it
// calls a VerbsBackend. Two kinds of backend exist:
//   - the real one (RdmaCoreBackend, rdma_core_backend.h), a straight
//     pass-through to libibverbs and librdmacm;
//   - the fake NIC (nic/fake_nic.h), a deterministic in-process NIC.
// Tests may also install a GoogleMock MockVerbsBackend
// (mock/mock_verbs_backend.h).
//
// Every method is named after the rdma-core function it stands for and keeps
// that function's types, ownership and return convention, so the contract of
// each method is the rdma-core man page of that function (noted beside it).
// The exact ibv_send_wr / ibv_recv_wr the rpma layer builds is what a backend
// receives, and the ibv_wc a backend fills is what the user sees.
//
// Objects (ibv_context, ibv_pd, ibv_mr, ibv_cq, ibv_comp_channel, ibv_qp,
// rdma_event_channel, rdma_cm_id, rdma_cm_event) are created and owned by the
// backend that returned them and must only be passed back to that backend.
// Their public fields (mr->lkey, mr->rkey, qp->qp_num, channel->fd,
// id->verbs, id->qp, event->param.conn.private_data, ...) are valid to read.
//
// Return conventions (as in rdma-core):
//   - "ibv errno":  0 on success, otherwise an errno value. PostSend/PostRecv
//     return whatever the provider returns: positive errno on most providers,
//     negative on some (siw), so callers must treat any non-zero as failure.
//   - "ptr":        the object, or nullptr with errno set.
//   - "cm":         0 on success, -1 with errno set (librdmacm convention).
//
// Thread safety: every method may be called from any thread concurrently, as
// with rdma-core, except that one object must not be destroyed while another
// thread uses it.
//
// Example:
//   VerbsBackend& nic = ...;
//   ibv_context* ctx;
//   if (nic.GetContextByAddress("192.168.0.1", /*local=*/true, &ctx)) ...
//   ibv_pd* pd = nic.AllocPd(ctx);
//   ibv_mr* mr = nic.RegMr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);

#ifndef RPMA_HARNESS_VERBS_BACKEND_VERBS_BACKEND_H_
#define RPMA_HARNESS_VERBS_BACKEND_VERBS_BACKEND_H_

// Every C++ header of the harness includes this one first; say plainly what
// is wrong before the compiler lists every C++17 construct it cannot parse.
#if __cplusplus < 201703L
#error "rpma-harness's C++ headers need C++17: compile this target with -std=c++17 (Bazel: copts = RPMA_HARNESS_CXXOPTS from @rpma_harness//:copts.bzl, or --cxxopt=-std=c++17; CMake: the rpma_harness:: targets ask for cxx_std_17)"
#endif

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rpma_harness {

// What a library built over a backend (the librpma API, rpma/) tells a
// backend that checks how the program uses it (the usage checker,
// check/checking_backend.h): what only that library knows -- the size_t
// length before it became a 32-bit SGE, the size a peer's descriptor
// announced, which of its own objects are alive. The library asks its
// backend for one (VerbsBackend::library_checker()); a backend that does
// not check has none, so an unchecked program pays one branch.
class LibraryChecker {
 public:
  virtual ~LibraryChecker() = default;
  // `call` is the library function ("rpma_write_with_imm").
  virtual void CheckLength(const char* call, size_t len) = 0;
  // [offset, offset + len) against a remote MR of `size` bytes.
  virtual void CheckRemoteRange(const char* call, size_t offset, size_t len,
                                uint64_t size, uint64_t raddr,
                                uint32_t rkey) = 0;
  // A library object came to life / was deleted; `kind` is "rpma_peer", ...
  virtual void NoteCreated(const char* kind, const void* object) = 0;
  virtual void NoteDeleted(const void* object) = 0;
  // Memory the library itself reuses on purpose (librpma's flush read
  // buffer): not subject to the overlap check.
  virtual void ExemptFromOverlap(uintptr_t addr, size_t len) = 0;
};

// A send_flags bit beside rdma-core's IBV_SEND_* (bits 0-4). Set on the
// first WR of a chain, PostSend posts the whole chain or none of it, and a
// refused chain's *bad_wr is its head: what ibv_wr_complete(3) promises
// ("the entire posting will be aborted"), which the drop-in
// libibverbs.so.1's ibv_wr_* API needs. The fake NIC honours it; the
// rdma-core backend refuses it (EOPNOTSUPP): ibv_post_send cannot promise
// it.
inline constexpr unsigned int kSendWholeChain = 1u << 30;

// What a send WR's opcode field stands for in place of a value
// ibv_post_send(3) does not define (12: inside the enum's range, no
// opcode of rdma-core 44).
inline constexpr ibv_wr_opcode kUndefinedWrOpcode =
    static_cast<ibv_wr_opcode>(12);

// A send WR's opcode as the program wrote it. A program may put any value
// there, and loading an enum outside its range is undefined behaviour
// (UBSan's -fsanitize=enum), so the field is read as an integer; a value
// rdma-core 44's enum ibv_wr_opcode does not define is kUndefinedWrOpcode.
inline ibv_wr_opcode PostedOpcode(const ibv_send_wr& wr) {
  static_assert(sizeof(wr.opcode) == sizeof(uint32_t), "an int-sized enum");
  uint32_t raw = 0;
  __builtin_memcpy(&raw, &wr.opcode, sizeof(raw));
  if (raw <= IBV_WR_DRIVER1 || raw == IBV_WR_ATOMIC_WRITE) {
    return static_cast<ibv_wr_opcode>(raw);
  }
  return kUndefinedWrOpcode;
}

class VerbsBackend {
 public:
  virtual ~VerbsBackend() = default;

  // A short name for logs and errors ("fake", "rdma-core", "mock").
  virtual const char* Name() const = 0;

  // ---- devices -------------------------------------------------------------

  // Finds the RDMA device that owns the IPv4/IPv6 address `addr` (local=true)
  // or that routes to it (local=false), as rdma_bind_addr / rdma_resolve_addr
  // on an RDMA_PS_TCP id do. The context stays valid for the lifetime of the
  // backend; the caller does not close it.
  // Returns "cm": ENODEV when no device owns / routes to the address, EINVAL
  // when `addr` is not an address.
  virtual int GetContextByAddress(const char* addr, bool local,
                                  ibv_context** ctx) = 0;

  // ibv_query_device(3). Returns "ibv errno".
  virtual int QueryDevice(ibv_context* ctx, ibv_device_attr* attr) = 0;

  // ---- protection domains and memory regions --------------------------------

  virtual ibv_pd* AllocPd(ibv_context* ctx) = 0;  // ibv_alloc_pd(3), "ptr"
  virtual int DeallocPd(ibv_pd* pd) = 0;  // ibv_dealloc_pd(3), EBUSY if in use

  // ibv_reg_mr(3): `access` is a mask of IBV_ACCESS_*. REMOTE_WRITE (and
  // REMOTE_ATOMIC) require LOCAL_WRITE (EINVAL otherwise). "ptr".
  virtual ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) = 0;
  virtual int DeregMr(ibv_mr* mr) = 0;  // ibv_dereg_mr(3), "ibv errno"

  // ---- completion queues ----------------------------------------------------

  // ibv_create_comp_channel(3): channel->fd is pollable (POLLIN when a CQ
  // event is pending) and may be made O_NONBLOCK by the user. "ptr".
  virtual ibv_comp_channel* CreateCompChannel(ibv_context* ctx) = 0;
  virtual int DestroyCompChannel(
      ibv_comp_channel* channel) = 0;  // EBUSY if CQs use it

  // ibv_create_cq(3): at least `cqe` entries (cq->cqe holds the real depth).
  // `channel` may be nullptr. "ptr".
  virtual ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                           ibv_comp_channel* channel, int comp_vector) = 0;
  virtual int DestroyCq(
      ibv_cq* cq) = 0;  // ibv_destroy_cq(3), EBUSY if a QP uses it

  // ibv_req_notify_cq(3): arm the CQ for one completion event. "ibv errno".
  virtual int ReqNotifyCq(ibv_cq* cq, int solicited_only) = 0;

  // ibv_get_cq_event(3): blocks until an event arrives unless channel->fd is
  // O_NONBLOCK, then fails with errno EAGAIN. "cm" (0 or -1 with errno).
  virtual int GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                         void** cq_context) = 0;
  virtual void AckCqEvents(ibv_cq* cq,
                           unsigned int nevents) = 0;  // ibv_ack_cq_events(3)

  // ibv_poll_cq(3): returns the number of completions written to `wc`
  // (0 when empty), or a negative value on error (for example an overrun CQ).
  virtual int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) = 0;

  // ---- data path ------------------------------------------------------------

  // ibv_post_send(3): on failure sets *bad_wr to the first WR not posted; the
  // WRs before it were posted. Returns the provider's errno (sign as the
  // provider has it). With kSendWholeChain on the first WR, the chain is
  // posted whole or not at all.
  virtual int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = 0;
  // ibv_post_recv(3), same convention.
  virtual int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = 0;

  // ibv_query_qp(3). "ibv errno".
  virtual int QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                      ibv_qp_init_attr* init_attr) = 0;

  // ---- connection management (librdmacm)
  // -------------------------------------

  // rdma_create_event_channel(3): channel->fd is pollable and may be made
  // O_NONBLOCK. "ptr".
  virtual rdma_event_channel* CreateEventChannel() = 0;
  virtual void DestroyEventChannel(rdma_event_channel* channel) = 0;

  // rdma_create_id(3) with RDMA_PS_TCP (reliable connected QPs). A nullptr
  // channel makes the id synchronous: ResolveAddr / ResolveRoute return when
  // done. "cm".
  virtual int CreateId(rdma_event_channel* channel, rdma_cm_id** id,
                       void* context) = 0;
  // rdma_destroy_id(3). The id's QP must have been destroyed and all its
  // events acknowledged. "cm".
  virtual int DestroyId(rdma_cm_id* id) = 0;

  // rdma_getaddrinfo(3) + rdma_resolve_addr(3) on a synchronous id: sets
  // id->verbs to the device that routes to addr. "cm".
  virtual int ResolveAddr(rdma_cm_id* id, const char* addr, const char* port,
                          int timeout_ms) = 0;
  // rdma_resolve_route(3) on a synchronous id. "cm".
  virtual int ResolveRoute(rdma_cm_id* id, int timeout_ms) = 0;
  // rdma_getaddrinfo(3) (passive) + rdma_bind_addr(3): sets id->verbs to the
  // device that owns addr. EADDRINUSE if the address:port is taken. "cm".
  virtual int BindAddr(rdma_cm_id* id, const char* addr, const char* port) = 0;
  // rdma_listen(3): connection requests arrive on the id's channel as
  // RDMA_CM_EVENT_CONNECT_REQUEST events whose event->id is a new id. "cm".
  virtual int Listen(rdma_cm_id* id, int backlog) = 0;

  // rdma_get_cm_event(3): blocks unless channel->fd is O_NONBLOCK, then fails
  // with errno EAGAIN. The event stays valid until AckCmEvent. "cm".
  virtual int GetCmEvent(rdma_event_channel* channel,
                         rdma_cm_event** event) = 0;
  virtual int AckCmEvent(
      rdma_cm_event* event) = 0;  // rdma_ack_cm_event(3), "cm"

  // rdma_create_qp(3): an RC QP on `pd`, moved to the state the CM needs
  // (INIT); sets id->qp. "cm".
  virtual int CreateQp(rdma_cm_id* id, ibv_pd* pd,
                       ibv_qp_init_attr* init_attr) = 0;
  virtual void DestroyQp(rdma_cm_id* id) = 0;  // rdma_destroy_qp(3)

  // rdma_connect(3) / rdma_accept(3): private data of at most 56 bytes on
  // connect and 196 on accept (RDMA_PS_TCP over IB; EINVAL beyond). "cm".
  virtual int Connect(rdma_cm_id* id, rdma_conn_param* param) = 0;
  virtual int Accept(rdma_cm_id* id, rdma_conn_param* param) = 0;
  // rdma_reject(3): at most 148 bytes of private data. "cm".
  virtual int Reject(rdma_cm_id* id, const void* private_data,
                     uint8_t private_data_len) = 0;
  // rdma_disconnect(3): moves the QP to ERR (outstanding WRs flush) and
  // delivers RDMA_CM_EVENT_DISCONNECTED at both ends. "cm".
  virtual int Disconnect(rdma_cm_id* id) = 0;
  // rdma_migrate_id(3): events of `id` arrive on `channel` from now on. "cm".
  virtual int MigrateId(rdma_cm_id* id, rdma_event_channel* channel) = 0;
  // rdma_set_option(3): RDMA_OPTION_ID_ACK_TIMEOUT (a uint8_t, before the
  // QP reaches RTS) sets the QP's local ACK timeout, 4.096 us x 2^value;
  // RDMA_OPTION_ID_TOS, _REUSEADDR and _AFONLY are accepted. "cm".
  virtual int SetOption(rdma_cm_id* id, int level, int optname, void* optval,
                        size_t optlen) = 0;

  // ---- librpma 1.3: shared receive queues, extended device query, MR advice
  // (added for issue 10; kept at the end of the interface to ease merging).

  // ibv_create_srq(3): an SRQ on `pd`. init_attr->attr.max_wr / max_sge are
  // written back with what the SRQ really has. EINVAL when they exceed the
  // device's max_srq_wr / max_srq_sge. "ptr". A QP uses the SRQ when
  // CreateQp's init_attr->srq names it: its receives are then taken from the
  // SRQ (PostRecv on that QP is EINVAL) and complete on the QP's recv_cq.
  virtual ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* init_attr) = 0;
  // ibv_destroy_srq(3): EBUSY while a QP uses it. "ibv errno".
  virtual int DestroySrq(ibv_srq* srq) = 0;
  // ibv_post_srq_recv(3): same convention as PostRecv (ENOMEM when full).
  virtual int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                          ibv_recv_wr** bad_wr) = 0;
  // ibv_query_device_ex(3) with input NULL: the device's attributes,
  // including odp_caps and device_cap_flags_ex. "ibv errno".
  virtual int QueryDeviceEx(ibv_context* ctx, ibv_device_attr_ex* attr) = 0;
  // ibv_advise_mr(3): EOPNOTSUPP when the device has no advise_mr (no ODP).
  // "ibv errno".
  virtual int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags,
                       ibv_sge* sg_list, uint32_t num_sge) = 0;

  // ---- QP attributes (appended after the CM methods) ------------------------

  // ibv_modify_qp(3): moves the QP through the RC state machine
  // (RESET -> INIT -> RTR -> RTS, SQD, any -> ERR / RESET) and sets the
  // attributes `attr_mask` names; each transition requires the mask bits of
  // the table in ibv_modify_qp(3) (EINVAL otherwise). "ibv errno".
  virtual int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) = 0;

  // ---- verbs without rdma_cm (the drop-in libibverbs.so.1, issue 22) -------

  // ibv_get_device_list(3) + ibv_open_device(3): one open context per device
  // the backend has, in the order ibv_get_device_list lists them (the same
  // contexts on every call). "ibv errno".
  virtual int ListDevices(std::vector<ibv_context*>* contexts) = 0;
  // ibv_query_port(3): the port's attributes. "ibv errno".
  virtual int QueryPort(ibv_context* ctx, uint8_t port_num,
                        ibv_port_attr* attr) = 0;
  // ibv_query_gid_ex(3): GID table entry `index` of the port (gid,
  // gid_type, ndev_ifindex). EINVAL past the table, ENODATA for an empty
  // entry. "ibv errno".
  virtual int QueryGid(ibv_context* ctx, uint8_t port_num, uint32_t index,
                       ibv_gid_entry* entry) = 0;
  // ibv_create_qp(3): a QP in RESET that the program moves through
  // ibv_modify_qp(3) itself; RTR's dest_qp_num and address vector name its
  // peer. "ptr".
  virtual ibv_qp* CreateVerbsQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) = 0;
  // ibv_destroy_qp(3) of a QP CreateVerbsQp made. "ibv errno".
  virtual int DestroyVerbsQp(ibv_qp* qp) = 0;

  // ---- asynchronous events and SRQ attributes (issue 22) --------------------

  // ibv_get_async_event(3): the next asynchronous event of `ctx`, blocking
  // as a read of ctx->async_fd does (O_NONBLOCK on that fd: -1 with errno
  // EAGAIN when none is pending; a signal: EINTR). 0, or -1 with errno.
  virtual int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) = 0;
  // ibv_ack_async_event(3): an event GetAsyncEvent returned is acknowledged
  // (destroying its CQ, QP or SRQ waits until it is).
  virtual void AckAsyncEvent(ibv_async_event* event) = 0;
  // ibv_modify_srq(3): IBV_SRQ_MAX_WR resizes, IBV_SRQ_LIMIT arms the limit
  // event. "ibv errno".
  virtual int ModifySrq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) = 0;
  // ibv_query_srq(3). "ibv errno".
  virtual int QuerySrq(ibv_srq* srq, ibv_srq_attr* attr) = 0;

  // ---- the library's checker -------------------------------------------------

  // The checker of how the program uses this backend, or nullptr (the
  // default: a backend that does not check). A wrapper passes its target's
  // on (ForwardingBackend), so a checker under a FaultInjector still hears
  // the library.
  virtual LibraryChecker* library_checker() { return nullptr; }
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_VERBS_BACKEND_VERBS_BACKEND_H_
