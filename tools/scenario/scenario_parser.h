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

#include <cstddef>
#include <cstdint>
#include <string>

#include "faults/fault_rule_text.h"
#include "tools/scenario/scenario.h"

namespace rpma_harness {

// Limits on the file itself (what it asks the runner to do is bounded by
// the budget, scenario_budget.h). The largest shipped scenario is under
// 1 KiB; 64 KiB of YAML parses in a few MB of yaml-cpp nodes.
constexpr size_t kMaxScenarioFileBytes = 64 * 1024;
constexpr size_t kMaxWorkloadItems = 256;  // `count:` repeats a write
// kMaxFaults: faults/fault_rule_text.h.

// Parses `text` (the contents of `file_name`). On failure returns false and
// sets *error to "file:line:col: message".
bool ParseScenarioText(const std::string& text, const std::string& file_name,
                       Scenario* scenario, std::string* error);
// Reads at most kMaxScenarioFileBytes; a missing or unreadable file, a
// directory or a larger file is "path: message" (no line: the file is not
// a scenario at all).
bool ParseScenarioFile(const std::string& path, Scenario* scenario,
                       std::string* error);

// ParseUnsignedNumber, ParseProbability: faults/fault_rule_text.h.

// open(path) for reading without blocking on a FIFO nobody writes, then
// back to blocking reads: a pipe with a writer (`<(...)`) is read to its
// end, a FIFO nobody writes reads as empty. The fd, or -1 with errno.
int OpenForReading(const std::string& path);

// Reads the whole of `path` if it is at most `max_bytes`; false with
// "path: message" for a missing, unreadable or larger file or a directory
// (`what` names the expected kind of file, e.g. "a scenario file").
bool ReadBoundedFile(const std::string& path, size_t max_bytes,
                     const char* what, std::string* text, std::string* error);

// Names used in scenario files, shared with the runner's output.
const char* WcStatusShortName(ibv_wc_status status);  // "REM_ACCESS_ERR"

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_PARSER_H_
