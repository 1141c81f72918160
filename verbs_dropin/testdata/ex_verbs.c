/*
 * ex_verbs.c: an ordinary libibverbs program on the extended verbs -- a QP
 * from ibv_create_qp_ex posting with ibv_wr_* (ibv_wr_post(3)) and CQs from
 * ibv_create_cq_ex read with ibv_start_poll / ibv_wc_read_*
 * (ibv_create_cq_ex(3)) -- and prints, one line a case, what each call
 * answered, each completion and whether the data landed: the creation
 * attributes a provider refuses, a batch of every RC operation, an
 * aborted batch, batches that fail whole (an SGE list or inline data too
 * long, one WR more than the send queue holds), a full queue's worth,
 * inline data copied at the setter, a bad lkey.
 *
 * The same binary runs on rxe (tools/softroce_vm/ci.sh) and on the drop-in
 * libibverbs.so.1 with the rxe personality (//verbs_dropin:dropin_verbs_test);
 * verbs_dropin/testdata/ex_verbs.rxe.txt is what rxe printed, and both must
 * print it again. It keeps to what rdma-core 44's rxe provider gets right
 * (its list setters count an SGE list's first length num_sge times and an
 * inline list as 0 bytes, fixed upstream since): SGE lists of equal
 * lengths, no inline lists.
 *
 *   ex_verbs [device] [--upstream]
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <stdlib.h>
#include <time.h>

#include "verbs_program.h"

#define LEN 8192
#define WC_FLAGS                                                   \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |             \
	 IBV_WC_EX_WITH_QP_NUM)
#define SEND_OPS                                                   \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
	 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |       \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static struct ibv_pd *pd;
static char *src, *dst, *rbuf;
static struct ibv_mr *src_mr, *dst_mr, *rbuf_mr;

static struct ibv_cq_ex *new_cq(uint64_t wc_flags, uint32_t mask,
				uint32_t flags) {
	struct ibv_cq_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.cqe = 64;
	a.wc_flags = wc_flags;
	a.comp_mask = mask;
	a.flags = flags;
	return ibv_create_cq_ex(ctx, &a);
}

static void said_cq(const char *name, uint64_t wc_flags, uint32_t mask,
		    uint32_t flags) {
	errno = 0;
	struct ibv_cq_ex *cq = new_cq(wc_flags, mask, flags);
	said_rc(name, cq != NULL ? 0 : errno);
	if (cq != NULL) ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

struct pair {
	struct ibv_cq_ex *acq, *bcq;
	struct ibv_qp *a, *b; /* a: ibv_create_qp_ex; b: ibv_create_qp */
	struct ibv_qp_ex *ax;
	uint32_t max_send_wr;
	uint32_t max_send_sge;
};

static struct ibv_qp *new_qp_ex(struct ibv_cq_ex *cq, uint32_t mask,
				uint64_t ops, uint32_t create_flags,
				uint32_t depth) {
	struct ibv_qp_init_attr_ex init;
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_RC;
	init.send_cq = ibv_cq_ex_to_cq(cq);
	init.recv_cq = ibv_cq_ex_to_cq(cq);
	init.cap.max_send_wr = depth;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = 2;
	init.cap.max_recv_sge = 1;
	init.cap.max_inline_data = 64;
	init.comp_mask = mask;
	init.pd = pd;
	init.send_ops_flags = ops;
	init.create_flags = create_flags;
	return ibv_create_qp_ex(ctx, &init);
}

static void said_qp(const char *name, uint32_t mask, uint64_t ops,
		    uint32_t create_flags) {
	struct ibv_cq_ex *cq = new_cq(WC_FLAGS, 0, 0);
	errno = 0;
	struct ibv_qp *qp = new_qp_ex(cq, mask, ops, create_flags, 16);
	said_rc(name, qp != NULL ? 0 : errno);
	if (qp != NULL) ibv_destroy_qp(qp);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

#define ACCESS                                                  \
	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |     \
	 IBV_ACCESS_REMOTE_ATOMIC)

