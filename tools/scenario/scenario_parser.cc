#include "tools/scenario/scenario_parser.h"

#include <errno.h>
#include <librpma.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace rpma_harness {
namespace {

// A parse failure with its position; thrown inside the parser only.
struct ParseError {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void Fail(const YAML::Node& node, std::string message) {
  throw ParseError{node.Mark(), std::move(message)};
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Rejects keys of `map` that are not in `allowed`, naming the allowed ones.
void CheckKeys(const YAML::Node& map, const std::string& where,
               const std::vector<std::string>& allowed) {
  if (!map.IsMap()) Fail(map, where + ": expected a mapping of keys");
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>();
    bool known = false;
    for (const std::string& a : allowed) known = known || a == key;
    if (!known) {
      Fail(entry.first, where + ": unknown key '" + key +
                            "' (expected one of: " + Join(allowed) + ")");
    }
  }
}

uint64_t Unsigned(const YAML::Node& node, const std::string& what,
                  uint64_t max = UINT64_MAX) {
  if (!node.IsScalar()) Fail(node, what + ": expected a number");
  const std::string text = node.Scalar();
  errno = 0;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 0);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0) {
    Fail(node, what +
                   ": expected an unsigned number (decimal or 0x hex), got '" +
                   text + "'");
  }
  if (value > max) {
    Fail(node, what + ": " + text + " is larger than " + std::to_string(max));
  }
  return value;
}

std::string Text(const YAML::Node& node, const std::string& what) {
  if (!node.IsScalar()) Fail(node, what + ": expected text");
  return node.Scalar();
}

bool Bool(const YAML::Node& node, const std::string& what) {
  const std::string text = Text(node, what);
  if (text == "true" || text == "yes") return true;
  if (text == "false" || text == "no") return false;
  Fail(node, what + ": expected true or false, got '" + text + "'");
}

template <typename T>
T OneOf(const YAML::Node& node, const std::string& what,
        const std::vector<std::pair<std::string, T>>& choices) {
  const std::string text = Text(node, what);
  std::vector<std::string> names;
  for (const auto& [name, value] : choices) {
    if (name == text) return value;
    names.push_back(name);
  }
  Fail(node, what + ": unknown value '" + text +
                 "' (expected one of: " + Join(names) + ")");
}

