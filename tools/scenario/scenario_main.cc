// scenario: runs a write-with-imm scenario file on the fake NIC.
//
//   bazel run //tools:scenario -- tools/scenarios/happy_path.yaml
//       [--seed N] [--trace FILE] [--replay FILE] [--timeline FILE.svg]
//       [--quiet]
//
// Prints the event log and a summary; exits 0 when every expectation holds,
// 1 when one fails (or a replay diverges), 2 on a bad command line or file.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "tools/scenario/scenario_parser.h"
#include "tools/scenario/scenario_runner.h"
#include "tools/scenario/timeline.h"

namespace {

constexpr char kUsage[] =
    "usage: scenario SCENARIO.yaml [options]\n"
    "Runs a write-with-imm scenario on the fake NIC: prints every event and a\n"
    "summary, and exits non-zero when an expectation fails.\n"
    "\n"
    "  --seed N          run with seed N instead of the file's\n"
    "  --trace FILE      write the run's trace (JSON lines) to FILE\n"
    "  --replay FILE     compare the run with a recorded trace; report the\n"
    "                    first divergence and exit 1 if there is one\n"
    "  --timeline FILE   draw the run as a sequence diagram (SVG)\n"
    "  --quiet           print only the summary\n"
    "  --help            this text\n";

// `bazel run` starts programs in their runfiles; paths the user typed are
// relative to where they typed them.
std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (cwd == nullptr || path.empty() || path[0] == '/') return path;
  return std::string(cwd) + "/" + path;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, trace, replay, timeline;
  bool quiet = false;
  rpma_harness::RunOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "scenario: %s needs a value\n%s", arg.c_str(),
                     kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (arg == "--seed") {
      std::string text = value();
      char* end = nullptr;
      options.seed = std::strtoull(text.c_str(), &end, 0);
      if (text.empty() || *end != '\0') {
        std::fprintf(stderr, "scenario: --seed takes a number, not '%s'\n",
                     text.c_str());
        return 2;
      }
    } else if (arg == "--trace") {
      trace = UserPath(value());
    } else if (arg == "--replay") {
      replay = UserPath(value());
    } else if (arg == "--timeline") {
      timeline = UserPath(value());
    } else if (arg == "--quiet") {
      quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "scenario: unknown option %s\n%s", arg.c_str(),
                   kUsage);
      return 2;
    } else if (file.empty()) {
      file = UserPath(arg);
    } else {
      std::fprintf(stderr, "scenario: one scenario file at a time\n%s", kUsage);
      return 2;
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "scenario: which scenario file?\n%s", kUsage);
    return 2;
  }
  rpma_harness::Scenario scenario;
  std::string error;
  if (!rpma_harness::ParseScenarioFile(file, &scenario, &error)) {
    std::fprintf(stderr, "scenario: %s\n", error.c_str());
    return 2;
  }
  rpma_harness::ScenarioResult result =
      rpma_harness::RunScenario(scenario, options);
  if (!quiet) {
    for (const std::string& line : result.log)
      std::printf("%s\n", line.c_str());
    std::printf("\n");
  }
  std::printf("%s", rpma_harness::Summary(result).c_str());
  int status = result.failures.empty() ? 0 : 1;
  if (!trace.empty()) {
    if (!rpma_harness::WriteTrace(result, trace, &error)) {
      std::fprintf(stderr, "scenario: %s\n", error.c_str());
      return 2;
    }
    std::printf("trace:        %s (%zu events)\n", trace.c_str(),
                result.trace.size());
  }
  if (!timeline.empty()) {
    std::ofstream out(timeline, std::ios::trunc);
    out << rpma_harness::RenderTimeline(result);
    if (!out) {
      std::fprintf(stderr, "scenario: cannot write %s\n", timeline.c_str());
      return 2;
    }
    std::printf("timeline:     %s\n", timeline.c_str());
  }
  if (!replay.empty()) {
    std::string divergence = rpma_harness::FirstDivergence(result, replay);
    if (divergence.empty()) {
      std::printf("replay:       identical to %s\n", replay.c_str());
    } else {
      std::printf("replay:       DIVERGES from %s at %s\n", replay.c_str(),
                  divergence.c_str());
      status = 1;
    }
  }
  return status;
}
