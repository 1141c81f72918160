#include "mock/matchers.h"

#include <sstream>

namespace rpma_harness {

std::string Describe(const ibv_send_wr& wr) {
  std::ostringstream out;
  out << "{opcode " << WrOpcodeName(PostedOpcode(wr)) << ", wr_id 0x" << std::hex
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
