// Shared receive queues through the rpma API (rpma_srq_cfg_*(3),
// rpma_srq_new(3), rpma_srq_recv(3), rpma_srq_get_rcq(3),
// rpma_conn_cfg_set_srq(3)): argument rules, and what reaches the backend
// call for call, as librpma 1.3's srq.c / peer.c / conn_req.c do it.

#include <errno.h>

#include <cstring>

#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::Return;
using ::testing::SaveArgPointee;
using testing_support::CapturedRecvWr;
using testing_support::MockConnectionTest;

const void* const kOpContext = reinterpret_cast<const void*>(0xBEEF);

class SrqTest : public MockConnectionTest {
 protected:
  void SetUp() override {
    MockConnectionTest::SetUp();
    srq_.context = cq()->context;
    srq_rcq_.context = cq()->context;
    srq_rcq_.channel = &srq_channel_;
    srq_channel_.fd = 1003;
    ON_CALL(mock(), CreateSrq(_, _)).WillByDefault(Return(&srq_));
    ON_CALL(mock(), DestroySrq(&srq_)).WillByDefault(Return(0));
    ON_CALL(mock(), DestroyCq(&srq_rcq_)).WillByDefault(Return(0));
    ON_CALL(mock(), ReqNotifyCq(&srq_rcq_, _)).WillByDefault(Return(0));
    ON_CALL(mock(), DestroyCompChannel(&srq_channel_)).WillByDefault(Return(0));
  }

  // An SRQ whose receive CQ (if any) is srq_rcq_ on srq_channel_.
  rpma_srq* NewSrq(uint32_t rq_size, uint32_t rcq_size) {
    rpma_srq_cfg* cfg = nullptr;
    EXPECT_EQ(rpma_srq_cfg_new(&cfg), 0);
    EXPECT_EQ(rpma_srq_cfg_set_rq_size(cfg, rq_size), 0);
    EXPECT_EQ(rpma_srq_cfg_set_rcq_size(cfg, rcq_size), 0);
    if (rcq_size > 0) {
      EXPECT_CALL(mock(), CreateCompChannel(_)).WillOnce(Return(&srq_channel_));
      EXPECT_CALL(mock(),
                  CreateCq(_, static_cast<int>(rcq_size), _, &srq_channel_, _))
          .WillOnce(Return(&srq_rcq_));
    }
    rpma_srq* srq = nullptr;
    EXPECT_EQ(rpma_srq_new(peer(), cfg, &srq), 0);
    rpma_srq_cfg_delete(&cfg);
    ::testing::Mock::VerifyAndClearExpectations(&mock());
    return srq;
  }

  ibv_srq srq_{};
  ibv_cq srq_rcq_{};
  ibv_comp_channel srq_channel_{};
};

// ---- rpma_srq_cfg ----

// rpma_srq_cfg_new(3): both sizes default to 100.
TEST_F(SrqTest, SrqCfgDefaultsAreTheManPages) {
  rpma_srq_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_srq_cfg_new(&cfg), 0);
  uint32_t rq = 0, rcq = 0;
  ASSERT_EQ(rpma_srq_cfg_get_rq_size(cfg, &rq), 0);
  ASSERT_EQ(rpma_srq_cfg_get_rcq_size(cfg, &rcq), 0);
  EXPECT_EQ(rq, 100u);
  EXPECT_EQ(rcq, 100u);
  ASSERT_EQ(rpma_srq_cfg_set_rq_size(cfg, 7), 0);
  ASSERT_EQ(rpma_srq_cfg_set_rcq_size(cfg, 0), 0);
  ASSERT_EQ(rpma_srq_cfg_get_rq_size(cfg, &rq), 0);
  ASSERT_EQ(rpma_srq_cfg_get_rcq_size(cfg, &rcq), 0);
  EXPECT_EQ(rq, 7u);
  EXPECT_EQ(rcq, 0u);
  EXPECT_EQ(rpma_srq_cfg_delete(&cfg), 0);
  EXPECT_EQ(cfg, nullptr);
  EXPECT_EQ(rpma_srq_cfg_delete(&cfg), 0);
}

