// program_bench: what a user's librpma program sees (issue 28). A client
// posts a 64-byte rpma_write_with_imm, the server answers with an 8-byte
// rpma_send; the client's receive completion ends the round trip. Both are
// ordinary librpma programs on the default backend (the fake NIC with its
// background progress), placed and waiting four ways:
//
//   BM_Program/threads_polling     server and client threads of one process,
//                                  each spinning on rpma_cq_get_wc
//   BM_Program/threads_blocking    the same, each waiting in rpma_cq_wait
//   BM_Program/processes_polling   two processes on one fabric
//                                  (RPMA_HARNESS_FABRIC), spinning
//   BM_Program/processes_blocking  the same, blocking
//
// and beside them, in the same run, the floor of each placement: two
// threads (two processes) handing a turn back and forth through shared
// memory, spinning (BM_Floor/..._spin) or sleeping in FUTEX_WAIT and waking
// each other with FUTEX_WAKE (BM_Floor/..._futex). The closing table prints
// each case against its floor (polling against spin, blocking against
// futex).
//
// Each benchmark iteration is a batch of kBatch round trips timed inside the
// client (manual time); the counter round_trip and the closing table give
// one round trip's time. A process placement runs the server
// and the client as fresh processes of this binary (--server / --client,
// exec'd, so each makes its own NIC on the fabric); the client reports each
// batch's time through a pipe.
//
// Run: bazel run -c opt //tools/bench:program_bench

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "rpma/librpma.h"
#include "tools/bench/spawn_self.h"

namespace {

constexpr int kBatch = 100;
constexpr size_t kWriteSize = 64;
constexpr size_t kAnswerSize = 8;
const char kAddr[] = "127.0.0.1";

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// An iteration's time is a batch's: the counter "round_trip" is the time of
// one round trip (seconds, shown with an SI prefix: 5.9u is 5.9 us).
void PerRoundTrip(benchmark::State& state) {
  state.counters["round_trip"] =
      benchmark::Counter(kBatch, benchmark::Counter::kIsIterationInvariantRate |
                                     benchmark::Counter::kInvert);
}

// ---- the librpma programs ---------------------------------------------------

// The next completion on `cq`: spinning on rpma_cq_get_wc, or the way
// librpma's own examples wait (rpma_cq_wait when the CQ is empty).
bool NextWc(rpma_cq* cq, bool blocking, ibv_wc* wc) {
  for (;;) {
    int n = 0;
    const int ret = rpma_cq_get_wc(cq, 1, wc, &n);
    if (ret == 0) return wc->status == IBV_WC_SUCCESS;
    if (ret != RPMA_E_NO_COMPLETION) return false;
    if (blocking && rpma_cq_wait(cq) != 0) return false;
  }
}

struct Common {
  rpma_peer* peer = nullptr;
  rpma_conn_cfg* cfg = nullptr;
  char* buffer = nullptr;  // [0, 4096): written to / written from; then 8 B
  rpma_mr_local* mr = nullptr;

  bool Open(int usage) {
    ibv_context* dev = nullptr;
    buffer = static_cast<char*>(aligned_alloc(4096, 8192));
    memset(buffer, 0, 8192);
    return rpma_utils_get_ibv_context(kAddr, RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                      &dev) == 0 &&
           rpma_peer_new(dev, &peer) == 0 &&
           rpma_mr_reg(peer, buffer, 8192, usage, &mr) == 0 &&
           rpma_conn_cfg_new(&cfg) == 0;
  }
  void Close() {
    if (cfg != nullptr) rpma_conn_cfg_delete(&cfg);
    if (mr != nullptr) rpma_mr_dereg(&mr);
    if (peer != nullptr) rpma_peer_delete(&peer);
    free(buffer);
  }
};

bool WaitEvent(rpma_conn* conn, rpma_conn_event want) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  return rpma_conn_next_event(conn, &event) == 0 && event == want;
}

