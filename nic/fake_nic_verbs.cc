// fake_nic_verbs.cc: verbs without rdma_cm, as a program that calls
// libibverbs directly sees them (the drop-in libibverbs.so.1, issue 22):
// the device list, the port and its GID table, and QPs made with
// ibv_create_qp(3) that the program moves through ibv_modify_qp(3) itself.
// A QP's peer is the QP its RTR names (dest_qp_num; ModifyQpLocked in
// fake_nic_qp_state.cc calls LinkVerbsQp).
//
// Across processes (RPMA_HARNESS_FABRIC): such a program's NIC takes a node
// number n of the fabric (Fabric::ClaimNode) and numbers its verbs QPs
// n << 16 | k, so that a QP number says which process owns it, as a LID or
// GID says which host does on a real fabric; on an InfiniBand port the
// LID is n. A QP at RTR whose peer is another node's dials that node and
// sends a BindFrame; the link then carries this QP's requests and their
// answers, and the far NIC answers them with the same responder
// (fake_nic_remote.cc RespondToRemote). Each QP of a pair dials its own
// link.

#include <arpa/inet.h>
#include <errno.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "nic/fake_nic.h"
#include "nic/fake_nic_fabric.h"
#include "nic/fake_nic_internal.h"

namespace rpma_harness {

namespace {

// A device's node GUID: an EUI-64 made from the locally administered MAC
// 02:00:00:00:00:NN (NN = 1 + the device's index), the way rxe makes its
// GUID from its netdev's MAC (rxe.c rxe_init_device_param,
// addrconf_addr_eui48). Stable across runs and processes.
uint64_t GuidOfIndex(size_t index) {
  const uint8_t mac[6] = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(index + 1)};
  const uint8_t eui[8] = {static_cast<uint8_t>(mac[0] ^ 0x02),
                          mac[1],
                          mac[2],
                          0xff,
                          0xfe,
                          mac[3],
                          mac[4],
                          mac[5]};
  uint64_t guid = 0;
  memcpy(&guid, eui, sizeof(guid));  // network byte order, as ibv_devinfo
  return guid;                       // expects (__be64)
}

}  // namespace

int FakeNic::ListDevices(std::vector<ibv_context*>* contexts) {
  if (contexts == nullptr) return EINVAL;
  std::lock_guard<std::mutex> lock(mu_);
  contexts->clear();
  for (auto& device : devices_) contexts->push_back(device->context.context());
  return 0;
}

uint64_t FakeNic::DeviceGuid(const Device* device) const {
  return GuidOfIndex(DeviceIndex(device));
}

// The GID table's length (ibv_query_port gid_tbl_len): rxe_param.h's 1024
// on RoCE, one entry (the port GID) on InfiniBand.
uint32_t FakeNic::GidTableLength() const {
  return config_.caps->link_layer == IBV_LINK_LAYER_ETHERNET ? 1024 : 1;
}

// ibv_query_port(3). The values are rxe's where rxe fixes them
// (rxe_param.h rxe_port_param: max_msg_sz 2^31, pkey_tbl_len 1,
// gid_tbl_len 1024 on RoCE; width 1X; state ACTIVE, phys_state LINK_UP);
// an InfiniBand port has LID 1 + the device's index and the SM at LID 1.
int FakeNic::QueryPort(ibv_context* ctx, uint8_t port_num,
                       ibv_port_attr* attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  if (device == nullptr || attr == nullptr) return EINVAL;
  // One port, numbered 1 (ibv_query_port(3); ib_uverbs: EINVAL otherwise).
  if (port_num != 1) return EINVAL;
  const FakeDeviceCaps& caps = *config_.caps;
  memset(attr, 0, sizeof(*attr));
  attr->state = device->up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = caps.active_mtu;
  attr->link_layer = caps.link_layer;
  attr->max_msg_sz = 1u << 31;
  attr->pkey_tbl_len = 1;
  attr->bad_pkey_cntr = 0;
  attr->qkey_viol_cntr = 0;
  attr->active_width = 1;  // IB_WIDTH_1X
  attr->active_speed = 1;  // IB_SPEED_SDR (rxe reports what its netdev does)
  attr->phys_state = device->up ? 5 : 3;  // LINK_UP / DISABLED
  attr->max_vl_num = 1;                   // rxe_param.h RXE_PORT_MAX_VL_NUM
  if (caps.link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr->gid_tbl_len = static_cast<int>(GidTableLength());
    attr->port_cap_flags = IBV_PORT_CM_SUP;
  } else {
    attr->gid_tbl_len = static_cast<int>(GidTableLength());
    attr->lid = LidOf(device);
    attr->sm_lid = 1;
    attr->lmc = 0;
    attr->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_SM;
  }
  return 0;
}

