// rpma_write_with_imm as its man page and librpma 1.2/1.3 define it: the
// argument rules, and the exact ibv_send_wr that reaches the backend.

#include <arpa/inet.h>

#include <cstring>
#include <tuple>

#include "mock/matchers.h"
#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Pointee;
using testing_support::CapturedSendWr;
using testing_support::CaptureSendWr;
using testing_support::MockConnectionTest;

constexpr uint32_t kImm = 0x12345678;
const void* const kOpContext = reinterpret_cast<const void*>(0xC0FFEE);

class WriteWithImmTest : public MockConnectionTest {
 protected:
  // Posts and returns the WR the backend received.
  CapturedSendWr PostAndCapture(rpma_mr_remote* dst, size_t dst_offset,
                                const rpma_mr_local* src, size_t src_offset,
                                size_t len, int flags) {
    CapturedSendWr captured{};
    EXPECT_CALL(mock(), PostSend(qp(), _, _))
        .WillOnce(CaptureSendWr(&captured));
    EXPECT_EQ(rpma_write_with_imm(conn(), dst, dst_offset, src, src_offset, len,
                                  flags, kImm, kOpContext),
              0);
    return captured;
  }
};

// ---- RPMA_E_INVAL, and nothing reaches the backend ----

TEST_F(WriteWithImmTest, NullConnIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(nullptr, remote(), 0, local(), 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, ZeroFlagsIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, local(), 0, 8, 0, kImm,
                                kOpContext),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, ZeroFlagsIsInvalEvenForTheZeroByteForm) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(conn(), nullptr, 0, nullptr, 0, 0, 0, kImm,
                                kOpContext),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, NullDstWithSrcIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(conn(), nullptr, 0, local(), 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, NullSrcWithDstIsInval) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, nullptr, 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, NullSrcWithDstIsInvalEvenWithZeroLength) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, nullptr, 0, 0,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, NullDstWithSrcIsInvalEvenWithZeroLength) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write_with_imm(conn(), nullptr, 0, local(), 0, 0,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_INVAL);
}

// Both regions NULL: any non-zero offset or length is invalid.
class WriteWithImmBothNullTest
    : public WriteWithImmTest,
      public ::testing::WithParamInterface<std::tuple<size_t, size_t, size_t>> {
};

