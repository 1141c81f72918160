// conformance_fixture.h: two RC queue pairs connected through any
// VerbsBackend, for test bodies that must hold on the fake NIC and on a real
// NIC alike (the backend-parametrized suite in conformance_test.cc).
//
// The fixture talks to the backend exactly as librdmacm programs do: a
// listening id, a synchronous active id that is resolved, migrated to its
// own event channel and connected, the passive id taken from the
// CONNECT_REQUEST event. Completions are awaited by polling with a deadline,
// so the same body works with the fake's background progress and with a
// kernel driver.
//
//   class MyTest : public ConformanceTest {};
//   TEST_P(MyTest, Something) {
//     Connect(QpOptions{});
//     PostRecv(server(), ...);
//     ...
//   }
//
// Where real NICs disagree (rdma-unit-test's "introspection" idea), the test
// asks `quirks()` instead of branching on the backend's name.

#ifndef RPMA_HARNESS_TESTS_CONFORMANCE_FIXTURE_H_
#define RPMA_HARNESS_TESTS_CONFORMANCE_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

class FakeNic;

// What a backend under test is, and how it is known to deviate from the IB
// spec's letter (each flag names its source in conformance_fixture.cc).
struct BackendUnderTest {
  std::string name;  // "fake-spec", "fake-rxe", "rdma-core"
  // The requester's success CQE of RDMA_WRITE_WITH_IMM carries
  // IBV_WC_WITH_IMM and the write's byte_len.
  bool send_cqe_has_imm_and_byte_len = false;
};

// Every backend the current process can test: the fake NIC in both
// personalities on a host; the real rdma-core backend when
// RPMA_HARNESS_BACKEND=rdma-core (inside the soft-RoCE VM).
std::vector<BackendUnderTest> BackendsUnderTest();

struct QpOptions {
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_send_sge = 2;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
  int sq_sig_all = 0;
  uint8_t rnr_retry_count = 7;
  uint8_t retry_count = 7;
  // The server's QP takes its receives from an SRQ of this depth (0: its
  // own receive queue), as librpma's rpma_srq_new / rpma_conn_cfg_set_srq
  // set it up (one SGE per receive).
  uint32_t server_srq_wr = 0;
  // The server gets a separate receive CQ, and both its CQs share one
  // completion channel, armed (rpma_conn_cfg_set_compl_channel(3)).
  bool server_shared_channel = false;
};

// One side of the connection.
struct Endpoint {
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_cq* rcq = nullptr;                     // server_shared_channel only
  ibv_comp_channel* comp_channel = nullptr;  // server_shared_channel only
  ibv_srq* srq = nullptr;                    // server_srq_wr only
  ibv_qp* qp = nullptr;
  std::vector<uint8_t> buffer;  // registered as `mr`
  ibv_mr* mr = nullptr;
};

class ConformanceTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  static constexpr size_t kBufferSize = 64 * 1024;

  void SetUp() override;
  void TearDown() override;

  // Connects client() to server(). `before_accept` runs on the server once
  // its QP exists and before it accepts (to post receives first).
  void Connect(const QpOptions& options,
               const std::function<void()>& before_accept = nullptr);

  VerbsBackend& nic() { return *backend_; }
  const BackendUnderTest& quirks() const { return GetParam(); }
  Endpoint& client() { return client_; }
  Endpoint& server() { return server_; }

  // Posts one receive of [offset, offset + len) of the side's buffer
  // (len 0: no SGE). Returns the backend's return value.
  int PostRecv(Endpoint& side, uint64_t wr_id, size_t offset = 0,
               uint32_t len = 0);
  // A write (with imm when `with_imm`) of client buffer [src_offset, +len)
  // to server buffer offset `dst_offset` with the server's rkey.
  ibv_send_wr WriteWr(uint64_t wr_id, size_t src_offset, size_t dst_offset,
                      uint32_t len, bool with_imm, uint32_t imm_host,
                      bool signaled, ibv_sge* sge_storage);
  int PostSend(Endpoint& side, ibv_send_wr* wr, ibv_send_wr** bad_wr);

  // Waits up to `timeout_ms` for the next completion of `side` (on `cq`,
  // by default the side's main CQ).
  bool WaitCompletion(Endpoint& side, ibv_wc* wc, int timeout_ms = 5000,
                      ibv_cq* cq = nullptr);
  // Posts one receive of [offset, +len) of the server's buffer to its SRQ.
  int PostSrqRecv(uint64_t wr_id, size_t offset, uint32_t len);
  // Lets the NIC finish whatever it can, then says whether `side` has no
  // completion pending (a bounded wait on a real NIC).
  bool NoCompletionPending(Endpoint& side);
  // The QP state as the backend reports it.
  ibv_qp_state QpState(Endpoint& side);

  // Appends one line describing `wc` of `side` to the case's completion
  // stream (see conformance_stream.h), which the differential test compares
  // across backends.
  void Record(const char* side_name, const ibv_wc& wc);
  void RecordPost(const char* what, int ret);

 private:
  void SetUpEndpointQueues(Endpoint& side, const QpOptions& options);
  void TearDownEndpoint(Endpoint& side);
  rdma_cm_event_type NextCmEvent(rdma_event_channel* channel);

  std::shared_ptr<VerbsBackend> backend_;
  FakeNic* fake_ = nullptr;  // set when the backend is the fake NIC
  rdma_event_channel* listen_channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  Endpoint client_;
  Endpoint server_;
  std::vector<std::string> stream_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TESTS_CONFORMANCE_FIXTURE_H_
