// fake_nic_librpma13_test.cc: the fake NIC rules that librpma 1.3's newer
// calls rely on, one test per rule, named as the rule reads: shared receive
// queues (rpma_srq_*), IBV_SEND_FENCE ordering behind RDMA READs
// (rpma_atomic_write after rpma_flush), no on-demand paging and no
// ibv_advise_mr (rpma_utils_ibv_context_is_odp_capable, rpma_mr_advise).
//
// Pairs of RC QPs are built with tests/connected_qps.h on a manually
// stepped NIC.

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "nic/fake_nic.h"
#include "tests/connected_qps.h"

namespace rpma_harness {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

class FakeNicLibrpma13Test : public ::testing::Test {
 protected:
  explicit FakeNicLibrpma13Test(FakeNicConfig config = FakeNicConfig())
      : nic_(std::make_unique<FakeNic>(config)),
        fabric_(std::make_unique<ConnectedQps>(nic_.get())) {}
  ~FakeNicLibrpma13Test() override {
    fabric_.reset();  // QPs first: an SRQ in use cannot be destroyed
    for (ibv_srq* srq : srqs_) EXPECT_EQ(nic_->DestroySrq(srq), 0);
  }

  ibv_srq* NewSrq(uint32_t max_wr, uint32_t max_sge = 1) {
    ibv_srq_init_attr attr{};
    attr.attr.max_wr = max_wr;
    attr.attr.max_sge = max_sge;
    ibv_srq* srq = nic_->CreateSrq(fabric_->server_pd(), &attr);
    if (srq != nullptr) srqs_.push_back(srq);
    return srq;
  }

