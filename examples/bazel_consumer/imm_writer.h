/*
 * imm_writer.h: the example program's one job: write a buffer to a peer's
 * registered memory with immediate data and wait until it is done.
 */
#ifndef BAZEL_CONSUMER_IMM_WRITER_H
#define BAZEL_CONSUMER_IMM_WRITER_H

#include <librpma.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The write completed with an error; *status says which. */
#define IMM_WRITER_E_COMPLETION (-1)

/*
 * Registers src, writes its len bytes to dst at dst_offset with the
 * immediate value imm, waits for the completion and deregisters.
 * Returns 0; an RPMA_E_* code when a call fails; or IMM_WRITER_E_COMPLETION
 * when the write completed with a status other than IBV_WC_SUCCESS, written
 * to *status (which may be NULL).
 */
int imm_writer_write(struct rpma_conn *conn, struct rpma_peer *peer,
		     struct rpma_mr_remote *dst, size_t dst_offset,
		     const void *src, size_t len, uint32_t imm,
		     enum ibv_wc_status *status);

#ifdef __cplusplus
}
#endif

#endif /* BAZEL_CONSUMER_IMM_WRITER_H */
