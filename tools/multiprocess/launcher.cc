#include "tools/multiprocess/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "nic/fake_nic_fabric_sequence.h"

namespace rpma_harness {
namespace {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

int64_t NowMs() { return static_cast<int64_t>(MonotonicNs() / 1000000ull); }

void RemoveTree(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir != nullptr) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string child = path + "/" + name;
      struct stat st;
      if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(child);
      } else {
        unlink(child.c_str());
      }
    }
    closedir(dir);
  }
  rmdir(path.c_str());
}

// The fabric's listener endpoint: a socket file "l-<addr>-<port>"
// (nic/fake_nic_fabric.h, Fabric::ListenerPath).
bool HasListener(const std::string& fabric_dir) {
  DIR* dir = opendir(fabric_dir.c_str());
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, "l-", 2) == 0) {
      found = true;
      break;
    }
  }
  closedir(dir);
  return found;
}

// The process groups started, for the SIGTERM / SIGINT / SIGHUP handler: when
// the launcher itself is stopped (Bazel's test timeout sends SIGTERM), it
// takes its processes with it instead of leaving them orphaned in their own
// groups. Written by the run loop only while the stop signals are blocked
// (StopSignalsBlocked), so the handler never sees a process that is forked
// but not yet recorded; read only by the handler.
constexpr int kMaxGroups = 256;
volatile pid_t g_groups[kMaxGroups];
volatile int g_ngroups = 0;

// The signal that stopped the launcher; the run loop (which wakes at least
// every 20 ms) removes the work directory and dies by it.
volatile sig_atomic_t g_stop_signal = 0;

void KillGroups(int sig) {
  for (int i = 0; i < g_ngroups; ++i) {
    if (g_groups[i] > 0) kill(-g_groups[i], SIGKILL);
  }
  g_stop_signal = sig;
}

// While one lives, SIGTERM, SIGINT and SIGHUP wait (pending) instead of
// running KillGroups.
class StopSignalsBlocked {
 public:
  StopSignalsBlocked() {
    sigset_t stop;
    sigemptyset(&stop);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
    pthread_sigmask(SIG_BLOCK, &stop, &before_);
  }
  ~StopSignalsBlocked() { Unblock(); }
  // The mask as it was before (also for a forked child, before exec).
  void Unblock() { pthread_sigmask(SIG_SETMASK, &before_, nullptr); }

 private:
  sigset_t before_;
};

// The stop handlers for one Launch(), and the caller's dispositions of the
// same signals put back when it returns: a program (or test) that calls
// Launch() keeps its own SIGTERM / SIGINT / SIGHUP / SIGPIPE handling.
class StopHandlers {
 public:
  StopHandlers() {
    for (size_t k = 0; k < kSignals.size(); ++k) {
      sigaction(kSignals[k], nullptr, &before_[k]);
    }
    InstallStopHandlers();
  }
  ~StopHandlers() {
    for (size_t k = 0; k < kSignals.size(); ++k) {
      sigaction(kSignals[k], &before_[k], nullptr);
    }
  }
  StopHandlers(const StopHandlers&) = delete;
  StopHandlers& operator=(const StopHandlers&) = delete;

  static constexpr std::array<int, 4> kSignals = {SIGTERM, SIGINT, SIGHUP,
                                                  SIGPIPE};

 private:
  static void InstallStopHandlers();
  std::array<struct sigaction, 4> before_;
};

void StopHandlers::InstallStopHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = KillGroups;
  sigemptyset(&sa.sa_mask);
  // Restart waitpid/waitid, read and the like (poll and usleep still return
  // EINTR: the loop re-checks g_stop_signal within 20 ms).
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  // `multiprocess | head`: once the reader is gone a write fails with EPIPE
  // instead of killing the launcher and orphaning its process groups; the
  // run goes on unprinted and fails (Say, Line).
  signal(SIGPIPE, SIG_IGN);
}

struct Child {
  ProcessOutcome outcome;
  std::string start_error;  // why Start could not run it ("" otherwise)
  int fd = -1;              // read end of its stdout+stderr, -1 after EOF
  std::string partial;
  int64_t start_ms = 0;
  bool done = false;  // reaped
  std::string trace_path;
};

