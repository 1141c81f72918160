// Completion queues: each has its own completion channel and is kept armed,
// so its fd turns readable when a completion arrives.

#include <errno.h>

#include <cstring>
#include <new>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

namespace rpma_harness {
namespace internal {

int CqNew(rpma_peer* peer, ibv_context* context, uint32_t size,
          ibv_comp_channel* shared_channel, rpma_cq** out) {
  VerbsBackend* backend = peer->backend.get();
  ibv_comp_channel* channel = shared_channel;
  // Only a channel of its own is destroyed on the failure paths below.
  auto destroy_own_channel = [&] {
    if (shared_channel == nullptr) backend->DestroyCompChannel(channel);
  };
  if (channel == nullptr) {
    errno = 0;
    channel = backend->CreateCompChannel(context);
    if (channel == nullptr) {
      Log("%s backend: ibv_create_comp_channel failed: %s", backend->Name(),
          std::strerror(errno));
      return RPMA_E_PROVIDER;
    }
  }
  errno = 0;
  ibv_cq* cq =
      backend->CreateCq(context, static_cast<int>(size), nullptr, channel, 0);
  if (cq == nullptr) {
    Log("%s backend: ibv_create_cq(%u) failed: %s", backend->Name(), size,
        std::strerror(errno));
    destroy_own_channel();
    return RPMA_E_PROVIDER;
  }
  int err = backend->ReqNotifyCq(cq, 0);
  if (err != 0) {
    Log("%s backend: ibv_req_notify_cq failed: %s", backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    backend->DestroyCq(cq);
    destroy_own_channel();
    return RPMA_E_PROVIDER;
  }
  auto* result = new (std::nothrow)
      rpma_cq{backend, channel, cq, shared_channel != nullptr};
  if (result == nullptr) {
    backend->DestroyCq(cq);
    destroy_own_channel();
    return RPMA_E_NOMEM;
  }
  *out = result;
  return 0;
}

int CqDelete(rpma_cq** cq_ptr) {
  rpma_cq* cq = *cq_ptr;
  if (cq == nullptr) return 0;
  int ret = 0;
  int err = cq->backend->DestroyCq(cq->cq);
  if (err != 0) {
    Log("%s backend: ibv_destroy_cq failed: %s", cq->backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    ret = RPMA_E_PROVIDER;
  }
  // A shared channel belongs to the connection (rpma_conn_delete).
  err = cq->shared_channel ? 0 : cq->backend->DestroyCompChannel(cq->channel);
  if (err != 0 && ret == 0) {
    Log("%s backend: ibv_destroy_comp_channel failed: %s", cq->backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    ret = RPMA_E_PROVIDER;
  }
  delete cq;
  *cq_ptr = nullptr;
  return ret;
}

}  // namespace internal
}  // namespace rpma_harness

extern "C" int rpma_cq_get_fd(const struct rpma_cq* cq, int* fd) {
  if (cq == nullptr || fd == nullptr) return RPMA_E_INVAL;
  *fd = cq->channel->fd;
  return 0;
}

extern "C" int rpma_cq_wait(struct rpma_cq* cq) {
  if (cq == nullptr) return RPMA_E_INVAL;
  // rpma_cq_wait(3): an event on a shared channel may be the other CQ's, so
  // only rpma_conn_wait() can take it.
  if (cq->shared_channel) return RPMA_E_SHARED_CHANNEL;
  ibv_cq* event_cq = nullptr;
  void* event_context = nullptr;
  errno = 0;
  if (cq->backend->GetCqEvent(cq->channel, &event_cq, &event_context) != 0) {
    // EAGAIN on a non-blocking fd: nothing has completed yet.
    return RPMA_E_NO_COMPLETION;
  }
  if (event_cq != cq->cq) {
    Log("%s backend: ibv_get_cq_event returned an unknown CQ %p",
        cq->backend->Name(), static_cast<void*>(event_cq));
    return RPMA_E_UNKNOWN;
  }
  cq->backend->AckCqEvents(cq->cq, 1);
  int err = cq->backend->ReqNotifyCq(cq->cq, 0);
  if (err != 0) {
    Log("%s backend: ibv_req_notify_cq failed: %s", cq->backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  return 0;
}

extern "C" int rpma_cq_get_wc(struct rpma_cq* cq, int num_entries,
                              struct ibv_wc* wc, int* num_entries_got) {
  if (cq == nullptr || wc == nullptr || num_entries < 1 ||
      (num_entries > 1 && num_entries_got == nullptr)) {
    return RPMA_E_INVAL;
  }
  errno = 0;
  int got = cq->backend->PollCq(cq->cq, num_entries, wc);
  if (got == 0) return RPMA_E_NO_COMPLETION;
  if (got < 0) {
    // A negative return is the provider's error report (for example an
    // overrun CQ); errno may or may not carry more.
    int err = errno;
    Log("%s backend: ibv_poll_cq failed with %d (errno: %s)",
        cq->backend->Name(), got, err ? std::strerror(err) : "not set");
    return RPMA_E_PROVIDER;
  }
  if (got > num_entries) {
    Log("%s backend: ibv_poll_cq returned %d completions for %d entries",
        cq->backend->Name(), got, num_entries);
    return RPMA_E_UNKNOWN;
  }
  if (num_entries_got != nullptr) *num_entries_got = got;
  if (rpma_harness::internal::PersistenceListened()) {
    for (int i = 0; i < got; ++i) {
      rpma_harness::PersistenceNote note;
      note.kind = rpma_harness::PersistenceNote::Kind::kPolled;
      note.wc = wc[i];
      rpma_harness::internal::NotePersistence(note);
    }
  }
  return 0;
}
