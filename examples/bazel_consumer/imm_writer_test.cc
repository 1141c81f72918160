// The example program's test on the fake NIC. ConnectedPairTest gives an
// established client/server pair; imm_writer_write runs as the client.

#include "imm_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "mock/connected_pair.h"
#include "mock/rpma_matchers.h"

namespace {

using rpma_harness::ConnectedPairOptions;
using rpma_harness::FaultAction;
using rpma_harness::FaultCall;
using rpma_harness::FaultRule;
using rpma_harness::IsRpmaOk;
using rpma_harness::IsSuccessWithImm;

class ImmWriterTest : public rpma_harness::ConnectedPairTest {};

TEST_F(ImmWriterTest, TheMessageLandsAndTheServerSeesTheImm) {
  const char message[] = "hello over RDMA";
  ASSERT_THAT(imm_writer_write(pair().client(), pair().client_peer(),
                               pair().server_mr_remote(), 256, message,
                               sizeof(message), 0xC0FFEE, nullptr),
              IsRpmaOk());
  EXPECT_STREQ(pair().server_buffer() + 256, message);
  ibv_wc wc;
  ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(0xC0FFEE, sizeof(message)));
}

// One fault rule: the NIC completes the write with REM_ACCESS_ERR, as a
// real NIC does when the server's key or bounds refuse it.
class ImmWriterDeniedTest : public rpma_harness::ConnectedPairTest {
 protected:
  ConnectedPairOptions Options() override {
    ConnectedPairOptions options;
    FaultRule rule;
    rule.name = "deny the write";
    rule.call = FaultCall::kExecute;
    rule.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    rule.action = FaultAction::kCompleteWithStatus;
    rule.status = IBV_WC_REM_ACCESS_ERR;
    options.faults.push_back(rule);
    return options;
  }
};

TEST_F(ImmWriterDeniedTest, ReportsTheCompletionError) {
  const char message[] = "refused";
  ibv_wc_status status = IBV_WC_SUCCESS;
  EXPECT_EQ(imm_writer_write(pair().client(), pair().client_peer(),
                             pair().server_mr_remote(), 0, message,
                             sizeof(message), 7, &status),
            IMM_WRITER_E_COMPLETION);
  EXPECT_EQ(status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(pair().faults()->TimesFired("deny the write"), 1u);
  EXPECT_NE(memcmp(pair().server_buffer(), message, sizeof(message)), 0);
}

}  // namespace
