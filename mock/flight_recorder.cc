// The flight recorder (flight_recorder.h): a FakeNicWatcher that keeps, per
// fake NIC, the last events of the running test, and a gtest listener that
// prints them at a failed assertion. Registered by a static initializer, so
// linking this library (alwayslink) is all a test does.

#include "mock/flight_recorder.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "nic/fake_nic.h"
#include "nic/fake_nic_lifecycle.h"

namespace rpma_harness {
namespace {

// env RPMA_HARNESS_FLIGHT_RECORDER=0|N: in tests linked with
//   //mock:gtest_main, 0 (off, false, no) turns off the flight recorder
//   that prints each fake NIC's last events at a failed assertion; a number
//   keeps that many events per NIC (default 32).
constexpr char kEnv[] = "RPMA_HARNESS_FLIGHT_RECORDER";
constexpr char kFlag[] = "--rpma_harness_flight_recorder=";

std::mutex g_settings_mu;
FlightRecorderSettings g_settings;
bool g_settings_read = false;

// Applies one VALUE (from the environment or the flag); false if unknown.
bool Apply(const std::string& value, FlightRecorderSettings* settings) {
  if (value == "0" || value == "off" || value == "false" || value == "no") {
    settings->enabled = false;
    return true;
  }
  if (value == "1" || value == "on" || value == "true" || value == "yes") {
    settings->enabled = true;
    return true;
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || n == 0) return false;
  settings->enabled = true;
  settings->events = static_cast<size_t>(n);
  return true;
}

void ReadEnvironmentLocked() {
  if (g_settings_read) return;
  g_settings_read = true;
  if (const char* env = getenv(kEnv)) {
    if (!Apply(env, &g_settings)) {
      fprintf(stderr,
              "flight recorder: ignoring %s='%s' (expected 0, off, or a "
              "number of events)\n",
              kEnv, env);
    }
  }
}

// One watched WR: posted, not finished.
struct OutstandingWr {
  uint32_t qp_num = 0;
  bool receive = false;
  uint64_t wr_id = 0;
  std::string what;  // "RDMA_WRITE_WITH_IMM 64 B"
  uint64_t posted_seq = 0;
};

// What the recorder knows about one fake NIC.
struct NicRecord {
  int ordinal = 0;
  std::string label;
  FakeNic* nic = nullptr;  // nullptr once destroyed
  int observer = 0;
  std::deque<std::string> lines;  // this test's, at most `events`
  uint64_t events_this_test = 0;
  uint64_t printed_this_test = 0;  // events_this_test at the last print
  std::map<uint32_t, std::pair<std::string, std::string>> qp_states;
  std::list<OutstandingWr> outstanding;
};

class FlightRecorder final : public FakeNicWatcher {
 public:
  void Created(FakeNic* nic) override {
    auto record = std::make_shared<NicRecord>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      record->ordinal = ++nics_made_;
      record->nic = nic;
      char label[160];
      snprintf(label, sizeof(label), "fake NIC #%d (personality %s, seed %llu)",
               record->ordinal, nic->config().personality.name.c_str(),
               static_cast<unsigned long long>(nic->config().seed));
      record->label = label;
      records_.push_back(record);
    }
    // The observer holds its own reference: it may run (on a progress
    // thread) while Destroying() retires the record.
    const int handle = nic->AddObserver(
        [this, record](const FakeNicEvent& event) { Observe(*record, event); });
    std::lock_guard<std::mutex> lock(mu_);
    record->observer = handle;
  }

