// The MR descriptor wire form and the usage -> access table.

#include "rpma/mr_descriptor.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <array>
#include <cstring>

#include "rpma/librpma.h"
#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::Return;
using testing_support::MockConnectionTest;

const std::array<uint8_t, 21> kVector = {
    0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x00, 0x0f, 0x0e, 0x0d,
    0x0c, 0x0b, 0x0a, 0x09, 0x08, 0x13, 0x12, 0x11, 0x10, 0x21};
constexpr MrDescriptor kVectorDescriptor{
    0x0001020304050607ull, 0x08090a0b0c0d0e0full, 0x10111213u, 0x21};

TEST(MrDescriptorTest, IsTwentyOneBytes) { EXPECT_EQ(kMrDescriptorSize, 21u); }

TEST(MrDescriptorTest, EncodesTheByteExactVectorAtEveryAlignment) {
  for (size_t align = 0; align < 16; ++align) {
    uint8_t buffer[64];
    std::memset(buffer, 0xee, sizeof(buffer));
    EncodeMrDescriptor(kVectorDescriptor, buffer + align);
    EXPECT_EQ(std::memcmp(buffer + align, kVector.data(), kVector.size()), 0)
        << "alignment " << align;
    // Nothing outside the 21 bytes is touched.
    for (size_t i = 0; i < sizeof(buffer); ++i) {
      if (i < align || i >= align + 21) {
        ASSERT_EQ(buffer[i], 0xee) << i;
      }
    }
  }
}

TEST(MrDescriptorTest, DecodesTheByteExactVectorAtEveryAlignment) {
  for (size_t align = 0; align < 16; ++align) {
    uint8_t buffer[64] = {};
    std::memcpy(buffer + align, kVector.data(), kVector.size());
    MrDescriptor d{};
    ASSERT_TRUE(DecodeMrDescriptor(buffer + align, 21, &d)) << align;
    EXPECT_EQ(d.raddr, kVectorDescriptor.raddr);
    EXPECT_EQ(d.size, kVectorDescriptor.size);
    EXPECT_EQ(d.rkey, kVectorDescriptor.rkey);
    EXPECT_EQ(d.usage, kVectorDescriptor.usage);
  }
}

TEST(MrDescriptorTest, DecodeRejectsAShortDescriptor) {
  MrDescriptor d{};
  for (size_t size = 0; size < 21; ++size) {
    EXPECT_FALSE(DecodeMrDescriptor(kVector.data(), size, &d)) << size;
  }
}

TEST(MrDescriptorTest, DecodeRejectsUsageZero) {
  auto bytes = kVector;
  bytes[20] = 0;
  MrDescriptor d{};
  EXPECT_FALSE(DecodeMrDescriptor(bytes.data(), bytes.size(), &d));
}

