// fake_backend.h: the fake NIC a process gets by default, as its
// environment asks for it: FakeNicConfigFromEnvironment's NIC, progressing
// on its own thread, wrapped in RPMA_HARNESS_FAULTS's rules. The librpma
// API (default_backend.h) and the drop-in libibverbs (verbs_dropin/) make
// their NIC here, so both run the same NIC for the same environment. It
// links no rdma-core library: the drop-in libibverbs.so.1 must not need
// the library it replaces.
//
// Example:
//   std::shared_ptr<VerbsBackend> nic = MakeFakeBackendFromEnvironment();

#ifndef RPMA_HARNESS_RPMA_FAKE_BACKEND_H_
#define RPMA_HARNESS_RPMA_FAKE_BACKEND_H_

#include <memory>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

class FakeNic;

// The default fake NIC. A variable that cannot be used never means "run on
// something else": the result is then an UnavailableBackend whose first
// call prints why.
// `nic`, when given, gets the FakeNic itself (null if none was made).
// `verbs_extension`: FakeNicConfig::verbs_extension (the drop-in
// libibverbs.so.1's extended verbs need it).
std::shared_ptr<VerbsBackend> MakeFakeBackendFromEnvironment(
    std::shared_ptr<FakeNic>* nic = nullptr, bool verbs_extension = false);

// `backend` wrapped in RPMA_HARNESS_FAULTS's rules (itself when unset), or
// an UnavailableBackend that says why the file cannot be used.
std::shared_ptr<VerbsBackend> WrapWithFaultsOrFail(
    std::shared_ptr<VerbsBackend> backend);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_FAKE_BACKEND_H_
