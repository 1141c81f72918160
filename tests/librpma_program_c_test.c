/*
 * A librpma program in plain C, written only against librpma's documented
 * API: it must compile unchanged against //rpma (as C, not C++) and behave as
 * librpma documents for the calls that need no NIC.
 */

#include <librpma.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK_EQ(actual, expected)                                          \
	do {                                                                \
		long a_ = (long)(actual), e_ = (long)(expected);            \
		if (a_ != e_) {                                             \
			fprintf(stderr, "%s:%d: %s == %ld, expected %ld\n", \
				__FILE__, __LINE__, #actual, a_, e_);       \
			failures++;                                         \
		}                                                           \
	} while (0)

int main(void)
{
	struct rpma_conn_cfg *cfg = NULL;
	struct rpma_mr_remote *remote = NULL;
	struct ibv_wc wc;
	enum rpma_conn_event event = RPMA_CONN_UNDEFINED;
	uint8_t desc[21] = {0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00,
			    0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08,
			    0x13, 0x12, 0x11, 0x10, RPMA_MR_USAGE_WRITE_DST};
	size_t size = 0;
	uint32_t cq_size = 0;

	CHECK_EQ(rpma_write_with_imm(NULL, NULL, 0, NULL, 0, 0,
			RPMA_F_COMPLETION_ALWAYS, 0x1234, NULL), RPMA_E_INVAL);
	CHECK_EQ(rpma_write(NULL, NULL, 0, NULL, 0, 0,
			RPMA_F_COMPLETION_ON_ERROR, NULL), RPMA_E_INVAL);
	CHECK_EQ(rpma_recv(NULL, NULL, 0, 0, NULL), RPMA_E_INVAL);
	CHECK_EQ(rpma_cq_get_wc(NULL, 1, &wc, NULL), RPMA_E_INVAL);
	CHECK_EQ(rpma_conn_next_event(NULL, &event), RPMA_E_INVAL);

	CHECK_EQ(rpma_conn_cfg_new(&cfg), 0);
	CHECK_EQ(rpma_conn_cfg_set_cq_size(cfg, 64), 0);
	CHECK_EQ(rpma_conn_cfg_get_cq_size(cfg, &cq_size), 0);
	CHECK_EQ(cq_size, 64);
	CHECK_EQ(rpma_conn_cfg_delete(&cfg), 0);
	CHECK_EQ(cfg == NULL, 1);

	CHECK_EQ(rpma_mr_remote_from_descriptor(desc, sizeof(desc), &remote), 0);
	CHECK_EQ(rpma_mr_remote_get_size(remote, &size), 0);
	CHECK_EQ(size, 0x08090a0b0c0d0e0fULL);
	CHECK_EQ(rpma_mr_remote_delete(&remote), 0);

	CHECK_EQ(strcmp(rpma_err_2str(RPMA_E_INVAL), "Invalid argument"), 0);
	CHECK_EQ(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_ESTABLISHED),
			"Connection established"), 0);

	printf("%s\n", failures ? "FAILED" : "PASSED");
	return failures != 0;
}
