// Two processes on the cross-process fabric (FakeNicConfig::fabric_dir):
// each test forks a server process with its own FakeNic and runs the client
// on another FakeNic in the test process; the two meet only through the
// fabric directory. alarm() bounds every process, and every blocking call
// has background_block_timeout_ms, so a lost event fails instead of hanging.

#include "nic/fake_nic_fabric.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mock/fabric_two_process.h"
#include "nic/fake_nic.h"
#include "nic/unix_address.h"

namespace rpma_harness {
namespace {

using namespace fabric_two_process;  // NOLINT: test helpers

std::string NewPort() {
  static int next = 0;
  return std::to_string(20000 + (getpid() % 5000) * 8 + (next++ % 8));
}

class FabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    alarm(60);
    dir_ = NewFabricDir();
    ASSERT_FALSE(dir_.empty());
    port_ = NewPort();
  }
  void TearDown() override {
    alarm(0);
    std::string cmd = "rm -rf " + dir_;
    ASSERT_EQ(system(cmd.c_str()), 0);
  }
  // A server process that accepts one connection and then only waits for
  // the test's go-on (or its death).
  Child ForkIdleServer() {
    return Fork(dir_,
                AcceptOne(port_, [](Side&, int in, int) { WaitGoOn(in); }));
  }

  // The client's half against an AcceptOne server: waits until it listens,
  // connects with "hello" and reads where the server's buffer is.
  void ConnectToAcceptOne(Child& child, Side& client, ServerInfo* info) {
    ASSERT_TRUE(child.ReadInfo(info));
    int status = 0;
    std::string reply;
    ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
              RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(child.ReadInfo(info));
  }

  std::string dir_;
  std::string port_;
};

TEST_F(FabricTest, ConnectWithNobodyListeningIsRejectedWithStatus8) {
  Side client(dir_);
  int status = 0;
  std::string reply;
  EXPECT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(status, 8);  // IB_CM_REJ_INVALID_SERVICE_ID
}

