// scenario_parser_fuzz.cc: arbitrary text through ParseScenarioText.
//
// Checked: no crash, no uncaught exception (yaml-cpp throws; the parser must
// turn every exception into an error), a failure always says
// "<file>:<line>:<col>: ..." as scenario_parser.h promises, and parsing is
// deterministic.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/fuzz/fuzz_targets.h"
#include "tools/scenario/scenario_parser.h"

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
  return 0;
}

}  // namespace rpma_harness
