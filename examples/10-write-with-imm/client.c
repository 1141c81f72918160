/*
 * 10-write-with-imm/client.c: writes WORD into the server's region with
 * rpma_write_with_imm() and immediate data IMM, having told the server both
 * in the private data, and waits for the write's completion.
 *
 *   client ADDR PORT IMM WORD
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "write-with-imm client";
#define REGION_SIZE 64

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 5) {
    fprintf(stderr, "usage: %s ADDR PORT IMM WORD\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2], *word = argv[4];
  const uint32_t imm = (uint32_t)strtoul(argv[3], NULL, 0);
  const size_t len = strlen(word);
  if (len > REGION_SIZE || sizeof(imm) + len + 1 > EXAMPLE_PDATA_MAX) {
    fprintf(stderr, "%s: the word is too long\n", kWho);
    return 2;
  }
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *src_mr = NULL;
  struct rpma_mr_remote *dst_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *src = example_malloc(REGION_SIZE);
  if (src == NULL) return 1;
  memcpy(src, word, len);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, src, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_SRC, &src_mr),
                           kWho, "rpma_mr_reg")))
    goto out_peer;
  char pd[EXAMPLE_PDATA_MAX];
  memcpy(pd, &imm, sizeof(imm));
  memcpy(pd + sizeof(imm), word, len + 1);
  struct rpma_conn_private_data ours = {pd, (uint8_t)(sizeof(imm) + len + 1)};
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, &ours, &conn), kWho,
           "connecting")))
    goto out_cfg;
  struct rpma_conn_private_data pdata = {NULL, 0};
  if ((ret = example_check(rpma_conn_get_private_data(conn, &pdata), kWho,
                           "rpma_conn_get_private_data")) ||
      (ret = example_check(
           rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &dst_mr), kWho,
           "rpma_mr_remote_from_descriptor")))
    goto out_disconnect;
  struct ibv_wc wc;
  if (!(ret = example_check(
            rpma_write_with_imm(conn, dst_mr, 0, src_mr, 0, len,
                                RPMA_F_COMPLETION_ALWAYS, imm, NULL),
            kWho, "rpma_write_with_imm")) &&
      !(ret = example_check(example_wait(conn, IBV_WC_RDMA_WRITE, &wc), kWho,
                            "waiting for the write")))
    example_say(kWho, "wrote \"%s\" with immediate data 0x%x", word, imm);
  ret |= example_check(rpma_mr_remote_delete(&dst_mr), kWho,
                       "rpma_mr_remote_delete");

out_disconnect:
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&src_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(src);
  return ret ? 1 : 0;
}
