// Each fault action and each way of matching, through the rpma API: the
// consequence a user would see, and the record that says the fault fired.

#include "faults/fault_injection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mock/matchers.h"
#include "mock/mock_verbs_backend.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t kSize = 4096;

// A client and a server connected through the rpma API on a manually
// progressed fake NIC wrapped by a FaultInjector.
class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(FakeNicConfig{}, 7); }

  // `over_another_backend`: the injector wraps a MockVerbsBackend that
  // delegates to the fake, so it sees a backend that is not a FakeNic (as
  // over rdma-core) while the test still drives the fake.
  void Build(FakeNicConfig config, uint64_t seed,
             bool over_another_backend = false) {
    scoped_.reset();  // restore the previous backend before installing anew
    faults_.reset();
    nic_ = std::make_shared<FakeNic>(config);
    if (over_another_backend) {
      auto mock = std::make_shared<::testing::NiceMock<MockVerbsBackend>>();
      mock->DelegateToFake(nic_);
      faults_ = std::make_shared<FaultInjector>(mock, seed);
    } else {
      faults_ = std::make_shared<FaultInjector>(nic_, seed);
    }
    scoped_ = std::make_unique<ScopedBackend>(faults_);
    nic_->AddObserver([this](const FakeNicEvent& e) {
      if (e.kind == FakeNicEvent::Kind::kFault)
        fault_records_.push_back(e.text);
    });
  }

  void TearDown() override {
    for (Pair& p : pairs_) Close(p);
    scoped_.reset();
  }

  struct Pair {
    rpma_peer* peer = nullptr;
    std::vector<uint8_t> src, dst, recv;
    rpma_mr_local *src_mr = nullptr, *dst_mr = nullptr, *recv_mr = nullptr;
    rpma_mr_remote* remote = nullptr;
    rpma_ep* ep = nullptr;
    rpma_conn* client = nullptr;
    rpma_conn* server = nullptr;
    rpma_cq* client_cq = nullptr;
    rpma_cq* server_cq = nullptr;
  };

  // Connects a new pair on `port` with `receives` receives posted before
  // accepting. Returns its index.
  size_t Connect(const char* port = "7000", int receives = 4) {
    pairs_.emplace_back();
    Pair& p = pairs_.back();
    ibv_context* dev = nullptr;
    EXPECT_EQ(rpma_utils_get_ibv_context("10.0.0.1",
                                         RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
              0);
    EXPECT_EQ(rpma_peer_new(dev, &p.peer), 0);
    p.src.assign(kSize, 0);
    for (size_t i = 0; i < kSize; ++i)
      p.src[i] = static_cast<uint8_t>(i * 3 + 1);
    p.dst.assign(kSize, 0);
    p.recv.assign(64, 0);
    EXPECT_EQ(rpma_mr_reg(p.peer, p.src.data(), kSize, RPMA_MR_USAGE_WRITE_SRC,
                          &p.src_mr),
              0);
    EXPECT_EQ(rpma_mr_reg(p.peer, p.dst.data(), kSize, RPMA_MR_USAGE_WRITE_DST,
                          &p.dst_mr),
              0);
    EXPECT_EQ(rpma_mr_reg(p.peer, p.recv.data(), p.recv.size(),
                          RPMA_MR_USAGE_RECV, &p.recv_mr),
              0);
    EXPECT_EQ(rpma_ep_listen(p.peer, "10.0.0.1", port, &p.ep), 0);
    rpma_conn_req* req = nullptr;
    EXPECT_EQ(rpma_conn_req_new(p.peer, "10.0.0.1", port, nullptr, &req), 0);
    EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &p.client), 0);
    rpma_conn_req* server_req = nullptr;
    EXPECT_EQ(rpma_ep_next_conn_req(p.ep, nullptr, &server_req), 0);
    for (int i = 0; i < receives; ++i) {
      EXPECT_EQ(rpma_conn_req_recv(server_req, p.recv_mr, 0, 64,
                                   reinterpret_cast<void*>(uintptr_t{900} + i)),
                0);
    }
    uint8_t desc[21];
    rpma_mr_get_descriptor(p.dst_mr, desc);
    rpma_conn_private_data pdata{desc, sizeof(desc)};
    EXPECT_EQ(rpma_conn_req_connect(&server_req, &pdata, &p.server), 0);
    EXPECT_EQ(NextEvent(p.client), RPMA_CONN_ESTABLISHED);
    EXPECT_EQ(NextEvent(p.server), RPMA_CONN_ESTABLISHED);
    rpma_conn_private_data got{};
    rpma_conn_get_private_data(p.client, &got);
    EXPECT_EQ(rpma_mr_remote_from_descriptor(got.ptr, got.len, &p.remote), 0);
    rpma_conn_get_cq(p.client, &p.client_cq);
    rpma_conn_get_cq(p.server, &p.server_cq);
    return pairs_.size() - 1;
  }

  void Close(Pair& p) {
    rpma_conn_delete(&p.client);
    rpma_conn_delete(&p.server);
    rpma_ep_shutdown(&p.ep);
    rpma_mr_remote_delete(&p.remote);
    rpma_mr_dereg(&p.src_mr);
    rpma_mr_dereg(&p.dst_mr);
    rpma_mr_dereg(&p.recv_mr);
    rpma_peer_delete(&p.peer);
  }

  static rpma_conn_event NextEvent(rpma_conn* conn) {
    rpma_conn_event event = RPMA_CONN_UNDEFINED;
    EXPECT_EQ(rpma_conn_next_event(conn, &event), 0);
    return event;
  }

  uint32_t QpNum(rpma_conn* conn) {
    uint32_t n = 0;
    rpma_conn_get_qp_num(conn, &n);
    return n;
  }

  int Write(size_t pair, size_t i, size_t len = 64, uint32_t imm = 0x100) {
    Pair& p = pairs_[pair];
    return rpma_write_with_imm(p.client, p.remote, i * len, p.src_mr, i * len,
                               len, RPMA_F_COMPLETION_ALWAYS, imm,
                               reinterpret_cast<void*>(uintptr_t{i}));
  }

  // Everything both CQs of `pair` hold once the NIC is idle.
  std::vector<ibv_wc> Drain(rpma_cq* cq) {
    nic_->RunUntilIdle();
    std::vector<ibv_wc> out;
    ibv_wc wc;
    while (rpma_cq_get_wc(cq, 1, &wc, nullptr) == 0) out.push_back(wc);
    return out;
  }

  static std::vector<int> Statuses(const std::vector<ibv_wc>& wcs) {
    std::vector<int> out;
    for (const ibv_wc& wc : wcs) out.push_back(wc.status);
    return out;
  }

  FaultRule Rule(const std::string& name, FaultCall call, FaultAction action) {
    FaultRule rule;
    rule.name = name;
    rule.call = call;
    rule.action = action;
    return rule;
  }

  void Add(const FaultRule& rule) {
    std::string why;
    ASSERT_TRUE(faults_->AddRule(rule, &why)) << why;
  }

  std::shared_ptr<FakeNic> nic_;
  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<ScopedBackend> scoped_;
  std::vector<Pair> pairs_;
  std::vector<std::string> fault_records_;
};

