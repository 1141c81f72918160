// fabric_bench: the cross-process fabric (RPMA_HARNESS_FABRIC) between two
// processes, each beside a same-run baseline:
//   - BM_FabricWriteImmRoundTrip: a 64-byte RDMA write with imm from the
//     client, answered by a 64-byte write with imm from the server (the
//     client's receive completion ends the round trip);
//     BM_FabricWriteImmRoundTripBlocking: the same, with the client taking
//     each completion as rpma_cq_wait does (blocking in the channel);
//     BM_UnixSocketPingPong: 64 bytes each way on a socketpair between two
//     processes, the floor any socket-based wire stands on.
//     BM_FabricWriteImmRoundTripSequenced: the same round trip with the
//     fabric sequenced (a Sequencer thread in the benchmark process, both
//     NICs joined): what determinism costs per round trip.
//   - BM_FabricWrite1MiB: 1 MiB RDMA writes, one in flight at a time;
//     BM_Memcpy1MiB: the same bytes with memcpy; BM_ShmCopy1MiB: the same
//     bytes copied into shared memory by one process and out of it by
//     another (the floor of any shared-memory wire).
//   - Each fabric figure twice: on the shared-memory rings (the default
//     transport) and, as ...Socket, with RPMA_HARNESS_FABRIC_TRANSPORT=socket
//     (the frames on the Unix-domain stream). BM_ShmPingPong: 64 bytes each
//     way through shared memory between two processes that poll as the
//     benchmark's programs do (yielding every 64 looks): the floor any
//     shared-memory wire stands on, on this machine, under this load.
// Run: bazel run -c opt //tools/bench:fabric_bench

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "mock/fabric_two_process.h"
#include "nic/fake_nic_fabric_sequence.h"

namespace rpma_harness {
namespace {

using namespace fabric_two_process;  // NOLINT: test helpers

constexpr uint32_t kSmall = 64;
constexpr uint32_t kLarge = 1 << 20;

// A server that answers every write with imm by one of its own, until the
// imm says stop (0).
ServerBody Echo(const std::string& port) {
  return [port](Side& s, int, int out) {
    CHILD_CHECK(s.Listen(port));
    SendInfo(out, s);
    rdma_cm_id* child = s.TakeRequest(nullptr);
    CHILD_CHECK(child != nullptr);
    CHILD_CHECK(s.Accept(child, "echo") == 0);
    for (int i = 0; i < 8; ++i) CHILD_CHECK(s.PostRecv(i, 0, 0) == 0);
    CHILD_CHECK(s.Next() == RDMA_CM_EVENT_ESTABLISHED);
    SendInfo(out, s);
    for (;;) {
      ibv_wc wc;
      CHILD_CHECK(s.Poll(&wc, true));
      if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;  // our send's
      CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
      if (ntohl(wc.imm_data) == 0) return;
      CHILD_CHECK(s.PostRecv(wc.wr_id, 0, 0) == 0);
      // The client's buffer is at the same offset of its MR: it sent it
      // in the first 16 bytes of the write.
      uint64_t addr;
      uint32_t rkey;
      memcpy(&addr, s.buffer.data(), 8);
      memcpy(&rkey, s.buffer.data() + 8, 4);
      if (addr == 0) continue;  // a large write: no echo
      CHILD_CHECK(s.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 100, 0, kSmall, addr,
                             rkey, 1) == 0);
    }
  };
}

struct Pair {
  std::string dir;
  Child child;
  std::unique_ptr<Side> client;
  ServerInfo info;

