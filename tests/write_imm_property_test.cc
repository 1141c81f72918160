// A property of the fake NIC under the rpma API: for random but valid
// sequences of writes with imm, receives, NIC steps and polls on several
// connections, every write completes exactly once at each side, no
// completion is invented or duplicated, and every write's bytes land exactly
// where it said. Seeds vary the sequence; each seed is its own case.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "rpma/harness.h"

namespace rpma_harness {
namespace {

constexpr int kConnections = 3;
constexpr size_t kSlot = 64;  // each write targets one 64-byte slot
constexpr size_t kSlots = 32;
constexpr uint32_t kQueue = 8;  // sq, rq and the outstanding-write bound

struct Side {
  rpma_conn* conn = nullptr;
  rpma_cq* cq = nullptr;
};

struct Pair {
  Side client, server;
  std::vector<uint8_t> src, dst, recv;
  rpma_mr_local *src_mr = nullptr, *dst_mr = nullptr, *recv_mr = nullptr;
  rpma_mr_remote* remote = nullptr;
  uint32_t receives_posted = 0, receives_used = 0;
  std::map<uint64_t, size_t> in_flight;  // write id -> slot
  std::set<size_t> busy_slots;
};

class WriteImmPropertyTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(WriteImmPropertyTest, EveryWriteCompletesOnceAndLandsWhereItSaid) {
  std::mt19937 rng(GetParam());
  FakeNicConfig config;
  config.seed = GetParam();
  config.random_schedule = true;
  auto nic = std::make_shared<FakeNic>(config);
  ScopedBackend use(nic);

  ibv_context* dev = nullptr;
  ASSERT_EQ(
      rpma_utils_get_ibv_context("10.9.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
      0);
  rpma_peer* peer = nullptr;
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  rpma_ep* ep = nullptr;
  ASSERT_EQ(rpma_ep_listen(peer, "10.9.0.1", "4000", &ep), 0);
  rpma_conn_cfg* cfg = nullptr;
  rpma_conn_cfg_new(&cfg);
  rpma_conn_cfg_set_sq_size(cfg, kQueue);
  rpma_conn_cfg_set_rq_size(cfg, kQueue);
  rpma_conn_cfg_set_cq_size(cfg, 4 * kQueue);

  std::vector<Pair> pairs(kConnections);
  for (Pair& p : pairs) {
    p.src.resize(kSlot * kSlots);
    p.dst.assign(kSlot * kSlots, 0);
    p.recv.resize(16);
    ASSERT_EQ(rpma_mr_reg(peer, p.src.data(), p.src.size(),
                          RPMA_MR_USAGE_WRITE_SRC, &p.src_mr),
              0);
    ASSERT_EQ(rpma_mr_reg(peer, p.dst.data(), p.dst.size(),
                          RPMA_MR_USAGE_WRITE_DST, &p.dst_mr),
              0);
    ASSERT_EQ(rpma_mr_reg(peer, p.recv.data(), p.recv.size(),
                          RPMA_MR_USAGE_RECV, &p.recv_mr),
              0);
    rpma_conn_req* req = nullptr;
    ASSERT_EQ(rpma_conn_req_new(peer, "10.9.0.1", "4000", cfg, &req), 0);
    ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &p.client.conn), 0);
    rpma_conn_req* server_req = nullptr;
    ASSERT_EQ(rpma_ep_next_conn_req(ep, cfg, &server_req), 0);
    uint8_t desc[21];
    rpma_mr_get_descriptor(p.dst_mr, desc);
    rpma_conn_private_data pdata{desc, sizeof(desc)};
    ASSERT_EQ(rpma_conn_req_connect(&server_req, &pdata, &p.server.conn), 0);
    rpma_conn_event event;
    ASSERT_EQ(rpma_conn_next_event(p.client.conn, &event), 0);
    ASSERT_EQ(rpma_conn_next_event(p.server.conn, &event), 0);
    rpma_conn_private_data got{};
    rpma_conn_get_private_data(p.client.conn, &got);
    ASSERT_EQ(rpma_mr_remote_from_descriptor(got.ptr, got.len, &p.remote), 0);
    rpma_conn_get_cq(p.client.conn, &p.client.cq);
    rpma_conn_get_cq(p.server.conn, &p.server.cq);
  }
  rpma_conn_cfg_delete(&cfg);

  // What each write must produce, by id (= wr_id and imm).
  struct Expected {
    int pair;
    size_t slot, len;
    std::vector<uint8_t> bytes;
    bool client_done = false, server_done = false;
  };
  std::map<uint64_t, Expected> writes;
  uint64_t next_id = 1;

