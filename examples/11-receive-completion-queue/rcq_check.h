/*
 * rcq_check.h: the receive-completion-queue pair's one rule, shared by its
 * server and client: with a separate receive CQ (rpma_conn_cfg_set_rcq_size),
 * every receive completes there and nothing else does.
 */
#ifndef EXAMPLES_11_RECEIVE_COMPLETION_QUEUE_RCQ_CHECK_H_
#define EXAMPLES_11_RECEIVE_COMPLETION_QUEUE_RCQ_CHECK_H_

#include <stdio.h>

#include "example_common.h"

#define RCQ_SIZE 4

/*
 * One successful completion of each of `want` (IBV_WC_SEND / IBV_WC_RECV), in
 * any order, each from the CQ it belongs to.
 */
static inline int rcq_wait(const char *who, struct rpma_conn *conn, int n,
                           const enum ibv_wc_opcode *want) {
  bool seen[2] = {false, false};
  for (int done = 0; done < n; ++done) {
    struct ibv_wc wc;
    bool from_rcq = false;
    int ret = example_next_wc(conn, &wc, &from_rcq);
    if (ret) return ret;
    if (wc.status != IBV_WC_SUCCESS) {
      fprintf(stderr, "%s: completion failed: %s\n", who,
              ibv_wc_status_str(wc.status));
      return -1;
    }
    const bool is_recv = wc.opcode == IBV_WC_RECV;
    if (is_recv != from_rcq) {
      fprintf(stderr, "%s: a %s completion came from the %s\n", who,
              is_recv ? "receive" : "send", from_rcq ? "receive CQ" : "CQ");
      return -1;
    }
    int i = 0;
    while (i < n && (want[i] != wc.opcode || seen[i])) ++i;
    if (i == n) {
      fprintf(stderr, "%s: unexpected completion (opcode %d)\n", who,
              wc.opcode);
      return -1;
    }
    seen[i] = true;
  }
  return 0;
}

#endif  // EXAMPLES_11_RECEIVE_COMPLETION_QUEUE_RCQ_CHECK_H_
