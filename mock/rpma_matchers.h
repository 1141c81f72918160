// rpma_matchers.h: gMock matchers for what the librpma API hands back: the
// int every rpma_* call returns, and the ibv_wc rpma_cq_get_wc() fills in.
// Failure messages name the RPMA_E_* code and every field of the
// completion, so a failed expectation says what happened instead.
//
//   EXPECT_THAT(rpma_write_with_imm(conn, dst, 0, src, 0, 64,
//                                   RPMA_F_COMPLETION_ALWAYS, 0x1234, NULL),
//               IsRpmaOk());
//   EXPECT_THAT(rpma_conn_delete(&conn), IsRpmaError(RPMA_E_INVAL));
//   EXPECT_THAT(wc, IsSuccessWithImm(0x1234, 64));   // the server's CQE
//
//   Expected: is a successful write with imm 0x1234 of 64 bytes ...
//     Actual: {status REM_ACCESS_ERR, opcode RECV_RDMA_WITH_IMM, ...}
//
// The WR / WC matchers of the verbs layer are in mock/matchers.h.

#ifndef RPMA_HARNESS_MOCK_RPMA_MATCHERS_H_
#define RPMA_HARNESS_MOCK_RPMA_MATCHERS_H_

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "mock/matchers.h"  // Describe(const ibv_wc&)
#include "rpma/librpma_check.h"

namespace rpma_harness {

// "RPMA_E_PROVIDER (-100002: <rpma_err_2str text>)", or "0 (success)"; an
// unknown value prints as itself.
std::string DescribeRpmaResult(int ret);
// "0x1234" for immediate values.
std::string HexImm(uint64_t imm);

// The call returned 0.
MATCHER(IsRpmaOk, std::string(negation ? "is not" : "is") +
                      " 0 (an rpma_* call that succeeded)") {
  *result_listener << "returned " << DescribeRpmaResult(arg);
  return arg == 0;
}

// The call returned `code` (an RPMA_E_* value).
MATCHER_P(IsRpmaError, code,
          std::string(negation ? "is not" : "is") + " " +
              DescribeRpmaResult(code)) {
  *result_listener << "returned " << DescribeRpmaResult(arg);
  return arg == code;
}

// The receiver's completion of a write with immediate data: SUCCESS,
// IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM set, the immediate `imm`
// (host order; ibv_wc.imm_data is network order) and byte_len `len`, the
// length of the write (ibv_poll_cq(3): byte_len of a RECV_RDMA_WITH_IMM is
// the number of bytes the write moved).
MATCHER_P2(IsSuccessWithImm, imm, len,
           std::string(negation ? "is not" : "is") +
               " a successful write with imm " + HexImm(imm) + " of " +
               std::to_string(len) +
               " bytes (status SUCCESS, opcode RECV_RDMA_WITH_IMM, "
               "IBV_WC_WITH_IMM)") {
  const ibv_wc& wc = arg;
  *result_listener << Describe(wc);
  return wc.status == IBV_WC_SUCCESS &&
         wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
         (wc.wc_flags & IBV_WC_WITH_IMM) != 0 &&
         wc.imm_data == htonl(static_cast<uint32_t>(imm)) &&
         wc.byte_len == static_cast<uint32_t>(len);
}

// A completion (either side) with `status` whose wr_id is the op_context
// the rpma call was given (librpma passes op_context as wr_id).
MATCHER_P2(IsCompletionOf, op_context, status,
           std::string(negation ? "is not" : "is") + " a completion of " +
               "op_context " + HexImm(reinterpret_cast<uintptr_t>(op_context)) +
               " with status " + WcStatusName(status)) {
  const ibv_wc& wc = arg;
  *result_listener << Describe(wc);
  return wc.status == status &&
         wc.wr_id ==
             static_cast<uint64_t>(reinterpret_cast<uintptr_t>(op_context));
}

}  // namespace rpma_harness

// gtest prints an ibv_wc field by field (found by ADL: ibv_wc is a global
// type) instead of as 48 bytes of hex.
inline void PrintTo(const ibv_wc& wc, std::ostream* os) {
  *os << rpma_harness::Describe(wc);
}

#endif  // RPMA_HARNESS_MOCK_RPMA_MATCHERS_H_
