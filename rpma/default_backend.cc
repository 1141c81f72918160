#include "rpma/default_backend.h"

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
    auto nic = std::make_shared<FakeNic>();
    nic->StartBackgroundProgress();
    return nic;
  }
  return std::make_shared<UnavailableBackend>(
      std::string("RPMA_HARNESS_BACKEND='") + value +
      "' is neither 'fake' (the default) nor 'rdma-core'");
}

}  // namespace rpma_harness
