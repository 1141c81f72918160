// mock_verbs_backend.h: a GoogleMock VerbsBackend.
//
// Until a test says otherwise, every call fails the way rdma-core reports
// failure (null objects / -1 with errno ENOSYS / ENOSYS), so an unexpected call
// cannot silently succeed. DelegateToFake(fake) turns every default into a
// call on a real backend (normally a FakeNic), so that a test states only the
// expectation it cares about (gMock cookbook, "Delegating Calls to a Fake"):
//
//   auto fake = std::make_shared<FakeNic>();
//   auto mock = std::make_shared<testing::NiceMock<MockVerbsBackend>>();
//   mock->DelegateToFake(fake);
//   EXPECT_CALL(*mock, PostSend(_, Pointee(IsWriteWithImm(0x1234, 64)), _));
//   rpma_harness::ScopedBackend use(mock);

#ifndef RPMA_HARNESS_MOCK_MOCK_VERBS_BACKEND_H_
#define RPMA_HARNESS_MOCK_MOCK_VERBS_BACKEND_H_

#include <gmock/gmock.h>

#include <memory>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

class MockVerbsBackend : public VerbsBackend {
 public:
  MockVerbsBackend();

  // Makes every call without its own expectation behave as `fake` does. The
  // mock keeps `fake` alive.
  void DelegateToFake(std::shared_ptr<VerbsBackend> fake);

  const char* Name() const override { return "mock"; }

  MOCK_METHOD(int, GetContextByAddress,
              (const char* addr, bool local, ibv_context** ctx), (override));
  MOCK_METHOD(int, QueryDevice, (ibv_context * ctx, ibv_device_attr* attr),
              (override));
  MOCK_METHOD(ibv_pd*, AllocPd, (ibv_context * ctx), (override));
  MOCK_METHOD(int, DeallocPd, (ibv_pd * pd), (override));
  MOCK_METHOD(ibv_mr*, RegMr,
              (ibv_pd * pd, void* addr, size_t length, int access), (override));
  MOCK_METHOD(int, DeregMr, (ibv_mr * mr), (override));
  MOCK_METHOD(ibv_comp_channel*, CreateCompChannel, (ibv_context * ctx),
              (override));
  MOCK_METHOD(int, DestroyCompChannel, (ibv_comp_channel * channel),
              (override));
  MOCK_METHOD(ibv_cq*, CreateCq,
              (ibv_context * ctx, int cqe, void* cq_context,
               ibv_comp_channel* channel, int comp_vector),
              (override));
  MOCK_METHOD(int, DestroyCq, (ibv_cq * cq), (override));
  MOCK_METHOD(int, ReqNotifyCq, (ibv_cq * cq, int solicited_only), (override));
  MOCK_METHOD(int, GetCqEvent,
              (ibv_comp_channel * channel, ibv_cq** cq, void** cq_context),
              (override));
  MOCK_METHOD(void, AckCqEvents, (ibv_cq * cq, unsigned int nevents),
              (override));
  MOCK_METHOD(int, PollCq, (ibv_cq * cq, int num_entries, ibv_wc* wc),
              (override));
  MOCK_METHOD(int, PostSend,
              (ibv_qp * qp, ibv_send_wr* wr, ibv_send_wr** bad_wr), (override));
  MOCK_METHOD(int, PostRecv,
              (ibv_qp * qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr), (override));
  MOCK_METHOD(int, QueryQp,
              (ibv_qp * qp, ibv_qp_attr* attr, int attr_mask,
               ibv_qp_init_attr* init_attr),
              (override));
  MOCK_METHOD(rdma_event_channel*, CreateEventChannel, (), (override));
  MOCK_METHOD(void, DestroyEventChannel, (rdma_event_channel * channel),
              (override));
  MOCK_METHOD(int, CreateId,
              (rdma_event_channel * channel, rdma_cm_id** id, void* context),
              (override));
  MOCK_METHOD(int, DestroyId, (rdma_cm_id * id), (override));
  MOCK_METHOD(int, ResolveAddr,
              (rdma_cm_id * id, const char* addr, const char* port,
               int timeout_ms),
              (override));
  MOCK_METHOD(int, ResolveRoute, (rdma_cm_id * id, int timeout_ms), (override));
  MOCK_METHOD(int, BindAddr,
              (rdma_cm_id * id, const char* addr, const char* port),
              (override));
  MOCK_METHOD(int, Listen, (rdma_cm_id * id, int backlog), (override));
  MOCK_METHOD(int, GetCmEvent,
              (rdma_event_channel * channel, rdma_cm_event** event),
              (override));
  MOCK_METHOD(int, AckCmEvent, (rdma_cm_event * event), (override));
  MOCK_METHOD(int, CreateQp,
              (rdma_cm_id * id, ibv_pd* pd, ibv_qp_init_attr* init_attr),
              (override));
  MOCK_METHOD(void, DestroyQp, (rdma_cm_id * id), (override));
  MOCK_METHOD(int, Connect, (rdma_cm_id * id, rdma_conn_param* param),
              (override));
  MOCK_METHOD(int, Accept, (rdma_cm_id * id, rdma_conn_param* param),
              (override));
  MOCK_METHOD(int, Reject,
              (rdma_cm_id * id, const void* private_data,
               uint8_t private_data_len),
              (override));
  MOCK_METHOD(int, Disconnect, (rdma_cm_id * id), (override));
  MOCK_METHOD(int, SetOption,
              (rdma_cm_id * id, int level, int optname, void* optval,
               size_t optlen),
              (override));
  MOCK_METHOD(int, MigrateId, (rdma_cm_id * id, rdma_event_channel* channel),
              (override));
  MOCK_METHOD(int, ModifyQp, (ibv_qp * qp, ibv_qp_attr* attr, int attr_mask),
              (override));

