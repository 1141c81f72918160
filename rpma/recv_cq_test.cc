// rpma_recv / rpma_conn_req_recv argument rules and WRs; rpma_cq_get_wc and
// rpma_cq_wait.

#include <errno.h>

#include <cstring>

#include "mock/matchers.h"
#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SetArgPointee;
using testing_support::CapturedRecvWr;
using testing_support::CaptureRecvWr;
using testing_support::MockConnectionTest;

const void* const kOpContext = reinterpret_cast<const void*>(0xBEEF);

class RecvTest : public MockConnectionTest {};

TEST_F(RecvTest, RecvArgumentRules) {
  EXPECT_CALL(mock(), PostRecv).Times(0);
  EXPECT_EQ(rpma_recv(nullptr, local(), 0, 8, kOpContext), RPMA_E_INVAL);
  EXPECT_EQ(rpma_recv(conn(), nullptr, 1, 0, kOpContext), RPMA_E_INVAL);
  EXPECT_EQ(rpma_recv(conn(), nullptr, 0, 1, kOpContext), RPMA_E_INVAL);
}

TEST_F(RecvTest, RecvPostsOneSge) {
  CapturedRecvWr c{};
  EXPECT_CALL(mock(), PostRecv(qp(), _, _)).WillOnce(CaptureRecvWr(&c));
  EXPECT_EQ(rpma_recv(conn(), local(), 64, 32, kOpContext), 0);
  EXPECT_EQ(c.wr.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  EXPECT_EQ(c.wr.next, nullptr);
  ASSERT_EQ(c.wr.num_sge, 1);
  EXPECT_EQ(c.sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 64);
  EXPECT_EQ(c.sges[0].length, 32u);
  EXPECT_EQ(c.sges[0].lkey, kLocalLkey);
}

// The receive a write with immediate data consumes needs no buffer.
TEST_F(RecvTest, ZeroByteRecvHasNoSge) {
  CapturedRecvWr c{};
  EXPECT_CALL(mock(), PostRecv(qp(), _, _)).WillOnce(CaptureRecvWr(&c));
  EXPECT_EQ(rpma_recv(conn(), nullptr, 0, 0, kOpContext), 0);
  EXPECT_EQ(c.wr.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  EXPECT_EQ(c.wr.num_sge, 0);
  EXPECT_EQ(c.wr.sg_list, nullptr);
}

TEST_F(RecvTest, PostRecvFailureIsProviderAndLogged) {
  CapturedRecvWr c{};
  EXPECT_CALL(mock(), PostRecv(qp(), _, _)).WillOnce(CaptureRecvWr(&c, ENOMEM));
  EXPECT_EQ(rpma_recv(conn(), local(), 0, 8, kOpContext), RPMA_E_PROVIDER);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("ibv_post_recv"));
}

TEST_F(RecvTest, ConnReqRecvArgumentRules) {
  rpma_conn_req* req = NewActiveRequest();
  ASSERT_NE(req, nullptr);
  EXPECT_CALL(mock(), PostRecv).Times(0);
  EXPECT_EQ(rpma_conn_req_recv(nullptr, local(), 0, 8, kOpContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_recv(req, nullptr, 0, 8, kOpContext), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_recv(req, nullptr, 0, 0, kOpContext), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
}

TEST_F(RecvTest, ConnReqRecvPostsOnTheRequestsQp) {
  rpma_conn_req* req = NewActiveRequest();
  ASSERT_NE(req, nullptr);
  CapturedRecvWr c{};
  EXPECT_CALL(mock(), PostRecv(qp(), _, _)).WillOnce(CaptureRecvWr(&c));
  EXPECT_EQ(rpma_conn_req_recv(req, local(), 8, 16, kOpContext), 0);
  EXPECT_EQ(c.wr.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  ASSERT_EQ(c.wr.num_sge, 1);
  EXPECT_EQ(c.sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 8);
  EXPECT_EQ(c.sges[0].length, 16u);
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
}

class CqTest : public MockConnectionTest {
 protected:
  rpma_cq* conn_cq() {
    rpma_cq* cq = nullptr;
    EXPECT_EQ(rpma_conn_get_cq(conn(), &cq), 0);
    return cq;
  }
};

TEST_F(CqTest, GetWcArgumentRules) {
  ibv_wc wc[2];
  int got = 0;
  EXPECT_CALL(mock(), PollCq).Times(0);
  EXPECT_EQ(rpma_cq_get_wc(nullptr, 1, wc, &got), RPMA_E_INVAL);
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 1, nullptr, &got), RPMA_E_INVAL);
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 0, wc, &got), RPMA_E_INVAL);
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), -1, wc, &got), RPMA_E_INVAL);
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 2, wc, nullptr), RPMA_E_INVAL);
}

