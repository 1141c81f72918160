// Connection requests: the active side resolves and connects, the passive
// side (from rpma_ep_next_conn_req) accepts or rejects.

#include <errno.h>

#include <cstring>
#include <new>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

namespace rpma_harness {
namespace internal {

const char* CmEventName(rdma_cm_event_type event) {
  switch (event) {
#define RPMA_HARNESS_CM_EVENT(name) \
  case name:                        \
    return #name;
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_ADDR_RESOLVED)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_ADDR_ERROR)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_ROUTE_RESOLVED)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_ROUTE_ERROR)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_CONNECT_REQUEST)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_CONNECT_RESPONSE)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_CONNECT_ERROR)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_UNREACHABLE)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_REJECTED)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_ESTABLISHED)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_DISCONNECTED)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_DEVICE_REMOVAL)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_MULTICAST_JOIN)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_MULTICAST_ERROR)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_ADDR_CHANGE)
    RPMA_HARNESS_CM_EVENT(RDMA_CM_EVENT_TIMEWAIT_EXIT)
#undef RPMA_HARNESS_CM_EVENT
  }
  return "RDMA_CM_EVENT_<unknown>";
}

int ConnReqSetUpQueues(rpma_peer* peer, rdma_cm_id* id,
                       const rpma_conn_cfg* cfg, rpma_conn_req* req) {
  VerbsBackend* backend = peer->backend.get();
  rpma_srq* srq = cfg->srq;
  rpma_cq* srq_rcq = srq != nullptr ? srq->rcq : nullptr;
  // rpma_conn_cfg_set_compl_channel(3) / librpma's conn_req.c: a shared
  // channel cannot include the SRQ's receive CQ, which other connections use.
  if (cfg->shared_comp_channel && srq_rcq != nullptr) {
    Log("a shared completion channel cannot be used with a shared RQ that has "
        "its own receive CQ");
    return RPMA_E_INVAL;
  }
  if (cfg->shared_comp_channel) {
    errno = 0;
    req->channel = backend->CreateCompChannel(id->verbs);
    if (req->channel == nullptr) {
      Log("%s backend: ibv_create_comp_channel failed: %s", backend->Name(),
          std::strerror(errno));
      return RPMA_E_PROVIDER;
    }
  }
  auto undo = [&] {
    CqDelete(&req->rcq);
    CqDelete(&req->cq);
    if (req->channel != nullptr) backend->DestroyCompChannel(req->channel);
    req->channel = nullptr;
  };
  int ret = CqNew(peer, id->verbs, cfg->cq_size, req->channel, &req->cq);
  if (ret != 0) {
    undo();
    return ret;
  }
  // With an SRQ that has its own receive CQ, receives complete there and
  // the connection has no receive CQ (rpma_conn_get_rcq gives NULL).
  if (srq_rcq == nullptr && cfg->rcq_size > 0) {
    ret = CqNew(peer, id->verbs, cfg->rcq_size, req->channel, &req->rcq);
    if (ret != 0) {
      undo();
      return ret;
    }
  }
  ibv_qp_init_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.send_cq = req->cq->cq;
  attr.recv_cq = srq_rcq ? srq_rcq->cq : req->rcq ? req->rcq->cq : req->cq->cq;
  attr.srq = srq != nullptr ? srq->srq : nullptr;
  attr.cap.max_send_wr = cfg->sq_size;
  attr.cap.max_recv_wr = cfg->rq_size;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  // librpma's peer.c RPMA_MAX_INLINE_DATA: rpma_atomic_write posts its 8
  // bytes inline.
  attr.cap.max_inline_data = 8;
  attr.qp_type = IBV_QPT_RC;
  // Completions are requested per WR (RPMA_F_COMPLETION_ALWAYS), never for all.
  attr.sq_sig_all = 0;
  errno = 0;
  if (backend->CreateQp(id, peer->pd, &attr) != 0) {
    Log("%s backend: rdma_create_qp(sq %u, rq %u) failed: %s", backend->Name(),
        cfg->sq_size, cfg->rq_size, std::strerror(errno));
    undo();
    return RPMA_E_PROVIDER;
  }
  return 0;
}

int ConnReqTearDownQueues(rpma_peer* peer, rdma_cm_id* id, rpma_cq** cq,
                          rpma_cq** rcq, ibv_comp_channel** channel) {
  peer->backend->DestroyQp(id);
  int ret = CqDelete(rcq);
  int ret2 = CqDelete(cq);
  if (ret == 0) ret = ret2;
  if (*channel != nullptr) {
    // Its CQs are gone, so nothing uses it any more.
    int err = peer->backend->DestroyCompChannel(*channel);
    if (err != 0) {
      Log("%s backend: ibv_destroy_comp_channel failed: %s",
          peer->backend->Name(), ErrnoText(err));
      if (ret == 0) ret = RPMA_E_PROVIDER;
    }
    *channel = nullptr;
  }
  return ret;
}

