#include "tests/connected_qps.h"

#include <errno.h>

#include <cstring>

namespace rpma_harness {

ConnectedQps::ConnectedQps(FakeNic* nic, const std::string& addr,
                           const std::string& port)
    : nic_(nic), addr_(addr), port_(port) {
  if (nic_->GetContextByAddress(addr_.c_str(), true, &server_ctx_) != 0 ||
      nic_->GetContextByAddress(addr_.c_str(), false, &client_ctx_) != 0) {
    Fail("GetContextByAddress");
    return;
  }
  server_pd_ = nic_->AllocPd(server_ctx_);
  client_pd_ = nic_->AllocPd(client_ctx_);
  server_channel_ = nic_->CreateEventChannel();
  client_channel_ = nic_->CreateEventChannel();
  if (!server_pd_ || !client_pd_ || !server_channel_ || !client_channel_) {
    Fail("AllocPd / CreateEventChannel");
    return;
  }
  if (nic_->CreateId(server_channel_, &listen_id_, nullptr) != 0 ||
      nic_->BindAddr(listen_id_, addr_.c_str(), port_.c_str()) != 0 ||
      nic_->Listen(listen_id_, 16) != 0) {
    Fail("listen");
  }
}

ConnectedQps::~ConnectedQps() {
  for (auto& pair : pairs_) {
    DestroyEnd(&pair->client);
    DestroyEnd(&pair->server);
  }
  for (ibv_mr* mr : mrs_) nic_->DeregMr(mr);
  for (ibv_cq* cq : cqs_) nic_->DestroyCq(cq);
  for (ibv_comp_channel* ch : comp_channels_) nic_->DestroyCompChannel(ch);
  if (listen_id_ != nullptr) nic_->DestroyId(listen_id_);
  if (client_channel_ != nullptr) nic_->DestroyEventChannel(client_channel_);
  if (server_channel_ != nullptr) nic_->DestroyEventChannel(server_channel_);
  if (client_pd_ != nullptr) nic_->DeallocPd(client_pd_);
  if (server_pd_ != nullptr) nic_->DeallocPd(server_pd_);
}

void ConnectedQps::DestroyEnd(QpEnd* end) {
  if (end->id == nullptr) return;
  if (end->qp != nullptr) nic_->DestroyQp(end->id);
  nic_->DestroyId(end->id);
  if (end->owns_cq) nic_->DestroyCq(end->cq);
  end->id = nullptr;
}

bool ConnectedQps::Fail(const std::string& what) {
  if (error_.empty()) {
    error_ = what + " failed (errno " + std::to_string(errno) + ")";
  }
  return false;
}

ibv_cq* ConnectedQps::NewCq(ibv_context* ctx, int depth, bool with_channel) {
  ibv_comp_channel* channel = nullptr;
  if (with_channel) {
    channel = nic_->CreateCompChannel(ctx);
    if (channel == nullptr) {
      Fail("CreateCompChannel");
      return nullptr;
    }
    comp_channels_.push_back(channel);
  }
  ibv_cq* cq = nic_->CreateCq(ctx, depth, nullptr, channel, 0);
  if (cq == nullptr) {
    Fail("CreateCq");
    return nullptr;
  }
  cqs_.push_back(cq);
  return cq;
}

ibv_mr* ConnectedQps::RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  ibv_mr* mr = nic_->RegMr(pd, addr, length, access);
  if (mr == nullptr) {
    Fail("RegMr");
    return nullptr;
  }
  mrs_.push_back(mr);
  return mr;
}

bool ConnectedQps::NextEvent(rdma_event_channel* channel,
                             rdma_cm_event_type type, rdma_cm_event** event) {
  if (nic_->GetCmEvent(channel, event) != 0) return Fail("GetCmEvent");
  if ((*event)->event != type) {
    nic_->AckCmEvent(*event);
    errno = 0;
    return Fail(std::string("unexpected CM event ") +
                std::to_string((*event)->event));
  }
  return true;
}

QpPair* ConnectedQps::Connect(const QpPairOptions& options) {
  if (!ok()) return nullptr;
  auto pair = std::make_unique<QpPair>();
  auto init_attr = [&](ibv_cq* cq) {
    ibv_qp_init_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = options.sq_sig_all ? 1 : 0;
    attr.cap.max_send_wr = options.max_send_wr;
    attr.cap.max_recv_wr = options.max_recv_wr;
    attr.cap.max_send_sge = options.max_send_sge;
    attr.cap.max_recv_sge = options.max_recv_sge;
    attr.cap.max_inline_data = options.max_inline_data;
    return attr;
  };
  auto end_cq = [&](QpEnd* end, ibv_cq* shared, ibv_context* ctx) {
    if (shared != nullptr) {
      end->cq = shared;
      return true;
    }
    end->cq = nic_->CreateCq(ctx, options.cq_depth, nullptr, nullptr, 0);
    end->owns_cq = end->cq != nullptr;
    return end->owns_cq || Fail("CreateCq");
  };
  QpPair* raw = pair.get();
  pairs_.push_back(std::move(pair));

  QpEnd& client = raw->client;
  if (!end_cq(&client, options.client_cq, client_ctx_)) return nullptr;
  if (nic_->CreateId(nullptr, &client.id, nullptr) != 0 ||
      nic_->ResolveAddr(client.id, addr_.c_str(), port_.c_str(), 1000) != 0 ||
      nic_->ResolveRoute(client.id, 1000) != 0 ||
      nic_->MigrateId(client.id, client_channel_) != 0) {
    Fail("client id");
    return nullptr;
  }
  ibv_qp_init_attr attr = init_attr(client.cq);
  if (nic_->CreateQp(client.id, client_pd_, &attr) != 0) {
    Fail("client CreateQp");
    return nullptr;
  }
  client.qp = client.id->qp;
  rdma_conn_param param;
  std::memset(&param, 0, sizeof(param));
  param.retry_count = 7;
  param.rnr_retry_count = options.rnr_retry;
  if (nic_->Connect(client.id, &param) != 0) {
    Fail("Connect");
    return nullptr;
  }

  QpEnd& server = raw->server;
  rdma_cm_event* event = nullptr;
  if (!NextEvent(server_channel_, RDMA_CM_EVENT_CONNECT_REQUEST, &event)) {
    return nullptr;
  }
  server.id = event->id;
  nic_->AckCmEvent(event);
  if (!end_cq(&server, options.server_cq, server_ctx_)) return nullptr;
  attr = init_attr(server.cq);
  attr.srq = options.server_srq;
  if (nic_->CreateQp(server.id, server_pd_, &attr) != 0) {
    Fail("server CreateQp");
    return nullptr;
  }
  server.qp = server.id->qp;
  std::memset(&param, 0, sizeof(param));
  param.rnr_retry_count = options.rnr_retry;
  if (nic_->Accept(server.id, &param) != 0) {
    Fail("Accept");
    return nullptr;
  }
  if (!NextEvent(client_channel_, RDMA_CM_EVENT_ESTABLISHED, &event)) {
    return nullptr;
  }
  nic_->AckCmEvent(event);
  if (!NextEvent(server_channel_, RDMA_CM_EVENT_ESTABLISHED, &event)) {
    return nullptr;
  }
  nic_->AckCmEvent(event);
  return raw;
}

}  // namespace rpma_harness
