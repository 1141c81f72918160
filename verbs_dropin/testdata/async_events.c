/*
 * async_events.c: an ordinary libibverbs program that makes a NIC raise
 * asynchronous events and prints, one line a case, what each call answered
 * and which events came (ibv_get_async_event(3)): the context's async fd
 * (readable only with an event pending; O_NONBLOCK makes the call fail with
 * EAGAIN), a CQ overrun (IBV_EVENT_CQ_ERR, one per completion lost), the
 * SRQ attributes (ibv_modify_srq(3) / ibv_query_srq(3): what is refused,
 * resizing) and its limit event (IBV_EVENT_SRQ_LIMIT_REACHED, raised once
 * when taking a receive leaves fewer than the limit, which disarms it).
 *
 * The same binary runs on rxe (tools/softroce_vm/ci.sh) and on the drop-in
 * libibverbs.so.1 with the rxe personality (//verbs_dropin:dropin_verbs_test);
 * verbs_dropin/testdata/async_events.rxe.txt is what rxe printed, and both
 * must print it again. After an overrun the CQ goes on: it holds what it
 * held, and a completion that finds room again is written. A receive
 * completion that finds its CQ full is the responder's error: the message
 * is placed, its completion lost, the QP goes to ERR without an ACK, and
 * the sender's transport retries run out (rxe_resp.c do_complete,
 * RESPST_ERR_CQ_OVERFLOW).
 *
 *   async_events [device]
 */
#define _DEFAULT_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>

#include "verbs_program.h"

#define LEN 4096

static struct ibv_pd *pd;
static char *buf;
static struct ibv_mr *mr;

/* Whether the async fd shows an event within `ms`. */
static int readable(int ms) {
	struct pollfd p = {ctx->async_fd, POLLIN, 0};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Takes every pending event (the fd is non-blocking) and prints them as
 * "NAME on OBJECT", OBJECT telling whether the event names `object`. */
static void drain(const char *name, const void *object) {
	struct ibv_async_event e;
	int n = 0;
	while (ibv_get_async_event(ctx, &e) == 0) {
		const void *of = NULL;
		switch (e.event_type) {
		case IBV_EVENT_CQ_ERR: of = e.element.cq; break;
		case IBV_EVENT_SRQ_LIMIT_REACHED:
		case IBV_EVENT_SRQ_ERR: of = e.element.srq; break;
		default: of = e.element.qp; break;
		}
		printf("%s event %s on %s\n", name,
		       ibv_event_type_str(e.event_type),
		       of == object ? "it" : "another object");
		ibv_ack_async_event(&e);
		++n;
	}
	printf("%s events %d then %s\n", name, n, errno_name(errno));
}

static struct ibv_qp *new_qp(struct ibv_cq *scq, struct ibv_cq *rcq,
			     struct ibv_srq *srq, uint32_t depth) {
	struct ibv_qp_init_attr init;
	memset(&init, 0, sizeof(init));
	init.qp_type = IBV_QPT_RC;
	init.send_cq = scq;
	init.recv_cq = rcq;
	init.srq = srq;
	init.cap.max_send_wr = depth;
	init.cap.max_recv_wr = srq != NULL ? 0 : 8;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &init);
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t id) {
	struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + LEN / 2;
	wr.wr.rdma.rkey = mr->rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* One completion from `cq` within ~5 s; its status, or -1. */
static int one(struct ibv_cq *cq) {
	struct ibv_wc wc;
	for (long i = 0; i < 5000000; ++i) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0) return -1;
		if (n == 1) return wc.status;
		if (i > 1000) {
			struct pollfd none = {-1, 0, 0};
			poll(&none, 0, 1);
		}
	}
	return -1;
}

/* Polls `cq` empty, one line a completion, then how many it held. */
static void print_held(const char *name, struct ibv_cq *cq) {
	struct ibv_wc wc;
	int held = 0;
	while (ibv_poll_cq(cq, 1, &wc) == 1) {
		printf("%s holds wr_id %llu status %d\n", name,
		       (unsigned long long)wc.wr_id, wc.status);
		++held;
	}
	printf("%s held %d\n", name, held);
}

