// fake_nic_environment.h: the FakeNicConfig a process's own NIC gets from
// its environment (RPMA_HARNESS_FABRIC, _FABRIC_SEQUENCE, _TRACE,
// _PROCESS_NAME, _PERSONALITY). Shared by every front end that makes the
// process's default NIC: the librpma API (rpma/default_backend.cc) and the
// drop-in libibverbs (verbs_dropin/).
//
// Example:
//   std::string error;
//   FakeNicConfig config;
//   if (!FakeNicConfigFromEnvironment(&config, &error)) Fail(error);
//   auto nic = std::make_shared<FakeNic>(std::move(config));

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_ENVIRONMENT_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_ENVIRONMENT_H_

#include <string>

#include "nic/fake_nic.h"

namespace rpma_harness {

// Fills *config from the environment. False, with *error saying which
// variable and why, when a value cannot be used (the caller must not run
// on a NIC other than the one asked for).
bool FakeNicConfigFromEnvironment(FakeNicConfig* config, std::string* error);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_ENVIRONMENT_H_
