// spawn_self.h: the process placements of tools/bench's program benchmarks
// (program_bench, conn_bench) run their halves as fresh processes of the
// benchmark's own binary, each making its own default NIC on one fabric.
//
//   std::string self = SelfPath();   // in main, before anything else
//   pid_t pid = SpawnSelf(self, {self, "--server", port}, dir, -1, -1, {});

#ifndef RPMA_HARNESS_TOOLS_BENCH_SPAWN_SELF_H_
#define RPMA_HARNESS_TOOLS_BENCH_SPAWN_SELF_H_

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace rpma_harness {
namespace bench {

// This binary's path ("" if /proc/self/exe cannot be read).
inline std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  return std::string(self, static_cast<size_t>(n));
}

// Runs `self` with `args` (args[0] included) as a fresh process whose
// default NIC joins the fabric `fabric` (RPMA_HARNESS_FABRIC), with `env`
// set besides, and `stdin_fd` / `stdout_fd` (when >= 0) as its fd 0 / 1.
// The caller's other descriptors should be close-on-exec. Returns the
// child's pid (-1: fork failed); a child that cannot exec exits 127.
inline pid_t SpawnSelf(const std::string& self,
                       const std::vector<std::string>& args,
                       const std::string& fabric, int stdin_fd, int stdout_fd,
                       const std::vector<std::pair<std::string, std::string>>&
                           env) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setenv("RPMA_HARNESS_FABRIC", fabric.c_str(), 1);
  for (const auto& [name, value] : env) {
    setenv(name.c_str(), value.c_str(), 1);
  }
  if (stdin_fd >= 0) dup2(stdin_fd, 0);
  if (stdout_fd >= 0) dup2(stdout_fd, 1);
  std::vector<char*> argv;
  for (const std::string& a : args) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  execv(self.c_str(), argv.data());
  _exit(127);
}

}  // namespace bench
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_BENCH_SPAWN_SELF_H_
