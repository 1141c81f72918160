// test_dir.h: where a test keeps its files -- under the test's own temporary
// directory (Bazel's TEST_TMPDIR, which Bazel clears and which is the only
// place a hermetic test writes; /tmp outside Bazel).
//
//   const std::string dir = NewTestDir("fabtest");  // "" if mkdtemp failed
//
//   CaptureStderr();                 // as gtest's internal CaptureStderr,
//   Work();                          // which writes its file to /tmp/ on
//   std::string e = TakeStderr();    // Linux (gtest-port.cc CapturedStream)

#ifndef RPMA_HARNESS_MOCK_TEST_DIR_H_
#define RPMA_HARNESS_MOCK_TEST_DIR_H_

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
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

namespace test_dir_internal {
struct Capture {
  std::string dir;
  int saved = -1;
};
inline Capture& TheCapture() {
  static Capture capture;
  return capture;
}
}  // namespace test_dir_internal

// Sends this process's stderr (fd 2) to a file in a NewTestDir until
// TakeStderr. One capture at a time; not thread-safe.
inline void CaptureStderr() {
  test_dir_internal::Capture& c = test_dir_internal::TheCapture();
  fflush(stderr);
  c.dir = NewTestDir("stderr");
  const int fd = open((c.dir + "/captured").c_str(),
                      O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return;
  c.saved = dup(2);
  dup2(fd, 2);
  close(fd);
}

// Ends the capture: stderr is fd 2's old file again; returns what was
// written meanwhile and removes the file.
inline std::string TakeStderr() {
  test_dir_internal::Capture& c = test_dir_internal::TheCapture();
  if (c.saved < 0) return "";
  fflush(stderr);
  dup2(c.saved, 2);
  close(c.saved);
  c.saved = -1;
  const std::string path = c.dir + "/captured";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path.c_str());
  rmdir(c.dir.c_str());
  return text.str();
}

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_TEST_DIR_H_
