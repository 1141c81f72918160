# shellcheck shell=bash
# random_quarter: the random differential's programs at about a quarter of
# their count, the sequenced chaos at a quarter of its seeds (5 of 20) and
# the two-process crash test at 4 of its 10 variants (two bugs caught, two
# fixes passing), as --test_env flags for `bazel test`. The stages that
# look at the same code paths again (asan+ubsan, shared cache) take these;
# the test command runs every program, seed and variant. Sourced by .ci/run
# and .ci/shared_cache.sh.
random_quarter=(
  --test_env=RPMA_HARNESS_RANDOM_PROGRAMS=50
  --test_env=RPMA_HARNESS_FABRIC_PROGRAMS=40
  --test_env=RPMA_HARNESS_WIDE_PROGRAMS=25
  --test_env=RPMA_HARNESS_DUPLEX_PROGRAMS=50
  --test_env=RPMA_HARNESS_RETRY_PROGRAMS=25
  --test_env=RPMA_HARNESS_DISCONNECT_PROGRAMS=15
  --test_env=RPMA_HARNESS_DESTROY_PROGRAMS=15
  --test_env=RPMA_HARNESS_RNR_PROGRAMS=15
  --test_env=RPMA_HARNESS_MTU_PROGRAMS=25
  --test_env=RPMA_HARNESS_SHARED_PROGRAMS=25
  --test_env=RPMA_HARNESS_SRQ_PROGRAMS=25
  --test_env=RPMA_HARNESS_CQ_PROGRAMS=25
  --test_env=RPMA_HARNESS_CHAOS_RUNS=5
  --test_env=RPMA_HARNESS_CRASH_VARIANTS=2
)
