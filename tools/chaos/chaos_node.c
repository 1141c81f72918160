/*
 * chaos_node.c: one process of the fabric chaos test (chaos.sh). An
 * ordinary librpma program: a server that serves one connection after
 * another, or a client that connects, runs a seeded mix of operations and
 * disconnects, round after round. Either may be killed, stopped or lose its
 * peer at any moment; what it must never do is hang, accept wrong bytes or
 * keep resources a finished connection held.
 *
 *   chaos_node server ADDR PORT SEED STOPFILE
 *   chaos_node client ADDR PORT SEED ROUNDS OPS
 *
 * The server's region: 8 chunks of 4 KiB the client writes with immediate
 * data (imm = chunk << 24 | pattern seed; the server checks the chunk when
 * the receive completes and answers with an 8-byte send, which the client
 * waits for before its next operation), then 8 chunks the server filled at start with
 * example_fill(SEED + chunk), which the client reads back and checks. Sends
 * carry [seed][example_fill(seed)]. Flushes (visibility) follow writes.
 * A burst fills the fabric's rings: two writes of 3 MiB each (a
 * shared-memory ring holds 2 MiB, and a QP has one request on the wire at a
 * time, so a message must be larger than the ring to fill it) into the
 * region's burst area, posted at once, the second with immediate data
 * BURST_MARK << 24 | seed; the server checks both slots (slot k:
 * example_fill(seed + k)) when it completes.
 *
 * Every wait has a deadline (CHAOS_WAIT_S, default 20 s, beyond the longest
 * stop chaos.sh makes): missing it is a hang -- but when sequenced (below),
 * where the Sequencer's deadlock report is the hang. Exit codes:
 *   0  done (the server: STOPFILE appeared, or sequenced: the fabric went
 *      quiet; resources back to baseline)
 *   2  usage
 *   3  HANG: a completion or an event did not come within the deadline
 *   4  the peer was lost (an error completion, a refused or broken
 *      connection): a clean error, what a survivor should see
 *   5  LOST BYTES: a success completion promised bytes that are not there
 *   6  LEAK: fds, memfds, threads or heap not back to the baseline taken
 *      after the first connection's teardown
 *   7  asked to exit (SIGUSR1): exit(3) at the next post, with that
 *      operation on the wire (a burst's 3 MiB frame half sent), without
 *      disconnecting: the static destructors run while the NIC's threads
 *      work, and the peer sees the link end mid-frame
 * Each process ends with one line "chaos_node: <role> ops N conns N exit N"
 * (but for 7, which ends at once).
 *
 * For the soak (soak.sh): CHAOS_PROGRESS set prints "chaos_node: <role>
 * progress ops N conns N" at most once a second as operations complete,
 * and CHAOS_STOPFILE ends a client (done) before its next round once the
 * file exists.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "example_common.h"

#define CHUNK 4096
#define CHUNKS 8
#define READ_AREA (CHUNKS * CHUNK)
#define BURST_AREA (2 * CHUNKS * CHUNK)
#define BURST_SLOT (3 << 20)
#define BURST_SLOTS 2
#define REGION (BURST_AREA + BURST_SLOTS * BURST_SLOT)
#define BURST_MARK CHUNKS /* imm >> 24 of a burst's last write */
#define MSG 256
#define RECVS 4

enum { kDone = 0, kUsage = 2, kHang = 3, kPeerLost = 4, kLostBytes = 5,
       kLeak = 6, kExitedMidFrame = 7,
       kQuiet = 100 /* sequenced: no request, and none can come (no exit) */ };

static const char *g_role = "?";
static long g_ops = 0, g_conns = 0;

/* SIGUSR1: exit at the next post (exit code 7). */
static volatile sig_atomic_t g_exit_asked = 0;
static void ask_exit(int sig) {
  (void)sig;
  g_exit_asked = 1;
}
/*
 * LeakSanitizer's hook (sanitizer/lsan_interface.h), read at exit: an exit
 * mid-frame leaves every rpma object live on purpose, and the leak report
 * would turn exit 7 into an abort (134 under abort_on_error). Any other
 * end is checked as usual. Without LSan nobody calls it.
 */
