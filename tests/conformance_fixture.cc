#include "tests/conformance_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "mock/test_dir.h"
#include "nic/fake_nic.h"
#include "verbs_backend/rdma_core_backend.h"

namespace rpma_harness {
namespace {

// Inside the soft-RoCE VM the rxe device owns this address; the fake NIC
// takes any.
std::string TestAddress() {
  const char* addr = std::getenv("RPMA_HARNESS_VM_ADDR");
  return addr ? addr : "192.168.77.1";
}

bool OnRdmaCore() {
  const char* backend = std::getenv("RPMA_HARNESS_BACKEND");
  return backend != nullptr && std::strcmp(backend, "rdma-core") == 0;
}

// Each connection takes a fresh port: a real CM keeps a port busy for a
// while after its ids are gone. Processes that run at once on one device
// (random_differential_test's shards in the VM) are given ranges of their
// own, which they go round.
int NextPort() {
  // env RPMA_HARNESS_PORT_BASE=N: the harness's own tests: the first port the
  //   conformance fixture listens on (default 17000 + 20 x (pid mod 1000));
  //   random_differential_test gives each of its shard processes its own.
  // env RPMA_HARNESS_PORT_SPAN=N: the harness's own tests: with
  //   RPMA_HARNESS_PORT_BASE, how many ports from it the fixture goes round.
  static const int base = [] {
    const char* v = std::getenv("RPMA_HARNESS_PORT_BASE");
    const int asked = v != nullptr ? std::atoi(v) : 0;
    return asked > 0 && asked < 65000
               ? asked
               : 17000 + (static_cast<int>(getpid()) % 1000) * 20;
  }();
  static const int span = [] {
    const char* v = std::getenv("RPMA_HARNESS_PORT_SPAN");
    const int asked = v != nullptr ? std::atoi(v) : 0;
    return asked > 0 && asked <= 65535 - base ? asked : 65535 - base;
  }();
  static int next = 0;
  const int port = base + next;
  next = (next + 1) % span;
  return port;
}

// ibv_mtu of a path MTU in bytes (0: none).
ibv_mtu MtuEnum(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
  }
  return static_cast<ibv_mtu>(0);
}

// Sets the MTU of the interface that holds IPv4 address `addr` to `mtu`,
// its MTU before in *before. 0, or -1 with the reason on stderr.
int SetNetdevMtu(const std::string& addr, int mtu, int* before) {
  in_addr want{};
  if (inet_pton(AF_INET, addr.c_str(), &want) != 1) return -1;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return -1;
  std::string name;
  for (ifaddrs* a = all; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (in->sin_addr.s_addr == want.s_addr) name = a->ifa_name;
  }
  freeifaddrs(all);
  if (name.empty() || name.size() >= IFNAMSIZ) {
    std::fprintf(stderr, "no interface holds %s\n", addr.c_str());
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ifreq req{};
  std::memcpy(req.ifr_name, name.c_str(), name.size());
  int ret = ioctl(fd, SIOCGIFMTU, &req);
  if (ret == 0) {
    *before = req.ifr_mtu;
    req.ifr_mtu = mtu;
    ret = ioctl(fd, SIOCSIFMTU, &req);
  }
  if (ret != 0) {
    std::fprintf(stderr, "MTU %d on %s: %s\n", mtu, name.c_str(),
                 std::strerror(errno));
  }
  close(fd);
  return ret;
}

std::string CaseName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  // Drop the parameter suffix: the stream names the case, not the backend.
  auto slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(0, slash);
}

}  // namespace

std::vector<BackendUnderTest> BackendsUnderTest() {
  if (OnRdmaCore()) {
    // rxe in Linux 6.1, rxe_comp.c make_send_cqe(): the requester CQE of a
    // write with imm has IB_WC_WITH_IMM and byte_len = the WR's length.
    return {BackendUnderTest{"rdma_core", true}};
  }
  return {BackendUnderTest{"fake_spec", false},
          BackendUnderTest{"fake_rxe", true},
          BackendUnderTest{"fake_rxe_fabric", true}};
}

void ConformanceTest::SetUp() { UseBackend(GetParam().name); }

