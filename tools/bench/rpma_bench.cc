// rpma_bench: what a write with immediate data costs on the fake NIC, through
// the rpma C API, and what limits it.
//
//   bazel run -c opt //tools/bench:rpma_bench
//   bazel run -c opt //tools/bench:rpma_bench -- --benchmark_filter=RoundTrip
//   tools/bench/run.sh   (everything, with docs/performance.md's table regenerated)
//
// Every figure is reported with a baseline measured in the same run:
//   BM_Memcpy/<size>           memcpy of the same size between the same
//                              buffers: the bandwidth ceiling;
//   BM_RoundTrip/<size>        rpma_write_with_imm posted, the NIC stepped
//                              once (manual progress, FakeNic::Step), the
//                              responder's RECV_RDMA_WITH_IMM and the
//                              requester's RDMA_WRITE completions polled with
//                              rpma_cq_get_wc, the receive re-posted with
//                              rpma_recv. Counters: ns_per_op, memcpy_ratio
//                              (our GB/s over memcpy's), model_ns and
//                              model_ratio (ns_per_op over the minimal
//                              model's at the same size, measured in this
//                              run; issue 14's target: <= 3 at 64 B);
//   BM_ModelRoundTrip/<size>   the minimal model of the irreducible work of
//                              the same round trip (see `model` below);
//                              BM_ModelRoundTripLocked: the same with one
//                              mutex taken per call;
//   BM_RpmaLayer vs BM_VerbsCalls: the same four calls through the rpma API
//                              and straight to the backend, over a backend
//                              whose data path does nothing;
//   BM_Scaling/<pairs>         the same operation (VerbsBackend level) over
//                              1..10 000 connected QP pairs in turn, with
//                              bytes_per_qp (heap and RSS deltas once every
//                              pair has carried a write; *_idle: right
//                              after connecting) and
//                              vs_one_pair (ns_per_op over the 1-pair run's
//                              earlier in the same process);
//   BM_Threads                 1, 2, 4 threads, each on its own rpma
//                              connection, each driving FakeNic::Step itself
//                              (no progress thread: the figure is the NIC and
//                              its lock, not thread hand-offs).

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <librpma.h>
#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "rpma/harness.h"
#include "tests/connected_qps.h"
#include "verbs_backend/forwarding_backend.h"

namespace rpma_harness {
namespace {

constexpr size_t kMaxSize = size_t{1} << 20;
constexpr uint32_t kImm = 0x1234abcd;
const void* const kWriteCtx = reinterpret_cast<const void*>(0x100);
const void* const kRecvCtx = reinterpret_cast<const void*>(0x200);

// ns_per_op and the memcpy baseline are this thread's CPU time: the
// machines we share are busy, and wall time then measures the neighbours.
struct Clock {
  using time_point = double;  // ns
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 +
           static_cast<double>(ts.tv_nsec);
  }
};

double NsSince(Clock::time_point start) { return Clock::now() - start; }

// A buffer of `size` bytes starting `offset` bytes past a page boundary.
// Every source buffer here is at offset 0 and every destination at 2048, so
// dst - src = 2048 (mod 4096) wherever the copy is: on this machine class
// (AMD EPYC, glibc 2.36) memcpy is 10-20x slower when the destination lies a
// few bytes past the source modulo 4096 (64 KiB: ~24 us instead of ~1.3 us
// with dst - src = 16), and heap vectors land at such distances by chance,
// which made the memcpy baseline -- and every ratio to it -- depend on where
// malloc put two buffers.
class PlacedBuffer {
 public:
  static constexpr size_t kSrcOffset = 0;
  static constexpr size_t kDstOffset = 2048;
  PlacedBuffer(size_t size, size_t offset, char fill)
      : storage_(static_cast<char*>(
            std::aligned_alloc(4096, (size + offset + 4095) / 4096 * 4096))),
        data_(storage_.get() + offset),
        size_(size) {
    std::memset(data_, fill, size_);
  }
  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> storage_;
  char* data_;
  size_t size_;
};

// memcpy of `size` bytes from src to dst, ns per copy (best of 5 runs of
// ~20 ms each), cached per (size, buffers).
double MemcpyNs(void* dst, const void* src, size_t size) {
  static std::mutex mu;
  static std::map<std::pair<size_t, const void*>, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(size, src);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    size_t n = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 64; ++i) {
        std::memcpy(dst, src, size);
        benchmark::ClobberMemory();
      }
      n += 64;
      elapsed = NsSince(start);
    } while (elapsed < 20e6);
    best = std::min(best, elapsed / static_cast<double>(n));
  }
  cache[key] = best;
  return best;
}

