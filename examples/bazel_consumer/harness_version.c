/*
 * harness_version: which rpma-harness this program was built against.
 * Prints RPMA_HARNESS_VERSION; given an expected version, exits 1 when the
 * header says otherwise (each build system passes the version it resolved:
 * Bazel from @rpma_harness//:version.bzl, CMake from find_package, Make
 * from pkg-config --modversion).
 */
#include <stdio.h>
#include <string.h>

#include "rpma_harness_version.h"

int main(int argc, char *argv[])
{
	printf("%s\n", RPMA_HARNESS_VERSION);
	if (argc > 1 && strcmp(argv[1], RPMA_HARNESS_VERSION) != 0) {
		fprintf(stderr, "built against rpma-harness %s, expected %s\n",
			RPMA_HARNESS_VERSION, argv[1]);
		return 1;
	}
	return 0;
}
