/*
 * loopback_write_imm.c: an ordinary libibverbs program, built against
 * Debian's libibverbs-dev, that runs unchanged on a real NIC (rxe) and on
 * the drop-in libibverbs.so.1. Two RC QPs of one process are connected by
 * hand (ibv_modify_qp with each other's QP number, LID and GID, as
 * ibv_rc_pingpong does after its TCP exchange); QP a writes 4 KiB with
 * immediate data into QP b's buffer; both completions are checked, and the
 * bytes. Then one bad write (an rkey b never made) must fail with
 * IBV_WC_REM_ACCESS_ERR.
 *
 *   loopback_write_imm [device]      prints "loopback_write_imm: ok" on success
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN 4096
#define IMM 0x12345678u

static int fail(const char *what) {
	fprintf(stderr, "loopback_write_imm: %s\n", what);
	return 1;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
	for (long spins = 0; spins < 100000000L; ++spins) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
	}
	return 0;
}

static int to_rts(struct ibv_qp *qp, uint32_t dest_qpn, uint16_t dlid,
		  const union ibv_gid *dgid, int use_gid) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = dlid;
	a.ah_attr.port_num = 1;
	if (use_gid) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *dgid;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.grh.sgid_index = 0;
	}
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
				       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER);
	if (rc) {
		errno = rc;	/* ibv_modify_qp(3) returns the errno */
		return 1;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0;
}

