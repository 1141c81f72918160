/*
 * uc_verbs.c: an ordinary libibverbs program that runs Unreliable
 * Connected QPs through what a UC program meets -- the attributes
 * ibv_modify_qp takes at each state, the opcodes ibv_post_send takes, a
 * send and a write with immediate data that land, and the errors a UC
 * responder does not answer (no receive, a bad rkey, a receive too short,
 * a responder not yet RTR, a send its requester cut short, with and
 * without an SRQ) -- and prints, one line a case, what each call answered
 * and what each side's completion queue got.
 *
 * The same binary runs on rxe (tools/softroce_vm/ci.sh) and on the drop-in
 * libibverbs.so.1 with the rxe personality (//verbs_dropin:dropin_verbs_test);
 * verbs_dropin/testdata/uc_verbs.rxe.txt is what rxe printed, and both must
 * print it again.
 *
 *   uc_verbs [device]
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <stdlib.h>
#include <time.h>

#include "verbs_program.h"

#define LEN 8192

static struct ibv_pd *pd;
static char *src, *dst, *rbuf;
static struct ibv_mr *src_mr, *dst_mr, *rbuf_mr;

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_srq *srq; /* where its receives go, when not NULL */
};

/* The SRQ the responder of the next scenario() takes its receives from
 * (NULL: its own queue). */
static struct ibv_srq *scenario_srq;

/* A CQ and a UC QP with `send_sge` send SGEs, its receives from `srq` when
 * not NULL. */
static int new_uc_side(struct side *s, struct ibv_srq *srq, uint32_t send_sge) {
	struct ibv_qp_init_attr init;
	s->srq = srq;
	s->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (s->cq == NULL) return -1;
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_UC;
	init.send_cq = s->cq;
	init.recv_cq = s->cq;
	init.srq = srq;
	init.cap.max_send_wr = 8;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = send_sge;
	init.cap.max_recv_sge = 1;
	s->qp = ibv_create_qp(pd, &init);
	return s->qp != NULL ? 0 : -1;
}

static int new_side_with_srq(struct side *s, struct ibv_srq *srq) {
	return new_uc_side(s, srq, 1);
}

static int new_side(struct side *s) { return new_side_with_srq(s, NULL); }

/*
 * Every completion `s` gets within `wait` seconds (watch_seconds), one line
 * each: status, opcode, wr_id and byte_len (a success), or "none". The CQ
 * is polled once more after the window closes, so a completion made within
 * it is seen however late the program itself was scheduled.
 */
static void said_wcs(const char *name, struct side *s, double wait) {
	struct ibv_wc wc;
	int got = 0;
	const double end = now() + watch_seconds(wait);
	for (;;) {
		int n = ibv_poll_cq(s->cq, 1, &wc);
		if (n < 0) {
			printf("%s poll-error\n", name);
			return;
		}
		if (n == 0) {
			if (now() >= end) break;
			pause_between_polls();
			continue;
		}
		got++;
		if (wc.status == IBV_WC_SUCCESS)
			printf("%s %s opcode %d wr_id %llu byte_len %u\n", name,
			       ibv_wc_status_str(wc.status), wc.opcode,
			       (unsigned long long)wc.wr_id, wc.byte_len);
		else
			printf("%s %s wr_id %llu\n", name,
			       ibv_wc_status_str(wc.status),
			       (unsigned long long)wc.wr_id);
	}
	if (got == 0) printf("%s none\n", name);
}

static const char *state_name(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init)) return "query-error";
	switch (a.qp_state) {
	case IBV_QPS_RESET: return "RESET";
	case IBV_QPS_INIT: return "INIT";
	case IBV_QPS_RTR: return "RTR";
	case IBV_QPS_RTS: return "RTS";
	case IBV_QPS_ERR: return "ERR";
	default: return "other";
	}
}

