/*
 * common.h: what the verbs write-with-imm server and client share -- a
 * plain libibverbs + librdmacm program pair, built against Debian's
 * libibverbs-dev / librdmacm-dev, that runs unchanged on a real NIC and on
 * the drop-in libraries (docs/drop-in-libraries.md).
 *
 * The server registers a buffer for remote writes and tells the client where
 * it is in its accept's private data; the client writes MESSAGE_LEN bytes
 * into it with immediate data IMM; the server's receive completes with the
 * immediate and it checks the bytes.
 */
#ifndef VERBS_WRITE_WITH_IMM_COMMON_H
#define VERBS_WRITE_WITH_IMM_COMMON_H

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MESSAGE_LEN 4096
#define IMM 0x600dcafeu

/* The server's buffer, as its accept's private data carries it. */
struct remote_buffer {
	uint64_t addr;
	uint32_t rkey;
	uint32_t length;
};

/* Byte i of the message the client writes. */
static inline char message_byte(size_t i) { return (char)(i * 31 + 7); }

/* An endpoint's QP: one send, one receive, one SGE each (the CQs and their
 * completion channels are made by rdma_create_ep, for rdma_get_*_comp). */
static inline void qp_attributes(struct ibv_qp_init_attr *attr) {
	memset(attr, 0, sizeof(*attr));
	attr->cap.max_send_wr = 1;
	attr->cap.max_recv_wr = 1;
	attr->cap.max_send_sge = 1;
	attr->cap.max_recv_sge = 1;
	attr->sq_sig_all = 1;
	attr->qp_type = IBV_QPT_RC;
}

#endif
