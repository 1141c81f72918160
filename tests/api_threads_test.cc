// api_threads_test.cc: the librpma C API from several threads at once, on
// the fake NIC with background progress -- what librpma's THREAD_SAFETY.md
// (1.3) allows a program to do, and the misuse verbs still define:
//
//   - many threads may use one peer to make a connection each (rule 1 of
//     THREAD_SAFETY.md), and the calls it lists as thread-safe
//     (rpma_mr_reg/dereg and the descriptors, rpma_conn_cfg_* and
//     rpma_peer_cfg_* new/delete, ...) may race;
//   - one connection is used by one thread at a time (rule 3) -- yet the
//     verbs under it are fully thread-safe (ibv_post_send / ibv_poll_cq,
//     "Relationship of libibverbs and librdmacm"), and librpma's posting
//     and polling calls are thin wrappers over them: two threads posting on
//     one connection and two polling its CQ get every completion once;
//   - a thread blocked in rpma_cq_wait or rpma_conn_next_event while
//     another disconnects the connection returns: the disconnect moves the
//     QP to ERR, which flushes what it held (rdma_disconnect(3)), and the
//     CM reports the end.
// Freed objects from another thread (rpma_mr_dereg while another posts with
// the same pointer) are use-after-free in the caller, in librpma as here,
// and not tested. Each payload carries its thread and round; every byte is
// checked where it lands.
//
// Tagged `concurrency`: .ci/run also runs it under TSan.

#include <gtest/gtest.h>
#include <librpma.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nic/fake_nic.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

constexpr char kAddr[] = "192.168.0.9";
constexpr int kThreads = 8;
constexpr int kRounds = 50;
constexpr size_t kSlot = 4096;

std::string NextPort() {
  static std::atomic<int> port{7600};
  return std::to_string(port++);
}

uint8_t Pattern(uint32_t thread, uint32_t round, size_t i) {
  return static_cast<uint8_t>(thread * 31 + round * 7 + i * 13 + (i >> 8));
}

void NewPeer(rpma_util_ibv_context_type type, rpma_peer** peer) {
  ibv_context* dev = nullptr;
  ASSERT_EQ(rpma_utils_get_ibv_context(kAddr, type, &dev), 0);
  ASSERT_EQ(rpma_peer_new(dev, peer), 0);
}

// The next completion of `cq`, blocking in rpma_cq_wait between polls.
ibv_wc WaitWc(rpma_cq* cq) {
  ibv_wc wc{};
  int got = 0;
  while (rpma_cq_get_wc(cq, 1, &wc, &got) == RPMA_E_NO_COMPLETION) {
    const int ret = rpma_cq_wait(cq);
    if (ret != 0) {
      ADD_FAILURE() << "rpma_cq_wait: " << rpma_err_2str(ret);
      return wc;
    }
  }
  return wc;
}

rpma_conn_event NextEvent(rpma_conn* conn) {
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  EXPECT_EQ(rpma_conn_next_event(conn, &event), 0);
  return event;
}

class ApiThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nic_ = std::make_shared<FakeNic>();
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

// A server of kThreads connections on one endpoint, one worker thread per
// connection; region slot t is written by client t.
struct Server {
  rpma_peer* peer = nullptr;
  rpma_ep* ep = nullptr;
  std::vector<uint8_t> region = std::vector<uint8_t>(kThreads * kSlot);
  std::vector<uint8_t> recvs = std::vector<uint8_t>(kThreads * 8);
  uint64_t ack = 0;
  rpma_mr_local* region_mr = nullptr;
  rpma_mr_local* recv_mr = nullptr;
  rpma_mr_local* ack_mr = nullptr;
  std::vector<char> descriptor;
};

