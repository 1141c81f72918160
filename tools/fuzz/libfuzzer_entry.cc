// libfuzzer_entry.cc: libFuzzer's entry point for one target of
// fuzz_targets.h, chosen at compile time with -DRPMA_HARNESS_FUZZ_TARGET=<fn>
// (tools/fuzz/run.sh does this).

#include <cstddef>
#include <cstdint>

#include "tools/fuzz/fuzz_targets.h"

#ifndef RPMA_HARNESS_FUZZ_TARGET
#error "define RPMA_HARNESS_FUZZ_TARGET to a function of fuzz_targets.h"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rpma_harness::RPMA_HARNESS_FUZZ_TARGET(data, size);
}
