// rxe_smoke_test: proof that the soft-RoCE (rxe) device inside the
// tools/softroce_vm VM really moves RDMA traffic, and a probe of what rxe
// reports where the verbs spec leaves room.
//
// It is written against raw libibverbs + librdmacm (none of our code), so a
// failure here means the VM or rxe is broken, not the harness. Each case sets
// up a loopback RC connection on one rxe device (listener and connecting id on
// $RPMA_HARNESS_VM_ADDR, any free port) and prints every field it observes as
// "observed: ..." lines; it asserts only values seen on Debian 12's 6.1
// kernel (see README.md beside this file for the table).
//
//   bazel build //tools/softroce_vm:rxe_smoke_test
//   tools/softroce_vm/run.sh bazel-bin/tools/softroce_vm/rxe_smoke_test

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kCmTimeoutMs = 5000;
constexpr std::chrono::milliseconds kCqTimeout(10000);
constexpr uint32_t kImm = 0x12345678;

const char* OpcodeName(ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "RDMA_READ";
    case IBV_WC_RECV:
      return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
    default:
      return "other";
  }
}

// Prints every ibv_wc field: these lines are the record README.md quotes.
// imm_data is printed as stored (network order) and converted.
void PrintWc(const char* who, const ibv_wc& wc) {
  std::printf(
      "observed: %s wc: wr_id=0x%llx status=%s(%d) opcode=%s(%d) "
      "vendor_err=0x%x byte_len=%u imm_data(raw)=0x%08x ntohl=0x%08x "
      "qp_num=%u src_qp=%u wc_flags=0x%x(WITH_IMM=%d GRH=%d) pkey_index=%u "
      "slid=%u sl=%u dlid_path_bits=%u\n",
      who, static_cast<unsigned long long>(wc.wr_id),
      ibv_wc_status_str(wc.status), wc.status, OpcodeName(wc.opcode), wc.opcode,
      wc.vendor_err, wc.byte_len, wc.imm_data, ntohl(wc.imm_data), wc.qp_num,
      wc.src_qp, wc.wc_flags, (wc.wc_flags & IBV_WC_WITH_IMM) != 0,
      (wc.wc_flags & IBV_WC_GRH) != 0, wc.pkey_index, wc.slid, wc.sl,
      wc.dlid_path_bits);
  std::fflush(stdout);
}

void PrintCaps(const char* what, const ibv_qp_cap& cap) {
  std::printf(
      "observed: %s: max_send_wr=%u max_recv_wr=%u max_send_sge=%u "
      "max_recv_sge=%u max_inline_data=%u\n",
      what, cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge,
      cap.max_recv_sge, cap.max_inline_data);
  std::fflush(stdout);
}

// Busy-polls `cq` for one completion until `timeout`: rxe completes in a
// kernel thread, so a bounded spin is the simplest deterministic wait.
::testing::AssertionResult PollOne(ibv_cq* cq, ibv_wc* wc,
                                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return ::testing::AssertionFailure() << "ibv_poll_cq: " << n;
    if (n == 1) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "no completion within " << timeout.count() << " ms";
}

// Waits (bounded) for the next rdma_cm event on `channel`, checks its type
// and acks it; `id` receives the event's id (the new id for CONNECT_REQUEST).
::testing::AssertionResult WaitCmEvent(rdma_event_channel* channel,
                                       rdma_cm_event_type want,
                                       rdma_cm_id** id = nullptr) {
  pollfd pfd = {channel->fd, POLLIN, 0};
  if (poll(&pfd, 1, kCmTimeoutMs) != 1) {
    return ::testing::AssertionFailure()
           << "no rdma_cm event within " << kCmTimeoutMs << " ms, wanted "
           << rdma_event_str(want);
  }
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(channel, &event) != 0) {
    return ::testing::AssertionFailure()
           << "rdma_get_cm_event: " << std::strerror(errno);
  }
  const rdma_cm_event_type got = event->event;
  const int status = event->status;
  if (id != nullptr) *id = event->id;
  rdma_ack_cm_event(event);
  if (got != want) {
    return ::testing::AssertionFailure()
           << "rdma_cm event " << rdma_event_str(got) << " (status " << status
           << "), wanted " << rdma_event_str(want);
  }
  return ::testing::AssertionSuccess();
}

