// scenario_parser.h: reads a scenario file (YAML) into a Scenario.
//
// Errors name the file, the line and column, and what was expected there:
//   tools/scenarios/x.yaml:12:9: fault 'deny': unknown action 'explode'
//   (expected one of: fail, complete, delay, lose_connection, overflow_cq,
//   tear)
//
//   Scenario s;
//   std::string error;
//   if (!ParseScenarioFile("tools/scenarios/happy_path.yaml", &s, &error)) ...

#ifndef RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_PARSER_H_
#define RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_PARSER_H_

#include <string>

#include "tools/scenario/scenario.h"

namespace rpma_harness {

// Parses `text` (the contents of `file_name`). On failure returns false and
// sets *error to "file:line:col: message".
bool ParseScenarioText(const std::string& text, const std::string& file_name,
                       Scenario* scenario, std::string* error);
bool ParseScenarioFile(const std::string& path, Scenario* scenario,
                       std::string* error);

// Names used in scenario files, shared with the runner's output.
const char* WcStatusShortName(ibv_wc_status status);  // "REM_ACCESS_ERR"

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_PARSER_H_
