// The write-with-imm rules every backend must follow (and, below, those of
// librpma 1.3's read, flush, atomic write, SRQ and shared completion
// channel), one test per rule,
// run on the fake NIC (both personalities) on any host and on the real
// rdma-core backend over soft-RoCE inside the VM (tools/softroce_vm).
// Sources: ibv_post_send(3), ibv_poll_cq(3), IB spec vol. 1 ch. 9-11.

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/conformance_fixture.h"

namespace rpma_harness {
namespace {

constexpr uint32_t kImm = 0x01020304;

class WriteImmConformance : public ConformanceTest {
 protected:
  void Fill(Endpoint& side, size_t offset, size_t len, uint8_t seed) {
    for (size_t i = 0; i < len; ++i) {
      side.buffer[offset + i] = static_cast<uint8_t>(seed + i * 7);
    }
  }
  bool Landed(size_t src_offset, size_t dst_offset, size_t len) {
    if (len == 0) return true;
    return std::memcmp(client().buffer.data() + src_offset,
                       server().buffer.data() + dst_offset, len) == 0;
  }
};

// ---- cases run at every write size (WriteSizes(): 0, 1, 64, MTU-1, MTU,
// MTU+1, 4 KiB, 64 KiB), each size on its own connection ----------------------

TEST_P(WriteImmConformance, WriteImmDeliversDataImmAndBothCompletions) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 500), 0); });
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(1, 0, 0, size, true, kImm, true, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);

    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.qp_num, client().qp->qp_num);
    if (quirks().send_cqe_has_imm_and_byte_len) {
      EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
      EXPECT_EQ(wc.byte_len, size);
    }

    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(wc.wr_id, 500u);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(wc.imm_data), kImm);
    EXPECT_EQ(wc.byte_len, size);
    EXPECT_EQ(wc.qp_num, server().qp->qp_num);
    EXPECT_TRUE(Landed(0, 0, size));
  }
}

TEST_P(WriteImmConformance, UnsignaledSuccessHasNoRequesterCompletion) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 8), 0); });
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(3, 0, 0, size, true, kImm, false, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(NoCompletionPending(client()));
  }
}

// A zero-length write carries no R_Key or VA worth checking (IB spec C9-88,
// rxe_resp.c check_rkey), so the responder-side violations below fail only
// for size > 0.
TEST_P(WriteImmConformance,
       BadRkeyIsRemoteAccessErrorAndTheRequesterGoesToErr) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 9), 0); });
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(6, 0, 0, size, true, kImm, true, &sge);
    wr.wr.rdma.rkey ^= 0x5a5a;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    if (size == 0) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      continue;
    }
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(QpState(client()), IBV_QPS_ERR);
    EXPECT_EQ(server().buffer, std::vector<uint8_t>(kBufferSize, 0));
  }
}

TEST_P(WriteImmConformance, RemoteRangeOutsideTheMrIsRemoteAccessError) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 9), 0); });
    ibv_sge sge;
    // Ends one byte past the region (a zero-length write: starts past it).
    ibv_send_wr wr =
        WriteWr(7, 0, kBufferSize - size + 1, size, true, kImm, true, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, size == 0 ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(wc.wr_id, 7u);
  }
}

TEST_P(WriteImmConformance, MrWithoutRemoteWriteIsRemoteAccessError) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 9), 0); });
    ibv_mr* read_only = nic(server()).RegMr(
        server().pd, server().buffer.data(), server().buffer.size(),
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(read_only, nullptr);
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(8, 0, 0, size, true, kImm, true, &sge);
    wr.wr.rdma.rkey = read_only->rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, size == 0 ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(nic(server()).DeregMr(read_only), 0);
  }
}

// ibv_modify_qp(3) RTS -> RTS may change qp_access_flags; rxe_resp.c
// check_op_valid refuses a write the responder QP does not allow with an
// "invalid request" NAK, before a receive is taken.
TEST_P(WriteImmConformance, QpWithoutRemoteWriteIsInvalidRequest) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 9), 0); });
    ibv_qp_attr attr{};
    attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    const int ret =
        nic(server()).ModifyQp(server().qp, &attr, IBV_QP_ACCESS_FLAGS);
    RecordPost("modify server access=REMOTE_READ", ret);
    ASSERT_EQ(ret, 0);
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(10, 0, 0, size, true, kImm, true, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  }
}

