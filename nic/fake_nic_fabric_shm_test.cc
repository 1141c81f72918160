// The shared-memory transport of the cross-process fabric
// (fake_nic_fabric.h, RPMA_HARNESS_FABRIC_TRANSPORT=shm, the default): the
// rings keep frames in order across their wrap, stream a frame larger than
// a ring or straddling its end, reach a consumer that sleeps (the doorbell
// path), hand over every
// byte a killed peer wrote before its death, and treat the peer's mapping
// as input (a corrupt header closes the link, never a crash). Each case
// forks its processes; alarm() and block timeouts keep a case from hanging,
// and no case depends on timing (an idle side waits on a pipe, a stopped
// one on SIGSTOP).

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "mock/fabric_two_process.h"
#include "nic/fake_nic.h"
#include "nic/fake_nic_fabric.h"
#include "nic/unix_address.h"

namespace rpma_harness {
namespace {

using namespace fabric_two_process;  // NOLINT: test helpers
using fake_nic_internal::kShmMapSize;
using fake_nic_internal::kShmRingCapacity;
using fake_nic_internal::kShmRingHeaderSize;
using fake_nic_internal::ShmRingHeader;

std::string NewPort() {
  static int next = 0;
  return std::to_string(25000 + (getpid() % 5000) * 8 + (next++ % 8));
}

uint8_t Pattern(uint32_t message, uint32_t byte) {
  return static_cast<uint8_t>(message * 31 + byte * 7 + (byte >> 8));
}

class FabricShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // These cases are about the rings: whatever the environment says.
    setenv("RPMA_HARNESS_FABRIC_TRANSPORT", "shm", 1);
    alarm(120);
    dir_ = NewFabricDir();
    ASSERT_FALSE(dir_.empty());
    port_ = NewPort();
  }
  void TearDown() override {
    alarm(0);
    std::string cmd = "rm -rf " + dir_;
    ASSERT_EQ(system(cmd.c_str()), 0);
  }
  // A server that accepts one connection with `recvs` receives posted,
  // says where its buffer is, and runs `then`.
  Child ForkServer(size_t buffer, int recvs, ServerBody then) {
    return Fork(dir_, AcceptOne(port_, std::move(then), recvs), buffer);
  }
  void Connect(Child& child, Side& client, ServerInfo* info) {
    ASSERT_TRUE(child.ReadInfo(info));
    int status = 0;
    std::string reply;
    ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
              RDMA_CM_EVENT_ESTABLISHED);
    ASSERT_TRUE(child.ReadInfo(info));
  }
  std::string dir_;
  std::string port_;
};

