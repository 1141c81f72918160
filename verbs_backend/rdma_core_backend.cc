#include "verbs_backend/rdma_core_backend.h"

#include <errno.h>
#include <rdma/rdma_cma.h>

#include <cstring>

namespace rpma_harness {
namespace {

// rdma_getaddrinfo for a (possibly passive) RDMA_PS_TCP address. Returns 0 or
// -1 with errno set; rdma_getaddrinfo itself reports through its return value
// in some versions and errno in others, so both are folded into errno.
int GetAddrInfo(const char* addr, const char* port, bool passive,
                rdma_addrinfo** out) {
  rdma_addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_port_space = RDMA_PS_TCP;
  if (passive) hints.ai_flags = RAI_PASSIVE;
  int ret = rdma_getaddrinfo(addr, port, &hints, out);
  if (ret != 0) {
    if (errno == 0) errno = EINVAL;
    return -1;
  }
  return 0;
}

// How long GetContextByAddress waits for address resolution (as librpma
// does with RPMA_DEFAULT_TIMEOUT_MS).
constexpr int kResolveTimeoutMs = 1000;

}  // namespace

RdmaCoreBackend::~RdmaCoreBackend() {
  for (auto& [context, id] : pinned_) rdma_destroy_id(id);
  for (ibv_context* ctx : opened_) ibv_close_device(ctx);
}

int RdmaCoreBackend::GetContextByAddress(const char* addr, bool local,
                                         ibv_context** ctx) {
  rdma_addrinfo* info = nullptr;
  if (GetAddrInfo(addr, nullptr, local, &info)) return -1;
  rdma_cm_id* id = nullptr;
  int ret = rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP);
  if (ret == 0) {
    ret = local ? rdma_bind_addr(id, info->ai_src_addr)
                : rdma_resolve_addr(id, info->ai_src_addr, info->ai_dst_addr,
                                    kResolveTimeoutMs);
    if (ret == 0 && id->verbs == nullptr) {
      // Bound to a wildcard or a non-RDMA interface: no device owns it.
      errno = ENODEV;
      ret = -1;
    }
    int saved = errno;
    bool keep = false;
    if (ret == 0) {
      *ctx = id->verbs;
      std::lock_guard<std::mutex> lock(mu_);
      keep = pinned_.emplace(id->verbs, id).second;
    }
    if (!keep) rdma_destroy_id(id);
    errno = saved;
  }
  int saved = errno;
  rdma_freeaddrinfo(info);
  errno = saved;
  return ret;
}

int RdmaCoreBackend::QueryDevice(ibv_context* ctx, ibv_device_attr* attr) {
  return ibv_query_device(ctx, attr);
}

ibv_pd* RdmaCoreBackend::AllocPd(ibv_context* ctx) { return ibv_alloc_pd(ctx); }
int RdmaCoreBackend::DeallocPd(ibv_pd* pd) { return ibv_dealloc_pd(pd); }

ibv_mr* RdmaCoreBackend::RegMr(ibv_pd* pd, void* addr, size_t length,
                               int access) {
  return ibv_reg_mr(pd, addr, length, access);
}
int RdmaCoreBackend::DeregMr(ibv_mr* mr) { return ibv_dereg_mr(mr); }

ibv_comp_channel* RdmaCoreBackend::CreateCompChannel(ibv_context* ctx) {
  return ibv_create_comp_channel(ctx);
}
int RdmaCoreBackend::DestroyCompChannel(ibv_comp_channel* channel) {
  return ibv_destroy_comp_channel(channel);
}
ibv_cq* RdmaCoreBackend::CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                                  ibv_comp_channel* channel, int comp_vector) {
  return ibv_create_cq(ctx, cqe, cq_context, channel, comp_vector);
}
int RdmaCoreBackend::DestroyCq(ibv_cq* cq) { return ibv_destroy_cq(cq); }
int RdmaCoreBackend::ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  return ibv_req_notify_cq(cq, solicited_only);
}
int RdmaCoreBackend::GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                                void** cq_context) {
  return ibv_get_cq_event(channel, cq, cq_context);
}
void RdmaCoreBackend::AckCqEvents(ibv_cq* cq, unsigned int nevents) {
  ibv_ack_cq_events(cq, nevents);
}
int RdmaCoreBackend::PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  return ibv_poll_cq(cq, num_entries, wc);
}

int RdmaCoreBackend::PostSend(ibv_qp* qp, ibv_send_wr* wr,
                              ibv_send_wr** bad_wr) {
  if (wr != nullptr && (wr->send_flags & kSendWholeChain) != 0) {
    if (bad_wr != nullptr) *bad_wr = wr;
    return EOPNOTSUPP;  // see kSendWholeChain
  }
  return ibv_post_send(qp, wr, bad_wr);
}
int RdmaCoreBackend::PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                              ibv_recv_wr** bad_wr) {
  return ibv_post_recv(qp, wr, bad_wr);
}
int RdmaCoreBackend::QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                             ibv_qp_init_attr* init_attr) {
  return ibv_query_qp(qp, attr, attr_mask, init_attr);
}

rdma_event_channel* RdmaCoreBackend::CreateEventChannel() {
  return rdma_create_event_channel();
}
void RdmaCoreBackend::DestroyEventChannel(rdma_event_channel* channel) {
  rdma_destroy_event_channel(channel);
}
int RdmaCoreBackend::CreateId(rdma_event_channel* channel, rdma_cm_id** id,
                              void* context) {
  return rdma_create_id(channel, id, context, RDMA_PS_TCP);
}
int RdmaCoreBackend::DestroyId(rdma_cm_id* id) { return rdma_destroy_id(id); }

