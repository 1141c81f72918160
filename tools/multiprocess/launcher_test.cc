// launcher_test: the multi-process launcher (launcher.h) as a user runs it --
// the built binary, with stand-in programs (standin.cc) as server and
// clients: what it prints, what it exits with, what it kills, and the merged
// trace and timeline. None of this needs the fabric.

#include "tools/multiprocess/launcher.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/multiprocess/trace_merge.h"

namespace rpma_harness {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kLauncher[] = "tools/multiprocess/multiprocess";
const char kStandin[] = "tools/multiprocess/standin";

struct Outcome {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

// Runs the launcher with `args` (a shell-quoted string), stdout and stderr
// together.
Outcome RunLauncher(const std::string& args) {
  Outcome o;
  const auto begin = std::chrono::steady_clock::now();
  const std::string cmd = std::string(kLauncher) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) o.output.append(buf, n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  return o;
}

std::string S(const std::string& steps) {
  return std::string(kStandin) + " " + steps;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// True once `pid` is gone or a zombie (killed, not yet reaped by whoever
// inherited it), polled for up to 5 s.
bool GoneOrZombie(int pid) {
  for (int i = 0; i < 500; ++i) {
    if (kill(pid, 0) != 0) return true;
    const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() &&
        stat[close + 2] == 'Z') {
      return true;
    }
    usleep(10 * 1000);
  }
  return false;
}

TEST(Launcher, PassesWhenAllExitZeroAndLabelsEveryLine) {
  const Outcome o = RunLauncher(
      "--clients 2 " + S("listen print 'server up' err 'on stderr' sleep 300") +
      " -- " +
      S("expect-listener print 'client %i done' partial 'no newline'"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("[server] server up\n"));
  EXPECT_THAT(o.output, HasSubstr("[server] on stderr\n"));
  EXPECT_THAT(o.output, HasSubstr("[client0] client 0 done\n"));
  EXPECT_THAT(o.output, HasSubstr("[client1] client 1 done\n"));
  EXPECT_THAT(o.output, HasSubstr("[client1] no newline\n"));
  EXPECT_THAT(o.output, HasSubstr("launcher: ok client1 (exit code 0)"));
  EXPECT_THAT(o.output, HasSubstr("launcher: PASS (3 processes)"));
}

TEST(Launcher, ClientsStartOnlyOnceTheServerListens) {
  // The listener appears 400 ms in; a client started earlier exits 3.
  const Outcome o = RunLauncher(S("sleep 400 listen sleep 200") + " -- " +
                                S("expect-listener"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  // Without the readiness rule the client starts at once and fails: here
  // the server listens only after the client has exited (a file, not a
  // sleep, orders them).
  const std::string gone = TmpPath("client0.exited");
  std::remove(gone.c_str());
  const Outcome early = RunLauncher(
      "--ready none " + S("wait-file " + gone + " listen sleep 200") + " -- " +
      S("on-exit-touch " + gone + " expect-listener"));
  EXPECT_EQ(early.exit_code, 1) << early.output;
  EXPECT_THAT(early.output, HasSubstr("FAIL client0: exit code 3"));
}

TEST(Launcher, ReadyOnAServerLineOrAfterADelay) {
  const Outcome line =
      RunLauncher("--ready 'line:^listening on' " +
                  S("sleep 300 print 'listening on 7000' sleep 300") + " -- " +
                  S("print go"));
  EXPECT_EQ(line.exit_code, 0) << line.output;
  EXPECT_LT(line.output.find("[server] listening on"),
            line.output.find("[client0] go"))
      << line.output;
  const Outcome delay =
      RunLauncher("--ready delay:100 " + S("sleep 300") + " -- " + S("exit 0"));
  EXPECT_EQ(delay.exit_code, 0) << delay.output;
}

TEST(Launcher, ServerThatEndsBeforeItListensFailsWithoutStartingClients) {
  const Outcome o = RunLauncher(S("exit 0") + " -- " + S("print started"));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("the server ended before it was ready"));
  EXPECT_THAT(o.output, Not(HasSubstr("[client0] started")));
}

TEST(Launcher, FailsNamingEachNonZeroExitAndSignal) {
  const Outcome o =
      RunLauncher("--grace 5 " + S("listen sleep 300") + " -- " + S("exit 3") +
                  " -- " + S("crash") + " -- " + S("exit 0"));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("FAIL client0: exit code 3"));
  EXPECT_THAT(o.output, HasSubstr("FAIL client1: killed by signal 6"));
  EXPECT_THAT(o.output, HasSubstr("ok client2 (exit code 0)"));
  EXPECT_THAT(o.output, HasSubstr("ok server (exit code 0)"));
  EXPECT_THAT(o.output,
              HasSubstr("launcher: FAIL (4 processes; 2 failure(s))"));
}

TEST(Launcher, ExecFailureIsNamed) {
  const Outcome o =
      RunLauncher("--ready none " + S("exit 0") + " -- /nonexistent/client");
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_THAT(o.output,
              HasSubstr("[client0] launcher: cannot run /nonexistent/client"));
  EXPECT_THAT(o.output, HasSubstr("FAIL client0: exit code 127"));
}

// Launch() in this process, with fork(2) made to fail for one label.
LaunchResult LaunchFailingFork(const std::string& label, std::string* out) {
  LaunchOptions o;
  o.processes = {{"server", {kStandin, "listen", "sleep", "300"}},
                 {"client0", {kStandin, "exit", "0"}},
                 {"client1", {kStandin, "exit", "0"}}};
  o.grace_ms = 2000;
  o.timeout_ms = 20000;
  o.fail_fork_for = label;
  std::ostringstream s;
  LaunchResult r = Launch(o, s);
  *out = s.str();
  return r;
}

TEST(Launcher, AClientThatCannotBeStartedFailsTheRun) {
  std::string out;
  const LaunchResult r = LaunchFailingFork("client0", &out);
  EXPECT_FALSE(r.pass) << out;
  EXPECT_THAT(out, HasSubstr("launcher: cannot start client0: fork: "));
  EXPECT_THAT(out, HasSubstr("FAIL client0: not started (fork: "));
  EXPECT_THAT(out, HasSubstr("ok client1 (exit code 0)"));
  // Reaped processes are not killed by a later stop signal.
  EXPECT_EQ(RecordedProcessGroupsForTesting(), 0);
  ASSERT_EQ(r.outcomes.size(), 3u);
  EXPECT_FALSE(r.outcomes[1].started);
  EXPECT_THAT(r.outcomes[1].verdict, HasSubstr("not started"));
}

// A program that calls Launch() keeps its own signal handling: the stop
// handlers live only as long as the run.
int g_callers_sigterms = 0;
void CallersSigterm(int) { ++g_callers_sigterms; }

TEST(Launcher, LaunchPutsBackTheCallersSignalDispositions) {
  struct sigaction mine = {};
  mine.sa_handler = CallersSigterm;
  sigemptyset(&mine.sa_mask);
  struct sigaction before_term, before_pipe;
  ASSERT_EQ(sigaction(SIGTERM, &mine, &before_term), 0);
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &before_pipe), 0);
  LaunchOptions o;
  o.processes = {{"server", {kStandin, "exit", "0"}}};
  o.ready = ReadyRule::kNone;
  o.timeout_ms = 20000;
  std::ostringstream s;
  const LaunchResult r = Launch(o, s);
  EXPECT_TRUE(r.pass) << s.str();
  struct sigaction now_term, now_pipe;
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &now_term), 0);
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now_pipe), 0);
  EXPECT_EQ(now_term.sa_handler, &CallersSigterm);
  EXPECT_EQ(now_pipe.sa_handler, before_pipe.sa_handler);
  raise(SIGTERM);  // ours, not the launcher's KillGroups
  EXPECT_EQ(g_callers_sigterms, 1);
  sigaction(SIGTERM, &before_term, nullptr);
}

