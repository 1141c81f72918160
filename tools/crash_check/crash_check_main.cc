// crash_check: crash consistency of a run of separate processes. The
// processes ran with RPMA_HARNESS_CRASH_RECORD=DIR (each journalled what
// the crash checker needs, rpma/crash_journal.h); this merges the journals,
// crashes the server at every point that matters, writes each legal image
// of its persistent memory to a file, and runs the program's own recovery
// on it (crash/crash_check.h; docs/crash-consistency.md).
//
//   crash_check --journal DIR [OPTIONS] -- RECOVER [ARG...]
//
// In RECOVER's arguments "{image}" becomes the image file of the first
// persistent region, "{image:N}" of region N (0-based). RECOVER also gets
// RPMA_HARNESS_CRASH_PROMISES (what the program had promised by the crash,
// one per line) and RPMA_HARNESS_CRASH_POINT (the crash point's name). It
// exits 0 when what it recovered is consistent; otherwise its last output
// line says what is wrong.
//
// Options:
//   --unit N              the aligned unit G in bytes (default 8)
//   --budget N            images per crash point before sampling (default
//                         4096)
//   --seed N              the sampler's seed (default 1)
//   --read-flushes-all    librpma's READ flush persists everything the
//                         connection wrote before it (default: the range)
//   --ddio-on             the server's platform writes through the CPU
//                         cache: no PERSISTENT flush persists anything
//   --point K             check only crash point K (a report's replay line)
//   --choices LIST        and that image first: REGION,UNIT,CHOICE;... (the
//                         replay line's)
//
// Exit status: 0 no violation, 1 a violation (the report says which image,
// shrunk), 2 usage, journal or recovery-command errors.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "crash/crash_check.h"

extern char** environ;

namespace {

int Usage(const std::string& why) {
  std::cerr << "crash_check: " << why << "\n"
            << "usage: crash_check --journal DIR [--unit N] [--budget N] "
               "[--seed N] [--read-flushes-all] [--ddio-on] [--point K] "
               "[--choices R,U,C;...] -- RECOVER [ARG...]\n";
  return 2;
}

bool ParseNumber(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return false;
  *out = v;
  return true;
}

// Runs argv with extra environment; its exit status, and its output's last
// non-empty line in *last.
int Run(const std::vector<std::string>& argv,
        const std::vector<std::string>& extra_env, const std::string& out_path,
        std::string* last) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage = extra_env;
  for (char** e = environ; *e != nullptr; ++e) {
    // Ours replace any inherited ones (the names before '=' match).
    bool replaced = false;
    for (const std::string& x : extra_env) {
      const size_t eq = x.find('=');
      replaced |= std::strncmp(*e, x.c_str(), eq + 1) == 0;
    }
    if (!replaced) env_storage.push_back(*e);
  }
  std::vector<char*> env;
  for (std::string& e : env_storage) env.push_back(&e[0]);
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int err =
      posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    *last = std::string("cannot run ") + argv[0] + ": " + std::strerror(err);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(out_path);
  std::string line;
  last->clear();
  while (std::getline(in, line)) {
    if (!line.empty()) *last = line;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  *last = "killed by signal " + std::to_string(WTERMSIG(status));
  return 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  rpma_harness::crash::CrashCheckOptions options;
  options.budget = 4096;
  std::string journal;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    uint64_t n = 0;
    auto number = [&](const char* name) {
      if (i + 1 >= argc || !ParseNumber(argv[i + 1], &n)) {
        Usage(std::string(name) + " needs a number");
        std::exit(2);
      }
      ++i;
      return n;
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "--journal" && i + 1 < argc) {
      journal = argv[++i];
    } else if (a == "--unit") {
      options.unit = number("--unit");
    } else if (a == "--budget") {
      options.budget = number("--budget");
    } else if (a == "--seed") {
      options.seed = number("--seed");
    } else if (a == "--point") {
      options.only_point = static_cast<int>(number("--point"));
    } else if (a == "--choices" && i + 1 < argc) {
      std::istringstream list(argv[++i]);
      std::string item;
      while (std::getline(list, item, ';')) {
        unsigned long long r = 0, u = 0, c = 0;
        char tail = 0;
        if (std::sscanf(item.c_str(), "%llu,%llu,%llu%c", &r, &u, &c, &tail) !=
            3) {
          return Usage("--choices: '" + item + "' is not REGION,UNIT,CHOICE");
        }
        options.choices.push_back(
            {static_cast<size_t>(r), u, static_cast<size_t>(c)});
      }
    } else if (a == "--read-flushes-all") {
      options.read_flushes_all = true;
    } else if (a == "--ddio-on") {
      options.platform_direct_write_to_pmem = false;
    } else if (a == "-h" || a == "--help") {
      Usage("help");
      return 0;
    } else {
      return Usage("unknown argument '" + a + "'");
    }
  }
  if (journal.empty()) return Usage("--journal DIR is required");
  if (i >= argc) return Usage("no recovery command after --");
  if (options.unit == 0 || options.unit > 64 ||
      (options.unit & (options.unit - 1)) != 0) {
    return Usage("--unit must be a power of two from 1 to 64");
  }
  const std::vector<std::string> recover(argv + i, argv + argc);

