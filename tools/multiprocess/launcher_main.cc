// multiprocess: runs a librpma server program and client programs as
// separate processes on one fresh fake-NIC fabric (see launcher.h).
//
//   multiprocess [OPTIONS] SERVER [ARG...] [-- CLIENT [ARG...]]...
//
// Options (before SERVER):
//   --clients N         run N copies of the one CLIENT command (labels
//                       client0..clientN-1); "%i" in a client argument
//                       becomes the client's index
//   --timeout S         the whole run (default 60); then every process still
//                       running is killed and named
//   --grace S           after a process fails, the others get S seconds
//                       (default 5)
//   --ready RULE        when the clients start: listen (default: a listener
//                       endpoint l-* appears in the fabric directory),
//                       line:REGEX (a server output line matches),
//                       delay:MS, none
//   --kill LABEL@MS     SIGKILL LABEL MS ms after it started
//   --kill LABEL@/RE/   SIGKILL LABEL when an output line "[label] text" of
//                       any process matches RE (POSIX extended)
//   --kill LABEL@step:N SIGKILL LABEL once the sequenced fabric granted N
//                       steps and LABEL waits (needs --sequence; the same
//                       point of every run)
//   --faults FILE       more kill rules, one "kill RULE" a line (# comments)
//   --faults LABEL=FILE LABEL's NIC-level faults: the process gets
//                       RPMA_HARNESS_FAULTS=FILE (a scenario's faults:
//                       list, faults/fault_file.h); repeatable, one per label
//   --expect LABEL=W    W: 0 (default), a code, nonzero, any
//   --trace FILE        the merged trace of every process (and the
//                       launcher's start/ready/kill/exit lines)
//   --timeline FILE     an SVG with one lane per process
//   --env K=V           extra environment for every process
//   --sequence SEED     the fabric's sequenced mode: every NIC step of every
//                       process in an order the seed decides; the same seed
//                       gives the same merged trace
//                       (docs/two-processes.md)
//   --keep              keep the work directory (fabric, per-process traces)
//   --pause-after-fork MS  (for testing the launcher) sleep MS after each
//                       fork before recording the start, as a loaded
//                       machine may; a sequenced trace must not change
//   --version           print the harness version, exit 0
//   -h, --help          this usage, exit 0
//
// Exit status: 0 when every process ended as expected, 1 otherwise, 2 for a
// usage error. When the output cannot be written (a closed pipe: SIGPIPE is
// ignored), the run goes on unprinted, its processes end or are killed as
// usual, and the exit status is 1.

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "faults/fault_file.h"
#include "rpma_harness_version.h"
#include "tools/multiprocess/launcher.h"
#include "tools/multiprocess/trace_merge.h"

namespace {

int Usage(const std::string& why) {
  std::cerr
      << "multiprocess: " << why << "\n"
      << "usage: multiprocess [--clients N] [--timeout S] [--grace S] "
         "[--ready listen|line:REGEX|delay:MS|none] [--kill RULE]... "
         "[--faults FILE] [--faults LABEL=FILE]... [--expect LABEL=W]... "
         "[--trace FILE] "
         "[--timeline FILE.svg] [--env K=V]... [--sequence SEED] [--keep] "
         "[--pause-after-fork MS] "
         "SERVER [ARG...] [-- CLIENT [ARG...]]...\n";
  return 2;
}

// "server=f.yaml", "client0=f.yaml": a label (letters, digits) before '='.
// Anything else is the kill-rule file's path.
bool IsLabelAssignment(const std::string& v) {
  const size_t eq = v.find('=');
  if (eq == 0 || eq == std::string::npos) return false;
  for (size_t k = 0; k < eq; ++k) {
    if (!std::isalnum(static_cast<unsigned char>(v[k]))) return false;
  }
  return true;
}

bool ParseSeconds(const std::string& text, int* ms) {
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(s > 0) || s > 86400) {
    return false;
  }
  *ms = static_cast<int>(s * 1000);
  return true;
}

