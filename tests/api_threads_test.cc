// api_threads_test.cc: the librpma C API from several threads at once, on
// the fake NIC with background progress (the data-path cases under both
// the Spec and the Rxe personality). What is checked is what librpma's
// THREAD_SAFETY.md (1.3) lets a program rely on, and the misuse the verbs
// underneath still define:
//
//   - "many threads may use the same peer to create separate connections"
//     (rule 1), one thread per endpoint and per connection (rules 2 and 3):
//     8 client threads on one shared peer, a server thread on one ep that
//     hands each accepted connection to a worker thread
//     (EightThreadsShareOnePeerEachWithItsOwnConnection);
//   - the calls THREAD_SAFETY.md lists as thread-safe -- rpma_mr_reg/dereg
//     and the MR descriptors, rpma_conn_cfg_* and rpma_peer_cfg_*
//     new/delete and their descriptors -- racing on one peer, every getter
//     giving back what was set (ThreadSafeCallsRaceOnOnePeer);
//   - rule 3 broken where the verbs still define the outcome: librpma's
//     posting and polling calls are one ibv_post_send / ibv_poll_cq each,
//     and those are thread-safe (ibv_post_send(3), ibv_poll_cq(3); the
//     "Relationship of libibverbs and librdmacm" page): two threads posting
//     writes with imm on one connection while two poll its CQ see every
//     completion exactly once and every byte land
//     (TwoThreadsPostOnOneConnAndTwoPollItsCq);
//   - rpma_mr_dereg racing the NIC's use of the MR: a thread deregisters a
//     local MR while another keeps posting writes from it and the NIC still
//     holds some of them. rpma_write reads the rpma_mr_local it is given
//     (librpma 1.3 mr.c: src->ibv_mr->lkey), so a call made with the
//     pointer after rpma_mr_dereg freed it is a use-after-free in librpma
//     as here, which no man page can define: the two calls are kept apart
//     by a lock, and what races is the deregistration against the WRs in
//     flight. Each post returns 0 or a code of rpma_write(3); each WR
//     completes exactly once: the ones executed before the deregistration
//     succeed, the next one fails with a local error (LOC_PROT_ERR; on rxe
//     LOC_QP_OP_ERR, its lookup_mr failing with -EINVAL), the rest flush;
//     the NIC reads no source byte after the deregistration and writes
//     nothing outside the registered destination
//     (DeregRacesWritesInFlightFromTheMr);
//   - a thread blocked in rpma_cq_wait or rpma_conn_next_event while
//     another thread disconnects that connection, or the peer does, returns
//     within 10 s (the test exits rather than hang): rdma_disconnect moves
//     the QP to ERR (librdmacm ucma_modify_qp_err), which flushes what it
//     holds (ibv_poll_cq(3) IBV_WC_WR_FLUSH_ERR), and the CM reports
//     RDMA_CM_EVENT_DISCONNECTED, RPMA_CONN_CLOSED (rpma_conn_next_event(3)).
//     A CQ waiter with nothing outstanding is not woken by a disconnect on
//     rdma-core either (no completion, no CQ event) and is not tested.
// After each case every rpma object is deleted and the NIC holds nothing.
//
// The default run takes about half a second (1.5 s under TSan).
// RPMA_HARNESS_STRESS_OPS=N (the variable of //tests:concurrency_test,
// whose default is 10 000) multiplies the rounds of the first four cases
// by N / 10 000; CI's TSan stage passes 200 000 (about 20 s).
//
// Tagged `concurrency`: .ci/run also runs it under TSan.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <librpma.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "nic/nic_tap.h"
#include "rpma/harness.h"
#include "tests/guarded_buffer.h"
#include "tests/stress_ops.h"

