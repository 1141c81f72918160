// fake_nic_fabric.cc: the sockets and the thread of the cross-process wire
// (fake_nic_fabric.h). What the frames mean is fake_nic_remote.cc's.
//
// Why Unix-domain stream sockets: one per connection gives ordering, EOF on
// the peer's death (SIGKILL included: the kernel closes its descriptors) and
// no coordinator. The figures that back the choice are in README.md
// ("Two processes on the fake NIC") and tools/bench/fabric_bench.cc.

#include "mock/fake_nic_fabric.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <utility>

#include "mock/fake_nic_fabric_sequence.h"

namespace rpma_harness {
namespace fake_nic_internal {

namespace {

// Fills a sockaddr_un; false when `path` does not fit sun_path (108 bytes
// with the terminating NUL on Linux, unix(7)).
bool MakeAddress(const std::string& path, sockaddr_un* address) {
  memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  if (path.size() + 1 > sizeof(address->sun_path)) return false;
  memcpy(address->sun_path, path.c_str(), path.size() + 1);
  return true;
}

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

Fabric::Fabric(std::string dir, OnFrame on_frame, OnClosed on_closed)
    : dir_(std::move(dir)),
      on_frame_(std::move(on_frame)),
      on_closed_(std::move(on_closed)) {}

void Fabric::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  // A ReportWait waiting for a flush the stopped thread will never do.
  flushed_cv_.notify_all();
  Wake();
  if (thread_.joinable()) thread_.join();
}

Fabric::~Fabric() {
  Stop();
  for (auto& [id, link] : links_) close(link.fd);
  for (auto& [path, fd] : listeners_) {
    close(fd);
    unlink(path.c_str());
  }
  for (int fd : retired_listeners_) close(fd);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (seq_fd_ >= 0) close(seq_fd_);
}

std::string Fabric::ListenerPath(const std::string& dir,
                                 const std::string& addr, uint16_t port) {
  return dir + "/l-" + addr + "-" + std::to_string(port);
}

int Fabric::Start() {
  const int err = Prepare();
  if (err != 0) return err;
  StartThread();
  return 0;
}

void Fabric::StartThread() {
  thread_ = std::thread([this] { Run(); });
}

int Fabric::Prepare() {
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    fprintf(stderr, "fake_nic fabric: cannot create %s: %s\n", dir_.c_str(),
            strerror(err));
    return err;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return errno;
  return 0;
}

void Fabric::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

int Fabric::Publish(const std::string& addr, uint16_t port) {
  const std::string path = ListenerPath(dir_, addr, port);
  sockaddr_un address;
  if (!MakeAddress(path, &address)) {
    fprintf(stderr,
            "fake_nic fabric: %s is longer than sun_path (%zu bytes): use a "
            "shorter RPMA_HARNESS_FABRIC directory\n",
            path.c_str(), sizeof(address.sun_path) - 1);
    return ENAMETOOLONG;
  }
  // A file already there: a live listener answers a connect (the port is
  // taken); a dead one's stale file refuses it and is replaced below.
  {
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return errno;
    const bool alive = connect(probe, reinterpret_cast<sockaddr*>(&address),
                               sizeof(address)) == 0;
    close(probe);
    if (alive) return EADDRINUSE;
  }
  // Bound and listening under a private name first, then renamed into
  // place: the public name never names a socket that is bound but not yet
  // listening (a client dialling in that window would be refused, as if
  // nobody listened), and rename(2) replaces a stale file atomically.
  // (Not "l-...": the launcher takes an l- file as "the server listens".)
  static std::atomic<unsigned> staged{0};
  const std::string staging =
      dir_ + "/s-" + std::to_string(getpid()) + "-" + std::to_string(staged++);
  sockaddr_un staging_address;
  if (!MakeAddress(staging, &staging_address)) {
    fprintf(stderr,
            "fake_nic fabric: %s is longer than sun_path (%zu bytes): use a "
            "shorter RPMA_HARNESS_FABRIC directory\n",
            staging.c_str(), sizeof(staging_address.sun_path) - 1);
    return ENAMETOOLONG;
  }
  unlink(staging.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (bind(fd, reinterpret_cast<sockaddr*>(&staging_address),
           sizeof(staging_address)) != 0 ||
      listen(fd, 128) != 0 || rename(staging.c_str(), path.c_str()) != 0) {
    const int err = errno;
    close(fd);
    unlink(staging.c_str());
    return err;
  }
  SetNonBlocking(fd);
  {
    std::lock_guard<std::mutex> lock(mu_);
    listeners_[path] = fd;
  }
  Wake();
  return 0;
}

void Fabric::Unpublish(const std::string& addr, uint16_t port) {
  const std::string path = ListenerPath(dir_, addr, port);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = listeners_.find(path);
  if (it == listeners_.end()) return;
  // The thread may be in poll() on this fd: it is closed by the thread,
  // between two polls, so its number cannot be reused under a poll.
  unlink(path.c_str());
  shutdown(it->second, SHUT_RDWR);
  retired_listeners_.push_back(it->second);
  listeners_.erase(it);
  Wake();
}

int Fabric::Dial(const std::string& addr, uint16_t port, uint64_t* link) {
  int last = ECONNREFUSED;
  for (const std::string& a : {addr, std::string("any")}) {
    const std::string path = ListenerPath(dir_, a, port);
    sockaddr_un address;
    if (!MakeAddress(path, &address)) {
      fprintf(stderr, "fake_nic fabric: %s is longer than sun_path\n",
              path.c_str());
      return ENAMETOOLONG;
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
        0) {
      last = errno;
      close(fd);
      continue;
    }
    SetNonBlocking(fd);
    std::lock_guard<std::mutex> lock(mu_);
    *link = AddLink(fd);
    Wake();
    return 0;
  }
  return last == ENOENT ? ECONNREFUSED : last;
}

uint64_t Fabric::AddLink(int fd) {
  const uint64_t id = next_link_++;
  links_[id].fd = fd;
  return id;
}

bool Fabric::Send(uint64_t id, uint32_t type, const void* body, size_t body_len,
                  const void* tail, size_t tail_len) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it == links_.end() || it->second.closing) return false;
  Link& link = it->second;
  FrameHeader header{static_cast<uint32_t>(body_len + tail_len), type};
  size_t sent = 0;
  if (link.out.empty()) {
    // Straight from the caller's buffers; only what the socket does not
    // take now is copied into the queue.
    iovec parts[3] = {{&header, sizeof(header)},
                      {const_cast<void*>(body), body_len},
                      {const_cast<void*>(tail), tail_len}};
    msghdr message;
    memset(&message, 0, sizeof(message));
    message.msg_iov = parts;
    message.msg_iovlen = tail_len > 0 ? 3 : 2;
    const ssize_t n = sendmsg(link.fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) sent = static_cast<size_t>(n);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // peer gone
    const size_t total = sizeof(header) + body_len + tail_len;
    if (sent == total) return true;
  }
  // Queue the unsent rest of header, body and tail.
  auto queue = [&](const void* data, size_t len) {
    const auto* p = static_cast<const uint8_t*>(data);
    const size_t skip = std::min(sent, len);
    sent -= skip;
    link.out.insert(link.out.end(), p + skip, p + len);
  };
  const bool was_waiting = !link.out.empty();
  queue(&header, sizeof(header));
  queue(body, body_len);
  if (tail_len > 0) queue(tail, tail_len);
  if (!was_waiting) Wake();  // the thread writes the rest
  return true;
}

void Fabric::FlushLocked(Link* link) {
  while (link->out_offset < link->out.size()) {
    const ssize_t n =
        send(link->fd, link->out.data() + link->out_offset,
             link->out.size() - link->out_offset, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      // The peer is gone: what is queued is lost, as packets to a dead
      // host are; the reader sees the EOF.
      link->out.clear();
      link->out_offset = 0;
      return;
    }
    link->out_offset += static_cast<size_t>(n);
  }
  link->out.clear();
  link->out_offset = 0;
}

void Fabric::Close(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it == links_.end()) return;
  it->second.closing = true;
  Wake();
}