// One side of the loopback connection: its id, PD, CQ (send and recv share
// it) and QP.
struct Side {
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp_cap created_cap = {};  // what ibv_create_qp wrote back
};

// A loopback RC connection on the rxe device that owns $RPMA_HARNESS_VM_ADDR:
// `client` connects to a listener on the same address, `server` is the id the
// listener accepted. Owns everything it creates, MRs included.
class LoopbackRc {
 public:
  ~LoopbackRc() {
    for (ibv_mr* mr : mrs_) ibv_dereg_mr(mr);
    for (Side* side : {&client, &server}) {
      if (side->id != nullptr && side->id->qp != nullptr) {
        rdma_destroy_qp(side->id);
      }
    }
    if (server.id != nullptr) rdma_destroy_id(server.id);
    if (client.id != nullptr) rdma_destroy_id(client.id);
    if (listen_id_ != nullptr) rdma_destroy_id(listen_id_);
    for (Side* side : {&client, &server}) {
      if (side->cq != nullptr) ibv_destroy_cq(side->cq);
      if (side->pd != nullptr) ibv_dealloc_pd(side->pd);
      if (side->channel != nullptr) rdma_destroy_event_channel(side->channel);
    }
  }

  // Both sides get a QP with `cap`; `rnr_retry` goes into both conn_params
  // (the CM hands the acceptor's value to the connecting side's QP).
  ::testing::AssertionResult Connect(const ibv_qp_cap& cap,
                                     uint8_t rnr_retry = 7) {
    const char* addr_env = std::getenv("RPMA_HARNESS_VM_ADDR");
    if (addr_env == nullptr) {
      return ::testing::AssertionFailure()
             << "RPMA_HARNESS_VM_ADDR is not set: run this test through "
                "tools/softroce_vm/run.sh";
    }
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    if (inet_pton(AF_INET, addr_env, &addr.sin_addr) != 1) {
      return ::testing::AssertionFailure() << "bad address " << addr_env;
    }
    server.channel = rdma_create_event_channel();
    client.channel = rdma_create_event_channel();
    if (server.channel == nullptr || client.channel == nullptr) {
      return ::testing::AssertionFailure()
             << "rdma_create_event_channel: " << std::strerror(errno);
    }
    if (rdma_create_id(server.channel, &listen_id_, nullptr, RDMA_PS_TCP) ||
        rdma_bind_addr(listen_id_, reinterpret_cast<sockaddr*>(&addr)) ||
        rdma_listen(listen_id_, 1)) {
      return ::testing::AssertionFailure()
             << "listen on " << addr_env << ": " << std::strerror(errno);
    }
    addr.sin_port = rdma_get_src_port(listen_id_);

    if (rdma_create_id(client.channel, &client.id, nullptr, RDMA_PS_TCP) ||
        rdma_resolve_addr(client.id, nullptr,
                          reinterpret_cast<sockaddr*>(&addr), kCmTimeoutMs)) {
      return ::testing::AssertionFailure()
             << "resolve_addr: " << std::strerror(errno);
    }
    auto r = WaitCmEvent(client.channel, RDMA_CM_EVENT_ADDR_RESOLVED);
    if (!r) return r;
    if (rdma_resolve_route(client.id, kCmTimeoutMs)) {
      return ::testing::AssertionFailure()
             << "resolve_route: " << std::strerror(errno);
    }
    r = WaitCmEvent(client.channel, RDMA_CM_EVENT_ROUTE_RESOLVED);
    if (!r) return r;
    r = CreateQp(&client, cap);
    if (!r) return r;

    rdma_conn_param param = {};
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 7;
    param.rnr_retry_count = rnr_retry;
    if (rdma_connect(client.id, &param)) {
      return ::testing::AssertionFailure()
             << "rdma_connect: " << std::strerror(errno);
    }
    r = WaitCmEvent(server.channel, RDMA_CM_EVENT_CONNECT_REQUEST, &server.id);
    if (!r) return r;
    r = CreateQp(&server, cap);
    if (!r) return r;
    if (rdma_accept(server.id, &param)) {
      return ::testing::AssertionFailure()
             << "rdma_accept: " << std::strerror(errno);
    }
    // librdmacm moves the client QP to RTR/RTS and sends the RTU inside the
    // client's rdma_get_cm_event (the CONNECT_RESPONSE it turns into
    // ESTABLISHED), so the server is established only after that: waiting
    // for the server's event first would block for ever. Probed below.
    if (probe_establish_order) {
      pollfd pfd = {server.channel->fd, POLLIN, 0};
      server_event_before_client_event = poll(&pfd, 1, 1000) == 1;
    }
    r = WaitCmEvent(client.channel, RDMA_CM_EVENT_ESTABLISHED);
    if (!r) return r;
    return WaitCmEvent(server.channel, RDMA_CM_EVENT_ESTABLISHED);
  }

