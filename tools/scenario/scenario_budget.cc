#include "tools/scenario/scenario_budget.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <utility>

namespace rpma_harness {
namespace {

using u128 = unsigned __int128;

uint64_t Clamp(u128 v) { return v > UINT64_MAX ? UINT64_MAX : uint64_t(v); }

// What the fake NIC holds per queue entry at full depth: a send WQE with its
// inline SGE list (~170 B), a receive WQE, a CQE (48 B), rounded up.
constexpr uint64_t kBytesPerSendWqe = 256;
constexpr uint64_t kBytesPerRecvWqe = 128;
constexpr uint64_t kBytesPerCqe = 64;
// Events a connection's set-up and teardown keep (CM events, QP states,
// the rpma calls): 20 in the shipped scenarios; 64 to be safe.
constexpr uint64_t kEventsPerConnection = 64;
// Events one write keeps: the rpma call, post_send, execute, both
// completions, the server's re-post (rpma call and post_recv): 7, measured
// with a 1000-write trace (7027 events).
constexpr uint64_t kEventsPerWrite = 7;
constexpr uint64_t kRecvBufferBytes = 64;

std::string Bytes(uint64_t n) {
  char text[32];
  if (n >= (1ull << 30)) {
    std::snprintf(text, sizeof(text), "%.1f GiB", n / double(1ull << 30));
  } else if (n >= (1ull << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", n / double(1ull << 20));
  } else if (n >= 1024) {
    std::snprintf(text, sizeof(text), "%.1f KiB", n / 1024.0);
  } else {
    std::snprintf(text, sizeof(text), "%llu B",
                  static_cast<unsigned long long>(n));
  }
  return text;
}

std::pair<int, int> PositionOf(const Scenario& s, const std::string& key) {
  auto it = s.positions.find(key);
  return it == s.positions.end() ? std::make_pair(1, 1) : it->second;
}

// The position of the first of `keys` the file wrote (1:1 if none).
std::pair<int, int> FirstWritten(const Scenario& s,
                                 std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (s.positions.count(key)) return PositionOf(s, key);
  }
  return {1, 1};
}

// The workload item with the largest `weight`.
std::pair<int, int> HeaviestItem(const Scenario& s,
                                 u128 (*weight)(const WriteOp&)) {
  std::pair<int, int> where{1, 1};
  u128 best = 0;
  for (const WriteOp& op : s.workload) {
    if (weight(op) >= best) {
      best = weight(op);
      where = {op.line, op.column};
    }
  }
  return where;
}

u128 Writes(const WriteOp& op) { return op.count; }
u128 Moved(const WriteOp& op) { return u128(op.count) * op.size; }

std::string Fail(const Scenario& s, std::pair<int, int> where,
                 const std::string& figure, const std::string& detail,
                 uint64_t need, uint64_t limit, uint64_t default_limit) {
  const uint64_t factor = need / default_limit + (need % default_limit != 0);
  std::string hint =
      factor <= kMaxBudgetFactor
          ? "run with --budget " + std::to_string(factor) + " to allow it"
          : "more than the largest --budget (" +
                std::to_string(kMaxBudgetFactor) + ") allows";
  return s.file + ":" + std::to_string(where.first) + ":" +
         std::to_string(where.second) + ": over budget: " + figure + " " +
         detail + " is more than the budget's " +
         (figure == "events" ? std::to_string(limit) : Bytes(limit)) + "; " +
         hint;
}

}  // namespace

Budget Budget::Scaled(uint64_t factor) const {
  Budget b;
  b.memory_bytes = Clamp(u128(memory_bytes) * factor);
  b.bytes_moved = Clamp(u128(bytes_moved) * factor);
  b.events = Clamp(u128(events) * factor);
  return b;
}

ScenarioCost EstimateCost(const Scenario& s) {
  ScenarioCost c;
  const u128 conns = s.connections;
  u128 writes_per_connection = 0, moved_per_connection = 0;
  for (const WriteOp& op : s.workload) {
    writes_per_connection += op.count;
    moved_per_connection += u128(op.count) * op.size;
  }
  const u128 writes = writes_per_connection * conns;
  const u128 mr =
      conns * (u128(s.client.mr_size) + s.server.mr_size + kRecvBufferBytes);
  auto queues = [](const PeerSpec& p) {
    return u128(p.sq_size) * kBytesPerSendWqe +
           u128(p.rq_size) * kBytesPerRecvWqe + u128(p.cq_size) * kBytesPerCqe;
  };
  const u128 queue = conns * (queues(s.client) + queues(s.server));
  // A run that stalls may keep one event per step until max_steps.
  const u128 events =
      writes * kEventsPerWrite + conns * kEventsPerConnection + s.max_steps;
  const u128 records = events * kBytesPerEvent + writes * kBytesPerWrite;
  c.mr_bytes = Clamp(mr);
  c.queue_bytes = Clamp(queue);
  c.record_bytes = Clamp(records);
  c.memory_bytes = Clamp(mr + queue + records);
  c.bytes_moved = Clamp(moved_per_connection * conns);
  c.writes = Clamp(writes);
  c.events = Clamp(events);
  return c;
}

bool CheckBudget(const Scenario& s, const Budget& budget, std::string* error) {
  const ScenarioCost c = EstimateCost(s);
  const Budget defaults;
  const std::string conns = std::to_string(s.connections) + " connection" +
                            (s.connections == 1 ? "" : "s");
  if (c.events > budget.events) {
    const std::pair<int, int> where = c.writes * kEventsPerWrite >= s.max_steps
                                          ? HeaviestItem(s, Writes)
                                          : PositionOf(s, "max_steps");
    *error = Fail(s, where, "events",
                  std::to_string(c.events) + " (" + std::to_string(c.writes) +
                      " writes x " + std::to_string(kEventsPerWrite) +
                      " + max_steps " + std::to_string(s.max_steps) + ")",
                  c.events, budget.events, defaults.events);
    return false;
  }
  if (c.memory_bytes > budget.memory_bytes) {
    // The line of what dominates: the larger MR (or the connections that
    // multiply it), the queues, or the records.
    const bool client_larger = s.client.mr_size >= s.server.mr_size;
    std::pair<int, int> where;
    if (c.mr_bytes >= c.queue_bytes && c.mr_bytes >= c.record_bytes) {
      where =
          FirstWritten(s, {client_larger ? "client.mr_size" : "server.mr_size",
                           client_larger ? "server.mr_size" : "client.mr_size",
                           "connections"});
    } else if (c.queue_bytes >= c.record_bytes) {
      where =
          FirstWritten(s, {"connections", "client.cq_size", "server.cq_size",
                           "client.sq_size", "server.rq_size"});
    } else {
      where = c.writes * kEventsPerWrite >= s.max_steps
                  ? HeaviestItem(s, Writes)
                  : PositionOf(s, "max_steps");
    }
    *error = Fail(s, where, "memory",
                  "~" + Bytes(c.memory_bytes) + " (MRs " + Bytes(c.mr_bytes) +
                      ": client " + std::to_string(s.client.mr_size) +
                      " + server " + std::to_string(s.server.mr_size) +
                      " bytes x " + conns + "; queues " + Bytes(c.queue_bytes) +
                      "; records of " + std::to_string(c.events) +
                      " events and " + std::to_string(c.writes) + " writes " +
                      Bytes(c.record_bytes) + ")",
                  c.memory_bytes, budget.memory_bytes, defaults.memory_bytes);
    return false;
  }
  if (c.bytes_moved > budget.bytes_moved) {
    *error = Fail(s, HeaviestItem(s, Moved), "bytes moved",
                  Bytes(c.bytes_moved) + " (count x size of every write, x " +
                      conns + ")",
                  c.bytes_moved, budget.bytes_moved, defaults.bytes_moved);
    return false;
  }
  return true;
}

}  // namespace rpma_harness
