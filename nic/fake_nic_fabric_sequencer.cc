// fake_nic_fabric_sequencer.cc: the Sequencer of the fabric's sequenced mode
// (fake_nic_fabric_sequence.h). One thread: poll on the listening socket,
// the processes' sockets and a wake-up eventfd; every decision is made when
// no process runs, from what the processes said, with a seeded PRNG.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include "nic/fake_nic_fabric_sequence.h"
#include "nic/unix_address.h"

namespace rpma_harness {

using fake_nic_internal::SequenceMessage;

Sequencer::Sequencer(std::string socket_path, uint64_t seed,
                     std::vector<std::string> labels)
    : path_(std::move(socket_path)), rng_(seed) {
  for (std::string& label : labels) {
    Process p;
    p.label = std::move(label);
    processes_.push_back(std::move(p));
  }
}

Sequencer::~Sequencer() { Stop(); }

// splitmix64, as the NIC's keys (fake_nic.cc NextRandom32).
uint64_t Sequencer::NextRandom() {
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int Sequencer::Start(std::string* error) {
  const UnixAddress address(path_);  // any length (unix_address.h)
  if (address.error() != 0) {
    *error = "sequencer socket " + path_ + ": " + strerror(address.error());
    return address.error();
  }
  unlink(path_.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, address.addr(), address.len()) != 0 ||
      listen(listen_fd_, 128) != 0) {
    const int err = errno;
    *error = "sequencer socket " + path_ + ": " + strerror(err);
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    return err;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Run(); });
  return 0;
}

void Sequencer::Stop() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  for (Process& p : processes_) {
    if (p.fd >= 0) close(p.fd);
    p.fd = -1;
  }
  for (int fd : unjoined_fds_) close(fd);
  unjoined_fds_.clear();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(path_.c_str());
    listen_fd_ = -1;
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

void Sequencer::Exited(const std::string& label) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_.push_back(label);
  }
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
}

bool Sequencer::TakeDeadlock(std::string* report) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!deadlock_ || deadlock_taken_) return false;
  deadlock_taken_ = true;
  *report = deadlock_report_;
  return true;
}

void Sequencer::KillAtStep(const std::string& label, uint64_t step) {
  step_kills_.push_back({label, step, false});
}

bool Sequencer::TakeKill(std::string* label) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kills_due_.empty()) return false;
  *label = kills_due_.front();
  kills_due_.erase(kills_due_.begin());
  return true;
}

void Sequencer::CloseInPass(int fd) {
  close(fd);
  closed_this_pass_.push_back(fd);
}

bool Sequencer::ClosedThisPass(int fd) const {
  for (int closed : closed_this_pass_) {
    if (closed == fd) return true;
  }
  return false;
}

Sequencer::Process* Sequencer::ByFd(int fd) {
  for (Process& p : processes_) {
    if (p.fd == fd) return &p;
  }
  return nullptr;
}