class Run {
 public:
  Run(const LaunchOptions& o, std::ostream& out) : o_(o), out_(out) {
    std::string error;  // the patterns were checked when parsed
    patterns_.resize(o_.kills.size());
    for (size_t k = 0; k < o_.kills.size(); ++k) {
      if (o_.kills[k].at_ms < 0 && o_.kills[k].at_step < 0) {
        patterns_[k].Compile(o_.kills[k].pattern, &error);
      }
      fired_.push_back(false);
    }
    if (o_.ready == ReadyRule::kLine) ready_re_.Compile(o_.ready_line, &error);
  }

  LaunchResult Go() {
    LaunchResult r;
    std::string tmpl = o_.tmp_root + "/rpma-mp.XXXXXX";
    if (mkdtemp(&tmpl[0]) == nullptr) {
      r.failures.push_back("cannot create a work directory under " +
                           o_.tmp_root + ": " + std::strerror(errno));
      Say(r.failures.back());
      return r;
    }
    work_ = tmpl;
    r.work_dir = work_;
    fabric_ = work_ + "/fabric";
    mkdir(fabric_.c_str(), 0700);
    Say("fabric " + fabric_);
    if (o_.sequenced) {
      std::vector<std::string> labels;
      for (const ProcessSpec& p : o_.processes) labels.push_back(p.label);
      sequencer_ = std::make_unique<Sequencer>(
          fake_nic_internal::SequencerPath(fabric_), o_.sequence_seed, labels);
      for (const KillRule& k : o_.kills) {
        if (k.at_step >= 0) {
          sequencer_->KillAtStep(k.victim, static_cast<uint64_t>(k.at_step));
        }
      }
      std::string error;
      if (sequencer_->Start(&error) != 0) {
        r.failures.push_back("cannot start the fabric sequencer: " + error);
        Say(r.failures.back());
        sequencer_.reset();
        RemoveTree(work_);
        return r;
      }
      Say("sequenced, seed " + std::to_string(o_.sequence_seed));
      if (!AddressRandomizationCanBeOff()) {
        Say("warning: personality(ADDR_NO_RANDOMIZE) does not take here "
            "(seccomp, a container?): addresses may differ between runs, "
            "and so may the sequenced trace");
      }
    }

    children_.resize(o_.processes.size());
    for (size_t i = 0; i < o_.processes.size(); ++i) {
      children_[i].outcome.label = o_.processes[i].label;
      if (o_.want_trace) {
        children_[i].trace_path = work_ + "/trace." + o_.processes[i].label;
      }
    }
    deadline_ms_ = NowMs() + o_.timeout_ms;
    const int64_t begun = NowMs();
    Start(0);
    bool clients_started = o_.processes.size() == 1;
    while (true) {
      // First: a stop signal may have killed (and the last turn reaped) every
      // process, and the launcher must still die by that signal.
      DieIfStopped();
      if (!clients_started && Ready(begun)) {
        Event("ready server");
        for (size_t i = 1; i < children_.size(); ++i) Start(i);
        clients_started = true;
      }
      if (!clients_started &&
          (children_[0].done || !children_[0].outcome.started)) {
        r.failures.push_back(
            children_[0].outcome.started
                ? "the server ended before it was ready; the clients were not "
                  "started"
                : "the server could not be started; the clients were not "
                  "started");
        Say(r.failures.back());
        break;
      }
      if (AllDone(clients_started)) break;
      std::string deadlock;
      if (sequencer_ != nullptr && sequencer_->TakeDeadlock(&deadlock)) {
        r.failures.push_back(deadlock);
        Say(deadlock);
        Event("deadlock");
        for (Child& c : children_) {
          if (c.outcome.started && !c.done) {
            c.outcome.killed_by_deadlock = true;
            kill(-c.outcome.pid, SIGKILL);
          }
        }
      }
      const int64_t now = NowMs();
      if (now >= deadline_ms_) {
        std::string hung;
        for (Child& c : children_) {
          if (c.outcome.started && !c.done) {
            hung += (hung.empty() ? "" : ", ") + c.outcome.label;
            c.outcome.killed_by_timeout = true;
            Event("timeout " + c.outcome.label);
            kill(-c.outcome.pid, SIGKILL);
          }
        }
        std::string msg = "timeout after " +
                          std::to_string(o_.timeout_ms / 1000.0).substr(0, 5) +
                          " s: still running: " + hung;
        if (!clients_started) msg += " (the server never became ready)";
        r.failures.push_back(msg);
        Say(msg);
        WaitAll();
        break;
      }
      if (grace_deadline_ms_ > 0 && now >= grace_deadline_ms_) {
        for (Child& c : children_) {
          if (c.outcome.started && !c.done) {
            c.outcome.killed_by_grace = true;
            Event("kill " + c.outcome.label + " signal 9 (grace after " +
                  first_failed_ + " failed)");
            kill(-c.outcome.pid, SIGKILL);
          }
        }
        grace_deadline_ms_ = 0;
      }
      FireTimedKills(now);
      std::string victim;
      while (sequencer_ != nullptr && sequencer_->TakeKill(&victim)) {
        for (size_t k = 0; k < o_.kills.size(); ++k) {
          if (!fired_[k] && o_.kills[k].at_step >= 0 &&
              o_.kills[k].victim == victim) {
            KillBy(k, "rule " + o_.kills[k].text + " at step " +
                          std::to_string(sequencer_->step()));
            break;
          }
        }
      }
      Pump(NextWakeMs(now, clients_started));
      Reap();
    }
    // Drain what is left in the pipes of reaped processes.
    for (size_t i = 0; i < children_.size(); ++i) Drain(i);
    if (sequencer_ != nullptr) sequencer_->Stop();
    DieIfStopped();  // a stop signal during the timeout or drain path
    Judge(&r);
    if (o_.want_trace) {
      std::string error;
      std::vector<TraceLine> lines = launcher_lines_;
      for (Child& c : children_) {
        if (!c.trace_path.empty() &&
            !ReadTraceFile(c.trace_path, &lines, &error)) {
          r.failures.push_back(error);
          Say(error);
        }
      }
      MergeTraceLines(&lines);
      r.trace = std::move(lines);
    }
    if (o_.keep_dir) {
      Say("kept " + work_);
    } else {
      RemoveTree(work_);
    }
    if (!output_error_.empty()) {
      r.failures.push_back("the output could not be written (" + output_error_ +
                           ")");
    }
    DieIfStopped();
    r.pass = r.failures.empty();
    r.outcomes.clear();
    for (Child& c : children_) r.outcomes.push_back(c.outcome);
    return r;
  }

