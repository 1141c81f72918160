// SEND, SEND with immediate and RDMA READ as the wire carries them, packet
// by packet (path MTU 1024 on rxe over a 1500-byte netdev): every backend
// must agree on what each side sees when a message of several packets meets
// a receive, including where it fails. Runs on the fake NIC (both
// personalities) on any host and on rxe in the soft-RoCE VM
// (tools/softroce_vm); the stream of each case is compared with rxe's
// recording (tests/testdata/rxe_streams.txt) as in conformance_test.cc.
// Sources: ibv_post_send(3), ibv_post_recv(3), ibv_poll_cq(3); Linux 6.1
// drivers/infiniband/sw/rxe/rxe_resp.c (check_resource takes the receive at
// FIRST / ONLY, send_data_in -> copy_data per packet), rxe_req.c
// (finish_packet copies the payload from the local SGEs per packet),
// rxe_comp.c (do_read copies each READ response into the local SGEs).

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/conformance_fixture.h"

namespace rpma_harness {
namespace {

constexpr uint32_t kImm = 0x0a0b0c0d;
constexpr uint32_t kMtu = 1024;  // rxe over a 1500-byte netdev

// One scatter entry of a receive: [offset, offset + length) of the server
// buffer; `bad_lkey` names no MR.
struct RecvPiece {
  size_t offset;
  uint32_t length;
  bool bad_lkey = false;
};

class SendConformance : public ConformanceTest {
 protected:
  // A signaled SEND (with imm when `with_imm`) of client buffer
  // [0, len) in `pieces` source SGEs of equal size (the last takes the rest);
  // `bad_last_lkey` gives the last source SGE an lkey that names no MR.
  ibv_send_wr SendWr(uint64_t wr_id, uint32_t len, bool with_imm,
                     std::vector<ibv_sge>* sges, int pieces = 1,
                     bool bad_last_lkey = false) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (with_imm) wr.imm_data = htonl(kImm);
    sges->clear();
    if (len > 0) {
      const uint32_t each = len / pieces;
      uint32_t offset = 0;
      for (int i = 0; i < pieces; ++i) {
        const uint32_t n = i + 1 == pieces ? len - offset : each;
        sges->push_back(
            ibv_sge{reinterpret_cast<uint64_t>(client().buffer.data()) + offset,
                    n, client().mr->lkey});
        offset += n;
      }
      if (bad_last_lkey) sges->back().lkey ^= 0x5a5a;
      wr.sg_list = sges->data();
      wr.num_sge = static_cast<int>(sges->size());
    }
    return wr;
  }

  // Posts one receive of the server buffer made of `pieces` (none: no SGE).
  int PostRecvPieces(uint64_t wr_id, const std::vector<RecvPiece>& pieces) {
    std::vector<ibv_sge> sges;
    for (const RecvPiece& p : pieces) {
      sges.push_back(
          ibv_sge{reinterpret_cast<uint64_t>(server().buffer.data()) + p.offset,
                  p.length, server().mr->lkey ^ (p.bad_lkey ? 0x5a5au : 0u)});
    }
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sges.empty() ? nullptr : sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    ibv_recv_wr* bad = nullptr;
    const int ret = nic(server()).PostRecv(server().qp, &wr, &bad);
    RecordPost("recv server", ret, ret == 0 ? -1 : (bad == &wr ? 0 : -2));
    return ret;
  }

  // Three receive SGEs holding `total` bytes, 16 bytes apart in the server
  // buffer so the landed ranges show where each begins; their boundaries
  // fall inside packets (total / 3 is not a multiple of the MTU).
  static std::vector<RecvPiece> ThreePieces(uint32_t total) {
    const uint32_t a = total / 3, b = total / 3, c = total - a - b;
    return {{0, a}, {a + 16u, b}, {a + b + 32u, c}};
  }

