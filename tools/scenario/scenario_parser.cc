#include "tools/scenario/scenario_parser.h"

#include <errno.h>
#include <fcntl.h>
#include <librpma.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "check/checking_backend.h"

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

// Rejects keys of `map` that are not in `allowed`, naming the allowed ones,
// and keys written twice (yaml-cpp keeps both; a lookup finds the first).
void CheckKeys(const YAML::Node& map, const std::string& where,
               const std::vector<std::string>& allowed) {
  if (!map.IsMap()) Fail(map, where + ": expected a mapping of keys");
  std::set<std::string> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar()) Fail(entry.first, where + ": keys are names");
    const std::string key = entry.first.Scalar();
    bool known = false;
    for (const std::string& a : allowed) known = known || a == key;
    if (!known) {
      Fail(entry.first, where + ": unknown key '" + key +
                            "' (expected one of: " + Join(allowed) + ")");
    }
    if (!seen.insert(key).second) {
      Fail(entry.first, where + ": key '" + key +
                            "' is given twice (each key once per mapping)");
    }
    // `key:` with nothing after it (or `~`) is never a default.
    if (entry.second.IsNull()) {
      Fail(entry.first, where + ": key '" + key +
                            "' has no value (give one, or leave the key out)");
    }
  }
}

// A value that must be there: `key:` with nothing after it is an error, not
// a default.
void NeedValue(const YAML::Node& node, const std::string& what,
               const char* expected) {
  if (node.IsNull()) {
    Fail(node, what + ": no value (expected " + expected + ")");
  }
  if (!node.IsScalar()) Fail(node, what + ": expected " + expected);
}

uint64_t Unsigned(const YAML::Node& node, const std::string& what,
                  uint64_t max = UINT64_MAX) {
  NeedValue(node, what, "a number");
  uint64_t value = 0;
  std::string why;
  if (!ParseUnsignedNumber(node.Scalar(), max, &value, &why)) {
    Fail(node, what + ": " + why);
  }
  return value;
}

// A count or size where 0 means nothing sensible.
uint64_t Positive(const YAML::Node& node, const std::string& what, uint64_t max,
                  const std::string& why_not_zero) {
  const uint64_t value = Unsigned(node, what, max);
  if (value == 0)
    Fail(node, what + ": must be at least 1 (" + why_not_zero + ")");
  return value;
}

