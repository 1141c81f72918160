// conn_bench: how fast a librpma program makes and ends connections on the
// fake NIC (issue 27, item 5). One cycle is a short-lived connection, as a
// test suite that connects per case makes it:
//
//   client: rpma_conn_req_new (an rdma_cm id, its address and route
//           resolved, a CQ and a QP made), rpma_conn_req_connect;
//   server: rpma_ep_next_conn_req, rpma_conn_req_connect (the accept);
//   both:   RPMA_CONN_ESTABLISHED;
//   client: rpma_conn_disconnect; both: RPMA_CONN_CLOSED; server:
//           rpma_conn_disconnect;
//   both:   rpma_conn_delete (QP, CQ and id destroyed).
//
// The peers, the endpoint and the configurations are made once. Placements:
//
//   BM_Connections/one_thread  one thread drives both sides in turn (the
//                              NIC's own cost, no thread hand-offs)
//   BM_Connections/threads     a server thread and a client thread of one
//                              process (the default backend's NIC)
//   BM_Connections/processes   a server process and a client process on one
//                              fabric directory (RPMA_HARNESS_FABRIC)
//
// The counter connections_per_s is cycles per second of wall time; an
// iteration is a batch of kBatch cycles, timed inside the client.
//
//   BM_HeldConnections/N       the client process opens N connections
//                              to one server process and holds them all:
//                              opened_per_s, and the descriptors and
//                              threads its process gained per connection
//                              (fds_per_conn, threads_added), read from
//                              /proc/self/fd and /proc/self/task. Both
//                              processes have the rxe personality's
//                              limits: the spec personality's device
//                              allows 256 QPs and CQs.
//
// Run: bazel run -c opt //tools/bench:conn_bench

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "rpma/librpma.h"
#include "tools/bench/spawn_self.h"

namespace {

constexpr int kBatch = 20;
const char kAddr[] = "127.0.0.1";
// The private data of the connection that tells a server to stop.
const char kStop[] = "stop";

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Entries of a /proc directory (less "." and "..").
int CountEntries(const char* path) {
  DIR* dir = opendir(path);
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory's own descriptor while we read it
}

// A peer on the NIC that owns kAddr, and a connection configuration.
struct Peer {
  rpma_peer* peer = nullptr;
  rpma_conn_cfg* cfg = nullptr;

  bool Open() {
    ibv_context* dev = nullptr;
    return rpma_utils_get_ibv_context(kAddr, RPMA_UTIL_IBV_CONTEXT_LOCAL,
                                      &dev) == 0 &&
           rpma_peer_new(dev, &peer) == 0 && rpma_conn_cfg_new(&cfg) == 0;
  }
  ~Peer() {
    if (cfg != nullptr) rpma_conn_cfg_delete(&cfg);
    if (peer != nullptr) rpma_peer_delete(&peer);
  }
};

bool WaitEvent(rpma_conn* conn, rpma_conn_event want) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  return rpma_conn_next_event(conn, &event) == 0 && event == want;
}

// The server's side of one connection after it is accepted: established,
// closed by the client, disconnected and deleted, as librpma's examples end
// one (common_wait_for_conn_close_and_disconnect).
bool ServerEnds(rpma_conn** conn) {
  const bool ok = WaitEvent(*conn, RPMA_CONN_CLOSED) &&
                  rpma_conn_disconnect(*conn) == 0;
  return rpma_conn_delete(conn) == 0 && ok;
}

// Takes the next connection request; *stop when it is the stop request.
bool ServerAccepts(rpma_ep* ep, rpma_conn_cfg* cfg, rpma_conn** conn,
                   bool* stop) {
  rpma_conn_req* req = nullptr;
  if (rpma_ep_next_conn_req(ep, cfg, &req) != 0) return false;
  rpma_conn_private_data pdata = {nullptr, 0};
  if (rpma_conn_req_get_private_data(req, &pdata) != 0) {
    rpma_conn_req_delete(&req);
    return false;
  }
  *stop = pdata.len >= sizeof(kStop) &&
          std::memcmp(pdata.ptr, kStop, sizeof(kStop)) == 0;
  return rpma_conn_req_connect(&req, nullptr, conn) == 0 &&
         WaitEvent(*conn, RPMA_CONN_ESTABLISHED);
}

