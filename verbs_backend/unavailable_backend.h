// unavailable_backend.h: a backend with no NIC behind it. Every call fails
// (errno ENOSYS, or a null object) after logging, once, why no NIC is
// available, for example an RPMA_HARNESS_BACKEND value nobody knows.
//
//   auto none = std::make_shared<UnavailableBackend>(
//       "RPMA_HARNESS_BACKEND='foo' is not 'fake' or 'rdma-core'");

#ifndef RPMA_HARNESS_VERBS_BACKEND_UNAVAILABLE_BACKEND_H_
#define RPMA_HARNESS_VERBS_BACKEND_UNAVAILABLE_BACKEND_H_

#include <atomic>
#include <string>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

class UnavailableBackend final : public VerbsBackend {
 public:
  explicit UnavailableBackend(std::string reason);

  const char* Name() const override { return "unavailable"; }
  const std::string& reason() const { return reason_; }

  int GetContextByAddress(const char*, bool, ibv_context**) override;
  int QueryDevice(ibv_context*, ibv_device_attr*) override;
  ibv_pd* AllocPd(ibv_context*) override;
  int DeallocPd(ibv_pd*) override;
  ibv_mr* RegMr(ibv_pd*, void*, size_t, int) override;
  int DeregMr(ibv_mr*) override;
  ibv_comp_channel* CreateCompChannel(ibv_context*) override;
  int DestroyCompChannel(ibv_comp_channel*) override;
  ibv_cq* CreateCq(ibv_context*, int, void*, ibv_comp_channel*, int) override;
  int DestroyCq(ibv_cq*) override;
  int ReqNotifyCq(ibv_cq*, int) override;
  int GetCqEvent(ibv_comp_channel*, ibv_cq**, void**) override;
  void AckCqEvents(ibv_cq*, unsigned int) override {}
  int PollCq(ibv_cq*, int, ibv_wc*) override;
  int PostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) override;
  int PostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) override;
  int QueryQp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*) override;
  rdma_event_channel* CreateEventChannel() override;
  void DestroyEventChannel(rdma_event_channel*) override {}
  int CreateId(rdma_event_channel*, rdma_cm_id**, void*) override;
  int DestroyId(rdma_cm_id*) override;
  int ResolveAddr(rdma_cm_id*, const char*, const char*, int) override;
  int ResolveRoute(rdma_cm_id*, int) override;
  int BindAddr(rdma_cm_id*, const char*, const char*) override;
  int Listen(rdma_cm_id*, int) override;
  int GetCmEvent(rdma_event_channel*, rdma_cm_event**) override;
  int AckCmEvent(rdma_cm_event*) override;
  int CreateQp(rdma_cm_id*, ibv_pd*, ibv_qp_init_attr*) override;
  void DestroyQp(rdma_cm_id*) override {}
  int Connect(rdma_cm_id*, rdma_conn_param*) override;
  int Accept(rdma_cm_id*, rdma_conn_param*) override;
  int Reject(rdma_cm_id*, const void*, uint8_t) override;
  int Disconnect(rdma_cm_id*) override;
  int MigrateId(rdma_cm_id*, rdma_event_channel*) override;
  int SetOption(rdma_cm_id*, int, int, void*, size_t) override;
  int ModifyQp(ibv_qp*, ibv_qp_attr*, int) override;

  // ---- verbs without rdma_cm (issue 22) ----
  int ListDevices(std::vector<ibv_context*>* contexts) override;
  int QueryPort(ibv_context* ctx, uint8_t port_num,
                ibv_port_attr* attr) override;
  int QueryGid(ibv_context* ctx, uint8_t port_num, uint32_t index,
               ibv_gid_entry* entry) override;
  ibv_qp* CreateVerbsQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) override;
  int DestroyVerbsQp(ibv_qp* qp) override;

  // ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----
  ibv_srq* CreateSrq(ibv_pd*, ibv_srq_init_attr*) override;
  int DestroySrq(ibv_srq*) override;
  int PostSrqRecv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  int QueryDeviceEx(ibv_context*, ibv_device_attr_ex*) override;
  int AdviseMr(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*,
               uint32_t) override;
  int GetAsyncEvent(ibv_context*, ibv_async_event*) override;
  void AckAsyncEvent(ibv_async_event*) override {}
  int ModifySrq(ibv_srq*, ibv_srq_attr*, int) override;
  int QuerySrq(ibv_srq*, ibv_srq_attr*) override;

 private:
  // Logs the reason on the first failure; returns ENOSYS and sets errno.
  int Fail();

  std::string reason_;
  std::atomic<bool> told_{false};
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_VERBS_BACKEND_UNAVAILABLE_BACKEND_H_
