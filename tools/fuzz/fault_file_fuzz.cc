// fault_file_fuzz.cc: arbitrary text through ParseFaultFileText, the
// restricted reader of RPMA_HARNESS_FAULTS (faults/fault_file.h).
//
// Checked: no crash or uncaught exception, a failure always says
// "<file>:<line>:<col>: ..." with a line inside the text, parsing is
// deterministic, and every accepted rule passes FaultInjector::Validate
// (what the default backend will AddRule).

#include <cstdio>
#include <cstdlib>
#include <string>

#include "faults/fault_file.h"
#include "tools/fuzz/fuzz_targets.h"

namespace rpma_harness {
namespace {

[[noreturn]] void Violation(const char* what, const std::string& error) {
  fprintf(stderr, "fault_file_fuzz: invariant broken: %s (error: %s)\n", what,
          error.c_str());
  abort();
}

}  // namespace

int FuzzFaultFile(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string file = "fuzz.yaml";
  FaultFile first;
  std::string error;
  const bool ok = ParseFaultFileText(text, file, &first, &error);
  if (!ok) {
    if (error.rfind(file + ":", 0) != 0) {
      Violation("the error does not start with the file name", error);
    }
    const long line = std::strtol(error.c_str() + file.size() + 1, nullptr, 10);
    size_t lines = 1;
    for (char c : text) lines += c == '\n';
    if (line < 1 || static_cast<size_t>(line) > lines) {
      Violation("the error's line is not in the text", error);
    }
  }
  FaultFile second;
  std::string error2;
  if (ParseFaultFileText(text, file, &second, &error2) != ok ||
      error2 != error || second.faults.size() != first.faults.size()) {
    Violation("two parses of the same text disagree", error);
  }
  for (const FaultRule& rule : first.faults) {
    std::string why;
    if (!FaultInjector::Validate(rule, &why)) {
      Violation("an accepted rule fails Validate", why);
    }
  }
  return 0;
}

}  // namespace rpma_harness
