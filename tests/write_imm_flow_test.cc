// The librpma write-with-imm flow on the fake NIC, through the rpma C API
// only: a server that listens, posts a receive before accepting and hands
// out its MR descriptor as private data, and a client that connects, reads
// the descriptor and writes with immediate data.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>
#include <poll.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nic/fake_nic.h"
#include "mock/matchers.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

// On a real NIC (the soft-RoCE VM sets RPMA_HARNESS_BACKEND=rdma-core and
// the device's address) the same tests run against rdma-core.
bool OnRdmaCore() {
  const char* backend = std::getenv("RPMA_HARNESS_BACKEND");
  return backend != nullptr && std::string(backend) == "rdma-core";
}

std::string Addr() {
  const char* addr = std::getenv("RPMA_HARNESS_VM_ADDR");
  return addr ? addr : "192.168.0.7";
}

// A fresh port per connection: a real CM keeps a port busy for a while.
std::string NextPort() {
  static int port = 7204;
  return std::to_string(port++);
}

constexpr size_t kDstSize = 4096;
constexpr uint32_t kImm = 0xfeedbeef;
const void* const kWriteContext = reinterpret_cast<const void*>(0x1234);
const void* const kRecvContext = reinterpret_cast<const void*>(0x5678);

// Waits (blocking) for the next completion of `cq`.
ibv_wc WaitForCompletion(rpma_cq* cq) {
  ibv_wc wc{};
  int got = 0;
  while (rpma_cq_get_wc(cq, 1, &wc, &got) == RPMA_E_NO_COMPLETION) {
    EXPECT_EQ(rpma_cq_wait(cq), 0);
  }
  return wc;
}

rpma_conn_event NextEvent(rpma_conn* conn) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  EXPECT_EQ(rpma_conn_next_event(conn, &event), 0);
  return event;
}

// The set-up steps every flow repeats, as a librpma program writes them.
// Each is a void function so that its ASSERTs stop it; callers wrap it in
// ASSERT_NO_FATAL_FAILURE to stop too.

// rpma_utils_get_ibv_context + rpma_peer_new for `addr`.
void NewPeer(const std::string& addr, rpma_util_ibv_context_type type,
             rpma_peer** peer) {
  ibv_context* dev = nullptr;
  ASSERT_EQ(rpma_utils_get_ibv_context(addr.c_str(), type, &dev), 0);
  ASSERT_EQ(rpma_peer_new(dev, peer), 0);
}

// The server's half: takes the next request from `ep`, posts one receive
// into `recv_mr` before accepting (as librpma's servers do), accepts with
// `pdata` (may be nullptr) and waits for ESTABLISHED.
void AcceptOne(rpma_ep* ep, rpma_mr_local* recv_mr, size_t recv_len,
               const rpma_conn_private_data* pdata, rpma_conn** conn) {
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_ep_next_conn_req(ep, nullptr, &req), 0);
  ASSERT_EQ(rpma_conn_req_recv(req, recv_mr, 0, recv_len, kRecvContext), 0);
  ASSERT_EQ(rpma_conn_req_connect(&req, pdata, conn), 0);
  ASSERT_EQ(NextEvent(*conn), RPMA_CONN_ESTABLISHED);
}

// The client's half: connects to addr:port and waits for ESTABLISHED.
void ConnectTo(rpma_peer* peer, const std::string& addr,
               const std::string& port, rpma_conn** conn) {
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer, addr.c_str(), port.c_str(), nullptr, &req),
            0);
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, conn), 0);
  ASSERT_EQ(NextEvent(*conn), RPMA_CONN_ESTABLISHED);
}

// The server's end of a connection the client closes: CLOSED arrives, then
// the server disconnects and deletes its side.
void CloseAfterPeer(rpma_conn** conn) {
  EXPECT_EQ(NextEvent(*conn), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_disconnect(*conn), 0);
  EXPECT_EQ(rpma_conn_delete(conn), 0);
}

// The client's end: disconnects first and waits for CLOSED.
void CloseFirst(rpma_conn** conn) {
  EXPECT_EQ(rpma_conn_disconnect(*conn), 0);
  EXPECT_EQ(NextEvent(*conn), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(conn), 0);
}

class WriteImmFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    addr_ = Addr();
    port_ = NextPort();
    if (OnRdmaCore()) return;  // the environment's backend: rdma-core
    nic_ = std::make_shared<FakeNic>();
    nic_->StartBackgroundProgress();
    scoped_ = std::make_unique<ScopedBackend>(nic_);
  }
  void TearDown() override {
    scoped_.reset();
    if (nic_) nic_->StopBackgroundProgress();
  }

  std::shared_ptr<FakeNic> nic_;
  std::unique_ptr<ScopedBackend> scoped_;
  std::string addr_, port_;

  // Lets the NIC finish what it can: the fake runs until idle, a real NIC
  // is given time (a loopback WR takes microseconds on rxe).
  void Quiesce() {
    if (nic_) {
      nic_->RunUntilIdle();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
};

// The flow exactly as a librpma server and client are written, each in its
// own thread.
TEST_F(WriteImmFlowTest, ServerAndClientThreadsExchangeAWriteWithImm) {
  const std::string payload = "written by the client, with imm";
  std::promise<void> listening;
  std::thread server([&] {
    rpma_peer* peer = nullptr;
    ASSERT_NO_FATAL_FAILURE(NewPeer(addr_, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer));
    std::vector<char> dst(kDstSize, 0);
    std::vector<char> recv_buf(64, 0x5a);
    rpma_mr_local* dst_mr = nullptr;
    rpma_mr_local* recv_mr = nullptr;
    ASSERT_EQ(rpma_mr_reg(peer, dst.data(), dst.size(), RPMA_MR_USAGE_WRITE_DST,
                          &dst_mr),
              0);
    ASSERT_EQ(rpma_mr_reg(peer, recv_buf.data(), recv_buf.size(),
                          RPMA_MR_USAGE_RECV, &recv_mr),
              0);
    rpma_ep* ep = nullptr;
    ASSERT_EQ(rpma_ep_listen(peer, addr_.c_str(), port_.c_str(), &ep), 0);
    listening.set_value();

    uint8_t desc[21];
    ASSERT_EQ(rpma_mr_get_descriptor(dst_mr, desc), 0);
    rpma_conn_private_data pdata{desc, sizeof(desc)};
    rpma_conn* conn = nullptr;
    ASSERT_NO_FATAL_FAILURE(
        AcceptOne(ep, recv_mr, recv_buf.size(), &pdata, &conn));

    rpma_cq* cq = nullptr;
    ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
    ibv_wc wc = WaitForCompletion(cq);
    uint32_t qp_num = 0;
    rpma_conn_get_qp_num(conn, &qp_num);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << Describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), kImm);
    EXPECT_EQ(wc.wr_id, reinterpret_cast<uint64_t>(kRecvContext));
    EXPECT_EQ(wc.byte_len, payload.size());
    EXPECT_EQ(wc.qp_num, qp_num);
    EXPECT_EQ(std::string(dst.data() + 128, payload.size()), payload);
    // The receive buffer is not where a write lands.
    EXPECT_EQ(recv_buf, std::vector<char>(64, 0x5a));

    CloseAfterPeer(&conn);
    EXPECT_EQ(rpma_ep_shutdown(&ep), 0);
    EXPECT_EQ(rpma_mr_dereg(&recv_mr), 0);
    EXPECT_EQ(rpma_mr_dereg(&dst_mr), 0);
    EXPECT_EQ(rpma_peer_delete(&peer), 0);
  });

  std::thread client([&] {
    listening.get_future().wait();
    rpma_peer* peer = nullptr;
    ASSERT_NO_FATAL_FAILURE(
        NewPeer(addr_, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer));
    std::vector<char> src(payload.begin(), payload.end());
    rpma_mr_local* src_mr = nullptr;
    ASSERT_EQ(rpma_mr_reg(peer, src.data(), src.size(), RPMA_MR_USAGE_WRITE_SRC,
                          &src_mr),
              0);
    rpma_conn* conn = nullptr;
    ASSERT_NO_FATAL_FAILURE(ConnectTo(peer, addr_, port_, &conn));
    rpma_conn_private_data pdata{};
    ASSERT_EQ(rpma_conn_get_private_data(conn, &pdata), 0);
    rpma_mr_remote* dst = nullptr;
    ASSERT_EQ(rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &dst), 0);

    ASSERT_EQ(
        rpma_write_with_imm(conn, dst, 128, src_mr, 0, src.size(),
                            RPMA_F_COMPLETION_ALWAYS, kImm, kWriteContext),
        0);
    rpma_cq* cq = nullptr;
    ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
    ibv_wc wc = WaitForCompletion(cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << Describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wc.wr_id, reinterpret_cast<uint64_t>(kWriteContext));

    CloseFirst(&conn);
    EXPECT_EQ(rpma_mr_remote_delete(&dst), 0);
    EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
    EXPECT_EQ(rpma_peer_delete(&peer), 0);
  });
  client.join();
  server.join();
}

