// rpma_read, rpma_flush and rpma_atomic_write as their man pages and
// librpma 1.3 (src/conn.c, src/mr.c, src/flush.c) define them: every
// RPMA_E_INVAL / RPMA_E_NOSUPP path (nothing reaches the backend), and the
// exact ibv_send_wr librpma posts, field for field.

#include <cstring>
#include <string>
#include <tuple>

#include "mock/matchers.h"
#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using testing_support::CapturedSendWr;
using testing_support::CaptureSendWr;
using testing_support::MockConnectionTest;

const void* const kOpContext = reinterpret_cast<const void*>(0xC0FFEE);

struct FlagsCase {
  const char* name;
  int flags;
  unsigned int signaled;  // IBV_SEND_SIGNALED or 0
};

const FlagsCase kFlagsCases[] = {
    {"Always", RPMA_F_COMPLETION_ALWAYS, IBV_SEND_SIGNALED},
    {"OnError", RPMA_F_COMPLETION_ON_ERROR, 0},
};

std::string FlagsName(const ::testing::TestParamInfo<FlagsCase>& info) {
  return info.param.name;
}

class DataOpTest : public MockConnectionTest {
 protected:
  void SetUp() override {
    MockConnectionTest::SetUp();
    flush_dst_ = RemoteWithUsage(RPMA_MR_USAGE_WRITE_DST |
                                 RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
                                 RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
  }
  void TearDown() override {
    rpma_mr_remote_delete(&flush_dst_);
    MockConnectionTest::TearDown();
  }

  // A remote region at kRemoteAddr / kRemoteRkey with `usage`.
  static rpma_mr_remote* RemoteWithUsage(uint8_t usage) {
    uint8_t desc[21];
    std::memcpy(desc, &kRemoteAddr, 8);
    std::memcpy(desc + 8, &kRemoteSize, 8);
    std::memcpy(desc + 16, &kRemoteRkey, 4);
    desc[20] = usage;
    rpma_mr_remote* mr = nullptr;
    EXPECT_EQ(rpma_mr_remote_from_descriptor(desc, sizeof(desc), &mr), 0);
    return mr;
  }

  void AllowPersistentFlush() {
    rpma_peer_cfg* cfg = nullptr;
    ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
    ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(cfg, true), 0);
    ASSERT_EQ(rpma_conn_apply_remote_peer_cfg(conn(), cfg), 0);
    rpma_peer_cfg_delete(&cfg);
  }

  // Expects exactly one PostSend and captures it.
  CapturedSendWr* ExpectOnePost() {
    EXPECT_CALL(mock(), PostSend(qp(), _, _))
        .WillOnce(CaptureSendWr(&captured_));
    return &captured_;
  }

  rpma_mr_remote* flush_dst_ = nullptr;
  CapturedSendWr captured_{};
};

// ============================== rpma_read ==================================