int RdmaCoreBackend::ResolveAddr(rdma_cm_id* id, const char* addr,
                                 const char* port, int timeout_ms) {
  rdma_addrinfo* info = nullptr;
  if (GetAddrInfo(addr, port, false, &info)) return -1;
  int ret =
      rdma_resolve_addr(id, info->ai_src_addr, info->ai_dst_addr, timeout_ms);
  int saved = errno;
  rdma_freeaddrinfo(info);
  errno = saved;
  return ret;
}
int RdmaCoreBackend::ResolveRoute(rdma_cm_id* id, int timeout_ms) {
  return rdma_resolve_route(id, timeout_ms);
}
int RdmaCoreBackend::BindAddr(rdma_cm_id* id, const char* addr,
                              const char* port) {
  rdma_addrinfo* info = nullptr;
  if (GetAddrInfo(addr, port, true, &info)) return -1;
  int ret = rdma_bind_addr(id, info->ai_src_addr);
  int saved = errno;
  rdma_freeaddrinfo(info);
  errno = saved;
  return ret;
}
int RdmaCoreBackend::Listen(rdma_cm_id* id, int backlog) {
  return rdma_listen(id, backlog);
}
int RdmaCoreBackend::GetCmEvent(rdma_event_channel* channel,
                                rdma_cm_event** event) {
  return rdma_get_cm_event(channel, event);
}
int RdmaCoreBackend::AckCmEvent(rdma_cm_event* event) {
  return rdma_ack_cm_event(event);
}
int RdmaCoreBackend::CreateQp(rdma_cm_id* id, ibv_pd* pd,
                              ibv_qp_init_attr* init_attr) {
  return rdma_create_qp(id, pd, init_attr);
}
void RdmaCoreBackend::DestroyQp(rdma_cm_id* id) { rdma_destroy_qp(id); }
int RdmaCoreBackend::Connect(rdma_cm_id* id, rdma_conn_param* param) {
  return rdma_connect(id, param);
}
int RdmaCoreBackend::Accept(rdma_cm_id* id, rdma_conn_param* param) {
  return rdma_accept(id, param);
}
int RdmaCoreBackend::Reject(rdma_cm_id* id, const void* private_data,
                            uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}
int RdmaCoreBackend::Disconnect(rdma_cm_id* id) { return rdma_disconnect(id); }
int RdmaCoreBackend::SetOption(rdma_cm_id* id, int level, int optname,
                               void* optval, size_t optlen) {
  return rdma_set_option(id, level, optname, optval, optlen);
}
int RdmaCoreBackend::MigrateId(rdma_cm_id* id, rdma_event_channel* channel) {
  return rdma_migrate_id(id, channel);
}
int RdmaCoreBackend::ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  return ibv_modify_qp(qp, attr, attr_mask);
}

// ---- verbs without rdma_cm (issue 22) ----

int RdmaCoreBackend::ListDevices(std::vector<ibv_context*>* contexts) {
  if (contexts == nullptr) return EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  if (!devices_listed_) {
    // Opened once and kept for the backend's life, as a context handed out
    // must stay valid for every later call.
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return errno != 0 ? errno : ENODEV;
    for (int i = 0; i < n; ++i) {
      if (ibv_context* ctx = ibv_open_device(list[i])) opened_.push_back(ctx);
    }
    ibv_free_device_list(list);
    devices_listed_ = true;
  }
  *contexts = opened_;
  return 0;
}

int RdmaCoreBackend::QueryPort(ibv_context* ctx, uint8_t port_num,
                               ibv_port_attr* attr) {
  return ibv_query_port(ctx, port_num, attr);
}

int RdmaCoreBackend::QueryGid(ibv_context* ctx, uint8_t port_num,
                              uint32_t index, ibv_gid_entry* entry) {
  const int rc = ibv_query_gid_ex(ctx, port_num, index, entry, 0);
  return rc < 0 ? -rc : rc;
}

ibv_qp* RdmaCoreBackend::CreateVerbsQp(ibv_pd* pd,
                                       ibv_qp_init_attr* init_attr) {
  return ibv_create_qp(pd, init_attr);
}

int RdmaCoreBackend::DestroyVerbsQp(ibv_qp* qp) { return ibv_destroy_qp(qp); }

// ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----

ibv_srq* RdmaCoreBackend::CreateSrq(ibv_pd* pd, ibv_srq_init_attr* init_attr) {
  return ibv_create_srq(pd, init_attr);
}

int RdmaCoreBackend::DestroySrq(ibv_srq* srq) { return ibv_destroy_srq(srq); }

int RdmaCoreBackend::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                                 ibv_recv_wr** bad_wr) {
  return ibv_post_srq_recv(srq, wr, bad_wr);
}

int RdmaCoreBackend::QueryDeviceEx(ibv_context* ctx, ibv_device_attr_ex* attr) {
  return ibv_query_device_ex(ctx, nullptr, attr);
}

int RdmaCoreBackend::AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice,
                              uint32_t flags, ibv_sge* sg_list,
                              uint32_t num_sge) {
  return ibv_advise_mr(pd, advice, flags, sg_list, num_sge);
}

int RdmaCoreBackend::GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) {
  return ibv_get_async_event(ctx, event);
}

void RdmaCoreBackend::AckAsyncEvent(ibv_async_event* event) {
  ibv_ack_async_event(event);
}

int RdmaCoreBackend::ModifySrq(ibv_srq* srq, ibv_srq_attr* attr,
                               int attr_mask) {
  return ibv_modify_srq(srq, attr, attr_mask);
}

int RdmaCoreBackend::QuerySrq(ibv_srq* srq, ibv_srq_attr* attr) {
  return ibv_query_srq(srq, attr);
}

}  // namespace rpma_harness
