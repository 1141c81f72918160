// Every shipped scenario (tools/scenarios/*.yaml, compiled in) on live rxe
// through the rdma-core backend, with the expectations it has on the fake.
//
// Run it in the soft-RoCE VM (tools/softroce_vm/run.sh; ci.sh does): there
// RPMA_HARNESS_VM_ADDR names rxe0's address, which both ends of each
// connection use. A scenario whose faults need the fake NIC (execute-time
// faults, forced statuses at post, connection loss, CQ overrun:
// FaultNeedsFakeNic) is skipped with the reason printed; so is one whose
// expectations are a personality's that rxe does not have (kPersonalityBound
// below, each with its twin that runs instead). Every scenario that runs
// here must also meet its expectations on the fake in the same process: the
// same file, the same expectations, two NICs.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "tools/scenario/scenario_parser.h"
#include "tools/scenario/scenario_runner.h"
#include "tools/softroce_vm/embedded_scenarios.h"

namespace rpma_harness {
namespace {

// Scenarios whose expectations are a personality other than rxe's, with the
// difference and the scenario that covers rxe (docs/fidelity.md, "`spec`
// against `rxe`, behaviour by behaviour").
const std::map<std::string, std::string>& PersonalityBound() {
  static const auto* bound = new std::map<std::string, std::string>{
      {"write_past_mr_end.yaml",
       "its expectations are personality spec's: the receive the failed "
       "write took completes with LOC_ACCESS_ERR; rxe completes it with "
       "REM_ACCESS_ERR (rxe_resp.c, docs/fidelity.md); "
       "write_past_mr_end_rxe.yaml runs instead"},
  };
  return *bound;
}

class ScenarioOnRxeTest : public ::testing::TestWithParam<EmbeddedScenario> {};

TEST_P(ScenarioOnRxeTest, MeetsTheSameExpectationsAsOnTheFake) {
  const EmbeddedScenario& file = GetParam();
  Scenario scenario;
  std::string error;
  ASSERT_TRUE(ParseScenarioText(file.text, file.file, &scenario, &error))
      << error;
  auto bound = PersonalityBound().find(file.file);
  if (bound != PersonalityBound().end()) {
    std::printf("SCENARIO SKIP %s: %s\n", file.file.c_str(),
                bound->second.c_str());
    GTEST_SKIP() << bound->second;
  }
  // The fake first: the file's expectations hold there.
  ScenarioResult fake = RunScenario(scenario, RunOptions{});
  EXPECT_TRUE(fake.failures.empty()) << "on the fake:\n" << Summary(fake);

  RunOptions options;
  options.backend = "rdma-core";
  const char* addr = std::getenv("RPMA_HARNESS_VM_ADDR");
  options.address = addr != nullptr ? addr : "";
  ScenarioResult real = RunScenario(scenario, options);
  if (real.skipped) {
    std::printf("SCENARIO SKIP %s: %s\n", file.file.c_str(),
                real.skip_reason.c_str());
    GTEST_SKIP() << real.skip_reason;
  }
  if (addr == nullptr) {
    GTEST_SKIP() << "RPMA_HARNESS_VM_ADDR is not set: run this test in the "
                    "soft-RoCE VM (tools/softroce_vm/run.sh)";
  }
  std::printf("SCENARIO %s %s\n%s", real.failures.empty() ? "PASS" : "FAIL",
              file.file.c_str(), Summary(real).c_str());
  for (const std::string& line : real.log) std::printf("  %s\n", line.c_str());
  EXPECT_TRUE(real.failures.empty()) << "on rxe:\n" << Summary(real);
}

TEST(ScenariosOnRxe, AllShippedScenariosAreCompiledIn) {
  EXPECT_GE(EmbeddedScenarios().size(), 15u);
}

INSTANTIATE_TEST_SUITE_P(
    Shipped, ScenarioOnRxeTest, ::testing::ValuesIn(EmbeddedScenarios()),
    [](const ::testing::TestParamInfo<EmbeddedScenario>& info) {
      std::string name = info.param.file.substr(0, info.param.file.size() - 5);
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); },
          '_');
      return name;
    });

}  // namespace
}  // namespace rpma_harness
