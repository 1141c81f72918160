// Endpoints: the passive side listens and turns connection requests into
// rpma_conn_req objects.

#include <errno.h>

#include <cstring>
#include <new>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

extern "C" int rpma_ep_listen(struct rpma_peer* peer, const char* addr,
                              const char* port, struct rpma_ep** ep_ptr) {
  if (peer == nullptr || addr == nullptr || port == nullptr ||
      ep_ptr == nullptr) {
    return RPMA_E_INVAL;
  }
  rpma_harness::VerbsBackend* backend = peer->backend.get();
  errno = 0;
  rdma_event_channel* channel = backend->CreateEventChannel();
  if (channel == nullptr) {
    Log("%s backend: rdma_create_event_channel failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  rdma_cm_id* id = nullptr;
  if (backend->CreateId(channel, &id, nullptr) != 0) {
    Log("%s backend: rdma_create_id failed: %s", backend->Name(),
        std::strerror(errno));
    backend->DestroyEventChannel(channel);
    return RPMA_E_PROVIDER;
  }
  const char* failed = nullptr;
  if (backend->BindAddr(id, addr, port) != 0) {
    failed = "rdma_bind_addr";
  } else if (backend->Listen(id, 0) != 0) {
    failed = "rdma_listen";
  }
  auto* ep = failed ? nullptr
                    : new (std::nothrow)
                          rpma_ep{peer, channel, id, peer->backend};
  if (ep == nullptr) {
    int err = errno;
    if (failed) {
      Log("%s backend: %s(%s:%s) failed: %s", backend->Name(), failed, addr,
          port, std::strerror(err));
    }
    backend->DestroyId(id);
    backend->DestroyEventChannel(channel);
    return failed ? RPMA_E_PROVIDER : RPMA_E_NOMEM;
  }
  rpma_harness::internal::NoteCreated(ep->backend.get(), "rpma_ep", ep);
  *ep_ptr = ep;
  return 0;
}

extern "C" int rpma_ep_shutdown(struct rpma_ep** ep_ptr) {
  if (ep_ptr == nullptr) return RPMA_E_INVAL;
  rpma_ep* ep = *ep_ptr;
  if (ep == nullptr) return 0;
  rpma_harness::VerbsBackend* backend = ep->backend.get();
  if (backend->DestroyId(ep->id) != 0) {
    Log("%s backend: rdma_destroy_id failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  backend->DestroyEventChannel(ep->channel);
  rpma_harness::internal::NoteDeleted(backend, ep);
  delete ep;
  *ep_ptr = nullptr;
  return 0;
}

extern "C" int rpma_ep_get_fd(const struct rpma_ep* ep, int* fd) {
  if (ep == nullptr || fd == nullptr) return RPMA_E_INVAL;
  *fd = ep->channel->fd;
  return 0;
}

extern "C" int rpma_ep_next_conn_req(struct rpma_ep* ep,
                                     const struct rpma_conn_cfg* cfg,
                                     struct rpma_conn_req** req_ptr) {
  if (ep == nullptr || req_ptr == nullptr) return RPMA_E_INVAL;
  rpma_harness::VerbsBackend* backend = ep->peer->backend.get();
  rdma_cm_event* event = nullptr;
  errno = 0;
  if (backend->GetCmEvent(ep->channel, &event) != 0) {
    // librdmacm reports an empty non-blocking channel as EAGAIN (from read)
    // or ENODATA (a short read).
    if (errno == EAGAIN || errno == ENODATA) return RPMA_E_NO_EVENT;
    Log("%s backend: rdma_get_cm_event failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    Log("%s backend: the endpoint got %s, not a connection request",
        backend->Name(), rpma_harness::internal::CmEventName(event->event));
    backend->AckCmEvent(event);
    return RPMA_E_INVAL;
  }
  auto* req = new (std::nothrow) rpma_conn_req{};
  if (req == nullptr) {
    backend->Reject(event->id, nullptr, 0);
    backend->AckCmEvent(event);
    return RPMA_E_NOMEM;
  }
  req->peer = ep->peer;
  req->id = event->id;
  req->passive = true;
  const auto* pdata =
      static_cast<const uint8_t*>(event->param.conn.private_data);
  if (pdata != nullptr) {
    req->private_data.assign(pdata, pdata + event->param.conn.private_data_len);
  }
  rpma_conn_cfg defaults;
  int ret = rpma_harness::internal::ConnReqSetUpQueues(
      ep->peer, req->id, cfg ? cfg : &defaults, req);
  if (ret != 0) {
    backend->Reject(event->id, nullptr, 0);
    backend->AckCmEvent(event);
    backend->DestroyId(req->id);
    delete req;
    return ret;
  }
  // The private data was copied; acknowledging now lets the id migrate to the
  // connection's own channel later (rdma_migrate_id waits for all of an id's
  // events to be acknowledged).
  if (backend->AckCmEvent(event) != 0) {
    Log("%s backend: rdma_ack_cm_event failed: %s", backend->Name(),
        std::strerror(errno));
    rpma_conn_req_delete(&req);
    return RPMA_E_PROVIDER;
  }
  rpma_harness::internal::NoteCreated(backend, "rpma_conn_req", req);
  *req_ptr = req;
  return 0;
}