namespace rpma_harness {
namespace {

constexpr char kAddr[] = "192.168.0.9";
constexpr int kThreads = 8;
// How long a thread may stay blocked after what must wake it, and how long
// a polling loop waits for completions that must come.
constexpr std::chrono::seconds kHangBound{10};

// RPMA_HARNESS_STRESS_OPS=N (documented at //tests:concurrency_test): the
// rounds of every case times N / 10 000 (at least 1).
int Scale() {
  static const int scale =
      static_cast<int>(std::max<uint64_t>(1, StressOps(10000) / 10000));
  return scale;
}

std::string NextPort() {
  static std::atomic<int> port{7600};
  return std::to_string(port++);
}

uint8_t Pattern(uint32_t a, uint32_t b, size_t i) {
  return static_cast<uint8_t>(a * 31 + b * 7 + i * 13 + (i >> 8) + 1);
}

// FNV-1a.
uint64_t Checksum(const uint8_t* bytes, size_t n) {
  uint64_t sum = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) sum = (sum ^ bytes[i]) * 0x100000001b3ULL;
  return sum;
}

void NewPeer(rpma_util_ibv_context_type type, rpma_peer** peer) {
  ibv_context* dev = nullptr;
  ASSERT_EQ(rpma_utils_get_ibv_context(kAddr, type, &dev), 0);
  ASSERT_EQ(rpma_peer_new(dev, peer), 0);
}

// Waits until `fd` (a CQ's or an endpoint's) is readable; false after
// kHangBound, so that a thread whose partner failed does not wait for ever.
bool Readable(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  int ready = 0;
  do {
    ready = poll(&pfd, 1, static_cast<int>(kHangBound.count() * 1000));
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

// The next completion of `cq`: polled, and between polls rpma_cq_wait.
// `bounded`: only once the CQ's fd is readable (rpma_cq_get_fd(3)), and
// none for kHangBound fails (status IBV_WC_GENERAL_ERR); otherwise blocking
// in rpma_cq_wait unbounded, as a program would (the case under test is
// that something wakes it).
ibv_wc NextWc(rpma_cq* cq, bool bounded) {
  ibv_wc wc{};
  int got = 0;
  while (rpma_cq_get_wc(cq, 1, &wc, &got) == RPMA_E_NO_COMPLETION) {
    int ret = 0;
    if (bounded) {
      int fd = -1;
      ret = rpma_cq_get_fd(cq, &fd);
      if (ret == 0 && !Readable(fd)) {
        ADD_FAILURE() << "no completion for " << kHangBound.count() << " s";
        ret = RPMA_E_UNKNOWN;
      }
    }
    if (ret == 0) ret = rpma_cq_wait(cq);
    if (ret != 0) {
      ADD_FAILURE() << "waiting for a completion: " << rpma_err_2str(ret);
      wc.status = IBV_WC_GENERAL_ERR;
      return wc;
    }
  }
  return wc;
}
ibv_wc WaitWc(rpma_cq* cq) { return NextWc(cq, /*bounded=*/true); }
ibv_wc BlockInCqWait(rpma_cq* cq) { return NextWc(cq, /*bounded=*/false); }

// A server poll's result: the receive of a write with imm; anything else
// fails the test.
bool ImmArrived(int ret, const ibv_wc& wc) {
  if (ret == 0 && wc.status == IBV_WC_SUCCESS &&
      wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    return true;
  }
  ADD_FAILURE() << "server: ret " << ret << " status "
                << ibv_wc_status_str(wc.status) << " opcode " << wc.opcode;
  return false;
}

// rpma_conn_next_event in the calling thread.
rpma_conn_event RawNextEvent(rpma_conn* conn) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  const int ret = rpma_conn_next_event(conn, &event);
  EXPECT_EQ(ret, 0) << rpma_err_2str(ret);
  return event;
}

// Nothing more completes on `cq`: every completion was taken exactly once.
void ExpectCqEmpty(rpma_cq* cq, const char* whose) {
  ibv_wc wc{};
  int got = 0;
  const int ret = rpma_cq_get_wc(cq, 1, &wc, &got);
  EXPECT_EQ(ret, RPMA_E_NO_COMPLETION)
      << whose << ": an extra completion, status "
      << ibv_wc_status_str(wc.status) << " opcode " << wc.opcode << " wr_id "
      << wc.wr_id;
}

// A thread blocked in the call `what` must have returned by kHangBound
// after what wakes it. One that has not is a hang: the test fails and the
// process exits (a joined std::async would block for ever).
template <typename T>
T ReturnsWithinBound(std::future<T>* blocked, const char* what) {
  if (blocked->wait_for(kHangBound) != std::future_status::ready) {
    ADD_FAILURE() << "a thread blocked in " << what << " did not return within "
                  << kHangBound.count() << " s; exiting instead of hanging";
    std::fflush(stdout);
    std::_Exit(1);
  }
  return blocked->get();
}

// The connection's next CM event; one that never comes fails the test
// (ReturnsWithinBound) instead of hanging it.
rpma_conn_event NextEvent(rpma_conn* conn) {
  auto call =
      std::async(std::launch::async, [conn] { return RawNextEvent(conn); });
  return ReturnsWithinBound(&call, "rpma_conn_next_event");
}

// A polling loop's watchdog: Stalled() once `counter` has not moved for
// kHangBound (completions that must come did not).
class StallWatch {
 public:
  explicit StallWatch(const std::atomic<int>& counter)
      : counter_(counter),
        last_(counter.load()),
        since_(std::chrono::steady_clock::now()) {}
  bool Stalled() {
    const int now = counter_.load();
    if (now != last_) {
      last_ = now;
      since_ = std::chrono::steady_clock::now();
      return false;
    }
    return std::chrono::steady_clock::now() - since_ > kHangBound;
  }

 private:
  const std::atomic<int>& counter_;
  int last_;
  std::chrono::steady_clock::time_point since_;
};

// A fresh fake NIC with background progress per test, installed as the
// rpma layer's backend; at the end it must hold nothing.
class FakeNicFixture : public ::testing::Test {
 protected:
  void StartNic(Personality personality) {
    FakeNicConfig config;
    config.personality = std::move(personality);
    nic_ = std::make_shared<FakeNic>(config);
    nic_->StartBackgroundProgress();
    scoped_ = std::make_unique<ScopedBackend>(nic_);
  }
  void TearDown() override {
    scoped_.reset();
    nic_->StopBackgroundProgress();
    // Every rpma object was deleted: the NIC holds nothing (CM events a
    // program never took, of deleted ids, are dropped with them).
    const FakeNic::Holdings left = nic_->CurrentHoldings();
    EXPECT_TRUE(left.Empty())
        << "left: pds " << left.pds << " mrs " << left.mrs << " cqs "
        << left.cqs << " qps " << left.qps << " cm_ids " << left.cm_ids
        << " cm_events " << left.cm_events << " cm_work " << left.cm_work
        << " event_channels " << left.event_channels;
  }
  std::shared_ptr<FakeNic> nic_;
  std::unique_ptr<ScopedBackend> scoped_;
};

// The cases with a data path run under each personality whose RC data path
// they can use (siw has no immediate data).
struct PersonalityCase {
  const char* name;
  Personality (*make)();
};

class ApiThreadsTest : public FakeNicFixture,
                       public ::testing::WithParamInterface<PersonalityCase> {
 protected:
  void SetUp() override { StartNic(GetParam().make()); }
};

// Calls without a data path: the personality does not matter.
class ApiThreadsControlPathTest : public FakeNicFixture {
 protected:
  void SetUp() override { StartNic(Personality::Spec()); }
};

// ---- 8 connections on one shared peer ---------------------------------------

constexpr size_t kSlot = 4096;  // payload bytes; the last 8 are a checksum

// The payload client `thread` writes in `round`.
void FillPayload(uint32_t thread, uint32_t round, uint8_t* out) {
  for (size_t i = 0; i < kSlot - 8; ++i) out[i] = Pattern(thread, round, i);
  const uint64_t sum = Checksum(out, kSlot - 8);
  std::memcpy(out + kSlot - 8, &sum, 8);
}

// A server of kThreads connections on one endpoint, one worker thread per
// connection; region slot t is written by client t, answer slot i is sent
// on connection i.
struct Server {
  int rounds = 0;
  rpma_peer* peer = nullptr;
  rpma_ep* ep = nullptr;
  std::vector<uint8_t> region = std::vector<uint8_t>(kThreads * kSlot);
  std::vector<uint8_t> recvs = std::vector<uint8_t>(kThreads * 8);
  std::vector<uint64_t> answers = std::vector<uint64_t>(kThreads);
  rpma_mr_local* region_mr = nullptr;
  rpma_mr_local* recv_mr = nullptr;
  rpma_mr_local* answer_mr = nullptr;
  std::vector<char> descriptor;
};

// One server connection's life: each write with imm (thread << 16 | round)
// is checked byte by byte and against its checksum, and answered with an
// 8-byte send of the checksum the server computed. The receive for the
// next round is posted before the answer; none after the last.
void ServeConnection(Server* s, rpma_conn* conn, int index) {
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
  uint32_t client = kThreads;  // learnt from the first imm
  int answered = 0;            // send completions taken
  for (int round = 0; round < s->rounds; ++round) {
    ibv_wc wc = WaitWc(cq);
    while (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND) {
      ++answered;  // the previous answer's, after the client's next write
      wc = WaitWc(cq);
    }
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    ASSERT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    ASSERT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    const uint32_t imm = ntohl(wc.imm_data);
    const uint32_t thread = imm >> 16, r = imm & 0xffff;
    ASSERT_LT(thread, static_cast<uint32_t>(kThreads));
    if (round == 0) client = thread;
    ASSERT_EQ(thread, client) << "another client's imm on this connection";
    ASSERT_EQ(r, static_cast<uint32_t>(round)) << "rounds out of order";
    const uint8_t* slot = s->region.data() + thread * kSlot;
    for (size_t i = 0; i < kSlot - 8; ++i) {
      ASSERT_EQ(slot[i], Pattern(thread, r, i))
          << "thread " << thread << " round " << r << " byte " << i;
    }
    const uint64_t sum = Checksum(slot, kSlot - 8);
    uint64_t carried = 0;
    std::memcpy(&carried, slot + kSlot - 8, 8);
    ASSERT_EQ(sum, carried) << "thread " << thread << " round " << r;
    // The answer slot is rewritten only after the previous answer's
    // completion (ibv_post_send(3): the buffer is the NIC's until then).
    while (answered < round) {
      const ibv_wc sent = WaitWc(cq);
      ASSERT_EQ(sent.status, IBV_WC_SUCCESS);
      ASSERT_EQ(sent.opcode, IBV_WC_SEND);
      ++answered;
    }
    s->answers[index] = sum;
    if (round + 1 < s->rounds) {
      ASSERT_EQ(rpma_recv(conn, s->recv_mr, index * 8, 8, nullptr), 0);
    }
    ASSERT_EQ(rpma_send(conn, s->answer_mr, index * 8, 8,
                        RPMA_F_COMPLETION_ALWAYS, nullptr),
              0);
  }
  while (answered < s->rounds) {
    const ibv_wc sent = WaitWc(cq);
    ASSERT_EQ(sent.status, IBV_WC_SUCCESS);
    ASSERT_EQ(sent.opcode, IBV_WC_SEND);
    ++answered;
  }
  EXPECT_EQ(NextEvent(conn), RPMA_CONN_CLOSED);
  // Nothing was outstanding: the disconnect flushed nothing.
  ExpectCqEmpty(cq, "server");
  EXPECT_EQ(rpma_conn_disconnect(conn), 0);
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
}

// One client thread on the shared peer: its own MRs and connection.
void RunClient(rpma_peer* peer, const std::string& port, uint32_t thread,
               int rounds) {
  std::vector<uint8_t> src(kSlot);
  uint64_t answer = 0;
  rpma_mr_local* src_mr = nullptr;
  rpma_mr_local* answer_mr = nullptr;
  ASSERT_EQ(
      rpma_mr_reg(peer, src.data(), kSlot, RPMA_MR_USAGE_WRITE_SRC, &src_mr),
      0);
  ASSERT_EQ(rpma_mr_reg(peer, &answer, 8, RPMA_MR_USAGE_RECV, &answer_mr), 0);
  rpma_conn_req* req = nullptr;
  rpma_conn* conn = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer, kAddr, port.c_str(), nullptr, &req), 0);
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &conn), 0);
  ASSERT_EQ(NextEvent(conn), RPMA_CONN_ESTABLISHED);
  rpma_conn_private_data pd{};
  ASSERT_EQ(rpma_conn_get_private_data(conn, &pd), 0);
  rpma_mr_remote* remote = nullptr;
  ASSERT_EQ(rpma_mr_remote_from_descriptor(pd.ptr, pd.len, &remote), 0);
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
  for (uint32_t round = 0; round < static_cast<uint32_t>(rounds); ++round) {
    FillPayload(thread, round, src.data());
    uint64_t sum = 0;
    std::memcpy(&sum, src.data() + kSlot - 8, 8);
    answer = 0;
    ASSERT_EQ(rpma_recv(conn, answer_mr, 0, 8,
                        reinterpret_cast<const void*>(uintptr_t{2})),
              0);
    ASSERT_EQ(
        rpma_write_with_imm(conn, remote, thread * kSlot, src_mr, 0, kSlot,
                            RPMA_F_COMPLETION_ALWAYS, thread << 16 | round,
                            reinterpret_cast<const void*>(uintptr_t{1})),
        0);
    // The write's completion and the answer, either way round, each once.
    int wrote = 0, answered = 0;
    while (wrote + answered < 2) {
      const ibv_wc wc = WaitWc(cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      if (wc.opcode == IBV_WC_RDMA_WRITE) {
        ASSERT_EQ(wc.wr_id, 1u);
        ++wrote;
      } else {
        ASSERT_EQ(wc.opcode, IBV_WC_RECV);
        ASSERT_EQ(wc.wr_id, 2u);
        ASSERT_EQ(wc.byte_len, 8u);
        ++answered;
      }
    }
    ASSERT_EQ(wrote, 1);
    ASSERT_EQ(answered, 1);
    // The server computed the same checksum from the bytes it received.
    ASSERT_EQ(answer, sum) << "thread " << thread << " round " << round;
  }
  ExpectCqEmpty(cq, "client");
  EXPECT_EQ(rpma_conn_disconnect(conn), 0);
  EXPECT_EQ(NextEvent(conn), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
  EXPECT_EQ(rpma_mr_remote_delete(&remote), 0);
  EXPECT_EQ(rpma_mr_dereg(&answer_mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
}

TEST_P(ApiThreadsTest, EightThreadsShareOnePeerEachWithItsOwnConnection) {
  const std::string port = NextPort();
  Server s;
  s.rounds = 50 * Scale();
  ASSERT_LT(s.rounds, 1 << 16);  // the imm's round field
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_LOCAL, &s.peer));
  ASSERT_EQ(rpma_mr_reg(s.peer, s.region.data(), s.region.size(),
                        RPMA_MR_USAGE_WRITE_DST, &s.region_mr),
            0);
  ASSERT_EQ(rpma_mr_reg(s.peer, s.recvs.data(), s.recvs.size(),
                        RPMA_MR_USAGE_RECV, &s.recv_mr),
            0);
  ASSERT_EQ(rpma_mr_reg(s.peer, s.answers.data(), s.answers.size() * 8,
                        RPMA_MR_USAGE_SEND, &s.answer_mr),
            0);
  size_t desc_size = 0;
  ASSERT_EQ(rpma_mr_get_descriptor_size(s.region_mr, &desc_size), 0);
  s.descriptor.resize(desc_size);
  ASSERT_EQ(rpma_mr_get_descriptor(s.region_mr, s.descriptor.data()), 0);
  ASSERT_EQ(rpma_ep_listen(s.peer, kAddr, port.c_str(), &s.ep), 0);

  // One peer for all clients (rule 1).
  rpma_peer* client_peer = nullptr;
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_REMOTE, &client_peer));
  std::vector<std::thread> clients;
  for (uint32_t t = 0; t < kThreads; ++t) {
    clients.emplace_back(RunClient, client_peer, port, t, s.rounds);
  }
  // One thread on the endpoint (rule 2), a worker per connection (rule 3).
  std::vector<std::thread> workers;
  rpma_conn_private_data pdata{s.descriptor.data(),
                               static_cast<uint8_t>(desc_size)};
  for (int i = 0; i < kThreads; ++i) {
    int ep_fd = -1;
    ASSERT_EQ(rpma_ep_get_fd(s.ep, &ep_fd), 0);
    ASSERT_TRUE(Readable(ep_fd))
        << "no connection request for " << kHangBound.count() << " s";
    rpma_conn_req* req = nullptr;
    ASSERT_EQ(rpma_ep_next_conn_req(s.ep, nullptr, &req), 0);
    ASSERT_EQ(rpma_conn_req_recv(req, s.recv_mr, i * 8, 8, nullptr), 0);
    rpma_conn* conn = nullptr;
    ASSERT_EQ(rpma_conn_req_connect(&req, &pdata, &conn), 0);
    ASSERT_EQ(NextEvent(conn), RPMA_CONN_ESTABLISHED);
    workers.emplace_back(ServeConnection, &s, conn, i);
  }
  for (std::thread& t : clients) t.join();
  for (std::thread& t : workers) t.join();
  // Each client's last payload is in its slot.
  for (uint32_t t = 0; t < kThreads; ++t) {
    std::vector<uint8_t> last(kSlot);
    FillPayload(t, s.rounds - 1, last.data());
    EXPECT_TRUE(
        std::equal(last.begin(), last.end(), s.region.begin() + t * kSlot))
        << "slot " << t;
  }
  EXPECT_EQ(rpma_ep_shutdown(&s.ep), 0);
  EXPECT_EQ(rpma_mr_dereg(&s.answer_mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&s.recv_mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&s.region_mr), 0);
  EXPECT_EQ(rpma_peer_delete(&client_peer), 0);
  EXPECT_EQ(rpma_peer_delete(&s.peer), 0);
}

