#include "mock/connected_pair.h"

#include <utility>

namespace rpma_harness {

ConnectedPair::ConnectedPair(ConnectedPairOptions options)
    : options_(std::move(options)),
      client_buffer_(options_.buffer_size),
      server_buffer_(options_.buffer_size),
      recv_buffer_(options_.recv_size *
                   (options_.recvs > 0 ? options_.recvs : 1)) {
  nic_ = std::make_shared<FakeNic>(options_.nic);
  if (!options_.faults.empty()) {
    faults_ = std::make_shared<FaultInjector>(nic_, options_.fault_seed);
    for (const FaultRule& rule : options_.faults) {
      std::string why;
      if (!faults_->AddRule(rule, &why)) {
        error_ = "fault rule '" + rule.name + "' refused: " + why;
        return;
      }
    }
  }
  std::shared_ptr<VerbsBackend> backend = faults_;
  if (!backend) backend = nic_;
  if (options_.check) {
    // The usage checker sees what the program posts: it goes outermost.
    CheckOptions check = *options_.check;
    if (check.trace_nic == nullptr) check.trace_nic = nic_.get();
    checker_ = std::make_shared<CheckingBackend>(backend, check);
    backend = checker_;
  }
  use_ = std::make_unique<ScopedBackend>(backend);
  Connect();
}

bool ConnectedPair::Check(int ret, const char* call) {
  if (ret == 0) return true;
  if (error_.empty()) {
    error_ = std::string(call) + " returned " + std::to_string(ret) + " (" +
             rpma_err_2str(ret) + ")";
  }
  return false;
}

void ConnectedPair::Connect() {
  const char* addr = options_.address.c_str();
  const char* port = options_.port.c_str();
  ibv_context* dev = nullptr;
  if (!Check(
          rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
          "rpma_utils_get_ibv_context") ||
      !Check(rpma_peer_new(dev, &server_peer_), "rpma_peer_new(server)") ||
      !Check(rpma_peer_new(dev, &client_peer_), "rpma_peer_new(client)") ||
      !Check(rpma_mr_reg(client_peer_, client_buffer_.data(),
                         client_buffer_.size(), RPMA_MR_USAGE_WRITE_SRC,
                         &client_mr_),
             "rpma_mr_reg(client buffer)") ||
      !Check(rpma_mr_reg(server_peer_, server_buffer_.data(),
                         server_buffer_.size(), options_.server_usage,
                         &server_mr_),
             "rpma_mr_reg(server buffer)") ||
      !Check(rpma_mr_reg(server_peer_, recv_buffer_.data(), recv_buffer_.size(),
                         RPMA_MR_USAGE_RECV, &recv_mr_),
             "rpma_mr_reg(receive buffer)") ||
      !Check(rpma_ep_listen(server_peer_, addr, port, &ep_),
             "rpma_ep_listen")) {
    return;
  }
  rpma_conn_req* req = nullptr;
  if (!Check(rpma_conn_req_new(client_peer_, addr, port, nullptr, &req),
             "rpma_conn_req_new(client)") ||
      !Check(rpma_conn_req_connect(&req, nullptr, &client_),
             "rpma_conn_req_connect(client)")) {
    return;
  }
  rpma_conn_req* server_req = nullptr;
  if (!Check(rpma_ep_next_conn_req(ep_, nullptr, &server_req),
             "rpma_ep_next_conn_req")) {
    return;
  }
  for (int i = 0; i < options_.recvs; ++i) {
    if (!Check(rpma_conn_req_recv(server_req, recv_mr_, i * options_.recv_size,
                                  options_.recv_size, nullptr),
               "rpma_conn_req_recv")) {
      rpma_conn_req_delete(&server_req);
      return;
    }
  }
  uint8_t desc[21];
  size_t desc_size = 0;
  if (!Check(rpma_mr_get_descriptor_size(server_mr_, &desc_size),
             "rpma_mr_get_descriptor_size") ||
      desc_size > sizeof(desc) ||
      !Check(rpma_mr_get_descriptor(server_mr_, desc),
             "rpma_mr_get_descriptor")) {
    if (error_.empty()) error_ = "descriptor larger than 21 bytes";
    rpma_conn_req_delete(&server_req);
    return;
  }
  rpma_conn_private_data pdata{desc, static_cast<uint8_t>(desc_size)};
  if (!Check(rpma_conn_req_connect(&server_req, &pdata, &server_),
             "rpma_conn_req_connect(server)")) {
    return;
  }
  rpma_conn_event event = RPMA_CONN_UNDEFINED;
  if (!Check(rpma_conn_next_event(client_, &event),
             "rpma_conn_next_event(client)")) {
    return;
  }
  if (event != RPMA_CONN_ESTABLISHED) {
    error_ = std::string("client: expected RPMA_CONN_ESTABLISHED, got ") +
             rpma_utils_conn_event_2str(event);
    return;
  }
  if (!Check(rpma_conn_next_event(server_, &event),
             "rpma_conn_next_event(server)")) {
    return;
  }
  if (event != RPMA_CONN_ESTABLISHED) {
    error_ = std::string("server: expected RPMA_CONN_ESTABLISHED, got ") +
             rpma_utils_conn_event_2str(event);
    return;
  }
  rpma_conn_private_data got{};
  if (!Check(rpma_conn_get_private_data(client_, &got),
             "rpma_conn_get_private_data") ||
      !Check(rpma_mr_remote_from_descriptor(got.ptr, desc_size, &remote_),
             "rpma_mr_remote_from_descriptor") ||
      !Check(rpma_conn_get_cq(client_, &client_cq_), "rpma_conn_get_cq") ||
      !Check(rpma_conn_get_cq(server_, &server_cq_), "rpma_conn_get_cq")) {
    return;
  }
  if (options_.direct_write_to_pmem) {
    rpma_peer_cfg* cfg = nullptr;
    if (!Check(rpma_peer_cfg_new(&cfg), "rpma_peer_cfg_new")) return;
    const bool ok = Check(rpma_peer_cfg_set_direct_write_to_pmem(cfg, true),
                          "rpma_peer_cfg_set_direct_write_to_pmem") &&
                    Check(rpma_conn_apply_remote_peer_cfg(client_, cfg),
                          "rpma_conn_apply_remote_peer_cfg");
    rpma_peer_cfg_delete(&cfg);
    if (!ok) return;
  }
}

ConnectedPair::~ConnectedPair() {
  // The usual order; each step tolerates what is already gone.
  if (client_ != nullptr) rpma_conn_disconnect(client_);
  if (client_ != nullptr) rpma_conn_delete(&client_);
  if (server_ != nullptr) rpma_conn_delete(&server_);
  if (ep_ != nullptr) rpma_ep_shutdown(&ep_);
  if (remote_ != nullptr) rpma_mr_remote_delete(&remote_);
  if (client_mr_ != nullptr) rpma_mr_dereg(&client_mr_);
  if (server_mr_ != nullptr) rpma_mr_dereg(&server_mr_);
  if (recv_mr_ != nullptr) rpma_mr_dereg(&recv_mr_);
  if (client_peer_ != nullptr) rpma_peer_delete(&client_peer_);
  if (server_peer_ != nullptr) rpma_peer_delete(&server_peer_);
  use_.reset();
}

uint32_t ConnectedPair::client_qp_num() {
  uint32_t num = 0;
  if (client_ != nullptr) rpma_conn_get_qp_num(client_, &num);
  return num;
}

uint32_t ConnectedPair::server_qp_num() {
  uint32_t num = 0;
  if (server_ != nullptr) rpma_conn_get_qp_num(server_, &num);
  return num;
}

int ConnectedPair::WriteWithImm(size_t offset, size_t len, uint32_t imm,
                                int flags, const void* op_context) {
  return rpma_write_with_imm(client_, remote_, offset, client_mr_, offset, len,
                             flags, imm, op_context);
}

int ConnectedPair::PostServerRecv(const void* op_context) {
  return rpma_recv(server_, recv_mr_, 0, options_.recv_size, op_context);
}

int ConnectedPair::ClientCompletion(ibv_wc* wc) {
  nic_->RunUntilIdle();
  return rpma_cq_get_wc(client_cq_, 1, wc, nullptr);
}

int ConnectedPair::ServerCompletion(ibv_wc* wc) {
  nic_->RunUntilIdle();
  return rpma_cq_get_wc(server_cq_, 1, wc, nullptr);
}

void ConnectedPairTest::SetUp() {
  pair_ = std::make_unique<ConnectedPair>(Options());
  ASSERT_TRUE(pair_->ok()) << "ConnectedPair setup failed: " << pair_->error();
}

}  // namespace rpma_harness
