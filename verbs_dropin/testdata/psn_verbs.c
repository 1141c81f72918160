/*
 * psn_verbs.c: an ordinary libibverbs program whose two RC QPs disagree on
 * PSNs, as a program that connects its QPs by hand and gets the exchange
 * wrong (forgets to send its starting PSN, sends the other side's, or
 * picks one at random on each side). Each case makes a fresh pair of QPs,
 * the responder expecting PSN R (rq_psn) and the requester sending from F
 * (sq_psn), posts one WR, and prints one line: the WR's completion, the
 * responder's receive completion, how many of the message's bytes landed
 * at the far end, and the responder's QP state afterwards.
 *
 * The same binary runs on rxe (tools/softroce_vm/ci.sh) and on the drop-in
 * libibverbs.so.1 with the rxe personality (//verbs_dropin:dropin_verbs_test);
 * verbs_dropin/testdata/psn_verbs.rxe.txt is what rxe printed, and both
 * must print it again.
 *
 *   psn_verbs [device]
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <stdlib.h>

#include "verbs_program.h"

#define LEN 8192

static struct ibv_pd *pd;

static struct ibv_qp *new_qp(struct ibv_cq *cq, enum ibv_qp_type type) {
	struct ibv_qp_init_attr init;
	memset(&init, 0, sizeof(init));
	init.qp_type = type;
	init.send_cq = cq;
	init.recv_cq = cq;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &init);
}

/* Bytes of `p` (`len` of them) that are not zero. */
static size_t nonzero(const char *p, size_t len) {
	size_t n = 0;
	for (size_t i = 0; i < len; ++i) n += p[i] != 0;
	return n;
}

static const char *op_name(enum ibv_wr_opcode op) {
	switch (op) {
	case IBV_WR_RDMA_WRITE: return "write";
	case IBV_WR_RDMA_WRITE_WITH_IMM: return "write_imm";
	case IBV_WR_SEND: return "send";
	case IBV_WR_RDMA_READ: return "read";
	default: return "other";
	}
}

/*
 * One WR `op` of `len` bytes (MTU 1 KiB: len / 1024 packets, an RDMA READ
 * one request for as many response PSNs) from a requester at sq_psn `sq`
 * (timeout 8: ~1 ms a try, retry_cnt 2, rnr_retry 7) to a fresh responder
 * expecting rq_psn `rq`, a receive posted on the responder for a SEND or a
 * write with imm. With `uc`, on UC QPs (no timers, no READ): the
 * "uc_psn_..." lines.
 */