int PostRecv(VerbsBackend* backend, ibv_qp* qp, rpma_mr_local* dst,
             size_t offset, size_t len, const void* op_context) {
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
  ibv_recv_wr* bad_wr = nullptr;
  int err = backend->PostRecv(qp, &wr, &bad_wr);
  if (err != 0) {
    Log("%s backend: ibv_post_recv failed with %d: %s", backend->Name(), err,
        rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  return 0;
}

}  // namespace internal
}  // namespace rpma_harness

extern "C" int rpma_conn_req_new(struct rpma_peer* peer, const char* addr,
                                 const char* port,
                                 const struct rpma_conn_cfg* cfg,
                                 struct rpma_conn_req** req_ptr) {
  if (peer == nullptr || addr == nullptr || port == nullptr ||
      req_ptr == nullptr) {
    return RPMA_E_INVAL;
  }
  rpma_conn_cfg defaults;
  if (cfg == nullptr) cfg = &defaults;
  rpma_harness::VerbsBackend* backend = peer->backend.get();
  rdma_cm_id* id = nullptr;
  errno = 0;
  if (backend->CreateId(nullptr, &id, nullptr) != 0) {
    Log("%s backend: rdma_create_id failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  const char* failed = nullptr;
  if (backend->ResolveAddr(id, addr, port, cfg->timeout_ms) != 0) {
    failed = "rdma_resolve_addr";
  } else if (backend->ResolveRoute(id, cfg->timeout_ms) != 0) {
    failed = "rdma_resolve_route";
  }
  if (failed) {
    Log("%s backend: %s(%s:%s) failed: %s", backend->Name(), failed, addr, port,
        std::strerror(errno));
    backend->DestroyId(id);
    return RPMA_E_PROVIDER;
  }
  auto* req = new (std::nothrow) rpma_conn_req{};
  if (req == nullptr) {
    backend->DestroyId(id);
    return RPMA_E_NOMEM;
  }
  req->peer = peer;
  req->id = id;
  int ret = rpma_harness::internal::ConnReqSetUpQueues(peer, id, cfg, req);
  if (ret != 0) {
    backend->DestroyId(id);
    delete req;
    return ret;
  }
  rpma_harness::internal::NoteCreated(backend, "rpma_conn_req", req);
  *req_ptr = req;
  return 0;
}

extern "C" int rpma_conn_req_delete(struct rpma_conn_req** req_ptr) {
  if (req_ptr == nullptr) return RPMA_E_INVAL;
  rpma_conn_req* req = *req_ptr;
  if (req == nullptr) return 0;
  rpma_harness::VerbsBackend* backend = req->peer->backend.get();
  int ret = 0;
  if (req->passive && backend->Reject(req->id, nullptr, 0) != 0) {
    Log("%s backend: rdma_reject failed: %s", backend->Name(),
        std::strerror(errno));
    ret = RPMA_E_PROVIDER;
  }
  int teardown = rpma_harness::internal::ConnReqTearDownQueues(
      req->peer, req->id, &req->cq, &req->rcq, &req->channel);
  if (ret == 0) ret = teardown;
  if (backend->DestroyId(req->id) != 0) {
    Log("%s backend: rdma_destroy_id failed: %s", backend->Name(),
        std::strerror(errno));
    if (ret == 0) ret = RPMA_E_PROVIDER;
  }
  rpma_harness::internal::NoteDeleted(backend, req);
  delete req;
  *req_ptr = nullptr;
  return ret;
}

extern "C" int rpma_conn_req_connect(struct rpma_conn_req** req_ptr,
                                     const struct rpma_conn_private_data* pdata,
                                     struct rpma_conn** conn_ptr) {
  if (req_ptr == nullptr || *req_ptr == nullptr) return RPMA_E_INVAL;
  // rpma_conn_req_connect(3): "On failure ... *req_ptr is consumed and set
  // to NULL" -- on every failure once there is a request, argument errors
  // included (librpma src/conn_req.c deletes it before returning
  // RPMA_E_INVAL), so a program written for librpma does not leak here.
  if (conn_ptr == nullptr ||
      (pdata != nullptr && (pdata->ptr == nullptr || pdata->len == 0))) {
    (void)rpma_conn_req_delete(req_ptr);
    return RPMA_E_INVAL;
  }
  rpma_conn_req* req = *req_ptr;
  rpma_harness::VerbsBackend* backend = req->peer->backend.get();

  auto* conn = new (std::nothrow) rpma_conn{};
  if (conn == nullptr) {
    (void)rpma_conn_req_delete(req_ptr);
    return RPMA_E_NOMEM;
  }
  // Every connection gets librpma's flush buffer (see RawBuffer).
  int raw_ret = rpma_harness::internal::RawBufferNew(req->peer, &conn->raw);
  if (raw_ret != 0) {
    delete conn;
    (void)rpma_conn_req_delete(req_ptr);
    return raw_ret;
  }
  errno = 0;
  conn->channel = backend->CreateEventChannel();
  if (conn->channel == nullptr) {
    Log("%s backend: rdma_create_event_channel failed: %s", backend->Name(),
        std::strerror(errno));
    rpma_harness::internal::RawBufferDelete(&conn->raw);
    delete conn;
    (void)rpma_conn_req_delete(req_ptr);
    return RPMA_E_PROVIDER;
  }
  // The connection's events (established, closed, ...) arrive on its own
  // channel, so the connection's event fd tells about this connection only.
  if (backend->MigrateId(req->id, conn->channel) != 0) {
    Log("%s backend: rdma_migrate_id failed: %s", backend->Name(),
        std::strerror(errno));
    backend->DestroyEventChannel(conn->channel);
    rpma_harness::internal::RawBufferDelete(&conn->raw);
    delete conn;
    (void)rpma_conn_req_delete(req_ptr);
    return RPMA_E_PROVIDER;
  }

  rdma_conn_param param;
  std::memset(&param, 0, sizeof(param));
  if (pdata != nullptr) {
    param.private_data = pdata->ptr;
    param.private_data_len = pdata->len;
  }
  // As librpma: as many outstanding RDMA reads as the device allows, hardware
  // flow control, and the largest transport and RNR retry counts (7: RNR
  // retries without limit, IB spec 9.7.5.2.8).
  param.responder_resources = RDMA_MAX_RESP_RES;
  param.initiator_depth = RDMA_MAX_INIT_DEPTH;
  param.flow_control = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  const char* what = req->passive ? "rdma_accept" : "rdma_connect";
  int ret = req->passive ? backend->Accept(req->id, &param)
                         : backend->Connect(req->id, &param);
  if (ret != 0) {
    Log("%s backend: %s failed: %s", backend->Name(), what,
        std::strerror(errno));
    // The request is consumed either way, as librpma documents. The id
    // lives on the connection's channel now (MigrateId above): it goes
    // first, then the channel (rdma_destroy_event_channel(3): every id on
    // it destroyed first; the other order kept the channel and its fd).
    rpma_harness::internal::RawBufferDelete(&conn->raw);
    rpma_harness::internal::ConnReqTearDownQueues(req->peer, req->id, &req->cq,
                                                  &req->rcq, &req->channel);
    backend->DestroyId(req->id);
    backend->DestroyEventChannel(conn->channel);
    delete conn;
    rpma_harness::internal::NoteDeleted(backend, req);
    delete req;
    *req_ptr = nullptr;
    return RPMA_E_PROVIDER;
  }
  conn->peer = req->peer;
  conn->id = req->id;
  conn->cq = req->cq;
  conn->rcq = req->rcq;
  conn->comp_channel = req->channel;
  conn->direct_write_to_pmem = false;
  conn->private_data = std::move(req->private_data);
  rpma_harness::internal::NoteDeleted(backend, req);
  rpma_harness::internal::NoteCreated(backend, "rpma_conn", conn);
  delete req;
  *req_ptr = nullptr;
  *conn_ptr = conn;
  return 0;
}

extern "C" int rpma_conn_req_recv(struct rpma_conn_req* req,
                                  struct rpma_mr_local* dst, size_t offset,
                                  size_t len, const void* op_context) {
  // The man page requires a destination region here (unlike rpma_recv).
  if (req == nullptr || dst == nullptr) return RPMA_E_INVAL;
  return rpma_harness::internal::PostRecv(req->peer->backend.get(), req->id->qp,
                                          dst, offset, len, op_context);
}

extern "C" int rpma_conn_req_get_private_data(
    const struct rpma_conn_req* req, struct rpma_conn_private_data* pdata) {
  if (req == nullptr || pdata == nullptr) return RPMA_E_INVAL;
  pdata->ptr = req->private_data.empty()
                   ? nullptr
                   : const_cast<uint8_t*>(req->private_data.data());
  pdata->len = static_cast<uint8_t>(req->private_data.size());
  return 0;
}
