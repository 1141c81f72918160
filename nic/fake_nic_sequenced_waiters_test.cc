// fake_nic_sequenced_waiters_test: a sequenced NIC (FakeNicConfig::
// fabric_sequenced) with several application threads waiting on the fabric
// at once -- a librpma server's rpma_conn_next_event thread next to its
// rpma_cq_wait thread. Every waiter's own predicate is tested after a
// granted step (not only the last waiter's), and when the Sequencer goes
// away every wait ends with EIO instead of hanging. The waits are ordered
// by SequencedWaiters() (how many threads are parked), never by time.

#include <errno.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "nic/fake_nic.h"
#include "nic/fake_nic_fabric_sequence.h"
#include "mock/test_dir.h"

namespace rpma_harness {
namespace {

std::string NewDir() {
  // Under TEST_TMPDIR: any length works (nic/unix_address.h).
  return NewTestDir("seqwait");
}

// Until `nic` has `n` threads parked on the fabric; false after 10 s (a
// failure bound, not a timing assumption).
bool WaitForWaiters(FakeNic* nic, int n) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (nic->SequencedWaiters() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(SequencedWaiters, AStepEndsTheWaitOfTheThreadItConcernsNotTheLastOne) {
  const std::string dir = NewDir();
  ASSERT_FALSE(dir.empty());
  // "q" never joins: it counts as running, so nothing is synced until both
  // threads of "p" are parked and q is declared gone.
  Sequencer sequencer(fake_nic_internal::SequencerPath(dir), 7, {"p", "q"});
  std::string error;
  ASSERT_EQ(sequencer.Start(&error), 0) << error;

  FakeNicConfig config;
  config.fabric_dir = dir;
  config.fabric_sequenced = true;
  config.process_label = "p";
  auto nic = std::make_unique<FakeNic>(config);
  rdma_event_channel* resolving = nic->CreateEventChannel();
  rdma_event_channel* idle = nic->CreateEventChannel();
  ASSERT_NE(resolving, nullptr);
  ASSERT_NE(idle, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(nic->CreateId(resolving, &id, nullptr), 0);

  // Thread A: queues address resolution (a local NIC step) and waits for
  // its event. Thread B waits afterwards on a channel nothing comes to.
  int a_type = -1;
  std::thread a([&] {
    if (nic->ResolveAddr(id, "127.0.0.1", "7471", 1000) != 0) return;
    rdma_cm_event* event = nullptr;
    if (nic->GetCmEvent(resolving, &event) != 0) return;
    a_type = event->event;
    nic->AckCmEvent(event);
  });
  ASSERT_TRUE(WaitForWaiters(nic.get(), 1));
  int b_rc = 0, b_errno = 0;
  std::thread b([&] {
    rdma_cm_event* event = nullptr;
    b_rc = nic->GetCmEvent(idle, &event);
    b_errno = errno;
    if (b_rc == 0) nic->AckCmEvent(event);
  });
  ASSERT_TRUE(WaitForWaiters(nic.get(), 2));

  sequencer.Exited("q");  // now nobody runs: the resolution is granted
  a.join();
  EXPECT_EQ(a_type, RDMA_CM_EVENT_ADDR_RESOLVED);
  // The step was granted, not a deadlock reported in its place. Once A's
  // thread is gone only B waits, on a channel nothing comes to, so the
  // Sequencer may then rightly report a deadlock -- how soon depends on
  // the host's scheduling (CI saw it under load) -- but only after that
  // step: "at step 1", naming B's wait alone.
  std::string report;
  if (sequencer.TakeDeadlock(&report)) {
    EXPECT_NE(report.find("deadlock at step 1:"), std::string::npos) << report;
    EXPECT_NE(report.find(": p waits in rdma_get_cm_event"), std::string::npos)
        << report;
  }

  // The Sequencer goes away: B's wait ends with EIO, it does not hang.
  sequencer.Stop();
  b.join();
  EXPECT_EQ(b_rc, -1);
  EXPECT_EQ(b_errno, EIO);
  nic->DestroyId(id);
  nic.reset();
  (void)!system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace rpma_harness
