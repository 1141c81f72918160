/*
 * api_abuse.c: every one of librpma's 84 functions called the ways a buggy
 * program calls it -- NULL and missing arguments, unknown values, sizes at
 * the edges, calls in the wrong order (after a disconnect, after a remote
 * error, an SRQ deleted while a connection uses it, a request nobody
 * accepts) -- and, one line a case, what the call answered.
 *
 * It is an ordinary librpma program: the same source builds against the
 * harness's librpma.h (//tests:api_abuse) and against Debian's librpma-dev
 * (plain gcc, -lrpma). Each line is
 *
 *   abuse GROUP CALL CASE: ANSWER [MAN]
 *
 * ANSWER is the return code's name (or, for a posted operation, "ok" and
 * then a "wc" line with the completion it got); MAN is "ok" when the answer
 * is the one the function's man page names for that case and
 * "man-page-says:NAME" when it is not; cases the man pages leave open carry
 * no MAN. Each group runs in a child process of its own, so a call that
 * crashes a library is one line ("crashed by signal N"), not the end of the
 * run, and a call that hangs is killed after 30 s.
 *
 * tests/api_abuse_test.sh holds the harness's librpma on the fake NIC to
 * the man pages and to what it printed on rxe (testdata/api_abuse.rxe.txt,
 * recorded in the soft-RoCE VM); the drop-in libibverbs test runs the build
 * against Debian's librpma 1.2 on the fake and compares it with what that
 * printed on rxe (testdata/api_abuse.librpma12.rxe.txt).
 *
 *   api_abuse [ADDR [PORT]]     (default 127.0.0.1 7600; the soft-RoCE VM's
 *                                RPMA_HARNESS_VM_ADDR wins over ADDR;
 *                                API_ABUSE_GROUP=NAME runs one group)
 */
#define _GNU_SOURCE
#include <librpma.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NONE 1 /* no man-page answer for this case */
#define BUF 4096

static const char *addr = "127.0.0.1";
static int port_base = 7600;
static int next_port;
static char group_name[32];

static const char *code_name(int ret) {
	switch (ret) {
	case 0: return "0";
	case RPMA_E_UNKNOWN: return "RPMA_E_UNKNOWN";
	case RPMA_E_NOSUPP: return "RPMA_E_NOSUPP";
	case RPMA_E_PROVIDER: return "RPMA_E_PROVIDER";
	case RPMA_E_NOMEM: return "RPMA_E_NOMEM";
	case RPMA_E_INVAL: return "RPMA_E_INVAL";
	case RPMA_E_NO_COMPLETION: return "RPMA_E_NO_COMPLETION";
	case RPMA_E_NO_EVENT: return "RPMA_E_NO_EVENT";
	case RPMA_E_AGAIN: return "RPMA_E_AGAIN";
	case RPMA_E_SHARED_CHANNEL: return "RPMA_E_SHARED_CHANNEL";
	case RPMA_E_NOT_SHARED_CHNL: return "RPMA_E_NOT_SHARED_CHNL";
	default: return "not-an-rpma-code";
	}
}

/* One case: what CALL answered, against the man page's answer `man`. */
static int said(const char *call, const char *what, int ret, int man) {
	printf("abuse %s %s %s: %s", group_name, call, what, code_name(ret));
	if (man != NONE) {
		if (ret == man)
			printf(" ok");
		else
			printf(" man-page-says:%s", code_name(man));
	}
	printf("\n");
	fflush(stdout);
	return ret;
}

/*
 * A case run in a child of its own: a library that crashes on it (a NULL
 * it does not check) is one line, and the next case still runs.
 */
static void reap(const char *call, const char *what, pid_t pid) {
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid) {
		printf("abuse %s %s %s: could not fork\n", group_name, call, what);
	} else if (WIFSIGNALED(status)) {
		printf("abuse %s %s %s: crashed by signal %d\n", group_name, call, what,
		       WTERMSIG(status));
	}
	fflush(stdout);
}

#define SAFE(call, what, expr, man)                                            \
	do {                                                                   \
		fflush(stdout);                                                \
		pid_t pid_ = fork();                                           \
		if (pid_ == 0) {                                               \
			said(call, what, (expr), man);                         \
			_exit(0);                                              \
		}                                                              \
		reap(call, what, pid_);                                        \
	} while (0)

static void note(const char *call, const char *what, const char *text) {
	printf("abuse %s %s %s: %s\n", group_name, call, what, text);
	fflush(stdout);
}

static const char *status_name(enum ibv_wc_status s) {
	switch (s) {
	case IBV_WC_SUCCESS: return "SUCCESS";
	case IBV_WC_LOC_LEN_ERR: return "LOC_LEN_ERR";
	case IBV_WC_LOC_QP_OP_ERR: return "LOC_QP_OP_ERR";
	case IBV_WC_LOC_PROT_ERR: return "LOC_PROT_ERR";
	case IBV_WC_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
	case IBV_WC_REM_INV_REQ_ERR: return "REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
	case IBV_WC_REM_OP_ERR: return "REM_OP_ERR";
	case IBV_WC_RETRY_EXC_ERR: return "RETRY_EXC_ERR";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR_RETRY_EXC_ERR";
	default: return "other";
	}
}

static const char *opcode_name(enum ibv_wc_opcode o) {
	switch (o) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "other";
	}
}

static const char *event_name(enum rpma_conn_event e) {
	switch (e) {
	case RPMA_CONN_UNDEFINED: return "UNDEFINED";
	case RPMA_CONN_ESTABLISHED: return "ESTABLISHED";
	case RPMA_CONN_CLOSED: return "CLOSED";
	case RPMA_CONN_LOST: return "LOST";
	case RPMA_CONN_REJECTED: return "REJECTED";
	case RPMA_CONN_UNREACHABLE: return "UNREACHABLE";
	default: return "other";
	}
}

static double now_s(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/*
 * The next completion of `cq` within 10 s, as "wc OPCODE STATUS"; a
 * completion's opcode is defined only on success (ibv_poll_cq(3)), so a
 * failed one prints its status alone.
 */
static void next_wc(const char *call, const char *what, struct rpma_cq *cq) {
	double end = now_s() + 10;
	struct ibv_wc wc;
	int got = 0;
	int ret;
	char text[96];
	do {
		ret = rpma_cq_get_wc(cq, 1, &wc, &got);
		if (ret != RPMA_E_NO_COMPLETION)
			break;
		usleep(1000);
	} while (now_s() < end);
	if (ret == RPMA_E_NO_COMPLETION)
		snprintf(text, sizeof(text), "wc none in 10 s");
	else if (ret != 0)
		snprintf(text, sizeof(text), "wc poll %s", code_name(ret));
	else if (wc.status == IBV_WC_SUCCESS)
		snprintf(text, sizeof(text), "wc %s SUCCESS", opcode_name(wc.opcode));
	else
		snprintf(text, sizeof(text), "wc %s", status_name(wc.status));
	note(call, what, text);
}

/*
 * A posted operation: its answer, and when the library took it (said 0),
 * the completion it got -- so a library that posts what it should have
 * refused does not shift every later completion by one.
 */
static int posted(const char *call, const char *what, int ret, int man,
		  struct rpma_cq *cq) {
	said(call, what, ret, man);
	if (ret == 0)
		next_wc(call, what, cq);
	return ret;
}

/* The next CM event of a connection, within the child's alarm. */
static void next_event(const char *side, struct rpma_conn *conn) {
	enum rpma_conn_event e = RPMA_CONN_UNDEFINED;
	int ret = rpma_conn_next_event(conn, &e);
	char text[64];
	snprintf(text, sizeof(text), "%s %s", code_name(ret),
		 ret == 0 ? event_name(e) : "-");
	note("rpma_conn_next_event", side, text);
}

/* --- the objects a group starts from ------------------------------------ */

struct host {
	struct ibv_context *ctx;
	struct rpma_peer *peer;
};

static int open_host(struct host *h) {
	memset(h, 0, sizeof(*h));
	if (rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &h->ctx) ||
	    rpma_peer_new(h->ctx, &h->peer)) {
		note("setup", "open the device", "failed");
		return -1;
	}
	return 0;
}

/*
 * A connected pair in this one thread: server and client share the peer,
 * each with a 4 KiB MR (every usage, persistent flush on the server's), and
 * the client holds the server's MR as a remote one.
 */