int main(int argc, char **argv) {
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (list == NULL || n == 0)
		return fail("no RDMA device");
	/* [DEVICE] [--reuse-source-early] [--overflow-send-queue]: bugs on
	 * purpose. The first changes the source of the write with imm before
	 * its completion is polled (ibv_post_send(3): the buffer is the NIC's
	 * until then). The second posts more unsignaled writes than the send
	 * queue holds (a slot is freed only by a polled completion, its own or
	 * a later signaled WR's). */
	const char *want = NULL;
	int reuse_early = 0, overflow_sq = 0;
	for (int i = 1; i < argc; ++i) {
		if (strcmp(argv[i], "--reuse-source-early") == 0)
			reuse_early = 1;
		else if (strcmp(argv[i], "--overflow-send-queue") == 0)
			overflow_sq = 1;
		else
			want = argv[i];
	}
	struct ibv_device *dev = list[0];
	for (int i = 0; want != NULL && i < n; ++i)
		if (strcmp(ibv_get_device_name(list[i]), want) == 0)
			dev = list[i];
	struct ibv_context *ctx = ibv_open_device(dev);
	if (ctx == NULL)
		return fail("ibv_open_device");
	struct ibv_port_attr port;
	if (ibv_query_port(ctx, 1, &port))
		return fail("ibv_query_port");
	const int use_gid = port.link_layer == IBV_LINK_LAYER_ETHERNET;
	union ibv_gid gid;
	memset(&gid, 0, sizeof(gid));
	if (use_gid && ibv_query_gid(ctx, 1, 0, &gid))
		return fail("ibv_query_gid");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *src = malloc(LEN), *dst = calloc(1, LEN);
	if (pd == NULL || src == NULL || dst == NULL)
		return fail("ibv_alloc_pd");
	for (int i = 0; i < LEN; ++i)
		src[i] = (char)(i * 7 + 1);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, LEN,
					IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE);
	if (smr == NULL || dmr == NULL)
		return fail("ibv_reg_mr");
	struct ibv_cq *cqa = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (cqa == NULL || cqb == NULL)
		return fail("ibv_create_cq");
	struct ibv_qp_init_attr init;
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.send_cq = cqa;
	init.recv_cq = cqa;
	struct ibv_qp *qa = ibv_create_qp(pd, &init);
	init.send_cq = cqb;
	init.recv_cq = cqb;
	struct ibv_qp *qb = ibv_create_qp(pd, &init);
	if (qa == NULL || qb == NULL)
		return fail("ibv_create_qp");
	if (to_rts(qa, qb->qp_num, port.lid, &gid, use_gid) ||
	    to_rts(qb, qa->qp_num, port.lid, &gid, use_gid))
		return fail("ibv_modify_qp to RTS");

	struct ibv_recv_wr rwr, *bad_rwr;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 2;
	if (ibv_post_recv(qb, &rwr, &bad_rwr))
		return fail("ibv_post_recv");
	struct ibv_sge sge = {(uintptr_t)src, LEN, smr->lkey};
	struct ibv_send_wr wr, *bad_wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(IMM);
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dmr->rkey;
	if (ibv_post_send(qa, &wr, &bad_wr))
		return fail("ibv_post_send");
	if (reuse_early)
		src[LEN - 1] ^= 0x5a;
	struct ibv_wc wc;
	if (poll_one(cqa, &wc) != 1 || wc.status != IBV_WC_SUCCESS ||
	    wc.wr_id != 1 || wc.opcode != IBV_WC_RDMA_WRITE)
		return fail("the sender's completion");
	if (poll_one(cqb, &wc) != 1 || wc.status != IBV_WC_SUCCESS ||
	    wc.wr_id != 2 || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
	    !(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM ||
	    wc.byte_len != LEN || wc.qp_num != qb->qp_num)
		return fail("the receiver's completion");
	/* (Reused early, the last byte is the old or the new one.) */
	if (memcmp(src, dst, reuse_early ? LEN - 1 : LEN) != 0)
		return fail("the bytes");

	if (overflow_sq) {
		/* max_send_wr (4) + 1 unsignaled writes, then a signaled one;
		 * a NIC that refuses a post (ENOMEM) ends the run early. */
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = 0;
		for (int i = 0; i < 6; ++i) {
			wr.wr_id = 10 + i;
			if (i == 5)
				wr.send_flags = IBV_SEND_SIGNALED;
			if (ibv_post_send(qa, &wr, &bad_wr))
				return fail("ibv_post_send (send queue full)");
		}
		if (poll_one(cqa, &wc) != 1 || wc.wr_id != 15 ||
		    wc.status != IBV_WC_SUCCESS)
			return fail("the signaled write's completion");
		wr.send_flags = IBV_SEND_SIGNALED;
	}

	/* A write to an rkey nobody made: the responder NAKs it. */
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.rkey = dmr->rkey ^ 0x5a5a;
	wr.wr_id = 3;
	if (ibv_post_send(qa, &wr, &bad_wr))
		return fail("ibv_post_send (bad rkey)");
	if (poll_one(cqa, &wc) != 1 || wc.wr_id != 3 ||
	    wc.status != IBV_WC_REM_ACCESS_ERR) {
		fprintf(stderr, "status %s\n", ibv_wc_status_str(wc.status));
		return fail("the bad write's completion");
	}

	/*
	 * Addressing rules, asked of the NIC with a third QP (INIT -> RTR):
	 * on a RoCE port an address vector without a GRH is refused, and one
	 * whose GID is not a neighbour's (another address on no interface) is
	 * reported as the NIC reports it; printed, so a run on rxe says what
	 * rxe does.
	 */
	init.send_cq = cqa;
	init.recv_cq = cqa;
	struct ibv_qp *qc = ibv_create_qp(pd, &init);
	if (qc == NULL)
		return fail("ibv_create_qp (third)");
	union ibv_gid nowhere = gid;
	nowhere.raw[15] ^= 0x80;
	int no_grh = to_rts(qc, qb->qp_num, port.lid, &gid, 0) ? errno : 0;
	printf("loopback_write_imm: RTR without a GRH: %s\n",
	       no_grh ? strerror(no_grh) : "accepted");
	if (use_gid && no_grh != EINVAL)
		return fail("a RoCE address vector without a GRH was not EINVAL");
	if (!use_gid && no_grh != 0)
		return fail("an InfiniBand address vector without a GRH failed");
	if (use_gid) {
		struct ibv_qp_attr reset;
		memset(&reset, 0, sizeof(reset));
		reset.qp_state = IBV_QPS_RESET;
		if (ibv_modify_qp(qc, &reset, IBV_QP_STATE))
			return fail("to RESET");
		int bad_gid = to_rts(qc, qb->qp_num, 0, &nowhere, 1) ? errno : 0;
		printf("loopback_write_imm: RTR to an unknown GID: %s\n",
		       bad_gid ? strerror(bad_gid) : "accepted");
	}
	if (ibv_destroy_qp(qc))
		return fail("ibv_destroy_qp (third)");

	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_destroy_cq(cqa) ||
	    ibv_destroy_cq(cqb) || ibv_dereg_mr(smr) || ibv_dereg_mr(dmr) ||
	    ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return fail("teardown");
	ibv_free_device_list(list);
	free(src);
	free(dst);
	printf("loopback_write_imm: ok (%s, %s)\n", ibv_get_device_name(dev),
	       use_gid ? "RoCE" : "InfiniBand");
	return 0;
}
