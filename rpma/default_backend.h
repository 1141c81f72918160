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

// `backend` under the usage checker when RPMA_HARNESS_CHECK asks for one
// (check/checking_backend.h, WrapForCheckingFromEnvironment); `backend`
// itself otherwise, or when it already has a checker. The only place the
// rpma layer names check/: the librpma API itself sees the checker through
// VerbsBackend::library_checker().
std::shared_ptr<VerbsBackend> CheckFromEnvironment(
    std::shared_ptr<VerbsBackend> backend);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_DEFAULT_BACKEND_H_
