// crash_journal_fuzz.cc: arbitrary journals (rpma/crash_journal.h) through
// PersistenceRecorder::FromJournalText and Check, as crash_check reads the
// files processes wrote. Input: up to four journals separated by NUL bytes.
//
// Checked: no crash, hang or out-of-bounds read (the journal's addresses
// are never dereferenced: only its own bytes are), a refusal always says
// "journal.N:LINE: ...", and a journal that is accepted checks to the same
// report twice (the merge and the exploration are deterministic).

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "crash/crash_check.h"
#include "tools/fuzz/fuzz_targets.h"

namespace rpma_harness {
namespace {

[[noreturn]] void Violation(const char* what, const std::string& detail) {
  fprintf(stderr, "crash_journal_fuzz: invariant broken: %s (%s)\n", what,
          detail.c_str());
  abort();
}

std::string CheckOnce(const std::vector<crash::PersistenceRecorder::JournalFile>&
                          files,
                      std::string* error) {
  crash::CrashCheckOptions options;
  options.budget = 16;  // bounded work per crash point
  auto recorder =
      crash::PersistenceRecorder::FromJournalText(files, options, error);
  if (recorder == nullptr) return "";
  crash::CrashReport report =
      recorder->Check([](crash::Image& image) -> std::string {
        uint64_t sum = 0;
        for (size_t r = 0; r < image.regions() && r < 4; ++r) {
          sum += image.Load<uint64_t>(r, 0);
          sum += image.Load<uint8_t>(r, image.size(r) - 1);
          sum += image.Load<uint64_t>(r, image.size(r));  // past the end
        }
        return sum % 7 == 3 ? "odd" : "";
      });
  return report.Text();
}

}  // namespace

int FuzzCrashJournal(const uint8_t* data, size_t size) {
  std::vector<crash::PersistenceRecorder::JournalFile> files;
  std::string text;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == 0) {
      files.push_back({"journal." + std::to_string(files.size()), text});
      text.clear();
      if (files.size() == 4) break;
      continue;
    }
    text += static_cast<char>(data[i]);
  }
  std::string error;
  const std::string first = CheckOnce(files, &error);
  if (!error.empty()) {
    if (error.rfind("journal.", 0) != 0 || error.find(':') == std::string::npos) {
      Violation("a refusal does not name the journal and line", error);
    }
    return 0;
  }
  std::string again_error;
  if (CheckOnce(files, &again_error) != first || !again_error.empty()) {
    Violation("the same journals checked differently", first);
  }
  return 0;
}

}  // namespace rpma_harness