std::string Text(const YAML::Node& node, const std::string& what) {
  NeedValue(node, what, "text");
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

// The names are shared with the faults file (faults/fault_rule_text.h).
const std::vector<std::pair<std::string, ibv_wc_status>>& StatusNames() {
  return WcStatusNames();
}

constexpr uint64_t kMaxCrashWrites = 1024;

void Remember(const YAML::Node& node, const std::string& key, Scenario* s) {
  s->positions[key] = {node.Mark().line + 1, node.Mark().column + 1};
}

PeerSpec ParsePeer(const YAML::Node& node, const std::string& where,
                   ReceiverSpec* receiver, Scenario* s) {
  std::vector<std::string> keys = {"cq_size", "sq_size", "rq_size", "mr_size"};
  if (receiver != nullptr) {
    keys.push_back("recv");
    keys.push_back("prepost");
  }
  CheckKeys(node, where, keys);
  PeerSpec peer;
  if (node["cq_size"]) {
    peer.cq_size = Positive(node["cq_size"], where + ".cq_size", 65536,
                            "a CQ holds at least one completion");
    Remember(node["cq_size"], where + ".cq_size", s);
  }
  if (node["sq_size"]) {
    peer.sq_size = Positive(node["sq_size"], where + ".sq_size", 4096,
                            "a send queue holds at least one WR");
    Remember(node["sq_size"], where + ".sq_size", s);
  }
  if (node["rq_size"]) {
    peer.rq_size = Positive(node["rq_size"], where + ".rq_size", 4096,
                            "a receive queue holds at least one WR");
    Remember(node["rq_size"], where + ".rq_size", s);
  }
  if (node["mr_size"]) {
    peer.mr_size = Positive(node["mr_size"], where + ".mr_size", 1ull << 30,
                            "a memory region has at least one byte");
    Remember(node["mr_size"], where + ".mr_size", s);
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
  op.column = item.Mark().column + 1;
  if (node["count"]) {
    op.count = Positive(node["count"], where + ".count", 1 << 20,
                        "a workload item is at least one write");
  }
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
  if (op.stride && *op.stride < op.size) {
    Fail(node["stride"], where + ": stride " + std::to_string(*op.stride) +
                             " is smaller than size " +
                             std::to_string(op.size) +
                             " (overlapping writes cannot be verified)");
  }
  // Every write's offsets must be numbers the runner can compute: the last
  // one is offset + (count - 1) * stride.
  const unsigned __int128 reach = static_cast<unsigned __int128>(op.count - 1) *
                                  op.stride.value_or(op.size);
  for (const auto& [key, offset] :
       {std::make_pair("src_offset", op.src_offset),
        std::make_pair("dst_offset", op.dst_offset)}) {
    if (offset + reach > UINT64_MAX) {
      Fail(node[key] ? node[key] : node,
           where + "." + key + ": the last write's offset (" + key +
               " + (count - 1) x stride) does not fit in 64 bits");
    }
  }
  return op;
}

TextPosition At(const YAML::Mark& mark) {
  // yaml-cpp has no position for some nodes: 1:1 (as Position() below).
  TextPosition at;
  at.line = mark.line < 0 ? 1 : mark.line + 1;
  at.column = mark.line < 0 || mark.column < 0 ? 1 : mark.column + 1;
  return at;
}

// The YAML side of a fault: the entry's keys and values with their
// positions; the checks and messages are faults/fault_rule_text.h's, shared
// with the per-process faults file (RPMA_HARNESS_FAULTS).
void ParseFault(const YAML::Node& node, size_t index, Scenario* s) {
  const std::string where = "faults[" + std::to_string(index) + "]";
  if (!node.IsMap()) Fail(node, where + ": expected a mapping of keys");
  FaultFields item;
  item.at = At(node.Mark());
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) Fail(entry.first, where + ": keys are names");
    FaultField field;
    field.key = entry.first.Scalar();
    field.key_at = At(entry.first.Mark());
    field.kind = entry.second.IsNull()     ? FaultField::kNull
                 : entry.second.IsScalar() ? FaultField::kScalar
                                           : FaultField::kOther;
    if (field.kind == FaultField::kScalar) field.value = entry.second.Scalar();
    field.value_at = At(entry.second.Mark());
    item.fields.push_back(std::move(field));
  }
  FaultRuleText out;
  FaultTextError error;
  if (!FaultRuleFromFields(item, index, s->faults, s->connections, &out,
                           &error)) {
    YAML::Mark mark;
    mark.line = error.at.line - 1;
    mark.column = error.at.column - 1;
    throw ParseError{mark, error.message};
  }
  s->faults.push_back(out.rule);
  s->fault_sides.push_back(out.side);
  s->fault_connections.push_back(out.connection);
}

CompletionCounts ParseCounts(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) {
    Fail(node, where + ": expected status: count pairs, e.g. {SUCCESS: 3}");
  }
  CompletionCounts counts;
  std::set<std::string> seen;
  for (const auto& entry : node) {
    std::string name = Text(entry.first, where + " status");
    if (!seen.insert(name).second) {
      Fail(entry.first, where + ": status '" + name + "' is given twice");
    }
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
             "post_errors", "bytes_torn", "unfinished", "findings"});
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
      for (const std::string& listed : e.faults_fired) {
        if (listed == name) {
          Fail(item, "expect.faults_fired: '" + name + "' is listed twice");
        }
      }
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
  if (node["findings"]) {
    // {check-name: count, ...}: distinct usage-checker findings.
    const YAML::Node& map = node["findings"];
    if (!map.IsMap()) {
      Fail(map, "expect.findings: expected check: count pairs");
    }
    std::map<std::string, uint64_t> counts;
    const auto& names = CheckNames();
    for (const auto& item : map) {
      const std::string name = Text(item.first, "expect.findings");
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        Fail(item.first, "expect.findings: '" + name + "' is not a check");
      }
      counts[name] = Unsigned(item.second, "expect.findings." + name);
    }
    e.findings = counts;
  }
}

