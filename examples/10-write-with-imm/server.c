/*
 * 10-write-with-imm/server.c: exposes a region for writes (descriptor in the
 * private data) and posts one receive before accepting: a write with
 * immediate data consumes a receive, whose completion
 * (IBV_WC_RECV_RDMA_WITH_IMM) carries the immediate value and the write's
 * length. The client's private data says what to expect
 * ([imm: 4 bytes][word, NUL-terminated]); the server checks the completion
 * and the bytes written into its region.
 *
 *   server ADDR PORT
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "write-with-imm server";
#define REGION_SIZE 64

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *dst_mr = NULL, *recv_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *dst = example_malloc(REGION_SIZE);
  char *recv = example_malloc(8);
  if (dst == NULL || recv == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(rpma_mr_reg(peer, dst, REGION_SIZE,
                                       RPMA_MR_USAGE_WRITE_DST, &dst_mr),
                           kWho, "rpma_mr_reg")) ||
      (ret = example_check(
           rpma_mr_reg(peer, recv, 8, RPMA_MR_USAGE_RECV, &recv_mr), kWho,
           "rpma_mr_reg (receive)")))
    goto out_mr;
  size_t desc_size = 0;
  char desc[EXAMPLE_PDATA_MAX];
  if ((ret = example_check(rpma_mr_get_descriptor_size(dst_mr, &desc_size),
                           kWho, "rpma_mr_get_descriptor_size")) ||
      (ret = example_check(rpma_mr_get_descriptor(dst_mr, desc), kWho,
                           "rpma_mr_get_descriptor")))
    goto out_mr;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  struct rpma_conn_private_data ours = {desc, (uint8_t)desc_size};
  if ((ret = example_check(example_accept(ep, cfg, recv_mr, 0, 8, &ours, &conn),
                           kWho, "accepting")))
    goto out_ep;

  struct rpma_conn_private_data pdata = {NULL, 0};
  struct ibv_wc wc;
  if ((ret = example_check(rpma_conn_get_private_data(conn, &pdata), kWho,
                           "rpma_conn_get_private_data")) ||
      (ret = example_check(example_wait(conn, IBV_WC_RECV_RDMA_WITH_IMM, &wc),
                           kWho, "waiting for the write with imm")))
    goto out_conn;
  const char *pd = pdata.ptr;
  uint32_t want_imm = 0;
  if (pdata.len < sizeof(want_imm) + 1 || pd[pdata.len - 1] != '\0') {
    fprintf(stderr, "%s: malformed private data\n", kWho);
    ret = -1;
    goto out_conn;
  }
  memcpy(&want_imm, pd, sizeof(want_imm));
  const char *want_word = pd + sizeof(want_imm);
  const size_t want_len = strlen(want_word);
  if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != want_imm) {
    fprintf(stderr, "%s: immediate data 0x%x (flags 0x%x), expected 0x%x\n",
            kWho, ntohl(wc.imm_data), wc.wc_flags, want_imm);
    ret = -1;
  } else if (wc.byte_len != want_len || memcmp(dst, want_word, want_len) != 0) {
    fprintf(stderr, "%s: %u bytes written \"%.*s\", expected \"%s\"\n", kWho,
            wc.byte_len, (int)want_len, dst, want_word);
    ret = -1;
  } else {
    example_say(kWho, "\"%s\" written with immediate data 0x%x", want_word,
                want_imm);
  }

out_conn:
  ret |= example_check(example_wait_closed(&conn), kWho,
                       "waiting for the client to disconnect");
out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&recv_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_mr_dereg(&dst_mr), kWho, "rpma_mr_dereg");
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(dst);
  free(recv);
  return ret ? 1 : 0;
}