  // `transport`: RPMA_HARNESS_FABRIC_TRANSPORT for both processes (read
  // when each NIC is made). `blocking`: the client's CQ has a completion
  // channel (Side::WaitCq).
  bool Start(size_t buffer, const char* transport = "shm",
             bool blocking = false) {
    setenv("RPMA_HARNESS_FABRIC_TRANSPORT", transport, 1);
    const bool started = StartPair(buffer, blocking);
    unsetenv("RPMA_HARNESS_FABRIC_TRANSPORT");
    return started;
  }
  bool StartPair(size_t buffer, bool blocking) {
    dir = NewFabricDir();
    const std::string port = std::to_string(30000 + getpid() % 20000);
    child = Fork(dir, Echo(port), buffer);
    if (!child.ReadInfo(&info)) return false;
    client = std::make_unique<Side>(dir, buffer);
    client->with_comp_channel = blocking;
    int status;
    std::string reply;
    if (client->Connect(port, "bench", &status, &reply) !=
        RDMA_CM_EVENT_ESTABLISHED) {
      return false;
    }
    return child.ReadInfo(&info);
  }
  void Stop() {
    memset(client->buffer.data(), 0, 16);
    client->PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, 16, info.addr, info.rkey,
                     0);
    ibv_wc wc;
    client->Poll(&wc, true);
    child.Wait();
    client.reset();
    std::string cmd = "rm -rf " + dir;
    if (system(cmd.c_str()) != 0) perror("rm");
  }
};

// `blocking`: the client takes each completion as rpma_cq_wait does (arm,
// block in the completion channel) instead of busy-polling.
void FabricWriteImmRoundTrip(benchmark::State& state, const char* transport,
                             bool blocking = false) {
  Pair pair;
  if (!pair.Start(65536, transport, blocking)) {
    state.SkipWithError("cannot connect");
    return;
  }
  Side& c = *pair.client;
  for (int i = 0; i < 8; ++i) c.PostRecv(1000 + i, 0, 0);
  const uint64_t my_addr = reinterpret_cast<uintptr_t>(c.buffer.data());
  const uint32_t my_rkey = c.mr->rkey;
  memcpy(c.buffer.data(), &my_addr, 8);
  memcpy(c.buffer.data() + 8, &my_rkey, 4);
  // The answer lands in our first 64 bytes: keep the request elsewhere.
  memcpy(c.buffer.data() + 4096, c.buffer.data(), 16);
  uint64_t round = 0;
  for (auto _ : state) {
    // Each request carries its round number (bytes 16..23), which the
    // server's answer writes back: the data of this round arrived.
    ++round;
    memcpy(c.buffer.data() + 4096 + 16, &round, 8);
    c.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 4096, kSmall, pair.info.addr,
               pair.info.rkey, 1);
    bool got_answer = false;
    while (!got_answer) {
      ibv_wc wc;
      const bool got = blocking ? c.WaitCq(&wc) : c.Poll(&wc, true);
      if (!got || wc.status != IBV_WC_SUCCESS) {
        state.SkipWithError("completion failed");
        return;
      }
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        got_answer = true;
        c.PostRecv(wc.wr_id, 0, 0);
      }
    }
    uint64_t echoed;
    memcpy(&echoed, c.buffer.data() + 16, 8);
    if (echoed != round) {
      state.SkipWithError("the answer did not carry this round's bytes");
      break;
    }
  }
  memcpy(c.buffer.data() + 4096, "\0\0\0\0\0\0\0\0", 8);
  pair.Stop();
}
void BM_FabricWriteImmRoundTrip(benchmark::State& state) {
  FabricWriteImmRoundTrip(state, "shm");
}
BENCHMARK(BM_FabricWriteImmRoundTrip)->UseRealTime();
void BM_FabricWriteImmRoundTripSocket(benchmark::State& state) {
  FabricWriteImmRoundTrip(state, "socket");
}
BENCHMARK(BM_FabricWriteImmRoundTripSocket)->UseRealTime();
// The client blocks for each completion (the rpma_cq_wait way), the server
// busy-polls: the fabric thread hands the frames over once the client
// blocks (Fabric::BlockingWaitBegins).
void BM_FabricWriteImmRoundTripBlocking(benchmark::State& state) {
  FabricWriteImmRoundTrip(state, "shm", /*blocking=*/true);
}
BENCHMARK(BM_FabricWriteImmRoundTripBlocking)->UseRealTime();

