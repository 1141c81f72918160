/*
 * librpma.h: the librpma 1.3 API, served by rpma-harness.
 *
 * Every function, macro, enum and type of librpma 1.3's librpma.h is declared
 * here with the same signature, value and layout, so programs written against
 * librpma compile unchanged against this header and link against //rpma
 * instead of -lrpma (or run against the drop-in librpma.so.0).
 *
 * Which NIC is behind these calls is chosen at run time, without code change:
 * the fake NIC by default, the real rdma-core stack when the environment sets
 * RPMA_HARNESS_BACKEND=rdma-core (see rpma/harness.h for the C++ API tests
 * use).
 *
 * Names, types, macro values and error semantics follow librpma 1.3 (the
 * rpma_*(3) man pages are the specification). Every function returns 0 on
 * success or a negative RPMA_E_* code; on failure no output argument is
 * written. The comments below are this project's summaries; where a comment
 * and the man page disagree, the man page wins and the code is a bug.
 *
 * Example (the active side of a write with immediate data):
 *
 *	struct ibv_context *dev;
 *	struct rpma_peer *peer;
 *	struct rpma_conn_req *req;
 *	struct rpma_conn *conn;
 *	rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
 *	rpma_utils_get_ibv_context("192.168.0.1", RPMA_UTIL_IBV_CONTEXT_REMOTE,
 *			&dev);
 *	rpma_peer_new(dev, &peer);
 *	rpma_conn_req_new(peer, "192.168.0.1", "7204", NULL, &req);
 *	rpma_conn_req_connect(&req, NULL, &conn);
 *	... wait for RPMA_CONN_ESTABLISHED with rpma_conn_next_event() ...
 *	rpma_write_with_imm(conn, dst, 0, src, 0, len,
 *			RPMA_F_COMPLETION_ALWAYS, 0x1234, my_context);
 *	rpma_conn_wait(conn, 0, &cq, NULL);  (a shared completion channel)
 */

/*
 * Debian's librpma-dev installs /usr/include/librpma.h (librpma 1.2) with the
 * same include guard. Included first, it would make this file a silent no-op
 * and the program would get 1.2's declarations: say so instead.
 */
#if defined(LIBRPMA_H) && !defined(RPMA_HARNESS_LIBRPMA_H)
#error "rpma-harness: another librpma.h (Debian's librpma-dev installs /usr/include/librpma.h) was included before the harness's rpma/librpma.h; include <librpma.h> with the harness's include directory first (Bazel: deps @rpma_harness//rpma; pkg-config --cflags rpma-harness; CMake: rpma_harness::rpma)"
#endif

#ifndef LIBRPMA_H
#define LIBRPMA_H 1
/* This is rpma-harness's librpma.h (rpma/librpma_check.h tests for it). */
#define RPMA_HARNESS_LIBRPMA_H 1

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rpma_conn_wait() flag reserved by librpma 1.3 (no function takes it yet). */
#define RPMA_W_WAIT_FOR_COMPLETION (1)

/* ---- error codes ---- */

#define RPMA_E_UNKNOWN (-100000)  /* unknown error */
#define RPMA_E_NOSUPP (-100001)   /* not supported */
#define RPMA_E_PROVIDER (-100002) /* the provider (verbs / rdma_cm) failed */
#define RPMA_E_NOMEM (-100003)    /* out of memory */
#define RPMA_E_INVAL (-100004)    /* invalid argument */
#define RPMA_E_NO_COMPLETION (-100005)  /* no completion available now */
#define RPMA_E_NO_EVENT (-100006)       /* no event available now */
#define RPMA_E_AGAIN (-100007)          /* temporary error, try again */
#define RPMA_E_SHARED_CHANNEL (-100008) /* the completion channel is shared */
#define RPMA_E_NOT_SHARED_CHNL \
  (-100009) /* the completion channel is not shared */

/* A readable description of an RPMA_E_* code; never NULL. */
const char *rpma_err_2str(int ret);

/* ---- devices ---- */

#define RPMA_DEFAULT_TIMEOUT_MS 1000

enum rpma_util_ibv_context_type {
  RPMA_UTIL_IBV_CONTEXT_LOCAL, /* the device that owns the address */
  RPMA_UTIL_IBV_CONTEXT_REMOTE /* the device that reaches the address */
};