  void Destroying(FakeNic* nic) override {
    int handle = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& record : records_) {
        if (record->nic == nic) {
          handle = record->observer;
          record->nic = nullptr;
        }
      }
    }
    if (handle != 0) nic->RemoveObserver(handle);
  }

  // A new test: forget the previous test's events and the NICs it
  // destroyed; keep QP states and outstanding WRs of NICs that live on.
  void StartTest() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<NicRecord>> kept;
    for (auto& record : records_) {
      if (record->nic == nullptr) continue;
      record->lines.clear();
      record->events_this_test = 0;
      record->printed_this_test = 0;
      kept.push_back(record);
    }
    records_ = std::move(kept);
    printed_in_test_ = false;
  }

  // `continuation`: only what happened since the last report of this test.
  std::string Report(bool continuation) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (auto& record : records_) out += ReportOne(*record, continuation);
    if (!out.empty() && !continuation) {
      out +=
          "[ flight recorder ] (off: RPMA_HARNESS_FLIGHT_RECORDER=0 or "
          "--rpma_harness_flight_recorder=0; =N keeps N events)\n";
    }
    return out;
  }

  bool printed_in_test() {
    std::lock_guard<std::mutex> lock(mu_);
    return printed_in_test_;
  }
  void set_printed_in_test() {
    std::lock_guard<std::mutex> lock(mu_);
    printed_in_test_ = true;
  }

 private:
  void Observe(NicRecord& record, const FakeNicEvent& event) {
    std::lock_guard<std::mutex> lock(mu_);
    record.events_this_test++;
    record.lines.push_back(ToString(event));
    const size_t keep = CurrentFlightRecorderSettings().events;
    while (record.lines.size() > keep) record.lines.pop_front();
    switch (event.kind) {
      case FakeNicEvent::Kind::kQpState:
        record.qp_states[event.qp_num] = {QpStateName(event.opcode),
                                          event.text};
        break;
      case FakeNicEvent::Kind::kPostSend:
      case FakeNicEvent::Kind::kPostRecv: {
        OutstandingWr wr;
        wr.qp_num = event.qp_num;
        wr.receive = event.kind == FakeNicEvent::Kind::kPostRecv;
        wr.wr_id = event.wr_id;
        // A receive's event carries no length; a send's is the WR's.
        wr.what = wr.receive
                      ? std::string("recv")
                      : std::string("send ") + WrOpcodeName(event.opcode) +
                            " " + std::to_string(event.byte_len) + " B";
        wr.posted_seq = event.seq;
        record.outstanding.push_back(wr);
        if (record.qp_states.count(event.qp_num) == 0) {
          record.qp_states[event.qp_num] = {"?", "no state change seen"};
        }
        break;
      }
      case FakeNicEvent::Kind::kExecute:
        // The send-queue slot is free once the NIC executes the WR (the
        // fake's rule; fake_nic.h): an unsignaled WR is finished here.
        Finish(record, event.qp_num, event.wr_id, /*receive=*/false, true);
        break;
      case FakeNicEvent::Kind::kCompletion: {
        // A flushed or failed WR's wc.opcode is undefined (ibv_poll_cq(3)):
        // try the side the opcode says first, then the other.
        const bool receive = (event.opcode & IBV_WC_RECV) != 0;
        if (!Finish(record, event.qp_num, event.wr_id, receive, false)) {
          Finish(record, event.qp_num, event.wr_id, !receive, false);
        }
        break;
      }
      default:
        break;
    }
  }

  // Removes the oldest matching outstanding WR; false when none matched.
  static bool Finish(NicRecord& record, uint32_t qp_num, uint64_t wr_id,
                     bool receive, bool only_sends) {
    for (auto it = record.outstanding.begin(); it != record.outstanding.end();
         ++it) {
      if (it->qp_num == qp_num && it->wr_id == wr_id &&
          it->receive == receive && (!only_sends || !it->receive)) {
        record.outstanding.erase(it);
        return true;
      }
    }
    return false;
  }

  static std::string ReportOne(NicRecord& record, bool continuation) {
    const uint64_t fresh = record.events_this_test - record.printed_this_test;
    if (continuation && fresh == 0) return "";
    std::string out = "[ flight recorder ] " + record.label;
    if (record.nic == nullptr) out += ", destroyed during the test";
    const size_t shown = std::min<uint64_t>(
        continuation ? fresh : record.events_this_test, record.lines.size());
    char head[160];
    if (record.events_this_test == 0) {
      snprintf(head, sizeof(head), ": no events in this test\n");
    } else {
      snprintf(head, sizeof(head), ": last %zu of %llu events %s\n", shown,
               static_cast<unsigned long long>(
                   continuation ? fresh : record.events_this_test),
               continuation ? "since the report above" : "in this test");
    }
    out += head;
    for (size_t i = record.lines.size() - shown; i < record.lines.size(); ++i) {
      out += "    " + record.lines[i] + "\n";
    }
    record.printed_this_test = record.events_this_test;
    char line[192];
    if (!record.qp_states.empty()) {
      out += "  QP states:";
      for (const auto& [qp_num, state] : record.qp_states) {
        snprintf(line, sizeof(line), " 0x%06x %s (%s);", qp_num,
                 state.first.c_str(), state.second.c_str());
        out += line;
      }
      out += "\n";
    }
    if (record.outstanding.empty()) {
      out += "  outstanding WRs: none\n";
    } else {
      snprintf(line, sizeof(line), "  outstanding WRs (%zu):\n",
               record.outstanding.size());
      out += line;
      for (const OutstandingWr& wr : record.outstanding) {
        snprintf(line, sizeof(line),
                 "    QP 0x%06x %s wr_id %llu, posted at #%llu\n", wr.qp_num,
                 wr.what.c_str(), static_cast<unsigned long long>(wr.wr_id),
                 static_cast<unsigned long long>(wr.posted_seq));
        out += line;
      }
    }
    return out;
  }

  std::mutex mu_;
  int nics_made_ = 0;
  bool printed_in_test_ = false;
  std::vector<std::shared_ptr<NicRecord>> records_;
};

