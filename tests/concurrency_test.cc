// concurrency_test.cc: eight threads posting writes with immediate data and
// polling completions on the fake NIC (VerbsBackend API, background
// progress), on separate QPs and CQs and on shared ones. Every payload
// carries a checksum; every completion is accounted for exactly once.
//
// The default run is 10 000 operations in total (half per test, 625 per
// thread): about a second on two busy cores, and enough to find a race --
// with PollCq's lock seeded away (released before the CQ is popped), 6 of 6
// plain runs failed (duplicate receive completions) and TSan reported the
// data race in each of 3 runs in under a second. RPMA_HARNESS_STRESS_OPS
// changes the total; .ci/run has a stress stage of 1 M operations and runs
// 200 000 under TSan.
// Tagged `concurrency`: .ci/run runs these under TSan too.

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nic/fake_nic.h"
#include "tests/connected_qps.h"
#include "tests/stress_ops.h"

namespace rpma_harness {
namespace {

constexpr int kThreads = 8;
constexpr int kWindow = 4;    // operations in flight per thread
constexpr size_t kSlot = 64;  // payload bytes; the last 8 are a checksum
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

uint64_t TotalOps() {
  // env RPMA_HARNESS_STRESS_OPS=N: the harness's own test: the operations
  //   //tests:concurrency_test runs (default 10000; CI's stress stage 1000000);
  //   //tests:api_threads_test runs N / 10000 times its rounds.
  return StressOps(10000);
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The payload of (thread, seq): 56 bytes from the generator, then a
// checksum (FNV-1a) of those 56 bytes.
void FillPayload(int thread, uint64_t seq, uint8_t* out) {
  for (size_t i = 0; i < kSlot - 8; i += 8) {
    const uint64_t word = Mix((uint64_t(thread) << 40) ^ (seq << 8) ^ i);
    std::memcpy(out + i, &word, 8);
  }
  uint64_t sum = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < kSlot - 8; ++i)
    sum = (sum ^ out[i]) * 0x100000001b3ULL;
  std::memcpy(out + kSlot - 8, &sum, 8);
}

class StressRun {
 public:
  // shared: 2 QP pairs (4 threads each) and one CQ per side for all;
  // otherwise each thread has its own QP pair and CQs.
  StressRun(bool shared, uint64_t total_ops)
      : shared_(shared), per_thread_(total_ops / kThreads) {
    FakeNicConfig config;
    config.background_block_timeout_ms = 20000;
    nic_ = std::make_unique<FakeNic>(config);
    fabric_ = std::make_unique<ConnectedQps>(nic_.get());
    src_.assign(kThreads * kWindow * kSlot, 0);
    dst_.assign(kThreads * kWindow * kSlot, 0);
    src_mr_ =
        fabric_->RegMr(fabric_->client_pd(), src_.data(), src_.size(), kAccess);
    dst_mr_ =
        fabric_->RegMr(fabric_->server_pd(), dst_.data(), dst_.size(), kAccess);
    QpPairOptions options;
    options.max_send_wr = 64;
    options.max_recv_wr = 64;
    options.cq_depth = 256;
    if (shared_) {
      options.client_cq = fabric_->NewCq(fabric_->client_context(), 256);
      options.server_cq = fabric_->NewCq(fabric_->server_context(), 256);
    }
    const int pairs = shared_ ? 2 : kThreads;
    for (int i = 0; i < pairs; ++i) {
      QpPair* pair = fabric_->Connect(options);
      if (pair == nullptr) return;
      pairs_.push_back(pair);
      server_qps_[pair->server.qp->qp_num] = pair->server.qp;
      for (int r = 0; r < 64; ++r) PostRecv(pair->server.qp);
    }
    for (int t = 0; t < kThreads; ++t) {
      send_seen_.emplace_back(per_thread_);
      recv_seen_.emplace_back(per_thread_);
    }
    for (auto& slot : slot_pending_) slot.store(0);
  }

  ~StressRun() { nic_->StopBackgroundProgress(); }

  std::string SetUpError() const {
    return fabric_->ok() ? "" : fabric_->error();
  }

