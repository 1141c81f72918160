#include "rpma/default_backend.h"

#include <errno.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "mock/fake_nic.h"
#include "verbs_backend/rdma_core_backend.h"
#include "verbs_backend/unavailable_backend.h"

namespace rpma_harness {

std::shared_ptr<VerbsBackend> MakeBackendFromEnvironment(const char* value) {
  if (value != nullptr && std::strcmp(value, "rdma-core") == 0) {
    return std::make_shared<RdmaCoreBackend>();
  }
  if (value == nullptr || std::strcmp(value, "fake") == 0) {
    // A program written like a real librpma client or server blocks in
    // rpma_cq_wait / rpma_conn_next_event, so the default NIC makes progress
    // on its own thread.
    // RPMA_HARNESS_FABRIC=<dir>: this process's NIC meets other processes'
    // on the fabric rooted there (README, "Two processes on the fake NIC");
    // RPMA_HARNESS_TRACE=<file>: its event records go to that file, each
    // line labelled RPMA_HARNESS_PROCESS_NAME (default: program.pid).
    FakeNicConfig config;
    if (const char* dir = std::getenv("RPMA_HARNESS_FABRIC")) {
      config.fabric_dir = dir;
    }
    // RPMA_HARNESS_FABRIC_SEQUENCE=<seed>: the sequenced mode (the
    // launcher's --sequence runs the Sequencer and sets it).
    if (const char* seq = std::getenv("RPMA_HARNESS_FABRIC_SEQUENCE")) {
      config.fabric_sequenced = *seq != '\0';
    }
    if (const char* trace = std::getenv("RPMA_HARNESS_TRACE")) {
      config.trace_path = trace;
    }
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
    return nic;
  }
  return std::make_shared<UnavailableBackend>(
      std::string("RPMA_HARNESS_BACKEND='") + value +
      "' is neither 'fake' (the default) nor 'rdma-core'");
}

}  // namespace rpma_harness