static void cq_overrun(void) {
	struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_cq *other = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (small == NULL || other == NULL) {
		printf("cq-overrun setup failed\n");
		return;
	}
	printf("cq-overrun cqe %d\n", small->cqe);
	struct ibv_qp *a = new_qp(small, other, NULL, 64);
	struct ibv_qp *b = new_qp(other, other, NULL, 64);
	if (a == NULL || b == NULL ||
	    connect_rc_pair(a, b, IBV_ACCESS_REMOTE_WRITE)) {
		printf("cq-overrun pair failed\n");
		return;
	}
	printf("cq-overrun async-fd-readable-before %d\n", readable(0));
	/* Two completions more than the CQ holds, nothing polled. */
	const int writes = small->cqe + 2;
	int posted = 0;
	for (int i = 0; i < writes; ++i)
		posted += post(a, IBV_WR_RDMA_WRITE, 100 + i) == 0;
	printf("cq-overrun posted %d of %d\n", posted, writes);
	printf("cq-overrun async-fd-readable %d\n", readable(5000));
	/* Let the rest of the lost completions come too. */
	struct pollfd none = {-1, 0, 0};
	poll(&none, 0, 300);
	drain("cq-overrun", small);
	/* What the CQ holds, then a completion that finds room again. */
	print_held("cq-overrun", small);
	said_rc("cq-overrun post-after-room",
		post(a, IBV_WR_RDMA_WRITE, 200));
	printf("cq-overrun after-room status %d\n", one(small));
	said_rc("cq-overrun destroy-qp-a", ibv_destroy_qp(a));
	said_rc("cq-overrun destroy-qp-b", ibv_destroy_qp(b));
	said_rc("cq-overrun destroy-cq", ibv_destroy_cq(small));
	said_rc("cq-overrun destroy-other-cq", ibv_destroy_cq(other));
}

