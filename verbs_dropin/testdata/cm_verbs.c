/*
 * cm_verbs.c: an ordinary librdmacm program that runs the connection
 * manager through what a program meets -- binding, listening, resolving
 * and connecting in the wrong order or twice, private data past its
 * limits, a connect nobody listens for, a reject, the parameters each
 * side's events carry, the QP rdma_cm connects, and a disconnect from
 * each side -- and prints, one line a case, what each call answered and
 * which events each side got.
 *
 * The same binary runs on rxe (tools/softroce_vm/ci.sh, the address in
 * RPMA_HARNESS_VM_ADDR) and on the drop-in libibverbs.so.1 and
 * librdmacm.so.1 with the rxe personality (//verbs_dropin:dropin_verbs_test,
 * 127.0.0.1); verbs_dropin/testdata/cm_verbs.rxe.txt is what rxe printed,
 * and both must print it again.
 *
 *   cm_verbs
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>

#include "verbs_program.h"

static const char *addr;
static int next_port = 47100;

/* errno's name, for the errnos a connection manager answers. */
static const char *cm_errno_name(int e) {
	switch (e) {
	case EADDRINUSE: return "EADDRINUSE";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case ENODEV: return "ENODEV";
	case ENETUNREACH: return "ENETUNREACH";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EISCONN: return "EISCONN";
	case ENOTCONN: return "ENOTCONN";
	case EEXIST: return "EEXIST";
	case EALREADY: return "EALREADY";
	default: return errno_name(e);
	}
}

/* A librdmacm call's result: 0, or -1 with errno. */
static void said_cm(const char *name, int rc) {
	printf("%s %s\n", name, rc == 0 ? "ok" : cm_errno_name(errno));
}

static void sockaddr_of(struct sockaddr_in *sin, const char *host, int port) {
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sin->sin_addr);
}

/*
 * The next event on `ch` within `seconds`: its name and status on a line
 * of `who`, or "none". The event is kept in *out (acked by the caller)
 * when `out` is not NULL, else acked here.
 */
static int said_event(const char *who, struct rdma_event_channel *ch,
		      double seconds, struct rdma_cm_event **out) {
	struct pollfd p = {ch->fd, POLLIN, 0};
	int ms = (int)(seconds * 1000);
	if (poll(&p, 1, ms) <= 0) {
		printf("%s event none\n", who);
		return -1;
	}
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e)) {
		printf("%s event get-failed %s\n", who, cm_errno_name(errno));
		return -1;
	}
	printf("%s event %s status %d\n", who, rdma_event_str(e->event),
	       e->status);
	int type = e->event;
	if (out != NULL)
		*out = e;
	else
		rdma_ack_cm_event(e);
	return type;
}

/* The connection parameters an event carries. */
static void said_conn_param(const char *who, const struct rdma_cm_event *e) {
	const struct rdma_conn_param *c = &e->param.conn;
	printf("%s param responder_resources %u initiator_depth %u "
	       "flow_control %u retry_count %u rnr_retry_count %u srq %u "
	       "private_data_len %u\n",
	       who, c->responder_resources, c->initiator_depth,
	       c->flow_control, c->retry_count, c->rnr_retry_count, c->srq,
	       c->private_data_len);
}

static struct ibv_qp_init_attr qp_attr(void) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return a;
}

/* The attributes rdma_cm gave a QP it connected. */
static void said_cm_qp(const char *who, struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
					 IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
					 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					 IBV_QP_MAX_QP_RD_ATOMIC |
					 IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER,
			 &i)) {
		printf("%s qp query-failed\n", who);
		return;
	}
	printf("%s qp state %d access %#x mtu %d timeout %u retry %u "
	       "rnr_retry %u rd_atomic %u dest_rd_atomic %u min_rnr %u\n",
	       who, (int)a.qp_state, a.qp_access_flags, (int)a.path_mtu,
	       a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic,
	       a.max_dest_rd_atomic, a.min_rnr_timer);
}

/* Whether each QP rdma_cm connected expects the PSNs the other sends
 * from: the IB CM's REQ and REP carry each side's starting PSN (random),
 * which become the sender's sq_psn and the receiver's rq_psn. */
static void said_psn_pairing(const char *name, struct ibv_qp *client,
			     struct ibv_qp *server) {
	struct ibv_qp_attr a, b;
	struct ibv_qp_init_attr i;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (ibv_query_qp(client, &a, IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &i) ||
	    ibv_query_qp(server, &b, IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &i)) {
		printf("%s psns query-failed\n", name);
		return;
	}
	printf("%s psns client_to_server %s server_to_client %s\n", name,
	       a.sq_psn == b.rq_psn ? "paired" : "unpaired",
	       b.sq_psn == a.rq_psn ? "paired" : "unpaired");
}

