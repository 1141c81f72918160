// main() for gtests on the fake NIC: GoogleMock's, plus the flight recorder
// (mock/flight_recorder.h) and its --rpma_harness_flight_recorder= flag.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mock/flight_recorder.h"

int main(int argc, char** argv) {
  rpma_harness::ParseFlightRecorderFlags(&argc, argv);
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}
