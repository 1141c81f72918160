#include "tools/scenario/lanes.h"

#include <sstream>

namespace rpma_harness {
namespace {

constexpr int kTop = 90;
constexpr int kRow = 24;

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

}  // namespace

const char* StatusColor(const std::string& status) {
  if (status == "SUCCESS" || status == "ok" || status.empty()) return "#2e7d32";
  if (status == "WR_FLUSH_ERR") return "#8d6e63";
  return "#c62828";
}

std::string RenderLanes(const LaneDiagram& d) {
  const int lanes = static_cast<int>(d.lanes.size());
  std::vector<int> x = d.lane_x;
  if (static_cast<int>(x.size()) != lanes) {
    x.clear();
    const int step = lanes > 0 ? d.width / lanes : d.width;
    for (int i = 0; i < lanes; ++i) x.push_back(step / 2 + i * step);
  }
  auto lane = [&](int i) {
    return i >= 0 && i < lanes ? x[i] : x.empty() ? 0 : x[0];
  };
  const int height = kTop + static_cast<int>(d.rows.size()) * kRow + 60;
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << d.width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << d.width << " "
      << height << "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
      << "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" "
         "refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
         "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" "
         "fill=\"context-stroke\"/></marker></defs>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      << "<text x=\"20\" y=\"28\" font-size=\"18\" font-weight=\"bold\">"
      << Escape(d.title) << "</text>\n"
      << "<text x=\"20\" y=\"48\" font-size=\"12\" fill=\"#555\">"
      << Escape(d.subtitle) << "</text>\n";
  for (int i = 0; i < lanes; ++i) {
    svg << "<text x=\"" << x[i] << "\" y=\"" << kTop - 18
        << "\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">"
        << Escape(d.lanes[i]) << "</text>\n"
        << "<line x1=\"" << x[i] << "\" y1=\"" << kTop - 10 << "\" x2=\""
        << x[i] << "\" y2=\"" << height - 40
        << "\" stroke=\"#b0bec5\" stroke-width=\"2\"/>\n";
  }
  int y = kTop;
  for (const LaneRow& row : d.rows) {
    y += kRow;
    const int from = lane(row.from);
    const int to = lane(row.to);
    if (from == to) {
      if (row.fault) {
        svg << "<path d=\"M " << from - 7 << " " << y - 7 << " L " << from + 7
            << " " << y + 7 << " M " << from + 7 << " " << y - 7 << " L "
            << from - 7 << " " << y + 7 << "\" stroke=\"" << row.color
            << "\" stroke-width=\"3\"/>\n";
      } else {
        svg << "<circle cx=\"" << from << "\" cy=\"" << y
            << "\" r=\"4\" fill=\"" << row.color << "\"/>\n";
      }
      const bool right = from < d.width / 2;
      svg << "<text x=\"" << from + (right ? 12 : -12) << "\" y=\"" << y + 4
          << "\" font-size=\"11\" fill=\"" << row.color << "\" text-anchor=\""
          << (right ? "start" : "end") << "\">" << Escape(row.label)
          << "</text>\n";
      continue;
    }
    svg << "<line x1=\"" << from << "\" y1=\"" << y << "\" x2=\"" << to
        << "\" y2=\"" << y << "\" stroke=\"" << row.color
        << "\" stroke-width=\"2\" marker-end=\"url(#arrow)\""
        << (row.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n"
        << "<text x=\"" << (from + to) / 2 << "\" y=\"" << y - 5
        << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"" << row.color
        << "\">" << Escape(row.label) << "</text>\n";
  }
  if (d.left_out > 0) {
    svg << "<text x=\"20\" y=\"" << height - 15
        << "\" font-size=\"12\" fill=\"#555\">... " << d.left_out
        << " more events are in the trace</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace rpma_harness