// ---- actions ----------------------------------------------------------------

TEST_F(FaultInjectionTest, FailedPostSendReturnsProviderAndExecutesNothing) {
  size_t p = Connect();
  FaultRule rule =
      Rule("no room", FaultCall::kPostSend, FaultAction::kFailCall);
  rule.error = ENOMEM;
  Add(rule);
  EXPECT_EQ(Write(p, 0), RPMA_E_PROVIDER);
  EXPECT_TRUE(Drain(pairs_[p].client_cq).empty());
  EXPECT_TRUE(Drain(pairs_[p].server_cq).empty());
  EXPECT_EQ(pairs_[p].dst, std::vector<uint8_t>(kSize, 0));
  EXPECT_EQ(faults_->TimesFired("no room"), 1u);
  ASSERT_EQ(fault_records_.size(), 1u);
  EXPECT_THAT(fault_records_[0], HasSubstr("no room"));
}

TEST_F(FaultInjectionTest, FailedPostUsesThePersonalitysErrnoSign) {
  FakeNicConfig config;
  config.personality = Personality::Siw();
  Build(config, 7);
  FaultRule rule = Rule("siw", FaultCall::kPostRecv, FaultAction::kFailCall);
  rule.error = ENOMEM;
  Add(rule);
  ibv_qp qp{};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(faults_->PostRecv(&qp, &wr, &bad), -ENOMEM);
  EXPECT_EQ(bad, &wr);
}