/* RPMA_E_INVAL: addr or ibv_ctx_ptr NULL, or unknown type.
 * RPMA_E_PROVIDER: no device for that address (the reason is logged). */
int rpma_utils_get_ibv_context(const char *addr,
                               enum rpma_util_ibv_context_type type,
                               struct ibv_context **ibv_ctx_ptr);

/* *is_odp_capable = 1 when the device supports on-demand paging for RC
 * RDMA writes and reads (ibv_query_device_ex odp_caps), else 0.
 * RPMA_E_INVAL: a NULL argument. RPMA_E_PROVIDER: the query failed. */
int rpma_utils_ibv_context_is_odp_capable(struct ibv_context *ibv_ctx,
                                          int *is_odp_capable);

/* ---- peer configuration: what the remote side may assume of this one ---- */

struct rpma_peer_cfg;

/* A new configuration; direct_write_to_pmem is false. */
int rpma_peer_cfg_new(struct rpma_peer_cfg **pcfg_ptr);
int rpma_peer_cfg_delete(struct rpma_peer_cfg **pcfg_ptr);
/* Whether an RDMA write into this peer's PMem is durable once flushed with
 * RPMA_FLUSH_TYPE_PERSISTENT (the platform's DDIO is off, ADR / eADR). */
int rpma_peer_cfg_set_direct_write_to_pmem(struct rpma_peer_cfg *pcfg,
                                           bool supported);
int rpma_peer_cfg_get_direct_write_to_pmem(const struct rpma_peer_cfg *pcfg,
                                           bool *supported);
/* The descriptor carries the configuration to the other side (for example
 * in connection private data); rpma_peer_cfg_get_descriptor_size() bytes. */
int rpma_peer_cfg_get_descriptor(const struct rpma_peer_cfg *pcfg, void *desc);
int rpma_peer_cfg_get_descriptor_size(const struct rpma_peer_cfg *pcfg,
                                      size_t *desc_size);
int rpma_peer_cfg_from_descriptor(const void *desc, size_t desc_size,
                                  struct rpma_peer_cfg **pcfg_ptr);

/* ---- peer: a protection domain on a device ---- */

struct rpma_peer;

int rpma_peer_new(struct ibv_context *ibv_ctx, struct rpma_peer **peer_ptr);
/* *peer_ptr == NULL is a no-op; on success *peer_ptr is set to NULL. */
int rpma_peer_delete(struct rpma_peer **peer_ptr);

/* ---- memory regions ---- */

struct rpma_mr_local;
struct rpma_mr_remote;

#define RPMA_MR_USAGE_READ_SRC (1 << 0)
#define RPMA_MR_USAGE_READ_DST (1 << 1)
#define RPMA_MR_USAGE_WRITE_SRC (1 << 2)
#define RPMA_MR_USAGE_WRITE_DST (1 << 3)
#define RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY (1 << 4)
#define RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT (1 << 5)
#define RPMA_MR_USAGE_SEND (1 << 6)
#define RPMA_MR_USAGE_RECV (1 << 7)

/* RPMA_E_INVAL: a NULL pointer, size == 0 or usage == 0.
 * RPMA_E_PROVIDER: the registration failed (the reason is logged). */
int rpma_mr_reg(struct rpma_peer *peer, void *ptr, size_t size, int usage,
                struct rpma_mr_local **mr_ptr);
int rpma_mr_dereg(struct rpma_mr_local **mr_ptr);

/* The descriptor is what a peer needs to target the region remotely; it is
 * rpma_mr_get_descriptor_size() bytes long and has no alignment needs. */
int rpma_mr_get_descriptor(const struct rpma_mr_local *mr, void *desc);
int rpma_mr_get_descriptor_size(const struct rpma_mr_local *mr,
                                size_t *desc_size);
int rpma_mr_remote_from_descriptor(const void *desc, size_t desc_size,
                                   struct rpma_mr_remote **mr_ptr);
int rpma_mr_get_ptr(const struct rpma_mr_local *mr, void **ptr);
int rpma_mr_get_size(const struct rpma_mr_local *mr, size_t *size);
int rpma_mr_remote_get_size(const struct rpma_mr_remote *mr, size_t *size);
int rpma_mr_remote_get_flush_type(const struct rpma_mr_remote *mr,
                                  int *flush_type);
