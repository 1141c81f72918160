// Two processes on the cross-process fabric (FakeNicConfig::fabric_dir):
// each test forks a server process with its own FakeNic and runs the client
// on another FakeNic in the test process; the two meet only through the
// fabric directory. alarm() bounds every process, and every blocking call
// has background_block_timeout_ms, so a lost event fails instead of hanging.

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mock/fake_nic.h"

namespace rpma_harness {
namespace {

// What the server tells the client over the control pipe.
struct ServerInfo {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t ready = 0;
};

// Fails the child process with a message (gtest does not report from it).
#define CHILD_CHECK(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "server child: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      _exit(3);                                                                \
    }                                                                          \
  } while (0)

FakeNicConfig FabricConfig(const std::string& dir) {
  FakeNicConfig config;
  config.fabric_dir = dir;
  config.background_block_timeout_ms = 10000;
  return config;
}

// One side of a connection on a FakeNic: the CM dance and the verbs.
struct Side {
  std::shared_ptr<FakeNic> nic;
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(65536, 0);
  ibv_mr* mr = nullptr;

  explicit Side(const std::string& dir)
      : nic(std::make_shared<FakeNic>(FabricConfig(dir))) {
    nic->StartBackgroundProgress();
    channel = nic->CreateEventChannel();
  }

  // Gets the next CM event; returns its type (and its status, data).
  rdma_cm_event_type Next(int* status = nullptr,
                          std::string* private_data = nullptr,
                          rdma_cm_id** event_id = nullptr) {
    rdma_cm_event* event = nullptr;
    if (nic->GetCmEvent(channel, &event) != 0) {
      return static_cast<rdma_cm_event_type>(-1);
    }
    const rdma_cm_event_type type = event->event;
    if (status != nullptr) *status = event->status;
    if (private_data != nullptr) {
      const char* p = static_cast<const char*>(event->param.conn.private_data);
      // Padded to the IB CM field: the text ends at the first NUL.
      *private_data =
          p != nullptr
              ? std::string(p, strnlen(p, event->param.conn.private_data_len))
              : std::string();
    }
    if (event_id != nullptr) *event_id = event->id;
    nic->AckCmEvent(event);
    return type;
  }

  void MakeQp(rdma_cm_id* on, int rnr_retry_ignored = 0) {
    (void)rnr_retry_ignored;
    pd = nic->AllocPd(on->verbs);
    cq = nic->CreateCq(on->verbs, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = 16;
    attr.cap.max_recv_wr = 16;
    attr.cap.max_send_sge = 2;
    attr.cap.max_recv_sge = 2;
    nic->CreateQp(on, pd, &attr);
    mr = nic->RegMr(pd, buffer.data(), buffer.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  }

  bool Listen(const std::string& port) {
    if (nic->CreateId(channel, &listener, nullptr) != 0) return false;
    if (nic->BindAddr(listener, "127.0.0.1", port.c_str()) != 0) return false;
    return nic->Listen(listener, 4) == 0;
  }

  // Server: takes the next request, accepts (or rejects) it.
  rdma_cm_id* TakeRequest(std::string* private_data) {
    rdma_cm_id* child = nullptr;
    if (Next(nullptr, private_data, &child) != RDMA_CM_EVENT_CONNECT_REQUEST) {
      return nullptr;
    }
    return child;
  }

  int Accept(rdma_cm_id* child, const std::string& reply) {
    id = child;
    MakeQp(child);
    rdma_conn_param param;
    memset(&param, 0, sizeof(param));
    param.private_data = reply.c_str();
    param.private_data_len = static_cast<uint8_t>(reply.size() + 1);
    param.responder_resources = 4;
    param.initiator_depth = 4;
    param.rnr_retry_count = 7;
    return nic->Accept(child, &param);
  }

  // Client: resolve, QP, connect with `hello`; returns the final event.
  rdma_cm_event_type Connect(const std::string& port, const std::string& hello,
                             int* status, std::string* reply,
                             int rnr_retry = 7) {
    nic->CreateId(channel, &id, nullptr);
    nic->ResolveAddr(id, "127.0.0.1", port.c_str(), 1000);
    if (Next() != RDMA_CM_EVENT_ADDR_RESOLVED) return RDMA_CM_EVENT_ADDR_ERROR;
    nic->ResolveRoute(id, 1000);
    if (Next() != RDMA_CM_EVENT_ROUTE_RESOLVED) {
      return RDMA_CM_EVENT_ROUTE_ERROR;
    }
    MakeQp(id);
    rdma_conn_param param;
    memset(&param, 0, sizeof(param));
    param.private_data = hello.c_str();
    param.private_data_len = static_cast<uint8_t>(hello.size() + 1);
    param.responder_resources = 4;
    param.initiator_depth = 4;
    param.retry_count = 7;
    param.rnr_retry_count = static_cast<uint8_t>(rnr_retry);
    if (nic->Connect(id, &param) != 0) return RDMA_CM_EVENT_CONNECT_ERROR;
    return Next(status, reply);
  }

  // Polls the CQ for one completion (10 s at most).
  bool Poll(ibv_wc* wc) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (nic->PollCq(cq, 1, wc) == 1) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return false;
  }

  int PostRecv(uint64_t wr_id, uint32_t offset = 0, uint32_t length = 4096) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data()) + offset, length,
                mr->lkey};
    ibv_recv_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return nic->PostRecv(id->qp, &wr, &bad);
  }

  int PostSend(ibv_wr_opcode opcode, uint64_t wr_id, uint32_t offset,
               uint32_t length, uint64_t remote_addr, uint32_t rkey,
               uint32_t imm = 0, uint64_t compare_add = 0, uint64_t swap = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer.data()) + offset, length,
                mr->lkey};
    ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = &sge;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
        opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = remote_addr;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = compare_add;
      wr.wr.atomic.swap = swap;
    } else {
      wr.wr.rdma.remote_addr = remote_addr;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    return nic->PostSend(id->qp, &wr, &bad);
  }
};