/* Ids made out of order or twice, on one channel. */
static void order_cases(void) {
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a = NULL, *b = NULL;
	if (ch == NULL || rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) ||
	    rdma_create_id(ch, &b, NULL, RDMA_PS_TCP)) {
		printf("order setup-failed\n");
		return;
	}
	struct sockaddr_in sin;
	const int port = next_port++;
	sockaddr_of(&sin, addr, port);
	struct rdma_cm_event *e;
	said_cm("get_event_nonblocking_empty",
		(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK),
		 rdma_get_cm_event(ch, &e)));
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK);
	said_cm("bind", rdma_bind_addr(a, (struct sockaddr *)&sin));
	said_cm("bind_again", rdma_bind_addr(a, (struct sockaddr *)&sin));
	said_cm("listen", rdma_listen(a, 8));
	said_cm("listen_again", rdma_listen(a, 8));
	said_cm("bind_port_in_use", rdma_bind_addr(b, (struct sockaddr *)&sin));
	/* (Calls on an id with no device yet -- resolve_route, connect,
	 * accept, disconnect -- crash inside librdmacm: they are made on an
	 * id whose address is resolved.) */
	said_cm("resolve_addr", rdma_resolve_addr(b, NULL, (struct sockaddr *)&sin,
						  2000));
	said_event("order", ch, 5, NULL);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	said_cm("connect_before_route", rdma_connect(b, &cp));
	said_cm("accept_not_a_request", rdma_accept(b, &cp));
	said_cm("accept_on_listener", rdma_accept(a, &cp));
	said_cm("disconnect_unconnected", rdma_disconnect(b));
	said_cm("listen_resolved", rdma_listen(b, 8));
	/* (A PD of the program's own ibv_open_device context is refused by
	 * rdma_create_qp on rxe -- librdmacm opens a context of its own --
	 * and taken by the drop-in, whose device has one context:
	 * docs/drop-in-libraries.md.) */
	said_cm("get_src_port_listening",
		rdma_get_src_port(a) == htons((uint16_t)port) ? 0 : (errno = EINVAL, -1));
	rdma_destroy_id(b);
	rdma_destroy_id(a);
	rdma_destroy_event_channel(ch);
}

/*
 * A client toward `port` on its own channel, resolved (address, route);
 * NULL after saying why.
 */
static struct ibv_pd *cm_pd; /* on librdmacm's context of the device */

static struct rdma_cm_id *resolved_client(const char *name,
					  struct rdma_event_channel *ch,
					  int port, int with_qp) {
	struct rdma_cm_id *c = NULL;
	struct sockaddr_in dst;
	char who[96];
	sockaddr_of(&dst, addr, port);
	if (rdma_create_id(ch, &c, NULL, RDMA_PS_TCP)) {
		printf("%s create_id %s\n", name, cm_errno_name(errno));
		return NULL;
	}
	snprintf(who, sizeof(who), "%s client", name);
	if (rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) ||
	    said_event(who, ch, 5, NULL) != RDMA_CM_EVENT_ADDR_RESOLVED ||
	    rdma_resolve_route(c, 2000) ||
	    said_event(who, ch, 5, NULL) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
		printf("%s resolve failed\n", name);
		rdma_destroy_id(c);
		return NULL;
	}
	if (cm_pd == NULL) cm_pd = ibv_alloc_pd(c->verbs);
	struct ibv_qp_init_attr qa = qp_attr();
	if (with_qp && rdma_create_qp(c, cm_pd, &qa)) {
		printf("%s create_qp %s\n", name, cm_errno_name(errno));
		rdma_destroy_id(c);
		return NULL;
	}
	return c;
}

/* A connect nobody listens for; a connect with too much private data. */
static void refused_cases(void) {
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (ch == NULL) return;
	struct rdma_cm_id *c =
		resolved_client("nobody_listens", ch, next_port++, 1);
	if (c == NULL) return;
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.retry_count = 1;
	char data[64];
	memset(data, 0x33, sizeof(data));
	cp.private_data = data;
	cp.private_data_len = 57;
	said_cm("connect_private_data_57", rdma_connect(c, &cp));
	cp.private_data_len = 56;
	said_cm("connect_nobody_listens", rdma_connect(c, &cp));
	struct rdma_cm_event *e = NULL;
	if (said_event("nobody_listens client", ch, 10, &e) >= 0) {
		printf("nobody_listens client private_data_len %u\n",
		       e->param.conn.private_data_len);
		rdma_ack_cm_event(e);
	}
	said_cm("disconnect_refused", rdma_disconnect(c));
	said_cm_qp("nobody_listens client", c->qp);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_event_channel(ch);
}