  bool Landed(size_t src_offset, size_t dst_offset, size_t len) {
    if (len == 0) return true;
    return std::memcmp(client().buffer.data() + src_offset,
                       server().buffer.data() + dst_offset, len) == 0;
  }
};

std::string SizeTag(const char* what, uint32_t size) {
  return std::string(what) + " size=" + std::to_string(size);
}

// ibv_poll_cq(3): the receive completes IBV_WC_RECV with byte_len the bytes
// sent, IBV_WC_WITH_IMM and imm_data for SEND_WITH_IMM (the immediate rides
// on the LAST / ONLY packet); the requester's IBV_WC_SEND.
TEST_P(SendConformance, SendFillsTheReceiveAtEverySize) {
  for (bool with_imm : {false, true}) {
    for (uint32_t size : WriteSizes()) {
      SCOPED_TRACE(size);
      BeginSection(SizeTag(with_imm ? "send_imm" : "send", size));
      Connect(QpOptions{}, [&] {
        ASSERT_EQ(
            PostRecvPieces(500, size == 0 ? std::vector<RecvPiece>{}
                                          : std::vector<RecvPiece>{{0, size}}),
            0);
      });
      std::vector<ibv_sge> sges;
      ibv_send_wr wr = SendWr(1, size, with_imm, &sges);
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
      ibv_wc wc{};
      ASSERT_TRUE(WaitCompletion(client(), &wc));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.opcode, IBV_WC_SEND);
      ASSERT_TRUE(WaitCompletion(server(), &wc));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.opcode, IBV_WC_RECV);
      EXPECT_EQ(wc.wr_id, 500u);
      EXPECT_EQ(wc.byte_len, size);
      EXPECT_EQ((wc.wc_flags & IBV_WC_WITH_IMM) != 0, with_imm);
      if (with_imm) {
        EXPECT_EQ(ntohl(wc.imm_data), kImm);
      }
      EXPECT_TRUE(Landed(0, 0, size));
    }
  }
}

// A receive one byte too small, and one more than a packet too small (or
// without any SGE when the send is at most a packet and a byte): the
// packets that fit land, the first one that overflows fails the receive
// and the requester (rxe_resp.c send_data_in: copy_data refuses a packet
// longer than what is left of the receive).
TEST_P(SendConformance, SendLongerThanTheReceiveFailsAtTheOverflowingPacket) {
  for (uint32_t short_by : {1u, kMtu + 1}) {
    for (uint32_t size : WriteSizes()) {
      if (size == 0) continue;
      SCOPED_TRACE(size);
      const uint32_t room = size > short_by ? size - short_by : 0;
      BeginSection(
          SizeTag(short_by == 1 ? "short_by_1" : "short_by_mtu+1", size));
      Connect(QpOptions{}, [&] {
        ASSERT_EQ(
            PostRecvPieces(501, room == 0 ? std::vector<RecvPiece>{}
                                          : std::vector<RecvPiece>{{0, room}}),
            0);
      });
      std::vector<ibv_sge> sges;
      ibv_send_wr wr = SendWr(2, size, /*with_imm=*/true, &sges);
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
      ibv_wc wc{};
      ASSERT_TRUE(WaitCompletion(client(), &wc));
      EXPECT_NE(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.wr_id, 2u);
      EXPECT_EQ(QpState(client()), IBV_QPS_ERR);
      // Whole packets only: those before the one that overflows.
      const size_t landed = std::min<size_t>(size, room / kMtu * kMtu);
      EXPECT_TRUE(Landed(0, 0, landed));
      EXPECT_EQ(std::vector<uint8_t>(server().buffer.begin() + landed,
                                     server().buffer.end()),
                std::vector<uint8_t>(kBufferSize - landed, 0));
    }
  }
}