std::string NewFabricDir() {
  char dir[] = "/tmp/fabtest.XXXXXX";
  if (mkdtemp(dir) == nullptr) return "";
  return dir;
}

std::string NewPort() {
  static int next = 0;
  return std::to_string(20000 + (getpid() % 5000) * 8 + (next++ % 8));
}

// Runs `server` in a child process (its own NIC on `dir`), with a pipe to
// the client: the child writes ServerInfo, then reads one byte per
// "go on" the client sends. Returns the child's pid.
struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;

  bool ReadInfo(ServerInfo* info) {
    return read(from_child, info, sizeof(*info)) == sizeof(*info);
  }
  void GoOn() {
    char c = 1;
    ssize_t n = write(to_child, &c, 1);
    (void)n;
  }
  int Wait() {
    int status = 0;
    waitpid(pid, &status, 0);
    close(to_child);
    close(from_child);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }
};

using ServerBody = std::function<void(Side& server, int in, int out)>;

Child Fork(const std::string& dir, ServerBody body) {
  int down[2], up[2];
  EXPECT_EQ(pipe(down), 0);
  EXPECT_EQ(pipe(up), 0);
  Child child;
  child.pid = fork();
  if (child.pid == 0) {
    alarm(30);
    close(down[1]);
    close(up[0]);
    {
      Side server(dir);
      body(server, down[0], up[1]);
    }
    _exit(0);
  }
  close(down[0]);
  close(up[1]);
  child.to_child = down[1];
  child.from_child = up[0];
  return child;
}

void SendInfo(int out, const Side& s) {
  ServerInfo info;
  info.addr = reinterpret_cast<uintptr_t>(s.buffer.data());
  info.rkey = s.mr != nullptr ? s.mr->rkey : 0;
  info.ready = 1;
  ssize_t n = write(out, &info, sizeof(info));
  (void)n;
}

void WaitGoOn(int in) {
  char c;
  ssize_t n = read(in, &c, 1);
  (void)n;
}

// A server that accepts one connection, says where its buffer is, and
// then runs `then`.
ServerBody AcceptOne(const std::string& port,
                     std::function<void(Side&, int, int)> then) {
  return [port, then](Side& s, int in, int out) {
    CHILD_CHECK(s.Listen(port));
    SendInfo(out, s);  // listening
    std::string hello;
    rdma_cm_id* child = s.TakeRequest(&hello);
    CHILD_CHECK(child != nullptr);
    CHILD_CHECK(hello == "hello");
    CHILD_CHECK(s.Accept(child, "welcome") == 0);
    CHILD_CHECK(s.Next() == RDMA_CM_EVENT_ESTABLISHED);
    SendInfo(out, s);  // connected: buffer address and rkey
    then(s, in, out);
  };
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
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int in, int) {
                       WaitGoOn(in);
                       (void)s;
                     }));
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
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
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
        // The client's write and atomics landed here.
        CHILD_CHECK(memcmp(s.buffer.data() + 1000, "client bytes", 13) == 0);
        memcpy(&counter, s.buffer.data() + 4096, 8);
        CHILD_CHECK(counter == 99);
      }));
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
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
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 16, info.addr,
                            info.rkey ^ 0x5a5a, 7),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(child.Wait(), 0);
}

TEST_F(FabricTest, WriteOutsideTheRemoteRegionIsRemoteAccessError) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int in, int) {
                       WaitGoOn(in);
                       (void)s;
                     }));
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
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
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
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

TEST_F(FabricTest, PeerKilledGivesDisconnectedAndWrsFailWithRetryExceeded) {
  Child child = Fork(dir_, AcceptOne(port_, [](Side& s, int in, int) {
                       WaitGoOn(in);
                       (void)s;
                     }));
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));
  Side client(dir_);
  int status;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_TRUE(child.ReadInfo(&info));
  kill(child.pid, SIGKILL);
  EXPECT_EQ(child.Wait(), 128 + SIGKILL);
  EXPECT_EQ(client.Next(), RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE, 1, 0, 8, info.addr, info.rkey),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_NE(wc.status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace rpma_harness