// crash: (after the workload: it bounds the writes it checks).
void ParseCrash(const YAML::Node& crash, Scenario* s) {
  if (!crash.IsMap()) Fail(crash, "crash: expected a map");
  CheckKeys(crash, "crash", {"unit", "budget", "persist_on_receive", "expect"});
  CrashSpec spec;
  if (crash["unit"]) {
    spec.unit = OneOf<uint64_t>(crash["unit"], "crash.unit",
                                {{"1", 1},
                                 {"2", 2},
                                 {"4", 4},
                                 {"8", 8},
                                 {"16", 16},
                                 {"32", 32},
                                 {"64", 64}});
  }
  if (crash["budget"]) {
    spec.budget = Positive(crash["budget"], "crash.budget", 1 << 20,
                           "images per crash point");
  }
  if (crash["persist_on_receive"]) {
    spec.persist_on_receive =
        Bool(crash["persist_on_receive"], "crash.persist_on_receive");
  }
  if (crash["expect"]) {
    spec.outcome = OneOf<std::string>(
        crash["expect"], "crash.expect",
        {{"consistent", "consistent"}, {"violation", "violation"}});
  }
  // Every server completion is a crash point with up to `budget` images.
  uint64_t writes = 0;
  for (const WriteOp& op : s->workload) writes += op.count;
  writes *= s->connections;
  if (writes > kMaxCrashWrites) {
    Fail(crash, "crash: at most " + std::to_string(kMaxCrashWrites) +
                    " writes are crash-checked (every server completion "
                    "is a crash point); this workload has " +
                    std::to_string(writes));
  }
  s->crash = spec;
}

void ParseRoot(const YAML::Node& root, Scenario* s) {
  if (!root.IsMap())
    Fail(root, "a scenario is a mapping (name:, workload:, ...)");
  CheckKeys(root, "scenario",
            {"name", "description", "seed", "personality", "schedule",
             "connections", "rnr_retry", "client", "server", "workload",
             "faults", "expect", "max_steps", "check", "crash"});
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
    s->connections = Positive(root["connections"], "connections", 64,
                              "a scenario has at least one connection");
    Remember(root["connections"], "connections", s);
  }
  if (root["rnr_retry"])
    s->rnr_retry = Unsigned(root["rnr_retry"], "rnr_retry", 7);
  if (root["max_steps"]) {
    s->max_steps = Positive(root["max_steps"], "max_steps", UINT64_MAX,
                            "the NIC could not take a step");
    Remember(root["max_steps"], "max_steps", s);
  }
  if (root["client"]) {
    s->client = ParsePeer(root["client"], "client", nullptr, s);
  }
  if (root["server"]) ParsePeer(root["server"], "server", &s->server, s);
  if (!root["workload"]) Fail(root, "scenario: missing 'workload'");
  const YAML::Node& workload = root["workload"];
  if (!workload.IsSequence())
    Fail(workload, "workload: expected a list of operations");
  if (workload.size() > kMaxWorkloadItems) {
    Fail(workload[kMaxWorkloadItems],
         "workload: more than " + std::to_string(kMaxWorkloadItems) +
             " items (use count: to repeat a write)");
  }
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
      // In 128 bits: an end past 2^64 must not wrap to a small number.
      auto span = [](const WriteOp& op) {
        const unsigned __int128 stride = op.stride.value_or(op.size);
        const unsigned __int128 start = op.dst_offset;
        return std::make_pair(start, start + (op.count - 1) * stride + op.size);
      };
      auto text = [](unsigned __int128 v) {
        if (v <= UINT64_MAX) return std::to_string(static_cast<uint64_t>(v));
        return std::string("2^64 + ") +
               std::to_string(static_cast<uint64_t>(v - UINT64_MAX - 1));
      };
      const WriteOp& a = s->workload[i];
      const WriteOp& b = s->workload[j];
      if (a.size == 0 || b.size == 0) continue;
      auto [a0, a1] = span(a);
      auto [b0, b1] = span(b);
      if (a0 < b1 && b0 < a1) {
        Fail(workload[i],
             "workload[" + std::to_string(i) + "] writes server bytes [" +
                 text(a0) + ", " + text(a1) + ") that workload[" +
                 std::to_string(j) +
                 "] also writes; give it a dst_offset (overlapping "
                 "writes cannot be verified)");
      }
    }
  }
  if (root["faults"]) {
    const YAML::Node& faults = root["faults"];
    if (!faults.IsSequence()) Fail(faults, "faults: expected a list of faults");
    if (faults.size() > kMaxFaults) {
      Fail(faults[kMaxFaults],
           "faults: more than " + std::to_string(kMaxFaults) + " faults");
    }
    for (size_t i = 0; i < faults.size(); ++i) ParseFault(faults[i], i, s);
  }
  if (root["check"]) {
    // "all" or a comma-separated list of check names (RPMA_HARNESS_CHECK's
    // syntax, without "strict": that is the command line's --strict).
    const std::string text = Text(root["check"], "check");
    CheckOptions options;
    std::string why;
    if (!ParseCheckOptions(text, &options, &why) || options.strict) {
      Fail(root["check"],
           "check: " + (why.empty() ? "strict is --strict, not a check" : why));
    }
    s->check = text;
  }
  if (root["crash"]) ParseCrash(root["crash"], s);
  if (root["expect"]) ParseExpect(root["expect"], s);
}

}  // namespace