// librpma's ping-pong examples: the client posts a message and calls
// rpma_conn_disconnect at once. A real NIC transmits what was posted before
// the disconnect (rxe runs the requester inside ibv_post_send), so the
// server's receive completes with the message, not with WR_FLUSH_ERR.
TEST_F(WriteImmFlowTest, SendPostedJustBeforeDisconnectArrives) {
  const std::string message = "ping";
  std::promise<void> listening;
  std::thread server([&] {
    rpma_peer* peer = nullptr;
    ASSERT_NO_FATAL_FAILURE(NewPeer(addr_, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer));
    std::vector<char> recv_buf(64, 0);
    rpma_mr_local* recv_mr = nullptr;
    ASSERT_EQ(rpma_mr_reg(peer, recv_buf.data(), recv_buf.size(),
                          RPMA_MR_USAGE_RECV, &recv_mr),
              0);
    rpma_ep* ep = nullptr;
    ASSERT_EQ(rpma_ep_listen(peer, addr_.c_str(), port_.c_str(), &ep), 0);
    listening.set_value();
    rpma_conn* conn = nullptr;
    ASSERT_NO_FATAL_FAILURE(
        AcceptOne(ep, recv_mr, recv_buf.size(), nullptr, &conn));
    rpma_cq* cq = nullptr;
    ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
    ibv_wc wc = WaitForCompletion(cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << Describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, message.size());
    EXPECT_EQ(std::string(recv_buf.data(), message.size()), message);
    CloseAfterPeer(&conn);
    EXPECT_EQ(rpma_ep_shutdown(&ep), 0);
    EXPECT_EQ(rpma_mr_dereg(&recv_mr), 0);
    EXPECT_EQ(rpma_peer_delete(&peer), 0);
  });
  std::thread client([&] {
    listening.get_future().wait();
    rpma_peer* peer = nullptr;
    ASSERT_NO_FATAL_FAILURE(
        NewPeer(addr_, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer));
    std::vector<char> src(message.begin(), message.end());
    rpma_mr_local* src_mr = nullptr;
    ASSERT_EQ(
        rpma_mr_reg(peer, src.data(), src.size(), RPMA_MR_USAGE_SEND, &src_mr),
        0);
    rpma_conn* conn = nullptr;
    ASSERT_NO_FATAL_FAILURE(ConnectTo(peer, addr_, port_, &conn));
    ASSERT_EQ(rpma_send(conn, src_mr, 0, src.size(), RPMA_F_COMPLETION_ON_ERROR,
                        nullptr),
              0);
    CloseFirst(&conn);  // the disconnect comes at once after the send
    EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
    EXPECT_EQ(rpma_peer_delete(&peer), 0);
  });
  client.join();
  server.join();
}

