// launcher.h: runs a librpma server program and N client programs as
// separate processes on one fresh fake-NIC fabric, and judges the run.
//
// Each process gets RPMA_HARNESS_FABRIC=<fresh dir>,
// RPMA_HARNESS_PROCESS_NAME=<label> ("server", "client0", "client1", ...)
// and, when a trace or timeline is asked for, RPMA_HARNESS_TRACE=<its own
// file>; its stdout and stderr come out line by line as "[label] line". The
// clients start once the server is ready: by default when the fabric
// directory holds a listener endpoint (`l-*`, nic/fake_nic_fabric.h), or when
// a server output line matches a pattern, or after a delay. Each process runs
// in its own process group; on the overall timeout every group still running
// is killed with SIGKILL and the run fails naming who hung. The run passes
// when every process ends as expected (exit 0 unless --expect says
// otherwise; a process killed by a kill rule is expected to die by it); a
// process that was never started (fork failed, or the server never became
// ready) fails it.
//
// Faults at the process level: kill rules (`LABEL@MS`: MS after LABEL
// started; `LABEL@/REGEX/`: when any labelled output line "[who] text"
// matches REGEX) -- the kill_peer. NIC-level faults in another
// process are the fake's business (issue 9: a FaultInjector over any
// backend); the seam for them is LaunchOptions::process_env, which the
// launcher passes to every process unchanged.
//
//   LaunchOptions o;
//   o.processes = {{"server", {"bin/server", "10.0.0.1", "7000"}},
//                  {"client0", {"bin/client", "10.0.0.1", "7000"}}};
//   LaunchResult r = Launch(o, std::cout);
//   return r.pass ? 0 : 1;

#ifndef RPMA_HARNESS_TOOLS_MULTIPROCESS_LAUNCHER_H_
#define RPMA_HARNESS_TOOLS_MULTIPROCESS_LAUNCHER_H_

#include <regex.h>

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tools/multiprocess/trace_merge.h"

namespace rpma_harness {

struct ProcessSpec {
  std::string label;
  std::vector<std::string> argv;  // argv[0] is the program (PATH is searched)
};

struct KillRule {
  std::string victim;    // a label
  int at_ms = -1;        // >= 0: this long after the victim started
  int64_t at_step = -1;  // >= 0 (sequenced runs): once the fabric granted
                         // this many steps and the victim waits
  std::string pattern;   // else: a POSIX extended regex on "[label] line"
  int signal = 9;        // SIGKILL
  std::string text;      // the rule as the user wrote it (for messages)
};

// What a process must end with: "0" (default), a number, "nonzero", "any".
struct Expectation {
  std::string label;
  std::string want;
};

enum class ReadyRule { kListen, kLine, kDelay, kNone };

// TEST_TMPDIR, TMPDIR or /tmp: the first that is set and not empty.
std::string DefaultTmpRoot();

struct LaunchOptions {
  std::vector<ProcessSpec> processes;  // [0]: the server
  ReadyRule ready = ReadyRule::kListen;
  std::string ready_line;  // kLine: regex on the server's output
  int start_delay_ms = 0;  // kDelay
  int timeout_ms = 60000;  // the whole run
  // After a process ends unexpectedly, the others get this long before they
  // are killed (so a failed server does not leave its clients to the
  // overall timeout).
  int grace_ms = 5000;
  std::vector<KillRule> kills;
  std::vector<Expectation> expectations;
  bool want_trace = false;  // set RPMA_HARNESS_TRACE and merge
  // Where the run's work directory (fabric, traces) is made: the test's
  // TEST_TMPDIR under `bazel test` (a test writes nowhere else), else
  // $TMPDIR, else /tmp. Any length works (nic/unix_address.h).
  std::string tmp_root = DefaultTmpRoot();
  bool keep_dir = false;
  std::vector<std::pair<std::string, std::string>> process_env;
  // One process's own environment, set after process_env: (label, K, V)
  // (the launcher's --faults LABEL=FILE: RPMA_HARNESS_FAULTS=FILE).
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>>
      label_env;
  // The fabric's sequenced mode (nic/fake_nic_fabric_sequence.h): the
  // launcher runs the Sequencer with this seed, every process gets
  // RPMA_HARNESS_FABRIC_SEQUENCE=<seed> and runs without address-space
  // randomisation (personality(2) ADDR_NO_RANDOMIZE: the same addresses in
  // its records every run); the launcher's own trace lines carry the step
  // number and no pid. A fabric deadlock fails the run with the
  // Sequencer's report (who waits where) and kills every process.
  bool sequenced = false;
  uint64_t sequence_seed = 0;
  // Testing seam: the process with this label is not forked, as if fork(2)
  // had failed with EAGAIN.
  std::string fail_fork_for;
  // Testing seam (--pause-after-fork MS): the launcher sleeps this long
  // after each fork, before it records the start, as a loaded machine may
  // keep it off the CPU. A sequenced run's trace must not change with it.
  int pause_after_fork_ms = 0;
};

struct ProcessOutcome {
  std::string label;
  int pid = -1;
  bool started = false;
  bool exited = false;  // normal exit (code valid)
  int code = 0;
  int signal = 0;  // killed by this signal
  bool killed_by_rule = false;
  bool killed_by_timeout = false;
  bool killed_by_grace = false;
  bool killed_by_deadlock = false;  // sequenced: the fabric deadlocked
  std::string verdict;              // "" when it ended as expected
};

struct LaunchResult {
  bool pass = false;
  std::vector<ProcessOutcome> outcomes;
  std::vector<std::string> failures;  // one sentence each
  std::vector<TraceLine> trace;       // merged, when want_trace
  std::string work_dir;               // removed unless keep_dir
};

// A POSIX extended regular expression (regcomp(3) REG_EXTENDED), searched
// anywhere in a line.
class LineRegex {
 public:
  LineRegex() = default;
  LineRegex(LineRegex&&) = default;
  LineRegex& operator=(LineRegex&&) = delete;  // would leak a compiled regex
  // False with `error` saying why when `pattern` does not compile.
  bool Compile(const std::string& pattern, std::string* error);
  bool Search(const std::string& line) const;
  ~LineRegex();

 private:
  std::unique_ptr<regex_t> re_;
};

// Parses "LABEL@MS", "LABEL@/REGEX/" or "LABEL@step:N"; false with `error`
// set otherwise.
bool ParseKillRule(const std::string& text, KillRule* rule, std::string* error);

// Runs the processes; writes their labelled output and the launcher's own
// "launcher: ..." lines to `out`.
LaunchResult Launch(const LaunchOptions& options, std::ostream& out);

// How many process groups the stop-signal handler would SIGKILL now (0 once
// Launch has returned: each is forgotten when its leader is reaped).
int RecordedProcessGroupsForTesting();

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_MULTIPROCESS_LAUNCHER_H_