// On a fabric the node number (claimed here if not yet), else 1 + the
// device's index.
uint16_t FakeNic::LidOf(const Device* device) {
  if (fabric_ != nullptr && ClaimFabricNode()) {
    return static_cast<uint16_t>(fabric_node_);
  }
  return static_cast<uint16_t>(1 + DeviceIndex(device));
}

bool FakeNic::ClaimFabricNode() {
  if (fabric_node_ != 0) return true;
  if (fabric_ == nullptr) return false;
  const int err = fabric_->ClaimNode(&fabric_node_);
  if (err != 0) {
    fprintf(stderr,
            "fake_nic: no node number on the fabric at %s (%s): QPs made "
            "with ibv_create_qp reach only this process's QPs\n",
            config_.fabric_dir.c_str(), strerror(err));
    fabric_node_ = 0;
    return false;
  }
  return true;
}

size_t FakeNic::DeviceIndex(const Device* device) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].get() == device) return i;
  }
  return 0;
}

// ibv_query_gid_ex(3). Entry 0 is the port's GID; every other entry of the
// table is empty (ENODATA, as rdma-core answers for an unused entry).
//   - RoCE: a RoCE v2 GID, the IPv4-mapped form of the device's first
//     address (::ffff:a.b.c.d; 127.0.0.1 for a device that owns every
//     address), as rxe lists its netdev's IPv4 address (rdma-core
//     verbs.c ibv_query_gid_ex; kernel roce_gid_mgmt.c).
//   - InfiniBand: the link-local prefix fe80::/64 and the port GUID.
int FakeNic::QueryGid(ibv_context* ctx, uint8_t port_num, uint32_t index,
                      ibv_gid_entry* entry) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  if (device == nullptr || entry == nullptr || port_num != 1) return EINVAL;
  return GidEntry(device, index, entry);
}

int FakeNic::GidEntry(const Device* device, uint32_t index,
                      ibv_gid_entry* entry) {
  const bool roce = config_.caps->link_layer == IBV_LINK_LAYER_ETHERNET;
  if (index >= GidTableLength()) return EINVAL;
  memset(entry, 0, sizeof(*entry));
  entry->gid_index = index;
  entry->port_num = 1;
  if (index != 0) return ENODATA;
  if (roce) {
    std::string addr = "127.0.0.1";
    for (const std::string& a : device->config.addresses) {
      in_addr v4;
      if (inet_pton(AF_INET, a.c_str(), &v4) == 1) {
        addr = a;
        break;
      }
    }
    in_addr v4;
    inet_pton(AF_INET, addr.c_str(), &v4);
    entry->gid.raw[10] = 0xff;
    entry->gid.raw[11] = 0xff;
    memcpy(&entry->gid.raw[12], &v4, 4);
    entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  } else {
    entry->gid.raw[0] = 0xfe;
    entry->gid.raw[1] = 0x80;
    const uint64_t guid = DeviceGuid(device);
    memcpy(&entry->gid.raw[8], &guid, 8);
    entry->gid_type = IBV_GID_TYPE_IB;
  }
  return 0;
}