  // ---- verbs without rdma_cm (issue 22) ----
  MOCK_METHOD(int, ListDevices, (std::vector<ibv_context*> * contexts),
              (override));
  MOCK_METHOD(int, QueryPort,
              (ibv_context * ctx, uint8_t port_num, ibv_port_attr* attr),
              (override));
  MOCK_METHOD(int, QueryGid,
              (ibv_context * ctx, uint8_t port_num, uint32_t index,
               ibv_gid_entry* entry),
              (override));
  MOCK_METHOD(ibv_qp*, CreateVerbsQp,
              (ibv_pd * pd, ibv_qp_init_attr* init_attr), (override));
  MOCK_METHOD(int, DestroyVerbsQp, (ibv_qp * qp), (override));

  // ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----
  MOCK_METHOD(ibv_srq*, CreateSrq, (ibv_pd * pd, ibv_srq_init_attr* init_attr),
              (override));
  MOCK_METHOD(int, DestroySrq, (ibv_srq * srq), (override));
  MOCK_METHOD(int, PostSrqRecv,
              (ibv_srq * srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr),
              (override));
  MOCK_METHOD(int, QueryDeviceEx, (ibv_context * ctx, ibv_device_attr_ex* attr),
              (override));
  MOCK_METHOD(int, GetAsyncEvent, (ibv_context * ctx, ibv_async_event* event),
              (override));
  MOCK_METHOD(void, AckAsyncEvent, (ibv_async_event * event), (override));
  MOCK_METHOD(int, ModifySrq,
              (ibv_srq * srq, ibv_srq_attr* attr, int attr_mask), (override));
  MOCK_METHOD(int, QuerySrq, (ibv_srq * srq, ibv_srq_attr* attr), (override));
  MOCK_METHOD(int, AdviseMr,
              (ibv_pd * pd, ibv_advise_mr_advice advice, uint32_t flags,
               ibv_sge* sg_list, uint32_t num_sge),
              (override));

 private:
  std::shared_ptr<VerbsBackend> fake_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_MOCK_VERBS_BACKEND_H_