// ---- the thread-safe calls racing -------------------------------------------

TEST_F(ApiThreadsControlPathTest, ThreadSafeCallsRaceOnOnePeer) {
  rpma_peer* peer = nullptr;
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer));
  const uint32_t iterations = 100 * Scale();
  // Every thread also registers parts of one shared buffer: registrations
  // of overlapping memory are independent (ibv_reg_mr(3)).
  std::vector<uint8_t> shared(64 * 1024);
  auto churn = [peer, iterations, &shared](uint32_t thread) {
    std::vector<uint8_t> own(64 * 1024);
    for (uint32_t i = 0; i < iterations; ++i) {
      // Configurations set first and read back last, the other threads'
      // calls in between.
      rpma_conn_cfg* cfg = nullptr;
      ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
      ASSERT_EQ(rpma_conn_cfg_set_sq_size(cfg, 1 + i), 0);
      ASSERT_EQ(rpma_conn_cfg_set_rq_size(cfg, 2 + i), 0);
      ASSERT_EQ(rpma_conn_cfg_set_cq_size(cfg, 3 + i), 0);
      ASSERT_EQ(rpma_conn_cfg_set_rcq_size(cfg, thread), 0);
      ASSERT_EQ(rpma_conn_cfg_set_timeout(cfg, 100 + thread), 0);
      ASSERT_EQ(rpma_conn_cfg_set_compl_channel(cfg, (i + thread) % 2 == 0), 0);
      rpma_peer_cfg* pcfg = nullptr;
      ASSERT_EQ(rpma_peer_cfg_new(&pcfg), 0);
      const bool direct = (i + thread) % 2 == 0;
      ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, direct), 0);

      std::vector<uint8_t>& buffer = i % 2 == 0 ? own : shared;
      const size_t offset = (thread * 4096 + i * 64) % (buffer.size() / 2);
      const size_t size = 1 + (thread * 977 + i * 131) % (buffer.size() / 2);
      const int usage = RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
                        (i % 3 == 0 ? RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY : 0);
      rpma_mr_local* mr = nullptr;
      ASSERT_EQ(rpma_mr_reg(peer, buffer.data() + offset, size, usage, &mr), 0);
      void* ptr = nullptr;
      size_t got_size = 0, desc_size = 0;
      ASSERT_EQ(rpma_mr_get_ptr(mr, &ptr), 0);
      ASSERT_EQ(rpma_mr_get_size(mr, &got_size), 0);
      EXPECT_EQ(ptr, buffer.data() + offset);
      EXPECT_EQ(got_size, size);
      ASSERT_EQ(rpma_mr_get_descriptor_size(mr, &desc_size), 0);
      std::vector<char> desc(desc_size);
      ASSERT_EQ(rpma_mr_get_descriptor(mr, desc.data()), 0);
      rpma_mr_remote* remote = nullptr;
      ASSERT_EQ(rpma_mr_remote_from_descriptor(desc.data(), desc_size, &remote),
                0);
      size_t remote_size = 0;
      int flush_type = -1;
      ASSERT_EQ(rpma_mr_remote_get_size(remote, &remote_size), 0);
      ASSERT_EQ(rpma_mr_remote_get_flush_type(remote, &flush_type), 0);
      EXPECT_EQ(remote_size, size);
      EXPECT_EQ(flush_type, usage & RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);
      ASSERT_EQ(rpma_mr_remote_delete(&remote), 0);
      ASSERT_EQ(rpma_mr_dereg(&mr), 0);
      EXPECT_EQ(mr, nullptr);

      uint32_t sq = 0, rq = 0, cq = 0, rcq = 99;
      int timeout = 0;
      bool shared_channel = (i + thread) % 2 != 0;
      ASSERT_EQ(rpma_conn_cfg_get_sq_size(cfg, &sq), 0);
      ASSERT_EQ(rpma_conn_cfg_get_rq_size(cfg, &rq), 0);
      ASSERT_EQ(rpma_conn_cfg_get_cq_size(cfg, &cq), 0);
      ASSERT_EQ(rpma_conn_cfg_get_rcq_size(cfg, &rcq), 0);
      ASSERT_EQ(rpma_conn_cfg_get_timeout(cfg, &timeout), 0);
      ASSERT_EQ(rpma_conn_cfg_get_compl_channel(cfg, &shared_channel), 0);
      EXPECT_EQ(sq, 1 + i);
      EXPECT_EQ(rq, 2 + i);
      EXPECT_EQ(cq, 3 + i);
      EXPECT_EQ(rcq, thread);
      EXPECT_EQ(timeout, static_cast<int>(100 + thread));
      EXPECT_EQ(shared_channel, (i + thread) % 2 == 0);
      ASSERT_EQ(rpma_conn_cfg_delete(&cfg), 0);
      EXPECT_EQ(cfg, nullptr);

      size_t pdesc_size = 0;
      ASSERT_EQ(rpma_peer_cfg_get_descriptor_size(pcfg, &pdesc_size), 0);
      std::vector<char> pdesc(pdesc_size);
      ASSERT_EQ(rpma_peer_cfg_get_descriptor(pcfg, pdesc.data()), 0);
      rpma_peer_cfg* copy = nullptr;
      ASSERT_EQ(rpma_peer_cfg_from_descriptor(pdesc.data(), pdesc_size, &copy),
                0);
      bool got_direct = !direct;
      ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &got_direct), 0);
      EXPECT_EQ(got_direct, direct);
      got_direct = !direct;
      ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(copy, &got_direct), 0);
      EXPECT_EQ(got_direct, direct);
      ASSERT_EQ(rpma_peer_cfg_delete(&copy), 0);
      ASSERT_EQ(rpma_peer_cfg_delete(&pcfg), 0);
      EXPECT_EQ(pcfg, nullptr);
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) threads.emplace_back(churn, t);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
}