TEST(MrDescriptorTest, RemoteFromDescriptorRejectsShortSizeAndUsageZero) {
  rpma_mr_remote* mr = nullptr;
  EXPECT_EQ(rpma_mr_remote_from_descriptor(kVector.data(), 20, &mr),
            RPMA_E_INVAL);
  auto bytes = kVector;
  bytes[20] = 0;
  EXPECT_EQ(rpma_mr_remote_from_descriptor(bytes.data(), 21, &mr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_remote_from_descriptor(nullptr, 21, &mr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_remote_from_descriptor(kVector.data(), 21, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(mr, nullptr);
}

TEST(MrDescriptorTest, RemoteFromDescriptorReadsSizeAndFlushType) {
  rpma_mr_remote* mr = nullptr;
  ASSERT_EQ(rpma_mr_remote_from_descriptor(kVector.data(), 21, &mr), 0);
  size_t size = 0;
  EXPECT_EQ(rpma_mr_remote_get_size(mr, &size), 0);
  EXPECT_EQ(size, kVectorDescriptor.size);
  int flush_type = -1;
  EXPECT_EQ(rpma_mr_remote_get_flush_type(mr, &flush_type), 0);
  // usage 0x21 = FLUSH_TYPE_PERSISTENT | READ_SRC
  EXPECT_EQ(flush_type, RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
  EXPECT_EQ(rpma_mr_remote_get_size(mr, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_remote_get_flush_type(nullptr, &flush_type), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_remote_delete(&mr), 0);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(rpma_mr_remote_delete(nullptr), RPMA_E_INVAL);
}

struct UsageCase {
  int usage;
  int access;
};

class UsageToAccessTest : public ::testing::TestWithParam<UsageCase> {};

TEST_P(UsageToAccessTest, MapsUsageToAccessFlags) {
  EXPECT_EQ(UsageToAccess(GetParam().usage), GetParam().access)
      << "usage 0x" << std::hex << GetParam().usage;
}

INSTANTIATE_TEST_SUITE_P(
    Table, UsageToAccessTest,
    ::testing::Values(
        UsageCase{RPMA_MR_USAGE_READ_SRC, IBV_ACCESS_REMOTE_READ},
        UsageCase{RPMA_MR_USAGE_READ_DST, IBV_ACCESS_LOCAL_WRITE},
        UsageCase{RPMA_MR_USAGE_WRITE_SRC, IBV_ACCESS_LOCAL_WRITE},
        UsageCase{RPMA_MR_USAGE_WRITE_DST,
                  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE},
        UsageCase{RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, IBV_ACCESS_REMOTE_READ},
        UsageCase{RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, IBV_ACCESS_REMOTE_READ},
        UsageCase{RPMA_MR_USAGE_SEND, 0},
        UsageCase{RPMA_MR_USAGE_RECV, IBV_ACCESS_LOCAL_WRITE},
        UsageCase{RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC,
                  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE |
                      IBV_ACCESS_REMOTE_READ}));

// Registration through the rpma API: the descriptor of a local region decodes
// back to the same region.
class MrRegTest : public MockConnectionTest {};

TEST_F(MrRegTest, DescriptorRoundTrip) {
  size_t size = 0;
  ASSERT_EQ(rpma_mr_get_descriptor_size(local(), &size), 0);
  ASSERT_EQ(size, 21u);
  uint8_t wire[3 + 21];
  ASSERT_EQ(rpma_mr_get_descriptor(local(), wire + 3), 0);  // unaligned
  rpma_mr_remote* remote_mr = nullptr;
  ASSERT_EQ(rpma_mr_remote_from_descriptor(wire + 3, size, &remote_mr), 0);
  size_t remote_size = 0;
  EXPECT_EQ(rpma_mr_remote_get_size(remote_mr, &remote_size), 0);
  EXPECT_EQ(remote_size, kLocalSize);
  MrDescriptor d{};
  ASSERT_TRUE(DecodeMrDescriptor(wire + 3, size, &d));
  EXPECT_EQ(d.raddr, reinterpret_cast<uint64_t>(local_buffer()));
  EXPECT_EQ(d.rkey, kLocalLkey + 1);
  EXPECT_EQ(d.usage, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_RECV);
  rpma_mr_remote_delete(&remote_mr);
}

TEST_F(MrRegTest, RegArgumentRules) {
  rpma_mr_local* mr = nullptr;
  uint8_t buf[8];
  EXPECT_CALL(mock(), RegMr).Times(0);
  EXPECT_EQ(rpma_mr_reg(nullptr, buf, 8, RPMA_MR_USAGE_SEND, &mr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_reg(peer(), nullptr, 8, RPMA_MR_USAGE_SEND, &mr),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_reg(peer(), buf, 0, RPMA_MR_USAGE_SEND, &mr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_reg(peer(), buf, 8, 0, &mr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_reg(peer(), buf, 8, RPMA_MR_USAGE_SEND, nullptr),
            RPMA_E_INVAL);
  EXPECT_EQ(mr, nullptr);
}

// librpma src/mr.c: `usage & ~USAGE_ALL_ALLOWED` (the eight RPMA_MR_USAGE_*
// bits) is RPMA_E_INVAL, before anything reaches the NIC.
TEST_F(MrRegTest, RegRejectsUnknownUsageBits) {
  rpma_mr_local* mr = nullptr;
  uint8_t buf[8];
  EXPECT_CALL(mock(), RegMr).Times(0);
  for (int usage : {0x100, -1, RPMA_MR_USAGE_SEND | 0x100, 1 << 30,
                    static_cast<int>(0x80000000u)}) {
    EXPECT_EQ(rpma_mr_reg(peer(), buf, 8, usage, &mr), RPMA_E_INVAL) << usage;
    EXPECT_EQ(mr, nullptr);
  }
}

TEST_F(MrRegTest, RegAcceptsEveryKnownUsageBitTogether) {
  uint8_t buf[8];
  ibv_mr fake_mr{};
  fake_mr.addr = buf;
  fake_mr.length = 8;
  EXPECT_CALL(mock(), RegMr(_, buf, 8, _)).WillOnce(Return(&fake_mr));
  EXPECT_CALL(mock(), DeregMr(&fake_mr)).WillOnce(Return(0));
  rpma_mr_local* mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(peer(), buf, 8, 0xff, &mr), 0);
  EXPECT_EQ(rpma_mr_dereg(&mr), 0);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

TEST_F(MrRegTest, RegPassesTheUsageAccessFlags) {
  uint8_t buf[8];
  EXPECT_CALL(mock(), RegMr(_, buf, 8,
                            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE))
      .WillOnce(Return(nullptr));
  rpma_mr_local* mr = nullptr;
  EXPECT_EQ(rpma_mr_reg(peer(), buf, 8, RPMA_MR_USAGE_WRITE_DST, &mr),
            RPMA_E_PROVIDER);
  EXPECT_EQ(mr, nullptr);
}

TEST_F(MrRegTest, GettersCheckArguments) {
  void* ptr = nullptr;
  size_t size = 0;
  EXPECT_EQ(rpma_mr_get_ptr(local(), &ptr), 0);
  EXPECT_EQ(ptr, local_buffer());
  EXPECT_EQ(rpma_mr_get_size(local(), &size), 0);
  EXPECT_EQ(size, kLocalSize);
  EXPECT_EQ(rpma_mr_get_ptr(nullptr, &ptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_get_ptr(local(), nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_get_size(nullptr, &size), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_get_descriptor(nullptr, &size), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_get_descriptor(local(), nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_get_descriptor_size(local(), nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_mr_dereg(nullptr), RPMA_E_INVAL);
}

}  // namespace
}  // namespace rpma_harness
