// rpma_api_fuzz.cc: random sequences of librpma 1.3 calls on a connected
// client/server pair on a fresh fake NIC (manual progress).
//
// An input is a little program: the NIC (personality, seed), an optional
// server SRQ (rpma_srq_cfg sizes including 0 and huge), both sides'
// rpma_conn_cfg (queue sizes, shared completion channel, the SRQ), the MRs
// of both hosts (offsets, lengths and usage, unknown bits included, inside a
// guarded arena per host), then a list of actions on either connection:
// rpma_read / write / write_with_imm / atomic_write / flush (both types and
// unknown ones) / send / recv / srq_recv with offsets and lengths around,
// past the end of and wrapping the MRs, flags with unknown bits; polling
// every CQ, rpma_cq_wait / rpma_conn_wait on non-blocking fds; rpma_mr_advise;
// peer configurations from fuzz bytes (rpma_peer_cfg_from_descriptor) applied
// with rpma_conn_apply_remote_peer_cfg; deregistering; log thresholds;
// stepping the NIC; and, so that every one of librpma.h's 84 functions is
// called (tools/fuzz/rpma_api_coverage_test.sh checks that), the getters of
// the connections, the endpoint, both rpma_conn_cfgs (with a timeout from the
// input), rpma_srq_cfg, local and remote MRs and the device (ODP), each also
// with NULL arguments; rpma_err_2str and rpma_utils_conn_event_2str with any
// int; a request made and deleted without connecting; a second client
// request that the server takes and deletes (a reject); a counting log
// function installed and the default put back. Checked (a violation aborts):
//   - every call returns 0 or one of the RPMA_E_* codes its man page lists;
//     a NULL argument gets RPMA_E_INVAL where the man page says so, and no
//     output is written;
//   - getters give back what was set or made: the cfg values the input set
//     (or rpma_conn_cfg_new(3)'s and rpma_srq_cfg_new(3)'s defaults), an MR's
//     registered pointer and size, a remote MR's size and flush type as its
//     descriptor carried them, a QP number that is nonzero, stable and not
//     the other side's, event and endpoint fds that are open and distinct,
//     an ODP answer of 0 or 1 that does not change;
//   - the strings are never NULL and end within 4 KiB;
//   - a request deleted unused, or rejected, leaves the NIC holding what it
//     held before; the rejected client sees RPMA_CONN_REJECTED, and the
//     server saw its private data;
//   - the log function gets the messages at or below RPMA_LOG_THRESHOLD and
//     no other; the default function is back when the input ends;
//   - no byte of either arena outside every region ever registered changed
//     (bytes outside the arenas are guard pages: touching them faults);
//   - every completion carries the op_context of an operation that was
//     posted, once;
//   - the NIC reports no harness error (a copy that faulted);
//   - teardown succeeds and the NIC holds nothing afterwards.

#include <fcntl.h>
#include <librpma.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "rpma/harness.h"
#include "tests/guarded_buffer.h"
#include "tools/fuzz/arena_check.h"
#include "tools/fuzz/byte_reader.h"
#include "tools/fuzz/fuzz_targets.h"

namespace rpma_harness {
namespace {

constexpr int64_t kArena = 8192;
constexpr int kMaxActions = 64;
constexpr int kMaxMrs = 3;
constexpr char kAddr[] = "10.9.0.1";
constexpr char kPort[] = "7600";

[[noreturn]] void Violation(const char* what, int ret = 0) {
  fprintf(stderr, "rpma_api_fuzz: invariant broken: %s (ret %d)\n", what, ret);
  abort();
}

// `ret` must be 0 or one of `allowed` (the man page's list for the call).
int Expect(const char* call, int ret, std::initializer_list<int> allowed) {
  if (ret == 0) return ret;
  for (int code : allowed) {
    if (ret == code) return ret;
  }
  Violation(call, ret);
}

// Calls that must be refused with RPMA_E_INVAL, as their man pages say (a
// NULL argument, a descriptor too short).
struct Refused {
  const char* call;
  int ret;
};
void ExpectRefused(std::initializer_list<Refused> calls) {
  for (const Refused& refused : calls) {
    if (refused.ret != RPMA_E_INVAL) Violation(refused.call, refused.ret);
  }
}

// What a C program does when it passes an int for an enum parameter
// (rpma_flush's type, the log thresholds and levels): in C any int value is
// legal; in C++ loading a value outside the enum's range is undefined, so the
// value is put into the parameter's bytes without an enum-typed load here.
template <typename Enum>
Enum __attribute__((no_sanitize("enum"))) AsEnum(int raw) {
  static_assert(sizeof(Enum) == sizeof(int), "a C enum is int-sized");
  Enum value;
  std::memcpy(&value, &raw, sizeof(raw));
  return value;
}

__attribute__((no_sanitize("enum"))) int FlushRaw(rpma_conn* conn,
                                                  rpma_mr_remote* dst,
                                                  size_t off, size_t len,
                                                  int type, int flags,
                                                  const void* context) {
  return rpma_flush(conn, dst, off, len, AsEnum<rpma_flush_type>(type), flags,
                    context);
}

__attribute__((no_sanitize("enum"))) int SetThresholdRaw(int threshold,
                                                         int level) {
  return rpma_log_set_threshold(AsEnum<rpma_log_threshold>(threshold),
                                AsEnum<rpma_log_level>(level));
}

__attribute__((no_sanitize("enum"))) int GetThresholdRaw(int threshold) {
  rpma_log_level got;
  return rpma_log_get_threshold(AsEnum<rpma_log_threshold>(threshold), &got);
}

__attribute__((no_sanitize("enum"))) const char* ConnEventText(int event) {
  return rpma_utils_conn_event_2str(AsEnum<rpma_conn_event>(event));
}

// rpma_err_2str(3) and rpma_utils_conn_event_2str(3) "can not fail": a
// string for any value, terminated.
void CheckText(const char* call, const char* text) {
  if (text == nullptr || strnlen(text, 4096) == 4096) Violation(call);
}

// The harness's log sink, installed while the default log function is: the
// sink takes every message first (rpma/harness.h SetLogSink), so refused
// calls are not news on stderr and syslog.
void Quiet(const std::string&) {}

// rpma_log_set_function(3): RPMA_E_AGAIN is "a temporary error occurred,
// the retry may fix the problem".
void SetLogFunction(rpma_log_function* function) {
  for (int tries = 1;; ++tries) {
    const int ret = Expect("rpma_log_set_function",
                           rpma_log_set_function(function), {RPMA_E_AGAIN});
    if (ret == 0) return;
    if (tries == 100) Violation("rpma_log_set_function: always RPMA_E_AGAIN");
  }
}

// The default log function back, behind the quiet sink.
void DefaultLogging() {
  SetLogFunction(RPMA_LOG_USE_DEFAULT_FUNCTION);
  SetLogSink(Quiet);
}

// A log function that counts the messages it gets; none may be above
// RPMA_LOG_THRESHOLD (rpma_log_set_function(3) NOTE).
int g_logged = 0;
void CountingLog(rpma_log_level level, const char* file_name, const int line_no,
                 const char* function_name, const char* message_format, ...)
    __attribute__((format(printf, 5, 6)));
void CountingLog(rpma_log_level level, const char* /*file_name*/,
                 const int /*line_no*/, const char* /*function_name*/,
                 const char* message_format, ...) {
  rpma_log_level threshold = RPMA_LOG_DISABLED;
  Expect("rpma_log_get_threshold",
         rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &threshold), {});
  if (message_format == nullptr || level < RPMA_LOG_LEVEL_FATAL ||
      level > threshold) {
    Violation("the log function got a message above the threshold", level);
  }
  // The arguments must fit the format (ASan sees it if they do not).
  char text[256];
  va_list args;
  va_start(args, message_format);
  vsnprintf(text, sizeof(text), message_format, args);
  va_end(args);
  ++g_logged;
}

const uint8_t* PatternOf(int side) {
  static const ArenaPattern* pattern =
      new ArenaPattern(kArena, [](int s, int64_t i) {
        return static_cast<uint8_t>((i * 167) ^ (s ? 0x3c : 0xc3));
      });
  return pattern->Of(side);
}

GuardedBuffer& Arena(int side) {
  static GuardedBuffer* arenas[2] = {new GuardedBuffer(kArena),
                                     new GuardedBuffer(kArena)};
  return *arenas[side];
}

// What an MR handle was made from: its registration's arena offset, length
// and usage (a remote handle's, through the descriptor).
struct Region {
  int64_t offset = 0;
  int64_t length = 0;
  int usage = 0;
};

// What a side's rpma_conn_cfg was set to, else rpma_conn_cfg_new(3)'s
// defaults.
struct ConnCfgValues {
  int timeout_ms = RPMA_DEFAULT_TIMEOUT_MS;
  uint32_t cq_size = 10;
  uint32_t rcq_size = 0;
  uint32_t sq_size = 10;
  uint32_t rq_size = 10;
  bool shared = false;
  rpma_srq* srq = nullptr;
};

bool SameHoldings(const FakeNic::Holdings& a, const FakeNic::Holdings& b) {
  return a.pds == b.pds && a.mrs == b.mrs &&
         a.comp_channels == b.comp_channels && a.cqs == b.cqs &&
         a.qps == b.qps && a.srqs == b.srqs &&
         a.event_channels == b.event_channels && a.cm_ids == b.cm_ids &&
         a.cm_events == b.cm_events && a.cm_work == b.cm_work;
}

void PrintHoldings(const char* label, const FakeNic::Holdings& h) {
  fprintf(stderr,
          "%s: pds %zu mrs %zu comp_channels %zu cqs %zu qps %zu srqs %zu "
          "event_channels %zu cm_ids %zu cm_events %zu cm_work %zu\n",
          label, h.pds, h.mrs, h.comp_channels, h.cqs, h.qps, h.srqs,
          h.event_channels, h.cm_ids, h.cm_events, h.cm_work);
}

struct Side {
  GuardedBuffer* arena = nullptr;
  rpma_peer* peer = nullptr;
  rpma_conn_cfg* cfg = nullptr;
  ConnCfgValues cfg_values;
  rpma_conn* conn = nullptr;
  uint32_t qp_num = 0;  // as read right after connecting
  std::vector<std::pair<int64_t, int64_t>> registered;  // [begin, end)
  std::vector<rpma_mr_local*> mrs;                      // live ones
  // Handles on the other side's MRs (they may outlive the MR).
  std::vector<rpma_mr_remote*> remotes;
};

class ApiProgram {
 public:
  explicit ApiProgram(ByteReader* in) : in_(in) {}
  void Run();