TEST_P(WriteImmConformance, NoReceiveWithRnrRetryZeroIsRnrRetryExceeded) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    QpOptions options;
    options.rnr_retry_count = 0;
    Connect(options);
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(30, 0, 0, size, true, kImm, true, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(wc.wr_id, 30u);
  }
}

TEST_P(WriteImmConformance, NoReceiveWithRnrRetrySevenWaitsForAReceive) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    QpOptions options;
    options.rnr_retry_count = 7;
    Connect(options);
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(31, 0, 0, size, true, kImm, true, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    EXPECT_TRUE(NoCompletionPending(client()));
    EXPECT_TRUE(NoCompletionPending(server()));
    ASSERT_EQ(PostRecv(server(), 32), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 32u);
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(Landed(0, 0, size));
  }
}

// librpma's ping-pong examples post a message and disconnect at once: a NIC
// transmits what was posted before the QP leaves RTS (rxe runs the requester
// inside ibv_post_send for a user QP).
TEST_P(WriteImmConformance, WritePostedBeforeDisconnectArrives) {
  for (uint32_t size : {64u, 4096u}) {
    SCOPED_TRACE(size);
    BeginSection("size=" + std::to_string(size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 60), 0); });
    ibv_sge sge;
    ibv_send_wr wr = WriteWr(61, 0, 0, size, true, kImm, true, &sge);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ASSERT_EQ(nic(client()).Disconnect(client().id), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 60u);
    EXPECT_TRUE(Landed(0, 0, size));
  }
}

// ---- cases at one size ------------------------------------------------------

TEST_P(WriteImmConformance, UnsignaledFailureStillCompletes) {
  Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 8), 0); });
  ibv_sge sge;
  ibv_send_wr wr = WriteWr(5, 0, 0, 64, true, kImm, false, &sge);
  wr.wr.rdma.rkey ^= 0x5a5a;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc.wr_id, 5u);
}

TEST_P(WriteImmConformance, SqSigAllSignalsAnUnsignaledWr) {
  QpOptions options;
  options.sq_sig_all = 1;
  Connect(options, [&] { ASSERT_EQ(PostRecv(server(), 8), 0); });
  ibv_sge sge;
  ibv_send_wr wr = WriteWr(4, 0, 0, 64, true, kImm, false, &sge);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 4u);
}

TEST_P(WriteImmConformance, ErrorFlushesTheWrsPostedAfterIt) {
  Connect(QpOptions{}, [&] {
    ASSERT_EQ(PostRecv(server(), 10), 0);
    ASSERT_EQ(PostRecv(server(), 11), 0);
  });
  ibv_sge sge[3];
  ibv_send_wr wr[3];
  wr[0] = WriteWr(20, 0, 0, 64, true, kImm, true, &sge[0]);
  wr[0].wr.rdma.rkey ^= 0x5a5a;
  wr[1] = WriteWr(21, 0, 0, 64, true, kImm, true, &sge[1]);
  wr[2] = WriteWr(22, 0, 0, 64, false, 0, true, &sge[2]);
  wr[0].next = &wr[1];
  wr[1].next = &wr[2];
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wr[0], &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc.wr_id, 20u);
  for (uint64_t id : {21u, 22u}) {
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, id);
  }
  // A WR posted to the QP in ERR completes with a flush error too.
  ibv_sge later_sge;
  ibv_send_wr later = WriteWr(23, 0, 0, 8, true, kImm, false, &later_sge);
  ASSERT_EQ(PostSend(client(), &later, &bad), 0);
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.wr_id, 23u);
}

TEST_P(WriteImmConformance, PlainWriteConsumesNoReceive) {
  Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecv(server(), 40), 0); });
  ibv_sge sge[2];
  ibv_send_wr plain = WriteWr(41, 0, 0, 16, false, 0, true, &sge[0]);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &plain, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(NoCompletionPending(server()));
  ibv_send_wr imm = WriteWr(42, 0, 16, 16, true, kImm, true, &sge[1]);
  ASSERT_EQ(PostSend(client(), &imm, &bad), 0);
  ASSERT_TRUE(WaitCompletion(server(), &wc));
  EXPECT_EQ(wc.wr_id, 40u);  // the one receive is still there for it
}

