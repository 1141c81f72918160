// scenario.h: a write-with-imm scenario as data: the two peers, the
// workload, the faults to inject and what must be true afterwards.
//
// Scenarios are written in YAML (see tools/scenarios/*.yaml and
// docs/faults-and-scenarios.md, "Writing a scenario") and parsed by
// ParseScenario (scenario_parser.h); the runner (scenario_runner.h) plays
// them on the fake NIC.

#ifndef RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_H_
#define RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "faults/fault_injection.h"

namespace rpma_harness {

struct PeerSpec {
  uint32_t cq_size = 64;
  uint32_t sq_size = 16;
  uint32_t rq_size = 16;
  uint64_t mr_size = 64 * 1024;
};

// How the receiver keeps receives posted (a write with imm consumes one).
enum class RecvPolicy {
  kReplenish,  // `prepost` before accepting, then one more per completion
  kPrepost,    // only the `prepost` posted before accepting
};

struct ReceiverSpec : PeerSpec {
  RecvPolicy recv = RecvPolicy::kReplenish;
  uint32_t prepost = 4;
};

// `count` writes with imm of `size` bytes; op i reads the client's region at
// src_offset + i * stride and writes the server's at dst_offset + i * stride,
// with imm = imm + i * imm_step. size 0 with zero_byte: the NULL-region form.
struct WriteOp {
  uint32_t count = 1;
  uint64_t size = 64;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  std::optional<uint64_t> stride;  // default: size
  int flags = 0;                   // RPMA_F_COMPLETION_*; 0 means ALWAYS
  uint32_t imm = 0;
  uint32_t imm_step = 1;
  bool zero_byte = false;
  int line = 0;  // where it was written, for messages (1-based)
  int column = 0;
};

// How many completions of each status one side must see (exactly), by the
// status's short name ("SUCCESS", "REM_ACCESS_ERR", ...) or "CQ_ERROR" for a
// poll that failed (an overrun CQ).
using CompletionCounts = std::map<std::string, uint64_t>;

struct Expectations {
  std::optional<CompletionCounts> client;
  std::optional<CompletionCounts> server;
  // Every write that completed successfully landed byte for byte, and
  // nothing else changed in the server's region.
  bool data = true;
  // The client's connection state at the end: "established", "closed",
  // "lost", "rejected", "unreachable" or "not_connected" (set-up failed).
  std::optional<std::string> connection;
  std::vector<std::string> faults_fired;  // rule names that must fire
  std::optional<uint64_t> post_errors;    // rpma_write_with_imm failures
  std::optional<uint64_t> bytes_torn;     // bytes that landed from torn writes
  // Writes the NIC never finished (e.g. parked by RNR with rnr_retry 7 and
  // no receive ever posted): a hang on a real NIC. Expected 0 by default.
  uint64_t unfinished = 0;
  // Distinct usage-checker findings per check name (exactly), when the
  // scenario is checked (`check:`); unset: findings are listed, and fail
  // the run only under --strict.
  std::optional<std::map<std::string, uint64_t>> findings;
};

// `crash:` -- the server's region of each connection is persistent memory,
// the run is recorded (crash/crash_check.h), and the server is crashed at
// every point: every write with imm the server received (and, with
// persist_on_receive, persisted itself first) must be in every image.
struct CrashSpec {
  uint64_t unit = 8;                   // R3's aligned unit G
  uint64_t budget = 1 << 14;           // images per crash point before sampling
  bool persist_on_receive = false;     // the server persists a write's range
                                       // when its completion arrives (R6)
  std::string outcome = "consistent";  // `expect:` consistent | violation
};

struct Scenario {
  std::string file;
  std::string name;
  std::string description;
  uint64_t seed = 1;
  std::string personality = "spec";  // spec | rxe | siw
  bool random_schedule = false;      // schedule: random
  uint32_t connections = 1;          // independent pairs, same workload each
  uint8_t rnr_retry = 7;
  PeerSpec client;
  ReceiverSpec server;
  std::vector<WriteOp> workload;
  std::vector<FaultRule> faults;
  // Per fault (same index): which side's QP it targets once connected
  // ("client", "server" or "" for any) and which connection (0: all).
  std::vector<std::string> fault_sides;
  std::vector<uint32_t> fault_connections;
  Expectations expect;
  uint64_t max_steps = 200000;  // a run that needs more has stalled
  // `check:` -- run under the usage checker (check/checking_backend.h):
  // "all" or a comma-separated list of check names. Unset: unchecked.
  std::optional<std::string> check;
  std::optional<CrashSpec> crash;
  // Where some values were written ("client.mr_size", "connections",
  // "max_steps", ...), as {line, column} (1-based), for the budget's
  // messages (scenario_budget.h).
  std::map<std::string, std::pair<int, int>> positions;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_H_
