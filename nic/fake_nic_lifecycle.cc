#include "nic/fake_nic_lifecycle.h"

#include <atomic>

namespace rpma_harness {
namespace {
std::atomic<FakeNicWatcher*> g_watcher{nullptr};
}  // namespace

FakeNicWatcher* SetFakeNicWatcher(FakeNicWatcher* watcher) {
  return g_watcher.exchange(watcher);
}

namespace fake_nic_internal {

void NotifyCreated(FakeNic* nic) {
  if (FakeNicWatcher* watcher = g_watcher.load()) watcher->Created(nic);
}

void NotifyDestroying(FakeNic* nic) {
  if (FakeNicWatcher* watcher = g_watcher.load()) watcher->Destroying(nic);
}

}  // namespace fake_nic_internal
}  // namespace rpma_harness