void Sequencer::SendTo(Process* p, const SequenceMessage& m) {
  if (p->fd < 0) return;
  // 128 bytes on an otherwise idle stream: written whole or the peer is
  // gone (its end is then seen by poll).
  const char* data = reinterpret_cast<const char*>(&m);
  size_t done = 0;
  while (done < sizeof(m)) {
    const ssize_t n = send(p->fd, data + done, sizeof(m) - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void Sequencer::Handle(Process* p, const SequenceMessage& m) {
  switch (m.type) {
    case SequenceMessage::kWait:
      if (p->state == State::kRunning) p->state = State::kWaiting;
      p->where = std::string(m.text, strnlen(m.text, sizeof(m.text)));
      p->releasable = m.a != 0;
      break;
    case SequenceMessage::kRun:
      if (p->state == State::kWaiting) p->state = State::kRunning;
      // A step ended a wait: the empty polls before it were progress.
      releases_in_a_row_ = 0;
      break;
    case SequenceMessage::kSyncReply:
      if (phase_ == Phase::kSyncing && m.a == round_) {
        p->replied = true;
        p->local = m.b;
        p->frames = m.c;
      }
      break;
    case SequenceMessage::kDone:
      if (phase_ == Phase::kStepping && stepping_ == p) {
        phase_ = Phase::kIdle;
        stepping_ = nullptr;
      }
      break;
    default:
      break;
  }
}

void Sequencer::Advance() {
  if (phase_ == Phase::kDeadlocked || phase_ == Phase::kStepping) return;
  if (phase_ == Phase::kSyncing) {
    for (Process& p : processes_) {
      if (p.state == State::kRunning || p.state == State::kDying) {
        // Cannot happen while syncing (nobody runs), but a process may
        // die meanwhile: start over once it is gone.
        phase_ = Phase::kIdle;
        return;
      }
      if (p.state == State::kWaiting && !p.replied) return;
    }
    // Everyone answered: pick a pending step. Candidates in label order,
    // local before frame: the PRNG's index is then a pure function of the
    // seed and what is pending.
    struct Candidate {
      Process* p;
      uint32_t kind;
    };
    std::vector<Candidate> candidates;
    for (Process& p : processes_) {
      if (p.state != State::kWaiting) continue;
      if (p.local > 0) candidates.push_back({&p, SequenceMessage::kLocal});
      if (p.frames > 0) candidates.push_back({&p, SequenceMessage::kFrame});
    }
    if (candidates.empty()) {
      std::vector<Process*> releasable;
      for (Process& p : processes_) {
        if (p.state == State::kWaiting && p.releasable)
          releasable.push_back(&p);
      }
      if (!releasable.empty() && releases_in_a_row_ < kMaxReleases) {
        ++releases_in_a_row_;
        SequenceMessage m;
        m.type = SequenceMessage::kRelease;
        for (Process* p : releasable) {
          p->state = State::kRunning;
          SendTo(p, m);
        }
        phase_ = Phase::kIdle;
        return;
      }
      std::string report = "fabric sequencer: deadlock at step " +
                           std::to_string(step_.load()) +
                           ": every process waits and no NIC step is pending";
      if (!releasable.empty()) {
        report += " (" + std::to_string(kMaxReleases) +
                  " empty polls in a row released)";
      }
      report += ":";
      for (Process& p : processes_) {
        if (p.state == State::kWaiting) {
          report += " " + p.label + " waits in " + p.where + ";";
        }
      }
      report.pop_back();
      std::lock_guard<std::mutex> lock(mu_);
      deadlock_ = true;
      deadlock_report_ = report;
      phase_ = Phase::kDeadlocked;
      return;
    }
    releases_in_a_row_ = 0;
    const Candidate pick = candidates[NextRandom() % candidates.size()];
    SequenceMessage m;
    m.type = SequenceMessage::kGrant;
    m.a = pick.kind;
    m.b = step_.load() + 1;
    step_ = m.b;
    phase_ = Phase::kStepping;
    stepping_ = pick.p;
    SendTo(pick.p, m);
    return;
  }
  // kIdle: wait for every process to wait (or be gone), then sync.
  bool any_waiting = false;
  for (Process& p : processes_) {
    if (p.state == State::kRunning || p.state == State::kDying) return;
    any_waiting = any_waiting || p.state == State::kWaiting;
  }
  if (!any_waiting) return;  // all gone
  for (StepKill& k : step_kills_) {
    if (k.fired || step_.load() < k.step) continue;
    for (Process& p : processes_) {
      if (p.label != k.label || p.state != State::kWaiting) continue;
      k.fired = true;
      p.state = State::kDying;  // until the launcher reaps it
      std::lock_guard<std::mutex> lock(mu_);
      kills_due_.push_back(p.label);
    }
    if (k.fired) return;
  }
  ++round_;
  phase_ = Phase::kSyncing;
  SequenceMessage m;
  m.type = SequenceMessage::kSync;
  m.a = round_;
  for (Process& p : processes_) {
    if (p.state != State::kWaiting) continue;
    p.replied = false;
    SendTo(&p, m);
  }
}

void Sequencer::Run() {
  while (!stop_) {
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (int fd : unjoined_fds_) fds.push_back({fd, POLLIN, 0});
    for (Process& p : processes_) {
      if (p.fd >= 0) fds.push_back({p.fd, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (stop_) return;
    // An fd closed earlier in this pass may have stale revents, and its
    // number may already be reused (an accept below, or the launcher's
    // pipes and trace files): such entries are skipped.
    closed_this_pass_.clear();
    for (const pollfd& f : fds) {
      if (f.revents == 0) continue;
      if (ClosedThisPass(f.fd)) continue;
      if (f.fd == wake_fd_) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        std::vector<std::string> exited;
        {
          std::lock_guard<std::mutex> lock(mu_);
          exited.swap(exited_);
        }
        for (const std::string& label : exited) {
          for (Process& p : processes_) {
            if (p.label != label) continue;
            p.state = State::kGone;
            if (stepping_ == &p) {
              stepping_ = nullptr;
              phase_ = Phase::kIdle;
            }
            if (p.fd >= 0) CloseInPass(p.fd);
            p.fd = -1;
          }
        }
        if (phase_ == Phase::kSyncing && !exited.empty()) {
          phase_ = Phase::kIdle;  // sync again without the gone
        }
        continue;
      }
      if (f.fd == listen_fd_) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) unjoined_fds_.push_back(fd);
        continue;
      }
      char buffer[4096];
      const ssize_t n = recv(f.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      Process* p = ByFd(f.fd);
      if (p == nullptr) {
        // Not yet joined: the first message is kHello with its label.
        std::string& in = unjoined_in_[f.fd];
        if (n > 0) in.append(buffer, static_cast<size_t>(n));
        if (n <= 0 || in.size() >= sizeof(SequenceMessage)) {
          SequenceMessage hello;
          bool ok = n > 0;
          if (ok) memcpy(&hello, in.data(), sizeof(hello));
          Process* slot = nullptr;
          if (ok && hello.type == SequenceMessage::kHello) {
            const std::string label(hello.text,
                                    strnlen(hello.text, sizeof(hello.text)));
            for (Process& q : processes_) {
              if (q.label == label && q.fd < 0 && q.state == State::kRunning) {
                slot = &q;
              }
            }
            if (slot == nullptr) {
              fprintf(stderr,
                      "fabric sequencer: '%s' is not a process of this run "
                      "(or joined twice); its NIC is refused\n",
                      label.c_str());
            }
          }
          for (size_t k = 0; k < unjoined_fds_.size(); ++k) {
            if (unjoined_fds_[k] == f.fd) {
              unjoined_fds_.erase(unjoined_fds_.begin() +
                                  static_cast<std::ptrdiff_t>(k));
              break;
            }
          }
          if (slot == nullptr) {
            // Told, so that its NIC runs unsequenced instead of waiting for
            // grants that never come.
            SequenceMessage refused;
            refused.type = SequenceMessage::kRefused;
            Process stranger;
            stranger.fd = f.fd;
            SendTo(&stranger, refused);
            CloseInPass(f.fd);
            unjoined_in_.erase(f.fd);
            continue;
          }
          slot->fd = f.fd;
          SequenceMessage welcome;
          welcome.type = SequenceMessage::kWelcome;
          SendTo(slot, welcome);
          slot->in = in.substr(sizeof(SequenceMessage));
          unjoined_in_.erase(f.fd);
          p = slot;
        } else {
          continue;
        }
      } else if (n > 0) {
        p->in.append(buffer, static_cast<size_t>(n));
      }
      while (p->in.size() >= sizeof(SequenceMessage)) {
        SequenceMessage m;
        memcpy(&m, p->in.data(), sizeof(m));
        p->in.erase(0, sizeof(m));
        Handle(p, m);
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        // Its NIC is gone (exit or kill); it counts as running until the
        // launcher reaps it, so that every survivor sees its links end at
        // the next sync.
        CloseInPass(p->fd);
        p->fd = -1;
        if (p->state != State::kGone) p->state = State::kDying;
        if (stepping_ == p) {
          stepping_ = nullptr;
          phase_ = Phase::kIdle;
        }
        if (phase_ == Phase::kSyncing) phase_ = Phase::kIdle;
      }
    }
    Advance();
  }
}

}  // namespace rpma_harness