// A connected rpma pair (client writes into the server's dst) on one
// process-wide backend, built through the rpma API like a librpma program.
struct RpmaPair {
  PlacedBuffer src{kMaxSize, PlacedBuffer::kSrcOffset, 'x'};
  PlacedBuffer dst{kMaxSize, PlacedBuffer::kDstOffset, 0};
  char recv_buf[64] = {};
  rpma_peer* peer = nullptr;
  rpma_ep* ep = nullptr;
  rpma_conn* client = nullptr;
  rpma_conn* server = nullptr;
  rpma_cq* client_cq = nullptr;
  rpma_cq* server_cq = nullptr;
  rpma_mr_local* src_mr = nullptr;
  rpma_mr_local* dst_mr = nullptr;
  rpma_mr_local* recv_mr = nullptr;
  rpma_mr_remote* remote = nullptr;
  std::string error;

  // REQUIRES: `backend` is installed (ScopedBackend).
  bool Build(const char* addr, const char* port) {
    ibv_context* dev = nullptr;
    rpma_conn_req* req = nullptr;
    rpma_conn_req* server_req = nullptr;
    rpma_conn_event event = RPMA_CONN_UNDEFINED;
    rpma_conn_private_data pdata{};
    uint8_t desc[21];
    if (rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev) ||
        rpma_peer_new(dev, &peer) ||
        rpma_mr_reg(peer, src.data(), src.size(), RPMA_MR_USAGE_WRITE_SRC,
                    &src_mr) ||
        rpma_mr_reg(peer, dst.data(), dst.size(), RPMA_MR_USAGE_WRITE_DST,
                    &dst_mr) ||
        rpma_mr_reg(peer, recv_buf, sizeof(recv_buf), RPMA_MR_USAGE_RECV,
                    &recv_mr) ||
        rpma_ep_listen(peer, addr, port, &ep) ||
        rpma_conn_req_new(peer, addr, port, nullptr, &req) ||
        rpma_conn_req_connect(&req, nullptr, &client) ||
        rpma_ep_next_conn_req(ep, nullptr, &server_req) ||
        rpma_conn_req_recv(server_req, recv_mr, 0, sizeof(recv_buf),
                           kRecvCtx) ||
        rpma_mr_get_descriptor(dst_mr, desc)) {
      error = "set-up failed";
      return false;
    }
    pdata = {desc, sizeof(desc)};
    if (rpma_conn_req_connect(&server_req, &pdata, &server) ||
        rpma_conn_next_event(client, &event) ||
        event != RPMA_CONN_ESTABLISHED ||
        rpma_conn_next_event(server, &event) ||
        event != RPMA_CONN_ESTABLISHED ||
        rpma_conn_get_private_data(client, &pdata) ||
        rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &remote) ||
        rpma_conn_get_cq(client, &client_cq) ||
        rpma_conn_get_cq(server, &server_cq)) {
      error = "connect failed";
      return false;
    }
    return true;
  }

  ~RpmaPair() {
    if (client != nullptr) rpma_conn_disconnect(client);
    rpma_conn_delete(&client);
    rpma_conn_delete(&server);
    rpma_ep_shutdown(&ep);
    rpma_mr_remote_delete(&remote);
    rpma_mr_dereg(&recv_mr);
    rpma_mr_dereg(&dst_mr);
    rpma_mr_dereg(&src_mr);
    rpma_peer_delete(&peer);
  }

  // One round trip; `progress` runs the NIC until `cq` has a completion.
  // Returns false (with `error`) on anything but the expected completions.
  template <typename Progress>
  bool RoundTrip(size_t len, Progress&& progress) {
    if (rpma_write_with_imm(client, remote, 0, src_mr, 0, len,
                            RPMA_F_COMPLETION_ALWAYS, kImm, kWriteCtx) != 0) {
      error = "rpma_write_with_imm failed";
      return false;
    }
    ibv_wc wc;
    if (!Next(server_cq, &wc, progress) || wc.status != IBV_WC_SUCCESS ||
        wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || wc.byte_len != len) {
      error = "bad responder completion";
      return false;
    }
    if (rpma_recv(server, recv_mr, 0, sizeof(recv_buf), kRecvCtx) != 0) {
      error = "rpma_recv failed";
      return false;
    }
    if (!Next(client_cq, &wc, progress) || wc.status != IBV_WC_SUCCESS ||
        wc.opcode != IBV_WC_RDMA_WRITE) {
      error = "bad requester completion";
      return false;
    }
    return true;
  }

  template <typename Progress>
  static bool Next(rpma_cq* cq, ibv_wc* wc, Progress& progress) {
    for (int spins = 0; spins < 1000000; ++spins) {
      const int ret = rpma_cq_get_wc(cq, 1, wc, nullptr);
      if (ret == 0) return true;
      if (ret != RPMA_E_NO_COMPLETION) return false;
      progress();
    }
    return false;
  }
};