void ConformanceTest::StopFakes() {
  if (fake_ != nullptr) fake_->StopBackgroundProgress();
  if (server_fake_ != nullptr) server_fake_->StopBackgroundProgress();
}

void ConformanceTest::UseBackend(const std::string& name) {
  if (in_section_) EndSection();
  StopFakes();
  fake_ = nullptr;
  server_fake_ = nullptr;
  backend_.reset();
  server_backend_.reset();
  if (!fabric_dir_.empty()) {
    const std::string cmd = "rm -rf '" + fabric_dir_ + "'";
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << cmd;
    fabric_dir_.clear();
  }
  backend_name_ = name;
  if (name == "rdma_core") {
    backend_ = std::make_shared<RdmaCoreBackend>();
    return;
  }
  FakeNicConfig config;
  config.personality =
      name == "fake_spec" ? Personality::Spec() : Personality::Rxe();
  if (path_mtu_ != 0) {
    // What ibv_query_port(3) says and rdma_cm gives a QP at RTR.
    FakeDeviceCaps caps = config.personality.caps;
    caps.active_mtu = MtuEnum(path_mtu_);
    config.caps = caps;
  }
  // A lost event fails the case instead of hanging it.
  config.background_block_timeout_ms = 20000;
  if (name == "fake_rxe_fabric") {
    // Client and server on two NICs that meet only through a fabric
    // directory, as two processes do (fake_nic_fabric.h): the in-process
    // and the cross-process paths must give the same streams.
    fabric_dir_ = NewTestDir("conformance-fabric");
    ASSERT_FALSE(fabric_dir_.empty());
    config.fabric_dir = fabric_dir_;
    config.process_label = "server";
    auto server = std::make_shared<FakeNic>(config);
    server->StartBackgroundProgress();
    server_fake_ = server.get();
    server_backend_ = server;
    config.process_label = "client";
  }
  auto fake = std::make_shared<FakeNic>(config);
  fake->StartBackgroundProgress();
  fake_ = fake.get();
  backend_ = fake;
}

void ConformanceTest::SetPathMtu(uint32_t bytes) {
  if (bytes == path_mtu_) return;
  ASSERT_TRUE(bytes == 0 || MtuEnum(bytes) != 0) << "no IB MTU: " << bytes;
  path_mtu_ = bytes;
  if (backend_name_ != "rdma_core") {
    UseBackend(backend_name_);
    return;
  }
  if (in_section_) EndSection();
  int before = 0;
  // The netdev MTU whose RoCE path MTU is `bytes`: rdma_cm's iboe_get_mtu
  // and rxe's eth_mtu_int_to_enum take 96 and 80 header bytes off and round
  // down to an IB MTU; these land inside every band (1500: the default).
  const int netdev_mtu = bytes == 0      ? 0
                         : bytes == 256  ? 500
                         : bytes == 512  ? 1000
                         : bytes == 1024 ? 1500
                         : bytes == 2048 ? 3000
                                         : 9000;
  if (netdev_mtu == 0 && netdev_mtu_before_ == 0) return;
  ASSERT_EQ(SetNetdevMtu(TestAddress(), netdev_mtu != 0 ? netdev_mtu
                                                        : netdev_mtu_before_,
                         &before),
            0)
      << "setting the MTU of the netdev that owns " << TestAddress();
  if (netdev_mtu_before_ == 0) netdev_mtu_before_ = before;
  if (netdev_mtu == 0) netdev_mtu_before_ = 0;
}

