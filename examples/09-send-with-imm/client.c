/*
 * 09-send-with-imm/client.c: sends WORD (its bytes without the NUL; an empty
 * word is a 0-byte message) with immediate data IMM using
 * rpma_send_with_imm(), having told the server both in the private data.
 *
 *   client ADDR PORT IMM [WORD]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "send-with-imm client";
#define MSG_SIZE 64

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 4) {
    fprintf(stderr, "usage: %s ADDR PORT IMM [WORD]\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  const uint32_t imm = (uint32_t)strtoul(argv[3], NULL, 0);
  const char *word = argc > 4 ? argv[4] : "";
  const size_t len = strlen(word);
  if (sizeof(imm) + len + 1 > EXAMPLE_PDATA_MAX) {
    fprintf(stderr, "%s: the word is too long\n", kWho);
    return 2;
  }
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *send_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  char *send = example_malloc(MSG_SIZE);
  if (send == NULL) return 1;
  memcpy(send, word, len);

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, send, MSG_SIZE, RPMA_MR_USAGE_SEND, &send_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  char pd[EXAMPLE_PDATA_MAX];
  memcpy(pd, &imm, sizeof(imm));
  memcpy(pd + sizeof(imm), word, len + 1);
  struct rpma_conn_private_data pdata = {pd, (uint8_t)(sizeof(imm) + len + 1)};
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, &pdata, &conn), kWho,
           "connecting")))
    goto out_cfg;
  struct ibv_wc wc;
  if (!(ret = example_check(
            rpma_send_with_imm(conn, send_mr, 0, len, RPMA_F_COMPLETION_ALWAYS,
                               imm, NULL),
            kWho, "rpma_send_with_imm")) &&
      !(ret = example_check(example_wait(conn, IBV_WC_SEND, &wc), kWho,
                            "waiting for the send")))
    example_say(kWho, "sent \"%s\" with immediate data 0x%x", word, imm);
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");

out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&send_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(send);
  return ret ? 1 : 0;
}