TEST_F(FabricTest, PrivateDataCrossesBothWaysAndBothSidesSeeEstablished) {
  Child child = ForkIdleServer();
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status = -1;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(reply, "welcome");
  ASSERT_TRUE(child.ReadInfo(&info));  // the server saw ESTABLISHED
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// The IB CM's REQ and REP carry each side's starting PSN, which becomes
// its QP's sq_psn and the peer QP's rq_psn (cm.c ib_cm_init_qp_attr;
// recorded on rxe: cm_verbs.c "psns ... paired"). The server reports its
// QP's PSNs in a ServerInfo (addr: sq_psn, rkey: rq_psn).
TEST_F(FabricTest, EachQpExpectsThePsnsItsPeerSendsFrom) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int in, int out) {
    ibv_qp_attr attr;
    ibv_qp_init_attr init;
    CHILD_CHECK(s.nic->QueryQp(s.id->qp, &attr,
                               IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &init) == 0);
    ServerInfo psns;
    psns.addr = attr.sq_psn;
    psns.rkey = attr.rq_psn;
    psns.ready = 1;
    ssize_t n = write(out, &psns, sizeof(psns));
    (void)n;
    WaitGoOn(in);
  }));
  ServerInfo info;
  Side client(dir_);
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  ServerInfo server_psns;
  ASSERT_TRUE(child.ReadInfo(&server_psns));
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(client.nic->QueryQp(client.id->qp, &attr,
                                IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &init),
            0);
  EXPECT_EQ(attr.sq_psn, server_psns.rkey) << "client sends, server expects";
  EXPECT_EQ(attr.rq_psn, server_psns.addr) << "server sends, client expects";
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, RejectCarriesStatus28AndPrivateData) {
  const std::string port = port_;
  Child child = Fork(dir_, [port](Side& s, int in, int out) {
    CHILD_CHECK(s.Listen(port));
    SendInfo(out, s);
    rdma_cm_id* req = s.TakeRequest(nullptr);
    CHILD_CHECK(req != nullptr);
    CHILD_CHECK(s.nic->Reject(req, "go away", 8) == 0);
    WaitGoOn(in);
  });
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status = 0;
  std::string reply;
  EXPECT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(status, 28);  // IB_CM_REJ_CONSUMER_DEFINED
  EXPECT_EQ(reply, "go away");
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// The server posts a receive, waits for the write with imm, checks the
// bytes and the imm, then answers with a send with imm.
TEST_F(FabricTest, WriteWithImmAndSendWithImmMoveBytesBetweenProcesses) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int, int) {
                       CHILD_CHECK(s.PostRecv(1) == 0);
                       ibv_wc wc;
                       CHILD_CHECK(s.Poll(&wc));
                       CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
                       CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
                       CHILD_CHECK(ntohl(wc.imm_data) == 0xcafe0001);
                       CHILD_CHECK(wc.byte_len == 5000);
                       for (int i = 0; i < 5000; ++i) {
                         CHILD_CHECK(s.buffer[i] == uint8_t(i * 7));
                       }
                       memcpy(s.buffer.data() + 8192, "pong", 5);
                       CHILD_CHECK(s.PostSend(IBV_WR_SEND_WITH_IMM, 2, 8192, 5,
                                              0, 0, 0x1234) == 0);
                       CHILD_CHECK(s.Poll(&wc));
                       CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
                     }));
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  for (int i = 0; i < 5000; ++i) client.buffer[i] = uint8_t(i * 7);
  ASSERT_EQ(client.PostRecv(9, 16384, 64), 0);
  // 5000 bytes: five packets of the 1024-byte path MTU.
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 5000, info.addr,
                            info.rkey, 0xcafe0001),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(ntohl(wc.imm_data), 0x1234u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wc.byte_len, 5u);
  EXPECT_STREQ(reinterpret_cast<const char*>(client.buffer.data() + 16384),
               "pong");
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, WriteReadAndAtomicsReachTheServersMemory) {
  Child child = Fork(
      dir_, AcceptOne(port_, [](Side& s, int in, int out) {
        uint64_t counter = 40;
        memcpy(s.buffer.data() + 4096, &counter, 8);
        memcpy(s.buffer.data() + 100, "server bytes", 13);
        SendInfo(out, s);
        WaitGoOn(in);
        s.Sync();

        // The client's write and atomics landed here.
        CHILD_CHECK(memcmp(s.buffer.data() + 1000, "client bytes", 13) == 0);
        memcpy(&counter, s.buffer.data() + 4096, 8);
        CHILD_CHECK(counter == 99);
      }));
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  ASSERT_TRUE(child.ReadInfo(&info));
  ibv_wc wc;
  memcpy(client.buffer.data(), "client bytes", 13);
  ASSERT_EQ(
      client.PostSend(IBV_WR_RDMA_WRITE, 1, 0, 13, info.addr + 1000, info.rkey),
      0);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  // READ (what rpma_flush sends is an 8-byte one).
  ASSERT_EQ(
      client.PostSend(IBV_WR_RDMA_READ, 2, 200, 13, info.addr + 100, info.rkey),
      0);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_STREQ(reinterpret_cast<const char*>(client.buffer.data() + 200),
               "server bytes");
  ASSERT_EQ(client.PostSend(IBV_WR_ATOMIC_FETCH_AND_ADD, 3, 300, 8,
                            info.addr + 4096, info.rkey, 0, 2),
            0);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  uint64_t original;
  memcpy(&original, client.buffer.data() + 300, 8);
  EXPECT_EQ(original, 40u);
  ASSERT_EQ(client.PostSend(IBV_WR_ATOMIC_CMP_AND_SWP, 4, 308, 8,
                            info.addr + 4096, info.rkey, 0, 42, 99),
            0);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  memcpy(&original, client.buffer.data() + 308, 8);
  EXPECT_EQ(original, 42u);
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, BadRkeyIsRemoteAccessErrorAndTheServersQpGoesToErr) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int, int) {
                       CHILD_CHECK(s.PostRecv(1) == 0);
                       ibv_wc wc;
                       // The responder's receive flushes with its QP in ERR.
                       CHILD_CHECK(s.Poll(&wc));
                       CHILD_CHECK(wc.wr_id == 1);
                       CHILD_CHECK(wc.status != IBV_WC_SUCCESS);
                     }));
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 16, info.addr,
                            info.rkey ^ 0x5a5a, 7),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, WriteOutsideTheRemoteRegionIsRemoteAccessError) {
  Child child = ForkIdleServer();
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  // The last 8 bytes of the 64 KiB region and 8 beyond it.
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE, 1, 0, 16, info.addr + 65536 - 8,
                            info.rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, SendWithNoReceiveWaitsForOneWithRnrRetry7) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int in, int) {
                       WaitGoOn(in);  // the client's send is parked on RNR
                       CHILD_CHECK(s.PostRecv(5) == 0);
                       ibv_wc wc;
                       CHILD_CHECK(s.Poll(&wc));
                       CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
                       CHILD_CHECK(wc.byte_len == 6);
                       CHILD_CHECK(memcmp(s.buffer.data(), "late!", 6) == 0);
                     }));
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  memcpy(client.buffer.data(), "late!", 6);
  ASSERT_EQ(client.PostSend(IBV_WR_SEND, 1, 0, 6, 0, 0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ibv_wc wc;
  EXPECT_EQ(client.nic->PollCq(client.cq, 1, &wc), 0);  // still waiting
  child.GoOn();
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, SendWithNoReceiveAndRnrRetry0IsRnrRetryExceeded) {
  // The passive side's QP takes the REQ's rnr_retry; the active one the
  // REP's (7 here), so the server is the requester.
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int, int) {
                       CHILD_CHECK(s.PostSend(IBV_WR_SEND, 1, 0, 6, 0, 0) == 0);
                       ibv_wc wc;
                       CHILD_CHECK(s.Poll(&wc));
                       CHILD_CHECK(wc.status == IBV_WC_RNR_RETRY_EXC_ERR);
                     }));
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply,
                           /*rnr_retry=*/0),
            RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, DisconnectGivesBothSidesDisconnected) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int, int) {
                       CHILD_CHECK(s.Next() == RDMA_CM_EVENT_DISCONNECTED);
                       CHILD_CHECK(s.nic->Disconnect(s.id) == 0);
                     }));
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
  ASSERT_EQ(client.nic->Disconnect(client.id), 0);
  EXPECT_EQ(client.Next(), RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(child.Wait(), 0);
}