static volatile sig_atomic_t g_exiting_mid_frame = 0;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return g_exiting_mid_frame; }

/* Right after a post: the operation is on its way. */
static void exit_if_asked(void) {
  if (!g_exit_asked) return;
  printf("chaos_node: %s exits mid-frame\n", g_role);
  g_exiting_mid_frame = 1;
  exit(kExitedMidFrame);
}

/*
 * Sequenced (RPMA_HARNESS_FABRIC_SEQUENCE set: chaos.sh --sequenced runs
 * the nodes under the launcher's Sequencer): every NIC step of every
 * process happens in the order the seed decides, and only while every
 * process waits in a call the fake controls. So no wall clock here: events
 * are waited for with a blocking rpma_conn_next_event (not poll(2), which
 * the Sequencer cannot see), completions with empty polls (each a
 * releasable wait), and a hang is the Sequencer's deadlock report instead
 * of a deadline. The server polls its endpoint without blocking and ends
 * (done) the first time such a poll comes back empty: the Sequencer
 * releases an empty poll only when no process has a step left to run, so
 * no client can ever connect again.
 */
static int sequenced(void) {
  static int s = -1;
  if (s < 0) {
    const char *v = getenv("RPMA_HARNESS_FABRIC_SEQUENCE");
    s = v != NULL && *v != '\0';
  }
  return s;
}

static int finish(int code) {
  printf("chaos_node: %s ops %ld conns %ld exit %d\n", g_role, g_ops, g_conns,
         code);
  fflush(stdout);
  return code;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One operation completed and checked; the soak's progress line. */
static void count_op(void) {
  static double last = 0;
  static int progress = -1;
  g_ops++;
  if (progress < 0) progress = getenv("CHAOS_PROGRESS") != NULL;
  if (!progress) return;
  const double now = now_s();
  if (now - last < 1) return;
  last = now;
  printf("chaos_node: %s progress ops %ld conns %ld\n", g_role, g_ops,
         g_conns);
}

static double wait_limit_s(void) {
  const char *v = getenv("CHAOS_WAIT_S");
  const double s = v != NULL ? atof(v) : 0;
  return s > 0 ? s : 20;
}

/* ---- resources -------------------------------------------------------- */

struct resources {
  int fds, memfds, threads;
  size_t heap;
  char fd_list[2048];  /* "fd->target " each, to say which differ */
};

static void list_fds(char *out, size_t size) {
  out[0] = '\0';
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return;
  size_t used = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d)) continue;
    char link[300], target[256];
    snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
    const ssize_t len = readlink(link, target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    const int n = snprintf(out + used, size - used, "%s->%s ", e->d_name,
                           target);
    if (n < 0 || (size_t)n >= size - used) break;
    used += (size_t)n;
  }
  closedir(d);
}

static int count_dir(const char *path, int memfds_only) {
  DIR *d = opendir(path);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (memfds_only) {
      char link[512], target[512];
      snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
      const ssize_t len = readlink(link, target, sizeof(target) - 1);
      if (len <= 0) continue;
      target[len] = '\0';
      if (strncmp(target, "/memfd:", 7) != 0) continue;
    }
    n++;
  }
  closedir(d);
  return n - (memfds_only ? 0 : 1); /* opendir's own fd */
}

static struct resources snapshot(void) {
  struct resources r;
  r.fds = count_dir("/proc/self/fd", 0);
  r.memfds = count_dir("/proc/self/fd", 1);
  r.threads = count_dir("/proc/self/task", 0) + 1;
  /* In use in the arenas and in blocks of their own (mmapped: a large
   * table that keeps growing lives there, not in uordblks). */
  const struct mallinfo2 m = mallinfo2();
  r.heap = m.uordblks + m.hblkhd;
  list_fds(r.fd_list, sizeof(r.fd_list));
  return r;
}