TEST_P(WriteWithImmBothNullTest, NonZeroOffsetOrLengthIsInval) {
  auto [dst_offset, src_offset, len] = GetParam();
  EXPECT_CALL(mock(), PostSend).Times(0);
  for (int flags : {RPMA_F_COMPLETION_ALWAYS, RPMA_F_COMPLETION_ON_ERROR}) {
    EXPECT_EQ(rpma_write_with_imm(conn(), nullptr, dst_offset, nullptr,
                                  src_offset, len, flags, kImm, kOpContext),
              RPMA_E_INVAL);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryNonZeroCombination, WriteWithImmBothNullTest,
    ::testing::Values(std::make_tuple(1, 0, 0), std::make_tuple(0, 1, 0),
                      std::make_tuple(0, 0, 1), std::make_tuple(1, 1, 0),
                      std::make_tuple(1, 0, 1), std::make_tuple(0, 1, 1),
                      std::make_tuple(1, 1, 1)));

// ---- accepted forms ----

TEST_F(WriteWithImmTest, AnyNonZeroFlagsAreAccepted) {
  for (int flags : {1, 2, 3, 4, 0x100, -1}) {
    CapturedSendWr wr = PostAndCapture(remote(), 0, local(), 0, 8, flags);
    EXPECT_EQ(wr.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM) << "flags " << flags;
  }
}

// ---- the posted WR, field by field ----

struct WrCase {
  const char* name;
  int flags;
  unsigned int send_flags;
};

class WriteWithImmWrTest : public WriteWithImmTest,
                           public ::testing::WithParamInterface<WrCase> {};

TEST_P(WriteWithImmWrTest, NormalCaseWrFields) {
  CapturedSendWr c =
      PostAndCapture(remote(), 0x40, local(), 0x10, 100, GetParam().flags);
  EXPECT_EQ(c.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(c.wr.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  EXPECT_EQ(c.wr.next, nullptr);
  ASSERT_EQ(c.wr.num_sge, 1);
  ASSERT_EQ(c.sges.size(), 1u);
  EXPECT_EQ(c.sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 0x10);
  EXPECT_EQ(c.sges[0].length, 100u);
  EXPECT_EQ(c.sges[0].lkey, kLocalLkey);
  EXPECT_EQ(c.wr.wr.rdma.remote_addr, kRemoteAddr + 0x40);
  EXPECT_EQ(c.wr.wr.rdma.rkey, kRemoteRkey);
  EXPECT_EQ(c.wr.imm_data, htonl(kImm));
  EXPECT_EQ(c.wr.send_flags, GetParam().send_flags);
}

TEST_P(WriteWithImmWrTest, ZeroByteFormWrFields) {
  CapturedSendWr c =
      PostAndCapture(nullptr, 0, nullptr, 0, 0, GetParam().flags);
  EXPECT_EQ(c.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(c.wr.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  EXPECT_EQ(c.wr.next, nullptr);
  EXPECT_EQ(c.wr.sg_list, nullptr);
  EXPECT_EQ(c.wr.num_sge, 0);
  EXPECT_EQ(c.wr.wr.rdma.remote_addr, 0u);
  EXPECT_EQ(c.wr.wr.rdma.rkey, 0u);
  EXPECT_EQ(c.wr.imm_data, htonl(kImm));
  EXPECT_EQ(c.wr.send_flags, GetParam().send_flags);
}

TEST_P(WriteWithImmWrTest, ZeroLengthWithBothRegionsWrFields) {
  CapturedSendWr c =
      PostAndCapture(remote(), 8, local(), 4, 0, GetParam().flags);
  EXPECT_EQ(c.wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(c.wr.wr_id, reinterpret_cast<uint64_t>(kOpContext));
  ASSERT_EQ(c.wr.num_sge, 1);
  EXPECT_EQ(c.sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 4);
  EXPECT_EQ(c.sges[0].length, 0u);
  EXPECT_EQ(c.sges[0].lkey, kLocalLkey);
  EXPECT_EQ(c.wr.wr.rdma.remote_addr, kRemoteAddr + 8);
  EXPECT_EQ(c.wr.wr.rdma.rkey, kRemoteRkey);
  EXPECT_EQ(c.wr.imm_data, htonl(kImm));
  EXPECT_EQ(c.wr.send_flags, GetParam().send_flags);
}

// Every field the rpma layer does not set must be zero, so a provider never
// sees stale stack bytes (for example a stray IBV_SEND_INLINE or a chain).
TEST_P(WriteWithImmWrTest, AllOtherFieldsAreZero) {
  CapturedSendWr c =
      PostAndCapture(remote(), 0, local(), 0, 8, GetParam().flags);
  ibv_send_wr expected{};
  expected.wr_id = c.wr.wr_id;
  expected.sg_list = c.wr.sg_list;
  expected.num_sge = c.wr.num_sge;
  expected.opcode = c.wr.opcode;
  expected.send_flags = c.wr.send_flags;
  expected.imm_data = c.wr.imm_data;
  expected.wr.rdma.remote_addr = c.wr.wr.rdma.remote_addr;
  expected.wr.rdma.rkey = c.wr.wr.rdma.rkey;
  EXPECT_EQ(std::memcmp(&expected, &c.wr, sizeof(expected)), 0)
      << Describe(c.wr);
}

INSTANTIATE_TEST_SUITE_P(
    BothFlags, WriteWithImmWrTest,
    ::testing::Values(WrCase{"Always", RPMA_F_COMPLETION_ALWAYS,
                             IBV_SEND_SIGNALED},
                      WrCase{"OnError", RPMA_F_COMPLETION_ON_ERROR, 0}),
    [](const ::testing::TestParamInfo<WrCase>& info) {
      return std::string(info.param.name);
    });

TEST_F(WriteWithImmTest, MatcherReadsTheWr) {
  EXPECT_CALL(
      mock(),
      PostSend(qp(), Pointee(IsWriteWithImm(kImm, 64, kRemoteAddr + 128)), _))
      .WillOnce(::testing::Return(0));
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 128, local(), 0, 64,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            0);
}

// ---- provider failures ----

TEST_F(WriteWithImmTest, PositiveErrnoFromPostSendIsProviderAndLogged) {
  CapturedSendWr c{};
  EXPECT_CALL(mock(), PostSend(qp(), _, _)).WillOnce(CaptureSendWr(&c, ENOMEM));
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, local(), 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_PROVIDER);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("ibv_post_send"));
  EXPECT_THAT(log().back(), HasSubstr(std::strerror(ENOMEM)));
}

TEST_F(WriteWithImmTest, NegativeErrnoFromPostSendIsProviderAndLogged) {
  CapturedSendWr c{};
  EXPECT_CALL(mock(), PostSend(qp(), _, _))
      .WillOnce(CaptureSendWr(&c, -EINVAL));
  EXPECT_EQ(rpma_write_with_imm(conn(), remote(), 0, local(), 0, 8,
                                RPMA_F_COMPLETION_ALWAYS, kImm, kOpContext),
            RPMA_E_PROVIDER);
  ASSERT_FALSE(log().empty());
  EXPECT_THAT(log().back(), HasSubstr("-22"));
  EXPECT_THAT(log().back(), HasSubstr(std::strerror(EINVAL)));
}

// ---- the sibling operations share the rules ----

TEST_F(WriteWithImmTest, RpmaWriteBuildsAPlainRdmaWrite) {
  CapturedSendWr c{};
  EXPECT_CALL(mock(), PostSend(qp(), _, _)).WillOnce(CaptureSendWr(&c));
  EXPECT_EQ(rpma_write(conn(), remote(), 16, local(), 32, 48,
                       RPMA_F_COMPLETION_ALWAYS, kOpContext),
            0);
  EXPECT_EQ(c.wr.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(c.wr.imm_data, 0u);
  EXPECT_EQ(c.wr.wr.rdma.remote_addr, kRemoteAddr + 16);
  EXPECT_EQ(c.sges[0].addr, reinterpret_cast<uint64_t>(local_buffer()) + 32);
  EXPECT_EQ(c.wr.send_flags, static_cast<unsigned>(IBV_SEND_SIGNALED));
}

TEST_F(WriteWithImmTest, RpmaWriteHasTheSameArgumentRules) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(rpma_write(nullptr, remote(), 0, local(), 0, 8,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_write(conn(), remote(), 0, local(), 0, 8, 0, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_write(conn(), nullptr, 0, local(), 0, 8,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_write(conn(), remote(), 0, nullptr, 0, 8,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_write(conn(), nullptr, 1, nullptr, 0, 0,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, RpmaSendWithImmBuildsASendWithImm) {
  CapturedSendWr c{};
  EXPECT_CALL(mock(), PostSend(qp(), _, _)).WillOnce(CaptureSendWr(&c));
  EXPECT_EQ(rpma_send_with_imm(conn(), local(), 8, 24,
                               RPMA_F_COMPLETION_ON_ERROR, kImm, kOpContext),
            0);
  EXPECT_EQ(c.wr.opcode, IBV_WR_SEND_WITH_IMM);
  EXPECT_EQ(c.wr.imm_data, htonl(kImm));
  EXPECT_EQ(c.wr.send_flags, 0u);
  ASSERT_EQ(c.sges.size(), 1u);
  EXPECT_EQ(c.sges[0].length, 24u);
  EXPECT_EQ(c.wr.wr.rdma.remote_addr, 0u);
}

TEST_F(WriteWithImmTest, RpmaSendArgumentRules) {
  EXPECT_CALL(mock(), PostSend).Times(0);
  EXPECT_EQ(
      rpma_send(nullptr, local(), 0, 8, RPMA_F_COMPLETION_ALWAYS, nullptr),
      RPMA_E_INVAL);
  EXPECT_EQ(rpma_send(conn(), local(), 0, 8, 0, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_send(conn(), nullptr, 1, 0, RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_send(conn(), nullptr, 0, 1, RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_send_with_imm(conn(), nullptr, 0, 1, RPMA_F_COMPLETION_ALWAYS,
                               kImm, nullptr),
            RPMA_E_INVAL);
}

TEST_F(WriteWithImmTest, ZeroByteSendHasNoSge) {
  CapturedSendWr c{};
  EXPECT_CALL(mock(), PostSend(qp(), _, _)).WillOnce(CaptureSendWr(&c));
  EXPECT_EQ(
      rpma_send(conn(), nullptr, 0, 0, RPMA_F_COMPLETION_ALWAYS, kOpContext),
      0);
  EXPECT_EQ(c.wr.opcode, IBV_WR_SEND);
  EXPECT_EQ(c.wr.num_sge, 0);
  EXPECT_EQ(c.wr.sg_list, nullptr);
}

}  // namespace
}  // namespace rpma_harness
