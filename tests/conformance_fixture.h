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

#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
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
// personalities on a host, and the rxe personality once more as two NICs
// that meet only through a cross-process fabric directory
// ("fake_rxe_fabric": client and server each on their own NIC, as two
// processes are); the real rdma-core backend when
// RPMA_HARNESS_BACKEND=rdma-core (inside the soft-RoCE VM).
std::vector<BackendUnderTest> BackendsUnderTest();

struct QpOptions {
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  // Each side's CQ (ibv_create_cq's cqe; rxe rounds it up to 2^n - 1).
  int cq_depth = 256;
  uint32_t max_send_sge = 2;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
  int sq_sig_all = 0;
  uint8_t rnr_retry_count = 7;
  uint8_t retry_count = 7;
  // Both ids' RDMA_OPTION_ID_ACK_TIMEOUT (rdma_set_option(3)) before
  // connect / accept: the QPs' local ACK timeout, 4.096 us x 2^value
  // (0: leave rdma_cm's).
  uint8_t ack_timeout = 0;
  // rdma_conn_param's RDMA READ depths of rdma_connect (client) and
  // rdma_accept (server).
  uint8_t client_initiator_depth = 1;
  uint8_t client_responder_resources = 1;
  uint8_t server_initiator_depth = 1;
  uint8_t server_responder_resources = 1;
  // The server's QP takes its receives from an SRQ of this depth (0: its
  // own receive queue), as librpma's rpma_srq_new / rpma_conn_cfg_set_srq
  // set it up (max_recv_sge SGEs per receive).
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
  // The client's buffer holds this pattern (never 0) from Connect on, the
  // server's is zero, so the server's non-zero ranges are what landed.
  static uint8_t Pattern(size_t i) { return static_cast<uint8_t>(1 + i % 251); }

  void SetUp() override;
  void TearDown() override;

  // Connects client() to server(). `before_accept` runs on the server once
  // its QP exists and before it accepts (to post receives first).
  void Connect(const QpOptions& options,
               const std::function<void()>& before_accept = nullptr);

  // One more connection after Connect: a client QP and a server QP with
  // their own rdma_cm ids and event channels, on client()'s and server()'s
  // PD and CQs, and the server's SRQ if it has one (ibv_create_qp(3): QPs
  // of one context may share CQs and an SRQ, and MRs of their PD serve
  // them all). The pair's Endpoints hold only id,
  // channel and qp; client(pair) / server(pair) name them, pair 0 being
  // client() / server(). Completions of pair k > 0 are recorded as
  // "client qpk ..." (by wc.qp_num), its posts as "send client qpk".
  // EndSection tears the pairs down before the owners of their queues.
  void ConnectAnotherPair(const QpOptions& options);
  int pairs() const { return 1 + static_cast<int>(pair_clients_.size()); }

  // The backend that owns `side`'s objects: the one backend, or with
  // "fake_rxe_fabric" the client's NIC or the server's.
  VerbsBackend& nic(const Endpoint& side) {
    return server_backend_ != nullptr && IsServer(side) ? *server_backend_
                                                        : *backend_;
  }
  const BackendUnderTest& quirks() const { return GetParam(); }
  Endpoint& client() { return client_; }
  Endpoint& server() { return server_; }
  Endpoint& client(int pair) {
    return pair == 0 ? client_ : pair_clients_[static_cast<size_t>(pair - 1)];
  }
  Endpoint& server(int pair) {
    return pair == 0 ? server_ : pair_servers_[static_cast<size_t>(pair - 1)];
  }
  // Whether `side` is the server of its pair.
  bool IsServer(const Endpoint& side) const;
  // "client" or "server", and " qpK" for the pair K > 0 it belongs to.
  std::string SideName(const Endpoint& side) const;

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
  // stream, which the differential compares across backends: every field a
  // program reads (status, opcode, byte_len, wc_flags, imm_data, wr_id), on
  // success and on error alike (ibv_poll_cq(3) leaves them undefined on
  // error, so a personality must reproduce its NIC's values).
  void Record(const char* side_name, const ibv_wc& wc);
  static std::string WcLine(const char* side_name, const ibv_wc& wc);
  // A post's return code and which WR of the chain *bad_wr names (-1: none).
  void RecordPost(const char* what, int ret, int bad_index = -1);
  void RecordLine(const std::string& line);
  // The CM events each side's channel holds, as "cm SIDE EVENT status=N"
  // lines, client first, each acknowledged (TIMEWAIT_EXIT acknowledged and
  // not recorded: its arrival is a timer the fake does not model). On a fake the NICs settle first;
  // on a real NIC each channel is watched for up to `wait_ms` for its first
  // event (rdma_cm's DREQ crosses as a MAD: a few ms on rxe).
  void RecordCmEvents(int wait_ms);
  // The CM events both sides get within the next `ms` of real time, on
  // every backend (TIMEWAIT_EXIT included), as "cm SIDE EVENT status=N
  // TAG" lines, each acknowledged: for events that rdma_cm's timers bring.
  // The client's come first, then the server's, each side's in the order
  // it got them (which side's timer runs out first is timing).
  void RecordCmEventsFor(int ms, const std::string& tag);
  // The non-zero ranges of `bytes` as " [a,b) [c,d)", or " none": in a
  // buffer that started zeroed and took only never-0 patterns, exactly the
  // bytes that landed.
  static std::string LandedRanges(const std::vector<uint8_t>& bytes);
  // A "landed NAME fnv1a=N" line: FNV-1a over every byte of `bytes`.
  void RecordDigest(const std::string& name, const std::vector<uint8_t>& bytes);