  auto poll = [&](int k, bool client) {
    Pair& p = pairs[k];
    ibv_wc wc;
    while (rpma_cq_get_wc(client ? p.client.cq : p.server.cq, 1, &wc,
                          nullptr) == 0) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      if (client) {
        auto it = writes.find(wc.wr_id);
        ASSERT_NE(it, writes.end()) << "invented completion " << wc.wr_id;
        ASSERT_FALSE(it->second.client_done) << "duplicate " << wc.wr_id;
        ASSERT_EQ(it->second.pair, k);
        it->second.client_done = true;
      } else {
        ASSERT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        const uint64_t id = ntohl(wc.imm_data);
        auto it = writes.find(id);
        ASSERT_NE(it, writes.end()) << "invented imm " << id;
        ASSERT_FALSE(it->second.server_done) << "duplicate imm " << id;
        ASSERT_EQ(it->second.pair, k);
        ASSERT_EQ(wc.byte_len, it->second.len);
        // Its bytes are there now (its slot is not reused until this).
        ASSERT_EQ(std::memcmp(p.dst.data() + it->second.slot * kSlot,
                              it->second.bytes.data(), it->second.len),
                  0)
            << "write " << id;
        it->second.server_done = true;
        p.busy_slots.erase(it->second.slot);
        p.in_flight.erase(id);
        ++p.receives_used;
      }
    }
  };

  for (int action = 0; action < 3000; ++action) {
    const int k = static_cast<int>(rng() % kConnections);
    Pair& p = pairs[k];
    switch (rng() % 4) {
      case 0: {  // a write with imm, if a slot and a send slot are free
        if (p.in_flight.size() >= kQueue || p.busy_slots.size() >= kSlots) {
          break;
        }
        size_t slot;
        do {
          slot = rng() % kSlots;
        } while (p.busy_slots.count(slot));
        const size_t len = 1 + rng() % kSlot;
        Expected e{k, slot, len, std::vector<uint8_t>(len)};
        for (uint8_t& b : e.bytes) b = static_cast<uint8_t>(rng());
        std::memcpy(p.src.data() + slot * kSlot, e.bytes.data(), len);
        const uint64_t id = next_id++;
        ASSERT_EQ(rpma_write_with_imm(
                      p.client.conn, p.remote, slot * kSlot, p.src_mr,
                      slot * kSlot, len, RPMA_F_COMPLETION_ALWAYS,
                      static_cast<uint32_t>(id), reinterpret_cast<void*>(id)),
                  0);
        writes.emplace(id, std::move(e));
        p.in_flight[id] = slot;
        p.busy_slots.insert(slot);
        break;
      }
      case 1:  // a receive, if the receive queue has room
        if (p.receives_posted - p.receives_used < kQueue) {
          ASSERT_EQ(
              rpma_recv(p.server.conn, p.recv_mr, 0, p.recv.size(), nullptr),
              0);
          ++p.receives_posted;
        }
        break;
      case 2:
        nic->Step();
        break;
      default:
        ASSERT_NO_FATAL_FAILURE(poll(k, rng() % 2 == 0));
    }
  }
  // Let everything finish: receives for every write still waiting.
  for (int k = 0; k < kConnections; ++k) {
    Pair& p = pairs[k];
    while (p.receives_posted - p.receives_used < p.in_flight.size()) {
      ASSERT_EQ(rpma_recv(p.server.conn, p.recv_mr, 0, p.recv.size(), nullptr),
                0);
      ++p.receives_posted;
    }
  }
  nic->RunUntilIdle();
  for (int k = 0; k < kConnections; ++k) {
    ASSERT_NO_FATAL_FAILURE(poll(k, true));
    ASSERT_NO_FATAL_FAILURE(poll(k, false));
  }
  ASSERT_GT(writes.size(), 300u);
  for (const auto& [id, e] : writes) {
    EXPECT_TRUE(e.client_done) << "write " << id << " lost at the client";
    EXPECT_TRUE(e.server_done) << "write " << id << " lost at the server";
  }

  for (Pair& p : pairs) {
    rpma_conn_delete(&p.client.conn);
    rpma_conn_delete(&p.server.conn);
    rpma_mr_remote_delete(&p.remote);
    rpma_mr_dereg(&p.src_mr);
    rpma_mr_dereg(&p.dst_mr);
    rpma_mr_dereg(&p.recv_mr);
  }
  rpma_ep_shutdown(&ep);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, WriteImmPropertyTest,
                         ::testing::Range<uint32_t>(1, 21));

}  // namespace
}  // namespace rpma_harness
