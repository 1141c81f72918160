// rdma_core_backend.h: the real NIC. Every VerbsBackend method goes straight
// to the libibverbs / librdmacm function it is named after.
//
// Selected by RPMA_HARNESS_BACKEND=rdma-core (see rpma/harness.h) or by
// installing an instance:
//   rpma_harness::InstallBackend(std::make_shared<rpma_harness::RdmaCoreBackend>());
// On a machine without an RDMA device the backend still constructs; address
// resolution then fails with ENODEV, which the rpma layer reports as
// RPMA_E_PROVIDER with a log line saying no RDMA device was found.

#ifndef RPMA_HARNESS_VERBS_BACKEND_RDMA_CORE_BACKEND_H_
#define RPMA_HARNESS_VERBS_BACKEND_RDMA_CORE_BACKEND_H_

#include <map>
#include <mutex>
#include <vector>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

class RdmaCoreBackend final : public VerbsBackend {
 public:
  RdmaCoreBackend() = default;
  // Releases the ids that keep device contexts open (see
  // GetContextByAddress).
  ~RdmaCoreBackend() override;
  RdmaCoreBackend(const RdmaCoreBackend&) = delete;
  RdmaCoreBackend& operator=(const RdmaCoreBackend&) = delete;

  const char* Name() const override { return "rdma-core"; }

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

  // ---- verbs without rdma_cm (issue 22) ----
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
  int QueryDeviceEx(ibv_context* ctx, ibv_device_attr_ex* attr) override;
  int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags,
               ibv_sge* sg_list, uint32_t num_sge) override;
  int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) override;
  void AckAsyncEvent(ibv_async_event* event) override;
  int ModifySrq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) override;
  int QuerySrq(ibv_srq* srq, ibv_srq_attr* attr) override;

 private:
  // librdmacm opens a device when an id first needs it and closes it when
  // its last id is destroyed (seen on rdma-core 44: a context taken from a
  // destroyed id crashes ibv_alloc_pd). One id per device is kept here so
  // that contexts handed out stay open as long as the backend.
  std::mutex mu_;
  // ListDevices: every device, opened once (closed in the destructor).
  bool devices_listed_ = false;
  std::vector<ibv_context*> opened_;
  std::map<ibv_context*, rdma_cm_id*> pinned_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_VERBS_BACKEND_RDMA_CORE_BACKEND_H_
