// The real backend's data path without a device: the rpma layer runs over
// the real RdmaCoreBackend for posts and polls, against hand-built verbs
// objects whose context ops table stands in for a provider, so each test
// sees the exact ibv_send_wr / ibv_recv_wr a provider would receive and
// hands back what a provider would return.
//
// ibv_post_send, ibv_post_recv and ibv_poll_cq are inline in verbs.h: they
// call qp->context->ops / cq->context->ops, which is what the table fills.

#include "verbs_backend/rdma_core_backend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Invoke;
using testing_support::MockConnectionTest;

// What the stand-in provider saw and will answer; one test at a time.
struct Provider {
  std::vector<ibv_send_wr> sends;
  std::vector<std::vector<ibv_sge>> send_sges;
  std::vector<ibv_recv_wr> recvs;
  std::vector<std::vector<ibv_sge>> recv_sges;
  int post_return = 0;
  std::vector<ibv_wc> completions;
  int poll_return_override = 0;  // non-zero: PollCq returns it
};
Provider* provider = nullptr;

int ProviderPostSend(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    provider->sends.push_back(*w);
    provider->send_sges.emplace_back(w->sg_list, w->sg_list + w->num_sge);
  }
  if (provider->post_return != 0) *bad_wr = wr;
  return provider->post_return;
}

int ProviderPostRecv(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  provider->recvs.push_back(*wr);
  provider->recv_sges.emplace_back(wr->sg_list, wr->sg_list + wr->num_sge);
  if (provider->post_return != 0) *bad_wr = wr;
  return provider->post_return;
}

int ProviderPostSrqRecv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  provider->recvs.push_back(*wr);
  provider->recv_sges.emplace_back(wr->sg_list, wr->sg_list + wr->num_sge);
  if (provider->post_return != 0) *bad_wr = wr;
  return provider->post_return;
}

int ProviderPollCq(ibv_cq*, int num_entries, ibv_wc* wc) {
  if (provider->poll_return_override != 0)
    return provider->poll_return_override;
  int n = 0;
  while (n < num_entries && !provider->completions.empty()) {
    wc[n++] = provider->completions.front();
    provider->completions.erase(provider->completions.begin());
  }
  return n;
}

constexpr uint32_t kImm = 0xa1b2c3d4;
const void* const kContext = reinterpret_cast<const void*>(0x77);

class RdmaCoreDataPathTest : public MockConnectionTest {
 protected:
  void SetUp() override {
    MockConnectionTest::SetUp();
    provider = &provider_;
    ibv_context* context = qp()->context;
    context->ops.post_send = ProviderPostSend;
    context->ops.post_recv = ProviderPostRecv;
    context->ops.poll_cq = ProviderPollCq;
    context->ops.post_srq_recv = ProviderPostSrqRecv;
    ON_CALL(mock(), PostSend(_, _, _))
        .WillByDefault(Invoke(&real_, &RdmaCoreBackend::PostSend));
    ON_CALL(mock(), PostRecv(_, _, _))
        .WillByDefault(Invoke(&real_, &RdmaCoreBackend::PostRecv));
    ON_CALL(mock(), PollCq(_, _, _))
        .WillByDefault(Invoke(&real_, &RdmaCoreBackend::PollCq));
  }
  void TearDown() override {
    MockConnectionTest::TearDown();
    provider = nullptr;
  }

  const ibv_send_wr& OnlySend() {
    EXPECT_EQ(provider_.sends.size(), 1u);
    return provider_.sends.back();
  }

  RdmaCoreBackend real_;
  Provider provider_;
};

struct FlagsCase {
  const char* name;
  int flags;
  unsigned int send_flags;
};

class RdmaCoreWriteImmTest : public RdmaCoreDataPathTest,
                             public ::testing::WithParamInterface<FlagsCase> {};