// Three receive SGEs: the packets are scattered across them in order, a
// packet that straddles an SGE boundary split between two.
TEST_P(SendConformance, ThreeSgeReceiveIsFilledAcrossPacketBoundaries) {
  QpOptions options;
  options.max_recv_sge = 3;
  for (uint32_t size : {64u, 1023u, 1025u, 4096u, 3u * kMtu + 7}) {
    SCOPED_TRACE(size);
    BeginSection(SizeTag("recv_sge=3", size));
    Connect(options,
            [&] { ASSERT_EQ(PostRecvPieces(502, ThreePieces(size)), 0); });
    std::vector<ibv_sge> sges;
    ibv_send_wr wr = SendWr(3, size, /*with_imm=*/false, &sges);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, size);
    const std::vector<RecvPiece> pieces = ThreePieces(size);
    size_t from = 0;
    for (const RecvPiece& p : pieces) {
      EXPECT_TRUE(Landed(from, p.offset, p.length)) << p.offset;
      from += p.length;
    }
  }
}

// Three receive SGEs one byte short in all, and three whose last names no MR:
// which packets land depends on where each packet's copy fails.
TEST_P(SendConformance, ThreeSgeReceiveThatCannotTakeTheWholeSend) {
  QpOptions options;
  options.max_recv_sge = 3;
  for (bool bad_lkey : {false, true}) {
    for (uint32_t size : {1025u, 4096u}) {
      SCOPED_TRACE(size);
      BeginSection(SizeTag(
          bad_lkey ? "recv_sge=3 bad_last_lkey" : "recv_sge=3 short_by_1",
          size));
      std::vector<RecvPiece> pieces = ThreePieces(bad_lkey ? size : size - 1);
      pieces.back().bad_lkey = bad_lkey;
      Connect(options, [&] { ASSERT_EQ(PostRecvPieces(503, pieces), 0); });
      std::vector<ibv_sge> sges;
      ibv_send_wr wr = SendWr(4, size, /*with_imm=*/true, &sges);
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
      ibv_wc wc{};
      ASSERT_TRUE(WaitCompletion(client(), &wc));
      EXPECT_NE(wc.status, IBV_WC_SUCCESS);
    }
  }
}

// No receive: the responder answers the FIRST (or ONLY) packet with an RNR
// NAK, since that is where a SEND takes its receive (rxe_opcode.c: SEND_FIRST
// and SEND_ONLY carry RXE_RWR_MASK), so nothing lands.
TEST_P(SendConformance, SendWithoutAReceiveIsRnrAtTheFirstPacket) {
  for (uint32_t size : WriteSizes()) {
    SCOPED_TRACE(size);
    BeginSection(SizeTag("rnr_retry=0", size));
    QpOptions options;
    options.rnr_retry_count = 0;
    Connect(options);
    std::vector<ibv_sge> sges;
    ibv_send_wr wr = SendWr(5, size, /*with_imm=*/true, &sges);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(server().buffer, std::vector<uint8_t>(kBufferSize, 0));
  }
}

TEST_P(SendConformance, SendParkedOnRnrGoesWhenAReceiveIsPosted) {
  for (uint32_t size : {64u, 1025u, 65536u}) {
    SCOPED_TRACE(size);
    BeginSection(SizeTag("rnr_retry=7", size));
    QpOptions options;
    options.rnr_retry_count = 7;
    Connect(options);
    std::vector<ibv_sge> sges;
    ibv_send_wr wr = SendWr(6, size, /*with_imm=*/true, &sges);
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    EXPECT_TRUE(NoCompletionPending(client()));
    ASSERT_EQ(PostRecvPieces(504, {{0, size}}), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, size);
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(Landed(0, 0, size));
  }
}