const std::vector<std::pair<std::string, ibv_wc_status>>& StatusNames() {
  static const auto* names =
      new std::vector<std::pair<std::string, ibv_wc_status>>{
          {"SUCCESS", IBV_WC_SUCCESS},
          {"LOC_LEN_ERR", IBV_WC_LOC_LEN_ERR},
          {"LOC_QP_OP_ERR", IBV_WC_LOC_QP_OP_ERR},
          {"LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR},
          {"WR_FLUSH_ERR", IBV_WC_WR_FLUSH_ERR},
          {"BAD_RESP_ERR", IBV_WC_BAD_RESP_ERR},
          {"LOC_ACCESS_ERR", IBV_WC_LOC_ACCESS_ERR},
          {"REM_INV_REQ_ERR", IBV_WC_REM_INV_REQ_ERR},
          {"REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR},
          {"REM_OP_ERR", IBV_WC_REM_OP_ERR},
          {"RETRY_EXC_ERR", IBV_WC_RETRY_EXC_ERR},
          {"RNR_RETRY_EXC_ERR", IBV_WC_RNR_RETRY_EXC_ERR},
          {"REM_ABORT_ERR", IBV_WC_REM_ABORT_ERR},
          {"FATAL_ERR", IBV_WC_FATAL_ERR},
          {"RESP_TIMEOUT_ERR", IBV_WC_RESP_TIMEOUT_ERR},
          {"GENERAL_ERR", IBV_WC_GENERAL_ERR},
      };
  return *names;
}

int Errno(const YAML::Node& node, const std::string& what) {
  static const std::vector<std::pair<std::string, int>> names = {
      {"EPERM", EPERM},           {"EIO", EIO},
      {"EAGAIN", EAGAIN},         {"ENOMEM", ENOMEM},
      {"EACCES", EACCES},         {"EFAULT", EFAULT},
      {"EBUSY", EBUSY},           {"EINVAL", EINVAL},
      {"ENOSPC", ENOSPC},         {"ENODEV", ENODEV},
      {"ENOSYS", ENOSYS},         {"EOPNOTSUPP", EOPNOTSUPP},
      {"ETIMEDOUT", ETIMEDOUT},   {"ECONNREFUSED", ECONNREFUSED},
      {"ECONNRESET", ECONNRESET}, {"EHOSTUNREACH", EHOSTUNREACH},
  };
  const std::string text = Text(node, what);
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
    return static_cast<int>(Unsigned(node, what, 4095));
  }
  return OneOf(node, what, names);
}

PeerSpec ParsePeer(const YAML::Node& node, const std::string& where,
                   ReceiverSpec* receiver) {
  std::vector<std::string> keys = {"cq_size", "sq_size", "rq_size", "mr_size"};
  if (receiver != nullptr) {
    keys.push_back("recv");
    keys.push_back("prepost");
  }
  CheckKeys(node, where, keys);
  PeerSpec peer;
  if (node["cq_size"]) {
    peer.cq_size = Unsigned(node["cq_size"], where + ".cq_size", 65536);
  }
  if (node["sq_size"]) {
    peer.sq_size = Unsigned(node["sq_size"], where + ".sq_size", 4096);
  }
  if (node["rq_size"]) {
    peer.rq_size = Unsigned(node["rq_size"], where + ".rq_size", 4096);
  }
  if (node["mr_size"]) {
    peer.mr_size = Unsigned(node["mr_size"], where + ".mr_size", 1ull << 30);
    if (peer.mr_size == 0)
      Fail(node["mr_size"], where + ".mr_size: must be > 0");
  }
  if (receiver != nullptr) {
    static_cast<PeerSpec&>(*receiver) = peer;
    if (node["recv"]) {
      receiver->recv = OneOf<RecvPolicy>(node["recv"], where + ".recv",
                                         {{"replenish", RecvPolicy::kReplenish},
                                          {"prepost", RecvPolicy::kPrepost}});
    }
    if (node["prepost"]) {
      receiver->prepost = Unsigned(node["prepost"], where + ".prepost", 4096);
    }
  }
  return peer;
}

WriteOp ParseWrite(const YAML::Node& item, const YAML::Node& node,
                   const std::string& where) {
  CheckKeys(node, where,
            {"count", "size", "src_offset", "dst_offset", "stride", "flags",
             "imm", "imm_step", "zero_byte"});
  WriteOp op;
  op.line = item.Mark().line + 1;
  if (node["count"])
    op.count = Unsigned(node["count"], where + ".count", 1 << 20);
  if (node["size"]) op.size = Unsigned(node["size"], where + ".size", 1u << 31);
  if (node["src_offset"]) {
    op.src_offset = Unsigned(node["src_offset"], where + ".src_offset");
  }
  if (node["dst_offset"]) {
    op.dst_offset = Unsigned(node["dst_offset"], where + ".dst_offset");
  }
  if (node["stride"]) op.stride = Unsigned(node["stride"], where + ".stride");
  if (node["flags"]) {
    op.flags = OneOf<int>(node["flags"], where + ".flags",
                          {{"always", RPMA_F_COMPLETION_ALWAYS},
                           {"on_error", RPMA_F_COMPLETION_ON_ERROR}});
  }
  if (node["imm"]) {
    op.imm = static_cast<uint32_t>(
        Unsigned(node["imm"], where + ".imm", UINT32_MAX));
  }
  if (node["imm_step"]) {
    op.imm_step = static_cast<uint32_t>(
        Unsigned(node["imm_step"], where + ".imm_step", UINT32_MAX));
  }
  if (node["zero_byte"]) {
    op.zero_byte = Bool(node["zero_byte"], where + ".zero_byte");
    if (op.zero_byte && node["size"] && op.size != 0) {
      Fail(node["size"], where + ": a zero_byte write has size 0");
    }
    if (op.zero_byte) op.size = 0;
  }
  if (op.count == 0) Fail(node, where + ": count must be at least 1");
  if (op.stride && *op.stride < op.size) {
    Fail(node["stride"], where + ": stride " + std::to_string(*op.stride) +
                             " is smaller than size " +
                             std::to_string(op.size) +
                             " (overlapping writes cannot be verified)");
  }
  return op;
}

void ParseFault(const YAML::Node& node, size_t index, Scenario* s) {
  const std::string where = "faults[" + std::to_string(index) + "]";
  CheckKeys(node, where,
            {"name", "on", "side", "connection", "opcode", "nth", "every",
             "probability", "max_fires", "min_length", "max_length", "imm",
             "action", "errno", "status", "steps", "bytes"});
  FaultRule rule;
  if (!node["name"]) Fail(node, where + ": every fault needs a name");
  rule.name = Text(node["name"], where + ".name");
  const std::string named = "fault '" + rule.name + "'";
  if (!node["on"]) Fail(node, named + ": missing 'on' (which call or execute)");
  rule.call = OneOf<FaultCall>(node["on"], named + ".on",
                               {{"post_send", FaultCall::kPostSend},
                                {"post_recv", FaultCall::kPostRecv},
                                {"poll_cq", FaultCall::kPollCq},
                                {"reg_mr", FaultCall::kRegMr},
                                {"create_qp", FaultCall::kCreateQp},
                                {"connect", FaultCall::kConnect},
                                {"accept", FaultCall::kAccept},
                                {"cm_event", FaultCall::kCmEvent},
                                {"execute", FaultCall::kExecute}});
  if (!node["action"]) Fail(node, named + ": missing 'action'");
  rule.action =
      OneOf<FaultAction>(node["action"], named + ".action",
                         {{"fail", FaultAction::kFailCall},
                          {"complete", FaultAction::kCompleteWithStatus},
                          {"delay", FaultAction::kDelay},
                          {"lose_connection", FaultAction::kLoseConnection},
                          {"overflow_cq", FaultAction::kOverflowCq},
                          {"tear", FaultAction::kTearWrite}});
  std::string side;
  if (node["side"]) {
    side = OneOf<std::string>(
        node["side"], named + ".side",
        {{"client", "client"}, {"server", "server"}, {"any", ""}});
    const bool has_qp = rule.call == FaultCall::kPostSend ||
                        rule.call == FaultCall::kPostRecv ||
                        rule.call == FaultCall::kExecute ||
                        rule.call == FaultCall::kCmEvent;
    if (!has_qp && !side.empty()) {
      Fail(node["side"],
           named + ": 'side' does not apply to '" + ToString(rule.call) + "'");
    }
  }
  uint32_t connection = 0;
  if (node["connection"]) {
    connection = Unsigned(node["connection"], named + ".connection", 1 << 16);
    if (connection == 0) {
      Fail(node["connection"], named + ".connection: connections count from 1");
    }
  }
  if (node["opcode"]) {
    if (rule.call == FaultCall::kCmEvent) {
      rule.opcode =
          OneOf<int>(node["opcode"], named + ".opcode",
                     {{"established", RDMA_CM_EVENT_ESTABLISHED},
                      {"disconnected", RDMA_CM_EVENT_DISCONNECTED},
                      {"connect_request", RDMA_CM_EVENT_CONNECT_REQUEST},
                      {"rejected", RDMA_CM_EVENT_REJECTED}});
    } else {
      rule.opcode = OneOf<int>(node["opcode"], named + ".opcode",
                               {{"write", IBV_WR_RDMA_WRITE},
                                {"write_with_imm", IBV_WR_RDMA_WRITE_WITH_IMM},
                                {"send", IBV_WR_SEND},
                                {"send_with_imm", IBV_WR_SEND_WITH_IMM},
                                {"read", IBV_WR_RDMA_READ}});
    }
  }
  if (node["nth"]) rule.nth = Unsigned(node["nth"], named + ".nth");
  if (node["every"]) rule.every = Unsigned(node["every"], named + ".every");
  if (node["max_fires"]) {
    rule.max_fires = Unsigned(node["max_fires"], named + ".max_fires");
  }
  if (node["probability"]) {
    const std::string text = Text(node["probability"], named + ".probability");
    char* end = nullptr;
    rule.probability = std::strtod(text.c_str(), &end);
    if (*end != '\0' || rule.probability < 0 || rule.probability > 1) {
      Fail(node["probability"],
           named + ".probability: expected a number from 0 to 1, got '" + text +
               "'");
    }
  }
  if (node["min_length"]) {
    rule.min_length = Unsigned(node["min_length"], named + ".min_length");
  }
  if (node["max_length"]) {
    rule.max_length = Unsigned(node["max_length"], named + ".max_length");
  }
  if (node["imm"]) {
    rule.imm = static_cast<uint32_t>(
        Unsigned(node["imm"], named + ".imm", UINT32_MAX));
  }
  if (node["errno"]) rule.error = Errno(node["errno"], named + ".errno");
  if (node["status"]) {
    rule.status = OneOf(node["status"], named + ".status", StatusNames());
  }
  if (node["steps"]) {
    rule.delay_steps = Unsigned(node["steps"], named + ".steps", 1 << 20);
  }
  if (node["bytes"])
    rule.torn_bytes = Unsigned(node["bytes"], named + ".bytes");
  // What each action needs.
  if (rule.action == FaultAction::kFailCall && !node["errno"]) {
    Fail(node, named + ": action 'fail' needs 'errno' (e.g. ENOMEM)");
  }
  if (rule.action == FaultAction::kCompleteWithStatus && !node["status"]) {
    Fail(node,
         named + ": action 'complete' needs 'status' (e.g. REM_ACCESS_ERR)");
  }
  if (rule.action == FaultAction::kTearWrite && !node["bytes"]) {
    Fail(node, named + ": action 'tear' needs 'bytes' (how many land)");
  }
  for (const FaultRule& other : s->faults) {
    if (other.name == rule.name) {
      Fail(node["name"], named + ": two faults have this name");
    }
  }
  // The injector's own consistency rules (action vs. call).
  std::string why;
  if (!FaultInjector::Validate(rule, &why)) Fail(node, named + ": " + why);
  s->faults.push_back(rule);
  s->fault_sides.push_back(side);
  s->fault_connections.push_back(connection);
}

CompletionCounts ParseCounts(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) {
    Fail(node, where + ": expected status: count pairs, e.g. {SUCCESS: 3}");
  }
  CompletionCounts counts;
  for (const auto& entry : node) {
    std::string name = Text(entry.first, where + " status");
    if (name != "CQ_ERROR") {
      name = WcStatusShortName(
          OneOf(entry.first, where + " status (or CQ_ERROR)", StatusNames()));
    }
    const uint64_t n = Unsigned(entry.second, where + "." + name);
    if (n > 0) counts[name] = n;
  }
  return counts;
}

