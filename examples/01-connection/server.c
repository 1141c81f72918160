/*
 * 01-connection/server.c: accepts one connection, checks the client's
 * private data, answers with its own, and waits for the client to
 * disconnect.
 *
 *   server ADDR PORT
 */
#include <stdio.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "connection server";
static const char kClientHello[] = "hello from the client";
static const char kServerHello[] = "hello from the server";

int main(int argc, char *argv[]) {
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  if (argc < 3) {
    fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
    return 2;
  }
  const char *addr = argv[1], *port = argv[2];
  struct rpma_peer *peer = NULL;
  struct rpma_ep *ep = NULL;
  struct rpma_conn_req *req = NULL;
  struct rpma_conn *conn = NULL;
  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer),
                    kWho, "rpma_peer_new");
  if (ret) return 1;
  if ((ret = example_check(example_listen(kWho, peer, addr, port, &ep), kWho,
                           "rpma_ep_listen")))
    goto out_peer;

  if ((ret = example_check(rpma_ep_next_conn_req(ep, NULL, &req), kWho,
                           "rpma_ep_next_conn_req")))
    goto out_ep;
  /* What the client sent with its connect, before we accept. */
  struct rpma_conn_private_data theirs = {NULL, 0};
  ret = rpma_conn_req_get_private_data(req, &theirs);
  if (!ret && (theirs.len < sizeof(kClientHello) ||
               memcmp(theirs.ptr, kClientHello, sizeof(kClientHello)) != 0)) {
    fprintf(stderr, "%s: the request's private data is not \"%s\"\n", kWho,
            kClientHello);
    ret = -1;
  }
  if (example_check(ret, kWho, "rpma_conn_req_get_private_data")) {
    (void)rpma_conn_req_delete(&req);
    goto out_ep;
  }
  example_say(kWho, "request says \"%s\"", (const char *)theirs.ptr);

  struct rpma_conn_private_data ours = {(void *)kServerHello,
                                        sizeof(kServerHello)};
  if ((ret = example_check(rpma_conn_req_connect(&req, &ours, &conn), kWho,
                           "rpma_conn_req_connect")))
    goto out_ep;
  if ((ret = example_check(example_expect_event(conn, RPMA_CONN_ESTABLISHED),
                           kWho, "waiting for RPMA_CONN_ESTABLISHED"))) {
    (void)rpma_conn_delete(&conn);
    goto out_ep;
  }
  uint32_t qp_num = 0;
  if ((ret = example_check(rpma_conn_get_qp_num(conn, &qp_num), kWho,
                           "rpma_conn_get_qp_num"))) {
    (void)rpma_conn_delete(&conn);
    goto out_ep;
  }
  example_say(kWho, "connection established (QP %u)", qp_num);
  ret = example_check(example_wait_closed(&conn), kWho,
                      "waiting for the client to disconnect");
  if (!ret) example_say(kWho, "the client disconnected");

out_ep:
  ret |= example_check(rpma_ep_shutdown(&ep), kWho, "rpma_ep_shutdown");
out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
  return ret ? 1 : 0;
}
