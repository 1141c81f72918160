// fake_nic_taps.cc: the read-only taps the usage checker sets on the fake
// (check/checking_backend.h). They observe; they never change what the NIC
// does, and cost one test of an empty std::function when unset.
//
//   nic.SetSourceReadTap([](const FakeNic::SourceRead& r) { ... });

#include <utility>

#include "nic/fake_nic.h"
#include "nic/fake_nic_internal.h"

namespace rpma_harness {

void FakeNic::SetSourceReadTap(std::function<void(const SourceRead&)> tap) {
  std::lock_guard<std::mutex> lock(mu_);
  source_read_tap_ = std::move(tap);
}

void FakeNic::TapSourceReadSlow(const Qp* qp, const SendWqe& wqe,
                                uint64_t offset, uint64_t length,
                                uint32_t mtu) {
  if (wqe.is_inline || wqe.sges.empty() || length == 0) return;
  SourceRead read;
  read.qp_num = qp->base.qp_num;
  read.wr_id = wqe.wr_id;
  read.opcode = wqe.opcode;
  read.first_addr = wqe.sges.front().addr;
  read.total_length = wqe.total_length();
  read.offset = offset;
  read.length = length;
  read.mtu = mtu;
  source_read_tap_(read);
}

}  // namespace rpma_harness