// One server connection's life: each write with imm (thread << 16 |
// round) is checked in its slot and answered with an 8-byte send.
void ServeConnection(Server* s, rpma_conn* conn, int index) {
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(conn, &cq), 0);
  for (int round = 0; round < kRounds;) {
    const ibv_wc wc = WaitWc(cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    // The answer's own completion may come after the client's next write.
    if (wc.opcode == IBV_WC_SEND) continue;
    ASSERT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    const uint32_t imm = ntohl(wc.imm_data);
    const uint32_t thread = imm >> 16, r = imm & 0xffff;
    ASSERT_LT(thread, static_cast<uint32_t>(kThreads));
    ASSERT_EQ(r, static_cast<uint32_t>(round));
    const uint8_t* slot = s->region.data() + thread * kSlot;
    for (size_t i = 0; i < kSlot; ++i) {
      ASSERT_EQ(slot[i], Pattern(thread, r, i))
          << "thread " << thread << " round " << r << " byte " << i;
    }
    ASSERT_EQ(rpma_recv(conn, s->recv_mr, index * 8, 8, nullptr), 0);
    ASSERT_EQ(rpma_send(conn, s->ack_mr, 0, 8, RPMA_F_COMPLETION_ALWAYS,
                        nullptr),
              0);
    ++round;
  }
  EXPECT_EQ(NextEvent(conn), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_disconnect(conn), 0);
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
}

// One client thread on the shared peer: its own connection and MRs.
void RunClient(rpma_peer* peer, const std::string& port, uint32_t thread) {
  std::vector<uint8_t> src(kSlot);
  uint64_t ack = 0;
  rpma_mr_local* src_mr = nullptr;
  rpma_mr_local* ack_mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(peer, src.data(), kSlot, RPMA_MR_USAGE_WRITE_SRC,
                        &src_mr),
            0);
  ASSERT_EQ(rpma_mr_reg(peer, &ack, 8, RPMA_MR_USAGE_RECV, &ack_mr), 0);
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
  for (uint32_t round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < kSlot; ++i) src[i] = Pattern(thread, round, i);
    ASSERT_EQ(rpma_recv(conn, ack_mr, 0, 8, nullptr), 0);
    ASSERT_EQ(rpma_write_with_imm(conn, remote, thread * kSlot, src_mr, 0,
                                  kSlot, RPMA_F_COMPLETION_ALWAYS,
                                  thread << 16 | round, nullptr),
              0);
    // The write's completion and the server's answer, either way round.
    bool wrote = false, answered = false;
    while (!wrote || !answered) {
      const ibv_wc wc = WaitWc(cq);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      if (wc.opcode == IBV_WC_RDMA_WRITE) {
        wrote = true;
      } else {
        ASSERT_EQ(wc.opcode, IBV_WC_RECV);
        answered = true;
      }
    }
  }
  EXPECT_EQ(rpma_conn_disconnect(conn), 0);
  EXPECT_EQ(NextEvent(conn), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&conn), 0);
  EXPECT_EQ(rpma_mr_remote_delete(&remote), 0);
  EXPECT_EQ(rpma_mr_dereg(&ack_mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
}

TEST_F(ApiThreadsTest, EightThreadsShareOnePeerEachWithItsOwnConnection) {
  const std::string port = NextPort();
  Server s;
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_LOCAL, &s.peer));
  ASSERT_EQ(rpma_mr_reg(s.peer, s.region.data(), s.region.size(),
                        RPMA_MR_USAGE_WRITE_DST, &s.region_mr),
            0);
  ASSERT_EQ(rpma_mr_reg(s.peer, s.recvs.data(), s.recvs.size(),
                        RPMA_MR_USAGE_RECV, &s.recv_mr),
            0);
  ASSERT_EQ(rpma_mr_reg(s.peer, &s.ack, 8, RPMA_MR_USAGE_SEND, &s.ack_mr), 0);
  size_t desc_size = 0;
  ASSERT_EQ(rpma_mr_get_descriptor_size(s.region_mr, &desc_size), 0);
  s.descriptor.resize(desc_size);
  ASSERT_EQ(rpma_mr_get_descriptor(s.region_mr, s.descriptor.data()), 0);
  ASSERT_EQ(rpma_ep_listen(s.peer, kAddr, port.c_str(), &s.ep), 0);

  rpma_peer* client_peer = nullptr;
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_REMOTE, &client_peer));
  std::vector<std::thread> clients;
  for (uint32_t t = 0; t < kThreads; ++t) {
    clients.emplace_back(RunClient, client_peer, port, t);
  }
  // One thread on the endpoint (rule 2), a worker per connection.
  std::vector<std::thread> workers;
  rpma_conn_private_data pdata{s.descriptor.data(),
                               static_cast<uint8_t>(desc_size)};
  for (int i = 0; i < kThreads; ++i) {
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
  EXPECT_EQ(rpma_ep_shutdown(&s.ep), 0);
  EXPECT_EQ(rpma_mr_dereg(&s.ack_mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&s.recv_mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&s.region_mr), 0);
  EXPECT_EQ(rpma_peer_delete(&client_peer), 0);
  EXPECT_EQ(rpma_peer_delete(&s.peer), 0);
}