// Answers every write with imm by an 8-byte send, until the imm is 0.
int Server(const char* port, bool blocking) {
  Common c;
  rpma_ep* ep = nullptr;
  rpma_conn_req* req = nullptr;
  rpma_conn* conn = nullptr;
  rpma_cq* cq = nullptr;
  int ret = 1;
  size_t desc_size = 0;
  char desc[64];
  if (!c.Open(RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_RECV |
              RPMA_MR_USAGE_SEND) ||
      rpma_mr_get_descriptor_size(c.mr, &desc_size) != 0 ||
      desc_size > sizeof(desc) || rpma_mr_get_descriptor(c.mr, desc) != 0 ||
      rpma_ep_listen(c.peer, kAddr, port, &ep) != 0 ||
      rpma_ep_next_conn_req(ep, c.cfg, &req) != 0 ||
      rpma_conn_req_recv(req, c.mr, 4096, kAnswerSize, nullptr) != 0) {
    fprintf(stderr, "program_bench server: set-up failed\n");
    goto out;
  }
  {
    rpma_conn_private_data pdata = {desc, static_cast<uint8_t>(desc_size)};
    if (rpma_conn_req_connect(&req, &pdata, &conn) != 0 ||
        !WaitEvent(conn, RPMA_CONN_ESTABLISHED) ||
        rpma_conn_get_cq(conn, &cq) != 0) {
      fprintf(stderr, "program_bench server: accept failed\n");
      goto out;
    }
  }
  for (;;) {
    ibv_wc wc;
    if (!NextWc(cq, blocking, &wc)) {
      fprintf(stderr, "program_bench server: completion failed\n");
      goto out;
    }
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) continue;  // our send's
    if (ntohl(wc.imm_data) == 0) break;
    if (rpma_recv(conn, c.mr, 4096, kAnswerSize, nullptr) != 0 ||
        rpma_send(conn, c.mr, 4096 + kAnswerSize, kAnswerSize,
                  RPMA_F_COMPLETION_ALWAYS, nullptr) != 0) {
      fprintf(stderr, "program_bench server: post failed\n");
      goto out;
    }
  }
  ret = 0;
out:
  if (conn != nullptr) {
    WaitEvent(conn, RPMA_CONN_CLOSED);
    rpma_conn_disconnect(conn);
    rpma_conn_delete(&conn);
  }
  if (req != nullptr) rpma_conn_req_delete(&req);
  if (ep != nullptr) rpma_ep_shutdown(&ep);
  c.Close();
  return ret;
}

// The client's side of a connection; Batch() runs kBatch round trips.
class Client {
 public:
  bool Connect(const char* port, bool blocking) {
    blocking_ = blocking;
    rpma_conn_req* req = nullptr;
    rpma_conn_private_data pdata = {nullptr, 0};
    // The server may not listen yet: retry for a while.
    for (int i = 0; i < 2000; ++i) {
      if (!c_.peer && !c_.Open(RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_RECV)) {
        return false;
      }
      if (rpma_conn_req_new(c_.peer, kAddr, port, c_.cfg, &req) != 0 ||
          rpma_conn_req_recv(req, c_.mr, 4096, kAnswerSize, nullptr) != 0) {
        return false;
      }
      if (rpma_conn_req_connect(&req, nullptr, &conn_) == 0 &&
          WaitEvent(conn_, RPMA_CONN_ESTABLISHED)) {
        break;
      }
      if (conn_ != nullptr) rpma_conn_delete(&conn_);
      usleep(1000);
    }
    return conn_ != nullptr && rpma_conn_get_private_data(conn_, &pdata) == 0 &&
           rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &remote_) ==
               0 &&
           rpma_conn_get_cq(conn_, &cq_) == 0;
  }

  // kBatch round trips; the time they took in ns (0: failed).
  uint64_t Batch() {
    const uint64_t begin = NowNs();
    for (int i = 0; i < kBatch; ++i) {
      ++round_;
      if (rpma_write_with_imm(
              conn_, remote_, 0, c_.mr, 0, kWriteSize, RPMA_F_COMPLETION_ALWAYS,
              htonl(static_cast<uint32_t>(round_ | 1)), nullptr) != 0) {
        return 0;
      }
      // Done when the answer (a receive) and the write's own completion
      // are both in: the send queue never grows.
      bool answered = false, written = false;
      while (!answered || !written) {
        ibv_wc wc;
        if (!NextWc(cq_, blocking_, &wc)) return 0;
        if (wc.opcode == IBV_WC_RECV) {
          answered = true;
          if (rpma_recv(conn_, c_.mr, 4096, kAnswerSize, nullptr) != 0) {
            return 0;
          }
        } else {
          written = true;
        }
      }
    }
    return NowNs() - begin;
  }

  void Stop() {
    if (conn_ != nullptr) {
      rpma_write_with_imm(conn_, remote_, 0, c_.mr, 0, kWriteSize,
                          RPMA_F_COMPLETION_ALWAYS, 0, nullptr);
      ibv_wc wc;
      NextWc(cq_, blocking_, &wc);
      rpma_conn_disconnect(conn_);
      WaitEvent(conn_, RPMA_CONN_CLOSED);
      rpma_conn_delete(&conn_);
    }
    if (remote_ != nullptr) rpma_mr_remote_delete(&remote_);
    c_.Close();
  }

 private:
  Common c_;
  rpma_conn* conn_ = nullptr;
  rpma_mr_remote* remote_ = nullptr;
  rpma_cq* cq_ = nullptr;
  bool blocking_ = false;
  uint64_t round_ = 0;
};