// ibv_create_qp(3): an RC or UC QP in RESET; nothing else is made for it
// (no CM id). Other QP types (UD, XRC, raw packet) are EOPNOTSUPP here.
ibv_qp* FakeNic::CreateVerbsQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Pd* p = FindPd(pd);
  if (p == nullptr || init_attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (init_attr->qp_type != IBV_QPT_RC && init_attr->qp_type != IBV_QPT_UC) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Qp* qp = nullptr;
  const int err = NewQpLocked(p, init_attr, &qp);
  if (err != 0) {
    errno = err;
    return nullptr;
  }
  if (fabric_ != nullptr && ClaimFabricNode()) {
    // n << 16 | k: the number names its node (see the top of this file).
    qps_by_num_.erase(qp->base.qp_num);
    uint32_t num = 0;
    do {
      num = fabric_node_ << 16 | (NextRandom32() & 0xffff);
    } while ((num & 0xffff) < 2 || qps_by_num_.count(num) != 0);
    qp->base.qp_num = num;
    qps_by_num_[num] = qp;
  }
  return &qp->base;
}

// ibv_destroy_qp(3): outstanding WRs vanish without completions; CQEs
// already in the CQs stay. A QP rdma_create_qp made may go this way too
// (perftest's rdma_cm mode does): its id keeps no QP, as after
// rdma_destroy_qp.
int FakeNic::DestroyVerbsQp(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(mu_);
  Qp* q = FindQp(qp);
  if (q == nullptr) return EINVAL;
  if (q->id != nullptr) {
    DestroyQpLocked(q);
    return 0;
  }
  UnlinkVerbsQp(q);
  // Each QP's RTR links only its own direction, so a QP may name this one
  // without this one naming it back: none may keep it.
  for (Qp* other : qp_order_) {
    if (other->peer == q) {
      other->peer = nullptr;
      MarkMaybeReady(other);  // a parked WR now finds nobody
    }
  }
  DestroyQpLocked(q);
  return 0;
}

// ---- a verbs QP's peer
// -------------------------------------------------------

// Whether an RTR address vector reaches the node that owns dest_qp_num: on
// InfiniBand without a GRH the DLID must be that node's LID; with a GRH
// (RoCE always: ModifyQpLocked refuses it without) the DGID must be this
// host's GID, as every process of the fabric runs on this host. A wrong
// address is not an error at RTR: the packets go nowhere, and the
// requester exhausts its retries (rxe_comp.c COMPST_ERROR_RETRY).
bool FakeNic::AddressReaches(Qp* qp, uint32_t dest_qp_num) {
  const ibv_ah_attr& ah = qp->attr.ah_attr;
  if (ah.is_global) {
    for (auto& device : devices_) {
      ibv_gid_entry entry;
      const int err = GidEntry(device.get(), 0, &entry);
      if (err == 0 && memcmp(&entry.gid, &ah.grh.dgid, sizeof(ibv_gid)) == 0) {
        return true;
      }
    }
    return false;
  }
  if (fabric_node_ != 0) return ah.dlid == (dest_qp_num >> 16);
  return ah.dlid >= 1 && ah.dlid <= devices_.size();
}

void FakeNic::LinkVerbsQp(Qp* qp) {
  UnlinkVerbsQp(qp);
  const uint32_t dest = qp->attr.dest_qp_num;
  if (!AddressReaches(qp, dest)) return;
  const uint32_t node = dest >> 16;
  if (fabric_node_ == 0 || node == fabric_node_) {
    // Only this QP's direction: the peer's own RTR (with its own address
    // vector) decides where the peer's requests go.
    Qp* peer = FindQpByNum(dest);
    if (peer != nullptr && peer != qp && peer->id == nullptr) qp->peer = peer;
    // A requester's packets go to a QP number, not to a QP it found once:
    // one whose peer was reset (DetachFromPeer) reaches it again now that
    // it is back at RTR, as the QP number it names is answered again.
    for (Qp* other : qp_order_) {
      if (other != qp && other->id == nullptr && other->peer == nullptr &&
          other->link == 0 && other->attr.dest_qp_num == qp->base.qp_num &&
          (other->base.state == IBV_QPS_RTR ||
           other->base.state == IBV_QPS_RTS ||
           other->base.state == IBV_QPS_SQD) &&
          AddressReaches(other, qp->base.qp_num)) {
        other->peer = qp;
        MarkMaybeReady(other);
      }
    }
    return;
  }
  uint64_t link = 0;
  if (node == 0 || fabric_->DialNode(node, &link) != 0) return;  // nobody
  fake_nic_internal::BindFrame bind;
  bind.src_qp_num = qp->base.qp_num;
  bind.dst_qp_num = dest;
  fabric_->Send(link, fake_nic_internal::kFrameBind, &bind, sizeof(bind));
  qp->link = link;
  qp->link_dead = false;
  verbs_qp_by_link_[link] = qp->base.qp_num;
}