/* A connected pair; `connect` 0 leaves both in INIT. */
static int new_pair(struct pair *p, uint32_t depth, int connect) {
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	memset(p, 0, sizeof(*p));
	p->acq = new_cq(WC_FLAGS, 0, 0);
	p->bcq = new_cq(WC_FLAGS, 0, 0);
	if (p->acq == NULL || p->bcq == NULL) return -1;
	p->a = new_qp_ex(p->acq, IBV_QP_INIT_ATTR_PD |
				     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			 SEND_OPS, 0, depth);
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_RC;
	init.send_cq = ibv_cq_ex_to_cq(p->bcq);
	init.recv_cq = ibv_cq_ex_to_cq(p->bcq);
	init.cap.max_send_wr = 8;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	p->b = ibv_create_qp(pd, &init);
	if (p->a == NULL || p->b == NULL) return -1;
	p->ax = ibv_qp_to_qp_ex(p->a);
	if (ibv_query_qp(p->a, &qa, IBV_QP_CAP, &qi)) return -1;
	p->max_send_wr = qi.cap.max_send_wr;
	p->max_send_sge = qi.cap.max_send_sge;
	if (!connect)
		return to_init(p->a, ACCESS) || to_init(p->b, ACCESS) ? -1 : 0;
	return connect_rc_pair(p->a, p->b, ACCESS);
}

static void free_pair(struct pair *p) {
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(p->acq));
	ibv_destroy_cq(ibv_cq_ex_to_cq(p->bcq));
}

static const char *opcode_name(enum ibv_wc_opcode op) {
	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "other";
	}
}

/* The current completion, one line. */
static void said_wc(const char *name, struct ibv_cq_ex *cq,
		    struct ibv_qp *own) {
	if (cq->status != IBV_WC_SUCCESS) {
		printf("%s wr_id %llu %s\n", name,
		       (unsigned long long)cq->wr_id,
		       ibv_wc_status_str(cq->status));
		return;
	}
	printf("%s wr_id %llu %s byte_len %u", name,
	       (unsigned long long)cq->wr_id,
	       opcode_name(ibv_wc_read_opcode(cq)), ibv_wc_read_byte_len(cq));
	if (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM)
		printf(" imm 0x%x", ntohl(ibv_wc_read_imm_data(cq)));
	printf(" qp %s\n",
	       ibv_wc_read_qp_num(cq) == own->qp_num ? "own" : "other");
}

/*
 * Every completion `cq` gets within `wait` seconds (watch_seconds, and one
 * poll after the window), one line each; "none" when there is none. One completion a poll (ibv_start_poll ..
 * ibv_end_poll): rdma-core 44's rxe provider advances its CQ twice when
 * ibv_end_poll follows an ENOENT from ibv_next_poll, as the man page asks
 * (fixed upstream since), and then reads garbage.
 */