TEST_F(FaultInjectionTest, CompleteWithStatusMovesTheQpToErrAndFlushes) {
  size_t p = Connect();
  FaultRule rule = Rule("deny second", FaultCall::kExecute,
                        FaultAction::kCompleteWithStatus);
  rule.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  rule.nth = 2;
  rule.status = IBV_WC_REM_ACCESS_ERR;
  Add(rule);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(Write(p, i), 0);
  EXPECT_THAT(
      Statuses(Drain(pairs_[p].client_cq)),
      ElementsAre(IBV_WC_SUCCESS, IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR));
  // A remote access error is a NAK: the responder QP goes to ERR too, so its
  // three remaining receives flush.
  EXPECT_THAT(Statuses(Drain(pairs_[p].server_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR,
                          IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(std::memcmp(pairs_[p].dst.data(), pairs_[p].src.data(), 64), 0);
  EXPECT_EQ(pairs_[p].dst[64], 0);  // the denied write moved nothing
  EXPECT_EQ(faults_->TimesFired("deny second"), 1u);
  ASSERT_EQ(faults_->Fired().size(), 1u);
  EXPECT_EQ(faults_->Fired()[0].wr_id, 1u);
}

// A post_send rule that gives the WR a status: the post succeeds, the WR
// (only that one) ends with the status when the NIC starts it, and no byte
// of it lands.
TEST_F(FaultInjectionTest, PostSendStatusEndsThatWrWhenItExecutes) {
  size_t p = Connect();
  FaultRule rule = Rule("second posted fails", FaultCall::kPostSend,
                        FaultAction::kCompleteWithStatus);
  rule.nth = 2;
  rule.status = IBV_WC_REM_OP_ERR;
  Add(rule);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(Write(p, i), 0);
  EXPECT_THAT(
      Statuses(Drain(pairs_[p].client_cq)),
      ElementsAre(IBV_WC_SUCCESS, IBV_WC_REM_OP_ERR, IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(std::memcmp(pairs_[p].dst.data(), pairs_[p].src.data(), 64), 0);
  EXPECT_EQ(pairs_[p].dst[64], 0);  // the failed write moved nothing
  EXPECT_EQ(faults_->TimesFired("second posted fails"), 1u);
}

TEST_F(FaultInjectionTest, LinkLevelStatusLeavesTheResponderAlone) {
  size_t p = Connect();
  FaultRule rule =
      Rule("retries", FaultCall::kExecute, FaultAction::kCompleteWithStatus);
  rule.status = IBV_WC_RETRY_EXC_ERR;
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  EXPECT_THAT(Statuses(Drain(pairs_[p].client_cq)),
              ElementsAre(IBV_WC_RETRY_EXC_ERR));
  EXPECT_TRUE(Drain(pairs_[p].server_cq).empty());
}

TEST_F(FaultInjectionTest, DelayHoldsTheWrForThatManySteps) {
  size_t p = Connect();
  FaultRule rule = Rule("slow", FaultCall::kExecute, FaultAction::kDelay);
  rule.delay_steps = 5;
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  ibv_wc wc;
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(nic_->Step());
    EXPECT_EQ(rpma_cq_get_wc(pairs_[p].client_cq, 1, &wc, nullptr),
              RPMA_E_NO_COMPLETION)
        << "step " << step;
  }
  ASSERT_TRUE(nic_->Step());  // the write itself
  EXPECT_EQ(rpma_cq_get_wc(pairs_[p].client_cq, 1, &wc, nullptr), 0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(faults_->TimesFired("slow"), 1u);
}

TEST_F(FaultInjectionTest, DelayOnOneQpLetsAnotherQpCompleteFirst) {
  size_t a = Connect("7000");
  size_t b = Connect("7001");
  FaultRule rule = Rule("hold a", FaultCall::kExecute, FaultAction::kDelay);
  rule.qp_num = QpNum(pairs_[a].client);
  rule.delay_steps = 10;
  Add(rule);
  std::vector<int> order;
  nic_->AddObserver([&](const FakeNicEvent& e) {
    if (e.kind == FakeNicEvent::Kind::kExecute) order.push_back(e.qp_num);
  });
  ASSERT_EQ(Write(a, 0), 0);
  ASSERT_EQ(Write(b, 0), 0);
  nic_->RunUntilIdle();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], static_cast<int>(QpNum(pairs_[b].client)));
  EXPECT_EQ(order[1], static_cast<int>(QpNum(pairs_[a].client)));
}

TEST_F(FaultInjectionTest, RandomScheduleInterleavesQpsBySeed) {
  auto run = [this](uint64_t seed) {
    for (Pair& p : pairs_) Close(p);
    pairs_.clear();
    FakeNicConfig config;
    config.seed = seed;
    config.random_schedule = true;
    Build(config, seed);
    size_t a = Connect("7000", 8);
    size_t b = Connect("7001", 8);
    std::vector<uint32_t> order;
    nic_->AddObserver([&](const FakeNicEvent& e) {
      if (e.kind == FakeNicEvent::Kind::kExecute) order.push_back(e.qp_num);
    });
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(Write(a, i), 0);
      EXPECT_EQ(Write(b, i), 0);
    }
    nic_->RunUntilIdle();
    std::string pattern;
    for (uint32_t qp : order) {
      pattern += qp == QpNum(pairs_[a].client) ? 'a' : 'b';
    }
    return pattern;
  };
  const std::string first = run(1);
  EXPECT_EQ(first.size(), 16u);
  EXPECT_EQ(run(1), first);  // same seed, same interleaving
  bool differs = false;
  for (uint64_t seed = 2; seed < 10 && !differs; ++seed) {
    differs = run(seed) != first;
  }
  EXPECT_TRUE(differs);
}

TEST_F(FaultInjectionTest, LoseConnectionGivesConnLostAtBothEndsAndFlushes) {
  size_t p = Connect();
  FaultRule rule =
      Rule("cable cut", FaultCall::kExecute, FaultAction::kLoseConnection);
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  EXPECT_THAT(Statuses(Drain(pairs_[p].client_cq)),
              ElementsAre(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(NextEvent(pairs_[p].client), RPMA_CONN_LOST);
  EXPECT_EQ(NextEvent(pairs_[p].server), RPMA_CONN_LOST);
  EXPECT_EQ(pairs_[p].dst, std::vector<uint8_t>(kSize, 0));
  EXPECT_EQ(faults_->TimesFired("cable cut"), 1u);
}

TEST_F(FaultInjectionTest, LoseConnectionOnAnEstablishedEvent) {
  FaultRule rule =
      Rule("drop at start", FaultCall::kCmEvent, FaultAction::kLoseConnection);
  rule.opcode = RDMA_CM_EVENT_ESTABLISHED;
  rule.nth = 2;  // the client's (the server's comes first)
  Add(rule);
  size_t p = Connect();
  EXPECT_EQ(NextEvent(pairs_[p].client), RPMA_CONN_LOST);
  EXPECT_EQ(NextEvent(pairs_[p].server), RPMA_CONN_LOST);
  EXPECT_EQ(faults_->TimesFired("drop at start"), 1u);
}

TEST_F(FaultInjectionTest, OverflowedCqFailsEveryPoll) {
  size_t p = Connect();
  FaultRule rule =
      Rule("overrun", FaultCall::kPollCq, FaultAction::kOverflowCq);
  rule.nth = 1;
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  nic_->RunUntilIdle();
  ibv_wc wc;
  EXPECT_EQ(rpma_cq_get_wc(pairs_[p].client_cq, 1, &wc, nullptr),
            RPMA_E_PROVIDER);
  EXPECT_EQ(rpma_cq_get_wc(pairs_[p].client_cq, 1, &wc, nullptr),
            RPMA_E_PROVIDER);
  EXPECT_EQ(faults_->TimesFired("overrun"), 1u);
}

TEST_F(FaultInjectionTest, OverflowOnExecuteLosesThatCompletion) {
  size_t p = Connect();
  FaultRule rule =
      Rule("lost cqe", FaultCall::kExecute, FaultAction::kOverflowCq);
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  nic_->RunUntilIdle();
  ibv_wc wc;
  EXPECT_EQ(rpma_cq_get_wc(pairs_[p].client_cq, 1, &wc, nullptr),
            RPMA_E_PROVIDER);
  // The write itself went through.
  EXPECT_EQ(std::memcmp(pairs_[p].dst.data(), pairs_[p].src.data(), 64), 0);
}

TEST_F(FaultInjectionTest, TornWriteLandsOnlyThePrefixThenFails) {
  size_t p = Connect();
  FaultRule rule = Rule("tear", FaultCall::kExecute, FaultAction::kTearWrite);
  rule.torn_bytes = 10;
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  EXPECT_THAT(Statuses(Drain(pairs_[p].client_cq)),
              ElementsAre(IBV_WC_RETRY_EXC_ERR));
  EXPECT_EQ(std::memcmp(pairs_[p].dst.data(), pairs_[p].src.data(), 10), 0);
  EXPECT_EQ(pairs_[p].dst[10], 0);
  EXPECT_EQ(
      std::count(pairs_[p].dst.begin(), pairs_[p].dst.end(), 0),
      static_cast<long>(kSize - 10) +
          std::count(pairs_[p].src.begin(), pairs_[p].src.begin() + 10, 0));
  // The message never completed at the responder.
  EXPECT_TRUE(Drain(pairs_[p].server_cq).empty());
  EXPECT_EQ(faults_->TimesFired("tear"), 1u);
}

TEST_F(FaultInjectionTest, FailedRegistrationIsProvider) {
  FaultRule rule =
      Rule("no pinning", FaultCall::kRegMr, FaultAction::kFailCall);
  rule.error = ENOMEM;
  rule.max_fires = 1;
  Add(rule);
  ibv_context* dev = nullptr;
  rpma_peer* peer = nullptr;
  ASSERT_EQ(
      rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
      0);
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  uint8_t buf[64];
  rpma_mr_local* mr = nullptr;
  EXPECT_EQ(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_SEND, &mr),
            RPMA_E_PROVIDER);
  EXPECT_EQ(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_SEND, &mr), 0);
  rpma_mr_dereg(&mr);
  rpma_peer_delete(&peer);
  EXPECT_EQ(faults_->TimesFired("no pinning"), 1u);
}

// PostSrqRecv is a post_recv call site (an SRQ belongs to no QP): a failed
// SRQ receive is RPMA_E_PROVIDER and nothing is queued.
TEST_F(FaultInjectionTest, FailedSrqReceiveIsProviderAndQueuesNothing) {
  FaultRule rule =
      Rule("srq full", FaultCall::kPostRecv, FaultAction::kFailCall);
  rule.error = ENOMEM;
  rule.max_fires = 1;
  Add(rule);
  ibv_context* dev = nullptr;
  rpma_peer* peer = nullptr;
  ASSERT_EQ(
      rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
      0);
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  uint8_t buf[64];
  rpma_mr_local* mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_RECV, &mr), 0);
  rpma_srq* srq = nullptr;
  ASSERT_EQ(rpma_srq_new(peer, nullptr, &srq), 0);
  EXPECT_EQ(rpma_srq_recv(srq, mr, 0, 64, nullptr), RPMA_E_PROVIDER);
  EXPECT_EQ(rpma_srq_recv(srq, mr, 0, 64, nullptr), 0);
  EXPECT_EQ(faults_->TimesFired("srq full"), 1u);
  EXPECT_EQ(rpma_srq_delete(&srq), 0);
  rpma_mr_dereg(&mr);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
}