std::string NextPort() {
  static int next = 0;
  return std::to_string(20000 + (getpid() % 2000) * 16 + next++ % 16);
}

// ---- placements ------------------------------------------------------------

void ThreadsCase(benchmark::State& state, bool blocking) {
  const std::string port = NextPort();
  std::thread server([&port, blocking] { Server(port.c_str(), blocking); });
  Client client;
  if (!client.Connect(port.c_str(), blocking)) {
    state.SkipWithError("cannot connect");
    server.detach();
    return;
  }
  for (auto _ : state) {
    const uint64_t ns = client.Batch();
    if (ns == 0) {
      state.SkipWithError("a round trip failed");
      break;
    }
    state.SetIterationTime(static_cast<double>(ns) * 1e-9);
  }
  PerRoundTrip(state);
  client.Stop();
  server.join();
}

std::string g_self;  // this binary, for the process placement

pid_t Spawn(const std::vector<std::string>& args, const std::string& fabric,
            int stdin_fd, int stdout_fd) {
  return rpma_harness::bench::SpawnSelf(g_self, args, fabric, stdin_fd,
                                        stdout_fd, {});
}

// The client process: connects, then one batch per byte read on fd 0,
// answering each with its time in ns (8 bytes on fd 1); a 0 byte stops it.
int ClientProcess(const char* port, bool blocking) {
  Client client;
  uint64_t ok = client.Connect(port, blocking) ? 1 : 0;
  if (write(1, &ok, 8) != 8 || !ok) return 1;
  char cmd;
  while (read(0, &cmd, 1) == 1 && cmd != 0) {
    const uint64_t ns = client.Batch();
    if (write(1, &ns, 8) != 8 || ns == 0) return 1;
  }
  client.Stop();
  return 0;
}

void ProcessesCase(benchmark::State& state, bool blocking) {
  char dir[] = "/tmp/program_bench.XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    state.SkipWithError("mkdtemp");
    return;
  }
  const std::string port = NextPort();
  const std::string wait = blocking ? "blocking" : "polling";
  int to_client[2], from_client[2];
  if (pipe2(to_client, O_CLOEXEC) != 0 || pipe2(from_client, O_CLOEXEC) != 0) {
    state.SkipWithError("pipe");
    rmdir(dir);
    return;
  }
  const pid_t server = Spawn({g_self, "--server", port, wait}, dir, -1, -1);
  const pid_t client = Spawn({g_self, "--client", port, wait}, dir,
                             to_client[0], from_client[1]);
  close(to_client[0]);
  close(from_client[1]);
  uint64_t value = 0;
  if (read(from_client[0], &value, 8) != 8 || value != 1) {
    state.SkipWithError("cannot connect");
  } else {
    for (auto _ : state) {
      const char go = 1;
      if (write(to_client[1], &go, 1) != 1 ||
          read(from_client[0], &value, 8) != 8 || value == 0) {
        state.SkipWithError("a round trip failed");
        break;
      }
      state.SetIterationTime(static_cast<double>(value) * 1e-9);
    }
    PerRoundTrip(state);
  }
  const char stop = 0;
  (void)!write(to_client[1], &stop, 1);
  close(to_client[1]);
  close(from_client[0]);
  waitpid(client, nullptr, 0);
  waitpid(server, nullptr, 0);
  std::string cmd = std::string("rm -rf ") + dir;
  (void)!system(cmd.c_str());
}

void BM_Program(benchmark::State& state, bool processes, bool blocking) {
  if (processes) {
    ProcessesCase(state, blocking);
  } else {
    ThreadsCase(state, blocking);
  }
}
BENCHMARK_CAPTURE(BM_Program, threads_polling, false, false)->UseManualTime();
BENCHMARK_CAPTURE(BM_Program, threads_blocking, false, true)->UseManualTime();
BENCHMARK_CAPTURE(BM_Program, processes_polling, true, false)->UseManualTime();
BENCHMARK_CAPTURE(BM_Program, processes_blocking, true, true)->UseManualTime();

// ---- floors: a turn handed back and forth through shared memory
// --------------

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value,
                 nullptr, nullptr, 0);
}

// The turn word: odd, the answerer's turn; even, the asker's. The answerer
// hands it back; `futex`: sleep in FUTEX_WAIT while it is not yours. The
// asker ends it by setting `stop` and handing it one more turn.
struct Turn {
  std::atomic<uint32_t> word{0};
  std::atomic<uint32_t> stop{0};
};