// A server that takes connections one after another (`hold` 0) or `hold`
// at a time, holding each batch until its clients close them, until the
// stop request.
int Server(const char* port, int hold) {
  Peer p;
  rpma_ep* ep = nullptr;
  if (!p.Open() || rpma_ep_listen(p.peer, kAddr, port, &ep) != 0) {
    std::fprintf(stderr, "conn_bench server: set-up failed\n");
    return 1;
  }
  int ret = 0;
  for (bool stop = false; !stop && ret == 0;) {
    std::vector<rpma_conn*> held;
    do {
      rpma_conn* conn = nullptr;
      if (!ServerAccepts(ep, p.cfg, &conn, &stop)) {
        std::fprintf(stderr, "conn_bench server: accept failed\n");
        ret = 1;
        break;
      }
      held.push_back(conn);
    } while (!stop && static_cast<int>(held.size()) < hold);
    for (rpma_conn*& conn : held) {
      if (!ServerEnds(&conn)) ret = 1;
    }
  }
  rpma_ep_shutdown(&ep);
  return ret;
}

// The client's half of a cycle up to ESTABLISHED, with `pdata`.
bool ClientConnects(Peer& p, const char* port, rpma_conn** conn,
                    const char* pdata = nullptr) {
  rpma_conn_req* req = nullptr;
  if (rpma_conn_req_new(p.peer, kAddr, port, p.cfg, &req) != 0) return false;
  rpma_conn_private_data data = {const_cast<char*>(pdata),
                                 pdata ? static_cast<uint8_t>(sizeof(kStop))
                                       : uint8_t{0}};
  return rpma_conn_req_connect(&req, pdata ? &data : nullptr, conn) == 0 &&
         WaitEvent(*conn, RPMA_CONN_ESTABLISHED);
}

bool ClientEnds(rpma_conn** conn) {
  const bool ok = rpma_conn_disconnect(*conn) == 0 &&
                  WaitEvent(*conn, RPMA_CONN_CLOSED);
  return rpma_conn_delete(conn) == 0 && ok;
}

// The server may not listen yet: the first connection retries for a while.
bool FirstConnect(Peer& p, const char* port, rpma_conn** conn) {
  for (int i = 0; i < 2000; ++i) {
    if (ClientConnects(p, port, conn)) return true;
    if (*conn != nullptr) rpma_conn_delete(conn);
    usleep(1000);
  }
  return false;
}

// kBatch cycles; their time in ns (0: one failed).
uint64_t ClientBatch(Peer& p, const char* port) {
  const uint64_t begin = NowNs();
  for (int i = 0; i < kBatch; ++i) {
    rpma_conn* conn = nullptr;
    if (!ClientConnects(p, port, &conn) || !ClientEnds(&conn)) return 0;
  }
  return NowNs() - begin;
}

// Tells the server to stop: one more connection, with kStop.
void StopServer(Peer& p, const char* port) {
  rpma_conn* conn = nullptr;
  if (ClientConnects(p, port, &conn, kStop)) ClientEnds(&conn);
}

std::string NextPort() {
  static int next = 0;
  return std::to_string(21000 + (getpid() % 2000) * 16 + next++ % 16);
}