TEST(Launcher, AServerThatCannotBeStartedFailsAtOnce) {
  std::string out;
  const auto begin = std::chrono::steady_clock::now();
  const LaunchResult r = LaunchFailingFork("server", &out);
  EXPECT_FALSE(r.pass) << out;
  EXPECT_THAT(out, HasSubstr("the server could not be started"));
  EXPECT_THAT(out, HasSubstr("FAIL server: not started (fork: "));
  EXPECT_THAT(out, HasSubstr("FAIL client0: not started"));
  // Not the 20 s timeout.
  EXPECT_LT(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count(),
      10)
      << out;
}

TEST(Launcher, TimeoutKillsTheHungAndNamesThem) {
  const std::string pid_file = TmpPath("grandchild.pid");
  std::remove(pid_file.c_str());
  const Outcome o =
      RunLauncher("--timeout 1 " + S("listen hang") + " -- " +
                  S("fork-hang " + pid_file + " hang") + " -- " + S("exit 0"));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_THAT(
      o.output,
      HasSubstr("timeout after 1.000 s: still running: server, client0"));
  EXPECT_THAT(o.output, HasSubstr("FAIL server: hung (killed at the timeout)"));
  EXPECT_THAT(o.output, HasSubstr("FAIL client0: hung"));
  EXPECT_THAT(o.output, HasSubstr("ok client1"));
  EXPECT_LT(o.seconds, 10) << o.output;
  // The hung client's own child went with its process group.
  const int grandchild = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(GoneOrZombie(grandchild))
      << "grandchild " << grandchild << " lives";
}

