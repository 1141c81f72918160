#include "mock/mock_connection.h"

#include <cstring>

namespace rpma_harness {
namespace testing_support {

using ::testing::_;
using ::testing::DoAll;
using ::testing::Return;
using ::testing::SetArgPointee;

MockConnectionTest::MockConnectionTest()
    : mock_(std::make_shared<::testing::NiceMock<MockVerbsBackend>>()),
      local_buffer_(kLocalSize) {}

MockConnectionTest::~MockConnectionTest() = default;

void MockConnectionTest::SetUp() {
  SetLogSink([this](const std::string& line) { log_.push_back(line); });
  scoped_ = std::make_unique<ScopedBackend>(mock_);
  MockVerbsBackend& m = *mock_;

  pd_.context = &context_;
  local_mr_.context = &context_;
  local_mr_.pd = &pd_;
  local_mr_.addr = local_buffer_.data();
  local_mr_.length = local_buffer_.size();
  local_mr_.lkey = kLocalLkey;
  local_mr_.rkey = kLocalLkey + 1;
  comp_channel_.context = &context_;
  comp_channel_.fd = 1001;
  cq_.context = &context_;
  cq_.channel = &comp_channel_;
  cq_.cqe = 10;
  qp_.context = &context_;
  qp_.pd = &pd_;
  qp_.send_cq = &cq_;
  qp_.recv_cq = &cq_;
  qp_.qp_num = kQpNum;
  qp_.qp_type = IBV_QPT_RC;
  event_channel_.fd = 1002;
  id_.verbs = &context_;
  id_.ps = RDMA_PS_TCP;
  id_.qp_type = IBV_QPT_RC;
  listen_id_.verbs = &context_;

  ON_CALL(m, GetContextByAddress(_, _, _))
      .WillByDefault(DoAll(SetArgPointee<2>(&context_), Return(0)));
  ON_CALL(m, AllocPd(&context_)).WillByDefault(Return(&pd_));
  ON_CALL(m, DeallocPd(&pd_)).WillByDefault(Return(0));
  ON_CALL(m, RegMr(&pd_, _, _, _)).WillByDefault(Return(&local_mr_));
  ON_CALL(m, DeregMr(&local_mr_)).WillByDefault(Return(0));
  // The flush buffer every connection registers (8 bytes, LOCAL_WRITE).
  ON_CALL(m, RegMr(&pd_, _, 8, IBV_ACCESS_LOCAL_WRITE))
      .WillByDefault([this](ibv_pd*, void* addr, size_t length, int) {
        raw_mr_.context = &context_;
        raw_mr_.pd = &pd_;
        raw_mr_.addr = addr;
        raw_mr_.length = length;
        raw_mr_.lkey = kRawLkey;
        raw_mr_.rkey = kRawLkey + 1;
        return &raw_mr_;
      });
  ON_CALL(m, DeregMr(&raw_mr_)).WillByDefault(Return(0));
  ON_CALL(m, CreateCompChannel(&context_))
      .WillByDefault(Return(&comp_channel_));
  ON_CALL(m, DestroyCompChannel(&comp_channel_)).WillByDefault(Return(0));
  ON_CALL(m, CreateCq(&context_, _, _, &comp_channel_, _))
      .WillByDefault(Return(&cq_));
  ON_CALL(m, DestroyCq(&cq_)).WillByDefault(Return(0));
  ON_CALL(m, ReqNotifyCq(&cq_, _)).WillByDefault(Return(0));
  ON_CALL(m, CreateEventChannel()).WillByDefault(Return(&event_channel_));
  ON_CALL(m, CreateId(_, _, _))
      .WillByDefault(DoAll(SetArgPointee<1>(&id_), Return(0)));
  ON_CALL(m, DestroyId(_)).WillByDefault(Return(0));
  ON_CALL(m, ResolveAddr(&id_, _, _, _)).WillByDefault(Return(0));
  ON_CALL(m, ResolveRoute(&id_, _)).WillByDefault(Return(0));
  ON_CALL(m, CreateQp(&id_, &pd_, _))
      .WillByDefault([this](rdma_cm_id* id, ibv_pd*, ibv_qp_init_attr*) {
        id->qp = &qp_;
        return 0;
      });
  ON_CALL(m, DestroyQp(&id_)).WillByDefault([](rdma_cm_id* id) {
    id->qp = nullptr;
  });
  ON_CALL(m, MigrateId(&id_, &event_channel_)).WillByDefault(Return(0));
  ON_CALL(m, Connect(&id_, _)).WillByDefault(Return(0));
  ON_CALL(m, Accept(&id_, _)).WillByDefault(Return(0));
  ON_CALL(m, Reject(&id_, _, _)).WillByDefault(Return(0));
  ON_CALL(m, Disconnect(&id_)).WillByDefault(Return(0));
  ON_CALL(m, GetCmEvent(&event_channel_, _))
      .WillByDefault([this](rdma_event_channel*, rdma_cm_event** event) {
        if (cm_events_.empty()) {
          errno = EAGAIN;
          return -1;
        }
        *event = &cm_events_.front();
        return 0;
      });
  ON_CALL(m, AckCmEvent(_)).WillByDefault([this](rdma_cm_event* event) {
    EXPECT_EQ(event, &cm_events_.front());
    cm_events_.pop_front();
    cm_event_data_.pop_front();
    return 0;
  });

  ASSERT_EQ(rpma_peer_new(&context_, &peer_), 0);
  ASSERT_EQ(rpma_mr_reg(peer_, local_buffer_.data(), local_buffer_.size(),
                        RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_RECV, &local_),
            0);
  uint8_t desc[21];
  std::memcpy(desc, &kRemoteAddr, 8);  // little-endian host
  std::memcpy(desc + 8, &kRemoteSize, 8);
  std::memcpy(desc + 16, &kRemoteRkey, 4);
  desc[20] = RPMA_MR_USAGE_WRITE_DST;
  ASSERT_EQ(rpma_mr_remote_from_descriptor(desc, sizeof(desc), &remote_), 0);
  rpma_conn_req* req = NewActiveRequest();
  ASSERT_NE(req, nullptr);
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &conn_), 0);
}

