#include "rpma/fake_backend.h"

#include <string>
#include <utility>

#include "faults/fault_file.h"
#include "nic/fake_nic.h"
#include "nic/fake_nic_environment.h"
#include "verbs_backend/unavailable_backend.h"

namespace rpma_harness {

// RPMA_HARNESS_FAULTS=<file>: the file's fault rules wrap this process's
// backend (faults/fault_file.h; docs/faults-and-scenarios.md, "Faults in any
// program: `RPMA_HARNESS_FAULTS`"). A file that cannot be used never means
// "run without faults": every call fails as on a machine without a NIC
// (rpma_utils_get_ibv_context returns RPMA_E_PROVIDER) and the first one
// prints the error.
std::shared_ptr<VerbsBackend> WrapWithFaultsOrFail(
    std::shared_ptr<VerbsBackend> backend) {
  std::string error;
  std::shared_ptr<VerbsBackend> wrapped =
      WrapWithFaultsFromEnvironment(std::move(backend), &error);
  if (wrapped) return wrapped;
  // UnavailableBackend prints "rpma-harness: no NIC is available: <error>"
  // on stderr at the first call.
  return std::make_shared<UnavailableBackend>(error);
}

std::shared_ptr<VerbsBackend> MakeFakeBackendFromEnvironment() {
  // A program written like a real librpma client or server blocks in
  // rpma_cq_wait / rpma_conn_next_event (a verbs program in
  // ibv_get_cq_event), so the NIC makes progress on its own thread.
  FakeNicConfig config;
  std::string error;
  if (!FakeNicConfigFromEnvironment(&config, &error)) {
    return std::make_shared<UnavailableBackend>(error);
  }
  auto nic = std::make_shared<FakeNic>(std::move(config));
  nic->StartBackgroundProgress();
  return WrapWithFaultsOrFail(std::move(nic));
}

}  // namespace rpma_harness