/*
 * The baseline: a snapshot once the process's fds, memfds and threads stop
 * changing (two snapshots 10 ms apart agree; at most 2 s). A finished
 * connection's link is closed by the fabric thread a moment after
 * rpma_conn_delete returns, and with it go the bytes it had queued.
 */
static struct resources settled_snapshot(void) {
  struct resources then = snapshot();
  for (int i = 0; i < 200; ++i) {
    usleep(10000);
    const struct resources now = snapshot();
    if (now.fds == then.fds && now.memfds == then.memfds &&
        now.threads == then.threads)
      return now;
    then = now;
  }
  return then;
}

/*
 * Back to the baseline: no more fds, memfds or threads than then and a heap
 * no more than CHAOS_HEAP_SLACK bytes larger (default 256 KiB: allocators
 * keep some slack; a leak per connection over the rounds of a long run
 * grows past it). A link to a process that was killed may still have been
 * open then, and closed since; the last connection's link (and the bytes
 * it queued) and a thread that served a link may take a moment to go, so
 * this looks for up to 2 s.
 */
static int check_baseline(const struct resources *base) {
  const char *v = getenv("CHAOS_HEAP_SLACK");
  const size_t slack = v != NULL ? strtoul(v, NULL, 0) : (256u << 10);
  struct resources now = snapshot();
  for (int i = 0; i < 200; ++i) {
    if (now.fds <= base->fds && now.memfds <= base->memfds &&
        now.threads <= base->threads && now.heap <= base->heap + slack)
      break;
    usleep(10000);
    now = snapshot();
  }
  if (getenv("CHAOS_VERBOSE") != NULL)
    fprintf(stderr, "chaos_node: %s heap %zu -> %zu bytes\n", g_role,
            base->heap, now.heap);
  if (now.fds <= base->fds && now.memfds <= base->memfds &&
      now.threads <= base->threads && now.heap <= base->heap + slack)
    return 0;
  fprintf(stderr,
          "chaos_node: %s LEAK: fds %d -> %d, memfds %d -> %d, threads %d -> "
          "%d, heap %zu -> %zu bytes\n",
          g_role, base->fds, now.fds, base->memfds, now.memfds, base->threads,
          now.threads, base->heap, now.heap);
  fprintf(stderr, "  fds then: %s\n  fds now:  %s\n", base->fd_list,
          now.fd_list);
  return -1;
}

/* ---- waiting with a deadline ------------------------------------------ */

/* The next completion of cq into *wc: 1, or 0 after the deadline (a hang). */
static int next_wc(struct rpma_cq *cq, struct ibv_wc *wc) {
  const double deadline = now_s() + wait_limit_s();
  for (;;) {
    int got = 0;
    const int ret = rpma_cq_get_wc(cq, 1, wc, &got);
    if (ret == 0 && got == 1) return 1;
    if (ret != 0 && ret != RPMA_E_NO_COMPLETION) {
      fprintf(stderr, "chaos_node: %s: rpma_cq_get_wc: %s\n", g_role,
              rpma_err_2str(ret));
      return -1;
    }
    if (sequenced()) continue; /* each empty poll is a releasable wait */
    if (now_s() > deadline) return 0;
    usleep(50);
  }
}

/*
 * The next connection event within `limit` seconds: 1 with *event, 0 on
 * timeout, -1 on an error.
 */
