// fault_file.h: the per-process faults file (RPMA_HARNESS_FAULTS), read
// without yaml-cpp.
//
// The file is the `faults:` list of a scenario file (tools/scenarios/*.yaml)
// in YAML's block style, with an optional `seed:`; a whole scenario file
// may be given, and its other top-level keys are skipped (each named in
// FaultFile::ignored_keys). The keys of a fault, their checks and messages
// are the scenario runner's (faults/fault_rule_text.h). The reader takes the
// subset of YAML such a list is written in:
//
//   seed: 7                  # optional; RPMA_HARNESS_SEED overrides it
//   faults:
//     - name: deny the second write     # `- key: value` opens a fault
//       on: execute                      # `  key: value` continues it
//       nth: 2
//       action: complete
//       status: "REM_ACCESS_ERR"        # 'single' or "double" quotes
//
// Anything else inside `faults:` -- flow style ([...], {...}), anchors and
// aliases, tags, block scalars (| >), nested lists or mappings, tabs -- is
// refused with "file:line:column: what was found; what to write instead".
// `side:` and `connection:` are refused too: the file is given to one
// process, which is the side (the launcher's --faults LABEL=FILE).
//
//   FaultFile file;
//   std::string error;
//   if (!ReadFaultFile("faults.yaml", &file, &error)) { print error; fail }

#ifndef RPMA_HARNESS_FAULTS_FAULT_FILE_H_
#define RPMA_HARNESS_FAULTS_FAULT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "faults/fault_injection.h"

namespace rpma_harness {

constexpr size_t kMaxFaultFileBytes = 64 * 1024;  // a scenario file's limit

struct FaultFile {
  std::vector<FaultRule> faults;
  std::optional<uint64_t> seed;
  std::vector<std::string> ignored_keys;  // top-level keys other than these
};

// Parses `text` (the contents of `file_name`). On failure returns false and
// sets *error to "file:line:column: message". Never crashes or loops on any
// input (tools/fuzz/fault_file_fuzzer.cc).
bool ParseFaultFileText(const std::string& text, const std::string& file_name,
                        FaultFile* file, std::string* error);
// Reads at most kMaxFaultFileBytes of `path`; a missing, unreadable or
// larger file or a directory is "path: message".
bool ReadFaultFile(const std::string& path, FaultFile* file,
                   std::string* error);

// The default backend's use (rpma/default_backend.cc): when
// RPMA_HARNESS_FAULTS is set, reads it, prints one line per ignored key to
// stderr, and wraps `backend` in a FaultInjector with the file's rules
// (seed: RPMA_HARNESS_SEED, else the file's `seed:`, else 1). On any error
// returns nullptr and sets *error (the caller must not run without the
// faults). When the variable is unset or empty returns `backend`.
std::shared_ptr<VerbsBackend> WrapWithFaultsFromEnvironment(
    std::shared_ptr<VerbsBackend> backend, std::string* error);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_FAULTS_FAULT_FILE_H_