  ibv_mr* Register(Side* side, void* buf, size_t len, int access) {
    ibv_mr* mr = ibv_reg_mr(side->pd, buf, len, access);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  // Posts one receive with no SGE: a write with immediate consumes a receive
  // but places its bytes by rkey, not into the receive's buffers.
  int PostEmptyRecv(Side* side, uint64_t wr_id) {
    ibv_recv_wr wr = {};
    wr.wr_id = wr_id;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(side->id->qp, &wr, &bad);
  }

  Side client;
  Side server;
  // Set before Connect to learn whether the server's channel had an event
  // within 1 s of rdma_accept, before the client's ESTABLISHED was read.
  bool probe_establish_order = false;
  bool server_event_before_client_event = false;

 private:
  ::testing::AssertionResult CreateQp(Side* side, const ibv_qp_cap& cap) {
    side->pd = ibv_alloc_pd(side->id->verbs);
    side->cq = ibv_create_cq(side->id->verbs, 64, nullptr, nullptr, 0);
    if (side->pd == nullptr || side->cq == nullptr) {
      return ::testing::AssertionFailure()
             << "alloc_pd/create_cq: " << std::strerror(errno);
    }
    ibv_qp_init_attr attr = {};
    attr.send_cq = side->cq;
    attr.recv_cq = side->cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap = cap;
    if (rdma_create_qp(side->id, side->pd, &attr)) {
      return ::testing::AssertionFailure()
             << "rdma_create_qp: " << std::strerror(errno);
    }
    side->created_cap = attr.cap;
    return ::testing::AssertionSuccess();
  }

  rdma_cm_id* listen_id_ = nullptr;
  std::vector<ibv_mr*> mrs_;
};

ibv_qp_cap DefaultCap() {
  ibv_qp_cap cap = {};
  cap.max_send_wr = 10;
  cap.max_recv_wr = 10;
  cap.max_send_sge = 2;
  cap.max_recv_sge = 1;
  cap.max_inline_data = 16;
  return cap;
}

ibv_send_wr WriteWithImm(uint64_t wr_id, ibv_sge* sge, int num_sge,
                         uint64_t remote_addr, uint32_t rkey) {
  ibv_send_wr wr = {};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.imm_data = htonl(kImm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

class RxeLoopback : public ::testing::Test {
 protected:
  // A source buffer on the client and a destination on the server, both
  // registered; src holds a pattern, dst zeros.
  void SetUpBuffers(size_t len) {
    src_.assign(len, 0);
    dst_.assign(len, 0);
    for (size_t i = 0; i < len; ++i) src_[i] = static_cast<char>(i * 7 + 1);
    src_mr_ =
        rc_.Register(&rc_.client, src_.data(), len, IBV_ACCESS_LOCAL_WRITE);
    dst_mr_ = rc_.Register(&rc_.server, dst_.data(), len,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(src_mr_, nullptr) << std::strerror(errno);
    ASSERT_NE(dst_mr_, nullptr) << std::strerror(errno);
  }

  ibv_sge SrcSge(uint32_t len) {
    ibv_sge sge = {};
    sge.addr = reinterpret_cast<uintptr_t>(src_.data());
    sge.length = len;
    sge.lkey = src_mr_->lkey;
    return sge;
  }

  uint64_t DstAddr() const { return reinterpret_cast<uintptr_t>(dst_.data()); }

  LoopbackRc rc_;
  std::vector<char> src_;
  std::vector<char> dst_;
  ibv_mr* src_mr_ = nullptr;
  ibv_mr* dst_mr_ = nullptr;
};

TEST_F(RxeLoopback, DeviceAndPortAttributes) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  ibv_context* ctx = rc_.client.id->verbs;
  ibv_device_attr dev = {};
  ASSERT_EQ(ibv_query_device(ctx, &dev), 0);
  std::printf(
      "observed: device %s fw_ver=%s vendor_id=0x%x vendor_part_id=%u "
      "max_qp=%d max_qp_wr=%d max_sge=%d max_sge_rd=%d max_cq=%d max_cqe=%d "
      "max_mr=%d max_mr_size=%llu max_qp_rd_atom=%d max_qp_init_rd_atom=%d "
      "atomic_cap=%d device_cap_flags=0x%x phys_port_cnt=%u\n",
      ibv_get_device_name(ctx->device), dev.fw_ver, dev.vendor_id,
      dev.vendor_part_id, dev.max_qp, dev.max_qp_wr, dev.max_sge,
      dev.max_sge_rd, dev.max_cq, dev.max_cqe, dev.max_mr,
      static_cast<unsigned long long>(dev.max_mr_size), dev.max_qp_rd_atom,
      dev.max_qp_init_rd_atom, dev.atomic_cap, dev.device_cap_flags,
      dev.phys_port_cnt);
  ibv_port_attr port = {};
  ASSERT_EQ(ibv_query_port(ctx, rc_.client.id->port_num, &port), 0);
  std::printf(
      "observed: port %u state=%s max_mtu=%d active_mtu=%d gid_tbl_len=%d "
      "link_layer=%u (ETHERNET=%u) max_msg_sz=%u\n",
      rc_.client.id->port_num, ibv_port_state_str(port.state), port.max_mtu,
      port.active_mtu, port.gid_tbl_len, port.link_layer,
      IBV_LINK_LAYER_ETHERNET, port.max_msg_sz);
  std::printf("observed: client and server share one ibv_context: %s\n",
              rc_.client.id->verbs == rc_.server.id->verbs ? "yes" : "no");
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
}

TEST_F(RxeLoopback, ServerIsEstablishedOnlyAfterClientReadsItsEvent) {
  rc_.probe_establish_order = true;
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  std::printf(
      "observed: server channel had an event within 1 s of rdma_accept, "
      "before the client read its ESTABLISHED: %s\n",
      rc_.server_event_before_client_event ? "yes" : "no");
  EXPECT_FALSE(rc_.server_event_before_client_event);
}

TEST_F(RxeLoopback, WriteWithImmDeliversDataAndImmediate) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x77), 0);
  ibv_sge sge = SrcSge(64);
  ibv_send_wr wr = WriteWithImm(0x100, &sge, 1, DstAddr(), dst_mr_->rkey);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &wr, &bad), 0);

  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  PrintWc("requester", req);
  ibv_wc resp = {};
  ASSERT_TRUE(PollOne(rc_.server.cq, &resp, kCqTimeout));
  PrintWc("responder", resp);

  EXPECT_EQ(req.status, IBV_WC_SUCCESS);
  EXPECT_EQ(req.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(req.wr_id, 0x100u);
  EXPECT_EQ(req.qp_num, rc_.client.id->qp->qp_num);

  EXPECT_EQ(resp.status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(resp.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(resp.imm_data), kImm);
  EXPECT_EQ(resp.byte_len, 64u);
  EXPECT_EQ(resp.wr_id, 0x77u);
  EXPECT_EQ(resp.qp_num, rc_.server.id->qp->qp_num);
  EXPECT_EQ(dst_, src_);

  // What rxe (Linux 6.1) puts in the fields the spec leaves open for these
  // completions; observed, see README.md. A device may differ here.
  EXPECT_TRUE(req.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(req.byte_len, 64u);
  EXPECT_TRUE(resp.wc_flags & IBV_WC_GRH);
  EXPECT_EQ(resp.src_qp, 0u);
}

TEST_F(RxeLoopback, WriteWithImmZeroBytes) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(8);
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x78), 0);
  // A zero-length RDMA write needs no valid remote address or rkey (IBTA
  // 9.4.3: a zero-length DMA does not check the R_Key).
  ibv_send_wr wr = WriteWithImm(0x101, nullptr, 0, 0, 0);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &wr, &bad), 0);

  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  PrintWc("requester (0 bytes)", req);
  ibv_wc resp = {};
  ASSERT_TRUE(PollOne(rc_.server.cq, &resp, kCqTimeout));
  PrintWc("responder (0 bytes)", resp);
  EXPECT_EQ(req.status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(resp.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(resp.imm_data), kImm);
  EXPECT_EQ(resp.byte_len, 0u);
}

