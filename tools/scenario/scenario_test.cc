// The scenario format's error messages, the runner's determinism and
// replay, and the timeline's well-formedness.

#include <expat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tools/scenario/scenario_parser.h"
#include "tools/scenario/scenario_runner.h"
#include "tools/scenario/timeline.h"

namespace rpma_harness {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ParseError(const std::string& text) {
  Scenario s;
  std::string error;
  EXPECT_FALSE(ParseScenarioText(text, "x.yaml", &s, &error)) << text;
  return error;
}

Scenario Parse(const std::string& text) {
  Scenario s;
  std::string error;
  EXPECT_TRUE(ParseScenarioText(text, "x.yaml", &s, &error)) << error;
  return s;
}

constexpr char kMinimal[] =
    "name: minimal\n"
    "workload:\n"
    "  - write_with_imm: {count: 2, size: 64}\n";

TEST(ScenarioParserTest, MinimalScenarioGetsDefaults) {
  Scenario s = Parse(kMinimal);
  EXPECT_EQ(s.name, "minimal");
  ASSERT_EQ(s.workload.size(), 1u);
  EXPECT_EQ(s.workload[0].count, 2u);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.personality, "spec");
  EXPECT_TRUE(s.expect.data);
}

TEST(ScenarioParserTest, YamlSyntaxErrorNamesFileLineAndColumn) {
  EXPECT_THAT(ParseError("name: x\nworkload: [\n"), StartsWith("x.yaml:3:1: "));
}

TEST(ScenarioParserTest, UnknownKeyListsTheKnownOnes) {
  std::string e = ParseError(std::string(kMinimal) + "sed: 4\n");
  EXPECT_THAT(e, StartsWith("x.yaml:4:1: "));
  EXPECT_THAT(e, HasSubstr("unknown key 'sed'"));
  EXPECT_THAT(e, HasSubstr("seed"));
}

TEST(ScenarioParserTest, MissingWorkloadIsAnError) {
  EXPECT_THAT(ParseError("name: x\n"), HasSubstr("missing 'workload'"));
  EXPECT_THAT(ParseError("workload: []\n"), HasSubstr("missing 'name'"));
}

TEST(ScenarioParserTest, BadNumberSaysWhatWasExpected) {
  std::string e =
      ParseError("name: x\nworkload:\n  - write_with_imm: {count: many}\n");
  EXPECT_THAT(e, StartsWith("x.yaml:3:"));
  EXPECT_THAT(e, HasSubstr("count: expected an unsigned number"));
  EXPECT_THAT(e, HasSubstr("'many'"));
}

TEST(ScenarioParserTest, UnknownActionListsTheActions) {
  std::string e = ParseError(std::string(kMinimal) +
                             "faults:\n"
                             "  - {name: f, on: execute, action: explode}\n");
  EXPECT_THAT(e, StartsWith("x.yaml:5:"));
  EXPECT_THAT(e, HasSubstr("unknown value 'explode'"));
  EXPECT_THAT(e, HasSubstr("lose_connection"));
}

TEST(ScenarioParserTest, ActionThatCannotApplyToTheCallIsAnError) {
  EXPECT_THAT(
      ParseError(std::string(kMinimal) +
                 "faults:\n"
                 "  - {name: f, on: poll_cq, action: tear, bytes: 1}\n"),
      HasSubstr("cannot apply to 'poll_cq'"));
}

TEST(ScenarioParserTest, ActionsNeedTheirParameters) {
  EXPECT_THAT(
      ParseError(std::string(kMinimal) +
                 "faults:\n  - {name: f, on: post_send, action: fail}\n"),
      HasSubstr("needs 'errno'"));
  EXPECT_THAT(
      ParseError(std::string(kMinimal) +
                 "faults:\n  - {name: f, on: execute, action: complete}\n"),
      HasSubstr("needs 'status'"));
  EXPECT_THAT(ParseError(std::string(kMinimal) +
                         "faults:\n  - {name: f, on: execute, action: tear}\n"),
              HasSubstr("needs 'bytes'"));
}

