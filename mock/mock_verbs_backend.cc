#include "mock/mock_verbs_backend.h"

#include <errno.h>

#include <utility>

namespace rpma_harness {

using ::testing::Invoke;
using ::testing::Return;

namespace {

// A gMock action: set errno, then return `value` (rdma-core's failure form).
template <typename T>
auto FailWith(T value) {
  return [value](auto&&...) {
    errno = ENOSYS;
    return value;
  };
}

}  // namespace

MockVerbsBackend::MockVerbsBackend() {
  ON_CALL(*this, GetContextByAddress).WillByDefault(FailWith(-1));
  ON_CALL(*this, QueryDevice).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, AllocPd).WillByDefault(FailWith<ibv_pd*>(nullptr));
  ON_CALL(*this, DeallocPd).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, RegMr).WillByDefault(FailWith<ibv_mr*>(nullptr));
  ON_CALL(*this, DeregMr).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, CreateCompChannel)
      .WillByDefault(FailWith<ibv_comp_channel*>(nullptr));
  ON_CALL(*this, DestroyCompChannel).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, CreateCq).WillByDefault(FailWith<ibv_cq*>(nullptr));
  ON_CALL(*this, DestroyCq).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, ReqNotifyCq).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, GetCqEvent).WillByDefault(FailWith(-1));
  ON_CALL(*this, PollCq).WillByDefault(FailWith(-1));
  ON_CALL(*this, PostSend)
      .WillByDefault([](ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
        *bad_wr = wr;
        return ENOSYS;
      });
  ON_CALL(*this, PostRecv)
      .WillByDefault([](ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
        *bad_wr = wr;
        return ENOSYS;
      });
  ON_CALL(*this, QueryQp).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, CreateEventChannel)
      .WillByDefault(FailWith<rdma_event_channel*>(nullptr));
  ON_CALL(*this, CreateId).WillByDefault(FailWith(-1));
  ON_CALL(*this, DestroyId).WillByDefault(FailWith(-1));
  ON_CALL(*this, ResolveAddr).WillByDefault(FailWith(-1));
  ON_CALL(*this, ResolveRoute).WillByDefault(FailWith(-1));
  ON_CALL(*this, BindAddr).WillByDefault(FailWith(-1));
  ON_CALL(*this, Listen).WillByDefault(FailWith(-1));
  ON_CALL(*this, GetCmEvent).WillByDefault(FailWith(-1));
  ON_CALL(*this, AckCmEvent).WillByDefault(FailWith(-1));
  ON_CALL(*this, CreateQp).WillByDefault(FailWith(-1));
  ON_CALL(*this, Connect).WillByDefault(FailWith(-1));
  ON_CALL(*this, Accept).WillByDefault(FailWith(-1));
  ON_CALL(*this, Reject).WillByDefault(FailWith(-1));
  ON_CALL(*this, Disconnect).WillByDefault(FailWith(-1));
  ON_CALL(*this, MigrateId).WillByDefault(FailWith(-1));
  ON_CALL(*this, SetOption).WillByDefault(FailWith(-1));
  // ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----
  ON_CALL(*this, CreateSrq).WillByDefault(FailWith<ibv_srq*>(nullptr));
  ON_CALL(*this, DestroySrq).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, PostSrqRecv)
      .WillByDefault([](ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
        *bad_wr = wr;
        return ENOSYS;
      });
  ON_CALL(*this, QueryDeviceEx).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, GetAsyncEvent).WillByDefault(FailWith(-1));
  ON_CALL(*this, ModifySrq).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, QuerySrq).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, AdviseMr).WillByDefault(Return(ENOSYS));

  ON_CALL(*this, ModifyQp).WillByDefault(Return(ENOSYS));
  // ---- verbs without rdma_cm (issue 22) ----
  ON_CALL(*this, ListDevices).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, QueryPort).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, QueryGid).WillByDefault(Return(ENOSYS));
  ON_CALL(*this, CreateVerbsQp).WillByDefault(FailWith<ibv_qp*>(nullptr));
  ON_CALL(*this, DestroyVerbsQp).WillByDefault(Return(ENOSYS));
}

