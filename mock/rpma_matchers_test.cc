// rpma_matchers_test.cc: the rpma-level matchers accept what they say, refuse
// the rest, and their failure messages say what was expected and what came.

#include "mock/rpma_matchers.h"

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <string>

#include "mock/connected_pair.h"

namespace rpma_harness {
namespace {

using ::testing::DescribeMatcher;
using ::testing::Matcher;
using ::testing::Not;
using ::testing::StringMatchResultListener;

template <typename T, typename M>
std::string Explain(const M& matcher, const T& value) {
  StringMatchResultListener listener;
  Matcher<T>(matcher).MatchAndExplain(value, &listener);
  return listener.str();
}

// A completion as rpma_cq_get_wc() gives it for a write with imm.
ibv_wc RecvWithImm(uint32_t imm, uint32_t len) {
  ibv_wc wc{};
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.imm_data = htonl(imm);
  wc.byte_len = len;
  return wc;
}

TEST(IsRpmaOk, AcceptsZeroOnly) {
  EXPECT_THAT(0, IsRpmaOk());
  EXPECT_THAT(RPMA_E_PROVIDER, Not(IsRpmaOk()));
  EXPECT_THAT(-1, Not(IsRpmaOk()));
}

TEST(IsRpmaOk, NamesTheCodeItGot) {
  EXPECT_EQ(DescribeMatcher<int>(IsRpmaOk()),
            "is 0 (an rpma_* call that succeeded)");
  EXPECT_EQ(Explain<int>(IsRpmaOk(), RPMA_E_PROVIDER),
            std::string("returned RPMA_E_PROVIDER (-100002: ") +
                rpma_err_2str(RPMA_E_PROVIDER) + ")");
  EXPECT_EQ(Explain<int>(IsRpmaOk(), 42), "returned 42 (not an RPMA_E_* code)");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(RPMA_E_INVAL, IsRpmaOk()),
                          "returned RPMA_E_INVAL (-100004: ");
}

TEST(IsRpmaError, AcceptsThatCodeOnly) {
  EXPECT_THAT(RPMA_E_INVAL, IsRpmaError(RPMA_E_INVAL));
  EXPECT_THAT(0, Not(IsRpmaError(RPMA_E_INVAL)));
  EXPECT_THAT(RPMA_E_NOMEM, Not(IsRpmaError(RPMA_E_INVAL)));
}

TEST(IsRpmaError, SaysWhichCodeWasExpectedAndWhichCame) {
  EXPECT_EQ(DescribeMatcher<int>(IsRpmaError(RPMA_E_NO_COMPLETION)),
            std::string("is RPMA_E_NO_COMPLETION (-100005: ") +
                rpma_err_2str(RPMA_E_NO_COMPLETION) + ")");
  EXPECT_EQ(DescribeMatcher<int>(Not(IsRpmaError(RPMA_E_INVAL))),
            std::string("is not RPMA_E_INVAL (-100004: ") +
                rpma_err_2str(RPMA_E_INVAL) + ")");
  EXPECT_EQ(Explain<int>(IsRpmaError(RPMA_E_INVAL), 0), "returned 0 (success)");
}

TEST(IsSuccessWithImm, AcceptsTheReceiversCompletion) {
  EXPECT_THAT(RecvWithImm(0x1234, 64), IsSuccessWithImm(0x1234, 64));
}

TEST(IsSuccessWithImm, RefusesEveryFieldThatDiffers) {
  EXPECT_THAT(RecvWithImm(0x1235, 64), Not(IsSuccessWithImm(0x1234, 64)));
  EXPECT_THAT(RecvWithImm(0x1234, 63), Not(IsSuccessWithImm(0x1234, 64)));
  ibv_wc wc = RecvWithImm(0x1234, 64);
  wc.status = IBV_WC_REM_ACCESS_ERR;
  EXPECT_THAT(wc, Not(IsSuccessWithImm(0x1234, 64)));
  wc = RecvWithImm(0x1234, 64);
  wc.wc_flags = 0;
  EXPECT_THAT(wc, Not(IsSuccessWithImm(0x1234, 64)));
  wc = RecvWithImm(0x1234, 64);
  wc.opcode = IBV_WC_RECV;
  EXPECT_THAT(wc, Not(IsSuccessWithImm(0x1234, 64)));
  // Network order matters: imm_data not converted is a different value.
  wc = RecvWithImm(0x1234, 64);
  wc.imm_data = 0x1234;
  EXPECT_THAT(wc, Not(IsSuccessWithImm(0x1234, 64)));
}

TEST(IsSuccessWithImm, FailureMessageShowsExpectationAndTheWholeCompletion) {
  ibv_wc wc = RecvWithImm(0x99, 64);
  wc.status = IBV_WC_LOC_ACCESS_ERR;
  EXPECT_EQ(DescribeMatcher<ibv_wc>(IsSuccessWithImm(0x1234, 64)),
            "is a successful write with imm 0x1234 of 64 bytes (status "
            "SUCCESS, opcode RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM)");
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(wc, IsSuccessWithImm(0x1234, 64)),
      "{status LOC_ACCESS_ERR, opcode RECV_RDMA_WITH_IMM, wr_id 0x0, byte_len "
      "64, wc_flags 0x2, imm(host) 0x99, qp_num 0}");
}

TEST(IsCompletionOf, MatchesOpContextAndStatus) {
  const void* ctx = reinterpret_cast<const void*>(0x77);
  ibv_wc wc{};
  wc.wr_id = 0x77;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  EXPECT_THAT(wc, IsCompletionOf(ctx, IBV_WC_WR_FLUSH_ERR));
  EXPECT_THAT(wc, Not(IsCompletionOf(ctx, IBV_WC_SUCCESS)));
  EXPECT_THAT(wc, Not(IsCompletionOf(nullptr, IBV_WC_WR_FLUSH_ERR)));
  EXPECT_EQ(DescribeMatcher<ibv_wc>(IsCompletionOf(ctx, IBV_WC_SUCCESS)),
            "is a completion of op_context 0x77 with status SUCCESS");
}

// On real completions of the fake, through the rpma API.
class RpmaMatchersOnTheFake : public ConnectedPairTest {};

TEST_F(RpmaMatchersOnTheFake, AWriteWithImmIsSuccessWithImmAtTheServer) {
  const void* ctx = reinterpret_cast<const void*>(0x5);
  ASSERT_THAT(
      pair().WriteWithImm(0, 100, 0xabcdef, RPMA_F_COMPLETION_ALWAYS, ctx),
      IsRpmaOk());
  ibv_wc wc;
  ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(0xabcdef, 100));
  ASSERT_THAT(pair().ClientCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsCompletionOf(ctx, IBV_WC_SUCCESS));
  EXPECT_THAT(pair().ClientCompletion(&wc), IsRpmaError(RPMA_E_NO_COMPLETION));
}

}  // namespace
}  // namespace rpma_harness