static void said_wcs(const char *name, struct ibv_cq_ex *cq,
		     struct ibv_qp *own, double wait) {
	struct ibv_poll_cq_attr attr = {0};
	int got = 0;
	const double end = now() + watch_seconds(wait);
	for (;;) {
		int rc = ibv_start_poll(cq, &attr);
		if (rc == ENOENT) {
			if (now() >= end) break;
			pause_between_polls();
			continue;
		}
		if (rc != 0) {
			printf("%s start_poll %s\n", name, errno_name(rc));
			return;
		}
		got++;
		said_wc(name, cq, own);
		ibv_end_poll(cq);
	}
	if (got == 0) printf("%s none\n", name);
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, uint32_t off) {
	struct ibv_sge sge = {(uintptr_t)rbuf + off, 512, rbuf_mr->lkey};
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

static void fill(char *p, size_t n, int seed) {
	for (size_t i = 0; i < n; ++i) p[i] = (char)(i * 7 + seed);
}

static const char *landed(const void *a, const void *b, size_t n) {
	return memcmp(a, b, n) == 0 ? "landed" : "not landed";
}

/* Every RC operation in one batch. */
static void every_operation(void) {
	struct pair p;
	if (new_pair(&p, 16, 1)) {
		printf("every-op pair failed\n");
		return;
	}
	printf("to-qp-ex plain %s\n", ibv_qp_to_qp_ex(p.b) ? "some" : "null");
	printf("to-qp-ex ex %s\n",
	       p.ax != NULL && &p.ax->qp_base == p.a ? "same" : "other");
	fill(src, LEN, 1);
	memset(dst, 0, LEN);
	memset(rbuf, 0, LEN);
	uint64_t *counter = (uint64_t *)(dst + 1024);
	*counter = 40;
	uint64_t *swapped = (uint64_t *)(dst + 1032);
	*swapped = 7;
	said_rc("every-op recvs", post_recv(p.b, 100, 0) ||
					  post_recv(p.b, 101, 512) ||
					  post_recv(p.b, 102, 1024));
	struct ibv_qp_ex *x = p.ax;
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 1;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 64);
	x->wr_id = 2;
	ibv_wr_rdma_write_imm(x, dst_mr->rkey, (uintptr_t)dst + 256,
			      htonl(0x1234));
	struct ibv_sge two[2] = {{(uintptr_t)src + 64, 64, src_mr->lkey},
				 {(uintptr_t)src + 512, 64, src_mr->lkey}};
	ibv_wr_set_sge_list(x, 2, two);
	x->wr_id = 3;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src + 1000, 100);
	x->wr_id = 4;
	ibv_wr_send_imm(x, htonl(0xabcd));
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src + 2000, 200);
	x->wr_id = 5;
	ibv_wr_rdma_read(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src + 4096, 64);
	x->wr_id = 6;
	ibv_wr_atomic_fetch_add(x, dst_mr->rkey, (uintptr_t)counter, 2);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src + 6000, 8);
	x->wr_id = 7;
	ibv_wr_atomic_cmp_swp(x, dst_mr->rkey, (uintptr_t)swapped, 7, 99);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src + 6008, 8);
	said_rc("every-op complete", ibv_wr_complete(x));
	said_wcs("every-op requester", p.acq, p.a, 1);
	said_wcs("every-op responder", p.bcq, p.b, 0.5);
	char want[128];
	memcpy(want, src + 64, 64);
	memcpy(want + 64, src + 512, 64);
	printf("every-op write %s\n", landed(dst, src, 64));
	printf("every-op write-imm %s\n", landed(dst + 256, want, 128));
	printf("every-op send %s\n", landed(rbuf + 512, src + 1000, 100));
	printf("every-op send-imm %s\n", landed(rbuf + 1024, src + 2000, 200));
	printf("every-op read %s\n", landed(src + 4096, dst, 64));
	printf("every-op fetch-add old %llu now %llu\n",
	       (unsigned long long)*(uint64_t *)(src + 6000),
	       (unsigned long long)*counter);
	printf("every-op cmp-swp old %llu now %llu\n",
	       (unsigned long long)*(uint64_t *)(src + 6008),
	       (unsigned long long)*swapped);

	/* Aborted: nothing goes. */
	ibv_wr_start(x);
	x->wr_id = 8;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 64);
	ibv_wr_abort(x);
	said_wcs("abort requester", p.acq, p.a, 0.3);

	/* Failing whole: the first WR would have gone on its own. */
	ibv_wr_start(x);
	x->wr_id = 9;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 64);
	x->wr_id = 10;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	/* One SGE more than the QP has (rxe gives max_inline_data / 16). */
	struct ibv_sge many[64];
	for (uint32_t i = 0; i < 64; ++i) {
		many[i].addr = (uintptr_t)src + 8 * i;
		many[i].length = 8;
		many[i].lkey = src_mr->lkey;
	}
	printf("max-send-sge %u\n", p.max_send_sge);
	ibv_wr_set_sge_list(x, p.max_send_sge + 1, many);
	said_rc("sge-list-too-long complete", ibv_wr_complete(x));
	said_wcs("sge-list-too-long requester", p.acq, p.a, 0.3);

	char too_long[65];
	memset(too_long, 1, sizeof(too_long));
	ibv_wr_start(x);
	x->wr_id = 11;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 64);
	x->wr_id = 12;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_inline_data(x, too_long, sizeof(too_long));
	said_rc("inline-too-long complete", ibv_wr_complete(x));
	said_wcs("inline-too-long requester", p.acq, p.a, 0.3);

	/*
	 * Inline: the bytes as they were at the setter. With IBV_SEND_INLINE
	 * in wr_flags: without it rxe's kernel side reads the WR's (empty)
	 * SGE list and fails it with IBV_WC_LOC_QP_OP_ERR (docs/fidelity.md).
	 */
	char bytes[32];
	memset(bytes, 0x5c, sizeof(bytes));
	memset(dst + 3000, 0, 32);
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	x->wr_id = 13;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst + 3000);
	ibv_wr_set_inline_data(x, bytes, sizeof(bytes));
	memset(bytes, 0x11, sizeof(bytes));
	said_rc("inline complete", ibv_wr_complete(x));
	x->wr_flags = IBV_SEND_SIGNALED;
	said_wcs("inline requester", p.acq, p.a, 1);
	memset(bytes, 0x5c, sizeof(bytes));
	printf("inline data %s\n", landed(dst + 3000, bytes, 32));

	/* One WR more than the send queue holds: none goes. */
	ibv_wr_start(x);
	for (uint32_t i = 0; i <= p.max_send_wr; ++i) {
		x->wr_id = 1000 + i;
		x->wr_flags = i == p.max_send_wr ? IBV_SEND_SIGNALED : 0;
		ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
		ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 8);
	}
	said_rc("queue-plus-one complete", ibv_wr_complete(x));
	said_wcs("queue-plus-one requester", p.acq, p.a, 0.5);
	/* A full queue's worth goes. */
	ibv_wr_start(x);
	for (uint32_t i = 0; i < p.max_send_wr; ++i) {
		x->wr_id = 2000 + i;
		x->wr_flags = i + 1 == p.max_send_wr ? IBV_SEND_SIGNALED : 0;
		ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
		ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 8);
	}
	said_rc("queue-full complete", ibv_wr_complete(x));
	said_wcs("queue-full requester", p.acq, p.a, 1);

	/* A bad lkey: posted, and the WR completes in error. */
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(x);
	x->wr_id = 14;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(x, src_mr->lkey ^ 0x5a5a, (uintptr_t)src, 64);
	said_rc("bad-lkey complete", ibv_wr_complete(x));
	said_wcs("bad-lkey requester", p.acq, p.a, 1);
	free_pair(&p);
}