TEST_F(RxeLoopback, WriteWithImmBadRkeyFailsWithRemoteAccessError) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x79), 0);
  ibv_sge sge = SrcSge(64);
  ibv_send_wr wr =
      WriteWithImm(0x102, &sge, 1, DstAddr(), dst_mr_->rkey ^ 0xffff00);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &wr, &bad), 0);

  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  PrintWc("requester (bad rkey)", req);
  EXPECT_EQ(req.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(req.wr_id, 0x102u);
  EXPECT_EQ(dst_, std::vector<char>(64, 0));
  // rxe also completes the responder's receive, with the same status (it
  // consumed the receive before it checked the rkey).
  ibv_wc resp = {};
  ASSERT_TRUE(PollOne(rc_.server.cq, &resp, kCqTimeout));
  PrintWc("responder (bad rkey)", resp);
  EXPECT_EQ(resp.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(resp.wr_id, 0x79u);

  // What state did the error leave each QP in, and what happens to the
  // next WRs?
  for (Side* side : {&rc_.client, &rc_.server}) {
    ibv_qp_attr attr = {};
    ibv_qp_init_attr init = {};
    ASSERT_EQ(ibv_query_qp(side->id->qp, &attr, IBV_QP_STATE, &init), 0);
    std::printf("observed: %s QP state after the access error: %d (ERR=%d)\n",
                side == &rc_.client ? "requester" : "responder", attr.qp_state,
                IBV_QPS_ERR);
  }
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x7f), 0);
  ibv_wc flushed = {};
  if (PollOne(rc_.server.cq, &flushed, std::chrono::milliseconds(2000))) {
    PrintWc("responder recv posted after the error", flushed);
    EXPECT_EQ(flushed.status, IBV_WC_WR_FLUSH_ERR);
  } else {
    std::printf("observed: responder recv posted after the error: no CQE\n");
  }
  ibv_send_wr next = WriteWithImm(0x1ff, &sge, 1, DstAddr(), dst_mr_->rkey);
  const int rc = ibv_post_send(rc_.client.id->qp, &next, &bad);
  std::printf("observed: post_send on the errored requester returned %d\n", rc);
  if (rc == 0) {
    ASSERT_TRUE(PollOne(rc_.client.cq, &flushed, kCqTimeout));
    PrintWc("requester send posted after the error", flushed);
    EXPECT_EQ(flushed.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(flushed.wr_id, 0x1ffu);
  }
}

