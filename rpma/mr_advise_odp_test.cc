// rpma_mr_advise(3), rpma_utils_ibv_context_is_odp_capable(3) and the ODP
// path of rpma_mr_reg(3): what reaches the backend, and how provider
// answers map to RPMA_E_* codes (librpma 1.3 mr.c, utils.c, peer.c).

#include <errno.h>

#include <cstring>

#include "mock/mock_connection.h"

namespace rpma_harness {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::Return;
using ::testing::SaveArgPointee;
using testing_support::MockConnectionTest;

class MrAdviseTest : public MockConnectionTest {};

TEST_F(MrAdviseTest, AdviseNullMrIsInval) {
  EXPECT_CALL(mock(), AdviseMr).Times(0);
  EXPECT_EQ(rpma_mr_advise(nullptr, 0, 8, IBV_ADVISE_MR_ADVICE_PREFETCH, 0),
            RPMA_E_INVAL);
}

// librpma mr.c: one SGE over [addr + offset, +len) with the MR's lkey, on
// the MR's PD; advice and flags as given.
TEST_F(MrAdviseTest, AdvisePassesOneSgeOverTheRange) {
  ibv_sge sge{};
  EXPECT_CALL(mock(), AdviseMr(pd(), IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                               IBV_ADVISE_MR_FLAG_FLUSH, _, 1u))
      .WillOnce(DoAll(SaveArgPointee<3>(&sge), Return(0)));
  EXPECT_EQ(
      rpma_mr_advise(local(), 64, 128, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                     IBV_ADVISE_MR_FLAG_FLUSH),
      0);
  EXPECT_EQ(sge.addr, reinterpret_cast<uint64_t>(local_buffer()) + 64);
  EXPECT_EQ(sge.length, 128u);
  EXPECT_EQ(sge.lkey, kLocalLkey);
}

struct ErrnoCase {
  int err;
  int expected;
};

class MrAdviseErrnoTest : public MrAdviseTest,
                          public ::testing::WithParamInterface<ErrnoCase> {};

// rpma_mr_advise(3): NOSUPP when the system cannot (EOPNOTSUPP, what a NIC
// without ODP answers), INVAL for a bad range / advice / flags (EINVAL,
// EFAULT), PROVIDER otherwise.
TEST_P(MrAdviseErrnoTest, ProviderErrnoMapsToTheManPagesCode) {
  EXPECT_CALL(mock(), AdviseMr(_, _, _, _, _)).WillOnce(Return(GetParam().err));
  EXPECT_EQ(rpma_mr_advise(local(), 0, 8, IBV_ADVISE_MR_ADVICE_PREFETCH, 0),
            GetParam().expected);
  EXPECT_FALSE(log().empty());
}

INSTANTIATE_TEST_SUITE_P(EveryClass, MrAdviseErrnoTest,
                         ::testing::Values(ErrnoCase{EOPNOTSUPP, RPMA_E_NOSUPP},
                                           ErrnoCase{-EOPNOTSUPP,
                                                     RPMA_E_NOSUPP},
                                           ErrnoCase{EINVAL, RPMA_E_INVAL},
                                           ErrnoCase{EFAULT, RPMA_E_INVAL},
                                           ErrnoCase{EIO, RPMA_E_PROVIDER},
                                           ErrnoCase{ENOMEM, RPMA_E_PROVIDER}));

// ---- rpma_utils_ibv_context_is_odp_capable ----

TEST_F(MrAdviseTest, OdpCapableArgumentRules) {
  int capable = 7;
  ibv_context ctx{};
  EXPECT_EQ(rpma_utils_ibv_context_is_odp_capable(nullptr, &capable),
            RPMA_E_INVAL);
  EXPECT_EQ(rpma_utils_ibv_context_is_odp_capable(&ctx, nullptr), RPMA_E_INVAL);
  EXPECT_EQ(capable, 7);
}

TEST_F(MrAdviseTest, OdpQueryFailureIsProvider) {
  ibv_context* ctx = context();
  EXPECT_CALL(mock(), QueryDeviceEx(ctx, _)).WillOnce(Return(EIO));
  int capable = 7;
  EXPECT_EQ(rpma_utils_ibv_context_is_odp_capable(ctx, &capable),
            RPMA_E_PROVIDER);
  EXPECT_EQ(capable, 7);
}

struct OdpCase {
  uint64_t general;
  uint32_t rc;
  int capable;
};

class OdpCapsTest : public MrAdviseTest,
                    public ::testing::WithParamInterface<OdpCase> {};

// librpma utils.c: ODP in general_caps, and RC ODP for both WRITE and READ.
TEST_P(OdpCapsTest, CapableOnlyWithGeneralAndRcWriteAndRead) {
  ibv_context* ctx = context();
  EXPECT_CALL(mock(), QueryDeviceEx(ctx, _))
      .WillOnce([](ibv_context*, ibv_device_attr_ex* attr) {
        attr->odp_caps.general_caps = GetParam().general;
        attr->odp_caps.per_transport_caps.rc_odp_caps = GetParam().rc;
        return 0;
      });
  int capable = 7;
  ASSERT_EQ(rpma_utils_ibv_context_is_odp_capable(ctx, &capable), 0);
  EXPECT_EQ(capable, GetParam().capable);
}

INSTANTIATE_TEST_SUITE_P(
    Combinations, OdpCapsTest,
    ::testing::Values(
        OdpCase{0, 0, 0}, OdpCase{IBV_ODP_SUPPORT, 0, 0},
        OdpCase{IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_WRITE, 0},
        OdpCase{IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_READ, 0},
        OdpCase{0, IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ, 0},
        OdpCase{IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ,
                1}));

// ---- rpma_mr_reg and ODP ----

TEST_F(MrAdviseTest, RegWithAnUnknownUsageBitIsInval) {
  rpma_mr_local* mr = nullptr;
  EXPECT_CALL(mock(), RegMr).Times(0);
  EXPECT_EQ(
      rpma_mr_reg(peer(), local_buffer(), 64, RPMA_MR_USAGE_RECV | 0x100, &mr),
      RPMA_E_INVAL);
  EXPECT_EQ(mr, nullptr);
}

// librpma peer.c rpma_peer_setup_mr_reg: EOPNOTSUPP from ibv_reg_mr is
// retried with IBV_ACCESS_ON_DEMAND when the device has ODP ...
TEST_F(MrAdviseTest, RegRefusedWithEopnotsuppRetriesOnDemandWhenOdpCapable) {
  ibv_mr odp_mr{};
  EXPECT_CALL(mock(), RegMr(_, _, 64, IBV_ACCESS_LOCAL_WRITE))
      .WillOnce([](ibv_pd*, void*, size_t, int) {
        errno = EOPNOTSUPP;
        return nullptr;
      });
  EXPECT_CALL(mock(), QueryDeviceEx(_, _))
      .WillOnce([](ibv_context*, ibv_device_attr_ex* attr) {
        attr->odp_caps.general_caps = IBV_ODP_SUPPORT;
        attr->odp_caps.per_transport_caps.rc_odp_caps =
            IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
        return 0;
      });
  EXPECT_CALL(mock(),
              RegMr(_, _, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND))
      .WillOnce(Return(&odp_mr));
  rpma_mr_local* mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(peer(), local_buffer(), 64, RPMA_MR_USAGE_RECV, &mr),
            0);
  EXPECT_CALL(mock(), DeregMr(&odp_mr)).WillOnce(Return(0));
  EXPECT_EQ(rpma_mr_dereg(&mr), 0);
  ::testing::Mock::VerifyAndClearExpectations(&mock());
}

// ... and is RPMA_E_PROVIDER without ODP (the fake's and rxe's case).
TEST_F(MrAdviseTest, RegRefusedWithEopnotsuppWithoutOdpIsProvider) {
  EXPECT_CALL(mock(), RegMr(_, _, 64, _))
      .WillOnce([](ibv_pd*, void*, size_t, int) {
        errno = EOPNOTSUPP;
        return nullptr;
      });
  EXPECT_CALL(mock(), QueryDeviceEx(_, _)).WillOnce(Return(0));
  rpma_mr_local* mr = nullptr;
  EXPECT_EQ(rpma_mr_reg(peer(), local_buffer(), 64, RPMA_MR_USAGE_RECV, &mr),
            RPMA_E_PROVIDER);
  EXPECT_EQ(mr, nullptr);
}

}  // namespace
}  // namespace rpma_harness