// 48 writes with imm of 100 KiB and some (sizes that do not divide the
// ring) move 4.8 MB through a 2 MiB ring, up to 8 in flight: each time
// round, the frame that reaches the ring's end follows a filler frame to
// offset 0 (when the ring has room for both; else it straddles the end, as
// in the next case). The server sees them in order, each with its own
// bytes.
TEST_F(FabricShmTest, FramesStayInOrderAcrossTheRingWrap) {
  constexpr uint32_t kCount = 48;
  constexpr uint32_t kStride = 110 * 1024;
  auto size = [](uint32_t i) { return 100 * 1024 + i * 37; };
  static_assert(kCount * (100 * 1024) > 2 * kShmRingCapacity, "wraps twice");
  Child child = ForkServer(kCount * kStride, 16, [&](Side& s, int, int) {
    for (uint32_t i = 0; i < kCount; ++i) {
      ibv_wc wc;
      CHILD_CHECK(s.Poll(&wc));
      CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
      CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
      CHILD_CHECK(ntohl(wc.imm_data) == i);  // in order
      CHILD_CHECK(wc.byte_len == size(i));
      CHILD_CHECK(s.PostRecv(wc.wr_id, 0, 0) == 0);
    }
    s.Sync();
    for (uint32_t i = 0; i < kCount; ++i) {
      for (uint32_t b = 0; b < size(i); ++b) {
        CHILD_CHECK(s.buffer[size_t{i} * kStride + b] == Pattern(i, b));
      }
    }
  });
  Side client(dir_, kCount * kStride);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(Connect(child, client, &info));
  for (uint32_t i = 0; i < kCount; ++i) {
    for (uint32_t b = 0; b < size(i); ++b) {
      client.buffer[size_t{i} * kStride + b] = Pattern(i, b);
    }
  }
  uint32_t posted = 0, done = 0;
  while (done < kCount) {
    while (posted < kCount && posted - done < 8) {
      ASSERT_EQ(
          client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, posted, posted * kStride,
                          size(posted), info.addr + uint64_t{posted} * kStride,
                          info.rkey, posted),
          0);
      ++posted;
    }
    ibv_wc wc;
    ASSERT_TRUE(client.Poll(&wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
    EXPECT_EQ(wc.wr_id, done);
    ++done;
  }
  EXPECT_EQ(child.Wait(), 0);
}

// A frame too large to follow a filler frame to offset 0 (its size and the
// bytes left to the ring's end are more than the ring) straddles the end:
// a 1 MiB write leaves the next frame at 1 MiB and some, and a 1.5 MiB
// write there runs over the end. The server takes both, the second
// assembled across the end, each with its own bytes.
TEST_F(FabricShmTest, AFrameThatStraddlesTheRingsEndArrivesWhole) {
  const uint32_t sizes[2] = {1u << 20, 3u << 19};
  static_assert(kShmRingCapacity == 2u << 20, "the sizes assume 2 MiB");
  const size_t total = size_t{sizes[0]} + sizes[1];
  Child child = ForkServer(total, 4, [&](Side& s, int, int) {
    for (uint32_t i = 0; i < 2; ++i) {
      ibv_wc wc;
      CHILD_CHECK(s.Poll(&wc));
      CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
      CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
      CHILD_CHECK(ntohl(wc.imm_data) == i);
      CHILD_CHECK(wc.byte_len == sizes[i]);
    }
    s.Sync();
    for (uint32_t b = 0; b < sizes[0]; ++b) {
      CHILD_CHECK(s.buffer[b] == Pattern(0, b));
    }
    for (uint32_t b = 0; b < sizes[1]; ++b) {
      CHILD_CHECK(s.buffer[sizes[0] + b] == Pattern(1, b));
    }
  });
  Side client(dir_, total);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(Connect(child, client, &info));
  for (uint32_t b = 0; b < sizes[0]; ++b) client.buffer[b] = Pattern(0, b);
  for (uint32_t b = 0; b < sizes[1]; ++b) {
    client.buffer[sizes[0] + b] = Pattern(1, b);
  }
  uint32_t offset = 0;
  for (uint32_t i = 0; i < 2; ++i) {
    ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, i, offset, sizes[i],
                              info.addr + offset, info.rkey, i),
              0);
    ibv_wc wc;
    ASSERT_TRUE(client.Poll(&wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
    EXPECT_EQ(wc.wr_id, i);
    offset += sizes[i];
  }
  EXPECT_EQ(child.Wait(), 0);
}

// A 5 MiB write and a 5 MiB read: each frame is larger than the 2 MiB ring
// and streams through it (the producer waits for the consumer to free
// space, each side's doorbell wakes the other).
TEST_F(FabricShmTest, AFrameLargerThanTheRingStreamsThroughIt) {
  constexpr uint32_t kLength = 5 << 20;
  static_assert(kLength > 2 * kShmRingCapacity, "larger than the ring");
  Child child =
      ForkServer(2 * size_t{kLength}, 1, [&](Side& s, int in, int out) {
        ibv_wc wc;
        CHILD_CHECK(s.Poll(&wc));
        CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
        CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
        CHILD_CHECK(ntohl(wc.imm_data) == 0x5ca1ab1e);
        CHILD_CHECK(wc.byte_len == kLength);
        s.Sync();
        for (uint32_t b = 0; b < kLength; ++b) {
          CHILD_CHECK(s.buffer[b] == Pattern(1, b));
        }
        for (uint32_t b = 0; b < kLength; ++b) {
          s.buffer[kLength + b] = Pattern(2, b);
        }
        SendInfo(out, s);  // (Sync first) the second half is there to read
        WaitGoOn(in);
      });
  Side client(dir_, 2 * size_t{kLength});
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(Connect(child, client, &info));
  for (uint32_t b = 0; b < kLength; ++b) client.buffer[b] = Pattern(1, b);
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, kLength,
                            info.addr, info.rkey, 0x5ca1ab1e),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(child.ReadInfo(&info));  // checked, and the second half filled
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_READ, 2, kLength, kLength,
                            info.addr + kLength, info.rkey),
            0);
  ASSERT_TRUE(client.Poll(&wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, kLength);
  client.Sync();
  uint32_t wrong = 0;
  for (uint32_t b = 0; b < kLength; ++b) {
    wrong += client.buffer[kLength + b] != Pattern(2, b);
  }
  EXPECT_EQ(wrong, 0u) << "bytes of the 5 MiB READ answer differ";
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// The server's program never polls (it waits on a pipe), so its fabric
// thread sleeps and advertises it: each of 500 small writes reaches it by
// the doorbell, and each is answered.
TEST_F(FabricShmTest, ManySmallFramesReachAConsumerThatSleeps) {
  constexpr uint32_t kCount = 500;
  Child child = ForkServer(65536, 0, [&](Side& s, int in, int) {
    WaitGoOn(in);
    s.Sync();
    for (uint32_t i = 0; i < kCount; ++i) {
      uint64_t value;
      memcpy(&value, s.buffer.data() + 8 * i, 8);
      CHILD_CHECK(value == 0x1000 + i);
    }
  });
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(Connect(child, client, &info));
  for (uint32_t i = 0; i < kCount; ++i) {
    const uint64_t value = 0x1000 + i;
    memcpy(client.buffer.data() + 8 * i, &value, 8);
    ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE, i, 8 * i, 8, info.addr + 8 * i,
                              info.rkey),
              0);
    ibv_wc wc;
    ASSERT_TRUE(client.Poll(&wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.wr_id, i);
  }
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// Reads a byte the NIC writes, as an uninstrumented program (perftest)
// does: ThreadSanitizer would take the spin for a race with the fabric
// thread's landing, which a NIC's DMA is not.
__attribute__((no_sanitize_thread, noinline)) uint8_t ReadAsTheNicLeftIt(
    const volatile uint8_t* byte) {
  return *byte;
}

// A plain RDMA WRITE lands in a peer whose program never calls into the
// library while it waits for it -- it spins on its own buffer, as
// perftest's ib_write_lat does -- though the peer's fabric thread is in
// poll mode (the program polled a moment ago, so its ring asked for no
// doorbell): a frame that completes nothing at the responder rings the
// doorbell anyway (fake_nic_fabric.cc NeedsNoHostCpu). The poll-mode
// window is stretched to 60 s, so a write that waited for it misses the
// child's 10 s deadline; the client's ACK needs the landing too.
TEST_F(FabricShmTest, APlainWriteLandsInAPeerThatSpinsOnItsBuffer) {
  struct Stretched {
    Stretched() {
      fake_nic_internal::SetPollerWindowForTesting(int64_t{60} * 1000000000);
    }
    ~Stretched() { fake_nic_internal::SetPollerWindowForTesting(0); }
  } window;  // the child inherits it
  Child child = ForkServer(65536, 4, [&](Side& s, int in, int) {
    ibv_wc wc;
    CHILD_CHECK(s.Poll(&wc, /*spin=*/true));  // the write with imm
    CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
    CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ReadAsTheNicLeftIt(s.buffer.data() + 100) != 0x5a &&
           std::chrono::steady_clock::now() < deadline) {
    }
    CHILD_CHECK(ReadAsTheNicLeftIt(s.buffer.data() + 100) == 0x5a);
    // A call into the NIC (its mutex) orders the landing before the buffer
    // is freed, for ThreadSanitizer as for a program that would reuse it.
    s.Sync();
    WaitGoOn(in);
  });
  Side client(dir_);
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(Connect(child, client, &info));
  // Poll mode: the server's fabric thread, woken by this frame, finds that
  // the program polled since its last look (were it to look before the
  // polls, it would stay asleep, the doorbell would ring anyway and the
  // case would pass without testing the poll mode). Hence the pauses: the
  // server polls before the frame comes, and the thread has looked before
  // the plain write.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 8, info.addr,
                            info.rkey, 7),
            0);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  client.buffer[100] = 0x5a;
  ASSERT_EQ(client.PostSend(IBV_WR_RDMA_WRITE, 2, 100, 1, info.addr + 100,
                            info.rkey),
            0);
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 2u);
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// A thread blocked in GetCqEvent on a program's own NIC (background
// progress, no block timeout: the rpma_cq_wait and ibv_get_cq_event way)
// also watches the rings' doorbells and drains a ring itself
// (Fabric::RingSockets). Its wait keeps read(2)'s signal rules
// (signal(7)): a handler installed with SA_RESTART does not end it, and
// the send that comes later does; one without SA_RESTART ends it with
// EINTR (qperf stops its tests with SIGALRM this way).
void OnSignal(int) {}

