// Deliberately failing tests, run by flight_recorder_test.cc in a child
// process to read what the flight recorder printed. Not a test by itself.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "mock/connected_pair.h"
#include "mock/matchers.h"
#include "mock/rpma_matchers.h"

namespace rpma_harness {
namespace {

ConnectedPairOptions DenyFirstWrite() {
  ConnectedPairOptions options;
  FaultRule rule;
  rule.name = "deny the first write";
  rule.call = FaultCall::kExecute;
  rule.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  rule.nth = 1;
  rule.action = FaultAction::kCompleteWithStatus;
  rule.status = IBV_WC_REM_ACCESS_ERR;
  options.faults.push_back(rule);
  return options;
}

TEST(Inner, PassesQuietly) {
  ConnectedPair pair;
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_THAT(pair.WriteWithImm(0, 64, 0x1234), IsRpmaOk());
  ibv_wc wc;
  ASSERT_THAT(pair.ServerCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, IsSuccessWithImm(0x1234, 64));
}

// The write is denied (REM_ACCESS_ERR): the client QP goes to ERR, the
// server's receive stays posted. The test expects success and fails.
TEST(Inner, FailsAfterRemoteAccessError) {
  ConnectedPair pair(DenyFirstWrite());
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_THAT(pair.WriteWithImm(0, 64, 0xbeef), IsRpmaOk());
  ibv_wc wc;
  ASSERT_THAT(pair.ClientCompletion(&wc), IsRpmaOk());
  EXPECT_THAT(wc, HasWcStatus(IBV_WC_SUCCESS));
}

// Two failures: the second report only adds what happened in between.
TEST(Inner, FailsTwice) {
  ConnectedPair pair;
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_THAT(pair.WriteWithImm(0, 8, 1), IsRpmaOk());
  pair.nic().RunUntilIdle();
  ADD_FAILURE() << "first failure";
  ASSERT_THAT(pair.PostServerRecv(), IsRpmaOk());
  ADD_FAILURE() << "second failure";
}

// A write posted and never executed is outstanding.
TEST(Inner, FailsWithWriteQueued) {
  ConnectedPair pair;
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_THAT(pair.WriteWithImm(0, 16, 7, RPMA_F_COMPLETION_ALWAYS,
                                reinterpret_cast<const void*>(0x77)),
              IsRpmaOk());
  ADD_FAILURE() << "failure with a write queued";
}

// The NIC is gone when the test fails; its record is still printed.
TEST(Inner, FailsAfterNicDestroyed) {
  {
    ConnectedPair pair;
    ASSERT_TRUE(pair.ok()) << pair.error();
  }
  ADD_FAILURE() << "failure after the NIC was destroyed";
}

// The NIC works on its own thread (the observer runs there) while the test
// fails and the report is made.
TEST(Inner, FailsWithBackgroundProgress) {
  ConnectedPair pair;
  ASSERT_TRUE(pair.ok()) << pair.error();
  pair.nic().StartBackgroundProgress();
  ASSERT_THAT(pair.PostServerRecv(), IsRpmaOk());
  for (int i = 0; i < 2; ++i) {
    ASSERT_THAT(pair.WriteWithImm(0, 32, 0x100 + i), IsRpmaOk());
  }
  ADD_FAILURE() << "failure while the NIC runs";
  ibv_wc wc;
  for (int got = 0; got < 2;) {
    const int ret = rpma_cq_get_wc(pair.server_cq(), 1, &wc, nullptr);
    if (ret == 0) got++;
    ASSERT_TRUE(ret == 0 || ret == RPMA_E_NO_COMPLETION) << ret;
  }
  // The NIC's thread may have done all its work before the first report; a
  // receive posted now is news for the second one in any interleaving.
  ASSERT_THAT(pair.PostServerRecv(), IsRpmaOk());
  ADD_FAILURE() << "second failure, both writes received";
  pair.nic().StopBackgroundProgress();
}

// No fake NIC in this test: nothing to print.
TEST(Inner, FailsWithoutNic) { ADD_FAILURE() << "failure without a NIC"; }

}  // namespace
}  // namespace rpma_harness
