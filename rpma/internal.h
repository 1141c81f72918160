// internal.h: the rpma layer's object layouts and shared helpers. Not part of
// the public API.

#ifndef RPMA_HARNESS_RPMA_INTERNAL_H_
#define RPMA_HARNESS_RPMA_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "rpma/harness.h"
#include "rpma/librpma.h"
#include "verbs_backend/verbs_backend.h"

struct rpma_peer {
  std::shared_ptr<rpma_harness::VerbsBackend> backend;
  ibv_context* context;
  ibv_pd* pd;
};

struct rpma_mr_local {
  rpma_peer* peer;
  ibv_mr* mr;
  int usage;
};

struct rpma_mr_remote {
  uint64_t raddr;
  uint64_t size;
  uint32_t rkey;
  int usage;
};

struct rpma_conn_cfg {
  int timeout_ms = RPMA_DEFAULT_TIMEOUT_MS;
  uint32_t cq_size = 10;
  uint32_t rcq_size = 0;
  uint32_t sq_size = 10;
  uint32_t rq_size = 10;
};

// A completion queue with its own completion channel, armed at creation.
struct rpma_cq {
  rpma_harness::VerbsBackend* backend;
  ibv_comp_channel* channel;
  ibv_cq* cq;
};

struct rpma_conn_req {
  rpma_peer* peer;
  rdma_cm_id* id;
  rpma_cq* cq;
  rpma_cq* rcq;                       // nullptr: receives complete on cq
  bool passive;                       // received by rpma_ep_next_conn_req
  std::vector<uint8_t> private_data;  // the request's (passive side)
};

struct rpma_conn {
  rpma_peer* peer;
  rdma_cm_id* id;
  rdma_event_channel* channel;
  rpma_cq* cq;
  rpma_cq* rcq;
  std::vector<uint8_t> private_data;  // what the other side sent
};

struct rpma_ep {
  rpma_peer* peer;
  rdma_event_channel* channel;
  rdma_cm_id* id;
  // The ep's own reference: the peer may be deleted before the ep is shut
  // down (an ep uses no PD resource, so the peer's PD is not busy), and
  // rpma_ep_shutdown must then not reach through the dead peer.
  std::shared_ptr<rpma_harness::VerbsBackend> backend;
};

namespace rpma_harness {
namespace internal {

// The text of a provider's errno, whichever sign the provider used (verbs
// calls return errno; some providers return it negated).
const char* ErrnoText(int err);

// Reports through the installed LogSink (printf-style).
void Log(const char* format, ...) __attribute__((format(printf, 1, 2)));

// librdmacm's name of a CM event ("RDMA_CM_EVENT_ESTABLISHED"), without
// calling librdmacm (the fake NIC has none).
const char* CmEventName(rdma_cm_event_type event);

// Creates a CQ of `size` entries with its own completion channel and arms it.
// Returns 0 or an RPMA_E_* code.
int CqNew(rpma_peer* peer, ibv_context* context, uint32_t size, rpma_cq** out);
// Destroys the CQ and its channel. Returns 0 or RPMA_E_PROVIDER.
int CqDelete(rpma_cq** cq);

// Creates the CQ(s) and the RC QP of a connection request on `id`.
int ConnReqSetUpQueues(rpma_peer* peer, rdma_cm_id* id,
                       const rpma_conn_cfg* cfg, rpma_conn_req* req);
// Tears down what ConnReqSetUpQueues made (QP, CQs). Returns 0 or an error.
int ConnReqTearDownQueues(rpma_peer* peer, rdma_cm_id* id, rpma_cq** cq,
                          rpma_cq** rcq);

// Posts one receive of [dst + offset, +len) (or a 0-SGE receive when dst is
// nullptr) on `qp`. Returns 0 or RPMA_E_PROVIDER.
int PostRecv(VerbsBackend* backend, ibv_qp* qp, rpma_mr_local* dst,
             size_t offset, size_t len, const void* op_context);

}  // namespace internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_INTERNAL_H_