void FakeNic::UnlinkVerbsQp(Qp* qp) {
  if (qp->id != nullptr || qp->link == 0) return;
  verbs_qp_by_link_.erase(qp->link);
  fabric_->Close(qp->link);
  qp->link = 0;
  qp->link_dead = false;
}

bool FakeNic::FlushFabric(int timeout_ms) {
  return fabric_ == nullptr || fabric_->WaitFlushedFor(timeout_ms);
}

bool FakeNic::LinkAlive(uint64_t link) const {
  return id_by_link_.count(link) != 0 || verbs_qp_by_link_.count(link) != 0;
}

bool FakeNic::OnVerbsFrame(uint64_t link,
                           const fake_nic_internal::FrameView& frame) {
  if (frame.type == fake_nic_internal::kFrameBind) {
    if (LinkAlive(link)) return true;  // one bind per link
    fake_nic_internal::BindFrame bind;
    Qp* target = nullptr;
    if (frame.body_len >= sizeof(bind)) {  // else a peer of another version
      memcpy(&bind, frame.body, sizeof(bind));
      target = FindQpByNum(bind.dst_qp_num);
    }
    if (target == nullptr || target->id != nullptr) {
      fabric_->Close(link);  // no such QP here: its requests go nowhere
      return true;
    }
    verbs_qp_by_link_[link] = bind.dst_qp_num;
    return true;
  }
  auto it = verbs_qp_by_link_.find(link);
  if (it == verbs_qp_by_link_.end()) return false;
  Qp* qp = FindQpByNum(it->second);  // nullptr: destroyed since
  switch (frame.type) {
    case fake_nic_internal::kFrameRequest:
      OnRemoteRequest(qp, link, frame);
      break;
    case fake_nic_internal::kFrameAnswer:
      if (qp != nullptr) OnRemoteAnswer(qp, frame);
      break;
    case fake_nic_internal::kFrameRecvPosted: {
      // A CmFrame (TellRemoteToRetry); a shorter body is a receive's word.
      fake_nic_internal::CmFrame word;
      memset(&word, 0, sizeof(word));
      if (frame.body_len >= sizeof(word)) {
        memcpy(&word, frame.body, sizeof(word));
      }
      if (qp != nullptr && !qp->sq.empty()) {
        TakeRetryWord(qp, word.status == fake_nic_internal::kRetryWordChanged);
      }
      break;
    }
    default:
      break;
  }
  return true;
}

// The far process closed a verbs link: it destroyed the QP or it is gone.
// Its QP answers nothing from now on: a request in flight, and each later
// one, ends in RETRY_EXC_ERR (rxe_comp.c COMPST_ERROR_RETRY), and the QP
// goes to ERR. A verbs QP has no CM to tell it more.
bool FakeNic::OnVerbsLinkClosed(uint64_t link) {
  auto it = verbs_qp_by_link_.find(link);
  if (it == verbs_qp_by_link_.end()) return false;
  Qp* qp = FindQpByNum(it->second);
  verbs_qp_by_link_.erase(it);
  if (qp != nullptr && qp->link == link) PeerLinkDied(qp);
  return true;
}

}  // namespace rpma_harness
