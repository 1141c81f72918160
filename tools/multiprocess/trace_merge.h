// trace_merge.h: merges the per-process fabric traces of a multi-process run
// into one, and draws it as a timeline with one lane per process.
//
// Each process on the fabric writes lines
//     <monotonic_ns> <label> <event>
// (RPMA_HARNESS_TRACE; docs/two-processes.md, "Traces"): CLOCK_MONOTONIC is
// one clock for every process on the host, so the merge is a stable sort on
// it; ties go by label, then by the line's order in its own file. The
// launcher's own lines (label "launcher": start, ready, kill, exit) merge the
// same way.
//
//   std::vector<TraceLine> lines;
//   std::string error;
//   if (!ReadTraceFile("trace.server", &lines, &error)) ...;
//   MergeTraceLines(&lines);
//   std::string svg = RenderProcessTimeline(lines, {"server", "client0"}, "t");

#ifndef RPMA_HARNESS_TOOLS_MULTIPROCESS_TRACE_MERGE_H_
#define RPMA_HARNESS_TOOLS_MULTIPROCESS_TRACE_MERGE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace rpma_harness {

struct TraceLine {
  uint64_t ns = 0;
  std::string label;
  std::string event;  // the rest of the line
  size_t order = 0;   // position among the lines read so far
};

// Appends the lines of `path`. A missing file is no error (a process that
// never touched the NIC writes none); a malformed line is: `error` names the
// file and line number and says what is wrong.
bool ReadTraceFile(const std::string& path, std::vector<TraceLine>* lines,
                   std::string* error);

// Parses one "<ns> <label> <event>" line.
bool ParseTraceLine(const std::string& text, TraceLine* line);

// Stable sort by (ns, label, order).
void MergeTraceLines(std::vector<TraceLine>* lines);

// "<ns> <label> <event>\n" per line.
std::string FormatTrace(const std::vector<TraceLine>& lines);

// One lane per label in `lanes` (in that order); each fabric event is a mark
// on its process's lane, coloured by its status; the launcher's kill and
// exit lines are marks on the lane of the process they name (a kill as a
// cross). At most `max_rows` rows.
std::string RenderProcessTimeline(const std::vector<TraceLine>& lines,
                                  const std::vector<std::string>& lanes,
                                  const std::string& title,
                                  size_t max_rows = 600);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_MULTIPROCESS_TRACE_MERGE_H_