TEST(Launcher, StoppingTheLauncherStopsItsProcesses) {
  // What Bazel's test timeout does: SIGTERM to the launcher.
  const std::string pid_file = TmpPath("stopped.pid");
  const std::string out_file = TmpPath("stopped.out");
  std::remove(pid_file.c_str());
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const int out = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    execl(kLauncher, kLauncher, "--ready", "none", kStandin, "fork-hang",
          pid_file.c_str(), "hang", static_cast<char*>(nullptr));
    _exit(127);
  }
  int grandchild = 0;
  for (int i = 0; i < 100 && grandchild <= 0; ++i) {
    usleep(20 * 1000);
    grandchild = std::atoi(ReadFile(pid_file).c_str());
  }
  ASSERT_GT(grandchild, 0);
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(GoneOrZombie(grandchild))
      << "grandchild " << grandchild << " lives";
  // ... and its work directory is gone too.
  const std::string out = ReadFile(out_file);
  const size_t at = out.find("launcher: fabric ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string fabric = out.substr(at + 17, out.find('\n', at) - at - 17);
  struct stat st;
  EXPECT_NE(stat(fabric.c_str(), &st), 0) << fabric << " was not removed";
}

TEST(Launcher, OutputIntoAClosedPipeStillEndsItsProcessesAndFails) {
  // `multiprocess | head` once head is gone: no SIGPIPE death leaving the
  // process groups behind.
  const std::string pid_file = TmpPath("sigpipe.pid");
  std::remove(pid_file.c_str());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  close(fds[0]);  // nobody reads
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    signal(SIGPIPE, SIG_DFL);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execl(kLauncher, kLauncher, "--timeout", "20", kStandin, "listen", "print",
          "server up", "sleep", "300", "--", kStandin, "fork-hang",
          pid_file.c_str(), "print", "client up", "sleep", "300",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const int grandchild = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(GoneOrZombie(grandchild))
      << "grandchild " << grandchild << " lives";
}

TEST(Launcher, StoppedDuringTheTimeoutDrainItStillDiesByTheSignal) {
  // Four hung clients whose children left their process groups and hold
  // their output pipes: after the timeout kill, each drain waits 200 ms for
  // an EOF that never comes, and the SIGTERM lands in those 800 ms.
  const std::string pid_file = TmpPath("escaped.pid.");
  for (int k = 0; k < 4; ++k)
    std::remove((pid_file + std::to_string(k)).c_str());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    const std::string client_pid_file = pid_file + "%i";
    execl(kLauncher, kLauncher, "--timeout", "1", "--clients", "4", kStandin,
          "listen", "hang", "--", kStandin, "escape-hang",
          client_pid_file.c_str(), "hang", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while (out.find("launcher: timeout after") == std::string::npos &&
         (n = read(fds[0], buf, sizeof(buf))) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
      << status << "\n"
      << out;
  for (int k = 0; k < 4; ++k) {
    const int escaped =
        std::atoi(ReadFile(pid_file + std::to_string(k)).c_str());
    if (escaped > 0) kill(escaped, SIGKILL);
  }
}

TEST(Launcher, GraceEndsTheOthersAfterAFailure) {
  const Outcome o = RunLauncher("--timeout 60 --grace 0.5 " + S("listen hang") +
                                " -- " + S("exit 2"));
  EXPECT_EQ(o.exit_code, 1) << o.output;
  EXPECT_THAT(o.output, HasSubstr("FAIL client0: exit code 2"));
  EXPECT_THAT(o.output,
              HasSubstr("FAIL server: still running 500 ms after client0 "
                        "failed (killed)"));
  EXPECT_LT(o.seconds, 10) << o.output;
}

TEST(Launcher, KillAtATimeIsExpectedDeath) {
  const Outcome o = RunLauncher("--kill client0@200 " + S("listen sleep 600") +
                                " -- " + S("print up hang"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("launcher: kill client0 with signal 9 (rule "
                                  "client0@200)"));
  EXPECT_THAT(o.output, HasSubstr("ok client0 (killed by signal 9)"));
}

TEST(Launcher, KillOnAnOutputLineOfAnotherProcess) {
  // kill_peer: the server dies when the client says it wrote; the client
  // (which would notice the dead peer) is expected to fail.
  const Outcome o = RunLauncher(
      "--kill 'server@/client0\\] wrote/' --expect client0=nonzero " +
      S("listen print serving hang") + " -- " +
      S("print 'wrote 1' sleep 300 exit 1"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("matched: [client0] wrote 1"));
  EXPECT_THAT(o.output, HasSubstr("ok server (killed by signal 9)"));
  EXPECT_THAT(o.output, HasSubstr("ok client0 (exit code 1)"));
}

TEST(Launcher, ATimedKillThatNeverComesChangesNothing) {
  // The client exits long before its rule would fire.
  const Outcome o = RunLauncher("--kill 'client0@5000' " + S("listen") +
                                " -- " + S("exit 0"));
  EXPECT_EQ(o.exit_code, 0) << o.output;  // never fired: a normal exit
  EXPECT_THAT(o.output, Not(HasSubstr("kill client0")));
}

TEST(Launcher, FaultsFileHoldsKillRules) {
  const std::string faults = TmpPath("k.faults");
  std::ofstream(faults) << "# comment\n\n  kill client0@/client0\\] ready/\n";
  const Outcome o =
      RunLauncher("--faults " + faults + " " + S("listen sleep 200") + " -- " +
                  S("print ready hang"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("ok client0 (killed by signal 9)"));
  std::ofstream(faults) << "kill client0 at 5\n";
  const Outcome bad = RunLauncher("--faults " + faults + " " + S("listen"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("k.faults:1: kill rule 'client0 at 5'"));
  std::ofstream(faults) << "stop client0\n";
  const Outcome verb = RunLauncher("--faults " + faults + " " + S("listen"));
  EXPECT_EQ(verb.exit_code, 2) << verb.output;
  EXPECT_THAT(verb.output, HasSubstr("k.faults:1: want 'kill LABEL@MS'"));
}

TEST(Launcher, ExpectationsOfExitCodes) {
  EXPECT_EQ(RunLauncher("--expect client0=nonzero " + S("listen") + " -- " +
                        S("exit 4"))
                .exit_code,
            0);
  const Outcome o = RunLauncher("--expect client0=nonzero " + S("listen") +
                                " -- " + S("exit 0"));
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.output,
              HasSubstr("FAIL client0: exit code 0, expected a non-zero exit"));
  EXPECT_EQ(
      RunLauncher("--expect client0=4 " + S("listen") + " -- " + S("exit 4"))
          .exit_code,
      0);
  EXPECT_EQ(
      RunLauncher("--expect client0=any " + S("listen") + " -- " + S("crash"))
          .exit_code,
      0);
}

TEST(Launcher, EachProcessGetsAFreshFabricAndItsNameAndItIsRemoved) {
  const Outcome o = RunLauncher(S("listen env sleep 100") + " -- " + S("env"));
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("[server] PROCESS_NAME=server\n"));
  EXPECT_THAT(o.output, HasSubstr("[client0] PROCESS_NAME=client0\n"));
  EXPECT_THAT(o.output, HasSubstr("[client0] TRACE=<unset>\n"));
  const size_t at = o.output.find("[server] FABRIC=");
  ASSERT_NE(at, std::string::npos);
  const std::string fabric =
      o.output.substr(at + 16, o.output.find('\n', at) - at - 16);
  EXPECT_THAT(o.output, HasSubstr("[client0] FABRIC=" + fabric + "\n"));
  // Under the test's own TEST_TMPDIR (Bazel sets it; the launcher makes
  // its work directory there, so a test writes nowhere else).
  EXPECT_EQ(fabric.rfind(DefaultTmpRoot() + "/rpma-mp.", 0), 0u) << fabric;
  if (std::getenv("TEST_TMPDIR") != nullptr) {
    EXPECT_EQ(fabric.rfind(std::string(std::getenv("TEST_TMPDIR")) + "/", 0),
              0u)
        << fabric;
  }
  struct stat st;
  EXPECT_NE(stat(fabric.c_str(), &st), 0) << fabric << " was not removed";
  // A second run gets another directory.
  const Outcome again = RunLauncher(S("listen env") + " -- " + S("exit 0"));
  EXPECT_THAT(again.output, Not(HasSubstr("FABRIC=" + fabric + "\n")));
}

TEST(Launcher, UsageErrorsExitTwo) {
  EXPECT_EQ(RunLauncher("").exit_code, 2);
  EXPECT_EQ(RunLauncher("--kill nobody " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(RunLauncher("--kill client7@5 " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(
      RunLauncher("--kill 'client0@/(/' " + S("exit 0") + " -- " + S("exit 0"))
          .exit_code,
      2);
  EXPECT_EQ(RunLauncher("--timeout x " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(RunLauncher("--ready sometimes " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(RunLauncher("--clients 2 " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(RunLauncher(S("exit 0") + " -- ").exit_code, 2);
  // A step is known only to the sequenced fabric.
  EXPECT_EQ(RunLauncher("--kill server@step:3 " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(RunLauncher("--sequence x " + S("exit 0")).exit_code, 2);
  EXPECT_EQ(RunLauncher("--sequence -1 " + S("exit 0")).exit_code, 2);
}

// Stand-ins never join the fabric, so the Sequencer only waits for them to
// end; the launcher's own trace lines carry the step (0: nothing granted)
// and no pid, so they read the same every run.
TEST(Launcher, SequencedRunStampsItsLinesWithTheStepAndNoPid) {
  const std::string trace = TmpPath("sequenced.trace");
  const Outcome o =
      RunLauncher("--sequence 5 --trace " + trace + " " +
                  S("listen sleep 100") + " -- " + S("print client-up"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output, HasSubstr("launcher: sequenced, seed 5"));
  const std::string text = ReadFile(trace);
  EXPECT_THAT(text, HasSubstr("0 launcher start server\n"));
  EXPECT_THAT(text, HasSubstr("0 launcher start client0\n"));
  EXPECT_THAT(text, HasSubstr("0 launcher exit client0 code 0\n"));
  EXPECT_THAT(text, Not(HasSubstr(" pid ")));
}

TEST(Launcher, HelpTakesNoValue) {
  for (const char* help : {"-h", "--help", "--keep --help"}) {
    const Outcome o = RunLauncher(std::string(help) + " " + S("exit 0"));
    EXPECT_EQ(o.exit_code, 0) << help << ": " << o.output;
    EXPECT_THAT(o.output, HasSubstr("usage: multiprocess")) << help;
    EXPECT_THAT(o.output, Not(HasSubstr("launcher: fabric"))) << help;
  }
}

TEST(Launcher, MergesTracesOnTheMonotonicClockAndDrawsALanePerProcess) {
  const std::string trace = TmpPath("merged.trace");
  const std::string svg = TmpPath("timeline.svg");
  const Outcome o = RunLauncher(
      "--trace " + trace + " --timeline " + svg +
      " --kill 'client1@/client1\\] traced/' " + S("listen trace 4 sleep 100") +
      " -- " + S("env trace 4") + " -- " + S("trace 2 print traced hang"));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_THAT(o.output,
              HasSubstr("[client0] TRACE=" + DefaultTmpRoot() + "/rpma-mp."));
  std::vector<TraceLine> lines;
  std::string error;
  ASSERT_TRUE(ReadTraceFile(trace, &lines, &error)) << error;
  int server = 0, client0 = 0, client1 = 0, launcher = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      EXPECT_LE(lines[i - 1].ns, lines[i].ns) << "line " << i;
    }
    server += lines[i].label == "server";
    client0 += lines[i].label == "client0";
    client1 += lines[i].label == "client1";
    launcher += lines[i].label == "launcher";
  }
  EXPECT_EQ(server, 4);
  EXPECT_EQ(client0, 4);
  EXPECT_EQ(client1, 2);
  // start x3, ready, kill client1, exit x3.
  EXPECT_EQ(launcher, 8) << ReadFile(trace);
  EXPECT_THAT(ReadFile(trace), HasSubstr(" launcher kill client1 signal 9"));
  const std::string picture = ReadFile(svg);
  EXPECT_EQ(picture.rfind("<?xml", 0), 0u);
  EXPECT_THAT(picture, HasSubstr(">server</text>"));
  EXPECT_THAT(picture, HasSubstr(">client1</text>"));
  EXPECT_THAT(picture, HasSubstr("completion RDMA_WRITE #4"));
  EXPECT_THAT(picture, HasSubstr("kill signal 9"));
  EXPECT_THAT(picture, HasSubstr("3 processes - 18 events"));
}

TEST(KillRule, Parses) {
  KillRule r;
  std::string error;
  ASSERT_TRUE(ParseKillRule("client0@250", &r, &error)) << error;
  EXPECT_EQ(r.victim, "client0");
  EXPECT_EQ(r.at_ms, 250);
  ASSERT_TRUE(ParseKillRule("server@/wrote [0-9]+/", &r, &error)) << error;
  EXPECT_EQ(r.victim, "server");
  EXPECT_EQ(r.at_ms, -1);
  EXPECT_EQ(r.pattern, "wrote [0-9]+");
  ASSERT_TRUE(ParseKillRule("client1@step:12", &r, &error)) << error;
  EXPECT_EQ(r.victim, "client1");
  EXPECT_EQ(r.at_ms, -1);
  EXPECT_EQ(r.at_step, 12);
  for (const char* bad :
       {"", "@5", "client0", "client0@", "client0@-1", "client0@5ms",
        "client0@/[/", "x@99999999999", "client0@step:", "client0@step:-2",
        "client0@step:3x"}) {
    EXPECT_FALSE(ParseKillRule(bad, &r, &error)) << bad;
    EXPECT_THAT(error, HasSubstr("kill rule")) << bad;
  }
}

TEST(TraceMerge, SortsByTimeThenLabelThenFileOrder) {
  std::vector<TraceLine> lines;
  for (const char* text :
       {"20 server #1 a", "10 server #2 b", "20 client0 #1 c",
        "20 client0 #2 d", "5 launcher start server"}) {
    TraceLine l;
    ASSERT_TRUE(ParseTraceLine(text, &l)) << text;
    l.order = lines.size();
    lines.push_back(l);
  }
  MergeTraceLines(&lines);
  EXPECT_EQ(FormatTrace(lines),
            "5 launcher start server\n10 server #2 b\n20 client0 #1 c\n"
            "20 client0 #2 d\n20 server #1 a\n");
  TraceLine l;
  for (const char* bad : {"", "x server e", "10", "10 server", "10  e",
                          "123456789012345678901234 s e"}) {
    EXPECT_FALSE(ParseTraceLine(bad, &l)) << bad;
  }
  const std::string path = TmpPath("bad.trace");
  std::ofstream(path) << "1 a #1 x\nnot a line\n";
  std::string error;
  EXPECT_FALSE(ReadTraceFile(path, &lines, &error));
  EXPECT_THAT(error, HasSubstr("bad.trace:2: not a trace line"));
  EXPECT_TRUE(ReadTraceFile(TmpPath("missing.trace"), &lines, &error));
}

}  // namespace
}  // namespace rpma_harness
