// Connections: events, private data, queues, teardown.

#include <errno.h>

#include <cstring>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

extern "C" int rpma_conn_get_event_fd(const struct rpma_conn* conn, int* fd) {
  if (conn == nullptr || fd == nullptr) return RPMA_E_INVAL;
  *fd = conn->channel->fd;
  return 0;
}

extern "C" int rpma_conn_next_event(struct rpma_conn* conn,
                                    enum rpma_conn_event* event) {
  if (conn == nullptr || event == nullptr) return RPMA_E_INVAL;
  rpma_harness::VerbsBackend* backend = conn->peer->backend.get();
  rdma_cm_event* cm_event = nullptr;
  errno = 0;
  if (backend->GetCmEvent(conn->channel, &cm_event) != 0) {
    if (errno == EAGAIN || errno == ENODATA) return RPMA_E_NO_EVENT;
    Log("%s backend: rdma_get_cm_event failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  enum rpma_conn_event result = RPMA_CONN_UNDEFINED;
  // The same mapping librpma 1.x makes.
  switch (cm_event->event) {
    case RDMA_CM_EVENT_ESTABLISHED: {
      result = RPMA_CONN_ESTABLISHED;
      // The active side learns the accept's private data here; the passive
      // side already holds the request's.
      const auto* pdata =
          static_cast<const uint8_t*>(cm_event->param.conn.private_data);
      if (pdata != nullptr && cm_event->param.conn.private_data_len > 0) {
        conn->private_data.assign(
            pdata, pdata + cm_event->param.conn.private_data_len);
      }
      break;
    }
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      result = RPMA_CONN_LOST;
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      result = RPMA_CONN_CLOSED;
      break;
    case RDMA_CM_EVENT_REJECTED:
      result = RPMA_CONN_REJECTED;
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      result = RPMA_CONN_UNREACHABLE;
      break;
    default:
      break;
  }
  const rdma_cm_event_type type = cm_event->event;
  if (backend->AckCmEvent(cm_event) != 0) {
    Log("%s backend: rdma_ack_cm_event failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  if (result == RPMA_CONN_UNDEFINED) {
    Log("%s backend: unexpected connection event %s", backend->Name(),
        rpma_harness::internal::CmEventName(type));
    return RPMA_E_UNKNOWN;
  }
  *event = result;
  return 0;
}

extern "C" int rpma_conn_get_private_data(
    const struct rpma_conn* conn, struct rpma_conn_private_data* pdata) {
  if (conn == nullptr || pdata == nullptr) return RPMA_E_INVAL;
  pdata->ptr = conn->private_data.empty()
                   ? nullptr
                   : const_cast<uint8_t*>(conn->private_data.data());
  pdata->len = static_cast<uint8_t>(conn->private_data.size());
  return 0;
}

extern "C" int rpma_conn_get_qp_num(const struct rpma_conn* conn,
                                    uint32_t* qp_num) {
  if (conn == nullptr || qp_num == nullptr) return RPMA_E_INVAL;
  *qp_num = conn->id->qp->qp_num;
  return 0;
}

extern "C" int rpma_conn_get_cq(const struct rpma_conn* conn,
                                struct rpma_cq** cq_ptr) {
  if (conn == nullptr || cq_ptr == nullptr) return RPMA_E_INVAL;
  *cq_ptr = conn->cq;
  return 0;
}

extern "C" int rpma_conn_get_rcq(const struct rpma_conn* conn,
                                 struct rpma_cq** rcq_ptr) {
  if (conn == nullptr || rcq_ptr == nullptr) return RPMA_E_INVAL;
  *rcq_ptr = conn->rcq;
  return 0;
}

extern "C" int rpma_conn_get_compl_fd(const struct rpma_conn* conn, int* fd) {
  if (conn == nullptr || fd == nullptr) return RPMA_E_INVAL;
  if (conn->comp_channel == nullptr) return RPMA_E_NOT_SHARED_CHNL;
  *fd = conn->comp_channel->fd;
  return 0;
}

extern "C" int rpma_conn_wait(struct rpma_conn* conn, int /*flags*/,
                              struct rpma_cq** cq, bool* is_rcq) {
  // rpma_conn_wait(3); flags is reserved (librpma 1.3 ignores it).
  if (conn == nullptr || cq == nullptr) return RPMA_E_INVAL;
  if (conn->comp_channel == nullptr) return RPMA_E_NOT_SHARED_CHNL;
  rpma_harness::VerbsBackend* backend = conn->peer->backend.get();
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  errno = 0;
  if (backend->GetCqEvent(conn->comp_channel, &event_cq, &event_context) != 0) {
    // EAGAIN on a non-blocking fd (or the wait failed): nothing to report.
    return RPMA_E_NO_COMPLETION;
  }
  rpma_cq* fired = nullptr;
  bool fired_is_rcq = false;
  if (conn->cq != nullptr && conn->cq->cq == event_cq) {
    fired = conn->cq;
  } else if (conn->rcq != nullptr && conn->rcq->cq == event_cq) {
    fired = conn->rcq;
    fired_is_rcq = true;
  } else {
    Log("%s backend: ibv_get_cq_event returned an unknown CQ %p",
        backend->Name(), static_cast<void*>(event_cq));
    return RPMA_E_UNKNOWN;
  }
  backend->AckCqEvents(event_cq, 1);
  int err = backend->ReqNotifyCq(event_cq, 0);
  if (err != 0) {
    Log("%s backend: ibv_req_notify_cq failed: %s", backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  *cq = fired;
  if (is_rcq != nullptr) *is_rcq = fired_is_rcq;
  return 0;
}

extern "C" int rpma_conn_apply_remote_peer_cfg(
    struct rpma_conn* conn, const struct rpma_peer_cfg* pcfg) {
  if (conn == nullptr || pcfg == nullptr) return RPMA_E_INVAL;
  return rpma_peer_cfg_get_direct_write_to_pmem(pcfg,
                                                &conn->direct_write_to_pmem);
}

extern "C" int rpma_conn_disconnect(struct rpma_conn* conn) {
  if (conn == nullptr) return RPMA_E_INVAL;
  rpma_harness::VerbsBackend* backend = conn->peer->backend.get();
  errno = 0;
  if (backend->Disconnect(conn->id) != 0) {
    Log("%s backend: rdma_disconnect failed: %s", backend->Name(),
        std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  return 0;
}

extern "C" int rpma_conn_delete(struct rpma_conn** conn_ptr) {
  if (conn_ptr == nullptr) return RPMA_E_INVAL;
  rpma_conn* conn = *conn_ptr;
  if (conn == nullptr) return 0;
  rpma_harness::VerbsBackend* backend = conn->peer->backend.get();
  // Everything is released even when one step fails; the first failure is
  // reported.
  // As librpma's rpma_conn_delete: the flush buffer first, then the QP, the
  // CQs and the shared completion channel.
  int ret = rpma_harness::internal::RawBufferDelete(&conn->raw);
  int teardown = rpma_harness::internal::ConnReqTearDownQueues(
      conn->peer, conn->id, &conn->cq, &conn->rcq, &conn->comp_channel);
  if (ret == 0) ret = teardown;
  errno = 0;
  if (backend->DestroyId(conn->id) != 0) {
    Log("%s backend: rdma_destroy_id failed: %s", backend->Name(),
        std::strerror(errno));
    if (ret == 0) ret = RPMA_E_PROVIDER;
  }
  backend->DestroyEventChannel(conn->channel);
  rpma_harness::internal::NoteDeleted(backend, conn);
  delete conn;
  *conn_ptr = nullptr;
  return ret;
}