const char* WcStatusShortName(ibv_wc_status status) {
  for (const auto& [name, value] : StatusNames()) {
    if (value == status) return name.c_str();
  }
  return "UNKNOWN_STATUS";
}

namespace {

// Counts documents without building them and remembers where each starts.
// (yaml-cpp's LoadAll is not used: on some malformed text its parser
// returns an empty document at the same place forever, so LoadAll grows
// without bound -- found by the scenario_parser fuzzer under its RSS
// limit, tools/fuzz/corpus/scenario_parser/crash-loadall-no-progress.)
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override {
    starts.push_back(mark);
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

std::string Position(const std::string& file, const YAML::Mark& mark) {
  // yaml-cpp has no position for some nodes (an empty document): 1:1.
  const int line = mark.line < 0 ? 1 : mark.line + 1;
  const int column = mark.line < 0 || mark.column < 0 ? 1 : mark.column + 1;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

bool ParseScenarioText(const std::string& text, const std::string& file_name,
                       Scenario* scenario, std::string* error) {
  Scenario s;
  s.file = file_name;
  if (text.size() > kMaxScenarioFileBytes) {
    *error = file_name + ":1:1: the scenario is larger than " +
             std::to_string(kMaxScenarioFileBytes / 1024) +
             " KiB (the limit for a scenario file)";
    return false;
  }
  try {
    // At most two documents are looked at: the scenario and the one that
    // must not be there.
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentStarts documents;
    const bool has_first = parser.HandleNextDocument(documents);
    if (!has_first) {
      *error = file_name +
               ":1:1: the file is empty (or only comments); a scenario is a "
               "mapping (name:, workload:, ...)";
      return false;
    }
    if (parser.HandleNextDocument(documents)) {
      const YAML::Mark& first = documents.starts.front();
      const YAML::Mark& second = documents.starts.back();
      if (second.pos == first.pos) {
        *error = Position(file_name, second) +
                 ": not valid YAML here (the parser makes no progress)";
      } else {
        *error = Position(file_name, second) +
                 ": a second YAML document (a scenario file holds one)";
      }
      return false;
    }
    const YAML::Node root = YAML::Load(text);
    if (root.IsNull()) {
      YAML::Mark start;  // the document's "---", or 1:1
      start.line = text.compare(0, 3, "---") == 0 ? 0 : -1;
      *error = Position(file_name, start) +
               ": the document is empty; a scenario is a mapping (name:, "
               "workload:, ...)";
      return false;
    }
    ParseRoot(root, &s);
  } catch (const ParseError& e) {
    *error = Position(file_name, e.mark) + ": " + e.message;
    return false;
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's depth guard (its message is a generic "bad file").
    *error = Position(file_name, e.mark) +
             ": nested more than 2000 levels deep (a scenario needs 4)";
    return false;
  } catch (const YAML::Exception& e) {
    // yaml-cpp's own syntax errors carry their position.
    *error = Position(file_name, e.mark) + ": " + e.msg;
    return false;
  }
  *scenario = std::move(s);
  return true;
}

int OpenForReading(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

bool ReadBoundedFile(const std::string& path, size_t max_bytes,
                     const char* what, std::string* text, std::string* error) {
  const int fd = OpenForReading(path);
  if (fd < 0) {
    *error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    *error = path + ": is a directory, not " + what;
    return false;
  }
  text->clear();
  char buffer[16384];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = path + ": cannot read: " + std::strerror(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;
    if (text->size() + static_cast<size_t>(n) > max_bytes) {
      close(fd);
      *error = path + ": larger than " + std::to_string(max_bytes / 1024) +
               " KiB, the limit for " + what;
      return false;
    }
    text->append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

bool ParseScenarioFile(const std::string& path, Scenario* scenario,
                       std::string* error) {
  std::string text;
  if (!ReadBoundedFile(path, kMaxScenarioFileBytes, "a scenario file", &text,
                       error)) {
    return false;
  }
  return ParseScenarioText(text, path, scenario, error);
}

}  // namespace rpma_harness
