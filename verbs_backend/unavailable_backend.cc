#include "verbs_backend/unavailable_backend.h"

#include <errno.h>

#include <cstdio>
#include <utility>

namespace rpma_harness {

UnavailableBackend::UnavailableBackend(std::string reason)
    : reason_(std::move(reason)) {}

int UnavailableBackend::Fail() {
  if (!told_.exchange(true)) {
    std::fprintf(stderr, "rpma-harness: no NIC is available: %s\n",
                 reason_.c_str());
  }
  errno = ENOSYS;
  return ENOSYS;
}

int UnavailableBackend::GetContextByAddress(const char*, bool, ibv_context**) {
  Fail();
  return -1;
}
int UnavailableBackend::QueryDevice(ibv_context*, ibv_device_attr*) {
  return Fail();
}
ibv_pd* UnavailableBackend::AllocPd(ibv_context*) {
  Fail();
  return nullptr;
}
int UnavailableBackend::DeallocPd(ibv_pd*) { return Fail(); }
ibv_mr* UnavailableBackend::RegMr(ibv_pd*, void*, size_t, int) {
  Fail();
  return nullptr;
}
int UnavailableBackend::DeregMr(ibv_mr*) { return Fail(); }
ibv_comp_channel* UnavailableBackend::CreateCompChannel(ibv_context*) {
  Fail();
  return nullptr;
}
int UnavailableBackend::DestroyCompChannel(ibv_comp_channel*) { return Fail(); }
ibv_cq* UnavailableBackend::CreateCq(ibv_context*, int, void*,
                                     ibv_comp_channel*, int) {
  Fail();
  return nullptr;
}
int UnavailableBackend::DestroyCq(ibv_cq*) { return Fail(); }
int UnavailableBackend::ReqNotifyCq(ibv_cq*, int) { return Fail(); }
int UnavailableBackend::GetCqEvent(ibv_comp_channel*, ibv_cq**, void**) {
  Fail();
  return -1;
}
int UnavailableBackend::PollCq(ibv_cq*, int, ibv_wc*) {
  Fail();
  return -1;
}
int UnavailableBackend::PostSend(ibv_qp*, ibv_send_wr* wr,
                                 ibv_send_wr** bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return Fail();
}
int UnavailableBackend::PostRecv(ibv_qp*, ibv_recv_wr* wr,
                                 ibv_recv_wr** bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return Fail();
}
int UnavailableBackend::QueryQp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*) {
  return Fail();
}
rdma_event_channel* UnavailableBackend::CreateEventChannel() {
  Fail();
  return nullptr;
}
int UnavailableBackend::CreateId(rdma_event_channel*, rdma_cm_id**, void*) {
  Fail();
  return -1;
}
int UnavailableBackend::DestroyId(rdma_cm_id*) {
  Fail();
  return -1;
}
int UnavailableBackend::ResolveAddr(rdma_cm_id*, const char*, const char*,
                                    int) {
  Fail();
  return -1;
}
int UnavailableBackend::ResolveRoute(rdma_cm_id*, int) {
  Fail();
  return -1;
}
int UnavailableBackend::BindAddr(rdma_cm_id*, const char*, const char*) {
  Fail();
  return -1;
}
int UnavailableBackend::Listen(rdma_cm_id*, int) {
  Fail();
  return -1;
}
int UnavailableBackend::GetCmEvent(rdma_event_channel*, rdma_cm_event**) {
  Fail();
  return -1;
}
int UnavailableBackend::AckCmEvent(rdma_cm_event*) {
  Fail();
  return -1;
}
int UnavailableBackend::CreateQp(rdma_cm_id*, ibv_pd*, ibv_qp_init_attr*) {
  Fail();
  return -1;
}
int UnavailableBackend::Connect(rdma_cm_id*, rdma_conn_param*) {
  Fail();
  return -1;
}
int UnavailableBackend::Accept(rdma_cm_id*, rdma_conn_param*) {
  Fail();
  return -1;
}
int UnavailableBackend::Reject(rdma_cm_id*, const void*, uint8_t) {
  Fail();
  return -1;
}
int UnavailableBackend::Disconnect(rdma_cm_id*) {
  Fail();
  return -1;
}
int UnavailableBackend::MigrateId(rdma_cm_id*, rdma_event_channel*) {
  Fail();
  return -1;
}
int UnavailableBackend::SetOption(rdma_cm_id*, int, int, void*, size_t) {
  Fail();
  return -1;
}
int UnavailableBackend::ModifyQp(ibv_qp*, ibv_qp_attr*, int) { return Fail(); }

// ---- verbs without rdma_cm (issue 22) ----

int UnavailableBackend::ListDevices(std::vector<ibv_context*>*) {
  return Fail();
}
int UnavailableBackend::QueryPort(ibv_context*, uint8_t, ibv_port_attr*) {
  return Fail();
}
int UnavailableBackend::QueryGid(ibv_context*, uint8_t, uint32_t,
                                 ibv_gid_entry*) {
  return Fail();
}
ibv_qp* UnavailableBackend::CreateVerbsQp(ibv_pd*, ibv_qp_init_attr*) {
  Fail();
  return nullptr;
}
int UnavailableBackend::DestroyVerbsQp(ibv_qp*) { return Fail(); }

// ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----

ibv_srq* UnavailableBackend::CreateSrq(ibv_pd*, ibv_srq_init_attr*) {
  Fail();
  return nullptr;
}
int UnavailableBackend::DestroySrq(ibv_srq*) { return Fail(); }
int UnavailableBackend::PostSrqRecv(ibv_srq*, ibv_recv_wr* wr,
                                    ibv_recv_wr** bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return Fail();
}
int UnavailableBackend::QueryDeviceEx(ibv_context*, ibv_device_attr_ex*) {
  return Fail();
}
int UnavailableBackend::AdviseMr(ibv_pd*, ibv_advise_mr_advice, uint32_t,
                                 ibv_sge*, uint32_t) {
  return Fail();
}
int UnavailableBackend::GetAsyncEvent(ibv_context*, ibv_async_event*) {
  Fail();
  return -1;
}
int UnavailableBackend::ModifySrq(ibv_srq*, ibv_srq_attr*, int) {
  return Fail();
}
int UnavailableBackend::QuerySrq(ibv_srq*, ibv_srq_attr*) { return Fail(); }

}  // namespace rpma_harness
