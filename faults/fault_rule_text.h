// fault_rule_text.h: a fault rule from named text fields, without YAML.
//
// The scenario parser (tools/scenario/, YAML through yaml-cpp) and the
// per-process faults file (faults/fault_file.h, RPMA_HARNESS_FAULTS, read by
// the default backend of any program, which must not need libyaml-cpp)
// both turn "key: value" fields into a FaultRule here, so the keys, the
// checks and every message are the same in both.
//
//   FaultFields item;            // one `- name: ...` entry of `faults:`
//   item.at = {3, 5};
//   item.fields.push_back({"name", {3, 5}, FaultField::kScalar, "deny",
//                          {3, 11}});
//   ...
//   FaultRuleText out;
//   FaultTextError error;
//   if (!FaultRuleFromFields(item, 0, earlier_rules, 1, &out, &error))
//     std::cerr << file << ":" << error.at.line << ":" << error.at.column
//               << ": " << error.message;

#ifndef RPMA_HARNESS_FAULTS_FAULT_RULE_TEXT_H_
#define RPMA_HARNESS_FAULTS_FAULT_RULE_TEXT_H_

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "faults/fault_injection.h"

namespace rpma_harness {

constexpr size_t kMaxFaults = 256;  // per scenario or faults file

// 1-based, as printed in "file:line:column: message".
struct TextPosition {
  int line = 1;
  int column = 1;
};

struct FaultField {
  enum Kind {
    kScalar,  // text (possibly empty when quoted)
    kNull,    // `key:` with nothing after it, or `~`
    kOther,   // a list or a mapping where a value was expected
  };
  std::string key;
  TextPosition key_at;
  Kind kind = kScalar;
  std::string value;  // kScalar only
  TextPosition value_at;
};

// One entry of a `faults:` list, its fields in the order written.
struct FaultFields {
  TextPosition at;
  std::vector<FaultField> fields;
};

struct FaultTextError {
  TextPosition at;
  std::string message;
};

struct FaultRuleText {
  FaultRule rule;
  std::string side;         // "client", "server" or "" (any)
  uint32_t connection = 0;  // 0: every connection
};

// Checks `item` (entry `index` of the list) as the scenario runner does:
// unknown or repeated keys, keys without a value, every value's form and
// range, what each action needs, a name used by one of `earlier`, and
// FaultInjector::Validate. `connections` bounds `connection:`.
bool FaultRuleFromFields(const FaultFields& item, size_t index,
                         const std::vector<FaultRule>& earlier,
                         uint32_t connections, FaultRuleText* out,
                         FaultTextError* error);

// The number forms of scenario and faults files, also used for
// command-line values: decimal without leading zeros ("0" itself is fine)
// or hex as 0x...; no sign, no octal, no empty value, at most `max`. On
// failure *why says what was expected.
bool ParseUnsignedNumber(const std::string& text, uint64_t max, uint64_t* value,
                         std::string* why);
// A probability: a plain decimal in (0, 1] (no nan, inf, exponent, sign).
bool ParseProbability(const std::string& text, double* value, std::string* why);

// Completion status names as written in the files ("REM_ACCESS_ERR").
const std::vector<std::pair<std::string, ibv_wc_status>>& WcStatusNames();

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_FAULTS_FAULT_RULE_TEXT_H_
