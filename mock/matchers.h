// matchers.h: gMock matchers for the rdma-core structs that cross the
// VerbsBackend seam, with failure messages that name the fields that differ.
//
//   EXPECT_CALL(mock, PostSend(_, Pointee(IsWriteWithImm(0x12345678, 64,
//                                                         raddr)), _));
//   EXPECT_THAT(wc, IsRecvRdmaWithImm(0x12345678));
//   EXPECT_THAT(wc, HasWcStatus(IBV_WC_REM_ACCESS_ERR));
//
// Immediate values are given in host order; the matchers compare against
// htonl() of them, since ibv_send_wr.imm_data and ibv_wc.imm_data carry
// network order.

#ifndef RPMA_HARNESS_MOCK_MATCHERS_H_
#define RPMA_HARNESS_MOCK_MATCHERS_H_

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "nic/fake_nic.h"  // WcStatusName() and the other enum names
#include "verbs_backend/verbs_backend.h"  // PostedOpcode()

namespace rpma_harness {

// One line describing a WR / WC field by field.
std::string Describe(const ibv_send_wr& wr);
std::string Describe(const ibv_wc& wc);

// An RDMA_WRITE_WITH_IMM WR of exactly one SGE of `len` bytes to
// `remote_addr`, carrying htonl(imm).
MATCHER_P3(IsWriteWithImm, imm, len, remote_addr,
           std::string(negation ? "is not" : "is") +
               " an RDMA_WRITE_WITH_IMM of imm " + std::to_string(imm) +
               ", len " + std::to_string(len) + ", remote_addr " +
               std::to_string(remote_addr)) {
  const ibv_send_wr& wr = arg;
  *result_listener << Describe(wr);
  return PostedOpcode(wr) == IBV_WR_RDMA_WRITE_WITH_IMM &&
         wr.imm_data == htonl(static_cast<uint32_t>(imm)) && wr.num_sge == 1 &&
         wr.sg_list != nullptr &&
         wr.sg_list[0].length == static_cast<uint32_t>(len) &&
         wr.wr.rdma.remote_addr == static_cast<uint64_t>(remote_addr);
}

// A completion of a write with immediate data at the responder, carrying imm.
MATCHER_P(IsRecvRdmaWithImm, imm,
          std::string(negation ? "is not" : "is") +
              " a successful IBV_WC_RECV_RDMA_WITH_IMM with imm " +
              std::to_string(imm)) {
  const ibv_wc& wc = arg;
  *result_listener << Describe(wc);
  return wc.status == IBV_WC_SUCCESS &&
         wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
         (wc.wc_flags & IBV_WC_WITH_IMM) &&
         wc.imm_data == htonl(static_cast<uint32_t>(imm));
}

MATCHER_P(HasWcStatus, status,
          std::string(negation ? "does not have" : "has") + " status " +
              std::string(WcStatusName(status))) {
  *result_listener << Describe(static_cast<const ibv_wc&>(arg));
  return arg.status == status;
}

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_MOCK_MATCHERS_H_