  void Run() {
    nic_->StartBackgroundProgress();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([this, t] { Worker(t); });
    }
    for (auto& thread : threads) thread.join();
    nic_->StopBackgroundProgress();
  }

  // Every check after the run; empty when all is well.
  std::string Verify() {
    if (errors_.load() > 0) return first_error_;
    for (int t = 0; t < kThreads; ++t) {
      for (uint64_t s = 0; s < per_thread_; ++s) {
        if (send_seen_[t][s].load() != 1 || recv_seen_[t][s].load() != 1) {
          return "thread " + std::to_string(t) + " seq " + std::to_string(s) +
                 ": send seen " + std::to_string(send_seen_[t][s].load()) +
                 " times, receive " + std::to_string(recv_seen_[t][s].load());
        }
      }
    }
    // Nothing left over: no completion appeared twice or from nowhere.
    ibv_wc wc;
    for (QpPair* pair : pairs_) {
      if (nic_->PollCq(pair->client.cq, 1, &wc) != 0 ||
          nic_->PollCq(pair->server.cq, 1, &wc) != 0) {
        return "a completion was left over";
      }
    }
    return "";
  }

  uint64_t completed() const { return done_.load(); }

 private:
  struct SeenFlags {
    explicit SeenFlags(uint64_t n) : flags(new std::atomic<uint8_t>[n]) {
      for (uint64_t i = 0; i < n; ++i) flags[i].store(0);
    }
    std::atomic<uint8_t>& operator[](uint64_t i) { return flags[i]; }
    std::unique_ptr<std::atomic<uint8_t>[]> flags;
  };

  void Error(const std::string& what) {
    if (errors_.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      first_error_ = what;
    }
  }

  uint8_t* Slot(std::vector<uint8_t>& buf, int thread, uint64_t seq) {
    return buf.data() + (thread * kWindow + seq % kWindow) * kSlot;
  }
  std::atomic<int>& Pending(int thread, uint64_t seq) {
    return slot_pending_[thread * kWindow + seq % kWindow];
  }

  QpPair* PairOf(int thread) {
    return shared_ ? pairs_[thread % 2] : pairs_[thread];
  }

  void PostRecv(ibv_qp* qp) {
    ibv_recv_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    ibv_recv_wr* bad = nullptr;
    if (nic_->PostRecv(qp, &wr, &bad) != 0) Error("PostRecv failed");
  }

  void Post(int thread, uint64_t seq) {
    uint8_t* src = Slot(src_, thread, seq);
    FillPayload(thread, seq, src);
    ibv_sge sge{reinterpret_cast<uint64_t>(src), kSlot, src_mr_->lkey};
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uint64_t(thread) << 32) | seq;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htonl((uint32_t(thread) << 24) | uint32_t(seq & 0xffffff));
    wr.wr.rdma.remote_addr =
        reinterpret_cast<uint64_t>(Slot(dst_, thread, seq));
    wr.wr.rdma.rkey = dst_mr_->rkey;
    ibv_send_wr* bad = nullptr;
    const int ret = nic_->PostSend(PairOf(thread)->client.qp, &wr, &bad);
    if (ret != 0) Error("PostSend failed: " + std::to_string(ret));
  }

