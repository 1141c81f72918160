// timeline.h: draws a scenario run as a sequence diagram (SVG): the client
// application, the client's NIC, the server's NIC and the server
// application as four lanes, time flowing down; posts, data movements,
// completions, connection events and fired faults as arrows and marks.
//
//   std::string svg = RenderTimeline(result);

#ifndef RPMA_HARNESS_TOOLS_SCENARIO_TIMELINE_H_
#define RPMA_HARNESS_TOOLS_SCENARIO_TIMELINE_H_

#include <string>

#include "tools/scenario/scenario_runner.h"

namespace rpma_harness {

// A self-contained SVG document. Long runs are cut after `max_rows` rows,
// with a note saying how many events were left out.
std::string RenderTimeline(const ScenarioResult& result, size_t max_rows = 600);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_TIMELINE_H_
