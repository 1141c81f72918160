// memory_guard_test.cc: no WR, valid or not, makes the fake NIC read or write
// a byte outside a registered region.
//
// Both hosts' registered buffers sit between inaccessible pages
// (tests/guarded_buffer.h), so a single byte touched outside the region
// kills the test with SIGSEGV. Every boundary is tried: the local SGE and the
// remote range at, and one past, each end; zero-length operations pointing
// into the guard pages; several SGEs; rkeys of neighbouring MRs; inline data;
// atomics. A refused WR must also leave the target region untouched.

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "tests/connected_qps.h"
#include "tests/guarded_buffer.h"

namespace rpma_harness {
namespace {

constexpr int64_t kLen = 8192;  // two pages: both ends touch a guard page
constexpr uint32_t kMaxInline = 64;
constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct Completions {
  bool client_got = false;
  ibv_wc client{};
  bool server_got = false;
  ibv_wc server{};
};

class MemoryGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nic_ = std::make_unique<FakeNic>();
    // The fake turns a copy that faults into an error completion and a
    // "harness error" instead of a SIGSEGV; here nothing is ever unmapped,
    // so such a fault is a stray access into a guard page.
    nic_->AddObserver([](const FakeNicEvent& e) {
      if (e.kind == FakeNicEvent::Kind::kExecute &&
          e.text.find("harness error") != std::string::npos) {
        ADD_FAILURE() << "the NIC touched a guard page: " << e.text;
      }
    });
    fabric_ = std::make_unique<ConnectedQps>(nic_.get());
    QpPairOptions options;
    options.max_inline_data = kMaxInline;
    pair_ = fabric_->Connect(options);
    ASSERT_NE(pair_, nullptr) << fabric_->error();
    for (size_t i = 0; i < kLen; ++i) {
      local_.data()[i] = static_cast<uint8_t>(i * 7 + 1);
      remote_.data()[i] = static_cast<uint8_t>(0xa0 ^ i);
    }
    local_mr_ =
        fabric_->RegMr(fabric_->client_pd(), local_.data(), kLen, kAllAccess);
    remote_mr_ =
        fabric_->RegMr(fabric_->server_pd(), remote_.data(), kLen, kAllAccess);
    recv_mr_ =
        fabric_->RegMr(fabric_->server_pd(), remote_.data(), kLen, kAllAccess);
    ASSERT_TRUE(fabric_->ok()) << fabric_->error();
    local_before_.assign(local_.data(), local_.data() + kLen);
    remote_before_.assign(remote_.data(), remote_.data() + kLen);
  }

  // Posts `wr` on the client QP, runs the NIC, polls both CQs.
  int PostAndRun(ibv_send_wr* wr, Completions* out) {
    ibv_send_wr* bad = nullptr;
    const int ret = nic_->PostSend(pair_->client.qp, wr, &bad);
    nic_->RunUntilIdle();
    out->client_got = nic_->PollCq(pair_->client.cq, 1, &out->client) == 1;
    out->server_got = nic_->PollCq(pair_->server.cq, 1, &out->server) == 1;
    return ret;
  }

  int PostRecv(int64_t offset, int64_t length, uint32_t lkey) {
    ibv_sge sge{remote_.addr(offset), static_cast<uint32_t>(length), lkey};
    ibv_recv_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = 77;
    wr.sg_list = &sge;
    wr.num_sge = length >= 0 ? 1 : 0;
    ibv_recv_wr* bad = nullptr;
    return nic_->PostRecv(pair_->server.qp, &wr, &bad);
  }

  static ibv_send_wr Wr(ibv_wr_opcode opcode, ibv_sge* sges, int num_sge,
                        uint64_t remote_addr, uint32_t rkey) {
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = sges;
    wr.num_sge = num_sge;
    wr.imm_data = htonl(0xabcd);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return wr;
  }