static int failures;

static void expect(const char *what, int ok) {
	printf("upstream %s %s\n", what, ok ? "ok" : "FAILED");
	failures += !ok;
}

/*
 * --upstream: what the man pages promise and rdma-core 44's rxe provider
 * gets wrong (fixed upstream since; the drop-in follows the pages), and
 * what rdma-core leaves undefined, each checked here: lists of unequal
 * elements, several completions in one poll ended after ENOENT, a builder
 * the QP was not made for, a setter before any builder. With
 * EX_VERBS_FAULTED=1 a fault rule fails the post of every SEND: a batch
 * holding one fails whole.
 */
static void upstream(void) {
	struct pair p;
	if (new_pair(&p, 16, 1)) {
		expect("pair", 0);
		return;
	}
	struct ibv_qp_ex *x = p.ax;
	struct ibv_poll_cq_attr attr = {0};
	fill(src, LEN, 3);
	memset(dst, 0, LEN);
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 1;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
	struct ibv_sge two[2] = {{(uintptr_t)src, 8, src_mr->lkey},
				 {(uintptr_t)src + 100, 24, src_mr->lkey}};
	ibv_wr_set_sge_list(x, 2, two);
	x->wr_id = 2;
	ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst + 64);
	struct ibv_data_buf bufs[2] = {{src + 200, 10}, {src + 300, 20}};
	ibv_wr_set_inline_data_list(x, 2, bufs);
	expect("lists-complete", ibv_wr_complete(x) == 0);
	int n = 0;
	uint32_t lens[2] = {0, 0};
	const double end = now() + 2;
	while (n < 2 && now() < end) {
		if (ibv_start_poll(p.acq, &attr) != 0) continue;
		do {
			if (n < 2) lens[n] = ibv_wc_read_byte_len(p.acq);
			n++;
		} while (ibv_next_poll(p.acq) == 0);
		ibv_end_poll(p.acq);
	}
	expect("next-poll-takes-both", n == 2);
	expect("sge-list-byte-len", lens[0] == 32);
	expect("inline-list-byte-len", lens[1] == 30);
	expect("sge-list-data", memcmp(dst, src, 8) == 0 &&
					memcmp(dst + 8, src + 100, 24) == 0);
	expect("inline-list-data", memcmp(dst + 64, src + 200, 10) == 0 &&
					   memcmp(dst + 74, src + 300, 20) == 0);
	expect("empty-after-end-poll",
	       ibv_start_poll(p.acq, &attr) == ENOENT);

	/* A batch with a SEND, under a rule that fails every SEND's post. */
	if (getenv("EX_VERBS_FAULTED") != NULL) {
		memset(dst, 0, 64);
		ibv_wr_start(x);
		x->wr_id = 3;
		ibv_wr_rdma_write(x, dst_mr->rkey, (uintptr_t)dst);
		ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 64);
		x->wr_id = 4;
		ibv_wr_send(x);
		ibv_wr_set_sge(x, src_mr->lkey, (uintptr_t)src, 64);
		expect("faulted-batch-fails", ibv_wr_complete(x) != 0);
		const double until = now() + watch_seconds(0.5);
		int got = 0;
		while (now() < until) {
			if (ibv_start_poll(p.acq, &attr) != 0) {
				pause_between_polls();
				continue;
			}
			got++;
			ibv_end_poll(p.acq);
		}
		expect("faulted-batch-posted-nothing", got == 0);
		static const char zeros[64];
		expect("faulted-batch-wrote-nothing",
		       memcmp(dst, zeros, 64) == 0);
	}
	free_pair(&p);

	struct ibv_cq_ex *cq = new_cq(WC_FLAGS, 0, 0);
	struct ibv_qp *qp = new_qp_ex(
		cq, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		IBV_QP_EX_WITH_RDMA_WRITE, 0, 16);
	struct ibv_qp_ex *q = ibv_qp_to_qp_ex(qp);
	if (q == NULL) {
		expect("write-only-qp", 0);
		return;
	}
	ibv_wr_start(q);
	ibv_wr_send(q);
	ibv_wr_set_sge(q, src_mr->lkey, (uintptr_t)src, 8);
	expect("unasked-builder-fails", ibv_wr_complete(q) == EOPNOTSUPP);
	ibv_wr_start(q);
	ibv_wr_set_sge(q, src_mr->lkey, (uintptr_t)src, 8);
	expect("setter-first-fails", ibv_wr_complete(q) == EINVAL);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

