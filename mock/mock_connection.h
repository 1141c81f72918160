// mock_connection.h: an rpma connection whose NIC is a MockVerbsBackend, for
// tests that assert exactly what the rpma layer hands to the backend.
//
// The mock answers every set-up call (device, PD, MRs, CQs, CM ids, QP) with
// hand-built rdma-core structs owned by the fixture, so a test gets a live
// rpma_conn and then sets only the expectation it cares about:
//
//   class WriteTest : public MockConnectionTest {};
//   TEST_F(WriteTest, PostsOneWr) {
//     EXPECT_CALL(mock(), PostSend(qp(), _, _)).WillOnce(CaptureSendWr(&wr));
//     rpma_write_with_imm(conn(), remote(), 0, local(), 0, 8, ...);
//   }

#ifndef RPMA_HARNESS_MOCK_MOCK_CONNECTION_H_
#define RPMA_HARNESS_MOCK_MOCK_CONNECTION_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "mock/mock_verbs_backend.h"
#include "rpma/harness.h"
#include "rpma/librpma.h"

namespace rpma_harness {
namespace testing_support {

// A deep copy of an ibv_send_wr (its SGE list included), since the rpma layer
// builds WRs on its stack.
struct CapturedSendWr {
  ibv_send_wr wr;
  std::vector<ibv_sge> sges;
};

struct CapturedRecvWr {
  ibv_recv_wr wr;
  std::vector<ibv_sge> sges;
};

class MockConnectionTest : public ::testing::Test {
 protected:
  static constexpr size_t kLocalSize = 4096;
  static constexpr uint64_t kRemoteAddr = 0x7f0000100000ull;
  static constexpr uint64_t kRemoteSize = 1 << 20;
  static constexpr uint32_t kRemoteRkey = 0xabcdef01u;
  static constexpr uint32_t kLocalLkey = 0x1111u;
  static constexpr uint32_t kRawLkey = 0x2222u;
  static constexpr uint32_t kQpNum = 0x2a;

  MockConnectionTest();
  ~MockConnectionTest() override;

  void SetUp() override;
  void TearDown() override;

  ::testing::NiceMock<MockVerbsBackend>& mock() { return *mock_; }
  rpma_peer* peer() { return peer_; }
  rpma_conn* conn() { return conn_; }
  rpma_mr_local* local() { return local_; }
  rpma_mr_remote* remote() { return remote_; }
  ibv_qp* qp() { return &qp_; }
  ibv_pd* pd() { return &pd_; }
  ibv_context* context() { return &context_; }
  ibv_cq* cq() { return &cq_; }
  ibv_comp_channel* comp_channel() { return &comp_channel_; }
  uint8_t* local_buffer() { return local_buffer_.data(); }
  // The connection's read-after-write buffer for rpma_flush (librpma's
  // flush.c: 8 bytes registered READ_DST, i.e. IBV_ACCESS_LOCAL_WRITE).
  ibv_mr* raw_mr() { return &raw_mr_; }

  // A passive-side connection request (as from rpma_ep_next_conn_req) whose
  // private data is `pdata`.
  rpma_conn_req* NewPassiveRequest(const std::string& pdata);
  // An active-side connection request (as from rpma_conn_req_new).
  rpma_conn_req* NewActiveRequest();

  // Queues a CM event that the mock's GetCmEvent hands out next.
  void QueueCmEvent(rdma_cm_event_type type, const std::string& pdata = "");

  // Lines the rpma layer logged during the test.
  const std::vector<std::string>& log() const { return log_; }

 private:
  std::shared_ptr<::testing::NiceMock<MockVerbsBackend>> mock_;
  std::unique_ptr<ScopedBackend> scoped_;
  ibv_context context_{};
  ibv_pd pd_{};
  ibv_mr local_mr_{};
  ibv_mr raw_mr_{};
  ibv_comp_channel comp_channel_{};
  ibv_cq cq_{};
  ibv_qp qp_{};
  rdma_event_channel event_channel_{};
  rdma_cm_id id_{};
  rdma_cm_id listen_id_{};
  std::deque<rdma_cm_event> cm_events_;
  std::deque<std::string> cm_event_data_;
  std::vector<uint8_t> local_buffer_;
  std::vector<std::string> log_;
  rpma_peer* peer_ = nullptr;
  rpma_mr_local* local_ = nullptr;
  rpma_mr_remote* remote_ = nullptr;
  rpma_conn* conn_ = nullptr;
};

// gMock actions that copy the WR and answer `ret`.
::testing::Action<int(ibv_qp*, ibv_send_wr*, ibv_send_wr**)> CaptureSendWr(
    CapturedSendWr* out, int ret = 0);
::testing::Action<int(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**)> CaptureRecvWr(
    CapturedRecvWr* out, int ret = 0);

}  // namespace testing_support
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_MOCK_CONNECTION_H_
