// fake_nic_lifecycle.h: one process-wide watcher told when a FakeNic is
// made and when it goes away, so test tooling (the flight recorder,
// mock/flight_recorder.h) can observe every fake NIC a test creates without
// the test handing it over.
//
// Costs one atomic load per FakeNic construction and destruction when no
// watcher is set; nothing on the data path.

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_LIFECYCLE_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_LIFECYCLE_H_

namespace rpma_harness {

class FakeNic;

class FakeNicWatcher {
 public:
  virtual ~FakeNicWatcher() = default;
  // At the end of FakeNic's constructor: `nic` is complete (AddObserver may
  // be called).
  virtual void Created(FakeNic* nic) = 0;
  // At the start of FakeNic's destructor, before anything is torn down
  // (RemoveObserver may be called).
  virtual void Destroying(FakeNic* nic) = 0;
};

// Installs `watcher` (nullptr removes it) and returns the previous one. The
// watcher must outlive every FakeNic created while it is installed.
FakeNicWatcher* SetFakeNicWatcher(FakeNicWatcher* watcher);

namespace fake_nic_internal {
void NotifyCreated(FakeNic* nic);
void NotifyDestroying(FakeNic* nic);
}  // namespace fake_nic_internal

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_LIFECYCLE_H_