void MockVerbsBackend::DelegateToFake(std::shared_ptr<VerbsBackend> fake) {
  fake_ = std::move(fake);
  VerbsBackend* f = fake_.get();
  ON_CALL(*this, GetContextByAddress)
      .WillByDefault(Invoke(f, &VerbsBackend::GetContextByAddress));
  ON_CALL(*this, QueryDevice)
      .WillByDefault(Invoke(f, &VerbsBackend::QueryDevice));
  ON_CALL(*this, AllocPd).WillByDefault(Invoke(f, &VerbsBackend::AllocPd));
  ON_CALL(*this, DeallocPd).WillByDefault(Invoke(f, &VerbsBackend::DeallocPd));
  ON_CALL(*this, RegMr).WillByDefault(Invoke(f, &VerbsBackend::RegMr));
  ON_CALL(*this, DeregMr).WillByDefault(Invoke(f, &VerbsBackend::DeregMr));
  ON_CALL(*this, CreateCompChannel)
      .WillByDefault(Invoke(f, &VerbsBackend::CreateCompChannel));
  ON_CALL(*this, DestroyCompChannel)
      .WillByDefault(Invoke(f, &VerbsBackend::DestroyCompChannel));
  ON_CALL(*this, CreateCq).WillByDefault(Invoke(f, &VerbsBackend::CreateCq));
  ON_CALL(*this, DestroyCq).WillByDefault(Invoke(f, &VerbsBackend::DestroyCq));
  ON_CALL(*this, ReqNotifyCq)
      .WillByDefault(Invoke(f, &VerbsBackend::ReqNotifyCq));
  ON_CALL(*this, GetCqEvent)
      .WillByDefault(Invoke(f, &VerbsBackend::GetCqEvent));
  ON_CALL(*this, AckCqEvents)
      .WillByDefault(Invoke(f, &VerbsBackend::AckCqEvents));
  ON_CALL(*this, PollCq).WillByDefault(Invoke(f, &VerbsBackend::PollCq));
  ON_CALL(*this, PostSend).WillByDefault(Invoke(f, &VerbsBackend::PostSend));
  ON_CALL(*this, PostRecv).WillByDefault(Invoke(f, &VerbsBackend::PostRecv));
  ON_CALL(*this, QueryQp).WillByDefault(Invoke(f, &VerbsBackend::QueryQp));
  ON_CALL(*this, CreateEventChannel)
      .WillByDefault(Invoke(f, &VerbsBackend::CreateEventChannel));
  ON_CALL(*this, DestroyEventChannel)
      .WillByDefault(Invoke(f, &VerbsBackend::DestroyEventChannel));
  ON_CALL(*this, CreateId).WillByDefault(Invoke(f, &VerbsBackend::CreateId));
  ON_CALL(*this, DestroyId).WillByDefault(Invoke(f, &VerbsBackend::DestroyId));
  ON_CALL(*this, ResolveAddr)
      .WillByDefault(Invoke(f, &VerbsBackend::ResolveAddr));
  ON_CALL(*this, ResolveRoute)
      .WillByDefault(Invoke(f, &VerbsBackend::ResolveRoute));
  ON_CALL(*this, BindAddr).WillByDefault(Invoke(f, &VerbsBackend::BindAddr));
  ON_CALL(*this, Listen).WillByDefault(Invoke(f, &VerbsBackend::Listen));
  ON_CALL(*this, GetCmEvent)
      .WillByDefault(Invoke(f, &VerbsBackend::GetCmEvent));
  ON_CALL(*this, AckCmEvent)
      .WillByDefault(Invoke(f, &VerbsBackend::AckCmEvent));
  ON_CALL(*this, CreateQp).WillByDefault(Invoke(f, &VerbsBackend::CreateQp));
  ON_CALL(*this, DestroyQp).WillByDefault(Invoke(f, &VerbsBackend::DestroyQp));
  ON_CALL(*this, Connect).WillByDefault(Invoke(f, &VerbsBackend::Connect));
  ON_CALL(*this, Accept).WillByDefault(Invoke(f, &VerbsBackend::Accept));
  ON_CALL(*this, Reject).WillByDefault(Invoke(f, &VerbsBackend::Reject));
  ON_CALL(*this, Disconnect)
      .WillByDefault(Invoke(f, &VerbsBackend::Disconnect));
  ON_CALL(*this, MigrateId).WillByDefault(Invoke(f, &VerbsBackend::MigrateId));
  ON_CALL(*this, SetOption).WillByDefault(Invoke(f, &VerbsBackend::SetOption));
  // ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ----
  ON_CALL(*this, CreateSrq).WillByDefault(Invoke(f, &VerbsBackend::CreateSrq));
  ON_CALL(*this, DestroySrq)
      .WillByDefault(Invoke(f, &VerbsBackend::DestroySrq));
  ON_CALL(*this, PostSrqRecv)
      .WillByDefault(Invoke(f, &VerbsBackend::PostSrqRecv));
  ON_CALL(*this, QueryDeviceEx)
      .WillByDefault(Invoke(f, &VerbsBackend::QueryDeviceEx));
  ON_CALL(*this, AdviseMr).WillByDefault(Invoke(f, &VerbsBackend::AdviseMr));
  ON_CALL(*this, GetAsyncEvent)
      .WillByDefault(Invoke(f, &VerbsBackend::GetAsyncEvent));
  ON_CALL(*this, AckAsyncEvent)
      .WillByDefault(Invoke(f, &VerbsBackend::AckAsyncEvent));
  ON_CALL(*this, ModifySrq).WillByDefault(Invoke(f, &VerbsBackend::ModifySrq));
  ON_CALL(*this, QuerySrq).WillByDefault(Invoke(f, &VerbsBackend::QuerySrq));

  ON_CALL(*this, ModifyQp).WillByDefault(Invoke(f, &VerbsBackend::ModifyQp));
  ON_CALL(*this, ListDevices)
      .WillByDefault(Invoke(f, &VerbsBackend::ListDevices));
  ON_CALL(*this, QueryPort).WillByDefault(Invoke(f, &VerbsBackend::QueryPort));
  ON_CALL(*this, QueryGid).WillByDefault(Invoke(f, &VerbsBackend::QueryGid));
  ON_CALL(*this, CreateVerbsQp)
      .WillByDefault(Invoke(f, &VerbsBackend::CreateVerbsQp));
  ON_CALL(*this, DestroyVerbsQp)
      .WillByDefault(Invoke(f, &VerbsBackend::DestroyVerbsQp));
}

}  // namespace rpma_harness
