// fake_nic_fabric_sequence.h: the sequenced mode of the cross-process fabric
// (RPMA_HARNESS_FABRIC_SEQUENCE; docs/two-processes.md, "Sequenced mode: the
// same seed, the same merged trace").
//
// One Sequencer (a thread of the launcher, tools/multiprocess) owns the
// order of every NIC step of every process on one fabric. A NIC in
// sequenced mode has no progress thread and never handles a frame when it
// arrives: its local work (a WR to execute, CM work) and the frames and
// link ends that came in are *pending steps*, and each runs only when the
// Sequencer grants it. The protocol, one fixed-size SequenceMessage each way
// on a Unix-domain stream socket <fabric dir>/sequencer:
//
//   NIC -> Sequencer                      Sequencer -> NIC
//   kHello  (label, pid)                  kWelcome / kRefused (to kHello)
//                                         kSync   (round)
//   kWait   (where; releasable)           kGrant  (kind, step number)
//   kRun                                  kRelease
//   kSyncReply (round, local, frames)
//   kDone
//
//   - A process is *running* from its start until it reports kWait: its
//     application thread blocks in a wait the fake controls
//     (rdma_get_cm_event, ibv_get_cq_event) or made a poll that found
//     nothing (ibv_poll_cq, an O_NONBLOCK channel: "releasable"). Before
//     reporting, everything it sent is written to the peers' sockets.
//   - When no process runs, the Sequencer sends kSync to all: each reads
//     every byte its peers wrote (frames, link ends, new connections) into
//     its pending lists and answers how many local and frame steps are
//     pending. The Sequencer picks one (process, kind) with its seeded
//     PRNG (splitmix64) and grants it with the next global step number.
//   - The granted process runs the step on its fabric thread, says kRun if
//     that step ends its application thread's wait (before the thread can
//     go on), and kDone once what the step sent is written.
//   - Nothing pending and some process in a releasable wait: kRelease to
//     those (their poll returns empty; at most kMaxReleases in a row, then
//     it is a deadlock). Nothing pending otherwise: a deadlock, reported
//     with who waits where; the launcher fails the run.
//   - A process that exits or is killed (its socket ends; the launcher
//     reaps it: Exited) is gone: every survivor sees its links end at the
//     next kSync, since a reaped process's sockets are all closed.
// So every process sees the same events in the same order for a given
// seed, and a single-threaded program makes the same calls.
//
//   Sequencer s(dir + "/sequencer", seed, {"server", "client0"});
//   s.Start();
//   ... s.Exited("client0"); ...  std::string why; s.TakeDeadlock(&why);

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_SEQUENCE_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_SEQUENCE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rpma_harness {
namespace fake_nic_internal {

struct SequenceMessage {
  enum Type : uint32_t {
    kHello = 1,
    kWait = 2,
    kRun = 3,
    kSyncReply = 4,
    kDone = 5,
    kSync = 11,
    kGrant = 12,
    kRelease = 13,
    kWelcome = 14,  // the answer to kHello: joined
    kRefused = 15,  // the answer to kHello: not of this run; then EOF
  };
  enum GrantKind : uint32_t { kLocal = 0, kFrame = 1 };
  uint32_t type = 0;
  uint32_t a = 0;       // kHello: pid; kWait: releasable; kGrant: GrantKind;
                        // kSync / kSyncReply: round
  uint64_t b = 0;       // kGrant: step number; kSyncReply: local steps pending
  uint64_t c = 0;       // kSyncReply: frame steps pending
  char text[104] = {};  // kHello: label; kWait: where
};
static_assert(sizeof(SequenceMessage) == 128, "fixed size on the wire");

// The socket of a fabric's sequencer.
inline std::string SequencerPath(const std::string& fabric_dir) {
  return fabric_dir + "/sequencer";
}

}  // namespace fake_nic_internal

class Sequencer {
 public:
  // Consecutive releases with no step granted and no kRun in between
  // before an all-waiting fabric counts as deadlocked (a busy-poll loop with
  // nothing to come).
  static constexpr int kMaxReleases = 1000;

  // `labels`: every process that will join (RPMA_HARNESS_PROCESS_NAME); each
  // counts as running until it reports a wait or Exited() is called.
  Sequencer(std::string socket_path, uint64_t seed,
            std::vector<std::string> labels);
  ~Sequencer();  // Stop()
  Sequencer(const Sequencer&) = delete;
  Sequencer& operator=(const Sequencer&) = delete;

  // Binds the socket and starts the thread; 0 or an errno (message in
  // `error`).
  int Start(std::string* error);
  void Stop();
  // The process `label` is gone (reaped, or never started).
  void Exited(const std::string& label);
  // The global step number: the last step granted (0 before the first).
  uint64_t step() const { return step_.load(); }
  // True once, with the report, when every live process waits and nothing
  // is pending.
  bool TakeDeadlock(std::string* report);
  // Before Start(): `label` is to be killed once `step` steps were granted
  // and it waits (nothing runs then: the kill lands at the same point of
  // every run). TakeKill hands the launcher each victim to kill; the
  // Sequencer waits until Exited(victim).
  void KillAtStep(const std::string& label, uint64_t step);
  bool TakeKill(std::string* label);

 private:
  enum class State { kRunning, kWaiting, kDying, kGone };
  struct Process {
    std::string label;
    int fd = -1;
    State state = State::kRunning;
    std::string where;
    bool releasable = false;
    bool replied = false;
    uint64_t local = 0, frames = 0;
    std::string in;  // bytes read, not yet a whole message
  };
  void Run();
  void Handle(Process* p, const fake_nic_internal::SequenceMessage& m);
  void Advance();
  void SendTo(Process* p, const fake_nic_internal::SequenceMessage& m);
  Process* ByFd(int fd);
  void CloseInPass(int fd);
  bool ClosedThisPass(int fd) const;
  uint64_t NextRandom();

  const std::string path_;
  uint64_t rng_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> step_{0};

  std::mutex mu_;  // guards exited_, deadlock_*
  std::vector<std::string> exited_;
  bool deadlock_ = false;
  bool deadlock_taken_ = false;
  std::string deadlock_report_;
  std::vector<std::string> kills_due_;  // for TakeKill
  struct StepKill {
    std::string label;
    uint64_t step;
    bool fired;
  };
  std::vector<StepKill> step_kills_;  // sequencer thread after Start()

  // Sequencer thread only.
  std::vector<Process> processes_;
  std::vector<int> unjoined_fds_;  // accepted, no kHello yet
  std::map<int, std::string> unjoined_in_;
  enum class Phase { kIdle, kSyncing, kStepping, kDeadlocked };
  Phase phase_ = Phase::kIdle;
  uint32_t round_ = 0;
  Process* stepping_ = nullptr;
  int releases_in_a_row_ = 0;          // reset by a grant or any process's kRun
  std::vector<int> closed_this_pass_;  // fds closed in this poll pass
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_SEQUENCE_H_
