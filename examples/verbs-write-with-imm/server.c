/*
 * server.c: accepts one connection on ADDR PORT, lets the client write into
 * its buffer, and checks the write with immediate data that arrives.
 *
 *   server ADDR PORT      exits 0 when the bytes and the immediate are right
 */
#include <errno.h>
#include <stdlib.h>

#include "common.h"

static int fail(const char *what) {
	fprintf(stderr, "server: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: server ADDR PORT\n");
		return 2;
	}
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(argv[1], argv[2], &hints, &res))
		return fail("rdma_getaddrinfo");
	struct ibv_qp_init_attr attr;
	qp_attributes(&attr);
	struct rdma_cm_id *listen_id, *id;
	if (rdma_create_ep(&listen_id, res, NULL, &attr))
		return fail("rdma_create_ep");
	rdma_freeaddrinfo(res);
	if (rdma_listen(listen_id, 1))
		return fail("rdma_listen");
	printf("server: listening\n");
	fflush(stdout);
	if (rdma_get_request(listen_id, &id))
		return fail("rdma_get_request");

	char *buffer = calloc(1, MESSAGE_LEN);
	struct ibv_mr *mr = buffer == NULL ? NULL :
		ibv_reg_mr(id->pd, buffer, MESSAGE_LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (mr == NULL)
		return fail("ibv_reg_mr");
	/* A write with immediate consumes a receive; it needs no SGE. */
	struct ibv_recv_wr recv, *bad_recv;
	memset(&recv, 0, sizeof(recv));
	recv.wr_id = 1;
	if (ibv_post_recv(id->qp, &recv, &bad_recv))
		return fail("ibv_post_recv");

	struct remote_buffer where = {(uintptr_t)buffer, mr->rkey, MESSAGE_LEN};
	struct rdma_conn_param param;
	memset(&param, 0, sizeof(param));
	param.private_data = &where;
	param.private_data_len = sizeof(where);
	param.responder_resources = 1;
	if (rdma_accept(id, &param))
		return fail("rdma_accept");

	struct ibv_wc wc;
	int n;
	while ((n = rdma_get_recv_comp(id, &wc)) == 0) {
	}
	if (n < 0)
		return fail("rdma_get_recv_comp");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "server: receive failed: %s\n",
			ibv_wc_status_str(wc.status));
		return 1;
	}
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
	    ntohl(wc.imm_data) != IMM) {
		fprintf(stderr, "server: not a write with immediate 0x%x\n", IMM);
		return 1;
	}
	for (size_t i = 0; i < MESSAGE_LEN; ++i) {
		if (buffer[i] != message_byte(i)) {
			fprintf(stderr, "server: byte %zu differs\n", i);
			return 1;
		}
	}
	printf("server: %d bytes with immediate 0x%x\n", MESSAGE_LEN, IMM);

	rdma_disconnect(id);
	ibv_dereg_mr(mr);
	free(buffer);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return 0;
}
