// test_dir.h: a fresh directory for one test's files, under the test's own
// temporary directory (Bazel's TEST_TMPDIR, which Bazel clears and which is
// the only place a hermetic test writes; /tmp outside Bazel).
//
//   const std::string dir = NewTestDir("fabtest");  // "" if mkdtemp failed

#ifndef RPMA_HARNESS_MOCK_TEST_DIR_H_
#define RPMA_HARNESS_MOCK_TEST_DIR_H_

#include <stdlib.h>

#include <string>

namespace rpma_harness {

inline std::string NewTestDir(const std::string& prefix) {
  const char* root = getenv("TEST_TMPDIR");
  std::string dir =
      std::string(root != nullptr && *root != '\0' ? root : "/tmp") + "/" +
      prefix + ".XXXXXX";
  if (mkdtemp(&dir[0]) == nullptr) return "";
  return dir;
}

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_TEST_DIR_H_