TEST(ScenarioParserTest, UnknownStatusAndErrnoAreErrors) {
  EXPECT_THAT(ParseError(std::string(kMinimal) +
                         "faults:\n  - {name: f, on: execute, action: complete,"
                         " status: OOPS}\n"),
              HasSubstr("unknown value 'OOPS'"));
  EXPECT_THAT(ParseError(std::string(kMinimal) +
                         "faults:\n  - {name: f, on: post_send, action: fail,"
                         " errno: EWHAT}\n"),
              HasSubstr("unknown value 'EWHAT'"));
}

TEST(ScenarioParserTest, ExpectedFaultMustExist) {
  EXPECT_THAT(
      ParseError(std::string(kMinimal) + "expect:\n  faults_fired: [ghost]\n"),
      HasSubstr("no fault is named 'ghost'"));
}

TEST(ScenarioParserTest, OverlappingWritesAreRejected) {
  EXPECT_THAT(
      ParseError("name: x\nworkload:\n"
                 "  - write_with_imm: {count: 1, size: 64}\n"
                 "  - write_with_imm: {count: 1, size: 64, dst_offset: 32}\n"),
      HasSubstr("overlapping writes cannot be verified"));
  EXPECT_THAT(
      ParseError("name: x\nworkload:\n"
                 "  - write_with_imm: {count: 2, size: 64, stride: 32}\n"),
      HasSubstr("stride 32 is smaller than size 64"));
}

TEST(ScenarioParserTest, SideDoesNotApplyToCallsWithoutAQp) {
  EXPECT_THAT(ParseError(std::string(kMinimal) +
                         "faults:\n  - {name: f, on: reg_mr, side: client,"
                         " action: fail, errno: ENOMEM}\n"),
              HasSubstr("'side' does not apply"));
}

TEST(ScenarioParserTest, DuplicateFaultNamesAreRejected) {
  EXPECT_THAT(ParseError(std::string(kMinimal) +
                         "faults:\n"
                         "  - {name: f, on: execute, action: delay}\n"
                         "  - {name: f, on: execute, action: delay}\n"),
              HasSubstr("two faults have this name"));
}

TEST(ScenarioParserTest, MissingFileIsAnError) {
  Scenario s;
  std::string error;
  EXPECT_FALSE(ParseScenarioFile("/nonexistent.yaml", &s, &error));
  EXPECT_THAT(error, HasSubstr("/nonexistent.yaml: cannot open"));
}

constexpr char kFlaky[] =
    "name: flaky\n"
    "workload:\n"
    "  - write_with_imm: {count: 12, size: 64}\n"
    "faults:\n"
    "  - {name: coin, on: execute, probability: 0.5, action: delay, steps: "
    "2}\n";

TEST(ScenarioRunnerTest, SameSeedSameTraceByteForByte) {
  Scenario s = Parse(kFlaky);
  ScenarioResult a = RunScenario(s, RunOptions{});
  ScenarioResult b = RunScenario(s, RunOptions{});
  ASSERT_EQ(a.trace.size(), b.trace.size());
  for (size_t i = 0; i < a.trace.size(); ++i) {
    ASSERT_EQ(a.trace[i].json, b.trace[i].json);
  }
}

TEST(ScenarioRunnerTest, ChangedSeedChangesAProbabilisticRun) {
  Scenario s = Parse(kFlaky);
  RunOptions other;
  other.seed = 2;
  ScenarioResult a = RunScenario(s, RunOptions{});
  ScenarioResult b = RunScenario(s, other);
  EXPECT_NE(a.faults_fired["coin"], 0u);
  bool differs = a.trace.size() != b.trace.size();
  for (size_t i = 0; !differs && i < a.trace.size(); ++i) {
    differs = a.trace[i].json != b.trace[i].json;
  }
  EXPECT_TRUE(differs);
  // The outcome is the same: delays lose nothing.
  EXPECT_TRUE(a.failures.empty()) << Summary(a);
  EXPECT_TRUE(b.failures.empty()) << Summary(b);
}

