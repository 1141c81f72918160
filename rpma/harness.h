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

// What the rpma layer tells a persistence recorder (crash/crash_check.h):
// the facts about remote persistence that no verbs call carries. A flush is
// an 8-byte RDMA READ on the wire (rpma/flush.cc), so only here is its range
// and type known; a poll is when the program learns that a flush completed
// (rpma_flush(3) only initiates the flush; its completion says it is done).
struct PersistenceNote {
  enum class Kind {
    kMrReg,    // rpma_mr_reg succeeded: addr, len, usage
    kMrDereg,  // rpma_mr_dereg of [addr, addr + len)
    kFlush,    // rpma_flush about to post: qp_num, remote_addr, len, type
    kFlushNotPosted,  // that post failed: the same note, taken back
    kPolled,          // rpma_cq_get_wc returned `wc`
    kPersisted,  // rpma_harness_persisted(addr, len) (rpma_harness_crash.h)
    kPromise,    // rpma_harness_promise(text)
  };
  Kind kind = Kind::kPolled;
  uint32_t qp_num = 0;
  const void* addr = nullptr;
  uint64_t len = 0;
  int usage = 0;
  uint64_t remote_addr = 0;  // kFlush: the MR's raddr + offset
  // kFlush: where the flush's READ lands (the connection's read-after-write
  // buffer, which no other WR uses): how its execution is told from reads.
  uint64_t local_addr = 0;
  int flush_type = 0;                 // kFlush: enum rpma_flush_type
  bool direct_write_to_pmem = false;  // kFlush: the connection's peer cfg
  ibv_wc wc{};                        // kPolled
  std::string text;                   // kPromise
};
using PersistenceListener = std::function<void(const PersistenceNote& note)>;

// One listener per process (nullptr removes it); called on the thread that
// made the rpma call, before a flush is posted and after a poll returned.
void SetPersistenceListener(PersistenceListener listener);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_HARNESS_H_
