// Connection set-up through the rpma API: argument rules, what reaches the
// CM, private data both ways, and the CM event -> rpma_conn_event mapping.

#include <errno.h>

#include <cstring>
#include <set>
#include <string>

#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::AllOf;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::Return;
using testing_support::MockConnectionTest;

class ConnTest : public MockConnectionTest {};

TEST_F(ConnTest, GetIbvContextArgumentRules) {
  ibv_context* ctx = nullptr;
  EXPECT_EQ(
      rpma_utils_get_ibv_context(nullptr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx),
      RPMA_E_INVAL);
  EXPECT_EQ(rpma_utils_get_ibv_context("1.2.3.4", RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                       nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_utils_get_ibv_context(
                "1.2.3.4", static_cast<rpma_util_ibv_context_type>(7), &ctx),
            RPMA_E_INVAL);
  EXPECT_EQ(ctx, nullptr);
}

TEST_F(ConnTest, GetIbvContextAsksForLocalOrRemote) {
  ibv_context* ctx = nullptr;
  EXPECT_CALL(mock(),
              GetContextByAddress(::testing::StrEq("10.0.0.1"), true, _));
  EXPECT_EQ(
      rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx),
      0);
  EXPECT_CALL(mock(),
              GetContextByAddress(::testing::StrEq("10.0.0.2"), false, _));
  EXPECT_EQ(rpma_utils_get_ibv_context("10.0.0.2", RPMA_UTIL_IBV_CONTEXT_REMOTE,
                                       &ctx),
            0);
}

TEST_F(ConnTest, NoDeviceIsProviderAndLogged) {
  EXPECT_CALL(mock(), GetContextByAddress(_, _, _))
      .WillOnce([](const char*, bool, ibv_context**) {
        errno = ENODEV;
        return -1;
      });
  ibv_context* ctx = nullptr;
  EXPECT_EQ(
      rpma_utils_get_ibv_context("10.0.0.9", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx),
      RPMA_E_PROVIDER);
  EXPECT_EQ(ctx, nullptr);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("10.0.0.9"));
  EXPECT_THAT(log().back(), HasSubstr(std::strerror(ENODEV)));
}