TEST(ScenarioRunnerTest, ReplayOfTheSameRunFindsNoDivergence) {
  Scenario s = Parse(kFlaky);
  ScenarioResult a = RunScenario(s, RunOptions{});
  const std::string path = ::testing::TempDir() + "/trace.jsonl";
  std::string error;
  ASSERT_TRUE(WriteTrace(a, path, &error)) << error;
  EXPECT_EQ(FirstDivergence(RunScenario(s, RunOptions{}), path), "");
}

TEST(ScenarioRunnerTest, ReplayReportsTheFirstDivergence) {
  Scenario s = Parse(kFlaky);
  ScenarioResult a = RunScenario(s, RunOptions{});
  const std::string path = ::testing::TempDir() + "/trace2.jsonl";
  std::string error;
  ASSERT_TRUE(WriteTrace(a, path, &error)) << error;
  RunOptions other;
  other.seed = 3;
  const std::string divergence = FirstDivergence(RunScenario(s, other), path);
  EXPECT_THAT(divergence, StartsWith("line "));
  EXPECT_THAT(divergence, HasSubstr("recorded {\"seq\":"));
  EXPECT_THAT(divergence, HasSubstr("this run {\"seq\":"));
}

TEST(ScenarioRunnerTest, ReplayOfATruncatedRecordingSaysSo) {
  Scenario s = Parse(kMinimal);
  ScenarioResult a = RunScenario(s, RunOptions{});
  const std::string path = ::testing::TempDir() + "/short.jsonl";
  {
    std::ofstream out(path);
    out << a.trace[0].json << "\n";
  }
  EXPECT_THAT(FirstDivergence(a, path),
              HasSubstr("the recording ended after 1 events"));
}

TEST(ScenarioRunnerTest, FailedExpectationIsReported) {
  Scenario s = Parse(std::string(kMinimal) +
                     "expect:\n  client: {SUCCESS: 3}\n  connection: lost\n");
  ScenarioResult r = RunScenario(s, RunOptions{});
  ASSERT_EQ(r.failures.size(), 2u) << Summary(r);
  EXPECT_THAT(r.failures[0], HasSubstr("got {SUCCESS x2}"));
  EXPECT_THAT(r.failures[1], HasSubstr("got established"));
  EXPECT_THAT(Summary(r), HasSubstr("2 failed"));
}

TEST(ScenarioRunnerTest, WriteParkedByRnrCountsAsUnfinished) {
  Scenario s = Parse(
      "name: parked\n"
      "server: {prepost: 0, recv: prepost}\n"
      "workload:\n  - write_with_imm: {count: 1, size: 8}\n");
  ScenarioResult r = RunScenario(s, RunOptions{});
  EXPECT_EQ(r.unfinished, 1u);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_THAT(r.failures[0], HasSubstr("unfinished"));
}

TEST(ScenarioRunnerTest, RunKeepsNoMoreEventsThanItsBudgetAndFails) {
  Scenario s = Parse(kMinimal);
  RunOptions options;
  options.max_events = 10;
  ScenarioResult r = RunScenario(s, options);
  EXPECT_EQ(r.trace.size(), 10u);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_THAT(r.failures.back(), HasSubstr("kept at most 10 events"));
}

TEST(ScenarioParserTest, NumbersAreDecimalOrHexAndNothingElse) {
  uint64_t v = 0;
  std::string why;
  EXPECT_TRUE(ParseUnsignedNumber("0", UINT64_MAX, &v, &why));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseUnsignedNumber("0x10", UINT64_MAX, &v, &why));
  EXPECT_EQ(v, 16u);
  EXPECT_TRUE(
      ParseUnsignedNumber("18446744073709551615", UINT64_MAX, &v, &why));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_TRUE(ParseUnsignedNumber("0xffffffffffffffff", UINT64_MAX, &v, &why));
  for (const char* bad : {"", "010", "08", "00", "-1", "+1", "1.0", "0x", "1e3",
                          " 1", "0x1g", "18446744073709551616",
                          "0x10000000000000000", "0b101", "0o7", "1_000"}) {
    EXPECT_FALSE(ParseUnsignedNumber(bad, UINT64_MAX, &v, &why)) << bad;
  }
  EXPECT_FALSE(ParseUnsignedNumber("65", 64, &v, &why));
  EXPECT_THAT(why, HasSubstr("65 is larger than 64"));
}

