#include "tools/multiprocess/trace_merge.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tools/scenario/lanes.h"

namespace rpma_harness {

bool ParseTraceLine(const std::string& text, TraceLine* line) {
  const size_t sp1 = text.find(' ');
  if (sp1 == 0 || sp1 == std::string::npos || sp1 > 20) return false;
  for (size_t i = 0; i < sp1; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  const size_t sp2 = text.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || sp2 == sp1 + 1) return false;
  errno = 0;
  const unsigned long long ns = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  line->ns = ns;
  line->label = text.substr(sp1 + 1, sp2 - sp1 - 1);
  line->event = text.substr(sp2 + 1);
  return true;
}

bool ReadTraceFile(const std::string& path, std::vector<TraceLine>* lines,
                   std::string* error) {
  std::ifstream in(path);
  if (!in) return true;  // this process wrote no trace
  std::string text;
  size_t number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (text.empty()) continue;
    TraceLine line;
    if (!ParseTraceLine(text, &line)) {
      *error =
          path + ":" + std::to_string(number) +
          ": not a trace line (want \"<monotonic_ns> <label> <event>\"): " +
          text.substr(0, 80);
      return false;
    }
    line.order = lines->size();
    lines->push_back(std::move(line));
  }
  return true;
}

void MergeTraceLines(std::vector<TraceLine>* lines) {
  std::stable_sort(lines->begin(), lines->end(),
                   [](const TraceLine& a, const TraceLine& b) {
                     if (a.ns != b.ns) return a.ns < b.ns;
                     if (a.label != b.label) return a.label < b.label;
                     return a.order < b.order;
                   });
}

std::string FormatTrace(const std::vector<TraceLine>& lines) {
  std::string out;
  for (const TraceLine& l : lines) {
    out += std::to_string(l.ns) + " " + l.label + " " + l.event + "\n";
  }
  return out;
}

namespace {

// The value of "key=" in an event ("op=RDMA_WRITE_WITH_IMM"), or "".
std::string Field(const std::string& event, const std::string& key) {
  const size_t at = event.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 2;
  const size_t end = event.find(' ', begin);
  return event.substr(begin, end == std::string::npos ? end : end - begin);
}

// A fabric event ("#3 completion qp=... wr_id=1 op=X status=0/SUCCESS ...")
// as a short label and a colour.
void DescribeNicEvent(const std::string& event, LaneRow* row) {
  std::istringstream in(event);
  std::string seq, kind;
  in >> seq >> kind;
  const std::string op = Field(event, "op");
  const std::string wr_id = Field(event, "wr_id");
  std::string status = Field(event, "status");
  const size_t slash = status.find('/');
  status = slash == std::string::npos ? "" : status.substr(slash + 1);
  row->label = kind + (op.empty() ? "" : " " + op) +
               (wr_id.empty() || wr_id == "0" ? "" : " #" + wr_id) +
               (status.empty() || status == "SUCCESS" ? "" : " " + status);
  if (kind == "fault" || kind == "cq_overrun" || kind == "post_failed") {
    row->color = "#c62828";
    row->fault = kind == "fault";
  } else if (kind == "cm_event" || kind == "qp_state") {
    row->color = op == "ERR" || op == "DISCONNECTED" || op == "REJECTED"
                     ? "#c62828"
                     : "#546e7a";
  } else {
    row->color = StatusColor(status);
  }
}

}  // namespace

std::string RenderProcessTimeline(const std::vector<TraceLine>& lines,
                                  const std::vector<std::string>& lanes,
                                  const std::string& title, size_t max_rows) {
  LaneDiagram d;
  d.title = title;
  d.lanes = lanes;
  d.width = std::max<int>(600, 260 * static_cast<int>(lanes.size()));
  auto lane_of = [&](const std::string& label) {
    for (size_t i = 0; i < lanes.size(); ++i) {
      if (lanes[i] == label) return static_cast<int>(i);
    }
    return -1;
  };
  size_t events = 0;
  for (const TraceLine& l : lines) {
    LaneRow row;
    if (l.label == "launcher") {
      // "start LABEL ...", "ready LABEL ...", "kill LABEL ...",
      // "exit LABEL ...", "timeout LABEL".
      std::istringstream in(l.event);
      std::string verb, who;
      in >> verb >> who;
      row.from = row.to = lane_of(who);
      if (row.from < 0) continue;
      row.label = l.event.substr(verb.size() + 1 + who.size());
      row.label = verb + row.label;
      const bool bad =
          verb == "kill" || verb == "timeout" ||
          (verb == "exit" && l.event.find(" code 0") == std::string::npos);
      row.color = bad ? "#c62828" : "#546e7a";
      row.fault = verb == "kill" || verb == "timeout";
    } else {
      row.from = row.to = lane_of(l.label);
      if (row.from < 0) continue;
      DescribeNicEvent(l.event, &row);
    }
    ++events;
    if (d.rows.size() >= max_rows) {
      ++d.left_out;
      continue;
    }
    d.rows.push_back(row);
  }
  d.subtitle = std::to_string(lanes.size()) + " processes - " +
               std::to_string(events) + " events (merged on CLOCK_MONOTONIC)";
  return RenderLanes(d);
}

}  // namespace rpma_harness