void Catch(int sig, bool restart) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

TEST_F(FabricShmTest, ABlockedCqWaitKeepsReadsSignalRulesWhileWatchingRings) {
  Child child = ForkServer(65536, 0, [&](Side& s, int in, int) {
    WaitGoOn(in);  // the client waits, and a SA_RESTART signal came
    CHILD_CHECK(s.PostSend(IBV_WR_SEND, 1, 0, 8, 0, 0) == 0);
    ibv_wc wc;
    CHILD_CHECK(s.Poll(&wc));
    CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
    WaitGoOn(in);
  });
  FakeNicConfig config = FabricConfig(dir_, Personality::Spec());
  config.background_block_timeout_ms = 0;  // a program's own NIC
  Side client(config, 65536);
  client.with_comp_channel = true;
  ServerInfo info;
  ASSERT_NO_FATAL_FAILURE(Connect(child, client, &info));
  ASSERT_NE(client.comp_channel, nullptr);
  ASSERT_EQ(client.PostRecv(7, 0, 64), 0);

  struct Wait {
    int ret = 0;
    int err = 0;
    std::atomic<bool> done{false};
  };
  // Blocks in GetCqEvent on its own thread; `kick` sends SIGUSR2 to it
  // until it returns or `for_ms` ran out.
  auto block = [&client](Wait* w) {
    return std::thread([&client, w] {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      w->ret = client.nic->GetCqEvent(client.comp_channel, &cq, &context);
      w->err = errno;
      if (w->ret == 0) client.nic->AckCqEvents(cq, 1);
      w->done = true;
    });
  };
  auto kick = [](std::thread& t, Wait* w, int for_ms) {
    for (int i = 0; i < for_ms / 5 && !w->done; ++i) {
      pthread_kill(t.native_handle(), SIGUSR2);
      usleep(5000);
    }
  };

  // SA_RESTART: signals do not end the wait; the server's send does.
  Catch(SIGUSR2, /*restart=*/true);
  ASSERT_EQ(client.nic->ReqNotifyCq(client.cq, 0), 0);
  Wait restarted;
  std::thread t1 = block(&restarted);
  kick(t1, &restarted, 200);
  EXPECT_FALSE(restarted.done) << "a SA_RESTART signal ended the wait";
  child.GoOn();
  t1.join();
  EXPECT_EQ(restarted.ret, 0) << strerror(restarted.err);
  ibv_wc wc;
  ASSERT_TRUE(client.Poll(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);

  // No SA_RESTART: the wait ends with EINTR.
  Catch(SIGUSR2, /*restart=*/false);
  ASSERT_EQ(client.nic->ReqNotifyCq(client.cq, 0), 0);
  Wait interrupted;
  std::thread t2 = block(&interrupted);
  kick(t2, &interrupted, 5000);
  t2.join();
  EXPECT_EQ(interrupted.ret, -1);
  EXPECT_EQ(interrupted.err, EINTR);
  signal(SIGUSR2, SIG_DFL);
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

// The writer is SIGKILLed while its write with imm and its DREQ sit unread
// in the ring (the server is stopped meanwhile): the server, continued,
// takes both before it sees the link end: the receive completes with the
// bytes, then DISCONNECTED.
TEST_F(FabricShmTest, APeerKilledMidStreamIsSeenAfterEveryByteItWrote) {
  Child server = ForkServer(65536, 1, [&](Side& s, int, int) {
    ibv_wc wc;
    CHILD_CHECK(s.Poll(&wc));
    CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
    CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHILD_CHECK(ntohl(wc.imm_data) == 0x77);
    CHILD_CHECK(wc.byte_len == 3000);
    s.Sync();
    for (uint32_t b = 0; b < 3000; ++b) {
      CHILD_CHECK(s.buffer[b] == Pattern(7, b));
    }
    CHILD_CHECK(s.Next() == RDMA_CM_EVENT_DISCONNECTED);
  });
  ServerInfo info;
  ASSERT_TRUE(server.ReadInfo(&info));  // listening
  const std::string port = port_;
  // The writer: connects, says so, waits for the server's buffer, then
  // writes and disconnects, says so, and waits to be killed.
  Child writer = Fork(dir_, [port](Side& w, int in, int out) {
    int status = 0;
    std::string reply;
    CHILD_CHECK(w.Connect(port, "hello", &status, &reply) ==
                RDMA_CM_EVENT_ESTABLISHED);
    SendInfo(out, w);
    ServerInfo target;
    CHILD_CHECK(read(in, &target, sizeof(target)) == sizeof(target));
    for (uint32_t b = 0; b < 3000; ++b) w.buffer[b] = Pattern(7, b);
    CHILD_CHECK(w.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 3000, target.addr,
                           target.rkey, 0x77) == 0);
    CHILD_CHECK(w.nic->Disconnect(w.id) == 0);
    SendInfo(out, w);
    for (;;) pause();
  });
  ServerInfo writer_info;
  ASSERT_TRUE(writer.ReadInfo(&writer_info));  // connected
  ASSERT_TRUE(server.ReadInfo(&info));         // established
  kill(server.pid, SIGSTOP);
  int stopped = 0;
  ASSERT_EQ(waitpid(server.pid, &stopped, WUNTRACED), server.pid);
  ASSERT_TRUE(WIFSTOPPED(stopped));
  ASSERT_EQ(write(writer.to_child, &info, sizeof(info)),
            static_cast<ssize_t>(sizeof(info)));
  ASSERT_TRUE(writer.ReadInfo(&writer_info));  // written and disconnected
  kill(writer.pid, SIGKILL);
  EXPECT_EQ(writer.Wait(), 128 + SIGKILL);
  kill(server.pid, SIGCONT);
  EXPECT_EQ(server.Wait(), 0);
}

// ---- a peer that writes the shared mapping itself

// A raw peer: dials the listener, passes a memfd of its own and maps it.
struct RawPeer {
  int fd = -1;
  uint8_t* map = nullptr;
  size_t size = 0;

  bool Dial(const std::string& path, size_t memfd_size, bool seal) {
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const UnixAddress address(path);
    if (connect(fd, address.addr(), address.len()) != 0) {
      return false;
    }
    const int memfd = memfd_create("raw-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0 || ftruncate(memfd, memfd_size) != 0) return false;
    if (seal && fcntl(memfd, F_ADD_SEALS,
                      F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return false;
    }
    size = memfd_size;
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (m == MAP_FAILED) return false;
    map = static_cast<uint8_t*>(m);
    const bool sent = fake_nic_internal::SendByteWithFd(fd, 'R', memfd);
    close(memfd);
    return sent;
  }
  ShmRingHeader* Header(int ring) {
    return reinterpret_cast<ShmRingHeader*>(map + ring * kShmRingHeaderSize);
  }
  // Ring 0 (ours): appends bytes and publishes them, then rings.
  void Write(const void* data, size_t length) {
    uint8_t* ring = map + 2 * kShmRingHeaderSize;
    const uint64_t head = Header(0)->head.load();
    for (size_t i = 0; i < length; ++i) {
      ring[(head + i) % kShmRingCapacity] =
          static_cast<const uint8_t*>(data)[i];
    }
    Header(0)->head.store(head + length);
    Doorbell();
  }
  void Doorbell() {
    const char byte = 0;
    EXPECT_EQ(send(fd, &byte, 1, MSG_NOSIGNAL), 1);
  }
  // True when the other side closed the link (EOF after any doorbells).
  bool SeesTheLinkEnd() {
    char buffer[256];
    for (;;) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
  ~RawPeer() {
    if (map != nullptr) munmap(map, size);
    if (fd >= 0) close(fd);
  }
};

// The listener's process takes every request: "evil" ones are accepted (the
// REP is what meets the corrupt tail), the "hello" one is served as usual.
TEST_F(FabricShmTest, ACorruptRingFromAPeerClosesTheLinkAndNothingElse) {
  const std::string port = port_;
  Child child = Fork(dir_, [port](Side& s, int in, int out) {
    CHILD_CHECK(s.Listen(port));
    SendInfo(out, s);
    for (;;) {
      std::string hello;
      rdma_cm_id* event_id = nullptr;
      const rdma_cm_event_type type = s.Next(nullptr, &hello, &event_id);
      CHILD_CHECK(type != static_cast<rdma_cm_event_type>(-1));
      if (type != RDMA_CM_EVENT_CONNECT_REQUEST) continue;
      if (hello == "evil") {
        // Its REP is what meets the corrupt tail (whatever Accept returns
        // once the link is gone; this id's later events are skipped).
        s.Accept(event_id, "go away");
        SendInfo(out, s);  // the request came through our rings
        continue;
      }
      CHILD_CHECK(hello == "hello");
      CHILD_CHECK(s.Accept(event_id, "welcome") == 0);
      CHILD_CHECK(s.Next() == RDMA_CM_EVENT_ESTABLISHED);
      SendInfo(out, s);
      WaitGoOn(in);
      return;
    }
  });
  ServerInfo info;
  ASSERT_TRUE(child.ReadInfo(&info));  // listening
  const std::string path = dir_ + "/l-127.0.0.1-" + port_;
  {
    // head - tail beyond the ring's capacity.
    RawPeer peer;
    ASSERT_TRUE(peer.Dial(path, kShmMapSize, true));
    peer.Header(0)->head.store(3 * kShmRingCapacity);
    peer.Doorbell();
    EXPECT_TRUE(peer.SeesTheLinkEnd()) << "impossible head";
  }
  {
    // A frame announcing more than kMaxFrameBody, as on the socket.
    RawPeer peer;
    ASSERT_TRUE(peer.Dial(path, kShmMapSize, true));
    const fake_nic_internal::FrameHeader header{
        fake_nic_internal::kMaxFrameBody + 1, fake_nic_internal::kFrameReq};
    peer.Write(&header, sizeof(header));
    EXPECT_TRUE(peer.SeesTheLinkEnd()) << "impossible frame length";
  }
  {
    // A memfd that is not the agreed size, or not sealed.
    RawPeer small, unsealed;
    ASSERT_TRUE(small.Dial(path, 4096, true));
    EXPECT_TRUE(small.SeesTheLinkEnd()) << "a memfd of the wrong size";
    ASSERT_TRUE(unsealed.Dial(path, kShmMapSize, false));
    EXPECT_TRUE(unsealed.SeesTheLinkEnd()) << "an unsealed memfd";
  }
  {
    // A well-formed REQ (so this peer's rings are right), but the tail of
    // the ring the listener writes into is impossible: its REP closes it.
    RawPeer peer;
    ASSERT_TRUE(peer.Dial(path, kShmMapSize, true));
    peer.Header(1)->tail.store(uint64_t{1} << 40);
    fake_nic_internal::CmFrame req;
    memset(&req, 0, sizeof(req));
    snprintf(req.src_addr, sizeof(req.src_addr), "127.0.0.1");
    snprintf(req.dst_addr, sizeof(req.dst_addr), "127.0.0.1");
    req.src_port = 40001;
    req.dst_port = static_cast<uint16_t>(std::stoi(port_));
    req.retry_count = 7;
    req.rnr_retry_count = 7;
    const char pdata[] = "evil";
    const fake_nic_internal::FrameHeader header{
        static_cast<uint32_t>(sizeof(req) + sizeof(pdata)),
        fake_nic_internal::kFrameReq};
    std::vector<uint8_t> frame(sizeof(header) + sizeof(req) + sizeof(pdata));
    memcpy(frame.data(), &header, sizeof(header));
    memcpy(frame.data() + sizeof(header), &req, sizeof(req));
    memcpy(frame.data() + sizeof(header) + sizeof(req), pdata, sizeof(pdata));
    peer.Write(frame.data(), frame.size());
    ASSERT_TRUE(child.ReadInfo(&info)) << "the REQ did not arrive";
    EXPECT_TRUE(peer.SeesTheLinkEnd()) << "impossible tail";
  }
  // The listener is unhurt: a real client connects.
  Side client(dir_);
  int status = -1;
  std::string reply;
  ASSERT_EQ(client.Connect(port_, "hello", &status, &reply),
            RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(reply, "welcome");
  ASSERT_TRUE(child.ReadInfo(&info));
  child.GoOn();
  EXPECT_EQ(child.Wait(), 0);
}

}  // namespace
}  // namespace rpma_harness