void ParseExpect(const YAML::Node& node, Scenario* s) {
  CheckKeys(node, "expect",
            {"client", "server", "data", "connection", "faults_fired",
             "post_errors", "bytes_torn", "unfinished"});
  Expectations& e = s->expect;
  if (node["client"]) e.client = ParseCounts(node["client"], "expect.client");
  if (node["server"]) e.server = ParseCounts(node["server"], "expect.server");
  if (node["data"]) {
    e.data = OneOf<bool>(node["data"], "expect.data",
                         {{"verified", true}, {"unchecked", false}});
  }
  if (node["connection"]) {
    e.connection = OneOf<std::string>(node["connection"], "expect.connection",
                                      {{"established", "established"},
                                       {"closed", "closed"},
                                       {"lost", "lost"},
                                       {"rejected", "rejected"},
                                       {"unreachable", "unreachable"},
                                       {"not_connected", "not_connected"}});
  }
  if (node["faults_fired"]) {
    const YAML::Node& list = node["faults_fired"];
    if (!list.IsSequence())
      Fail(list, "expect.faults_fired: expected a list of fault names");
    for (const auto& item : list) {
      const std::string name = Text(item, "expect.faults_fired");
      bool known = false;
      for (const FaultRule& r : s->faults) known = known || r.name == name;
      if (!known)
        Fail(item, "expect.faults_fired: no fault is named '" + name + "'");
      e.faults_fired.push_back(name);
    }
  }
  if (node["post_errors"]) {
    e.post_errors = Unsigned(node["post_errors"], "expect.post_errors");
  }
  if (node["bytes_torn"]) {
    e.bytes_torn = Unsigned(node["bytes_torn"], "expect.bytes_torn");
  }
  if (node["unfinished"]) {
    e.unfinished = Unsigned(node["unfinished"], "expect.unfinished");
  }
}