void SetRateCounters(benchmark::State& state, size_t bytes, double ns_per_op) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
  state.counters["ns_per_op"] = ns_per_op;
}

// ---- baseline: memcpy -------------------------------------------------------

void BM_Memcpy(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  PlacedBuffer src{kMaxSize, PlacedBuffer::kSrcOffset, 'x'};
  PlacedBuffer dst{kMaxSize, PlacedBuffer::kDstOffset, 0};
  const auto start = Clock::now();
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), size);
    benchmark::ClobberMemory();
  }
  SetRateCounters(state, size,
                  NsSince(start) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_Memcpy)->Arg(64)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);

// ---- baseline: the minimal model of a round trip's irreducible work ---------
//
// What any fake NIC must do for one 64 B write with immediate data, with
// nothing else: the five calls of a round trip (post the write, step the NIC,
// poll the responder's completion, re-post the receive, poll the requester's
// completion) over plain fixed-size ring entries built in place, one MR entry
// found by key and checked per side (the lkey's range and LOCAL access at
// post, the rkey's range and REMOTE_WRITE at execution), the payload copied,
// one receive consumed, two 48-byte ibv_wc written into their CQ rings, both
// rings polled. No handle lookups beyond an index, no hooks, no trace, no
// faults. Each call is an out-of-line function, as an API boundary is.
// `Lock` = std::mutex gives the same work with one mutex taken per call.
namespace model {

struct NoLock {
  void lock() {}
  void unlock() {}
};

struct Mr {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t key = 0;
  int access = 0;
};

struct SendEntry {  // 40 bytes, built in its slot
  uint64_t wr_id;
  uint64_t local_addr;
  uint64_t remote_addr;
  uint32_t length;
  uint32_t rkey;
  uint32_t imm;
  uint32_t flags;
};

struct RecvEntry {
  uint64_t wr_id;
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

template <typename T>
struct Ring {
  static constexpr uint32_t kSlots = 64;
  T slot[kSlots];
  uint32_t head = 0;  // next to consume
  uint32_t tail = 0;  // next to fill
  bool Full() const { return tail - head == kSlots; }
  bool Empty() const { return tail == head; }
  T& Back() { return slot[tail % kSlots]; }
  T& Front() { return slot[head % kSlots]; }
};

template <typename Lock>
struct Nic {
  Lock mu;
  Mr mrs[4];  // found by key & 3, the key compared in full
  Ring<SendEntry> sq;
  Ring<RecvEntry> rq;
  Ring<ibv_wc> send_cq;
  Ring<ibv_wc> recv_cq;
  uint32_t qp_num = 7;

