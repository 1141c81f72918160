#include "rpma/crash_journal.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "nic/fake_nic.h"
#include "rpma/librpma_check.h"  // RPMA_MR_USAGE_*
#include "rpma/persistence.h"

namespace rpma_harness {
namespace internal {
namespace {

class CrashJournal {
 public:
  explicit CrashJournal(int fd) : fd_(fd) {}

  void OnNicEvent(const FakeNicEvent& e) {
    char head[200];
    switch (e.kind) {
      case FakeNicEvent::Kind::kExecute:
        std::snprintf(head, sizeof(head),
                      "nic exec %u %d %d %" PRIu64 " %" PRIu64 " %" PRIu64,
                      e.qp_num, e.opcode, e.status, e.remote_addr, e.byte_len,
                      e.local_addr);
        Write(head, nullptr, 0);
        return;
      case FakeNicEvent::Kind::kCompletion:
        std::snprintf(head, sizeof(head), "nic cqe %u %" PRIu64 " %d %d",
                      e.qp_num, e.wr_id, e.opcode, e.status);
        Write(head, nullptr, 0);
        return;
      case FakeNicEvent::Kind::kLanded:
        // The responder checked rkey and bounds: the range is this
        // process's registered memory, just written.
        std::snprintf(head, sizeof(head),
                      "nic landed %u %d %" PRIu64 " %" PRIu64, e.qp_num,
                      e.opcode, e.remote_addr, e.byte_len);
        Write(head, reinterpret_cast<const uint8_t*>(e.remote_addr),
              e.byte_len);
        return;
      default:
        return;
    }
  }

  void OnNote(const PersistenceNote& n) {
    char head[200];
    switch (n.kind) {
      case PersistenceNote::Kind::kMrReg:
        std::snprintf(
            head, sizeof(head), "note reg %" PRIu64 " %" PRIu64 " %d",
            static_cast<uint64_t>(reinterpret_cast<uintptr_t>(n.addr)), n.len,
            n.usage);
        // Only persistent memory's content matters to the checker.
        Write(head,
              (n.usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)
                  ? static_cast<const uint8_t*>(n.addr)
                  : nullptr,
              n.len);
        return;
      case PersistenceNote::Kind::kFlush:
      case PersistenceNote::Kind::kFlushNotPosted:
        std::snprintf(
            head, sizeof(head),
            "note %s %u %" PRIu64 " %" PRIu64 " %d %d %" PRIu64,
            n.kind == PersistenceNote::Kind::kFlush ? "flush" : "unflush",
            n.qp_num, n.remote_addr, n.len, n.flush_type,
            n.direct_write_to_pmem ? 1 : 0, n.local_addr);
        Write(head, nullptr, 0);
        return;
      case PersistenceNote::Kind::kPolled:
        std::snprintf(head, sizeof(head), "note polled %u %" PRIu64 " %d %d",
                      n.wc.qp_num, n.wc.wr_id, static_cast<int>(n.wc.opcode),
                      static_cast<int>(n.wc.status));
        Write(head, nullptr, 0);
        return;
      case PersistenceNote::Kind::kPersisted:
        std::snprintf(
            head, sizeof(head), "note persisted %" PRIu64 " %" PRIu64,
            static_cast<uint64_t>(reinterpret_cast<uintptr_t>(n.addr)), n.len);
        Write(head, static_cast<const uint8_t*>(n.addr), n.len);
        return;
      case PersistenceNote::Kind::kPromise: {
        std::string text = "note promise " + n.text;
        for (size_t i = 13; i < text.size(); ++i) {
          if (text[i] == '\n' || text[i] == '\r') text[i] = ' ';
        }
        Write(text.c_str(), nullptr, 0);
        return;
      }
      case PersistenceNote::Kind::kMrDereg:
        return;
    }
  }

 private:
  // One line, written with one write(2) (O_APPEND): lines of the NIC's
  // thread and the program's never interleave.
  void Write(const char* head, const uint8_t* bytes, uint64_t len) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    std::string line = std::to_string(uint64_t(ts.tv_sec) * 1000000000u +
                                      uint64_t(ts.tv_nsec)) +
                       " " + head;
    if (bytes != nullptr) {
      static const char kHex[] = "0123456789abcdef";
      line.reserve(line.size() + 2 * len + 2);
      line += ' ';
      for (uint64_t i = 0; i < len; ++i) {
        line += kHex[bytes[i] >> 4];
        line += kHex[bytes[i] & 15];
      }
    }
    line += '\n';
    std::lock_guard<std::mutex> lock(mu_);
    size_t done = 0;
    while (done < line.size()) {
      ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  int fd_;
  std::mutex mu_;
};

}  // namespace

void StartCrashJournalFromEnvironment(const std::shared_ptr<FakeNic>& nic) {
  const char* dir = std::getenv("RPMA_HARNESS_CRASH_RECORD");
  if (dir == nullptr || *dir == '\0' || nic == nullptr) return;
  const std::string path =
      std::string(dir) + "/journal." + std::to_string(getpid());
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr,
                 "rpma-harness: RPMA_HARNESS_CRASH_RECORD: cannot open %s: "
                 "%s; this run is not journalled\n",
                 path.c_str(), std::strerror(errno));
    return;
  }
  // Process-wide and never freed: the NIC's observer and the rpma layer may
  // write to it until the process exits.
  auto* journal = new CrashJournal(fd);
  nic->AddObserver(
      [journal](const FakeNicEvent& e) { journal->OnNicEvent(e); });
  SetPersistenceListener(
      [journal](const PersistenceNote& n) { journal->OnNote(n); });
}

}  // namespace internal
}  // namespace rpma_harness