struct pair {
	struct host h;
	struct rpma_ep *ep;
	struct rpma_conn *cli, *srv;
	char *cbuf, *sbuf;
	struct rpma_mr_local *cmr, *smr;
	struct rpma_mr_remote *rmr;
	struct rpma_cq *ccq, *scq;
};

#define ALL_USAGE                                                              \
	(RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_READ_DST |                     \
	 RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_WRITE_DST |                   \
	 RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV |                             \
	 RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY)

static int open_pair(struct pair *p, struct rpma_conn_cfg *ccfg,
		     struct rpma_conn_cfg *scfg, int server_usage) {
	char port[16];
	/* A host already open (its peer holds the server's SRQ) is kept. */
	if (p->h.peer == NULL && open_host(&p->h))
		return -1;
	snprintf(port, sizeof(port), "%d", next_port);
	p->cbuf = aligned_alloc(4096, BUF);
	p->sbuf = aligned_alloc(4096, BUF);
	memset(p->cbuf, 'c', BUF);
	memset(p->sbuf, 's', BUF);
	struct rpma_conn_req *creq = NULL, *sreq = NULL;
	enum rpma_conn_event e;
	char desc[64];
	size_t desc_size = 0;
	if (rpma_mr_reg(p->h.peer, p->cbuf, BUF, ALL_USAGE, &p->cmr) ||
	    rpma_mr_reg(p->h.peer, p->sbuf, BUF, server_usage, &p->smr) ||
	    rpma_ep_listen(p->h.peer, addr, port, &p->ep) ||
	    rpma_conn_req_new(p->h.peer, addr, port, ccfg, &creq) ||
	    rpma_conn_req_connect(&creq, NULL, &p->cli) ||
	    rpma_ep_next_conn_req(p->ep, scfg, &sreq) ||
	    rpma_conn_req_connect(&sreq, NULL, &p->srv) ||
	    /*
	     * The client's event first: librdmacm's active side sends the RTU
	     * that establishes the server's side only when the program takes
	     * the CONNECT_RESPONSE event (librdmacm cma.c ucma_process_conn_resp).
	     */
	    rpma_conn_next_event(p->cli, &e) || e != RPMA_CONN_ESTABLISHED ||
	    rpma_conn_next_event(p->srv, &e) || e != RPMA_CONN_ESTABLISHED ||
	    rpma_mr_get_descriptor_size(p->smr, &desc_size) ||
	    desc_size > sizeof(desc) || rpma_mr_get_descriptor(p->smr, desc) ||
	    rpma_mr_remote_from_descriptor(desc, desc_size, &p->rmr) ||
	    rpma_conn_get_cq(p->cli, &p->ccq) || rpma_conn_get_cq(p->srv, &p->scq)) {
		note("setup", "connect a pair", "failed");
		return -1;
	}
	return 0;
}

/*
 * A disconnect as librpma programs do it: the client asks, the server sees
 * CLOSED and disconnects too, then the client sees CLOSED -- on rdma_cm the
 * active side's DISCONNECTED waits for the passive side's DREP, which the
 * kernel sends when the server calls rdma_disconnect (cma.c,
 * cma_ib_handler / rdma_disconnect).
 */
static void close_pair(struct pair *p, const char *what) {
	char side[64];
	snprintf(side, sizeof(side), "%s, disconnect", what);
	said("rpma_conn_disconnect", side, rpma_conn_disconnect(p->cli), 0);
	snprintf(side, sizeof(side), "%s, server", what);
	next_event(side, p->srv);
	rpma_conn_disconnect(p->srv);
	snprintf(side, sizeof(side), "%s, client", what);
	next_event(side, p->cli);
	said("rpma_conn_delete", side, rpma_conn_delete(&p->cli), 0);
	snprintf(side, sizeof(side), "%s, server", what);
	said("rpma_conn_delete", side, rpma_conn_delete(&p->srv), 0);
	said("rpma_ep_shutdown", what, rpma_ep_shutdown(&p->ep), 0);
}

/* --- groups: each runs in a child of its own ----------------------------- */