 private:
  // When a stop signal came (KillGroups has SIGKILLed every group): reap,
  // remove the work directory and die by that signal.
  void DieIfStopped() {
    if (g_stop_signal == 0) return;
    const int sig = g_stop_signal;
    WaitAll();
    if (!o_.keep_dir) RemoveTree(work_);
    signal(sig, SIG_DFL);
    raise(sig);
  }

  void Say(const std::string& text) { Print("launcher: " + text); }
  // Whether this process may run with ADDR_NO_RANDOMIZE added to its
  // persona (personality(2); seccomp may refuse it): tried here and
  // undone, so the launcher's own persona is unchanged.
  static bool AddressRandomizationCanBeOff() {
    const int persona = personality(0xffffffff);
    if (persona == -1) return false;
    if (persona & ADDR_NO_RANDOMIZE) return true;
    if (personality(static_cast<unsigned long>(persona) | ADDR_NO_RANDOMIZE) ==
        -1) {
      return false;
    }
    const int now = personality(0xffffffff);
    (void)personality(static_cast<unsigned long>(persona));
    return now != -1 && (now & ADDR_NO_RANDOMIZE) != 0;
  }

  // Once `out_` fails (EPIPE: its reader went away) nothing more is printed;
  // the processes still run, are judged and reaped, and the run fails.
  void Print(const std::string& line) {
    if (!output_error_.empty()) return;
    errno = 0;
    out_ << line << "\n";
    out_.flush();
    if (!out_) {
      output_error_ = errno != 0 ? std::strerror(errno) : "write failed";
    }
  }

