// Shared receive queues and their configuration (rpma_srq_new(3),
// rpma_srq_recv(3), rpma_srq_cfg_new(3), ...): an ibv_srq on the peer's PD
// and, unless the configuration's rcq size is 0, a receive CQ of its own
// that every connection using the SRQ completes its receives on.

#include <errno.h>

#include <cstring>
#include <new>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

extern "C" int rpma_srq_cfg_new(struct rpma_srq_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  auto* cfg = new (std::nothrow) rpma_srq_cfg;
  if (cfg == nullptr) return RPMA_E_NOMEM;
  *cfg_ptr = cfg;
  return 0;
}

extern "C" int rpma_srq_cfg_delete(struct rpma_srq_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  delete *cfg_ptr;
  *cfg_ptr = nullptr;
  return 0;
}

extern "C" int rpma_srq_cfg_set_rq_size(struct rpma_srq_cfg* cfg,
                                        uint32_t rq_size) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->rq_size = rq_size;
  return 0;
}

extern "C" int rpma_srq_cfg_get_rq_size(const struct rpma_srq_cfg* cfg,
                                        uint32_t* rq_size) {
  if (cfg == nullptr || rq_size == nullptr) return RPMA_E_INVAL;
  *rq_size = cfg->rq_size;
  return 0;
}

extern "C" int rpma_srq_cfg_set_rcq_size(struct rpma_srq_cfg* cfg,
                                         uint32_t rcq_size) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->rcq_size = rcq_size;
  return 0;
}

extern "C" int rpma_srq_cfg_get_rcq_size(const struct rpma_srq_cfg* cfg,
                                         uint32_t* rcq_size) {
  if (cfg == nullptr || rcq_size == nullptr) return RPMA_E_INVAL;
  *rcq_size = cfg->rcq_size;
  return 0;
}

extern "C" int rpma_srq_new(struct rpma_peer* peer, struct rpma_srq_cfg* cfg,
                            struct rpma_srq** srq_ptr) {
  if (peer == nullptr || srq_ptr == nullptr) return RPMA_E_INVAL;
  rpma_srq_cfg defaults;
  if (cfg == nullptr) cfg = &defaults;
  rpma_harness::VerbsBackend* backend = peer->backend.get();
  // As librpma's peer.c rpma_peer_create_srq: one SGE per receive, no limit
  // event.
  ibv_srq_init_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.attr.max_wr = cfg->rq_size;
  attr.attr.max_sge = 1;
  attr.attr.srq_limit = 0;
  errno = 0;
  ibv_srq* srq = backend->CreateSrq(peer->pd, &attr);
  if (srq == nullptr) {
    Log("%s backend: ibv_create_srq(max_wr %u) failed: %s", backend->Name(),
        cfg->rq_size, std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  rpma_cq* rcq = nullptr;
  if (cfg->rcq_size > 0) {
    int ret = rpma_harness::internal::CqNew(peer, peer->context, cfg->rcq_size,
                                            nullptr, &rcq);
    if (ret != 0) {
      backend->DestroySrq(srq);
      return ret;
    }
  }
  auto* result = new (std::nothrow) rpma_srq{peer, srq, rcq};
  if (result == nullptr) {
    rpma_harness::internal::CqDelete(&rcq);
    backend->DestroySrq(srq);
    return RPMA_E_NOMEM;
  }
  rpma_harness::internal::NoteCreated(backend, "rpma_srq", result);
  *srq_ptr = result;
  return 0;
}

extern "C" int rpma_srq_delete(struct rpma_srq** srq_ptr) {
  if (srq_ptr == nullptr) return RPMA_E_INVAL;
  rpma_srq* srq = *srq_ptr;
  if (srq == nullptr) return 0;
  // As librpma: the receive CQ first, then the SRQ; the first failure is
  // reported and the object is released either way.
  int ret = rpma_harness::internal::CqDelete(&srq->rcq);
  rpma_harness::VerbsBackend* backend = srq->peer->backend.get();
  int err = backend->DestroySrq(srq->srq);
  if (err != 0) {
    Log("%s backend: ibv_destroy_srq failed: %s", backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    if (ret == 0) ret = RPMA_E_PROVIDER;
  }
  rpma_harness::internal::NoteDeleted(backend, srq);
  delete srq;
  *srq_ptr = nullptr;
  return ret;
}

extern "C" int rpma_srq_recv(struct rpma_srq* srq, struct rpma_mr_local* dst,
                             size_t offset, size_t len,
                             const void* op_context) {
  if (srq == nullptr || (dst == nullptr && (offset != 0 || len != 0))) {
    return RPMA_E_INVAL;
  }
  // The same WR rpma_recv builds, posted to the SRQ (librpma's mr.c
  // rpma_mr_srq_recv).
  ibv_sge sge;
  ibv_recv_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = reinterpret_cast<uint64_t>(op_context);
  if (dst != nullptr) {
    sge.addr = reinterpret_cast<uint64_t>(dst->mr->addr) + offset;
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = dst->mr->lkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  rpma_harness::VerbsBackend* backend = srq->peer->backend.get();
  ibv_recv_wr* bad_wr = nullptr;
  int err = backend->PostSrqRecv(srq->srq, &wr, &bad_wr);
  if (err != 0) {
    Log("%s backend: ibv_post_srq_recv failed with %d: %s", backend->Name(),
        err, rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  return 0;
}

extern "C" int rpma_srq_get_rcq(const struct rpma_srq* srq,
                                struct rpma_cq** rcq_ptr) {
  if (srq == nullptr || rcq_ptr == nullptr) return RPMA_E_INVAL;
  *rcq_ptr = srq->rcq;
  return 0;
}