  bool LocalUnchanged() const {
    return std::memcmp(local_.data(), local_before_.data(), kLen) == 0;
  }
  bool RemoteUnchanged() const {
    return std::memcmp(remote_.data(), remote_before_.data(), kLen) == 0;
  }
  // After a failed SEND: the packets before the failing one have landed
  // (fake_nic_packets.cc ExecuteSendByPackets, as rxe_resp.c's per-packet
  // copy_data), so the remote buffer may hold a prefix of the source at the
  // receive's offset; every other byte is unchanged.
  bool RemoteHoldsAtMostAPrefixOfTheSource(int64_t remote_offset,
                                           int64_t local_offset,
                                           int64_t length) const {
    int64_t prefix = 0;
    // (An offset before the start reads no guard page here: no prefix.)
    while (remote_offset >= 0 && local_offset >= 0 && prefix < length &&
           remote_offset + prefix < kLen && local_offset + prefix < kLen &&
           remote_.data()[remote_offset + prefix] ==
               local_.data()[local_offset + prefix]) {
      ++prefix;
    }
    for (int64_t i = 0; i < kLen; ++i) {
      const bool in_prefix = i >= remote_offset && i < remote_offset + prefix;
      if (!in_prefix && remote_.data()[i] != remote_before_[i]) return false;
    }
    return true;
  }

  std::unique_ptr<FakeNic> nic_;
  std::unique_ptr<ConnectedQps> fabric_;
  QpPair* pair_ = nullptr;
  GuardedBuffer local_{kLen};
  GuardedBuffer remote_{kLen};
  ibv_mr* local_mr_ = nullptr;
  ibv_mr* remote_mr_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  std::vector<uint8_t> local_before_;
  std::vector<uint8_t> remote_before_;
};

// ---- one SGE, one remote range: every end, for every data opcode -----------

enum class Fault { kNone, kLocal, kRemote };

struct Geometry {
  const char* name;
  int64_t local_offset;
  int64_t length;  // the SGE's; the remote range has the same length
  int64_t remote_offset;
  Fault fault;
};

const Geometry kGeometries[] = {
    {"WholeRegion", 0, kLen, 0, Fault::kNone},
    {"FirstByte", 0, 1, 0, Fault::kNone},
    {"LastByte", kLen - 1, 1, kLen - 1, Fault::kNone},
    {"ZeroLengthAtTheEnd", kLen, 0, kLen, Fault::kNone},
    // Zero bytes at addresses inside the guard pages: nothing may be touched
    // (IB spec C9-88: a zero-length RDMA carries no valid VA).
    {"ZeroLengthInsideTheGuardPages", kLen + 100, 0, -100, Fault::kNone},
    {"LocalOnePastTheEnd", 0, kLen + 1, 0, Fault::kLocal},
    {"LocalStartsAtTheEnd", kLen, 1, 0, Fault::kLocal},
    {"LocalLastByteAndOneMore", kLen - 1, 2, 0, Fault::kLocal},
    {"LocalOneBeforeTheStart", -1, 1, 0, Fault::kLocal},
    {"LocalStraddlesTheStart", -1, 2, 0, Fault::kLocal},
    {"RemoteOnePastTheEnd", 0, kLen, 1, Fault::kRemote},
    {"RemoteStartsAtTheEnd", 0, 1, kLen, Fault::kRemote},
    {"RemoteLastByteAndOneMore", 0, 2, kLen - 1, Fault::kRemote},
    {"RemoteOneBeforeTheStart", 0, 1, -1, Fault::kRemote},
    {"RemoteStraddlesTheStart", 0, 2, -1, Fault::kRemote},
};

struct OpCase {
  ibv_wr_opcode opcode;
  Geometry geometry;
};

std::vector<OpCase> AllOpCases() {
  std::vector<OpCase> cases;
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
                           IBV_WR_RDMA_READ, IBV_WR_SEND}) {
    for (const Geometry& g : kGeometries) cases.push_back({op, g});
  }
  return cases;
}

std::string OpName(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
      return "Write";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "WriteWithImm";
    case IBV_WR_RDMA_READ:
      return "Read";
    case IBV_WR_SEND:
      return "Send";
    default:
      return "Op" + std::to_string(op);
  }
}

class BoundaryTest : public MemoryGuardTest,
                     public ::testing::WithParamInterface<OpCase> {};