TEST_P(WriteImmConformance,
       SendQueueOverflowIsEnomemAtTheFirstWrThatDoesNotFit) {
  QpOptions options;
  options.max_send_wr = 4;
  Connect(options);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(nic(client()).QueryQp(client().qp, &attr, IBV_QP_CAP, &init), 0);
  const uint32_t depth = init.cap.max_send_wr;
  EXPECT_GE(depth, 4u);
  // One chain longer than the queue: nothing can complete while it is
  // being posted, on any NIC.
  std::vector<ibv_sge> sges(depth + 8);
  std::vector<ibv_send_wr> wrs(depth + 8);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i] = WriteWr(100 + i, 0, 8 * i, 8, false, 0, true, &sges[i]);
    if (i > 0) wrs[i - 1].next = &wrs[i];
  }
  ibv_send_wr* bad = nullptr;
  int ret = PostSend(client(), &wrs[0], &bad);
  EXPECT_EQ(ret < 0 ? -ret : ret, ENOMEM);
  ASSERT_NE(bad, nullptr);
  const size_t posted = static_cast<size_t>(bad - wrs.data());
  EXPECT_GE(posted, depth);
  for (size_t i = 0; i < posted; ++i) {
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc)) << i;
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 100 + i);
  }
  EXPECT_TRUE(NoCompletionPending(client()));
}

TEST_P(WriteImmConformance, NumSgeAboveTheQpsMaxIsEinval) {
  Connect(QpOptions{});
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(nic(client()).QueryQp(client().qp, &attr, IBV_QP_CAP, &init), 0);
  std::vector<ibv_sge> sges(init.cap.max_send_sge + 1);
  for (size_t i = 0; i < sges.size(); ++i) {
    sges[i] = ibv_sge{reinterpret_cast<uint64_t>(client().buffer.data()) + i, 1,
                      client().mr->lkey};
  }
  ibv_sge unused;
  ibv_send_wr wr = WriteWr(50, 0, 0, 1, true, kImm, true, &unused);
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_send_wr* bad = nullptr;
  int ret = PostSend(client(), &wr, &bad);
  EXPECT_EQ(ret < 0 ? -ret : ret, EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(NoCompletionPending(client()));
}

TEST_P(WriteImmConformance, InlineAboveTheQpsMaxIsEinval) {
  QpOptions options;
  options.max_inline_data = 64;
  Connect(options);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(nic(client()).QueryQp(client().qp, &attr, IBV_QP_CAP, &init), 0);
  ASSERT_GE(init.cap.max_inline_data, 64u);
  ibv_sge sge;
  ibv_send_wr wr =
      WriteWr(51, 0, 0, init.cap.max_inline_data + 1, true, kImm, true, &sge);
  wr.send_flags |= IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  int ret = PostSend(client(), &wr, &bad);
  EXPECT_EQ(ret < 0 ? -ret : ret, EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_P(WriteImmConformance, InlineWithinTheMaxIsCopiedAtPostTime) {
  QpOptions options;
  options.max_inline_data = 64;
  Connect(options, [&] { ASSERT_EQ(PostRecv(server(), 52), 0); });
  Fill(client(), 0, 32, 1);
  ibv_sge sge;
  ibv_send_wr wr = WriteWr(53, 0, 0, 32, true, kImm, true, &sge);
  wr.send_flags |= IBV_SEND_INLINE;
  sge.lkey = 0;  // ignored for inline data (ibv_post_send(3))
  ibv_send_wr* bad = nullptr;
  std::vector<uint8_t> expected(client().buffer.begin(),
                                client().buffer.begin() + 32);
  ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
  std::memset(client().buffer.data(), 0xff, 32);  // after the post: no effect
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(server(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(server().buffer.data(), expected.data(), 32), 0);
}

TEST_P(WriteImmConformance, CompletionsOfOneQpArriveInPostingOrder) {
  Connect(QpOptions{}, [&] {
    for (int i = 0; i < 8; ++i) ASSERT_EQ(PostRecv(server(), 200 + i), 0);
  });
  ibv_sge sges[8];
  ibv_send_wr wrs[8];
  for (int i = 0; i < 8; ++i) {
    wrs[i] = WriteWr(300 + i, 0, 64 * i, 64, true, kImm + i, true, &sges[i]);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wrs[i], &bad), 0);
  }
  for (int i = 0; i < 8; ++i) {
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.wr_id, 300u + i);
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.wr_id, 200u + i);
    EXPECT_EQ(ntohl(wc.imm_data), kImm + i);
  }
}