/*
 * A listener and a client, each on its own channel: the server rejects
 * the first connect with private data, accepts the second, then each
 * side disconnects in turn; what each side's events said.
 */
static void connection_cases(void) {
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *listener = NULL;
	struct sockaddr_in sin;
	const int port = next_port++;
	sockaddr_of(&sin, addr, port);
	if (sch == NULL || cch == NULL ||
	    rdma_create_id(sch, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, (struct sockaddr *)&sin) ||
	    rdma_listen(listener, 8)) {
		printf("connection setup-failed\n");
		return;
	}
	char data[200];
	memset(data, 0x44, sizeof(data));

	/* 1: rejected with private data. */
	struct rdma_cm_id *c = resolved_client("reject", cch, port, 1);
	if (c == NULL) return;
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = 200;
	said_cm("reject connect_responder_resources_200", rdma_connect(c, &cp));
	cp.responder_resources = 0;
	cp.initiator_depth = 200;
	said_cm("reject connect_initiator_depth_200", rdma_connect(c, &cp));
	cp.initiator_depth = 1;
	cp.retry_count = 9;
	cp.rnr_retry_count = 9;
	cp.private_data = data;
	cp.private_data_len = 10;
	said_cm("reject connect", rdma_connect(c, &cp));
	struct rdma_cm_event *req = NULL;
	if (said_event("reject server", sch, 5, &req) !=
	    RDMA_CM_EVENT_CONNECT_REQUEST) {
		printf("reject no-request\n");
		return;
	}
	said_conn_param("reject server", req);
	struct rdma_cm_id *sid = req->id;
	rdma_ack_cm_event(req);
	said_cm("reject reject_private_data_149", rdma_reject(sid, data, 149));
	said_cm("reject reject", rdma_reject(sid, data, 20));
	struct rdma_cm_event *e = NULL;
	if (said_event("reject client", cch, 5, &e) >= 0) {
		printf("reject client private_data_len %u\n",
		       e->param.conn.private_data_len);
		rdma_ack_cm_event(e);
	}
	said_cm_qp("reject client", c->qp);
	rdma_destroy_id(sid);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	/* 2: an accept with too much private data, then the accept again. */
	c = resolved_client("bad_accept", cch, port, 1);
	if (c == NULL) return;
	memset(&cp, 0, sizeof(cp));
	said_cm("bad_accept connect", rdma_connect(c, &cp));
	if (said_event("bad_accept server", sch, 5, &req) !=
	    RDMA_CM_EVENT_CONNECT_REQUEST) {
		printf("bad_accept no-request\n");
		return;
	}
	sid = req->id;
	rdma_ack_cm_event(req);
	struct ibv_qp_init_attr qa = qp_attr();
	said_cm("bad_accept server create_qp", rdma_create_qp(sid, cm_pd, &qa));
	cp.private_data = data;
	cp.private_data_len = 197;
	said_cm("bad_accept accept_private_data_197", rdma_accept(sid, &cp));
	cp.private_data_len = 5;
	said_cm("bad_accept accept", rdma_accept(sid, &cp));
	said_event("bad_accept client", cch, 5, NULL);
	said_event("bad_accept server", sch, 1, NULL);
	said_cm_qp("bad_accept client", c->qp);
	said_cm_qp("bad_accept server", sid->qp);
	rdma_destroy_qp(sid);
	rdma_destroy_id(sid);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);

	/* 3: accepted; the client disconnects first, then the server. */
	for (int round = 0; round < 2; ++round) {
		const char *name = round == 0 ? "client_disconnects"
					      : "server_disconnects";
		char who[96], what[96];
		c = resolved_client(name, cch, port, 1);
		if (c == NULL) return;
		qa = qp_attr();
		snprintf(what, sizeof(what), "%s client create_qp_again", name);
		said_cm(what, rdma_create_qp(c, cm_pd, &qa));
		memset(&cp, 0, sizeof(cp));
		cp.responder_resources = 3;
		cp.initiator_depth = 2;
		cp.retry_count = 5;
		cp.rnr_retry_count = 6;
		cp.private_data = data;
		cp.private_data_len = 7;
		snprintf(what, sizeof(what), "%s connect", name);
		said_cm(what, rdma_connect(c, &cp));
		snprintf(who, sizeof(who), "%s server", name);
		if (said_event(who, sch, 5, &req) != RDMA_CM_EVENT_CONNECT_REQUEST) {
			printf("%s no-request\n", name);
			return;
		}
		said_conn_param(who, req);
		sid = req->id;
		rdma_ack_cm_event(req);
		qa = qp_attr();
		snprintf(what, sizeof(what), "%s server create_qp", name);
		said_cm(what, rdma_create_qp(sid, cm_pd, &qa));
		memset(&cp, 0, sizeof(cp));
		cp.responder_resources = 1;
		cp.initiator_depth = 4;
		cp.rnr_retry_count = 2;
		cp.private_data = data;
		cp.private_data_len = 5;
		snprintf(what, sizeof(what), "%s accept", name);
		said_cm(what, rdma_accept(sid, &cp));
		snprintf(what, sizeof(what), "%s accept_again", name);
		said_cm(what, rdma_accept(sid, &cp));
		snprintf(who, sizeof(who), "%s client", name);
		if (said_event(who, cch, 5, &e) >= 0) {
			said_conn_param(who, e);
			rdma_ack_cm_event(e);
		}
		snprintf(who, sizeof(who), "%s server", name);
		said_event(who, sch, 5, NULL);
		snprintf(who, sizeof(who), "%s client", name);
		said_cm_qp(who, c->qp);
		snprintf(who, sizeof(who), "%s server", name);
		said_cm_qp(who, sid->qp);
		printf("%s ports_ok %d\n", name,
		       rdma_get_src_port(c) != 0 &&
			       rdma_get_dst_port(c) == htons((uint16_t)port) &&
			       rdma_get_src_port(sid) == htons((uint16_t)port));
		said_psn_pairing(name, c->qp, sid->qp);

		struct rdma_cm_id *first = round == 0 ? c : sid;
		struct rdma_cm_id *second = round == 0 ? sid : c;
		struct rdma_event_channel *first_ch = round == 0 ? cch : sch;
		struct rdma_event_channel *second_ch = round == 0 ? sch : cch;
		const char *first_name = round == 0 ? "client" : "server";
		const char *second_name = round == 0 ? "server" : "client";
		snprintf(what, sizeof(what), "%s %s disconnect", name, first_name);
		said_cm(what, rdma_disconnect(first));
		snprintf(who, sizeof(who), "%s %s", name, second_name);
		said_event(who, second_ch, 5, NULL);
		said_cm_qp(who, second->qp);
		snprintf(who, sizeof(who), "%s %s", name, first_name);
		said_cm_qp(who, first->qp);
		snprintf(what, sizeof(what), "%s %s disconnect", name, second_name);
		said_cm(what, rdma_disconnect(second));
		snprintf(who, sizeof(who), "%s %s", name, first_name);
		said_event(who, first_ch, 5, NULL);
		snprintf(what, sizeof(what), "%s %s disconnect_again", name,
			 first_name);
		said_cm(what, rdma_disconnect(first));
		/* TIMEWAIT_EXIT, where the CM sends it: within 3 s. */
		snprintf(who, sizeof(who), "%s %s", name, first_name);
		said_event(who, first_ch, 3, NULL);
		snprintf(who, sizeof(who), "%s %s", name, second_name);
		said_event(who, second_ch, 3, NULL);
		rdma_destroy_qp(c);
		rdma_destroy_qp(sid);
		rdma_destroy_id(sid);
		rdma_destroy_id(c);
	}

	/* 4: a connect with no QP on the id (conn_param carries a QP number). */
	c = resolved_client("no_qp", cch, port, 0);
	if (c == NULL) return;
	memset(&cp, 0, sizeof(cp));
	cp.qp_num = 0x1234;
	said_cm("no_qp connect", rdma_connect(c, &cp));
	if (said_event("no_qp server", sch, 5, &req) ==
	    RDMA_CM_EVENT_CONNECT_REQUEST) {
		printf("no_qp server qp_num_ok %d\n",
		       req->param.conn.qp_num == 0x1234);
		sid = req->id;
		rdma_ack_cm_event(req);
		said_cm("no_qp reject", rdma_reject(sid, NULL, 0));
		said_event("no_qp client", cch, 5, NULL);
		rdma_destroy_id(sid);
	}
	rdma_destroy_id(c);
	rdma_destroy_id(listener);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

int main(int argc, char *argv[]) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	addr = getenv("RPMA_HARNESS_VM_ADDR");
	if (addr == NULL) addr = "127.0.0.1";
	if (open_device("cm_verbs", argc, argv)) return 1;
	order_cases();
	refused_cases();
	connection_cases();
	if (cm_pd != NULL) ibv_dealloc_pd(cm_pd);
	ibv_close_device(ctx);
	ibv_free_device_list(device_list);
	return 0;
}