FakeNicConfig SequencedConfig(const std::string& dir, const char* label) {
  FakeNicConfig config = FabricConfig(dir);
  config.fabric_sequenced = true;
  config.process_label = label;
  return config;
}

// No pipe between the two after the start: in sequenced mode a process
// blocked outside the fabric holds every grant back. The server tells the
// client its buffer with a SEND instead.
void BM_FabricWriteImmRoundTripSequenced(benchmark::State& state) {
  static int runs = 0;
  const std::string dir = NewFabricDir();
  const std::string port = std::to_string(30000 + getpid() % 20000 + ++runs);
  Sequencer sequencer(fake_nic_internal::SequencerPath(dir), 1,
                      {"server", "client"});
  std::string error;
  int up[2];
  if (sequencer.Start(&error) != 0 || pipe(up) != 0) {
    state.SkipWithError("cannot start the sequencer");
    return;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    close(up[0]);
    {
      Side s(SequencedConfig(dir, "server"), 65536);
      CHILD_CHECK(s.Listen(port));
      CHILD_CHECK(write(up[1], "l", 1) == 1);  // before any wait
      rdma_cm_id* child = s.TakeRequest(nullptr);
      CHILD_CHECK(child != nullptr);
      CHILD_CHECK(s.Accept(child, "echo") == 0);
      for (int i = 0; i < 8; ++i) CHILD_CHECK(s.PostRecv(i, 0, 0) == 0);
      CHILD_CHECK(s.Next() == RDMA_CM_EVENT_ESTABLISHED);
      const uint64_t addr = reinterpret_cast<uintptr_t>(s.buffer.data());
      memcpy(s.buffer.data() + 8192, &addr, 8);
      memcpy(s.buffer.data() + 8200, &s.mr->rkey, 4);
      CHILD_CHECK(s.PostSend(IBV_WR_SEND, 99, 8192, 16, 0, 0) == 0);
      for (;;) {
        ibv_wc wc;
        CHILD_CHECK(s.Poll(&wc, true));
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;
        CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
        if (ntohl(wc.imm_data) == 0) break;
        CHILD_CHECK(s.PostRecv(wc.wr_id, 0, 0) == 0);
        uint64_t to;
        uint32_t rkey;
        memcpy(&to, s.buffer.data(), 8);
        memcpy(&rkey, s.buffer.data() + 8, 4);
        CHILD_CHECK(s.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 100, 0, kSmall, to,
                               rkey, 1) == 0);
      }
    }
    _exit(0);
  }
  // The sequencer holds every grant back while a process is ending, until
  // it is reaped (the launcher's job in a real run): reap it on the side.
  std::thread reaper([&sequencer, pid] {
    waitpid(pid, nullptr, 0);
    sequencer.Exited("server");
  });
  close(up[1]);
  char listening;
  const bool started = read(up[0], &listening, 1) == 1;
  close(up[0]);
  {
    Side c(SequencedConfig(dir, "client"), 65536);
    int status;
    std::string reply;
    if (!started || c.Connect(port, "bench", &status, &reply) !=
                        RDMA_CM_EVENT_ESTABLISHED) {
      state.SkipWithError("cannot connect");
    } else {
      c.PostRecv(500, 8192, 64);  // the server's SEND: its buffer
      for (int i = 0; i < 8; ++i) c.PostRecv(1000 + i, 0, 0);
      ibv_wc wc;
      uint64_t server_addr = 0;
      uint32_t server_rkey = 0;
      if (!c.Poll(&wc, true) || wc.opcode != IBV_WC_RECV) {
        state.SkipWithError("no buffer from the server");
      } else {
        memcpy(&server_addr, c.buffer.data() + 8192, 8);
        memcpy(&server_rkey, c.buffer.data() + 8200, 4);
        const uint64_t my_addr = reinterpret_cast<uintptr_t>(c.buffer.data());
        memcpy(c.buffer.data() + 4096, &my_addr, 8);
        memcpy(c.buffer.data() + 4104, &c.mr->rkey, 4);
        for (auto _ : state) {
          c.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 4096, kSmall, server_addr,
                     server_rkey, 1);
          bool got_answer = false;
          while (!got_answer) {
            if (!c.Poll(&wc, true) || wc.status != IBV_WC_SUCCESS) {
              state.SkipWithError("completion failed");
              break;
            }
            if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
              got_answer = true;
              c.PostRecv(wc.wr_id, 0, 0);
            }
          }
          if (!got_answer) break;
        }
        memset(c.buffer.data() + 4096, 0, 16);
        c.PostSend(IBV_WR_RDMA_WRITE_WITH_IMM, 2, 4096, 16, server_addr,
                   server_rkey, 0);
        c.Poll(&wc, true);
      }
    }
  }
  // Our NIC is gone (waitpid is outside the fabric); the server's last
  // step (the stop write's receive) woke it, and it ends on its own.
  sequencer.Exited("client");
  reaper.join();
  sequencer.Stop();
  std::string cmd = "rm -rf " + dir;
  if (system(cmd.c_str()) != 0) perror("rm");
}
BENCHMARK(BM_FabricWriteImmRoundTripSequenced)->UseRealTime();