TEST_F(SrqTest, SrqCfgArgumentRules) {
  rpma_srq_cfg* cfg = nullptr;
  uint32_t size = 42;
  EXPECT_EQ(rpma_srq_cfg_new(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_cfg_delete(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_cfg_set_rq_size(nullptr, 1), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_cfg_set_rcq_size(nullptr, 1), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_cfg_get_rq_size(nullptr, &size), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_cfg_get_rcq_size(nullptr, &size), RPMA_E_INVAL);
  ASSERT_EQ(rpma_srq_cfg_new(&cfg), 0);
  EXPECT_EQ(rpma_srq_cfg_get_rq_size(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_cfg_get_rcq_size(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(size, 42u);
  rpma_srq_cfg_delete(&cfg);
}

// ---- rpma_srq_new / delete ----

TEST_F(SrqTest, SrqNewArgumentRules) {
  rpma_srq* srq = nullptr;
  EXPECT_CALL(mock(), CreateSrq).Times(0);
  EXPECT_EQ(rpma_srq_new(nullptr, nullptr, &srq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_new(peer(), nullptr, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_delete(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_delete(&srq), 0);  // NULL object
}

// librpma peer.c rpma_peer_create_srq: max_wr = rq_size, one SGE, no limit.
TEST_F(SrqTest, SrqNewAsksForRqSizeWrsOfOneSgeOnThePeersPd) {
  ibv_srq_init_attr attr;
  std::memset(&attr, 0xee, sizeof(attr));
  EXPECT_CALL(mock(), CreateSrq(pd(), _))
      .WillOnce(DoAll(SaveArgPointee<1>(&attr), Return(&srq_)));
  rpma_srq* srq = NewSrq(33, 0);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(attr.srq_context, nullptr);
  EXPECT_EQ(attr.attr.max_wr, 33u);
  EXPECT_EQ(attr.attr.max_sge, 1u);
  EXPECT_EQ(attr.attr.srq_limit, 0u);
  rpma_cq* rcq = reinterpret_cast<rpma_cq*>(1);
  ASSERT_EQ(rpma_srq_get_rcq(srq, &rcq), 0);
  EXPECT_EQ(rcq, nullptr);  // rcq_size 0: no receive CQ of its own
  EXPECT_EQ(rpma_srq_delete(&srq), 0);
}

TEST_F(SrqTest, SrqWithRcqSizeHasItsOwnArmedReceiveCq) {
  EXPECT_CALL(mock(), ReqNotifyCq(&srq_rcq_, 0)).WillOnce(Return(0));
  rpma_srq* srq = NewSrq(8, 12);
  ASSERT_NE(srq, nullptr);
  rpma_cq* rcq = nullptr;
  ASSERT_EQ(rpma_srq_get_rcq(srq, &rcq), 0);
  ASSERT_NE(rcq, nullptr);
  int fd = -1;
  ASSERT_EQ(rpma_cq_get_fd(rcq, &fd), 0);
  EXPECT_EQ(fd, srq_channel_.fd);
  // Deleting: the CQ and its channel, then the SRQ.
  {
    ::testing::InSequence order;
    EXPECT_CALL(mock(), DestroyCq(&srq_rcq_)).WillOnce(Return(0));
    EXPECT_CALL(mock(), DestroyCompChannel(&srq_channel_)).WillOnce(Return(0));
    EXPECT_CALL(mock(), DestroySrq(&srq_)).WillOnce(Return(0));
  }
  EXPECT_EQ(rpma_srq_delete(&srq), 0);
  EXPECT_EQ(srq, nullptr);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(SrqTest, SrqCreationFailureIsProvider) {
  EXPECT_CALL(mock(), CreateSrq(_, _))
      .WillOnce([](ibv_pd*, ibv_srq_init_attr*) {
        errno = EINVAL;
        return nullptr;
      });
  rpma_srq* srq = nullptr;
  EXPECT_EQ(rpma_srq_new(peer(), nullptr, &srq), RPMA_E_PROVIDER);
  EXPECT_EQ(srq, nullptr);
}

TEST_F(SrqTest, SrqRcqFailureDestroysTheSrq) {
  EXPECT_CALL(mock(), CreateCompChannel(_)).WillOnce(Return(&srq_channel_));
  EXPECT_CALL(mock(), CreateCq(_, _, _, &srq_channel_, _))
      .WillOnce(Return(nullptr));
  EXPECT_CALL(mock(), DestroySrq(&srq_)).WillOnce(Return(0));
  rpma_srq* srq = nullptr;
  EXPECT_EQ(rpma_srq_new(peer(), nullptr, &srq), RPMA_E_PROVIDER);
  EXPECT_EQ(srq, nullptr);
}

TEST_F(SrqTest, SrqDestroyFailureIsProviderAndTheObjectIsReleased) {
  rpma_srq* srq = NewSrq(4, 0);
  EXPECT_CALL(mock(), DestroySrq(&srq_)).WillOnce(Return(EBUSY));
  EXPECT_EQ(rpma_srq_delete(&srq), RPMA_E_PROVIDER);
  EXPECT_EQ(srq, nullptr);
}

// ---- rpma_srq_recv ----

TEST_F(SrqTest, SrqRecvArgumentRules) {
  rpma_srq* srq = NewSrq(4, 0);
  EXPECT_CALL(mock(), PostSrqRecv).Times(0);
  EXPECT_EQ(rpma_srq_recv(nullptr, local(), 0, 8, kOpContext), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_recv(srq, nullptr, 1, 0, kOpContext), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_recv(srq, nullptr, 0, 1, kOpContext), RPMA_E_INVAL);
  rpma_srq_delete(&srq);
}

// librpma mr.c rpma_mr_srq_recv: the receive rpma_recv would post, to the
// SRQ.
TEST_F(SrqTest, SrqRecvPostsOneSgeToTheSrq) {
  rpma_srq* srq = NewSrq(4, 0);
  CapturedRecvWr c{};
  EXPECT_CALL(mock(), PostSrqRecv(&srq_, _, _))
      .WillOnce([&](ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr**) {
        c.wr = *wr;
        c.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
        return 0;
      });
  ASSERT_EQ(rpma_srq_recv(srq, local(), 16, 64, kOpContext), 0);
  ibv_recv_wr expected{};
  expected.wr_id = reinterpret_cast<uint64_t>(kOpContext);
  expected.sg_list = c.wr.sg_list;
  expected.num_sge = 1;
  EXPECT_EQ(std::memcmp(&expected, &c.wr, sizeof(expected)), 0);
  ASSERT_EQ(c.sges.size(), 1u);
  EXPECT_EQ(c.sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 16);
  EXPECT_EQ(c.sges[0].length, 64u);
  EXPECT_EQ(c.sges[0].lkey, kLocalLkey);
  rpma_srq_delete(&srq);
}

TEST_F(SrqTest, ZeroByteSrqRecvHasNoSge) {
  rpma_srq* srq = NewSrq(4, 0);
  ibv_recv_wr got{};
  EXPECT_CALL(mock(), PostSrqRecv(&srq_, _, _))
      .WillOnce([&](ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr**) {
        got = *wr;
        return 0;
      });
  ASSERT_EQ(rpma_srq_recv(srq, nullptr, 0, 0, kOpContext), 0);
  EXPECT_EQ(got.sg_list, nullptr);
  EXPECT_EQ(got.num_sge, 0);
  EXPECT_EQ(got.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  rpma_srq_delete(&srq);
}

TEST_F(SrqTest, SrqRecvPostFailureIsProviderAndLogged) {
  rpma_srq* srq = NewSrq(4, 0);
  EXPECT_CALL(mock(), PostSrqRecv(&srq_, _, _)).WillOnce(Return(ENOMEM));
  EXPECT_EQ(rpma_srq_recv(srq, local(), 0, 8, kOpContext), RPMA_E_PROVIDER);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), ::testing::HasSubstr("ibv_post_srq_recv"));
  rpma_srq_delete(&srq);
}

TEST_F(SrqTest, SrqGetRcqArgumentRules) {
  rpma_srq* srq = NewSrq(4, 0);
  rpma_cq* rcq = nullptr;
  EXPECT_EQ(rpma_srq_get_rcq(nullptr, &rcq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_srq_get_rcq(srq, nullptr), RPMA_E_INVAL);
  rpma_srq_delete(&srq);
}

// ---- connections on an SRQ ----

TEST_F(SrqTest, ConnCfgSrqArgumentRulesAndDefault) {
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  rpma_srq* got = reinterpret_cast<rpma_srq*>(1);
  ASSERT_EQ(rpma_conn_cfg_get_srq(cfg, &got), 0);
  EXPECT_EQ(got, nullptr);
  rpma_srq* srq = NewSrq(4, 0);
  EXPECT_EQ(rpma_conn_cfg_set_srq(nullptr, srq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_set_srq(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_get_srq(nullptr, &got), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_get_srq(cfg, nullptr), RPMA_E_INVAL);
  ASSERT_EQ(rpma_conn_cfg_set_srq(cfg, srq), 0);
  ASSERT_EQ(rpma_conn_cfg_get_srq(cfg, &got), 0);
  EXPECT_EQ(got, srq);
  rpma_conn_cfg_delete(&cfg);
  rpma_srq_delete(&srq);
}

// librpma conn_req.c / peer.c rpma_peer_setup_qp: the QP names the SRQ and
// its receive CQ is the SRQ's; the connection has no receive CQ.
TEST_F(SrqTest, ConnectionOnAnSrqWithRcqCompletesReceivesOnTheSrqsCq) {
  rpma_srq* srq = NewSrq(4, 6);
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_conn_cfg_set_srq(cfg, srq), 0);
  ASSERT_EQ(rpma_conn_cfg_set_rcq_size(cfg, 9), 0);  // ignored: SRQ has one
  ibv_qp_init_attr attr{};
  EXPECT_CALL(mock(), CreateCq(_, _, _, _, _)).Times(::testing::AnyNumber());
  EXPECT_CALL(mock(), CreateCq(_, 9, _, _, _)).Times(0);
  EXPECT_CALL(mock(), CreateQp(_, _, _))
      .WillOnce([&](rdma_cm_id* id, ibv_pd*, ibv_qp_init_attr* init) {
        attr = *init;
        id->qp = qp();
        return 0;
      });
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer(), "192.168.0.1", "7204", cfg, &req), 0);
  EXPECT_EQ(attr.srq, &srq_);
  EXPECT_EQ(attr.recv_cq, &srq_rcq_);
  EXPECT_EQ(attr.send_cq, cq());
  rpma_conn* conn = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &conn), 0);
  rpma_cq* rcq = reinterpret_cast<rpma_cq*>(1);
  ASSERT_EQ(rpma_conn_get_rcq(conn, &rcq), 0);
  EXPECT_EQ(rcq, nullptr);
  // Deleting the connection leaves the SRQ's CQ alone.
  EXPECT_CALL(mock(), DestroyCq(_)).Times(::testing::AnyNumber());
  EXPECT_CALL(mock(), DestroyCq(&srq_rcq_)).Times(0);
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
  rpma_conn_cfg_delete(&cfg);
  rpma_srq_delete(&srq);
}

// Without an SRQ receive CQ, the connection's own rcq (if configured) is
// the QP's receive CQ.
TEST_F(SrqTest, ConnectionOnAnSrqWithoutRcqUsesItsOwnReceiveCq) {
  rpma_srq* srq = NewSrq(4, 0);
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_conn_cfg_set_srq(cfg, srq), 0);
  ASSERT_EQ(rpma_conn_cfg_set_rcq_size(cfg, 9), 0);
  ibv_cq own_rcq{};
  ON_CALL(mock(), DestroyCq(&own_rcq)).WillByDefault(Return(0));
  ON_CALL(mock(), ReqNotifyCq(&own_rcq, _)).WillByDefault(Return(0));
  EXPECT_CALL(mock(), CreateCq(_, _, _, _, _)).Times(::testing::AnyNumber());
  EXPECT_CALL(mock(), CreateCq(_, 9, _, _, _)).WillOnce(Return(&own_rcq));
  ibv_qp_init_attr attr{};
  EXPECT_CALL(mock(), CreateQp(_, _, _))
      .WillOnce([&](rdma_cm_id* id, ibv_pd*, ibv_qp_init_attr* init) {
        attr = *init;
        id->qp = qp();
        return 0;
      });
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer(), "192.168.0.1", "7204", cfg, &req), 0);
  EXPECT_EQ(attr.srq, &srq_);
  EXPECT_EQ(attr.recv_cq, &own_rcq);
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
  rpma_conn_cfg_delete(&cfg);
  rpma_srq_delete(&srq);
}

// librpma conn_req.c: a shared completion channel cannot include an SRQ's
// receive CQ (other connections complete there too).
TEST_F(SrqTest, SharedChannelWithAnSrqThatHasARcqIsInval) {
  rpma_srq* srq = NewSrq(4, 6);
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_conn_cfg_set_srq(cfg, srq), 0);
  ASSERT_EQ(rpma_conn_cfg_set_compl_channel(cfg, true), 0);
  EXPECT_CALL(mock(), CreateQp).Times(0);
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_conn_req_new(peer(), "192.168.0.1", "7204", cfg, &req),
            RPMA_E_INVAL);
  EXPECT_EQ(req, nullptr);
  rpma_conn_cfg_delete(&cfg);
  rpma_srq_delete(&srq);
}

}  // namespace
}  // namespace rpma_harness
