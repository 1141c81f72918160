#include "tools/scenario/scenario_runner.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <librpma.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "check/checking_backend.h"
#include "crash/crash_check.h"
#include "faults/fault_injection.h"
#include "nic/fake_nic.h"
#include "rpma/harness.h"
#include "tools/scenario/scenario_parser.h"
#include "verbs_backend/rdma_core_backend.h"

namespace rpma_harness {
namespace {

constexpr char kServerAddr[] = "10.0.0.2";
constexpr int kBasePort = 7204;
constexpr size_t kRecvSize = 64;

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

// A registered address as "mrN+0xOFF"; addresses outside every region have
// no stable name (they differ per process), so they print as "unregistered".
std::string Where(uint32_t mr, uint64_t offset, uint64_t raw) {
  if (mr == 0) return raw == 0 ? "-" : "unregistered";
  char text[48];
  std::snprintf(text, sizeof(text), "mr%u+0x%" PRIx64, mr, offset);
  return text;
}

// One connection of the scenario: both ends and their memory.
struct Connection {
  uint32_t index = 0;  // 1-based
  std::vector<uint8_t> src, dst, recv;
  rpma_mr_local *src_mr = nullptr, *dst_mr = nullptr, *recv_mr = nullptr;
  rpma_mr_remote* remote = nullptr;
  rpma_conn* client = nullptr;
  rpma_conn* server = nullptr;
  rpma_cq* client_cq = nullptr;
  rpma_cq* server_cq = nullptr;
  bool client_cq_dead = false;
  bool server_cq_dead = false;
  uint32_t client_qp = 0;
  uint32_t server_qp = 0;
  std::string state = "not_connected";
  uint64_t posted = 0;
  uint64_t finished = 0;  // executed or flushed send WRs
  uint64_t next_recv = 0;
  // rdma-core: the posted writes in order (id, signaled) and how many of
  // them a completion has accounted for (see Run::AccountClient).
  std::vector<std::pair<uint64_t, bool>> posted_ids;
};

// Both sides of one write: where it reads and writes.
struct PlannedWrite {
  uint32_t connection = 0;
  uint64_t id = 0;  // wr_id / op_context
  uint64_t src_offset = 0, dst_offset = 0, size = 0;
  int flags = RPMA_F_COMPLETION_ALWAYS;
  uint32_t imm = 0;
  bool zero_byte = false;
};

class Run {
 public:
  Run(const Scenario& s, const RunOptions& options)
      : s_(s),
        seed_(options.seed.value_or(s.seed)),
        options_(options),
        real_(options.backend != "fake"),
        addr_(real_ ? options.address : std::string(kServerAddr)),
        max_events_(options.max_events),
        // --strict alone checks everything; the file's check: (its list,
        // a landing= mode) still applies under it.
        check_(options.check    ? options.check
               : s.check        ? s.check
               : options.strict ? std::optional<std::string>("all")
                                : std::nullopt),
        strict_(options.strict) {}

  ScenarioResult Go();

 private:
  // One entry of the run's history, in the order it happened.
  struct Item {
    bool app = false;
    FakeNicEvent nic;
    std::string side, call, result;
    uint32_t connection = 0;
    uint64_t wr_id = 0;
  };

  // The run keeps every event (trace, log, timeline); past the budget's
  // figure it stops keeping them and fails.
  bool Keep() {
    if (max_events_ == 0 || items_.size() < max_events_) return true;
    events_cut_ = true;
    return false;
  }

  void App(const std::string& side, uint32_t connection,
           const std::string& call, int ret, uint64_t wr_id = 0) {
    if (!Keep()) return;
    Item item;
    item.app = true;
    item.side = side;
    item.connection = connection;
    item.call = call;
    item.result = ret == 0 ? "ok" : rpma_err_2str(ret);
    item.wr_id = wr_id;
    items_.push_back(std::move(item));
  }

  bool SetUp(Connection& c);
  // Calls `attempt` until it stops answering `not_yet`, stepping the NIC in
  // between; gives up once the NIC is idle.
  int Await(const std::function<int()>& attempt, int not_yet);
  // Steps until `done` or idle (or out of steps); polls after every step.
  void Drive(const std::function<bool()>& done);
  // Returns how many completions (or failed polls) it saw.
  uint64_t PollAll();
  uint64_t Poll(Connection& c, bool client);
  // rdma-core: a client completion for write `wr_id` accounts for it and
  // for every write posted before it (an RC send queue completes in order,
  // and an unsignaled WR that ends well reports nothing: ibv_post_send(3)).
  void AccountClient(Connection& c, uint64_t wr_id, bool success);
  // Sets up the backend and its faults; false (with r_.skipped) when the
  // backend cannot host the scenario.
  bool MakeBackend();
  void Finish(Connection& c);
  void Verify();
  // crash: the server received write-with-imm `wc` on connection c: it
  // persists the write's range (persist_on_receive) and tells the world.
  void PromiseReceived(Connection& c, const ibv_wc& wc);
  void CheckCrashes();
  void Check();
  void BuildTrace();

