#include "rpma/default_backend.h"

#include <errno.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "nic/fake_nic.h"
#include "faults/fault_file.h"
#include "verbs_backend/rdma_core_backend.h"
#include "verbs_backend/unavailable_backend.h"

namespace rpma_harness {

namespace {

// RPMA_HARNESS_FAULTS=<file>: the file's fault rules wrap this process's
// backend (faults/fault_file.h; docs/faults-and-scenarios.md, "Faults in any
// program: `RPMA_HARNESS_FAULTS`"). A file that cannot be used never means
// "run without faults": every call fails as on a machine without a NIC
// (rpma_utils_get_ibv_context returns RPMA_E_PROVIDER) and the first one
// prints the error.
std::shared_ptr<VerbsBackend> WithFaultsFromEnvironment(
    std::shared_ptr<VerbsBackend> backend) {
  std::string error;
  std::shared_ptr<VerbsBackend> wrapped =
      WrapWithFaultsFromEnvironment(std::move(backend), &error);
  if (wrapped) return wrapped;
  // UnavailableBackend prints "rpma-harness: no NIC is available: <error>"
  // on stderr at the first call.
  return std::make_shared<UnavailableBackend>(error);
}

}  // namespace

std::shared_ptr<VerbsBackend> MakeBackendFromEnvironment(const char* value) {
  if (value != nullptr && std::strcmp(value, "rdma-core") == 0) {
    // Over a real NIC only the faults that act on a call can be hosted
    // (FaultNeedsFakeNic); the others make the backend unavailable.
    return WithFaultsFromEnvironment(std::make_shared<RdmaCoreBackend>());
  }
  if (value == nullptr || std::strcmp(value, "fake") == 0) {
    // A program written like a real librpma client or server blocks in
    // rpma_cq_wait / rpma_conn_next_event, so the default NIC makes progress
    // on its own thread.
    // RPMA_HARNESS_FABRIC=<dir>: this process's NIC meets other processes'
    // on the fabric rooted there (docs/two-processes.md, "How processes
    // meet: the fabric");
    // RPMA_HARNESS_TRACE=<file>: its event records go to that file, each
    // line labelled RPMA_HARNESS_PROCESS_NAME (default: program.pid).
    FakeNicConfig config;
    // env RPMA_HARNESS_FABRIC=DIR: the default fake NIC joins the fabric rooted
    //   at DIR (created 0700 if missing), where other processes' NICs with the
    //   same DIR can connect to it (docs/two-processes.md).
    if (const char* dir = std::getenv("RPMA_HARNESS_FABRIC")) {
      config.fabric_dir = dir;
    }
    // RPMA_HARNESS_FABRIC_SEQUENCE=<seed>: the sequenced mode (the
    // launcher's --sequence runs the Sequencer and sets it).
    // env RPMA_HARNESS_FABRIC_SEQUENCE=SEED: non-empty: the fabric's sequenced
    //   mode (every NIC step in an order the launcher's Sequencer decides);
    //   set by the launcher's --sequence, which runs the Sequencer.
    if (const char* seq = std::getenv("RPMA_HARNESS_FABRIC_SEQUENCE")) {
      config.fabric_sequenced = *seq != '\0';
    }
    // env RPMA_HARNESS_TRACE=FILE: the default fake NIC appends its event
    //   records (JSON lines) to FILE, each labelled with the process's name.
    if (const char* trace = std::getenv("RPMA_HARNESS_TRACE")) {
      config.trace_path = trace;
    }
    // env RPMA_HARNESS_PROCESS_NAME=LABEL: the label of this process's trace
    //   records and its name to the Sequencer (default PROGRAM.PID; the
    //   launcher sets server, client0, client1, ...).
    const char* name = std::getenv("RPMA_HARNESS_PROCESS_NAME");
    config.process_label = name != nullptr && *name != '\0'
                               ? name
                               : std::string(program_invocation_short_name) +
                                     "." + std::to_string(getpid());
    for (char& c : config.process_label) {
      if (c == ' ' || c == '\t' || c == '\n') c = '_';
    }
    auto nic = std::make_shared<FakeNic>(std::move(config));
    nic->StartBackgroundProgress();
    return WithFaultsFromEnvironment(std::move(nic));
  }
  return std::make_shared<UnavailableBackend>(
      std::string("RPMA_HARNESS_BACKEND='") + value +
      "' is neither 'fake' (the default) nor 'rdma-core'");
}

}  // namespace rpma_harness