// ---- what the device and its QPs report -------------------------------------

// ibv_query_device(3) as the backend reports it; the fake's rxe personality
// takes its caps from this recording (FakeDeviceCaps::Rxe()).
TEST_P(WriteImmConformance, DeviceCapsAsReported) {
  Connect(QpOptions{});
  ibv_device_attr a{};
  ASSERT_EQ(nic(client()).QueryDevice(client().id->verbs, &a), 0);
  std::ostringstream line;
  line << "device max_mr_size=" << a.max_mr_size
       << " page_size_cap=" << a.page_size_cap << " max_qp=" << a.max_qp
       << " max_qp_wr=" << a.max_qp_wr << " max_sge=" << a.max_sge
       << " max_sge_rd=" << a.max_sge_rd << " max_cq=" << a.max_cq
       << " max_cqe=" << a.max_cqe << " max_mr=" << a.max_mr
       << " max_pd=" << a.max_pd << " max_qp_rd_atom=" << a.max_qp_rd_atom
       << " max_qp_init_rd_atom=" << a.max_qp_init_rd_atom
       << " atomic_cap=" << a.atomic_cap
       << " phys_port_cnt=" << static_cast<int>(a.phys_port_cnt);
  RecordLine(line.str());
  EXPECT_GE(a.max_sge, 1);
}