void PerConnection(benchmark::State& state) {
  state.counters["connections_per_s"] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- one thread, both sides --------------------------------------------------

void OneThread(benchmark::State& state) {
  Peer server, client;
  rpma_ep* ep = nullptr;
  const std::string port = NextPort();
  if (!server.Open() || !client.Open() ||
      rpma_ep_listen(server.peer, kAddr, port.c_str(), &ep) != 0) {
    state.SkipWithError("set-up failed");
    return;
  }
  for (auto _ : state) {
    const uint64_t begin = NowNs();
    for (int i = 0; i < kBatch; ++i) {
      // rpma_conn_req_connect returns once the request is sent; the server
      // takes it and accepts, then each side sees ESTABLISHED.
      rpma_conn_req* creq = nullptr;
      rpma_conn_req* sreq = nullptr;
      rpma_conn* c = nullptr;
      rpma_conn* s = nullptr;
      const bool ok =
          rpma_conn_req_new(client.peer, kAddr, port.c_str(), client.cfg,
                            &creq) == 0 &&
          rpma_conn_req_connect(&creq, nullptr, &c) == 0 &&
          rpma_ep_next_conn_req(ep, server.cfg, &sreq) == 0 &&
          rpma_conn_req_connect(&sreq, nullptr, &s) == 0 &&
          WaitEvent(c, RPMA_CONN_ESTABLISHED) &&
          WaitEvent(s, RPMA_CONN_ESTABLISHED) && ClientEnds(&c) &&
          ServerEnds(&s);
      if (!ok) {
        state.SkipWithError("a cycle failed");
        break;
      }
    }
    state.SetIterationTime(static_cast<double>(NowNs() - begin) * 1e-9);
  }
  PerConnection(state);
  rpma_ep_shutdown(&ep);
}

// ---- two threads -------------------------------------------------------------

void Threads(benchmark::State& state) {
  const std::string port = NextPort();
  int server_ret = 0;
  std::thread server([&port, &server_ret] {
    server_ret = Server(port.c_str(), 0);
  });
  Peer client;
  rpma_conn* conn = nullptr;
  if (!client.Open() || !FirstConnect(client, port.c_str(), &conn) ||
      !ClientEnds(&conn)) {
    state.SkipWithError("cannot connect");
    server.detach();
    return;
  }
  for (auto _ : state) {
    const uint64_t ns = ClientBatch(client, port.c_str());
    if (ns == 0) {
      state.SkipWithError("a cycle failed");
      break;
    }
    state.SetIterationTime(static_cast<double>(ns) * 1e-9);
  }
  PerConnection(state);
  StopServer(client, port.c_str());
  server.join();
  if (server_ret != 0) state.SkipWithError("the server failed");
}

// ---- two processes -----------------------------------------------------------

std::string g_self;  // this binary, for the process placement

// A half of the process placement: this binary again, on the fabric. Held
// connections take rxe's limits (max_qp 1048560): the spec personality's
// device has 256 QPs and CQs (FakeDeviceCaps), fewer than the 1000 held.
pid_t Spawn(const std::vector<std::string>& args, const std::string& fabric,
            int stdin_fd, int stdout_fd, bool held) {
  std::vector<std::pair<std::string, std::string>> env;
  if (held) env.push_back({"RPMA_HARNESS_PERSONALITY", "rxe"});
  return rpma_harness::bench::SpawnSelf(g_self, args, fabric, stdin_fd,
                                        stdout_fd, env);
}

// The client process. `hold` 0: one batch of cycles per byte read on fd 0,
// answering each with its time in ns (8 bytes on fd 1), until a 0 byte.
// `hold` N: opens N connections, writes the time that took, the
// descriptors and threads before and with them open (4 x 8 bytes), closes
// them, and waits for the 0 byte.
int ClientProcess(const char* port, int hold) {
  Peer p;
  rpma_conn* first = nullptr;
  uint64_t ok = p.Open() && FirstConnect(p, port, &first) ? 1 : 0;
  if (ok != 0) ok = hold > 0 || ClientEnds(&first) ? 1 : 0;
  if (write(1, &ok, 8) != 8 || ok == 0) return 1;
  char cmd;
  int ret = 0;
  if (hold > 0) {
    // `first` is the first of the batch the server holds.
    std::vector<rpma_conn*> held = {first};
    const uint64_t fds_before = CountEntries("/proc/self/fd");
    const uint64_t threads_before = CountEntries("/proc/self/task");
    const uint64_t begin = NowNs();
    while (static_cast<int>(held.size()) < hold) {
      rpma_conn* conn = nullptr;
      if (!ClientConnects(p, port, &conn)) {
        ret = 1;
        break;
      }
      held.push_back(conn);
    }
    uint64_t out[4] = {ret == 0 ? NowNs() - begin : 0, fds_before,
                       static_cast<uint64_t>(CountEntries("/proc/self/fd")),
                       threads_before};
    out[3] |= static_cast<uint64_t>(CountEntries("/proc/self/task")) << 32;
    if (write(1, out, sizeof(out)) != sizeof(out)) ret = 1;
    for (rpma_conn*& conn : held) {
      if (!ClientEnds(&conn)) ret = 1;
    }
    (void)!read(0, &cmd, 1);
  } else {
    while (read(0, &cmd, 1) == 1 && cmd != 0) {
      const uint64_t ns = ClientBatch(p, port);
      if (write(1, &ns, 8) != 8 || ns == 0) return 1;
    }
  }
  StopServer(p, port);
  return ret;
}

struct Processes {
  char dir[32] = "/tmp/conn_bench.XXXXXX";
  int to_client[2] = {-1, -1};
  int from_client[2] = {-1, -1};
  pid_t server = -1;
  pid_t client = -1;

  // Starts both processes; false when the client could not connect.
  bool Start(int hold) {
    if (mkdtemp(dir) == nullptr || pipe2(to_client, O_CLOEXEC) != 0 ||
        pipe2(from_client, O_CLOEXEC) != 0) {
      return false;
    }
    const std::string port = NextPort();
    const std::string h = std::to_string(hold);
    server = Spawn({g_self, "--server", port, h}, dir, -1, -1, hold > 0);
    client = Spawn({g_self, "--client", port, h}, dir, to_client[0],
                   from_client[1], hold > 0);
    close(to_client[0]);
    close(from_client[1]);
    uint64_t value = 0;
    return read(from_client[0], &value, 8) == 8 && value == 1;
  }
  ~Processes() {
    const char stop = 0;
    if (to_client[1] >= 0) {
      (void)!write(to_client[1], &stop, 1);
      close(to_client[1]);
    }
    if (from_client[0] >= 0) close(from_client[0]);
    if (client > 0) waitpid(client, nullptr, 0);
    if (server > 0) waitpid(server, nullptr, 0);
    const std::string cmd = std::string("rm -rf ") + dir;
    (void)!system(cmd.c_str());
  }
};

void ProcessesCase(benchmark::State& state) {
  Processes p;
  if (!p.Start(0)) {
    state.SkipWithError("cannot connect");
    return;
  }
  for (auto _ : state) {
    const char go = 1;
    uint64_t ns = 0;
    if (write(p.to_client[1], &go, 1) != 1 ||
        read(p.from_client[0], &ns, 8) != 8 || ns == 0) {
      state.SkipWithError("a cycle failed");
      break;
    }
    state.SetIterationTime(static_cast<double>(ns) * 1e-9);
  }
  PerConnection(state);
}

void BM_Connections(benchmark::State& state, int placement) {
  if (placement == 0) OneThread(state);
  if (placement == 1) Threads(state);
  if (placement == 2) ProcessesCase(state);
}
BENCHMARK_CAPTURE(BM_Connections, one_thread, 0)->UseManualTime();
BENCHMARK_CAPTURE(BM_Connections, threads, 1)->UseManualTime();
BENCHMARK_CAPTURE(BM_Connections, processes, 2)->UseManualTime();

void BM_HeldConnections(benchmark::State& state) {
  const int hold = static_cast<int>(state.range(0));
  for (auto _ : state) {
    Processes p;
    if (!p.Start(hold)) {
      state.SkipWithError("cannot connect");
      return;
    }
    uint64_t out[4];
    if (read(p.from_client[0], out, sizeof(out)) != sizeof(out) ||
        out[0] == 0) {
      state.SkipWithError("opening the connections failed");
      return;
    }
    state.SetIterationTime(static_cast<double>(out[0]) * 1e-9);
    // The first connection was open before the count began.
    state.counters["opened_per_s"] = (hold - 1) / (out[0] * 1e-9);
    state.counters["fds_per_conn"] =
        static_cast<double>(out[2] - out[1]) / (hold - 1);
    state.counters["threads_added"] = static_cast<double>(
        static_cast<int64_t>(out[3] >> 32) -
        static_cast<int64_t>(out[3] & 0xffffffffu));
    state.counters["threads"] = static_cast<double>(out[3] >> 32);
  }
}
BENCHMARK(BM_HeldConnections)
    ->Arg(100)
    ->Arg(1000)
    ->Iterations(1)
    ->UseManualTime();

}  // namespace

int main(int argc, char** argv) {
  // The process placement's halves: this binary again.
  if (argc == 4 && std::string(argv[1]) == "--server") {
    return Server(argv[2], std::atoi(argv[3]));
  }
  if (argc == 4 && std::string(argv[1]) == "--client") {
    return ClientProcess(argv[2], std::atoi(argv[3]));
  }
  g_self = rpma_harness::bench::SelfPath();
  if (g_self.empty()) return 1;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