  using Clock = std::chrono::steady_clock;
  uint64_t MsSince(Clock::time_point t) const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t)
            .count());
  }

  const Scenario& s_;
  const uint64_t seed_;
  const RunOptions options_;
  const bool real_;  // not the fake: no Step(), the wall clock instead
  const std::string addr_;
  std::shared_ptr<FakeNic> nic_;  // null on rdma-core
  std::shared_ptr<FaultInjector> faults_;
  rpma_peer* client_peer_ = nullptr;
  rpma_peer* server_peer_ = nullptr;
  rpma_ep* ep_ = nullptr;
  std::vector<Connection> conns_;
  std::vector<PlannedWrite> writes_;
  std::vector<Item> items_;
  std::map<std::pair<uint32_t, uint64_t>, std::string> client_status_;
  std::map<uint32_t, std::pair<std::string, uint32_t>> qp_owner_;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> torn_;
  std::set<std::pair<uint32_t, uint64_t>> executed_ok_;
  bool setup_failed_ = false;
  uint64_t max_events_ = 0;           // 0: no limit
  std::optional<std::string> check_;  // the usage checker's checks, if any
  bool strict_ = false;
  std::shared_ptr<CheckingBackend> checker_;
  std::unique_ptr<crash::PersistenceRecorder> recorder_;  // crash:
  std::set<std::pair<uint32_t, uint64_t>> promised_;      // (conn, write id)
  uint64_t crash_after_event_ = 0;  // the violating crash point's place
  std::string crash_mark_;          // and what it says, for the trace
  bool events_cut_ = false;
  ScenarioResult r_;
};

