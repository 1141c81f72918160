// A completion channel shared by a connection's CQ and receive CQ:
// rpma_conn_cfg_set/get_compl_channel(3), rpma_conn_get_compl_fd(3),
// rpma_conn_wait(3), and rpma_cq_wait(3)'s RPMA_E_SHARED_CHANNEL, checked
// call for call against the backend.

#include <errno.h>

#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::InSequence;
using ::testing::Return;
using ::testing::SetArgPointee;
using testing_support::MockConnectionTest;

class ComplChannelTest : public MockConnectionTest {
 protected:
  void SetUp() override {
    MockConnectionTest::SetUp();
    rcq_.context = cq()->context;
    rcq_.channel = comp_channel();
    rcq_.cqe = 5;
    ON_CALL(mock(), DestroyCq(&rcq_)).WillByDefault(Return(0));
    ON_CALL(mock(), ReqNotifyCq(&rcq_, _)).WillByDefault(Return(0));
  }
  void TearDown() override {
    if (shared_ != nullptr) {
      EXPECT_EQ(rpma_conn_delete(&shared_), 0);
    }
    MockConnectionTest::TearDown();
  }

  // A connection with a receive CQ and one channel for both CQs.
  rpma_conn* NewSharedConn() {
    rpma_conn_cfg* cfg = nullptr;
    EXPECT_EQ(rpma_conn_cfg_new(&cfg), 0);
    EXPECT_EQ(rpma_conn_cfg_set_compl_channel(cfg, true), 0);
    EXPECT_EQ(rpma_conn_cfg_set_rcq_size(cfg, 5), 0);
    // One channel, then both CQs on it.
    EXPECT_CALL(mock(), CreateCompChannel(_)).Times(1);
    EXPECT_CALL(mock(), CreateCq(_, 10, _, comp_channel(), _))
        .WillOnce(Return(cq()));
    EXPECT_CALL(mock(), CreateCq(_, 5, _, comp_channel(), _))
        .WillOnce(Return(&rcq_));
    rpma_conn_req* req = nullptr;
    EXPECT_EQ(rpma_conn_req_new(peer(), "192.168.0.1", "7204", cfg, &req), 0);
    rpma_conn_cfg_delete(&cfg);
    EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &shared_), 0);
    ::testing::Mock::VerifyAndClearExpectations(&mock());
    return shared_;
  }

  // The next GetCqEvent on the shared channel reports `which`.
  void NextCqEventIs(ibv_cq* which) {
    EXPECT_CALL(mock(), GetCqEvent(comp_channel(), _, _))
        .WillOnce(DoAll(SetArgPointee<1>(which), SetArgPointee<2>(nullptr),
                        Return(0)));
  }

  ibv_cq rcq_{};
  rpma_conn* shared_ = nullptr;
};

TEST_F(ComplChannelTest, CfgComplChannelDefaultsToNotSharedAndRoundTrips) {
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  bool shared = true;
  ASSERT_EQ(rpma_conn_cfg_get_compl_channel(cfg, &shared), 0);
  EXPECT_FALSE(shared);
  ASSERT_EQ(rpma_conn_cfg_set_compl_channel(cfg, true), 0);
  ASSERT_EQ(rpma_conn_cfg_get_compl_channel(cfg, &shared), 0);
  EXPECT_TRUE(shared);
  EXPECT_EQ(rpma_conn_cfg_set_compl_channel(nullptr, true), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_get_compl_channel(nullptr, &shared), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_get_compl_channel(cfg, nullptr), RPMA_E_INVAL);
  rpma_conn_cfg_delete(&cfg);
}