TEST_F(RxeLoopback, WriteWithImmPastEndOfRemoteMrFailsWithRemoteAccessError) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x7a), 0);
  ibv_sge sge = SrcSge(64);
  ibv_send_wr wr = WriteWithImm(0x103, &sge, 1, DstAddr() + 32, dst_mr_->rkey);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &wr, &bad), 0);

  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  PrintWc("requester (past end)", req);
  EXPECT_EQ(req.status, IBV_WC_REM_ACCESS_ERR);
  ibv_wc resp = {};
  ASSERT_TRUE(PollOne(rc_.server.cq, &resp, kCqTimeout));
  PrintWc("responder (past end)", resp);
  EXPECT_EQ(resp.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(dst_, std::vector<char>(64, 0));
}

TEST_F(RxeLoopback, WriteWithImmWithoutRecvAndNoRnrRetryFails) {
  ASSERT_TRUE(rc_.Connect(DefaultCap(), /*rnr_retry=*/0));
  SetUpBuffers(64);
  ibv_sge sge = SrcSge(64);
  ibv_send_wr wr = WriteWithImm(0x104, &sge, 1, DstAddr(), dst_mr_->rkey);
  ibv_send_wr* bad = nullptr;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &wr, &bad), 0);
  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  PrintWc("requester (no recv, rnr_retry 0)", req);
  std::printf("observed: RNR error after %lld ms\n",
              static_cast<long long>(ms));
  EXPECT_EQ(req.status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(RxeLoopback, InlineWriteWithImm) {
  ibv_qp_cap cap = DefaultCap();
  ASSERT_TRUE(rc_.Connect(cap));
  PrintCaps("inline: created cap", rc_.client.created_cap);
  SetUpBuffers(16);
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x7b), 0);
  ibv_sge sge = SrcSge(16);
  sge.lkey = 0;  // inline data is copied at post time; no lkey is checked
  ibv_send_wr wr = WriteWithImm(0x105, &sge, 1, DstAddr(), dst_mr_->rkey);
  wr.send_flags |= IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(rc_.client.id->qp, &wr, &bad);
  std::printf("observed: inline post_send of 16 bytes returned %d\n", rc);
  ASSERT_EQ(rc, 0);
  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  PrintWc("requester (inline)", req);
  ibv_wc resp = {};
  ASSERT_TRUE(PollOne(rc_.server.cq, &resp, kCqTimeout));
  PrintWc("responder (inline)", resp);
  EXPECT_EQ(req.status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.byte_len, 16u);
  EXPECT_EQ(dst_, src_);

  // One byte more than the granted max_inline_data.
  const uint32_t too_long = rc_.client.created_cap.max_inline_data + 1;
  std::vector<char> big(too_long, 'x');
  ibv_sge big_sge = {};
  big_sge.addr = reinterpret_cast<uintptr_t>(big.data());
  big_sge.length = too_long;
  ibv_send_wr over = WriteWithImm(0x106, &big_sge, 1, DstAddr(), 0);
  over.send_flags |= IBV_SEND_INLINE;
  const int over_rc = ibv_post_send(rc_.client.id->qp, &over, &bad);
  std::printf(
      "observed: inline post_send of %u bytes (max_inline_data %u) returned "
      "%d\n",
      too_long, rc_.client.created_cap.max_inline_data, over_rc);
  EXPECT_NE(over_rc, 0);
}

