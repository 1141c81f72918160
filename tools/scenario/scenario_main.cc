// scenario: runs a write-with-imm scenario file on the fake NIC, or on a
// real one through rdma-core.
//
//   bazel run //tools:scenario -- tools/scenarios/happy_path.yaml
//       [--seed N] [--trace FILE] [--replay FILE] [--timeline FILE.svg]
//       [--budget N] [--quiet] [--backend fake|rdma-core] [--address ADDR]
//
// Prints the event log and a summary; exits 0 when every expectation holds,
// 1 when one fails (or a replay diverges), 2 on a bad command line, a file
// that cannot be used (missing, unreadable, a directory, too large, not
// valid), or a scenario over its budget (scenario_budget.h), 3 when the
// backend cannot host one of the scenario's faults (skipped; it says why).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "faults/fault_file.h"
#include "rpma_harness_version.h"
#include "tools/scenario/scenario_budget.h"
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
    "  --budget N        allow N times the default resource budget (memory\n"
    "                    1 GiB, 16 GiB moved, 1 M events; N from 1 to 1024)\n"
    "  --quiet           print only the summary\n"
    "  --backend B       fake (default) or rdma-core: the real NIC that owns\n"
    "                    --address (default $RPMA_HARNESS_BACKEND, else "
    "fake);\n"
    "                    faults that need the fake NIC skip the scenario\n"
    "  --address ADDR    rdma-core: a local address of the RDMA device (both\n"
    "                    ends use it; default $RPMA_HARNESS_VM_ADDR)\n"
    "  --check[=LIST]    run under the usage checker (all checks, or the\n"
    "                    comma-separated LIST); findings are in the summary\n"
    "  --strict          any usage-checker finding fails the run (implies\n"
    "                    --check unless the scenario or --check= says which)\n"
    "  --check-faults FILE  only parse FILE as an RPMA_HARNESS_FAULTS file:\n"
    "                    print its rules' names and exit 0, or the error and\n"
    "                    exit 2 (no scenario is run)\n"
    "  --version         print the harness version and exit\n"
    "  --help            this text\n"
    "\n"
    "Exit status: 0 every expectation held, 1 one failed or the replay\n"
    "diverges, 2 a usage error, an unusable or invalid file, or a scenario\n"
    "over its budget, 3 skipped: the backend cannot host one of its faults.\n";

// `bazel run` starts programs in their runfiles; paths the user typed are
// relative to where they typed them.
std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (cwd == nullptr || path.empty() || path[0] == '/') return path;
  return std::string(cwd) + "/" + path;
}

// An input file must exist, be readable and not be a directory; checked
// before the run so that a typo is a usage error, not a failed replay.
bool CheckReadable(const std::string& option, const std::string& path) {
  const int fd =
      rpma_harness::OpenForReading(path);  // a FIFO nobody writes: no wait
  if (fd < 0) {
    std::fprintf(stderr, "scenario: %s %s: cannot open: %s\n", option.c_str(),
                 path.c_str(), std::strerror(errno));
    return false;
  }
  struct stat st;
  const bool dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  close(fd);
  if (dir) {
    std::fprintf(stderr, "scenario: %s %s: is a directory\n", option.c_str(),
                 path.c_str());
    return false;
  }
  return true;
}

