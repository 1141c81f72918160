"""The version of rpma-harness: the one place it is written.

Semantic versioning (https://semver.org). Before 1.0.0 a minor version may
change the C++ testing API or the scenario format (CHANGELOG.md says what
changed); the C API is librpma 1.3's and does not change. Read by BUILD
(the generated rpma_harness_version.h), tools/harness --version and
tools/install/install.sh (pkg-config and CMake package version).
"""

RPMA_HARNESS_VERSION = "0.9.0"
