// scenario_parser_fuzz.cc: arbitrary text through ParseScenarioText.
//
// Checked: no crash, no uncaught exception (yaml-cpp throws; the parser must
// turn every exception into an error), a failure always says
// "<file>:<line>:<col>: ..." as scenario_parser.h promises, and parsing is
// deterministic. An accepted scenario gets its budget computed (no
// overflow may crash it); one that fits a small budget (with max_steps cut
// to 2000) is also run, so the runner sees hostile values too (offsets near
// 2^64, odd fault combinations): it must finish without crashing and keep
// no more events than its limit.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/fuzz/fuzz_targets.h"
#include "tools/scenario/scenario_budget.h"
#include "tools/scenario/scenario_parser.h"
#include "tools/scenario/scenario_runner.h"

namespace rpma_harness {
namespace {

[[noreturn]] void Violation(const char* what, const std::string& error) {
  fprintf(stderr, "scenario_parser_fuzz: invariant broken: %s (error: %s)\n",
          what, error.c_str());
  abort();
}

}  // namespace

int FuzzScenarioParser(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string file = "fuzz.yaml";
  Scenario first;
  std::string error;
  const bool ok = ParseScenarioText(text, file, &first, &error);
  if (!ok) {
    if (error.rfind(file + ":", 0) != 0) {
      Violation("the error does not start with the file name", error);
    }
  }
  Scenario second;
  std::string error2;
  if (ParseScenarioText(text, file, &second, &error2) != ok ||
      error2 != error) {
    Violation("two parses of the same text disagree", error);
  }
  if (!ok) return 0;
  std::string over;
  CheckBudget(first, Budget(), &over);
  Budget small;
  small.memory_bytes = 16 << 20;
  small.bytes_moved = 4 << 20;
  small.events = 4000;
  first.max_steps = std::min<uint64_t>(first.max_steps, 2000);
  if (CheckBudget(first, small, &over)) {
    RunOptions options;
    options.max_events = small.events;
    const ScenarioResult result = RunScenario(first, options);
    if (result.trace.size() > small.events) {
      Violation("the run kept more events than its limit", "");
    }
  }
  return 0;
}

}  // namespace rpma_harness
