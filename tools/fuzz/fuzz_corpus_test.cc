// fuzz_corpus_test.cc: every input of tools/fuzz/corpus/<target>/ (the seeds
// and each crash input a fuzzer ever found, kept after the fix) through the
// same entry point the fuzzer calls. A crash or a broken invariant aborts the
// test; the file being replayed is printed first.

#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tools/fuzz/fuzz_targets.h"

namespace rpma_harness {
namespace {

std::string CorpusDir(const std::string& target) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  std::string root = srcdir && workspace
                         ? std::string(srcdir) + "/" + workspace + "/"
                         : std::string();
  return root + "tools/fuzz/corpus/" + target;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") files.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  return files;
}

void Replay(const std::string& target, int (*entry)(const uint8_t*, size_t)) {
  const std::vector<std::string> files = Files(CorpusDir(target));
  ASSERT_FALSE(files.empty()) << "no corpus in " << CorpusDir(target);
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    fprintf(stderr, "replaying %s (%zu bytes)\n", file.c_str(), bytes.size());
    EXPECT_EQ(
        entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0)
        << file;
  }
}

TEST(FuzzCorpusTest, FakeNicWr) { Replay("fake_nic_wr", FuzzFakeNicWr); }

TEST(FuzzCorpusTest, MrDescriptor) {
  Replay("mr_descriptor", FuzzMrDescriptor);
}

TEST(FuzzCorpusTest, RpmaApi) { Replay("rpma_api", FuzzRpmaApi); }

TEST(FuzzCorpusTest, FaultFile) { Replay("fault_file", FuzzFaultFile); }
TEST(FuzzCorpusTest, ReplayTrace) { Replay("replay_trace", FuzzReplayTrace); }

TEST(FuzzCorpusTest, CrashJournal) {
  Replay("crash_journal", FuzzCrashJournal);
}

TEST(FuzzCorpusTest, ScenarioParser) {
  Replay("scenario_parser", FuzzScenarioParser);
}

}  // namespace
}  // namespace rpma_harness
