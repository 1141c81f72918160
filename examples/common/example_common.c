/* example_common.c: see example_common.h. */
#include "example_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int example_check(int ret, const char *who, const char *what) {
  if (ret != 0) {
    fprintf(stderr, "%s: %s failed: %s\n", who, what,
            ret == -1 ? "mismatch" : rpma_err_2str(ret));
  }
  return ret;
}

void example_say(const char *who, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s: ", who);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

int example_peer_new(const char *addr, enum rpma_util_ibv_context_type type,
                     struct rpma_peer **peer) {
  struct ibv_context *dev = NULL;
  int ret = rpma_utils_get_ibv_context(addr, type, &dev);
  if (ret) return ret;
  return rpma_peer_new(dev, peer);
}

int example_conn_cfg_new(uint32_t rcq_size, struct rpma_conn_cfg **cfg) {
  int ret = rpma_conn_cfg_new(cfg);
  if (ret) return ret;
  /* rpma_conn_wait() needs the CQs to share one completion channel. */
  ret = rpma_conn_cfg_set_compl_channel(*cfg, true);
  if (!ret && rcq_size > 0) ret = rpma_conn_cfg_set_rcq_size(*cfg, rcq_size);
  if (ret) (void)rpma_conn_cfg_delete(cfg);
  return ret;
}

int example_listen(const char *who, struct rpma_peer *peer, const char *addr,
                   const char *port, struct rpma_ep **ep) {
  int ret = rpma_ep_listen(peer, addr, port, ep);
  if (ret == 0) example_say(who, "listening on %s:%s", addr, port);
  return ret;
}

int example_expect_event(struct rpma_conn *conn,
                         enum rpma_conn_event expected) {
  enum rpma_conn_event event = RPMA_CONN_UNDEFINED;
  int ret = rpma_conn_next_event(conn, &event);
  if (ret) return ret;
  if (event != expected) {
    fprintf(stderr, "connection event %s, expected %s\n",
            rpma_utils_conn_event_2str(event),
            rpma_utils_conn_event_2str(expected));
    return -1;
  }
  return 0;
}

int example_accept(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
                   struct rpma_mr_local *recv_mr, size_t recv_offset,
                   size_t recv_len, const struct rpma_conn_private_data *pdata,
                   struct rpma_conn **conn) {
  struct rpma_conn_req *req = NULL;
  int ret = rpma_ep_next_conn_req(ep, cfg, &req);
  if (ret) return ret;
  if (recv_mr != NULL) {
    /* Posted before the accept, so the client's first message has a home. */
    ret = rpma_conn_req_recv(req, recv_mr, recv_offset, recv_len, NULL);
    if (ret) {
      (void)rpma_conn_req_delete(&req);
      return ret;
    }
  }
  ret = rpma_conn_req_connect(&req, pdata, conn);
  if (ret) return ret;
  ret = example_expect_event(*conn, RPMA_CONN_ESTABLISHED);
  if (ret) (void)rpma_conn_delete(conn);
  return ret;
}

int example_client_connect(struct rpma_peer *peer, const char *addr,
                           const char *port, const struct rpma_conn_cfg *cfg,
                           const struct rpma_conn_private_data *pdata,
                           struct rpma_conn **conn) {
  struct rpma_conn_req *req = NULL;
  int ret = rpma_conn_req_new(peer, addr, port, cfg, &req);
  if (ret) return ret;
  ret = rpma_conn_req_connect(&req, pdata, conn);
  if (ret) return ret;
  ret = example_expect_event(*conn, RPMA_CONN_ESTABLISHED);
  if (ret) (void)rpma_conn_delete(conn);
  return ret;
}

/* 1: got one into *wc, 0: the CQ is empty, < 0: an error. */
static int poll_one(struct rpma_cq *cq, struct ibv_wc *wc) {
  int got = 0;
  int ret = rpma_cq_get_wc(cq, 1, wc, &got);
  if (ret == RPMA_E_NO_COMPLETION) return 0;
  if (ret) return ret;
  return got;
}

int example_next_wc(struct rpma_conn *conn, struct ibv_wc *wc, bool *from_rcq) {
  struct rpma_cq *cq = NULL, *rcq = NULL;
  int ret = rpma_conn_get_cq(conn, &cq);
  if (!ret) ret = rpma_conn_get_rcq(conn, &rcq);
  if (ret) return ret;
  for (;;) {
    ret = poll_one(cq, wc);
    if (ret < 0) return ret;
    if (ret == 1) {
      if (from_rcq) *from_rcq = false;
      return 0;
    }
    if (rcq != NULL) {
      ret = poll_one(rcq, wc);
      if (ret < 0) return ret;
      if (ret == 1) {
        if (from_rcq) *from_rcq = true;
        return 0;
      }
    }
    struct rpma_cq *fired = NULL;
    bool is_rcq = false;
    ret = rpma_conn_wait(conn, 0, &fired, &is_rcq);
    if (ret) return ret;
    if (fired != (is_rcq ? rcq : cq)) {
      fprintf(stderr, "rpma_conn_wait: is_rcq %d does not name the CQ\n",
              is_rcq);
      return -1;
    }
  }
}

static const char *opcode_name(enum ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "RDMA_READ";
    case IBV_WC_RECV:
      return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
    default:
      return "another opcode";
  }
}