  const Mr* Find(uint32_t key) const {
    const Mr& mr = mrs[key & 3];
    return mr.key == key ? &mr : nullptr;
  }
  static bool Covers(const Mr* mr, uint64_t addr, uint64_t len, int access) {
    return mr != nullptr && (mr->access & access) == access &&
           addr >= mr->addr && len <= mr->length &&
           addr - mr->addr <= mr->length - len;
  }
};

template <typename Lock>
__attribute__((noinline)) int PostSend(Nic<Lock>* nic, const ibv_send_wr* wr) {
  std::lock_guard<Lock> lock(nic->mu);
  if (wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM || wr->num_sge != 1 ||
      nic->sq.Full()) {
    return EINVAL;
  }
  const ibv_sge& sge = wr->sg_list[0];
  if (!Nic<Lock>::Covers(nic->Find(sge.lkey), sge.addr, sge.length,
                         IBV_ACCESS_LOCAL_WRITE)) {
    return EINVAL;
  }
  SendEntry& e = nic->sq.Back();
  e.wr_id = wr->wr_id;
  e.local_addr = sge.addr;
  e.remote_addr = wr->wr.rdma.remote_addr;
  e.length = sge.length;
  e.rkey = wr->wr.rdma.rkey;
  e.imm = wr->imm_data;
  e.flags = wr->send_flags;
  ++nic->sq.tail;
  return 0;
}

template <typename Lock>
__attribute__((noinline)) int PostRecv(Nic<Lock>* nic, const ibv_recv_wr* wr) {
  std::lock_guard<Lock> lock(nic->mu);
  if (wr->num_sge > 1 || nic->rq.Full()) return EINVAL;
  RecvEntry& e = nic->rq.Back();
  e.wr_id = wr->wr_id;
  e.addr = wr->num_sge ? wr->sg_list[0].addr : 0;
  e.length = wr->num_sge ? wr->sg_list[0].length : 0;
  e.lkey = wr->num_sge ? wr->sg_list[0].lkey : 0;
  ++nic->rq.tail;
  return 0;
}

template <typename Lock>
__attribute__((noinline)) void Step(Nic<Lock>* nic) {
  std::lock_guard<Lock> lock(nic->mu);
  if (nic->sq.Empty()) return;
  const SendEntry& e = nic->sq.Front();
  ibv_wc& swc = nic->send_cq.Back();
  std::memset(&swc, 0, sizeof(swc));
  swc.wr_id = e.wr_id;
  swc.opcode = IBV_WC_RDMA_WRITE;
  swc.qp_num = nic->qp_num;
  if (nic->rq.Empty() || nic->recv_cq.Full() || nic->send_cq.Full() ||
      !Nic<Lock>::Covers(nic->Find(e.rkey), e.remote_addr, e.length,
                         IBV_ACCESS_REMOTE_WRITE)) {
    swc.status = IBV_WC_REM_ACCESS_ERR;
  } else {
    std::memcpy(reinterpret_cast<void*>(e.remote_addr),
                reinterpret_cast<const void*>(e.local_addr), e.length);
    const RecvEntry& r = nic->rq.Front();
    ibv_wc& rwc = nic->recv_cq.Back();
    std::memset(&rwc, 0, sizeof(rwc));
    rwc.wr_id = r.wr_id;
    rwc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    rwc.byte_len = e.length;
    rwc.imm_data = e.imm;
    rwc.wc_flags = IBV_WC_WITH_IMM;
    rwc.qp_num = nic->qp_num;
    ++nic->rq.head;
    ++nic->recv_cq.tail;
    swc.status = IBV_WC_SUCCESS;
  }
  ++nic->sq.head;
  ++nic->send_cq.tail;
}

template <typename Lock>
__attribute__((noinline)) int PollCq(Nic<Lock>* nic, Ring<ibv_wc>* cq, int n,
                                     ibv_wc* wc) {
  std::lock_guard<Lock> lock(nic->mu);
  int got = 0;
  while (got < n && !cq->Empty()) {
    wc[got++] = cq->Front();
    ++cq->head;
  }
  return got;
}

}  // namespace model

// One model round trip at `size` bytes per call of Run(); ok() after the
// timing loop says every operation completed and the bytes arrived.
template <typename Lock>
struct ModelRoundTrip {
  PlacedBuffer src{kMaxSize, PlacedBuffer::kSrcOffset, 'x'};
  PlacedBuffer dst{kMaxSize, PlacedBuffer::kDstOffset, 0};
  char recv_buf[64] = {};
  model::Nic<Lock> nic;
  ibv_sge sge{};
  ibv_send_wr wr{};
  ibv_sge rsge{};
  ibv_recv_wr rwr{};
  bool failed = false;