static int next_event(struct rpma_conn *conn, double limit,
                      enum rpma_conn_event *event) {
  if (sequenced()) return rpma_conn_next_event(conn, event) == 0 ? 1 : -1;
  int fd = -1;
  if (rpma_conn_get_event_fd(conn, &fd)) return -1;
  struct pollfd p = {fd, POLLIN, 0};
  const double deadline = now_s() + limit;
  int r;
  do { /* a signal (SIGUSR1, SIGCONT) ends poll(2) early: poll on */
    const double left = deadline - now_s();
    r = poll(&p, 1, left > 0 ? (int)(left * 1000) : 0);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return 0;
  if (r < 0) return -1;
  return rpma_conn_next_event(conn, event) == 0 ? 1 : -1;
}

/* rpma_conn_delete, said on stderr when it fails (it must not). */
static void conn_delete(struct rpma_conn **conn) {
  const int ret = rpma_conn_delete(conn);
  if (ret)
    fprintf(stderr, "chaos_node: %s: rpma_conn_delete: %s\n", g_role,
            rpma_err_2str(ret));
}

/*
 * The end of an established connection: disconnects and waits for
 * RPMA_CONN_CLOSED, unless the peer's end (CLOSED or LOST) was seen
 * already; then deletes the conn. -1: the event never came (a hang).
 */
static int teardown(struct rpma_conn **conn, int closed) {
  if (*conn == NULL) return 0;
  int hang = 0;
  (void)rpma_conn_disconnect(*conn);
  while (!closed) {
    enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
    const int r = next_event(*conn, wait_limit_s(), &ev);
    if (r == 0) {
      fprintf(stderr, "chaos_node: %s HANG: no RPMA_CONN_CLOSED\n", g_role);
      hang = 1;
      break;
    }
    closed = r < 0 || ev == RPMA_CONN_CLOSED || ev == RPMA_CONN_LOST;
  }
  conn_delete(conn);
  return hang ? -1 : 0;
}

/* ---- server ------------------------------------------------------------ */

static int serve_one(struct rpma_ep *ep, struct rpma_conn_cfg *cfg,
                     char *region, struct rpma_mr_local *recv_mr, char *recvs,
                     struct rpma_mr_local *ack_mr, const char *pdata_buf,
                     size_t pdata_len) {
  struct rpma_conn_req *req = NULL;
  const int got = rpma_ep_next_conn_req(ep, cfg, &req);
  if (got == RPMA_E_NO_EVENT && sequenced()) return kQuiet;
  if (got) return kPeerLost;
  for (int i = 0; i < RECVS; ++i) {
    if (rpma_conn_req_recv(req, recv_mr, (size_t)i * MSG, MSG,
                           (void *)(uintptr_t)i)) {
      (void)rpma_conn_req_delete(&req);
      return kPeerLost;
    }
  }
  struct rpma_conn_private_data pdata = {(void *)pdata_buf,
                                         (uint8_t)pdata_len};
  struct rpma_conn *conn = NULL;
  if (rpma_conn_req_connect(&req, &pdata, &conn)) return kPeerLost;
  enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
  int r = next_event(conn, wait_limit_s(), &ev);
  if (r == 0) {
    fprintf(stderr, "chaos_node: server HANG: no RPMA_CONN_ESTABLISHED\n");
    conn_delete(&conn);
    return kHang;
  }
  if (r < 0 || ev != RPMA_CONN_ESTABLISHED) {
    conn_delete(&conn);
    return kPeerLost;
  }
  g_conns++;
  int closed = 0;
  struct rpma_cq *cq = NULL;
  (void)rpma_conn_get_cq(conn, &cq);
  int fd = -1;
  (void)rpma_conn_get_event_fd(conn, &fd);
  int code = kDone;
  for (;;) {
    /* The connection's end, if it came. */
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 1) {
      if (rpma_conn_next_event(conn, &ev) != 0 || ev == RPMA_CONN_CLOSED ||
          ev == RPMA_CONN_LOST) {
        closed = 1;
        break;
      }
    }
    struct ibv_wc wc;
    int got = 0;
    const int ret = rpma_cq_get_wc(cq, 1, &wc, &got);
    if (ret == RPMA_E_NO_COMPLETION || (ret == 0 && got == 0)) {
      usleep(100);
      continue;
    }
    if (ret != 0) break;
    if (wc.status != IBV_WC_SUCCESS) continue; /* flushed: the end comes */
    const size_t slot = (size_t)wc.wr_id;
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      const uint32_t imm = ntohl(wc.imm_data);
      const uint32_t chunk = imm >> 24;
      int bad;
      if (chunk == BURST_MARK) {
        bad = wc.byte_len != BURST_SLOT;
        for (uint32_t k = 0; k < BURST_SLOTS && !bad; ++k)
          bad = example_verify("chaos_node: server (burst)",
                               region + BURST_AREA + (size_t)k * BURST_SLOT,
                               BURST_SLOT, ((imm & 0xffffff) + k) & 0xffffff);
      } else {
        bad = chunk >= CHUNKS || wc.byte_len != CHUNK ||
              example_verify("chaos_node: server (write with imm)",
                             region + (size_t)chunk * CHUNK, CHUNK,
                             imm & 0xffffff);
      }
      if (bad) {
        fprintf(stderr,
                "chaos_node: server LOST BYTES: write with imm 0x%x, %u "
                "bytes\n",
                imm, wc.byte_len);
        code = kLostBytes;
        break;
      }
      count_op();
      /* Checked: the client may write this chunk again. */
      if (rpma_send(conn, ack_mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL))
        break;
      exit_if_asked();
    } else if (wc.opcode == IBV_WC_RECV) {
      uint32_t seed = 0;
      memcpy(&seed, recvs + slot * MSG, 4);
      if (wc.byte_len != MSG ||
          example_verify("chaos_node: server (send)", recvs + slot * MSG + 4,
                         MSG - 4, seed)) {
        fprintf(stderr, "chaos_node: server LOST BYTES: send of %u bytes\n",
                wc.byte_len);
        code = kLostBytes;
        break;
      }
      count_op();
    } else {
      continue;
    }
    if (slot >= RECVS || rpma_recv(conn, recv_mr, slot * MSG, MSG,
                                   (void *)(uintptr_t)slot))
      break;
  }
  if (teardown(&conn, closed) && code == kDone) code = kHang;
  return code;
}