void FabricWrite1MiB(benchmark::State& state, const char* transport) {
  Pair pair;
  if (!pair.Start(kLarge + 4096, transport)) {
    state.SkipWithError("cannot connect");
    return;
  }
  Side& c = *pair.client;
  memset(c.buffer.data(), 0, 16);  // addr 0: the server does not echo
  for (auto _ : state) {
    c.PostSend(IBV_WR_RDMA_WRITE, 1, 0, kLarge, pair.info.addr, pair.info.rkey);
    ibv_wc wc;
    if (!c.Poll(&wc, true) || wc.status != IBV_WC_SUCCESS) {
      state.SkipWithError("write failed");
      return;
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kLarge);
  pair.Stop();
}
void BM_FabricWrite1MiB(benchmark::State& state) {
  FabricWrite1MiB(state, "shm");
}
BENCHMARK(BM_FabricWrite1MiB)->UseRealTime();
void BM_FabricWrite1MiBSocket(benchmark::State& state) {
  FabricWrite1MiB(state, "socket");
}
BENCHMARK(BM_FabricWrite1MiBSocket)->UseRealTime();

void BM_UnixSocketPingPong(benchmark::State& state) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    state.SkipWithError("socketpair");
    return;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    char buf[kSmall];
    close(fds[0]);
    for (;;) {
      size_t got = 0;
      while (got < kSmall) {
        ssize_t n = read(fds[1], buf + got, kSmall - got);
        if (n <= 0) _exit(0);
        got += size_t(n);
      }
      if (write(fds[1], buf, kSmall) != kSmall) _exit(1);
    }
  }
  close(fds[1]);
  char buf[kSmall] = {};
  for (auto _ : state) {
    if (write(fds[0], buf, kSmall) != kSmall) break;
    size_t got = 0;
    while (got < kSmall) {
      ssize_t n = read(fds[0], buf + got, kSmall - got);
      if (n <= 0) break;
      got += size_t(n);
    }
  }
  close(fds[0]);
  waitpid(pid, nullptr, 0);
}
BENCHMARK(BM_UnixSocketPingPong)->UseRealTime();

