#include "nic/fake_nic_environment.h"

#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rpma_harness {

namespace {

// A variable that only means something beside another is never ignored
// silently: said once per process when it is set and the other is not.
void SayWhatDoesNotApply() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto set = [](const char* name) {
      const char* v = std::getenv(name);
      return v != nullptr && *v != '\0';
    };
    const char* const needs_fabric[] = {
        "RPMA_HARNESS_FABRIC_TRANSPORT", "RPMA_HARNESS_FABRIC_SEQUENCE",
        "RPMA_HARNESS_FABRIC_SHARED", "RPMA_HARNESS_FABRIC_STATS"};
    if (!set("RPMA_HARNESS_FABRIC")) {
      for (const char* name : needs_fabric) {
        if (set(name)) {
          std::fprintf(stderr,
                       "rpma-harness: %s is set but RPMA_HARNESS_FABRIC is "
                       "not: it has no effect\n",
                       name);
        }
      }
    }
    if (set("RPMA_HARNESS_SEED") && !set("RPMA_HARNESS_FAULTS")) {
      std::fprintf(stderr,
                   "rpma-harness: RPMA_HARNESS_SEED is set but "
                   "RPMA_HARNESS_FAULTS is not: it has no effect (it seeds "
                   "the faults file's probabilistic rules)\n");
    }
  });
}

}  // namespace

bool FakeNicConfigFromEnvironment(FakeNicConfig* config, std::string* error) {
  SayWhatDoesNotApply();
  // env RPMA_HARNESS_FABRIC=DIR: the default fake NIC joins the fabric rooted
  //   at DIR (created 0700 if missing), where other processes' NICs with the
  //   same DIR can connect to it (docs/two-processes.md).
  if (const char* dir = std::getenv("RPMA_HARNESS_FABRIC")) {
    config->fabric_dir = dir;
  }
  // env RPMA_HARNESS_FABRIC_SEQUENCE=SEED: non-empty: the fabric's sequenced
  //   mode (every NIC step in an order the launcher's Sequencer decides);
  //   set by the launcher's --sequence, which runs the Sequencer.
  if (const char* seq = std::getenv("RPMA_HARNESS_FABRIC_SEQUENCE")) {
    config->fabric_sequenced = *seq != '\0';
  }
  // env RPMA_HARNESS_TRACE=FILE: the default fake NIC appends its event
  //   records (JSON lines) to FILE, each labelled with the process's name.
  if (const char* trace = std::getenv("RPMA_HARNESS_TRACE")) {
    config->trace_path = trace;
  }
  // env RPMA_HARNESS_CRASH_RECORD=DIR: the process journals what the crash
  //   checker needs (rpma/crash_journal.h); its NIC then also records
  //   kLanded events.
  if (const char* dir = std::getenv("RPMA_HARNESS_CRASH_RECORD")) {
    config->record_landings = *dir != '\0';
  }
  // env RPMA_HARNESS_PROCESS_NAME=LABEL: the label of this process's trace
  //   records and its name to the Sequencer (default PROGRAM.PID; the
  //   launcher sets server, client0, client1, ...).
  const char* name = std::getenv("RPMA_HARNESS_PROCESS_NAME");
  config->process_label = name != nullptr && *name != '\0'
                              ? name
                              : std::string(program_invocation_short_name) +
                                    "." + std::to_string(getpid());
  for (char& c : config->process_label) {
    if (c == ' ' || c == '\t' || c == '\n') c = '_';
  }
  // env RPMA_HARNESS_PERSONALITY=spec|rxe|siw: the behaviour the default
  //   fake NIC models where real NICs differ (default spec: the IB spec, an
  //   InfiniBand port; rxe: soft-RoCE in Linux 6.1, a RoCE port and rxe's
  //   limits; siw: soft-iWARP).
  if (const char* p = std::getenv("RPMA_HARNESS_PERSONALITY")) {
    if (*p == '\0' || std::strcmp(p, "spec") == 0) {
      config->personality = Personality::Spec();
    } else if (std::strcmp(p, "rxe") == 0) {
      config->personality = Personality::Rxe();
    } else if (std::strcmp(p, "siw") == 0) {
      config->personality = Personality::Siw();
    } else {
      *error = std::string("RPMA_HARNESS_PERSONALITY='") + p +
               "' is none of spec, rxe, siw";
      return false;
    }
  }
  return true;
}

}  // namespace rpma_harness
