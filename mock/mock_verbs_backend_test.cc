// MockVerbsBackend: with its defaults delegated to a fake NIC, a whole rpma
// flow runs for real and a test states only the expectation it cares about;
// without delegation every call fails the way rdma-core reports failure.

#include "mock/mock_verbs_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <memory>
#include <vector>

#include "nic/fake_nic.h"
#include "mock/matchers.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::NiceMock;
using ::testing::Pointee;

TEST(MockVerbsBackendTest, DelegatesToTheFakeAndChecksOnlyWhatTheTestAsks) {
  auto fake = std::make_shared<FakeNic>();
  auto mock = std::make_shared<NiceMock<MockVerbsBackend>>();
  mock->DelegateToFake(fake);
  ScopedBackend use(mock);

  std::vector<char> src(256, 'x'), dst(4096, 0), recv(16, 0);
  ibv_context* dev = nullptr;
  ASSERT_EQ(
      rpma_utils_get_ibv_context("10.1.1.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
      0);
  rpma_peer* peer = nullptr;
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  rpma_mr_local *src_mr, *dst_mr, *recv_mr;
  ASSERT_EQ(rpma_mr_reg(peer, src.data(), src.size(), RPMA_MR_USAGE_WRITE_SRC,
                        &src_mr),
            0);
  ASSERT_EQ(rpma_mr_reg(peer, dst.data(), dst.size(), RPMA_MR_USAGE_WRITE_DST,
                        &dst_mr),
            0);
  ASSERT_EQ(
      rpma_mr_reg(peer, recv.data(), recv.size(), RPMA_MR_USAGE_RECV, &recv_mr),
      0);
  rpma_ep* ep = nullptr;
  ASSERT_EQ(rpma_ep_listen(peer, "10.1.1.1", "9000", &ep), 0);
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer, "10.1.1.1", "9000", nullptr, &req), 0);
  rpma_conn* client = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &client), 0);
  rpma_conn_req* server_req = nullptr;
  ASSERT_EQ(rpma_ep_next_conn_req(ep, nullptr, &server_req), 0);
  ASSERT_EQ(rpma_conn_req_recv(server_req, recv_mr, 0, recv.size(), nullptr),
            0);
  uint8_t desc[21];
  rpma_mr_get_descriptor(dst_mr, desc);
  rpma_conn_private_data pdata{desc, sizeof(desc)};
  rpma_conn* server = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&server_req, &pdata, &server), 0);
  rpma_conn_event event;
  ASSERT_EQ(rpma_conn_next_event(client, &event), 0);
  ASSERT_EQ(rpma_conn_next_event(server, &event), 0);
  rpma_conn_private_data got{};
  rpma_conn_get_private_data(client, &got);
  rpma_mr_remote* remote = nullptr;
  ASSERT_EQ(rpma_mr_remote_from_descriptor(got.ptr, got.len, &remote), 0);

  // The one thing this test is about.
  const uint64_t raddr = reinterpret_cast<uint64_t>(dst.data()) + 512;
  EXPECT_CALL(*mock,
              PostSend(_, Pointee(IsWriteWithImm(0xabc, 256, raddr)), _));
  ASSERT_EQ(rpma_write_with_imm(client, remote, 512, src_mr, 0, src.size(),
                                RPMA_F_COMPLETION_ALWAYS, 0xabc, nullptr),
            0);
  fake->RunUntilIdle();
  rpma_cq* cq = nullptr;
  rpma_conn_get_cq(server, &cq);
  ibv_wc wc{};
  ASSERT_EQ(rpma_cq_get_wc(cq, 1, &wc, nullptr), 0);
  EXPECT_THAT(wc, IsRecvRdmaWithImm(0xabc));
  EXPECT_EQ(std::string(dst.data() + 512, 256), std::string(256, 'x'));

  rpma_conn_delete(&client);
  rpma_conn_delete(&server);
  rpma_ep_shutdown(&ep);
  rpma_mr_remote_delete(&remote);
  rpma_mr_dereg(&src_mr);
  rpma_mr_dereg(&dst_mr);
  rpma_mr_dereg(&recv_mr);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
}

TEST(MockVerbsBackendTest, WithoutDelegationCallsFailLikeRdmaCore) {
  auto mock = std::make_shared<NiceMock<MockVerbsBackend>>();
  ScopedBackend use(mock);
  ibv_context* dev = nullptr;
  EXPECT_EQ(
      rpma_utils_get_ibv_context("10.1.1.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
      RPMA_E_PROVIDER);
  ibv_context fake_context{};
  rpma_peer* peer = nullptr;
  EXPECT_EQ(rpma_peer_new(&fake_context, &peer), RPMA_E_PROVIDER);
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(mock->PostSend(nullptr, &wr, &bad), ENOSYS);
  EXPECT_EQ(bad, &wr);
}

}  // namespace
}  // namespace rpma_harness