TEST_P(BoundaryTest, TouchesOnlyTheRegisteredRegion) {
  const ibv_wr_opcode op = GetParam().opcode;
  const Geometry& g = GetParam().geometry;
  const bool is_send = op == IBV_WR_SEND;
  if (is_send) {
    // For a send the "remote range" is the posted receive's SGE.
    ASSERT_EQ(PostRecv(g.remote_offset, g.length, recv_mr_->lkey), 0);
  } else if (op == IBV_WR_RDMA_WRITE_WITH_IMM) {
    ASSERT_EQ(PostRecv(0, -1, 0), 0);  // no SGE: the write lands elsewhere
  }
  ibv_sge sge{local_.addr(g.local_offset), static_cast<uint32_t>(g.length),
              local_mr_->lkey};
  ibv_send_wr wr =
      Wr(op, &sge, 1, remote_.addr(g.remote_offset), remote_mr_->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  ASSERT_TRUE(got.client_got);

  ibv_wc_status expected = IBV_WC_SUCCESS;
  if (g.fault == Fault::kLocal) expected = IBV_WC_LOC_PROT_ERR;
  if (g.fault == Fault::kRemote) {
    expected = is_send ? IBV_WC_REM_OP_ERR : IBV_WC_REM_ACCESS_ERR;
  }
  // A write's or a READ's remote range is checked whole on its first packet
  // (rxe_resp.c check_rkey), before the requester reaches a bad local byte
  // in a later packet (rxe_req.c finish_packet, rxe_comp.c do_read): when
  // the remote range is out too, the responder's NAK decides.
  if (g.fault == Fault::kLocal && !is_send && g.length > 0 &&
      (g.remote_offset < 0 || g.remote_offset + g.length > kLen)) {
    expected = IBV_WC_REM_ACCESS_ERR;
  }
  EXPECT_EQ(got.client.status, expected);
  if (op == IBV_WR_RDMA_READ) {
    EXPECT_TRUE(RemoteUnchanged());
    if (expected != IBV_WC_SUCCESS) {
      EXPECT_TRUE(LocalUnchanged());
    } else if (g.length > 0) {
      EXPECT_EQ(std::memcmp(local_.data() + g.local_offset,
                            remote_.data() + g.remote_offset, g.length),
                0);
    }
  } else {
    EXPECT_TRUE(LocalUnchanged());
    if (expected != IBV_WC_SUCCESS && is_send) {
      EXPECT_TRUE(RemoteHoldsAtMostAPrefixOfTheSource(
          g.remote_offset, g.local_offset, g.length));
    } else if (expected != IBV_WC_SUCCESS) {
      EXPECT_TRUE(RemoteUnchanged());
    } else if (g.length > 0) {
      EXPECT_EQ(std::memcmp(remote_.data() + g.remote_offset,
                            local_.data() + g.local_offset, g.length),
                0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryEnd, BoundaryTest,
                         ::testing::ValuesIn(AllOpCases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return OpName(info.param.opcode) + "_" +
                                  info.param.geometry.name;
                         });

// ---- several SGEs -------------------------------------------------------

TEST_F(MemoryGuardTest, SgesThatTogetherCoverTheRegionWork) {
  ibv_sge sges[2] = {{local_.addr(0), kLen / 2, local_mr_->lkey},
                     {local_.addr(kLen / 2), kLen / 2, local_mr_->lkey}};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, sges, 2, remote_.addr(0), remote_mr_->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(remote_.data(), local_.data(), kLen), 0);
}

TEST_F(MemoryGuardTest, ALaterSgeOnePastTheEndFailsTheWholeWr) {
  ibv_sge sges[3] = {{local_.addr(0), 16, local_mr_->lkey},
                     {local_.addr(100), 0, 0},  // empty: never checked
                     {local_.addr(kLen - 8), 9, local_mr_->lkey}};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, sges, 3, remote_.addr(0), remote_mr_->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

TEST_F(MemoryGuardTest, ReadScattersIntoSeveralSgesUpToTheEnd) {
  ibv_sge sges[2] = {{local_.addr(0), 10, local_mr_->lkey},
                     {local_.addr(kLen - 10), 10, local_mr_->lkey}};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_READ, sges, 2, remote_.addr(kLen - 20), remote_mr_->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(local_.data(), remote_.data() + kLen - 20, 10), 0);
  EXPECT_EQ(
      std::memcmp(local_.data() + kLen - 10, remote_.data() + kLen - 10, 10),
      0);
}

TEST_F(MemoryGuardTest, SendScattersIntoReceiveSgesEndingAtTheGuard) {
  ibv_sge recv_sges[2] = {{remote_.addr(0), 4, recv_mr_->lkey},
                          {remote_.addr(kLen - 4), 4, recv_mr_->lkey}};
  ibv_recv_wr rwr;
  std::memset(&rwr, 0, sizeof(rwr));
  rwr.sg_list = recv_sges;
  rwr.num_sge = 2;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(nic_->PostRecv(pair_->server.qp, &rwr, &rbad), 0);
  ibv_sge sge{local_.addr(kLen - 8), 8, local_mr_->lkey};
  ibv_send_wr wr = Wr(IBV_WR_SEND, &sge, 1, 0, 0);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(remote_.data(), local_.data() + kLen - 8, 4), 0);
  EXPECT_EQ(std::memcmp(remote_.data() + kLen - 4, local_.data() + kLen - 4, 4),
            0);
}

TEST_F(MemoryGuardTest, SendLongerThanTheReceiveWritesNothing) {
  ASSERT_EQ(PostRecv(kLen - 8, 8, recv_mr_->lkey), 0);
  ibv_sge sge{local_.addr(0), 9, local_mr_->lkey};
  ibv_send_wr wr = Wr(IBV_WR_SEND, &sge, 1, 0, 0);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

// ---- keys -------------------------------------------------------------

// Two MRs side by side in one buffer: an rkey covers its own MR only, even
// though the memory next to it is registered too.
TEST_F(MemoryGuardTest, RkeyBoundsAreThoseOfItsOwnMr) {
  ibv_mr* first = fabric_->RegMr(fabric_->server_pd(), remote_.data(), kLen / 2,
                                 kAllAccess);
  ibv_mr* second = fabric_->RegMr(
      fabric_->server_pd(), remote_.data() + kLen / 2, kLen / 2, kAllAccess);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ibv_sge sge{local_.addr(0), 2, local_mr_->lkey};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(kLen / 2 - 1), first->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

TEST_F(MemoryGuardTest, RkeyOfTheNextMrDoesNotReachBackwards) {
  ibv_mr* second = fabric_->RegMr(
      fabric_->server_pd(), remote_.data() + kLen / 2, kLen / 2, kAllAccess);
  ASSERT_NE(second, nullptr);
  ibv_sge sge{local_.addr(0), 1, local_mr_->lkey};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(kLen / 2 - 1), second->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

TEST_F(MemoryGuardTest, LkeyOfASmallerMrLimitsTheSge) {
  ibv_mr* small =
      fabric_->RegMr(fabric_->client_pd(), local_.data(), 16, kAllAccess);
  ASSERT_NE(small, nullptr);
  ibv_sge sge{local_.addr(0), 17, small->lkey};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(0), remote_mr_->rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

TEST_F(MemoryGuardTest, DeregisteredRegionIsNeverTouched) {
  ibv_mr* doomed =
      nic_->RegMr(fabric_->server_pd(), remote_.data(), kLen, kAllAccess);
  ASSERT_NE(doomed, nullptr);
  const uint32_t rkey = doomed->rkey;
  ASSERT_EQ(nic_->DeregMr(doomed), 0);
  ibv_sge sge{local_.addr(0), 8, local_mr_->lkey};
  ibv_send_wr wr = Wr(IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(0), rkey);
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

// ---- inline -----------------------------------------------------------

// Inline data is read at post time from any memory of the caller (no lkey);
// the read must stop exactly at the SGE's end.
TEST_F(MemoryGuardTest, InlineReadsExactlyUpToTheGuardPage) {
  ibv_sge sge{local_.addr(kLen - kMaxInline), kMaxInline, 0};
  ibv_send_wr wr = Wr(IBV_WR_RDMA_WRITE, &sge, 1,
                      remote_.addr(kLen - kMaxInline), remote_mr_->rkey);
  wr.send_flags |= IBV_SEND_INLINE;
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(remote_.data() + kLen - kMaxInline,
                        local_.data() + kLen - kMaxInline, kMaxInline),
            0);
}

TEST_F(MemoryGuardTest, InlineAboveTheLimitIsRefusedBeforeAnyRead) {
  // Read in full, this SGE would run one page past the buffer's end.
  ibv_sge sge{local_.addr(kLen - 1), 4096 + 1, 0};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, &sge, 1, remote_.addr(0), remote_mr_->rkey);
  wr.send_flags |= IBV_SEND_INLINE;
  Completions got;
  EXPECT_EQ(PostAndRun(&wr, &got), EINVAL);
  EXPECT_FALSE(got.client_got);
  EXPECT_TRUE(RemoteUnchanged());
}

TEST_F(MemoryGuardTest, InlineWithSeveralSgesEndingAtTheGuard) {
  ibv_sge sges[2] = {{local_.addr(0), 8, 0}, {local_.addr(kLen - 8), 8, 0}};
  ibv_send_wr wr =
      Wr(IBV_WR_RDMA_WRITE, sges, 2, remote_.addr(kLen - 16), remote_mr_->rkey);
  wr.send_flags |= IBV_SEND_INLINE;
  Completions got;
  ASSERT_EQ(PostAndRun(&wr, &got), 0);
  EXPECT_EQ(got.client.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(remote_.data() + kLen - 16, local_.data(), 8), 0);
  EXPECT_EQ(std::memcmp(remote_.data() + kLen - 8, local_.data() + kLen - 8, 8),
            0);
}

// ---- atomics ----------------------------------------------------------

class AtomicBoundaryTest : public MemoryGuardTest {
 protected:
  Completions Atomic(int64_t local_offset, int64_t remote_offset) {
    ibv_sge sge{local_.addr(local_offset), 8, local_mr_->lkey};
    ibv_send_wr wr;
    std::memset(&wr, 0, sizeof(wr));
    wr.wr_id = 9;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.atomic.remote_addr = remote_.addr(remote_offset);
    wr.wr.atomic.rkey = remote_mr_->rkey;
    wr.wr.atomic.compare_add = 1;
    Completions got;
    EXPECT_EQ(PostAndRun(&wr, &got), 0);
    return got;
  }
};

TEST_F(AtomicBoundaryTest, OnTheLastEightBytes) {
  EXPECT_EQ(Atomic(kLen - 8, kLen - 8).client.status, IBV_WC_SUCCESS);
}

TEST_F(AtomicBoundaryTest, RemoteOnePastTheEnd) {
  EXPECT_EQ(Atomic(0, kLen).client.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RemoteUnchanged());
  EXPECT_TRUE(LocalUnchanged());
}

TEST_F(AtomicBoundaryTest, RemoteBeforeTheStart) {
  EXPECT_EQ(Atomic(0, -8).client.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(RemoteUnchanged());
}

// The atomic runs at the responder; only then is the original value
// written to the local SGE, which fails (rxe_comp.c do_atomic; recorded on
// rxe: SendConformance.AtomicWithABadLocalSge). The remote 8 bytes changed
// (fetch-and-add of 1), nothing else, and no byte past the local region.
TEST_F(AtomicBoundaryTest, LocalResultOnePastTheEnd) {
  uint64_t before;
  std::memcpy(&before, remote_.data(), 8);
  EXPECT_EQ(Atomic(kLen - 7, 0).client.status, IBV_WC_LOC_PROT_ERR);
  uint64_t after;
  std::memcpy(&after, remote_.data(), 8);
  EXPECT_EQ(after, before + 1);
  EXPECT_EQ(
      std::memcmp(remote_.data() + 8, remote_before_.data() + 8, kLen - 8), 0);
  EXPECT_TRUE(LocalUnchanged());
}

}  // namespace
}  // namespace rpma_harness