/* Calls with no object at all: NULLs everywhere, unknown values. */
static void group_no_objects(void) {
	struct rpma_conn_cfg *cc = NULL;
	struct rpma_srq_cfg *sc = NULL;
	struct rpma_peer_cfg *pc = NULL;
	struct rpma_peer *peer = NULL;
	struct rpma_conn *conn = NULL;
	struct rpma_conn_req *req = NULL;
	struct rpma_srq *srq = NULL;
	struct rpma_ep *ep = NULL;
	struct rpma_mr_local *mr = NULL;
	struct rpma_mr_remote *rmr = NULL;
	struct rpma_cq *cq = NULL;
	struct rpma_conn_private_data pd;
	struct ibv_context *ctx = NULL;
	struct ibv_wc wc;
	uint32_t u32;
	int i, fd;
	bool b;
	size_t sz;
	void *ptr;
	char desc[64];
	enum rpma_conn_event ev;
	enum rpma_log_level level;

	SAFE("rpma_conn_cfg_new", "cfg_ptr NULL", rpma_conn_cfg_new(NULL), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_delete", "cfg_ptr NULL", rpma_conn_cfg_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_delete", "*cfg_ptr NULL", rpma_conn_cfg_delete(&cc), NONE);
	SAFE("rpma_conn_cfg_set_timeout", "cfg NULL", rpma_conn_cfg_set_timeout(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_set_cq_size", "cfg NULL", rpma_conn_cfg_set_cq_size(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_set_rcq_size", "cfg NULL", rpma_conn_cfg_set_rcq_size(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_set_sq_size", "cfg NULL", rpma_conn_cfg_set_sq_size(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_set_rq_size", "cfg NULL", rpma_conn_cfg_set_rq_size(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_set_compl_channel", "cfg NULL", rpma_conn_cfg_set_compl_channel(NULL, true), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_set_srq", "cfg NULL", rpma_conn_cfg_set_srq(NULL, NULL), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_timeout", "cfg NULL", rpma_conn_cfg_get_timeout(NULL, &i), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_cq_size", "cfg NULL", rpma_conn_cfg_get_cq_size(NULL, &u32), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_rcq_size", "cfg NULL", rpma_conn_cfg_get_rcq_size(NULL, &u32), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_sq_size", "cfg NULL", rpma_conn_cfg_get_sq_size(NULL, &u32), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_rq_size", "cfg NULL", rpma_conn_cfg_get_rq_size(NULL, &u32), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_compl_channel", "cfg NULL", rpma_conn_cfg_get_compl_channel(NULL, &b), RPMA_E_INVAL);
	SAFE("rpma_conn_cfg_get_srq", "cfg NULL", rpma_conn_cfg_get_srq(NULL, &srq), RPMA_E_INVAL);
	if (said("rpma_conn_cfg_new", "fresh", rpma_conn_cfg_new(&cc), 0) == 0) {
		SAFE("rpma_conn_cfg_set_timeout", "-1 ms", rpma_conn_cfg_set_timeout(cc, -1), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_timeout", "out NULL", rpma_conn_cfg_get_timeout(cc, NULL), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_cq_size", "out NULL", rpma_conn_cfg_get_cq_size(cc, NULL), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_rcq_size", "out NULL", rpma_conn_cfg_get_rcq_size(cc, NULL), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_sq_size", "out NULL", rpma_conn_cfg_get_sq_size(cc, NULL), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_rq_size", "out NULL", rpma_conn_cfg_get_rq_size(cc, NULL), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_compl_channel", "out NULL", rpma_conn_cfg_get_compl_channel(cc, NULL), RPMA_E_INVAL);
		SAFE("rpma_conn_cfg_get_srq", "out NULL", rpma_conn_cfg_get_srq(cc, NULL), RPMA_E_INVAL);
		/* The defaults a program gets (rpma_conn_cfg_new(3)). */
		char text[96];
		int t = -2;
		uint32_t cq_size = 0, rcq_size = 1, sq = 0, rq = 0;
		bool shared = true;
		rpma_conn_cfg_get_timeout(cc, &t);
		rpma_conn_cfg_get_cq_size(cc, &cq_size);
		rpma_conn_cfg_get_rcq_size(cc, &rcq_size);
		rpma_conn_cfg_get_sq_size(cc, &sq);
		rpma_conn_cfg_get_rq_size(cc, &rq);
		rpma_conn_cfg_get_compl_channel(cc, &shared);
		snprintf(text, sizeof(text), "timeout %d cq %u rcq %u sq %u rq %u shared %d", t,
			 cq_size, rcq_size, sq, rq, shared);
		note("rpma_conn_cfg_new", "defaults", text);
		SAFE("rpma_conn_cfg_set_cq_size", "0", rpma_conn_cfg_set_cq_size(cc, 0), NONE);
		SAFE("rpma_conn_cfg_set_sq_size", "UINT32_MAX", rpma_conn_cfg_set_sq_size(cc, UINT32_MAX), NONE);
		said("rpma_conn_cfg_delete", "fresh", rpma_conn_cfg_delete(&cc), 0);
		note("rpma_conn_cfg_delete", "fresh, after", cc == NULL ? "*cfg_ptr NULL" : "*cfg_ptr kept");
	}

	SAFE("rpma_srq_cfg_new", "cfg_ptr NULL", rpma_srq_cfg_new(NULL), RPMA_E_INVAL);
	SAFE("rpma_srq_cfg_delete", "cfg_ptr NULL", rpma_srq_cfg_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_srq_cfg_delete", "*cfg_ptr NULL", rpma_srq_cfg_delete(&sc), NONE);
	SAFE("rpma_srq_cfg_set_rq_size", "cfg NULL", rpma_srq_cfg_set_rq_size(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_srq_cfg_set_rcq_size", "cfg NULL", rpma_srq_cfg_set_rcq_size(NULL, 10), RPMA_E_INVAL);
	SAFE("rpma_srq_cfg_get_rq_size", "cfg NULL", rpma_srq_cfg_get_rq_size(NULL, &u32), RPMA_E_INVAL);
	SAFE("rpma_srq_cfg_get_rcq_size", "cfg NULL", rpma_srq_cfg_get_rcq_size(NULL, &u32), RPMA_E_INVAL);
	if (said("rpma_srq_cfg_new", "fresh", rpma_srq_cfg_new(&sc), 0) == 0) {
		SAFE("rpma_srq_cfg_get_rq_size", "out NULL", rpma_srq_cfg_get_rq_size(sc, NULL), RPMA_E_INVAL);
		SAFE("rpma_srq_cfg_get_rcq_size", "out NULL", rpma_srq_cfg_get_rcq_size(sc, NULL), RPMA_E_INVAL);
		uint32_t rq = 0, rcq = 0;
		char text[64];
		rpma_srq_cfg_get_rq_size(sc, &rq);
		rpma_srq_cfg_get_rcq_size(sc, &rcq);
		snprintf(text, sizeof(text), "rq %u rcq %u", rq, rcq);
		note("rpma_srq_cfg_new", "defaults", text);
		said("rpma_srq_cfg_delete", "fresh", rpma_srq_cfg_delete(&sc), 0);
	}

	SAFE("rpma_peer_cfg_new", "pcfg_ptr NULL", rpma_peer_cfg_new(NULL), RPMA_E_INVAL);
	SAFE("rpma_peer_cfg_delete", "pcfg_ptr NULL", rpma_peer_cfg_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_peer_cfg_delete", "*pcfg_ptr NULL", rpma_peer_cfg_delete(&pc), NONE);
	SAFE("rpma_peer_cfg_set_direct_write_to_pmem", "pcfg NULL", rpma_peer_cfg_set_direct_write_to_pmem(NULL, true), RPMA_E_INVAL);
	SAFE("rpma_peer_cfg_get_direct_write_to_pmem", "pcfg NULL", rpma_peer_cfg_get_direct_write_to_pmem(NULL, &b), RPMA_E_INVAL);
	SAFE("rpma_peer_cfg_get_descriptor", "pcfg NULL", rpma_peer_cfg_get_descriptor(NULL, desc), RPMA_E_INVAL);
	SAFE("rpma_peer_cfg_get_descriptor_size", "pcfg NULL", rpma_peer_cfg_get_descriptor_size(NULL, &sz), RPMA_E_INVAL);
	memset(desc, 0, sizeof(desc));
	SAFE("rpma_peer_cfg_from_descriptor", "desc NULL", rpma_peer_cfg_from_descriptor(NULL, 1, &pc), RPMA_E_INVAL);
	SAFE("rpma_peer_cfg_from_descriptor", "pcfg_ptr NULL", rpma_peer_cfg_from_descriptor(desc, 1, NULL), RPMA_E_INVAL);
	if (said("rpma_peer_cfg_new", "fresh", rpma_peer_cfg_new(&pc), 0) == 0) {
		SAFE("rpma_peer_cfg_get_direct_write_to_pmem", "out NULL", rpma_peer_cfg_get_direct_write_to_pmem(pc, NULL), RPMA_E_INVAL);
		SAFE("rpma_peer_cfg_get_descriptor", "desc NULL", rpma_peer_cfg_get_descriptor(pc, NULL), RPMA_E_INVAL);
		SAFE("rpma_peer_cfg_get_descriptor_size", "out NULL", rpma_peer_cfg_get_descriptor_size(pc, NULL), RPMA_E_INVAL);
		sz = 0;
		rpma_peer_cfg_get_descriptor_size(pc, &sz);
		said("rpma_peer_cfg_set_direct_write_to_pmem", "true", rpma_peer_cfg_set_direct_write_to_pmem(pc, true), 0);
		said("rpma_peer_cfg_get_descriptor", "fresh", rpma_peer_cfg_get_descriptor(pc, desc), 0);
		char text[64];
		snprintf(text, sizeof(text), "size %zu", sz);
		note("rpma_peer_cfg_get_descriptor_size", "fresh", text);
		said("rpma_peer_cfg_delete", "fresh", rpma_peer_cfg_delete(&pc), 0);
		if (sz > 0 && sz < sizeof(desc)) {
			SAFE("rpma_peer_cfg_from_descriptor", "size - 1", rpma_peer_cfg_from_descriptor(desc, sz - 1, &pc), RPMA_E_INVAL);
			rpma_peer_cfg_delete(&pc);
			SAFE("rpma_peer_cfg_from_descriptor", "size + 1", rpma_peer_cfg_from_descriptor(desc, sz + 1, &pc), RPMA_E_INVAL);
			rpma_peer_cfg_delete(&pc);
			if (said("rpma_peer_cfg_from_descriptor", "own descriptor", rpma_peer_cfg_from_descriptor(desc, sz, &pc), 0) == 0) {
				b = false;
				rpma_peer_cfg_get_direct_write_to_pmem(pc, &b);
				note("rpma_peer_cfg_from_descriptor", "own descriptor, direct write", b ? "true" : "false");
				rpma_peer_cfg_delete(&pc);
			}
			memset(desc, 0xfe, sz);
			if (said("rpma_peer_cfg_from_descriptor", "bytes 0xfe", rpma_peer_cfg_from_descriptor(desc, sz, &pc), NONE) == 0) {
				b = false;
				rpma_peer_cfg_get_direct_write_to_pmem(pc, &b);
				note("rpma_peer_cfg_from_descriptor", "bytes 0xfe, direct write", b ? "true" : "false");
				rpma_peer_cfg_delete(&pc);
			}
		}
	}

	memset(desc, 0, sizeof(desc));
	SAFE("rpma_mr_remote_from_descriptor", "desc NULL", rpma_mr_remote_from_descriptor(NULL, 21, &rmr), RPMA_E_INVAL);
	SAFE("rpma_mr_remote_from_descriptor", "mr_ptr NULL", rpma_mr_remote_from_descriptor(desc, 21, NULL), RPMA_E_INVAL);
	SAFE("rpma_mr_remote_from_descriptor", "size 0", rpma_mr_remote_from_descriptor(desc, 0, &rmr), RPMA_E_INVAL);
	rpma_mr_remote_delete(&rmr);
	SAFE("rpma_mr_remote_get_size", "mr NULL", rpma_mr_remote_get_size(NULL, &sz), RPMA_E_INVAL);
	SAFE("rpma_mr_remote_get_flush_type", "mr NULL", rpma_mr_remote_get_flush_type(NULL, &i), RPMA_E_INVAL);
	SAFE("rpma_mr_remote_delete", "mr_ptr NULL", rpma_mr_remote_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_mr_remote_delete", "*mr_ptr NULL", rpma_mr_remote_delete(&rmr), NONE);

	SAFE("rpma_mr_reg", "peer NULL", rpma_mr_reg(NULL, desc, 8, RPMA_MR_USAGE_READ_SRC, &mr), RPMA_E_INVAL);
	SAFE("rpma_mr_dereg", "mr_ptr NULL", rpma_mr_dereg(NULL), RPMA_E_INVAL);
	SAFE("rpma_mr_dereg", "*mr_ptr NULL", rpma_mr_dereg(&mr), NONE);
	SAFE("rpma_mr_get_descriptor", "mr NULL", rpma_mr_get_descriptor(NULL, desc), RPMA_E_INVAL);
	SAFE("rpma_mr_get_descriptor_size", "mr NULL", rpma_mr_get_descriptor_size(NULL, &sz), RPMA_E_INVAL);
	SAFE("rpma_mr_get_ptr", "mr NULL", rpma_mr_get_ptr(NULL, &ptr), RPMA_E_INVAL);
	SAFE("rpma_mr_get_size", "mr NULL", rpma_mr_get_size(NULL, &sz), RPMA_E_INVAL);
	SAFE("rpma_mr_advise", "mr NULL", rpma_mr_advise(NULL, 0, 8, IBV_ADVISE_MR_ADVICE_PREFETCH, 0), RPMA_E_INVAL);

	SAFE("rpma_utils_get_ibv_context", "addr NULL", rpma_utils_get_ibv_context(NULL, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_INVAL);
	SAFE("rpma_utils_get_ibv_context", "ctx_ptr NULL", rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, NULL), RPMA_E_INVAL);
	SAFE("rpma_utils_get_ibv_context", "type 7", rpma_utils_get_ibv_context(addr, (enum rpma_util_ibv_context_type)7, &ctx), RPMA_E_INVAL);
	SAFE("rpma_utils_get_ibv_context", "addr not an address", rpma_utils_get_ibv_context("no.such.host.invalid", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	SAFE("rpma_utils_get_ibv_context", "addr no NIC has", rpma_utils_get_ibv_context("192.0.2.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx), RPMA_E_PROVIDER);
	SAFE("rpma_utils_ibv_context_is_odp_capable", "ibv_ctx NULL", rpma_utils_ibv_context_is_odp_capable(NULL, &i), RPMA_E_INVAL);

	SAFE("rpma_peer_new", "ibv_ctx NULL", rpma_peer_new(NULL, &peer), RPMA_E_INVAL);
	SAFE("rpma_peer_delete", "peer_ptr NULL", rpma_peer_delete(NULL), NONE);
	SAFE("rpma_peer_delete", "*peer_ptr NULL", rpma_peer_delete(&peer), NONE);

	SAFE("rpma_ep_listen", "peer NULL", rpma_ep_listen(NULL, addr, "7000", &ep), RPMA_E_INVAL);
	SAFE("rpma_ep_shutdown", "ep_ptr NULL", rpma_ep_shutdown(NULL), RPMA_E_INVAL);
	SAFE("rpma_ep_shutdown", "*ep_ptr NULL", rpma_ep_shutdown(&ep), NONE);
	SAFE("rpma_ep_get_fd", "ep NULL", rpma_ep_get_fd(NULL, &fd), RPMA_E_INVAL);
	SAFE("rpma_ep_next_conn_req", "ep NULL", rpma_ep_next_conn_req(NULL, NULL, &req), RPMA_E_INVAL);

	SAFE("rpma_conn_req_new", "peer NULL", rpma_conn_req_new(NULL, addr, "7000", NULL, &req), RPMA_E_INVAL);
	SAFE("rpma_conn_req_delete", "req_ptr NULL", rpma_conn_req_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_conn_req_delete", "*req_ptr NULL", rpma_conn_req_delete(&req), NONE);
	SAFE("rpma_conn_req_connect", "req_ptr NULL", rpma_conn_req_connect(NULL, NULL, &conn), RPMA_E_INVAL);
	SAFE("rpma_conn_req_connect", "*req_ptr NULL", rpma_conn_req_connect(&req, NULL, &conn), RPMA_E_INVAL);
	SAFE("rpma_conn_req_get_private_data", "req NULL", rpma_conn_req_get_private_data(NULL, &pd), RPMA_E_INVAL);
	SAFE("rpma_conn_req_recv", "req NULL", rpma_conn_req_recv(NULL, NULL, 0, 0, &pd), RPMA_E_INVAL);

	SAFE("rpma_conn_get_event_fd", "conn NULL", rpma_conn_get_event_fd(NULL, &fd), RPMA_E_INVAL);
	SAFE("rpma_conn_next_event", "conn NULL", rpma_conn_next_event(NULL, &ev), RPMA_E_INVAL);
	SAFE("rpma_conn_get_private_data", "conn NULL", rpma_conn_get_private_data(NULL, &pd), RPMA_E_INVAL);
	SAFE("rpma_conn_apply_remote_peer_cfg", "conn NULL", rpma_conn_apply_remote_peer_cfg(NULL, pc), RPMA_E_INVAL);
	SAFE("rpma_conn_get_qp_num", "conn NULL", rpma_conn_get_qp_num(NULL, &u32), RPMA_E_INVAL);
	SAFE("rpma_conn_get_cq", "conn NULL", rpma_conn_get_cq(NULL, &cq), RPMA_E_INVAL);
	SAFE("rpma_conn_get_rcq", "conn NULL", rpma_conn_get_rcq(NULL, &cq), RPMA_E_INVAL);
	SAFE("rpma_conn_get_compl_fd", "conn NULL", rpma_conn_get_compl_fd(NULL, &fd), RPMA_E_INVAL);
	SAFE("rpma_conn_wait", "conn NULL", rpma_conn_wait(NULL, 0, &cq, &b), RPMA_E_INVAL);
	SAFE("rpma_conn_disconnect", "conn NULL", rpma_conn_disconnect(NULL), RPMA_E_INVAL);
	SAFE("rpma_conn_delete", "conn_ptr NULL", rpma_conn_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_conn_delete", "*conn_ptr NULL", rpma_conn_delete(&conn), NONE);

	SAFE("rpma_srq_new", "peer NULL", rpma_srq_new(NULL, NULL, &srq), RPMA_E_INVAL);
	SAFE("rpma_srq_delete", "srq_ptr NULL", rpma_srq_delete(NULL), RPMA_E_INVAL);
	SAFE("rpma_srq_delete", "*srq_ptr NULL", rpma_srq_delete(&srq), NONE);
	SAFE("rpma_srq_recv", "srq NULL", rpma_srq_recv(NULL, NULL, 0, 0, NULL), RPMA_E_INVAL);
	SAFE("rpma_srq_get_rcq", "srq NULL", rpma_srq_get_rcq(NULL, &cq), RPMA_E_INVAL);

	SAFE("rpma_read", "conn NULL", rpma_read(NULL, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	SAFE("rpma_write", "conn NULL", rpma_write(NULL, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	SAFE("rpma_write_with_imm", "conn NULL", rpma_write_with_imm(NULL, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, 1, NULL), RPMA_E_INVAL);
	SAFE("rpma_atomic_write", "conn NULL", rpma_atomic_write(NULL, rmr, 0, desc, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	SAFE("rpma_flush", "conn NULL", rpma_flush(NULL, rmr, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	SAFE("rpma_send", "conn NULL", rpma_send(NULL, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL);
	SAFE("rpma_send_with_imm", "conn NULL", rpma_send_with_imm(NULL, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, 1, NULL), RPMA_E_INVAL);
	SAFE("rpma_recv", "conn NULL", rpma_recv(NULL, NULL, 0, 0, NULL), RPMA_E_INVAL);

	SAFE("rpma_cq_get_fd", "cq NULL", rpma_cq_get_fd(NULL, &fd), RPMA_E_INVAL);
	SAFE("rpma_cq_wait", "cq NULL", rpma_cq_wait(NULL), RPMA_E_INVAL);
	SAFE("rpma_cq_get_wc", "cq NULL", rpma_cq_get_wc(NULL, 1, &wc, NULL), RPMA_E_INVAL);

	/* Strings for every code and event, and for ones that are not. */
	static const int codes[] = {0, 1, -1, RPMA_E_UNKNOWN, RPMA_E_NOSUPP,
		RPMA_E_PROVIDER, RPMA_E_NOMEM, RPMA_E_INVAL, RPMA_E_NO_COMPLETION,
		RPMA_E_NO_EVENT, RPMA_E_AGAIN, RPMA_E_SHARED_CHANNEL,
		RPMA_E_NOT_SHARED_CHNL, RPMA_E_NOT_SHARED_CHNL - 1, INT_MIN, INT_MAX};
	for (size_t k = 0; k < sizeof(codes) / sizeof(codes[0]); k++) {
		char what[32];
		const char *s = rpma_err_2str(codes[k]);
		snprintf(what, sizeof(what), "%d", codes[k]);
		note("rpma_err_2str", what, s != NULL ? s : "(NULL)");
	}
	for (int e = -2; e <= 6; e++) {
		char what[32];
		const char *s = rpma_utils_conn_event_2str((enum rpma_conn_event)e);
		snprintf(what, sizeof(what), "%d", e);
		note("rpma_utils_conn_event_2str", what, s != NULL ? s : "(NULL)");
	}

	SAFE("rpma_log_set_threshold", "threshold 7", rpma_log_set_threshold((enum rpma_log_threshold)7, RPMA_LOG_LEVEL_ERROR), RPMA_E_INVAL);
	SAFE("rpma_log_set_threshold", "level 99", rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)99), RPMA_E_INVAL);
	SAFE("rpma_log_set_threshold", "level -2", rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)-2), RPMA_E_INVAL);
	SAFE("rpma_log_get_threshold", "level NULL", rpma_log_get_threshold(RPMA_LOG_THRESHOLD, NULL), RPMA_E_INVAL);
	SAFE("rpma_log_get_threshold", "threshold 7", rpma_log_get_threshold((enum rpma_log_threshold)7, &level), RPMA_E_INVAL);
	said("rpma_log_set_threshold", "disabled", rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_DISABLED), 0);
	level = RPMA_LOG_LEVEL_DEBUG;
	said("rpma_log_get_threshold", "after disabled", rpma_log_get_threshold(RPMA_LOG_THRESHOLD_AUX, &level), 0);
	note("rpma_log_get_threshold", "after disabled, level", level == RPMA_LOG_DISABLED ? "RPMA_LOG_DISABLED" : "other");
	said("rpma_log_set_function", "default (NULL)", rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION), 0);
}

/* A device and a peer, no connection: registration, listening, SRQs. */
static void group_peer(void) {
	struct host h;
	if (open_host(&h))
		return;
	char port[16];
	snprintf(port, sizeof(port), "%d", next_port);
	int i = -1;
	said("rpma_utils_ibv_context_is_odp_capable", "out NULL", rpma_utils_ibv_context_is_odp_capable(h.ctx, NULL), RPMA_E_INVAL);
	said("rpma_peer_new", "peer_ptr NULL", rpma_peer_new(h.ctx, NULL), RPMA_E_INVAL);

	struct rpma_mr_local *mr = NULL;
	char *buf = aligned_alloc(4096, BUF);
	memset(buf, 'b', BUF);
	said("rpma_mr_reg", "ptr NULL", rpma_mr_reg(h.peer, NULL, 8, RPMA_MR_USAGE_READ_SRC, &mr), RPMA_E_INVAL);
	said("rpma_mr_reg", "size 0", rpma_mr_reg(h.peer, buf, 0, RPMA_MR_USAGE_READ_SRC, &mr), RPMA_E_INVAL);
	said("rpma_mr_reg", "usage 0", rpma_mr_reg(h.peer, buf, 8, 0, &mr), RPMA_E_INVAL);
	said("rpma_mr_reg", "mr_ptr NULL", rpma_mr_reg(h.peer, buf, 8, RPMA_MR_USAGE_READ_SRC, NULL), RPMA_E_INVAL);
	if (said("rpma_mr_reg", "unknown usage bit 1<<20", rpma_mr_reg(h.peer, buf, 8, 1 << 20, &mr), NONE) == 0)
		rpma_mr_dereg(&mr);
	/* Memory the process does not have: the NIC cannot pin it. */
	void *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 8192);
	if (said("rpma_mr_reg", "unmapped memory", rpma_mr_reg(h.peer, gone, 8192, RPMA_MR_USAGE_WRITE_DST, &mr), RPMA_E_PROVIDER) == 0)
		rpma_mr_dereg(&mr);
	if (said("rpma_mr_reg", "4 KiB, every usage", rpma_mr_reg(h.peer, buf, BUF, ALL_USAGE, &mr), 0) == 0) {
		char desc[64];
		size_t sz = 0;
		void *ptr;
		said("rpma_mr_get_descriptor", "desc NULL", rpma_mr_get_descriptor(mr, NULL), RPMA_E_INVAL);
		said("rpma_mr_get_descriptor_size", "out NULL", rpma_mr_get_descriptor_size(mr, NULL), RPMA_E_INVAL);
		said("rpma_mr_get_ptr", "out NULL", rpma_mr_get_ptr(mr, NULL), RPMA_E_INVAL);
		said("rpma_mr_get_size", "out NULL", rpma_mr_get_size(mr, NULL), RPMA_E_INVAL);
		said("rpma_mr_get_ptr", "fresh", rpma_mr_get_ptr(mr, &ptr), 0);
		note("rpma_mr_get_ptr", "fresh, value", ptr == buf ? "the registered pointer" : "another pointer");
		said("rpma_mr_get_size", "fresh", rpma_mr_get_size(mr, &sz), 0);
		note("rpma_mr_get_size", "fresh, value", sz == BUF ? "the registered size" : "another size");
		said("rpma_mr_advise", "past the end", rpma_mr_advise(mr, BUF - 8, 16, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH), RPMA_E_INVAL);
		said("rpma_mr_advise", "advice 99", rpma_mr_advise(mr, 0, 8, 99, 0), NONE);
		said("rpma_mr_advise", "prefetch, not ODP", rpma_mr_advise(mr, 0, 8, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH), NONE);
		sz = 0;
		rpma_mr_get_descriptor_size(mr, &sz);
		if (sz > 0 && sz <= sizeof(desc) && rpma_mr_get_descriptor(mr, desc) == 0) {
			struct rpma_mr_remote *rmr = NULL;
			said("rpma_mr_remote_from_descriptor", "size - 1", rpma_mr_remote_from_descriptor(desc, sz - 1, &rmr), RPMA_E_INVAL);
			rpma_mr_remote_delete(&rmr);
			said("rpma_mr_remote_from_descriptor", "size + 1", rpma_mr_remote_from_descriptor(desc, sz + 1, &rmr), RPMA_E_INVAL);
			rpma_mr_remote_delete(&rmr);
			if (said("rpma_mr_remote_from_descriptor", "own descriptor", rpma_mr_remote_from_descriptor(desc, sz, &rmr), 0) == 0) {
				size_t rsz = 0;
				int ft = 0;
				said("rpma_mr_remote_get_size", "out NULL", rpma_mr_remote_get_size(rmr, NULL), RPMA_E_INVAL);
				said("rpma_mr_remote_get_flush_type", "out NULL", rpma_mr_remote_get_flush_type(rmr, NULL), RPMA_E_INVAL);
				rpma_mr_remote_get_size(rmr, &rsz);
				rpma_mr_remote_get_flush_type(rmr, &ft);
				char text[64];
				snprintf(text, sizeof(text), "size %s, flush type %d", rsz == BUF ? "the registered size" : "another size", ft);
				note("rpma_mr_remote_from_descriptor", "own descriptor, values", text);
				said("rpma_mr_remote_delete", "own descriptor", rpma_mr_remote_delete(&rmr), 0);
			}
			memset(desc, 0xff, sz);
			if (said("rpma_mr_remote_from_descriptor", "bytes 0xff", rpma_mr_remote_from_descriptor(desc, sz, &rmr), RPMA_E_NOSUPP) == 0)
				rpma_mr_remote_delete(&rmr);
		}
		said("rpma_mr_dereg", "fresh", rpma_mr_dereg(&mr), 0);
		note("rpma_mr_dereg", "fresh, after", mr == NULL ? "*mr_ptr NULL" : "*mr_ptr kept");
	}

	struct rpma_ep *ep = NULL, *ep2 = NULL;
	said("rpma_ep_listen", "addr NULL", rpma_ep_listen(h.peer, NULL, port, &ep), RPMA_E_INVAL);
	said("rpma_ep_listen", "port NULL", rpma_ep_listen(h.peer, addr, NULL, &ep), RPMA_E_INVAL);
	said("rpma_ep_listen", "ep_ptr NULL", rpma_ep_listen(h.peer, addr, port, NULL), RPMA_E_INVAL);
	if (said("rpma_ep_listen", "addr no NIC has", rpma_ep_listen(h.peer, "192.0.2.1", port, &ep), RPMA_E_PROVIDER) == 0)
		rpma_ep_shutdown(&ep);
	if (said("rpma_ep_listen", "port not a number", rpma_ep_listen(h.peer, addr, "no-such-port", &ep), RPMA_E_PROVIDER) == 0)
		rpma_ep_shutdown(&ep);
	if (said("rpma_ep_listen", "fresh", rpma_ep_listen(h.peer, addr, port, &ep), 0) == 0) {
		struct rpma_conn_req *req = NULL;
		int fd = -1;
		said("rpma_ep_get_fd", "out NULL", rpma_ep_get_fd(ep, NULL), RPMA_E_INVAL);
		said("rpma_ep_get_fd", "fresh", rpma_ep_get_fd(ep, &fd), 0);
		said("rpma_ep_next_conn_req", "req_ptr NULL", rpma_ep_next_conn_req(ep, NULL, NULL), RPMA_E_INVAL);
		if (said("rpma_ep_listen", "the same port again", rpma_ep_listen(h.peer, addr, port, &ep2), RPMA_E_PROVIDER) == 0)
			rpma_ep_shutdown(&ep2);
		(void)req;
		said("rpma_ep_shutdown", "fresh", rpma_ep_shutdown(&ep), 0);
		note("rpma_ep_shutdown", "fresh, after", ep == NULL ? "*ep_ptr NULL" : "*ep_ptr kept");
	}

	struct rpma_conn_req *req = NULL;
	said("rpma_conn_req_new", "addr NULL", rpma_conn_req_new(h.peer, NULL, port, NULL, &req), RPMA_E_INVAL);
	said("rpma_conn_req_new", "port NULL", rpma_conn_req_new(h.peer, addr, NULL, NULL, &req), RPMA_E_INVAL);
	said("rpma_conn_req_new", "req_ptr NULL", rpma_conn_req_new(h.peer, addr, port, NULL, NULL), RPMA_E_INVAL);
	if (said("rpma_conn_req_new", "fresh", rpma_conn_req_new(h.peer, addr, port, NULL, &req), 0) == 0) {
		struct rpma_conn_private_data pd;
		struct rpma_conn *conn = NULL;
		said("rpma_conn_req_get_private_data", "out NULL", rpma_conn_req_get_private_data(req, NULL), RPMA_E_INVAL);
		said("rpma_conn_req_recv", "dst NULL", rpma_conn_req_recv(req, NULL, 0, 8, &pd), RPMA_E_INVAL);
		pd.ptr = &pd;
		pd.len = 0;
		said("rpma_conn_req_connect", "pdata len 0", rpma_conn_req_connect(&req, &pd, &conn), RPMA_E_INVAL);
		if (req != NULL)
			said("rpma_conn_req_connect", "conn_ptr NULL", rpma_conn_req_connect(&req, NULL, NULL), RPMA_E_INVAL);
		if (req != NULL)
			said("rpma_conn_req_delete", "fresh, never connected", rpma_conn_req_delete(&req), 0);
		else
			note("rpma_conn_req_connect", "after the bad calls", "the request is gone");
	}
	/* Nobody listens on the port any more: the connection is rejected. */
	if (rpma_conn_req_new(h.peer, addr, port, NULL, &req) == 0) {
		struct rpma_conn *conn = NULL;
		if (said("rpma_conn_req_connect", "nobody listens", rpma_conn_req_connect(&req, NULL, &conn), 0) == 0) {
			next_event("nobody listens", conn);
			said("rpma_conn_delete", "rejected", rpma_conn_delete(&conn), 0);
		}
	} else {
		note("rpma_conn_req_new", "nobody listens", "failed");
	}

	struct rpma_srq *srq = NULL;
	struct rpma_srq_cfg *sc = NULL;
	said("rpma_srq_new", "srq_ptr NULL", rpma_srq_new(h.peer, NULL, NULL), RPMA_E_INVAL);
	rpma_srq_cfg_new(&sc);
	rpma_srq_cfg_set_rq_size(sc, 1u << 30);
	if (said("rpma_srq_new", "rq size 2^30", rpma_srq_new(h.peer, sc, &srq), RPMA_E_PROVIDER) == 0)
		rpma_srq_delete(&srq);
	rpma_srq_cfg_delete(&sc);
	if (said("rpma_srq_new", "cfg NULL (defaults)", rpma_srq_new(h.peer, NULL, &srq), 0) == 0) {
		struct rpma_cq *rcq = NULL;
		said("rpma_srq_get_rcq", "out NULL", rpma_srq_get_rcq(srq, NULL), RPMA_E_INVAL);
		said("rpma_srq_get_rcq", "fresh", rpma_srq_get_rcq(srq, &rcq), 0);
		said("rpma_srq_recv", "dst NULL, offset 8", rpma_srq_recv(srq, NULL, 8, 0, NULL), RPMA_E_INVAL);
		said("rpma_srq_recv", "dst NULL, len 8", rpma_srq_recv(srq, NULL, 0, 8, NULL), RPMA_E_INVAL);
		said("rpma_srq_recv", "dst NULL, empty", rpma_srq_recv(srq, NULL, 0, 0, NULL), 0);
		if (rcq != NULL) {
			int fd = -1;
			struct ibv_wc wc;
			int got = -1;
			said("rpma_cq_get_fd", "out NULL", rpma_cq_get_fd(rcq, NULL), RPMA_E_INVAL);
			said("rpma_cq_get_wc", "num_entries 0", rpma_cq_get_wc(rcq, 0, &wc, &got), RPMA_E_INVAL);
			said("rpma_cq_get_wc", "wc NULL", rpma_cq_get_wc(rcq, 1, NULL, &got), RPMA_E_INVAL);
			said("rpma_cq_get_wc", "2 entries, got NULL", rpma_cq_get_wc(rcq, 2, &wc, NULL), RPMA_E_INVAL);
			said("rpma_cq_get_wc", "empty", rpma_cq_get_wc(rcq, 1, &wc, &got), RPMA_E_NO_COMPLETION);
			said("rpma_cq_get_fd", "fresh", rpma_cq_get_fd(rcq, &fd), 0);
		}
		said("rpma_srq_delete", "fresh", rpma_srq_delete(&srq), 0);
	}

	/* Queues bigger than the NIC has: creating the connection fails. */
	struct rpma_conn_cfg *cc = NULL;
	rpma_conn_cfg_new(&cc);
	rpma_conn_cfg_set_cq_size(cc, 1u << 30);
	if (said("rpma_conn_req_new", "cq size 2^30", rpma_conn_req_new(h.peer, addr, port, cc, &req), RPMA_E_PROVIDER) == 0)
		rpma_conn_req_delete(&req);
	rpma_conn_cfg_set_cq_size(cc, 10);
	rpma_conn_cfg_set_sq_size(cc, 1u << 30);
	if (said("rpma_conn_req_new", "sq size 2^30", rpma_conn_req_new(h.peer, addr, port, cc, &req), RPMA_E_PROVIDER) == 0)
		rpma_conn_req_delete(&req);
	rpma_conn_cfg_delete(&cc);

	said("rpma_peer_delete", "fresh", rpma_peer_delete(&h.peer), 0);
	note("rpma_peer_delete", "fresh, after", h.peer == NULL ? "*peer_ptr NULL" : "*peer_ptr kept");
	(void)i;
}

/* A connection: bad flags, NULL buffers, unknown types, then good calls. */
static void group_conn(void) {
	struct pair p = {0};
	if (open_pair(&p, NULL, NULL, ALL_USAGE))
		return;
	struct rpma_conn *c = p.cli;
	struct rpma_cq *cq = NULL;
	uint32_t u32;
	int fd;
	bool b;
	const char word[8] = "abcdefgh";
	said("rpma_conn_get_private_data", "out NULL", rpma_conn_get_private_data(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_get_qp_num", "out NULL", rpma_conn_get_qp_num(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_get_cq", "out NULL", rpma_conn_get_cq(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_get_rcq", "out NULL", rpma_conn_get_rcq(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_get_event_fd", "out NULL", rpma_conn_get_event_fd(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_get_compl_fd", "out NULL", rpma_conn_get_compl_fd(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_next_event", "out NULL", rpma_conn_next_event(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_apply_remote_peer_cfg", "pcfg NULL", rpma_conn_apply_remote_peer_cfg(c, NULL), RPMA_E_INVAL);
	said("rpma_conn_get_compl_fd", "channel not shared", rpma_conn_get_compl_fd(c, &fd), RPMA_E_NOT_SHARED_CHNL);
	said("rpma_conn_wait", "channel not shared", rpma_conn_wait(c, 0, &cq, &b), RPMA_E_NOT_SHARED_CHNL);
	cq = p.ccq;
	said("rpma_conn_get_rcq", "no rcq configured", rpma_conn_get_rcq(c, &cq), 0);
	note("rpma_conn_get_rcq", "no rcq configured, value", cq == NULL ? "NULL" : "a CQ");
	said("rpma_conn_get_qp_num", "fresh", rpma_conn_get_qp_num(c, &u32), 0);

	posted("rpma_write", "flags 0", rpma_write(c, p.rmr, 0, p.cmr, 0, 8, 0, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_write_with_imm", "flags 0", rpma_write_with_imm(c, p.rmr, 0, p.cmr, 0, 8, 0, 1, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_read", "flags 0", rpma_read(c, p.cmr, 0, p.rmr, 0, 8, 0, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_send", "flags 0", rpma_send(c, p.cmr, 0, 8, 0, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_send_with_imm", "flags 0", rpma_send_with_imm(c, p.cmr, 0, 8, 0, 1, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_atomic_write", "flags 0", rpma_atomic_write(c, p.rmr, 0, word, 0, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_flush", "flags 0", rpma_flush(c, p.rmr, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, 0, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_write", "dst NULL, src set", rpma_write(c, NULL, 0, p.cmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_write", "dst NULL, len 8", rpma_write(c, NULL, 0, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_write_with_imm", "src NULL, dst set", rpma_write_with_imm(c, p.rmr, 0, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, 1, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_read", "dst NULL, src set", rpma_read(c, NULL, 0, p.rmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_send", "src NULL, len 8", rpma_send(c, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_send_with_imm", "src NULL, offset 8", rpma_send_with_imm(c, NULL, 8, 0, RPMA_F_COMPLETION_ALWAYS, 1, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_recv", "dst NULL, len 8", rpma_recv(c, NULL, 0, 8, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_atomic_write", "dst NULL", rpma_atomic_write(c, NULL, 0, word, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_atomic_write", "src NULL", rpma_atomic_write(c, p.rmr, 0, NULL, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_atomic_write", "offset 4", rpma_atomic_write(c, p.rmr, 4, word, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_flush", "dst NULL", rpma_flush(c, NULL, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_flush", "type 7", rpma_flush(c, p.rmr, 0, 8, (enum rpma_flush_type)7, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_INVAL, p.ccq);
	posted("rpma_flush", "persistent, MR without it", rpma_flush(c, p.rmr, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL), RPMA_E_NOSUPP, p.ccq);

	/* Empty operations are operations: each completes. */
	if (said("rpma_write", "empty (all NULL, len 0)", rpma_write(c, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0)
		next_wc("rpma_write", "empty (all NULL, len 0)", p.ccq);
	if (said("rpma_read", "empty (all NULL, len 0)", rpma_read(c, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0)
		next_wc("rpma_read", "empty (all NULL, len 0)", p.ccq);
	said("rpma_recv", "server, 8 bytes", rpma_recv(p.srv, p.smr, 0, 8, NULL), 0);
	if (said("rpma_send", "empty (src NULL, len 0)", rpma_send(c, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0) {
		next_wc("rpma_send", "empty (src NULL, len 0)", p.ccq);
		next_wc("rpma_recv", "server, empty send", p.scq);
	}
	if (said("rpma_atomic_write", "offset 8", rpma_atomic_write(c, p.rmr, 8, word, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0)
		next_wc("rpma_atomic_write", "offset 8", p.ccq);
	if (said("rpma_flush", "visibility", rpma_flush(c, p.rmr, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0)
		next_wc("rpma_flush", "visibility", p.ccq);
	note("rpma_atomic_write", "offset 8, landed", memcmp(p.sbuf + 8, word, 8) == 0 ? "yes" : "no");
	if (said("rpma_write", "on error only, succeeds", rpma_write(c, p.rmr, 0, p.cmr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, NULL), 0) == 0) {
		struct ibv_wc wc;
		rpma_read(c, p.cmr, 64, p.rmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL);
		next_wc("rpma_write", "on error only, then a read", p.ccq);
		said("rpma_cq_get_wc", "after the read", rpma_cq_get_wc(p.ccq, 1, &wc, NULL), RPMA_E_NO_COMPLETION);
	}
	said("rpma_conn_disconnect", "fresh", rpma_conn_disconnect(c), 0);
	next_event("server, after disconnect", p.srv);
	said("rpma_conn_disconnect", "server, after CLOSED", rpma_conn_disconnect(p.srv), 0);
	next_event("client, after disconnect", c);
	said("rpma_conn_disconnect", "twice", rpma_conn_disconnect(c), NONE);
	said("rpma_conn_delete", "client", rpma_conn_delete(&p.cli), 0);
	note("rpma_conn_delete", "client, after", p.cli == NULL ? "*conn_ptr NULL" : "*conn_ptr kept");
	said("rpma_conn_delete", "server", rpma_conn_delete(&p.srv), 0);
	said("rpma_ep_shutdown", "after its connection", rpma_ep_shutdown(&p.ep), 0);
}

/* Operations after a disconnect: posts flush, nothing lands. */
static void group_after_disconnect(void) {
	struct pair p = {0};
	if (open_pair(&p, NULL, NULL, ALL_USAGE))
		return;
	said("rpma_conn_disconnect", "client", rpma_conn_disconnect(p.cli), 0);
	next_event("server", p.srv);
	rpma_conn_disconnect(p.srv);
	next_event("client", p.cli);
	if (said("rpma_recv", "client, after disconnect", rpma_recv(p.cli, p.cmr, 0, 8, NULL), NONE) == 0)
		next_wc("rpma_recv", "client, after disconnect", p.ccq);
	if (said("rpma_write", "client, after disconnect", rpma_write(p.cli, p.rmr, 0, p.cmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), NONE) == 0)
		next_wc("rpma_write", "client, after disconnect", p.ccq);
	if (said("rpma_send", "server, after disconnect", rpma_send(p.srv, p.smr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), NONE) == 0)
		next_wc("rpma_send", "server, after disconnect", p.scq);
	note("rpma_write", "after disconnect, landed", p.sbuf[0] == 'c' ? "yes" : "no");
	said("rpma_conn_delete", "client", rpma_conn_delete(&p.cli), 0);
	said("rpma_conn_delete", "server", rpma_conn_delete(&p.srv), 0);
	rpma_ep_shutdown(&p.ep);
}

/* A remote error: what fails, and what the connection does after. */
static void group_remote_error(void) {
	struct pair p = {0};
	/* The server's MR takes writes but no reads. */
	if (open_pair(&p, NULL, NULL, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_RECV))
		return;
	if (said("rpma_read", "MR without READ_SRC", rpma_read(p.cli, p.cmr, 0, p.rmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), NONE) == 0)
		next_wc("rpma_read", "MR without READ_SRC", p.ccq);
	if (said("rpma_write", "after the error", rpma_write(p.cli, p.rmr, 0, p.cmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), NONE) == 0)
		next_wc("rpma_write", "after the error", p.ccq);
	note("rpma_write", "after the error, landed", p.sbuf[0] == 'c' ? "yes" : "no");
	/* A QP in error is no CM event: the client disconnects. */
	close_pair(&p, "after the error");
}

/* Past the end of the remote MR, and of the local one. */
static void group_bounds(void) {
	struct pair p = {0};
	if (open_pair(&p, NULL, NULL, ALL_USAGE))
		return;
	if (said("rpma_write", "1 byte past the remote MR", rpma_write(p.cli, p.rmr, BUF - 7, p.cmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), NONE) == 0)
		next_wc("rpma_write", "1 byte past the remote MR", p.ccq);
	note("rpma_write", "past the end, landed", p.sbuf[BUF - 7] == 'c' ? "yes" : "no");
	close_pair(&p, "remote bounds");
	next_port++;
	if (open_pair(&p, NULL, NULL, ALL_USAGE))
		return;
	if (said("rpma_write", "1 byte past the local MR", rpma_write(p.cli, p.rmr, 0, p.cmr, BUF - 7, 8, RPMA_F_COMPLETION_ALWAYS, NULL), NONE) == 0)
		next_wc("rpma_write", "1 byte past the local MR", p.ccq);
	note("rpma_write", "past the local end, landed", p.sbuf[0] == 'c' ? "yes" : "no");
	close_pair(&p, "local bounds");
}

/* The completion channel shared by both CQs of a connection. */
static void group_shared_channel(void) {
	struct rpma_conn_cfg *cc = NULL;
	struct pair p = {0};
	rpma_conn_cfg_new(&cc);
	rpma_conn_cfg_set_compl_channel(cc, true);
	rpma_conn_cfg_set_rcq_size(cc, 8);
	if (open_pair(&p, cc, NULL, ALL_USAGE))
		return;
	struct rpma_cq *cq = NULL, *rcq = NULL;
	bool is_rcq = true;
	int fd = -1;
	said("rpma_conn_get_compl_fd", "shared", rpma_conn_get_compl_fd(p.cli, &fd), 0);
	said("rpma_cq_wait", "channel shared", rpma_cq_wait(p.ccq), RPMA_E_SHARED_CHANNEL);
	said("rpma_conn_get_rcq", "rcq configured", rpma_conn_get_rcq(p.cli, &rcq), 0);
	note("rpma_conn_get_rcq", "rcq configured, value", rcq == NULL ? "NULL" : "a CQ");
	if (said("rpma_write", "signalled", rpma_write(p.cli, p.rmr, 0, p.cmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0) {
		said("rpma_conn_wait", "is_rcq NULL", rpma_conn_wait(p.cli, 0, &cq, NULL), NONE);
		note("rpma_conn_wait", "is_rcq NULL, cq", cq == p.ccq ? "the main CQ" : cq == NULL ? "NULL" : "another CQ");
		next_wc("rpma_write", "signalled", p.ccq);
	}
	said("rpma_conn_wait", "cq NULL", rpma_conn_wait(p.cli, 0, NULL, &is_rcq), RPMA_E_INVAL);
	close_pair(&p, "shared channel");
	rpma_conn_cfg_delete(&cc);
}

/* A shared receive queue, deleted while a connection still uses it. */
static void group_srq(void) {
	struct rpma_srq *srq = NULL;
	struct rpma_conn_cfg *cc = NULL;
	struct pair p = {0};
	if (open_host(&p.h))
		return;
	if (said("rpma_srq_new", "for the server", rpma_srq_new(p.h.peer, NULL, &srq), 0) != 0)
		return;
	rpma_conn_cfg_new(&cc);
	said("rpma_conn_cfg_set_srq", "fresh", rpma_conn_cfg_set_srq(cc, srq), 0);
	if (open_pair(&p, NULL, cc, ALL_USAGE))
		return;
	struct rpma_cq *rcq = NULL, *srq_rcq = NULL;
	rpma_conn_get_rcq(p.srv, &rcq);
	rpma_srq_get_rcq(srq, &srq_rcq);
	note("rpma_conn_get_rcq", "server with an SRQ", rcq == NULL ? "NULL" : rcq == srq_rcq ? "the SRQ's CQ" : "another CQ");
	said("rpma_recv", "server with an SRQ", rpma_recv(p.srv, p.smr, 0, 8, NULL), NONE);
	said("rpma_srq_recv", "8 bytes", rpma_srq_recv(srq, p.smr, 0, 8, NULL), 0);
	if (said("rpma_send", "to the SRQ", rpma_send(p.cli, p.cmr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL), 0) == 0) {
		next_wc("rpma_send", "to the SRQ", p.ccq);
		if (srq_rcq != NULL)
			next_wc("rpma_srq_recv", "8 bytes", srq_rcq);
	}
	said("rpma_srq_delete", "while a connection uses it", rpma_srq_delete(&srq), NONE);
	note("rpma_srq_delete", "while in use, after", srq == NULL ? "*srq_ptr NULL" : "*srq_ptr kept");
	close_pair(&p, "with an SRQ");
	if (srq != NULL)
		said("rpma_srq_delete", "after its connection", rpma_srq_delete(&srq), 0);
	rpma_conn_cfg_delete(&cc);
}

/*
 * Only the client disconnects: does it see CLOSED before the server
 * answers? The event fd is polled for 3 s first, so a NIC that waits for
 * the server is one line, not a hang.
 */
static void group_one_sided_disconnect(void) {
	struct pair p = {0};
	if (open_pair(&p, NULL, NULL, ALL_USAGE))
		return;
	int fd = -1;
	said("rpma_conn_get_event_fd", "client", rpma_conn_get_event_fd(p.cli, &fd), 0);
	said("rpma_conn_disconnect", "client only", rpma_conn_disconnect(p.cli), 0);
	struct pollfd pfd = {fd, POLLIN, 0};
	int ready = poll(&pfd, 1, 3000);
	note("rpma_conn_next_event", "client, before the server disconnects",
	     ready > 0 ? "an event is ready" : "no event in 3 s");
	next_event("server", p.srv);
	said("rpma_conn_disconnect", "server, after CLOSED", rpma_conn_disconnect(p.srv), 0);
	next_event("client, after the server disconnects", p.cli);
	rpma_conn_delete(&p.cli);
	rpma_conn_delete(&p.srv);
	rpma_ep_shutdown(&p.ep);
}

/* A connection request the server turns down, and private data. */
static void group_reject(void) {
	struct host h;
	if (open_host(&h))
		return;
	char port[16];
	snprintf(port, sizeof(port), "%d", next_port);
	struct rpma_ep *ep = NULL;
	struct rpma_conn_req *creq = NULL, *sreq = NULL;
	struct rpma_conn *cli = NULL;
	struct rpma_conn_private_data pd = {"hello", 6}, got;
	if (rpma_ep_listen(h.peer, addr, port, &ep) ||
	    rpma_conn_req_new(h.peer, addr, port, NULL, &creq) ||
	    rpma_conn_req_connect(&creq, &pd, &cli) ||
	    rpma_ep_next_conn_req(ep, NULL, &sreq)) {
		note("setup", "a request", "failed");
		return;
	}
	memset(&got, 0, sizeof(got));
	said("rpma_conn_req_get_private_data", "server's request", rpma_conn_req_get_private_data(sreq, &got), 0);
	note("rpma_conn_req_get_private_data", "server's request, value",
	     got.ptr != NULL && got.len >= 6 && memcmp(got.ptr, "hello", 6) == 0 ? "hello" : "other");
	said("rpma_conn_req_delete", "server turns it down", rpma_conn_req_delete(&sreq), 0);
	next_event("client, turned down", cli);
	said("rpma_conn_delete", "turned down", rpma_conn_delete(&cli), 0);
	said("rpma_ep_shutdown", "fresh", rpma_ep_shutdown(&ep), 0);
}

/* --- the driver ------------------------------------------------------------ */

struct group {
	const char *name;
	void (*run)(void);
};

static const struct group groups[] = {
	{"no-objects", group_no_objects},
	{"peer", group_peer},
	{"conn", group_conn},
	{"after-disconnect", group_after_disconnect},
	{"remote-error", group_remote_error},
	{"bounds", group_bounds},
	{"shared-channel", group_shared_channel},
	{"srq", group_srq},
	{"reject", group_reject},
	{"one-sided-disconnect", group_one_sided_disconnect},
};

int main(int argc, char **argv) {
	const char *vm = getenv("RPMA_HARNESS_VM_ADDR");
	if (argc > 1)
		addr = argv[1];
	if (vm != NULL && vm[0] != '\0')
		addr = vm;
	if (argc > 2)
		port_base = atoi(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *only = getenv("API_ABUSE_GROUP");
	int failed = 0;
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		if (only != NULL && strcmp(only, groups[g].name) != 0)
			continue;
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 2;
		}
		if (pid == 0) {
			snprintf(group_name, sizeof(group_name), "%s", groups[g].name);
			next_port = port_base + 2 * (int)g;
			/* librpma's own messages are not part of the answer. */
			rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_DISABLED);
			rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_DISABLED);
			alarm(30);
			groups[g].run();
			fflush(stdout);
			_exit(0);
		}
		int status = 0;
		waitpid(pid, &status, 0);
		if (WIFSIGNALED(status)) {
			printf("abuse %s: crashed by signal %d%s\n", groups[g].name, WTERMSIG(status),
			       WTERMSIG(status) == SIGALRM ? " (hung 30 s)" : "");
			failed = 1;
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			printf("abuse %s: exit %d\n", groups[g].name, WEXITSTATUS(status));
			failed = 1;
		}
	}
	printf("abuse done\n");
	return failed;
}