static int server(const char *addr, const char *port, uint32_t seed,
                  const char *stopfile) {
  g_role = "server";
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *region_mr = NULL, *recv_mr = NULL, *ack_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_ep *ep = NULL;
  char *region = example_malloc(REGION);
  char *recvs = example_malloc(RECVS * MSG);
  char *ack = example_malloc(8);
  int have_base = 0, code = kDone;
  /* What failed before the loop ends the process with 1, after the same
   * clean-up as a normal end (under ASan a leak would turn it into an
   * abort, 134, and hide the message). */
  if (region == NULL || recvs == NULL || ack == NULL) {
    code = 1;
    goto out;
  }
  for (int c = 0; c < CHUNKS; ++c)
    example_fill(region + READ_AREA + (size_t)c * CHUNK, CHUNK, seed + c);
  if (example_check(
          example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
          "chaos_node: server", "rpma_peer_new") ||
      example_check(rpma_mr_reg(peer, region, REGION,
                                RPMA_MR_USAGE_WRITE_DST |
                                    RPMA_MR_USAGE_READ_SRC |
                                    RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
                                &region_mr),
                    "chaos_node: server", "rpma_mr_reg") ||
      example_check(
          rpma_mr_reg(peer, recvs, RECVS * MSG, RPMA_MR_USAGE_RECV, &recv_mr),
          "chaos_node: server", "rpma_mr_reg (receives)") ||
      example_check(rpma_mr_reg(peer, ack, 8, RPMA_MR_USAGE_SEND, &ack_mr),
                    "chaos_node: server", "rpma_mr_reg (acks)") ||
      example_check(rpma_conn_cfg_new(&cfg), "chaos_node: server",
                    "rpma_conn_cfg_new") ||
      example_check(example_listen("chaos_node: server", peer, addr, port,
                                   &ep),
                    "chaos_node: server", "rpma_ep_listen")) {
    code = 1;
    goto out;
  }
  /* [seed][descriptor] */
  char pdata[EXAMPLE_PDATA_MAX];
  size_t desc_size = 0;
  if (rpma_mr_get_descriptor_size(region_mr, &desc_size) ||
      desc_size + 4 > sizeof(pdata) ||
      rpma_mr_get_descriptor(region_mr, pdata + 4)) {
    code = 1;
    goto out;
  }
  memcpy(pdata, &seed, 4);
  int ep_fd = -1;
  (void)rpma_ep_get_fd(ep, &ep_fd);
  struct resources base;
  if (sequenced()) (void)fcntl(ep_fd, F_SETFL, O_NONBLOCK);
  while (sequenced() || access(stopfile, F_OK) != 0) {
    struct pollfd p = {ep_fd, POLLIN, 0};
    if (!sequenced() && poll(&p, 1, 100) != 1) continue;
    const int r = serve_one(ep, cfg, region, recv_mr, recvs, ack_mr, pdata,
                            desc_size + 4);
    if (r == kQuiet) break;
    if (r == kHang || r == kLostBytes) {
      code = r;
      break;
    }
    if (!have_base) {
      base = settled_snapshot();
      have_base = 1;
    }
  }
  if (code == kDone && have_base && check_baseline(&base)) code = kLeak;
out:
  if (ep != NULL) (void)rpma_ep_shutdown(&ep);
  (void)rpma_conn_cfg_delete(&cfg);
  (void)rpma_mr_dereg(&ack_mr);
  (void)rpma_mr_dereg(&recv_mr);
  (void)rpma_mr_dereg(&region_mr);
  (void)rpma_peer_delete(&peer);
  free(region);
  free(recvs);
  free(ack);
  return finish(code);
}