static void psn_case(enum ibv_wr_opcode op, uint32_t len, uint32_t rq,
		     uint32_t sq, int uc) {
	char name[96];
	snprintf(name, sizeof(name), "%spsn_%s_%u_rq%u_sq%u", uc ? "uc_" : "",
		 op_name(op), len, rq, sq);
	const enum ibv_qp_type type = uc ? IBV_QPT_UC : IBV_QPT_RC;
	struct ibv_cq *cqe = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cqf = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qe = cqe ? new_qp(cqe, type) : NULL;
	struct ibv_qp *qf = cqf ? new_qp(cqf, type) : NULL;
	char *mine = malloc(LEN), *far = calloc(1, LEN);
	if (qe == NULL || qf == NULL || mine == NULL || far == NULL) {
		printf("%s setup-failed\n", name);
		return;
	}
	const int read = op == IBV_WR_RDMA_READ;
	/* A READ carries the far buffer's bytes back into ours. */
	memset(read ? far : mine, 0x5a, LEN);
	if (read) memset(mine, 0, LEN);
	const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ;
	/* (A UC QP takes no remote read.) */
	const int qp_access = uc ? IBV_ACCESS_REMOTE_WRITE : access;
	const int rtr_extra = uc ? 0 : RC_RTR_MASK;
	const int rts_extra = uc ? 0 : RC_RTS_MASK;
	struct ibv_mr *mmr = ibv_reg_mr(pd, mine, LEN, access);
	struct ibv_mr *fmr = ibv_reg_mr(pd, far, LEN, access);
	struct ibv_qp_attr rts;
	memset(&rts, 0, sizeof(rts));
	rts.qp_state = IBV_QPS_RTS;
	rts.timeout = 8;
	rts.retry_cnt = 2;
	rts.rnr_retry = 7;
	rts.sq_psn = sq;
	rts.max_rd_atomic = 1;
	if (mmr == NULL || fmr == NULL || to_init(qe, qp_access) ||
	    to_init(qf, qp_access) ||
	    to_rtr_psn(qe, qf->qp_num, 0, rtr_extra) ||
	    to_rtr_psn(qf, qe->qp_num, rq, rtr_extra) ||
	    ibv_modify_qp(qe, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN | rts_extra) ||
	    to_rts(qf, rts_extra)) {
		printf("%s setup-failed\n", name);
		return;
	}
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge rsge = {(uintptr_t)far, LEN, fmr->lkey};
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 7;
	rwr.sg_list = &rsge;
	rwr.num_sge = op == IBV_WR_SEND ? 1 : 0;
	const int receives = op == IBV_WR_SEND || op == IBV_WR_RDMA_WRITE_WITH_IMM;
	if (receives && ibv_post_recv(qf, &rwr, &rbad)) {
		printf("%s post-recv-failed\n", name);
		return;
	}
	struct ibv_sge sge = {(uintptr_t)mine, len, mmr->lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(0x1234);
	wr.wr.rdma.remote_addr = (uintptr_t)far;
	wr.wr.rdma.rkey = fmr->rkey;
	if (ibv_post_send(qe, &wr, &bad)) {
		printf("%s post-failed\n", name);
		return;
	}
	struct ibv_wc wc, rwc;
	int got = 0, rgot = 0;
	for (double end = now() + watch_seconds(2); !got && now() < end;) {
		got = ibv_poll_cq(cqe, 1, &wc) == 1;
		if (!got) pause_between_polls();
	}
	/* The responder completes (or flushes) its receive before the
	 * requester's completion can come. */
	for (double end = now() + watch_seconds(0.1); receives && !rgot &&
						      now() < end;) {
		rgot = ibv_poll_cq(cqf, 1, &rwc) == 1;
		if (!rgot) pause_between_polls();
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(qf, &qa, IBV_QP_STATE, &qi);
	printf("%s: %s receive %s landed %zu responder_state %d\n", name,
	       got ? ibv_wc_status_str(wc.status) : "none",
	       rgot ? ibv_wc_status_str(rwc.status) : "none",
	       nonzero(read ? mine : far, len), (int)qa.qp_state);
	ibv_destroy_qp(qe);
	ibv_destroy_qp(qf);
	ibv_dereg_mr(mmr);
	ibv_dereg_mr(fmr);
	ibv_destroy_cq(cqe);
	ibv_destroy_cq(cqf);
	free(mine);
	free(far);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (open_device("psn_verbs", argc, argv)) return 1;
	pd = ibv_alloc_pd(ctx);
	if (pd == NULL) {
		fprintf(stderr, "psn_verbs: no PD\n");
		return 1;
	}
	const enum ibv_wr_opcode ops[] = {IBV_WR_RDMA_WRITE,
					  IBV_WR_RDMA_WRITE_WITH_IMM,
					  IBV_WR_SEND, IBV_WR_RDMA_READ};
	/* R and F: in step; F ahead of R (by one, by many); F behind R with
	 * the whole message behind; F behind R with the message reaching R
	 * (its packet at R a MIDDLE, or its LAST); and the same near the top
	 * of the PSN space, where the 24-bit comparisons wrap. */
	const uint32_t low = 1000, high = 0x900000;
	const struct {
		uint32_t rq, sq, len;
	} cases[] = {
		{low, low, 8192},          {low, low + 1, 8192},
		{low, low + 100, 8192},    {low, low - 100, 8192},
		{low, low - 3, 8192},      {low, low - 7, 8192},
		{low, low - 1, 1024},      {high, high - 100, 8192},
		{high, high - 3, 8192},    {high, high + 1, 8192},
		{0, 0xfffffe, 8192},       {0xfffffe, 0, 8192},
	};
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); ++o)
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c)
			psn_case(ops[o], cases[c].len, cases[c].rq,
				 cases[c].sq, 0);
	/* UC: rxe_resp.c check_psn takes a message's FIRST or ONLY at any
	 * PSN (it resynchronises), and drops a MIDDLE or LAST out of
	 * sequence with the rest of its message. F ahead of R, behind it
	 * wholly, behind it reaching it, across the top. */
	const size_t uc_cases[] = {1, 3, 5, 10};
	for (size_t o = 0; o < 3; ++o)
		for (size_t u = 0; u < 4; ++u)
			psn_case(ops[o], cases[uc_cases[u]].len,
				 cases[uc_cases[u]].rq, cases[uc_cases[u]].sq,
				 1);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(device_list);
	return 0;
}