TEST_F(ApiThreadsTest, ThreadSafeCallsRaceOnOnePeer) {
  rpma_peer* peer = nullptr;
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_LOCAL, &peer));
  auto churn = [peer](uint32_t thread) {
    std::vector<uint8_t> buffer(64 * 1024);
    for (uint32_t i = 0; i < 200; ++i) {
      const size_t size = 1 + (thread * 977 + i * 131) % buffer.size();
      rpma_mr_local* mr = nullptr;
      ASSERT_EQ(rpma_mr_reg(peer, buffer.data(), size,
                            RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC,
                            &mr),
                0);
      void* ptr = nullptr;
      size_t got_size = 0, desc_size = 0;
      ASSERT_EQ(rpma_mr_get_ptr(mr, &ptr), 0);
      ASSERT_EQ(rpma_mr_get_size(mr, &got_size), 0);
      EXPECT_EQ(ptr, buffer.data());
      EXPECT_EQ(got_size, size);
      ASSERT_EQ(rpma_mr_get_descriptor_size(mr, &desc_size), 0);
      std::vector<char> desc(desc_size);
      ASSERT_EQ(rpma_mr_get_descriptor(mr, desc.data()), 0);
      rpma_mr_remote* remote = nullptr;
      ASSERT_EQ(rpma_mr_remote_from_descriptor(desc.data(), desc_size, &remote),
                0);
      size_t remote_size = 0;
      ASSERT_EQ(rpma_mr_remote_get_size(remote, &remote_size), 0);
      EXPECT_EQ(remote_size, size);
      ASSERT_EQ(rpma_mr_remote_delete(&remote), 0);
      ASSERT_EQ(rpma_mr_dereg(&mr), 0);

      rpma_conn_cfg* cfg = nullptr;
      ASSERT_EQ(rpma_conn_cfg_new(&cfg), 0);
      ASSERT_EQ(rpma_conn_cfg_set_sq_size(cfg, 1 + i), 0);
      ASSERT_EQ(rpma_conn_cfg_set_timeout(cfg, 100 + thread), 0);
      uint32_t sq = 0;
      int timeout = 0;
      ASSERT_EQ(rpma_conn_cfg_get_sq_size(cfg, &sq), 0);
      ASSERT_EQ(rpma_conn_cfg_get_timeout(cfg, &timeout), 0);
      EXPECT_EQ(sq, 1 + i);
      EXPECT_EQ(timeout, static_cast<int>(100 + thread));
      ASSERT_EQ(rpma_conn_cfg_delete(&cfg), 0);

      rpma_peer_cfg* pcfg = nullptr;
      ASSERT_EQ(rpma_peer_cfg_new(&pcfg), 0);
      const bool direct = (i + thread) % 2 == 0;
      ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, direct), 0);
      size_t pdesc_size = 0;
      ASSERT_EQ(rpma_peer_cfg_get_descriptor_size(pcfg, &pdesc_size), 0);
      std::vector<char> pdesc(pdesc_size);
      ASSERT_EQ(rpma_peer_cfg_get_descriptor(pcfg, pdesc.data()), 0);
      rpma_peer_cfg* copy = nullptr;
      ASSERT_EQ(rpma_peer_cfg_from_descriptor(pdesc.data(), pdesc_size, &copy),
                0);
      bool got_direct = !direct;
      ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(copy, &got_direct), 0);
      EXPECT_EQ(got_direct, direct);
      ASSERT_EQ(rpma_peer_cfg_delete(&copy), 0);
      ASSERT_EQ(rpma_peer_cfg_delete(&pcfg), 0);
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) threads.emplace_back(churn, t);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
}

