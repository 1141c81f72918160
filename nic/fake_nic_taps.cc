// fake_nic_taps.cc: the taps (nic/nic_tap.h), the one way anything watches
// the fake: their registration, the two the NIC makes itself (the
// RPMA_HARNESS_LOG log and the trace file), and the calls the data path
// makes into them. A tap observes; it never changes what the NIC does.

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

// RPMA_HARNESS_LOG=1: every record on stderr.
class FakeNic::LogTap final : public NicTap {
 public:
  void OnEvent(const FakeNicEvent& event) override {
    fprintf(stderr, "fake_nic: %s\n", ToString(event).c_str());
  }
};

// FakeNicConfig::trace_path: one line per record, "<time> <process label>
// <record>". Sequenced, the time is the global step number (logical time:
// the same for the same seed), so the merged trace of several processes
// sorts the same every run; else CLOCK_MONOTONIC in nanoseconds.
class FakeNic::TraceFileTap final : public NicTap {
 public:
  // O_NONBLOCK for the open only: a FIFO nobody reads is ENXIO at once
  // instead of blocking the program; one somebody reads gets blocking
  // writes, as a file does.
  TraceFileTap(const FakeNic* nic, const std::string& path)
      : nic_(nic),
        fd_(open(path.c_str(),
                 O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK,
                 0600)) {
    if (fd_ < 0) {
      fprintf(stderr, "fake_nic: cannot open trace file %s: %s%s\n",
              path.c_str(), strerror(errno),
              errno == ENXIO ? " (a FIFO nobody reads)" : "");
      return;
    }
    const int flags = fcntl(fd_, F_GETFL);
    if (flags >= 0) fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  }
  ~TraceFileTap() override {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

  void OnEvent(const FakeNicEvent& event) override {
    uint64_t ns = nic_->seq_step_;
    if (!nic_->sequenced_) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      ns = static_cast<uint64_t>(now.tv_sec) * 1000000000u +
           static_cast<uint64_t>(now.tv_nsec);
    }
    std::string line = std::to_string(ns) + " " +
                       nic_->config_.process_label + " " + ToString(event) +
                       "\n";
    // One write per line: with O_APPEND, lines of several processes sharing
    // the file do not interleave.
    ssize_t n = write(fd_, line.data(), line.size());
    (void)n;
  }

 private:
  const FakeNic* nic_;
  const int fd_;
};

namespace {

bool LogEnabled() {
  // env RPMA_HARNESS_LOG=1|0: 1: every fake NIC prints each event (posts,
  //   executions, completions, QP states, CM events, faults) on stderr; 0 or
  //   empty: off. Any other value is reported and logging is on.
  const char* env = getenv("RPMA_HARNESS_LOG");
  if (env == nullptr || *env == '\0' || strcmp(env, "0") == 0) return false;
  if (strcmp(env, "1") != 0) {
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      fprintf(stderr,
              "fake_nic: RPMA_HARNESS_LOG=%s: expected 1 (on) or 0 (off); "
              "logging\n",
              env);
    }
  }
  return true;
}

// AddObserver's adapter: a function that takes the records.
class FunctionTap final : public NicTap {
 public:
  explicit FunctionTap(std::function<void(const FakeNicEvent&)> fn)
      : fn_(std::move(fn)) {}
  void OnEvent(const FakeNicEvent& event) override { fn_(event); }

 private:
  std::function<void(const FakeNicEvent&)> fn_;
};

}  // namespace

void FakeNic::AddBuiltInTaps() {
  if (LogEnabled()) {
    AddTapLocked(nullptr, NicTap::kEvents, std::make_unique<LogTap>());
  }
  if (!config_.trace_path.empty()) {
    auto trace = std::make_unique<TraceFileTap>(this, config_.trace_path);
    if (trace->ok()) AddTapLocked(nullptr, NicTap::kEvents, std::move(trace));
  }
}

int FakeNic::AddTap(NicTap* tap, unsigned what) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddTapLocked(tap, what, nullptr);
}

int FakeNic::AddObserver(std::function<void(const FakeNicEvent&)> observer) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddTapLocked(nullptr, NicTap::kEvents,
                      std::make_unique<FunctionTap>(std::move(observer)));
}

int FakeNic::AddTapLocked(NicTap* tap, unsigned what,
                          std::unique_ptr<NicTap> owned) {
  TapEntry entry;
  entry.handle = next_tap_++;
  entry.tap = owned != nullptr ? owned.get() : tap;
  entry.what = what;
  entry.owned = std::move(owned);
  const int handle = entry.handle;
  if (what & NicTap::kEvents) event_taps_.push_back(entry.tap);
  if (what & NicTap::kSourceReads) source_read_taps_.push_back(entry.tap);
  if (what & NicTap::kNicWrites) write_taps_.push_back(entry.tap);
  taps_.push_back(std::move(entry));
  return handle;
}

void FakeNic::RemoveTap(int handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(taps_.begin(), taps_.end(), [&](const TapEntry& e) {
    return e.handle == handle;
  });
  if (it == taps_.end()) return;
  taps_.erase(it);  // frees an adapter the NIC made
  event_taps_.clear();
  source_read_taps_.clear();
  write_taps_.clear();
  for (const TapEntry& e : taps_) {
    if (e.what & NicTap::kEvents) event_taps_.push_back(e.tap);
    if (e.what & NicTap::kSourceReads) source_read_taps_.push_back(e.tap);
    if (e.what & NicTap::kNicWrites) write_taps_.push_back(e.tap);
  }
}

void FakeNic::TapSourceReadSlow(const Qp* qp, const SendWqe& wqe,
                                uint64_t offset, uint64_t length,
                                uint32_t mtu) {
  if (wqe.is_inline || wqe.sges.empty() || length == 0) return;
  NicSourceRead read;
  read.qp_num = qp->base.qp_num;
  read.wr_id = wqe.wr_id;
  read.opcode = wqe.opcode;
  read.first_addr = wqe.sges.front().addr;
  read.total_length = wqe.total_length();
  read.offset = offset;
  read.length = length;
  read.mtu = mtu;
  for (NicTap* tap : source_read_taps_) tap->OnSourceRead(read);
}

bool FakeNic::NicWrite(void* dst, const void* src, size_t n,
                       uintptr_t* fault) {
  TapNicWrite(dst, n);
  return fake_nic_internal::GuardedCopy(dst, src, n, fault);
}

}  // namespace rpma_harness
