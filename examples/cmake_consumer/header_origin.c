/* With Debian's librpma-dev installed, <librpma.h> is still the harness's. */
#include <librpma.h>
#include <stdio.h>

#include "rpma/librpma_check.h"

int main(void)
{
	printf("<librpma.h> is rpma-harness's (RPMA_HARNESS_LIBRPMA_H %d)\n",
	       RPMA_HARNESS_LIBRPMA_H);
	return 0;
}
