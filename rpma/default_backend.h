// default_backend.h: the backend a process gets when no test installed one,
// chosen by the value of RPMA_HARNESS_BACKEND (see rpma/harness.h).

#ifndef RPMA_HARNESS_RPMA_DEFAULT_BACKEND_H_
#define RPMA_HARNESS_RPMA_DEFAULT_BACKEND_H_

#include <memory>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

// nullptr or "fake": a FakeNic with default configuration, progressing on its
// own thread so blocking calls work. "rdma-core": RdmaCoreBackend. Anything
// else: an UnavailableBackend that fails every call and says why.
std::shared_ptr<VerbsBackend> MakeBackendFromEnvironment(const char* value);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_DEFAULT_BACKEND_H_