bool Fabric::ReadFrames(uint64_t id, int fd, std::vector<Frame>* frames) {
  uint8_t buffer[65536];
  bool open = true;
  std::vector<uint8_t> in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(id);
    if (it == links_.end()) return false;
    in.swap(it->second.in);
  }
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) {
      in.insert(in.end(), buffer, buffer + n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) open = false;
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  size_t at = 0;
  while (in.size() - at >= sizeof(FrameHeader)) {
    FrameHeader header;
    memcpy(&header, in.data() + at, sizeof(header));
    // The peer is another process: a length no frame can have (the
    // largest is a 2 GiB message plus its fixed part) ends the link instead
    // of buffering for ever.
    if (header.body_length > kMaxFrameBody) {
      open = false;
      break;
    }
    if (in.size() - at - sizeof(header) < header.body_length) break;
    Frame frame;
    frame.type = header.type;
    const uint8_t* start = in.data() + at + sizeof(header);
    frame.body.assign(start, start + header.body_length);
    frames->push_back(std::move(frame));
    at += sizeof(header) + header.body_length;
  }
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(at));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(id);
  if (it != links_.end()) it->second.in.swap(in);
  return open;
}

void Fabric::Run() {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;  // 0: the wake fd; ~0: a listener
    std::vector<uint64_t> closed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      for (int fd : retired_listeners_) close(fd);
      retired_listeners_.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      ids.push_back(0);
      for (auto& [path, fd] : listeners_) {
        fds.push_back({fd, POLLIN, 0});
        ids.push_back(~uint64_t{0});
      }
      for (auto it = links_.begin(); it != links_.end();) {
        Link& link = it->second;
        if (link.closing && link.out.empty()) {
          // Our end goes: the peer reads what we wrote, then EOF.
          close(link.fd);
          it = links_.erase(it);
          continue;
        }
        fds.push_back(
            {link.fd,
             static_cast<short>(POLLIN | (link.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(it->first);
        ++it;
      }
      if (seq_fd_ >= 0) {
        if (AllFlushedLocked()) flushed_cv_.notify_all();
        if (!seq_lost_) {
          fds.push_back({seq_fd_, POLLIN, 0});
          ids.push_back(~uint64_t{1});
        }
      }
    }
    // A granted step's kDone goes once what the step sent is written.
    if (done_pending_) {
      bool flushed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        flushed = AllFlushedLocked();
      }
      if (flushed) {
        done_pending_ = false;
        SendToSequencer(SequenceMessage::kDone, 0, 0, 0, "");
      }
    }
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (ids[i] == 0) {
        uint64_t count;
        ssize_t n = read(wake_fd_, &count, sizeof(count));
        (void)n;
        continue;
      }
      if (ids[i] == ~uint64_t{1}) {
        OnSequencerReadable();
        continue;
      }
      if (ids[i] == ~uint64_t{0}) {
        const int fd =
            accept4(fds[i].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          std::lock_guard<std::mutex> lock(mu_);
          AddLink(fd);
        }
        continue;
      }
      if (fds[i].revents & POLLOUT) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = links_.find(ids[i]);
        if (it != links_.end()) FlushLocked(&it->second);
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        std::vector<Frame> frames;
        const bool open = ReadFrames(ids[i], fds[i].fd, &frames);
        Deliver(ids[i], &frames, open);
      }
    }
  }
}