  int PostSrqRecv(ibv_srq* srq, uint64_t wr_id, ibv_mr* mr, size_t offset,
                  uint32_t len) {
    ibv_sge sge{reinterpret_cast<uint64_t>(mr->addr) + offset, len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return nic_->PostSrqRecv(srq, &wr, &bad);
  }

  int PostSend(ibv_qp* qp, uint64_t wr_id, ibv_mr* mr, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uint64_t>(mr->addr), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return nic_->PostSend(qp, &wr, &bad);
  }

  std::vector<ibv_wc> PollAll(ibv_cq* cq) {
    std::vector<ibv_wc> out;
    ibv_wc wc;
    while (nic_->PollCq(cq, 1, &wc) == 1) out.push_back(wc);
    return out;
  }

  std::unique_ptr<FakeNic> nic_;
  std::unique_ptr<ConnectedQps> fabric_;
  std::vector<ibv_srq*> srqs_;
};

// ---- shared receive queues: creation limits (ibv_create_srq(3); rxe_srq.c
// rxe_srq_chk_init) ----

TEST_F(FakeNicLibrpma13Test, QueryDeviceReportsTheSrqLimits) {
  ibv_device_attr attr{};
  ASSERT_EQ(nic_->QueryDevice(fabric_->server_context(), &attr), 0);
  EXPECT_EQ(attr.max_srq, nic_->caps().max_srq);
  EXPECT_EQ(attr.max_srq_wr, nic_->caps().max_srq_wr);
  EXPECT_EQ(attr.max_srq_sge, nic_->caps().max_srq_sge);
}

TEST_F(FakeNicLibrpma13Test, CreateSrqAboveMaxSrqWrFailsWithEinval) {
  errno = 0;
  EXPECT_EQ(NewSrq(nic_->caps().max_srq_wr + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FakeNicLibrpma13Test, CreateSrqOfZeroWrsFailsWithEinval) {
  errno = 0;
  EXPECT_EQ(NewSrq(0), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FakeNicLibrpma13Test, CreateSrqAboveMaxSrqSgeFailsWithEinval) {
  errno = 0;
  EXPECT_EQ(NewSrq(8, nic_->caps().max_srq_sge + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FakeNicLibrpma13Test, CreateSrqOnAForeignPdFailsWithEinval) {
  ibv_pd foreign{};
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = 4;
  attr.attr.max_sge = 1;
  errno = 0;
  EXPECT_EQ(nic_->CreateSrq(&foreign, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

class RxeSrqTest : public FakeNicLibrpma13Test {
 protected:
  static FakeNicConfig RxeConfig() {
    FakeNicConfig config;
    config.personality = Personality::Rxe();
    return config;
  }
  RxeSrqTest() : FakeNicLibrpma13Test(RxeConfig()) {}
};

// rxe_queue.c rxe_queue_init rounds every queue (SRQs too) to
// roundup_pow_of_two(n + 1) - 1, which ibv_query_srq(3) reports; Debian
// 12's rxe leaves the depth asked for in ibv_create_srq's attr and arms
// the limit it was given (verbs_dropin/testdata/async_events.rxe.txt).
TEST_F(RxeSrqTest, CreateSrqKeepsTheDepthAskedForAndQueryShowsTheRoundedOne) {
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = 10;
  attr.attr.max_sge = 1;
  attr.attr.srq_limit = 3;
  ibv_srq* srq = nic_->CreateSrq(fabric_->server_pd(), &attr);
  ASSERT_NE(srq, nullptr);
  srqs_.push_back(srq);
  EXPECT_EQ(attr.attr.max_wr, 10u);
  EXPECT_EQ(attr.attr.max_sge, 1u);
  ibv_srq_attr queried{};
  ASSERT_EQ(nic_->QuerySrq(srq, &queried), 0);
  EXPECT_EQ(queried.max_wr, 15u);
  EXPECT_EQ(queried.max_sge, 1u);
  EXPECT_EQ(queried.srq_limit, 3u);
}

// ---- shared receive queues: the data path ----

// IB spec 10.2.9 / rxe_resp.c get_srq_wqe: an incoming SEND takes the next
// receive of the SRQ, whichever attached QP it arrives on, and completes on
// that QP's receive CQ with that QP's number.
TEST_F(FakeNicLibrpma13Test,
       SrqReceivesAreTakenInOrderByAnyAttachedQpAndCompleteOnItsRecvCq) {
  ibv_srq* srq = NewSrq(8);
  ASSERT_NE(srq, nullptr);
  ibv_cq* server_cq = fabric_->NewCq(fabric_->server_context(), 16);
  QpPairOptions options;
  options.server_cq = server_cq;
  options.server_srq = srq;
  QpPair* a = fabric_->Connect(options);
  QpPair* b = fabric_->Connect(options);
  ASSERT_TRUE(a != nullptr && b != nullptr) << fabric_->error();

  std::vector<char> recv_buf(256, 0), send_a(32, 'a'), send_b(32, 'b');
  ibv_mr* recv_mr = fabric_->RegMr(fabric_->server_pd(), recv_buf.data(),
                                   recv_buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* a_mr =
      fabric_->RegMr(fabric_->client_pd(), send_a.data(), send_a.size(), 0);
  ibv_mr* b_mr =
      fabric_->RegMr(fabric_->client_pd(), send_b.data(), send_b.size(), 0);
  ASSERT_EQ(PostSrqRecv(srq, 100, recv_mr, 0, 64), 0);
  ASSERT_EQ(PostSrqRecv(srq, 101, recv_mr, 64, 64), 0);
  // b sends first: it takes the first receive (100).
  ASSERT_EQ(PostSend(b->client.qp, 2, b_mr, 32), 0);
  nic_->RunUntilIdle();
  ASSERT_EQ(PostSend(a->client.qp, 1, a_mr, 32), 0);
  nic_->RunUntilIdle();

  std::vector<ibv_wc> wcs = PollAll(server_cq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wcs[0].byte_len, 32u);
  EXPECT_EQ(wcs[0].qp_num, b->server.qp->qp_num);
  EXPECT_EQ(wcs[1].wr_id, 101u);
  EXPECT_EQ(wcs[1].qp_num, a->server.qp->qp_num);
  EXPECT_EQ(recv_buf[0], 'b');
  EXPECT_EQ(recv_buf[64], 'a');
}

// rxe_verbs.c rxe_post_recv (IB spec C10-97.2.1): a QP with an SRQ has no
// receive queue to post to.
TEST_F(FakeNicLibrpma13Test, PostRecvOnAQpWithAnSrqFailsWithEinval) {
  ibv_srq* srq = NewSrq(4);
  QpPairOptions options;
  options.server_srq = srq;
  QpPair* pair = fabric_->Connect(options);
  ASSERT_NE(pair, nullptr) << fabric_->error();
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(nic_->PostRecv(pair->server.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

// rxe_qp.c: a QP with an SRQ gets no receive queue, and its caps say so.
TEST_F(FakeNicLibrpma13Test, QpWithAnSrqReportsNoReceiveCapacity) {
  ibv_srq* srq = NewSrq(4);
  QpPairOptions options;
  options.server_srq = srq;
  QpPair* pair = fabric_->Connect(options);
  ASSERT_NE(pair, nullptr) << fabric_->error();
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(nic_->QueryQp(pair->server.qp, &attr, IBV_QP_CAP, &init), 0);
  EXPECT_EQ(attr.cap.max_recv_wr, 0u);
  EXPECT_EQ(pair->server.qp->srq, srq);
}

// An empty SRQ makes the responder answer RNR NAK, as an empty RQ does; a
// receive posted to the SRQ lets the parked SEND (rnr_retry 7) complete.
TEST_F(FakeNicLibrpma13Test, EmptySrqIsReceiverNotReadyUntilAReceiveIsPosted) {
  ibv_srq* srq = NewSrq(4);
  QpPairOptions options;
  options.server_srq = srq;
  QpPair* pair = fabric_->Connect(options);
  ASSERT_NE(pair, nullptr) << fabric_->error();
  std::vector<char> recv_buf(64), send_buf(16, 's');
  ibv_mr* recv_mr = fabric_->RegMr(fabric_->server_pd(), recv_buf.data(),
                                   recv_buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* send_mr =
      fabric_->RegMr(fabric_->client_pd(), send_buf.data(), send_buf.size(), 0);
  ASSERT_EQ(PostSend(pair->client.qp, 1, send_mr, 16), 0);
  nic_->RunUntilIdle();
  EXPECT_TRUE(PollAll(pair->client.cq).empty());  // parked on RNR
  ASSERT_EQ(PostSrqRecv(srq, 7, recv_mr, 0, 64), 0);
  nic_->RunUntilIdle();
  std::vector<ibv_wc> client = PollAll(pair->client.cq);
  ASSERT_EQ(client.size(), 1u);
  EXPECT_EQ(client[0].status, IBV_WC_SUCCESS);
  std::vector<ibv_wc> server = PollAll(pair->server.cq);
  ASSERT_EQ(server.size(), 1u);
  EXPECT_EQ(server[0].wr_id, 7u);
  EXPECT_EQ(recv_buf[0], 's');
}

// rxe_verbs.c post_one_recv: a full queue is ENOMEM; num_sge above the
// SRQ's max_sge is EINVAL.
TEST_F(FakeNicLibrpma13Test, PostSrqRecvBeyondDepthFailsWithEnomem) {
  ibv_srq* srq = NewSrq(2);
  std::vector<char> buf(64);
  ibv_mr* mr = fabric_->RegMr(fabric_->server_pd(), buf.data(), buf.size(),
                              IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(PostSrqRecv(srq, 1, mr, 0, 8), 0);
  EXPECT_EQ(PostSrqRecv(srq, 2, mr, 8, 8), 0);
  EXPECT_EQ(PostSrqRecv(srq, 3, mr, 16, 8), ENOMEM);
}

TEST_F(FakeNicLibrpma13Test, PostSrqRecvAboveMaxSgeFailsWithEinval) {
  ibv_srq* srq = NewSrq(4, 1);
  std::vector<char> buf(64);
  ibv_mr* mr = fabric_->RegMr(fabric_->server_pd(), buf.data(), buf.size(),
                              IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sges[2] = {{reinterpret_cast<uint64_t>(buf.data()), 8, mr->lkey},
                     {reinterpret_cast<uint64_t>(buf.data()) + 8, 8, mr->lkey}};
  ibv_recv_wr wr{};
  wr.sg_list = sges;
  wr.num_sge = 2;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(nic_->PostSrqRecv(srq, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

// uverbs ib_destroy_srq_user: EBUSY while a QP uses the SRQ; the PD is busy
// while the SRQ exists (ibv_dealloc_pd(3)).
TEST_F(FakeNicLibrpma13Test, DestroySrqWhileAQpUsesItFailsWithEbusy) {
  ibv_srq* srq = NewSrq(4);
  QpPairOptions options;
  options.server_srq = srq;
  ASSERT_NE(fabric_->Connect(options), nullptr) << fabric_->error();
  EXPECT_EQ(nic_->DestroySrq(srq), EBUSY);
  EXPECT_EQ(nic_->DeallocPd(fabric_->server_pd()), EBUSY);
}

// rxe_resp.c flush_recv_queue returns early for a QP with an SRQ: the
// SRQ's receives belong to the SRQ, so a QP going to ERR flushes none of
// them and another attached QP still gets them.
TEST_F(FakeNicLibrpma13Test, QpInErrorLeavesTheSrqsReceivesToTheOtherQps) {
  ibv_srq* srq = NewSrq(4);
  ibv_cq* server_cq = fabric_->NewCq(fabric_->server_context(), 16);
  QpPairOptions options;
  options.server_cq = server_cq;
  options.server_srq = srq;
  QpPair* a = fabric_->Connect(options);
  QpPair* b = fabric_->Connect(options);
  ASSERT_TRUE(a != nullptr && b != nullptr) << fabric_->error();
  std::vector<char> recv_buf(64), send_buf(8, 'x');
  ibv_mr* recv_mr = fabric_->RegMr(fabric_->server_pd(), recv_buf.data(),
                                   recv_buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* send_mr =
      fabric_->RegMr(fabric_->client_pd(), send_buf.data(), send_buf.size(), 0);
  ASSERT_EQ(PostSrqRecv(srq, 9, recv_mr, 0, 64), 0);
  ASSERT_TRUE(nic_->LoseConnection(a->server.qp->qp_num));
  nic_->RunUntilIdle();
  EXPECT_TRUE(PollAll(server_cq).empty());  // nothing flushed from the SRQ
  ASSERT_EQ(PostSend(b->client.qp, 1, send_mr, 8), 0);
  nic_->RunUntilIdle();
  std::vector<ibv_wc> wcs = PollAll(server_cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].qp_num, b->server.qp->qp_num);
}

// ---- IBV_SEND_FENCE (ibv_post_send(3); IB spec 10.8.3.3): a fenced WR
// starts only after every earlier RDMA READ / atomic of the QP has
// completed. The fake carries out a QP's WRs strictly one at a time, each
// READ finishing (data placed, CQE written) before the next WR starts, so
// every WR - fenced or not - meets that rule, and at most one READ is ever
// outstanding (never above max_rd_atomic, 16). ----

TEST_F(FakeNicLibrpma13Test,
       FencedWriteSourcedFromAReadsSinkCarriesTheReadData) {
  QpPair* pair = fabric_->Connect(QpPairOptions{});
  ASSERT_NE(pair, nullptr) << fabric_->error();
  std::vector<char> remote(64, 0), local(64, 0);
  std::memcpy(remote.data(), "read-me!", 8);
  ibv_mr* remote_mr = fabric_->RegMr(fabric_->server_pd(), remote.data(),
                                     remote.size(), kAllAccess);
  ibv_mr* local_mr = fabric_->RegMr(fabric_->client_pd(), local.data(),
                                    local.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge read_sge{reinterpret_cast<uint64_t>(local.data()), 8, local_mr->lkey};
  ibv_send_wr read{};
  read.wr_id = 1;
  read.opcode = IBV_WR_RDMA_READ;
  read.sg_list = &read_sge;
  read.num_sge = 1;
  read.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote.data());
  read.wr.rdma.rkey = remote_mr->rkey;
  ibv_sge write_sge = read_sge;  // the read's sink is the write's source
  ibv_send_wr write{};
  write.wr_id = 2;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED;
  write.sg_list = &write_sge;
  write.num_sge = 1;
  write.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote.data()) + 32;
  write.wr.rdma.rkey = remote_mr->rkey;
  read.next = &write;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(nic_->PostSend(pair->client.qp, &read, &bad), 0);
  nic_->RunUntilIdle();
  EXPECT_EQ(std::memcmp(remote.data() + 32, "read-me!", 8), 0);
  std::vector<ibv_wc> wcs = PollAll(pair->client.cq);
  ASSERT_EQ(wcs.size(), 1u);  // the read was unsignaled
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

// What rpma_atomic_write posts without a native atomic write: an 8-byte
// inline RDMA WRITE with IBV_SEND_FENCE; the bytes are taken at post time
// (ibv_post_send(3), IBV_SEND_INLINE), so the source may change right away.
TEST_F(FakeNicLibrpma13Test, FencedInlineEightByteWriteLandsThePostedBytes) {
  QpPair* pair = fabric_->Connect(QpPairOptions{});
  ASSERT_NE(pair, nullptr) << fabric_->error();
  std::vector<char> remote(64, 0);
  ibv_mr* remote_mr = fabric_->RegMr(fabric_->server_pd(), remote.data(),
                                     remote.size(), kAllAccess);
  char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ibv_sge sge{reinterpret_cast<uint64_t>(src), 8, 0};
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_FENCE | IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote.data()) + 8;
  wr.wr.rdma.rkey = remote_mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(nic_->PostSend(pair->client.qp, &wr, &bad), 0);
  std::memset(src, 0, sizeof(src));
  nic_->RunUntilIdle();
  const char expected[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(remote.data() + 8, expected, 8), 0);
  std::vector<ibv_wc> wcs = PollAll(pair->client.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RDMA_WRITE);
}

// ---- on-demand paging ----

// ibv_query_device_ex(3): no IBV_ODP_SUPPORT in odp_caps (rxe in Linux 6.1
// has no ODP), the rest as ibv_query_device(3).
TEST_F(FakeNicLibrpma13Test, QueryDeviceExReportsNoOnDemandPaging) {
  ibv_device_attr_ex ex;
  std::memset(&ex, 0xff, sizeof(ex));
  ASSERT_EQ(nic_->QueryDeviceEx(fabric_->server_context(), &ex), 0);
  EXPECT_EQ(ex.odp_caps.general_caps, 0u);
  EXPECT_EQ(ex.odp_caps.per_transport_caps.rc_odp_caps, 0u);
  EXPECT_EQ(ex.device_cap_flags_ex, 0u);
  ibv_device_attr attr{};
  ASSERT_EQ(nic_->QueryDevice(fabric_->server_context(), &attr), 0);
  EXPECT_EQ(std::memcmp(&ex.orig_attr, &attr, sizeof(attr)), 0);
  EXPECT_EQ(nic_->QueryDeviceEx(nullptr, &ex), EINVAL);
}

// rdma-core's ibv_advise_mr returns EOPNOTSUPP when the provider has no
// advise_mr, as rxe's has none.
TEST_F(FakeNicLibrpma13Test, AdviseMrIsNotSupported) {
  std::vector<char> buf(64);
  ibv_mr* mr = fabric_->RegMr(fabric_->server_pd(), buf.data(), buf.size(),
                              IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
  EXPECT_EQ(
      nic_->AdviseMr(fabric_->server_pd(), IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                     IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1),
      EOPNOTSUPP);
}

}  // namespace
}  // namespace rpma_harness
