/*
 * 09-send-with-imm/server.c: receives one message with immediate data.
 * The client says in its private data which immediate value and which word
 * it will send ([imm: 4 bytes][word, NUL-terminated]); the server checks the
 * completion (IBV_WC_RECV with IBV_WC_WITH_IMM, ntohl(imm_data), byte_len)
 * and the received bytes against that.
 *
 *   server ADDR PORT
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "send-with-imm server";
#define MSG_SIZE 64

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *recv_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *recv = example_malloc(MSG_SIZE);
  if (recv == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, recv, MSG_SIZE, RPMA_MR_USAGE_RECV, &recv_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  if ((ret = example_check(
           example_accept(ep, cfg, recv_mr, 0, MSG_SIZE, NULL, &conn), kWho,
           "accepting")))
    goto out_ep;

  struct rpma_conn_private_data pdata = {NULL, 0};
  struct ibv_wc wc;
  if ((ret = example_check(rpma_conn_get_private_data(conn, &pdata), kWho,
                           "rpma_conn_get_private_data")) ||
      (ret = example_check(example_wait(conn, IBV_WC_RECV, &wc), kWho,
                           "waiting for the message")))
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
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    fprintf(stderr, "%s: the completion carries no immediate data\n", kWho);
    ret = -1;
  } else if (ntohl(wc.imm_data) != want_imm) {
    fprintf(stderr, "%s: immediate data 0x%x, expected 0x%x\n", kWho,
            ntohl(wc.imm_data), want_imm);
    ret = -1;
  } else if (wc.byte_len != want_len ||
             memcmp(recv, want_word, want_len) != 0) {
    fprintf(stderr, "%s: received %u bytes \"%.*s\", expected \"%s\"\n", kWho,
            wc.byte_len, (int)(wc.byte_len < MSG_SIZE ? wc.byte_len : MSG_SIZE),
            recv, want_word);
    ret = -1;
  } else {
    example_say(kWho, "received \"%s\" (%zu bytes) with immediate data 0x%x",
                want_word, want_len, want_imm);
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
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(recv);
  return ret ? 1 : 0;
}
