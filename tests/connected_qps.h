// connected_qps.h: many RC QP pairs connected through the fake NIC's
// VerbsBackend API, for benchmarks, fuzzers and stress tests that need more
// (or finer-grained) connections than the rpma API builds.
//
// Every connection goes the librdmacm way: a synchronous client id resolved
// and migrated to one shared client event channel, a CONNECT_REQUEST taken
// off the listener's channel, the passive QP created and accepted, both
// ESTABLISHED events acked. Connections are made one at a time, so the shared
// channels never hold events of two connections. Works with manual progress
// (GetCmEvent runs the NIC itself) and with background progress.
//
// CQs have no completion channel unless asked for, so ten thousand
// connections need no file descriptor each.
//
// Example:
//   FakeNic nic(config);
//   ConnectedQps fabric(&nic);
//   QpPair* pair = fabric.Connect(QpPairOptions{});
//   ibv_mr* mr = fabric.RegMr(fabric.server_pd(), buf, len, access);
//   nic.PostSend(pair->client.qp, &wr, &bad);

#ifndef RPMA_HARNESS_TESTS_CONNECTED_QPS_H_
#define RPMA_HARNESS_TESTS_CONNECTED_QPS_H_

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nic/fake_nic.h"

namespace rpma_harness {

struct QpPairOptions {
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 4;
  uint32_t max_inline_data = 64;
  bool sq_sig_all = false;
  int cq_depth = 64;  // for CQs the pair creates
  // Existing CQs to use (shared between pairs); nullptr: a CQ of cq_depth per
  // QP, used for both its send and receive completions.
  ibv_cq* client_cq = nullptr;
  ibv_cq* server_cq = nullptr;
  uint8_t rnr_retry = 7;
  // The server QP takes its receives from this SRQ (nullptr: its own RQ).
  ibv_srq* server_srq = nullptr;
};

struct QpEnd {
  rdma_cm_id* id = nullptr;
  ibv_qp* qp = nullptr;
  ibv_cq* cq = nullptr;  // send and receive CQ
  bool owns_cq = false;  // created for this QP
};

struct QpPair {
  QpEnd client;
  QpEnd server;
};

class ConnectedQps {
 public:
  // REQUIRES: `nic` outlives this object. Addresses are the fake's (any
  // numeric address works with the default single device).
  explicit ConnectedQps(FakeNic* nic, const std::string& addr = "10.9.0.1",
                        const std::string& port = "9100");
  ~ConnectedQps();  // disconnects nothing; destroys every QP, id, CQ, MR
  ConnectedQps(const ConnectedQps&) = delete;
  ConnectedQps& operator=(const ConnectedQps&) = delete;

  // False (and a message in error()) when any step fails.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  ibv_pd* client_pd() const { return client_pd_; }
  ibv_pd* server_pd() const { return server_pd_; }
  ibv_context* client_context() const { return client_ctx_; }
  ibv_context* server_context() const { return server_ctx_; }

  // A new CQ owned by this object (channel: a completion channel owned by
  // this object too, or none).
  ibv_cq* NewCq(ibv_context* ctx, int depth, bool with_channel = false);
  // Registers with the NIC; deregistered by the destructor.
  ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access);

  // Connects one more pair; nullptr on failure (see error()).
  QpPair* Connect(const QpPairOptions& options);
  const std::vector<std::unique_ptr<QpPair>>& pairs() const { return pairs_; }

 private:
  bool Fail(const std::string& what);
  bool NextEvent(rdma_event_channel* channel, rdma_cm_event_type type,
                 rdma_cm_event** event);
  void DestroyEnd(QpEnd* end);

  FakeNic* nic_;
  std::string addr_;
  std::string port_;
  std::string error_;
  ibv_context* client_ctx_ = nullptr;
  ibv_context* server_ctx_ = nullptr;
  ibv_pd* client_pd_ = nullptr;
  ibv_pd* server_pd_ = nullptr;
  rdma_event_channel* client_channel_ = nullptr;
  rdma_event_channel* server_channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  std::vector<std::unique_ptr<QpPair>> pairs_;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_comp_channel*> comp_channels_;
  std::vector<ibv_mr*> mrs_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TESTS_CONNECTED_QPS_H_