// ---- a connected pair for the misuse cases ----------------------------------

// The server's region (a GuardedBuffer: a NIC access outside it faults) is
// the destination of the client's writes.
struct Pair {
  rpma_peer* server_peer = nullptr;
  rpma_peer* client_peer = nullptr;
  rpma_ep* ep = nullptr;
  rpma_conn* server = nullptr;
  rpma_conn* client = nullptr;
  std::unique_ptr<GuardedBuffer> region;
  rpma_mr_local* region_mr = nullptr;
  rpma_mr_remote* remote = nullptr;
};

// Both ends get `queue` send and receive slots and a CQ of twice that.
void Connect(Pair* p, size_t region_size, uint32_t queue) {
  const std::string port = NextPort();
  p->region = std::make_unique<GuardedBuffer>(region_size);
  std::memset(p->region->data(), 0, region_size);
  ASSERT_NO_FATAL_FAILURE(
      NewPeer(RPMA_UTIL_IBV_CONTEXT_LOCAL, &p->server_peer));
  ASSERT_NO_FATAL_FAILURE(
      NewPeer(RPMA_UTIL_IBV_CONTEXT_REMOTE, &p->client_peer));
  ASSERT_EQ(rpma_mr_reg(p->server_peer, p->region->data(), region_size,
                        RPMA_MR_USAGE_WRITE_DST, &p->region_mr),
            0);
  size_t desc_size = 0;
  ASSERT_EQ(rpma_mr_get_descriptor_size(p->region_mr, &desc_size), 0);
  std::vector<char> desc(desc_size);
  ASSERT_EQ(rpma_mr_get_descriptor(p->region_mr, desc.data()), 0);
  ASSERT_EQ(rpma_mr_remote_from_descriptor(desc.data(), desc_size, &p->remote),
            0);
  ASSERT_EQ(rpma_ep_listen(p->server_peer, kAddr, port.c_str(), &p->ep), 0);
  rpma_conn_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_conn_cfg_set_sq_size(cfg, queue), 0);
  ASSERT_EQ(rpma_conn_cfg_set_rq_size(cfg, queue), 0);
  ASSERT_EQ(rpma_conn_cfg_set_cq_size(cfg, 2 * queue), 0);
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(p->client_peer, kAddr, port.c_str(), cfg, &req),
            0);
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &p->client), 0);
  rpma_conn_req* incoming = nullptr;
  ASSERT_EQ(rpma_ep_next_conn_req(p->ep, cfg, &incoming), 0);
  ASSERT_EQ(rpma_conn_req_connect(&incoming, nullptr, &p->server), 0);
  // The client's ESTABLISHED first: taking it sends the RTU that makes the
  // server's (librdmacm ucma_process_conn_resp, in rdma_get_cm_event).
  ASSERT_EQ(NextEvent(p->client), RPMA_CONN_ESTABLISHED);
  ASSERT_EQ(NextEvent(p->server), RPMA_CONN_ESTABLISHED);
  ASSERT_EQ(rpma_conn_cfg_delete(&cfg), 0);
}

