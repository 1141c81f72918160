// stress_ops.h: RPMA_HARNESS_STRESS_OPS, the size of the harness's own
// stress tests (//tests:concurrency_test, //tests:api_threads_test).
//
// Example:
//   const uint64_t ops = StressOps(10000);  // the variable, or 10000

#ifndef RPMA_HARNESS_TESTS_STRESS_OPS_H_
#define RPMA_HARNESS_TESTS_STRESS_OPS_H_

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include <gtest/gtest.h>

namespace rpma_harness {

// The operations RPMA_HARNESS_STRESS_OPS asks for, or `default_ops` when it
// is unset. A value that is not a whole number of at least 1 fails the test
// (it must not mean "0 operations, passed") and gives `default_ops`.
inline uint64_t StressOps(uint64_t default_ops) {
  const char* env = std::getenv("RPMA_HARNESS_STRESS_OPS");
  if (env == nullptr || *env == '\0') return default_ops;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(env, &end, 10);
  if (errno != 0 || *end != '\0' || n == 0 || env[0] == '-') {
    ADD_FAILURE() << "RPMA_HARNESS_STRESS_OPS='" << env
                  << "': expected a whole number of operations, at least 1";
    return default_ops;
  }
  return n;
}

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TESTS_STRESS_OPS_H_