TEST_F(ComplChannelTest, GetComplFdIsTheSharedChannelsFd) {
  rpma_conn* conn = NewSharedConn();
  int fd = -1;
  ASSERT_EQ(rpma_conn_get_compl_fd(conn, &fd), 0);
  EXPECT_EQ(fd, comp_channel()->fd);
  // rpma_cq_get_fd(3) still works on either CQ and gives the same fd.
  rpma_cq* cq = nullptr;
  rpma_cq* rcq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
  ASSERT_EQ(rpma_conn_get_rcq(conn, &rcq), 0);
  ASSERT_NE(rcq, nullptr);
  int cq_fd = -1, rcq_fd = -1;
  ASSERT_EQ(rpma_cq_get_fd(cq, &cq_fd), 0);
  ASSERT_EQ(rpma_cq_get_fd(rcq, &rcq_fd), 0);
  EXPECT_EQ(cq_fd, fd);
  EXPECT_EQ(rcq_fd, fd);
}

TEST_F(ComplChannelTest, GetComplFdArgumentRules) {
  int fd = -7;
  EXPECT_EQ(rpma_conn_get_compl_fd(nullptr, &fd), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_compl_fd(conn(), nullptr), RPMA_E_INVAL);
  // The fixture's connection has a channel per CQ.
  EXPECT_EQ(rpma_conn_get_compl_fd(conn(), &fd), RPMA_E_NOT_SHARED_CHNL);
  EXPECT_EQ(fd, -7);
}

