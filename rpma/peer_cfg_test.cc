// Peer configuration objects and their descriptor (rpma_peer_cfg_*(3)) and
// applying the remote side's to a connection
// (rpma_conn_apply_remote_peer_cfg(3)).

#include <gtest/gtest.h>
#include <librpma.h>

#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using testing_support::MockConnectionTest;

TEST(PeerCfgTest, NewAndDeleteArgumentRules) {
  EXPECT_EQ(rpma_peer_cfg_new(nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_delete(nullptr), RPMA_E_INVAL);
  rpma_peer_cfg* cfg = nullptr;
  EXPECT_EQ(rpma_peer_cfg_delete(&cfg), 0);  // NULL object: nothing to do
  ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
  ASSERT_NE(cfg, nullptr);
  EXPECT_EQ(rpma_peer_cfg_delete(&cfg), 0);
  EXPECT_EQ(cfg, nullptr);
}

TEST(PeerCfgTest, DirectWriteToPmemDefaultsToFalseAndRoundTrips) {
  rpma_peer_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
  bool supported = true;
  ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(cfg, &supported), 0);
  EXPECT_FALSE(supported);
  ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(cfg, true), 0);
  ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(cfg, &supported), 0);
  EXPECT_TRUE(supported);
  rpma_peer_cfg_delete(&cfg);
}

TEST(PeerCfgTest, AccessorArgumentRules) {
  rpma_peer_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
  bool supported;
  uint8_t desc[4];
  size_t size = 77;
  EXPECT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(nullptr, true),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(nullptr, &supported),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_get_descriptor(nullptr, desc), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_get_descriptor(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_get_descriptor_size(nullptr, &size), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_get_descriptor_size(cfg, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(size, 77u);
  rpma_peer_cfg_delete(&cfg);
}

TEST(PeerCfgTest, DescriptorIsOneByteAndRoundTrips) {
  for (bool value : {false, true}) {
    rpma_peer_cfg* cfg = nullptr;
    ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
    ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(cfg, value), 0);
    size_t size = 0;
    ASSERT_EQ(rpma_peer_cfg_get_descriptor_size(cfg, &size), 0);
    EXPECT_EQ(size, 1u);
    uint8_t desc[2] = {0xee, 0xee};
    ASSERT_EQ(rpma_peer_cfg_get_descriptor(cfg, desc), 0);
    EXPECT_EQ(desc[0], value ? 1 : 0);  // librpma's wire format
    EXPECT_EQ(desc[1], 0xee);           // nothing past the descriptor
    rpma_peer_cfg* decoded = nullptr;
    ASSERT_EQ(rpma_peer_cfg_from_descriptor(desc, size, &decoded), 0);
    bool supported = !value;
    ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(decoded, &supported), 0);
    EXPECT_EQ(supported, value);
    rpma_peer_cfg_delete(&decoded);
    rpma_peer_cfg_delete(&cfg);
  }
}

TEST(PeerCfgTest, FromDescriptorArgumentRules) {
  uint8_t desc = 1;
  rpma_peer_cfg* cfg = nullptr;
  EXPECT_EQ(rpma_peer_cfg_from_descriptor(nullptr, 1, &cfg), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_from_descriptor(&desc, 1, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(rpma_peer_cfg_from_descriptor(&desc, 0, &cfg), RPMA_E_INVAL);
  EXPECT_EQ(cfg, nullptr);
}

TEST(PeerCfgTest, AnyNonZeroDescriptorByteMeansSupported) {
  uint8_t desc = 0x80;
  rpma_peer_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_peer_cfg_from_descriptor(&desc, 1, &cfg), 0);
  bool supported = false;
  ASSERT_EQ(rpma_peer_cfg_get_direct_write_to_pmem(cfg, &supported), 0);
  EXPECT_TRUE(supported);
  rpma_peer_cfg_delete(&cfg);
}

class ApplyRemotePeerCfgTest : public MockConnectionTest {};

TEST_F(ApplyRemotePeerCfgTest, ArgumentRules) {
  rpma_peer_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
  EXPECT_EQ(rpma_conn_apply_remote_peer_cfg(nullptr, cfg), RPMA_E_INVAL);
  EXPECT_EQ(rpma_conn_apply_remote_peer_cfg(conn(), nullptr), RPMA_E_INVAL);
  rpma_peer_cfg_delete(&cfg);
}

// The applied configuration is what rpma_flush(RPMA_FLUSH_TYPE_PERSISTENT)
// consults (rpma_flush(3)); flush_test.cc covers the flush side.
TEST_F(ApplyRemotePeerCfgTest,
       ApplyingDirectWriteToPmemEnablesPersistentFlush) {
  rpma_mr_remote* dst = nullptr;
  uint8_t desc[21] = {};
  desc[20] = RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT | RPMA_MR_USAGE_WRITE_DST;
  desc[16] = 1;  // rkey 1
  desc[8] = 64;  // 64 bytes
  ASSERT_EQ(rpma_mr_remote_from_descriptor(desc, sizeof(desc), &dst), 0);
  EXPECT_EQ(rpma_flush(conn(), dst, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_NOSUPP);
  rpma_peer_cfg* cfg = nullptr;
  ASSERT_EQ(rpma_peer_cfg_new(&cfg), 0);
  ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(cfg, true), 0);
  ASSERT_EQ(rpma_conn_apply_remote_peer_cfg(conn(), cfg), 0);
  EXPECT_CALL(mock(), PostSend(qp(), ::testing::_, ::testing::_))
      .WillOnce(::testing::Return(0));
  EXPECT_EQ(rpma_flush(conn(), dst, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            0);
  // Applying one without it turns it off again.
  ASSERT_EQ(rpma_peer_cfg_set_direct_write_to_pmem(cfg, false), 0);
  ASSERT_EQ(rpma_conn_apply_remote_peer_cfg(conn(), cfg), 0);
  EXPECT_EQ(rpma_flush(conn(), dst, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            RPMA_E_NOSUPP);
  rpma_peer_cfg_delete(&cfg);
  rpma_mr_remote_delete(&dst);
}

}  // namespace
}  // namespace rpma_harness
