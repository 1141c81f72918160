// fault_paths_test.cc: every fault path of the write-with-imm flow releases
// everything, through the rpma API only.
//
// Each test builds a client and a server (two peers, so two PDs) on a fake
// NIC in manual progress mode, injects one failure (a FaultInjector rule
// that fails the next post or gives the next WR a status, or the fake's
// LoseConnection), or leaves
// work outstanding, then tears down, in the usual order or in a shuffled
// one. Afterwards:
//   - every rpma_*_delete / dereg / shutdown eventually returned 0 (one may
//     refuse while something still uses its object, e.g. a peer with MRs,
//     and is retried after the others);
//   - the fake NIC holds no QP, CQ or event channel any more;
//   - every rpma object is freed: run under --config=asan, LeakSanitizer
//     reports any rpma object (which would also keep the NIC alive).

#include <gtest/gtest.h>
#include <librpma.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "faults/fault_injection.h"
#include "nic/fake_nic.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

constexpr char kAddr[] = "10.5.0.1";
constexpr size_t kSize = 4096;
const void* const kWriteCtx = reinterpret_cast<const void*>(0x77);

class Flow {
 public:
  explicit Flow(const std::string& port) : port_(port) {
    nic_ = std::make_shared<FakeNic>();
    faults_ = std::make_shared<FaultInjector>(nic_, /*seed=*/1);
    use_ = std::make_unique<ScopedBackend>(faults_);
    SetLogSink([](const std::string&) {});  // refusals are expected here
  }
  ~Flow() { SetLogSink(nullptr); }