  // Sections let one test run the same case at several write sizes, each on
  // a fresh connection: BeginSection tags the stream lines that follow;
  // EndSection waits for every completion still to come on both sides
  // (after an error the responder's flushes too), records them, the QP
  // states and the byte ranges of the server buffer that changed, then
  // tears the connection down. TearDown ends an open section.
  void BeginSection(const std::string& tag);
  void EndSection();

  // The write sizes the sized cases run at: 0, 1, 64, MTU-1, MTU, MTU+1,
  // 4 KiB, 64 KiB, with MTU the path MTU of rxe over a 1500-byte netdev
  // (1024; recorded by the QueryQpAfterConnect case).
  static std::vector<uint32_t> WriteSizes();

  // For differentials inside one test (the random programs): switch to
  // another backend ("rdma_core", "fake_rxe", "fake_spec"; ends an open
  // section), and take the stream recorded so far.
  void UseBackend(const std::string& name);
  std::vector<std::string> TakeStream();
  // The path MTU of the connections made from now on: 256, 512, 1024, 2048
  // or 4096 bytes (0: the default, rxe over a 1500-byte netdev, 1024). For
  // RoCE rdma_cm takes it from the netdev under the device (kernel cma.c
  // cma_resolve_iboe_route: iboe_get_mtu(ndev->mtu)), and rxe's port
  // follows the netdev too (rxe_net.c rxe_notify, NETDEV_CHANGEMTU ->
  // rxe.c rxe_set_mtu). So on a real NIC this sets the MTU of the netdev
  // that owns the test address (SIOCSIFMTU: root, as in the soft-RoCE VM;
  // put back at TearDown); on the fake it remakes the NIC(s) with
  // FakeDeviceCaps::active_mtu. Ends an open section.
  void SetPathMtu(uint32_t bytes);
  // Records every completion still pending on `side` (EndSection does both
  // sides): on the fake it runs the NIC until idle; on a kernel driver it
  // polls until nothing arrives for drain_quiet_ms_.
  void DrainAndRecord(Endpoint& side);
  // DrainAndRecord of the client, then of the server, in one wait: on a
  // kernel driver both CQs are polled until neither has had a completion
  // for drain_quiet_ms_ (the lines come out as the two calls write them).
  void DrainBothAndRecord();
  // The one drain both use: the sides whose CQ exists, recorded in order.
  void DrainAndRecord(std::initializer_list<Endpoint*> sides);
  bool compare_with_recording_ = true;
  // EndSection also records a digest of the client's buffer (READ and
  // atomic results land there), as a "landed client" line.
  bool record_client_digest_ = false;
  int drain_quiet_ms_ = 300;
  // On a kernel driver, how long a drain waits before its first poll: a
  // CQ that overflows then holds what the NIC completed first, as a
  // settled fake's does, and not what the polls made room for meanwhile.
  int drain_settle_ms_ = 0;
  bool on_fake() const { return fake_ != nullptr; }

 private:
  void SetUpEndpointQueues(Endpoint& side, const QpOptions& options);
  // Connect's and ConnectAnotherPair's connection of `c` to `s` through
  // the listening id; the first pair makes the queues (SetUpEndpointQueues),
  // the others' QPs go on them (SetUpSharedQp).
  void ConnectPair(Endpoint& c, Endpoint& s, const QpOptions& options,
                   const std::function<void()>& before_accept);
  void SetUpSharedQp(Endpoint& side, const Endpoint& owner,
                     const QpOptions& options);
  // Every pair (the others first: their QPs hold the first's queues) and
  // the listening id.
  void TearDownConnection();
  void TearDownEndpoint(Endpoint& side);
  rdma_cm_event_type NextCmEvent(Endpoint& side);
  void StopFakes();
  // On the fake: runs the NIC(s) until nothing more will happen by itself
  // (with two NICs on a fabric, also nothing in flight between them).
  void Settle();

  std::string backend_name_;  // UseBackend's
  uint32_t path_mtu_ = 0;     // SetPathMtu's
  // The netdev MTU SetPathMtu found and changed on a real NIC (0: none).
  int netdev_mtu_before_ = 0;
  std::shared_ptr<VerbsBackend> backend_;
  FakeNic* fake_ = nullptr;  // set when the backend is the fake NIC
  // "fake_rxe_fabric": the server's own NIC, and the fabric directory.
  std::shared_ptr<VerbsBackend> server_backend_;
  FakeNic* server_fake_ = nullptr;
  std::string fabric_dir_;
  rdma_event_channel* listen_channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  int listen_port_ = 0;
  Endpoint client_;
  Endpoint server_;
  // ConnectAnotherPair's pairs 1.. (deques: Endpoint addresses stay), and
  // which pair each of their QP numbers is (kept after a QP is destroyed:
  // its completions stay in the shared CQ).
  std::deque<Endpoint> pair_clients_;
  std::deque<Endpoint> pair_servers_;
  std::map<uint32_t, int> pair_of_qp_num_[2];  // [0] client's, [1] server's
  std::vector<std::string> stream_;
  std::string section_;  // "" or "size=64 " etc.
  bool in_section_ = false;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TESTS_CONFORMANCE_FIXTURE_H_