TEST_F(CqTest, GetWcOfOneMayOmitTheCount) {
  EXPECT_CALL(mock(), PollCq(cq(), 1, _)).WillOnce(Return(1));
  ibv_wc wc{};
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 1, &wc, nullptr), 0);
}

TEST_F(CqTest, GetWcPassesEveryFieldThroughUnmodified) {
  ibv_wc provided[2];
  std::memset(provided, 0, sizeof(provided));
  for (size_t i = 0; i < sizeof(provided); ++i) {
    reinterpret_cast<uint8_t*>(provided)[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  provided[0].status = IBV_WC_REM_ACCESS_ERR;
  provided[1].status = IBV_WC_SUCCESS;
  EXPECT_CALL(mock(), PollCq(cq(), 2, _))
      .WillOnce([&](ibv_cq*, int, ibv_wc* wc) {
        std::memcpy(wc, provided, sizeof(provided));
        return 2;
      });
  ibv_wc wc[2];
  int got = 0;
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 2, wc, &got), 0);
  EXPECT_EQ(got, 2);
  EXPECT_EQ(std::memcmp(wc, provided, sizeof(provided)), 0);
}

TEST_F(CqTest, EmptyCqIsNoCompletion) {
  EXPECT_CALL(mock(), PollCq(cq(), 4, _)).WillOnce(Return(0));
  ibv_wc wc[4];
  int got = -1;
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 4, wc, &got), RPMA_E_NO_COMPLETION);
  EXPECT_EQ(got, -1);
}

TEST_F(CqTest, PollFailureIsProviderAndLogged) {
  EXPECT_CALL(mock(), PollCq(cq(), 1, _)).WillOnce(Return(-5));
  ibv_wc wc;
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 1, &wc, nullptr), RPMA_E_PROVIDER);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("ibv_poll_cq"));
}

TEST_F(CqTest, MoreCompletionsThanAskedForIsUnknown) {
  EXPECT_CALL(mock(), PollCq(cq(), 1, _)).WillOnce(Return(2));
  ibv_wc wc;
  EXPECT_EQ(rpma_cq_get_wc(conn_cq(), 1, &wc, nullptr), RPMA_E_UNKNOWN);
}

TEST_F(CqTest, GetFdIsTheCompletionChannelFd) {
  int fd = -1;
  EXPECT_EQ(rpma_cq_get_fd(conn_cq(), &fd), 0);
  EXPECT_EQ(fd, comp_channel()->fd);
  EXPECT_EQ(rpma_cq_get_fd(nullptr, &fd), RPMA_E_INVAL);
  EXPECT_EQ(rpma_cq_get_fd(conn_cq(), nullptr), RPMA_E_INVAL);
}

TEST_F(CqTest, WaitAcksTheEventAndRearms) {
  ::testing::InSequence in_order;
  EXPECT_CALL(mock(), GetCqEvent(comp_channel(), _, _))
      .WillOnce(DoAll(SetArgPointee<1>(cq()), Return(0)));
  EXPECT_CALL(mock(), AckCqEvents(cq(), 1u));
  EXPECT_CALL(mock(), ReqNotifyCq(cq(), 0)).WillOnce(Return(0));
  EXPECT_EQ(rpma_cq_wait(conn_cq()), 0);
}

TEST_F(CqTest, WaitWithNothingPendingIsNoCompletion) {
  EXPECT_CALL(mock(), GetCqEvent(comp_channel(), _, _))
      .WillOnce([](ibv_comp_channel*, ibv_cq**, void**) {
        errno = EAGAIN;
        return -1;
      });
  EXPECT_CALL(mock(), AckCqEvents).Times(0);
  EXPECT_EQ(rpma_cq_wait(conn_cq()), RPMA_E_NO_COMPLETION);
  EXPECT_EQ(rpma_cq_wait(nullptr), RPMA_E_INVAL);
}

TEST_F(CqTest, WaitRearmFailureIsProvider) {
  EXPECT_CALL(mock(), GetCqEvent(comp_channel(), _, _))
      .WillOnce(DoAll(SetArgPointee<1>(cq()), Return(0)));
  EXPECT_CALL(mock(), ReqNotifyCq(cq(), 0)).WillOnce(Return(EIO));
  EXPECT_EQ(rpma_cq_wait(conn_cq()), RPMA_E_PROVIDER);
}

TEST_F(CqTest, WaitOnAnEventOfAnotherCqIsUnknown) {
  ibv_cq other{};
  EXPECT_CALL(mock(), GetCqEvent(comp_channel(), _, _))
      .WillOnce(DoAll(SetArgPointee<1>(&other), Return(0)));
  EXPECT_EQ(rpma_cq_wait(conn_cq()), RPMA_E_UNKNOWN);
}

}  // namespace
}  // namespace rpma_harness
