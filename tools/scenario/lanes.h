// lanes.h: a sequence diagram as SVG -- named vertical lanes, time flowing
// down, one row per event: an arrow from one lane to another, or a mark (a
// dot, or a cross for a fault) on one lane. The scenario timeline
// (timeline.h: four lanes, client app to server app) and the multi-process
// launcher's timeline (tools/multiprocess: one lane per process) both draw
// with it.
//
//   LaneDiagram d;
//   d.title = "two processes";
//   d.lanes = {"server", "client0"};
//   d.rows.push_back({1, 0, "WRITE_WITH_IMM #1", "#2e7d32"});
//   std::string svg = RenderLanes(d);

#ifndef RPMA_HARNESS_TOOLS_SCENARIO_LANES_H_
#define RPMA_HARNESS_TOOLS_SCENARIO_LANES_H_

#include <string>
#include <vector>

namespace rpma_harness {

struct LaneRow {
  int from = 0, to = 0;  // lane indices; equal: a mark, not an arrow
  std::string label;
  std::string color;
  bool dashed = false;  // a dashed arrow (a completion, a NAK)
  bool fault = false;   // a mark drawn as a cross
};

struct LaneDiagram {
  std::string title;
  std::string subtitle;
  std::vector<std::string> lanes;
  // Each lane's x position; empty: spread evenly over `width`.
  std::vector<int> lane_x;
  int width = 1100;
  std::vector<LaneRow> rows;
  size_t left_out = 0;  // rows not drawn (said in a note at the bottom)
};

// A self-contained SVG document. Text is escaped; a row naming a lane that
// does not exist is drawn on the first lane.
std::string RenderLanes(const LaneDiagram& diagram);

// The colour the timelines give a status: green for success, brown for a
// flush, red for anything else.
const char* StatusColor(const std::string& status);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_LANES_H_