int rpma_mr_remote_delete(struct rpma_mr_remote **mr_ptr);
/* ibv_advise_mr(3) on [offset, offset + len) of an ODP-registered region:
 * advice is an enum ibv_advise_mr_advice, flags IBV_ADVISE_MR_FLAG_*.
 * RPMA_E_INVAL: mr NULL, or the provider said EINVAL / EFAULT.
 * RPMA_E_NOSUPP: the provider said EOPNOTSUPP (no ODP, or no advise).
 * RPMA_E_PROVIDER: any other provider failure. */
int rpma_mr_advise(struct rpma_mr_local *mr, size_t offset, size_t len,
                   int advice, uint32_t flags);

/* ---- connection configuration ---- */

struct rpma_conn_cfg;

/* Defaults: timeout RPMA_DEFAULT_TIMEOUT_MS, cq 10, rcq 0 (receives complete
 * on the main CQ), sq 10, rq 10. */
int rpma_conn_cfg_new(struct rpma_conn_cfg **cfg_ptr);
int rpma_conn_cfg_delete(struct rpma_conn_cfg **cfg_ptr);
int rpma_conn_cfg_set_timeout(struct rpma_conn_cfg *cfg, int timeout_ms);
int rpma_conn_cfg_get_timeout(const struct rpma_conn_cfg *cfg, int *timeout_ms);
int rpma_conn_cfg_set_cq_size(struct rpma_conn_cfg *cfg, uint32_t cq_size);
int rpma_conn_cfg_get_cq_size(const struct rpma_conn_cfg *cfg,
                              uint32_t *cq_size);
int rpma_conn_cfg_set_rcq_size(struct rpma_conn_cfg *cfg, uint32_t rcq_size);
int rpma_conn_cfg_get_rcq_size(const struct rpma_conn_cfg *cfg,
                               uint32_t *rcq_size);
int rpma_conn_cfg_set_sq_size(struct rpma_conn_cfg *cfg, uint32_t sq_size);
int rpma_conn_cfg_get_sq_size(const struct rpma_conn_cfg *cfg,
                              uint32_t *sq_size);
int rpma_conn_cfg_set_rq_size(struct rpma_conn_cfg *cfg, uint32_t rq_size);
int rpma_conn_cfg_get_rq_size(const struct rpma_conn_cfg *cfg,
                              uint32_t *rq_size);
/* Whether the connection's CQ and receive CQ share one completion channel
 * (default: false). Shared, the connection is waited on with
 * rpma_conn_wait() / rpma_conn_get_compl_fd(); rpma_cq_wait() on either CQ
 * fails with RPMA_E_SHARED_CHANNEL (rpma_cq_get_fd() gives the shared fd). */
int rpma_conn_cfg_set_compl_channel(struct rpma_conn_cfg *cfg, bool shared);
int rpma_conn_cfg_get_compl_channel(const struct rpma_conn_cfg *cfg,
                                    bool *shared);

/* ---- shared receive queues ---- */

struct rpma_srq;

/* The connection's receives come from `srq` (NULL: its own receive queue);
 * without an rcq of its own the connection's receives complete on the SRQ's
 * receive CQ, if it has one. */
int rpma_conn_cfg_set_srq(struct rpma_conn_cfg *cfg, struct rpma_srq *srq);
int rpma_conn_cfg_get_srq(const struct rpma_conn_cfg *cfg,
                          struct rpma_srq **srq_ptr);

/* ---- connections ---- */

struct rpma_conn;
struct rpma_cq;

enum rpma_conn_event {
  RPMA_CONN_UNDEFINED = -1, /* no event (yet) */
  RPMA_CONN_ESTABLISHED,    /* the connection is up */
  RPMA_CONN_CLOSED,         /* one side disconnected */
  RPMA_CONN_LOST,           /* the connection broke */
  RPMA_CONN_REJECTED,       /* the other side rejected the request */
  RPMA_CONN_UNREACHABLE     /* the other side could not be reached */
};

/* Private data exchanged while connecting (at most 56 bytes with a request,
 * 196 with an accept, by rdma_cm's limits). Owned by the object it came from.
 */
struct rpma_conn_private_data {
  void *ptr;
  uint8_t len;
};

const char *rpma_utils_conn_event_2str(enum rpma_conn_event conn_event);

