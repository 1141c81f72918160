/*
 * hostile_verbs.c: an ordinary libibverbs program that misuses the verbs
 * API in the ways a buggy program does -- wrong states, oversized queues
 * and WRs, bad keys and access flags, objects still in use -- and prints,
 * one line a case, what each call answered: the errno name of a failed
 * call, "ok", or the status of the completion a posted WR got. Only misuse
 * that real libibverbs survives is here (a NULL or freed object crashes
 * inside its inline wrappers, on any NIC).
 *
 * The same binary runs on rxe (tools/softroce_vm/ci.sh) and on the drop-in
 * libibverbs.so.1 with the rxe personality (//verbs_dropin:dropin_verbs_test);
 * verbs_dropin/testdata/hostile_verbs.rxe.txt is what rxe printed, and both
 * must print it again.
 *
 *   hostile_verbs [device]
 */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <sys/mman.h>

#include "verbs_program.h"

#define LEN 4096

/* A call returning an object: "ok", or errno's name. */
static void said_ptr(const char *name, const void *p) {
	printf("%s %s\n", name, p != NULL ? "ok" : errno_name(errno));
}

static struct ibv_pd *pd;

static struct ibv_qp *new_qp(struct ibv_cq *cq, uint32_t wr, uint32_t sge,
			     uint32_t inline_data) {
	struct ibv_qp_init_attr init;
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_RC;
	init.send_cq = cq;
	init.recv_cq = cq;
	init.cap.max_send_wr = wr;
	init.cap.max_recv_wr = wr;
	init.cap.max_send_sge = sge;
	init.cap.max_recv_sge = sge;
	init.cap.max_inline_data = inline_data;
	return ibv_create_qp(pd, &init);
}

/* The next completion's status name, or "none" after about 2 s. */
static void said_wc(const char *name, struct ibv_cq *cq) {
	struct ibv_wc wc;
	for (long spins = 0; spins < 200000000L; ++spins) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0) {
			printf("%s poll-error\n", name);
			return;
		}
		if (n == 1) {
			printf("%s %s\n", name, ibv_wc_status_str(wc.status));
			return;
		}
	}
	printf("%s none\n", name);
}

static void drain(struct ibv_cq *cq) {
	struct ibv_wc wc[16];
	while (ibv_poll_cq(cq, 16, wc) > 0) {
	}
}

