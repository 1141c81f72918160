/*
 * example_common.h: what every example pair here shares. Each server and
 * client is an ordinary librpma program (only <librpma.h>), written as a
 * librpma user writes one: the log threshold first, blocking calls, and
 * completions collected with rpma_conn_wait() on the connection's shared
 * completion channel.
 *
 *   struct rpma_peer *peer;
 *   struct rpma_conn_cfg *cfg;
 *   struct rpma_conn *conn;
 *   example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer);
 *   example_conn_cfg_new(0, &cfg);
 *   example_client_connect(peer, addr, port, cfg, NULL, &conn);
 *   ... rpma_write(conn, ...); example_wait(conn, IBV_WC_RDMA_WRITE, &wc);
 *   example_disconnect(&conn);
 *
 * Every helper returns 0 or a librpma error code (negative), or -1 for a
 * mismatch it has already described on stderr.
 */
#ifndef EXAMPLES_COMMON_EXAMPLE_COMMON_H_
#define EXAMPLES_COMMON_EXAMPLE_COMMON_H_

#include <librpma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most private data rdma_cm carries with a connect (RDMA_PS_TCP: 56). */
#define EXAMPLE_PDATA_MAX 56

/* Prints "<who>: <what> failed: <librpma's text>" when ret != 0; returns ret.
 */
int example_check(int ret, const char *who, const char *what);

/* A peer on the device that owns (server) or reaches (client) `addr`. */
int example_peer_new(const char *addr, enum rpma_util_ibv_context_type type,
                     struct rpma_peer **peer);

/*
 * A connection configuration whose CQs share one completion channel, so that
 * rpma_conn_wait() works; rcq_size > 0 also asks for a separate receive CQ.
 */
int example_conn_cfg_new(uint32_t rcq_size, struct rpma_conn_cfg **cfg);

/*
 * rpma_ep_listen(), then "<who>: listening on ADDR:PORT" on stdout (the
 * soft-RoCE VM runner starts the clients once it has seen that line).
 */
int example_listen(const char *who, struct rpma_peer *peer, const char *addr,
                   const char *port, struct rpma_ep **ep);

/*
 * The next connection request on `ep`: optionally posts one receive
 * (recv_mr != NULL) before accepting, accepts with `pdata` and waits for
 * RPMA_CONN_ESTABLISHED.
 */
int example_accept(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
                   struct rpma_mr_local *recv_mr, size_t recv_offset,
                   size_t recv_len, const struct rpma_conn_private_data *pdata,
                   struct rpma_conn **conn);

/* Connects to addr:port with `pdata` and waits for RPMA_CONN_ESTABLISHED. */
int example_client_connect(struct rpma_peer *peer, const char *addr,
                           const char *port, const struct rpma_conn_cfg *cfg,
                           const struct rpma_conn_private_data *pdata,
                           struct rpma_conn **conn);

/*
 * The next completion of `conn` from its CQ or its receive CQ, blocking in
 * rpma_conn_wait() while both are empty (both are polled before every wait:
 * one CQ event may stand for several completions). *from_rcq (may be NULL)
 * tells which CQ it came from.
 */
int example_next_wc(struct rpma_conn *conn, struct ibv_wc *wc, bool *from_rcq);

/* The next completion, which must be a success of `opcode`. */
int example_wait(struct rpma_conn *conn, enum ibv_wc_opcode opcode,
                 struct ibv_wc *wc);

/*
 * One successful completion of each of the n distinct `opcodes`, in whatever
 * order the NIC delivers them (a send's completion and the peer's answer to it
 * may come either way round); wcs[i] gets the one of opcodes[i].
 */
int example_wait_all(struct rpma_conn *conn, int n,
                     const enum ibv_wc_opcode *opcodes, struct ibv_wc *wcs);

/* Waits for the next connection event, which must be `expected`. */
int example_expect_event(struct rpma_conn *conn, enum rpma_conn_event expected);

/* rpma_conn_disconnect(), RPMA_CONN_CLOSED, rpma_conn_delete(). */
int example_disconnect(struct rpma_conn **conn);

/* RPMA_CONN_CLOSED (the peer disconnected), then the same teardown. */
int example_wait_closed(struct rpma_conn **conn);

/* Fills buf with a byte pattern that depends on seed and position. */
void example_fill(void *buf, size_t len, uint32_t seed);
/*
 * 0 if buf holds example_fill(seed)'s pattern; else -1, after saying on
 * stderr where the first differing byte is.
 */
int example_verify(const char *who, const void *buf, size_t len, uint32_t seed);

/* Page-aligned, zeroed memory (free() it). */
void *example_malloc(size_t size);

/*
 * "Persistent" memory for the flush examples: an ordinary file of `size`
 * bytes under $TEST_TMPDIR, else $TMPDIR, else /tmp, mapped MAP_SHARED
 * (and removed by example_pmem_unmap). No PMem is involved;
 * example_persist() msync()s a range as a stand-in for pmem_persist().
 */
struct example_pmem {
  char path[256];
  void *ptr;
  size_t size;
};
int example_pmem_map(const char *name, size_t size, struct example_pmem *pmem);
int example_persist(const struct example_pmem *pmem, size_t offset, size_t len);
/* Reads the file back (pread, not the mapping) into buf. */
int example_pmem_read_back(const struct example_pmem *pmem, size_t offset,
                           void *buf, size_t len);
void example_pmem_unmap(struct example_pmem *pmem);

/*
 * The private data of a server that offers persistent flushes (04, 13):
 * [mr descriptor size][peer cfg descriptor size][mr descriptor][peer cfg
 * descriptor]. The server fills `buf` (EXAMPLE_PDATA_MAX bytes) and
 * `pdata` from its region and its peer configuration; the client reads
 * both back from its connection, and applies the peer configuration to the
 * connection (rpma_conn_apply_remote_peer_cfg), so that
 * rpma_flush(RPMA_FLUSH_TYPE_PERSISTENT) may be used. Errors are said on
 * stderr under `who`.
 */
int example_pdata_put_mr_pcfg(const char *who, const struct rpma_mr_local *mr,
                              const struct rpma_peer_cfg *pcfg,
                              unsigned char *buf,
                              struct rpma_conn_private_data *pdata);
int example_pdata_get_mr_pcfg(const char *who, struct rpma_conn *conn,
                              struct rpma_mr_remote **mr,
                              struct rpma_peer_cfg **pcfg);

/* "<who>: <what>" on stdout, flushed (so interleaved output stays whole). */
void example_say(const char *who, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif  // EXAMPLES_COMMON_EXAMPLE_COMMON_H_
