// librpma's logging as rpma_log_set_threshold(3), rpma_log_get_threshold(3)
// and rpma_log_set_function(3) define it: two thresholds with their
// defaults, a user log function that gets what passes the main threshold,
// and the default function's stderr output governed by the auxiliary one.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "mock/test_dir.h"

namespace {

using rpma_harness::CaptureStderr;
using rpma_harness::TakeStderr;

using ::testing::EndsWith;
using ::testing::HasSubstr;

struct Logged {
  rpma_log_level level;
  bool has_file;
  std::string text;
};
std::vector<Logged>* g_logged = nullptr;

void Collect(rpma_log_level level, const char* file_name, const int,
             const char*, const char* message_format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, message_format);
  std::vsnprintf(buffer, sizeof(buffer), message_format, args);
  va_end(args);
  g_logged->push_back({level, file_name != nullptr, buffer});
}

// An ERROR message from the library without any NIC: a peer configuration
// descriptor that is too short.
int ProvokeAnError() {
  uint8_t desc = 1;
  rpma_peer_cfg* cfg = nullptr;
  return rpma_peer_cfg_from_descriptor(&desc, 0, &cfg);
}

// An INFO message: a peer configuration read from a valid descriptor.
void ProvokeAnInfo() {
  uint8_t desc = 1;
  rpma_peer_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_peer_cfg_from_descriptor(&desc, 1, &cfg), 0);
  rpma_peer_cfg_delete(&cfg);
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override { g_logged = &logged_; }
  void TearDown() override {
    // Back to librpma's defaults for the next test.
    rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION);
    rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_WARNING);
    rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_DISABLED);
    g_logged = nullptr;
  }
  std::vector<Logged> logged_;
};

TEST_F(LogTest, DefaultThresholdsAreWarningAndDisabled) {
  rpma_log_level level = RPMA_LOG_LEVEL_DEBUG;
  ASSERT_EQ(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &level), 0);
  EXPECT_EQ(level, RPMA_LOG_LEVEL_WARNING);
  ASSERT_EQ(rpma_log_get_threshold(RPMA_LOG_THRESHOLD_AUX, &level), 0);
  EXPECT_EQ(level, RPMA_LOG_DISABLED);
}

TEST_F(LogTest, SetThenGetEveryLevelOnBothThresholds) {
  for (rpma_log_threshold threshold :
       {RPMA_LOG_THRESHOLD, RPMA_LOG_THRESHOLD_AUX}) {
    for (int l = RPMA_LOG_DISABLED; l <= RPMA_LOG_LEVEL_DEBUG; ++l) {
      ASSERT_EQ(
          rpma_log_set_threshold(threshold, static_cast<rpma_log_level>(l)), 0);
      rpma_log_level got = static_cast<rpma_log_level>(99);
      ASSERT_EQ(rpma_log_get_threshold(threshold, &got), 0);
      EXPECT_EQ(got, l);
    }
  }
}

TEST_F(LogTest, SetThresholdRejectsUnknownThresholdAndLevel) {
  EXPECT_EQ(
      rpma_log_set_threshold(RPMA_LOG_THRESHOLD_MAX, RPMA_LOG_LEVEL_ERROR),
      RPMA_E_INVAL);
  EXPECT_EQ(rpma_log_set_threshold(static_cast<rpma_log_threshold>(-1),
                                   RPMA_LOG_LEVEL_ERROR),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_log_set_threshold(RPMA_LOG_THRESHOLD,
                                   static_cast<rpma_log_level>(-2)),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_log_set_threshold(
                RPMA_LOG_THRESHOLD,
                static_cast<rpma_log_level>(RPMA_LOG_LEVEL_DEBUG + 1)),
            RPMA_E_INVAL);
  // Nothing changed.
  rpma_log_level level;
  ASSERT_EQ(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &level), 0);
  EXPECT_EQ(level, RPMA_LOG_LEVEL_WARNING);
}

TEST_F(LogTest, GetThresholdRejectsUnknownThresholdAndNullLevel) {
  rpma_log_level level = RPMA_LOG_LEVEL_INFO;
  EXPECT_EQ(rpma_log_get_threshold(RPMA_LOG_THRESHOLD_MAX, &level),
            RPMA_E_INVAL);
  EXPECT_EQ(level, RPMA_LOG_LEVEL_INFO);
  EXPECT_EQ(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, nullptr), RPMA_E_INVAL);
}

TEST_F(LogTest, UserFunctionGetsMessagesAtOrBelowTheMainThreshold) {
  ASSERT_EQ(rpma_log_set_function(Collect), 0);
  EXPECT_EQ(ProvokeAnError(), RPMA_E_INVAL);
  ProvokeAnInfo();  // INFO is above the default WARNING threshold
  ASSERT_EQ(logged_.size(), 1u);
  EXPECT_EQ(logged_[0].level, RPMA_LOG_LEVEL_ERROR);
  // No source position (allowed by rpma_log_set_function(3)); the message
  // ends with a newline, as librpma's do.
  EXPECT_FALSE(logged_[0].has_file);
  EXPECT_THAT(logged_[0].text, HasSubstr("descriptor"));
  EXPECT_THAT(logged_[0].text, EndsWith("\n"));

  ASSERT_EQ(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO), 0);
  ProvokeAnInfo();
  ASSERT_EQ(logged_.size(), 2u);
  EXPECT_EQ(logged_[1].level, RPMA_LOG_LEVEL_INFO);
  EXPECT_THAT(logged_[1].text, HasSubstr("Direct Write To PMem is supported"));
}

TEST_F(LogTest, DisabledMainThresholdSilencesEverything) {
  ASSERT_EQ(rpma_log_set_function(Collect), 0);
  ASSERT_EQ(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_DISABLED), 0);
  ProvokeAnError();
  EXPECT_TRUE(logged_.empty());
}

TEST_F(LogTest, DefaultFunctionWritesToStderrOnlyUpToTheAuxThreshold) {
  ASSERT_EQ(rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION), 0);
  // AUX disabled (the default): the message goes to syslog only.
  CaptureStderr();
  ProvokeAnError();
  EXPECT_EQ(TakeStderr(), "");

  ASSERT_EQ(
      rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_WARNING),
      0);
  CaptureStderr();
  ProvokeAnError();
  const std::string line = TakeStderr();
  EXPECT_THAT(line, HasSubstr("*ERROR* "));
  EXPECT_THAT(line, HasSubstr("descriptor"));
  EXPECT_THAT(line, EndsWith("\n"));

  // The main threshold still filters first: an INFO message passes AUX
  // (DEBUG) but not the main threshold (WARNING).
  ASSERT_EQ(
      rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_DEBUG), 0);
  CaptureStderr();
  ProvokeAnInfo();
  EXPECT_EQ(TakeStderr(), "");
}

TEST_F(LogTest, NullFunctionIsTheDefaultFunction) {
  ASSERT_EQ(rpma_log_set_function(Collect), 0);
  ASSERT_EQ(rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION), 0);
  ASSERT_EQ(
      rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_ERROR), 0);
  CaptureStderr();
  ProvokeAnError();
  EXPECT_THAT(TakeStderr(), HasSubstr("*ERROR* "));
  EXPECT_TRUE(logged_.empty());
}

}  // namespace
