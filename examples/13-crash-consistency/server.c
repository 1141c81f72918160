/*
 * 13-crash-consistency/server.c: the server of a one-record log in
 * persistent memory. It offers its "persistent" region (a file mapped
 * MAP_SHARED, as in 04) for writes and for both flush types, declares
 * direct write to PMem, and waits for the client's word that record 1 is
 * durable: a 0-byte write with immediate data SEQUENCE. It then tells the
 * world (stdout, and the crash checker's RPMA_HARNESS_PROMISE), hangs up,
 * and recovers the log from the file to check it.
 *
 * Without a crash every variant passes; which ones lose the record in a
 * crash is what crash_test.cc finds.
 *
 *   server ADDR PORT VARIANT
 *   server --recover IMAGE_FILE VARIANT   (after a crash; crash_check runs it)
 */
#include <arpa/inet.h>
/* The crash checker's hooks where the harness is installed; built against
 * Debian's librpma-dev alone the promise is a no-op. */
#if __has_include(<rpma_harness_crash.h>)
#include <rpma_harness_crash.h>
#else
#define RPMA_HARNESS_PROMISE(what) ((void)0)
#endif
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "example_common.h"
#include "log.h"

static const char kWho[] = "log server";

static void read_file(void *ctx, size_t offset, void *dst, size_t len) {
  const struct example_pmem *pmem = ctx;
  if (example_pmem_read_back(pmem, offset, dst, len)) memset(dst, 0, len);
}

static void read_image(void *ctx, size_t offset, void *dst, size_t len) {
  FILE *f = ctx;
  memset(dst, 0, len);
  if (fseek(f, (long)offset, SEEK_SET) == 0 && fread(dst, 1, len, f) != len)
    memset(dst, 0, len);
}

/*
 * --recover FILE: the restart after a crash. FILE holds what survived of the
 * persistent region; RPMA_HARNESS_CRASH_PROMISES lists, one a line, what the
 * server had told the world before the crash (the crash checker sets it).
 */
static int recover(const char *path, enum log_variant variant) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return 2;
  }
  const char *promises = getenv("RPMA_HARNESS_CRASH_PROMISES");
  const uint64_t promised =
      promises != NULL && strstr(promises, "commit 1") != NULL ? SEQUENCE : 0;
  char why[160];
  const int bad =
      log_recover(read_image, f, variant, promised, why, sizeof(why));
  fclose(f);
  if (bad) {
    fprintf(stderr, "%s: recovery: %s\n", kWho, why);
    return 1;
  }
  return 0;
}

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc == 4 && strcmp(argv[1], "--recover") == 0 &&
      log_variant_parse(argv[3]) >= 0)
    return recover(argv[2], (enum log_variant)log_variant_parse(argv[3]));
  if (argc < 4 || log_variant_parse(argv[3]) < 0) {
    fprintf(stderr,
            "usage: %s ADDR PORT VARIANT\n"
            "       %s --recover IMAGE_FILE VARIANT\n",
            argv[0], argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  const enum log_variant variant = (enum log_variant)log_variant_parse(argv[3]);
  struct example_pmem pmem;
  struct rpma_peer *peer = NULL;
  struct rpma_peer_cfg *pcfg = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *mr = NULL, *recv_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *recv = example_malloc(8);
  if (recv == NULL || example_pmem_map("crash-log", LOG_SIZE, &pmem)) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_unmap;
  if ((ret = example_check(rpma_mr_reg(peer, pmem.ptr, LOG_SIZE,
                                       RPMA_MR_USAGE_WRITE_DST |
                                           RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT |
                                           RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
                                       &mr),
                           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(
           rpma_mr_reg(peer, recv, 8, RPMA_MR_USAGE_RECV, &recv_mr), kWho,
           "rpma_mr_reg(recv)")))
    goto out_mr;
  if ((ret = example_check(rpma_peer_cfg_new(&pcfg), kWho,
                           "rpma_peer_cfg_new")) ||
      (ret = example_check(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true),
                           kWho, "rpma_peer_cfg_set_direct_write_to_pmem")))
    goto out_recv_mr;

  /* Both descriptors in the private data. */
  unsigned char pd[EXAMPLE_PDATA_MAX];
  struct rpma_conn_private_data pdata;
  if ((ret = example_pdata_put_mr_pcfg(kWho, mr, pcfg, pd, &pdata)))
    goto out_pcfg;

  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_pcfg;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  if ((ret =
           example_check(example_accept(ep, cfg, recv_mr, 0, 8, &pdata, &conn),
                         kWho, "accepting")))
    goto out_ep;

  struct ibv_wc wc;
  if ((ret = example_check(example_wait(conn, IBV_WC_RECV_RDMA_WITH_IMM, &wc),
                           kWho, "waiting for the commit")))
    goto out_disconnect;
  if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != SEQUENCE) {
    fprintf(stderr, "%s: expected immediate data %d\n", kWho, SEQUENCE);
    ret = -1;
    goto out_disconnect;
  }
  /* The client says record 1 is durable: the server tells the world. */
  example_say(kWho, "commit %d is durable", SEQUENCE);
  RPMA_HARNESS_PROMISE("commit 1");

out_disconnect:
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
  if (!ret) {
    /* No crash happened: whatever the variant, the log must be whole. */
    char why[160];
    if (log_recover(read_file, &pmem, variant, SEQUENCE, why, sizeof(why))) {
      fprintf(stderr, "%s: recovery: %s\n", kWho, why);
      ret = -1;
    } else {
      example_say(kWho, "%s recovers commit %d (%s)", pmem.path, SEQUENCE,
                  log_variant_names[variant]);
    }
  }
out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_pcfg:
  ret |=
      example_check(rpma_peer_cfg_delete(&pcfg), kWho, "rpma_peer_cfg_delete");
out_recv_mr:
  ret |= example_check(rpma_mr_dereg(&recv_mr), kWho, "rpma_mr_dereg(recv)");
out_mr:
  ret |= example_check(rpma_mr_dereg(&mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_unmap:
  example_pmem_unmap(&pmem);
  free(recv);
  return ret ? 1 : 0;
}