  // Peers, MRs, listener, both connections ESTABLISHED, one receive posted.
  void Connect() {
    ibv_context* dev = nullptr;
    ASSERT_EQ(
        rpma_utils_get_ibv_context(kAddr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
        0);
    ASSERT_EQ(rpma_peer_new(dev, &server_peer_), 0);
    ASSERT_EQ(rpma_peer_new(dev, &client_peer_), 0);
    ASSERT_EQ(rpma_mr_reg(client_peer_, src_, kSize, RPMA_MR_USAGE_WRITE_SRC,
                          &src_mr_),
              0);
    ASSERT_EQ(rpma_mr_reg(server_peer_, dst_, kSize, RPMA_MR_USAGE_WRITE_DST,
                          &dst_mr_),
              0);
    ASSERT_EQ(rpma_mr_reg(server_peer_, recv_, sizeof(recv_),
                          RPMA_MR_USAGE_RECV, &recv_mr_),
              0);
    ASSERT_EQ(rpma_ep_listen(server_peer_, kAddr, port_.c_str(), &ep_), 0);
    rpma_conn_req* req = nullptr;
    ASSERT_EQ(
        rpma_conn_req_new(client_peer_, kAddr, port_.c_str(), nullptr, &req),
        0);
    ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &client_), 0);
    rpma_conn_req* server_req = nullptr;
    ASSERT_EQ(rpma_ep_next_conn_req(ep_, nullptr, &server_req), 0);
    ASSERT_EQ(
        rpma_conn_req_recv(server_req, recv_mr_, 0, sizeof(recv_), nullptr), 0);
    uint8_t desc[21];
    ASSERT_EQ(rpma_mr_get_descriptor(dst_mr_, desc), 0);
    rpma_conn_private_data pdata{desc, sizeof(desc)};
    ASSERT_EQ(rpma_conn_req_connect(&server_req, &pdata, &server_), 0);
    ASSERT_EQ(NextEvent(client_), RPMA_CONN_ESTABLISHED);
    ASSERT_EQ(NextEvent(server_), RPMA_CONN_ESTABLISHED);
    rpma_conn_private_data got{};
    ASSERT_EQ(rpma_conn_get_private_data(client_, &got), 0);
    ASSERT_EQ(rpma_mr_remote_from_descriptor(got.ptr, got.len, &remote_), 0);
    ASSERT_EQ(rpma_conn_get_cq(client_, &client_cq_), 0);
    ASSERT_EQ(rpma_conn_get_cq(server_, &server_cq_), 0);
  }

  rpma_conn_event NextEvent(rpma_conn* conn) {
    rpma_conn_event event = RPMA_CONN_UNDEFINED;
    EXPECT_EQ(rpma_conn_next_event(conn, &event), 0);
    return event;
  }

  int Write(size_t offset = 0, size_t len = 64) {
    return rpma_write_with_imm(client_, remote_, offset, src_mr_, 0, len,
                               RPMA_F_COMPLETION_ALWAYS, 0x42, kWriteCtx);
  }

  // Polls one completion after running the NIC; status or -1 when none.
  int Completion(rpma_cq* cq) {
    nic_->RunUntilIdle();
    ibv_wc wc;
    if (rpma_cq_get_wc(cq, 1, &wc, nullptr) != 0) return -1;
    return wc.status;
  }

  uint32_t ClientQpNum() {
    uint32_t num = 0;
    rpma_conn_get_qp_num(client_, &num);
    return num;
  }

  // Every teardown step, in `order` (indices into the list below). Only a
  // peer may refuse (its PD is busy while MRs or connections use it; the
  // peer stays valid) and is retried after the others; any other step must
  // succeed at once: rpma_conn_delete frees its object even when a provider
  // call fails, so a failure there would be a resource lost in the NIC.
  // Returns the steps that failed or never succeeded.
  std::vector<std::string> TearDown(std::vector<int> order) {
    struct Step {
      std::string name;
      bool may_refuse;
      std::function<int()> run;
    };
    std::vector<Step> steps = {
        {"client conn", false,
         [&] {
           rpma_conn_disconnect(client_);
           return rpma_conn_delete(&client_);
         }},
        {"server conn", false, [&] { return rpma_conn_delete(&server_); }},
        {"ep", false, [&] { return rpma_ep_shutdown(&ep_); }},
        {"src mr", false, [&] { return rpma_mr_dereg(&src_mr_); }},
        {"dst mr", false, [&] { return rpma_mr_dereg(&dst_mr_); }},
        {"recv mr", false, [&] { return rpma_mr_dereg(&recv_mr_); }},
        {"remote", false, [&] { return rpma_mr_remote_delete(&remote_); }},
        {"client peer", true, [&] { return rpma_peer_delete(&client_peer_); }},
        {"server peer", true, [&] { return rpma_peer_delete(&server_peer_); }},
    };
    if (order.empty()) {
      for (size_t i = 0; i < steps.size(); ++i) order.push_back(int(i));
    }
    std::vector<std::string> failed;
    for (int pass = 0; pass < 2 && !order.empty(); ++pass) {
      std::vector<int> refused;
      for (int i : order) {
        const int ret = steps[i].run();
        if (ret == 0) continue;
        if (steps[i].may_refuse && pass == 0) {
          refused.push_back(i);
        } else {
          failed.push_back(steps[i].name + ": " + rpma_err_2str(ret));
        }
      }
      order = refused;
    }
    return failed;
  }

  static size_t NumSteps() { return 9; }

  // What the NIC still holds (DebugString lists QPs, CQs, CM channels).
  std::string NicLeftovers() {
    std::string left;
    const std::string state = nic_->DebugString();
    size_t pos = state.find('\n');
    while (pos != std::string::npos && pos + 1 < state.size()) {
      const size_t end = state.find('\n', pos + 1);
      const std::string line = state.substr(pos + 1, end - pos - 1);
      if (line.find("  qp ") == 0 || line.find("  cq ") == 0 ||
          line.find("  cm channel") == 0) {
        left += line + "\n";
      }
      pos = end;
    }
    return left;
  }

  FakeNic& nic() { return *nic_; }
  // The next post_send fails with `error`.
  void FailNextPostSend(int error) {
    FaultRule rule = NextPostSend(FaultAction::kFailCall);
    rule.error = error;
    ASSERT_TRUE(faults_->AddRule(rule));
  }
  // The next WR posted ends with `status` when the NIC starts it.
  void FailNextWr(ibv_wc_status status) {
    FaultRule rule = NextPostSend(FaultAction::kCompleteWithStatus);
    rule.status = status;
    ASSERT_TRUE(faults_->AddRule(rule));
  }
  // A rule that fires on the next post_send only.
  FaultRule NextPostSend(FaultAction action) {
    FaultRule rule;
    rule.name = "post_send rule " + std::to_string(++rules_);
    rule.call = FaultCall::kPostSend;
    rule.nth = 1;
    rule.action = action;
    return rule;
  }
  rpma_conn* client() { return client_; }
  rpma_conn* server() { return server_; }
  rpma_cq* client_cq() { return client_cq_; }
  rpma_cq* server_cq() { return server_cq_; }

 private:
  std::string port_;
  std::shared_ptr<FakeNic> nic_;
  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<ScopedBackend> use_;
  int rules_ = 0;
  char src_[kSize] = {};
  char dst_[kSize] = {};
  char recv_[64] = {};
  rpma_peer* server_peer_ = nullptr;
  rpma_peer* client_peer_ = nullptr;
  rpma_mr_local* src_mr_ = nullptr;
  rpma_mr_local* dst_mr_ = nullptr;
  rpma_mr_local* recv_mr_ = nullptr;
  rpma_mr_remote* remote_ = nullptr;
  rpma_ep* ep_ = nullptr;
  rpma_conn* client_ = nullptr;
  rpma_conn* server_ = nullptr;
  rpma_cq* client_cq_ = nullptr;
  rpma_cq* server_cq_ = nullptr;
};