/* ---- client ------------------------------------------------------------ */

static uint32_t g_rand;
static uint32_t next_rand(void) {
  g_rand = g_rand * 1103515245u + 12345u;
  return g_rand >> 8;
}

/*
 * Waits for the completions of the operation in flight: `opcode`'s, and
 * with `ack` also the receive of the server's answer, in either order (a
 * send's completion and the peer's answer to it may come either way round).
 */
static int complete(struct rpma_cq *cq, enum ibv_wc_opcode opcode, int ack) {
  int want_op = 1, want_ack = ack;
  while (want_op || want_ack) {
    struct ibv_wc wc;
    const int r = next_wc(cq, &wc);
    if (r == 0) {
      fprintf(stderr,
              "chaos_node: client HANG: no completion of opcode %d%s\n",
              opcode, want_ack ? " or of the server's answer" : "");
      return kHang;
    }
    if (r < 0 || wc.status != IBV_WC_SUCCESS) return kPeerLost;
    if (want_op && wc.opcode == opcode) {
      want_op = 0;
    } else if (want_ack && wc.opcode == IBV_WC_RECV) {
      want_ack = 0;
    } else {
      fprintf(stderr, "chaos_node: client: completion opcode %d, expected %d\n",
              wc.opcode, opcode);
      return kLostBytes;
    }
  }
  return kDone;
}