TEST_F(ComplChannelTest, ConnWaitArgumentRules) {
  rpma_cq* cq = nullptr;
  bool is_rcq = true;
  EXPECT_CALL(mock(), GetCqEvent).Times(0);
  EXPECT_EQ(rpma_conn_wait(nullptr, 0, &cq, &is_rcq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_wait(conn(), 0, nullptr, &is_rcq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_wait(conn(), 0, &cq, &is_rcq), RPMA_E_NOT_SHARED_CHNL);
  EXPECT_EQ(cq, nullptr);
  EXPECT_TRUE(is_rcq);
}

TEST_F(ComplChannelTest, ConnWaitReportsTheReceiveCqWhenItFired) {
  rpma_conn* conn = NewSharedConn();
  rpma_cq* rcq = nullptr;
  ASSERT_EQ(rpma_conn_get_rcq(conn, &rcq), 0);
  NextCqEventIs(&rcq_);
  {
    InSequence order;
    EXPECT_CALL(mock(), AckCqEvents(&rcq_, 1u));
    EXPECT_CALL(mock(), ReqNotifyCq(&rcq_, 0)).WillOnce(Return(0));
  }
  rpma_cq* fired = nullptr;
  bool is_rcq = false;
  ASSERT_EQ(rpma_conn_wait(conn, 0, &fired, &is_rcq), 0);
  EXPECT_EQ(fired, rcq);
  EXPECT_TRUE(is_rcq);
}

TEST_F(ComplChannelTest, ConnWaitReportsTheMainCqWhenItFired) {
  rpma_conn* conn = NewSharedConn();
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
  NextCqEventIs(this->cq());
  EXPECT_CALL(mock(), AckCqEvents(this->cq(), 1u)).Times(2);
  EXPECT_CALL(mock(), ReqNotifyCq(this->cq(), 0)).Times(2);
  rpma_cq* fired = nullptr;
  bool is_rcq = true;
  ASSERT_EQ(rpma_conn_wait(conn, 0, &fired, &is_rcq), 0);
  EXPECT_EQ(fired, cq);
  EXPECT_FALSE(is_rcq);
  // is_rcq may be NULL.
  NextCqEventIs(this->cq());
  ASSERT_EQ(rpma_conn_wait(conn, 0, &fired, nullptr), 0);
  EXPECT_EQ(fired, cq);
}

TEST_F(ComplChannelTest, ConnWaitWithNothingPendingIsNoCompletion) {
  rpma_conn* conn = NewSharedConn();
  EXPECT_CALL(mock(), GetCqEvent(comp_channel(), _, _))
      .WillOnce([](ibv_comp_channel*, ibv_cq**, void**) {
        errno = EAGAIN;
        return -1;
      });
  EXPECT_CALL(mock(), AckCqEvents).Times(0);
  rpma_cq* fired = nullptr;
  EXPECT_EQ(rpma_conn_wait(conn, 0, &fired, nullptr), RPMA_E_NO_COMPLETION);
  EXPECT_EQ(fired, nullptr);
}

TEST_F(ComplChannelTest, ConnWaitOnAnEventOfAForeignCqIsUnknown) {
  rpma_conn* conn = NewSharedConn();
  ibv_cq foreign{};
  NextCqEventIs(&foreign);
  EXPECT_CALL(mock(), AckCqEvents).Times(0);
  rpma_cq* fired = nullptr;
  EXPECT_EQ(rpma_conn_wait(conn, 0, &fired, nullptr), RPMA_E_UNKNOWN);
  EXPECT_EQ(fired, nullptr);
}

TEST_F(ComplChannelTest, ConnWaitRearmFailureIsProvider) {
  rpma_conn* conn = NewSharedConn();
  NextCqEventIs(&rcq_);
  EXPECT_CALL(mock(), ReqNotifyCq(&rcq_, 0)).WillOnce(Return(EIO));
  rpma_cq* fired = nullptr;
  EXPECT_EQ(rpma_conn_wait(conn, 0, &fired, nullptr), RPMA_E_PROVIDER);
  EXPECT_EQ(fired, nullptr);
}

// rpma_cq_wait(3): "RPMA_E_SHARED_CHANNEL - the completion event channel is
// shared and cannot be handled by any particular CQ".
TEST_F(ComplChannelTest, CqWaitOnEitherCqOfASharedChannelIsSharedChannel) {
  rpma_conn* conn = NewSharedConn();
  rpma_cq* cq = nullptr;
  rpma_cq* rcq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
  ASSERT_EQ(rpma_conn_get_rcq(conn, &rcq), 0);
  EXPECT_CALL(mock(), GetCqEvent).Times(0);
  EXPECT_EQ(rpma_cq_wait(cq), RPMA_E_SHARED_CHANNEL);
  EXPECT_EQ(rpma_cq_wait(rcq), RPMA_E_SHARED_CHANNEL);
}

TEST_F(ComplChannelTest,
       DeletingTheConnectionDestroysTheChannelOnceAfterItsCqs) {
  NewSharedConn();
  {
    InSequence order;
    EXPECT_CALL(mock(), DestroyCq(&rcq_)).WillOnce(Return(0));
    EXPECT_CALL(mock(), DestroyCq(cq())).WillOnce(Return(0));
    EXPECT_CALL(mock(), DestroyCompChannel(comp_channel())).WillOnce(Return(0));
  }
  EXPECT_EQ(rpma_conn_delete(&shared_), 0);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(ComplChannelTest, DeletingARequestDestroysTheSharedChannel) {
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_conn_cfg_set_compl_channel(cfg, true), 0);
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer(), "192.168.0.1", "7204", cfg, &req), 0);
  rpma_conn_cfg_delete(&cfg);
  EXPECT_CALL(mock(), DestroyCompChannel(comp_channel())).WillOnce(Return(0));
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

// Without a receive CQ the shared channel carries the main CQ alone.
TEST_F(ComplChannelTest, SharedChannelWithoutAReceiveCqServesTheMainCq) {
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_conn_cfg_set_compl_channel(cfg, true), 0);
  EXPECT_CALL(mock(), CreateCq(_, _, _, comp_channel(), _))
      .WillOnce(Return(cq()));
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer(), "192.168.0.1", "7204", cfg, &req), 0);
  rpma_conn_cfg_delete(&cfg);
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &shared_), 0);
  rpma_cq* rcq = reinterpret_cast<rpma_cq*>(1);
  ASSERT_EQ(rpma_conn_get_rcq(shared_, &rcq), 0);
  EXPECT_EQ(rcq, nullptr);
  NextCqEventIs(cq());
  rpma_cq* fired = nullptr;
  bool is_rcq = true;
  ASSERT_EQ(rpma_conn_wait(shared_, 0, &fired, &is_rcq), 0);
  EXPECT_FALSE(is_rcq);
}

}  // namespace
}  // namespace rpma_harness