static int post_recv(struct side *s, uint64_t wr_id, uint32_t len) {
	struct ibv_sge sge = {(uintptr_t)rbuf, len, rbuf_mr->lkey};
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return s->srq != NULL ? ibv_post_srq_recv(s->srq, &wr, &bad)
			      : ibv_post_recv(s->qp, &wr, &bad);
}

static int post_send(struct side *s, enum ibv_wr_opcode op, uint64_t wr_id,
		     uint32_t len, uint32_t rkey) {
	struct ibv_sge sge = {(uintptr_t)src, len, src_mr->lkey};
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(0x1234);
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = (uintptr_t)dst;
		wr.wr.atomic.rkey = rkey;
	}
	return ibv_post_send(s->qp, &wr, &bad);
}

static void destroy_side(struct side *s) {
	ibv_destroy_qp(s->qp);
	ibv_destroy_cq(s->cq);
}

static void fill(char *p, size_t n, int seed);

/*
 * A fresh pair (the responder left in INIT when `responder_init`), one WR
 * of `op` and `len` bytes with the rkey XORed by `rkey_xor`, a receive of
 * `recv_len` bytes posted first when not 0; what each side got, the data,
 * the states; then whether the responder still takes a 100-byte send.
 */
static void scenario(const char *name, int responder_init, enum ibv_wr_opcode op,
		     uint32_t len, uint32_t rkey_xor, uint32_t recv_len) {
	static int seed = 10;
	struct side a, b;
	char what[96];
	if (new_side(&a) || new_side_with_srq(&b, scenario_srq)) {
		printf("%s create %s\n", name, errno_name(errno));
		return;
	}
	int rc = to_init(a.qp, IBV_ACCESS_REMOTE_WRITE) ||
		 to_init(b.qp, IBV_ACCESS_REMOTE_WRITE) ||
		 to_rtr(a.qp, b.qp->qp_num, 0) || to_rts(a.qp, 0);
	if (!responder_init)
		rc = rc || to_rtr(b.qp, a.qp->qp_num, 0) || to_rts(b.qp, 0);
	if (rc) {
		printf("%s connect failed\n", name);
		return;
	}
	fill(src, LEN, ++seed);
	memset(dst, 0, LEN);
	memset(rbuf, 0, LEN);
	if (recv_len > 0) said_rc(name, post_recv(&b, 50, recv_len));
	snprintf(what, sizeof(what), "%s post", name);
	said_rc(what, post_send(&a, op, 51, len, dst_mr->rkey ^ rkey_xor));
	snprintf(what, sizeof(what), "%s requester", name);
	said_wcs(what, &a, 1);
	snprintf(what, sizeof(what), "%s responder", name);
	said_wcs(what, &b, 0.5);
	const char *data = op == IBV_WR_SEND ? rbuf : dst;
	uint32_t n = len < LEN ? len : LEN;
	if (op == IBV_WR_SEND && recv_len < n) n = recv_len;
	int landed = 0;
	for (uint32_t i = 0; i < len && i < LEN; ++i) landed += data[i] == src[i];
	printf("%s data %s (%d of %u bytes match)\n", name,
	       n > 0 && memcmp(data, src, n) == 0 ? "landed" : "not landed",
	       landed, len);
	printf("%s states %s %s\n", name, state_name(a.qp), state_name(b.qp));
	if (responder_init) {
		destroy_side(&a);
		destroy_side(&b);
		return;
	}
	snprintf(what, sizeof(what), "%s then-send", name);
	said_rc(what, post_recv(&b, 52, LEN) ||
			      post_send(&a, IBV_WR_SEND, 53, 100, 0));
	snprintf(what, sizeof(what), "%s then requester", name);
	said_wcs(what, &a, 1);
	snprintf(what, sizeof(what), "%s then responder", name);
	said_wcs(what, &b, 0.5);
	destroy_side(&a);
	destroy_side(&b);
}

static void fill(char *p, size_t n, int seed) {
	for (size_t i = 0; i < n; ++i) p[i] = (char)(i * 7 + seed);
}