void ConformanceTest::Settle() {
  if (fake_ == nullptr) return;
  if (server_fake_ == nullptr) {
    fake_->RunUntilIdle();
    return;
  }
  // Two NICs on a fabric: done when neither has work nor a WR waiting for
  // the other's answer, and that holds for a while (a frame either NIC
  // sent, such as a DREQ or a receive-posted notice, is handled within it).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int quiet_checks = 0;
  while (quiet_checks < 5 && std::chrono::steady_clock::now() < deadline) {
    fake_->RunUntilIdle();
    server_fake_->RunUntilIdle();
    if (fake_->Quiescent() && server_fake_->Quiescent()) {
      ++quiet_checks;
    } else {
      quiet_checks = 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<std::string> ConformanceTest::TakeStream() {
  std::vector<std::string> taken;
  taken.swap(stream_);
  return taken;
}

void ConformanceTest::TearDown() {
  if (in_section_) EndSection();
  if (netdev_mtu_before_ != 0) {
    int ignored = 0;
    EXPECT_EQ(SetNetdevMtu(TestAddress(), netdev_mtu_before_, &ignored), 0);
    netdev_mtu_before_ = 0;
    path_mtu_ = 0;
  }
  TearDownConnection();
  StopFakes();
  if (!fabric_dir_.empty()) {
    const std::string cmd = "rm -rf '" + fabric_dir_ + "'";
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << cmd;
    fabric_dir_.clear();
  }

  // The completion stream: printed for the differential test to collect
  // (inside the VM), and compared with rxe's recorded stream when this is the
  // fake's rxe personality.
  const std::string name = CaseName();
  // env RPMA_HARNESS_PRINT_STREAMS=1: the harness's own tests: set, the
  //   conformance and random differential tests print every stream (STREAM
  //   lines), for recording rxe's in the soft-RoCE VM.
  if (std::getenv("RPMA_HARNESS_PRINT_STREAMS") != nullptr) {
    for (const std::string& line : stream_) {
      std::printf("STREAM %s %s\n", name.c_str(), line.c_str());
    }
  }
  if ((GetParam().name == "fake_rxe" || GetParam().name == "fake_rxe_fabric") &&
      compare_with_recording_ && !stream_.empty()) {
    std::ifstream golden("tests/testdata/rxe_streams.txt");
    ASSERT_TRUE(golden.good())
        << "tests/testdata/rxe_streams.txt is missing (a data dependency "
           "of this test)";
    std::vector<std::string> expected;
    std::string line;
    const std::string prefix = "STREAM " + name + " ";
    while (std::getline(golden, line)) {
      if (line.rfind(prefix, 0) == 0)
        expected.push_back(line.substr(prefix.size()));
    }
    // A case that records a stream must have rxe's: record new cases in
    // the soft-RoCE VM (tools/softroce_vm, RPMA_HARNESS_PRINT_STREAMS=1).
    ASSERT_FALSE(expected.empty())
        << name << " has no stream in tests/testdata/rxe_streams.txt: "
        << "record it on rxe in the soft-RoCE VM";
    std::ostringstream diff;
    for (size_t i = 0; i < std::max(expected.size(), stream_.size()); ++i) {
      std::string want = i < expected.size() ? expected[i] : "<none>";
      std::string got = i < stream_.size() ? stream_[i] : "<none>";
      if (want != got)
        diff << "\n  #" << i << " rxe:  " << want << "\n  #" << i
             << " fake: " << got;
    }
    EXPECT_TRUE(diff.str().empty())
        << "the fake (rxe personality) disagrees with rxe:" << diff.str();
  }
}

rdma_cm_event_type ConformanceTest::NextCmEvent(Endpoint& side) {
  rdma_cm_event* event = nullptr;
  if (nic(side).GetCmEvent(side.channel, &event) != 0) {
    ADD_FAILURE() << "GetCmEvent failed: " << std::strerror(errno);
    return RDMA_CM_EVENT_ADDR_ERROR;
  }
  rdma_cm_event_type type = event->event;
  nic(side).AckCmEvent(event);
  return type;
}

namespace {

// rdma_event_str's names for the events a connected id can get (our own
// table: the fakes' tests do not link librdmacm).
std::string CmEventText(rdma_cm_event_type type) {
  switch (type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      return "ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "DISCONNECTED";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "CONNECT_ERROR";
    case RDMA_CM_EVENT_REJECTED:
      return "REJECTED";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "TIMEWAIT_EXIT";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "DEVICE_REMOVAL";
    default:
      return "event" + std::to_string(static_cast<int>(type));
  }
}

}  // namespace

void ConformanceTest::RecordCmEvents(int wait_ms) {
  Settle();
  std::vector<Endpoint*> sides = {&client_, &server_};
  for (int k = 1; k < pairs(); ++k) {
    sides.push_back(&client(k));
    sides.push_back(&server(k));
  }
  for (Endpoint* side : sides) {
    if (side->channel == nullptr) continue;
    int wait = fake_ != nullptr ? 0 : wait_ms;
    for (;;) {
      pollfd ready{side->channel->fd, POLLIN, 0};
      if (poll(&ready, 1, wait) != 1) break;
      wait = 0;
      rdma_cm_event* event = nullptr;
      if (nic(*side).GetCmEvent(side->channel, &event) != 0) break;
      // TIMEWAIT_EXIT comes when the IB CM's timewait timer runs out, 2 s
      // after a DREP (cm.c cm_enter_timewait; Personality::timewait_ms):
      // whether a 100 ms window of a program sees it is the program's
      // speed, so it is not recorded here (RecordCmEventsFor records it).
      if (event->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
        nic(*side).AckCmEvent(event);
        continue;
      }
      RecordLine("cm " + SideName(*side) + " " + CmEventText(event->event) +
                 " status=" + std::to_string(event->status));
      nic(*side).AckCmEvent(event);
    }
  }
}

void ConformanceTest::RecordCmEventsFor(int ms, const std::string& tag) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::vector<std::string> lines[2];  // client's, server's
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd ready[2] = {{client_.channel->fd, POLLIN, 0},
                       {server_.channel->fd, POLLIN, 0}};
    if (poll(ready, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if ((ready[i].revents & POLLIN) == 0) continue;
      Endpoint& side = i == 0 ? client_ : server_;
      rdma_cm_event* event = nullptr;
      if (nic(side).GetCmEvent(side.channel, &event) != 0) continue;
      lines[i].push_back(std::string("cm ") + (i == 0 ? "client " : "server ") +
                         CmEventText(event->event) + " status=" +
                         std::to_string(event->status) + " " + tag);
      nic(side).AckCmEvent(event);
    }
  }
  for (const auto& side_lines : lines) {
    for (const std::string& line : side_lines) RecordLine(line);
  }
}

namespace {

// An RC QP on `owner`'s CQs (its receive CQ, if it has one) and SRQ.
ibv_qp_init_attr QpInitAttr(const Endpoint& owner, const QpOptions& options) {
  ibv_qp_init_attr attr{};
  attr.send_cq = owner.cq;
  attr.recv_cq = owner.rcq != nullptr ? owner.rcq : owner.cq;
  attr.srq = owner.srq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = options.sq_sig_all;
  attr.cap.max_send_wr = options.max_send_wr;
  attr.cap.max_recv_wr = options.max_recv_wr;
  attr.cap.max_send_sge = options.max_send_sge;
  attr.cap.max_recv_sge = options.max_recv_sge;
  attr.cap.max_inline_data = options.max_inline_data;
  return attr;
}

}  // namespace

void ConformanceTest::SetUpEndpointQueues(Endpoint& side,
                                          const QpOptions& options) {
  side.pd = nic(side).AllocPd(side.id->verbs);
  ASSERT_NE(side.pd, nullptr);
  const bool is_server = &side == &server_;
  if (is_server && options.server_shared_channel) {
    side.comp_channel = nic(side).CreateCompChannel(side.id->verbs);
    ASSERT_NE(side.comp_channel, nullptr);
  }
  side.cq = nic(side).CreateCq(side.id->verbs, options.cq_depth, nullptr,
                               side.comp_channel, 0);
  ASSERT_NE(side.cq, nullptr);
  if (side.comp_channel != nullptr) {
    side.rcq = nic(side).CreateCq(side.id->verbs, options.cq_depth, nullptr,
                                  side.comp_channel, 0);
    ASSERT_NE(side.rcq, nullptr);
    ASSERT_EQ(nic(side).ReqNotifyCq(side.cq, 0), 0);
    ASSERT_EQ(nic(side).ReqNotifyCq(side.rcq, 0), 0);
  }
  if (is_server && options.server_srq_wr > 0) {
    ibv_srq_init_attr srq_attr{};
    srq_attr.attr.max_wr = options.server_srq_wr;
    srq_attr.attr.max_sge = options.max_recv_sge;
    side.srq = nic(side).CreateSrq(side.pd, &srq_attr);
    ASSERT_NE(side.srq, nullptr) << std::strerror(errno);
  }
  ibv_qp_init_attr attr = QpInitAttr(side, options);
  ASSERT_EQ(nic(side).CreateQp(side.id, side.pd, &attr), 0)
      << std::strerror(errno);
  side.qp = side.id->qp;
  side.buffer.assign(kBufferSize, 0);
  if (&side == &client_) {
    for (size_t i = 0; i < kBufferSize; ++i) side.buffer[i] = Pattern(i);
  }
  side.mr = nic(side).RegMr(side.pd, side.buffer.data(), side.buffer.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(side.mr, nullptr);
}

void ConformanceTest::Connect(const QpOptions& options,
                              const std::function<void()>& before_accept) {
  in_section_ = true;
  const std::string addr = TestAddress();
  listen_port_ = NextPort();
  const std::string port = std::to_string(listen_port_);
  listen_channel_ = nic(server_).CreateEventChannel();
  ASSERT_NE(listen_channel_, nullptr);
  ASSERT_EQ(nic(server_).CreateId(listen_channel_, &listen_id_, nullptr), 0);
  ASSERT_EQ(nic(server_).BindAddr(listen_id_, addr.c_str(), port.c_str()), 0)
      << addr << ":" << port << ": " << std::strerror(errno);
  ASSERT_EQ(nic(server_).Listen(listen_id_, 8), 0);
  ASSERT_NO_FATAL_FAILURE(ConnectPair(client_, server_, options, before_accept));
}

void ConformanceTest::ConnectAnotherPair(const QpOptions& options) {
  ASSERT_NE(listen_id_, nullptr) << "ConnectAnotherPair needs Connect first";
  pair_clients_.emplace_back();
  pair_servers_.emplace_back();
  ASSERT_NO_FATAL_FAILURE(ConnectPair(pair_clients_.back(),
                                      pair_servers_.back(), options, nullptr));
}

void ConformanceTest::ConnectPair(Endpoint& c, Endpoint& s,
                                  const QpOptions& options,
                                  const std::function<void()>& before_accept) {
  const std::string addr = TestAddress();
  const std::string port = std::to_string(listen_port_);
  // The first pair makes the queues; the others' QPs go on the first's.
  const bool first = &c == &client_;
  ASSERT_EQ(nic(c).CreateId(nullptr, &c.id, nullptr), 0);
  ASSERT_EQ(nic(c).ResolveAddr(c.id, addr.c_str(), port.c_str(), 2000), 0);
  ASSERT_EQ(nic(c).ResolveRoute(c.id, 2000), 0);
  ASSERT_NO_FATAL_FAILURE(first ? SetUpEndpointQueues(c, options)
                                : SetUpSharedQp(c, client_, options));
  c.channel = nic(c).CreateEventChannel();
  ASSERT_EQ(nic(c).MigrateId(c.id, c.channel), 0);
  rdma_conn_param param{};
  param.responder_resources = options.client_responder_resources;
  param.initiator_depth = options.client_initiator_depth;
  param.retry_count = options.retry_count;
  param.rnr_retry_count = options.rnr_retry_count;
  uint8_t ack_timeout = options.ack_timeout;
  if (ack_timeout != 0) {
    ASSERT_EQ(nic(c).SetOption(c.id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                               &ack_timeout, sizeof(ack_timeout)),
              0)
        << std::strerror(errno);
  }
  ASSERT_EQ(nic(c).Connect(c.id, &param), 0);

  rdma_cm_event* request = nullptr;
  ASSERT_EQ(nic(server_).GetCmEvent(listen_channel_, &request), 0);
  ASSERT_EQ(request->event, RDMA_CM_EVENT_CONNECT_REQUEST);
  s.id = request->id;
  ASSERT_EQ(nic(server_).AckCmEvent(request), 0);
  ASSERT_NO_FATAL_FAILURE(first ? SetUpEndpointQueues(s, options)
                                : SetUpSharedQp(s, server_, options));
  s.channel = nic(s).CreateEventChannel();
  ASSERT_EQ(nic(s).MigrateId(s.id, s.channel), 0);
  if (before_accept) before_accept();
  if (ack_timeout != 0) {
    ASSERT_EQ(nic(s).SetOption(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                               &ack_timeout, sizeof(ack_timeout)),
              0)
        << std::strerror(errno);
  }
  param.responder_resources = options.server_responder_resources;
  param.initiator_depth = options.server_initiator_depth;
  ASSERT_EQ(nic(s).Accept(s.id, &param), 0) << std::strerror(errno);
  ASSERT_EQ(NextCmEvent(c), RDMA_CM_EVENT_ESTABLISHED);
  ASSERT_EQ(NextCmEvent(s), RDMA_CM_EVENT_ESTABLISHED);
}

void ConformanceTest::SetUpSharedQp(Endpoint& side, const Endpoint& owner,
                                    const QpOptions& options) {
  ASSERT_EQ(side.id->verbs, owner.id->verbs)
      << "the pair's id resolved to another device";
  ibv_qp_init_attr attr = QpInitAttr(owner, options);
  ASSERT_EQ(nic(side).CreateQp(side.id, owner.pd, &attr), 0)
      << std::strerror(errno);
  side.qp = side.id->qp;
  pair_of_qp_num_[IsServer(side)][side.qp->qp_num] =
      static_cast<int>(IsServer(side) ? pair_servers_.size()
                                      : pair_clients_.size());
}

bool ConformanceTest::IsServer(const Endpoint& side) const {
  if (&side == &server_) return true;
  for (const Endpoint& s : pair_servers_) {
    if (&side == &s) return true;
  }
  return false;
}

// "client", "server", or for pair k > 0 "client qpk" / "server qpk": how a
// stream line names the side of a post or a completion.
static std::string PairSideName(bool is_server, int pair) {
  std::string name = is_server ? "server" : "client";
  if (pair > 0) name += " qp" + std::to_string(pair);
  return name;
}

std::string ConformanceTest::SideName(const Endpoint& side) const {
  const bool is_server = IsServer(side);
  const auto& pairs = is_server ? pair_servers_ : pair_clients_;
  for (size_t k = 0; k < pairs.size(); ++k) {
    if (&side == &pairs[k]) return PairSideName(is_server, static_cast<int>(k) + 1);
  }
  return PairSideName(is_server, 0);
}

void ConformanceTest::TearDownConnection() {
  // The other pairs first: their QPs hold client_'s and server_'s CQs.
  for (auto* pairs : {&pair_clients_, &pair_servers_}) {
    for (Endpoint& side : *pairs) {
      if (side.qp != nullptr) nic(side).DestroyQp(side.id);
      if (side.id != nullptr) nic(side).DestroyId(side.id);
      if (side.channel != nullptr) nic(side).DestroyEventChannel(side.channel);
    }
  }
  pair_clients_.clear();
  pair_servers_.clear();
  pair_of_qp_num_[0].clear();
  pair_of_qp_num_[1].clear();
  TearDownEndpoint(client_);
  TearDownEndpoint(server_);
  if (listen_id_ != nullptr) nic(server_).DestroyId(listen_id_);
  if (listen_channel_ != nullptr)
    nic(server_).DestroyEventChannel(listen_channel_);
  listen_id_ = nullptr;
  listen_channel_ = nullptr;
}

void ConformanceTest::TearDownEndpoint(Endpoint& side) {
  if (side.id == nullptr) return;
  if (side.qp != nullptr) nic(side).DestroyQp(side.id);
  if (side.mr != nullptr) nic(side).DeregMr(side.mr);
  if (side.srq != nullptr) nic(side).DestroySrq(side.srq);
  if (side.rcq != nullptr) nic(side).DestroyCq(side.rcq);
  if (side.cq != nullptr) nic(side).DestroyCq(side.cq);
  if (side.comp_channel != nullptr)
    nic(side).DestroyCompChannel(side.comp_channel);
  if (side.pd != nullptr) nic(side).DeallocPd(side.pd);
  nic(side).DestroyId(side.id);
  if (side.channel != nullptr) nic(side).DestroyEventChannel(side.channel);
  side = Endpoint{};
}

int ConformanceTest::PostRecv(Endpoint& side, uint64_t wr_id, size_t offset,
                              uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(side.buffer.data()) + offset, len,
              side.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  if (len > 0) {
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  const int ret = nic(side).PostRecv(side.qp, &wr, &bad);
  RecordPost(("recv " + SideName(side)).c_str(), ret,
             ret == 0 ? -1 : (bad == &wr ? 0 : -2));
  return ret;
}

ibv_send_wr ConformanceTest::WriteWr(uint64_t wr_id, size_t src_offset,
                                     size_t dst_offset, uint32_t len,
                                     bool with_imm, uint32_t imm_host,
                                     bool signaled, ibv_sge* sge) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  if (with_imm) wr.imm_data = htonl(imm_host);
  if (len > 0) {
    *sge =
        ibv_sge{reinterpret_cast<uint64_t>(client_.buffer.data()) + src_offset,
                len, client_.mr->lkey};
    wr.sg_list = sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr =
        reinterpret_cast<uint64_t>(server_.buffer.data()) + dst_offset;
    wr.wr.rdma.rkey = server_.mr->rkey;
  }
  return wr;
}

int ConformanceTest::PostSend(Endpoint& side, ibv_send_wr* wr,
                              ibv_send_wr** bad_wr) {
  *bad_wr = nullptr;
  const int ret = nic(side).PostSend(side.qp, wr, bad_wr);
  int bad_index = -1;
  if (ret != 0) {
    bad_index = -2;  // *bad_wr names no WR of the chain
    int i = 0;
    for (ibv_send_wr* w = wr; w != nullptr; w = w->next, ++i) {
      if (w == *bad_wr) bad_index = i;
    }
  }
  RecordPost(("send " + SideName(side)).c_str(), ret, bad_index);
  return ret;
}

int ConformanceTest::PostSrqRecv(uint64_t wr_id, size_t offset, uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(server_.buffer.data()) + offset, len,
              server_.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return nic(server_).PostSrqRecv(server_.srq, &wr, &bad);
}

bool ConformanceTest::WaitCompletion(Endpoint& side, ibv_wc* wc, int timeout_ms,
                                     ibv_cq* cq) {
  if (cq == nullptr) cq = side.cq;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    int n = nic(side).PollCq(cq, 1, wc);
    if (n == 1) {
      Record(&side == &client_ ? "client" : "server", *wc);
      return true;
    }
    if (n < 0) {
      ADD_FAILURE() << "PollCq failed with " << n;
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool ConformanceTest::NoCompletionPending(Endpoint& side) {
  if (fake_ != nullptr) {
    Settle();
  } else {
    // A kernel driver finishes a loopback WR well within this.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ibv_wc wc;
  int n = nic(side).PollCq(side.cq, 1, &wc);
  if (n == 1) Record(&side == &client_ ? "client" : "server", wc);
  return n == 0;
}

ibv_qp_state ConformanceTest::QpState(Endpoint& side) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(nic(side).QueryQp(side.qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

std::string ConformanceTest::WcLine(const char* side_name, const ibv_wc& wc) {
  // Every field a program reads; qp numbers differ between runs and NICs by
  // nature and are left out.
  std::ostringstream line;
  line << side_name << " wr_id=" << wc.wr_id << " status=" << wc.status
       << " opcode=" << wc.opcode << " byte_len=" << wc.byte_len
       << " flags=" << wc.wc_flags << " imm=" << ntohl(wc.imm_data);
  return line.str();
}

void ConformanceTest::Record(const char* side_name, const ibv_wc& wc) {
  RecordLine(WcLine(side_name, wc));
}

void ConformanceTest::RecordPost(const char* what, int ret, int bad_index) {
  RecordLine(std::string("post ") + what +
             " ret=" + std::to_string(ret < 0 ? -ret : ret) +
             " bad=" + std::to_string(bad_index));
}

void ConformanceTest::RecordLine(const std::string& line) {
  stream_.push_back(section_ + line);
}

std::string ConformanceTest::LandedRanges(const std::vector<uint8_t>& b) {
  std::ostringstream landed;
  size_t i = 0;
  while (i < b.size()) {
    if (b[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < b.size() && b[j] != 0) ++j;
    landed << " [" << i << "," << j << ")";
    i = j;
  }
  return landed.tellp() == 0 ? " none" : landed.str();
}

void ConformanceTest::RecordDigest(const std::string& name,
                                   const std::vector<uint8_t>& bytes) {
  uint64_t fnv = 1469598103934665603ull;  // FNV-1a over every byte
  for (uint8_t byte : bytes) fnv = (fnv ^ byte) * 1099511628211ull;
  RecordLine("landed " + name + " fnv1a=" + std::to_string(fnv));
}

std::vector<uint32_t> ConformanceTest::WriteSizes() {
  return {0, 1, 64, 1023, 1024, 1025, 4096, 64 * 1024};
}

void ConformanceTest::BeginSection(const std::string& tag) {
  if (in_section_) EndSection();
  section_ = tag.empty() ? "" : tag + " ";
}

void ConformanceTest::DrainAndRecord(Endpoint& side) { DrainAndRecord({&side}); }

void ConformanceTest::DrainBothAndRecord() { DrainAndRecord({&client_, &server_}); }

void ConformanceTest::DrainAndRecord(std::initializer_list<Endpoint*> sides) {
  std::vector<Endpoint*> polled;
  for (Endpoint* side : sides) {
    if (side->cq != nullptr) polled.push_back(side);
  }
  // A completion of pair k > 0 (sharing the CQ) is "client qpk ...".
  const auto name = [this](const Endpoint* side, const ibv_wc& wc) {
    const bool is_server = side != &client_;
    const auto& pair_of = pair_of_qp_num_[is_server];
    auto it = pair_of.find(wc.qp_num);
    return PairSideName(is_server, it != pair_of.end() ? it->second : 0);
  };
  ibv_wc wc;
  if (fake_ != nullptr) {
    for (Endpoint* side : polled) {
      Settle();
      while (nic(*side).PollCq(side->cq, 1, &wc) == 1) {
        Record(name(side, wc).c_str(), wc);
      }
    }
    return;
  }
  // A kernel driver: whatever is still to come arrives well within
  // drain_quiet_ms_ of the last completion (flushes follow the error that
  // caused them). Every side's CQ is polled in turn until none has had a
  // completion for that long; then each side's lines are recorded in the
  // order of `sides`, as one call per side would record them, in one quiet
  // window instead of one per side.
  std::vector<std::vector<std::string>> lines(polled.size());
  if (drain_settle_ms_ > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(drain_settle_ms_));
  }
  const auto quiet = std::chrono::milliseconds(drain_quiet_ms_);
  auto quiet_until = std::chrono::steady_clock::now() + quiet;
  while (std::chrono::steady_clock::now() < quiet_until) {
    bool any = false;
    for (size_t s = 0; s < polled.size(); ++s) {
      if (nic(*polled[s]).PollCq(polled[s]->cq, 1, &wc) == 1) {
        lines[s].push_back(WcLine(name(polled[s], wc).c_str(), wc));
        any = true;
      }
    }
    if (any) {
      quiet_until = std::chrono::steady_clock::now() + quiet;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  for (auto& side_lines : lines) {
    for (const std::string& line : side_lines) RecordLine(line);
  }
}

void ConformanceTest::EndSection() {
  in_section_ = false;
  DrainBothAndRecord();
  if (client_.qp != nullptr && server_.qp != nullptr) {
    RecordLine(std::string("state client=") + std::to_string(QpState(client_)) +
               " server=" + std::to_string(QpState(server_)));
  }
  if (!server_.buffer.empty()) {
    // The server buffer starts zeroed and the client's pattern has no 0.
    RecordLine("landed" + LandedRanges(server_.buffer));
  }
  if (record_client_digest_ && !client_.buffer.empty()) {
    RecordDigest("client", client_.buffer);
  }
  TearDownConnection();
  section_.clear();
}

}  // namespace rpma_harness