// rxe (Personality::dreq_waits_for_peer_disconnect), across processes: the
// side that disconnects gets DISCONNECTED only when the other answers the
// DREQ with its own rdma_disconnect (the DREP); recorded on rxe
// (tests/api_abuse.c, group one-sided-disconnect). Then both ids leave the
// IB CM's timewait with TIMEWAIT_EXIT (Personality::timewait_ms, shortened
// here), each in its own process.
TEST_F(FabricTest, RxeDisconnectedWaitsForThePeersDisconnect) {
  Personality rxe = Personality::Rxe();
  rxe.timewait_ms = 50;
  Child child = Fork(
      dir_,
      AcceptOne(port_,
                [](Side& s, int in, int out) {
                  CHILD_CHECK(s.Next() == RDMA_CM_EVENT_DISCONNECTED);
                  SendInfo(out, s);  // took the DREQ
                  WaitGoOn(in);
                  CHILD_CHECK(s.nic->Disconnect(s.id) == 0);
                  CHILD_CHECK(s.Next() == RDMA_CM_EVENT_TIMEWAIT_EXIT);
                  WaitGoOn(in);  // stay until the client has its events
                }),
      65536, rxe);
  Side client(dir_, 65536, rxe);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  ASSERT_EQ(client.nic->Disconnect(client.id), 0);
  ASSERT_TRUE(child.ReadInfo(&info));
  pollfd ready{client.channel->fd, POLLIN, 0};
  EXPECT_EQ(poll(&ready, 1, 200), 0)
      << "DISCONNECTED before the server answered the DREQ";
  child.GoOn();
  int status = -1;
  EXPECT_EQ(client.Next(&status), RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(client.Next(&status), RDMA_CM_EVENT_TIMEWAIT_EXIT);
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// rxe across processes (Personality::cq_full_loses_the_completion_only, as
// in one process: verbs_dropin/testdata/async_events.c recv_cq_overrun,
// recorded on rxe): a SEND whose receive completion finds the server's CQ
// full is placed, its completion lost, the server's QP goes to ERR and
// answers nothing, so the client's WR ends in RETRY_EXC_ERR.
TEST_F(FabricTest, RxeFullReceiveCqLeavesTheSendUnanswered) {
  const Personality rxe = Personality::Rxe();
  Child child = Fork(
      dir_,
      AcceptOne(port_,
                [](Side& s, int in, int out) {
                  // The receive queue holds 16: receives in batches of 8,
                  // each answered by the client's SENDs; nothing polled.
                  const int holds = s.cq->cqe;
                  for (int posted = 0; posted <= holds;) {
                    for (int i = 0; i < 8 && posted <= holds; ++i, ++posted) {
                      CHILD_CHECK(s.PostRecv(100 + posted, 64 * posted, 64) ==
                                  0);
                    }
                    SendInfo(out, s);  // a batch posted
                    WaitGoOn(in);      // its SENDs done
                  }
                  ibv_qp_attr attr{};
                  ibv_qp_init_attr init{};
                  CHILD_CHECK(s.nic->QueryQp(s.id->qp, &attr, IBV_QP_STATE,
                                             &init) == 0);
                  CHILD_CHECK(attr.qp_state == IBV_QPS_ERR);
                  CHILD_CHECK(s.buffer[64 * holds] == 'z');  // placed
                  ibv_wc wc;
                  for (int i = 0; i < holds; ++i) {
                    CHILD_CHECK(s.nic->PollCq(s.cq, 1, &wc) == 1);
                    CHILD_CHECK(wc.wr_id == uint64_t(100 + i));
                    CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
                  }
                  CHILD_CHECK(s.nic->PollCq(s.cq, 1, &wc) == 0);  // lost
                }),
      1 << 20, rxe);
  Side client(dir_, 65536, rxe);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  const int holds = client.cq->cqe;  // both CQs are made alike
  ibv_wc wc;
  for (int sent = 0; sent <= holds;) {
    ASSERT_TRUE(child.ReadInfo(&info));
    for (int i = 0; i < 8 && sent <= holds; ++i, ++sent) {
      if (sent == holds) memset(client.buffer.data(), 'z', 8);
      ASSERT_EQ(client.PostSend(IBV_WR_SEND, sent, 0, 8, 0, 0), 0);
      ASSERT_TRUE(client.Poll(&wc));
      ASSERT_EQ(wc.wr_id, uint64_t(sent));
      ASSERT_EQ(wc.status,
                sent < holds ? IBV_WC_SUCCESS : IBV_WC_RETRY_EXC_ERR)
          << "SEND " << sent << " of a CQ that holds " << holds;
    }
    child.GoOn();
  }
  EXPECT_EQ(child.Wait(), 0);
}

// What rxe did (tools/softroce_vm/README.md "When the peer process dies"; in
// the soft-RoCE VM): the survivor gets one DISCONNECTED with status 0, its QP
// stays RTS and its receives stay posted; a write to the dead peer ends in
// RETRY_EXC_ERR (rxe itself never gives up with retry_cnt 7; the spec's
// retry budget is what the fake models) and the QP goes to ERR, which then
// flushes the receive.
TEST_F(FabricTest, PeerKilledOnRxeKeepsTheQpInRtsUntilAWriteTimesOut) {
  Child child = ForkIdleServer();
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_, 65536, Personality::Rxe());
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
  ASSERT_EQ(client.PostRecv(7), 0);
  kill(child.pid, SIGKILL);
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
  status = -1;
  EXPECT_EQ(client.Next(&status), RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(status, 0);
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(client.nic->QueryQp(client.id->qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  ibv_wc wc;
  EXPECT_EQ(client.nic->PollCq(client.cq, 1, &wc), 0);  // receive not flushed
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 8, info.addr,
                            info.rkey, 5),
            0);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

// The Spec personality keeps the fake's stricter reading of a DREQ (the
// peer's death is its kernel's DREQ): the survivor's QP goes to ERR, so its
// receive and later WRs flush.
TEST_F(FabricTest, PeerKilledGivesDisconnectedAndFlushesOnSpec) {
  Child child = ForkIdleServer();
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  kill(child.pid, SIGKILL);
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
  EXPECT_EQ(client.Next(), RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE, 1, 0, 8, info.addr, info.rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

// A WR in flight when the peer dies is never answered: RETRY_EXC_ERR. The
// server takes the request but dies before it can answer (it is stopped
// first, so the request sits unread in its socket).
TEST_F(FabricTest, WrInFlightWhenThePeerDiesEndsInRetryExceeded) {
  Child child = ForkIdleServer();
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(ConnectToAcceptOne(child, client, &info));
  kill(child.pid, SIGSTOP);
  int stopped = 0;  // the signal is asynchronous: wait until it took effect
  ASSERT_EQ(waitpid(child.pid, &stopped, WUNTRACED), child.pid);
  ASSERT_TRUE(WIFSTOPPED(stopped));
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_READ, 1, 0, 8, info.addr, info.rkey),
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ibv_wc wc;
  EXPECT_EQ(client.nic->PollCq(client.cq, 1, &wc), 0);  // in flight
  kill(child.pid, SIGKILL);
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(client.Next(), RDMA_CM_EVENT_DISCONNECTED);
}

// The listener's process dies holding the request: its kernel rejects it
// (cm.c cm_destroy_id, IB_CM_REQ_RCVD: REJ, consumer defined).
TEST_F(FabricTest, ListenerKilledHoldingTheRequestGivesRejected28) {
  const std::string port = port_;
  Child child = Fork(dir_, [port](Side& s, int, int out) {
    CHILD_CHECK(s.Listen(port));
    SendInfo(out, s);
    CHILD_CHECK(s.TakeRequest(nullptr) != nullptr);
    raise(SIGKILL);
  });
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status = 0;
  std::string reply;
  EXPECT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(status, 28);
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
}

// Two NICs of one process on one fabric directory stand in for two
// processes here: they share nothing but the directory.
TEST_F(FabricTest, ASecondListenerOnTheSamePortIsAddressInUse) {
  Side first(dir_);
  Side second(dir_);
  ASSERT_TRUE(first.Listen(port_));
  errno = 0;
  EXPECT_FALSE(second.Listen(port_));
  EXPECT_EQ(errno, EADDRINUSE);
}

// A listener that died without unlinking its socket file: connecting is
// "nobody listens" (REJECTED, status 8), and a new listener takes the port.
TEST_F(FabricTest, AStaleListenerSocketFileCountsAsNobodyListening) {
  const std::string path = dir_ + "/l-127.0.0.1-" + port_;
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  const UnixAddress address(path);
  ASSERT_EQ(bind(fd, address.addr(), address.len()), 0);
  close(fd);  // the file stays, nobody listens on it
  Side client(dir_);
  int status = 0;
  std::string reply;
  EXPECT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(status, 8);
  Side server(dir_);
  EXPECT_TRUE(server.Listen(port_));
}

// sun_path holds 108 bytes, and a fabric directory is often longer (a
// Bazel TEST_TMPDIR is ~120 bytes): the listener is bound, and dialled,
// through its directory (unix_address.h), never at a truncated path.
TEST_F(FabricTest, AFabricDirectoryLongerThanSunPathWorks) {
  const std::string long_dir =
      dir_ + "/" + std::string(100, 'd') + "/" + std::string(100, 'e');
  ASSERT_GT(long_dir.size(), sizeof(sockaddr_un{}.sun_path));
  ASSERT_EQ(mkdir((dir_ + "/" + std::string(100, 'd')).c_str(), 0700), 0);
  Child child = Fork(
      long_dir, AcceptOne(port_, [](Side&, int in, int) { WaitGoOn(in); }));
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  // The socket file is where its name says, not at a truncated path.
  struct stat st;
  ASSERT_EQ(stat((long_dir + "/l-127.0.0.1-" + port_).c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  Side client(long_dir);
  int status = -1;
  std::string reply;
  EXPECT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(reply, "welcome");
  ASSERT_TRUE(child.ReadInfo(&info));  // the server saw ESTABLISHED
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// Another process is untrusted input: a frame announcing a length no frame
// can have closes that link at once (no buffering for ever), and frames of
// an unknown type, a truncated body or a garbage REQ change nothing; the
// listener keeps serving, and a real client connects afterwards.
TEST_F(FabricTest, MalformedFramesFromAPeerDoNotHurtTheListener) {
  Child child = ForkIdleServer();
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));  // listening
  const std::string path = dir_ + "/l-127.0.0.1-" + port_;
  auto dial = [&path]() {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const UnixAddress address(path);
    EXPECT_EQ(connect(fd, address.addr(), address.len()), 0);
    return fd;
  };
  // True when the whole frame went out. The listener may close a link
  // whenever a frame on it is malformed (a REJ and EOF for a garbage REQ),
  // so later sends on that link may fail: only the first must succeed.
  auto send_frame = [](int fd, uint32_t length, uint32_t type,
                       const std::vector<uint8_t>& body) {
    const fake_nic_internal::FrameHeader header{length, type};
    if (send(fd, &header, sizeof(header), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sizeof(header))) {
      return false;
    }
    return body.empty() || send(fd, body.data(), body.size(), MSG_NOSIGNAL) ==
                               static_cast<ssize_t>(body.size());
  };
  {
    const int fd = dial();
    EXPECT_TRUE(send_frame(fd, fake_nic_internal::kMaxFrameBody + 1,
                           fake_nic_internal::kFrameReq, {}));
    char byte;
    EXPECT_EQ(read(fd, &byte, 1), 0) << "the link was not closed";
    close(fd);
  }
  {
    const int fd = dial();
    EXPECT_TRUE(send_frame(fd, 4, 99, {1, 2, 3, 4}));  // an unknown type
    send_frame(fd, 3, fake_nic_internal::kFrameReq, {1, 2, 3});  // truncated
    send_frame(fd, 64, fake_nic_internal::kFrameRequest,
               std::vector<uint8_t>(64, 0));  // no connection on this link
    send_frame(fd, sizeof(fake_nic_internal::CmFrame),
               fake_nic_internal::kFrameReq,
               std::vector<uint8_t>(sizeof(fake_nic_internal::CmFrame), 0xff));
    close(fd);
  }
  {
    const int fd = dial();  // noise: no frame boundary makes sense
    std::vector<uint8_t> noise(4096);
    for (size_t i = 0; i < noise.size(); ++i) noise[i] = (i * 131) & 0xff;
    const ssize_t sent = send(fd, noise.data(), noise.size(), MSG_NOSIGNAL);
    (void)sent;  // the listener may close the link part-way
    close(fd);
  }
  Side client(dir_);
  int status = -1;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(reply, "welcome");
  ASSERT_TRUE(child.ReadInfo(&info));
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

}  // namespace
}  // namespace rpma_harness