void ParseRoot(const YAML::Node& root, Scenario* s) {
  if (!root.IsMap())
    Fail(root, "a scenario is a mapping (name:, workload:, ...)");
  CheckKeys(root, "scenario",
            {"name", "description", "seed", "personality", "schedule",
             "connections", "rnr_retry", "client", "server", "workload",
             "faults", "expect", "max_steps"});
  if (!root["name"]) Fail(root, "scenario: missing 'name'");
  s->name = Text(root["name"], "name");
  if (root["description"])
    s->description = Text(root["description"], "description");
  if (root["seed"]) s->seed = Unsigned(root["seed"], "seed");
  if (root["personality"]) {
    s->personality =
        OneOf<std::string>(root["personality"], "personality",
                           {{"spec", "spec"}, {"rxe", "rxe"}, {"siw", "siw"}});
  }
  if (root["schedule"]) {
    s->random_schedule = OneOf<bool>(root["schedule"], "schedule",
                                     {{"in_turn", false}, {"random", true}});
  }
  if (root["connections"]) {
    s->connections = Unsigned(root["connections"], "connections", 64);
    if (s->connections == 0)
      Fail(root["connections"], "connections: at least 1");
  }
  if (root["rnr_retry"])
    s->rnr_retry = Unsigned(root["rnr_retry"], "rnr_retry", 7);
  if (root["max_steps"])
    s->max_steps = Unsigned(root["max_steps"], "max_steps");
  if (root["client"]) s->client = ParsePeer(root["client"], "client", nullptr);
  if (root["server"]) ParsePeer(root["server"], "server", &s->server);
  if (!root["workload"]) Fail(root, "scenario: missing 'workload'");
  const YAML::Node& workload = root["workload"];
  if (!workload.IsSequence())
    Fail(workload, "workload: expected a list of operations");
  for (size_t i = 0; i < workload.size(); ++i) {
    const YAML::Node& item = workload[i];
    const std::string where = "workload[" + std::to_string(i) + "]";
    CheckKeys(item, where, {"write_with_imm"});
    if (!item["write_with_imm"])
      Fail(item, where + ": expected write_with_imm");
    s->workload.push_back(
        ParseWrite(item, item["write_with_imm"], where + ".write_with_imm"));
  }
  // Verification compares each write's target bytes with its source, so two
  // writes must not target the same server bytes.
  for (size_t i = 0; i < s->workload.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      auto span = [](const WriteOp& op) {
        const uint64_t stride = op.stride.value_or(op.size);
        return std::make_pair(
            op.dst_offset, op.dst_offset + (op.count - 1) * stride + op.size);
      };
      const WriteOp& a = s->workload[i];
      const WriteOp& b = s->workload[j];
      if (a.size == 0 || b.size == 0) continue;
      auto [a0, a1] = span(a);
      auto [b0, b1] = span(b);
      if (a0 < b1 && b0 < a1) {
        Fail(workload[i],
             "workload[" + std::to_string(i) + "] writes server bytes [" +
                 std::to_string(a0) + ", " + std::to_string(a1) +
                 ") that workload[" + std::to_string(j) +
                 "] also writes; give it a dst_offset (overlapping "
                 "writes cannot be verified)");
      }
    }
  }
  if (root["faults"]) {
    const YAML::Node& faults = root["faults"];
    if (!faults.IsSequence()) Fail(faults, "faults: expected a list of faults");
    for (size_t i = 0; i < faults.size(); ++i) ParseFault(faults[i], i, s);
  }
  if (root["expect"]) ParseExpect(root["expect"], s);
}

}  // namespace

const char* WcStatusShortName(ibv_wc_status status) {
  for (const auto& [name, value] : StatusNames()) {
    if (value == status) return name.c_str();
  }
  return "UNKNOWN_STATUS";
}

bool ParseScenarioText(const std::string& text, const std::string& file_name,
                       Scenario* scenario, std::string* error) {
  Scenario s;
  s.file = file_name;
  try {
    YAML::Node root = YAML::Load(text);
    ParseRoot(root, &s);
  } catch (const ParseError& e) {
    *error = file_name + ":" + std::to_string(e.mark.line + 1) + ":" +
             std::to_string(e.mark.column + 1) + ": " + e.message;
    return false;
  } catch (const YAML::Exception& e) {
    // yaml-cpp's own syntax errors carry their position.
    *error = file_name + ":" + std::to_string(e.mark.line + 1) + ":" +
             std::to_string(e.mark.column + 1) + ": " + e.msg;
    return false;
  }
  *scenario = std::move(s);
  return true;
}

bool ParseScenarioFile(const std::string& path, Scenario* scenario,
                       std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseScenarioText(text.str(), path, scenario, error);
}

}  // namespace rpma_harness
