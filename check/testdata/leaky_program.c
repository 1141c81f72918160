/* A plain librpma program for check/exit_report_test.sh: with "leak" it
 * exits with a peer and an MR still alive, with "clean" it deletes them.
 * Nothing in it knows about the harness: RPMA_HARNESS_CHECK does the rest. */
#include <librpma.h>
#include <stdio.h>
#include <string.h>

static char buffer[4096];

/* Not static: the checker names exported functions (dladdr). */
int make_peer_and_mr(struct rpma_peer** peer, struct rpma_mr_local** mr) {
  struct ibv_context* ctx = NULL;
  if (rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                 &ctx) != 0) {
    return 1;
  }
  if (rpma_peer_new(ctx, peer) != 0) return 1;
  return rpma_mr_reg(*peer, buffer, sizeof(buffer), RPMA_MR_USAGE_WRITE_SRC,
                     mr) != 0;
}

int main(int argc, char** argv) {
  struct rpma_peer* peer = NULL;
  struct rpma_mr_local* mr = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: leaky_program leak|clean\n");
    return 2;
  }
  if (make_peer_and_mr(&peer, &mr) != 0) return 1;
  if (strcmp(argv[1], "clean") == 0) {
    if (rpma_mr_dereg(&mr) != 0 || rpma_peer_delete(&peer) != 0) return 1;
  }
  return 0;
}