/* An SRQ of 8 receives of one SGE; NULL after saying why on a line of
 * `name`. */
static struct ibv_srq *new_srq(const char *name) {
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof(sa));
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (srq == NULL) printf("%s create-srq %s\n", name, errno_name(errno));
	return srq;
}

/*
 * A 3000-byte SEND cut short by its requester (its second SGE's lkey is
 * bad, so only the FIRST packet leaves), the responder taking receives
 * from an SRQ (`use_srq`) or from its own queue, three receives posted:
 * what each side got; then the requester reset and connected again and
 * two 100-byte SENDs. Which receive each lands in tells whether the cut
 * message used its receive up; at the end the responder goes to ERR and
 * flushes what its own queue still holds. With `write_first`, a 100-byte
 * RDMA WRITE goes before the SENDs, which the responder's access flags
 * (no REMOTE_WRITE) refuse: whether the responder looked at it as the
 * packet after the cut before it refused it.
 */
static void cut_send(const char *name, int use_srq, int write_first) {
	struct ibv_srq *srq = NULL;
	struct side a = {NULL, NULL, NULL}, b = {NULL, NULL, NULL};
	char what[96];
	if (use_srq && (srq = new_srq(name)) == NULL) return;
	if (new_uc_side(&a, NULL, 2) || new_uc_side(&b, srq, 1)) {
		printf("%s create %s\n", name, errno_name(errno));
		return;
	}
	said_rc(name, to_init(a.qp, 0) || to_init(b.qp, 0) ||
			      to_rtr(a.qp, b.qp->qp_num, 0) || to_rts(a.qp, 0) ||
			      to_rtr(b.qp, a.qp->qp_num, 0) || to_rts(b.qp, 0));
	fill(src, LEN, 40);
	memset(rbuf, 0, LEN);
	int rc = 0;
	for (uint64_t id = 60; id < 63; ++id) rc = rc || post_recv(&b, id, LEN);
	snprintf(what, sizeof(what), "%s post-recv", name);
	said_rc(what, rc);
	struct ibv_sge sges[2] = {{(uintptr_t)src, 1500, src_mr->lkey},
				  {(uintptr_t)src + 1500, 1500,
				   src_mr->lkey ^ 0x5a5a00}};
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 70;
	wr.sg_list = sges;
	wr.num_sge = 2;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	snprintf(what, sizeof(what), "%s post", name);
	said_rc(what, ibv_post_send(a.qp, &wr, &bad));
	snprintf(what, sizeof(what), "%s requester", name);
	said_wcs(what, &a, 1);
	snprintf(what, sizeof(what), "%s responder", name);
	said_wcs(what, &b, 0.5);
	printf("%s states %s %s\n", name, state_name(a.qp), state_name(b.qp));
	struct ibv_qp_attr r;
	memset(&r, 0, sizeof(r));
	r.qp_state = IBV_QPS_RESET;
	snprintf(what, sizeof(what), "%s reconnect", name);
	said_rc(what, ibv_modify_qp(a.qp, &r, IBV_QP_STATE) ||
			      to_init(a.qp, 0) ||
			      to_rtr(a.qp, b.qp->qp_num, 0) || to_rts(a.qp, 0));
	if (write_first) {
		snprintf(what, sizeof(what), "%s write", name);
		said_rc(what, post_send(&a, IBV_WR_RDMA_WRITE, 75, 100,
					dst_mr->rkey));
		snprintf(what, sizeof(what), "%s write requester", name);
		said_wcs(what, &a, 1);
		snprintf(what, sizeof(what), "%s write responder", name);
		said_wcs(what, &b, 0.5);
	}
	for (uint64_t id = 71; id < 73; ++id) {
		snprintf(what, sizeof(what), "%s send-%llu", name,
			 (unsigned long long)id);
		said_rc(what, post_send(&a, IBV_WR_SEND, id, 100, 0));
		snprintf(what, sizeof(what), "%s send-%llu requester", name,
			 (unsigned long long)id);
		said_wcs(what, &a, 1);
		snprintf(what, sizeof(what), "%s send-%llu responder", name,
			 (unsigned long long)id);
		said_wcs(what, &b, 0.5);
	}
	memset(&r, 0, sizeof(r));
	r.qp_state = IBV_QPS_ERR;
	snprintf(what, sizeof(what), "%s responder-to-err", name);
	said_rc(what, ibv_modify_qp(b.qp, &r, IBV_QP_STATE));
	said_wcs(what, &b, 0.5);
	destroy_side(&a);
	destroy_side(&b);
	if (srq != NULL) ibv_destroy_srq(srq);
}

