// connected_pair_test.cc: the ConnectedPair fixture gives an established
// client/server pair on a fresh fake NIC, with its options applied.

#include "mock/connected_pair.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <cstring>
#include <memory>

#include "mock/rpma_matchers.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

using ::testing::HasSubstr;

class PairTest : public ConnectedPairTest {};

TEST_F(PairTest, AWriteWithImmLandsAndCompletesOnBothSides) {
  memcpy(pair().client_buffer() + 128, "hello, server", 13);
  ASSERT_THAT(pair().WriteWithImm(128, 13, 0x1234), IsRpmaOk());
  ibv_wc wc;
  ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(0x1234, 13));
  EXPECT_EQ(memcmp(pair().server_buffer() + 128, "hello, server", 13), 0);
  ASSERT_THAT(pair().ClientCompletion(&wc), IsRpmaOk());
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
}

TEST_F(PairTest, TheHandlesAreThoseOfAnEstablishedConnection) {
  EXPECT_NE(pair().client(), nullptr);
  EXPECT_NE(pair().server(), nullptr);
  EXPECT_NE(pair().client_qp_num(), 0u);
  EXPECT_NE(pair().server_qp_num(), 0u);
  EXPECT_NE(pair().client_qp_num(), pair().server_qp_num());
  EXPECT_EQ(pair().buffer_size(), 4096u);
  size_t size = 0;
  ASSERT_THAT(rpma_mr_remote_get_size(pair().server_mr_remote(), &size),
              IsRpmaOk());
  EXPECT_EQ(size, 4096u);
  EXPECT_EQ(pair().faults(), nullptr);
}

TEST_F(PairTest, OneReceiveIsPostedSoASecondWriteWaitsForAnother) {
  ASSERT_THAT(pair().WriteWithImm(0, 8, 1), IsRpmaOk());
  ASSERT_THAT(pair().WriteWithImm(8, 8, 2), IsRpmaOk());
  ibv_wc wc;
  ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(1, 8));
  // librpma asks for rnr_retry 7: the second write waits for a receive.
  EXPECT_THAT(pair().ServerCompletion(&wc), IsRpmaError(RPMA_E_NO_COMPLETION));
  ASSERT_THAT(pair().PostServerRecv(), IsRpmaOk());
  ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(2, 8));
}

class OptionsTest : public ConnectedPairTest {
 protected:
  ConnectedPairOptions Options() override {
    ConnectedPairOptions options;
    options.nic.personality = Personality::Rxe();
    options.buffer_size = 1 << 16;
    options.recvs = 3;
    FaultRule rule;
    rule.name = "deny the second write";
    rule.call = FaultCall::kExecute;
    rule.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    rule.nth = 2;
    rule.action = FaultAction::kCompleteWithStatus;
    rule.status = IBV_WC_REM_ACCESS_ERR;
    options.faults.push_back(rule);
    return options;
  }
};

TEST_F(OptionsTest, PersonalityBufferReceivesAndFaultsApply) {
  EXPECT_EQ(pair().nic().config().personality.name, "rxe");
  EXPECT_EQ(pair().buffer_size(), size_t{1} << 16);
  ASSERT_NE(pair().faults(), nullptr);
  ASSERT_THAT(pair().WriteWithImm(60000, 64, 1), IsRpmaOk());
  ASSERT_THAT(pair().WriteWithImm(0, 64, 2), IsRpmaOk());
  ibv_wc wc;
  ASSERT_THAT(pair().ClientCompletion(&wc), IsRpmaOk());
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_THAT(pair().ClientCompletion(&wc), IsRpmaOk());
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(pair().faults()->TimesFired("deny the second write"), 1u);
  // rxe sets IBV_WC_GRH on the receiver's success (Personality::Rxe()).
  ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(1, 64));
  EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
}

TEST(ConnectedPair, ARefusedFaultRuleIsTheSetupError) {
  ConnectedPairOptions options;
  FaultRule rule;
  rule.name = "no errno";
  rule.call = FaultCall::kPostSend;
  rule.action = FaultAction::kFailCall;  // without `error`: refused
  options.faults.push_back(rule);
  ConnectedPair pair(options);
  EXPECT_FALSE(pair.ok());
  EXPECT_THAT(pair.error(), HasSubstr("fault rule 'no errno' refused: "));
}

TEST(ConnectedPair, AFailingSetupCallIsNamedWithItsCode) {
  ConnectedPairOptions options;
  options.address = "not an address";
  ConnectedPair pair(options);
  EXPECT_FALSE(pair.ok());
  EXPECT_THAT(pair.error(), HasSubstr("rpma_utils_get_ibv_context returned "));
}

TEST(ConnectedPair, InstallsItsNicForItsLifetimeOnly) {
  auto before = std::make_shared<FakeNic>();
  ScopedBackend outer(before);
  {
    ConnectedPair pair;
    ASSERT_TRUE(pair.ok()) << pair.error();
    EXPECT_EQ(CurrentBackend().get(), &pair.nic());
  }
  EXPECT_EQ(CurrentBackend(), before);
  EXPECT_TRUE(before->Idle());
}

}  // namespace
}  // namespace rpma_harness