static int one_round(struct rpma_peer *peer, const char *addr,
                     const char *port, int ops, char *src, char *dst,
                     char *burst, struct rpma_mr_local *src_mr,
                     struct rpma_mr_local *dst_mr,
                     struct rpma_mr_local *burst_mr,
                     struct rpma_mr_local *ack_mr, int burst_first) {
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn_req *req = NULL;
  struct rpma_conn *conn = NULL;
  struct rpma_mr_remote *remote = NULL;
  int code = kDone;
  /* A burst's writes in flight at once, and their error completions. */
  if (rpma_conn_cfg_new(&cfg)) return kPeerLost;
  if (rpma_conn_cfg_set_sq_size(cfg, BURST_SLOTS + 4) ||
      rpma_conn_cfg_set_cq_size(cfg, 2 * BURST_SLOTS + 8) ||
      rpma_conn_req_new(peer, addr, port, cfg, &req)) {
    (void)rpma_conn_cfg_delete(&cfg);
    return kPeerLost;
  }
  if (rpma_conn_req_recv(req, ack_mr, 0, 8, NULL) ||
      rpma_conn_req_connect(&req, NULL, &conn)) {
    if (req != NULL) (void)rpma_conn_req_delete(&req);
    (void)rpma_conn_cfg_delete(&cfg);
    return kPeerLost;
  }
  enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
  const int r = next_event(conn, wait_limit_s(), &ev);
  if (r == 0) {
    fprintf(stderr, "chaos_node: client HANG: no RPMA_CONN_ESTABLISHED\n");
    conn_delete(&conn);
    (void)rpma_conn_cfg_delete(&cfg);
    return kHang;
  }
  if (r < 0 || ev != RPMA_CONN_ESTABLISHED) {
    conn_delete(&conn);
    (void)rpma_conn_cfg_delete(&cfg);
    return kPeerLost;
  }
  g_conns++;
  struct rpma_conn_private_data pd = {NULL, 0};
  uint32_t server_seed = 0;
  if (rpma_conn_get_private_data(conn, &pd) || pd.len < 5 ||
      rpma_mr_remote_from_descriptor((char *)pd.ptr + 4, pd.len - 4,
                                     &remote)) {
    code = kPeerLost;
    goto out;
  }
  memcpy(&server_seed, pd.ptr, 4);
  struct rpma_cq *cq = NULL;
  (void)rpma_conn_get_cq(conn, &cq);
  for (int i = 0; i < ops && code == kDone; ++i) {
    const uint32_t r = next_rand() % 9;
    const uint32_t pick = r == 8 || (i == 0 && burst_first) ? 4 : r % 4;
    const uint32_t chunk = next_rand() % CHUNKS;
    const uint32_t seed = next_rand() & 0xffffff;
    int ret = 0;
    enum ibv_wc_opcode want = IBV_WC_RDMA_WRITE;
    switch (pick) {
      case 0: /* write with imm, checked by the server */
        example_fill(src, CHUNK, seed);
        ret = rpma_write_with_imm(conn, remote, (size_t)chunk * CHUNK, src_mr,
                                  0, CHUNK, RPMA_F_COMPLETION_ALWAYS,
                                  chunk << 24 | seed, NULL);
        want = IBV_WC_RDMA_WRITE;
        break;
      case 1: /* send, checked by the server */
        memcpy(src, &seed, 4);
        example_fill(src + 4, MSG - 4, seed);
        ret = rpma_send(conn, src_mr, 0, MSG, RPMA_F_COMPLETION_ALWAYS, NULL);
        want = IBV_WC_SEND;
        break;
      case 2: /* read back what the server filled */
        ret = rpma_read(conn, dst_mr, 0, remote,
                        READ_AREA + (size_t)chunk * CHUNK, CHUNK,
                        RPMA_F_COMPLETION_ALWAYS, NULL);
        want = IBV_WC_RDMA_READ;
        break;
      case 4: /* a burst (fills the rings), checked by the server */
        for (uint32_t k = 0; k < BURST_SLOTS && !ret; ++k) {
          const size_t at = (size_t)k * BURST_SLOT;
          example_fill(burst + at, BURST_SLOT, (seed + k) & 0xffffff);
          if (k + 1 < BURST_SLOTS)
            ret = rpma_write(conn, remote, BURST_AREA + at, burst_mr, at,
                             BURST_SLOT, RPMA_F_COMPLETION_ON_ERROR, NULL);
          else
            ret = rpma_write_with_imm(conn, remote, BURST_AREA + at, burst_mr,
                                      at, BURST_SLOT, RPMA_F_COMPLETION_ALWAYS,
                                      BURST_MARK << 24 | seed, NULL);
        }
        want = IBV_WC_RDMA_WRITE;
        break;
      default: /* a write, then its flush to visibility */
        example_fill(src, CHUNK, seed);
        ret = rpma_write(conn, remote, (size_t)chunk * CHUNK, src_mr, 0, CHUNK,
                         RPMA_F_COMPLETION_ON_ERROR, NULL);
        if (!ret)
          ret = rpma_flush(conn, remote, (size_t)chunk * CHUNK, CHUNK,
                           RPMA_FLUSH_TYPE_VISIBILITY,
                           RPMA_F_COMPLETION_ALWAYS, NULL);
        want = IBV_WC_RDMA_READ; /* librpma's flush is a read */
        break;
    }
    if (ret) {
      code = kPeerLost;
      break;
    }
    exit_if_asked();
    code = complete(cq, want, pick == 0 || pick == 4);
    if (code == kDone && (pick == 0 || pick == 4) &&
        rpma_recv(conn, ack_mr, 0, 8, NULL) != 0)
      code = kPeerLost;
    if (code == kDone && pick == 2 &&
        example_verify("chaos_node: client (read)", dst, CHUNK,
                       server_seed + chunk)) {
      fprintf(stderr, "chaos_node: client LOST BYTES: read of chunk %u\n",
              chunk);
      code = kLostBytes;
    }
    if (code == kDone) count_op();
  }
out:
  if (remote != NULL) (void)rpma_mr_remote_delete(&remote);
  if (teardown(&conn, 0) && code == kDone) code = kHang;
  (void)rpma_conn_cfg_delete(&cfg);
  return code;
}