TEST_F(ConnTest, PeerArgumentRulesAndPdFailures) {
  rpma_peer* peer = nullptr;
  EXPECT_EQ(rpma_peer_new(nullptr, &peer), RPMA_E_INVAL);
  ibv_context ctx{};
  EXPECT_EQ(rpma_peer_new(&ctx, nullptr), RPMA_E_INVAL);
  EXPECT_CALL(mock(), AllocPd(&ctx)).WillOnce([](ibv_context*) {
    errno = ENOMEM;
    return nullptr;
  });
  EXPECT_EQ(rpma_peer_new(&ctx, &peer), RPMA_E_NOMEM);
  EXPECT_CALL(mock(), AllocPd(&ctx)).WillOnce([](ibv_context*) {
    errno = EPERM;
    return nullptr;
  });
  EXPECT_EQ(rpma_peer_new(&ctx, &peer), RPMA_E_PROVIDER);
  EXPECT_CALL(mock(), AllocPd(&ctx)).WillOnce([](ibv_context*) {
    errno = 0;
    return nullptr;
  });
  EXPECT_EQ(rpma_peer_new(&ctx, &peer), RPMA_E_UNKNOWN);
  EXPECT_EQ(peer, nullptr);
  EXPECT_EQ(rpma_peer_delete(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);  // *peer_ptr == NULL is a no-op
}

TEST_F(ConnTest, ConnCfgDefaultsAndRules) {
  rpma_conn_cfg* cfg = nullptr;
  EXPECT_EQ(rpma_conn_cfg_new(nullptr), RPMA_E_INVAL);
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  int timeout = 0;
  uint32_t size = 0;
  EXPECT_EQ(rpma_conn_cfg_get_timeout(cfg, &timeout), 0);
  EXPECT_EQ(timeout, RPMA_DEFAULT_TIMEOUT_MS);
  EXPECT_EQ(rpma_conn_cfg_get_cq_size(cfg, &size), 0);
  EXPECT_EQ(size, 10u);
  EXPECT_EQ(rpma_conn_cfg_get_rcq_size(cfg, &size), 0);
  EXPECT_EQ(size, 0u);
  EXPECT_EQ(rpma_conn_cfg_get_sq_size(cfg, &size), 0);
  EXPECT_EQ(size, 10u);
  EXPECT_EQ(rpma_conn_cfg_get_rq_size(cfg, &size), 0);
  EXPECT_EQ(size, 10u);
  EXPECT_EQ(rpma_conn_cfg_set_timeout(cfg, -1), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_set_timeout(nullptr, 5), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_set_timeout(cfg, 5), 0);
  EXPECT_EQ(rpma_conn_cfg_get_timeout(cfg, &timeout), 0);
  EXPECT_EQ(timeout, 5);
  EXPECT_EQ(rpma_conn_cfg_set_sq_size(cfg, 77), 0);
  EXPECT_EQ(rpma_conn_cfg_get_sq_size(cfg, &size), 0);
  EXPECT_EQ(size, 77u);
  EXPECT_EQ(rpma_conn_cfg_set_cq_size(nullptr, 1), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_get_rq_size(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_get_timeout(nullptr, &timeout), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_delete(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_cfg_delete(&cfg), 0);
  EXPECT_EQ(cfg, nullptr);
}

TEST_F(ConnTest, ConnReqNewUsesTheCfgForQueuesAndTimeouts) {
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  rpma_conn_cfg_set_timeout(cfg, 250);
  rpma_conn_cfg_set_cq_size(cfg, 33);
  rpma_conn_cfg_set_sq_size(cfg, 21);
  rpma_conn_cfg_set_rq_size(cfg, 12);
  EXPECT_CALL(mock(), ResolveAddr(_, ::testing::StrEq("10.1.1.1"),
                                  ::testing::StrEq("9999"), 250));
  EXPECT_CALL(mock(), ResolveRoute(_, 250));
  EXPECT_CALL(mock(), CreateCq(_, 33, _, _, _));
  ibv_qp_init_attr seen{};
  EXPECT_CALL(mock(), CreateQp(_, _, _))
      .WillOnce([&](rdma_cm_id* id, ibv_pd*, ibv_qp_init_attr* attr) {
        seen = *attr;
        id->qp = qp();
        return 0;
      });
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer(), "10.1.1.1", "9999", cfg, &req), 0);
  EXPECT_EQ(seen.qp_type, IBV_QPT_RC);
  EXPECT_EQ(seen.cap.max_send_wr, 21u);
  EXPECT_EQ(seen.cap.max_recv_wr, 12u);
  EXPECT_EQ(seen.cap.max_send_sge, 1u);
  EXPECT_EQ(seen.cap.max_recv_sge, 1u);
  EXPECT_EQ(seen.sq_sig_all, 0);
  EXPECT_EQ(seen.send_cq, cq());
  EXPECT_EQ(seen.recv_cq, cq());
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
  rpma_conn_cfg_delete(&cfg);
}

TEST_F(ConnTest, ConnReqNewArgumentRules) {
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_conn_req_new(nullptr, "a", "1", nullptr, &req), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_new(peer(), nullptr, "1", nullptr, &req),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_new(peer(), "a", nullptr, nullptr, &req),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_new(peer(), "a", "1", nullptr, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(req, nullptr);
}

TEST_F(ConnTest, UnresolvableAddressIsProviderAndReleasesTheId) {
  EXPECT_CALL(mock(), ResolveAddr(_, _, _, _))
      .WillOnce([](rdma_cm_id*, const char*, const char*, int) {
        errno = EHOSTUNREACH;
        return -1;
      });
  EXPECT_CALL(mock(), DestroyId(_));
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_conn_req_new(peer(), "10.9.9.9", "1", nullptr, &req),
            RPMA_E_PROVIDER);
  EXPECT_EQ(req, nullptr);
  EXPECT_THAT(log().back(), HasSubstr("rdma_resolve_addr"));
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(ConnTest, ConnectArgumentRules) {
  rpma_conn* conn = nullptr;
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(nullptr, nullptr, &conn), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &conn), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_delete(nullptr), RPMA_E_INVAL);
}

