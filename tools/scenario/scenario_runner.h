// scenario_runner.h: plays a Scenario on the fake NIC (or on a real one
// through rdma-core) through the rpma API and says what happened.
//
// On the fake the run is single-threaded and drives the NIC one step at a
// time, so with the same scenario and seed every event happens in the same
// order: the trace (one JSON object per line) is byte-identical run after
// run. On rdma-core (RunOptions::backend) the NIC runs on its own: the runner
// polls against the wall clock, the trace holds the program's calls and the
// completions it polled (no NIC-internal events), and a scenario whose
// faults need the fake (FaultNeedsFakeNic) is skipped with the reason.
//
//   Scenario s = ...;
//   ScenarioResult r = RunScenario(s, RunOptions{});
//   if (!r.failures.empty()) ...   // expectations not met
//   WriteTrace(r, "run.jsonl");

#ifndef RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_RUNNER_H_
#define RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/scenario/scenario.h"

namespace rpma_harness {

struct RunOptions {
  std::optional<uint64_t> seed;  // overrides the scenario's
  // Events kept at most (0: no limit); a run that would keep more stops
  // keeping them and fails. The command line sets the budget's figure.
  uint64_t max_events = 0;
  // "fake" (default) or "rdma-core": the real NIC that owns `address`.
  std::string backend = "fake";
  // rdma-core only: the local address both ends use (one process, loopback
  // through the NIC, as the soft-RoCE VM's tests do).
  std::string address;
  // rdma-core only: how long the NIC may stay silent before the runner
  // takes the run as finished, and the most any wait may take.
  uint64_t quiet_ms = 500;
  uint64_t wait_limit_ms = 30000;
  // Overrides the scenario's `check:` ("all" or check names; "" disables).
  std::optional<std::string> check;
  // Any usage-checker finding fails the run (unless the scenario's
  // expect.findings names it).
  bool strict = false;
};

// A trace line longer than this is not one --trace wrote.
constexpr size_t kMaxTraceLineBytes = 64 * 1024;

// One line of the trace, kept structured for the timeline.
struct TraceEvent {
  uint64_t seq = 0;
  std::string kind;  // post_send, post_recv, execute, completion, cm_event,
                     // qp_state, fault, rnr_nak, cq_overrun, app, crash
                     // (the crash checker's violating crash point)
  std::string side;  // "client" or "server" (or "" when neither)
  uint32_t connection = 0;  // 1-based
  uint64_t wr_id = 0;
  std::string what;    // opcode / event / state / call name
  std::string status;  // completion status, errno, or return code
  uint64_t bytes = 0;
  std::string text;
  std::string json;  // the line as written to the trace file
};

struct ScenarioResult {
  std::string name;
  uint64_t seed = 0;
  std::string backend = "fake";
  // Not run: the backend cannot host one of its faults (or the options are
  // unusable); skip_reason says which fault and why.
  bool skipped = false;
  std::string skip_reason;
  uint64_t posted = 0;
  uint64_t post_errors = 0;
  std::map<std::string, uint64_t> client_completions;  // by status name
  std::map<std::string, uint64_t> server_completions;
  uint64_t bytes_verified = 0;
  uint64_t bytes_torn = 0;
  std::vector<std::string> data_mismatches;
  std::map<std::string, uint64_t> faults_fired;  // rule -> times
  std::vector<std::string> faults_never_fired;
  std::string connection;   // the client's final state (see Expectations)
  bool stalled = false;     // max_steps reached with work left
  uint64_t unfinished = 0;  // posted writes the NIC never finished
  uint64_t steps = 0;
  std::vector<TraceEvent> trace;
  std::vector<std::string> log;  // readable event log
  std::vector<std::string>
      expectations;  // each checked one, "ok: ..." or "FAILED: ..."
  std::vector<std::string> failures;  // the failed ones
  bool checked = false;               // ran under the usage checker
  std::map<std::string, uint64_t> findings_per_check;
  std::vector<std::string> findings;  // "check: what (in where)"
  std::string crash;  // crash: the crash checker's report (crash_check.h)
};

ScenarioResult RunScenario(const Scenario& scenario, const RunOptions& options);

// The summary a person reads after a run.
std::string Summary(const ScenarioResult& result);

// Trace files: one JSON object per line.
bool WriteTrace(const ScenarioResult& result, const std::string& path,
                std::string* error);
// Compares a run with a recorded trace, streaming it (constant memory);
// empty when identical, else where they first differ ("line 17: recorded
// ... / this run ..."). When the recording cannot be used at all (missing,
// unreadable, a directory, a line longer than kMaxTraceLineBytes) the text
// says why and *unusable is set.
std::string FirstDivergence(const ScenarioResult& result,
                            const std::string& recorded_path,
                            bool* unusable = nullptr);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_RUNNER_H_
