/*
 * client.c: connects to ADDR PORT and writes a message into the server's
 * buffer with immediate data.
 *
 *   client ADDR PORT [--reuse-source-early]
 *
 * --reuse-source-early is a bug on purpose: the client overwrites its
 * source buffer before the write has completed, which ibv_post_send(3)
 * forbids (the NIC may still be reading it). A real NIC usually sends the
 * bytes first and nothing shows; under RPMA_HARNESS_CHECK=strict the
 * harness's usage checker reports it and the process exits 66.
 */
#include <errno.h>
#include <stdlib.h>

#include "common.h"

static int fail(const char *what) {
	fprintf(stderr, "client: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: client ADDR PORT [--reuse-source-early]\n");
		return 2;
	}
	const int reuse_early = argc > 3 && strcmp(argv[3], "--reuse-source-early") == 0;
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(argv[1], argv[2], &hints, &res))
		return fail("rdma_getaddrinfo");
	struct ibv_qp_init_attr attr;
	qp_attributes(&attr);
	struct rdma_cm_id *id;
	if (rdma_create_ep(&id, res, NULL, &attr))
		return fail("rdma_create_ep");
	rdma_freeaddrinfo(res);

	char *message = malloc(MESSAGE_LEN);
	struct ibv_mr *mr = message == NULL ? NULL :
		ibv_reg_mr(id->pd, message, MESSAGE_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (mr == NULL)
		return fail("ibv_reg_mr");
	for (size_t i = 0; i < MESSAGE_LEN; ++i)
		message[i] = message_byte(i);

	struct rdma_conn_param param;
	memset(&param, 0, sizeof(param));
	param.initiator_depth = 1;
	param.retry_count = 7;
	if (rdma_connect(id, &param))
		return fail("rdma_connect");
	/* A synchronous id keeps the ESTABLISHED event, with the server's
	 * private data, in id->event until the next call. */
	struct remote_buffer where;
	if (id->event == NULL ||
	    id->event->param.conn.private_data_len < sizeof(where)) {
		fprintf(stderr, "client: the server sent no buffer\n");
		return 1;
	}
	memcpy(&where, id->event->param.conn.private_data, sizeof(where));

	struct ibv_sge sge = {(uintptr_t)message, MESSAGE_LEN, mr->lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(IMM);
	wr.wr.rdma.remote_addr = where.addr;
	wr.wr.rdma.rkey = where.rkey;
	if (ibv_post_send(id->qp, &wr, &bad))
		return fail("ibv_post_send");
	if (reuse_early)
		memset(message, 0, MESSAGE_LEN); /* the bug: before the completion */

	struct ibv_wc wc;
	int n;
	while ((n = rdma_get_send_comp(id, &wc)) == 0) {
	}
	if (n < 0)
		return fail("rdma_get_send_comp");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "client: write with immediate failed: %s\n",
			ibv_wc_status_str(wc.status));
		return 1;
	}
	printf("client: wrote %d bytes with immediate 0x%x\n", MESSAGE_LEN, IMM);
	rdma_disconnect(id);
	ibv_dereg_mr(mr);
	free(message);
	rdma_destroy_ep(id);
	return 0;
}
