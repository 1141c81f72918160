// flight_recorder.h: when a gtest that uses the fake NIC fails, the test log
// says what the NIC did last, with no code in the test.
//
// Link //mock:gtest_main (or, with your own main(), //mock:flight_recorder)
// into the test. From then on every FakeNic the test creates is watched, and
// at a failed assertion the log shows, for each fake NIC of the test:
//   - its last N events of this test (the trace lines RPMA_HARNESS_LOG=1
//     would print: posts, executions, completions, QP state changes, CM
//     events, faults fired), N = 32 by default;
//   - the last known state of each QP;
//   - the WRs posted and not finished yet (receives with no completion, send
//     WRs not executed).
// It is built from the NIC's event stream only (FakeNic::AddObserver); the
// NIC is not called at failure time, so a failure reported while the NIC is
// busy (an EXPECT in an observer, a background progress thread) cannot
// deadlock. A NIC destroyed before the failure is still reported.
//
//   [ flight recorder ] fake NIC #1 (personality spec, seed 1): last 6 of 6
//   events in this test
//     #14 post_send qp=0x3f2a1c wr_id=1 op=RDMA_WRITE_WITH_IMM ...
//     ...
//     QP 0x3f2a1c ERR (completion error), QP 0x8e4b07 ERR (...)
//     outstanding WRs: QP 0x8e4b07 recv wr_id 9 posted at #12
//
// Off: RPMA_HARNESS_FLIGHT_RECORDER=0 in the environment, or
// --rpma_harness_flight_recorder=0 on the command line of a test using
// //mock:gtest_main (with Bazel: --test_env=... or --test_arg=...). A number
// instead keeps that many events per NIC.

#ifndef RPMA_HARNESS_MOCK_FLIGHT_RECORDER_H_
#define RPMA_HARNESS_MOCK_FLIGHT_RECORDER_H_

#include <cstddef>
#include <string>

namespace rpma_harness {

struct FlightRecorderSettings {
  bool enabled = true;
  size_t events = 32;  // per NIC, of the current test
};

// The settings from RPMA_HARNESS_FLIGHT_RECORDER, then from
// --rpma_harness_flight_recorder=VALUE in argv (which is removed from argv).
// VALUE: 0 / off / false / no disables, a positive number sets `events`,
// anything else is reported on stderr and ignored. Call before
// RUN_ALL_TESTS(); //mock:gtest_main does.
void ParseFlightRecorderFlags(int* argc, char** argv);
FlightRecorderSettings CurrentFlightRecorderSettings();

// What would be printed now for the current test: every fake NIC's events
// since the test started, QP states and outstanding WRs ("" when the test
// has no fake NIC). For custom reporting; the listener prints it by itself.
std::string FlightRecorderReport();

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_FLIGHT_RECORDER_H_