TEST_F(FaultInjectionTest, FailedQpCreationFailsTheRequest) {
  FaultRule rule = Rule("no qp", FaultCall::kCreateQp, FaultAction::kFailCall);
  rule.error = ENOMEM;
  Add(rule);
  ibv_context* dev = nullptr;
  rpma_peer* peer = nullptr;
  rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev);
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  rpma_conn_req* req = nullptr;
  EXPECT_EQ(rpma_conn_req_new(peer, "10.0.0.1", "7000", nullptr, &req),
            RPMA_E_PROVIDER);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);  // nothing left behind on the PD
}

// The process's open descriptors (an event channel is one).
int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // opendir's own
}

TEST_F(FaultInjectionTest, FailedConnectAndAcceptAreProvider) {
  const int fds_before = OpenFds();
  FaultRule connect =
      Rule("refuse", FaultCall::kConnect, FaultAction::kFailCall);
  connect.error = ECONNREFUSED;
  connect.nth = 1;
  Add(connect);
  ibv_context* dev = nullptr;
  rpma_peer* peer = nullptr;
  rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev);
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  rpma_conn_req* req = nullptr;
  ASSERT_EQ(rpma_conn_req_new(peer, "10.0.0.1", "7000", nullptr, &req), 0);
  rpma_conn* conn = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &conn), RPMA_E_PROVIDER);
  EXPECT_EQ(faults_->TimesFired("refuse"), 1u);

  FaultRule accept =
      Rule("no accept", FaultCall::kAccept, FaultAction::kFailCall);
  accept.error = EINVAL;
  Add(accept);
  rpma_ep* ep = nullptr;
  ASSERT_EQ(rpma_ep_listen(peer, "10.0.0.1", "7001", &ep), 0);
  ASSERT_EQ(rpma_conn_req_new(peer, "10.0.0.1", "7001", nullptr, &req), 0);
  rpma_conn* client = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &client), 0);
  rpma_conn_req* server_req = nullptr;
  ASSERT_EQ(rpma_ep_next_conn_req(ep, nullptr, &server_req), 0);
  rpma_conn* server = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(&server_req, nullptr, &server),
            RPMA_E_PROVIDER);
  EXPECT_EQ(faults_->TimesFired("no accept"), 1u);
  // The refused client hears about it.
  EXPECT_EQ(NextEvent(client), RPMA_CONN_REJECTED);
  rpma_conn_delete(&client);
  rpma_ep_shutdown(&ep);
  rpma_peer_delete(&peer);
  // Both failed requests took their connection's event channel with them
  // (its id first: a channel with an id on it is kept, fd and all).
  EXPECT_EQ(OpenFds(), fds_before);
}

