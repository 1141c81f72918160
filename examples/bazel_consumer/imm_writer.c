#include "imm_writer.h"

int imm_writer_write(struct rpma_conn *conn, struct rpma_peer *peer,
		     struct rpma_mr_remote *dst, size_t dst_offset,
		     const void *src, size_t len, uint32_t imm,
		     enum ibv_wc_status *status)
{
	struct rpma_mr_local *src_mr = NULL;
	struct rpma_cq *cq = NULL;
	struct ibv_wc wc;
	int ret = rpma_mr_reg(peer, (void *)src, len, RPMA_MR_USAGE_WRITE_SRC,
			      &src_mr);
	if (ret)
		return ret;
	ret = rpma_write_with_imm(conn, dst, dst_offset, src_mr, 0, len,
				  RPMA_F_COMPLETION_ALWAYS, imm, NULL);
	if (!ret)
		ret = rpma_conn_get_cq(conn, &cq);
	if (!ret)
		ret = rpma_cq_wait(cq);
	if (!ret)
		ret = rpma_cq_get_wc(cq, 1, &wc, NULL);
	if (!ret && wc.status != IBV_WC_SUCCESS) {
		if (status)
			*status = wc.status;
		ret = IMM_WRITER_E_COMPLETION;
	}
	int dereg = rpma_mr_dereg(&src_mr);
	return ret ? ret : dereg;
}