TEST_F(RxeLoopback, UnsignaledWriteWithImmCompletesOnlyAtResponder) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x80), 0);
  ibv_sge sge = SrcSge(64);
  ibv_send_wr wr = WriteWithImm(0x108, &sge, 1, DstAddr(), dst_mr_->rkey);
  wr.send_flags = 0;  // unsignaled; the QP has sq_sig_all = 0
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &wr, &bad), 0);
  ibv_wc resp = {};
  ASSERT_TRUE(PollOne(rc_.server.cq, &resp, kCqTimeout));
  PrintWc("responder (unsignaled)", resp);
  EXPECT_EQ(resp.status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  ibv_wc req = {};
  EXPECT_FALSE(PollOne(rc_.client.cq, &req, std::chrono::milliseconds(500)))
      << "unexpected requester completion for an unsignaled WR";
}

TEST_F(RxeLoopback, PostSendChainLongerThanSendQueue) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(rc_.client.id->qp, &attr, IBV_QP_CAP, &init), 0);
  // A chain one longer than the queue: the provider rings the doorbell once
  // at the end of the call, so the device cannot free slots meanwhile.
  const uint32_t n = attr.cap.max_send_wr + 1;
  std::vector<ibv_sge> sges(n);
  std::vector<ibv_send_wr> wrs(n);
  for (uint32_t i = 0; i < n; ++i) {
    sges[i] = SrcSge(1);
    wrs[i] = {};
    wrs[i].wr_id = 0x200 + i;
    wrs[i].opcode = IBV_WR_RDMA_WRITE;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].wr.rdma.remote_addr = DstAddr() + i % 64;
    wrs[i].wr.rdma.rkey = dst_mr_->rkey;
    wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(rc_.client.id->qp, wrs.data(), &bad);
  const long bad_index =
      bad == nullptr ? -1 : static_cast<long>(bad - wrs.data());
  int completed = 0;
  ibv_wc wc = {};
  while (PollOne(rc_.client.cq, &wc, std::chrono::milliseconds(1000))) {
    if (wc.status != IBV_WC_SUCCESS) PrintWc("requester (chain)", wc);
    ++completed;
  }
  std::printf(
      "observed: post_send of a %u-WR chain on a queue of max_send_wr=%u "
      "returned %d (%s), bad_wr index %ld; %d WRs completed\n",
      n, attr.cap.max_send_wr, rc, rc > 0 ? std::strerror(rc) : "-", bad_index,
      completed);
  EXPECT_NE(rc, 0);
  EXPECT_EQ(bad_index, static_cast<long>(n - 1));
  EXPECT_EQ(completed, static_cast<int>(n - 1));
}

