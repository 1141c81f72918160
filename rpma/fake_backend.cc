#include "rpma/fake_backend.h"

#include <cstdlib>
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

namespace {

// The process's default NIC, for FlushAtExit.
std::weak_ptr<FakeNic>& DefaultNic() {
  static auto* nic = new std::weak_ptr<FakeNic>();
  return *nic;
}

// A program that exits right after its last completion must not take with
// it the ACKs and answers its NIC still had queued for a peer process: a
// real NIC sent them before the completion was seen.
void FlushAtExit() {
  if (std::shared_ptr<FakeNic> nic = DefaultNic().lock()) {
    nic->FlushFabric(/*timeout_ms=*/2000);
  }
}

}  // namespace

std::shared_ptr<VerbsBackend> MakeFakeBackendFromEnvironment(
    std::shared_ptr<FakeNic>* nic_out, bool verbs_extension) {
  // A program written like a real librpma client or server blocks in
  // rpma_cq_wait / rpma_conn_next_event (a verbs program in
  // ibv_get_cq_event), so the NIC makes progress on its own thread.
  FakeNicConfig config;
  std::string error;
  if (!FakeNicConfigFromEnvironment(&config, &error)) {
    return std::make_shared<UnavailableBackend>(error);
  }
  config.verbs_extension = verbs_extension;
  auto nic = std::make_shared<FakeNic>(std::move(config));
  nic->StartBackgroundProgress();
  if (nic_out != nullptr) *nic_out = nic;
  if (!nic->config().fabric_dir.empty()) {
    static const bool registered = atexit(FlushAtExit) == 0;
    (void)registered;
    DefaultNic() = nic;
  }
  return WrapWithFaultsOrFail(std::move(nic));
}

}  // namespace rpma_harness
