// crash_test: the crash checker (crash/crash_check.h) on the log pair of
// 13-crash-consistency, run as it is -- server and client threads on a fake
// NIC with its own progress thread, as //examples:13_crash_consistency_test
// runs them. For each of the client's ten variants the recorder watches
// the run; then every crash point gets every image recovery can tell apart
// and the log's own recovery (log.h, in C) judges each. The five bugs must
// be caught, each with one unit shrunk out; their five fixes must survive
// every image.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "crash/crash_check.h"
#include "nic/fake_nic.h"
#include "rpma/harness.h"

extern "C" {
#include "log.h"
int example_server_main(int argc, char** argv);
int example_client_main(int argc, char** argv);
int __real_rpma_ep_listen(struct rpma_peer* peer, const char* addr,
                          const char* port, struct rpma_ep** ep_ptr);
}

namespace {

// The client starts once the server listens (the link wraps
// rpma_ep_listen, as launcher/pair_launcher.c does).
std::mutex listen_mu;
std::condition_variable listen_cv;
int listen_state = 0;  // 0: not yet, 1: listening, -1: failed

}  // namespace

extern "C" int __wrap_rpma_ep_listen(struct rpma_peer* peer, const char* addr,
                                     const char* port,
                                     struct rpma_ep** ep_ptr) {
  int ret = __real_rpma_ep_listen(peer, addr, port, ep_ptr);
  std::lock_guard<std::mutex> lock(listen_mu);
  listen_state = ret == 0 ? 1 : -1;
  listen_cv.notify_all();
  return ret;
}

namespace rpma_harness {
namespace crash {
namespace {

using ::testing::HasSubstr;

struct Case {
  const char* variant;
  bool buggy;
  const char* violation;  // what recovery says about the shrunk image
  const char* finding;    // a finding that must be reported, or ""
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.variant; }

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.variant;
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

// Runs server and client (both `variant`) to the end under a recorder, then
// checks every crash image with the log's recovery.
CrashReport RunAndCheck(const std::string& variant,
                        CrashCheckOptions options = {}) {
  auto nic = std::make_shared<FakeNic>();
  nic->StartBackgroundProgress();
  ScopedBackend use(nic);
  PersistenceRecorder recorder(*nic, options);
  {
    std::lock_guard<std::mutex> lock(listen_mu);
    listen_state = 0;
  }
  static int port = 7400;
  const std::string port_text = std::to_string(port++);
  std::vector<std::string> server_args = {"server", "192.168.0.1", port_text,
                                          variant};
  std::vector<std::string> client_args = {"client", "192.168.0.1", port_text,
                                          variant};
  int server_ret = -1, client_ret = -1;
  std::thread server([&] {
    std::vector<char*> argv;
    for (std::string& a : server_args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    server_ret = example_server_main(4, argv.data());
    std::lock_guard<std::mutex> lock(listen_mu);
    if (listen_state == 0) listen_state = -1;
    listen_cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(listen_mu);
    listen_cv.wait(lock, [] { return listen_state != 0; });
  }
  if (listen_state == 1) {
    std::vector<char*> argv;
    for (std::string& a : client_args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    client_ret = example_client_main(4, argv.data());
  }
  server.join();
  EXPECT_EQ(server_ret, 0);
  EXPECT_EQ(client_ret, 0);
  const int v = log_variant_parse(variant.c_str());
  CrashReport report = recorder.Check([v](Image& image) -> std::string {
    uint64_t promised = 0;
    for (const std::string& p : image.promises()) {
      if (p == "commit 1") promised = 1;
    }
    char why[160] = "";
    auto read = [](void* ctx, size_t offset, void* dst, size_t len) {
      static_cast<Image*>(ctx)->Read(0, offset, dst, len);
    };
    if (log_recover(read, &image, static_cast<enum log_variant>(v), promised,
                    why, sizeof(why)) == 0) {
      return "";
    }
    return why;
  });
  nic->StopBackgroundProgress();
  return report;
}

class LogCrashTest : public ::testing::TestWithParam<Case> {};

TEST_P(LogCrashTest, BugsAreCaughtShrunkAndFixesSurviveEveryImage) {
  const Case& c = GetParam();
  CrashReport report = RunAndCheck(c.variant);
  std::printf("%s\n%s", c.variant, report.Text().c_str());
  if (!c.buggy) {
    EXPECT_TRUE(report.ok()) << report;
    EXPECT_TRUE(report.findings.empty()) << report;
    for (const CrashPointResult& p : report.points) {
      EXPECT_TRUE(p.exhaustive) << p.label;
    }
    return;
  }
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.violation, HasSubstr(c.violation));
  EXPECT_THAT(report.violation, HasSubstr("1 unit(s) did not hold"));
  if (c.finding[0] != '\0') {
    ASSERT_FALSE(report.findings.empty()) << report;
    EXPECT_THAT(report.Text(), HasSubstr(c.finding));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LogCrashTest,
    ::testing::Values(
        Case{"signal-before-flush", true, "did not survive",
             "received RECV_RDMA_WITH_IMM"},
        Case{"signal-after-flush", false, "", ""},
        Case{"commit-with-data", true, "did not survive", ""},
        Case{"commit-after-data", false, "", ""},
        Case{"wrong-range", true, "did not survive", "covers nothing"},
        Case{"right-range", false, "", ""},
        Case{"visibility", true, "did not survive",
             "RPMA_FLUSH_TYPE_VISIBILITY) on persistent memory"},
        Case{"persistent", false, "", ""},
        Case{"torn-record", true, "the commit holds sequence", ""},
        Case{"atomic-record", false, "", ""}),
    Name);

// librpma's READ flush persists everything the connection wrote before it
// on a DDIO-off server: there the wrong range goes unnoticed.
TEST(LogCrashReadFlush, WrongRangeSurvivesWhenAReadFlushesEverything) {
  CrashCheckOptions options;
  options.read_flushes_all = true;
  CrashReport report = RunAndCheck("wrong-range", options);
  EXPECT_TRUE(report.ok()) << report;
}

// The server declares direct write to PMem; on a platform without it the
// correct protocol loses the record, and the mismatch is said.
TEST(LogCrashPlatform, DeclaredDirectWriteOnADdioPlatformIsCaught) {
  CrashCheckOptions options;
  options.platform_direct_write_to_pmem = false;
  CrashReport report = RunAndCheck("signal-after-flush", options);
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.Text(), HasSubstr("DDIO on"));
}

}  // namespace
}  // namespace crash
}  // namespace rpma_harness