void ExpectAllReleased(Flow& flow, const std::vector<int>& order = {}) {
  EXPECT_EQ(flow.TearDown(order), std::vector<std::string>{});
  EXPECT_EQ(flow.NicLeftovers(), "");
}

TEST(FaultPathsTest, CleanFlowReleasesEverything) {
  Flow flow("7601");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  ASSERT_EQ(flow.Write(), 0);
  EXPECT_EQ(flow.Completion(flow.server_cq()), IBV_WC_SUCCESS);
  EXPECT_EQ(flow.Completion(flow.client_cq()), IBV_WC_SUCCESS);
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, FailedPostSendReleasesEverything) {
  Flow flow("7602");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  flow.FailNextPostSend(ENOMEM);
  EXPECT_EQ(flow.Write(), RPMA_E_PROVIDER);
  // The connection is still usable afterwards.
  ASSERT_EQ(flow.Write(), 0);
  EXPECT_EQ(flow.Completion(flow.client_cq()), IBV_WC_SUCCESS);
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, ForcedErrorCompletionReleasesEverything) {
  Flow flow("7603");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  flow.FailNextWr(IBV_WC_REM_ACCESS_ERR);
  ASSERT_EQ(flow.Write(), 0);
  ASSERT_EQ(flow.Write(), 0);  // flushed behind the error
  EXPECT_EQ(flow.Completion(flow.client_cq()), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(flow.Completion(flow.client_cq()), IBV_WC_WR_FLUSH_ERR);
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, LostConnectionWithWorkOutstandingReleasesEverything) {
  Flow flow("7604");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  ASSERT_EQ(flow.Write(), 0);
  ASSERT_EQ(flow.Write(), 0);
  ASSERT_TRUE(flow.nic().LoseConnection(flow.ClientQpNum()));
  EXPECT_EQ(flow.NextEvent(flow.client()), RPMA_CONN_LOST);
  EXPECT_EQ(flow.NextEvent(flow.server()), RPMA_CONN_LOST);
  EXPECT_EQ(flow.Completion(flow.client_cq()), IBV_WC_WR_FLUSH_ERR);
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, LostConnectionWithEventsNeverReadReleasesEverything) {
  Flow flow("7605");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  ASSERT_EQ(flow.Write(), 0);
  ASSERT_TRUE(flow.nic().LoseConnection(flow.ClientQpNum()));
  flow.nic().RunUntilIdle();
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, TeardownWithWritesAndReceivesOutstanding) {
  Flow flow("7606");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  for (int i = 0; i < 5; ++i) ASSERT_EQ(flow.Write(), 0);
  ASSERT_EQ(rpma_recv(flow.server(), nullptr, 0, 0, nullptr), 0);
  // Nothing has executed: the NIC is not stepped before teardown.
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, TeardownWithCompletionsNeverPolled) {
  Flow flow("7607");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  ASSERT_EQ(flow.Write(), 0);
  ASSERT_EQ(flow.Write(kSize, 8), 0);  // past the end: an error at both ends
  flow.nic().RunUntilIdle();
  ExpectAllReleased(flow);
}

TEST(FaultPathsTest, TeardownWithoutDisconnectOnEitherSide) {
  Flow flow("7608");
  ASSERT_NO_FATAL_FAILURE(flow.Connect());
  ASSERT_EQ(flow.Write(), 0);
  // Server side first, no disconnect: the client's id gets DISCONNECTED.
  const std::vector<int> order = {1, 0, 2, 3, 4, 5, 6, 7, 8};
  ExpectAllReleased(flow, order);
}

// Objects deleted in any order: shuffled teardowns over the fault paths.
TEST(FaultPathsTest, AnyDeletionOrderReleasesEverything) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 96; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Flow flow(std::to_string(7700 + round));
    ASSERT_NO_FATAL_FAILURE(flow.Connect());
    switch (round % 4) {
      case 0:  // work outstanding
        ASSERT_EQ(flow.Write(), 0);
        break;
      case 1:  // a failed post
        flow.FailNextPostSend(EINVAL);
        EXPECT_EQ(flow.Write(), RPMA_E_PROVIDER);
        break;
      case 2:  // an error completion, the QPs in ERR
        flow.FailNextWr(IBV_WC_GENERAL_ERR);
        ASSERT_EQ(flow.Write(), 0);
        flow.nic().RunUntilIdle();
        break;
      default:  // connection lost, events unread
        ASSERT_EQ(flow.Write(), 0);
        flow.nic().LoseConnection(flow.ClientQpNum());
        break;
    }
    std::vector<int> order;
    for (size_t i = 0; i < Flow::NumSteps(); ++i) order.push_back(int(i));
    std::shuffle(order.begin(), order.end(), rng);
    ExpectAllReleased(flow, order);
  }
}

}  // namespace
}  // namespace rpma_harness