  explicit ModelRoundTrip(size_t size) {
    nic.mrs[1] = {reinterpret_cast<uint64_t>(src.data()), src.size(), 0x101,
                  IBV_ACCESS_LOCAL_WRITE};
    nic.mrs[2] = {reinterpret_cast<uint64_t>(dst.data()), dst.size(), 0x202,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    nic.mrs[3] = {reinterpret_cast<uint64_t>(recv_buf), sizeof(recv_buf), 0x303,
                  IBV_ACCESS_LOCAL_WRITE};
    sge = {reinterpret_cast<uint64_t>(src.data()), static_cast<uint32_t>(size),
           0x101};
    wr.wr_id = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htonl(kImm);
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
    wr.wr.rdma.rkey = 0x202;
    rsge = {reinterpret_cast<uint64_t>(recv_buf), sizeof(recv_buf), 0x303};
    rwr.wr_id = 2;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    failed |= model::PostRecv(&nic, &rwr) != 0;
  }

  void Run() {
    ibv_wc wc;
    failed |= model::PostSend(&nic, &wr) != 0;
    model::Step(&nic);
    failed |= model::PollCq(&nic, &nic.recv_cq, 1, &wc) != 1 ||
              wc.status != IBV_WC_SUCCESS;
    failed |= model::PostRecv(&nic, &rwr) != 0;
    failed |= model::PollCq(&nic, &nic.send_cq, 1, &wc) != 1 ||
              wc.status != IBV_WC_SUCCESS;
  }
  bool ok() const {
    return !failed && std::memcmp(src.data(), dst.data(), sge.length) == 0;
  }
};

// ns per model round trip (best of 5 runs of ~20 ms), cached per size: the
// baseline the fake's round trips are divided by in the same run.
template <typename Lock>
double ModelNs(size_t size) {
  static std::mutex mu;
  static std::map<size_t, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(size);
  if (it != cache.end()) return it->second;
  ModelRoundTrip<Lock> m(size);
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    size_t n = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 64; ++i) m.Run();
      n += 64;
      elapsed = NsSince(start);
    } while (elapsed < 20e6);
    best = std::min(best, elapsed / static_cast<double>(n));
  }
  if (!m.ok()) best = -1;
  cache[size] = best;
  return best;
}

template <typename Lock>
void BM_Model(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  ModelRoundTrip<Lock> m(size);
  const auto start = Clock::now();
  for (auto _ : state) m.Run();
  const double ns = NsSince(start) / static_cast<double>(state.iterations());
  if (!m.ok()) {
    state.SkipWithError("the model lost an operation or the data");
    return;
  }
  SetRateCounters(state, size, ns);
  const double memcpy_ns = MemcpyNs(m.dst.data(), m.src.data(), size);
  state.counters["memcpy_ns"] = memcpy_ns;
  state.counters["memcpy_ratio"] = memcpy_ns / ns;
}
void BM_ModelRoundTrip(benchmark::State& state) {
  BM_Model<model::NoLock>(state);
}
void BM_ModelRoundTripLocked(benchmark::State& state) {
  BM_Model<std::mutex>(state);
}
BENCHMARK(BM_ModelRoundTrip)->Arg(64)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(BM_ModelRoundTripLocked)->Arg(64);

// ---- the full round trip on the fake NIC through the rpma API ---------------

// One fake NIC in manual progress mode and one rpma pair on it, shared by
// every BM_RoundTrip run (built once).
struct RoundTripWorld {
  std::shared_ptr<FakeNic> nic = std::make_shared<FakeNic>();
  RpmaPair pair;
  bool ok = false;
  RoundTripWorld() {
    ScopedBackend use(nic);
    ok = pair.Build("10.1.0.1", "7301");
  }
  static RoundTripWorld& Get() {
    static RoundTripWorld* world = new RoundTripWorld();
    return *world;
  }
};

void BM_RoundTrip(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  RoundTripWorld& world = RoundTripWorld::Get();
  if (!world.ok) {
    state.SkipWithError(world.pair.error.c_str());
    return;
  }
  FakeNic* nic = world.nic.get();
  auto step = [nic] { nic->Step(); };
  const auto start = Clock::now();
  for (auto _ : state) {
    if (!world.pair.RoundTrip(size, step)) {
      state.SkipWithError(world.pair.error.c_str());
      return;
    }
  }
  const double ns = NsSince(start) / static_cast<double>(state.iterations());
  SetRateCounters(state, size, ns);
  const double memcpy_ns =
      MemcpyNs(world.pair.dst.data(), world.pair.src.data(), size);
  state.counters["memcpy_ns"] = memcpy_ns;
  state.counters["memcpy_ratio"] = memcpy_ns / ns;
  // The model's round trip at the same size, measured in this run: the
  // figure the fake is judged by (issue 14: <= 3x at 64 B).
  const double model_ns = ModelNs<model::NoLock>(size);
  state.counters["model_ns"] = model_ns;
  state.counters["model_ratio"] = ns / model_ns;
  if (std::memcmp(world.pair.dst.data(), world.pair.src.data(), size) != 0) {
    state.SkipWithError("the data did not arrive");
  }
}
BENCHMARK(BM_RoundTrip)->Arg(64)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);