// ibv_query_qp(3) after rdma_cm connected the pair (initiator depth and
// responder resources 1 on both ends).
TEST_P(WriteImmConformance, QueryQpAfterConnect) {
  Connect(QpOptions{});
  for (Endpoint* side : {&client(), &server()}) {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(
        nic(*side).QueryQp(
            side->qp, &a,
            IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_ACCESS_FLAGS | IBV_QP_CAP |
                IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                IBV_QP_RNR_RETRY | IBV_QP_PORT | IBV_QP_PKEY_INDEX,
            &init),
        0);
    std::ostringstream line;
    line << "qp " << (side == &client() ? "client" : "server")
         << " state=" << a.qp_state << " path_mtu=" << a.path_mtu
         << " access=" << a.qp_access_flags
         << " max_rd_atomic=" << static_cast<int>(a.max_rd_atomic)
         << " max_dest_rd_atomic=" << static_cast<int>(a.max_dest_rd_atomic)
         << " min_rnr_timer=" << static_cast<int>(a.min_rnr_timer)
         << " timeout=" << static_cast<int>(a.timeout)
         << " retry_cnt=" << static_cast<int>(a.retry_cnt)
         << " rnr_retry=" << static_cast<int>(a.rnr_retry)
         << " port=" << static_cast<int>(a.port_num)
         << " pkey_index=" << a.pkey_index
         << " max_send_wr=" << init.cap.max_send_wr
         << " max_recv_wr=" << init.cap.max_recv_wr
         << " max_send_sge=" << init.cap.max_send_sge
         << " max_recv_sge=" << init.cap.max_recv_sge
         << " max_inline=" << init.cap.max_inline_data;
    RecordLine(line.str());
    EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
    EXPECT_TRUE(a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
  }
}

// What a QP that asked for no inline data may inline anyway (rxe sizes the
// send WQE by max(max_send_sge * 16, max_inline_data)).
TEST_P(WriteImmConformance, InlineGrantedWhenNoneWasAsked) {
  QpOptions options;
  options.max_send_sge = 1;
  options.max_inline_data = 0;
  Connect(options, [&] {
    ASSERT_EQ(PostRecv(server(), 70), 0);
    ASSERT_EQ(PostRecv(server(), 71), 0);
  });
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(nic(client()).QueryQp(client().qp, &attr, IBV_QP_CAP, &init), 0);
  RecordLine("granted max_send_sge=" + std::to_string(init.cap.max_send_sge) +
             " max_inline=" + std::to_string(init.cap.max_inline_data));
  const uint32_t granted = init.cap.max_inline_data;
  ibv_sge sge[2];
  ibv_send_wr fits = WriteWr(72, 0, 0, granted, true, kImm, true, &sge[0]);
  fits.send_flags |= IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  if (granted > 0) {
    ASSERT_EQ(PostSend(client(), &fits, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  ibv_send_wr over =
      WriteWr(73, 0, 4096, granted + 1, true, kImm, true, &sge[1]);
  over.send_flags |= IBV_SEND_INLINE;
  const int ret = PostSend(client(), &over, &bad);
  EXPECT_EQ(ret < 0 ? -ret : ret, EINVAL);
}

// rxe_mr.c rxe_mr_init: the rkey of an MR without remote access.
TEST_P(WriteImmConformance, RkeyOfMrsWithAndWithoutRemoteAccess) {
  Connect(QpOptions{});
  std::vector<uint8_t> buf(4096);
  ibv_mr* local = nic(server()).RegMr(server().pd, buf.data(), buf.size(),
                                      IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(local, nullptr);
  ibv_mr* remote =
      nic(server()).RegMr(server().pd, buf.data(), buf.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(remote, nullptr);
  RecordLine(std::string("mr local_only rkey_zero=") +
             (local->rkey == 0 ? "1" : "0") +
             " rkey_is_lkey=" + (local->rkey == local->lkey ? "1" : "0"));
  RecordLine(std::string("mr remote rkey_zero=") +
             (remote->rkey == 0 ? "1" : "0") +
             " rkey_is_lkey=" + (remote->rkey == remote->lkey ? "1" : "0"));
  EXPECT_NE(remote->rkey, 0u);
  EXPECT_EQ(nic(server()).DeregMr(local), 0);
  EXPECT_EQ(nic(server()).DeregMr(remote), 0);
}

// ibv_modify_qp(3)'s state table on a connected RC QP: each call's return
// code is recorded (0 or EINVAL).
TEST_P(WriteImmConformance, ModifyQpFollowsTheRcStateTable) {
  Connect(QpOptions{});
  ibv_qp* qp = client().qp;
  auto modify = [&](const char* what, ibv_qp_attr attr, int mask) {
    const int ret = nic(client()).ModifyQp(qp, &attr, mask);
    RecordPost(what, ret);
    return ret;
  };
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(modify("modify RTS->RTR", a, IBV_QP_STATE), EINVAL);
  a.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(modify("modify RTS->INIT", a, IBV_QP_STATE), EINVAL);
  a = ibv_qp_attr{};
  a.sq_psn = 5;
  EXPECT_EQ(modify("modify RTS->RTS sq_psn", a, IBV_QP_SQ_PSN), EINVAL);
  a = ibv_qp_attr{};
  a.min_rnr_timer = 12;
  EXPECT_EQ(modify("modify RTS->RTS min_rnr_timer", a, IBV_QP_MIN_RNR_TIMER),
            0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(modify("modify RTS->ERR", a, IBV_QP_STATE), 0);
  EXPECT_EQ(QpState(client()), IBV_QPS_ERR);
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(modify("modify ERR->RTS", a, IBV_QP_STATE), EINVAL);
  a.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(modify("modify ERR->RESET", a, IBV_QP_STATE), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(modify("modify RESET->INIT no access", a,
                   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT),
            EINVAL);
  EXPECT_EQ(modify("modify RESET->INIT", a,
                   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                       IBV_QP_ACCESS_FLAGS),
            0);
  EXPECT_EQ(QpState(client()), IBV_QPS_INIT);
}

TEST_P(WriteImmConformance, ModifyToErrFlushesPostedReceives) {
  Connect(QpOptions{}, [&] {
    ASSERT_EQ(PostRecv(server(), 80), 0);
    ASSERT_EQ(PostRecv(server(), 81), 0);
  });
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  const int ret = nic(server()).ModifyQp(server().qp, &a, IBV_QP_STATE);
  RecordPost("modify server RTS->ERR", ret);
  ASSERT_EQ(ret, 0);
  ibv_wc wc{};
  for (uint64_t id : {80u, 81u}) {
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc.wr_id, id);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, WriteImmConformance, ::testing::ValuesIn(BackendsUnderTest()),
    [](const ::testing::TestParamInfo<BackendUnderTest>& info) {
      return info.param.name;
    });

// ---- librpma 1.3's other data operations, as they reach the NIC ----------
//
// rpma_read (IBV_WR_RDMA_READ), rpma_flush without native flush (an 8-byte
// READ behind the writes it flushes, librpma src/flush.c), rpma_atomic_write
// without native atomic write (an 8-byte inline RDMA WRITE with
// IBV_SEND_FENCE, src/mr.c), shared receive queues (rpma_srq_*) and a
// completion channel shared by two CQs (rpma_conn_wait).

class Librpma13Conformance : public WriteImmConformance {
 protected:
  ibv_send_wr ReadWr(uint64_t wr_id, size_t dst_offset, size_t src_offset,
                     uint32_t len, bool signaled, ibv_sge* sge) {
    *sge = {reinterpret_cast<uint64_t>(client().buffer.data()) + dst_offset,
            len, client().mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.sg_list = sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr =
        reinterpret_cast<uint64_t>(server().buffer.data()) + src_offset;
    wr.wr.rdma.rkey = server().mr->rkey;
    return wr;
  }
};

// ibv_post_send(3) IBV_WR_RDMA_READ; ibv_poll_cq(3): IBV_WC_RDMA_READ with
// byte_len the bytes read.
TEST_P(Librpma13Conformance, ReadCopiesRemoteBytesIntoTheLocalSge) {
  Connect(QpOptions{});
  Fill(server(), 1024, 300, 9);
  ibv_sge sge;
  ibv_send_wr wr = ReadWr(60, 2048, 1024, 300, true, &sge);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.wr_id, 60u);
  EXPECT_EQ(wc.byte_len, 300u);
  EXPECT_EQ(std::memcmp(client().buffer.data() + 2048,
                        server().buffer.data() + 1024, 300),
            0);
  EXPECT_TRUE(NoCompletionPending(server()));  // a READ consumes no receive
}

// IB spec C9-88 / rxe_resp.c check_rkey: the remote range must lie in an MR
// that grants REMOTE_READ.
TEST_P(Librpma13Conformance, ReadPastTheMrEndIsRemoteAccessError) {
  Connect(QpOptions{});
  ibv_sge sge;
  ibv_send_wr wr = ReadWr(61, 0, kBufferSize - 8, 16, true, &sge);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc.wr_id, 61u);
}

// rpma_flush's emulation: unsignaled writes, then one signaled 8-byte READ
// of the flushed range; when the READ completes every earlier write has
// landed (a READ response is ordered behind the writes before it, IB spec
// 9.5 o9-20), and the 8 bytes read back are the written ones.
TEST_P(Librpma13Conformance, FlushReadCompletesAfterTheWritesItFollows) {
  Connect(QpOptions{});
  Fill(client(), 0, 4096, 5);
  ibv_sge sges[4];
  for (int i = 0; i < 4; ++i) {
    ibv_send_wr w = WriteWr(70 + i, 1024 * i, 8192 + 1024 * i, 1024, false, 0,
                            false, &sges[i]);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &w, &bad), 0);
  }
  ibv_sge read_sge;
  ibv_send_wr flush = ReadWr(74, 32768, 8192 + 3072, 8, true, &read_sge);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &flush, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.wr_id, 74u);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_TRUE(Landed(0, 8192, 4096));
  EXPECT_EQ(std::memcmp(client().buffer.data() + 32768,
                        client().buffer.data() + 3072, 8),
            0);
  EXPECT_TRUE(NoCompletionPending(client()));  // the writes were unsignaled
}

// ibv_post_send(3) IBV_SEND_FENCE (IB spec 10.8.3.3): the fenced WR waits
// for the READ before it, so a write whose source is the READ's sink sends
// the bytes the READ brought.
TEST_P(Librpma13Conformance, FencedWriteAfterAReadSendsTheReadsData) {
  Connect(QpOptions{});
  Fill(server(), 0, 64, 40);
  ibv_sge read_sge;
  ibv_send_wr read = ReadWr(80, 4096, 0, 64, false, &read_sge);
  ibv_sge write_sge{reinterpret_cast<uint64_t>(client().buffer.data()) + 4096,
                    64, client().mr->lkey};
  ibv_send_wr write{};
  write.wr_id = 81;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED;
  write.sg_list = &write_sge;
  write.num_sge = 1;
  write.wr.rdma.remote_addr =
      reinterpret_cast<uint64_t>(server().buffer.data()) + 16384;
  write.wr.rdma.rkey = server().mr->rkey;
  read.next = &write;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &read, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 81u);
  EXPECT_EQ(
      std::memcmp(server().buffer.data() + 16384, server().buffer.data(), 64),
      0);
}

// rpma_atomic_write's emulation: a flush READ, then the 8-byte inline
// fenced RDMA WRITE; both land, the write's bytes are those at post time.
TEST_P(Librpma13Conformance, AtomicWriteEmulationIsAFencedInlineWrite) {
  QpOptions options;
  options.max_inline_data = 8;  // librpma's RPMA_MAX_INLINE_DATA
  Connect(options);
  ibv_sge read_sge;
  ibv_send_wr flush = ReadWr(90, 0, 512, 8, false, &read_sge);
  char value[8] = {'a', 't', 'o', 'm', 'i', 'c', '!', '\0'};
  ibv_sge sge{reinterpret_cast<uint64_t>(value), 8, 0};
  ibv_send_wr atomic{};
  atomic.wr_id = 91;
  atomic.opcode = IBV_WR_RDMA_WRITE;
  atomic.send_flags = IBV_SEND_INLINE | IBV_SEND_FENCE | IBV_SEND_SIGNALED;
  atomic.sg_list = &sge;
  atomic.num_sge = 1;
  atomic.wr.rdma.remote_addr =
      reinterpret_cast<uint64_t>(server().buffer.data()) + 512;
  atomic.wr.rdma.rkey = server().mr->rkey;
  flush.next = &atomic;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &flush, &bad), 0);
  std::memset(value, 0, sizeof(value));  // inline: copied at post time
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc.wr_id, 91u);
  EXPECT_EQ(std::memcmp(server().buffer.data() + 512, "atomic!", 8), 0);
}