// Both ends set up in one thread (the NIC progresses on its own thread), for
// the variations of the flow.
class ConnectedPairTest : public WriteImmFlowTest {
 protected:
  void SetUp() override {
    WriteImmFlowTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(
        NewPeer(addr_, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer_));
    dst_.assign(kDstSize, 0);
    src_.assign(kDstSize, 0);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = static_cast<char>(i);
    ASSERT_EQ(rpma_mr_reg(peer_, dst_.data(), dst_.size(),
                          RPMA_MR_USAGE_WRITE_DST, &dst_mr_),
              0);
    ASSERT_EQ(rpma_mr_reg(peer_, src_.data(), src_.size(),
                          RPMA_MR_USAGE_WRITE_SRC, &src_mr_),
              0);
    ASSERT_EQ(rpma_ep_listen(peer_, addr_.c_str(), port_.c_str(), &ep_), 0);
    rpma_conn_req* client_req = nullptr;
    ASSERT_EQ(rpma_conn_req_new(peer_, addr_.c_str(), port_.c_str(), nullptr,
                                &client_req),
              0);
    ASSERT_EQ(rpma_conn_req_connect(&client_req, nullptr, &client_), 0);
    rpma_conn_req* server_req = nullptr;
    ASSERT_EQ(rpma_ep_next_conn_req(ep_, nullptr, &server_req), 0);
    // A write with imm consumes the receive but never touches its buffer.
    ASSERT_EQ(rpma_mr_reg(peer_, recv_buf_, sizeof(recv_buf_),
                          RPMA_MR_USAGE_RECV, &recv_mr_),
              0);
    ASSERT_EQ(rpma_conn_req_recv(server_req, recv_mr_, 0, sizeof(recv_buf_),
                                 kRecvContext),
              0);
    uint8_t desc[21];
    ASSERT_EQ(rpma_mr_get_descriptor(dst_mr_, desc), 0);
    rpma_conn_private_data pdata{desc, sizeof(desc)};
    ASSERT_EQ(rpma_conn_req_connect(&server_req, &pdata, &server_), 0);
    // The client reads its ESTABLISHED first: on a real rdma_cm that is
    // what sends the RTU that gives the server its own.
    ASSERT_EQ(NextEvent(client_), RPMA_CONN_ESTABLISHED);
    ASSERT_EQ(NextEvent(server_), RPMA_CONN_ESTABLISHED);
    rpma_conn_private_data got{};
    ASSERT_EQ(rpma_conn_get_private_data(client_, &got), 0);
    ASSERT_EQ(rpma_mr_remote_from_descriptor(got.ptr, got.len, &remote_), 0);
    rpma_conn_get_cq(client_, &client_cq_);
    rpma_conn_get_cq(server_, &server_cq_);
  }

  void TearDown() override {
    rpma_conn_disconnect(client_);
    EXPECT_EQ(rpma_conn_delete(&client_), 0);
    EXPECT_EQ(rpma_conn_delete(&server_), 0);
    EXPECT_EQ(rpma_ep_shutdown(&ep_), 0);
    EXPECT_EQ(rpma_mr_remote_delete(&remote_), 0);
    EXPECT_EQ(rpma_mr_dereg(&recv_mr_), 0);
    EXPECT_EQ(rpma_mr_dereg(&src_mr_), 0);
    EXPECT_EQ(rpma_mr_dereg(&dst_mr_), 0);
    EXPECT_EQ(rpma_peer_delete(&peer_), 0);
    WriteImmFlowTest::TearDown();
  }

  // Polls without blocking after the NIC went idle.
  int PollNow(rpma_cq* cq, ibv_wc* wc) {
    Quiesce();
    return rpma_cq_get_wc(cq, 1, wc, nullptr);
  }

  rpma_peer* peer_ = nullptr;
  std::vector<char> dst_, src_;
  rpma_mr_local* dst_mr_ = nullptr;
  rpma_mr_local* src_mr_ = nullptr;
  rpma_mr_remote* remote_ = nullptr;
  char recv_buf_[16] = {};
  rpma_mr_local* recv_mr_ = nullptr;
  rpma_ep* ep_ = nullptr;
  rpma_conn* client_ = nullptr;
  rpma_conn* server_ = nullptr;
  rpma_cq* client_cq_ = nullptr;
  rpma_cq* server_cq_ = nullptr;
};