  void Event(const std::string& text) {
    // Sequenced: the step number, as the processes' lines have.
    EventAt(sequencer_ != nullptr ? sequencer_->step() : MonotonicNs(), text);
  }

  // A line stamped with `ns` (sequenced: a step number read when the event
  // happened, which may be before the line is written).
  void EventAt(uint64_t ns, const std::string& text) {
    TraceLine l;
    l.ns = ns;
    l.label = "launcher";
    l.event = text;
    l.order = launcher_lines_.size();
    launcher_lines_.push_back(l);
  }

  void Start(size_t i) {
    Child& c = children_[i];
    const ProcessSpec& spec = o_.processes[i];
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      StartFailed(i, "pipe: " + std::string(std::strerror(errno)));
      return;
    }
    std::vector<char*> argv;
    for (const std::string& a : spec.argv) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    // Blocked from before the fork until the new group is recorded: a stop
    // signal in between would otherwise leave this child running.
    StopSignalsBlocked blocked;
    const pid_t launcher_pid = getpid();
    // Sequenced: the step this process starts at is read *before* the fork.
    // The Sequencer counts a process that has not joined as running
    // (Sequencer::Process starts in kRunning) and grants no step while any
    // process runs, so from here until this child has joined and reported
    // its first wait, step() cannot move: the value is the same whatever
    // the scheduler does. Read after the fork (as it once was), it raced
    // the child: on a loaded machine the child could exec, join, wait and
    // be granted steps before the launcher ran again, and the same seed
    // gave "0 launcher start client0" in one run and "2 ..." in the next.
    // Every other launcher line is stamped while the Sequencer cannot grant
    // (a process is dying or not yet reaped, or the fabric is deadlocked):
    // see Ended, KillBy and the deadlock branch of Run.
    const uint64_t start_ns =
        sequencer_ != nullptr ? sequencer_->step() : MonotonicNs();
    pid_t pid = -1;
    errno = EAGAIN;
    if (spec.label != o_.fail_fork_for) pid = fork();
    if (pid < 0) {
      StartFailed(i, "fork: " + std::string(std::strerror(errno)));
      close(fds[0]);
      close(fds[1]);
      return;
    }
    if (pid == 0) {
      // The launcher's dispositions are not the program's: back to the
      // defaults (exec would keep an ignored SIGPIPE), then the mask as the
      // launcher got it.
      for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
      blocked.Unblock();
      // A killed launcher takes its children with it (prctl(2)
      // PR_SET_PDEATHSIG; the launcher forks from its main thread): none
      // outlives it waiting on a fabric nobody sequences any more.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(127);  // it died before prctl
      setpgid(0, 0);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      setenv("RPMA_HARNESS_FABRIC", fabric_.c_str(), 1);
      setenv("RPMA_HARNESS_PROCESS_NAME", spec.label.c_str(), 1);
      if (!c.trace_path.empty()) {
        setenv("RPMA_HARNESS_TRACE", c.trace_path.c_str(), 1);
      } else {
        unsetenv("RPMA_HARNESS_TRACE");
      }
      for (const auto& kv : o_.process_env) {
        setenv(kv.first.c_str(), kv.second.c_str(), 1);
      }
      for (const auto& [label, kv] : o_.label_env) {
        if (label == spec.label) {
          setenv(kv.first.c_str(), kv.second.c_str(), 1);
        }
      }
      if (o_.sequenced) {
        setenv("RPMA_HARNESS_FABRIC_SEQUENCE",
               std::to_string(o_.sequence_seed).c_str(), 1);
        // The same addresses every run (wr_ids that are pointers, mapped
        // regions): a sequenced trace is byte-identical only then.
        // (Added to the current persona, not replacing it; checked once in
        // the launcher: AddressRandomizationCanBeOff.)
        const int persona = personality(0xffffffff);
        if (persona != -1) (void)personality(persona | ADDR_NO_RANDOMIZE);
      } else {
        unsetenv("RPMA_HARNESS_FABRIC_SEQUENCE");
      }
      execvp(argv[0], argv.data());
      const std::string msg = std::string("launcher: cannot run ") + argv[0] +
                              ": " + std::strerror(errno) + "\n";
      (void)!write(2, msg.data(), msg.size());
      _exit(127);
    }
    setpgid(pid, pid);  // also here: no race with an early kill
    if (o_.pause_after_fork_ms > 0) {
      usleep(static_cast<useconds_t>(o_.pause_after_fork_ms) * 1000);
    }
    RecordGroup(pid);
    blocked.Unblock();  // a pending stop signal now kills this group too
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    c.fd = fds[0];
    c.outcome.pid = pid;
    c.outcome.started = true;
    c.start_ms = NowMs();
    EventAt(sequencer_ != nullptr ? start_ns : MonotonicNs(),
            "start " + spec.label +
                (o_.sequenced ? "" : " pid " + std::to_string(pid)));
  }

  // A process that could not be started is a failure of the run, and the
  // others get the grace period as after any other failure.
  void StartFailed(size_t i, const std::string& why) {
    Child& c = children_[i];
    c.start_error = why;
    Say("cannot start " + c.outcome.label + ": " + why);
    if (sequencer_ != nullptr) sequencer_->Exited(c.outcome.label);
    Event("start " + c.outcome.label + " failed: " + why);
    if (grace_deadline_ms_ == 0 && first_failed_.empty()) {
      first_failed_ = c.outcome.label;
      grace_deadline_ms_ = NowMs() + o_.grace_ms;
    }
  }

  // REQUIRES: the stop signals are blocked. A free slot (0) is reused.
  static void RecordGroup(pid_t pgid) {
    for (int k = 0; k < g_ngroups; ++k) {
      if (g_groups[k] == 0) {
        g_groups[k] = pgid;
        return;
      }
    }
    if (g_ngroups < kMaxGroups) {
      g_groups[g_ngroups] = pgid;
      g_ngroups = g_ngroups + 1;
    }
  }

  // Called once the group was SIGKILLed with its leader not yet reaped: the
  // handler must not kill that PGID any more, it may be reused after the
  // reap. (A single store the handler reads whole.)
  static void ForgetGroup(pid_t pgid) {
    for (int k = 0; k < g_ngroups; ++k) {
      if (g_groups[k] == pgid) g_groups[k] = 0;
    }
  }

  bool Ready(int64_t begun) {
    switch (o_.ready) {
      case ReadyRule::kNone:
        return true;
      case ReadyRule::kDelay:
        return NowMs() - begun >= o_.start_delay_ms;
      case ReadyRule::kLine:
        return ready_seen_;
      case ReadyRule::kListen:
        return HasListener(fabric_);
    }
    return true;
  }

  bool AllDone(bool clients_started) {
    if (!clients_started) return false;
    for (const Child& c : children_) {
      if (c.outcome.started && !c.done) return false;
    }
    return true;
  }

  int64_t NextWakeMs(int64_t now, bool clients_started) {
    int64_t wake = deadline_ms_;
    if (grace_deadline_ms_ > 0 && grace_deadline_ms_ < wake) {
      wake = grace_deadline_ms_;
    }
    for (size_t k = 0; k < o_.kills.size(); ++k) {
      if (fired_[k] || o_.kills[k].at_ms < 0) continue;
      const Child* v = Find(o_.kills[k].victim);
      if (v == nullptr || !v->outcome.started || v->done) continue;
      wake = std::min<int64_t>(wake, v->start_ms + o_.kills[k].at_ms);
    }
    // Readiness by listener file or delay is polled; exits are seen by
    // waitpid after each wake-up, so never sleep long.
    int64_t step = 20;
    if (!clients_started && o_.ready != ReadyRule::kLine) step = 5;
    return std::max<int64_t>(0, std::min(wake - now, step));
  }

  Child* Find(const std::string& label) {
    for (Child& c : children_) {
      if (c.outcome.label == label) return &c;
    }
    return nullptr;
  }

  void KillBy(size_t k, const std::string& why) {
    fired_[k] = true;
    Child* v = Find(o_.kills[k].victim);
    if (v == nullptr || !v->outcome.started || v->done) {
      Say("kill rule " + o_.kills[k].text + " fired but " + o_.kills[k].victim +
          " is not running");
      return;
    }
    v->outcome.killed_by_rule = true;
    Say("kill " + v->outcome.label + " with signal " +
        std::to_string(o_.kills[k].signal) + " (" + why + ")");
    Event("kill " + v->outcome.label + " signal " +
          std::to_string(o_.kills[k].signal) + " (" + o_.kills[k].text + ")");
    kill(-v->outcome.pid, o_.kills[k].signal);
  }

  void FireTimedKills(int64_t now) {
    for (size_t k = 0; k < o_.kills.size(); ++k) {
      if (fired_[k] || o_.kills[k].at_ms < 0) continue;
      Child* v = Find(o_.kills[k].victim);
      if (v == nullptr || !v->outcome.started || v->done) continue;
      if (now >= v->start_ms + o_.kills[k].at_ms) {
        KillBy(k, "rule " + o_.kills[k].text);
      }
    }
  }

  void Line(size_t i, const std::string& text) {
    const std::string labelled = "[" + children_[i].outcome.label + "] " + text;
    Print(labelled);
    if (i == 0 && o_.ready == ReadyRule::kLine && !ready_seen_ &&
        ready_re_.Search(text)) {
      ready_seen_ = true;
    }
    for (size_t k = 0; k < o_.kills.size(); ++k) {
      if (fired_[k] || o_.kills[k].at_ms >= 0 || o_.kills[k].at_step >= 0) {
        continue;
      }
      if (patterns_[k].Search(labelled)) {
        KillBy(k, "rule " + o_.kills[k].text + " matched: " + labelled);
      }
    }
  }

  // Reads what is there; returns false at EOF.
  bool ReadSome(size_t i) {
    Child& c = children_[i];
    char buf[4096];
    while (true) {
      const ssize_t n = read(c.fd, buf, sizeof(buf));
      if (n > 0) {
        c.partial.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = c.partial.find('\n')) != std::string::npos) {
          Line(i, c.partial.substr(0, nl));
          c.partial.erase(0, nl + 1);
        }
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      // EOF (or an error): the rest is a last line without newline.
      if (!c.partial.empty()) {
        Line(i, c.partial);
        c.partial.clear();
      }
      close(c.fd);
      c.fd = -1;
      return false;
    }
  }

  void Pump(int64_t wait_ms) {
    std::vector<pollfd> pfds;
    std::vector<size_t> who;
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].fd >= 0) {
        pfds.push_back({children_[i].fd, POLLIN, 0});
        who.push_back(i);
      }
    }
    if (pfds.empty()) {
      if (wait_ms > 0) usleep(static_cast<useconds_t>(wait_ms) * 1000);
      return;
    }
    if (poll(pfds.data(), pfds.size(), static_cast<int>(wait_ms)) <= 0) {
      return;
    }
    for (size_t j = 0; j < pfds.size(); ++j) {
      if (pfds[j].revents & (POLLIN | POLLHUP | POLLERR)) ReadSome(who[j]);
    }
  }

  void Drain(size_t i) {
    Child& c = children_[i];
    // A grandchild may still hold the pipe: read for at most 200 ms.
    const int64_t until = NowMs() + 200;
    while (c.fd >= 0 && NowMs() < until) {
      pollfd p = {c.fd, POLLIN, 0};
      if (poll(&p, 1, 20) > 0) ReadSome(i);
    }
    if (c.fd >= 0) {
      close(c.fd);
      c.fd = -1;
    }
  }

  void Reap() {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].outcome.started && !children_[i].done) {
        ReapOne(i, WNOHANG);
      }
    }
  }

  void WaitAll() {
    for (size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].outcome.started && !children_[i].done) ReapOne(i, 0);
    }
  }

  // waitid(WNOWAIT) first: while the ended leader is an unreaped zombie its
  // PID, hence its PGID, cannot be reused, so the rest of its group (anything
  // it forked) is SIGKILLed and the group forgotten before the reap frees it.
  // EINTR (a stop signal) is retried.
  void ReapOne(size_t i, int wnohang) {
    Child& c = children_[i];
    siginfo_t info = {};
    int rc;
    do {
      rc = waitid(P_PID, static_cast<id_t>(c.outcome.pid), &info,
                  WEXITED | WNOWAIT | wnohang);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 || info.si_pid != c.outcome.pid) return;
    kill(-c.outcome.pid, SIGKILL);
    {
      StopSignalsBlocked blocked;
      ForgetGroup(c.outcome.pid);
    }
    int status = 0;
    pid_t got;
    do {
      got = waitpid(c.outcome.pid, &status, 0);
    } while (got < 0 && errno == EINTR);
    if (got == c.outcome.pid) Ended(i, status);
  }

  void Ended(size_t i, int status) {
    Child& c = children_[i];
    c.done = true;
    if (WIFEXITED(status)) {
      c.outcome.exited = true;
      c.outcome.code = WEXITSTATUS(status);
      Event("exit " + c.outcome.label + " code " +
            std::to_string(c.outcome.code));
    } else if (WIFSIGNALED(status)) {
      c.outcome.signal = WTERMSIG(status);
      Event("exit " + c.outcome.label + " signal " +
            std::to_string(c.outcome.signal));
    }
    // Reaped (and its exit line stamped with the step it ended at): every
    // socket of it is closed, so the survivors see its links end at the
    // sequencer's next sync.
    if (sequencer_ != nullptr) sequencer_->Exited(c.outcome.label);
    Drain(i);
    if (!Expected(c.outcome).empty() && !c.outcome.killed_by_timeout &&
        !c.outcome.killed_by_grace && grace_deadline_ms_ == 0 &&
        first_failed_.empty()) {
      first_failed_ = c.outcome.label;
      grace_deadline_ms_ = NowMs() + o_.grace_ms;
    }
  }

  std::string Want(const std::string& label) const {
    for (const Expectation& e : o_.expectations) {
      if (e.label == label) return e.want;
    }
    return "";
  }

  // "" if the outcome is what was expected, else what went wrong.
  std::string Expected(const ProcessOutcome& p) const {
    const std::string want = Want(p.label);
    if (want == "any") return "";
    if (p.killed_by_rule && want.empty()) {
      return p.signal != 0 ? ""
                           : "survived its kill rule (exit code " +
                                 std::to_string(p.code) + ")";
    }
    std::string got = p.exited
                          ? "exit code " + std::to_string(p.code)
                          : "killed by signal " + std::to_string(p.signal) +
                                " (" + strsignal(p.signal) + ")";
    if (want.empty() || want == "0") {
      return p.exited && p.code == 0 ? "" : got;
    }
    if (want == "nonzero") {
      return p.exited && p.code != 0 ? "" : got + ", expected a non-zero exit";
    }
    return p.exited && std::to_string(p.code) == want
               ? ""
               : got + ", expected exit code " + want;
  }

  // Every process is judged: one that was never started fails too.
  void Judge(LaunchResult* r) {
    for (Child& c : children_) {
      std::string v;
      if (!c.outcome.started) {
        v = c.start_error.empty() ? "not started"
                                  : "not started (" + c.start_error + ")";
      } else if (c.outcome.killed_by_timeout) {
        v = "hung (killed at the timeout)";
      } else if (c.outcome.killed_by_deadlock) {
        v = "killed: the sequenced fabric deadlocked";
      } else if (c.outcome.killed_by_grace) {
        v = "still running " + std::to_string(o_.grace_ms) + " ms after " +
            first_failed_ + " failed (killed)";
      } else {
        v = Expected(c.outcome);
      }
      c.outcome.verdict = v;
      if (!v.empty()) {
        r->failures.push_back(c.outcome.label + ": " + v);
        Say("FAIL " + c.outcome.label + ": " + v);
      } else {
        Say("ok " + c.outcome.label + " (" +
            (c.outcome.exited
                 ? "exit code " + std::to_string(c.outcome.code)
                 : "killed by signal " + std::to_string(c.outcome.signal)) +
            ")");
      }
    }
  }

  const LaunchOptions& o_;
  std::ostream& out_;
  std::string work_, fabric_;
  std::vector<Child> children_;
  std::vector<LineRegex> patterns_;
  std::vector<bool> fired_;
  LineRegex ready_re_;
  bool ready_seen_ = false;
  int64_t deadline_ms_ = 0;
  int64_t grace_deadline_ms_ = 0;
  std::string first_failed_;
  std::vector<TraceLine> launcher_lines_;
  std::string output_error_;  // why `out_` failed; "" while it works
  std::unique_ptr<Sequencer> sequencer_;  // LaunchOptions::sequenced
};

}  // namespace

