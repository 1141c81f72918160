#include "tools/scenario/timeline.h"

#include <string>

#include "tools/scenario/lanes.h"

namespace rpma_harness {
namespace {

// Lane indices of the four-lane picture (x positions: RenderTimeline).
constexpr int kClientApp = 0;
constexpr int kClientNic = 1;
constexpr int kServerNic = 2;
constexpr int kServerApp = 3;

const char* Color(const std::string& status) { return StatusColor(status); }

using Row = LaneRow;

// Which rows an event draws; events that add nothing to the picture (the
// NIC's own acceptance of a post the app row already shows) draw none.
bool ToRow(const TraceEvent& e, Row* row) {
  const bool client = e.side == "client";
  const int app = client ? kClientApp : kServerApp;
  const int nic = client ? kClientNic : kServerNic;
  const std::string conn =
      e.connection > 1 ? " [c" + std::to_string(e.connection) + "]" : "";
  if (e.kind == "app") {
    if (e.what == "rpma_mr_reg" || e.what == "rpma_mr_remote_from_descriptor") {
      return false;
    }
    row->from = app;
    row->to = e.what.rfind("rpma_conn_next_event", 0) == 0 ? app : nic;
    row->label = e.what + (e.wr_id ? " #" + std::to_string(e.wr_id) : "") +
                 (e.status == "ok" ? "" : " -> " + e.status) + conn;
    row->color = Color(e.status);
    return true;
  }
  if (e.kind == "execute") {
    row->from = kClientNic;
    row->to = kServerNic;
    row->label = e.what + " #" + std::to_string(e.wr_id) + " " +
                 std::to_string(e.bytes) + " B" +
                 (e.status == "SUCCESS" ? "" : " " + e.status) + conn;
    row->color = Color(e.status);
    return true;
  }
  if (e.kind == "rnr_nak") {
    row->from = kServerNic;
    row->to = kClientNic;
    row->label = "RNR NAK #" + std::to_string(e.wr_id) + conn;
    row->color = "#ef6c00";
    row->dashed = true;
    return true;
  }
  if (e.kind == "completion") {
    row->from = nic;
    row->to = app;
    row->label =
        e.what + " " + e.status + " #" + std::to_string(e.wr_id) + conn;
    row->color = Color(e.status);
    row->dashed = true;
    return true;
  }
  if (e.kind == "fault" || e.kind == "cq_overrun") {
    row->from = row->to = e.side.empty() ? kClientNic : nic;
    row->label =
        (e.kind == "cq_overrun" ? std::string("CQ overrun") : e.text) + conn;
    row->color = "#c62828";
    row->fault = true;
    return true;
  }
  if (e.kind == "crash") {
    // The crash checker's violating crash point (crash: in the scenario).
    row->from = row->to = kServerApp;
    row->label = "CRASH " +
                 (e.text.size() > 110 ? e.text.substr(0, 107) + "..." : e.text);
    row->color = "#b71c1c";
    row->fault = true;
    return true;
  }
  if (e.kind == "cm_event" || e.kind == "qp_state") {
    // An event of no QP's id is the listener's: the server's side.
    row->from = row->to = e.side.empty() ? kServerNic : nic;
    row->label = (e.kind == "qp_state" ? "QP -> " : "CM ") + e.what + conn;
    row->color = "#546e7a";
    return true;
  }
  return false;
}

}  // namespace

std::string RenderTimeline(const ScenarioResult& result, size_t max_rows) {
  LaneDiagram d;
  d.title = result.name;
  d.subtitle = "seed " + std::to_string(result.seed) + " - " +
               std::to_string(result.posted) + " writes posted - " +
               std::to_string(result.failures.size()) + " expectations failed";
  d.lanes = {"client app", "client NIC", "server NIC", "server app"};
  d.lane_x = {150, 420, 680, 950};
  d.width = 1100;
  for (const TraceEvent& e : result.trace) {
    Row row;
    if (!ToRow(e, &row)) continue;
    if (d.rows.size() >= max_rows) {
      ++d.left_out;
      continue;
    }
    d.rows.push_back(row);
  }
  return RenderLanes(d);
}

}  // namespace rpma_harness