// A shared receive queue's receive (ibv_post_srq_recv(3)): taken at the
// FIRST packet like a QP's own (rxe_resp.c get_srq_wqe), the same length
// rule.
TEST_P(SendConformance, SrqReceiveTakesAMultiPacketSend) {
  QpOptions options;
  options.server_srq_wr = 8;
  for (uint32_t short_by : {0u, 1u}) {
    for (uint32_t size : {64u, 1025u, 65536u}) {
      SCOPED_TRACE(size);
      BeginSection(SizeTag(short_by == 0 ? "srq" : "srq short_by_1", size));
      Connect(options);
      ASSERT_EQ(PostSrqRecv(505, 0, size - short_by), 0);
      std::vector<ibv_sge> sges;
      ibv_send_wr wr = SendWr(7, size, /*with_imm=*/true, &sges);
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
      ibv_wc wc{};
      ASSERT_TRUE(WaitCompletion(client(), &wc));
      EXPECT_EQ(wc.status == IBV_WC_SUCCESS, short_by == 0);
      if (short_by == 0) {
        EXPECT_TRUE(Landed(0, 0, size));
      }
    }
  }
}

// The requester reads its payload from the local SGEs packet by packet
// (rxe_req.c finish_packet -> copy_data): a source SGE whose lkey names no
// MR fails the packet that reaches it, after the packets before it went.
TEST_P(SendConformance, SendAndWriteWithABadSecondSourceSge) {
  for (bool is_write : {false, true}) {
    for (uint32_t size : {64u, 4096u}) {
      SCOPED_TRACE(size);
      BeginSection(SizeTag(
          is_write ? "write_imm bad_source_sge" : "send bad_source_sge", size));
      Connect(QpOptions{}, [&] {
        ASSERT_EQ(PostRecvPieces(506, {{0, size}}), 0);
      });
      std::vector<ibv_sge> sges;
      ibv_send_wr wr =
          SendWr(8, size, /*with_imm=*/true, &sges, 2, /*bad_last_lkey=*/true);
      if (is_write) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.wr.rdma.remote_addr =
            reinterpret_cast<uint64_t>(server().buffer.data()) + 8192;
        wr.wr.rdma.rkey = server().mr->rkey;
      }
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
      ibv_wc wc{};
      ASSERT_TRUE(WaitCompletion(client(), &wc));
      // ibv_poll_cq(3) LOC_PROT_ERR; rxe: LOC_QP_OP_ERR (the recording
      // pins which).
      EXPECT_TRUE(wc.status == IBV_WC_LOC_PROT_ERR ||
                  wc.status == IBV_WC_LOC_QP_OP_ERR)
          << wc.status;
      EXPECT_EQ(QpState(client()), IBV_QPS_ERR);
    }
  }
}

// A source SGE (requester) or a receive SGE (responder) that starts inside
// its MR and ends past it: the check is per piece (rxe_mr.c rxe_mr_copy ->
// mr_check_range), so the packets whose pieces lie inside go through.
TEST_P(SendConformance, SgeReachingPastItsMrFailsAtThePacketThatLeavesIt) {
  for (bool source_side : {true, false}) {
    for (uint32_t size : {64u, 4096u}) {
      SCOPED_TRACE(size);
      BeginSection(
          SizeTag(source_side ? "source_past_mr" : "recv_past_mr", size));
      const size_t start = kBufferSize - size / 2;  // half of it inside
      Connect(QpOptions{}, [&] {
        ASSERT_EQ(PostRecvPieces(507, {{source_side ? 0 : start, size}}), 0);
      });
      std::vector<ibv_sge> sges;
      ibv_send_wr wr = SendWr(10, size, /*with_imm=*/false, &sges);
      if (source_side) sges[0].addr += start;
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
      ibv_wc wc{};
      ASSERT_TRUE(WaitCompletion(client(), &wc));
      EXPECT_NE(wc.status, IBV_WC_SUCCESS);
    }
  }
  // A write with imm whose source and target both leave their MRs half-way:
  // with several packets the responder checks the whole target range on
  // FIRST (rxe_resp.c check_rkey), before the requester reaches its first
  // bad source byte.
  for (uint32_t size : {64u, 4096u}) {
    SCOPED_TRACE(size);
    BeginSection(SizeTag("write_imm both_past_mr", size));
    Connect(QpOptions{}, [&] { ASSERT_EQ(PostRecvPieces(508, {}), 0); });
    const size_t start = kBufferSize - size / 2;
    std::vector<ibv_sge> sges;
    ibv_send_wr wr = SendWr(11, size, /*with_imm=*/true, &sges);
    sges[0].addr += start;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.wr.rdma.remote_addr =
        reinterpret_cast<uint64_t>(server().buffer.data()) + start;
    wr.wr.rdma.rkey = server().mr->rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    // One packet: it is never built (the requester's own check comes first).
    EXPECT_EQ(wc.status,
              size <= kMtu ? IBV_WC_LOC_PROT_ERR : IBV_WC_REM_ACCESS_ERR);
  }
}