TEST(ScenarioParserTest, ProbabilitiesArePlainDecimalsInZeroToOne) {
  double p = 0;
  std::string why;
  EXPECT_TRUE(ParseProbability("0.5", &p, &why));
  EXPECT_EQ(p, 0.5);
  EXPECT_TRUE(ParseProbability("1", &p, &why));
  EXPECT_TRUE(ParseProbability(".25", &p, &why));
  for (const char* bad : {"", "0", "0.0", "nan", "NaN", ".nan", "inf", ".inf",
                          "-0.5", "1.5", "1e-3", "0x1p-2", "0.5.5", "."}) {
    EXPECT_FALSE(ParseProbability(bad, &p, &why)) << bad;
  }
}

TEST(ScenarioParserTest, ValidFaultConnectionIsAccepted) {
  Scenario s = Parse(
      "name: x\nconnections: 2\nworkload:\n  - write_with_imm: {}\n"
      "faults:\n  - {name: f, on: execute, side: client, connection: 2, "
      "action: delay}\n");
  ASSERT_EQ(s.fault_connections.size(), 1u);
  EXPECT_EQ(s.fault_connections[0], 2u);
}

// ---- timeline ----

int CountElements(const std::string& svg, const std::string& element,
                  std::string* error) {
  struct State {
    std::string element;
    int count = 0;
  } state{element, 0};
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &state);
  XML_SetStartElementHandler(
      parser, [](void* data, const XML_Char* name, const XML_Char**) {
        auto* s = static_cast<State*>(data);
        if (s->element == name) ++s->count;
      });
  int ok = XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1);
  if (!ok) {
    *error = std::string(XML_ErrorString(XML_GetErrorCode(parser))) +
             " at line " + std::to_string(XML_GetCurrentLineNumber(parser));
  }
  XML_ParserFree(parser);
  return ok ? state.count : -1;
}

TEST(TimelineTest, IsWellFormedSvgWithOneArrowPerMovement) {
  Scenario s;
  std::string error;
  ASSERT_TRUE(
      ParseScenarioFile("tools/scenarios/rem_access_err.yaml", &s, &error))
      << error;
  ScenarioResult r = RunScenario(s, RunOptions{});
  const std::string svg = RenderTimeline(r);
  EXPECT_EQ(CountElements(svg, "svg", &error), 1) << error;
  int executes = 0, completions = 0;
  for (const TraceEvent& e : r.trace) {
    executes += e.kind == "execute";
    completions += e.kind == "completion";
  }
  // Every data movement and every completion is an arrow (a <line>).
  EXPECT_GE(CountElements(svg, "line", &error), executes + completions + 4);
  EXPECT_THAT(svg, HasSubstr("deny the second write"));
  EXPECT_THAT(svg, HasSubstr("REM_ACCESS_ERR"));
}

TEST(TimelineTest, EscapesTextAndCutsLongRuns) {
  Scenario s = Parse(
      "name: <a & b>\nworkload:\n  - write_with_imm: {count: 40, size: 8}\n");
  ScenarioResult r = RunScenario(s, RunOptions{});
  std::string error;
  const std::string svg = RenderTimeline(r, 10);
  EXPECT_EQ(CountElements(svg, "svg", &error), 1) << error;
  EXPECT_THAT(svg, HasSubstr("&lt;a &amp; b&gt;"));
  EXPECT_THAT(svg, HasSubstr("more events are in the trace"));
}

// ---- the usage checker in scenarios ----