TEST_P(RdmaCoreWriteImmTest, NormalCaseReachesTheProviderExactly) {
  ASSERT_EQ(rpma_write_with_imm(conn(), remote(), 0x20, local(), 0x8, 300,
                                GetParam().flags, kImm, kContext),
            0);
  const ibv_send_wr& wr = OnlySend();
  EXPECT_EQ(wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(wr.wr_id, reinterpret_cast<uint64_t>(kContext));
  EXPECT_EQ(wr.next, nullptr);
  EXPECT_EQ(wr.send_flags, GetParam().send_flags);
  EXPECT_EQ(wr.imm_data, htonl(kImm));
  EXPECT_EQ(wr.wr.rdma.remote_addr, kRemoteAddr + 0x20);
  EXPECT_EQ(wr.wr.rdma.rkey, kRemoteRkey);
  ASSERT_EQ(wr.num_sge, 1);
  const ibv_sge& sge = provider_.send_sges[0][0];
  EXPECT_EQ(sge.addr, reinterpret_cast<uint64_t>(local_buffer()) + 0x8);
  EXPECT_EQ(sge.length, 300u);
  EXPECT_EQ(sge.lkey, kLocalLkey);
}

TEST_P(RdmaCoreWriteImmTest, ZeroByteFormReachesTheProviderExactly) {
  ASSERT_EQ(rpma_write_with_imm(conn(), nullptr, 0, nullptr, 0, 0,
                                GetParam().flags, kImm, kContext),
            0);
  const ibv_send_wr& wr = OnlySend();
  EXPECT_EQ(wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(wr.sg_list, nullptr);
  EXPECT_EQ(wr.num_sge, 0);
  EXPECT_EQ(wr.wr.rdma.remote_addr, 0u);
  EXPECT_EQ(wr.wr.rdma.rkey, 0u);
  EXPECT_EQ(wr.imm_data, htonl(kImm));
  EXPECT_EQ(wr.send_flags, GetParam().send_flags);
}

TEST_P(RdmaCoreWriteImmTest, ZeroLengthWithRegionsReachesTheProviderExactly) {
  ASSERT_EQ(rpma_write_with_imm(conn(), remote(), 4, local(), 4, 0,
                                GetParam().flags, kImm, kContext),
            0);
  const ibv_send_wr& wr = OnlySend();
  ASSERT_EQ(wr.num_sge, 1);
  EXPECT_EQ(provider_.send_sges[0][0].length, 0u);
  EXPECT_EQ(wr.wr.rdma.remote_addr, kRemoteAddr + 4);
  EXPECT_EQ(wr.wr.rdma.rkey, kRemoteRkey);
  EXPECT_EQ(wr.send_flags, GetParam().send_flags);
}

INSTANTIATE_TEST_SUITE_P(
    BothFlags, RdmaCoreWriteImmTest,
    ::testing::Values(FlagsCase{"Always", RPMA_F_COMPLETION_ALWAYS,
                                IBV_SEND_SIGNALED},
                      FlagsCase{"OnError", RPMA_F_COMPLETION_ON_ERROR, 0}),
    [](const ::testing::TestParamInfo<FlagsCase>& info) {
      return std::string(info.param.name);
    });

TEST_F(RdmaCoreDataPathTest, InvalidArgumentsNeverReachTheProvider) {
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, local(), 0, 8, 0, kImm,
                                kContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_write_with_imm(conn(), nullptr, 0, local(), 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_write_with_imm(conn(), nullptr, 0, nullptr, 1, 0,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kContext),
            RPMA_E_INVAL);
  EXPECT_TRUE(provider_.sends.empty());
}

TEST_F(RdmaCoreDataPathTest, ProviderErrnoOfEitherSignIsProviderError) {
  for (int ret : {ENOMEM, -EINVAL}) {
    provider_.post_return = ret;
    EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, local(), 0, 8,
                                  RPMA_F_COMPLETION_ALWAYS, kImm, kContext),
              RPMA_E_PROVIDER)
        << ret;
    EXPECT_THAT(log().back(), HasSubstr(std::to_string(ret)));
  }
  EXPECT_EQ(provider_.sends.size(), 2u);
}

TEST_F(RdmaCoreDataPathTest, ReceivesReachTheProviderExactly) {
  ASSERT_EQ(rpma_recv(conn(), local(), 16, 48, kContext), 0);
  ASSERT_EQ(rpma_recv(conn(), nullptr, 0, 0, kContext), 0);
  ASSERT_EQ(provider_.recvs.size(), 2u);
  EXPECT_EQ(provider_.recvs[0].wr_id, reinterpret_cast<uint64_t>(kContext));
  ASSERT_EQ(provider_.recvs[0].num_sge, 1);
  EXPECT_EQ(provider_.recv_sges[0][0].addr,
            reinterpret_cast<uint64_t>(local_buffer()) + 16);
  EXPECT_EQ(provider_.recv_sges[0][0].length, 48u);
  EXPECT_EQ(provider_.recv_sges[0][0].lkey, kLocalLkey);
  EXPECT_EQ(provider_.recvs[1].num_sge, 0);
  EXPECT_EQ(provider_.recvs[1].sg_list, nullptr);
}

