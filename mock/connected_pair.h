// connected_pair.h: a librpma client and server, connected, on a fresh fake
// NIC, in one line, for tests of code that writes with immediate data.
//
//   class MyTest : public rpma_harness::ConnectedPairTest {};
//
//   TEST_F(MyTest, WriteArrivesWithImm) {
//     memcpy(pair().client_buffer(), "hello", 5);
//     ASSERT_THAT(pair().WriteWithImm(/*offset=*/0, /*len=*/5, 0x1234),
//                 IsRpmaOk());
//     ibv_wc wc;
//     ASSERT_THAT(pair().ServerCompletion(&wc), IsRpmaOk());
//     EXPECT_THAT(wc, IsSuccessWithImm(0x1234, 5));
//     EXPECT_EQ(memcmp(pair().server_buffer(), "hello", 5), 0);
//   }
//
// What the pair is: one FakeNic (manual progress, so the test decides when
// the NIC works; see fake_nic.h), installed with ScopedBackend for the
// pair's lifetime (optionally wrapped in a FaultInjector with the given
// rules); two peers on it; the server's destination buffer registered for
// RPMA_MR_USAGE_WRITE_DST and sent to the client as the connection's private
// data (the 21-byte descriptor), which the client turned into
// server_mr_remote(); the client's source buffer registered for
// RPMA_MR_USAGE_WRITE_SRC; `recvs` receives posted by the server before it
// accepted (a write with imm consumes one). Both connections are
// ESTABLISHED when the constructor returns with ok().
//
// Code under test may use the rpma handles directly (client(), ...); the
// helpers only save typing. The destructor tears everything down.
// Not thread-safe (as librpma's objects are not).

#ifndef RPMA_HARNESS_MOCK_CONNECTED_PAIR_H_
#define RPMA_HARNESS_MOCK_CONNECTED_PAIR_H_

#include <gtest/gtest.h>
#include <librpma.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "check/checking_backend.h"
#include "faults/fault_injection.h"
#include "nic/fake_nic.h"
#include "rpma/harness.h"

namespace rpma_harness {

struct ConnectedPairOptions {
  FakeNicConfig nic;              // seed, personality, caps, ...
  std::vector<FaultRule> faults;  // non-empty: a FaultInjector wraps the NIC
  uint64_t fault_seed = 1;        // the injector's (probability rules)
  size_t buffer_size = 4096;      // client's source, server's destination
  int recvs = 1;                  // receives posted before accepting
  size_t recv_size = 64;          // bytes of each receive
  // The server buffer's rpma_mr_reg usage (RPMA_MR_USAGE_WRITE_DST |
  // RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT for persistent memory).
  int server_usage = RPMA_MR_USAGE_WRITE_DST;
  // The client's connection gets a peer cfg that declares the server's
  // direct write to PMem (rpma_flush(PERSISTENT) needs it).
  bool direct_write_to_pmem = false;
  std::string address = "10.0.0.1";
  std::string port = "7204";
  // Set: a usage checker (check/checking_backend.h) wraps the NIC (and the
  // fault injector); its trace_nic defaults to the pair's NIC.
  std::optional<CheckOptions> check;
};

class ConnectedPair {
 public:
  explicit ConnectedPair(ConnectedPairOptions options = {});
  ~ConnectedPair();
  ConnectedPair(const ConnectedPair&) = delete;
  ConnectedPair& operator=(const ConnectedPair&) = delete;

  // False when setting up failed; error() then names the call and its code.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  FakeNic& nic() { return *nic_; }
  // nullptr when options.faults was empty.
  FaultInjector* faults() { return faults_.get(); }
  // nullptr when options.check was not set.
  CheckingBackend* checker() { return checker_.get(); }
  std::shared_ptr<CheckingBackend> shared_checker() { return checker_; }

  rpma_conn* client() { return client_; }
  rpma_conn* server() { return server_; }
  rpma_peer* client_peer() { return client_peer_; }
  rpma_peer* server_peer() { return server_peer_; }
  rpma_cq* client_cq() { return client_cq_; }
  rpma_cq* server_cq() { return server_cq_; }
  char* client_buffer() { return client_buffer_.data(); }
  char* server_buffer() { return server_buffer_.data(); }
  // The server's receive buffer (server_recv_mr(); PostServerRecv posts
  // its first recv_size bytes).
  char* recv_buffer() { return recv_buffer_.data(); }
  size_t buffer_size() const { return options_.buffer_size; }
  rpma_mr_local* client_mr() { return client_mr_; }
  rpma_mr_local* server_mr() { return server_mr_; }
  rpma_mr_local* server_recv_mr() { return recv_mr_; }
  // The client's handle on server_mr(), from the descriptor in the private
  // data of the server's accept.
  rpma_mr_remote* server_mr_remote() { return remote_; }
  uint32_t client_qp_num();
  uint32_t server_qp_num();

  // rpma_write_with_imm from client_buffer()+offset to the server's buffer at
  // the same offset; returns its result. The NIC has not run yet.
  int WriteWithImm(size_t offset, size_t len, uint32_t imm,
                   int flags = RPMA_F_COMPLETION_ALWAYS,
                   const void* op_context = nullptr);
  // Another receive on the server (rpma_recv into the receive buffer).
  int PostServerRecv(const void* op_context = nullptr);
  // Runs the NIC until it is idle, then takes one completion from that side's
  // CQ: 0, or RPMA_E_NO_COMPLETION when there is none.
  int ClientCompletion(ibv_wc* wc);
  int ServerCompletion(ibv_wc* wc);

 private:
  bool Check(int ret, const char* call);
  void Connect();

  ConnectedPairOptions options_;
  std::string error_;
  std::shared_ptr<FakeNic> nic_;
  std::shared_ptr<FaultInjector> faults_;
  std::shared_ptr<CheckingBackend> checker_;
  std::unique_ptr<ScopedBackend> use_;
  std::vector<char> client_buffer_;
  std::vector<char> server_buffer_;
  std::vector<char> recv_buffer_;
  rpma_peer* client_peer_ = nullptr;
  rpma_peer* server_peer_ = nullptr;
  rpma_mr_local* client_mr_ = nullptr;
  rpma_mr_local* server_mr_ = nullptr;
  rpma_mr_local* recv_mr_ = nullptr;
  rpma_mr_remote* remote_ = nullptr;
  rpma_ep* ep_ = nullptr;
  rpma_conn* client_ = nullptr;
  rpma_conn* server_ = nullptr;
  rpma_cq* client_cq_ = nullptr;
  rpma_cq* server_cq_ = nullptr;
};

// A gtest fixture owning a ConnectedPair made in SetUp() (which fails the
// test with the setup error, if any). Override Options() to configure it.
class ConnectedPairTest : public ::testing::Test {
 protected:
  virtual ConnectedPairOptions Options() { return {}; }
  void SetUp() override;
  void TearDown() override { pair_.reset(); }
  ConnectedPair& pair() { return *pair_; }

 private:
  std::unique_ptr<ConnectedPair> pair_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_CONNECTED_PAIR_H_