static int check_wc(const struct ibv_wc *wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    fprintf(stderr, "completion (wr_id %llu) failed: %s\n",
            (unsigned long long)wc->wr_id, ibv_wc_status_str(wc->status));
    return -1;
  }
  return 0;
}

int example_wait(struct rpma_conn *conn, enum ibv_wc_opcode opcode,
                 struct ibv_wc *wc) {
  return example_wait_all(conn, 1, &opcode, wc);
}

int example_wait_all(struct rpma_conn *conn, int n,
                     const enum ibv_wc_opcode *opcodes, struct ibv_wc *wcs) {
  bool seen[8] = {false};
  if (n < 1 || n > 8) return RPMA_E_INVAL;
  for (int done = 0; done < n; ++done) {
    struct ibv_wc wc;
    int ret = example_next_wc(conn, &wc, NULL);
    if (ret) return ret;
    if (check_wc(&wc)) return -1;
    int i = 0;
    while (i < n && (opcodes[i] != wc.opcode || seen[i])) ++i;
    if (i == n) {
      fprintf(stderr, "unexpected %s completion\n", opcode_name(wc.opcode));
      return -1;
    }
    seen[i] = true;
    wcs[i] = wc;
  }
  return 0;
}

int example_disconnect(struct rpma_conn **conn) {
  int ret = rpma_conn_disconnect(*conn);
  if (!ret) ret = example_expect_event(*conn, RPMA_CONN_CLOSED);
  int del = rpma_conn_delete(conn);
  return ret ? ret : del;
}

int example_wait_closed(struct rpma_conn **conn) {
  int ret = example_expect_event(*conn, RPMA_CONN_CLOSED);
  int disc = rpma_conn_disconnect(*conn);
  int del = rpma_conn_delete(conn);
  return ret ? ret : disc ? disc : del;
}

void example_fill(void *buf, size_t len, uint32_t seed) {
  unsigned char *p = buf;
  for (size_t i = 0; i < len; ++i) {
    p[i] = (unsigned char)((i * 131u + seed * 17u + (i >> 8)) & 0xff);
  }
}

int example_verify(const char *who, const void *buf, size_t len,
                   uint32_t seed) {
  const unsigned char *p = buf;
  for (size_t i = 0; i < len; ++i) {
    unsigned char want =
        (unsigned char)((i * 131u + seed * 17u + (i >> 8)) & 0xff);
    if (p[i] != want) {
      fprintf(stderr, "%s: byte %zu of %zu is 0x%02x, expected 0x%02x\n", who,
              i, len, p[i], want);
      return -1;
    }
  }
  return 0;
}

void *example_malloc(size_t size) {
  void *mem = NULL;
  long page = sysconf(_SC_PAGESIZE);
  if (posix_memalign(&mem, page > 0 ? (size_t)page : 4096, size) != 0) {
    return NULL;
  }
  memset(mem, 0, size);
  return mem;
}