// Never destroyed: NICs that outlive main() may still call it.
FlightRecorder* Recorder() {
  static FlightRecorder* recorder = new FlightRecorder;
  return recorder;
}

class FlightRecorderListener final : public ::testing::EmptyTestEventListener {
 public:
  void OnTestProgramStart(const ::testing::UnitTest&) override {
    if (CurrentFlightRecorderSettings().enabled) {
      SetFakeNicWatcher(Recorder());
      active_ = true;
    }
  }
  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    if (active_) SetFakeNicWatcher(nullptr);
    active_ = false;
  }
  void OnTestStart(const ::testing::TestInfo&) override {
    if (active_) Recorder()->StartTest();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!active_ || !result.failed()) return;
    const bool continuation = Recorder()->printed_in_test();
    const std::string report = Recorder()->Report(continuation);
    if (report.empty()) return;
    Recorder()->set_printed_in_test();
    fputs(report.c_str(), stdout);
    fflush(stdout);
  }

 private:
  bool active_ = false;
};

struct Registrar {
  Registrar() {
    ::testing::UnitTest::GetInstance()->listeners().Append(
        new FlightRecorderListener);
  }
};
const Registrar g_registrar;

}  // namespace

void ParseFlightRecorderFlags(int* argc, char** argv) {
  std::lock_guard<std::mutex> lock(g_settings_mu);
  ReadEnvironmentLocked();
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (strncmp(argv[i], kFlag, strlen(kFlag)) == 0) {
      const char* value = argv[i] + strlen(kFlag);
      if (!Apply(value, &g_settings)) {
        fprintf(stderr,
                "flight recorder: ignoring %s%s (expected 0, off, or a "
                "number of events)\n",
                kFlag, value);
      }
      continue;
    }
    argv[out++] = argv[i];
  }
  if (out < *argc) argv[out] = nullptr;
  *argc = out;
}

FlightRecorderSettings CurrentFlightRecorderSettings() {
  std::lock_guard<std::mutex> lock(g_settings_mu);
  ReadEnvironmentLocked();
  return g_settings;
}

std::string FlightRecorderReport() { return Recorder()->Report(false); }

}  // namespace rpma_harness