TEST_F(ConnectedPairTest, ZeroByteWriteWithImmDeliversOnlyTheImm) {
  ASSERT_EQ(rpma_write_with_imm(client_, nullptr, 0, nullptr, 0, 0,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kWriteContext),
            0);
  ibv_wc wc = WaitForCompletion(server_cq_);
  EXPECT_THAT(wc, IsRecvRdmaWithImm(kImm));
  EXPECT_EQ(wc.byte_len, 0u);
  EXPECT_EQ(wc.wr_id, reinterpret_cast<uint64_t>(kRecvContext));
  ibv_wc client_wc = WaitForCompletion(client_cq_);
  EXPECT_THAT(client_wc, HasWcStatus(IBV_WC_SUCCESS));
  EXPECT_EQ(client_wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(dst_, std::vector<char>(kDstSize, 0));
}

TEST_F(ConnectedPairTest, OnErrorSuccessHasNoRequesterCompletion) {
  ASSERT_EQ(
      rpma_write_with_imm(client_, remote_, 0, src_mr_, 0, 512,
                          RPMA_F_COMPLETION_ON_ERROR, kImm, kWriteContext),
      0);
  ibv_wc wc = WaitForCompletion(server_cq_);
  EXPECT_THAT(wc, IsRecvRdmaWithImm(kImm));
  EXPECT_EQ(wc.byte_len, 512u);
  EXPECT_EQ(std::memcmp(dst_.data(), src_.data(), 512), 0);
  ibv_wc client_wc{};
  EXPECT_EQ(PollNow(client_cq_, &client_wc), RPMA_E_NO_COMPLETION);
}

TEST_F(ConnectedPairTest, OnErrorFailureHasAnErrorCompletion) {
  ASSERT_EQ(
      rpma_write_with_imm(client_, remote_, kDstSize, src_mr_, 0, 8,
                          RPMA_F_COMPLETION_ON_ERROR, kImm, kWriteContext),
      0);
  ibv_wc wc = WaitForCompletion(client_cq_);
  EXPECT_THAT(wc, HasWcStatus(IBV_WC_REM_ACCESS_ERR));
  EXPECT_EQ(wc.wr_id, reinterpret_cast<uint64_t>(kWriteContext));
}

TEST_F(ConnectedPairTest, WritePastTheEndOfTheRemoteMrIsRemoteAccessError) {
  // Starts inside the region and runs 1 byte past its end.
  ASSERT_EQ(rpma_write_with_imm(client_, remote_, kDstSize - 63, src_mr_, 0, 64,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kWriteContext),
            0);
  ibv_wc wc = WaitForCompletion(client_cq_);
  EXPECT_THAT(wc, HasWcStatus(IBV_WC_REM_ACCESS_ERR));
  // Nothing landed. The write with imm had already taken the responder's
  // receive, which completes with the responder's own error:
  // IBV_WC_LOC_ACCESS_ERR, "a protection error occurred on a local data
  // buffer during the processing of a RDMA Write with Immediate operation
  // sent from the remote node" (ibv_poll_cq(3)).
  EXPECT_EQ(dst_, std::vector<char>(kDstSize, 0));
  // rxe reports REM_ACCESS_ERR there instead (rxe_resp.c do_class_ac_error;
  // the fake's rxe personality does the same, tests/testdata/rxe_streams.txt).
  ibv_wc server_wc = WaitForCompletion(server_cq_);
  EXPECT_THAT(server_wc, HasWcStatus(OnRdmaCore() ? IBV_WC_REM_ACCESS_ERR
                                                  : IBV_WC_LOC_ACCESS_ERR));
  EXPECT_EQ(server_wc.wr_id, reinterpret_cast<uint64_t>(kRecvContext));
}

TEST_F(ConnectedPairTest, CompletionFdTurnsReadable) {
  int fd = -1;
  ASSERT_EQ(rpma_cq_get_fd(server_cq_, &fd), 0);
  ASSERT_EQ(rpma_write_with_imm(client_, remote_, 0, src_mr_, 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kWriteContext),
            0);
  Quiesce();
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1);
  EXPECT_EQ(rpma_cq_wait(server_cq_), 0);
  ibv_wc wc{};
  EXPECT_EQ(rpma_cq_get_wc(server_cq_, 1, &wc, nullptr), 0);
  EXPECT_THAT(wc, IsRecvRdmaWithImm(kImm));
}

}  // namespace
}  // namespace rpma_harness