// ---- the rpma layer alone ---------------------------------------------------

// Connections go through the fake NIC; the data path returns at once, and a
// poll hands back one canned success completion.
class NullDataPath : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  int PostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) override { return 0; }
  int PostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) override { return 0; }
  int PollCq(ibv_cq*, int, ibv_wc* wc) override {
    *wc = wc_;
    return 1;
  }
  void set_next_wc(const ibv_wc& wc) { wc_ = wc; }

 private:
  ibv_wc wc_{};
};

struct NullWorld {
  std::shared_ptr<FakeNic> nic = std::make_shared<FakeNic>();
  std::shared_ptr<NullDataPath> backend = std::make_shared<NullDataPath>(nic);
  RpmaPair pair;
  bool ok = false;
  NullWorld() {
    ScopedBackend use(backend);
    ok = pair.Build("10.2.0.1", "7302");
  }
  static NullWorld& Get() {
    static NullWorld* world = new NullWorld();
    return *world;
  }
};

// The four rpma calls of a round trip (write_with_imm, get_wc, recv, get_wc).
void BM_RpmaLayer(benchmark::State& state) {
  NullWorld& world = NullWorld::Get();
  if (!world.ok) {
    state.SkipWithError(world.pair.error.c_str());
    return;
  }
  RpmaPair& p = world.pair;
  ibv_wc wc;
  std::memset(&wc, 0, sizeof(wc));
  world.backend->set_next_wc(wc);
  const auto start = Clock::now();
  for (auto _ : state) {
    int ret = rpma_write_with_imm(p.client, p.remote, 0, p.src_mr, 0, 64,
                                  RPMA_F_COMPLETION_ALWAYS, kImm, kWriteCtx);
    ret |= rpma_cq_get_wc(p.server_cq, 1, &wc, nullptr);
    ret |= rpma_recv(p.server, p.recv_mr, 0, sizeof(p.recv_buf), kRecvCtx);
    ret |= rpma_cq_get_wc(p.client_cq, 1, &wc, nullptr);
    if (ret != 0) {
      state.SkipWithError("an rpma call failed");
      return;
    }
  }
  SetRateCounters(state, 64,
                  NsSince(start) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_RpmaLayer);

// The baseline: the same four verbs calls made directly on the backend (a
// virtual call each), with WRs built once.
void BM_VerbsCalls(benchmark::State& state) {
  NullWorld& world = NullWorld::Get();
  if (!world.ok) {
    state.SkipWithError(world.pair.error.c_str());
    return;
  }
  RpmaPair& p = world.pair;
  // Through an opaque base pointer, as the rpma layer holds it, so the
  // compiler cannot resolve (and inline) the virtual calls.
  VerbsBackend* backend = world.backend.get();
  benchmark::DoNotOptimize(backend);
  // The null data path ignores the QP and CQ; the calls are what is timed.
  ibv_qp* client_qp = nullptr;
  ibv_qp* server_qp = nullptr;
  // Build the same WRs rpma builds.
  ibv_sge sge{reinterpret_cast<uint64_t>(p.src.data()), 64, 0};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(kImm);
  ibv_sge rsge{reinterpret_cast<uint64_t>(p.recv_buf), 64, 0};
  ibv_recv_wr rwr;
  std::memset(&rwr, 0, sizeof(rwr));
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_wc wc;
  ibv_send_wr* bad = nullptr;
  ibv_recv_wr* rbad = nullptr;
  ibv_cq* cq = nullptr;
  const auto start = Clock::now();
  for (auto _ : state) {
    int ret = backend->PostSend(client_qp, &wr, &bad);
    ret += backend->PollCq(cq, 1, &wc) - 1;
    ret |= backend->PostRecv(server_qp, &rwr, &rbad);
    ret += backend->PollCq(cq, 1, &wc) - 1;
    benchmark::DoNotOptimize(ret);
  }
  SetRateCounters(state, 64,
                  NsSince(start) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_VerbsCalls);

// ---- scaling with the number of connected QPs -------------------------------

struct MemorySample {
  size_t heap = 0;  // bytes in use by malloc
  size_t rss = 0;
};

MemorySample SampleMemory() {
  MemorySample s;
  struct mallinfo2 info = mallinfo2();
  s.heap = info.uordblks + info.hblkhd;
  long pages = 0, resident = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  s.rss = static_cast<size_t>(resident) * static_cast<size_t>(getpagesize());
  return s;
}

// N QP pairs on one fake NIC whose caps allow them, each with its own CQs
// (as an rpma connection has), one receive posted on every server QP.
struct ScalingWorld {
  std::unique_ptr<FakeNic> nic;
  std::unique_ptr<ConnectedQps> fabric;
  PlacedBuffer src{4096, PlacedBuffer::kSrcOffset, 'y'};
  PlacedBuffer dst{4096, PlacedBuffer::kDstOffset, 0};
  ibv_mr* src_mr = nullptr;
  ibv_mr* dst_mr = nullptr;
  size_t pairs = 0;
  // The handles each operation names, one dense entry per pair: the walk
  // reads 32 contiguous bytes per operation instead of chasing a heap
  // QpPair (which was a fifth of the 10 000-pair figure and measured the
  // benchmark, not the NIC); the NIC calls made are the same.
  struct Handles {
    ibv_qp* client_qp;
    ibv_cq* client_cq;
    ibv_qp* server_qp;
    ibv_cq* server_cq;
  };
  std::vector<Handles> handles;
  // Heap and RSS growth per QP: right after connecting (`idle`), and after
  // every pair has carried one write and re-posted its receive (`in use`:
  // the rings a QP and its CQ allocate when first used are counted).
  double heap_per_qp = 0;
  double rss_per_qp = 0;
  double heap_per_qp_idle = 0;
  double rss_per_qp_idle = 0;
  std::string error;

  explicit ScalingWorld(size_t n) : pairs(n) {
    FakeNicConfig config;
    config.caps = FakeDeviceCaps();
    config.caps->max_qp = static_cast<int>(2 * n + 16);
    config.caps->max_cq = static_cast<int>(2 * n + 16);
    nic = std::make_unique<FakeNic>(config);
    fabric = std::make_unique<ConnectedQps>(nic.get(), "10.3.0.1", "7303");
    src_mr = fabric->RegMr(fabric->client_pd(), src.data(), src.size(),
                           IBV_ACCESS_LOCAL_WRITE);
    dst_mr = fabric->RegMr(fabric->server_pd(), dst.data(), dst.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    const MemorySample before = SampleMemory();
    QpPairOptions options;
    options.cq_depth = 16;
    for (size_t i = 0; i < n; ++i) {
      if (fabric->Connect(options) == nullptr) {
        error = fabric->error();
        return;
      }
    }
    const MemorySample idle = SampleMemory();
    heap_per_qp_idle = static_cast<double>(idle.heap - before.heap) / (2.0 * n);
    rss_per_qp_idle = static_cast<double>(idle.rss - before.rss) / (2.0 * n);
    handles.reserve(n);
    for (auto& pair : fabric->pairs()) {
      handles.push_back(
          {pair->client.qp, pair->client.cq, pair->server.qp, pair->server.cq});
      if (PostRecv(pair->server.qp) != 0) {
        error = "PostRecv failed";
        return;
      }
    }
    for (const Handles& h : handles) {
      if (RoundTrip(h) != 0) {
        error = "the warm-up round trip failed";
        return;
      }
    }
    const MemorySample used = SampleMemory();
    heap_per_qp = static_cast<double>(used.heap - before.heap) / (2.0 * n);
    rss_per_qp = static_cast<double>(used.rss - before.rss) / (2.0 * n);
  }

  // One 64 B write with immediate on a pair, both completions polled, the
  // receive re-posted; non-zero if any call failed.
  int RoundTrip(const Handles& h) {
    ibv_sge sge{reinterpret_cast<uint64_t>(src.data()), 64, src_mr->lkey};
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htonl(kImm);
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
    wr.wr.rdma.rkey = dst_mr->rkey;
    return RoundTrip(h, &wr);
  }
  int RoundTrip(const Handles& h, ibv_send_wr* wr) {
    ibv_send_wr* bad = nullptr;
    ibv_wc wc;
    int ret = nic->PostSend(h.client_qp, wr, &bad);
    nic->Step();
    ret |= nic->PollCq(h.server_cq, 1, &wc) != 1 || wc.status != IBV_WC_SUCCESS;
    ret |= PostRecv(h.server_qp);
    ret |= nic->PollCq(h.client_cq, 1, &wc) != 1 || wc.status != IBV_WC_SUCCESS;
    return ret;
  }

  int PostRecv(ibv_qp* qp) {
    ibv_recv_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = 2;
    ibv_recv_wr* bad = nullptr;
    return nic->PostRecv(qp, &wr, &bad);
  }
};

// range(0): connected pairs; range(1): how many of them the operations go
// to (all, or the first 16: the same NIC work with a small working set, which
// separates the cost of many QPs from the cost of their memory).
void BM_Scaling(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const size_t active = std::min(n, static_cast<size_t>(state.range(1)));
  static std::unique_ptr<ScalingWorld> world;
  if (world == nullptr || world->pairs != n) {
    world.reset();
    world = std::make_unique<ScalingWorld>(n);
  }
  if (!world->error.empty()) {
    state.SkipWithError(world->error.c_str());
    return;
  }
  const auto& handles = world->handles;
  ibv_sge sge{reinterpret_cast<uint64_t>(world->src.data()), 64,
              world->src_mr->lkey};
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof(wr));
  wr.wr_id = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(kImm);
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(world->dst.data());
  wr.wr.rdma.rkey = world->dst_mr->rkey;
  size_t next = 0;
  const auto start = Clock::now();
  for (auto _ : state) {
    // Pairs in turn, with a stride so consecutive ops hit far-apart QPs.
    next = (next + 7919) % active;
    if (world->RoundTrip(handles[next], &wr) != 0) {
      state.SkipWithError("a verbs call failed");
      return;
    }
  }
  const double ns = NsSince(start) / static_cast<double>(state.iterations());
  SetRateCounters(state, 64, ns);
  // The baseline: one pair, measured earlier in this run (Args {1, 1} run
  // first unless a filter leaves them out).
  static double one_pair_ns = 0;
  if (n == 1 && active == 1) one_pair_ns = ns;
  if (one_pair_ns > 0) state.counters["vs_one_pair"] = ns / one_pair_ns;
  state.counters["heap_bytes_per_qp"] = world->heap_per_qp;
  state.counters["rss_bytes_per_qp"] = world->rss_per_qp;
  state.counters["heap_bytes_per_qp_idle"] = world->heap_per_qp_idle;
  state.counters["rss_bytes_per_qp_idle"] = world->rss_per_qp_idle;
}
BENCHMARK(BM_Scaling)
    ->ArgNames({"pairs", "active"})
    ->Args({1, 1})
    ->Args({10, 10})
    ->Args({100, 100})
    ->Args({1000, 1000})
    ->Args({10000, 10000})
    ->Args({10000, 16});

// ---- threads, each on its own connection ------------------------------------

struct ThreadsWorld {
  static constexpr int kMaxThreads = 4;
  std::shared_ptr<FakeNic> nic = std::make_shared<FakeNic>();
  RpmaPair pairs[kMaxThreads];
  bool ok = true;
  std::string error;
  ThreadsWorld() {
    ScopedBackend use(nic);
    for (int i = 0; i < kMaxThreads; ++i) {
      const std::string port = std::to_string(7310 + i);
      if (!pairs[i].Build("10.4.0.1", port.c_str())) {
        ok = false;
        error = pairs[i].error;
        return;
      }
    }
  }
  static ThreadsWorld& Get() {
    static ThreadsWorld* world = new ThreadsWorld();  // thread-safe init
    return *world;
  }
};

void BM_Threads(benchmark::State& state) {
  ThreadsWorld& world = ThreadsWorld::Get();
  if (!world.ok) {
    state.SkipWithError(world.error.c_str());
    return;
  }
  RpmaPair& pair = world.pairs[state.thread_index()];
  FakeNic* nic = world.nic.get();
  auto step = [nic] { nic->Step(); };
  for (auto _ : state) {
    if (!pair.RoundTrip(64, step)) {
      state.SkipWithError(pair.error.c_str());
      return;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 64);
}
BENCHMARK(BM_Threads)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace rpma_harness

BENCHMARK_MAIN();
