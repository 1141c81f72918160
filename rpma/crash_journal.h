// crash_journal.h: what the crash checker needs of one process's run,
// written to a file so that a run of separate processes (a server and its
// clients on one fake fabric) can be checked after it ended
// (crash/crash_check.h, PersistenceRecorder::FromJournal;
// tools/crash_check).
//
// With RPMA_HARNESS_CRASH_RECORD=DIR, the process's default fake NIC and
// its rpma layer append lines to DIR/journal.PID, each stamped with
// CLOCK_MONOTONIC nanoseconds (one clock for every process of the host, so
// the journals merge in the order things happened):
//
//   T nic exec QP OPCODE STATUS RADDR LEN LADDR  a send WR executed here
//   T nic cqe QP WR_ID OPCODE STATUS           a CQE was added
//   T nic landed QP OPCODE RADDR LEN HEX       a remote write landed here
//   T note reg ADDR LEN USAGE HEX              rpma_mr_reg (and content)
//   T note flush QP RADDR LEN TYPE DECLARED LADDR  rpma_flush posting
//   T note unflush QP RADDR LEN TYPE DECLARED LADDR  ... its post failed
//   T note polled QP WR_ID OPCODE STATUS       rpma_cq_get_wc returned it
//   T note persisted ADDR LEN HEX              rpma_harness_persisted
//   T note promise TEXT                        rpma_harness_promise
//
// Numbers are decimal, HEX is the bytes as two hex digits each.
#ifndef RPMA_HARNESS_RPMA_CRASH_JOURNAL_H_
#define RPMA_HARNESS_RPMA_CRASH_JOURNAL_H_

#include <memory>

namespace rpma_harness {

class FakeNic;

namespace internal {

// Starts the journal for `nic` when RPMA_HARNESS_CRASH_RECORD names a
// directory; a journal that cannot be opened is said once on stderr.
void StartCrashJournalFromEnvironment(const std::shared_ptr<FakeNic>& nic);

}  // namespace internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_CRASH_JOURNAL_H_