int example_pmem_map(const char *name, size_t size, struct example_pmem *pmem) {
  /* Under `bazel test`, the test's own directory (TEST_TMPDIR: Bazel sets
   * TMPDIR to /tmp for tests, and a hermetic test writes only there). */
  const char *dir = getenv("TEST_TMPDIR");
  if (dir == NULL || *dir == '\0') dir = getenv("TMPDIR");
  if (dir == NULL || *dir == '\0') dir = "/tmp";
  int n = snprintf(pmem->path, sizeof(pmem->path), "%s/rpma-example-%s.%ld",
                   dir, name, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(pmem->path)) {
    fprintf(stderr, "%s: the directory's path is too long\n", dir);
    return -1;
  }
  int fd = open(pmem->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    fprintf(stderr, "%s: %s\n", pmem->path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  pmem->ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (pmem->ptr == MAP_FAILED) {
    fprintf(stderr, "mmap %s: %s\n", pmem->path, strerror(errno));
    unlink(pmem->path);
    return -1;
  }
  pmem->size = size;
  return 0;
}

int example_persist(const struct example_pmem *pmem, size_t offset,
                    size_t len) {
  long page = sysconf(_SC_PAGESIZE);
  size_t start = offset - offset % (size_t)page;
  if (offset + len > pmem->size ||
      msync((char *)pmem->ptr + start, offset + len - start, MS_SYNC) != 0) {
    fprintf(stderr, "msync %s [%zu, +%zu): %s\n", pmem->path, offset, len,
            offset + len > pmem->size ? "out of range" : strerror(errno));
    return -1;
  }
  return 0;
}

int example_pmem_read_back(const struct example_pmem *pmem, size_t offset,
                           void *buf, size_t len) {
  int fd = open(pmem->path, O_RDONLY);
  ssize_t got = fd < 0 ? -1 : pread(fd, buf, len, (off_t)offset);
  if (fd >= 0) close(fd);
  if (got != (ssize_t)len) {
    fprintf(stderr, "read back %s: %s\n", pmem->path,
            got < 0 ? strerror(errno) : "short read");
    return -1;
  }
  return 0;
}

void example_pmem_unmap(struct example_pmem *pmem) {
  if (pmem->ptr != NULL && pmem->ptr != MAP_FAILED) {
    munmap(pmem->ptr, pmem->size);
  }
  pmem->ptr = NULL;
  unlink(pmem->path);
}

int example_pdata_put_mr_pcfg(const char *who, const struct rpma_mr_local *mr,
                              const struct rpma_peer_cfg *pcfg,
                              unsigned char *buf,
                              struct rpma_conn_private_data *pdata) {
  size_t mr_size = 0, pcfg_size = 0;
  int ret;
  if ((ret = example_check(rpma_mr_get_descriptor_size(mr, &mr_size), who,
                           "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_peer_cfg_get_descriptor_size(pcfg, &pcfg_size),
                           who, "rpma_peer_cfg_get_descriptor_size")))
    return ret;
  if (2 + mr_size + pcfg_size > EXAMPLE_PDATA_MAX) {
    fprintf(stderr, "%s: descriptors too big for private data\n", who);
    return -1;
  }
  buf[0] = (unsigned char)mr_size;
  buf[1] = (unsigned char)pcfg_size;
  if ((ret = example_check(rpma_mr_get_descriptor(mr, buf + 2), who,
                           "rpma_mr_get_descriptor")) ||
      (ret =
           example_check(rpma_peer_cfg_get_descriptor(pcfg, buf + 2 + mr_size),
                         who, "rpma_peer_cfg_get_descriptor")))
    return ret;
  pdata->ptr = buf;
  pdata->len = (uint8_t)(2 + mr_size + pcfg_size);
  return 0;
}

int example_pdata_get_mr_pcfg(const char *who, struct rpma_conn *conn,
                              struct rpma_mr_remote **mr,
                              struct rpma_peer_cfg **pcfg) {
  struct rpma_conn_private_data pdata = {NULL, 0};
  int ret;
  if ((ret = example_check(rpma_conn_get_private_data(conn, &pdata), who,
                           "rpma_conn_get_private_data")))
    return ret;
  const unsigned char *pd = pdata.ptr;
  if (pdata.len < 2 || pdata.len < 2 + pd[0] + pd[1]) {
    fprintf(stderr, "%s: private data of %u bytes is too short\n", who,
            pdata.len);
    return -1;
  }
  if ((ret = example_check(rpma_mr_remote_from_descriptor(pd + 2, pd[0], mr),
                           who, "rpma_mr_remote_from_descriptor")))
    return ret;
  /* The server's word on what its memory supports, applied to the
   * connection. */
  if ((ret = example_check(
           rpma_peer_cfg_from_descriptor(pd + 2 + pd[0], pd[1], pcfg), who,
           "rpma_peer_cfg_from_descriptor")) ||
      (ret = example_check(rpma_conn_apply_remote_peer_cfg(conn, *pcfg), who,
                           "rpma_conn_apply_remote_peer_cfg")))
    return ret;
  return 0;
}