// rpma_conn_req_connect(3): on failure *req_ptr "is consumed and set to
// NULL"; librpma's src/conn_req.c deletes the request before it returns
// RPMA_E_INVAL for a NULL conn_ptr or empty private data. Each case is a
// fresh request; the request's CM id must be destroyed (else it leaks) and
// nothing may be connected.
TEST_F(ConnTest, ConnectArgumentErrorsConsumeTheRequest) {
  char data[4] = "abc";
  rpma_conn_private_data empty{data, 0};
  rpma_conn_private_data null_ptr{nullptr, 4};
  struct Case {
    const char* what;
    const rpma_conn_private_data* pdata;
    bool null_conn_ptr;
  } cases[] = {
      {"conn_ptr NULL", nullptr, true},
      {"pdata->len 0", &empty, false},
      {"pdata->ptr NULL", &null_ptr, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    rpma_conn_req* req = NewActiveRequest();
    ASSERT_NE(req, nullptr);
    EXPECT_CALL(mock(), Connect(_, _)).Times(0);
    EXPECT_CALL(mock(), DestroyId(_)).Times(1);
    rpma_conn* conn = nullptr;
    EXPECT_EQ(
        rpma_conn_req_connect(&req, c.pdata, c.null_conn_ptr ? nullptr : &conn),
        RPMA_E_INVAL);
    EXPECT_EQ(req, nullptr);
    EXPECT_EQ(conn, nullptr);
    ::testing::Mock::VerifyAndClearExpectations(&mock());
  }
}

TEST_F(ConnTest, PassiveConnectArgumentErrorRejectsAndConsumesTheRequest) {
  rpma_conn_req* req = NewPassiveRequest("client-hello");
  ASSERT_NE(req, nullptr);
  EXPECT_CALL(mock(), Accept(_, _)).Times(0);
  EXPECT_CALL(mock(), Reject(_, _, _)).Times(1);
  char data[4] = "abc";
  rpma_conn_private_data empty{data, 0};
  rpma_conn* conn = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(&req, &empty, &conn), RPMA_E_INVAL);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(conn, nullptr);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(ConnTest, FailedEventChannelConsumesTheRequest) {
  rpma_conn_req* req = NewActiveRequest();
  EXPECT_CALL(mock(), CreateEventChannel()).WillOnce([] {
    errno = EMFILE;
    return static_cast<rdma_event_channel*>(nullptr);
  });
  EXPECT_CALL(mock(), DestroyId(_)).Times(1);
  rpma_conn* conn = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &conn), RPMA_E_PROVIDER);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(conn, nullptr);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(ConnTest, ConnectSendsPrivateDataAndRetryCounts) {
  rpma_conn_req* req = NewActiveRequest();
  char data[] = "hello";
  rpma_conn_private_data pdata{data, 5};
  EXPECT_CALL(mock(),
              Connect(_, AllOf(Field(&rdma_conn_param::private_data_len, 5),
                               Field(&rdma_conn_param::private_data,
                                     static_cast<const void*>(data)),
                               Field(&rdma_conn_param::rnr_retry_count, 7),
                               Field(&rdma_conn_param::retry_count, 7))));
  rpma_conn* conn = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&req, &pdata, &conn), 0);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
}

TEST_F(ConnTest, FailedConnectConsumesTheRequest) {
  rpma_conn_req* req = NewActiveRequest();
  EXPECT_CALL(mock(), Connect(_, _))
      .WillOnce([](rdma_cm_id*, rdma_conn_param*) {
        errno = ECONNREFUSED;
        return -1;
      });
  rpma_conn* conn = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &conn), RPMA_E_PROVIDER);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(conn, nullptr);
  EXPECT_THAT(log().back(), HasSubstr("rdma_connect"));
}

TEST_F(ConnTest, PassiveRequestCarriesTheRequestsPrivateData) {
  rpma_conn_req* req = NewPassiveRequest("client-hello");
  ASSERT_NE(req, nullptr);
  rpma_conn_private_data pdata{};
  ASSERT_EQ(rpma_conn_req_get_private_data(req, &pdata), 0);
  ASSERT_EQ(pdata.len, 12);
  EXPECT_EQ(std::string(static_cast<char*>(pdata.ptr), pdata.len),
            "client-hello");
  EXPECT_EQ(rpma_conn_req_get_private_data(nullptr, &pdata), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_req_get_private_data(req, nullptr), RPMA_E_INVAL);
  EXPECT_CALL(mock(), Reject(_, _, _));  // dropping a received request rejects
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
}

TEST_F(ConnTest, PassiveConnectAcceptsAndKeepsTheRequestsPrivateData) {
  rpma_conn_req* req = NewPassiveRequest("client-hello");
  ASSERT_NE(req, nullptr);
  char data[] = "server-descriptor";
  rpma_conn_private_data pdata{data, sizeof(data)};
  EXPECT_CALL(mock(), Accept(_, Field(&rdma_conn_param::private_data_len,
                                      sizeof(data))));
  EXPECT_CALL(mock(), Connect).Times(0);
  rpma_conn* conn = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&req, &pdata, &conn), 0);
  rpma_conn_private_data got{};
  ASSERT_EQ(rpma_conn_get_private_data(conn, &got), 0);
  EXPECT_EQ(std::string(static_cast<char*>(got.ptr), got.len), "client-hello");
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
}