constexpr char kPastTheEnd[] =
    "name: past the end\n"
    "server: {mr_size: 4096}\n"
    "client: {mr_size: 8192}\n"
    "workload:\n"
    "  - write_with_imm: {count: 1, size: 64, src_offset: 4096, "
    "dst_offset: 4064}\n"
    "expect:\n"
    "  client: {REM_ACCESS_ERR: 1}\n"
    "  server: {LOC_ACCESS_ERR: 1, WR_FLUSH_ERR: 3}\n";

TEST(ScenarioCheckTest, CheckKeyListsFindingsInTheSummary) {
  Scenario s = Parse(std::string(kPastTheEnd) + "check: remote-range\n");
  ASSERT_EQ(s.check, std::optional<std::string>("remote-range"));
  ScenarioResult r = RunScenario(s, RunOptions{});
  EXPECT_TRUE(r.checked);
  EXPECT_EQ(r.findings_per_check["remote-range"], 1u);
  EXPECT_TRUE(r.failures.empty()) << Summary(r);  // listed, not failed
  EXPECT_THAT(Summary(r), HasSubstr("findings:     remote-range x1"));
}

TEST(ScenarioCheckTest, StrictMakesAFindingFailTheRun) {
  Scenario s = Parse(kPastTheEnd);
  RunOptions options;
  options.check = "all";
  options.strict = true;
  ScenarioResult r = RunScenario(s, options);
  ASSERT_EQ(r.failures.size(), 1u) << Summary(r);
  EXPECT_THAT(r.failures[0], HasSubstr("no usage-checker findings"));
}

TEST(ScenarioCheckTest, ExpectedFindingsAreAnExpectation) {
  Scenario s = Parse(std::string(kPastTheEnd) +
                     "  findings: {remote-range: 1}\ncheck: all\n");
  RunOptions options;
  options.strict = true;  // expect.findings decides instead
  ScenarioResult r = RunScenario(s, options);
  EXPECT_TRUE(r.failures.empty()) << Summary(r);
  Scenario wrong = Parse(std::string(kPastTheEnd) +
                         "  findings: {remote-range: 0}\ncheck: all\n");
  EXPECT_EQ(RunScenario(wrong, RunOptions{}).failures.size(), 1u);
}

TEST(ScenarioCheckTest, UncheckedRunHasNoFindingsLine) {
  ScenarioResult r = RunScenario(Parse(kMinimal), RunOptions{});
  EXPECT_FALSE(r.checked);
  EXPECT_THAT(Summary(r), ::testing::Not(HasSubstr("findings:")));
}

TEST(ScenarioCheckTest, LandingInPiecesKeepsTheDataCheckAndTheExpectations) {
  // A scenario reaps each completion before it checks the bytes, so pieces
  // landing over several steps change nothing it expects.
  Scenario s = Parse(
      "name: pieces\nseed: 4\nworkload:\n"
      "  - write_with_imm: {count: 6, size: 3000}\n"
      "check: landing=pieces\n");
  RunOptions options;
  options.strict = true;
  ScenarioResult r = RunScenario(s, options);
  EXPECT_TRUE(r.checked);
  EXPECT_TRUE(r.failures.empty()) << Summary(r);
  EXPECT_THAT(Summary(r), HasSubstr("data verified (18000 bytes"));
  int landed = 0;
  for (const TraceEvent& e : r.trace) {
    landed += e.text.find("landed (pieces)") != std::string::npos;
  }
  EXPECT_GE(landed, 12);  // six writes, at least two pieces each
  EXPECT_THAT(ParseError(std::string(kMinimal) + "check: landing=later\n"),
              HasSubstr("unknown landing mode 'later'"));
}

TEST(ScenarioCheckTest, UnknownCheckNameIsAParseError) {
  EXPECT_THAT(ParseError(std::string(kMinimal) + "check: lenght\n"),
              HasSubstr("unknown check 'lenght'"));
  EXPECT_THAT(ParseError(std::string(kMinimal) + "check: strict\n"),
              HasSubstr("--strict"));
  EXPECT_THAT(
      ParseError(std::string(kMinimal) + "expect:\n  findings: {bogus: 1}\n"),
      HasSubstr("'bogus' is not a check"));
}

}  // namespace
}  // namespace rpma_harness
