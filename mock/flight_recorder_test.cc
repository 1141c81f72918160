// flight_recorder_test.cc: runs the deliberately failing tests of
// flight_recorder_inner.cc in a child process and checks what the flight
// recorder printed (and that it prints nothing when it should not).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct InnerRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

std::string InnerPath() {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || workspace == nullptr) return "";
  return std::string(srcdir) + "/" + workspace + "/mock/flight_recorder_inner";
}

// Runs the inner binary with `filter`, extra arguments and an environment
// prefix ("VAR=value " or "").
InnerRun RunInner(const std::string& filter, const std::string& args = "",
                  const std::string& env = "") {
  InnerRun run;
  const std::string path = InnerPath();
  if (path.empty()) {
    ADD_FAILURE() << "TEST_SRCDIR / TEST_WORKSPACE not set: run with bazel";
    return run;
  }
  const std::string command = "env -u RPMA_HARNESS_FLIGHT_RECORDER " + env +
                              "'" + path + "' --gtest_filter=" + filter + " " +
                              args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return run;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    run.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

int Count(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + 1)) {
    count++;
  }
  return count;
}

constexpr char kBanner[] = "[ flight recorder ]";

TEST(FlightRecorder, PrintsTheNicsLastEventsQpStatesAndOutstandingWrs) {
  const InnerRun run = RunInner("Inner.FailsAfterRemoteAccessError");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(
      run.output,
      AllOf(HasSubstr("[ flight recorder ] fake NIC #1 (personality spec, "
                      "seed 1): last "),
            HasSubstr(" events in this test"),
            // The trace lines: the write, the fault, the error completion.
            HasSubstr("post_send qp="), HasSubstr("op=RDMA_WRITE_WITH_IMM"),
            HasSubstr(" fault qp="), HasSubstr("REM_ACCESS_ERR"),
            // Both QPs went to ERR, and the server's receive was flushed.
            HasSubstr("QP states:"),
            HasSubstr(" ERR (fault: deny the first write);"),
            HasSubstr("op=RECV status=5/WR_FLUSH_ERR"),
            HasSubstr("outstanding WRs: none"),
            HasSubstr("RPMA_HARNESS_FLIGHT_RECORDER=0")));
  EXPECT_EQ(Count(run.output, " ERR (fault: deny the first write);"), 2)
      << run.output;
  // The report follows gtest's own failure message.
  EXPECT_LT(run.output.find("Expected: has status SUCCESS"),
            run.output.find(kBanner))
      << run.output;
}

TEST(FlightRecorder, SaysNothingWhenTheTestPasses) {
  const InnerRun run = RunInner("Inner.PassesQuietly");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr(kBanner)));
}

TEST(FlightRecorder, SaysNothingForAFailingTestWithoutAFakeNic) {
  // PassesQuietly made (and destroyed) a NIC in an earlier test; that NIC
  // belongs to that test.
  const InnerRun run = RunInner("Inner.PassesQuietly:Inner.FailsWithoutNic");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("failure without a NIC"));
  EXPECT_THAT(run.output, Not(HasSubstr(kBanner)));
}

TEST(FlightRecorder, ShowsAWriteThatNeverExecuted) {
  const InnerRun run = RunInner("Inner.FailsWithWriteQueued");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("outstanding WRs (2):"));
  EXPECT_THAT(run.output, HasSubstr(" recv wr_id 0, posted at #4\n"));
  EXPECT_THAT(run.output,
              HasSubstr("send RDMA_WRITE_WITH_IMM 16 B wr_id 119, posted at"));
}

TEST(FlightRecorder, ReportsANicDestroyedBeforeTheFailure) {
  const InnerRun run = RunInner("Inner.FailsAfterNicDestroyed");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("seed 1), destroyed during the test: last"));
}

TEST(FlightRecorder, ASecondFailureAddsOnlyWhatHappenedSince) {
  const InnerRun run = RunInner("Inner.FailsTwice");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(Count(run.output, " events in this test"), 1) << run.output;
  EXPECT_EQ(Count(run.output, "last 1 of 1 events since the report above"), 1)
      << run.output;
  const size_t second = run.output.find("second failure");
  ASSERT_NE(second, std::string::npos);
  EXPECT_THAT(
      run.output.substr(second),
      AllOf(HasSubstr("post_recv qp="), HasSubstr("outstanding WRs (1):"),
            HasSubstr(" recv wr_id 0, posted at #15")));
}

TEST(FlightRecorder, WorksWhileTheNicRunsOnItsOwnThread) {
  const InnerRun run = RunInner("Inner.FailsWithBackgroundProgress");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(Count(run.output, kBanner), 3) << run.output;  // 2 reports + hint
  const size_t second = run.output.find("both writes received");
  ASSERT_NE(second, std::string::npos) << run.output;
  // Both writes were received by the second report; when the NIC's thread
  // got there (before or after the first report) is the thread's business,
  // so their completions are in one of the two reports.
  EXPECT_EQ(Count(run.output, "op=RECV_RDMA_WITH_IMM"), 2) << run.output;
  // The second report holds what happened since the first: the receive
  // posted after both writes arrived.
  EXPECT_THAT(run.output.substr(second), HasSubstr("post_recv qp="))
      << run.output;
}

TEST(FlightRecorder, KeepsTheNumberOfEventsAsked) {
  const InnerRun run = RunInner("Inner.FailsAfterRemoteAccessError", "",
                                "RPMA_HARNESS_FLIGHT_RECORDER=3 ");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr(": last 3 of "));
  const size_t start = run.output.find(": last 3 of ");
  ASSERT_NE(start, std::string::npos);
  const std::string rest = run.output.substr(start);
  EXPECT_EQ(Count(rest.substr(0, rest.find("QP states:")), "\n    #"), 3)
      << run.output;
}

TEST(FlightRecorder, TheEnvironmentTurnsItOff) {
  const InnerRun run = RunInner("Inner.FailsAfterRemoteAccessError", "",
                                "RPMA_HARNESS_FLIGHT_RECORDER=0 ");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("Expected: has status SUCCESS"));
  EXPECT_THAT(run.output, Not(HasSubstr(kBanner)));
}

TEST(FlightRecorder, TheFlagTurnsItOff) {
  const InnerRun run = RunInner("Inner.FailsAfterRemoteAccessError",
                                "--rpma_harness_flight_recorder=off");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, Not(HasSubstr(kBanner)));
}

TEST(FlightRecorder, ABadValueIsReportedAndIgnored) {
  const InnerRun run = RunInner("Inner.FailsAfterRemoteAccessError",
                                "--rpma_harness_flight_recorder=lots");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("flight recorder: ignoring "
                                    "--rpma_harness_flight_recorder=lots"));
  EXPECT_THAT(run.output, HasSubstr(kBanner));
}

}  // namespace