/* The fd becomes readable when rpma_conn_next_event() has an event. */
int rpma_conn_get_event_fd(const struct rpma_conn *conn, int *fd);
/* RPMA_E_NO_EVENT when the event fd is non-blocking and nothing is pending. */
int rpma_conn_next_event(struct rpma_conn *conn, enum rpma_conn_event *event);
/* The private data the other side sent with its request or its accept. */
int rpma_conn_get_private_data(const struct rpma_conn *conn,
                               struct rpma_conn_private_data *pdata);
/* Takes in the remote peer's configuration (usually from its descriptor in
 * the private data): rpma_flush(RPMA_FLUSH_TYPE_PERSISTENT) is allowed only
 * when it says direct_write_to_pmem. RPMA_E_INVAL: a NULL argument. */
int rpma_conn_apply_remote_peer_cfg(struct rpma_conn *conn,
                                    const struct rpma_peer_cfg *pcfg);
int rpma_conn_get_qp_num(const struct rpma_conn *conn, uint32_t *qp_num);
int rpma_conn_get_cq(const struct rpma_conn *conn, struct rpma_cq **cq_ptr);
/* *rcq_ptr is NULL when the connection has no separate receive CQ. */
int rpma_conn_get_rcq(const struct rpma_conn *conn, struct rpma_cq **rcq_ptr);
/* The fd of the connection's shared completion channel (readable when either
 * CQ has a completion event). RPMA_E_NOT_SHARED_CHNL without one. */
int rpma_conn_get_compl_fd(const struct rpma_conn *conn, int *fd);
/* Waits on the shared completion channel, acknowledges the event, re-arms
 * the CQ that fired and returns it in *cq (*is_rcq tells whether it is the
 * receive CQ; is_rcq may be NULL). flags is reserved and ignored.
 * RPMA_E_NOT_SHARED_CHNL: the connection has no shared channel.
 * RPMA_E_NO_COMPLETION: the fd is non-blocking and no event is pending.
 * RPMA_E_UNKNOWN: the event names neither of the connection's CQs. */
int rpma_conn_wait(struct rpma_conn *conn, int flags, struct rpma_cq **cq,
                   bool *is_rcq);
int rpma_conn_disconnect(struct rpma_conn *conn);
int rpma_conn_delete(struct rpma_conn **conn_ptr);

/* ---- connection requests ---- */

struct rpma_conn_req;

/* The active side: resolve addr:port and prepare the queues. cfg may be NULL.
 */
int rpma_conn_req_new(struct rpma_peer *peer, const char *addr,
                      const char *port, const struct rpma_conn_cfg *cfg,
                      struct rpma_conn_req **req_ptr);
/* Drops a request; a received (passive) request is rejected. */
int rpma_conn_req_delete(struct rpma_conn_req **req_ptr);
/* Connects (active) or accepts (passive); *req_ptr is consumed either way.
 * RPMA_E_INVAL also when pdata != NULL but pdata->ptr == NULL or pdata->len ==
 * 0. */
int rpma_conn_req_connect(struct rpma_conn_req **req_ptr,
                          const struct rpma_conn_private_data *pdata,
                          struct rpma_conn **conn_ptr);
/* Posts a receive before the connection exists (so that the first message or
 * write with immediate data has somewhere to land). */
int rpma_conn_req_recv(struct rpma_conn_req *req, struct rpma_mr_local *dst,
                       size_t offset, size_t len, const void *op_context);
int rpma_conn_req_get_private_data(const struct rpma_conn_req *req,
                                   struct rpma_conn_private_data *pdata);

/* ---- endpoints (the passive side) ---- */

struct rpma_ep;

int rpma_ep_listen(struct rpma_peer *peer, const char *addr, const char *port,
                   struct rpma_ep **ep_ptr);
int rpma_ep_shutdown(struct rpma_ep **ep_ptr);
/* The fd becomes readable when a connection request is pending. */
int rpma_ep_get_fd(const struct rpma_ep *ep, int *fd);
/* RPMA_E_NO_EVENT when the fd is non-blocking and no request is pending. */
int rpma_ep_next_conn_req(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
                          struct rpma_conn_req **req_ptr);

/* ---- shared receive queue configuration ---- */

struct rpma_srq_cfg;

