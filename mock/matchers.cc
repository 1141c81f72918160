#include "mock/matchers.h"

#include <sstream>

namespace rpma_harness {

std::string WcStatusName(int status) {
  // ibv_wc_status_str() would need libibverbs at run time; the names are the
  // enum's own.
  switch (status) {
#define RPMA_HARNESS_NAME(x) \
  case x:                    \
    return #x;
    RPMA_HARNESS_NAME(IBV_WC_SUCCESS)
    RPMA_HARNESS_NAME(IBV_WC_LOC_LEN_ERR)
    RPMA_HARNESS_NAME(IBV_WC_LOC_QP_OP_ERR)
    RPMA_HARNESS_NAME(IBV_WC_LOC_EEC_OP_ERR)
    RPMA_HARNESS_NAME(IBV_WC_LOC_PROT_ERR)
    RPMA_HARNESS_NAME(IBV_WC_WR_FLUSH_ERR)
    RPMA_HARNESS_NAME(IBV_WC_MW_BIND_ERR)
    RPMA_HARNESS_NAME(IBV_WC_BAD_RESP_ERR)
    RPMA_HARNESS_NAME(IBV_WC_LOC_ACCESS_ERR)
    RPMA_HARNESS_NAME(IBV_WC_REM_INV_REQ_ERR)
    RPMA_HARNESS_NAME(IBV_WC_REM_ACCESS_ERR)
    RPMA_HARNESS_NAME(IBV_WC_REM_OP_ERR)
    RPMA_HARNESS_NAME(IBV_WC_RETRY_EXC_ERR)
    RPMA_HARNESS_NAME(IBV_WC_RNR_RETRY_EXC_ERR)
    RPMA_HARNESS_NAME(IBV_WC_LOC_RDD_VIOL_ERR)
    RPMA_HARNESS_NAME(IBV_WC_REM_INV_RD_REQ_ERR)
    RPMA_HARNESS_NAME(IBV_WC_REM_ABORT_ERR)
    RPMA_HARNESS_NAME(IBV_WC_INV_EECN_ERR)
    RPMA_HARNESS_NAME(IBV_WC_INV_EEC_STATE_ERR)
    RPMA_HARNESS_NAME(IBV_WC_FATAL_ERR)
    RPMA_HARNESS_NAME(IBV_WC_RESP_TIMEOUT_ERR)
    RPMA_HARNESS_NAME(IBV_WC_GENERAL_ERR)
    RPMA_HARNESS_NAME(IBV_WC_TM_ERR)
    RPMA_HARNESS_NAME(IBV_WC_TM_RNDV_INCOMPLETE)
  }
  return "IBV_WC_<" + std::to_string(status) + ">";
}

std::string WcOpcodeName(int opcode) {
  switch (opcode) {
    RPMA_HARNESS_NAME(IBV_WC_SEND)
    RPMA_HARNESS_NAME(IBV_WC_RDMA_WRITE)
    RPMA_HARNESS_NAME(IBV_WC_RDMA_READ)
    RPMA_HARNESS_NAME(IBV_WC_COMP_SWAP)
    RPMA_HARNESS_NAME(IBV_WC_FETCH_ADD)
    RPMA_HARNESS_NAME(IBV_WC_BIND_MW)
    RPMA_HARNESS_NAME(IBV_WC_LOCAL_INV)
    RPMA_HARNESS_NAME(IBV_WC_TSO)
    RPMA_HARNESS_NAME(IBV_WC_RECV)
    RPMA_HARNESS_NAME(IBV_WC_RECV_RDMA_WITH_IMM)
  }
  return "IBV_WC_<opcode " + std::to_string(opcode) + ">";
}

std::string WrOpcodeName(int opcode) {
  switch (opcode) {
    RPMA_HARNESS_NAME(IBV_WR_RDMA_WRITE)
    RPMA_HARNESS_NAME(IBV_WR_RDMA_WRITE_WITH_IMM)
    RPMA_HARNESS_NAME(IBV_WR_SEND)
    RPMA_HARNESS_NAME(IBV_WR_SEND_WITH_IMM)
    RPMA_HARNESS_NAME(IBV_WR_RDMA_READ)
    RPMA_HARNESS_NAME(IBV_WR_ATOMIC_CMP_AND_SWP)
    RPMA_HARNESS_NAME(IBV_WR_ATOMIC_FETCH_AND_ADD)
#undef RPMA_HARNESS_NAME
  }
  return "IBV_WR_<" + std::to_string(opcode) + ">";
}

std::string Describe(const ibv_send_wr& wr) {
  std::ostringstream out;
  out << "{opcode " << WrOpcodeName(wr.opcode) << ", wr_id 0x" << std::hex
      << wr.wr_id << ", send_flags 0x" << wr.send_flags << ", imm(host) 0x"
      << ntohl(wr.imm_data) << std::dec << ", num_sge " << wr.num_sge;
  for (int i = 0; wr.sg_list != nullptr && i < wr.num_sge; ++i) {
    out << ", sge[" << i << "] {addr 0x" << std::hex << wr.sg_list[i].addr
        << std::dec << ", length " << wr.sg_list[i].length << ", lkey 0x"
        << std::hex << wr.sg_list[i].lkey << std::dec << "}";
  }
  out << ", remote_addr 0x" << std::hex << wr.wr.rdma.remote_addr << ", rkey 0x"
      << wr.wr.rdma.rkey << std::dec << "}";
  return out.str();
}

std::string Describe(const ibv_wc& wc) {
  std::ostringstream out;
  out << "{status " << WcStatusName(wc.status) << ", opcode "
      << WcOpcodeName(wc.opcode) << ", wr_id 0x" << std::hex << wc.wr_id
      << std::dec << ", byte_len " << wc.byte_len << ", wc_flags 0x" << std::hex
      << wc.wc_flags << ", imm(host) 0x" << ntohl(wc.imm_data) << std::dec
      << ", qp_num " << wc.qp_num << "}";
  return out.str();
}

}  // namespace rpma_harness