  void OnSend(const ibv_wc& wc) {
    const int thread = static_cast<int>(wc.wr_id >> 32);
    const uint64_t seq = wc.wr_id & 0xffffffff;
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_WRITE ||
        thread >= kThreads || seq >= per_thread_) {
      Error("bad send completion");
      return;
    }
    if (send_seen_[thread][seq].fetch_add(1) != 0) Error("duplicate send CQE");
    Pending(thread, seq).fetch_sub(1);
    done_.fetch_add(1);
  }

  void OnRecv(const ibv_wc& wc) {
    const uint32_t imm = ntohl(wc.imm_data);
    const int thread = static_cast<int>(imm >> 24);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
        !(wc.wc_flags & IBV_WC_WITH_IMM) || wc.byte_len != kSlot ||
        thread >= kThreads) {
      Error("bad receive completion");
      return;
    }
    const uint64_t seq = imm & 0xffffff;
    if (seq >= per_thread_) {
      Error("receive completion for a seq never posted");
      return;
    }
    uint8_t expected[kSlot];
    FillPayload(thread, seq, expected);
    if (std::memcmp(Slot(dst_, thread, seq), expected, kSlot) != 0) {
      Error("payload of thread " + std::to_string(thread) + " seq " +
            std::to_string(seq) + " corrupted");
    }
    if (recv_seen_[thread][seq].fetch_add(1) != 0) Error("duplicate recv CQE");
    auto it = server_qps_.find(wc.qp_num);
    if (it == server_qps_.end()) {
      Error("receive completion on an unknown QP");
    } else {
      PostRecv(it->second);
    }
    Pending(thread, seq).fetch_sub(1);
    done_.fetch_add(1);
  }

  // Polls the CQs this thread looks at; true when it found something.
  bool PollOnce(int thread) {
    QpPair* pair = PairOf(thread);
    ibv_wc wcs[8];
    bool any = false;
    int n = nic_->PollCq(pair->client.cq, 8, wcs);
    if (n < 0) Error("PollCq failed");
    for (int i = 0; i < n; ++i) OnSend(wcs[i]);
    any |= n > 0;
    n = nic_->PollCq(pair->server.cq, 8, wcs);
    if (n < 0) Error("PollCq failed");
    for (int i = 0; i < n; ++i) OnRecv(wcs[i]);
    any |= n > 0;
    return any;
  }

  void Worker(int thread) {
    uint64_t next = 0;
    // Shared CQs: everyone polls until every thread's work is done.
    // Separate: until this thread's own is.
    const uint64_t goal = shared_ ? 2 * per_thread_ * kThreads : 0;
    while (errors_.load() == 0) {
      bool progressed = false;
      while (next < per_thread_ && Pending(thread, next).load() == 0) {
        Pending(thread, next).store(2);  // a send and a receive completion
        Post(thread, next++);
        progressed = true;
      }
      progressed |= PollOnce(thread);
      if (next == per_thread_) {
        if (shared_ && done_.load() >= goal) break;
        if (!shared_) {
          bool idle = true;
          for (int s = 0; s < kWindow; ++s) {
            idle &= slot_pending_[thread * kWindow + s].load() == 0;
          }
          if (idle) break;
        }
      }
      if (!progressed) std::this_thread::yield();
    }
  }

  const bool shared_;
  const uint64_t per_thread_;
  std::unique_ptr<FakeNic> nic_;
  std::unique_ptr<ConnectedQps> fabric_;
  std::vector<uint8_t> src_;
  std::vector<uint8_t> dst_;
  ibv_mr* src_mr_ = nullptr;
  ibv_mr* dst_mr_ = nullptr;
  std::vector<QpPair*> pairs_;
  std::map<uint32_t, ibv_qp*> server_qps_;  // read-only once threads run
  std::vector<SeenFlags> send_seen_;
  std::vector<SeenFlags> recv_seen_;
  std::atomic<int> slot_pending_[kThreads * kWindow];
  std::atomic<uint64_t> done_{0};
  std::atomic<int> errors_{0};
  std::mutex mu_;
  std::string first_error_;
};

TEST(ConcurrencyTest, EightThreadsOnSeparateQpsAndCqs) {
  StressRun run(/*shared=*/false, TotalOps() / 2);
  ASSERT_EQ(run.SetUpError(), "");
  run.Run();
  EXPECT_EQ(run.Verify(), "");
  EXPECT_EQ(run.completed(), 2 * (TotalOps() / 2 / kThreads) * kThreads);
}

TEST(ConcurrencyTest, EightThreadsOnSharedQpsAndCqs) {
  StressRun run(/*shared=*/true, TotalOps() / 2);
  ASSERT_EQ(run.SetUpError(), "");
  run.Run();
  EXPECT_EQ(run.Verify(), "");
  EXPECT_EQ(run.completed(), 2 * (TotalOps() / 2 / kThreads) * kThreads);
}

}  // namespace
}  // namespace rpma_harness
