// persistence.h: what the rpma layer tells a persistence recorder (the
// crash checker, crash/crash_check.h, and the per-process crash journal,
// rpma/crash_journal.h). Its own small target (//rpma:persistence), so that
// the default backend's composition (//rpma:default_backend), which starts
// the journal, and the librpma API (//rpma), which sends the notes, both
// depend on it and not on each other. harness.h includes it.

#ifndef RPMA_HARNESS_RPMA_PERSISTENCE_H_
#define RPMA_HARNESS_RPMA_PERSISTENCE_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <string>

namespace rpma_harness {

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

namespace internal {

// Whether a listener is set (one relaxed load: the common case, nobody
// recording, costs no lock), and the note to give it (under the listener's
// mutex, on the calling thread).
bool PersistenceListened();
void NotePersistence(const PersistenceNote& note);

}  // namespace internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_PERSISTENCE_H_
