/*
 * 12-srq-ping-pong/server.c: one shared receive queue for several clients.
 * The server makes an SRQ with its own receive CQ (rpma_srq_new with an
 * rpma_srq_cfg), accepts NCLIENTS connections configured to use it
 * (rpma_conn_cfg_set_srq), posts the receives to the SRQ (rpma_srq_recv)
 * rather than to any connection, and serves every client's ping-pong from
 * that one receive CQ (rpma_srq_get_rcq, rpma_cq_wait): the completion's
 * qp_num tells which connection a message came on (rpma_conn_get_qp_num).
 * Each client's values must follow on from the server's answers, for ROUNDS
 * rounds; on PING_PONG_DONE the server disconnects that client.
 *
 * A connection whose receives go to an SRQ with its own receive CQ cannot
 * share a completion channel with it (librpma refuses that configuration),
 * so here the sends' completions are waited for with rpma_cq_wait() on each
 * connection's CQ.
 *
 *   server ADDR PORT NCLIENTS ROUNDS
 */
#include <stdio.h>
#include <stdlib.h>

#include "example_common.h"
#include "ping_pong.h"

static const char kWho[] = "srq server";
#define MAX_CLIENTS 8

struct client {
  struct rpma_conn *conn;
  uint32_t qp_num;
  uint64_t expected; /* the value its next message must carry */
  int rounds;
  bool started, done;
};

