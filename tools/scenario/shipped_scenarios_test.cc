// Every scenario shipped in tools/scenarios/ runs as a test: its
// expectations hold, and the same seed gives the byte-identical trace.

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/scenario/scenario_budget.h"
#include "tools/scenario/scenario_parser.h"
#include "tools/scenario/scenario_runner.h"

namespace rpma_harness {
namespace {

std::vector<std::string> ShippedScenarios() {
  std::vector<std::string> files;
  if (DIR* dir = opendir("tools/scenarios")) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".yaml") {
        files.push_back(name);
      }
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ShippedScenarioTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedScenarioTest, ExpectationsHoldAndTheTraceIsReproducible) {
  Scenario scenario;
  std::string error;
  ASSERT_TRUE(
      ParseScenarioFile("tools/scenarios/" + GetParam(), &scenario, &error))
      << error;
  // Every shipped scenario fits the default budget (what `tools/harness
  // run` allows without --budget).
  EXPECT_TRUE(CheckBudget(scenario, Budget(), &error)) << error;
  ScenarioResult first = RunScenario(scenario, RunOptions{});
  EXPECT_TRUE(first.failures.empty()) << Summary(first);
  EXPECT_FALSE(first.trace.empty());
  ScenarioResult second = RunScenario(scenario, RunOptions{});
  ASSERT_EQ(first.trace.size(), second.trace.size());
  for (size_t i = 0; i < first.trace.size(); ++i) {
    ASSERT_EQ(first.trace[i].json, second.trace[i].json) << "event " << i + 1;
  }
  // A scenario's faults are there to fire.
  for (const FaultRule& rule : scenario.faults) {
    EXPECT_GT(first.faults_fired[rule.name], 0u)
        << "fault '" << rule.name << "' never fired";
  }
}

TEST(ShippedScenarios, AreThere) { EXPECT_GE(ShippedScenarios().size(), 15u); }

INSTANTIATE_TEST_SUITE_P(Files, ShippedScenarioTest,
                         ::testing::ValuesIn(ShippedScenarios()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name =
                               info.param.substr(0, info.param.size() - 5);
                           std::replace_if(
                               name.begin(), name.end(),
                               [](char c) { return !std::isalnum(c); }, '_');
                           return name;
                         });

}  // namespace
}  // namespace rpma_harness