 private:
  uint32_t QueueSize();
  size_t Offset();
  int Flags();
  const void* NextContext() {
    const uint64_t id = next_id_++;
    return reinterpret_cast<const void*>(static_cast<uintptr_t>(id));
  }
  void Posted(int ret, const void* context) {
    if (ret == 0) posted_.insert(reinterpret_cast<uintptr_t>(context));
  }
  rpma_conn_cfg* ConnCfg(bool server, ConnCfgValues* values);
  void NewSrq();
  void RegisterMrs(int side);
  bool Connect();
  rpma_mr_local* PickLocal(int side);
  rpma_mr_remote* PickRemote(int side);
  void Act(int side);
  void Poll(rpma_cq* cq);
  void PollAll();
  void Wait(int side);
  void PeerCfg(int side);
  void Getters(int side);
  void RefuseNullArguments(int side);
  void OutgoingRequestDeleted(int side);
  void IncomingRequestRejected();
  void LogFunction();
  void ExpectHoldings(const FakeNic::Holdings& before, const char* what);
  void Deregister(int side);
  void CheckArenas();
  void Teardown();

  ByteReader* in_;
  std::shared_ptr<FakeNic> nic_;
  Side sides_[2];  // 0: client, 1: server
  rpma_srq* srq_ = nullptr;
  rpma_ep* ep_ = nullptr;
  ibv_context* dev_ = nullptr;
  int odp_capable_ = -1;                // the first answer of is_odp_capable
  std::map<const void*, Region> made_;  // live MR handles, local and remote
  uint64_t next_id_ = 1;
  std::set<uintptr_t> posted_;
  std::set<uintptr_t> completed_;
};

// Mostly small, sometimes 0 or huge (the provider may refuse those).
uint32_t ApiProgram::QueueSize() {
  switch (in_->Range(0, 5)) {
    case 0:
      return 0;
    case 1:
      return in_->U32();
    default:
      return static_cast<uint32_t>(in_->Range(1, 16));
  }
}

// Inside an MR, past its end, anywhere, or wrapping when added to anything.
size_t ApiProgram::Offset() {
  switch (in_->Range(0, 7)) {
    case 0:
      return 0;
    case 1:
      return static_cast<size_t>(in_->Range(0, kArena + 64));
    case 2:
      return static_cast<size_t>(in_->U64());
    case 3:
      return SIZE_MAX - static_cast<size_t>(in_->Range(0, 64));
    default:
      return static_cast<size_t>(in_->Range(0, 64));
  }
}

int ApiProgram::Flags() {
  switch (in_->Range(0, 5)) {
    case 0:
      return RPMA_F_COMPLETION_ON_ERROR;
    case 1:
      return static_cast<int>(in_->U8());  // 0 and unknown bits
    case 2:
      return static_cast<int>(in_->U32());
    default:
      return RPMA_F_COMPLETION_ALWAYS;
  }
}

// rpma_conn_cfg's getters give back `want` (each output starts out
// different from it).
void CheckConnCfg(const rpma_conn_cfg* cfg, const ConnCfgValues& want) {
  ConnCfgValues got;
  got.timeout_ms = ~want.timeout_ms;
  got.cq_size = ~want.cq_size;
  got.rcq_size = ~want.rcq_size;
  got.sq_size = ~want.sq_size;
  got.rq_size = ~want.rq_size;
  got.shared = !want.shared;
  got.srq = want.srq == nullptr ? reinterpret_cast<rpma_srq*>(&got) : nullptr;
  Expect("rpma_conn_cfg_get_timeout",
         rpma_conn_cfg_get_timeout(cfg, &got.timeout_ms), {});
  Expect("rpma_conn_cfg_get_cq_size",
         rpma_conn_cfg_get_cq_size(cfg, &got.cq_size), {});
  Expect("rpma_conn_cfg_get_rcq_size",
         rpma_conn_cfg_get_rcq_size(cfg, &got.rcq_size), {});
  Expect("rpma_conn_cfg_get_sq_size",
         rpma_conn_cfg_get_sq_size(cfg, &got.sq_size), {});
  Expect("rpma_conn_cfg_get_rq_size",
         rpma_conn_cfg_get_rq_size(cfg, &got.rq_size), {});
  Expect("rpma_conn_cfg_get_compl_channel",
         rpma_conn_cfg_get_compl_channel(cfg, &got.shared), {});
  Expect("rpma_conn_cfg_get_srq", rpma_conn_cfg_get_srq(cfg, &got.srq), {});
  if (got.timeout_ms != want.timeout_ms || got.cq_size != want.cq_size ||
      got.rcq_size != want.rcq_size || got.sq_size != want.sq_size ||
      got.rq_size != want.rq_size || got.shared != want.shared ||
      got.srq != want.srq) {
    Violation("an rpma_conn_cfg getter disagrees with what was set");
  }
}

rpma_conn_cfg* ApiProgram::ConnCfg(bool server, ConnCfgValues* values) {
  rpma_conn_cfg* cfg = nullptr;
  Expect("rpma_conn_cfg_new", rpma_conn_cfg_new(&cfg), {RPMA_E_NOMEM});
  if (cfg == nullptr) Violation("rpma_conn_cfg_new gave no cfg");
  *values = ConnCfgValues();
  CheckConnCfg(cfg, *values);
  values->cq_size = QueueSize();
  Expect("rpma_conn_cfg_set_cq_size",
         rpma_conn_cfg_set_cq_size(cfg, values->cq_size), {});
  values->sq_size = QueueSize();
  Expect("rpma_conn_cfg_set_sq_size",
         rpma_conn_cfg_set_sq_size(cfg, values->sq_size), {});
  values->rq_size = QueueSize();
  Expect("rpma_conn_cfg_set_rq_size",
         rpma_conn_cfg_set_rq_size(cfg, values->rq_size), {});
  if (in_->Bool()) {
    values->rcq_size = QueueSize();
    Expect("rpma_conn_cfg_set_rcq_size",
           rpma_conn_cfg_set_rcq_size(cfg, values->rcq_size), {});
  }
  values->shared = in_->Bool();
  Expect("rpma_conn_cfg_set_compl_channel",
         rpma_conn_cfg_set_compl_channel(cfg, values->shared), {});
  if (server && srq_ != nullptr && in_->Bool()) {
    values->srq = srq_;
    Expect("rpma_conn_cfg_set_srq", rpma_conn_cfg_set_srq(cfg, srq_), {});
  }
  CheckConnCfg(cfg, *values);
  return cfg;
}

// rpma_srq_cfg's getters give back `rq_size` and `rcq_size`.
void CheckSrqCfg(const rpma_srq_cfg* cfg, uint32_t rq_size, uint32_t rcq_size) {
  uint32_t rq = ~rq_size, rcq = ~rcq_size;
  Expect("rpma_srq_cfg_get_rq_size", rpma_srq_cfg_get_rq_size(cfg, &rq), {});
  Expect("rpma_srq_cfg_get_rcq_size", rpma_srq_cfg_get_rcq_size(cfg, &rcq), {});
  if (rq != rq_size || rcq != rcq_size) {
    Violation("an rpma_srq_cfg getter disagrees with what was set");
  }
}

void ApiProgram::NewSrq() {
  if (!in_->Bool()) return;
  rpma_srq_cfg* cfg = nullptr;
  Expect("rpma_srq_cfg_new", rpma_srq_cfg_new(&cfg), {RPMA_E_NOMEM});
  if (cfg == nullptr) Violation("rpma_srq_cfg_new gave no cfg");
  CheckSrqCfg(cfg, 100, 100);  // rpma_srq_cfg_new(3)'s defaults
  const uint32_t rq_size = QueueSize();
  Expect("rpma_srq_cfg_set_rq_size", rpma_srq_cfg_set_rq_size(cfg, rq_size),
         {});
  const uint32_t rcq_size = in_->Bool() ? 0 : QueueSize();
  Expect("rpma_srq_cfg_set_rcq_size", rpma_srq_cfg_set_rcq_size(cfg, rcq_size),
         {});
  CheckSrqCfg(cfg, rq_size, rcq_size);
  Expect("rpma_srq_new", rpma_srq_new(sides_[1].peer, cfg, &srq_),
         {RPMA_E_PROVIDER, RPMA_E_NOMEM});
  if (rpma_srq_cfg_delete(&cfg) != 0 || cfg != nullptr) {
    Violation("rpma_srq_cfg_delete");
  }
}

void ApiProgram::RegisterMrs(int side) {
  Side& s = sides_[side];
  const int count = static_cast<int>(in_->Range(1, kMaxMrs));
  for (int i = 0; i < count; ++i) {
    const int64_t offset = in_->Range(0, kArena - 1);
    const int64_t length = in_->Range(0, kArena - offset);
    // Mostly the known bits, sometimes anything (RPMA_E_INVAL).
    const int usage = in_->Range(0, 3) == 0 ? static_cast<int>(in_->U16())
                                            : static_cast<int>(in_->U8());
    rpma_mr_local* mr = nullptr;
    const int ret = Expect("rpma_mr_reg",
                           rpma_mr_reg(s.peer, s.arena->data() + offset,
                                       static_cast<size_t>(length), usage, &mr),
                           {RPMA_E_INVAL, RPMA_E_PROVIDER, RPMA_E_NOMEM});
    if (ret != 0) {
      if (mr != nullptr) Violation("rpma_mr_reg failed but gave an MR");
      continue;
    }
    if ((usage & ~0xff) != 0) Violation("rpma_mr_reg took unknown usage bits");
    s.registered.push_back({offset, offset + length});
    s.mrs.push_back(mr);
    made_[mr] = Region{offset, length, usage};
    // The other side learns of it through its descriptor.
    uint8_t desc[64];
    size_t desc_size = 0;
    rpma_mr_remote* remote = nullptr;
    if (rpma_mr_get_descriptor_size(mr, &desc_size) != 0 ||
        desc_size > sizeof(desc) || rpma_mr_get_descriptor(mr, desc) != 0 ||
        rpma_mr_remote_from_descriptor(desc, desc_size, &remote) != 0) {
      Violation("an MR's own descriptor does not round-trip");
    }
    sides_[1 - side].remotes.push_back(remote);
    made_[remote] = Region{offset, length, usage};
  }
}

// The server's peer configuration travels in the accept's private data, as
// librpma's examples do; the client applies what it got.
bool ApiProgram::Connect() {
  rpma_peer_cfg* pcfg = nullptr;
  Expect("rpma_peer_cfg_new", rpma_peer_cfg_new(&pcfg), {RPMA_E_NOMEM});
  Expect("rpma_peer_cfg_set_direct_write_to_pmem",
         rpma_peer_cfg_set_direct_write_to_pmem(pcfg, in_->Bool()), {});
  uint8_t pdesc[64];
  size_t pdesc_size = 0;
  if (rpma_peer_cfg_get_descriptor_size(pcfg, &pdesc_size) != 0 ||
      pdesc_size > sizeof(pdesc) ||
      rpma_peer_cfg_get_descriptor(pcfg, pdesc) != 0) {
    Violation("rpma_peer_cfg descriptor");
  }
  if (rpma_peer_cfg_delete(&pcfg) != 0) Violation("rpma_peer_cfg_delete");

  Expect("rpma_ep_listen", rpma_ep_listen(sides_[1].peer, kAddr, kPort, &ep_),
         {});
  rpma_conn_req* req = nullptr;
  if (Expect(
          "rpma_conn_req_new",
          rpma_conn_req_new(sides_[0].peer, kAddr, kPort, sides_[0].cfg, &req),
          {RPMA_E_INVAL, RPMA_E_PROVIDER, RPMA_E_NOMEM}) != 0) {
    return false;
  }
  Expect("rpma_conn_req_connect",
         rpma_conn_req_connect(&req, nullptr, &sides_[0].conn),
         {RPMA_E_PROVIDER, RPMA_E_NOMEM});
  if (req != nullptr) Violation("rpma_conn_req_connect left the request");
  if (sides_[0].conn == nullptr) return false;
  rpma_conn_req* server_req = nullptr;
  // RPMA_E_INVAL also for a cfg librpma refuses: a shared completion channel
  // with an SRQ that has its own receive CQ (librpma src/conn_req.c).
  if (Expect("rpma_ep_next_conn_req",
             rpma_ep_next_conn_req(ep_, sides_[1].cfg, &server_req),
             {RPMA_E_INVAL, RPMA_E_PROVIDER, RPMA_E_NOMEM, RPMA_E_NO_EVENT}) !=
      0) {
    return false;
  }
  if (in_->Bool() && !sides_[1].mrs.empty()) {
    // A receive before accepting, into one of the server's own MRs.
    const void* context = NextContext();
    Posted(Expect("rpma_conn_req_recv",
                  rpma_conn_req_recv(server_req, sides_[1].mrs[0], Offset(),
                                     Offset(), context),
                  {RPMA_E_INVAL, RPMA_E_PROVIDER}),
           context);
  }
  rpma_conn_private_data pdata{pdesc, static_cast<uint8_t>(pdesc_size)};
  Expect("rpma_conn_req_connect(server)",
         rpma_conn_req_connect(&server_req, &pdata, &sides_[1].conn),
         {RPMA_E_PROVIDER, RPMA_E_NOMEM});
  if (server_req != nullptr) Violation("the accept left the request");
  if (sides_[1].conn == nullptr) return false;
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  // The active side reads its ESTABLISHED first (that sends the RTU).
  if (Expect("rpma_conn_next_event",
             rpma_conn_next_event(sides_[0].conn, &event),
             {RPMA_E_PROVIDER, RPMA_E_UNKNOWN, RPMA_E_NO_EVENT}) != 0 ||
      event != RPMA_CONN_ESTABLISHED) {
    return false;
  }
  if (Expect("rpma_conn_next_event(server)",
             rpma_conn_next_event(sides_[1].conn, &event),
             {RPMA_E_PROVIDER, RPMA_E_UNKNOWN, RPMA_E_NO_EVENT}) != 0 ||
      event != RPMA_CONN_ESTABLISHED) {
    return false;
  }
  rpma_conn_private_data got{};
  if (rpma_conn_get_private_data(sides_[0].conn, &got) != 0 ||
      got.len < pdesc_size) {
    Violation("the accept's private data did not arrive");
  }
  rpma_peer_cfg* remote_cfg = nullptr;
  Expect("rpma_peer_cfg_from_descriptor",
         rpma_peer_cfg_from_descriptor(got.ptr, got.len, &remote_cfg),
         {RPMA_E_INVAL, RPMA_E_NOMEM});
  if (remote_cfg != nullptr) {
    Expect("rpma_conn_apply_remote_peer_cfg",
           rpma_conn_apply_remote_peer_cfg(sides_[0].conn, remote_cfg), {});
    rpma_peer_cfg_delete(&remote_cfg);
  }
  // Completion fds non-blocking, so that waiting never blocks the program.
  for (Side& s : sides_) {
    Expect("rpma_conn_get_qp_num", rpma_conn_get_qp_num(s.conn, &s.qp_num), {});
    int fd = -1;
    if (rpma_conn_get_compl_fd(s.conn, &fd) == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    rpma_cq* cq = nullptr;
    if (rpma_conn_get_cq(s.conn, &cq) == 0 && rpma_cq_get_fd(cq, &fd) == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    if (rpma_conn_get_rcq(s.conn, &cq) == 0 && cq != nullptr &&
        rpma_cq_get_fd(cq, &fd) == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  }
  rpma_cq* srq_rcq = nullptr;
  int fd = -1;
  if (srq_ != nullptr && rpma_srq_get_rcq(srq_, &srq_rcq) == 0 &&
      srq_rcq != nullptr && rpma_cq_get_fd(srq_rcq, &fd) == 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return true;
}

// A live local MR of `side`, or NULL now and then.
rpma_mr_local* ApiProgram::PickLocal(int side) {
  const auto& mrs = sides_[side].mrs;
  const int64_t pick = in_->Range(0, static_cast<int64_t>(mrs.size()));
  return pick == static_cast<int64_t>(mrs.size()) ? nullptr : mrs[pick];
}

// A handle on one of the other side's MRs (possibly deregistered since), or
// NULL now and then.
rpma_mr_remote* ApiProgram::PickRemote(int side) {
  const auto& remotes = sides_[side].remotes;
  const int64_t pick = in_->Range(0, static_cast<int64_t>(remotes.size()));
  return pick == static_cast<int64_t>(remotes.size()) ? nullptr : remotes[pick];
}

void ApiProgram::Act(int side) {
  rpma_conn* conn = sides_[side].conn;
  const void* context = NextContext();
  switch (in_->Range(0, 7)) {
    case 0: {
      rpma_mr_local* dst = PickLocal(side);
      const size_t dst_off = Offset();
      rpma_mr_remote* src = PickRemote(side);
      const size_t src_off = Offset(), len = Offset();
      Posted(Expect("rpma_read",
                    rpma_read(conn, dst, dst_off, src, src_off, len, Flags(),
                              context),
                    {RPMA_E_INVAL, RPMA_E_PROVIDER}),
             context);
      break;
    }
    case 1:
    case 2: {
      const bool imm = in_->Bool();
      rpma_mr_remote* dst = PickRemote(side);
      const size_t dst_off = Offset();
      rpma_mr_local* src = PickLocal(side);
      const size_t src_off = Offset(), len = Offset();
      const int flags = Flags();
      const int ret =
          imm ? rpma_write_with_imm(conn, dst, dst_off, src, src_off, len,
                                    flags, in_->U32(), context)
              : rpma_write(conn, dst, dst_off, src, src_off, len, flags,
                           context);
      Posted(Expect("rpma_write", ret, {RPMA_E_INVAL, RPMA_E_PROVIDER}),
             context);
      break;
    }
    case 3: {
      rpma_mr_remote* dst = PickRemote(side);
      // Aligned mostly; sometimes not (RPMA_E_INVAL).
      size_t off = Offset();
      if (in_->Bool()) off &= ~static_cast<size_t>(7);
      char src[8];
      for (char& c : src) c = static_cast<char>(in_->U8());
      Posted(Expect("rpma_atomic_write",
                    rpma_atomic_write(conn, dst, off, src, Flags(), context),
                    {RPMA_E_INVAL, RPMA_E_PROVIDER}),
             context);
      break;
    }
    case 4: {
      rpma_mr_remote* dst = PickRemote(side);
      const size_t off = Offset(), len = Offset();
      const int raw = static_cast<int>(in_->Range(0, 4));
      const int type = raw < 4 ? raw % 2 : static_cast<int>(in_->U32());
      const int flags = Flags();
      Posted(Expect("rpma_flush",
                    FlushRaw(conn, dst, off, len, type, flags, context),
                    {RPMA_E_INVAL, RPMA_E_NOSUPP, RPMA_E_PROVIDER}),
             context);
      break;
    }
    case 5: {
      rpma_mr_local* src = PickLocal(side);
      const size_t off = Offset(), len = Offset();
      const int flags = Flags();
      const int ret = in_->Bool()
                          ? rpma_send_with_imm(conn, src, off, len, flags,
                                               in_->U32(), context)
                          : rpma_send(conn, src, off, len, flags, context);
      Posted(Expect("rpma_send", ret, {RPMA_E_INVAL, RPMA_E_PROVIDER}),
             context);
      break;
    }
    default: {
      rpma_mr_local* dst = PickLocal(side);
      const size_t off = Offset(), len = Offset();
      const int ret = side == 1 && srq_ != nullptr && in_->Bool()
                          ? rpma_srq_recv(srq_, dst, off, len, context)
                          : rpma_recv(conn, dst, off, len, context);
      Posted(Expect("rpma_recv", ret, {RPMA_E_INVAL, RPMA_E_PROVIDER}),
             context);
      break;
    }
  }
}

void ApiProgram::Poll(rpma_cq* cq) {
  if (cq == nullptr) return;
  ibv_wc wcs[4];
  int got = 0;
  const int ret = Expect("rpma_cq_get_wc", rpma_cq_get_wc(cq, 4, wcs, &got),
                         {RPMA_E_NO_COMPLETION, RPMA_E_PROVIDER});
  if (ret != 0) return;
  if (got < 1 || got > 4) Violation("rpma_cq_get_wc count", got);
  for (int i = 0; i < got; ++i) {
    const uintptr_t id = static_cast<uintptr_t>(wcs[i].wr_id);
    if (!posted_.count(id)) {
      Violation("a completion for an operation that was never posted");
    }
    if (!completed_.insert(id).second) {
      Violation("two completions for one operation");
    }
  }
}

void ApiProgram::PollAll() {
  for (Side& s : sides_) {
    if (s.conn == nullptr) continue;
    rpma_cq* cq = nullptr;
    if (rpma_conn_get_cq(s.conn, &cq) != 0) Violation("rpma_conn_get_cq");
    Poll(cq);
    if (rpma_conn_get_rcq(s.conn, &cq) != 0) Violation("rpma_conn_get_rcq");
    Poll(cq);
  }
  rpma_cq* rcq = nullptr;
  if (srq_ != nullptr) {
    if (rpma_srq_get_rcq(srq_, &rcq) != 0) Violation("rpma_srq_get_rcq");
    Poll(rcq);
  }
}

// rpma_conn_wait or rpma_cq_wait, on fds made non-blocking.
void ApiProgram::Wait(int side) {
  rpma_conn* conn = sides_[side].conn;
  if (in_->Bool()) {
    rpma_cq* cq = nullptr;
    bool is_rcq = false;
    const int ret =
        Expect("rpma_conn_wait",
               rpma_conn_wait(conn, static_cast<int>(in_->U8()), &cq, &is_rcq),
               {RPMA_E_NOT_SHARED_CHNL, RPMA_E_NO_COMPLETION, RPMA_E_PROVIDER,
                RPMA_E_UNKNOWN});
    if (ret == 0) Poll(cq);
    return;
  }
  rpma_cq* cq = nullptr;
  if (in_->Bool()) {
    rpma_conn_get_rcq(conn, &cq);
  } else {
    rpma_conn_get_cq(conn, &cq);
  }
  if (cq == nullptr) return;
  if (Expect("rpma_cq_wait", rpma_cq_wait(cq),
             {RPMA_E_NO_COMPLETION, RPMA_E_SHARED_CHANNEL, RPMA_E_PROVIDER,
              RPMA_E_UNKNOWN}) == 0) {
    Poll(cq);
  }
}

// The getters, each against what was set or made; rpma_conn_cfg's timeout
// from the input first; the string functions with a value from the input.
void ApiProgram::Getters(int side) {
  Side& s = sides_[side];
  const Side& other = sides_[1 - side];
  int fd = -1, other_fd = -1, ep_fd = -1;
  Expect("rpma_conn_get_event_fd", rpma_conn_get_event_fd(s.conn, &fd), {});
  Expect("rpma_conn_get_event_fd",
         rpma_conn_get_event_fd(other.conn, &other_fd), {});
  Expect("rpma_ep_get_fd", rpma_ep_get_fd(ep_, &ep_fd), {});
  if (fcntl(fd, F_GETFD) == -1 || fcntl(other_fd, F_GETFD) == -1 ||
      fcntl(ep_fd, F_GETFD) == -1) {
    Violation("rpma_conn_get_event_fd / rpma_ep_get_fd: not an open fd");
  }
  // Each connection has an event channel of its own, apart from the
  // endpoint's.
  if (fd == other_fd || fd == ep_fd || other_fd == ep_fd) {
    Violation("two event channels share an fd");
  }
  uint32_t qp_num = 0;
  Expect("rpma_conn_get_qp_num", rpma_conn_get_qp_num(s.conn, &qp_num), {});
  // Both QPs are on one device: their numbers differ.
  if (qp_num == 0 || qp_num != s.qp_num || qp_num == other.qp_num) {
    Violation("rpma_conn_get_qp_num: zero, changed or the other side's");
  }

  // rpma_conn_cfg_set_timeout(3): RPMA_E_INVAL for timeout_ms < 0, and the
  // cfg keeps its value.
  const int timeout = in_->Range(0, 3) == 0
                          ? static_cast<int>(in_->U32())
                          : static_cast<int>(in_->Range(-2, 5000));
  const int set =
      Expect("rpma_conn_cfg_set_timeout",
             rpma_conn_cfg_set_timeout(s.cfg, timeout), {RPMA_E_INVAL});
  if ((set != 0) != (timeout < 0)) {
    Violation(
        "rpma_conn_cfg_set_timeout: refused a valid timeout or took a "
        "negative one",
        set);
  }
  if (set == 0) s.cfg_values.timeout_ms = timeout;
  CheckConnCfg(s.cfg, s.cfg_values);

  if (rpma_mr_local* mr = PickLocal(side)) {
    void* ptr = nullptr;
    size_t size = 0;
    Expect("rpma_mr_get_ptr", rpma_mr_get_ptr(mr, &ptr), {});
    Expect("rpma_mr_get_size", rpma_mr_get_size(mr, &size), {});
    const Region& region = made_.at(mr);
    if (ptr != s.arena->data() + region.offset ||
        size != static_cast<size_t>(region.length)) {
      Violation("rpma_mr_get_ptr / rpma_mr_get_size: not the registration's");
    }
  }
  if (rpma_mr_remote* mr = PickRemote(side)) {
    size_t size = 0;
    int flush_type = -1;
    Expect("rpma_mr_remote_get_size", rpma_mr_remote_get_size(mr, &size), {});
    Expect("rpma_mr_remote_get_flush_type",
           rpma_mr_remote_get_flush_type(mr, &flush_type), {});
    const Region& region = made_.at(mr);
    const int flush_bits = RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
                           RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT;
    if (size != static_cast<size_t>(region.length) ||
        flush_type != (region.usage & flush_bits)) {
      Violation(
          "rpma_mr_remote_get_size / _get_flush_type: not the "
          "registration's");
    }
  }

  int capable = -1;
  if (Expect("rpma_utils_ibv_context_is_odp_capable",
             rpma_utils_ibv_context_is_odp_capable(dev_, &capable),
             {RPMA_E_PROVIDER}) == 0) {
    if ((capable != 0 && capable != 1) ||
        (odp_capable_ != -1 && capable != odp_capable_)) {
      Violation(
          "rpma_utils_ibv_context_is_odp_capable: not 0 or 1, or "
          "changed",
          capable);
    }
    odp_capable_ = capable;
  }

  // Around the known codes and events, or any int.
  const int value = in_->Bool() ? static_cast<int>(in_->Range(-100011, 8))
                                : static_cast<int>(in_->U32());
  CheckText("rpma_err_2str", rpma_err_2str(value));
  CheckText("rpma_utils_conn_event_2str", ConnEventText(value));
  if (in_->Bool()) RefuseNullArguments(side);
}

// Every getter above with a NULL object and with a NULL output, and the
// other calls whose man pages name RPMA_E_INVAL for a NULL argument: each
// is refused and writes no output.
void ApiProgram::RefuseNullArguments(int side) {
  const Side& s = sides_[side];
  rpma_srq_cfg* srq_cfg = nullptr;
  Expect("rpma_srq_cfg_new", rpma_srq_cfg_new(&srq_cfg), {RPMA_E_NOMEM});
  if (srq_cfg == nullptr) Violation("rpma_srq_cfg_new gave no cfg");
  // An MR, or NULL when the side has none (then both arguments are NULL).
  rpma_mr_local* mr = s.mrs.empty() ? nullptr : s.mrs.front();
  rpma_mr_remote* remote = s.remotes.empty() ? nullptr : s.remotes.front();
  constexpr int kUntouched = 0x5a5a5a5a;
  int i = kUntouched;
  uint32_t u = kUntouched;
  size_t z = kUntouched;
  void* const untouched = &i;
  void* p = untouched;
  bool b = false;
  rpma_srq* srq = static_cast<rpma_srq*>(untouched);
  rpma_conn_private_data pdata{untouched, 7};
  ExpectRefused({
      {"rpma_conn_cfg_set_timeout", rpma_conn_cfg_set_timeout(nullptr, 0)},
      {"rpma_conn_cfg_get_timeout", rpma_conn_cfg_get_timeout(nullptr, &i)},
      {"rpma_conn_cfg_get_timeout", rpma_conn_cfg_get_timeout(s.cfg, nullptr)},
      {"rpma_conn_cfg_get_cq_size", rpma_conn_cfg_get_cq_size(nullptr, &u)},
      {"rpma_conn_cfg_get_cq_size", rpma_conn_cfg_get_cq_size(s.cfg, nullptr)},
      {"rpma_conn_cfg_get_rcq_size", rpma_conn_cfg_get_rcq_size(nullptr, &u)},
      {"rpma_conn_cfg_get_rcq_size",
       rpma_conn_cfg_get_rcq_size(s.cfg, nullptr)},
      {"rpma_conn_cfg_get_sq_size", rpma_conn_cfg_get_sq_size(nullptr, &u)},
      {"rpma_conn_cfg_get_sq_size", rpma_conn_cfg_get_sq_size(s.cfg, nullptr)},
      {"rpma_conn_cfg_get_rq_size", rpma_conn_cfg_get_rq_size(nullptr, &u)},
      {"rpma_conn_cfg_get_rq_size", rpma_conn_cfg_get_rq_size(s.cfg, nullptr)},
      {"rpma_conn_cfg_get_compl_channel",
       rpma_conn_cfg_get_compl_channel(nullptr, &b)},
      {"rpma_conn_cfg_get_compl_channel",
       rpma_conn_cfg_get_compl_channel(s.cfg, nullptr)},
      {"rpma_conn_cfg_get_srq", rpma_conn_cfg_get_srq(nullptr, &srq)},
      {"rpma_conn_cfg_get_srq", rpma_conn_cfg_get_srq(s.cfg, nullptr)},
      {"rpma_conn_get_event_fd", rpma_conn_get_event_fd(nullptr, &i)},
      {"rpma_conn_get_event_fd", rpma_conn_get_event_fd(s.conn, nullptr)},
      {"rpma_conn_get_qp_num", rpma_conn_get_qp_num(nullptr, &u)},
      {"rpma_conn_get_qp_num", rpma_conn_get_qp_num(s.conn, nullptr)},
      {"rpma_ep_get_fd", rpma_ep_get_fd(nullptr, &i)},
      {"rpma_ep_get_fd", rpma_ep_get_fd(ep_, nullptr)},
      {"rpma_mr_get_ptr", rpma_mr_get_ptr(nullptr, &p)},
      {"rpma_mr_get_ptr", rpma_mr_get_ptr(mr, nullptr)},
      {"rpma_mr_get_size", rpma_mr_get_size(nullptr, &z)},
      {"rpma_mr_get_size", rpma_mr_get_size(mr, nullptr)},
      {"rpma_mr_remote_get_size", rpma_mr_remote_get_size(nullptr, &z)},
      {"rpma_mr_remote_get_size", rpma_mr_remote_get_size(remote, nullptr)},
      {"rpma_mr_remote_get_flush_type",
       rpma_mr_remote_get_flush_type(nullptr, &i)},
      {"rpma_mr_remote_get_flush_type",
       rpma_mr_remote_get_flush_type(remote, nullptr)},
      {"rpma_srq_cfg_get_rq_size", rpma_srq_cfg_get_rq_size(nullptr, &u)},
      {"rpma_srq_cfg_get_rq_size", rpma_srq_cfg_get_rq_size(srq_cfg, nullptr)},
      {"rpma_srq_cfg_get_rcq_size", rpma_srq_cfg_get_rcq_size(nullptr, &u)},
      {"rpma_srq_cfg_get_rcq_size",
       rpma_srq_cfg_get_rcq_size(srq_cfg, nullptr)},
      {"rpma_conn_req_get_private_data",
       rpma_conn_req_get_private_data(nullptr, &pdata)},
      {"rpma_conn_req_delete", rpma_conn_req_delete(nullptr)},
  });
  if (i != kUntouched || u != static_cast<uint32_t>(kUntouched) ||
      z != static_cast<size_t>(kUntouched) || p != untouched ||
      srq != static_cast<rpma_srq*>(untouched) || pdata.ptr != untouched ||
      pdata.len != 7) {
    Violation("a refused getter wrote its output");
  }
  // rpma_utils_ibv_context_is_odp_capable(3): the output is undefined on
  // failure, so only the answer is checked.
  ExpectRefused({
      {"rpma_utils_ibv_context_is_odp_capable",
       rpma_utils_ibv_context_is_odp_capable(nullptr, &i)},
      {"rpma_utils_ibv_context_is_odp_capable",
       rpma_utils_ibv_context_is_odp_capable(dev_, nullptr)},
  });
  Expect("rpma_srq_cfg_delete", rpma_srq_cfg_delete(&srq_cfg), {});
}

void ApiProgram::ExpectHoldings(const FakeNic::Holdings& before,
                                const char* what) {
  const FakeNic::Holdings after = nic_->CurrentHoldings();
  if (!SameHoldings(before, after)) {
    PrintHoldings("before", before);
    PrintHoldings("after", after);
    Violation(what);
  }
}

// A request of `side`'s peer to the endpoint, made and deleted without
// connecting: it carries no private data (only a request the endpoint got
// does, rpma_conn_req_get_private_data(3)), and once deleted the NIC holds
// what it held before.
void ApiProgram::OutgoingRequestDeleted(int side) {
  const Side& s = sides_[side];
  const FakeNic::Holdings before = nic_->CurrentHoldings();
  rpma_conn_req* req = nullptr;
  if (Expect("rpma_conn_req_new",
             rpma_conn_req_new(s.peer, kAddr, kPort,
                               in_->Bool() ? s.cfg : nullptr, &req),
             {RPMA_E_INVAL, RPMA_E_PROVIDER, RPMA_E_NOMEM}) != 0) {
    if (req != nullptr) Violation("a failed rpma_conn_req_new gave a request");
    ExpectHoldings(before, "a failed rpma_conn_req_new left objects");
    return;
  }
  rpma_conn_private_data pdata{&pdata, 1};
  Expect("rpma_conn_req_get_private_data",
         rpma_conn_req_get_private_data(req, &pdata), {});
  if (pdata.ptr != nullptr || pdata.len != 0) {
    Violation("an outgoing request carries private data");
  }
  ExpectRefused({{"rpma_conn_req_get_private_data",
                  rpma_conn_req_get_private_data(req, nullptr)}});
  // rpma_conn_req_delete(3): *req_ptr is NULL on success and on failure.
  Expect("rpma_conn_req_delete", rpma_conn_req_delete(&req), {RPMA_E_PROVIDER});
  if (req != nullptr) Violation("rpma_conn_req_delete left *req_ptr");
  ExpectHoldings(before, "a request deleted unused left objects");
}

// A second client request, connected with private data from the input,
// that the server takes and deletes instead of accepting: that rejects it
// (rpma_conn_req_delete(3), passive side). The server saw the client's
// private data; the client sees RPMA_CONN_REJECTED; once the client deletes
// its connection the NIC holds what it held before.
void ApiProgram::IncomingRequestRejected() {
  const FakeNic::Holdings before = nic_->CurrentHoldings();
  rpma_conn_req* req = nullptr;
  if (Expect("rpma_conn_req_new",
             rpma_conn_req_new(sides_[0].peer, kAddr, kPort,
                               in_->Bool() ? sides_[0].cfg : nullptr, &req),
             {RPMA_E_INVAL, RPMA_E_PROVIDER, RPMA_E_NOMEM}) != 0) {
    ExpectHoldings(before, "a failed rpma_conn_req_new left objects");
    return;
  }
  // A connect request carries up to 56 bytes (rdma_connect(3), RC); the
  // fake refuses more (EINVAL: RPMA_E_PROVIDER).
  uint8_t sent[60];
  const size_t len = static_cast<size_t>(in_->Range(0, sizeof(sent)));
  for (size_t i = 0; i < len; ++i) sent[i] = in_->U8();
  const rpma_conn_private_data pdata{sent, static_cast<uint8_t>(len)};
  rpma_conn* conn = nullptr;
  if (Expect("rpma_conn_req_connect",
             rpma_conn_req_connect(&req, len > 0 ? &pdata : nullptr, &conn),
             {RPMA_E_PROVIDER, RPMA_E_NOMEM}) != 0) {
    if (req != nullptr || conn != nullptr) {
      Violation("a failed connect left its request or gave a connection");
    }
    ExpectHoldings(before, "a request whose connect failed left objects");
    return;
  }
  // The endpoint's channel blocks: the fake steps until the request is in.
  rpma_conn_req* incoming = nullptr;
  if (Expect("rpma_ep_next_conn_req",
             rpma_ep_next_conn_req(ep_, in_->Bool() ? sides_[1].cfg : nullptr,
                                   &incoming),
             {RPMA_E_INVAL, RPMA_E_PROVIDER, RPMA_E_NOMEM}) == 0) {
    // What was sent, zero-padded to the CM field where the device pads it
    // (rxe and siw do: the whole 56 bytes arrive).
    rpma_conn_private_data got{};
    Expect("rpma_conn_req_get_private_data",
           rpma_conn_req_get_private_data(incoming, &got), {});
    const auto* data = static_cast<const uint8_t*>(got.ptr);
    bool same = got.len >= len && (got.len == 0 || data != nullptr);
    for (size_t i = 0; same && i < got.len; ++i) {
      same = data[i] == (i < len ? sent[i] : 0);
    }
    if (!same) {
      Violation("the server's request does not carry the client's data");
    }
    Expect("rpma_conn_req_delete(server)", rpma_conn_req_delete(&incoming),
           {RPMA_E_PROVIDER});
    if (incoming != nullptr) Violation("rpma_conn_req_delete left *req_ptr");
  }
  // Refused by rpma_ep_next_conn_req (a cfg it cannot set up), the request
  // is rejected too (rpma/ep.cc): the client is rejected either way.
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  Expect("rpma_conn_next_event(rejected)", rpma_conn_next_event(conn, &event),
         {});
  if (event != RPMA_CONN_REJECTED) {
    Violation("the client of a deleted request is not RPMA_CONN_REJECTED",
              event);
  }
  Expect("rpma_conn_delete(rejected)", rpma_conn_delete(&conn),
         {RPMA_E_PROVIDER});
  if (conn != nullptr) Violation("rpma_conn_delete left *conn_ptr");
  ExpectHoldings(before, "a rejected request left objects");
}

// rpma_log_set_function from the input: the counting function, or the
// default back (Run puts the default back at the end in any case). The
// harness's sink is off while the counting function is installed, since the
// sink would take every message first.
void ApiProgram::LogFunction() {
  if (!in_->Bool()) {
    DefaultLogging();
    return;
  }
  SetLogSink(nullptr);
  SetLogFunction(CountingLog);
  // A message at RPMA_LOG_LEVEL_ERROR (rpma/peer_cfg.cc logs a descriptor
  // too short at that level) reaches the function if the threshold lets it
  // through; CountingLog itself refuses one it should not get.
  rpma_log_level threshold = RPMA_LOG_DISABLED;
  Expect("rpma_log_get_threshold",
         rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &threshold), {});
  const int before = g_logged;
  const uint8_t desc = 0;
  rpma_peer_cfg* pcfg = nullptr;
  ExpectRefused({{"rpma_peer_cfg_from_descriptor (0 bytes)",
                  rpma_peer_cfg_from_descriptor(&desc, 0, &pcfg)}});
  if (threshold >= RPMA_LOG_LEVEL_ERROR && g_logged == before) {
    Violation("the log function missed a message the threshold let through");
  }
}

// A peer configuration from fuzz bytes, applied to the connection.
void ApiProgram::PeerCfg(int side) {
  uint8_t desc[4];
  const size_t size = static_cast<size_t>(in_->Range(0, sizeof(desc)));
  for (size_t i = 0; i < size; ++i) desc[i] = in_->U8();
  rpma_peer_cfg* pcfg = nullptr;
  const int ret = Expect(
      "rpma_peer_cfg_from_descriptor",
      rpma_peer_cfg_from_descriptor(in_->Bool() ? nullptr : desc, size, &pcfg),
      {RPMA_E_INVAL, RPMA_E_NOMEM});
  if (ret != 0) {
    if (pcfg != nullptr) Violation("peer cfg output written on failure");
    return;
  }
  bool direct = false;
  if (rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct) != 0) {
    Violation("rpma_peer_cfg_get_direct_write_to_pmem");
  }
  if (in_->Bool()) {
    rpma_peer_cfg_set_direct_write_to_pmem(pcfg, !direct);
  }
  Expect("rpma_conn_apply_remote_peer_cfg",
         rpma_conn_apply_remote_peer_cfg(sides_[side].conn, pcfg), {});
  if (rpma_peer_cfg_delete(&pcfg) != 0 || pcfg != nullptr) {
    Violation("rpma_peer_cfg_delete");
  }
}

void ApiProgram::Deregister(int side) {
  Side& s = sides_[side];
  if (s.mrs.empty()) return;
  const size_t pick = static_cast<size_t>(
      in_->Range(0, static_cast<int64_t>(s.mrs.size()) - 1));
  made_.erase(s.mrs[pick]);
  if (rpma_mr_dereg(&s.mrs[pick]) != 0 || s.mrs[pick] != nullptr) {
    Violation("rpma_mr_dereg of a live MR failed");
  }
  s.mrs.erase(s.mrs.begin() + static_cast<std::ptrdiff_t>(pick));
}

void ApiProgram::CheckArenas() {
  for (int side = 0; side < 2; ++side) {
    const Side& s = sides_[side];
    if (!UnregisteredBytesUnchanged(side, s.arena->data(), PatternOf(side),
                                    kArena, s.registered)) {
      Violation("a byte outside every registered region changed");
    }
  }
}

void ApiProgram::Teardown() {
  if (sides_[0].conn != nullptr) {
    Expect("rpma_conn_disconnect", rpma_conn_disconnect(sides_[0].conn),
           {RPMA_E_PROVIDER});
  }
  nic_->RunUntilIdle(10000);
  for (Side& s : sides_) {
    if (rpma_conn_delete(&s.conn) != 0 || s.conn != nullptr) {
      Violation("rpma_conn_delete");
    }
  }
  if (rpma_ep_shutdown(&ep_) != 0) Violation("rpma_ep_shutdown");
  if (rpma_srq_delete(&srq_) != 0) Violation("rpma_srq_delete");
  for (Side& s : sides_) {
    for (rpma_mr_remote*& remote : s.remotes) {
      if (rpma_mr_remote_delete(&remote) != 0) {
        Violation("rpma_mr_remote_delete");
      }
    }
    for (rpma_mr_local*& mr : s.mrs) {
      if (rpma_mr_dereg(&mr) != 0) Violation("rpma_mr_dereg");
    }
    if (rpma_conn_cfg_delete(&s.cfg) != 0) Violation("rpma_conn_cfg_delete");
    if (rpma_peer_delete(&s.peer) != 0) Violation("rpma_peer_delete");
  }
  const FakeNic::Holdings left = nic_->CurrentHoldings();
  if (!left.Empty()) {
    PrintHoldings("left", left);
    Violation("the NIC holds objects after everything was deleted");
  }
}

void ApiProgram::Run() {
  FakeNicConfig config;
  switch (in_->Range(0, 2)) {
    case 1:
      config.personality = Personality::Rxe();
      break;
    case 2:
      config.personality = Personality::Siw();
      break;
    default:
      break;
  }
  config.seed = in_->U8();
  nic_ = std::make_shared<FakeNic>(config);
  ScopedBackend use(nic_);
  nic_->AddObserver([](const FakeNicEvent& e) {
    if (e.text.find("harness error") != std::string::npos) {
      Violation("the NIC faulted on memory it verified at registration");
    }
  });
  for (int side = 0; side < 2; ++side) {
    sides_[side].arena = &Arena(side);
    std::memcpy(sides_[side].arena->data(), PatternOf(side), kArena);
  }
  if (rpma_utils_get_ibv_context(kAddr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev_) !=
          0 ||
      rpma_peer_new(dev_, &sides_[0].peer) != 0 ||
      rpma_peer_new(dev_, &sides_[1].peer) != 0) {
    Violation("could not make the peers");
  }
  NewSrq();
  sides_[0].cfg = ConnCfg(false, &sides_[0].cfg_values);
  sides_[1].cfg = ConnCfg(true, &sides_[1].cfg_values);
  RegisterMrs(0);
  RegisterMrs(1);
  if (Connect()) {
    // The leak check below must be able to fail: a live pair is seen.
    const FakeNic::Holdings live = nic_->CurrentHoldings();
    if (live.qps < 2 || live.pds < 2 || live.cqs < 2 || live.cm_ids < 3) {
      Violation("CurrentHoldings misses the live connections");
    }
    for (int action = 0; action < kMaxActions && !in_->empty(); ++action) {
      const int side = static_cast<int>(in_->Range(0, 1));
      switch (in_->Range(0, 11)) {
        case 0:
        case 2:
        case 3:
          Act(side);
          break;
        case 1:
          // Once a fourth share of Act. The selector keeps its 12 values so
          // that the kept corpus, its crash input included, decodes as it
          // did wherever it did not pick 1.
          switch (in_->Range(0, 3)) {
            case 0:
              Getters(side);
              break;
            case 1:
              OutgoingRequestDeleted(side);
              break;
            case 2:
              IncomingRequestRejected();
              break;
            default:
              LogFunction();
              break;
          }
          break;
        case 4:
          for (int64_t n = in_->Range(1, 4); n > 0; --n) nic_->Step();
          break;
        case 5:
          PollAll();
          break;
        case 6:
          Wait(side);
          break;
        case 7: {
          rpma_mr_local* mr = PickLocal(side);
          const size_t off = Offset(), len = Offset();
          Expect("rpma_mr_advise",
                 rpma_mr_advise(mr, off, len, static_cast<int>(in_->U8()) - 2,
                                in_->U32()),
                 {RPMA_E_INVAL, RPMA_E_NOSUPP, RPMA_E_PROVIDER});
          break;
        }
        case 8:
          PeerCfg(side);
          break;
        case 9:
          Deregister(side);
          break;
        case 10: {
          const int threshold = static_cast<int>(in_->Range(-1, 2));
          const int level = static_cast<int>(in_->Range(-2, 6));
          Expect("rpma_log_set_threshold", SetThresholdRaw(threshold, level),
                 {RPMA_E_INVAL});
          Expect("rpma_log_get_threshold", GetThresholdRaw(threshold),
                 {RPMA_E_INVAL});
          break;
        }
        default:
          nic_->RunUntilIdle(10000);
          PollAll();
          break;
      }
    }
    nic_->RunUntilIdle(10000);
    for (int i = 0; i < 64; ++i) PollAll();
  }
  CheckArenas();
  Teardown();
  CheckArenas();
  // The next input starts with the default log function (the fuzzer runs
  // every input in one process).
  DefaultLogging();
}

}  // namespace

int FuzzRpmaApi(const uint8_t* data, size_t size) {
  // Refused calls are logged by the rpma layer; not news here.
  static bool quiet = [] {
    SetLogSink(Quiet);
    return true;
  }();
  (void)quiet;
  ByteReader in(data, size);
  ApiProgram program(&in);
  program.Run();
  return 0;
}

}  // namespace rpma_harness