TEST_F(RxeLoopback, PostRecvAboveMaxSgeIsRejected) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  const uint32_t too_many = rc_.server.created_cap.max_recv_sge + 1;
  std::vector<ibv_sge> sges(too_many);
  for (uint32_t i = 0; i < too_many; ++i) {
    sges[i].addr = DstAddr() + i;
    sges[i].length = 1;
    sges[i].lkey = dst_mr_->lkey;
  }
  ibv_recv_wr wr = {};
  wr.wr_id = 0x81;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(too_many);
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(rc_.server.id->qp, &wr, &bad);
  std::printf(
      "observed: post_recv with num_sge=%u (max_recv_sge=%u) returned %d "
      "(%s), bad_wr %s\n",
      too_many, rc_.server.created_cap.max_recv_sge, rc,
      rc > 0 ? std::strerror(rc) : "-", bad == &wr ? "== wr" : "other");
  EXPECT_NE(rc, 0);
}

TEST_F(RxeLoopback, QueryQpReportsGrantedCaps) {
  const ibv_qp_cap requested = DefaultCap();
  ASSERT_TRUE(rc_.Connect(requested));
  PrintCaps("requested cap", requested);
  PrintCaps("ibv_create_qp wrote back", rc_.client.created_cap);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(rc_.client.id->qp, &attr, IBV_QP_CAP, &init), 0);
  PrintCaps("ibv_query_qp attr.cap", attr.cap);
  PrintCaps("ibv_query_qp init_attr.cap", init.cap);
  EXPECT_GE(attr.cap.max_send_wr, requested.max_send_wr);
  EXPECT_GE(attr.cap.max_recv_wr, requested.max_recv_wr);
  EXPECT_GE(attr.cap.max_send_sge, requested.max_send_sge);
}

TEST_F(RxeLoopback, PostSendAboveMaxSgeIsRejected) {
  ASSERT_TRUE(rc_.Connect(DefaultCap()));
  SetUpBuffers(64);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_EQ(ibv_query_qp(rc_.client.id->qp, &attr, IBV_QP_CAP, &init), 0);
  const uint32_t too_many = attr.cap.max_send_sge + 1;
  std::vector<ibv_sge> sges(too_many);
  for (uint32_t i = 0; i < too_many; ++i) {
    sges[i] = SrcSge(1);
    sges[i].addr += i;
  }
  ibv_send_wr wr = WriteWithImm(0x106, sges.data(), static_cast<int>(too_many),
                                DstAddr(), dst_mr_->rkey);
  ibv_send_wr* bad = nullptr;
  errno = 0;
  const int rc = ibv_post_send(rc_.client.id->qp, &wr, &bad);
  const int err = errno;
  std::printf(
      "observed: post_send with num_sge=%u (max_send_sge=%u) returned %d "
      "(%s), errno=%d, bad_wr %s\n",
      too_many, attr.cap.max_send_sge, rc, rc > 0 ? std::strerror(rc) : "-",
      err, bad == &wr ? "== wr" : (bad == nullptr ? "null" : "other"));
  EXPECT_NE(rc, 0);
  EXPECT_EQ(bad, &wr);

  // Is the QP still usable after the rejected post?
  ASSERT_EQ(rc_.PostEmptyRecv(&rc_.server, 0x7c), 0);
  ibv_sge sge = SrcSge(64);
  ibv_send_wr ok = WriteWithImm(0x107, &sge, 1, DstAddr(), dst_mr_->rkey);
  ASSERT_EQ(ibv_post_send(rc_.client.id->qp, &ok, &bad), 0);
  ibv_wc req = {};
  ASSERT_TRUE(PollOne(rc_.client.cq, &req, kCqTimeout));
  PrintWc("requester (after rejected post)", req);
  EXPECT_EQ(req.status, IBV_WC_SUCCESS);
  EXPECT_EQ(req.wr_id, 0x107u);
}

}  // namespace
