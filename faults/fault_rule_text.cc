#include "faults/fault_rule_text.h"

#include <errno.h>
#include <rdma/rdma_cma.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

namespace rpma_harness {
namespace {

// A failure with its position; thrown inside FaultRuleFromFields only.
struct Failure {
  TextPosition at;
  std::string message;
};

[[noreturn]] void Fail(TextPosition at, std::string message) {
  throw Failure{at, std::move(message)};
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

const FaultField* Find(const FaultFields& item, const char* key) {
  for (const FaultField& f : item.fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

void NeedValue(const FaultField& f, const std::string& what,
               const char* expected) {
  if (f.kind == FaultField::kNull) {
    Fail(f.value_at, what + ": no value (expected " + expected + ")");
  }
  if (f.kind != FaultField::kScalar)
    Fail(f.value_at, what + ": expected " + expected);
}

uint64_t Unsigned(const FaultField& f, const std::string& what,
                  uint64_t max = UINT64_MAX) {
  NeedValue(f, what, "a number");
  uint64_t value = 0;
  std::string why;
  if (!ParseUnsignedNumber(f.value, max, &value, &why)) {
    Fail(f.value_at, what + ": " + why);
  }
  return value;
}

uint64_t Positive(const FaultField& f, const std::string& what, uint64_t max,
                  const std::string& why_not_zero) {
  const uint64_t value = Unsigned(f, what, max);
  if (value == 0) {
    Fail(f.value_at, what + ": must be at least 1 (" + why_not_zero + ")");
  }
  return value;
}

std::string Text(const FaultField& f, const std::string& what) {
  NeedValue(f, what, "text");
  return f.value;
}

template <typename T>
T OneOf(const FaultField& f, const std::string& what,
        const std::vector<std::pair<std::string, T>>& choices) {
  const std::string text = Text(f, what);
  std::vector<std::string> names;
  for (const auto& [name, value] : choices) {
    if (name == text) return value;
    names.push_back(name);
  }
  Fail(f.value_at, what + ": unknown value '" + text +
                       "' (expected one of: " + Join(names) + ")");
}

int Errno(const FaultField& f, const std::string& what) {
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
  const std::string text = Text(f, what);
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
    return static_cast<int>(
        Positive(f, what, 4095, "errno 0 is success, not a failure"));
  }
  return OneOf(f, what, names);
}

// Unknown keys (naming the allowed ones), keys written twice and keys
// without a value, in the order written.
void CheckKeys(const FaultFields& item, const std::string& where,
               const std::vector<std::string>& allowed) {
  std::set<std::string> seen;
  for (const FaultField& f : item.fields) {
    bool known = false;
    for (const std::string& a : allowed) known = known || a == f.key;
    if (!known) {
      Fail(f.key_at, where + ": unknown key '" + f.key +
                         "' (expected one of: " + Join(allowed) + ")");
    }
    if (!seen.insert(f.key).second) {
      Fail(f.key_at, where + ": key '" + f.key +
                         "' is given twice (each key once per mapping)");
    }
    // `key:` with nothing after it (or `~`) is never a default.
    if (f.kind == FaultField::kNull) {
      Fail(f.key_at, where + ": key '" + f.key +
                         "' has no value (give one, or leave the key out)");
    }
  }
}

void Convert(const FaultFields& item, size_t index,
             const std::vector<FaultRule>& earlier, uint32_t connections,
             FaultRuleText* out) {
  const std::string where = "faults[" + std::to_string(index) + "]";
  CheckKeys(item, where,
            {"name", "on", "side", "connection", "opcode", "nth", "every",
             "probability", "max_fires", "min_length", "max_length", "imm",
             "action", "errno", "status", "steps", "bytes"});
  auto field = [&](const char* key) { return Find(item, key); };
  FaultRule rule;
  if (!field("name")) Fail(item.at, where + ": every fault needs a name");
  rule.name = Text(*field("name"), where + ".name");
  const std::string named = "fault '" + rule.name + "'";
  if (!field("on")) {
    Fail(item.at, named + ": missing 'on' (which call or execute)");
  }
  rule.call = OneOf<FaultCall>(*field("on"), named + ".on",
                               {{"post_send", FaultCall::kPostSend},
                                {"post_recv", FaultCall::kPostRecv},
                                {"poll_cq", FaultCall::kPollCq},
                                {"reg_mr", FaultCall::kRegMr},
                                {"create_qp", FaultCall::kCreateQp},
                                {"connect", FaultCall::kConnect},
                                {"accept", FaultCall::kAccept},
                                {"cm_event", FaultCall::kCmEvent},
                                {"execute", FaultCall::kExecute}});
  if (!field("action")) Fail(item.at, named + ": missing 'action'");
  rule.action =
      OneOf<FaultAction>(*field("action"), named + ".action",
                         {{"fail", FaultAction::kFailCall},
                          {"complete", FaultAction::kCompleteWithStatus},
                          {"delay", FaultAction::kDelay},
                          {"lose_connection", FaultAction::kLoseConnection},
                          {"overflow_cq", FaultAction::kOverflowCq},
                          {"tear", FaultAction::kTearWrite}});
  std::string side;
  if (const FaultField* f = field("side")) {
    side = OneOf<std::string>(
        *f, named + ".side",
        {{"client", "client"}, {"server", "server"}, {"any", ""}});
    const bool has_qp = rule.call == FaultCall::kPostSend ||
                        rule.call == FaultCall::kPostRecv ||
                        rule.call == FaultCall::kExecute ||
                        rule.call == FaultCall::kCmEvent ||
                        // a rewritten completion belongs to one QP
                        (rule.call == FaultCall::kPollCq &&
                         rule.action == FaultAction::kCompleteWithStatus);
    if (!has_qp && !side.empty()) {
      Fail(f->value_at,
           named + ": 'side' does not apply to '" + ToString(rule.call) + "'");
    }
  }
  uint32_t connection = 0;
  if (const FaultField* f = field("connection")) {
    connection = Positive(*f, named + ".connection", 1 << 16,
                          "connections count from 1");
    if (connection > connections) {
      Fail(f->value_at, named + ".connection: " + std::to_string(connection) +
                            " is beyond the scenario's " +
                            std::to_string(connections) + " connection" +
                            (connections == 1 ? "" : "s") + " (connections:)");
    }
    if (side.empty()) {
      Fail(f->value_at,
           named +
               ".connection: needs 'side' (client or server): it picks "
               "that side's QP of the connection");
    }
  }
  if (const FaultField* f = field("opcode")) {
    if (rule.call == FaultCall::kCmEvent) {
      rule.opcode =
          OneOf<int>(*f, named + ".opcode",
                     {{"established", RDMA_CM_EVENT_ESTABLISHED},
                      {"disconnected", RDMA_CM_EVENT_DISCONNECTED},
                      {"connect_request", RDMA_CM_EVENT_CONNECT_REQUEST},
                      {"rejected", RDMA_CM_EVENT_REJECTED}});
    } else {
      rule.opcode = OneOf<int>(*f, named + ".opcode",
                               {{"write", IBV_WR_RDMA_WRITE},
                                {"write_with_imm", IBV_WR_RDMA_WRITE_WITH_IMM},
                                {"send", IBV_WR_SEND},
                                {"send_with_imm", IBV_WR_SEND_WITH_IMM},
                                {"read", IBV_WR_RDMA_READ}});
    }
  }
  if (const FaultField* f = field("nth")) {
    rule.nth = Positive(*f, named + ".nth", UINT64_MAX, "matches count from 1");
  }
  if (const FaultField* f = field("every")) {
    rule.every =
        Positive(*f, named + ".every", UINT64_MAX, "every 1 is each match");
  }
  if (const FaultField* f = field("max_fires")) {
    rule.max_fires = Positive(*f, named + ".max_fires", UINT64_MAX,
                              "a fault that may never fire");
  }
  if (const FaultField* f = field("probability")) {
    NeedValue(*f, named + ".probability", "a number from 0 to 1");
    std::string why;
    if (!ParseProbability(f->value, &rule.probability, &why)) {
      Fail(f->value_at, named + ".probability: " + why);
    }
  }
  if (const FaultField* f = field("min_length")) {
    rule.min_length = Unsigned(*f, named + ".min_length");
  }
  const FaultField* max_length = field("max_length");
  if (max_length)
    rule.max_length = Unsigned(*max_length, named + ".max_length");
  if (const FaultField* f = field("imm")) {
    rule.imm = static_cast<uint32_t>(Unsigned(*f, named + ".imm", UINT32_MAX));
  }
  if (const FaultField* f = field("errno")) {
    rule.error = Errno(*f, named + ".errno");
  }
  if (const FaultField* f = field("status")) {
    rule.status = OneOf(*f, named + ".status", WcStatusNames());
  }
  if (const FaultField* f = field("steps")) {
    rule.delay_steps = Positive(*f, named + ".steps", 1 << 20,
                                "a delay of 0 steps delays nothing");
  }
  if (const FaultField* f = field("bytes")) {
    rule.torn_bytes = Unsigned(*f, named + ".bytes");
  }
  if (rule.min_length && rule.max_length &&
      *rule.min_length > *rule.max_length) {
    Fail(max_length->value_at,
         named + ": max_length " + std::to_string(*rule.max_length) +
             " is below min_length " + std::to_string(*rule.min_length) +
             " (nothing would match)");
  }
  // What each action needs.
  if (rule.action == FaultAction::kFailCall && !field("errno")) {
    Fail(item.at, named + ": action 'fail' needs 'errno' (e.g. ENOMEM)");
  }
  if (rule.action == FaultAction::kCompleteWithStatus && !field("status")) {
    Fail(item.at,
         named + ": action 'complete' needs 'status' (e.g. REM_ACCESS_ERR)");
  }
  if (rule.action == FaultAction::kTearWrite && !field("bytes")) {
    Fail(item.at, named + ": action 'tear' needs 'bytes' (how many land)");
  }
  for (const FaultRule& other : earlier) {
    if (other.name == rule.name) {
      Fail(field("name")->value_at, named + ": two faults have this name");
    }
  }
  // The injector's own consistency rules (action vs. call).
  std::string why;
  if (!FaultInjector::Validate(rule, &why)) Fail(item.at, named + ": " + why);
  out->rule = rule;
  out->side = side;
  out->connection = connection;
}

}  // namespace

bool FaultRuleFromFields(const FaultFields& item, size_t index,
                         const std::vector<FaultRule>& earlier,
                         uint32_t connections, FaultRuleText* out,
                         FaultTextError* error) {
  try {
    Convert(item, index, earlier, connections, out);
    return true;
  } catch (const Failure& f) {
    error->at = f.at;
    error->message = f.message;
    return false;
  }
}

const std::vector<std::pair<std::string, ibv_wc_status>>& WcStatusNames() {
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

bool ParseUnsignedNumber(const std::string& text, uint64_t max, uint64_t* value,
                         std::string* why) {
  const char* kForms = "decimal without leading zeros, or hex as 0x...";
  if (text.empty()) {
    *why = std::string("expected an unsigned number (") + kForms +
           "), got an empty value";
    return false;
  }
  const bool hex =
      text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const size_t first = hex ? 2 : 0;
  bool digits_ok = text.size() > first;
  for (size_t i = first; i < text.size() && digits_ok; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    digits_ok = hex ? std::isxdigit(c) != 0 : std::isdigit(c) != 0;
  }
  if (!digits_ok) {
    *why = std::string("expected an unsigned number (") + kForms + "), got '" +
           text + "'";
    return false;
  }
  if (!hex && text.size() > 1 && text[0] == '0') {
    // YAML 1.1 would read 010 as octal 8 and 08 as a string; neither is
    // what a person means, so a leading zero is an error either way.
    *why = "'" + text +
           "': a leading zero is not allowed (write decimal without leading "
           "zeros, or hex as 0x...; octal is not supported)";
    return false;
  }
  uint64_t v = 0;
  const uint64_t base = hex ? 16 : 10;
  for (size_t i = first; i < text.size(); ++i) {
    const char c = text[i];
    const uint64_t d = std::isdigit(static_cast<unsigned char>(c))
                           ? static_cast<uint64_t>(c - '0')
                           : static_cast<uint64_t>(std::tolower(c) - 'a' + 10);
    if (v > (UINT64_MAX - d) / base) {
      *why = text + " is larger than " + std::to_string(max);
      return false;
    }
    v = v * base + d;
  }
  if (v > max) {
    *why = text + " is larger than " + std::to_string(max);
    return false;
  }
  *value = v;
  return true;
}

bool ParseProbability(const std::string& text, double* value,
                      std::string* why) {
  // Plain decimals only: no sign, exponent, hex float, nan or inf.
  bool ok = !text.empty() && text.size() <= 32;
  int dots = 0, digits = 0;
  for (char c : text) {
    if (c == '.') {
      ++dots;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else {
      ok = false;
    }
  }
  ok = ok && dots <= 1 && digits > 0;
  double p = ok ? std::strtod(text.c_str(), nullptr) : 0;
  if (!ok || !std::isfinite(p) || p > 1) {
    *why =
        "expected a decimal number from 0 to 1 (e.g. 0.25), got '" + text + "'";
    return false;
  }
  if (p == 0) {
    *why = "probability 0 never fires (remove the fault instead)";
    return false;
  }
  *value = p;
  return true;
}

}  // namespace rpma_harness
