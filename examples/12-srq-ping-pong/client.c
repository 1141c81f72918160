/*
 * 12-srq-ping-pong/client.c: an ordinary ping-pong client (it knows nothing
 * of the server's SRQ): SEED, then each answer back, for ROUNDS rounds; then
 * PING_PONG_DONE, whose send it waits for, and then for the server to
 * disconnect it.
 *
 *   client ADDR PORT SEED ROUNDS
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"
#include "ping_pong.h"

static const char kWho[] = "srq client";

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 5) {
    fprintf(stderr, "usage: %s ADDR PORT SEED ROUNDS\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  uint64_t counter = strtoull(argv[3], NULL, 0);
  const int rounds = atoi(argv[4]);
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *msg_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  uint64_t *msg = example_malloc(2 * PING_PONG_MSG_SIZE);
  if (msg == NULL) return 1;
  uint64_t *recvd = &msg[PING_PONG_RECV_OFFSET / PING_PONG_MSG_SIZE];
  uint64_t *sent = &msg[PING_PONG_SEND_OFFSET / PING_PONG_MSG_SIZE];

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, msg, 2 * PING_PONG_MSG_SIZE,
                       RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(
           example_client_connect(peer, addr, port, cfg, NULL, &conn), kWho,
           "connecting")))
    goto out_cfg;

  const enum ibv_wc_opcode both[2] = {IBV_WC_SEND, IBV_WC_RECV};
  struct ibv_wc wcs[2];
  for (int r = 0; r < rounds && !ret; ++r) {
    *sent = counter;
    if ((ret = example_check(rpma_recv(conn, msg_mr, PING_PONG_RECV_OFFSET,
                                       PING_PONG_MSG_SIZE, NULL),
                             kWho, "rpma_recv")) ||
        (ret = example_check(
             rpma_send(conn, msg_mr, PING_PONG_SEND_OFFSET, PING_PONG_MSG_SIZE,
                       RPMA_F_COMPLETION_ALWAYS, NULL),
             kWho, "rpma_send")) ||
        (ret = example_check(example_wait_all(conn, 2, both, wcs), kWho,
                             "waiting for the answer")))
      break;
    if (*recvd != counter + 1) {
      fprintf(stderr, "%s: sent %llu, got %llu back\n", kWho,
              (unsigned long long)counter, (unsigned long long)*recvd);
      ret = -1;
      break;
    }
    counter = *recvd;
  }
  if (ret) {
    ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");
    goto out_cfg;
  }
  *sent = PING_PONG_DONE;
  if (!(ret = example_check(
            rpma_send(conn, msg_mr, PING_PONG_SEND_OFFSET, PING_PONG_MSG_SIZE,
                      RPMA_F_COMPLETION_ALWAYS, NULL),
            kWho, "rpma_send (done)")))
    ret = example_check(example_wait(conn, IBV_WC_SEND, wcs), kWho,
                        "waiting for the send (done)");
  if (!ret)
    example_say(kWho, "%d rounds from %s, counter now %llu", rounds, argv[3],
                (unsigned long long)counter);
  ret |= example_check(example_wait_closed(&conn), kWho,
                       "waiting for the server to disconnect");

out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_mr:
  ret |= example_check(rpma_mr_dereg(&msg_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(msg);
  return ret ? 1 : 0;
}