TEST_F(DataOpTest, ReadNullConnIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_read(nullptr, local(), 0, remote(), 0, 8,
                      RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(DataOpTest, ReadZeroFlagsIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_read(conn(), local(), 0, remote(), 0, 8, 0, kOpContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_read(conn(), nullptr, 0, nullptr, 0, 0, 0, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(DataOpTest, ReadWithOnlyOneRegionIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  for (size_t len : {0, 8}) {
    EXPECT_EQ(rpma_read(conn(), nullptr, 0, remote(), 0, len,
                        RPMA_F_COMPLETION_ALWAYS, kOpContext),
              RPMA_E_INVAL);
    EXPECT_EQ(rpma_read(conn(), local(), 0, nullptr, 0, len,
                        RPMA_F_COMPLETION_ALWAYS, kOpContext),
              RPMA_E_INVAL);
  }
}

TEST_F(DataOpTest, ReadWithNoRegionsButAnOffsetOrLengthIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  for (auto [dst_off, src_off, len] :
       {std::make_tuple(1, 0, 0), std::make_tuple(0, 1, 0),
        std::make_tuple(0, 0, 1), std::make_tuple(1, 1, 1)}) {
    EXPECT_EQ(rpma_read(conn(), nullptr, dst_off, nullptr, src_off, len,
                        RPMA_F_COMPLETION_ALWAYS, kOpContext),
              RPMA_E_INVAL);
  }
}

class ReadWrTest : public DataOpTest,
                   public ::testing::WithParamInterface<FlagsCase> {};

// librpma mr.c rpma_mr_read: one RDMA_READ, the local region is the sink.
TEST_P(ReadWrTest, ReadPostsOneRdmaReadIntoTheLocalRegion) {
  CapturedSendWr* c = ExpectOnePost();
  ASSERT_EQ(rpma_read(conn(), local(), 0x10, remote(), 0x40, 100,
                      GetParam().flags, kOpContext),
            0);
  ibv_send_wr expected{};
  expected.wr_id = reinterpret_cast<uint64_t>(kOpContext);
  expected.sg_list = c->wr.sg_list;
  expected.num_sge = 1;
  expected.opcode = IBV_WR_RDMA_READ;
  expected.send_flags = GetParam().signaled;
  expected.wr.rdma.remote_addr = kRemoteAddr + 0x40;
  expected.wr.rdma.rkey = kRemoteRkey;
  EXPECT_EQ(std::memcmp(&expected, &c->wr, sizeof(expected)), 0)
      << Describe(c->wr);
  ASSERT_EQ(c->sges.size(), 1u);
  EXPECT_EQ(c->sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 0x10);
  EXPECT_EQ(c->sges[0].length, 100u);
  EXPECT_EQ(c->sges[0].lkey, kLocalLkey);
}

TEST_P(ReadWrTest, ZeroByteReadHasNoSgeAndNoRemote) {
  CapturedSendWr* c = ExpectOnePost();
  ASSERT_EQ(rpma_read(conn(), nullptr, 0, nullptr, 0, 0, GetParam().flags,
                      kOpContext),
            0);
  ibv_send_wr expected{};
  expected.wr_id = reinterpret_cast<uint64_t>(kOpContext);
  expected.opcode = IBV_WR_RDMA_READ;
  expected.send_flags = GetParam().signaled;
  EXPECT_EQ(std::memcmp(&expected, &c->wr, sizeof(expected)), 0)
      << Describe(c->wr);
}

INSTANTIATE_TEST_SUITE_P(BothFlags, ReadWrTest,
                         ::testing::ValuesIn(kFlagsCases), FlagsName);

TEST_F(DataOpTest, ReadPostFailureIsProviderAndLogged) {
  EXPECT_CALL(mock(), PostSend(qp(), _, _))
      .WillOnce(CaptureSendWr(&captured_, ENOMEM));
  EXPECT_EQ(rpma_read(conn(), local(), 0, remote(), 0, 8,
                      RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_PROVIDER);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("RDMA_READ"));
}

// ============================== rpma_flush =================================

TEST_F(DataOpTest, FlushNullConnOrDstOrZeroFlagsIsInval) {
  AllowPersistentFlush();
  EXPECT_CALL(mock(), PostSend).Times(0);
  for (rpma_flush_type type :
       {RPMA_FLUSH_TYPE_PERSISTENT, RPMA_FLUSH_TYPE_VISIBILITY}) {
    EXPECT_EQ(rpma_flush(nullptr, flush_dst_, 0, 8, type,
                         RPMA_F_COMPLETION_ALWAYS, kOpContext),
              RPMA_E_INVAL);
    EXPECT_EQ(rpma_flush(conn(), nullptr, 0, 8, type, RPMA_F_COMPLETION_ALWAYS,
                         kOpContext),
              RPMA_E_INVAL);
    EXPECT_EQ(rpma_flush(conn(), flush_dst_, 0, 8, type, 0, kOpContext),
              RPMA_E_INVAL);
  }
}

TEST_F(DataOpTest, FlushUnknownTypeIsInval) {
  AllowPersistentFlush();
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(
      rpma_flush(conn(), flush_dst_, 0, 8, static_cast<rpma_flush_type>(2),
                 RPMA_F_COMPLETION_ALWAYS, kOpContext),
      RPMA_E_INVAL);
}

// rpma_flush(3): persistent flush needs direct write to PMem at the remote
// peer, which only rpma_conn_apply_remote_peer_cfg(3) can tell.
TEST_F(DataOpTest, PersistentFlushWithoutDirectWriteToPmemIsNosupp) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_flush(conn(), flush_dst_, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT,
                       RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_NOSUPP);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("direct write to persistent memory"));
}

TEST_F(DataOpTest, PersistentFlushOfARegionWithoutPersistentUsageIsNosupp) {
  AllowPersistentFlush();
  rpma_mr_remote* dst = RemoteWithUsage(RPMA_MR_USAGE_WRITE_DST |
                                        RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_flush(conn(), dst, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT,
                       RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_NOSUPP);
  rpma_mr_remote_delete(&dst);
}

// The direct-write check comes first (librpma conn.c): a region without
// the persistent usage on a connection without direct write is NOSUPP for
// the first reason, and the log says so.
TEST_F(DataOpTest, PersistentFlushChecksTheConnectionBeforeTheRegion) {
  rpma_mr_remote* dst = RemoteWithUsage(RPMA_MR_USAGE_WRITE_DST);
  EXPECT_EQ(rpma_flush(conn(), dst, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT,
                       RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_NOSUPP);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("Connection does not support"));
  rpma_mr_remote_delete(&dst);
}

TEST_F(DataOpTest, VisibilityFlushOfARegionWithoutVisibilityUsageIsNosupp) {
  rpma_mr_remote* dst = RemoteWithUsage(RPMA_MR_USAGE_WRITE_DST |
                                        RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_flush(conn(), dst, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY,
                       RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_NOSUPP);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("global visibility"));
  rpma_mr_remote_delete(&dst);
}

// Visibility needs no peer configuration.
TEST_F(DataOpTest, VisibilityFlushNeedsNoDirectWriteToPmem) {
  EXPECT_CALL(mock(), PostSend(qp(), _, _)).WillOnce(::testing::Return(0));
  EXPECT_EQ(rpma_flush(conn(), flush_dst_, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY,
                       RPMA_F_COMPLETION_ALWAYS, kOpContext),
            0);
}

struct FlushCase {
  const char* name;
  rpma_flush_type type;
  FlagsCase flags;
};

class FlushWrTest : public DataOpTest,
                    public ::testing::WithParamInterface<FlushCase> {};

// librpma flush.c rpma_flush_apm_execute: an 8-byte RDMA_READ of
// dst + dst_offset into the connection's read-after-write buffer, whatever
// len and type are.
TEST_P(FlushWrTest, FlushIsAnEightByteReadIntoTheRawBuffer) {
  AllowPersistentFlush();
  CapturedSendWr* c = ExpectOnePost();
  ASSERT_EQ(rpma_flush(conn(), flush_dst_, 0x100, 4096, GetParam().type,
                       GetParam().flags.flags, kOpContext),
            0);
  ibv_send_wr expected{};
  expected.wr_id = reinterpret_cast<uint64_t>(kOpContext);
  expected.sg_list = c->wr.sg_list;
  expected.num_sge = 1;
  expected.opcode = IBV_WR_RDMA_READ;
  expected.send_flags = GetParam().flags.signaled;
  expected.wr.rdma.remote_addr = kRemoteAddr + 0x100;
  expected.wr.rdma.rkey = kRemoteRkey;
  EXPECT_EQ(std::memcmp(&expected, &c->wr, sizeof(expected)), 0)
      << Describe(c->wr);
  ASSERT_EQ(c->sges.size(), 1u);
  EXPECT_EQ(c->sges[0].addr, reinterpret_cast<uint64_t>(raw_mr()->addr));
  EXPECT_EQ(c->sges[0].length, 8u);
  EXPECT_EQ(c->sges[0].lkey, kRawLkey);
}

INSTANTIATE_TEST_SUITE_P(
    BothTypesBothFlags, FlushWrTest,
    ::testing::Values(FlushCase{"PersistentAlways", RPMA_FLUSH_TYPE_PERSISTENT,
                                kFlagsCases[0]},
                      FlushCase{"PersistentOnError", RPMA_FLUSH_TYPE_PERSISTENT,
                                kFlagsCases[1]},
                      FlushCase{"VisibilityAlways", RPMA_FLUSH_TYPE_VISIBILITY,
                                kFlagsCases[0]},
                      FlushCase{"VisibilityOnError", RPMA_FLUSH_TYPE_VISIBILITY,
                                kFlagsCases[1]}),
    [](const ::testing::TestParamInfo<FlushCase>& info) {
      return std::string(info.param.name);
    });

// flush.c rpma_flush_apm_new: a page-aligned page (mmap), of which 8 bytes
// are registered READ_DST (IBV_ACCESS_LOCAL_WRITE), once per connection.
TEST_F(DataOpTest, EveryConnectionRegistersAnEightBytePageAlignedRawBuffer) {
  EXPECT_NE(raw_mr()->addr, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(raw_mr()->addr) %
                static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)),
            0u);
  EXPECT_EQ(raw_mr()->length, 8u);
  EXPECT_CALL(mock(), RegMr(_, _, 8, IBV_ACCESS_LOCAL_WRITE));
  rpma_conn_req* req = NewActiveRequest();
  rpma_conn* second = nullptr;
  ASSERT_EQ(rpma_conn_req_connect(&req, nullptr, &second), 0);
  EXPECT_CALL(mock(), DeregMr(raw_mr())).WillOnce(::testing::Return(0));
  EXPECT_EQ(rpma_conn_delete(&second), 0);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(DataOpTest, ConnectFailsWhenTheRawBufferCannotBeRegistered) {
  EXPECT_CALL(mock(), RegMr(_, _, 8, IBV_ACCESS_LOCAL_WRITE))
      .WillOnce([](ibv_pd*, void*, size_t, int) {
        errno = ENOMEM;
        return nullptr;
      });
  EXPECT_CALL(mock(), Connect).Times(0);
  rpma_conn_req* req = NewActiveRequest();
  rpma_conn* second = nullptr;
  EXPECT_EQ(rpma_conn_req_connect(&req, nullptr, &second), RPMA_E_PROVIDER);
  EXPECT_EQ(second, nullptr);
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
}

// =========================== rpma_atomic_write =============================

TEST_F(DataOpTest, AtomicWriteNullArgumentsOrZeroFlagsAreInval) {
  const char src[8] = "1234567";
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_atomic_write(nullptr, remote(), 0, src,
                              RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_atomic_write(conn(), nullptr, 0, src, RPMA_F_COMPLETION_ALWAYS,
                              kOpContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_atomic_write(conn(), remote(), 0, nullptr,
                              RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_atomic_write(conn(), remote(), 0, src, 0, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(DataOpTest, AtomicWriteToAnOffsetNotAlignedToEightIsInval) {
  const char src[8] = "1234567";
  EXPECT_CALL(mock(), PostSend).Times(0);
  for (size_t offset = 1; offset < RPMA_ATOMIC_WRITE_ALIGNMENT; ++offset) {
    EXPECT_EQ(rpma_atomic_write(conn(), remote(), offset, src,
                                RPMA_F_COMPLETION_ALWAYS, kOpContext),
              RPMA_E_INVAL)
        << offset;
  }
  EXPECT_EQ(rpma_atomic_write(conn(), remote(), 12, src,
                              RPMA_F_COMPLETION_ALWAYS, kOpContext),
            RPMA_E_INVAL);
}

class AtomicWriteWrTest : public DataOpTest,
                          public ::testing::WithParamInterface<FlagsCase> {};

// librpma mr.c rpma_mr_atomic_write without native atomic write: an RDMA
// WRITE of the 8 source bytes, inline (no lkey), fenced behind earlier
// reads.
TEST_P(AtomicWriteWrTest, AtomicWriteIsAFencedInlineEightByteWrite) {
  const char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CapturedSendWr* c = ExpectOnePost();
  ASSERT_EQ(rpma_atomic_write(conn(), remote(), 0x18, src, GetParam().flags,
                              kOpContext),
            0);
  ibv_send_wr expected{};
  expected.wr_id = reinterpret_cast<uint64_t>(kOpContext);
  expected.sg_list = c->wr.sg_list;
  expected.num_sge = 1;
  expected.opcode = IBV_WR_RDMA_WRITE;
  expected.send_flags = IBV_SEND_INLINE | IBV_SEND_FENCE | GetParam().signaled;
  expected.wr.rdma.remote_addr = kRemoteAddr + 0x18;
  expected.wr.rdma.rkey = kRemoteRkey;
  EXPECT_EQ(std::memcmp(&expected, &c->wr, sizeof(expected)), 0)
      << Describe(c->wr);
  ASSERT_EQ(c->sges.size(), 1u);
  EXPECT_EQ(c->sges[0].addr, reinterpret_cast<uint64_t>(src));
  EXPECT_EQ(c->sges[0].length, 8u);
  EXPECT_EQ(c->sges[0].lkey, 0u);
}

INSTANTIATE_TEST_SUITE_P(BothFlags, AtomicWriteWrTest,
                         ::testing::ValuesIn(kFlagsCases), FlagsName);

// The QP can carry the 8 inline bytes: librpma's peer.c creates it with
// max_inline_data RPMA_MAX_INLINE_DATA (8).
TEST_F(DataOpTest, QpIsCreatedWithEightBytesOfInlineData) {
  ibv_qp_init_attr attr{};
  EXPECT_CALL(mock(), CreateQp(_, _, _))
      .WillOnce([&](rdma_cm_id* id, ibv_pd*, ibv_qp_init_attr* init) {
        attr = *init;
        id->qp = qp();
        return 0;
      });
  rpma_conn_req* req = NewActiveRequest();
  EXPECT_EQ(attr.cap.max_inline_data, 8u);
  EXPECT_EQ(attr.cap.max_send_sge, 1u);
  EXPECT_EQ(attr.cap.max_recv_sge, 1u);
  EXPECT_EQ(attr.srq, nullptr);
  EXPECT_EQ(rpma_conn_req_delete(&req), 0);
}

}  // namespace
}  // namespace rpma_harness
