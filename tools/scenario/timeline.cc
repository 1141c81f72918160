#include "tools/scenario/timeline.h"

#include <sstream>
#include <vector>

namespace rpma_harness {
namespace {

constexpr int kWidth = 1100;
constexpr int kTop = 90;
constexpr int kRow = 24;
constexpr int kClientApp = 150;
constexpr int kClientNic = 420;
constexpr int kServerNic = 680;
constexpr int kServerApp = 950;

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const char* Color(const std::string& status) {
  if (status == "SUCCESS" || status == "ok" || status.empty()) return "#2e7d32";
  if (status == "WR_FLUSH_ERR") return "#8d6e63";
  return "#c62828";
}

struct Row {
  int from = 0, to = 0;  // lane x positions; equal: a mark, not an arrow
  std::string label;
  std::string color;
  bool dashed = false;
  bool fault = false;
};

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
  std::vector<Row> rows;
  size_t left_out = 0;
  for (const TraceEvent& e : result.trace) {
    Row row;
    if (!ToRow(e, &row)) continue;
    if (rows.size() >= max_rows) {
      ++left_out;
      continue;
    }
    rows.push_back(row);
  }
  const int height = kTop + static_cast<int>(rows.size()) * kRow + 60;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << kWidth << " "
      << height << "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
      << "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" "
         "refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
         "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" "
         "fill=\"context-stroke\"/></marker></defs>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      << "<text x=\"20\" y=\"28\" font-size=\"18\" font-weight=\"bold\">"
      << Escape(result.name) << "</text>\n"
      << "<text x=\"20\" y=\"48\" font-size=\"12\" fill=\"#555\">seed "
      << result.seed << " - " << result.posted << " writes posted - "
      << result.failures.size() << " expectations failed</text>\n";
  const int lanes[] = {kClientApp, kClientNic, kServerNic, kServerApp};
  const char* names[] = {"client app", "client NIC", "server NIC",
                         "server app"};
  for (int i = 0; i < 4; ++i) {
    svg << "<text x=\"" << lanes[i] << "\" y=\"" << kTop - 18
        << "\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">"
        << names[i] << "</text>\n"
        << "<line x1=\"" << lanes[i] << "\" y1=\"" << kTop - 10 << "\" x2=\""
        << lanes[i] << "\" y2=\"" << height - 40
        << "\" stroke=\"#b0bec5\" stroke-width=\"2\"/>\n";
  }
  int y = kTop;
  for (const Row& row : rows) {
    y += kRow;
    if (row.from == row.to) {
      if (row.fault) {
        svg << "<path d=\"M " << row.from - 7 << " " << y - 7 << " L "
            << row.from + 7 << " " << y + 7 << " M " << row.from + 7 << " "
            << y - 7 << " L " << row.from - 7 << " " << y + 7 << "\" stroke=\""
            << row.color << "\" stroke-width=\"3\"/>\n";
      } else {
        svg << "<circle cx=\"" << row.from << "\" cy=\"" << y
            << "\" r=\"4\" fill=\"" << row.color << "\"/>\n";
      }
      const bool right = row.from < kWidth / 2;
      svg << "<text x=\"" << row.from + (right ? 12 : -12) << "\" y=\"" << y + 4
          << "\" font-size=\"11\" fill=\"" << row.color << "\" text-anchor=\""
          << (right ? "start" : "end") << "\">" << Escape(row.label)
          << "</text>\n";
      continue;
    }
    svg << "<line x1=\"" << row.from << "\" y1=\"" << y << "\" x2=\"" << row.to
        << "\" y2=\"" << y << "\" stroke=\"" << row.color
        << "\" stroke-width=\"2\" marker-end=\"url(#arrow)\""
        << (row.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n"
        << "<text x=\"" << (row.from + row.to) / 2 << "\" y=\"" << y - 5
        << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" << row.color
        << "\">" << Escape(row.label) << "</text>\n";
  }
  if (left_out > 0) {
    svg << "<text x=\"20\" y=\"" << height - 15
        << "\" font-size=\"12\" fill=\"#555\">... " << left_out
        << " more events are in the trace</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace rpma_harness
