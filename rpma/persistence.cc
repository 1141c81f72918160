#include "rpma/persistence.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace rpma_harness {
namespace {

std::mutex& ListenerMutex() {
  static std::mutex mutex;
  return mutex;
}
PersistenceListener& Listener() {
  static PersistenceListener listener;
  return listener;
}
// Read without the mutex on every poll: a relaxed flag keeps the common
// case (nobody recording) one load.
std::atomic<bool> listener_set{false};

}  // namespace

void SetPersistenceListener(PersistenceListener listener) {
  std::lock_guard<std::mutex> lock(ListenerMutex());
  listener_set.store(static_cast<bool>(listener), std::memory_order_relaxed);
  Listener() = std::move(listener);
}

namespace internal {

bool PersistenceListened() {
  return listener_set.load(std::memory_order_relaxed);
}

void NotePersistence(const PersistenceNote& note) {
  std::lock_guard<std::mutex> lock(ListenerMutex());
  if (Listener()) Listener()(note);
}

}  // namespace internal
}  // namespace rpma_harness
