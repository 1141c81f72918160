// static_verbs_providers.cc: the scenario runner links libibverbs statically
// (start-up; see tools/BUILD), and a static libibverbs loads no provider from
// disk. This registers every provider Debian's rdma-core ships as a static
// archive, so `--backend rdma-core` finds the host's devices (rxe, mlx5, efa,
// ...) as a dynamically linked program does. Mechanism and names:
// <infiniband/verbs.h>, RDMA_STATIC_PROVIDERS / ibv_static_providers.

#define RDMA_STATIC_PROVIDERS all
#include <infiniband/verbs.h>

namespace {

__attribute__((constructor)) void RegisterStaticVerbsProviders() {
  ibv_static_providers(nullptr, &verbs_provider_all, nullptr);
}

}  // namespace