// Shared receive queue (ibv_create_srq(3), ibv_post_srq_recv(3)): the
// server's QP takes its receive from the SRQ; it completes on the QP's
// receive CQ with the QP's number; the QP itself refuses receives.
TEST_P(Librpma13Conformance, SrqReceiveIsTakenByTheQpAndCompletesOnItsCq) {
  QpOptions options;
  options.server_srq_wr = 8;
  Connect(options);
  ASSERT_EQ(PostSrqRecv(110, 0, 256), 0);
  ASSERT_EQ(PostSrqRecv(111, 256, 256), 0);
  Fill(client(), 0, 100, 11);
  ibv_sge sge{reinterpret_cast<uint64_t>(client().buffer.data()), 100,
              client().mr->lkey};
  ibv_send_wr send{};
  send.wr_id = 112;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  send.sg_list = &sge;
  send.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &send, &bad), 0);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(server(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.wr_id, 110u);
  EXPECT_EQ(wc.byte_len, 100u);
  EXPECT_EQ(wc.qp_num, server().qp->qp_num);
  EXPECT_EQ(std::memcmp(server().buffer.data(), client().buffer.data(), 100),
            0);
  ASSERT_TRUE(WaitCompletion(client(), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ibv_recv_wr recv{};
  ibv_recv_wr* bad_recv = nullptr;
  const int ret = nic(server()).PostRecv(server().qp, &recv, &bad_recv);
  RecordPost("recv_on_srq_qp", ret);
  EXPECT_EQ(ret < 0 ? -ret : ret, EINVAL);
}

// One completion channel for two CQs (ibv_create_comp_channel(3),
// ibv_get_cq_event(3)): the event names the CQ that got the completion,
// which is how rpma_conn_wait tells the receive CQ from the main one.
TEST_P(Librpma13Conformance, SharedChannelEventNamesTheCqThatCompleted) {
  QpOptions options;
  options.server_shared_channel = true;
  Connect(options, [&] { ASSERT_EQ(PostRecv(server(), 120), 0); });
  ibv_sge sge;
  ibv_send_wr wr = WriteWr(121, 0, 0, 16, true, kImm, true, &sge);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
  pollfd pfd{server().comp_channel->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ibv_cq* fired = nullptr;
  void* context = nullptr;
  ASSERT_EQ(nic(server()).GetCqEvent(server().comp_channel, &fired, &context),
            0);
  nic(server()).AckCqEvents(fired, 1);
  EXPECT_EQ(fired, server().rcq);
  ibv_wc wc{};
  ASSERT_TRUE(WaitCompletion(server(), &wc, 5000, server().rcq));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc.wr_id, 120u);

  // Now a completion on the server's send CQ: the event names that one.
  ASSERT_EQ(nic(server()).ReqNotifyCq(server().rcq, 0), 0);
  ibv_sge send_sge{reinterpret_cast<uint64_t>(server().buffer.data()), 8,
                   server().mr->lkey};
  ibv_send_wr back{};
  back.wr_id = 122;
  back.opcode = IBV_WR_RDMA_WRITE;
  back.send_flags = IBV_SEND_SIGNALED;
  back.sg_list = &send_sge;
  back.num_sge = 1;
  back.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(client().buffer.data());
  back.wr.rdma.rkey = client().mr->rkey;
  ASSERT_EQ(PostSend(server(), &back, &bad), 0);
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  ASSERT_EQ(nic(server()).GetCqEvent(server().comp_channel, &fired, &context),
            0);
  nic(server()).AckCqEvents(fired, 1);
  EXPECT_EQ(fired, server().cq);
  ASSERT_TRUE(WaitCompletion(server(), &wc));
  EXPECT_EQ(wc.wr_id, 122u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

// Responder resources (ibv_query_qp(3) max_rd_atomic / max_dest_rd_atomic,
// set by the CM from rdma_conn_param): each side's outstanding-READ depth
// as initiator is bounded by what the other side accepts as responder.
TEST_P(Librpma13Conformance, ReadDepthsPairEachInitiatorWithThePeersResponder) {
  QpOptions options;
  options.client_initiator_depth = 4;
  options.client_responder_resources = 2;
  options.server_initiator_depth = 2;
  options.server_responder_resources = 4;
  Connect(options);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(nic(client()).QueryQp(
                client().qp, &attr,
                IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init),
            0);
  EXPECT_EQ(attr.max_rd_atomic, 4);
  EXPECT_EQ(attr.max_dest_rd_atomic, 2);
  ASSERT_EQ(nic(server()).QueryQp(
                server().qp, &attr,
                IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init),
            0);
  EXPECT_EQ(attr.max_rd_atomic, 2);
  EXPECT_EQ(attr.max_dest_rd_atomic, 4);
  // Four READs in flight at once are within the client's depth.
  Fill(server(), 0, 256, 1);
  ibv_sge sges[4];
  ibv_send_wr wrs[4];
  for (int i = 0; i < 4; ++i) {
    wrs[i] = ReadWr(130 + i, 64 * i, 64 * i, 64, true, &sges[i]);
    wrs[i].next = i < 3 ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(PostSend(client(), &wrs[0], &bad), 0);
  for (int i = 0; i < 4; ++i) {
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 130u + i);
  }
  EXPECT_EQ(std::memcmp(client().buffer.data(), server().buffer.data(), 256),
            0);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, Librpma13Conformance, ::testing::ValuesIn(BackendsUnderTest()),
    [](const ::testing::TestParamInfo<BackendUnderTest>& info) {
      return info.param.name;
    });

// rdma_cm's disconnect, both sides, in real time: the side that calls
// rdma_disconnect gets DISCONNECTED only once the peer answers with its own
// (the DREP), and then both ids leave the IB CM's timewait with
// TIMEWAIT_EXIT about 2 s later (cm.c cm_enter_timewait; Personality::
// timewait_ms). The spec personality answers at once and has no timewait.
TEST_P(WriteImmConformance, DisconnectAnsweredThenTimewaitExit) {
  Connect(QpOptions{});
  ASSERT_EQ(nic(client()).Disconnect(client().id), 0);
  RecordCmEventsFor(500, "after-client-disconnect");
  ASSERT_EQ(nic(server()).Disconnect(server().id), 0);
  RecordCmEventsFor(500, "after-server-disconnect");
  RecordCmEventsFor(3000, "up-to-3.5s-later");
}

}  // namespace
}  // namespace rpma_harness
