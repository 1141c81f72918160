// harness.h: the C++ side of rpma-harness's librpma: which NIC the rpma_*
// functions talk to, and where their log goes.
//
// Programs need no change to run on a different NIC: the backend is chosen
// once per process, on first use, from the environment:
//   RPMA_HARNESS_BACKEND unset or "fake"  -> the fake NIC (nic/fake_nic.h)
//                                            progressing on its own thread;
//   RPMA_HARNESS_BACKEND="rdma-core"      -> libibverbs + librdmacm.
// Tests instead install the instance they want (a configured FakeNic, a
// MockVerbsBackend) before they create any rpma object:
//
//   auto nic = std::make_shared<rpma_harness::FakeNic>(config);
//   rpma_harness::ScopedBackend use(nic);
//   ... rpma_* calls now reach `nic` ...
//
// Every rpma object keeps the backend it was created on alive, so replacing
// the backend later does not pull the NIC from under existing objects.

#ifndef RPMA_HARNESS_RPMA_HARNESS_H_
#define RPMA_HARNESS_RPMA_HARNESS_H_

#include <functional>
#include <memory>
#include <string>

#include "rpma/librpma_check.h"  // <librpma.h> must be the harness's
#include "rpma/persistence.h"     // PersistenceNote, SetPersistenceListener
#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

// The backend new rpma objects are created on. Picks the default from the
// environment on first call; never returns nullptr (an unknown
// RPMA_HARNESS_BACKEND value yields a backend whose every call fails with
// ENOSYS and a log line naming the bad value).
std::shared_ptr<VerbsBackend> CurrentBackend();

// Makes `backend` the one new rpma objects are created on; nullptr returns to
// the environment's choice. Thread-safe.
void InstallBackend(std::shared_ptr<VerbsBackend> backend);

// Installs a backend for the lifetime of the object, then restores the
// previous one.
class ScopedBackend {
 public:
  explicit ScopedBackend(std::shared_ptr<VerbsBackend> backend);
  ~ScopedBackend();
  ScopedBackend(const ScopedBackend&) = delete;
  ScopedBackend& operator=(const ScopedBackend&) = delete;

 private:
  std::shared_ptr<VerbsBackend> previous_;
};

// Where the rpma layer reports what went wrong beyond a return code (the
// provider's errno of a failed post, an unexpected CM event, ...). While a
// sink is installed it receives every message, whatever the thresholds of
// rpma_log_set_threshold(3); without one (nullptr restores that) messages go
// through librpma's logging: rpma_log_set_function(3)'s function, by default
// syslog plus stderr per the two thresholds (rpma/log.cc).
using LogSink = std::function<void(const std::string& message)>;
void SetLogSink(LogSink sink);


}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_HARNESS_H_
