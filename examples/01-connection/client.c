/*
 * 01-connection/client.c: connects with private data, checks the server's
 * answer, and disconnects.
 *
 *   client ADDR PORT
 */
#include <stdio.h>
#include <string.h>

#include "example_common.h"

static const char kWho[] = "connection client";
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
  struct rpma_conn *conn = NULL;
  int ret =
      example_check(example_peer_new(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &peer),
                    kWho, "rpma_peer_new");
  if (ret) return 1;

  struct rpma_conn_private_data ours = {(void *)kClientHello,
                                        sizeof(kClientHello)};
  if ((ret = example_check(
           example_client_connect(peer, addr, port, NULL, &ours, &conn), kWho,
           "connecting")))
    goto out_peer;
  example_say(kWho, "connected to %s:%s", addr, port);

  struct rpma_conn_private_data theirs = {NULL, 0};
  ret = rpma_conn_get_private_data(conn, &theirs);
  if (!ret && (theirs.len < sizeof(kServerHello) ||
               memcmp(theirs.ptr, kServerHello, sizeof(kServerHello)) != 0)) {
    fprintf(stderr, "%s: the server's private data is not \"%s\"\n", kWho,
            kServerHello);
    ret = -1;
  }
  if (!example_check(ret, kWho, "rpma_conn_get_private_data")) {
    example_say(kWho, "server says \"%s\"", (const char *)theirs.ptr);
  }
  ret |= example_check(example_disconnect(&conn), kWho, "disconnecting");

out_peer:
  ret |= example_check(rpma_peer_delete(&peer), kWho, "rpma_peer_delete");
  return ret ? 1 : 0;
}
