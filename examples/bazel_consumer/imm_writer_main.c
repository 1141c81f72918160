/*
 * imm_writer_main: connects to ADDR PORT, takes the server's memory
 * descriptor from the connection's private data, and writes MESSAGE there
 * with immediate data 1. Against the fake NIC (the default backend) with no
 * server it reports the rejected connection; RPMA_HARNESS_BACKEND=rdma-core
 * makes it talk to a real NIC.
 */
#include <stdio.h>
#include <string.h>

#include "imm_writer.h"

int main(int argc, char *argv[])
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s ADDR PORT MESSAGE\n", argv[0]);
		return 2;
	}
	struct ibv_context *dev = NULL;
	struct rpma_peer *peer = NULL;
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_mr_remote *dst = NULL;
	enum rpma_conn_event event = RPMA_CONN_UNDEFINED;
	struct rpma_conn_private_data pdata;
	enum ibv_wc_status status = IBV_WC_SUCCESS;
	int ret = rpma_utils_get_ibv_context(argv[1],
					     RPMA_UTIL_IBV_CONTEXT_REMOTE, &dev);
	if (!ret)
		ret = rpma_peer_new(dev, &peer);
	if (!ret)
		ret = rpma_conn_req_new(peer, argv[1], argv[2], NULL, &req);
	if (!ret)
		ret = rpma_conn_req_connect(&req, NULL, &conn);
	if (!ret)
		ret = rpma_conn_next_event(conn, &event);
	if (!ret && event != RPMA_CONN_ESTABLISHED) {
		fprintf(stderr, "connection not established: %s\n",
			rpma_utils_conn_event_2str(event));
		ret = RPMA_E_UNKNOWN;
	}
	if (!ret)
		ret = rpma_conn_get_private_data(conn, &pdata);
	if (!ret)
		ret = rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &dst);
	if (!ret)
		ret = imm_writer_write(conn, peer, dst, 0, argv[3],
				       strlen(argv[3]), 1, &status);
	if (ret == IMM_WRITER_E_COMPLETION)
		fprintf(stderr, "write failed: %s\n", ibv_wc_status_str(status));
	else if (ret && event == RPMA_CONN_ESTABLISHED)
		fprintf(stderr, "failed: %s\n", rpma_err_2str(ret));
	if (dst)
		rpma_mr_remote_delete(&dst);
	if (conn) {
		if (event == RPMA_CONN_ESTABLISHED)
			rpma_conn_disconnect(conn);
		rpma_conn_delete(&conn);
	}
	if (peer)
		rpma_peer_delete(&peer);
	return ret ? 1 : 0;
}