static int client(const char *addr, const char *port, uint32_t seed,
                  int rounds, int ops) {
  g_role = "client";
  g_rand = seed;
  struct resources base;
  int code = kDone;
  const char *stopfile = getenv("CHAOS_STOPFILE");
  for (int round = 0; round < rounds && code == kDone; ++round) {
    if (stopfile != NULL && access(stopfile, F_OK) == 0) break;
    struct rpma_peer *peer = NULL;
    struct rpma_mr_local *src_mr = NULL, *dst_mr = NULL, *ack_mr = NULL,
                         *burst_mr = NULL;
    char *src = example_malloc(CHUNK);
    char *dst = example_malloc(CHUNK);
    char *ack = example_malloc(8);
    char *burst = example_malloc(BURST_SLOTS * BURST_SLOT);
    if (src == NULL || dst == NULL || ack == NULL || burst == NULL)
      return finish(1);
    if (example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer) ||
        rpma_mr_reg(peer, src, CHUNK,
                    RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_SEND, &src_mr) ||
        rpma_mr_reg(peer, dst, CHUNK, RPMA_MR_USAGE_READ_DST, &dst_mr) ||
        rpma_mr_reg(peer, ack, 8, RPMA_MR_USAGE_RECV, &ack_mr) ||
        rpma_mr_reg(peer, burst, BURST_SLOTS * BURST_SLOT,
                    RPMA_MR_USAGE_WRITE_SRC, &burst_mr)) {
      code = kPeerLost;
    } else {
      code = one_round(peer, addr, port, ops, src, dst, burst, src_mr, dst_mr,
                       burst_mr, ack_mr, round == 0);
    }
    (void)rpma_mr_dereg(&burst_mr);
    (void)rpma_mr_dereg(&ack_mr);
    (void)rpma_mr_dereg(&dst_mr);
    (void)rpma_mr_dereg(&src_mr);
    (void)rpma_peer_delete(&peer);
    free(src);
    free(dst);
    free(ack);
    free(burst);
    /* The baseline: after a first round that began with a burst, so that
     * the NIC's payload scratch buffer, which keeps up to 4 MiB once a
     * message grew it (FakeNic::ReleaseLargePayload), is at its size. */
    if (round == 0) base = settled_snapshot();
  }
  if (code == kDone && rounds > 1 && check_baseline(&base)) code = kLeak;
  return finish(code);
}

int main(int argc, char *argv[]) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGUSR1, ask_exit);
  if (argc == 6 && strcmp(argv[1], "server") == 0)
    return server(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 0),
                  argv[5]);
  if (argc == 7 && strcmp(argv[1], "client") == 0)
    return client(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 0),
                  atoi(argv[5]), atoi(argv[6]));
  fprintf(stderr,
          "usage: %s server ADDR PORT SEED STOPFILE\n"
          "       %s client ADDR PORT SEED ROUNDS OPS\n",
          argv[0], argv[0]);
  return kUsage;
}