/* The next completion of `cq` (blocking), which must succeed. */
static int next_wc(struct rpma_cq *cq, struct ibv_wc *wc) {
  for (;;) {
    int got = 0;
    int ret = rpma_cq_get_wc(cq, 1, wc, &got);
    if (ret == 0 && got == 1) break;
    if (ret != RPMA_E_NO_COMPLETION) return ret ? ret : -1;
    if ((ret = rpma_cq_wait(cq))) return ret;
  }
  if (wc->status != IBV_WC_SUCCESS) {
    fprintf(stderr, "%s: completion failed: %s\n", kWho,
            ibv_wc_status_str(wc->status));
    return -1;
  }
  return 0;
}

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 5 || atoi(argv[3]) < 1 || atoi(argv[3]) > MAX_CLIENTS) {
    fprintf(stderr, "usage: %s ADDR PORT NCLIENTS (1..%d) ROUNDS\n", argv[0],
            MAX_CLIENTS);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  const int nclients = atoi(argv[3]), expected_rounds = atoi(argv[4]);
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_mr_local *msg_mr = NULL;
  struct rpma_srq_cfg *srq_cfg = NULL;
  struct rpma_srq *srq = NULL;
  struct rpma_cq *srq_rcq = NULL;
  struct rpma_conn_cfg *cfg = NULL;
  struct client clients[MAX_CLIENTS] = {{0}};
  /* Slot i: [receive i][send i], one pair per client. */
  uint64_t *msg = example_malloc(MAX_CLIENTS * 2 * PING_PONG_MSG_SIZE);
  if (msg == NULL) return 1;

  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) goto out_free;
  if ((ret = example_check(
           rpma_mr_reg(peer, msg, MAX_CLIENTS * 2 * PING_PONG_MSG_SIZE,
                       RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr),
           kWho, "rpma_mr_reg")))
    goto out_peer;
  if ((ret = example_check(rpma_srq_cfg_new(&srq_cfg), kWho,
                           "rpma_srq_cfg_new")) ||
      (ret = example_check(rpma_srq_cfg_set_rq_size(srq_cfg, MAX_CLIENTS), kWho,
                           "rpma_srq_cfg_set_rq_size")) ||
      (ret = example_check(rpma_srq_cfg_set_rcq_size(srq_cfg, MAX_CLIENTS),
                           kWho, "rpma_srq_cfg_set_rcq_size")) ||
      (ret = example_check(rpma_srq_new(peer, srq_cfg, &srq), kWho,
                           "rpma_srq_new")) ||
      (ret = example_check(rpma_srq_get_rcq(srq, &srq_rcq), kWho,
                           "rpma_srq_get_rcq")))
    goto out_srq;
  if ((ret =
           example_check(rpma_conn_cfg_new(&cfg), kWho, "rpma_conn_cfg_new")) ||
      (ret = example_check(rpma_conn_cfg_set_srq(cfg, srq), kWho,
                           "rpma_conn_cfg_set_srq")))
    goto out_cfg;
  /* One receive per client, each naming its slot. */
  for (uintptr_t i = 0; i < (uintptr_t)nclients && !ret; ++i) {
    ret = example_check(rpma_srq_recv(srq, msg_mr, 2 * i * PING_PONG_MSG_SIZE,
                                      PING_PONG_MSG_SIZE, (void *)i),
                        kWho, "rpma_srq_recv");
  }
  if (ret) goto out_cfg;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_cfg;

  int accepted = 0;
  for (; accepted < nclients; ++accepted) {
    struct client *c = &clients[accepted];
    if ((ret =
             example_check(example_accept(ep, cfg, NULL, 0, 0, NULL, &c->conn),
                           kWho, "accepting")) ||
        (ret = example_check(rpma_conn_get_qp_num(c->conn, &c->qp_num), kWho,
                             "rpma_conn_get_qp_num")))
      break;
  }
  example_say(kWho, "%d connections share one receive queue", accepted);

  int finished = 0;
  while (!ret && finished < accepted) {
    struct ibv_wc wc;
    if ((ret = example_check(next_wc(srq_rcq, &wc), kWho,
                             "waiting on the SRQ's receive CQ")))
      break;
    struct client *c = NULL;
    for (int i = 0; i < accepted; ++i) {
      if (clients[i].qp_num == wc.qp_num && !clients[i].done) c = &clients[i];
    }
    const uintptr_t slot = (uintptr_t)wc.wr_id;
    if (c == NULL || wc.opcode != IBV_WC_RECV || slot >= (uintptr_t)nclients) {
      fprintf(stderr,
              "%s: a receive (opcode %d) for no open connection (QP %u)\n",
              kWho, wc.opcode, wc.qp_num);
      ret = -1;
      break;
    }
    const uint64_t value = msg[2 * slot];
    /* The slot is free again: back to the SRQ. */
    if ((ret = example_check(
             rpma_srq_recv(srq, msg_mr, 2 * slot * PING_PONG_MSG_SIZE,
                           PING_PONG_MSG_SIZE, (void *)slot),
             kWho, "rpma_srq_recv")))
      break;
    if (value == PING_PONG_DONE) {
      if (c->rounds != expected_rounds) {
        fprintf(stderr, "%s: QP %u did %d rounds, expected %d\n", kWho,
                c->qp_num, c->rounds, expected_rounds);
        ret = -1;
      }
      c->done = true;
      ++finished;
      ret |= example_check(example_disconnect(&c->conn), kWho, "disconnecting");
      continue;
    }
    if (c->started && value != c->expected) {
      fprintf(stderr, "%s: QP %u sent %llu, expected %llu\n", kWho, c->qp_num,
              (unsigned long long)value, (unsigned long long)c->expected);
      ret = -1;
      break;
    }
    c->started = true;
    c->expected = value + 1;
    ++c->rounds;
    /* The answer goes from the connection's own send slot. */
    const size_t send_offset = (size_t)(c - clients) * 2 + 1;
    msg[send_offset] = value + 1;
    struct rpma_cq *cq = NULL;
    if ((ret = example_check(
             rpma_send(c->conn, msg_mr, send_offset * PING_PONG_MSG_SIZE,
                       PING_PONG_MSG_SIZE, RPMA_F_COMPLETION_ALWAYS, NULL),
             kWho, "rpma_send")) ||
        (ret = example_check(rpma_conn_get_cq(c->conn, &cq), kWho,
                             "rpma_conn_get_cq")) ||
        (ret = example_check(next_wc(cq, &wc), kWho, "waiting for the send")))
      break;
  }
  if (!ret)
    example_say(kWho, "served %d clients x %d rounds through the SRQ", finished,
                expected_rounds);
  for (int i = 0; i < accepted; ++i) {
    if (clients[i].conn != NULL) {
      (void)rpma_conn_disconnect(clients[i].conn);
      (void)rpma_conn_delete(&clients[i].conn);
    }
  }
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_cfg:
  ret |=
      example_check(rpma_conn_cfg_delete(&cfg), kWho, "rpma_conn_cfg_delete");
out_srq:
  ret |= example_check(rpma_srq_delete(&srq), kWho, "rpma_srq_delete");
  ret |=
      example_check(rpma_srq_cfg_delete(&srq_cfg), kWho, "rpma_srq_cfg_delete");
  ret |= example_check(rpma_mr_dereg(&msg_mr), kWho, "rpma_mr_dereg");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
out_free:
  free(msg);
  return ret ? 1 : 0;
}