// The client ends the connection, then the server, which answers the
// client's DREQ: on rxe the client's CLOSED comes only then
// (Personality::dreq_waits_for_peer_disconnect); everything is deleted.
void Disconnect(Pair* p) {
  if (p->client != nullptr) {
    EXPECT_EQ(rpma_conn_disconnect(p->client), 0);
  }
  if (p->server != nullptr) {
    EXPECT_EQ(NextEvent(p->server), RPMA_CONN_CLOSED);
    EXPECT_EQ(rpma_conn_disconnect(p->server), 0);
    EXPECT_EQ(rpma_conn_delete(&p->server), 0);
  }
  if (p->client != nullptr) {
    EXPECT_EQ(NextEvent(p->client), RPMA_CONN_CLOSED);
    EXPECT_EQ(rpma_conn_delete(&p->client), 0);
  }
  if (p->remote != nullptr) {
    EXPECT_EQ(rpma_mr_remote_delete(&p->remote), 0);
  }
  if (p->region_mr != nullptr) {
    EXPECT_EQ(rpma_mr_dereg(&p->region_mr), 0);
  }
  if (p->ep != nullptr) {
    EXPECT_EQ(rpma_ep_shutdown(&p->ep), 0);
  }
  if (p->client_peer != nullptr) {
    EXPECT_EQ(rpma_peer_delete(&p->client_peer), 0);
  }
  if (p->server_peer != nullptr) {
    EXPECT_EQ(rpma_peer_delete(&p->server_peer), 0);
  }
}

// ---- two posters and two pollers on one connection --------------------------