static int post_one(struct ibv_qp *qp, enum ibv_wr_opcode op, void *addr,
		    uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		    int flags) {
	struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED | flags;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int main(int argc, char **argv) {
	/* A line at a time: what was said before a crash is kept. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (open_device("hostile_verbs", argc, argv)) return 1;
	pd = ibv_alloc_pd(ctx);
	char *buf = calloc(1, LEN), *dst = calloc(1, LEN);
	if (pd == NULL || buf == NULL || dst == NULL)
		return 1;

	/* ---- queries ---- */
	struct ibv_port_attr pa;
	said_rc("query_port_2", ibv_query_port(ctx, 2, &pa));
	union ibv_gid g;
	said_rc("query_gid_index_4096", ibv_query_gid(ctx, 1, 4096, &g) ? errno : 0);

	/* ---- memory registration ---- */
	said_ptr("reg_mr_remote_write_without_local_write",
		 ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_REMOTE_WRITE));
	said_ptr("reg_mr_remote_atomic_without_local_write",
		 ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_REMOTE_ATOMIC));
	void *none = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	said_ptr("reg_mr_unmapped", none == MAP_FAILED ? NULL :
		 ibv_reg_mr(pd, none, LEN, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *romr = ibv_reg_mr(pd, dst, LEN, 0);
	said_ptr("reg_mr_local_read_only", romr);
	if (mr == NULL || dmr == NULL)
		return 1;

	/* ---- CQs ---- */
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		return 1;
	/* (CQs of 0 or -1 entries are not here: on rxe one of them crashed the
	 * program in half the runs.) */
	said_ptr("create_cq_above_max_cqe",
		 ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0));
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (cq == NULL || cq2 == NULL)
		return 1;

	/* ---- QPs ---- */
	said_ptr("create_qp_send_wr_above_max",
		 new_qp(cq, (uint32_t)da.max_qp_wr + 1, 1, 0));
	said_ptr("create_qp_send_sge_above_max",
		 new_qp(cq, 4, (uint32_t)da.max_sge + 1, 0));
	said_ptr("create_qp_inline_64k", new_qp(cq, 4, 1, 65536));
	/* (A QP without a receive CQ is not here: rxe's provider dereferences
	 * it, a crash on rxe.) */
	struct ibv_qp *qp = new_qp(cq, 4, 1, 0);
	if (qp == NULL)
		return 1;
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	said_rc("modify_qp_reset_to_rts", ibv_modify_qp(qp, &a, IBV_QP_STATE));
	a.qp_state = IBV_QPS_INIT;
	said_rc("modify_qp_init_without_port", ibv_modify_qp(qp, &a, IBV_QP_STATE));
	said_rc("post_send_in_reset",
		post_one(qp, IBV_WR_SEND, buf, 8, mr->lkey, 0, 0, 0));
	said_rc("destroy_cq_in_use", ibv_destroy_cq(cq));
	said_rc("dealloc_pd_in_use", ibv_dealloc_pd(pd));
	said_rc("destroy_qp", ibv_destroy_qp(qp));

	/* ---- WRs on a connected pair ---- */
	struct ibv_qp *qa = new_qp(cq, 4, 1, 0), *qb = new_qp(cq2, 4, 1, 0);
	if (qa == NULL || qb == NULL ||
	    connect_rc_pair(qa, qb,
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ))
		return 1;
	struct ibv_qp_attr got;
	struct ibv_qp_init_attr got_init;
	said_rc("query_qp", ibv_query_qp(qa, &got, IBV_QP_CAP, &got_init));
	printf("granted max_inline_data %u\n", got_init.cap.max_inline_data);
	struct ibv_sge sges[2] = {{(uintptr_t)buf, 8, mr->lkey},
				  {(uintptr_t)buf + 8, 8, mr->lkey}};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = sges;
	wr.num_sge = 2;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = dmr->rkey;
	said_rc("post_send_sge_above_cap", ibv_post_send(qa, &wr, &bad));
	said_rc("post_send_inline_above_cap",
		post_one(qa, IBV_WR_RDMA_WRITE, buf, 1024, 0, (uintptr_t)dst,
			 dmr->rkey, IBV_SEND_INLINE));
	struct ibv_send_wr chain[6];
	memset(chain, 0, sizeof(chain));
	for (int i = 0; i < 6; ++i) {
		chain[i].sg_list = sges;
		chain[i].num_sge = 1;
		chain[i].opcode = IBV_WR_RDMA_WRITE;
		chain[i].wr.rdma.remote_addr = (uintptr_t)dst;
		chain[i].wr.rdma.rkey = dmr->rkey;
		chain[i].next = i < 5 ? &chain[i + 1] : NULL;
	}
	/* Unsignaled, so the ones taken complete without a CQE. */
	int rc = ibv_post_send(qa, chain, &bad);
	printf("post_send_above_max_send_wr %s bad_wr_index %ld\n",
	       errno_name(rc), rc ? (long)(bad - chain) : -1L);
	/* The taken WRs drain; a signaled write tells when. */
	said_rc("post_after_overflow",
		post_one(qa, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey,
			 (uintptr_t)dst, dmr->rkey, 0));
	said_wc("post_after_overflow_wc", cq);

	said_rc("post_bad_lkey",
		post_one(qa, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey ^ 0x5a5a00,
			 (uintptr_t)dst, dmr->rkey, 0));
	said_wc("bad_lkey_wc", cq);

	/* ibv_post_send(3) allows IBV_SEND_INLINE on SEND and RDMA_WRITE only;
	 * a READ with it, on a fresh pair. */
	struct ibv_cq *cq3 = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *qc = new_qp(cq3, 4, 1, 0), *qd = new_qp(cq3, 4, 1, 0);
	if (cq3 == NULL || qc == NULL || qd == NULL ||
	    connect_rc_pair(qc, qd,
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ))
		return 1;
	said_rc("post_read_inline",
		post_one(qc, IBV_WR_RDMA_READ, buf, 8, mr->lkey, (uintptr_t)dst,
			 dmr->rkey, IBV_SEND_INLINE));
	said_wc("read_inline_wc", cq3);
	drain(cq);
	drain(cq2);
	drain(cq3);
	return 0;
}
