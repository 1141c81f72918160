// expect_crash_consistent.h: the crash checker as one gtest assertion.
//
//   ExpectCrashConsistent<LogState>(
//       pair.nic(),
//       [&](crash::PersistenceRecorder& recorder) {
//         recorder.MarkPersistent(pair.server_buffer(), 4096, "log");
//         ... the program: writes, flushes, polls, recorder.Promise(...) ...
//       },
//       [](crash::Image& image) { return RecoverLog(image); },  // -> LogState
//       [](const LogState& state, const crash::Image& image) {
//         return state.ok ? "" : "torn record";  // "" when consistent
//       });
//
// On a violation the test fails with the report: the crash point, the
// shrunk image, what recovery said, the replay line.
#ifndef RPMA_HARNESS_CRASH_EXPECT_CRASH_CONSISTENT_H_
#define RPMA_HARNESS_CRASH_EXPECT_CRASH_CONSISTENT_H_

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "crash/crash_check.h"
#include "nic/fake_nic.h"

namespace rpma_harness {
namespace crash {

// Records `run` on `nic`, then checks every crash image with `recover` and
// `invariant`; returns the report (already asserted on).
template <class State>
CrashReport ExpectCrashConsistent(
    FakeNic& nic, const std::function<void(PersistenceRecorder&)>& run,
    const std::function<State(Image&)>& recover,
    const std::function<std::string(const State&, const Image&)>& invariant,
    CrashCheckOptions options = {}) {
  PersistenceRecorder recorder(nic, std::move(options));
  run(recorder);
  CrashReport report = recorder.Check<State>(recover, invariant);
  EXPECT_TRUE(report.ok()) << report;
  return report;
}

}  // namespace crash
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_CRASH_EXPECT_CRASH_CONSISTENT_H_