TEST_P(ApiThreadsTest, TwoThreadsPostOnOneConnAndTwoPollItsCq) {
  constexpr uint32_t kQueue = 32;
  constexpr size_t kChunk = 64;
  constexpr int kPosters = 2;
  const int per_poster = 2000 * Scale();
  const int total = kPosters * per_poster;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, total * kChunk, kQueue));
  std::vector<uint8_t> src(total * kChunk);
  for (size_t i = 0; i < src.size(); ++i) src[i] = Pattern(i / kChunk, 1, i);
  rpma_mr_local* src_mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(p.client_peer, src.data(), src.size(),
                        RPMA_MR_USAGE_WRITE_SRC, &src_mr),
            0);
  rpma_cq* client_cq = nullptr;
  rpma_cq* server_cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(p.client, &client_cq), 0);
  ASSERT_EQ(rpma_conn_get_cq(p.server, &server_cq), 0);
  // Every write with imm takes a receive: kQueue of them, each reposted by
  // the server when its completion is taken.
  for (uint32_t i = 0; i < kQueue; ++i) {
    ASSERT_EQ(rpma_recv(p.server, nullptr, 0, 0, nullptr), 0);
  }
  // Flow control: a post needs a send-queue slot (freed when a poller takes
  // its completion) and a receive at the server (a credit, returned when the
  // server has reposted one), so no WR ever waits for a receive.
  std::atomic<int> in_flight{0}, credits{kQueue}, polled{0};
  std::atomic<bool> failed{false};
  std::mutex seen_mu;
  std::vector<int> client_seen(total, 0), server_seen(total, 0);
  // Moves `counter` by `step` while the result stays within [0, limit].
  auto take = [&failed](std::atomic<int>* counter, int step, int limit,
                        const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + kHangBound;
    int now = counter->load();
    while (true) {
      if (failed) return false;
      const int next = now + step;
      if (next >= 0 && next <= limit &&
          counter->compare_exchange_weak(now, next)) {
        return true;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "no " << what << " for " << kHangBound.count() << " s";
        failed = true;
        return false;
      }
      std::this_thread::yield();
      now = counter->load();
    }
  };
  auto poster = [&](int who) {
    for (int k = 0; k < per_poster && !failed; ++k) {
      if (!take(&in_flight, 1, kQueue, "send-queue slot")) return;
      if (!take(&credits, -1, kQueue, "receive credit")) return;
      const uint32_t op = static_cast<uint32_t>(who * per_poster + k);
      const int ret =
          rpma_write_with_imm(p.client, p.remote, op * kChunk, src_mr,
                              op * kChunk, kChunk, RPMA_F_COMPLETION_ALWAYS, op,
                              reinterpret_cast<const void*>(uintptr_t{op} + 1));
      if (ret != 0) {
        ADD_FAILURE() << "rpma_write_with_imm: " << rpma_err_2str(ret);
        failed = true;
      }
    }
  };
  auto poller = [&] {
    StallWatch watch(polled);
    while (polled.load() < total && !failed) {
      ibv_wc wc[4];
      int got = 0;
      const int ret = rpma_cq_get_wc(client_cq, 4, wc, &got);
      if (ret == RPMA_E_NO_COMPLETION) {
        if (watch.Stalled()) {
          ADD_FAILURE() << "client: " << polled.load() << " of " << total
                        << " completions";
          failed = true;
        }
        std::this_thread::yield();
        continue;
      }
      if (ret != 0) {
        ADD_FAILURE() << "rpma_cq_get_wc: " << rpma_err_2str(ret);
        failed = true;
        return;
      }
      std::lock_guard<std::mutex> lock(seen_mu);
      for (int i = 0; i < got; ++i) {
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc[i].opcode, IBV_WC_RDMA_WRITE);
        const uint64_t op = wc[i].wr_id - 1;
        if (op < static_cast<uint64_t>(total)) {
          ++client_seen[op];
        } else {
          ADD_FAILURE() << "unknown wr_id " << wc[i].wr_id;
        }
      }
      in_flight -= got;
      polled += got;
    }
  };
  // The server's connection has one thread (rule 3): it checks each
  // write's bytes when its imm arrives (IB spec 9.5: they have landed by
  // then) and reposts the receive.
  auto server = [&] {
    std::atomic<int> received{0};
    StallWatch watch(received);
    while (received < total && !failed) {
      ibv_wc wc{};
      int got = 0;
      const int ret = rpma_cq_get_wc(server_cq, 1, &wc, &got);
      if (ret == RPMA_E_NO_COMPLETION) {
        if (watch.Stalled()) {
          ADD_FAILURE() << "server: " << received << " of " << total << " imms";
          failed = true;
        }
        std::this_thread::yield();
        continue;
      }
      if (!ImmArrived(ret, wc)) {
        failed = true;
        return;
      }
      const uint32_t op = ntohl(wc.imm_data);
      if (op >= static_cast<uint32_t>(total)) {
        ADD_FAILURE() << "server: unknown imm " << op;
        failed = true;
        return;
      }
      const uint8_t* landed = p.region->data() + op * kChunk;
      if (!std::equal(landed, landed + kChunk, src.data() + op * kChunk)) {
        ADD_FAILURE() << "op " << op << ": its bytes had not landed";
      }
      {
        std::lock_guard<std::mutex> lock(seen_mu);
        ++server_seen[op];
      }
      ++received;
      if (received + static_cast<int>(kQueue) <= total) {
        const int r = rpma_recv(p.server, nullptr, 0, 0, nullptr);
        if (r != 0) {
          ADD_FAILURE() << "rpma_recv: " << rpma_err_2str(r);
          failed = true;
          return;
        }
        ++credits;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(server);
  for (int i = 0; i < kPosters; ++i) threads.emplace_back(poster, i);
  threads.emplace_back(poller);
  threads.emplace_back(poller);
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(failed);
  // Every operation's completion exactly once at both ends (wr_id is
  // librpma's op_context; the imm the server's).
  for (int op = 0; op < total; ++op) {
    ASSERT_EQ(client_seen[op], 1) << "op " << op << " at the client";
    ASSERT_EQ(server_seen[op], 1) << "op " << op << " at the server";
  }
  ExpectCqEmpty(client_cq, "client");
  ExpectCqEmpty(server_cq, "server");
  EXPECT_TRUE(std::equal(src.begin(), src.end(), p.region->data()));
  EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
  Disconnect(&p);
}

// ---- rpma_mr_dereg against writes in flight from the MR ---------------------

// Watches the NIC (its mutex held, in its own order): a source byte read
// after the source MR was deregistered, a NIC write outside the
// destination region, a copy that faulted (the fake turns a fault into an
// error completion and a "harness error" text).
class DeregWatch : public NicTap {
 public:
  DeregWatch(const GuardedBuffer& source, const GuardedBuffer& destination)
      : source_(source.addr(), source.addr(source.size())),
        destination_(destination.addr(), destination.addr(destination.size())) {
  }
  void SourceDeregistered() { dead_ = true; }

  void OnSourceRead(const NicSourceRead& read) override {
    if (dead_ && read.first_addr >= source_.first &&
        read.first_addr < source_.second) {
      Note("read " + std::to_string(read.length) + " source bytes of wr_id " +
           std::to_string(read.wr_id) + " after rpma_mr_dereg");
    }
  }
  void OnNicWrite(uintptr_t dst, size_t n) override {
    if (dst < destination_.first || dst + n > destination_.second) {
      Note("wrote " + std::to_string(n) + " bytes outside the destination");
    }
  }
  void OnEvent(const FakeNicEvent& event) override {
    if (event.text.find("harness error") != std::string::npos) {
      Note(event.text);
    }
  }
  std::vector<std::string> Findings() {
    std::lock_guard<std::mutex> lock(mu_);
    return findings_;
  }

 private:
  void Note(std::string finding) {
    std::lock_guard<std::mutex> lock(mu_);
    findings_.push_back(std::move(finding));
  }
  const std::pair<uint64_t, uint64_t> source_, destination_;
  std::atomic<bool> dead_{false};
  std::mutex mu_;
  std::vector<std::string> findings_;
};

// What one round saw.
struct DeregRound {
  int posted = 0;     // posts that returned 0
  int succeeded = 0;  // their successful completions
  bool local_error = false;
};

// One round. A poster keeps writing with imm from `src_mr` (op i: chunk i,
// imm i); the server's thread hands out one receive at a time, only while
// the poster is at least kLead writes ahead and, before the
// deregistration, no more than `strike` of them, so WRs wait in the send
// queue whatever the scheduler does; once the server took `strike` writes
// and one more is posted, a third thread deregisters the source MR (never
// during a post: see the file comment). The writes
// the NIC executed before rpma_mr_dereg returned succeed, the first one it
// takes after fails with a local error, the rest flush.
void RunDeregRound(FakeNic* nic, int strike, ibv_wc_status bad_key_status,
                   DeregRound* out) {
  constexpr uint32_t kQueue = 16;
  constexpr int kOps = 40;
  constexpr int kLead = 4;
  // One packet at any path MTU (256 is the smallest): a failed WR lands
  // nothing.
  constexpr size_t kChunk = 256;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, kOps * kChunk, kQueue));
  GuardedBuffer src(kOps * kChunk);
  for (size_t i = 0; i < src.size(); ++i) {
    src.data()[i] = Pattern(i / kChunk, 4, i);
  }
  rpma_mr_local* src_mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(p.client_peer, src.data(), src.size(),
                        RPMA_MR_USAGE_WRITE_SRC, &src_mr),
            0);
  DeregWatch watch(src, *p.region);
  const int tap = nic->AddTap(
      &watch, NicTap::kEvents | NicTap::kSourceReads | NicTap::kNicWrites);
  rpma_cq* client_cq = nullptr;
  rpma_cq* server_cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(p.client, &client_cq), 0);
  ASSERT_EQ(rpma_conn_get_cq(p.server, &server_cq), 0);

  std::mutex mr_mu;  // rpma_write_with_imm and rpma_mr_dereg never overlap
  std::atomic<int> posted{0}, in_flight{0}, completed{0};
  std::atomic<int> recvs_posted{0}, received{0};
  std::atomic<bool> poster_done{false}, dereg_done{false}, stop{false};
  std::atomic<bool> failed{false};
  // What the server had taken before the deregistration (those writes
  // executed before it), and the receives it had posted (or was posting)
  // when rpma_mr_dereg returned (no write executed by then took another).
  int received_before = -1, recvs_after = -1;
  std::vector<int> post_ret(kOps, -1);
  std::vector<ibv_wc> wcs;  // the client's completions, in CQ order
  std::vector<uint32_t> imms;

  auto poster = [&] {
    for (int op = 0; op < kOps && !failed; ++op) {
      const auto deadline = std::chrono::steady_clock::now() + kHangBound;
      while (in_flight.load() >= static_cast<int>(kQueue) && !failed) {
        if (std::chrono::steady_clock::now() > deadline) {
          ADD_FAILURE() << "poster: no send-queue slot for 10 s";
          failed = true;
        }
        std::this_thread::yield();
      }
      std::lock_guard<std::mutex> lock(mr_mu);
      if (src_mr == nullptr) break;  // deregistered: nothing to post from
      ++in_flight;
      const int ret = rpma_write_with_imm(
          p.client, p.remote, op * kChunk, src_mr, op * kChunk, kChunk,
          RPMA_F_COMPLETION_ALWAYS, static_cast<uint32_t>(op),
          reinterpret_cast<const void*>(uintptr_t(op) + 1));
      post_ret[op] = ret;
      if (ret == 0) {
        ++posted;
      } else {
        --in_flight;
      }
    }
    poster_done = true;
  };
  auto deregger = [&] {
    // The server has taken `strike` writes and a WR is in flight (posted,
    // not yet executed: it waits for a receive the server holds back).
    while ((received.load() < strike || posted.load() <= received.load()) &&
           !poster_done && !failed) {
      std::this_thread::yield();
    }
    {
      std::lock_guard<std::mutex> lock(mr_mu);
      received_before = received.load();
      EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
      recvs_after = recvs_posted.load();
      EXPECT_EQ(src_mr, nullptr);
    }
    watch.SourceDeregistered();
    // Poison: a write that read the source from here on would land these.
    std::memset(src.data(), 0xee, src.size());
    dereg_done = true;
  };
  // The client's CQ: one poller (the order of the completions is checked).
  auto poller = [&] {
    StallWatch watch(completed);
    while (!failed) {
      if (poster_done && dereg_done && completed.load() == posted.load()) {
        return;
      }
      ibv_wc wc{};
      int got = 0;
      const int ret = rpma_cq_get_wc(client_cq, 1, &wc, &got);
      if (ret == RPMA_E_NO_COMPLETION) {
        if (watch.Stalled()) {
          ADD_FAILURE() << "client: " << completed.load() << " of "
                        << posted.load() << " posted WRs completed, none "
                        << "for 10 s";
          failed = true;
        }
        std::this_thread::yield();
        continue;
      }
      if (ret != 0) {
        ADD_FAILURE() << "client rpma_cq_get_wc: " << rpma_err_2str(ret);
        failed = true;
        return;
      }
      wcs.push_back(wc);
      --in_flight;
      ++completed;
    }
  };
  // The server connection's thread: one receive outstanding at a time.
  auto server = [&] {
    bool outstanding = false;
    while (!failed) {
      const bool lead =
          posted.load() - received.load() >= kLead || poster_done || dereg_done;
      // No more than `strike` receives before the deregistration: the WRs
      // after them wait in the send queue (RNR) whatever the scheduler does.
      const bool allowed = recvs_posted.load() < strike || dereg_done;
      if (!outstanding && lead && allowed && recvs_posted.load() < kOps) {
        // Counted before the post: the NIC may use the receive before
        // rpma_recv returns.
        ++recvs_posted;
        const int ret = rpma_recv(p.server, nullptr, 0, 0, nullptr);
        if (ret != 0) {
          ADD_FAILURE() << "server rpma_recv: " << rpma_err_2str(ret);
          failed = true;
          return;
        }
        outstanding = true;
      }
      ibv_wc wc{};
      int got = 0;
      const int ret = rpma_cq_get_wc(server_cq, 1, &wc, &got);
      if (ret == RPMA_E_NO_COMPLETION) {
        if (stop) return;
        std::this_thread::yield();
        continue;
      }
      if (!ImmArrived(ret, wc)) {
        failed = true;
        return;
      }
      imms.push_back(ntohl(wc.imm_data));
      outstanding = false;
      ++received;
    }
  };
  std::thread server_thread(server);
  std::thread poster_thread(poster);
  std::thread deregger_thread(deregger);
  std::thread poller_thread(poller);
  poster_thread.join();
  deregger_thread.join();
  poller_thread.join();
  // The client has every completion; the server's receive completions were
  // made before them (the responder's before its ACK), so a last drain of
  // the server's CQ takes them all.
  stop = true;
  server_thread.join();
  nic->RemoveTap(tap);
  ASSERT_FALSE(failed);

  for (const std::string& finding : watch.Findings()) {
    ADD_FAILURE() << "the NIC " << finding;
  }
  // Each post returned 0 or a code of rpma_write(3).
  for (int op = 0; op < kOps; ++op) {
    EXPECT_TRUE(post_ret[op] == -1 || post_ret[op] == 0 ||
                post_ret[op] == RPMA_E_PROVIDER)
        << "op " << op << ": " << post_ret[op];
  }
  // Every posted WR completed exactly once, in posting order: successes,
  // then at most one local error (the first WR the NIC took after the
  // deregistration), then flushes (ibv_poll_cq(3); the QP is in ERR).
  ASSERT_EQ(wcs.size(), static_cast<size_t>(posted.load()));
  out->posted = posted;
  std::vector<bool> succeeded(kOps, false);
  size_t i = 0;
  for (; i < wcs.size() && wcs[i].status == IBV_WC_SUCCESS; ++i) {
    EXPECT_EQ(wcs[i].opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    succeeded[i] = true;
    ++out->succeeded;
  }
  if (i < wcs.size()) {
    out->local_error = true;
    // The personality's status for a source lkey that is no longer valid
    // (spec LOC_PROT_ERR; rxe LOC_QP_OP_ERR, recorded on rxe).
    EXPECT_EQ(wcs[i].status, bad_key_status)
        << "op " << i << ": " << ibv_wc_status_str(wcs[i].status);
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    for (++i; i < wcs.size(); ++i) {
      EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR)
          << "op " << i << ": " << ibv_wc_status_str(wcs[i].status);
      EXPECT_EQ(wcs[i].wr_id, i + 1);
    }
  }
  // Exactly the writes executed before the deregistration succeeded: at
  // least those the server had taken, at most one per receive it had
  // posted by then.
  EXPECT_GE(out->succeeded, received_before);
  EXPECT_LE(out->succeeded, recvs_after);
  // The server held back every receive after the first `strike`: exactly
  // those writes succeeded, and a WR was in flight to meet the
  // deregistration.
  if (strike < kOps) {
    EXPECT_EQ(out->succeeded, strike);
    EXPECT_TRUE(out->local_error) << "strike " << strike;
  }
  // The server took exactly the writes that succeeded, in order.
  ASSERT_EQ(imms.size(), static_cast<size_t>(out->succeeded));
  for (size_t k = 0; k < imms.size(); ++k) EXPECT_EQ(imms[k], k);
  // A successful write landed its source's bytes from before the
  // deregistration; the others landed nothing.
  for (int op = 0; op < kOps; ++op) {
    const uint8_t* chunk = p.region->data() + op * kChunk;
    for (size_t b = 0; b < kChunk; ++b) {
      const size_t at = op * kChunk + b;
      ASSERT_EQ(chunk[b], succeeded[op] ? Pattern(op, 4, at) : 0)
          << "op " << op << " byte " << b
          << (succeeded[op] ? " (succeeded)" : " (did not succeed)");
    }
  }
  Disconnect(&p);
}

