// internal.h: the rpma layer's object layouts and shared helpers. Not part of
// the public API.

#ifndef RPMA_HARNESS_RPMA_INTERNAL_H_
#define RPMA_HARNESS_RPMA_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "rpma/harness.h"
#include "rpma/librpma.h"
#include "verbs_backend/verbs_backend.h"

struct rpma_peer {
  std::shared_ptr<rpma_harness::VerbsBackend> backend;
  ibv_context* context;
  ibv_pd* pd;
  // The usage checker when `backend` has one (VerbsBackend::
  // library_checker()); nullptr otherwise, so an unchecked program pays one
  // branch.
  rpma_harness::LibraryChecker* checker = nullptr;
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
  // One completion channel for the CQ and the receive CQ
  // (rpma_conn_cfg_set_compl_channel(3)); default not shared.
  bool shared_comp_channel = false;
  rpma_srq* srq = nullptr;  // rpma_conn_cfg_set_srq(3)
};

// What a peer says about itself (rpma_peer_cfg_new(3)): default false.
struct rpma_peer_cfg {
  std::atomic<bool> direct_write_to_pmem{false};
};

// A completion queue, armed at creation, with its own completion channel or
// one shared with the other CQ of its connection (then `shared_channel`, and
// the channel belongs to the connection).
struct rpma_cq {
  rpma_harness::VerbsBackend* backend;
  ibv_comp_channel* channel;
  ibv_cq* cq;
  bool shared_channel;
};

struct rpma_conn_req {
  rpma_peer* peer;
  rdma_cm_id* id;
  rpma_cq* cq;
  rpma_cq* rcq;                       // nullptr: receives complete on cq
  ibv_comp_channel* channel;          // the shared completion channel or null
  bool passive;                       // received by rpma_ep_next_conn_req
  std::vector<uint8_t> private_data;  // the request's (passive side)
};

// The read-after-write buffer librpma 1.3 gives every connection for
// rpma_flush() on a NIC without a native flush (src/flush.c): one page,
// mmap()ed, of which 8 bytes are registered as RPMA_MR_USAGE_READ_DST; a
// flush is an 8-byte RDMA READ of the flushed range into it.
struct RawBuffer {
  void* page = nullptr;
  size_t page_size = 0;
  rpma_mr_local* mr = nullptr;
};

struct rpma_conn {
  rpma_peer* peer;
  rdma_cm_id* id;
  rdma_event_channel* channel;
  rpma_cq* cq;
  rpma_cq* rcq;
  ibv_comp_channel* comp_channel;     // shared by cq and rcq, or null
  std::vector<uint8_t> private_data;  // what the other side sent
  RawBuffer raw;
  // From rpma_conn_apply_remote_peer_cfg(3); default false.
  bool direct_write_to_pmem;
};

// A shared receive queue on a peer's PD with, unless its cfg's rcq size is 0,
// a receive CQ of its own (rpma_srq_new(3)).
struct rpma_srq {
  rpma_peer* peer;
  ibv_srq* srq;
  rpma_cq* rcq;
};

// rpma_srq_cfg_new(3) documents 100 for both sizes (librpma 1.3's srq_cfg.c
// uses 20; the man page is this project's specification).
struct rpma_srq_cfg {
  uint32_t rq_size = 100;
  uint32_t rcq_size = 100;
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

// memset(wr, 0, sizeof *wr), as two 64-byte halves: GCC's generic x86-64
// tuning turns one 128-byte memset into `rep stosq`, whose start-up cost
// was half of rpma_write_with_imm's own time (perf, BM_RoundTrip/64); a
// 64-byte memset becomes four vector stores.
inline void ZeroSendWr(ibv_send_wr* wr) {
  static_assert(sizeof(ibv_send_wr) > 64, "two pieces");
  char* const bytes = reinterpret_cast<char*>(wr);
  std::memset(bytes, 0, 64);
  std::memset(bytes + 64, 0, sizeof(ibv_send_wr) - 64);
}

// The int a C program passed for an enum parameter (rpma_flush's type, the
// log functions' threshold and level). In C any int value may be passed (C11
// 6.7.2.2: an enum type is compatible with an integer type), and the man
// pages promise RPMA_E_INVAL for unknown values; in C++ reading a value
// outside the enum's range is undefined ([dcl.enum]p8; clang's
// -fsanitize=enum reports the load), so the C API reads the bytes instead.
template <typename Enum>
int EnumAsInt(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "a C enum is int-sized");
  int raw;
  std::memcpy(&raw, &value, sizeof(raw));
  return raw;
}