// An output file must not be a directory (checked before the run).
bool CheckWritable(const std::string& option, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "scenario: %s %s: is a directory\n", option.c_str(),
                 path.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, trace, replay, timeline;
  bool quiet = false;
  uint64_t budget_factor = 1;
  rpma_harness::RunOptions options;
  if (const char* env = std::getenv("RPMA_HARNESS_BACKEND")) {
    if (*env != '\0') options.backend = env;
  }
  // env RPMA_HARNESS_VM_ADDR=ADDR: with the rdma-core backend, a local
  //   address of the RDMA device: the scenario runner's default --address, and
  //   where the rdma-core test fixtures listen (tools/softroce_vm sets
  //   192.168.77.1 in its VM).
  if (const char* env = std::getenv("RPMA_HARNESS_VM_ADDR")) {
    options.address = env;
  }
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
    } else if (arg == "--check-faults") {
      // The same parser the default backend runs on RPMA_HARNESS_FAULTS.
      const std::string path = UserPath(value());
      rpma_harness::FaultFile faults;
      std::string why;
      if (!rpma_harness::ReadFaultFile(path, &faults, &why)) {
        std::fprintf(stderr, "scenario: --check-faults: %s\n", why.c_str());
        return 2;
      }
      std::printf("%s: %zu fault rule%s\n", path.c_str(), faults.faults.size(),
                  faults.faults.size() == 1 ? "" : "s");
      for (const rpma_harness::FaultRule& rule : faults.faults) {
        std::printf("  %s\n", rule.name.c_str());
      }
      for (const std::string& key : faults.ignored_keys) {
        std::printf("  ignored key: %s\n", key.c_str());
      }
      return 0;
    } else if (arg == "--version") {
      std::printf("rpma-harness scenario %s\n", RPMA_HARNESS_VERSION);
      return 0;
    } else if (arg == "--seed" || arg == "--budget") {
      // The same number rules as in a scenario file.
      const std::string text = value();
      const bool budget = arg == "--budget";
      uint64_t n = 0;
      std::string why;
      if (!rpma_harness::ParseUnsignedNumber(
              text, budget ? rpma_harness::kMaxBudgetFactor : UINT64_MAX, &n,
              &why)) {
        std::fprintf(stderr, "scenario: %s: %s\n", arg.c_str(), why.c_str());
        return 2;
      }
      if (budget && n == 0) {
        std::fprintf(stderr, "scenario: --budget: must be at least 1\n");
        return 2;
      }
      if (budget) {
        budget_factor = n;
      } else {
        options.seed = n;
      }
    } else if (arg == "--trace") {
      trace = UserPath(value());
    } else if (arg == "--replay") {
      replay = UserPath(value());
    } else if (arg == "--timeline") {
      timeline = UserPath(value());
    } else if (arg == "--quiet") {
      quiet = true;
    } else if (arg == "--backend") {
      options.backend = value();
    } else if (arg == "--address") {
      options.address = value();
    } else if (arg == "--check") {
      options.check = "all";
    } else if (arg.rfind("--check=", 0) == 0) {
      options.check = arg.substr(8);
    } else if (arg == "--strict") {
      options.strict = true;  // checks "all" unless --check or check: say
                              // (scenario_runner.cc)
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
  if (options.backend != "fake" && options.backend != "rdma-core") {
    std::fprintf(stderr,
                 "scenario: --backend %s: neither fake nor rdma-core\n%s",
                 options.backend.c_str(), kUsage);
    return 2;
  }
  if (options.backend == "rdma-core" && options.address.empty()) {
    std::fprintf(stderr,
                 "scenario: --backend rdma-core needs --address (a local "
                 "address of the RDMA device) or RPMA_HARNESS_VM_ADDR\n");
    return 2;
  }
  if ((!replay.empty() && !CheckReadable("--replay", replay)) ||
      (!trace.empty() && !CheckWritable("--trace", trace)) ||
      (!timeline.empty() && !CheckWritable("--timeline", timeline))) {
    return 2;
  }
  rpma_harness::Scenario scenario;
  std::string error;
  if (!rpma_harness::ParseScenarioFile(file, &scenario, &error)) {
    std::fprintf(stderr, "scenario: %s\n", error.c_str());
    return 2;
  }
  const rpma_harness::Budget budget =
      rpma_harness::Budget().Scaled(budget_factor);
  if (!rpma_harness::CheckBudget(scenario, budget, &error)) {
    std::fprintf(stderr, "scenario: %s\n", error.c_str());
    return 2;
  }
  options.max_events = budget.events;
  rpma_harness::ScenarioResult result =
      rpma_harness::RunScenario(scenario, options);
  if (!quiet) {
    for (const std::string& line : result.log)
      std::printf("%s\n", line.c_str());
    std::printf("\n");
  }
  std::printf("%s", rpma_harness::Summary(result).c_str());
  if (result.skipped) return 3;
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
    bool unusable = false;
    std::string divergence =
        rpma_harness::FirstDivergence(result, replay, &unusable);
    if (unusable) {
      std::fprintf(stderr, "scenario: --replay %s\n", divergence.c_str());
      return 2;
    }
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