  std::string error;
  auto recorder = rpma_harness::crash::PersistenceRecorder::FromJournal(
      journal, options, &error);
  if (recorder == nullptr) {
    std::cerr << "crash_check: " << error << "\n";
    return 2;
  }
  char work_template[] = "/tmp/rpma-crash-check.XXXXXX";
  const char* work = mkdtemp(work_template);
  if (work == nullptr) {
    std::cerr << "crash_check: mkdtemp: " << std::strerror(errno) << "\n";
    return 2;
  }
  std::string command_error;
  rpma_harness::crash::CrashReport report =
      recorder->Check([&](rpma_harness::crash::Image& image) -> std::string {
        std::vector<std::string> paths;
        for (size_t r = 0; r < image.regions(); ++r) {
          const std::string path =
              std::string(work) + "/image." + std::to_string(r);
          std::ofstream out(path, std::ios::binary | std::ios::trunc);
          out.write(reinterpret_cast<const char*>(image.Bytes(r)),
                    static_cast<std::streamsize>(image.size(r)));
          paths.push_back(path);
        }
        std::vector<std::string> args;
        for (std::string a : recover) {
          for (size_t r = paths.size(); r-- > 0;) {
            const std::string key = "{image:" + std::to_string(r) + "}";
            for (size_t at; (at = a.find(key)) != std::string::npos;) {
              a.replace(at, key.size(), paths[r]);
            }
          }
          for (size_t at; !paths.empty() &&
                          (at = a.find("{image}")) != std::string::npos;) {
            a.replace(at, 7, paths[0]);
          }
          args.push_back(a);
        }
        // env RPMA_HARNESS_CRASH_PROMISES=LINES: set by crash_check for the
        //   recovery command: what the program had promised (Promise,
        //   rpma_harness_promise) before the crash, one per line.
        // env RPMA_HARNESS_CRASH_POINT=NAME: set by crash_check for the
        //   recovery command: the crash point, as the report names it.
        std::string promises;
        for (const std::string& p : image.promises()) promises += p + "\n";
        std::string last;
        const int code = Run(args,
                             {"RPMA_HARNESS_CRASH_PROMISES=" + promises,
                              "RPMA_HARNESS_CRASH_POINT=" + image.point()},
                             std::string(work) + "/output", &last);
        if (code == 0) return "";
        if (code < 0) {
          command_error = last;
          return last;
        }
        return last.empty() ? "recovery exited " + std::to_string(code) : last;
      });
  std::cout << report;
  for (size_t r = 0; r < 64; ++r) {
    unlink((std::string(work) + "/image." + std::to_string(r)).c_str());
  }
  unlink((std::string(work) + "/output").c_str());
  rmdir(work);
  if (!command_error.empty()) {
    std::cerr << "crash_check: " << command_error << "\n";
    return 2;
  }
  return report.ok() ? 0 : 1;
}