static int post_recv_at(struct ibv_qp *qp, uint64_t id, size_t offset) {
	struct ibv_sge sge = {(uintptr_t)buf + offset, 64, mr->lkey};
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

/* A SEND whose receive completion finds the receiver's CQ full. The sender
 * retries once (retry_cnt 1, timeout 14: ~67 ms a try), so its WR ends
 * within a second. */
static void recv_cq_overrun(void) {
	struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_cq *other = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (small == NULL || other == NULL) {
		printf("recv-cq-overrun setup failed\n");
		return;
	}
	struct ibv_qp *a = new_qp(other, other, NULL, 64);
	struct ibv_qp *b = new_qp(other, small, NULL, 64);
	struct ibv_qp_attr rts;
	memset(&rts, 0, sizeof(rts));
	rts.qp_state = IBV_QPS_RTS;
	rts.timeout = 14;
	rts.retry_cnt = 1;
	rts.rnr_retry = 7;
	rts.max_rd_atomic = 1;
	if (a == NULL || b == NULL || to_init(a, 0) ||
	    to_init(b, IBV_ACCESS_REMOTE_WRITE) ||
	    to_rtr(a, b->qp_num, RC_RTR_MASK) ||
	    to_rtr(b, a->qp_num, RC_RTR_MASK) ||
	    ibv_modify_qp(a, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN | RC_RTS_MASK) ||
	    to_rts(b, RC_RTS_MASK)) {
		printf("recv-cq-overrun pair failed\n");
		return;
	}
	printf("recv-cq-overrun cqe %d\n", small->cqe);
	int posted = 0;
	for (int i = 0; i <= small->cqe; ++i)
		posted += post_recv_at(b, 300 + i, 1024 + 64 * i) == 0;
	printf("recv-cq-overrun receives %d\n", posted);
	/* As many SENDs as its CQ holds, then one more, marked. */
	for (int i = 0; i <= small->cqe; ++i) {
		memset(buf, 'a' + i, 8);
		said_rc("recv-cq-overrun post-send", post(a, IBV_WR_SEND, 400 + i));
		printf("recv-cq-overrun send %d status %d\n", i, one(other));
	}
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	memset(&attr, 0, sizeof(attr));
	if (ibv_query_qp(b, &attr, IBV_QP_STATE, &init) == 0)
		printf("recv-cq-overrun receiver-state %d\n", attr.qp_state);
	printf("recv-cq-overrun last-placed %d\n",
	       buf[1024 + 64 * small->cqe] == 'a' + small->cqe);
	print_held("recv-cq-overrun", small);
	drain("recv-cq-overrun", small);
	said_rc("recv-cq-overrun destroy-qp-a", ibv_destroy_qp(a));
	said_rc("recv-cq-overrun destroy-qp-b", ibv_destroy_qp(b));
	said_rc("recv-cq-overrun destroy-cq", ibv_destroy_cq(small));
	said_rc("recv-cq-overrun destroy-other-cq", ibv_destroy_cq(other));
}

static void print_srq(const char *name, struct ibv_srq *srq) {
	struct ibv_srq_attr a;
	memset(&a, 0, sizeof(a));
	int rc = ibv_query_srq(srq, &a);
	if (rc) {
		said_rc(name, rc);
		return;
	}
	printf("%s max_wr %u max_sge %u srq_limit %u\n", name, a.max_wr,
	       a.max_sge, a.srq_limit);
}

static void said_modify(const char *name, struct ibv_srq *srq,
			uint32_t max_wr, uint32_t limit, int mask) {
	struct ibv_srq_attr a;
	memset(&a, 0, sizeof(a));
	a.max_wr = max_wr;
	a.srq_limit = limit;
	said_rc(name, ibv_modify_srq(srq, &a, mask));
}

static void srq_limit(void) {
	struct ibv_device_attr dev;
	if (ibv_query_device(ctx, &dev)) return;
	struct ibv_srq_init_attr init;
	memset(&init, 0, sizeof(init));
	init.attr.max_wr = 16;
	init.attr.max_sge = 1;
	init.attr.srq_limit = 12; /* irrelevant for ibv_create_srq(3) */
	struct ibv_srq *srq = ibv_create_srq(pd, &init);
	if (srq == NULL) {
		printf("srq create failed\n");
		return;
	}
	printf("srq created max_wr %u\n", init.attr.max_wr);
	print_srq("srq query-created", srq);
	const uint32_t size = init.attr.max_wr;
	said_modify("srq modify-no-mask", srq, 0, 0, 0);
	said_modify("srq modify-unknown-mask", srq, 0, 0, 1 << 5);
	said_modify("srq modify-limit-above-size", srq, 0, size + 1,
		    IBV_SRQ_LIMIT);
	said_modify("srq modify-limit-above-device", srq, 0,
		    (uint32_t)dev.max_srq_wr + 1, IBV_SRQ_LIMIT);
	said_modify("srq modify-max-wr-0", srq, 0, 0, IBV_SRQ_MAX_WR);
	said_modify("srq modify-max-wr-above-device", srq,
		    (uint32_t)dev.max_srq_wr + 1, 0, IBV_SRQ_MAX_WR);
	said_modify("srq modify-limit-4", srq, 0, 4, IBV_SRQ_LIMIT);
	print_srq("srq query-armed", srq);
	said_modify("srq modify-max-wr-below-limit", srq, 2, 0,
		    IBV_SRQ_MAX_WR);
	said_modify("srq modify-max-wr-64", srq, 64, 0, IBV_SRQ_MAX_WR);
	print_srq("srq query-resized", srq);
	said_modify("srq modify-max-wr-16", srq, 16, 0, IBV_SRQ_MAX_WR);
	print_srq("srq query-resized-back", srq);

	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = new_qp(cq, cq, NULL, 16);
	struct ibv_qp *b = new_qp(cq, rcq, srq, 16);
	if (cq == NULL || rcq == NULL || a == NULL || b == NULL ||
	    connect_rc_pair(a, b, IBV_ACCESS_REMOTE_WRITE)) {
		printf("srq pair failed\n");
		return;
	}
	/* 8 receives; the limit is 4: the 5th send leaves 3. */
	for (int i = 0; i < 8; ++i) {
		struct ibv_sge sge = {(uintptr_t)buf + LEN / 2, 64, mr->lkey};
		struct ibv_recv_wr wr, *bad = NULL;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 200 + i;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		if (ibv_post_srq_recv(srq, &wr, &bad)) {
			printf("srq post-recv failed\n");
			return;
		}
	}
	for (int i = 1; i <= 6; ++i) {
		char name[32];
		snprintf(name, sizeof(name), "srq send-%d", i);
		int rc = post(a, IBV_WR_SEND, 300 + i);
		int status = rc ? -1 : one(cq);
		int recv = rc ? -1 : one(rcq);
		printf("%s send %s recv %s\n", name,
		       status == 0 ? "ok" : "failed",
		       recv == 0 ? "ok" : "failed");
		readable(i == 5 ? 2000 : 50);
		drain(name, srq);
	}
	print_srq("srq query-after-event", srq);
	said_modify("srq modify-limit-again-3", srq, 0, 3, IBV_SRQ_LIMIT);
	int rc = post(a, IBV_WR_SEND, 400);
	int status = rc ? -1 : one(cq);
	int recv = rc ? -1 : one(rcq);
	printf("srq send-7 send %s recv %s\n", status == 0 ? "ok" : "failed",
	       recv == 0 ? "ok" : "failed");
	readable(2000);
	drain("srq send-7", srq);
	said_rc("srq destroy-qp-a", ibv_destroy_qp(a));
	said_rc("srq destroy-qp-b", ibv_destroy_qp(b));
	said_rc("srq destroy", ibv_destroy_srq(srq));
	ibv_destroy_cq(cq);
	ibv_destroy_cq(rcq);
}

int main(int argc, char *argv[]) {
	if (open_device("async_events", argc, argv)) return 1;
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, LEN);
	if (pd == NULL || buf == NULL) return 1;
	mr = ibv_reg_mr(pd, buf, LEN,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (mr == NULL) return 1;

	printf("async-fd valid %d\n", ctx->async_fd >= 0);
	printf("async-fd readable-at-start %d\n", readable(0));
	int flags = fcntl(ctx->async_fd, F_GETFL);
	said_rc("async-fd set-nonblocking",
		fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) ? errno : 0);
	struct ibv_async_event e;
	errno = 0;
	int rc = ibv_get_async_event(ctx, &e);
	printf("get-async-event-none %d %s\n", rc, errno_name(errno));

	cq_overrun();
	recv_cq_overrun();
	srq_limit();

	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(device_list);
	return 0;
}