void Fabric::Deliver(uint64_t id, std::vector<Frame>* frames, bool open) {
  if (seq_fd_ < 0) {
    for (const Frame& frame : *frames) on_frame_(id, frame);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (seq_fd_ >= 0) {
      for (Frame& frame : *frames) {
        PendingItem item;
        item.frame = std::move(frame);
        pending_[id].push_back(std::move(item));
        ++pending_count_;
      }
      if (!open) {
        PendingItem item;
        item.closed = true;
        pending_[id].push_back(std::move(item));
        ++pending_count_;
      }
    }
    if (!open) {
      auto it = links_.find(id);
      if (it != links_.end()) {
        close(it->second.fd);
        links_.erase(it);
      }
    }
  }
  if (!open && seq_fd_ < 0) on_closed_(id);
}

// ---- sequenced mode
// ----------------------------------------------------------

int Fabric::JoinSequencer(const std::string& label, SequenceHooks hooks) {
  const std::string path = SequencerPath(dir_);
  sockaddr_un address;
  if (!MakeAddress(path, &address)) return ENAMETOOLONG;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    const int err = errno;
    fprintf(stderr,
            "fake_nic fabric: RPMA_HARNESS_FABRIC_SEQUENCE is set but no "
            "sequencer answers at %s (%s): the sequenced mode needs the "
            "launcher's --sequence (tools/multiprocess); running unsequenced\n",
            path.c_str(), strerror(err));
    close(fd);
    return err;
  }
  seq_fd_ = fd;
  SendToSequencer(SequenceMessage::kHello, static_cast<uint32_t>(getpid()), 0,
                  0, label);
  // The Sequencer answers kHello at once (its thread does nothing else
  // long); a refused or silent join runs unsequenced, said on one line. The
  // 10 s bound is for a sequencer that is stuck, not a timing assumption.
  SequenceMessage answer;
  size_t got = 0;
  while (got < sizeof(answer)) {
    pollfd p = {fd, POLLIN, 0};
    const int ready = poll(&p, 1, 10000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = recv(fd, reinterpret_cast<char*>(&answer) + got,
                           sizeof(answer) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(answer) || answer.type != SequenceMessage::kWelcome) {
    const bool refused =
        got == sizeof(answer) && answer.type == SequenceMessage::kRefused;
    fprintf(stderr,
            "fake_nic fabric: the sequencer at %s %s '%s' "
            "(RPMA_HARNESS_PROCESS_NAME must be one of the launcher's "
            "labels, once); running unsequenced\n",
            path.c_str(), refused ? "refused" : "did not answer",
            label.c_str());
    close(fd);
    seq_fd_ = -1;
    return refused ? ECONNREFUSED : ETIMEDOUT;
  }
  seq_hooks_ = std::move(hooks);
  return 0;
}

void Fabric::SendToSequencer(uint32_t type, uint32_t a, uint64_t b, uint64_t c,
                             const std::string& text) {
  SequenceMessage m;
  m.type = type;
  m.a = a;
  m.b = b;
  m.c = c;
  snprintf(m.text, sizeof(m.text), "%s", text.c_str());
  std::lock_guard<std::mutex> lock(seq_send_mu_);
  const char* data = reinterpret_cast<const char*>(&m);
  size_t done = 0;
  while (done < sizeof(m)) {
    const ssize_t n =
        send(seq_fd_, data + done, sizeof(m) - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the sequencer is gone (the launcher ended)
    done += static_cast<size_t>(n);
  }
}

bool Fabric::AllFlushedLocked() const {
  for (const auto& [id, link] : links_) {
    if (!link.out.empty() || link.closing) return false;
  }
  return true;
}

void Fabric::ReportWait(const char* where, bool releasable) {
  WaitFlushed();
  SendWait(where, releasable);
}

void Fabric::WaitFlushed() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!AllFlushedLocked()) {
    Wake();
    flushed_cv_.wait(lock, [this] { return AllFlushedLocked() || stop_; });
  }
}

