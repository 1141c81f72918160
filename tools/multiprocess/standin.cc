// standin: a small program the launcher's tests run in place of a librpma
// server or client. Its arguments are steps, done in order:
//   print TEXT      a line on stdout       partial TEXT  no newline
//   err TEXT        a line on stderr       sleep MS
//   listen          create the fabric's listener endpoint file
//                   ($RPMA_HARNESS_FABRIC/l-127.0.0.1-7000)
//   expect-listener exit 3 unless that file exists
//   env             print the three RPMA_HARNESS_* variables it got
//   trace N         append N lines "<ns> <label> #k ..." to
//                   $RPMA_HARNESS_TRACE (as the fabric does)
//   exit N          crash (abort)          hang (sleep forever)
//   fork-hang FILE  fork a child that writes its pid to FILE and sleeps
//   escape-hang FILE  fork a child that leaves the process group (setsid),
//                   writes its pid to FILE and sleeps holding stdout/stderr
//   wait-file FILE  wait until FILE exists (exit 6 after 20 s)
//   on-exit-touch FILE  create FILE when the program exits (exit or return)
// With no exit step it exits 0.

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "<unset>" : v;
}

std::string g_exit_touch;

void TouchAtExit() {
  const int fd = open(g_exit_touch.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
}

std::string ListenerPath() {
  return Env("RPMA_HARNESS_FABRIC") + "/l-127.0.0.1-7000";
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  for (int i = 1; i < argc; ++i) {
    const std::string step = argv[i];
    const char* arg = i + 1 < argc ? argv[i + 1] : "";
    if (step == "print") {
      std::printf("%s\n", arg);
      ++i;
    } else if (step == "partial") {
      std::printf("%s", arg);
      ++i;
    } else if (step == "err") {
      std::fprintf(stderr, "%s\n", arg);
      ++i;
    } else if (step == "sleep") {
      usleep(static_cast<useconds_t>(std::atoi(arg)) * 1000);
      ++i;
    } else if (step == "listen") {
      const int fd = open(ListenerPath().c_str(), O_CREAT | O_WRONLY, 0600);
      if (fd < 0) {
        std::perror("listen");
        return 4;
      }
      close(fd);
    } else if (step == "expect-listener") {
      if (access(ListenerPath().c_str(), F_OK) != 0) {
        std::printf("no listener at %s\n", ListenerPath().c_str());
        return 3;
      }
    } else if (step == "env") {
      std::printf("FABRIC=%s\nPROCESS_NAME=%s\nTRACE=%s\n",
                  Env("RPMA_HARNESS_FABRIC").c_str(),
                  Env("RPMA_HARNESS_PROCESS_NAME").c_str(),
                  Env("RPMA_HARNESS_TRACE").c_str());
    } else if (step == "trace") {
      const int n = std::atoi(arg);
      ++i;
      const char* path = std::getenv("RPMA_HARNESS_TRACE");
      if (path == nullptr) continue;
      FILE* f = std::fopen(path, "a");
      if (f == nullptr) return 5;
      for (int k = 1; k <= n; ++k) {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        std::fprintf(
            f,
            "%llu %s #%d completion qp=0x000011 wr_id=%d "
            "op=RDMA_WRITE status=0/SUCCESS len=64\n",
            static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull +
                static_cast<unsigned long long>(ts.tv_nsec),
            Env("RPMA_HARNESS_PROCESS_NAME").c_str(), k, k);
        std::fflush(f);
        usleep(2000);
      }
      std::fclose(f);
    } else if (step == "exit") {
      return std::atoi(arg);
    } else if (step == "crash") {
      std::abort();
    } else if (step == "hang") {
      for (;;) pause();
    } else if (step == "wait-file") {
      ++i;
      int waited_ms = 0;
      while (access(arg, F_OK) != 0) {
        if (waited_ms >= 20000) return 6;
        usleep(5000);
        waited_ms += 5;
      }
    } else if (step == "on-exit-touch") {
      ++i;
      g_exit_touch = arg;
      std::atexit(TouchAtExit);
    } else if (step == "escape-hang") {
      ++i;
      if (fork() == 0) {
        setsid();
        FILE* f = std::fopen(arg, "w");
        if (f != nullptr) {
          std::fprintf(f, "%d\n", static_cast<int>(getpid()));
          std::fclose(f);
        }
        for (;;) pause();
      }
    } else if (step == "fork-hang") {
      ++i;
      if (fork() == 0) {
        FILE* f = std::fopen(arg, "w");
        if (f != nullptr) {
          std::fprintf(f, "%d\n", static_cast<int>(getpid()));
          std::fclose(f);
        }
        for (;;) pause();
      }
    } else {
      std::fprintf(stderr, "standin: unknown step %s\n", step.c_str());
      return 2;
    }
  }
  return 0;
}