TEST_F(ConnTest, NextConnReqRejectsOtherEvents) {
  rpma_ep* ep = nullptr;
  ON_CALL(mock(), BindAddr(_, _, _)).WillByDefault(Return(0));
  ON_CALL(mock(), Listen(_, _)).WillByDefault(Return(0));
  ASSERT_EQ(rpma_ep_listen(peer(), "10.0.0.1", "7204", &ep), 0);
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_ep_next_conn_req(ep, nullptr, &req), RPMA_E_NO_EVENT);
  QueueCmEvent(RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(rpma_ep_next_conn_req(ep, nullptr, &req), RPMA_E_INVAL);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(rpma_ep_next_conn_req(nullptr, nullptr, &req), RPMA_E_INVAL);
  EXPECT_EQ(rpma_ep_next_conn_req(ep, nullptr, nullptr), RPMA_E_INVAL);
  int fd = -1;
  EXPECT_EQ(rpma_ep_get_fd(ep, &fd), 0);
  EXPECT_EQ(fd, 1002);
  EXPECT_EQ(rpma_ep_get_fd(nullptr, &fd), RPMA_E_INVAL);
  EXPECT_EQ(rpma_ep_shutdown(&ep), 0);
  EXPECT_EQ(ep, nullptr);
  EXPECT_EQ(rpma_ep_shutdown(nullptr), RPMA_E_INVAL);
}

TEST_F(ConnTest, ListenArgumentRulesAndBindFailure) {
  rpma_ep* ep = nullptr;
  EXPECT_EQ(rpma_ep_listen(nullptr, "a", "1", &ep), RPMA_E_INVAL);
  EXPECT_EQ(rpma_ep_listen(peer(), nullptr, "1", &ep), RPMA_E_INVAL);
  EXPECT_EQ(rpma_ep_listen(peer(), "a", nullptr, &ep), RPMA_E_INVAL);
  EXPECT_EQ(rpma_ep_listen(peer(), "a", "1", nullptr), RPMA_E_INVAL);
  EXPECT_CALL(mock(), BindAddr(_, _, _))
      .WillOnce([](rdma_cm_id*, const char*, const char*) {
        errno = EADDRINUSE;
        return -1;
      });
  EXPECT_CALL(mock(), DestroyId(_));
  EXPECT_EQ(rpma_ep_listen(peer(), "10.0.0.1", "7204", &ep), RPMA_E_PROVIDER);
  EXPECT_EQ(ep, nullptr);
  EXPECT_THAT(log().back(), HasSubstr("rdma_bind_addr"));
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

struct EventCase {
  rdma_cm_event_type cm;
  rpma_conn_event rpma;
};

class ConnEventTest : public MockConnectionTest,
                      public ::testing::WithParamInterface<EventCase> {};

TEST_P(ConnEventTest, MapsCmEventToConnEvent) {
  QueueCmEvent(GetParam().cm);
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  EXPECT_EQ(rpma_conn_next_event(conn(), &event), 0);
  EXPECT_EQ(event, GetParam().rpma);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ConnEventTest,
    ::testing::Values(
        EventCase{RDMA_CM_EVENT_ESTABLISHED, RPMA_CONN_ESTABLISHED},
        EventCase{RDMA_CM_EVENT_DISCONNECTED, RPMA_CONN_CLOSED},
        EventCase{RDMA_CM_EVENT_TIMEWAIT_EXIT, RPMA_CONN_CLOSED},
        EventCase{RDMA_CM_EVENT_CONNECT_ERROR, RPMA_CONN_LOST},
        EventCase{RDMA_CM_EVENT_DEVICE_REMOVAL, RPMA_CONN_LOST},
        EventCase{RDMA_CM_EVENT_REJECTED, RPMA_CONN_REJECTED},
        EventCase{RDMA_CM_EVENT_UNREACHABLE, RPMA_CONN_UNREACHABLE},
        EventCase{RDMA_CM_EVENT_ADDR_ERROR, RPMA_CONN_UNREACHABLE},
        EventCase{RDMA_CM_EVENT_ROUTE_ERROR, RPMA_CONN_UNREACHABLE}));

TEST_F(ConnTest, UnexpectedCmEventIsUnknownAndLogged) {
  QueueCmEvent(RDMA_CM_EVENT_MULTICAST_JOIN);
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  EXPECT_EQ(rpma_conn_next_event(conn(), &event), RPMA_E_UNKNOWN);
  EXPECT_EQ(event, RPMA_CONN_UNDEFINED);
  EXPECT_THAT(log().back(), HasSubstr("RDMA_CM_EVENT_MULTICAST_JOIN"));
}

TEST_F(ConnTest, NoPendingEventIsNoEvent) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  EXPECT_EQ(rpma_conn_next_event(conn(), &event), RPMA_E_NO_EVENT);
  EXPECT_EQ(rpma_conn_next_event(nullptr, &event), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_next_event(conn(), nullptr), RPMA_E_INVAL);
}

