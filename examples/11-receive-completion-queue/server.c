/*
 * 11-receive-completion-queue/server.c: the ping-pong of 08 on a connection
 * with a separate receive completion queue: sends complete on the CQ,
 * receives on the RCQ (rpma_conn_get_rcq), and rpma_conn_wait() says which
 * one fired (is_rcq). Every completion is checked to have come from the
 * right one (rcq_check.h). The client ends by sending PING_PONG_DONE and
 * waiting for that send's completion before it disconnects.
 *
 *   server ADDR PORT SEED ROUNDS
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"
#include "ping_pong.h"
#include "rcq_check.h"

static const char kWho[] = "rcq server";

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 5) {
    fprintf(stderr, "usage: %s ADDR PORT SEED ROUNDS\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  uint64_t expected = strtoull(argv[3], NULL, 0);
  const int expected_rounds = atoi(argv[4]);
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *msg_mr = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct rpma_conn *conn = NULL;
  uint64_t *msg = example_malloc(2 * PING_PONG_MSG_SIZE);
  if (msg == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, msg, 2 * PING_PONG_MSG_SIZE,
                       RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(example_conn_cfg_new(RCQ_SIZE, &cfg), kWho,
                           "rpma_conn_cfg_new (with a receive CQ)")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  if ((ret =
           example_check(example_accept(ep, cfg, msg_mr, PING_PONG_RECV_OFFSET,
                                        PING_PONG_MSG_SIZE, NULL, &conn),
                         kWho, "accepting")))
    goto out_ep;
  struct rpma_cq *rcq = NULL;
  if ((ret = example_check(rpma_conn_get_rcq(conn, &rcq), kWho,
                           "rpma_conn_get_rcq")))
    goto out_conn;
  if (rcq == NULL) {
    fprintf(stderr, "%s: the connection has no receive CQ\n", kWho);
    ret = -1;
    goto out_conn;
  }

  const enum ibv_wc_opcode recv_only[1] = {IBV_WC_RECV};
  const enum ibv_wc_opcode both[2] = {IBV_WC_SEND, IBV_WC_RECV};
  int rounds = 0;
  ret = rcq_wait(kWho, conn, 1, recv_only);
  while (!ret) {
    uint64_t value = msg[PING_PONG_RECV_OFFSET / PING_PONG_MSG_SIZE];
    if (value == PING_PONG_DONE) break;
    if (value != expected) {
      fprintf(stderr, "%s: received %llu, expected %llu\n", kWho,
              (unsigned long long)value, (unsigned long long)expected);
      ret = -1;
      break;
    }
    msg[PING_PONG_SEND_OFFSET / PING_PONG_MSG_SIZE] = expected = value + 1;
    if ((ret = example_check(rpma_recv(conn, msg_mr, PING_PONG_RECV_OFFSET,
                                       PING_PONG_MSG_SIZE, NULL),
                             kWho, "rpma_recv")) ||
        (ret = example_check(
             rpma_send(conn, msg_mr, PING_PONG_SEND_OFFSET, PING_PONG_MSG_SIZE,
                       RPMA_F_COMPLETION_ALWAYS, NULL),
             kWho, "rpma_send")))
      break;
    ++rounds;
    ret = rcq_wait(kWho, conn, 2, both);
  }
  if (!ret && rounds != expected_rounds) {
    fprintf(stderr, "%s: %d rounds, expected %d\n", kWho, rounds,
            expected_rounds);
    ret = -1;
  }
  if (!ret)
    example_say(kWho, "%d rounds; receives on the RCQ, sends on the CQ",
                rounds);

out_conn:
  /* On a failure the server hangs up, so a client waiting for it fails too. */
  if (ret)
    (void)example_disconnect(&conn);
  else
    ret = example_check(example_wait_closed(&conn), kWho,
                        "waiting for the client to disconnect");
out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
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
