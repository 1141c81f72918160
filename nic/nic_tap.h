// nic_tap.h: the one way anything watches a fake NIC.
//
// A NicTap is registered on one FakeNic (FakeNic::AddTap) and is told, with
// the NIC's mutex held and in the NIC's own order, what it asked for:
//
//   - kEvents: every FakeNicEvent record (post, execute, packet, completion,
//     CM, fault, ...), in sequence order. The trace file, the
//     RPMA_HARNESS_LOG log, the flight recorder, the scenario runner's
//     trace, the usage checker's report lines, the crash journal and the
//     persistence model all take the records this way.
//   - kSourceReads: the requester is about to read bytes of a send WR's
//     gather list (the moment the source goes on the wire; the checker's
//     source-changed finding). Inline WRs never read: their bytes were
//     copied at post.
//   - kNicWrites: the NIC is about to write a range of the program's memory
//     (a SEND landing in a receive buffer, a peer's WRITE, READ data, an
//     atomic, a piece of a deferred landing, a far process's request): the
//     checker's recv-written finding tells the NIC's writes from the
//     program's.
//
// A tap observes; it never changes what the NIC does. With no tap of a kind
// registered, the data path pays one test of an empty vector for that kind,
// so the path nobody watches is the normal path, not a copy of it.
//
// REQUIRES: a tap does not call back into its FakeNic (the NIC's mutex is
// held) and outlives its registration (RemoveTap before it dies).
//
//   class Counter : public NicTap {
//     void OnEvent(const FakeNicEvent& e) override { ++seen; }
//     int seen = 0;
//   };
//   Counter counter;
//   int handle = nic.AddTap(&counter, NicTap::kEvents);
//   ...
//   nic.RemoveTap(handle);

#ifndef RPMA_HARNESS_NIC_NIC_TAP_H_
#define RPMA_HARNESS_NIC_NIC_TAP_H_

#include <cstddef>
#include <cstdint>

namespace rpma_harness {

struct FakeNicEvent;

// The requester reads bytes [offset, offset + length) of a send WR's gather
// list: one packet, several packets read in one copy, a whole SEND, or the
// payload a cross-process request carries.
struct NicSourceRead {
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
  int opcode = 0;
  uint64_t first_addr = 0;    // the first SGE's address
  uint64_t total_length = 0;  // the WR's whole length
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t mtu = 0;  // the path MTU the message is cut at
};

class NicTap {
 public:
  // What a tap is told (a bit mask for FakeNic::AddTap).
  enum : unsigned {
    kEvents = 1u << 0,
    kSourceReads = 1u << 1,
    kNicWrites = 1u << 2,
  };

  virtual ~NicTap() = default;

  virtual void OnEvent(const FakeNicEvent& event) { (void)event; }
  virtual void OnSourceRead(const NicSourceRead& read) { (void)read; }
  // The NIC writes [dst, dst + n) next (n > 0).
  virtual void OnNicWrite(uintptr_t dst, size_t n) {
    (void)dst;
    (void)n;
  }
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_NIC_TAP_H_
