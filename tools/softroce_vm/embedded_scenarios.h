// embedded_scenarios.h: the shipped scenarios (tools/scenarios/*.yaml)
// compiled into the binary, for the soft-RoCE VM where only binaries travel.

#ifndef RPMA_HARNESS_TOOLS_SOFTROCE_VM_EMBEDDED_SCENARIOS_H_
#define RPMA_HARNESS_TOOLS_SOFTROCE_VM_EMBEDDED_SCENARIOS_H_

#include <string>
#include <vector>

namespace rpma_harness {

struct EmbeddedScenario {
  std::string file;  // e.g. "happy_path.yaml"
  std::string text;  // the file's content
};

// Sorted by file name (the glob's order).
const std::vector<EmbeddedScenario>& EmbeddedScenarios();

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SOFTROCE_VM_EMBEDDED_SCENARIOS_H_
