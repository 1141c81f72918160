#include "rpma/default_backend.h"

#include <errno.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "check/checking_backend.h"
#include "rpma/crash_journal.h"
#include "rpma/fake_backend.h"
#include "verbs_backend/rdma_core_backend.h"
#include "verbs_backend/unavailable_backend.h"

namespace rpma_harness {

std::shared_ptr<VerbsBackend> MakeBackendFromEnvironment(const char* value) {
  if (value != nullptr && std::strcmp(value, "rdma-core") == 0) {
    // Over a real NIC only the faults that act on a call can be hosted
    // (FaultNeedsFakeNic); the others make the backend unavailable.
    return WrapWithFaultsOrFail(std::make_shared<RdmaCoreBackend>());
  }
  if (value == nullptr || std::strcmp(value, "fake") == 0) {
    std::shared_ptr<FakeNic> nic;
    std::shared_ptr<VerbsBackend> backend =
        MakeFakeBackendFromEnvironment(&nic);
    internal::StartCrashJournalFromEnvironment(nic);
    return backend;
  }
  return std::make_shared<UnavailableBackend>(
      std::string("RPMA_HARNESS_BACKEND='") + value +
      "' is neither 'fake' (the default) nor 'rdma-core'");
}

std::shared_ptr<VerbsBackend> CheckFromEnvironment(
    std::shared_ptr<VerbsBackend> backend) {
  return WrapForCheckingFromEnvironment(std::move(backend));
}

}  // namespace rpma_harness