// A connected pair for the tests below: the server's region is written by
// the client; the server only answers the CM.
struct Pair {
  rpma_peer* server_peer = nullptr;
  rpma_peer* client_peer = nullptr;
  rpma_ep* ep = nullptr;
  rpma_conn* server = nullptr;
  rpma_conn* client = nullptr;
  std::vector<uint8_t> region;
  rpma_mr_local* region_mr = nullptr;
  rpma_mr_remote* remote = nullptr;
};

void Connect(Pair* p, size_t region_size, uint32_t queue) {
  const std::string port = NextPort();
  p->region.assign(region_size, 0);
  ASSERT_NO_FATAL_FAILURE(NewPeer(RPMA_UTIL_IBV_CONTEXT_LOCAL, &p->server_peer));
  ASSERT_NO_FATAL_FAILURE(
      NewPeer(RPMA_UTIL_IBV_CONTEXT_REMOTE, &p->client_peer));
  ASSERT_EQ(rpma_mr_reg(p->server_peer, p->region.data(), region_size,
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
  ASSERT_EQ(rpma_ep_next_conn_req(p->ep, nullptr, &incoming), 0);
  ASSERT_EQ(rpma_conn_req_connect(&incoming, nullptr, &p->server), 0);
  // The client's ESTABLISHED first: taking it sends the RTU that makes the
  // server's (librdmacm ucma_process_conn_resp, in rdma_get_cm_event).
  ASSERT_EQ(NextEvent(p->client), RPMA_CONN_ESTABLISHED);
  ASSERT_EQ(NextEvent(p->server), RPMA_CONN_ESTABLISHED);
  ASSERT_EQ(rpma_conn_cfg_delete(&cfg), 0);
}

void Disconnect(Pair* p) {
  if (p->client != nullptr) {
    EXPECT_EQ(rpma_conn_disconnect(p->client), 0);
    EXPECT_EQ(NextEvent(p->client), RPMA_CONN_CLOSED);
    EXPECT_EQ(rpma_conn_delete(&p->client), 0);
  }
  if (p->server != nullptr) {
    EXPECT_EQ(NextEvent(p->server), RPMA_CONN_CLOSED);
    EXPECT_EQ(rpma_conn_disconnect(p->server), 0);
    EXPECT_EQ(rpma_conn_delete(&p->server), 0);
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

TEST_F(ApiThreadsTest, TwoThreadsPostOnOneConnAndTwoPollItsCq) {
  constexpr uint32_t kQueue = 32;
  constexpr int kPerPoster = 2000;
  constexpr size_t kChunk = 64;
  constexpr int kPosters = 2;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, kPosters * kPerPoster * kChunk, kQueue));
  std::vector<uint8_t> src(kPosters * kPerPoster * kChunk);
  for (size_t i = 0; i < src.size(); ++i) src[i] = Pattern(i / kChunk, 1, i);
  rpma_mr_local* src_mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(p.client_peer, src.data(), src.size(),
                        RPMA_MR_USAGE_WRITE_SRC, &src_mr),
            0);
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(p.client, &cq), 0);
  // At most kQueue operations in flight between both posters (the SQ).
  std::atomic<int> in_flight{0}, completed{0};
  std::mutex seen_mu;
  std::multiset<uintptr_t> seen;
  std::atomic<bool> failed{false};
  auto poster = [&](int who) {
    for (int k = 0; k < kPerPoster && !failed; ++k) {
      int now = in_flight.load();
      while (now >= static_cast<int>(kQueue) ||
             !in_flight.compare_exchange_weak(now, now + 1)) {
        if (failed) return;
        std::this_thread::yield();
        now = in_flight.load();
      }
      const size_t op = static_cast<size_t>(who) * kPerPoster + k;
      const int ret = rpma_write(p.client, p.remote, op * kChunk, src_mr,
                                 op * kChunk, kChunk, RPMA_F_COMPLETION_ALWAYS,
                                 reinterpret_cast<const void*>(op + 1));
      if (ret != 0) {
        ADD_FAILURE() << "rpma_write: " << rpma_err_2str(ret);
        failed = true;
      }
    }
  };
  auto poller = [&] {
    const int total = kPosters * kPerPoster;
    while (completed.load() < total && !failed) {
      ibv_wc wc[4];
      int got = 0;
      const int ret = rpma_cq_get_wc(cq, 4, wc, &got);
      if (ret == RPMA_E_NO_COMPLETION) {
        std::this_thread::yield();
        continue;
      }
      if (ret != 0) {
        ADD_FAILURE() << "rpma_cq_get_wc: " << rpma_err_2str(ret);
        failed = true;
        return;
      }
      for (int i = 0; i < got; ++i) {
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc[i].opcode, IBV_WC_RDMA_WRITE);
        std::lock_guard<std::mutex> lock(seen_mu);
        seen.insert(static_cast<uintptr_t>(wc[i].wr_id));
      }
      in_flight -= got;
      completed += got;
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kPosters; ++i) threads.emplace_back(poster, i);
  threads.emplace_back(poller);
  threads.emplace_back(poller);
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(failed);
  // Every operation's completion once (wr_id is librpma's op_context).
  ASSERT_EQ(seen.size(), static_cast<size_t>(kPosters * kPerPoster));
  uintptr_t expected = 1;
  for (uintptr_t id : seen) EXPECT_EQ(id, expected++);
  EXPECT_EQ(p.region, src);
  EXPECT_EQ(rpma_mr_dereg(&src_mr), 0);
  Disconnect(&p);
}