int main(int argc, char *argv[]) {
	if (open_device("uc_verbs", argc, argv)) return 1;
	pd = ibv_alloc_pd(ctx);
	src = calloc(1, LEN);
	dst = calloc(1, LEN);
	rbuf = calloc(1, LEN);
	if (pd == NULL || src == NULL || dst == NULL || rbuf == NULL) return 1;
	src_mr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	dst_mr = ibv_reg_mr(pd, dst, LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rbuf_mr = ibv_reg_mr(pd, rbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
	if (src_mr == NULL || dst_mr == NULL || rbuf_mr == NULL) return 1;

	/* Attributes and opcodes, on one pair. */
	struct side a, b;
	if (new_side(&a) || new_side(&b)) {
		printf("create-uc-qp %s\n", errno_name(errno));
		return 0;
	}
	printf("create-uc-qp ok\n");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi) == 0)
		printf("query-qp-type %s\n", qi.qp_type == IBV_QPT_UC ? "UC" : "other");
	said_rc("init", to_init(a.qp, IBV_ACCESS_REMOTE_WRITE) ||
				to_init(b.qp, IBV_ACCESS_REMOTE_WRITE));
	said_rc("rtr-with-rc-attributes",
		to_rtr(a.qp, b.qp->qp_num,
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	printf("state-after %s\n", state_name(a.qp));
	said_rc("rtr", to_rtr(a.qp, b.qp->qp_num, 0));
	said_rc("rtr-peer", to_rtr(b.qp, a.qp->qp_num, 0));
	said_rc("rts-with-rc-attributes",
		to_rts(a.qp, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
	said_rc("rts", to_rts(a.qp, 0));
	said_rc("rts-peer", to_rts(b.qp, 0));
	said_rc("post-read", post_send(&a, IBV_WR_RDMA_READ, 1, 64, dst_mr->rkey));
	said_rc("post-fetch-add",
		post_send(&a, IBV_WR_ATOMIC_FETCH_AND_ADD, 2, 8, dst_mr->rkey));
	said_wcs("read-and-atomic", &a, 1);
	printf("states %s %s\n", state_name(a.qp), state_name(b.qp));
	said_rc("post-recv", post_recv(&b, 3, LEN));
	said_rc("send-after-err", post_send(&a, IBV_WR_SEND, 4, 100, 0));
	said_wcs("send-after-err requester", &a, 1);
	said_wcs("send-after-err responder", &b, 0.5);
	destroy_side(&a);
	destroy_side(&b);

	/*
	 * One fresh pair per case: the case, then whether the responder still
	 * takes a send (a receive posted, 100 bytes sent).
	 */
	scenario("send", 0, IBV_WR_SEND, 100, 0, LEN);
	scenario("write-imm", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 3000, 0, LEN);
	scenario("write-imm-8k", 0, IBV_WR_RDMA_WRITE_WITH_IMM, LEN, 0, LEN);
	scenario("write", 0, IBV_WR_RDMA_WRITE, 3000, 0, 0);
	scenario("send-no-recv", 0, IBV_WR_SEND, 100, 0, 0);
	scenario("send-3k-no-recv", 0, IBV_WR_SEND, 3000, 0, 0);
	scenario("write-imm-no-recv", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 100, 0, 0);
	scenario("write-imm-3k-no-recv", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 3000, 0, 0);
	scenario("write-imm-bad-rkey", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 100, 0x5a5a,
		 LEN);
	scenario("write-3k-bad-rkey", 0, IBV_WR_RDMA_WRITE, 3000, 0x5a5a, 0);
	scenario("send-too-long", 0, IBV_WR_SEND, 100, 0, 50);
	scenario("send-3k-too-long", 0, IBV_WR_SEND, 3000, 0, 1500);
	scenario("send-to-init", 1, IBV_WR_SEND, 100, 0, LEN);
	cut_send("cut-send", 0, 0);
	cut_send("cut-send-srq", 1, 0);

	/*
	 * The same cases with the responder's receives in an SRQ, one SRQ
	 * per case (what one case leaves in it shows in its then-send).
	 */
	static const struct {
		const char *name;
		int responder_init;
		enum ibv_wr_opcode op;
		uint32_t len, rkey_xor, recv_len;
	} srq_cases[] = {
		{"srq-send", 0, IBV_WR_SEND, 100, 0, LEN},
		{"srq-write-imm", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 3000, 0, LEN},
		{"srq-send-no-recv", 0, IBV_WR_SEND, 100, 0, 0},
		{"srq-send-3k-no-recv", 0, IBV_WR_SEND, 3000, 0, 0},
		{"srq-write-imm-no-recv", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 100, 0, 0},
		{"srq-write-imm-3k-no-recv", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 3000,
		 0, 0},
		{"srq-write-imm-bad-rkey", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 100,
		 0x5a5a, LEN},
		{"srq-write-imm-3k-bad-rkey", 0, IBV_WR_RDMA_WRITE_WITH_IMM, 3000,
		 0x5a5a, LEN},
		{"srq-send-too-long", 0, IBV_WR_SEND, 100, 0, 50},
		{"srq-send-3k-too-long", 0, IBV_WR_SEND, 3000, 0, 1500},
		{"srq-send-to-init", 1, IBV_WR_SEND, 100, 0, LEN},
	};
	for (size_t i = 0; i < sizeof(srq_cases) / sizeof(srq_cases[0]); ++i) {
		scenario_srq = new_srq(srq_cases[i].name);
		if (scenario_srq == NULL) continue;
		scenario(srq_cases[i].name, srq_cases[i].responder_init,
			 srq_cases[i].op, srq_cases[i].len, srq_cases[i].rkey_xor,
			 srq_cases[i].recv_len);
		ibv_destroy_srq(scenario_srq);
		scenario_srq = NULL;
	}

	/* To ERR: what is posted flushes. */
	if (new_side(&a) || new_side(&b)) return 1;
	said_rc("pair", to_init(a.qp, IBV_ACCESS_REMOTE_WRITE) ||
			    to_init(b.qp, IBV_ACCESS_REMOTE_WRITE) ||
			    to_rtr(a.qp, b.qp->qp_num, 0) ||
			    to_rtr(b.qp, a.qp->qp_num, 0) || to_rts(a.qp, 0) ||
			    to_rts(b.qp, 0));
	said_rc("post-recv", post_recv(&b, 40, LEN) || post_recv(&b, 41, LEN));
	struct ibv_qp_attr e;
	memset(&e, 0, sizeof(e));
	e.qp_state = IBV_QPS_ERR;
	said_rc("to-err", ibv_modify_qp(b.qp, &e, IBV_QP_STATE));
	said_wcs("to-err responder", &b, 1);
	destroy_side(&a);
	destroy_side(&b);

	/* A cut SEND, then a write its responder's access flags refuse. */
	cut_send("cut-send-refused-write", 0, 1);
	cut_send("cut-send-refused-write-srq", 1, 1);

	ibv_dereg_mr(src_mr);
	ibv_dereg_mr(dst_mr);
	ibv_dereg_mr(rbuf_mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(device_list);
	return 0;
}
