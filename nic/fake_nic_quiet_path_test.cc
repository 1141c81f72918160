// Nobody watching, the packet loop (ExecuteWriteByPackets) lands a write's
// packets in one copy when nothing can come between them, and builds no
// event objects. These tests run the same program twice on NICs built the
// same way, once quiet and once with an observer attached and every packet
// traced (which makes the loop copy packet by packet, one trace line each),
// and require the same completions, field by field, the same bytes in the
// responder's memory and the same QP and queue state afterwards: the one
// copy is an optimisation, never a behaviour. (Linked with the plain gtest
// main: //mock:gtest_main's flight recorder would observe both runs.)

#include <gtest/gtest.h>
#include <librpma.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mock/connected_pair.h"
#include "nic/fake_nic.h"

namespace rpma_harness {
namespace {

constexpr size_t kBuffer = 16384;  // several packets at any path MTU
constexpr uint32_t kImm = 0x51f00d;

struct Outcome {
  std::vector<ibv_wc> client;
  std::vector<ibv_wc> server;
  std::vector<char> server_memory;
  std::string nic_state;
  size_t events = 0;  // what the observer saw (observed run only)
};

// One program on a fresh pair; `program` returns false to stop early.
Outcome Run(bool observed, int recvs,
            const std::function<void(ConnectedPair&)>& program) {
  ConnectedPairOptions options;
  options.buffer_size = kBuffer;
  options.recvs = recvs;
  options.nic.trace_packets = observed;
  ConnectedPair pair(options);
  Outcome out;
  EXPECT_TRUE(pair.ok()) << pair.error();
  if (!pair.ok()) return out;
  for (size_t i = 0; i < kBuffer; ++i) {
    pair.client_buffer()[i] = static_cast<char>(1 + i % 251);
    pair.server_buffer()[i] = 0;
  }
  if (observed) {
    pair.nic().AddObserver([&out](const FakeNicEvent&) { ++out.events; });
  }
  program(pair);
  ibv_wc wc;
  while (pair.ClientCompletion(&wc) == 0) out.client.push_back(wc);
  while (pair.ServerCompletion(&wc) == 0) out.server.push_back(wc);
  out.server_memory.assign(pair.server_buffer(),
                           pair.server_buffer() + kBuffer);
  // The QP lines of DebugString (state, peer, queue depths); the CQ and
  // channel lines follow pointer order, which differs between two runs.
  const std::string state = pair.nic().DebugString();
  for (size_t at = state.find("\n  qp "); at != std::string::npos;
       at = state.find("\n  qp ", at + 1)) {
    out.nic_state += state.substr(at, state.find('\n', at + 1) - at);
  }
  return out;
}

void ExpectSameCompletions(const std::vector<ibv_wc>& quiet,
                           const std::vector<ibv_wc>& observed,
                           const char* side) {
  ASSERT_EQ(quiet.size(), observed.size()) << side;
  for (size_t i = 0; i < quiet.size(); ++i) {
    SCOPED_TRACE(std::string(side) + " completion " + std::to_string(i));
    EXPECT_EQ(quiet[i].wr_id, observed[i].wr_id);
    EXPECT_EQ(quiet[i].status, observed[i].status);
    EXPECT_EQ(quiet[i].opcode, observed[i].opcode);
    EXPECT_EQ(quiet[i].byte_len, observed[i].byte_len);
    EXPECT_EQ(quiet[i].wc_flags, observed[i].wc_flags);
    EXPECT_EQ(quiet[i].imm_data, observed[i].imm_data);
    EXPECT_EQ(quiet[i].qp_num, observed[i].qp_num);
  }
}

// Runs `program` quiet and observed; returns the quiet outcome for the
// test's own expectations.
Outcome ExpectQuietMatchesObserved(
    int recvs, const std::function<void(ConnectedPair&)>& program) {
  const Outcome quiet = Run(false, recvs, program);
  const Outcome observed = Run(true, recvs, program);
  EXPECT_GT(observed.events, 0u) << "the observer must have seen the run";
  ExpectSameCompletions(quiet.client, observed.client, "client");
  ExpectSameCompletions(quiet.server, observed.server, "server");
  EXPECT_TRUE(quiet.server_memory == observed.server_memory)
      << "the responder's memory differs";
  EXPECT_FALSE(quiet.nic_state.empty());
  EXPECT_EQ(quiet.nic_state, observed.nic_state);
  return quiet;
}

int Write(ConnectedPair& p, size_t dst_offset, size_t src_offset, size_t len,
          int flags = RPMA_F_COMPLETION_ALWAYS, uintptr_t ctx = 1) {
  return rpma_write_with_imm(p.client(), p.server_mr_remote(), dst_offset,
                             p.client_mr(), src_offset, len, flags, kImm,
                             reinterpret_cast<const void*>(ctx));
}

TEST(QuietPathTest, OnePacketWriteWithImmCompletesBothSidesAsObserved) {
  const Outcome out = ExpectQuietMatchesObserved(
      1, [](ConnectedPair& p) { ASSERT_EQ(Write(p, 128, 0, 64), 0); });
  ASSERT_EQ(out.client.size(), 1u);
  EXPECT_EQ(out.client[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(out.server.size(), 1u);
  EXPECT_EQ(out.server[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(out.server[0].byte_len, 64u);
  EXPECT_EQ(out.server_memory[128], 1);
  EXPECT_EQ(out.server_memory[128 + 63], 64);
}

TEST(QuietPathTest, MultiPacketWriteLandsTheSameBytesAsThePacketLoop) {
  const Outcome out = ExpectQuietMatchesObserved(
      1, [](ConnectedPair& p) { ASSERT_EQ(Write(p, 0, 3, 9000), 0); });
  ASSERT_EQ(out.server.size(), 1u);
  EXPECT_EQ(out.server[0].byte_len, 9000u);
  EXPECT_EQ(out.server_memory[8999], static_cast<char>(1 + (8999 + 3) % 251));
}

TEST(QuietPathTest, ZeroByteWriteWithImmAsObserved) {
  ExpectQuietMatchesObserved(
      1, [](ConnectedPair& p) { ASSERT_EQ(Write(p, 0, 0, 0), 0); });
}

TEST(QuietPathTest, UnsignaledThenSignaledWritesAsObserved) {
  const Outcome out = ExpectQuietMatchesObserved(2, [](ConnectedPair& p) {
    ASSERT_EQ(Write(p, 0, 0, 32, RPMA_F_COMPLETION_ON_ERROR, 7), 0);
    ASSERT_EQ(Write(p, 64, 64, 32, RPMA_F_COMPLETION_ALWAYS, 8), 0);
  });
  ASSERT_EQ(out.client.size(), 1u);
  EXPECT_EQ(out.client[0].wr_id, 8u);
  EXPECT_EQ(out.server.size(), 2u);
}

TEST(QuietPathTest, RemoteRangeOutsideTheMrIsARemoteAccessErrorAsObserved) {
  const Outcome out = ExpectQuietMatchesObserved(
      1, [](ConnectedPair& p) { ASSERT_EQ(Write(p, kBuffer - 16, 0, 64), 0); });
  ASSERT_FALSE(out.client.empty());
  EXPECT_EQ(out.client[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST(QuietPathTest, SourceOutsideTheMrIsALocalProtectionErrorAsObserved) {
  const Outcome out = ExpectQuietMatchesObserved(
      1, [](ConnectedPair& p) { ASSERT_EQ(Write(p, 0, kBuffer - 16, 64), 0); });
  ASSERT_FALSE(out.client.empty());
  EXPECT_EQ(out.client[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST(QuietPathTest, WriteWithImmWithoutAReceiveWaitsForOneAsObserved) {
  const Outcome out = ExpectQuietMatchesObserved(0, [](ConnectedPair& p) {
    ASSERT_EQ(Write(p, 0, 0, 64), 0);
    ASSERT_EQ(Write(p, 0, 0, 9000, RPMA_F_COMPLETION_ALWAYS, 2), 0);
    p.nic().RunUntilIdle();
    ASSERT_EQ(p.PostServerRecv(), 0);
    ASSERT_EQ(p.PostServerRecv(), 0);
  });
  ASSERT_EQ(out.client.size(), 2u);
  EXPECT_EQ(out.client[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(out.client[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(out.server.size(), 2u);
}

}  // namespace
}  // namespace rpma_harness