/* Defaults: rq 100, rcq 100 (0: no receive CQ of the SRQ's own). */
int rpma_srq_cfg_new(struct rpma_srq_cfg **cfg_ptr);
int rpma_srq_cfg_delete(struct rpma_srq_cfg **cfg_ptr);
int rpma_srq_cfg_set_rq_size(struct rpma_srq_cfg *cfg, uint32_t rq_size);
int rpma_srq_cfg_get_rq_size(const struct rpma_srq_cfg *cfg, uint32_t *rq_size);
int rpma_srq_cfg_set_rcq_size(struct rpma_srq_cfg *cfg, uint32_t rcq_size);
int rpma_srq_cfg_get_rcq_size(const struct rpma_srq_cfg *cfg,
                              uint32_t *rcq_size);

/* ---- shared receive queues ---- */

/* An SRQ (ibv_create_srq) on the peer's PD with, unless the cfg's rcq size is
 * 0, its own receive CQ. cfg may be NULL (the defaults). */
int rpma_srq_new(struct rpma_peer *peer, struct rpma_srq_cfg *cfg,
                 struct rpma_srq **srq_ptr);
int rpma_srq_delete(struct rpma_srq **srq_ptr);
/* Posts one receive on the SRQ; any connection using it may consume it.
 * RPMA_E_INVAL: srq NULL, or dst NULL with offset or len. */
int rpma_srq_recv(struct rpma_srq *srq, struct rpma_mr_local *dst,
                  size_t offset, size_t len, const void *op_context);
/* *rcq_ptr is NULL when the SRQ has no receive CQ of its own. */
int rpma_srq_get_rcq(const struct rpma_srq *srq, struct rpma_cq **rcq_ptr);

/* ---- data transfer ---- */

/* Generate a completion only on error ... */
#define RPMA_F_COMPLETION_ON_ERROR (1 << 0)
/* ... or always. */
#define RPMA_F_COMPLETION_ALWAYS (1 << 1 | RPMA_F_COMPLETION_ON_ERROR)

/* One IBV_WR_RDMA_READ of [src + src_offset, +len) into [dst + dst_offset).
 * RPMA_E_INVAL: conn == NULL or flags == 0; exactly one of src / dst is NULL;
 * or both NULL while an offset or len is non-zero (both NULL and zeros is the
 * 0-byte read). RPMA_E_PROVIDER: ibv_post_send failed. */
int rpma_read(struct rpma_conn *conn, struct rpma_mr_local *dst,
              size_t dst_offset, const struct rpma_mr_remote *src,
              size_t src_offset, size_t len, int flags, const void *op_context);

/* RPMA_E_INVAL: conn == NULL or flags == 0; exactly one of src / dst is NULL;
 * or both are NULL while an offset or len is non-zero. Both NULL with zero
 * offsets and len is the 0-byte form. RPMA_E_PROVIDER: ibv_post_send failed. */
int rpma_write(struct rpma_conn *conn, struct rpma_mr_remote *dst,
               size_t dst_offset, const struct rpma_mr_local *src,
               size_t src_offset, size_t len, int flags,
               const void *op_context);
/* As rpma_write, and the other side's posted receive completes with
 * IBV_WC_RECV_RDMA_WITH_IMM and imm (in network byte order in wc.imm_data). */
int rpma_write_with_imm(struct rpma_conn *conn, struct rpma_mr_remote *dst,
                        size_t dst_offset, const struct rpma_mr_local *src,
                        size_t src_offset, size_t len, int flags, uint32_t imm,
                        const void *op_context);

/* The remote offset an atomic write must be a multiple of. */
#define RPMA_ATOMIC_WRITE_ALIGNMENT 8

/* Writes the 8 bytes of src atomically at dst + dst_offset, ordered after
 * every earlier WR of the connection (fenced).
 * RPMA_E_INVAL: conn, dst or src NULL; dst_offset not a multiple of
 * RPMA_ATOMIC_WRITE_ALIGNMENT; flags == 0. RPMA_E_PROVIDER: posting failed. */
int rpma_atomic_write(struct rpma_conn *conn, struct rpma_mr_remote *dst,
                      size_t dst_offset, const char src[8], int flags,
                      const void *op_context);

/* How far rpma_flush() pushes earlier writes. */
enum rpma_flush_type {
  /* into the remote persistent domain */
  RPMA_FLUSH_TYPE_PERSISTENT,
  /* far enough that the remote CPU sees them */
  RPMA_FLUSH_TYPE_VISIBILITY,
};