TEST_F(ConnTest, EstablishedCarriesTheAcceptsPrivateData) {
  QueueCmEvent(RDMA_CM_EVENT_ESTABLISHED, "descriptor-bytes");
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  ASSERT_EQ(rpma_conn_next_event(conn(), &event), 0);
  rpma_conn_private_data pdata{};
  ASSERT_EQ(rpma_conn_get_private_data(conn(), &pdata), 0);
  EXPECT_EQ(std::string(static_cast<char*>(pdata.ptr), pdata.len),
            "descriptor-bytes");
  EXPECT_EQ(rpma_conn_get_private_data(nullptr, &pdata), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_private_data(conn(), nullptr), RPMA_E_INVAL);
}

TEST_F(ConnTest, ConnGettersAndArgumentRules) {
  uint32_t qp_num = 0;
  EXPECT_EQ(rpma_conn_get_qp_num(conn(), &qp_num), 0);
  EXPECT_EQ(qp_num, kQpNum);
  rpma_cq* rcq = reinterpret_cast<rpma_cq*>(0x1);
  EXPECT_EQ(rpma_conn_get_rcq(conn(), &rcq), 0);
  EXPECT_EQ(rcq, nullptr);  // default cfg: no separate receive CQ
  rpma_cq* cq = nullptr;
  EXPECT_EQ(rpma_conn_get_cq(conn(), &cq), 0);
  EXPECT_NE(cq, nullptr);
  int fd = -1;
  EXPECT_EQ(rpma_conn_get_event_fd(conn(), &fd), 0);
  EXPECT_EQ(fd, 1002);
  EXPECT_EQ(rpma_conn_get_qp_num(nullptr, &qp_num), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_qp_num(conn(), nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_cq(nullptr, &cq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_cq(conn(), nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_rcq(nullptr, &cq), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_event_fd(nullptr, &fd), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_get_event_fd(conn(), nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_disconnect(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_delete(nullptr), RPMA_E_INVAL);
}

TEST_F(ConnTest, DisconnectFailureIsProvider) {
  EXPECT_CALL(mock(), Disconnect(_)).WillOnce([](rdma_cm_id*) {
    errno = EINVAL;
    return -1;
  });
  EXPECT_EQ(rpma_conn_disconnect(conn()), RPMA_E_PROVIDER);
  EXPECT_THAT(log().back(), HasSubstr("rdma_disconnect"));
}

TEST(ErrStrTest, EveryCodeHasItsOwnString) {
  std::set<std::string> seen;
  for (int code = RPMA_E_NOT_SHARED_CHNL; code < RPMA_E_UNKNOWN; ++code) {
    std::string text = rpma_err_2str(code);
    EXPECT_NE(text, "Unknown error") << code;
    EXPECT_TRUE(seen.insert(text).second) << text;
  }
  // librpma's own texts for what is not a code (src/rpma_err.c, utils.c).
  EXPECT_STREQ(rpma_err_2str(RPMA_E_UNKNOWN), "Unknown error");
  EXPECT_STREQ(rpma_err_2str(-1), "Unknown error");
  EXPECT_STREQ(rpma_err_2str(RPMA_E_PROVIDER), "Provider error occurred");
  EXPECT_STREQ(rpma_utils_conn_event_2str(static_cast<rpma_conn_event>(5)),
               "Unsupported connection event");
  EXPECT_STREQ(rpma_utils_conn_event_2str(RPMA_CONN_LOST), "Connection lost");
}

TEST(MacroValuesTest, MatchLibrpma) {
  EXPECT_EQ(RPMA_E_UNKNOWN, -100000);
  EXPECT_EQ(RPMA_E_PROVIDER, -100002);
  EXPECT_EQ(RPMA_E_INVAL, -100004);
  EXPECT_EQ(RPMA_E_NOT_SHARED_CHNL, -100009);
  EXPECT_EQ(RPMA_F_COMPLETION_ON_ERROR, 1);
  EXPECT_EQ(RPMA_F_COMPLETION_ALWAYS, 3);
  EXPECT_EQ(RPMA_MR_USAGE_RECV, 128);
  EXPECT_EQ(RPMA_CONN_UNDEFINED, -1);
  EXPECT_EQ(RPMA_CONN_UNREACHABLE, 4);
}

}  // namespace
}  // namespace rpma_harness
