#include "rpma/harness.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "rpma/default_backend.h"
#include "rpma/internal.h"
#include "rpma/rpma_harness_crash.h"

namespace rpma_harness {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}

std::shared_ptr<VerbsBackend>& Installed() {
  static std::shared_ptr<VerbsBackend> backend;
  return backend;
}

std::shared_ptr<VerbsBackend>& FromEnvironment() {
  static std::shared_ptr<VerbsBackend> backend;
  return backend;
}

std::mutex& LogMutex() {
  static std::mutex mutex;
  return mutex;
}

LogSink& Sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

std::shared_ptr<VerbsBackend> CurrentBackend() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  if (Installed()) return Installed();
  if (!FromEnvironment()) {
    // env RPMA_HARNESS_BACKEND=fake|rdma-core: the NIC behind the librpma API
    //   of a program that installs no backend of its own: `fake` (the default)
    //   or `rdma-core` (a real NIC, or rxe). Any other value: every call fails
    //   as on a machine without a NIC, and the error names the variable.
    FromEnvironment() = CheckFromEnvironment(
        MakeBackendFromEnvironment(std::getenv("RPMA_HARNESS_BACKEND")));
  }
  return FromEnvironment();
}

void InstallBackend(std::shared_ptr<VerbsBackend> backend) {
  // RPMA_HARNESS_CHECK checks a test's own backend too (check/).
  backend = CheckFromEnvironment(std::move(backend));
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Installed() = std::move(backend);
}

ScopedBackend::ScopedBackend(std::shared_ptr<VerbsBackend> backend) {
  backend = CheckFromEnvironment(std::move(backend));
  std::lock_guard<std::mutex> lock(RegistryMutex());
  previous_ = std::move(Installed());
  Installed() = std::move(backend);
}

ScopedBackend::~ScopedBackend() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Installed() = std::move(previous_);
}

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(LogMutex());
  Sink() = std::move(sink);
}

namespace internal {

const char* ErrnoText(int err) { return std::strerror(err < 0 ? -err : err); }

bool DeliverToSink(const char* text) {
  std::lock_guard<std::mutex> lock(LogMutex());
  if (!Sink()) return false;
  Sink()(text);
  return true;
}

void LogAt(enum rpma_log_level level, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  LogMessage(level, buffer);
}

void Log(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  LogMessage(RPMA_LOG_LEVEL_ERROR, buffer);
}

}  // namespace internal
}  // namespace rpma_harness

extern "C" void rpma_harness_persisted(const void* addr, size_t len) {
  if (!rpma_harness::internal::PersistenceListened()) return;
  rpma_harness::PersistenceNote note;
  note.kind = rpma_harness::PersistenceNote::Kind::kPersisted;
  note.addr = addr;
  note.len = len;
  rpma_harness::internal::NotePersistence(note);
}

extern "C" void rpma_harness_promise(const char* what) {
  if (!rpma_harness::internal::PersistenceListened() || what == nullptr) {
    return;
  }
  rpma_harness::PersistenceNote note;
  note.kind = rpma_harness::PersistenceNote::Kind::kPromise;
  note.text = what;
  rpma_harness::internal::NotePersistence(note);
}
