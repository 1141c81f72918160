/*
 * verbs_program.h: what the recorded verbs test programs (hostile_verbs.c,
 * uc_verbs.c, ex_verbs.c, async_events.c) share -- the device they open,
 * errno names for the lines they print, and the QP state moves of two QPs
 * of one device connected to each other as ibv_rc_pingpong connects them.
 * Each program stays one standalone binary that runs unchanged on rxe and
 * on the drop-in libibverbs.so.1, so this is a header of static inline
 * functions.
 */
#ifndef VERBS_DROPIN_TESTDATA_VERBS_PROGRAM_H_
#define VERBS_DROPIN_TESTDATA_VERBS_PROGRAM_H_

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The device, its port 1 and (on RoCE) GID 0, which loopback QPs name. */
static struct ibv_device **device_list;
static struct ibv_context *ctx;
static struct ibv_port_attr port;
static union ibv_gid gid;
static int use_gid;

/* What the RC QPs take at RTR and RTS beyond what UC takes too. */
#define RC_RTR_MASK (IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RC_RTS_MASK                                              \
	(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |   \
	 IBV_QP_MAX_QP_RD_ATOMIC)

static inline const char *errno_name(int e) {
	switch (e) {
	case 0: return "ok";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	case ENOSPC: return "ENOSPC";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOSYS: return "ENOSYS";
	case ENOENT: return "ENOENT";
	case EAGAIN: return "EAGAIN";
	default: return "other";
	}
}

static inline double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * How long a program watches a CQ for the completions a step may still
 * make: `seconds` -- the window the rxe recordings were made with -- times
 * VERBS_PROGRAM_WAIT_SCALE when that is set (a factor in (0, 1]). The
 * fake's completions come within microseconds of the post, so
 * dropin_verbs_test watches a quarter of each window there; a completion
 * the fake made too late for it would show as a line rxe printed and the
 * fake did not.
 */
static inline double watch_seconds(double seconds) {
	const char *scale = getenv("VERBS_PROGRAM_WAIT_SCALE");
	if (scale != NULL) {
		double f = atof(scale);
		if (f > 0 && f <= 1) return seconds * f;
	}
	return seconds;
}

/*
 * Between two empty polls of a watch: 100 us, so that a program watching
 * a CQ for a second does not hold a core its NIC (rxe's tasklets, the
 * fake's progress thread) or a test beside it needs.
 */
static inline void pause_between_polls(void) {
	struct timespec ts = {0, 100 * 1000};
	nanosleep(&ts, NULL);
}

/* A call returning an errno, or a negative one (ibv_poll_cq). */
static inline void said_rc(const char *name, int rc) {
	printf("%s %s\n", name, errno_name(rc < 0 ? -rc : rc));
}

/*
 * Opens the first device, or the one an argument names, and reads port 1
 * and, on an Ethernet link layer, GID 0. 0, or 1 after saying why.
 */
static inline int open_device(const char *program, int argc, char *argv[]) {
	int num = 0;
	device_list = ibv_get_device_list(&num);
	if (device_list == NULL || num == 0) {
		fprintf(stderr, "%s: no RDMA device\n", program);
		return 1;
	}
	struct ibv_device *dev = device_list[0];
	for (int a = 1; a < argc; ++a)
		for (int i = 0; i < num; ++i)
			if (strcmp(ibv_get_device_name(device_list[i]),
				   argv[a]) == 0)
				dev = device_list[i];
	ctx = ibv_open_device(dev);
	if (ctx == NULL || ibv_query_port(ctx, 1, &port) != 0) {
		fprintf(stderr, "%s: cannot open the device\n", program);
		return 1;
	}
	use_gid = port.link_layer == IBV_LINK_LAYER_ETHERNET;
	if (use_gid && ibv_query_gid(ctx, 1, 0, &gid) != 0) {
		fprintf(stderr, "%s: no GID 0\n", program);
		return 1;
	}
	return 0;
}

static inline int to_init(struct ibv_qp *qp, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* The attributes of RTR toward `dest` on this device's port, expecting
 * PSN 0 (RC's as well: max_dest_rd_atomic 1, min_rnr_timer 12). */
static inline void rtr_attr(struct ibv_qp_attr *a, uint32_t dest) {
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = dest;
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = 12;
	a->ah_attr.dlid = port.lid;
	a->ah_attr.port_num = 1;
	if (use_gid) {
		a->ah_attr.is_global = 1;
		a->ah_attr.grh.dgid = gid;
		a->ah_attr.grh.hop_limit = 1;
	}
}

/* RTR toward `dest` on this device's port, expecting PSN `rq_psn`;
 * `extra`: RC_RTR_MASK or more. */
static inline int to_rtr_psn(struct ibv_qp *qp, uint32_t dest, uint32_t rq_psn,
			     int extra) {
	struct ibv_qp_attr a;
	rtr_attr(&a, dest);
	a.rq_psn = rq_psn;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
				     IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | extra);
}

/* RTR expecting PSN 0. */
static inline int to_rtr(struct ibv_qp *qp, uint32_t dest, int extra) {
	return to_rtr_psn(qp, dest, 0, extra);
}

/* RTS; `extra`: RC_RTS_MASK for an RC QP. */
static inline int to_rts(struct ibv_qp *qp, int extra) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | extra);
}

/* Two RC QPs of this device connected to each other, in RTS. */
static inline int connect_rc_pair(struct ibv_qp *a, struct ibv_qp *b, int access) {
	return to_init(a, access) || to_init(b, access) ||
	       to_rtr(a, b->qp_num, RC_RTR_MASK) ||
	       to_rtr(b, a->qp_num, RC_RTR_MASK) ||
	       to_rts(a, RC_RTS_MASK) || to_rts(b, RC_RTS_MASK);
}

#endif /* VERBS_DROPIN_TESTDATA_VERBS_PROGRAM_H_ */