// ---- matching ---------------------------------------------------------------

TEST_F(FaultInjectionTest, EveryKthMatchFires) {
  size_t p = Connect("7000", 8);
  FaultRule rule =
      Rule("every 2nd", FaultCall::kPostSend, FaultAction::kFailCall);
  rule.error = EAGAIN;
  rule.every = 2;
  Add(rule);
  std::vector<int> results;
  for (size_t i = 0; i < 6; ++i) results.push_back(Write(p, i));
  EXPECT_THAT(results, ElementsAre(0, RPMA_E_PROVIDER, 0, RPMA_E_PROVIDER, 0,
                                   RPMA_E_PROVIDER));
  std::vector<uint64_t> matches;
  for (const FiredFault& f : faults_->Fired()) matches.push_back(f.match);
  EXPECT_THAT(matches, ElementsAre(2, 4, 6));
}

TEST_F(FaultInjectionTest, LengthImmAndQpNarrowTheMatch) {
  size_t a = Connect("7000");
  size_t b = Connect("7001");
  FaultRule rule = Rule("big imm 7 on b", FaultCall::kExecute,
                        FaultAction::kCompleteWithStatus);
  rule.status = IBV_WC_REM_OP_ERR;
  rule.min_length = 128;
  rule.imm = 7;
  rule.qp_num = QpNum(pairs_[b].client);
  Add(rule);
  ASSERT_EQ(Write(a, 0, 256, 7), 0);  // other QP
  ASSERT_EQ(Write(b, 0, 64, 7), 0);   // too short
  ASSERT_EQ(Write(b, 1, 256, 8), 0);  // other imm
  ASSERT_EQ(Write(b, 2, 256, 7), 0);  // this one
  EXPECT_THAT(Statuses(Drain(pairs_[a].client_cq)),
              ElementsAre(IBV_WC_SUCCESS));
  EXPECT_THAT(Statuses(Drain(pairs_[b].client_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_SUCCESS, IBV_WC_REM_OP_ERR));
  ASSERT_EQ(faults_->Fired().size(), 1u);
  EXPECT_EQ(faults_->Fired()[0].wr_id, 2u);
}

TEST_F(FaultInjectionTest, PredicateSeesTheWr) {
  size_t p = Connect();
  FaultRule rule =
      Rule("odd wr_id", FaultCall::kExecute, FaultAction::kCompleteWithStatus);
  rule.status = IBV_WC_GENERAL_ERR;
  rule.predicate = [](const ExecuteInfo& info) { return info.wr_id % 2 == 1; };
  Add(rule);
  ASSERT_EQ(Write(p, 0), 0);
  ASSERT_EQ(Write(p, 1), 0);
  EXPECT_THAT(Statuses(Drain(pairs_[p].client_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_GENERAL_ERR));
}

TEST_F(FaultInjectionTest, ProbabilityIsSeeded) {
  auto fired_on = [this](uint64_t seed) {
    for (Pair& p : pairs_) Close(p);
    pairs_.clear();
    Build(FakeNicConfig{}, seed);
    FaultRule rule = Rule("coin", FaultCall::kPollCq, FaultAction::kFailCall);
    rule.error = EIO;
    rule.probability = 0.5;
    Add(rule);
    std::vector<uint64_t> matches;
    ibv_cq cq{};
    ibv_wc wc;
    for (int i = 0; i < 64; ++i) faults_->PollCq(&cq, 1, &wc);
    for (const FiredFault& f : faults_->Fired()) matches.push_back(f.match);
    return matches;
  };
  std::vector<uint64_t> first = fired_on(11);
  EXPECT_GT(first.size(), 16u);
  EXPECT_LT(first.size(), 48u);
  EXPECT_EQ(fired_on(11), first);
  EXPECT_NE(fired_on(12), first);
}

TEST_F(FaultInjectionTest, NeverFiredNamesRulesThatDidNotFire) {
  size_t p = Connect();
  FaultRule hit = Rule("hit", FaultCall::kPostSend, FaultAction::kFailCall);
  hit.error = EIO;
  FaultRule miss = Rule("miss", FaultCall::kPostSend, FaultAction::kFailCall);
  miss.error = EIO;
  miss.imm = 0xdead;
  Add(hit);
  Add(miss);
  EXPECT_EQ(Write(p, 0), RPMA_E_PROVIDER);
  EXPECT_THAT(faults_->NeverFired(), ElementsAre("miss"));
}

TEST_F(FaultInjectionTest, RulesThatCannotWorkAreRefused) {
  std::string why;
  FaultRule tear_on_poll =
      Rule("x", FaultCall::kPollCq, FaultAction::kTearWrite);
  EXPECT_FALSE(faults_->AddRule(tear_on_poll, &why));
  EXPECT_THAT(why, HasSubstr("tear"));
  FaultRule no_errno = Rule("y", FaultCall::kPostSend, FaultAction::kFailCall);
  EXPECT_FALSE(faults_->AddRule(no_errno, &why));
  EXPECT_THAT(why, HasSubstr("errno"));
  FaultRule ok = Rule("z", FaultCall::kExecute, FaultAction::kDelay);
  EXPECT_TRUE(faults_->AddRule(ok, &why));
  EXPECT_FALSE(faults_->AddRule(ok, &why));
  EXPECT_THAT(why, HasSubstr("two fault rules"));
}

// ---- poll-time statuses and other backends
// -----------------------------------

TEST_F(FaultInjectionTest, PollRuleRewritesOnlyTheMatchedCompletionsStatus) {
  size_t p = Connect();
  FaultRule rule = Rule("second reported failed", FaultCall::kPollCq,
                        FaultAction::kCompleteWithStatus);
  rule.qp_num = QpNum(pairs_[p].client);
  rule.nth = 2;
  rule.status = IBV_WC_REM_OP_ERR;
  Add(rule);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(Write(p, i), 0);
  std::vector<ibv_wc> client = Drain(pairs_[p].client_cq);
  // Only the report changes: the NIC executed all three writes, the QP stays
  // in RTS (nothing flushes), every byte landed, the server saw all three.
  EXPECT_THAT(Statuses(client),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_REM_OP_ERR, IBV_WC_SUCCESS));
  EXPECT_EQ(client[1].wr_id, 1u);
  EXPECT_THAT(Statuses(Drain(pairs_[p].server_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_SUCCESS, IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(pairs_[p].dst.data(), pairs_[p].src.data(), 192), 0);
  EXPECT_EQ(faults_->TimesFired("second reported failed"), 1u);
  ASSERT_EQ(fault_records_.size(), 1u);
  EXPECT_THAT(fault_records_[0], HasSubstr("instead of success"));
}

TEST_F(FaultInjectionTest, PollRuleMatchesImmAndLeavesOtherQpsAlone) {
  size_t p = Connect();
  FaultRule rule = Rule("server imm 0x101", FaultCall::kPollCq,
                        FaultAction::kCompleteWithStatus);
  rule.imm = 0x101;
  rule.status = IBV_WC_LOC_PROT_ERR;
  Add(rule);
  ASSERT_EQ(Write(p, 0, 64, 0x100), 0);
  ASSERT_EQ(Write(p, 1, 64, 0x101), 0);
  // The client's completions carry no imm: only the server's second matches.
  EXPECT_THAT(Statuses(Drain(pairs_[p].client_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_SUCCESS));
  EXPECT_THAT(Statuses(Drain(pairs_[p].server_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_LOC_PROT_ERR));
}

TEST_F(FaultInjectionTest, OverAnotherBackendFakeOnlyFaultsAreRefusedByName) {
  Build(FakeNicConfig{}, 7, /*over_another_backend=*/true);
  EXPECT_EQ(faults_->fake_nic(), nullptr);
  EXPECT_STREQ(faults_->Name(), "mock+faults");
  struct Case {
    FaultCall call;
    FaultAction action;
    const char* why;
  };
  for (const Case& c : {
           Case{FaultCall::kExecute, FaultAction::kDelay, "execute-time"},
           Case{FaultCall::kExecute, FaultAction::kCompleteWithStatus,
                "execute-time"},
           Case{FaultCall::kExecute, FaultAction::kTearWrite, "execute-time"},
           Case{FaultCall::kPostSend, FaultAction::kCompleteWithStatus,
                "forced status for a posted WR"},
           Case{FaultCall::kCmEvent, FaultAction::kLoseConnection,
                "losing the connection"},
           Case{FaultCall::kPollCq, FaultAction::kOverflowCq, "CQ overrun"},
       }) {
    FaultRule rule = Rule("fake only", c.call, c.action);
    std::string why;
    EXPECT_FALSE(faults_->AddRule(rule, &why)) << ToString(c.action);
    EXPECT_THAT(why, HasSubstr("fault 'fake only'"));
    EXPECT_THAT(why, HasSubstr("mock backend"));
    EXPECT_THAT(why, HasSubstr(c.why));
    EXPECT_FALSE(FaultNeedsFakeNic(rule).empty());
  }
  EXPECT_TRUE(faults_->NeverFired().empty());  // nothing was added
}

TEST_F(FaultInjectionTest, OverAnotherBackendCallFaultsAndPollStatusesWork) {
  Build(FakeNicConfig{}, 7, /*over_another_backend=*/true);
  size_t p = Connect();
  FaultRule refuse =
      Rule("second post refused", FaultCall::kPostSend, FaultAction::kFailCall);
  refuse.nth = 2;
  refuse.error = ENOMEM;
  EXPECT_TRUE(FaultNeedsFakeNic(refuse).empty());
  Add(refuse);
  FaultRule report = Rule("first reported denied", FaultCall::kPollCq,
                          FaultAction::kCompleteWithStatus);
  report.qp_num = QpNum(pairs_[p].client);
  report.nth = 1;
  report.status = IBV_WC_REM_ACCESS_ERR;
  Add(report);
  EXPECT_EQ(Write(p, 0), 0);
  EXPECT_EQ(Write(p, 1), RPMA_E_PROVIDER);
  EXPECT_EQ(Write(p, 2), 0);
  EXPECT_THAT(Statuses(Drain(pairs_[p].client_cq)),
              ElementsAre(IBV_WC_REM_ACCESS_ERR, IBV_WC_SUCCESS));
  EXPECT_THAT(Statuses(Drain(pairs_[p].server_cq)),
              ElementsAre(IBV_WC_SUCCESS, IBV_WC_SUCCESS));
  EXPECT_EQ(faults_->TimesFired("second post refused"), 1u);
  EXPECT_EQ(faults_->TimesFired("first reported denied"), 1u);
  // Not a fake: the NIC's event stream holds no fault records; Fired() does.
  EXPECT_TRUE(fault_records_.empty());
  EXPECT_EQ(faults_->Fired().size(), 2u);
}

}  // namespace
}  // namespace rpma_harness
