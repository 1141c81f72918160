// forwarding_backend.h: a VerbsBackend that forwards every call to another
// one (LevelDB's EnvWrapper idea), so a wrapper overrides only the calls it
// cares about. It is the one base of every wrapper: FaultInjector
// (faults/), CheckingBackend (check/), the benchmarks' backends. A call
// added to VerbsBackend is forwarded here once, and every wrapper passes it
// on.
//
// Example: a backend whose data path does nothing, for measuring what the
// rpma layer costs on top of the verbs call (connections still go through
// the wrapped fake NIC):
//   class NullDataPath : public ForwardingBackend {
//     using ForwardingBackend::ForwardingBackend;
//     int PostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) override { return 0; }
//   };

#ifndef RPMA_HARNESS_VERBS_BACKEND_FORWARDING_BACKEND_H_
#define RPMA_HARNESS_VERBS_BACKEND_FORWARDING_BACKEND_H_

#include <memory>
#include <utility>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

class ForwardingBackend : public VerbsBackend {
 public:
  explicit ForwardingBackend(std::shared_ptr<VerbsBackend> target)
      : target_(std::move(target)) {}

  const char* Name() const override { return target_->Name(); }
  int GetContextByAddress(const char* addr, bool local,
                          ibv_context** ctx) override {
    return target_->GetContextByAddress(addr, local, ctx);
  }
  int QueryDevice(ibv_context* ctx, ibv_device_attr* attr) override {
    return target_->QueryDevice(ctx, attr);
  }
  ibv_pd* AllocPd(ibv_context* ctx) override { return target_->AllocPd(ctx); }
  int DeallocPd(ibv_pd* pd) override { return target_->DeallocPd(pd); }
  ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) override {
    return target_->RegMr(pd, addr, length, access);
  }
  int DeregMr(ibv_mr* mr) override { return target_->DeregMr(mr); }
  ibv_comp_channel* CreateCompChannel(ibv_context* ctx) override {
    return target_->CreateCompChannel(ctx);
  }
  int DestroyCompChannel(ibv_comp_channel* channel) override {
    return target_->DestroyCompChannel(channel);
  }
  ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                   ibv_comp_channel* channel, int comp_vector) override {
    return target_->CreateCq(ctx, cqe, cq_context, channel, comp_vector);
  }
  int DestroyCq(ibv_cq* cq) override { return target_->DestroyCq(cq); }
  int ReqNotifyCq(ibv_cq* cq, int solicited_only) override {
    return target_->ReqNotifyCq(cq, solicited_only);
  }
  int GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                 void** cq_context) override {
    return target_->GetCqEvent(channel, cq, cq_context);
  }
  void AckCqEvents(ibv_cq* cq, unsigned int nevents) override {
    target_->AckCqEvents(cq, nevents);
  }
  int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override {
    return target_->PollCq(cq, num_entries, wc);
  }
  int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override {
    return target_->PostSend(qp, wr, bad_wr);
  }
  int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override {
    return target_->PostRecv(qp, wr, bad_wr);
  }
  int QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
              ibv_qp_init_attr* init_attr) override {
    return target_->QueryQp(qp, attr, attr_mask, init_attr);
  }
  rdma_event_channel* CreateEventChannel() override {
    return target_->CreateEventChannel();
  }
  void DestroyEventChannel(rdma_event_channel* channel) override {
    target_->DestroyEventChannel(channel);
  }
  int CreateId(rdma_event_channel* channel, rdma_cm_id** id,
               void* context) override {
    return target_->CreateId(channel, id, context);
  }
  int DestroyId(rdma_cm_id* id) override { return target_->DestroyId(id); }
  int ResolveAddr(rdma_cm_id* id, const char* addr, const char* port,
                  int timeout_ms) override {
    return target_->ResolveAddr(id, addr, port, timeout_ms);
  }
  int ResolveRoute(rdma_cm_id* id, int timeout_ms) override {
    return target_->ResolveRoute(id, timeout_ms);
  }
  int BindAddr(rdma_cm_id* id, const char* addr, const char* port) override {
    return target_->BindAddr(id, addr, port);
  }
  int Listen(rdma_cm_id* id, int backlog) override {
    return target_->Listen(id, backlog);
  }
  int GetCmEvent(rdma_event_channel* channel, rdma_cm_event** event) override {
    return target_->GetCmEvent(channel, event);
  }
  int AckCmEvent(rdma_cm_event* event) override {
    return target_->AckCmEvent(event);
  }
  int CreateQp(rdma_cm_id* id, ibv_pd* pd,
               ibv_qp_init_attr* init_attr) override {
    return target_->CreateQp(id, pd, init_attr);
  }
  void DestroyQp(rdma_cm_id* id) override { target_->DestroyQp(id); }
  int Connect(rdma_cm_id* id, rdma_conn_param* param) override {
    return target_->Connect(id, param);
  }
  int Accept(rdma_cm_id* id, rdma_conn_param* param) override {
    return target_->Accept(id, param);
  }
  int Reject(rdma_cm_id* id, const void* private_data,
             uint8_t private_data_len) override {
    return target_->Reject(id, private_data, private_data_len);
  }
  int Disconnect(rdma_cm_id* id) override { return target_->Disconnect(id); }
  int MigrateId(rdma_cm_id* id, rdma_event_channel* channel) override {
    return target_->MigrateId(id, channel);
  }
  int SetOption(rdma_cm_id* id, int level, int optname, void* optval,
                size_t optlen) override {
    return target_->SetOption(id, level, optname, optval, optlen);
  }
  int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override {
    return target_->ModifyQp(qp, attr, attr_mask);
  }

  // ---- verbs without rdma_cm (issue 22) ----
  int ListDevices(std::vector<ibv_context*>* contexts) override {
    return target_->ListDevices(contexts);
  }
  int QueryPort(ibv_context* ctx, uint8_t port_num,
                ibv_port_attr* attr) override {
    return target_->QueryPort(ctx, port_num, attr);
  }
  int QueryGid(ibv_context* ctx, uint8_t port_num, uint32_t index,
               ibv_gid_entry* entry) override {
    return target_->QueryGid(ctx, port_num, index, entry);
  }
  ibv_qp* CreateVerbsQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) override {
    return target_->CreateVerbsQp(pd, init_attr);
  }
  int DestroyVerbsQp(ibv_qp* qp) override { return target_->DestroyVerbsQp(qp); }

  // ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----
  ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* init_attr) override {
    return target_->CreateSrq(pd, init_attr);
  }
  int DestroySrq(ibv_srq* srq) override { return target_->DestroySrq(srq); }
  int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                  ibv_recv_wr** bad_wr) override {
    return target_->PostSrqRecv(srq, wr, bad_wr);
  }
  int QueryDeviceEx(ibv_context* ctx, ibv_device_attr_ex* attr) override {
    return target_->QueryDeviceEx(ctx, attr);
  }
  int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags,
               ibv_sge* sg_list, uint32_t num_sge) override {
    return target_->AdviseMr(pd, advice, flags, sg_list, num_sge);
  }

  // ---- asynchronous events and SRQ attributes ----
  int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) override {
    return target_->GetAsyncEvent(ctx, event);
  }
  void AckAsyncEvent(ibv_async_event* event) override {
    target_->AckAsyncEvent(event);
  }
  int ModifySrq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) override {
    return target_->ModifySrq(srq, attr, attr_mask);
  }
  int QuerySrq(ibv_srq* srq, ibv_srq_attr* attr) override {
    return target_->QuerySrq(srq, attr);
  }

  LibraryChecker* library_checker() override {
    return target_->library_checker();
  }

 protected:
  VerbsBackend* target() const { return target_.get(); }
  const std::shared_ptr<VerbsBackend>& shared_target() const {
    return target_;
  }

 private:
  std::shared_ptr<VerbsBackend> target_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_VERBS_BACKEND_FORWARDING_BACKEND_H_