TEST_F(ApiThreadsTest, DisconnectWakesAThreadBlockedInCqWait) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, 4096, 4));
  uint64_t buffer = 0;
  rpma_mr_local* recv_mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(p.client_peer, &buffer, 8, RPMA_MR_USAGE_RECV,
                        &recv_mr),
            0);
  ASSERT_EQ(rpma_recv(p.client, recv_mr, 0, 8, nullptr), 0);
  rpma_cq* cq = nullptr;
  ASSERT_EQ(rpma_conn_get_cq(p.client, &cq), 0);
  // Nothing will complete the receive but the flush the disconnect makes.
  auto waiter = std::async(std::launch::async, [cq] { return WaitWc(cq); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(waiter.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout)
      << "rpma_cq_wait returned with nothing to complete";
  ASSERT_EQ(rpma_conn_disconnect(p.client), 0);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)),
            std::future_status::ready)
      << "a thread in rpma_cq_wait was not woken by the disconnect";
  const ibv_wc wc = waiter.get();
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(NextEvent(p.client), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&p.client), 0);
  EXPECT_EQ(rpma_mr_dereg(&recv_mr), 0);
  Disconnect(&p);
}

TEST_F(ApiThreadsTest, PeerDisconnectWakesAThreadBlockedInNextEvent) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p, 4096, 4));
  rpma_conn* server = p.server;
  auto waiter =
      std::async(std::launch::async, [server] { return NextEvent(server); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(waiter.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);
  ASSERT_EQ(rpma_conn_disconnect(p.client), 0);
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)),
            std::future_status::ready)
      << "a thread in rpma_conn_next_event was not woken by the peer's end";
  EXPECT_EQ(waiter.get(), RPMA_CONN_CLOSED);
  EXPECT_EQ(NextEvent(p.client), RPMA_CONN_CLOSED);
  EXPECT_EQ(rpma_conn_delete(&p.client), 0);
  EXPECT_EQ(rpma_conn_disconnect(p.server), 0);
  EXPECT_EQ(rpma_conn_delete(&p.server), 0);
  Disconnect(&p);
}

}  // namespace
}  // namespace rpma_harness