// An atomic whose local SGE (where the original value goes) names no MR:
// the responder executes it (the remote value changes), the requester's
// completer then fails to write the original (rxe_comp.c do_atomic). And
// one aimed at an MR without REMOTE_ATOMIC (the fixture's): the
// responder's check comes first.
TEST_P(SendConformance, AtomicWithABadLocalSge) {
  for (bool remote_atomic : {true, false}) {
    BeginSection(remote_atomic ? "mr_remote_atomic"
                               : "mr_without_remote_atomic");
    Connect(QpOptions{});
    ibv_mr* atomic_mr = nic(server()).RegMr(
        server().pd, server().buffer.data(), server().buffer.size(),
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
            IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(atomic_mr, nullptr);
    ibv_sge sge{reinterpret_cast<uint64_t>(client().buffer.data()), 8,
                client().mr->lkey ^ 0x5a5a};
    ibv_send_wr wr{};
    wr.wr_id = 12;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.atomic.remote_addr =
        reinterpret_cast<uint64_t>(server().buffer.data()) + 64;
    wr.wr.atomic.rkey = remote_atomic ? atomic_mr->rkey : server().mr->rkey;
    wr.wr.atomic.compare_add = 5;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(client(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(client(), &wc));
    EXPECT_EQ(wc.status,
              remote_atomic ? IBV_WC_LOC_PROT_ERR : IBV_WC_REM_ACCESS_ERR);
    // The fetch-and-add of 5 on zero: the remote byte is 5 when it ran.
    EXPECT_EQ(server().buffer[64], remote_atomic ? 5 : 0);
    EXPECT_EQ(nic(server()).DeregMr(atomic_mr), 0);
  }
}

// RDMA READ responses come back one packet each and are scattered into the
// requester's local SGEs as they arrive (rxe_comp.c do_read): a READ whose
// last local SGE names no MR. The server reads the client's pattern into
// its own zeroed buffer, so the landed ranges are what reached the
// requester.
TEST_P(SendConformance, ReadWithABadLastLocalSge) {
  QpOptions options;
  options.max_send_sge = 3;
  for (uint32_t size : {64u, 4096u}) {
    SCOPED_TRACE(size);
    BeginSection(SizeTag("read bad_last_local_sge", size));
    Connect(options);
    std::vector<ibv_sge> sges;
    for (const RecvPiece& p : ThreePieces(size)) {
      sges.push_back(
          ibv_sge{reinterpret_cast<uint64_t>(server().buffer.data()) + p.offset,
                  p.length, server().mr->lkey});
    }
    sges.back().lkey ^= 0x5a5a;
    ibv_send_wr wr{};
    wr.wr_id = 9;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = sges.data();
    wr.num_sge = 3;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(client().buffer.data());
    wr.wr.rdma.rkey = client().mr->rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(PostSend(server(), &wr, &bad), 0);
    ibv_wc wc{};
    ASSERT_TRUE(WaitCompletion(server(), &wc));
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
    EXPECT_EQ(wc.wr_id, 9u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, SendConformance, ::testing::ValuesIn(BackendsUnderTest()),
    [](const ::testing::TestParamInfo<BackendUnderTest>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rpma_harness
