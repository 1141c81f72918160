// replay_trace_fuzz.cc: arbitrary bytes as the recording of the scenario
// runner's `--replay FILE` (FirstDivergence, tools/scenario/scenario_runner.h),
// compared with one fixed run of a small scenario.
//
// The first input byte picks what the recording is:
//   even: the rest of the input, as it is;
//   odd:  the run's own trace (WriteTrace's bytes) with the rest of the
//         input written over it at an offset the second byte picks, or
//         appended -- a real recording, damaged.
// The recording is a memfd, reached by its /proc/self/fd path (no files).
// Checked (a violation aborts):
//   - no crash, no uncaught exception; memory bounded (streamed lines of at
//     most kMaxTraceLineBytes: a longer line is "unusable", never stored);
//   - the run's own trace, unchanged, replays with no divergence, and no
//     other recording does (but the same without its last newline);
//   - a divergence names a line: "line N..." with N at most one past the
//     recording's line count, or, when the recording is unusable, the path
//     and why (only a line longer than the bound can make it so here);
//   - the same recording gives the same answer twice.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/fuzz/fuzz_targets.h"
#include "tools/scenario/scenario_parser.h"
#include "tools/scenario/scenario_runner.h"

namespace rpma_harness {
namespace {

[[noreturn]] void Violation(const char* what, const std::string& detail) {
  fprintf(stderr, "replay_trace_fuzz: invariant broken: %s (%s)\n", what,
          detail.c_str());
  abort();
}

// One run of a scenario small enough to replay thousands of times a second,
// with completions on both sides: the trace has a few dozen lines.
const ScenarioResult& TheRun() {
  static const ScenarioResult* run = [] {
    Scenario s;
    std::string error;
    const char* text =
        "name: replay_fuzz\n"
        "workload:\n"
        "  - write_with_imm: {count: 3, size: 64}\n"
        "  - write_with_imm: {count: 1, size: 4096, dst_offset: 8192}\n";
    if (!ParseScenarioText(text, "replay_fuzz.yaml", &s, &error)) {
      Violation("the fixed scenario does not parse", error);
    }
    return new ScenarioResult(RunScenario(s, RunOptions{}));
  }();
  return *run;
}

std::string TraceBytes(const ScenarioResult& r) {
  std::string bytes;
  for (const TraceEvent& e : r.trace) bytes += e.json + "\n";
  return bytes;
}

// The recording in a memfd; its path, or "" when the kernel refuses.
class Recording {
 public:
  explicit Recording(const std::string& bytes) {
    fd_ = memfd_create("replay-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) return;
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~Recording() {
    if (fd_ >= 0) close(fd_);
  }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

void CheckAnswer(const std::string& own, const std::string& bytes,
                 const std::string& path, const std::string& answer,
                 bool unusable) {
  if (answer.empty()) {
    if (unusable) Violation("unusable but no reason given", path);
    // No divergence: the recording is the run's trace (its last newline
    // may be missing), nothing else.
    if (bytes != own && bytes + "\n" != own) {
      Violation("a different recording replays as identical", bytes);
    }
    return;
  }
  if (unusable) {
    if (answer.rfind(path + ": ", 0) != 0) {
      Violation("an unusable recording's reason does not name it", answer);
    }
    if (answer.find("longer than") == std::string::npos) {
      Violation("a memfd recording unusable for another reason", answer);
    }
    return;
  }
  if (answer.rfind("line ", 0) != 0) {
    Violation("a divergence does not start with its line", answer);
  }
  const long line = std::strtol(answer.c_str() + 5, nullptr, 10);
  const size_t lines =
      static_cast<size_t>(std::count(bytes.begin(), bytes.end(), '\n')) + 1;
  if (line < 1 || static_cast<size_t>(line) > lines + 1) {
    Violation("a divergence names a line beyond the recording", answer);
  }
}

}  // namespace

int FuzzReplayTrace(const uint8_t* data, size_t size) {
  const ScenarioResult& run = TheRun();
  const std::string own = TraceBytes(run);
  static bool own_checked = false;
  if (!own_checked) {
    Recording same(own);
    if (same.path().empty()) return 0;
    bool unusable = true;
    const std::string answer = FirstDivergence(run, same.path(), &unusable);
    if (!answer.empty() || unusable) {
      Violation("the run's own trace does not replay", answer);
    }
    own_checked = true;
  }
  if (size == 0) return 0;
  std::string bytes;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    bytes = rest;
  } else {
    bytes = own;
    const size_t at = size > 1 ? (data[1] * own.size()) / 255 : own.size();
    const std::string patch = size > 2 ? rest.substr(1) : std::string();
    bytes.replace(std::min(at, bytes.size()),
                  std::min(patch.size(), bytes.size() - std::min(at, bytes.size())),
                  patch);
  }
  Recording recording(bytes);
  if (recording.path().empty()) return 0;
  bool unusable = false;
  const std::string answer =
      FirstDivergence(run, recording.path(), &unusable);
  CheckAnswer(own, bytes, recording.path(), answer, unusable);
  bool unusable2 = false;
  if (FirstDivergence(run, recording.path(), &unusable2) != answer ||
      unusable2 != unusable) {
    Violation("two replays of one recording disagree", answer);
  }
  return 0;
}

}  // namespace rpma_harness
