// The faults file (RPMA_HARNESS_FAULTS, faults/fault_file.h, no yaml-cpp) and
// the scenario parser (yaml-cpp) read the same `faults:` list into the same
// rules and refuse the same mistakes with the same message at the same
// place: both go through faults/fault_rule_text.h.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "faults/fault_file.h"
#include "tools/scenario/scenario_parser.h"

namespace rpma_harness {
namespace {

// A scenario whose faults: list starts on line 5, the same lines in both.
const char kHead[] =
    "name: parity\n"
    "workload:\n"
    "  - write_with_imm: {size: 8}\n"
    "seed: 3\n";

struct Both {
  bool scenario_ok, file_ok;
  std::string scenario_error, file_error;
  Scenario scenario;
  FaultFile file;
};

Both Parse(const std::string& faults) {
  Both b;
  const std::string text = kHead + faults;
  b.scenario_ok =
      ParseScenarioText(text, "p.yaml", &b.scenario, &b.scenario_error);
  b.file_ok = ParseFaultFileText(text, "p.yaml", &b.file, &b.file_error);
  return b;
}

TEST(FaultFileParityTest, TheSameRulesFromTheSameList) {
  const Both b = Parse(
      "faults:\n"
      "  - name: 'deny'\n"
      "    on: execute\n"
      "    opcode: write_with_imm\n"
      "    every: 2\n"
      "    max_fires: 3\n"
      "    min_length: 1\n"
      "    max_length: 0x100\n"
      "    action: complete\n"
      "    status: REM_ACCESS_ERR\n"
      "  - name: \"slow\"\n"
      "    on: execute\n"
      "    probability: 0.5\n"
      "    action: delay\n"
      "    steps: 4\n");
  ASSERT_TRUE(b.scenario_ok) << b.scenario_error;
  ASSERT_TRUE(b.file_ok) << b.file_error;
  ASSERT_EQ(b.scenario.faults.size(), b.file.faults.size());
  for (size_t i = 0; i < b.file.faults.size(); ++i) {
    const FaultRule& x = b.scenario.faults[i];
    const FaultRule& y = b.file.faults[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.call, y.call);
    EXPECT_EQ(x.action, y.action);
    EXPECT_EQ(x.opcode, y.opcode);
    EXPECT_EQ(x.every, y.every);
    EXPECT_EQ(x.max_fires, y.max_fires);
    EXPECT_EQ(x.min_length, y.min_length);
    EXPECT_EQ(x.max_length, y.max_length);
    EXPECT_EQ(x.status, y.status);
    EXPECT_EQ(x.probability, y.probability);
    EXPECT_EQ(x.delay_steps, y.delay_steps);
  }
  EXPECT_EQ(b.file.seed, b.scenario.seed);
}

TEST(FaultFileParityTest, TheSameMistakesTheSameMessages) {
  const std::vector<std::string> mistakes = {
      "faults:\n  - name: a\n    on: nowhere\n    action: fail\n",
      "faults:\n  - name: a\n    on: reg_mr\n    action: fail\n",
      "faults:\n  - name: a\n    on: reg_mr\n    action: fail\n"
      "    errno: 0\n",
      "faults:\n  - name: a\n    on: reg_mr\n    action: fail\n"
      "    errno: EWHAT\n",
      "faults:\n  - name: a\n    on: execute\n    action: complete\n",
      "faults:\n  - name: a\n    on: execute\n    action: complete\n"
      "    status: NOPE\n",
      "faults:\n  - name: a\n    on: execute\n    nth: 0\n"
      "    action: delay\n    steps: 1\n",
      "faults:\n  - name: a\n    on: execute\n    nth: 010\n"
      "    action: delay\n    steps: 1\n",
      "faults:\n  - name: a\n    on: execute\n    probability: 1.5\n"
      "    action: delay\n    steps: 1\n",
      "faults:\n  - name: a\n    on: execute\n    min_length: 9\n"
      "    max_length: 8\n    action: delay\n    steps: 1\n",
      "faults:\n  - name: a\n    on: execute\n    action: tear\n",
      "faults:\n  - name: a\n    on: execute\n    action: delay\n"
      "    steps: 1\n    bogus: 1\n",
      "faults:\n  - name: a\n    on: execute\n    action: delay\n"
      "    steps: 1\n    steps: 2\n",
      "faults:\n  - name: a\n    on: execute\n    action: delay\n"
      "    steps:\n",
      "faults:\n  - on: execute\n    action: delay\n",
      "faults:\n  - name: a\n    action: delay\n",
      "faults:\n  - name: a\n    on: reg_mr\n    action: overflow_cq\n",
      "faults:\n  - name: a\n    on: reg_mr\n    action: fail\n"
      "    errno: EIO\n  - name: a\n    on: reg_mr\n    action: fail\n"
      "    errno: EIO\n",
  };
  for (const std::string& m : mistakes) {
    const Both b = Parse(m);
    EXPECT_FALSE(b.scenario_ok) << m;
    EXPECT_FALSE(b.file_ok) << m;
    EXPECT_EQ(b.file_error, b.scenario_error) << m;
  }
}

}  // namespace
}  // namespace rpma_harness