/* Makes the writes to [dst + dst_offset, +len) that completed before it
 * visible or persistent (as `type` asks) by the time it completes.
 * RPMA_E_INVAL: conn or dst NULL, flags == 0, or an unknown type.
 * RPMA_E_NOSUPP: PERSISTENT on a region not registered for it or a peer
 * whose applied configuration lacks direct_write_to_pmem; VISIBILITY on a
 * region registered for neither flush type.
 * RPMA_E_PROVIDER: posting failed. */
int rpma_flush(struct rpma_conn *conn, struct rpma_mr_remote *dst,
               size_t dst_offset, size_t len, enum rpma_flush_type type,
               int flags, const void *op_context);

/* RPMA_E_INVAL: conn == NULL, flags == 0, or src == NULL with offset or len. */
int rpma_send(struct rpma_conn *conn, const struct rpma_mr_local *src,
              size_t offset, size_t len, int flags, const void *op_context);
int rpma_send_with_imm(struct rpma_conn *conn, const struct rpma_mr_local *src,
                       size_t offset, size_t len, int flags, uint32_t imm,
                       const void *op_context);
/* RPMA_E_INVAL: conn == NULL, or dst == NULL with offset or len. */
int rpma_recv(struct rpma_conn *conn, struct rpma_mr_local *dst, size_t offset,
              size_t len, const void *op_context);

/* ---- completions ---- */

int rpma_cq_get_fd(const struct rpma_cq *cq, int *fd);
/* Waits for the next completion event of the CQ and re-arms it.
 * RPMA_E_NO_COMPLETION when the fd is non-blocking and nothing is pending;
 * RPMA_E_SHARED_CHANNEL when the CQ's channel is the connection's shared one
 * (use rpma_conn_wait()). */
int rpma_cq_wait(struct rpma_cq *cq);
/* Polls up to num_entries completions; each ibv_wc is the provider's, as is.
 * RPMA_E_NO_COMPLETION when there is none; num_entries_got may be NULL only
 * when num_entries == 1. */
int rpma_cq_get_wc(struct rpma_cq *cq, int num_entries, struct ibv_wc *wc,
                   int *num_entries_got);

/* ---- logging ---- */

/* The severity of a message, and the value of a threshold. */
enum rpma_log_level {
  /* as a threshold: nothing is logged */
  RPMA_LOG_DISABLED = -1,
  /* the library cannot go on at all */
  RPMA_LOG_LEVEL_FATAL,
  /* the library cannot go on correctly */
  RPMA_LOG_LEVEL_ERROR,
  /* an error the caller may handle */
  RPMA_LOG_LEVEL_WARNING,
  /* occasional news, such as a connection being established */
  RPMA_LOG_LEVEL_NOTICE,
  /* frequent news, such as each operation */
  RPMA_LOG_LEVEL_INFO,
  /* details for debugging */
  RPMA_LOG_LEVEL_DEBUG,
};

enum rpma_log_threshold {
  /* messages above this level are not logged at all (default WARNING); the
   * default function applies it to syslog */
  RPMA_LOG_THRESHOLD,
  /* a second threshold for the log function's own use (default DISABLED);
   * the default function applies it to stderr */
  RPMA_LOG_THRESHOLD_AUX,
  RPMA_LOG_THRESHOLD_MAX
};

/* RPMA_E_INVAL: threshold not THRESHOLD or THRESHOLD_AUX, or level not an
 * enum rpma_log_level value. */
int rpma_log_set_threshold(enum rpma_log_threshold threshold,
                           enum rpma_log_level level);
/* RPMA_E_INVAL: threshold not THRESHOLD or THRESHOLD_AUX, or level NULL. */
int rpma_log_get_threshold(enum rpma_log_threshold threshold,
                           enum rpma_log_level *level);

/* A log function: receives every message at or below RPMA_LOG_THRESHOLD.
 * file_name may be NULL, and then line_no and function_name carry nothing. */
typedef void rpma_log_function(enum rpma_log_level level, const char *file_name,
                               const int line_no, const char *function_name,
                               const char *message_format, ...);

#define RPMA_LOG_USE_DEFAULT_FUNCTION (NULL)

/* Installs log_function, or the default (syslog and stderr) for
 * RPMA_LOG_USE_DEFAULT_FUNCTION. */
int rpma_log_set_function(rpma_log_function *log_function);

#ifdef __cplusplus
}
#endif

#endif /* LIBRPMA_H */