int main(int argc, char *argv[]) {
	if (open_device("ex_verbs", argc, argv)) return 1;
	int upstream_checks = 0;
	for (int a = 1; a < argc; ++a)
		if (strcmp(argv[a], "--upstream") == 0) upstream_checks = 1;
	pd = ibv_alloc_pd(ctx);
	src = calloc(1, LEN);
	dst = calloc(1, LEN);
	rbuf = calloc(1, LEN);
	if (pd == NULL || src == NULL || dst == NULL || rbuf == NULL) return 1;
	src_mr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	dst_mr = ibv_reg_mr(pd, dst, LEN,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC);
	rbuf_mr = ibv_reg_mr(pd, rbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
	if (src_mr == NULL || dst_mr == NULL || rbuf_mr == NULL) return 1;

	struct ibv_device_attr_ex dx;
	said_rc("query-device-ex", ibv_query_device_ex(ctx, NULL, &dx));
	printf("completion-timestamp-mask %llu\n",
	       (unsigned long long)dx.completion_timestamp_mask);

	said_cq("cq-ex", WC_FLAGS, 0, 0);
	said_cq("cq-ex-every-standard-flag", IBV_WC_STANDARD_FLAGS, 0, 0);
	said_cq("cq-ex-timestamp",
		WC_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, 0, 0);
	said_cq("cq-ex-flow-tag", WC_FLAGS | IBV_WC_EX_WITH_FLOW_TAG, 0, 0);
	said_cq("cq-ex-single-threaded", WC_FLAGS, IBV_CQ_INIT_ATTR_MASK_FLAGS,
		IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
	said_cq("cq-ex-ignore-overrun", WC_FLAGS, IBV_CQ_INIT_ATTR_MASK_FLAGS,
		IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
	said_cq("cq-ex-unknown-mask", WC_FLAGS, 1u << 7, 0);

	struct ibv_cq_ex *empty = new_cq(WC_FLAGS, 0, 0);
	struct ibv_poll_cq_attr pa = {0};
	said_rc("start-poll-empty", ibv_start_poll(empty, &pa));
	ibv_destroy_cq(ibv_cq_ex_to_cq(empty));

	const uint32_t with_ops =
		IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	said_qp("qp-ex", with_ops, SEND_OPS, 0);
	said_qp("qp-ex-pd-only", IBV_QP_INIT_ATTR_PD, 0, 0);
	said_qp("qp-ex-tso-on-rc", with_ops, IBV_QP_EX_WITH_TSO, 0);
	said_qp("qp-ex-no-pd", IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, SEND_OPS, 0);
	said_qp("qp-ex-create-flags",
		with_ops | IBV_QP_INIT_ATTR_CREATE_FLAGS, SEND_OPS,
		IBV_QP_CREATE_SCATTER_FCS);
	said_qp("qp-ex-unknown-mask", with_ops | IBV_QP_INIT_ATTR_RX_HASH,
		SEND_OPS, 0);

	if (upstream_checks)
		upstream();
	else
		every_operation();

	ibv_dereg_mr(src_mr);
	ibv_dereg_mr(dst_mr);
	ibv_dereg_mr(rbuf_mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(device_list);
	return failures == 0 ? 0 : 1;
}