void Fabric::SendWait(const char* where, bool releasable) {
  SendToSequencer(SequenceMessage::kWait, releasable ? 1 : 0, 0, 0, where);
}

void Fabric::ReportRun() {
  SendToSequencer(SequenceMessage::kRun, 0, 0, 0, "");
}

bool Fabric::PopPending(uint64_t* link, Frame* frame, bool* closed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->second.empty()) continue;
    PendingItem item = std::move(it->second.front());
    it->second.pop_front();
    --pending_count_;
    *link = it->first;
    *closed = item.closed;
    *frame = std::move(item.frame);
    if (it->second.empty()) pending_.erase(it);
    return true;
  }
  return false;
}

void Fabric::DrainForSync() {
  // Every peer that wrote to us has finished writing (it reported its wait
  // or its step's end only after its sockets drained), and a reaped peer's
  // sockets are closed: reading until EAGAIN sees all of it.
  std::vector<int> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [path, fd] : listeners_) listeners.push_back(fd);
  }
  for (int lfd : listeners) {
    for (;;) {
      const int fd =
          accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      std::lock_guard<std::mutex> lock(mu_);
      AddLink(fd);
    }
  }
  std::vector<std::pair<uint64_t, int>> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, link] : links_) {
      if (!link.closing) links.push_back({id, link.fd});
    }
  }
  for (const auto& [id, fd] : links) {
    std::vector<Frame> frames;
    const bool open = ReadFrames(id, fd, &frames);
    Deliver(id, &frames, open);
  }
}

void Fabric::OnSequencerReadable() {
  char buffer[4096];
  const ssize_t n = recv(seq_fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    // The launcher is gone: nobody grants steps any more.
    fprintf(stderr,
            "fake_nic fabric: the sequencer went away (its launcher "
            "ended?); this process's waits on the fabric end with EIO\n");
    seq_lost_ = true;  // keep polling the rest, not this fd
    if (seq_hooks_.lost) seq_hooks_.lost();
    return;
  }
  seq_in_.append(buffer, static_cast<size_t>(n));
  while (seq_in_.size() >= sizeof(SequenceMessage)) {
    SequenceMessage m;
    memcpy(&m, seq_in_.data(), sizeof(m));
    seq_in_.erase(0, sizeof(m));
    switch (m.type) {
      case SequenceMessage::kSync: {
        DrainForSync();
        const uint64_t local = seq_hooks_.local_pending();
        uint64_t frames;
        {
          std::lock_guard<std::mutex> lock(mu_);
          frames = pending_count_;
        }
        SendToSequencer(SequenceMessage::kSyncReply, m.a, local, frames, "");
        break;
      }
      case SequenceMessage::kGrant:
        seq_hooks_.grant(m.a, m.b);
        done_pending_ = true;
        break;
      case SequenceMessage::kRelease:
        seq_hooks_.release();
        break;
      default:
        break;
    }
  }
}

}  // namespace fake_nic_internal
}  // namespace rpma_harness
