// Device lookup and the peer (a protection domain on a device).

#include <errno.h>

#include <cstring>
#include <new>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

extern "C" int rpma_utils_get_ibv_context(const char* addr,
                                          enum rpma_util_ibv_context_type type,
                                          struct ibv_context** ibv_ctx_ptr) {
  if (addr == nullptr || ibv_ctx_ptr == nullptr) return RPMA_E_INVAL;
  if (type != RPMA_UTIL_IBV_CONTEXT_LOCAL &&
      type != RPMA_UTIL_IBV_CONTEXT_REMOTE) {
    return RPMA_E_INVAL;
  }
  auto backend = rpma_harness::CurrentBackend();
  ibv_context* ctx = nullptr;
  errno = 0;
  if (backend->GetContextByAddress(addr, type == RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                   &ctx) != 0) {
    int err = errno;
    Log("%s backend: no RDMA device %s address %s: %s", backend->Name(),
        type == RPMA_UTIL_IBV_CONTEXT_LOCAL ? "owns" : "reaches", addr,
        std::strerror(err));
    return RPMA_E_PROVIDER;
  }
  *ibv_ctx_ptr = ctx;
  return 0;
}

extern "C" int rpma_peer_new(struct ibv_context* ibv_ctx,
                             struct rpma_peer** peer_ptr) {
  if (ibv_ctx == nullptr || peer_ptr == nullptr) return RPMA_E_INVAL;
  auto backend = rpma_harness::CurrentBackend();
  errno = 0;
  ibv_pd* pd = backend->AllocPd(ibv_ctx);
  if (pd == nullptr) {
    int err = errno;
    Log("%s backend: ibv_alloc_pd failed: %s", backend->Name(),
        std::strerror(err));
    if (err == ENOMEM) return RPMA_E_NOMEM;
    return err == 0 ? RPMA_E_UNKNOWN : RPMA_E_PROVIDER;
  }
  auto* peer = new (std::nothrow) rpma_peer{backend, ibv_ctx, pd};
  if (peer == nullptr) {
    backend->DeallocPd(pd);
    return RPMA_E_NOMEM;
  }
  peer->checker = backend->library_checker();
  if (peer->checker != nullptr) peer->checker->NoteCreated("rpma_peer", peer);
  *peer_ptr = peer;
  return 0;
}

extern "C" int rpma_peer_delete(struct rpma_peer** peer_ptr) {
  if (peer_ptr == nullptr) return RPMA_E_INVAL;
  rpma_peer* peer = *peer_ptr;
  if (peer == nullptr) return 0;
  int err = peer->backend->DeallocPd(peer->pd);
  if (err != 0) {
    // Typically EBUSY: MRs or QPs still use the PD. The peer stays valid so
    // the caller can release them and try again.
    Log("%s backend: ibv_dealloc_pd failed: %s", peer->backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  if (peer->checker != nullptr) peer->checker->NoteDeleted(peer);
  delete peer;
  *peer_ptr = nullptr;
  return 0;
}

namespace rpma_harness {
namespace internal {

int OdpCapable(VerbsBackend* backend, ibv_context* ibv_ctx,
               int* is_odp_capable) {
  ibv_device_attr_ex attr;
  std::memset(&attr, 0, sizeof(attr));
  int err = backend->QueryDeviceEx(ibv_ctx, &attr);
  if (err != 0) {
    Log("%s backend: ibv_query_device_ex failed: %s", backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  // As librpma's utils.c: ODP in general and, for RC, for both RDMA writes
  // and reads.
  const ibv_odp_caps& odp = attr.odp_caps;
  const uint32_t rc = odp.per_transport_caps.rc_odp_caps;
  *is_odp_capable = (odp.general_caps & IBV_ODP_SUPPORT) &&
                            (rc & IBV_ODP_SUPPORT_WRITE) &&
                            (rc & IBV_ODP_SUPPORT_READ)
                        ? 1
                        : 0;
  return 0;
}

}  // namespace internal
}  // namespace rpma_harness

extern "C" int rpma_utils_ibv_context_is_odp_capable(
    struct ibv_context* ibv_ctx, int* is_odp_capable) {
  if (ibv_ctx == nullptr || is_odp_capable == nullptr) return RPMA_E_INVAL;
  return rpma_harness::internal::OdpCapable(
      rpma_harness::CurrentBackend().get(), ibv_ctx, is_odp_capable);
}
