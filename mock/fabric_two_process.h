// fabric_two_process.h: a client and a server FakeNic in two processes on
// the cross-process fabric, for nic/fake_nic_fabric_test.cc and
// tools/bench/fabric_bench.cc. Test support only.
//
// Example:
//   Child child = Fork(dir, [](Side& server, int in, int out) { ... });
//   Side client(dir);
//   client.Connect("7204", "hello", &status, &reply);
//   ... child.Wait() == 0

#ifndef RPMA_HARNESS_MOCK_FABRIC_TWO_PROCESS_H_
#define RPMA_HARNESS_MOCK_FABRIC_TWO_PROCESS_H_

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
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

#include "nic/fake_nic.h"
#include "mock/test_dir.h"

namespace rpma_harness {
namespace fabric_two_process {

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

inline FakeNicConfig FabricConfig(
    const std::string& dir, Personality personality = Personality::Spec()) {
  FakeNicConfig config;
  config.personality = std::move(personality);
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
  std::vector<uint8_t> buffer;
  ibv_mr* mr = nullptr;
  // Set before Connect / Accept: the CQ gets a completion channel, for
  // WaitCq (the rpma_cq_wait way: arm, poll, block, poll).
  bool with_comp_channel = false;
  ibv_comp_channel* comp_channel = nullptr;

  explicit Side(const std::string& dir, size_t buffer_size = 65536,
                Personality personality = Personality::Spec())
      : nic(std::make_shared<FakeNic>(
            FabricConfig(dir, std::move(personality)))),
        buffer(buffer_size, 0) {
    nic->StartBackgroundProgress();
    channel = nic->CreateEventChannel();
  }
  // Any configuration (e.g. FakeNicConfig::fabric_sequenced).
  Side(FakeNicConfig config, size_t buffer_size)
      : nic(std::make_shared<FakeNic>(std::move(config))),
        buffer(buffer_size, 0) {
    nic->StartBackgroundProgress();  // a no-op when sequenced
    channel = nic->CreateEventChannel();
  }

  // Orders this thread's plain memory accesses with the NIC's threads (it
  // takes the NIC's mutex). The peer process's requests reach our memory on
  // the fabric thread after a message the program sent through a pipe or
  // socket, a synchronisation TSan cannot see across processes; a real
  // program gets the same ordering from the post or poll it makes anyway.
  void Sync() { nic->Idle(); }

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
    if (with_comp_channel) comp_channel = nic->CreateCompChannel(on->verbs);
    cq = nic->CreateCq(on->verbs, 64, nullptr, comp_channel, 0);
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
  // `spin`: busy-poll as a latency-bound program does (benchmarks): poll
  // again at once, yielding the CPU every kPollsPerYield empty polls (two
  // processes on two cores each keep one; a third thread that needs a CPU
  // still gets one). Otherwise sleep 50 us between polls.
  static constexpr unsigned kPollsPerYield = 64;
  bool Poll(ibv_wc* wc, bool spin = false) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (unsigned n = 1;; ++n) {
      if (nic->PollCq(cq, 1, wc) == 1) return true;
      if (spin && n % kPollsPerYield != 0) continue;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      if (spin) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  // One completion the way rpma_cq_wait + rpma_cq_get_wc take it: poll;
  // if empty, arm the CQ, poll again (a completion that came before the
  // arm raises no event), then block in GetCqEvent. Needs
  // with_comp_channel.
  bool WaitCq(ibv_wc* wc) {
    for (;;) {
      const int n = nic->PollCq(cq, 1, wc);
      if (n != 0) return n == 1;
      if (nic->ReqNotifyCq(cq, 0) != 0) return false;
      const int again = nic->PollCq(cq, 1, wc);
      if (again != 0) return again == 1;
      ibv_cq* event_cq = nullptr;
      void* context = nullptr;
      if (nic->GetCqEvent(comp_channel, &event_cq, &context) != 0) {
        return false;
      }
      nic->AckCqEvents(event_cq, 1);
    }
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

inline std::string NewFabricDir() {
  // Under TEST_TMPDIR: any length works (nic/unix_address.h).
  return NewTestDir("fabtest");
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

inline Child Fork(const std::string& dir, ServerBody body,
                  size_t buffer_size = 65536,
                  Personality personality = Personality::Spec()) {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) abort();
  Child child;
  child.pid = fork();
  if (child.pid == 0) {
    alarm(30);
    close(down[1]);
    close(up[0]);
    {
      Side server(dir, buffer_size, std::move(personality));
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

inline void SendInfo(int out, Side& s) {
  s.Sync();
  ServerInfo info;
  info.addr = reinterpret_cast<uintptr_t>(s.buffer.data());
  info.rkey = s.mr != nullptr ? s.mr->rkey : 0;
  info.ready = 1;
  ssize_t n = write(out, &info, sizeof(info));
  (void)n;
}

inline void WaitGoOn(int in) {
  char c;
  ssize_t n = read(in, &c, 1);
  (void)n;
}

// A server that listens on `port` (and says so), accepts one connection
// whose private data is "hello" with "welcome", posts `recvs` receives
// (wr_id 0..recvs-1, the whole buffer) before it is ESTABLISHED, says
// where its buffer is, and then runs `then`.
inline ServerBody AcceptOne(const std::string& port, ServerBody then,
                            int recvs = 0) {
  return [port, then, recvs](Side& s, int in, int out) {
    CHILD_CHECK(s.Listen(port));
    SendInfo(out, s);  // listening
    std::string hello;
    rdma_cm_id* child = s.TakeRequest(&hello);
    CHILD_CHECK(child != nullptr);
    CHILD_CHECK(hello == "hello");
    CHILD_CHECK(s.Accept(child, "welcome") == 0);
    for (int i = 0; i < recvs; ++i) CHILD_CHECK(s.PostRecv(i, 0, 0) == 0);
    CHILD_CHECK(s.Next() == RDMA_CM_EVENT_ESTABLISHED);
    SendInfo(out, s);  // connected: buffer address and rkey
    then(s, in, out);
  };
}

}  // namespace fabric_two_process
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_FABRIC_TWO_PROCESS_H_