TEST_P(ApiThreadsTest, DeregRacesWritesInFlightFromTheMr) {
  const int rounds = 16 * Scale();
  int with_error = 0, posted = 0, succeeded = 0;
  for (int r = 0; r < rounds; ++r) {
    DeregRound round;
    // Deregister after 0..23 writes were taken, or (every 8th round) once
    // all 40 were.
    const int strike = r % 8 == 7 ? 40 : (r * 7) % 24;
    ASSERT_NO_FATAL_FAILURE(RunDeregRound(nic_.get(), strike,
                      GetParam().make().send_status_on_bad_source_key,
                      &round))
        << "round " << r;
    with_error += round.local_error;
    posted += round.posted;
    succeeded += round.succeeded;
  }
  std::printf(
      "%d rounds: %d writes posted, %d succeeded, %d rounds ended "
      "in a local error\n",
      rounds, posted, succeeded, with_error);
  // Otherwise no deregistration met a WR in flight: nothing was tested.
  EXPECT_GT(with_error, 0);
}

// ---- a blocked thread and a disconnect --------------------------------------

// Thread A waits for the client CQ's next completion; nothing can come but
// the flush of the one WR (wr_id 7) the client has outstanding. Thread B
// (this one) disconnects the client, then the server ends its side.
void ExpectDisconnectWakesCqWaiter(Pair* p) {
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(p->client, &cq), 0);
  auto waiter =
      std::async(std::launch::async, [cq] { return BlockInCqWait(cq); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(waiter.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout)
      << "rpma_cq_wait returned with nothing to complete";
  ASSERT_EQ(rpma_conn_disconnect(p->client), 0);
  const ibv_wc wc = ReturnsWithinBound(&waiter, "rpma_cq_wait");
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc.status);
  // (ibv_poll_cq(3): the opcode of an error completion is undefined.)
  EXPECT_EQ(wc.wr_id, 7u);
  ExpectCqEmpty(cq, "client");
  // The peer's side ends too; its disconnect answers the client's DREQ.
  EXPECT_EQ(NextEvent(p->server), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_disconnect(p->server), 0);
  EXPECT_EQ(rpma_conn_delete(&p->server), 0);
  EXPECT_EQ(NextEvent(p->client), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&p->client), 0);
}

