// scenario_budget.h: what a scenario will cost, computed from the parsed
// file before anything is allocated, and the limits it must stay within.
//
// Three figures, each with a default that fits a CI machine (2 cores, a few
// GB shared with other jobs) and scaled together by `--budget N`:
//   memory       MRs (client source + server destination per connection),
//                the fake NIC's queues at full depth, and the run's records
//                (every event is kept for the trace, the log and the
//                timeline: ~1.4 KB each, measured)       default 1 GiB
//   bytes moved  every write's size, on every connection  default 16 GiB
//   events       kept records: ~7 per write per connection, plus one per
//                NIC step that may only retry (an RNR NAK) default 1 M
// An error names the line of the value that dominates the figure:
//   x.yaml:6:34: over budget: memory ~2.0 GiB (MRs 2.0 GiB: ...) > 1.0 GiB;
//   run with --budget 3 to allow it
//
//   Budget budget = DefaultBudget().Scaled(n);
//   if (!CheckBudget(scenario, budget, &error)) ... exit 2

#ifndef RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_BUDGET_H_
#define RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_BUDGET_H_

#include <cstdint>
#include <string>

#include "tools/scenario/scenario.h"

namespace rpma_harness {

struct Budget {
  uint64_t memory_bytes = 1ull << 30;
  uint64_t bytes_moved = 16ull << 30;
  uint64_t events = 1000000;
  // Each figure times `factor` (>= 1).
  Budget Scaled(uint64_t factor) const;
};

constexpr uint64_t kMaxBudgetFactor = 1024;

// What the run will need at most.
struct ScenarioCost {
  uint64_t mr_bytes = 0;
  uint64_t queue_bytes = 0;
  uint64_t record_bytes = 0;  // events and per-write bookkeeping
  uint64_t memory_bytes = 0;  // the sum of the three
  uint64_t bytes_moved = 0;
  uint64_t writes = 0;  // on all connections
  uint64_t events = 0;
};

// Estimated cost per kept event and per planned write (see the .cc).
constexpr uint64_t kBytesPerEvent = 1400;
constexpr uint64_t kBytesPerWrite = 256;

ScenarioCost EstimateCost(const Scenario& scenario);

// True when every figure fits; else *error is "file:line:col: over budget:
// ..." naming the figure, its parts and the --budget factor that would fit.
bool CheckBudget(const Scenario& scenario, const Budget& budget,
                 std::string* error);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_SCENARIO_SCENARIO_BUDGET_H_