void Answer(Turn* t, bool futex) {
  for (uint32_t r = 0;; ++r) {
    const uint32_t want = 2 * r + 1;
    uint32_t v;
    while ((v = t->word.load(std::memory_order_acquire)) != want) {
      if (futex) Futex(&t->word, FUTEX_WAIT, v);
    }
    if (t->stop.load(std::memory_order_acquire) != 0) return;
    t->word.store(want + 1, std::memory_order_release);
    if (futex) Futex(&t->word, FUTEX_WAKE, 1);
  }
}

void BM_Floor(benchmark::State& state, bool processes, bool futex) {
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    state.SkipWithError("mmap");
    return;
  }
  Turn* t = new (shared) Turn;
  std::thread answerer_thread;
  pid_t answerer_pid = -1;
  if (processes) {
    answerer_pid = fork();
    if (answerer_pid == 0) {
      Answer(t, futex);
      _exit(0);
    }
  } else {
    answerer_thread = std::thread([t, futex] { Answer(t, futex); });
  }
  uint32_t r = 0;
  for (auto _ : state) {
    const uint64_t begin = NowNs();
    for (int i = 0; i < kBatch; ++i, ++r) {
      t->word.store(2 * r + 1, std::memory_order_release);
      if (futex) Futex(&t->word, FUTEX_WAKE, 1);
      uint32_t v;
      while ((v = t->word.load(std::memory_order_acquire)) != 2 * r + 2) {
        if (futex) Futex(&t->word, FUTEX_WAIT, v);
      }
    }
    state.SetIterationTime(static_cast<double>(NowNs() - begin) * 1e-9);
  }
  PerRoundTrip(state);
  t->stop.store(1, std::memory_order_release);
  t->word.store(2 * r + 1, std::memory_order_release);
  Futex(&t->word, FUTEX_WAKE, 1);
  if (processes) {
    waitpid(answerer_pid, nullptr, 0);
  } else {
    answerer_thread.join();
  }
  munmap(shared, 4096);
}
BENCHMARK_CAPTURE(BM_Floor, threads_spin, false, false)->UseManualTime();
BENCHMARK_CAPTURE(BM_Floor, threads_futex, false, true)->UseManualTime();
BENCHMARK_CAPTURE(BM_Floor, processes_spin, true, false)->UseManualTime();
BENCHMARK_CAPTURE(BM_Floor, processes_futex, true, true)->UseManualTime();

// Prints the usual table, then each program case against its floor.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred || run.iterations == 0) continue;
      // Median of repetitions when there are any, else the one run.
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") {
        continue;
      }
      // "BM_Program/threads_polling/manual_time[_median]" -> up to the
      // second slash.
      std::string name = run.benchmark_name();
      const size_t first = name.find('/');
      const size_t second =
          first == std::string::npos ? first : name.find('/', first + 1);
      if (second != std::string::npos) name.resize(second);
      if (run.run_type == Run::RT_Iteration && seen_aggregate_.count(name)) {
        continue;
      }
      if (run.run_type == Run::RT_Aggregate) seen_aggregate_[name] = true;
      // A batch's time (ns) -> one round trip's (s).
      seconds_[name] = run.GetAdjustedRealTime() * 1e-9 / kBatch;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    printf("\nround trip against its floor (same run):\n");
    for (const char* placement : {"threads", "processes"}) {
      for (const auto& [wait, floor] :
           std::vector<std::pair<std::string, std::string>>{
               {"polling", "spin"}, {"blocking", "futex"}}) {
        const std::string p =
            std::string("BM_Program/") + placement + "_" + wait;
        const std::string f =
            std::string("BM_Floor/") + placement + "_" + floor;
        if (!seconds_.count(p) || !seconds_.count(f)) continue;
        printf("  %-10s %-9s %10.2f us   floor (%s) %8.2f us   %7.1fx\n",
               placement, wait.c_str(), seconds_[p] * 1e6, floor.c_str(),
               seconds_[f] * 1e6, seconds_[p] / seconds_[f]);
      }
    }
  }

 private:
  std::map<std::string, double> seconds_;
  std::map<std::string, bool> seen_aggregate_;
};

}  // namespace

int main(int argc, char** argv) {
  // The process placement's halves: this binary again.
  if (argc == 4 && std::string(argv[1]) == "--server") {
    return Server(argv[2], std::string(argv[3]) == "blocking");
  }
  if (argc == 4 && std::string(argv[1]) == "--client") {
    return ClientProcess(argv[2], std::string(argv[3]) == "blocking");
  }
  g_self = rpma_harness::bench::SelfPath();
  if (g_self.empty()) return 1;
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  return 0;
}