int Run::Await(const std::function<int()>& attempt, int not_yet) {
  const Clock::time_point start = Clock::now();
  while (true) {
    int ret = attempt();
    if (ret != not_yet) return ret;
    if (real_) {
      if (MsSince(start) >= options_.wait_limit_ms) return ret;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (r_.steps >= s_.max_steps || !nic_->Step()) return ret;
    ++r_.steps;
  }
}

void Run::Drive(const std::function<bool()>& done) {
  const Clock::time_point start = Clock::now();
  Clock::time_point last_seen = start;
  while (true) {
    if (PollAll() > 0) last_seen = Clock::now();
    if (done()) return;
    if (real_) {
      // A real NIC cannot say it is idle: silence for quiet_ms is taken
      // as the end, and no wait lasts longer than wait_limit_ms.
      if (MsSince(last_seen) >= options_.quiet_ms ||
          MsSince(start) >= options_.wait_limit_ms) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    if (r_.steps >= s_.max_steps) {
      r_.stalled = !nic_->Idle();
      return;
    }
    if (!nic_->Step()) return;
    ++r_.steps;
  }
}

uint64_t Run::PollAll() {
  uint64_t seen = 0;
  for (Connection& c : conns_) {
    if (c.client != nullptr) seen += Poll(c, true);
    if (c.server != nullptr) seen += Poll(c, false);
  }
  return seen;
}

void Run::AccountClient(Connection& c, uint64_t wr_id, bool success) {
  for (uint64_t k = c.finished; k < c.posted_ids.size(); ++k) {
    if (c.posted_ids[k].first != wr_id) continue;
    for (uint64_t j = c.finished; j < k; ++j) {
      executed_ok_.insert({c.index, c.posted_ids[j].first});
    }
    if (success) executed_ok_.insert({c.index, wr_id});
    c.finished = k + 1;
    return;
  }
}

uint64_t Run::Poll(Connection& c, bool client) {
  rpma_cq* cq = client ? c.client_cq : c.server_cq;
  bool& dead = client ? c.client_cq_dead : c.server_cq_dead;
  if (cq == nullptr || dead) return 0;
  const std::string side = client ? "client" : "server";
  uint64_t seen = 0;
  while (true) {
    ibv_wc wc;
    int ret = rpma_cq_get_wc(cq, 1, &wc, nullptr);
    if (ret == RPMA_E_NO_COMPLETION) return seen;
    ++seen;
    if (ret != 0) {
      // An overrun CQ fails every poll from now on.
      App(side, c.index, "rpma_cq_get_wc", ret);
      r_.log.push_back(side + " " + std::to_string(c.index) +
                       ": rpma_cq_get_wc failed: " + rpma_err_2str(ret));
      (client ? r_.client_completions : r_.server_completions)["CQ_ERROR"]++;
      dead = true;
      return seen;
    }
    const std::string status =
        WcStatusShortName(static_cast<ibv_wc_status>(wc.status));
    (client ? r_.client_completions : r_.server_completions)[status]++;
    if (real_) {
      // No NIC events to trace on a real NIC: the completions are what the
      // program saw.
      App(side, c.index, std::string("completion ") + status, 0,
          client ? wc.wr_id : 0);
      if (client) AccountClient(c, wc.wr_id, wc.status == IBV_WC_SUCCESS);
    }
    if (!client && recorder_ != nullptr && wc.status == IBV_WC_SUCCESS &&
        wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      PromiseReceived(c, wc);
    }
    if (client) {
      client_status_[{c.index, wc.wr_id}] = status;
    } else if (wc.status == IBV_WC_SUCCESS &&
               s_.server.recv == RecvPolicy::kReplenish) {
      int posted = rpma_recv(c.server, c.recv_mr, 0, kRecvSize,
                             reinterpret_cast<void*>(c.next_recv));
      App("server", c.index, "rpma_recv", posted, c.next_recv);
      ++c.next_recv;
    }
  }
}

bool Run::SetUp(Connection& c) {
  const std::string port = std::to_string(kBasePort);
  c.src.assign(s_.client.mr_size, 0);
  // A pattern that differs per connection and seed, so a byte in the wrong
  // place cannot look right.
  uint64_t x = seed_ * 0x9e3779b97f4a7c15ull + c.index;
  for (uint8_t& b : c.src) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  c.dst.assign(s_.server.mr_size, 0);
  c.recv.assign(kRecvSize, 0);
  auto step = [&](const std::string& side, const char* call, int ret) {
    App(side, c.index, call, ret);
    if (ret != 0) {
      r_.log.push_back(side + " " + std::to_string(c.index) + ": " + call +
                       " failed: " + rpma_err_2str(ret));
    }
    return ret == 0;
  };
  if (!step("server", "rpma_mr_reg",
            rpma_mr_reg(server_peer_, c.dst.data(), c.dst.size(),
                        RPMA_MR_USAGE_WRITE_DST, &c.dst_mr)) ||
      !step("server", "rpma_mr_reg",
            rpma_mr_reg(server_peer_, c.recv.data(), c.recv.size(),
                        RPMA_MR_USAGE_RECV, &c.recv_mr)) ||
      !step("client", "rpma_mr_reg",
            rpma_mr_reg(client_peer_, c.src.data(), c.src.size(),
                        RPMA_MR_USAGE_WRITE_SRC, &c.src_mr))) {
    return false;
  }
  rpma_conn_cfg *client_cfg = nullptr, *server_cfg = nullptr;
  rpma_conn_cfg_new(&client_cfg);
  rpma_conn_cfg_new(&server_cfg);
  rpma_conn_cfg_set_sq_size(client_cfg, s_.client.sq_size);
  rpma_conn_cfg_set_rq_size(client_cfg, s_.client.rq_size);
  rpma_conn_cfg_set_cq_size(client_cfg, s_.client.cq_size);
  rpma_conn_cfg_set_sq_size(server_cfg, s_.server.sq_size);
  rpma_conn_cfg_set_rq_size(server_cfg, s_.server.rq_size);
  rpma_conn_cfg_set_cq_size(server_cfg, s_.server.cq_size);
  auto free_cfgs = [&] {
    rpma_conn_cfg_delete(&client_cfg);
    rpma_conn_cfg_delete(&server_cfg);
  };

  rpma_conn_req* req = nullptr;
  if (!step("client", "rpma_conn_req_new",
            rpma_conn_req_new(client_peer_, addr_.c_str(), port.c_str(),
                              client_cfg, &req)) ||
      !step("client", "rpma_conn_req_connect",
            rpma_conn_req_connect(&req, nullptr, &c.client))) {
    free_cfgs();
    return false;
  }
  int fd = -1;
  rpma_conn_get_event_fd(c.client, &fd);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  rpma_conn_get_cq(c.client, &c.client_cq);

  rpma_conn_req* server_req = nullptr;
  int ret =
      Await([&] { return rpma_ep_next_conn_req(ep_, server_cfg, &server_req); },
            RPMA_E_NO_EVENT);
  free_cfgs();
  if (!step("server", "rpma_ep_next_conn_req", ret)) return false;
  for (uint32_t i = 0; i < s_.server.prepost; ++i) {
    if (!step("server", "rpma_conn_req_recv",
              rpma_conn_req_recv(server_req, c.recv_mr, 0, kRecvSize,
                                 reinterpret_cast<void*>(c.next_recv++)))) {
      rpma_conn_req_delete(&server_req);
      return false;
    }
  }
  uint8_t desc[21];
  rpma_mr_get_descriptor(c.dst_mr, desc);
  rpma_conn_private_data pdata{desc, sizeof(desc)};
  if (!step("server", "rpma_conn_req_connect",
            rpma_conn_req_connect(&server_req, &pdata, &c.server))) {
    return false;
  }
  rpma_conn_get_event_fd(c.server, &fd);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  rpma_conn_get_cq(c.server, &c.server_cq);
  rpma_conn_get_qp_num(c.client, &c.client_qp);
  rpma_conn_get_qp_num(c.server, &c.server_qp);
  qp_owner_[c.client_qp] = {"client", c.index};
  qp_owner_[c.server_qp] = {"server", c.index};

  // The client first: on a real rdma_cm the server's ESTABLISHED only comes
  // once the client has read its own (the RTU is sent then).
  for (rpma_conn* conn : {c.client, c.server}) {
    const bool is_client = conn == c.client;
    rpma_conn_event event = RPMA_CONN_UNDEFINED;
    ret = Await([&] { return rpma_conn_next_event(conn, &event); },
                RPMA_E_NO_EVENT);
    App(is_client ? "client" : "server", c.index, "rpma_conn_next_event", ret);
    if (ret != 0) return false;
    if (is_client) {
      switch (event) {
        case RPMA_CONN_ESTABLISHED:
          c.state = "established";
          break;
        case RPMA_CONN_LOST:
          c.state = "lost";
          break;
        case RPMA_CONN_REJECTED:
          c.state = "rejected";
          break;
        case RPMA_CONN_UNREACHABLE:
          c.state = "unreachable";
          break;
        default:
          c.state = "closed";
      }
    }
  }
  if (c.state != "established") return false;
  rpma_conn_private_data got{};
  rpma_conn_get_private_data(c.client, &got);
  return step("client", "rpma_mr_remote_from_descriptor",
              rpma_mr_remote_from_descriptor(got.ptr, got.len, &c.remote));
}

void Run::Finish(Connection& c) {
  // Whatever the connection went through, its last event says how it ended.
  for (rpma_conn* conn : {c.client, c.server}) {
    if (conn == nullptr) continue;
    while (true) {
      rpma_conn_event event = RPMA_CONN_UNDEFINED;
      int ret = rpma_conn_next_event(conn, &event);
      if (ret != 0) break;
      App(conn == c.client ? "client" : "server", c.index,
          std::string("rpma_conn_next_event: ") +
              rpma_utils_conn_event_2str(event),
          0);
      if (conn == c.client) {
        c.state = event == RPMA_CONN_LOST ? "lost" : "closed";
      }
    }
  }
}

void Run::Verify() {
  for (const PlannedWrite& w : writes_) {
    Connection& c = conns_[w.connection - 1];
    if (w.zero_byte || w.size == 0) continue;
    // offset + size may pass 2^64: compare without adding.
    if (w.size > c.dst.size() || w.dst_offset > c.dst.size() - w.size ||
        w.size > c.src.size() || w.src_offset > c.src.size() - w.size) {
      continue;  // deliberately out of bounds: nothing may land (checked below)
    }
    const uint8_t* got = c.dst.data() + w.dst_offset;
    const uint8_t* want = c.src.data() + w.src_offset;
    uint64_t expect_bytes = 0;
    auto torn = torn_.find({w.connection, w.id});
    if (torn != torn_.end()) {
      expect_bytes = torn->second;
      r_.bytes_torn += torn->second;
    } else if (executed_ok_.count({w.connection, w.id})) {
      expect_bytes = w.size;
    }
    bool ok = std::memcmp(got, want, expect_bytes) == 0;
    for (uint64_t i = expect_bytes; ok && i < w.size; ++i) ok = got[i] == 0;
    if (ok) {
      if (torn == torn_.end()) r_.bytes_verified += expect_bytes;
    } else {
      r_.data_mismatches.push_back(
          "connection " + std::to_string(w.connection) + " write " +
          std::to_string(w.id) + ": the " + std::to_string(w.size) +
          " bytes at server offset " + std::to_string(w.dst_offset) +
          " are not what " +
          (expect_bytes == w.size ? "the client wrote"
           : expect_bytes == 0    ? "an unexecuted write leaves (zeros)"
                                  : "a torn write leaves"));
    }
  }
}

void Run::Check() {
  const Expectations& e = s_.expect;
  auto expect = [&](bool ok, const std::string& what) {
    r_.expectations.push_back((ok ? "ok: " : "FAILED: ") + what);
    if (!ok) r_.failures.push_back(what);
  };
  auto counts = [](const CompletionCounts& want,
                   const std::map<std::string, uint64_t>& got, bool* ok) {
    std::string text;
    const std::map<std::string, uint64_t>& expected = want;
    *ok = expected == got;
    for (const auto& [name, n] : expected) {
      text += (text.empty() ? "" : ", ") + name + " x" + std::to_string(n);
    }
    std::string seen;
    for (const auto& [name, n] : got) {
      seen += (seen.empty() ? "" : ", ") + name + " x" + std::to_string(n);
    }
    return "{" + text + "} (got {" + seen + "})";
  };
  bool ok = false;
  if (e.client) {
    std::string text = counts(*e.client, r_.client_completions, &ok);
    expect(ok, "client completions " + text);
  }
  if (e.server) {
    std::string text = counts(*e.server, r_.server_completions, &ok);
    expect(ok, "server completions " + text);
  }
  if (e.data) {
    expect(r_.data_mismatches.empty(),
           "data verified (" + std::to_string(r_.bytes_verified) + " bytes; " +
               std::to_string(r_.data_mismatches.size()) + " mismatches)");
  }
  if (e.connection) {
    expect(r_.connection == *e.connection,
           "connection " + *e.connection + " (got " + r_.connection + ")");
  }
  for (const std::string& name : e.faults_fired) {
    auto it = r_.faults_fired.find(name);
    expect(it != r_.faults_fired.end() && it->second > 0,
           "fault '" + name + "' fired");
  }
  if (e.post_errors) {
    expect(r_.post_errors == *e.post_errors,
           "post errors " + std::to_string(*e.post_errors) + " (got " +
               std::to_string(r_.post_errors) + ")");
  }
  if (e.bytes_torn) {
    expect(r_.bytes_torn == *e.bytes_torn,
           "bytes torn " + std::to_string(*e.bytes_torn) + " (got " +
               std::to_string(r_.bytes_torn) + ")");
  }
  expect(r_.unfinished == e.unfinished,
         std::to_string(e.unfinished) + " writes left unfinished (got " +
             std::to_string(r_.unfinished) + ")");
  if (!real_) {
    expect(!r_.stalled, "the NIC finished its work within max_steps (" +
                            std::to_string(s_.max_steps) + ")");
  }
  // A run whose connections never came up tested nothing, unless that is
  // what the scenario says should happen (expect: connection:).
  if (setup_failed_ && !e.connection) {
    expect(false,
           "connection set-up succeeded (it failed, see the log; a scenario "
           "about a failing set-up says so with expect: {connection: ...})");
  }
  if (e.findings) {
    std::string text;
    for (const auto& [name, n] : *e.findings) {
      text += (text.empty() ? "" : ", ") + name + " x" + std::to_string(n);
    }
    std::map<std::string, uint64_t> want = *e.findings;
    for (auto it = want.begin(); it != want.end();) {
      it = it->second == 0 ? want.erase(it) : std::next(it);
    }
    expect(r_.checked && want == r_.findings_per_check,
           "usage-checker findings " + (text.empty() ? "none" : text) +
               (r_.checked ? "" : " (the run was not checked: add check:)"));
  } else if (strict_ && r_.checked) {
    expect(r_.findings.empty(), "no usage-checker findings (--strict; got " +
                                    std::to_string(r_.findings.size()) + ")");
  }
  if (events_cut_) {
    expect(false, "the run kept at most " + std::to_string(max_events_) +
                      " events (the budget's figure; the trace is cut there)");
  }
}

void Run::BuildTrace() {
  uint64_t seq = 0;
  // crash: the violating crash point, where it happened: after the NIC
  // event it followed and what the app did before the next one.
  bool crash_drawn = crash_mark_.empty();
  auto crash_event = [&] {
    TraceEvent t;
    t.seq = ++seq;
    t.kind = "crash";
    t.side = "server";
    t.text = crash_mark_;
    t.json = "{\"seq\":" + std::to_string(t.seq) +
             ",\"kind\":\"crash\",\"side\":\"server\",\"text\":\"" +
             JsonEscape(t.text) + "\"}";
    r_.log.push_back("#" + std::to_string(t.seq) + " crash: " + t.text);
    r_.trace.push_back(std::move(t));
    crash_drawn = true;
  };
  for (const Item& item : items_) {
    if (!crash_drawn && !item.app && item.nic.seq > crash_after_event_) {
      crash_event();
    }
    TraceEvent t;
    t.seq = ++seq;
    std::ostringstream json;
    if (item.app) {
      t.kind = "app";
      t.side = item.side;
      t.connection = item.connection;
      t.what = item.call;
      t.status = item.result;
      t.wr_id = item.wr_id;
      json << "{\"seq\":" << t.seq << ",\"kind\":\"app\",\"side\":\"" << t.side
           << "\",\"conn\":" << t.connection << ",\"call\":\""
           << JsonEscape(t.what) << "\",\"wr_id\":" << t.wr_id
           << ",\"result\":\"" << JsonEscape(t.status) << "\"}";
    } else {
      const FakeNicEvent& e = item.nic;
      t.kind = ToString(e.kind);
      auto owner = qp_owner_.find(e.qp_num);
      if (owner != qp_owner_.end()) {
        t.side = owner->second.first;
        t.connection = owner->second.second;
      }
      t.wr_id = e.wr_id;
      t.bytes = e.byte_len;
      t.text = e.text;
      switch (e.kind) {
        case FakeNicEvent::Kind::kPostSend:
        case FakeNicEvent::Kind::kExecute:
        case FakeNicEvent::Kind::kRnrNak:
        case FakeNicEvent::Kind::kPostFailed:
          t.what = WrOpcodeName(e.opcode);
          t.status = e.kind == FakeNicEvent::Kind::kExecute
                         ? WcStatusName(e.status)
                         : std::to_string(e.status);
          break;
        case FakeNicEvent::Kind::kCompletion:
        case FakeNicEvent::Kind::kCqOverrun:
          t.what = WcOpcodeName(e.opcode);
          t.status = WcStatusName(e.status);
          break;
        case FakeNicEvent::Kind::kQpState:
          t.what = QpStateName(e.opcode);
          break;
        case FakeNicEvent::Kind::kCmEvent:
          t.what = CmEventName(e.opcode);
          t.status = std::to_string(e.status);
          break;
        case FakeNicEvent::Kind::kFault:
          break;  // the text says what the fault did
        default:
          break;
      }
      json << "{\"seq\":" << t.seq << ",\"kind\":\"" << t.kind
           << "\",\"side\":\"" << t.side << "\",\"conn\":" << t.connection
           << ",\"qp\":" << e.qp_num << ",\"wr_id\":" << t.wr_id
           << ",\"what\":\"" << t.what << "\",\"status\":\"" << t.status
           << "\",\"bytes\":" << t.bytes << ",\"local\":\""
           << Where(e.local_mr, e.local_offset, e.local_addr)
           << "\",\"remote\":\""
           << Where(e.remote_mr, e.remote_offset, e.remote_addr)
           << "\",\"text\":\"" << JsonEscape(t.text) << "\"}";
    }
    t.json = json.str();
    std::string line = "#" + std::to_string(t.seq) + " ";
    if (t.kind == "app") {
      line += t.side + std::to_string(t.connection) + " " + t.what + " -> " +
              t.status;
      if (t.wr_id) line += " (wr_id " + std::to_string(t.wr_id) + ")";
    } else {
      line += (t.side.empty() ? std::string("nic")
                              : t.side + std::to_string(t.connection)) +
              " " + t.kind + " " + t.what;
      if (!t.status.empty() && t.status != "0") line += " " + t.status;
      if (t.kind != "qp_state" && t.kind != "cm_event") {
        line += " wr_id " + std::to_string(t.wr_id);
      }
      if (t.bytes) line += " " + std::to_string(t.bytes) + " B";
      if (!t.text.empty()) line += " (" + t.text + ")";
    }
    r_.log.push_back(line);
    r_.trace.push_back(std::move(t));
  }
  if (!crash_drawn) crash_event();
}

void Run::PromiseReceived(Connection& c, const ibv_wc& wc) {
  const uint32_t imm = ntohl(wc.imm_data);
  for (const PlannedWrite& w : writes_) {
    if (w.connection != c.index || w.imm != imm ||
        promised_.count({c.index, w.id})) {
      continue;
    }
    promised_.insert({c.index, w.id});
    const bool in_bounds = !w.zero_byte && w.size <= c.dst.size() &&
                           w.dst_offset <= c.dst.size() - w.size;
    if (s_.crash->persist_on_receive && in_bounds && w.size > 0) {
      recorder_->ServerPersisted(c.dst.data() + w.dst_offset, w.size);
    }
    recorder_->Promise("connection " + std::to_string(c.index) + " write " +
                       std::to_string(w.id));
    return;
  }
}

void Run::CheckCrashes() {
  // Every write the server was told of (and so may have acted on) must be
  // in persistent memory, byte for byte.
  crash::CrashReport report = recorder_->Check([&](crash::Image& image) {
    for (const std::string& p : image.promises()) {
      uint32_t conn = 0;
      uint64_t id = 0;
      if (std::sscanf(p.c_str(), "connection %u write %" SCNu64, &conn, &id) !=
          2) {
        continue;
      }
      for (const PlannedWrite& w : writes_) {
        if (w.connection != conn || w.id != id || w.zero_byte) continue;
        const Connection& c = conns_[conn - 1];
        if (w.size == 0 || w.size > c.dst.size() ||
            w.dst_offset > c.dst.size() - w.size) {
          continue;
        }
        std::vector<uint8_t> got(w.size);
        image.Read(conn - 1, w.dst_offset, got.data(), w.size);
        if (std::memcmp(got.data(), c.src.data() + w.src_offset, w.size) != 0) {
          return "the server received " + p + " (imm " + std::to_string(w.imm) +
                 "), but its bytes are not all there";
        }
      }
    }
    return std::string();
  });
  r_.crash = report.Text();
  if (!report.ok() && !report.points.empty()) {
    // Drawn in the trace and the timeline after the NIC event it followed.
    const crash::CrashPointResult& point = report.points.back();
    crash_after_event_ = point.after_event;
    crash_mark_ =
        "crash point #" + std::to_string(point.index) + " (" + point.label +
        "): " +
        report.violation.substr(
            report.violation.find(": ") + 2,
            report.violation.find('\n') - (report.violation.find(": ") + 2));
  }
  const bool want_ok = s_.crash->outcome == "consistent";
  r_.expectations.push_back(
      std::string(report.ok() == want_ok ? "ok: " : "FAILED: ") +
      "crash: " + (want_ok ? "every image consistent" : "a violation found") +
      " (" + std::to_string(report.points.size()) + " crash points, " +
      std::to_string(report.images) + " images" +
      (report.ok() ? "" : ", a violation") + ")");
  if (report.ok() != want_ok) {
    r_.failures.push_back(r_.expectations.back().substr(8));
  }
}

bool Run::MakeBackend() {
  auto skip = [&](const std::string& why) {
    r_.skipped = true;
    r_.skip_reason = why;
    r_.log.push_back("skipped on " + options_.backend + ": " + why);
    return false;
  };
  if (real_ && s_.crash) {
    return skip("crash: is checked on the fake NIC's record of the run");
  }
  if (!real_) {
    FakeNicConfig config;
    config.seed = seed_;
    config.personality = s_.personality == "rxe"   ? Personality::Rxe()
                         : s_.personality == "siw" ? Personality::Siw()
                                                   : Personality::Spec();
    config.random_schedule = s_.random_schedule;
    nic_ = std::make_shared<FakeNic>(config);
    faults_ = std::make_shared<FaultInjector>(nic_, seed_);
  } else {
    if (options_.backend != "rdma-core") {
      return skip("unknown backend '" + options_.backend +
                  "' (fake or rdma-core)");
    }
    // The scenario's fault rules first: one the real NIC cannot host makes
    // the whole scenario meaningless there.
    for (const FaultRule& rule : s_.faults) {
      const std::string needs = FaultNeedsFakeNic(rule);
      if (!needs.empty()) {
        return skip("fault '" + rule.name + "' needs the fake NIC: " + needs);
      }
    }
    if (addr_.empty()) {
      return skip(
          "no address: the rdma-core backend needs the address of "
          "a local RDMA device (--address, or RPMA_HARNESS_VM_ADDR)");
    }
    faults_ = std::make_shared<FaultInjector>(
        std::make_shared<RdmaCoreBackend>(), seed_);
    r_.log.push_back("backend rdma-core at " + addr_ +
                     ": the NIC is what it is (the "
                     "scenario's personality '" +
                     s_.personality + "'" +
                     (s_.random_schedule ? " and random schedule" : "") +
                     " apply to the fake only)");
  }
  for (const FaultRule& rule : s_.faults) {
    std::string why;
    if (!faults_->AddRule(rule, &why)) return skip(why);
  }
  // librpma always asks for rnr_retry 7; a scenario may model a peer that
  // asks for fewer retries.
  if (s_.rnr_retry != 7) faults_->OverrideRnrRetry(s_.rnr_retry);
  return true;
}

ScenarioResult Run::Go() {
  r_.name = s_.name;
  r_.seed = seed_;
  r_.backend = options_.backend;
  if (!MakeBackend()) return r_;
  if (nic_ != nullptr) {
    nic_->AddObserver([this](const FakeNicEvent& e) {
      if (Keep()) {
        Item item;
        item.nic = e;
        items_.push_back(std::move(item));
      }
      if (e.kind == FakeNicEvent::Kind::kExecute ||
          (e.kind == FakeNicEvent::Kind::kCompletion &&
           e.status == IBV_WC_WR_FLUSH_ERR)) {
        for (Connection& c : conns_) {
          if (c.client_qp != 0 && c.client_qp == e.qp_num) {
            // A send-queue slot frees when the NIC is done with the WR:
            // executed (well or not) or flushed. The client posts no
            // receives, so its flushes are all send WRs.
            ++c.finished;
            if (e.kind == FakeNicEvent::Kind::kExecute) {
              if (e.status == IBV_WC_SUCCESS)
                executed_ok_.insert({c.index, e.wr_id});
              if (e.text.find("torn write") != std::string::npos) {
                torn_[{c.index, e.wr_id}] = e.byte_len;
              }
            }
          }
        }
      }
    });
  }
  std::shared_ptr<VerbsBackend> backend = faults_;
  if (check_ && !check_->empty()) {
    // The checker goes outermost: it sees what the program posts.
    CheckOptions check;
    std::string why;
    if (!ParseCheckOptions(*check_, &check, &why)) {
      r_.failures.push_back("check: " + why);
      r_.expectations.push_back("FAILED: check: " + why);
    }
    check.print = false;  // listed in the summary instead
    check.trace_nic = nic_.get();
    checker_ = std::make_shared<CheckingBackend>(faults_, check);
    backend = checker_;
    r_.checked = true;
  }
  ScopedBackend use(backend);

  ibv_context* dev = nullptr;
  bool ready = rpma_utils_get_ibv_context(
                   addr_.c_str(), RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev) == 0 &&
               rpma_peer_new(dev, &server_peer_) == 0 &&
               rpma_peer_new(dev, &client_peer_) == 0 &&
               rpma_ep_listen(server_peer_, addr_.c_str(),
                              std::to_string(kBasePort).c_str(), &ep_) == 0;
  if (ready) {
    int fd = -1;
    rpma_ep_get_fd(ep_, &fd);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  if (!ready) r_.log.push_back("set-up failed: no device, peer or endpoint");
  // One endpoint takes every connection, as a server does; they connect
  // one after the other so that each request is the one expected.
  conns_.resize(s_.connections);
  for (uint32_t i = 0; i < s_.connections; ++i) conns_[i].index = i + 1;
  for (Connection& c : conns_) {
    if (!ready) break;
    if (!SetUp(c)) setup_failed_ = true;
  }
  if (!ready) setup_failed_ = true;
  if (s_.crash && nic_ != nullptr) {
    crash::CrashCheckOptions options;
    options.unit = s_.crash->unit;
    options.budget = s_.crash->budget;
    options.seed = seed_;
    recorder_ = std::make_unique<crash::PersistenceRecorder>(*nic_, options);
    // Region k-1 is connection k's server memory (as CheckCrashes reads it).
    for (Connection& c : conns_) {
      recorder_->MarkPersistent(
          c.dst.data(), c.dst.size(),
          "server memory of connection " + std::to_string(c.index));
    }
  }
  // "side" rules target a QP; its number is known once the connection is.
  for (size_t i = 0; i < s_.faults.size(); ++i) {
    const std::string& side = s_.fault_sides[i];
    if (side.empty()) continue;
    const uint32_t k =
        s_.fault_connections[i] == 0 ? 1 : s_.fault_connections[i];
    if (k > conns_.size()) continue;
    const Connection& c = conns_[k - 1];
    faults_->SetRuleQp(s_.faults[i].name,
                       side == "client" ? c.client_qp : c.server_qp);
  }

  // The workload: writes in order, connection by connection in turn.
  uint64_t id = 0;
  for (const WriteOp& op : s_.workload) {
    const uint64_t stride = op.stride.value_or(op.size);
    for (uint32_t i = 0; i < op.count; ++i) {
      ++id;
      for (Connection& c : conns_) {
        PlannedWrite w;
        w.connection = c.index;
        w.id = id;
        w.src_offset = op.src_offset + i * stride;
        w.dst_offset = op.dst_offset + i * stride;
        w.size = op.size;
        w.flags = op.flags == 0 ? RPMA_F_COMPLETION_ALWAYS : op.flags;
        w.imm = op.imm + i * op.imm_step;
        w.zero_byte = op.zero_byte;
        writes_.push_back(w);
      }
    }
  }
  for (const PlannedWrite& w : writes_) {
    Connection& c = conns_[w.connection - 1];
    if (c.client == nullptr || c.remote == nullptr) continue;
    // Wait for a send-queue slot, as a careful application does.
    Drive([&] { return c.posted - c.finished < s_.client.sq_size; });
    int ret =
        w.zero_byte
            ? rpma_write_with_imm(c.client, nullptr, 0, nullptr, 0, 0, w.flags,
                                  w.imm, reinterpret_cast<void*>(w.id))
            : rpma_write_with_imm(c.client, c.remote, w.dst_offset, c.src_mr,
                                  w.src_offset, w.size, w.flags, w.imm,
                                  reinterpret_cast<void*>(w.id));
    App("client", c.index, "rpma_write_with_imm", ret, w.id);
    if (ret == 0) {
      ++c.posted;
      ++r_.posted;
      c.posted_ids.push_back({w.id, (w.flags & RPMA_F_COMPLETION_ALWAYS) ==
                                        RPMA_F_COMPLETION_ALWAYS});
    } else {
      ++r_.post_errors;
    }
  }
  if (real_) {
    // Every signaled write's completion, then the quiet period for the
    // server's completions and flushes.
    Drive([&] {
      for (const Connection& c : conns_) {
        for (uint64_t k = c.finished; k < c.posted_ids.size(); ++k) {
          if (c.posted_ids[k].second) return false;
        }
      }
      return true;
    });
    Drive([] { return false; });
    for (Connection& c : conns_) {
      // Unsignaled writes after the last completion: a real NIC reports
      // nothing for those that succeed (ibv_post_send(3)) and an error
      // completion for any that fails, so silence means they landed (the
      // data check then holds the bytes to it).
      bool tail_unsignaled = true;
      for (uint64_t k = c.finished; k < c.posted_ids.size(); ++k) {
        tail_unsignaled = tail_unsignaled && !c.posted_ids[k].second;
      }
      if (tail_unsignaled) {
        for (uint64_t k = c.finished; k < c.posted_ids.size(); ++k) {
          executed_ok_.insert({c.index, c.posted_ids[k].first});
        }
        c.finished = c.posted_ids.size();
      }
    }
  } else {
    Drive([] { return false; });
  }
  for (Connection& c : conns_) r_.unfinished += c.posted - c.finished;
  for (Connection& c : conns_) Finish(c);
  r_.connection = conns_.empty() ? "not_connected" : conns_[0].state;
  for (const Connection& c : conns_) {
    // Any connection that ended worse than the first decides the summary.
    if (c.state != "established" && r_.connection == "established") {
      r_.connection = c.state;
    }
  }
  Verify();
  if (recorder_ != nullptr) {
    CheckCrashes();
    recorder_.reset();  // before the NIC it observes goes
  }

  for (const FiredFault& f : faults_->Fired()) r_.faults_fired[f.rule]++;
  r_.faults_never_fired = faults_->NeverFired();

  // The trace ends here: teardown is not part of what the scenario did.
  const size_t traced = items_.size();
  // Teardown: everything the run made is released, whatever happened.
  for (Connection& c : conns_) {
    if (c.client != nullptr) rpma_conn_disconnect(c.client);
    if (nic_ != nullptr) nic_->RunUntilIdle();
    rpma_conn_delete(&c.client);
    rpma_conn_delete(&c.server);
    rpma_mr_remote_delete(&c.remote);
    rpma_mr_dereg(&c.src_mr);
    rpma_mr_dereg(&c.dst_mr);
    rpma_mr_dereg(&c.recv_mr);
  }
  rpma_ep_shutdown(&ep_);
  rpma_peer_delete(&client_peer_);
  rpma_peer_delete(&server_peer_);
  if (checker_) {
    checker_->ReportLiveObjects();
    for (const Finding& f : checker_->Findings()) {
      ++r_.findings_per_check[f.check];
      r_.findings.push_back(
          f.check + ": " + f.what +
          (f.times > 1 ? " (x" + std::to_string(f.times) + ")" : ""));
    }
  }
  items_.resize(traced);
  BuildTrace();
  Check();
  return r_;
}

}  // namespace

ScenarioResult RunScenario(const Scenario& scenario,
                           const RunOptions& options) {
  Run run(scenario, options);
  return run.Go();
}

std::string Summary(const ScenarioResult& r) {
  std::ostringstream out;
  auto counts = [](const std::map<std::string, uint64_t>& m) {
    std::string text;
    for (const auto& [name, n] : m) {
      text += (text.empty() ? "" : ", ") + name + " x" + std::to_string(n);
    }
    return text.empty() ? std::string("none") : text;
  };
  if (r.backend != "fake") {
    out << "scenario:     " << r.name << " (seed " << r.seed << ", on "
        << r.backend << ")\n";
  } else {
    out << "scenario:     " << r.name << " (seed " << r.seed << ", " << r.steps
        << " NIC steps)\n";
  }
  if (r.skipped) {
    out << "skipped:      " << r.skip_reason << "\n";
    return out.str();
  }
  out << "operations:   " << r.posted << " writes with imm posted, "
      << r.post_errors << " refused at post\n";
  out << "completions:  client " << counts(r.client_completions) << "\n";
  out << "              server " << counts(r.server_completions) << "\n";
  out << "bytes:        " << r.bytes_verified << " verified";
  if (r.bytes_torn) out << ", " << r.bytes_torn << " landed from torn writes";
  if (!r.data_mismatches.empty()) {
    out << ", " << r.data_mismatches.size() << " MISMATCHES";
  }
  out << "\n";
  out << "faults fired: " << counts(r.faults_fired) << "\n";
  if (!r.faults_never_fired.empty()) {
    std::string names;
    for (const std::string& n : r.faults_never_fired) {
      names += (names.empty() ? "" : ", ") + n;
    }
    out << "never fired:  " << names << "\n";
  }
  out << "connection:   " << r.connection << (r.stalled ? " (STALLED)" : "")
      << "\n";
  if (r.checked) {
    out << "findings:     " << counts(r.findings_per_check) << "\n";
    for (const std::string& f : r.findings) out << "  " << f << "\n";
  }
  if (!r.crash.empty()) {
    std::istringstream lines(r.crash);
    std::string line;
    bool first = true;
    while (std::getline(lines, line)) {
      out << (first ? "crash:        " : "  ") << line << "\n";
      first = false;
    }
  }
  out << "expectations: " << r.expectations.size() - r.failures.size()
      << " met, " << r.failures.size() << " failed\n";
  for (const std::string& e : r.expectations) out << "  " << e << "\n";
  for (const std::string& m : r.data_mismatches) out << "  " << m << "\n";
  return out.str();
}

bool WriteTrace(const ScenarioResult& result, const std::string& path,
                std::string* error) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    *error = path + ": cannot write: " + std::strerror(errno);
    return false;
  }
  for (const TraceEvent& e : result.trace) out << e.json << "\n";
  out.close();
  if (!out) {
    *error = path + ": write failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string FirstDivergence(const ScenarioResult& result,
                            const std::string& recorded_path, bool* unusable) {
  if (unusable != nullptr) *unusable = false;
  auto bad = [&](const std::string& why) {
    if (unusable != nullptr) *unusable = true;
    return recorded_path + ": " + why;
  };
  // Streamed line by line with a bounded line: a recording of any length
  // (or /dev/zero) takes constant memory.
  const int fd = OpenForReading(recorded_path);
  if (fd < 0) return bad(std::string("cannot open: ") + std::strerror(errno));
  std::unique_ptr<FILE, int (*)(FILE*)> in(fdopen(fd, "r"), &std::fclose);
  if (!in) {
    close(fd);
    return bad(std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st;
  if (fstat(fileno(in.get()), &st) == 0 && S_ISDIR(st.st_mode)) {
    return bad("is a directory, not a trace");
  }
  std::string line;
  size_t n = 0;
  while (true) {
    line.clear();
    int ch = 0;
    while ((ch = std::fgetc(in.get())) != EOF && ch != '\n') {
      if (line.size() >= kMaxTraceLineBytes) {
        return bad("line " + std::to_string(n + 1) + " is longer than " +
                   std::to_string(kMaxTraceLineBytes / 1024) +
                   " KiB: not a trace written by --trace");
      }
      line.push_back(static_cast<char>(ch));
    }
    if (ch == EOF && line.empty()) break;
    if (n >= result.trace.size()) {
      return "line " + std::to_string(n + 1) + ": recorded " + line +
             "\n  this run ended after " + std::to_string(n) + " events";
    }
    if (line != result.trace[n].json) {
      return "line " + std::to_string(n + 1) + ":\n  recorded " + line +
             "\n  this run " + result.trace[n].json;
    }
    ++n;
    if (ch == EOF) break;
  }
  if (std::ferror(in.get())) {
    return bad(std::string("cannot read: ") + std::strerror(errno));
  }
  if (n < result.trace.size()) {
    return "line " + std::to_string(n + 1) + ": the recording ended after " +
           std::to_string(n) + " events\n  this run " + result.trace[n].json;
  }
  return "";
}

}  // namespace rpma_harness
