/*
 * 08-messages-ping-pong/server.c: answers each value the client sends with
 * value + 1 (rpma_recv / rpma_send), checking that each value is the one it
 * answered last (the client's seed first), until the client sends
 * PING_PONG_DONE and disconnects.
 *
 * The client posts PING_PONG_DONE and disconnects at once, without waiting
 * for the send's completion (librpma's way of ending a ping-pong). The
 * message is then racing the disconnect: it either arrives, or the server's
 * receive is flushed (IBV_WC_WR_FLUSH_ERR) because the connection closed
 * first. Both end the exchange; any other completion is a failure.
 *
 *   server ADDR PORT SEED ROUNDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_common.h"
#include "ping_pong.h"

static const char kWho[] = "ping-pong server";

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
  if ((ret = example_check(example_conn_cfg_new(0, &cfg), kWho,
                           "rpma_conn_cfg_new")))
    goto out_mr;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;
  if ((ret =
           example_check(example_accept(ep, cfg, msg_mr, PING_PONG_RECV_OFFSET,
                                        PING_PONG_MSG_SIZE, NULL, &conn),
                         kWho, "accepting")))
    goto out_ep;

  int rounds = 0;
  bool answered = false; /* a send of ours is outstanding */
  for (;;) {
    /* The next message, and the completion of our last answer if any. */
    struct ibv_wc wc;
    bool got_recv = false;
    while (!ret && (!got_recv || answered)) {
      ret = example_check(example_next_wc(conn, &wc, NULL), kWho,
                          "waiting for a completion");
      if (ret) break;
      if (wc.status == IBV_WC_WR_FLUSH_ERR && !got_recv && !answered) {
        /* The client's disconnect overtook its PING_PONG_DONE. */
        example_say(kWho, "receive flushed: the client disconnected first");
        got_recv = true;
        msg[0] = PING_PONG_DONE;
      } else if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "%s: completion failed: %s\n", kWho,
                ibv_wc_status_str(wc.status));
        ret = -1;
      } else if (wc.opcode == IBV_WC_SEND && answered) {
        answered = false;
      } else if (wc.opcode == IBV_WC_RECV && !got_recv) {
        got_recv = true;
      } else {
        fprintf(stderr, "%s: unexpected completion (opcode %d)\n", kWho,
                wc.opcode);
        ret = -1;
      }
    }
    if (ret) break;
    uint64_t value = msg[PING_PONG_RECV_OFFSET / PING_PONG_MSG_SIZE];
    if (value == PING_PONG_DONE) {
      example_say(kWho, "done after %d rounds", rounds);
      if (rounds != expected_rounds) {
        fprintf(stderr, "%s: %d rounds, expected %d\n", kWho, rounds,
                expected_rounds);
        ret = -1;
      }
      break;
    }
    if (value != expected) {
      fprintf(stderr, "%s: received %llu, expected %llu\n", kWho,
              (unsigned long long)value, (unsigned long long)expected);
      ret = -1;
      break;
    }
    msg[PING_PONG_SEND_OFFSET / PING_PONG_MSG_SIZE] = value + 1;
    expected = value + 1;
    if ((ret = example_check(rpma_recv(conn, msg_mr, PING_PONG_RECV_OFFSET,
                                       PING_PONG_MSG_SIZE, NULL),
                             kWho, "rpma_recv")) ||
        (ret = example_check(
             rpma_send(conn, msg_mr, PING_PONG_SEND_OFFSET, PING_PONG_MSG_SIZE,
                       RPMA_F_COMPLETION_ALWAYS, NULL),
             kWho, "rpma_send")))
      break;
    answered = true;
    ++rounds;
  }
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
