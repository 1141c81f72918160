/*
 * prog.c: a librpma program as anyone would build it against Debian's
 * librpma-dev (`gcc prog.c -o prog -lrpma`): it finds the device that owns
 * ADDR, registers memory, round-trips its descriptor, listens, connects to
 * itself and has the endpoint reject that request (RPMA_CONN_REJECTED), then
 * tears everything down.
 * With Debian's librpma on a host without an RDMA device it fails at the
 * first call; with the drop-in it runs on the harness's fake NIC.
 *
 *   prog ADDR PORT
 */
#include <librpma.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                  \
  do {                                                               \
    int ret_ = (call);                                               \
    if (ret_) {                                                      \
      fprintf(stderr, "prog: %s: %s\n", #call, rpma_err_2str(ret_)); \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char *argv[]) {
  if (argc < 3) return 2;
  static char buf[4096];
  struct ibv_context *dev = NULL;
  struct rpma_peer *peer = NULL;
  struct rpma_mr_local *mr = NULL;
  struct rpma_mr_remote *remote = NULL;
  struct rpma_ep *ep = NULL;
  size_t desc_size = 0, remote_size = 0;
  char desc[64];
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_INFO);
  CHECK(rpma_utils_get_ibv_context(argv[1], RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev));
  CHECK(rpma_peer_new(dev, &peer));
  CHECK(rpma_mr_reg(peer, buf, sizeof(buf),
                    RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC, &mr));
  CHECK(rpma_mr_get_descriptor_size(mr, &desc_size));
  CHECK(rpma_mr_get_descriptor(mr, desc));
  CHECK(rpma_mr_remote_from_descriptor(desc, desc_size, &remote));
  CHECK(rpma_mr_remote_get_size(remote, &remote_size));
  if (remote_size != sizeof(buf)) {
    fprintf(stderr, "prog: remote size %zu\n", remote_size);
    return 1;
  }
  CHECK(rpma_ep_listen(peer, argv[1], argv[2], &ep));
  struct rpma_conn_req *req = NULL, *incoming = NULL;
  struct rpma_conn *conn = NULL;
  enum rpma_conn_event event = RPMA_CONN_UNDEFINED;
  CHECK(rpma_conn_req_new(peer, argv[1], argv[2], NULL, &req));
  CHECK(rpma_conn_req_connect(&req, NULL, &conn));
  CHECK(rpma_ep_next_conn_req(ep, NULL, &incoming));
  CHECK(rpma_conn_req_delete(&incoming)); /* rejects it */
  CHECK(rpma_conn_next_event(conn, &event));
  if (event != RPMA_CONN_REJECTED) {
    fprintf(stderr, "prog: connection event %s, expected %s\n",
            rpma_utils_conn_event_2str(event),
            rpma_utils_conn_event_2str(RPMA_CONN_REJECTED));
    return 1;
  }
  CHECK(rpma_conn_delete(&conn));
  CHECK(rpma_ep_shutdown(&ep));
  CHECK(rpma_mr_remote_delete(&remote));
  CHECK(rpma_mr_dereg(&mr));
  CHECK(rpma_peer_delete(&peer));
  printf("prog: ok (%s)\n", rpma_err_2str(RPMA_E_NOSUPP));
  return 0;
}
