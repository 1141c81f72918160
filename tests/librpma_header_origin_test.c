/*
 * librpma_header_origin_test.c: a C program that includes <librpma.h> and
 * depends on //rpma gets the harness's header, even with Debian's
 * librpma-dev (/usr/include/librpma.h) installed: Bazel passes the harness's
 * directory as -isystem, searched before /usr/include. The build itself is
 * the check (rpma/librpma_check.h stops it otherwise); the run says which
 * header was used and whether Debian's is on the machine.
 */
#include <librpma.h>
#include <stdio.h>
#include <unistd.h>

#include "rpma/librpma_check.h"

int main(void) {
  /* Only the harness's header has this marker; librpma 1.3's API is
   * there too (rpma_err_2str exists in both). */
  if (RPMA_HARNESS_LIBRPMA_H != 1) return 1;
  printf("<librpma.h> is rpma-harness's (%s); /usr/include/librpma.h %s\n",
         rpma_err_2str(RPMA_E_INVAL),
         access("/usr/include/librpma.h", F_OK) == 0 ? "is installed too"
                                                     : "is absent");
  return 0;
}