// The text of a provider's errno, whichever sign the provider used (verbs
// calls return errno; some providers return it negated).
const char* ErrnoText(int err);

// rpma_peer_cfg_get_descriptor_size(3): one byte.
constexpr size_t kPeerCfgDescriptorSize = 1;

// Reports a failure (RPMA_LOG_LEVEL_ERROR, as librpma logs provider errors)
// through the installed LogSink if any, else through librpma's log function
// and thresholds (rpma/log.cc). printf-style.
void Log(const char* format, ...) __attribute__((format(printf, 1, 2)));
// The same at another level.
void LogAt(enum rpma_log_level level, const char* format, ...)
    __attribute__((format(printf, 2, 3)));
// One formatted message (no trailing newline) at `level` (rpma/log.cc).
void LogMessage(enum rpma_log_level level, const char* text);
// Hands `text` to the harness's LogSink; false when none is installed.
bool DeliverToSink(const char* text);

// librdmacm's name of a CM event ("RDMA_CM_EVENT_ESTABLISHED"), without
// calling librdmacm (the fake NIC has none).
const char* CmEventName(rdma_cm_event_type event);

// Creates a CQ of `size` entries and arms it; its completion channel is
// `shared_channel`, or (when that is null) one of its own.
// Returns 0 or an RPMA_E_* code.
int CqNew(rpma_peer* peer, ibv_context* context, uint32_t size,
          ibv_comp_channel* shared_channel, rpma_cq** out);
// Destroys the CQ and its own channel (a shared one stays). *cq == nullptr
// is a no-op. Returns 0 or RPMA_E_PROVIDER.
int CqDelete(rpma_cq** cq);

// Creates the CQ(s) and the RC QP of a connection request on `id`.
int ConnReqSetUpQueues(rpma_peer* peer, rdma_cm_id* id,
                       const rpma_conn_cfg* cfg, rpma_conn_req* req);
// Tears down what ConnReqSetUpQueues made (QP, CQs, the shared completion
// channel). Returns 0 or the first error.
int ConnReqTearDownQueues(rpma_peer* peer, rdma_cm_id* id, rpma_cq** cq,
                          rpma_cq** rcq, ibv_comp_channel** channel);

// Sets up / releases a connection's read-after-write buffer (RawBuffer).
int RawBufferNew(rpma_peer* peer, RawBuffer* raw);
int RawBufferDelete(RawBuffer* raw);

// Posts one receive of [dst + offset, +len) (or a 0-SGE receive when dst is
// nullptr) on `qp`. Returns 0 or RPMA_E_PROVIDER.
int PostRecv(VerbsBackend* backend, ibv_qp* qp, rpma_mr_local* dst,
             size_t offset, size_t len, const void* op_context);

// rpma_utils_ibv_context_is_odp_capable(3) on `backend`.
int OdpCapable(VerbsBackend* backend, ibv_context* ibv_ctx,
               int* is_odp_capable);

// Posts one IBV_WR_RDMA_READ of [src + src_offset, +len) into
// [dst + dst_offset) on the connection's QP, as librpma's rpma_mr_read does
// (dst == src == nullptr: the 0-byte form). Returns 0 or RPMA_E_PROVIDER.
// `flush`: the read of an rpma_flush, whose range rpma_flush itself gave
// the usage checker.
int PostRead(rpma_conn* conn, rpma_mr_local* dst, size_t dst_offset,
             const rpma_mr_remote* src, size_t src_offset, size_t len,
             int flags, const void* op_context, bool flush = false);

// Tells the usage checker an rpma object came to life / died (no-op when
// `backend` does not check).
inline void NoteCreated(VerbsBackend* backend, const char* kind,
                        const void* object) {
  if (LibraryChecker* c = backend->library_checker()) {
    c->NoteCreated(kind, object);
  }
}
inline void NoteDeleted(VerbsBackend* backend, const void* object) {
  if (LibraryChecker* c = backend->library_checker()) c->NoteDeleted(object);
}

}  // namespace internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_INTERNAL_H_