TEST_P(ApiThreadsTest, DisconnectWakesCqWaitOverAPostedReceive) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, 4096, 4));
  uint64_t buffer = 0;
  rpma_mr_local* recv_mr = nullptr;
  ASSERT_EQ(
      rpma_mr_reg(p.client_peer, &buffer, 8, RPMA_MR_USAGE_RECV, &recv_mr), 0);
  ASSERT_EQ(rpma_recv(p.client, recv_mr, 0, 8,
                      reinterpret_cast<const void*>(uintptr_t{7})),
            0);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnectWakesCqWaiter(&p));
  EXPECT_EQ(rpma_mr_dereg(&recv_mr), 0);
  Disconnect(&p);
}

TEST_P(ApiThreadsTest, DisconnectWakesCqWaitOverASendWaitingForAReceive) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, 4096, 4));
  uint64_t buffer = 42;
  rpma_mr_local* send_mr = nullptr;
  ASSERT_EQ(
      rpma_mr_reg(p.client_peer, &buffer, 8, RPMA_MR_USAGE_SEND, &send_mr), 0);
  // The server posts no receive: the send is RNR NAKed and, with librpma's
  // rnr_retry 7, retried for ever (IB spec 9.7.5.2.8).
  ASSERT_EQ(rpma_send(p.client, send_mr, 0, 8, RPMA_F_COMPLETION_ALWAYS,
                      reinterpret_cast<const void*>(uintptr_t{7})),
            0);
  ASSERT_NO_FATAL_FAILURE(ExpectDisconnectWakesCqWaiter(&p));
  EXPECT_EQ(rpma_mr_dereg(&send_mr), 0);
  Disconnect(&p);
}

TEST_P(ApiThreadsTest, OwnDisconnectWakesAThreadBlockedInNextEvent) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, 4096, 4));
  rpma_conn* client = p.client;
  auto waiter =
      std::async(std::launch::async, [client] { return RawNextEvent(client); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(waiter.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout)
      << "rpma_conn_next_event returned with no event";
  // Rule 3 broken: a second thread on the connection A waits on.
  ASSERT_EQ(rpma_conn_disconnect(p.client), 0);
  if (GetParam().make().dreq_waits_for_peer_disconnect) {
    // rxe: the client's own DISCONNECTED is the server's answer to its
    // DREQ; until the server disconnects the waiter stays blocked.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(waiter.wait_for(std::chrono::milliseconds(0)),
              std::future_status::timeout)
        << "CLOSED before the server answered the DREQ";
  }
  EXPECT_EQ(NextEvent(p.server), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_disconnect(p.server), 0);
  EXPECT_EQ(ReturnsWithinBound(&waiter, "rpma_conn_next_event"),
            RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&p.client), 0);
  EXPECT_EQ(rpma_conn_delete(&p.server), 0);
  Disconnect(&p);
}

TEST_P(ApiThreadsTest, PeerDisconnectWakesAThreadBlockedInNextEvent) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, 4096, 4));
  rpma_conn* server = p.server;
  auto waiter =
      std::async(std::launch::async, [server] { return RawNextEvent(server); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(waiter.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout)
      << "rpma_conn_next_event returned with no event";
  ASSERT_EQ(rpma_conn_disconnect(p.client), 0);
  EXPECT_EQ(ReturnsWithinBound(&waiter, "rpma_conn_next_event"),
            RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_disconnect(p.server), 0);
  EXPECT_EQ(NextEvent(p.client), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&p.client), 0);
  EXPECT_EQ(rpma_conn_delete(&p.server), 0);
  Disconnect(&p);
}

INSTANTIATE_TEST_SUITE_P(
    Personalities, ApiThreadsTest,
    ::testing::Values(PersonalityCase{"Spec", &Personality::Spec},
                      PersonalityCase{"Rxe", &Personality::Rxe}),
    [](const ::testing::TestParamInfo<PersonalityCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace rpma_harness
