// fuzz_targets.h: the fuzz targets' entry points. Each takes one input and
// returns 0; a broken invariant aborts. tools/fuzz/run.sh builds each with
// libFuzzer (clang, -fsanitize=fuzzer,address,undefined); the corpus
// regression test (fuzz_corpus_test.cc) replays the checked-in corpus through
// the same functions under Bazel's gcc build.

#ifndef RPMA_HARNESS_TOOLS_FUZZ_FUZZ_TARGETS_H_
#define RPMA_HARNESS_TOOLS_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>

namespace rpma_harness {

// Random WR chains against random MR layouts and QP states on the fake NIC.
int FuzzFakeNicWr(const uint8_t* data, size_t size);
// MR descriptor decoding: DecodeMrDescriptor and
// rpma_mr_remote_from_descriptor, and a write through a decoded descriptor.
int FuzzMrDescriptor(const uint8_t* data, size_t size);
// Random librpma 1.3 call sequences (read, flush, atomic write, SRQs, peer
// configurations, completion channels, MR advice, logging, the getters,
// requests deleted and rejected: every function of librpma.h) on a
// connected rpma pair.
int FuzzRpmaApi(const uint8_t* data, size_t size);
// Arbitrary text through the scenario parser (tools/scenario).
int FuzzScenarioParser(const uint8_t* data, size_t size);
// fault_file_fuzz.cc: text through ParseFaultFileText (RPMA_HARNESS_FAULTS).
int FuzzFaultFile(const uint8_t* data, size_t size);
int FuzzCrashJournal(const uint8_t* data, size_t size);
// replay_trace_fuzz.cc: bytes as a `--replay` recording (FirstDivergence).
int FuzzReplayTrace(const uint8_t* data, size_t size);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_FUZZ_FUZZ_TARGETS_H_