bool LineRegex::Compile(const std::string& pattern, std::string* error) {
  auto re = std::make_unique<regex_t>();
  const int rc = regcomp(re.get(), pattern.c_str(), REG_EXTENDED | REG_NOSUB);
  if (rc != 0) {
    char buf[256];
    regerror(rc, re.get(), buf, sizeof(buf));
    *error = buf;
    return false;
  }
  if (re_ != nullptr) regfree(re_.get());
  re_ = std::move(re);
  return true;
}

bool LineRegex::Search(const std::string& line) const {
  return re_ != nullptr && regexec(re_.get(), line.c_str(), 0, nullptr, 0) == 0;
}

LineRegex::~LineRegex() {
  if (re_ != nullptr) regfree(re_.get());
}

bool ParseKillRule(const std::string& text, KillRule* rule,
                   std::string* error) {
  const size_t at = text.find('@');
  if (at == 0 || at == std::string::npos || at + 1 >= text.size()) {
    *error = "kill rule '" + text + "': want LABEL@MS or LABEL@/REGEX/";
    return false;
  }
  *rule = KillRule();
  rule->text = text;
  rule->victim = text.substr(0, at);
  const std::string what = text.substr(at + 1);
  if (what.rfind("step:", 0) == 0) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(what.c_str() + 5, &end, 10);
    if (end == what.c_str() + 5 || *end != '\0' || errno != 0 || n < 0) {
      *error = "kill rule '" + text + "': after 'step:' want a step number";
      return false;
    }
    rule->at_step = n;
    return true;
  }
  if (what.size() >= 2 && what.front() == '/' && what.back() == '/') {
    rule->pattern = what.substr(1, what.size() - 2);
    LineRegex check;
    std::string why;
    if (!check.Compile(rule->pattern, &why)) {
      *error = "kill rule '" + text + "': bad regex: " + why;
      return false;
    }
    return true;
  }
  char* end = nullptr;
  errno = 0;
  const long ms = std::strtol(what.c_str(), &end, 10);
  if (end == what.c_str() || *end != '\0' || errno != 0 || ms < 0 ||
      ms > 24L * 3600 * 1000) {
    *error = "kill rule '" + text +
             "': after '@' want milliseconds (0..86400000) or /REGEX/";
    return false;
  }
  rule->at_ms = static_cast<int>(ms);
  return true;
}

int RecordedProcessGroupsForTesting() {
  int n = 0;
  for (int k = 0; k < g_ngroups; ++k) n += g_groups[k] != 0;
  return n;
}

std::string DefaultTmpRoot() {
  for (const char* name : {"TEST_TMPDIR", "TMPDIR"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "/tmp";
}

LaunchResult Launch(const LaunchOptions& options, std::ostream& out) {
  {
    // Nothing of an earlier Launch is killed by a later stop signal.
    StopSignalsBlocked blocked;
    for (int k = 0; k < g_ngroups; ++k) g_groups[k] = 0;
    g_ngroups = 0;
  }
  g_stop_signal = 0;
  StopHandlers handlers;
  Run run(options, out);
  return run.Go();
}

}  // namespace rpma_harness