std::string Substitute(const std::string& arg, int index) {
  std::string out;
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg[i] == '%' && i + 1 < arg.size() && arg[i + 1] == 'i') {
      out += std::to_string(index);
      ++i;
    } else {
      out += arg[i];
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rpma_harness;
  LaunchOptions o;
  std::string trace_file, timeline_file;
  std::vector<std::pair<std::string, std::string>> process_faults;
  int nclients = -1;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      Usage("help");
      return 0;
    }
    if (a == "--version") {
      std::cout << "rpma-harness multiprocess " << RPMA_HARNESS_VERSION << "\n";
      return 0;
    }
    if (a.rfind("--", 0) != 0 || a == "--") break;
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--keep") {
      o.keep_dir = true;
      continue;
    }
    if (!value(&v)) return Usage(a + " needs a value");
    if (a == "--clients") {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 0 || n > 64) {
        return Usage("--clients wants 0..64");
      }
      nclients = static_cast<int>(n);
    } else if (a == "--timeout") {
      if (!ParseSeconds(v, &o.timeout_ms)) return Usage("bad --timeout " + v);
    } else if (a == "--grace") {
      if (!ParseSeconds(v, &o.grace_ms)) return Usage("bad --grace " + v);
    } else if (a == "--ready") {
      if (v == "listen") {
        o.ready = ReadyRule::kListen;
      } else if (v == "none") {
        o.ready = ReadyRule::kNone;
      } else if (v.rfind("line:", 0) == 0 && v.size() > 5) {
        o.ready = ReadyRule::kLine;
        o.ready_line = v.substr(5);
        LineRegex check;
        std::string why;
        if (!check.Compile(o.ready_line, &why)) {
          return Usage("--ready line: bad regex: " + why);
        }
      } else if (v.rfind("delay:", 0) == 0) {
        char* end = nullptr;
        const long ms = std::strtol(v.c_str() + 6, &end, 10);
        if (end == v.c_str() + 6 || *end != '\0' || ms < 0 || ms > 600000) {
          return Usage("--ready delay:MS wants 0..600000");
        }
        o.ready = ReadyRule::kDelay;
        o.start_delay_ms = static_cast<int>(ms);
      } else {
        return Usage("--ready wants listen, line:REGEX, delay:MS or none");
      }
    } else if (a == "--kill") {
      KillRule rule;
      std::string error;
      if (!ParseKillRule(v, &rule, &error)) return Usage(error);
      o.kills.push_back(rule);
    } else if (a == "--faults" && IsLabelAssignment(v)) {
      // --faults LABEL=FILE: that process's NIC-level faults (its default
      // backend reads RPMA_HARNESS_FAULTS, faults/fault_file.h). Read here
      // too, so a bad file fails the run before anything starts.
      const size_t eq = v.find('=');
      const std::string path = v.substr(eq + 1);
      FaultFile file;
      std::string error;
      if (!ReadFaultFile(path, &file, &error)) {
        return Usage("--faults " + v.substr(0, eq) + "=...: " + error);
      }
      char* absolute = realpath(path.c_str(), nullptr);
      process_faults.emplace_back(v.substr(0, eq),
                                  absolute != nullptr ? absolute : path);
      free(absolute);
    } else if (a == "--faults") {
      std::ifstream in(v);
      if (!in) return Usage("cannot read --faults " + v);
      std::string line;
      int number = 0;
      while (std::getline(in, line)) {
        ++number;
        const size_t b = line.find_first_not_of(" \t");
        if (b == std::string::npos || line[b] == '#') continue;
        line = line.substr(b);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t' ||
                                 line.back() == '\r')) {
          line.pop_back();
        }
        KillRule rule;
        std::string error;
        if (line.rfind("kill ", 0) != 0) {
          return Usage(v + ":" + std::to_string(number) +
                       ": want 'kill LABEL@MS' or 'kill LABEL@/REGEX/'");
        }
        if (!ParseKillRule(line.substr(5), &rule, &error)) {
          return Usage(v + ":" + std::to_string(number) + ": " + error);
        }
        o.kills.push_back(rule);
      }
    } else if (a == "--expect") {
      const size_t eq = v.find('=');
      if (eq == 0 || eq == std::string::npos || eq + 1 == v.size()) {
        return Usage("--expect wants LABEL=0|CODE|nonzero|any");
      }
      const std::string want = v.substr(eq + 1);
      if (want != "nonzero" && want != "any" &&
          want.find_first_not_of("0123456789") != std::string::npos) {
        return Usage("--expect wants LABEL=0|CODE|nonzero|any");
      }
      o.expectations.push_back({v.substr(0, eq), want});
    } else if (a == "--trace") {
      trace_file = v;
    } else if (a == "--timeline") {
      timeline_file = v;
    } else if (a == "--sequence") {
      char* end = nullptr;
      errno = 0;
      const unsigned long long seed = std::strtoull(v.c_str(), &end, 0);
      if (v.empty() || *end != '\0' || errno != 0 || v[0] == '-') {
        return Usage("--sequence wants a seed (an unsigned 64-bit number)");
      }
      o.sequenced = true;
      o.sequence_seed = seed;
    } else if (a == "--pause-after-fork") {
      char* end = nullptr;
      const long ms = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || ms < 0 || ms > 60000) {
        return Usage("--pause-after-fork wants 0..60000 (ms)");
      }
      o.pause_after_fork_ms = static_cast<int>(ms);
    } else if (a == "--env") {
      const size_t eq = v.find('=');
      if (eq == 0 || eq == std::string::npos) return Usage("--env wants K=V");
      o.process_env.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else {
      return Usage("unknown option " + a);
    }
  }
  // SERVER [ARG...] [-- CLIENT [ARG...]]...
  std::vector<std::vector<std::string>> groups(1);
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      groups.emplace_back();
    } else {
      groups.back().push_back(a);
    }
  }
  for (const auto& g : groups) {
    if (g.empty()) return Usage("a program is missing (empty group)");
  }
  o.processes.push_back({"server", groups[0]});
  std::vector<std::vector<std::string>> clients(groups.begin() + 1,
                                                groups.end());
  if (nclients >= 0) {
    if (clients.size() != 1 && !(nclients == 0 && clients.empty())) {
      return Usage("--clients N wants exactly one CLIENT command");
    }
    std::vector<std::vector<std::string>> copies;
    for (int k = 0; k < nclients; ++k) copies.push_back(clients[0]);
    clients = copies;
  }
  for (size_t k = 0; k < clients.size(); ++k) {
    ProcessSpec p;
    p.label = "client" + std::to_string(k);
    for (const std::string& a : clients[k]) {
      p.argv.push_back(Substitute(a, static_cast<int>(k)));
    }
    o.processes.push_back(p);
  }
  for (const auto& [label, path] : process_faults) {
    bool known = false;
    for (const ProcessSpec& p : o.processes) known |= p.label == label;
    o.label_env.push_back({label, {"RPMA_HARNESS_FAULTS", path}});
    if (!known) return Usage("--faults " + label + "=...: no such process");
  }
  for (const KillRule& k : o.kills) {
    bool known = false;
    for (const ProcessSpec& p : o.processes) known |= p.label == k.victim;
    if (!known)
      return Usage("kill rule " + k.text + ": no process " + k.victim);
  }
  for (const Expectation& e : o.expectations) {
    bool known = false;
    for (const ProcessSpec& p : o.processes) known |= p.label == e.label;
    if (!known) return Usage("--expect " + e.label + ": no such process");
  }
  for (const KillRule& k : o.kills) {
    if (k.at_step >= 0 && !o.sequenced) {
      return Usage("kill rule " + k.text +
                   ": a step is known only with "
                   "--sequence SEED");
    }
  }
  o.want_trace = !trace_file.empty() || !timeline_file.empty();

  LaunchResult r = Launch(o, std::cout);
  std::vector<std::string> lanes;
  for (const ProcessSpec& p : o.processes) lanes.push_back(p.label);
  if (!trace_file.empty()) {
    std::ofstream out(trace_file);
    out << FormatTrace(r.trace);
    if (!out) {
      std::cout << "launcher: cannot write " << trace_file << "\n";
      return 1;
    }
  }
  if (!timeline_file.empty()) {
    std::ofstream out(timeline_file);
    out << RenderProcessTimeline(r.trace, lanes,
                                 o.processes[0].argv[0] + " + " +
                                     std::to_string(lanes.size() - 1) +
                                     " client(s)");
    if (!out) {
      std::cout << "launcher: cannot write " << timeline_file << "\n";
      return 1;
    }
  }
  std::cout << "launcher: " << (r.pass ? "PASS" : "FAIL") << " ("
            << o.processes.size() << " processes";
  if (!r.pass) std::cout << "; " << r.failures.size() << " failure(s)";
  std::cout << ")\n";
  return r.pass ? 0 : 1;
}