TEST_F(RdmaCoreDataPathTest, ProviderCompletionsPassThroughUnmodified) {
  ibv_wc wc{};
  wc.wr_id = 42;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  wc.wc_flags = IBV_WC_WITH_IMM | IBV_WC_GRH;
  wc.imm_data = htonl(kImm);
  wc.byte_len = 4096;
  wc.qp_num = kQpNum;
  provider_.completions.push_back(wc);
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn(), &cq), 0);
  ibv_wc got{};
  ASSERT_EQ(rpma_cq_get_wc(cq, 1, &got, nullptr), 0);
  EXPECT_EQ(std::memcmp(&got, &wc, sizeof(wc)), 0);
  EXPECT_EQ(rpma_cq_get_wc(cq, 1, &got, nullptr), RPMA_E_NO_COMPLETION);
  provider_.poll_return_override = -1;
  EXPECT_EQ(rpma_cq_get_wc(cq, 1, &got, nullptr), RPMA_E_PROVIDER);
}

// ---- librpma 1.3's other operations through the real backend ----

TEST_F(RdmaCoreDataPathTest, ReadAndAtomicWriteReachTheProviderExactly) {
  ASSERT_EQ(rpma_read(conn(), local(), 8, remote(), 0x40, 64,
                      RPMA_F_COMPLETION_ALWAYS, kContext),
            0);
  const char value[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(rpma_atomic_write(conn(), remote(), 0x80, value,
                              RPMA_F_COMPLETION_ON_ERROR, kContext),
            0);
  ASSERT_EQ(provider_.sends.size(), 2u);
  const ibv_send_wr& read = provider_.sends[0];
  EXPECT_EQ(read.opcode, IBV_WR_RDMA_READ);
  EXPECT_EQ(read.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED));
  EXPECT_EQ(read.wr.rdma.remote_addr, kRemoteAddr + 0x40);
  EXPECT_EQ(provider_.send_sges[0][0].addr,
            reinterpret_cast<uint64_t>(local_buffer()) + 8);
  const ibv_send_wr& atomic = provider_.sends[1];
  EXPECT_EQ(atomic.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(atomic.send_flags,
            static_cast<unsigned>(IBV_SEND_INLINE | IBV_SEND_FENCE));
  EXPECT_EQ(atomic.wr.rdma.remote_addr, kRemoteAddr + 0x80);
  EXPECT_EQ(provider_.send_sges[1][0].addr, reinterpret_cast<uint64_t>(value));
  EXPECT_EQ(provider_.send_sges[1][0].length, 8u);
}

// ibv_post_srq_recv is inline in verbs.h too (srq->context->ops).
TEST_F(RdmaCoreDataPathTest, SrqReceivesReachTheProviderExactly) {
  ibv_srq srq{};
  srq.context = qp()->context;
  ON_CALL(mock(), CreateSrq(_, _)).WillByDefault(::testing::Return(&srq));
  ON_CALL(mock(), DestroySrq(&srq)).WillByDefault(::testing::Return(0));
  ON_CALL(mock(), PostSrqRecv(_, _, _))
      .WillByDefault(Invoke(&real_, &RdmaCoreBackend::PostSrqRecv));
  rpma_srq_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_srq_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_srq_cfg_set_rcq_size(cfg, 0), 0);
  rpma_srq* rsrq = nullptr;
  ASSERT_EQ(rpma_srq_new(peer(), cfg, &rsrq), 0);
  ASSERT_EQ(rpma_srq_recv(rsrq, local(), 32, 16, kContext), 0);
  ASSERT_EQ(provider_.recvs.size(), 1u);
  EXPECT_EQ(provider_.recvs[0].wr_id, reinterpret_cast<uint64_t>(kContext));
  EXPECT_EQ(provider_.recv_sges[0][0].addr,
            reinterpret_cast<uint64_t>(local_buffer()) + 32);
  EXPECT_EQ(provider_.recv_sges[0][0].length, 16u);
  provider_.post_return = ENOMEM;
  EXPECT_EQ(rpma_srq_recv(rsrq, local(), 0, 8, kContext), RPMA_E_PROVIDER);
  EXPECT_EQ(rpma_srq_delete(&rsrq), 0);
  rpma_srq_cfg_delete(&cfg);
}

// A provider without advise_mr (a context without the extended ops, as
// rxe's advise_mr slot is empty): rdma-core's ibv_advise_mr answers
// EOPNOTSUPP, which rpma_mr_advise(3) reports as RPMA_E_NOSUPP.
TEST_F(RdmaCoreDataPathTest, AdviseOnAProviderWithoutAdviseMrIsNosupp) {
  ON_CALL(mock(), AdviseMr(_, _, _, _, _))
      .WillByDefault(Invoke(&real_, &RdmaCoreBackend::AdviseMr));
  EXPECT_EQ(rpma_mr_advise(local(), 0, 64, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                           IBV_ADVISE_MR_FLAG_FLUSH),
            RPMA_E_NOSUPP);
}

}  // namespace
}  // namespace rpma_harness