// Two 64-byte slots in a shared anonymous mapping; each side spins on its
// slot's sequence number, yielding every Side::kPollsPerYield looks (as
// Side::Poll does).
void BM_ShmPingPong(benchmark::State& state) {
  struct Slot {
    std::atomic<uint64_t> seq;
    char data[kSmall];
  };
  void* m = mmap(nullptr, 2 * sizeof(Slot) + 128, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    state.SkipWithError("mmap");
    return;
  }
  auto* ping = static_cast<Slot*>(m);
  auto* pong = reinterpret_cast<Slot*>(static_cast<char*>(m) + 128);
  ping->seq.store(0);
  pong->seq.store(0);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    for (uint64_t n = 1;; ++n) {
      for (unsigned k = 1; ping->seq.load(std::memory_order_acquire) < n; ++k) {
        if (k % Side::kPollsPerYield == 0) sched_yield();
      }
      if (ping->data[0] == -1) _exit(0);  // the parent is done
      memcpy(pong->data, ping->data, kSmall);
      pong->seq.store(n, std::memory_order_release);
    }
  }
  uint64_t n = 0;
  for (auto _ : state) {
    ++n;
    memset(ping->data, static_cast<int>(n & 0x7f), kSmall);  // never -1
    ping->seq.store(n, std::memory_order_release);
    for (unsigned k = 1; pong->seq.load(std::memory_order_acquire) < n; ++k) {
      if (k % Side::kPollsPerYield == 0) sched_yield();
    }
  }
  ping->data[0] = -1;
  ping->seq.store(n + 1, std::memory_order_release);
  waitpid(pid, nullptr, 0);
  munmap(m, 2 * sizeof(Slot) + 128);
}
BENCHMARK(BM_ShmPingPong)->UseRealTime();

void BM_Memcpy1MiB(benchmark::State& state) {
  std::vector<uint8_t> a(kLarge, 1), b(kLarge, 0);
  for (auto _ : state) {
    memcpy(b.data(), a.data(), kLarge);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kLarge);
}
BENCHMARK(BM_Memcpy1MiB)->UseRealTime();

// The floor of any shared-memory wire for 1 MiB messages between two
// processes on this machine: the sender copies its buffer into one half of
// a shared 2 MiB area (halves alternate, as a ring's positions move), the
// receiver copies it out into its own buffer and says so; one message in
// flight, polling as Side::Poll does. The two copies cross the cores, and
// what that costs depends on where the host puts the two vCPUs (on this
// VM it moves between runs: both this floor and BM_FabricWrite1MiB move
// with it).
void BM_ShmCopy1MiB(benchmark::State& state) {
  struct Header {
    std::atomic<uint64_t> seq;
    char pad[56];
    std::atomic<uint64_t> ack;
  };
  const size_t size = 4096 + 2 * size_t{kLarge};
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    state.SkipWithError("mmap");
    return;
  }
  auto* header = static_cast<Header*>(m);
  uint8_t* area = static_cast<uint8_t*>(m) + 4096;
  header->seq.store(0);
  header->ack.store(0);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    std::vector<uint8_t> mine(kLarge);
    for (uint64_t n = 1;; ++n) {
      for (unsigned k = 1; header->seq.load(std::memory_order_acquire) < n;
           ++k) {
        if (k % Side::kPollsPerYield == 0) sched_yield();
      }
      const uint8_t* half = area + (n % 2) * kLarge;
      if (half[0] == 0xff) _exit(0);  // the parent is done
      memcpy(mine.data(), half, kLarge);
      header->ack.store(n, std::memory_order_release);
    }
  }
  std::vector<uint8_t> source(kLarge, 1);
  uint64_t n = 0;
  for (auto _ : state) {
    ++n;
    memcpy(area + (n % 2) * kLarge, source.data(), kLarge);
    header->seq.store(n, std::memory_order_release);
    for (unsigned k = 1; header->ack.load(std::memory_order_acquire) < n;
         ++k) {
      if (k % Side::kPollsPerYield == 0) sched_yield();
    }
  }
  ++n;
  area[(n % 2) * kLarge] = 0xff;
  header->seq.store(n, std::memory_order_release);
  waitpid(pid, nullptr, 0);
  munmap(m, size);
  state.SetBytesProcessed(int64_t(state.iterations()) * kLarge);
}
BENCHMARK(BM_ShmCopy1MiB)->UseRealTime();

}  // namespace
}  // namespace rpma_harness

BENCHMARK_MAIN();