void MockConnectionTest::TearDown() {
  EXPECT_EQ(rpma_conn_delete(&conn_), 0);
  EXPECT_EQ(rpma_mr_remote_delete(&remote_), 0);
  EXPECT_EQ(rpma_mr_dereg(&local_), 0);
  EXPECT_EQ(rpma_peer_delete(&peer_), 0);
  scoped_.reset();
  SetLogSink(nullptr);
}

rpma_conn_req* MockConnectionTest::NewActiveRequest() {
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_conn_req_new(peer_, "192.168.0.1", "7204", nullptr, &req), 0);
  return req;
}

rpma_conn_req* MockConnectionTest::NewPassiveRequest(const std::string& pdata) {
  rpma_ep* ep = nullptr;
  ON_CALL(*mock_, BindAddr(&id_, _, _)).WillByDefault(Return(0));
  ON_CALL(*mock_, Listen(&id_, _)).WillByDefault(Return(0));
  EXPECT_EQ(rpma_ep_listen(peer_, "192.168.0.1", "7204", &ep), 0);
  QueueCmEvent(RDMA_CM_EVENT_CONNECT_REQUEST, pdata);
  cm_events_.back().listen_id = &listen_id_;
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_ep_next_conn_req(ep, nullptr, &req), 0);
  EXPECT_EQ(rpma_ep_shutdown(&ep), 0);
  return req;
}

void MockConnectionTest::QueueCmEvent(rdma_cm_event_type type,
                                      const std::string& pdata) {
  cm_event_data_.push_back(pdata);
  rdma_cm_event event{};
  event.id = &id_;
  event.event = type;
  if (!pdata.empty()) {
    event.param.conn.private_data = cm_event_data_.back().data();
    event.param.conn.private_data_len = static_cast<uint8_t>(pdata.size());
  }
  cm_events_.push_back(event);
}

::testing::Action<int(ibv_qp*, ibv_send_wr*, ibv_send_wr**)> CaptureSendWr(
    CapturedSendWr* out, int ret) {
  return [out, ret](ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    out->wr = *wr;
    out->sges.assign(wr->sg_list,
                     wr->sg_list + (wr->sg_list ? wr->num_sge : 0));
    if (ret != 0) *bad_wr = wr;
    return ret;
  };
}

::testing::Action<int(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**)> CaptureRecvWr(
    CapturedRecvWr* out, int ret) {
  return [out, ret](ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    out->wr = *wr;
    out->sges.assign(wr->sg_list,
                     wr->sg_list + (wr->sg_list ? wr->num_sge : 0));
    if (ret != 0) *bad_wr = wr;
    return ret;
  };
}

}  // namespace testing_support
}  // namespace rpma_harness
