// ibverbs_ex.cc: the extended verbs of the drop-in libibverbs.so.1 -- the
// ops <infiniband/verbs.h>'s inline ibv_create_qp_ex, ibv_create_cq_ex and
// ibv_query_device_ex call through the context's verbs_context, the
// ibv_wr_* API of a QP made with send_ops_flags (ibv_wr_post(3)) and the
// ibv_start_poll / ibv_wc_read_* API of a CQ made by ibv_create_cq_ex
// (ibv_create_cq_ex(3)).
//
// Both APIs are built on the backend's own calls, so the fault rules, the
// trace and the checker see them as they see ibv_post_send and
// ibv_poll_cq: ibv_wr_complete posts the WRs built since ibv_wr_start as
// one chain, whole or not at all (kSendWholeChain), and ibv_start_poll /
// ibv_next_poll take one completion each. The objects are the NIC's own:
// this library makes its NIC with FakeNicConfig::verbs_extension (ibverbs.cc
// Nic()), so each QP and CQ has the room of ibv_qp_ex / ibv_cq_ex past its
// ibv_qp / ibv_cq, as a provider's verbs_qp / verbs_cq does:
// ibv_qp_to_qp_ex(qp)->qp_base is qp and ibv_cq_ex_to_cq is a cast.
//
// What each call accepts and refuses follows rxe's provider (rdma-core 44
// providers/rxe/rxe.c: check_qp_init_attr, set_qp_send_ops, the wr_*
// builders and setters, rxe_create_cq_ex, cq_start_poll), except where
// that provider has a bug fixed upstream since (docs/fidelity.md): a list
// setter counts every element. Where rdma-core leaves a function pointer
// NULL -- a builder not asked for in send_ops_flags, a read_* function not
// asked for in wc_flags -- a program would crash on a real NIC; here it
// gets a message on stderr, and a builder's batch fails with EOPNOTSUPP.

#include <errno.h>
#include <infiniband/verbs.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "verbs_backend/verbs_backend.h"
#include "verbs_dropin/ibverbs_internal.h"

namespace rpma_harness {
namespace dropin {
namespace {

// ---- the ibv_wr_* API (ibv_wr_post(3)) --------------------------------------

// One WR built since ibv_wr_start, with its gather list or inline bytes.
struct BuiltWr {
  ibv_send_wr wr;
  std::vector<ibv_sge> sges;
  std::vector<uint8_t> inline_bytes;
  bool is_inline = false;  // an inline setter gave the data
};

// A QP's extended-API state. `region` is the critical region ibv_wr_start
// opens and ibv_wr_complete / ibv_wr_abort close ("CONCURRENCY": no other
// thread enters it meanwhile).
struct QpEx {
  uint64_t send_ops = 0;
  ibv_qp_cap cap{};  // as the QP was made: the setters' limits
  std::mutex region;
  std::thread::id owner;
  bool open = false;
  int err = 0;  // the first failure since ibv_wr_start (rxe.c qp->err)
  std::vector<BuiltWr> built;  // reused; the first `used` are this batch's
  size_t used = 0;
};

std::mutex ex_mu;  // guards the two maps (not the states in them)

std::unordered_map<const ibv_qp*, std::unique_ptr<QpEx>>& QpExes() {
  static auto* map = new std::unordered_map<const ibv_qp*, std::unique_ptr<QpEx>>;
  return *map;
}

QpEx* FindQpEx(const ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(ex_mu);
  auto it = QpExes().find(qp);
  return it != QpExes().end() ? it->second.get() : nullptr;
}

void Say(const char* what) {
  std::fprintf(stderr, "rpma-harness libibverbs.so.1: %s\n", what);
}

// The state behind an ibv_qp_ex the API was called with. The pointers are
// set only on QPs that have one, so a miss is a program passing something
// else: it is told, and the process stops as it would have on a real NIC.
QpEx& StateOf(ibv_qp_ex* qpx) {
  QpEx* ex = qpx != nullptr ? FindQpEx(&qpx->qp_base) : nullptr;
  if (ex == nullptr) {
    Say("an ibv_wr_* call on a QP that has no extended API (destroyed, or "
        "not from ibv_create_qp_ex with send_ops_flags)");
    std::abort();
  }
  return *ex;
}

// Whether this thread is inside ex's region (ibv_wr_start .. complete).
bool Holds(const QpEx& ex) {
  return ex.open && ex.owner == std::this_thread::get_id();
}

// The first failure of a batch is the one ibv_wr_complete returns.
void Fail(QpEx& ex, int err) {
  if (ex.err == 0) ex.err = err;
}

// A builder's new WR (rxe.c: every builder takes the next slot; wr_id and
// send_flags from the ibv_qp_ex at this call), or nullptr outside a region.
ibv_send_wr* Build(ibv_qp_ex* qpx, ibv_wr_opcode opcode,
                   BuiltWr** built = nullptr) {
  QpEx& ex = StateOf(qpx);
  if (!Holds(ex)) {
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "an ibv_wr_* builder outside ibv_wr_start .. ibv_wr_complete on "
            "this thread: the WR is dropped (ibv_wr_post(3), CONCURRENCY)");
    return nullptr;
  }
  if (ex.used == ex.built.size()) ex.built.emplace_back();
  BuiltWr& b = ex.built[ex.used++];
  memset(&b.wr, 0, sizeof(b.wr));
  b.sges.clear();
  b.inline_bytes.clear();
  b.is_inline = false;
  b.wr.wr_id = qpx->wr_id;
  b.wr.send_flags = qpx->wr_flags;
  b.wr.opcode = opcode;
  if (built != nullptr) *built = &b;
  return &b.wr;
}

// The WR a setter applies to: the last one built ("Attach ... to the last
// work request"), or nullptr (the batch fails) when there is none.
BuiltWr* Last(QpEx& ex) {
  if (!Holds(ex)) {
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "an ibv_wr_set_* setter outside ibv_wr_start .. ibv_wr_complete "
            "on this thread is ignored (ibv_wr_post(3), CONCURRENCY)");
    return nullptr;
  }
  if (ex.err != 0) return nullptr;  // rxe.c: a setter after a failure
  if (ex.used == 0) {
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "an ibv_wr_set_* setter before any builder in this batch: "
            "ibv_wr_complete fails with EINVAL");
    Fail(ex, EINVAL);
    return nullptr;
  }
  return &ex.built[ex.used - 1];
}

void WrRdma(ibv_qp_ex* qpx, ibv_wr_opcode op, uint32_t rkey,
            uint64_t remote_addr, __be32 imm) {
  if (ibv_send_wr* wr = Build(qpx, op)) {
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
    wr->imm_data = imm;
  }
}

void WrRdmaRead(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  WrRdma(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}
void WrRdmaWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  WrRdma(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}
void WrRdmaWriteImm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                    __be32 imm) {
  WrRdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm);
}
void WrSend(ibv_qp_ex* qpx) { Build(qpx, IBV_WR_SEND); }
void WrSendImm(ibv_qp_ex* qpx, __be32 imm) {
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_SEND_WITH_IMM)) wr->imm_data = imm;
}
void WrSendInv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_SEND_WITH_INV)) {
    wr->invalidate_rkey = invalidate_rkey;
  }
}
void WrLocalInv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_LOCAL_INV)) {
    wr->invalidate_rkey = invalidate_rkey;
  }
}
void WrBindMw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey,
              const ibv_mw_bind_info* info) {
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_BIND_MW)) {
    wr->bind_mw.mw = mw;
    wr->bind_mw.rkey = rkey;
    if (info != nullptr) wr->bind_mw.bind_info = *info;
  }
}
void WrAtomicCmpSwp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                    uint64_t compare, uint64_t swap) {
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_ATOMIC_CMP_AND_SWP)) {
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.compare_add = compare;
    wr->wr.atomic.swap = swap;
  }
}
void WrAtomicFetchAdd(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                      uint64_t add) {
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.compare_add = add;
  }
}
// rxe.c wr_atomic_write: the 8 bytes are taken at the call, as inline data
// is. The fake NIC has no ATOMIC_WRITE (IB spec 1.5's), and refuses it at
// ibv_wr_complete as it refuses the opcode in ibv_post_send.
void WrAtomicWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                   const void* atomic_wr) {
  BuiltWr* b = nullptr;
  if (ibv_send_wr* wr = Build(qpx, IBV_WR_ATOMIC_WRITE, &b)) {
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
    const auto* from = static_cast<const uint8_t*>(atomic_wr);
    if (from != nullptr) b->inline_bytes.assign(from, from + 8);
    b->is_inline = true;
  }
}

// rxe.c wr_set_sge: a zero length leaves the WR without data.
void WrSetSge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  BuiltWr* b = Last(StateOf(qpx));
  if (b == nullptr) return;
  b->sges.clear();
  b->is_inline = false;
  if (length != 0) b->sges.push_back({addr, length, lkey});
}

// rxe.c wr_set_sge_list: more than max_send_sge is ENOSPC.
void WrSetSgeList(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  QpEx& ex = StateOf(qpx);
  BuiltWr* b = Last(ex);
  if (b == nullptr) return;
  if (num_sge > ex.cap.max_send_sge || (num_sge > 0 && sg_list == nullptr)) {
    Fail(ex, ENOSPC);
    return;
  }
  b->is_inline = false;
  b->sges.assign(sg_list, sg_list + num_sge);
}

// rxe.c wr_set_inline_data(_list): the bytes are copied now, and more than
// max_inline_data of them is ENOSPC.
void WrSetInlineDataList(ibv_qp_ex* qpx, size_t num_buf,
                         const ibv_data_buf* buf_list) {
  QpEx& ex = StateOf(qpx);
  BuiltWr* b = Last(ex);
  if (b == nullptr) return;
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (buf_list[i].length > ex.cap.max_inline_data - total) {
      Fail(ex, ENOSPC);
      return;
    }
    total += buf_list[i].length;
  }
  b->sges.clear();
  b->inline_bytes.clear();
  for (size_t i = 0; i < num_buf; ++i) {
    const auto* from = static_cast<const uint8_t*>(buf_list[i].addr);
    if (buf_list[i].length > 0) {
      b->inline_bytes.insert(b->inline_bytes.end(), from,
                             from + buf_list[i].length);
    }
  }
  b->is_inline = true;
}

void WrSetInlineData(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  WrSetInlineDataList(qpx, 1, &buf);
}

// The fake NIC has no UD or XRC QPs, so these address setters never apply.
void WrSetUdAddr(ibv_qp_ex* qpx, ibv_ah*, uint32_t, uint32_t) {
  Say("ibv_wr_set_ud_addr: the fake NIC has no UD QPs; the batch fails "
      "with EOPNOTSUPP");
  Fail(StateOf(qpx), EOPNOTSUPP);
}
void WrSetXrcSrqn(ibv_qp_ex* qpx, uint32_t) {
  Say("ibv_wr_set_xrc_srqn: the fake NIC has no XRC QPs; the batch fails "
      "with EOPNOTSUPP");
  Fail(StateOf(qpx), EOPNOTSUPP);
}

void WrStart(ibv_qp_ex* qpx) {
  QpEx& ex = StateOf(qpx);
  if (Holds(ex)) {
    // On rxe the spinlock would deadlock here.
    Say("ibv_wr_start again before ibv_wr_complete or ibv_wr_abort: the "
        "WRs built so far are discarded");
  } else {
    ex.region.lock();
    ex.open = true;
    ex.owner = std::this_thread::get_id();
  }
  ex.err = 0;
  ex.used = 0;
}

// Closes the region; true when this thread had it open.
bool Close(QpEx& ex, const char* call) {
  if (!Holds(ex)) {
    std::fprintf(stderr,
                 "rpma-harness libibverbs.so.1: %s without ibv_wr_start on "
                 "this thread (ibv_wr_post(3))\n",
                 call);
    return false;
  }
  ex.open = false;
  ex.owner = std::thread::id();
  ex.region.unlock();
  return true;
}

// The batch goes to the backend as one chain, whole or not at all
// ("If a failure is detected ... the entire posting will be aborted").
int WrComplete(ibv_qp_ex* qpx) {
  QpEx& ex = StateOf(qpx);
  // The region stays held until the batch is posted: built is its.
  if (!Holds(ex)) {
    Close(ex, "ibv_wr_complete");  // says why
    return EINVAL;
  }
  int err = ex.err;
  if (err == 0 && ex.used > 0) {
    for (size_t i = 0; i < ex.used; ++i) {
      BuiltWr& b = ex.built[i];
      ibv_send_wr& wr = b.wr;
      if (b.is_inline) {
        // The bytes copied at the setter, posted inline (the NIC copies
        // them again at the post; no lkey).
        wr.send_flags |= IBV_SEND_INLINE;
        b.sges.clear();
        if (!b.inline_bytes.empty()) {
          b.sges.push_back({reinterpret_cast<uintptr_t>(b.inline_bytes.data()),
                            static_cast<uint32_t>(b.inline_bytes.size()), 0});
        }
      }
      wr.sg_list = b.sges.empty() ? nullptr : b.sges.data();
      wr.num_sge = static_cast<int>(b.sges.size());
      wr.next = i + 1 < ex.used ? &ex.built[i + 1].wr : nullptr;
    }
    ibv_send_wr* first = &ex.built[0].wr;
    first->send_flags |= kSendWholeChain;
    ibv_send_wr* bad = nullptr;
    const int rc = Nic().PostSend(&qpx->qp_base, first, &bad);
    err = rc < 0 ? -rc : rc;
    // rxe.c check_qp_queue_full: no room for the batch is ENOSPC.
    if (err == ENOMEM) err = ENOSPC;
  }
  ex.used = 0;
  Close(ex, "ibv_wr_complete");
  return err;
}

void WrAbort(ibv_qp_ex* qpx) {
  QpEx& ex = StateOf(qpx);
  ex.used = 0;
  Close(ex, "ibv_wr_abort");
}

// A builder the QP was not made for: rdma-core leaves it NULL.
void Unasked(ibv_qp_ex* qpx, const char* builder, const char* flag) {
  std::fprintf(stderr,
               "rpma-harness libibverbs.so.1: %s on a QP made without %s in "
               "send_ops_flags (rdma-core leaves it NULL: the program would "
               "crash on a real NIC); the batch fails with EOPNOTSUPP\n",
               builder, flag);
  Fail(StateOf(qpx), EOPNOTSUPP);
}

// The send_ops_flags each QP type takes (rxe.c RXE_SUP_*_QP_SEND_OPS_FLAGS).
uint64_t SupportedSendOps(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_RC:
      return IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
             IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
             IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
             IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
             IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
             IBV_QP_EX_WITH_ATOMIC_WRITE;
    case IBV_QPT_UC:
      return IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
             IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
             IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
    case IBV_QPT_UD:
      return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    default:
      return 0;
  }
}

// The function table of a QP made with `ops` (rxe.c set_qp_send_ops; the
// builders not asked for report themselves instead of being NULL).
void FillSendOps(ibv_qp_ex* x, uint64_t ops) {
#define RPMA_HARNESS_BUILDER(member, flag, fn, ...)                         \
  x->member = (ops & flag) ? fn : +[](ibv_qp_ex* q, ##__VA_ARGS__) {        \
    Unasked(q, "ibv_" #member, #flag);                                      \
  }
  RPMA_HARNESS_BUILDER(wr_rdma_write, IBV_QP_EX_WITH_RDMA_WRITE, WrRdmaWrite,
                       uint32_t, uint64_t);
  RPMA_HARNESS_BUILDER(wr_rdma_write_imm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
                       WrRdmaWriteImm, uint32_t, uint64_t, __be32);
  RPMA_HARNESS_BUILDER(wr_rdma_read, IBV_QP_EX_WITH_RDMA_READ, WrRdmaRead,
                       uint32_t, uint64_t);
  RPMA_HARNESS_BUILDER(wr_send, IBV_QP_EX_WITH_SEND, WrSend);
  RPMA_HARNESS_BUILDER(wr_send_imm, IBV_QP_EX_WITH_SEND_WITH_IMM, WrSendImm,
                       __be32);
  RPMA_HARNESS_BUILDER(wr_send_inv, IBV_QP_EX_WITH_SEND_WITH_INV, WrSendInv,
                       uint32_t);
  RPMA_HARNESS_BUILDER(wr_local_inv, IBV_QP_EX_WITH_LOCAL_INV, WrLocalInv,
                       uint32_t);
  RPMA_HARNESS_BUILDER(wr_bind_mw, IBV_QP_EX_WITH_BIND_MW, WrBindMw, ibv_mw*,
                       uint32_t, const ibv_mw_bind_info*);
  RPMA_HARNESS_BUILDER(wr_atomic_cmp_swp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
                       WrAtomicCmpSwp, uint32_t, uint64_t, uint64_t,
                       uint64_t);
  RPMA_HARNESS_BUILDER(wr_atomic_fetch_add,
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, WrAtomicFetchAdd,
                       uint32_t, uint64_t, uint64_t);
  RPMA_HARNESS_BUILDER(wr_atomic_write, IBV_QP_EX_WITH_ATOMIC_WRITE,
                       WrAtomicWrite, uint32_t, uint64_t, const void*);
#undef RPMA_HARNESS_BUILDER
  // No QP type of the fake takes TSO (rxe: UD and raw packet only).
  x->wr_send_tso = [](ibv_qp_ex* q, void*, uint16_t, uint16_t) {
    Unasked(q, "ibv_wr_send_tso", "IBV_QP_EX_WITH_TSO");
  };
  x->wr_set_ud_addr = WrSetUdAddr;
  x->wr_set_xrc_srqn = WrSetXrcSrqn;
  x->wr_set_inline_data = WrSetInlineData;
  x->wr_set_inline_data_list = WrSetInlineDataList;
  x->wr_set_sge = WrSetSge;
  x->wr_set_sge_list = WrSetSgeList;
  x->wr_start = WrStart;
  x->wr_complete = WrComplete;
  x->wr_abort = WrAbort;
}

// ---- ibv_create_cq_ex(3) and the polling API ------------------------------

// A CQ's extended-API state: the completion ibv_start_poll / ibv_next_poll
// took last, which the read_* functions answer from.
struct CqEx {
  ibv_wc wc{};
};

std::unordered_map<const ibv_cq*, std::unique_ptr<CqEx>>& CqExes() {
  static auto* map = new std::unordered_map<const ibv_cq*, std::unique_ptr<CqEx>>;
  return *map;
}

CqEx& StateOf(ibv_cq_ex* cqx) {
  CqEx* ex = nullptr;
  {
    std::lock_guard<std::mutex> lock(ex_mu);
    auto it = CqExes().find(ibv_cq_ex_to_cq(cqx));
    if (it != CqExes().end()) ex = it->second.get();
  }
  if (ex == nullptr) {
    Say("an ibv_start_poll / ibv_wc_read_* call on a CQ that has no "
        "extended API (destroyed, or not from ibv_create_cq_ex)");
    std::abort();
  }
  return *ex;
}

// rxe.c RXE_SUP_WC_EX_FLAGS: no timestamps, VLANs or flow tags.
constexpr uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
    IBV_WC_EX_WITH_DLID_PATH_BITS;

// One completion into the CQ's state: 0, ENOENT when the CQ is empty, or
// the poll's error.
int TakeOne(ibv_cq_ex* cqx) {
  CqEx& ex = StateOf(cqx);
  ibv_wc wc;
  const int n = Nic().PollCq(ibv_cq_ex_to_cq(cqx), 1, &wc);
  if (n < 0) {
    errno = n < -1 ? -n : EIO;
    return errno;
  }
  if (n == 0) {
    errno = ENOENT;  // rxe.c cq_start_poll sets errno too
    return ENOENT;
  }
  ex.wc = wc;
  cqx->status = wc.status;
  cqx->wr_id = wc.wr_id;
  return 0;
}

// rxe.c cq_start_poll reads no attribute; the man page asks comp_mask 0.
int StartPoll(ibv_cq_ex* cqx, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) {
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "ibv_start_poll: ibv_poll_cq_attr.comp_mask must be 0 "
            "(ibv_create_cq_ex(3)); rxe ignores it, and so does the fake");
  }
  return TakeOne(cqx);
}
int NextPoll(ibv_cq_ex* cqx) { return TakeOne(cqx); }
// Each completion was taken from the CQ when it was read, so ending the
// poll has nothing left to hand back (and may follow an ENOENT from
// ibv_next_poll, as rdma-core's own rc_pingpong calls it).
void EndPoll(ibv_cq_ex*) {}

const ibv_wc& Current(ibv_cq_ex* cqx) { return StateOf(cqx).wc; }

void UnaskedRead(const char* reader, const char* flag) {
  std::fprintf(stderr,
               "rpma-harness libibverbs.so.1: %s on a CQ made without %s in "
               "wc_flags (rdma-core leaves it NULL: the program would crash "
               "on a real NIC); it reads 0\n",
               reader, flag);
}

void FillPollOps(ibv_cq_ex* x, uint64_t wc_flags) {
  x->start_poll = StartPoll;
  x->next_poll = NextPoll;
  x->end_poll = EndPoll;
  x->read_opcode = [](ibv_cq_ex* c) { return Current(c).opcode; };
  x->read_vendor_err = [](ibv_cq_ex* c) { return Current(c).vendor_err; };
  x->read_wc_flags = [](ibv_cq_ex* c) { return Current(c).wc_flags; };
#define RPMA_HARNESS_READER(member, flag, type, expr)                     \
  x->member = (wc_flags & flag)                                           \
                  ? +[](ibv_cq_ex* c) -> type {                           \
                      const ibv_wc& wc = Current(c);                      \
                      return expr;                                        \
                    }                                                     \
                  : +[](ibv_cq_ex*) -> type {                             \
                      UnaskedRead("ibv_wc_" #member, #flag);              \
                      return type{};                                      \
                    }
  RPMA_HARNESS_READER(read_byte_len, IBV_WC_EX_WITH_BYTE_LEN, uint32_t,
                      wc.byte_len);
  RPMA_HARNESS_READER(read_imm_data, IBV_WC_EX_WITH_IMM, __be32, wc.imm_data);
  RPMA_HARNESS_READER(read_qp_num, IBV_WC_EX_WITH_QP_NUM, uint32_t,
                      wc.qp_num);
  RPMA_HARNESS_READER(read_src_qp, IBV_WC_EX_WITH_SRC_QP, uint32_t,
                      wc.src_qp);
  RPMA_HARNESS_READER(read_slid, IBV_WC_EX_WITH_SLID, uint32_t, wc.slid);
  RPMA_HARNESS_READER(read_sl, IBV_WC_EX_WITH_SL, uint8_t, wc.sl);
  RPMA_HARNESS_READER(read_dlid_path_bits, IBV_WC_EX_WITH_DLID_PATH_BITS,
                      uint8_t, wc.dlid_path_bits);
#undef RPMA_HARNESS_READER
  // Never asked for: ibv_create_cq_ex refuses these flags.
  x->read_completion_ts = [](ibv_cq_ex*) -> uint64_t {
    UnaskedRead("ibv_wc_read_completion_ts",
                "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP");
    return 0;
  };
  x->read_completion_wallclock_ns = [](ibv_cq_ex*) -> uint64_t {
    UnaskedRead("ibv_wc_read_completion_wallclock_ns",
                "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK");
    return 0;
  };
  x->read_cvlan = [](ibv_cq_ex*) -> uint16_t {
    UnaskedRead("ibv_wc_read_cvlan", "IBV_WC_EX_WITH_CVLAN");
    return 0;
  };
  x->read_flow_tag = [](ibv_cq_ex*) -> uint32_t {
    UnaskedRead("ibv_wc_read_flow_tag", "IBV_WC_EX_WITH_FLOW_TAG");
    return 0;
  };
  x->read_tm_info = [](ibv_cq_ex*, ibv_wc_tm_info* info) {
    UnaskedRead("ibv_wc_read_tm_info", "IBV_WC_EX_WITH_TM_INFO");
    if (info != nullptr) memset(info, 0, sizeof(*info));
  };
}

// ---- the context's extended ops -------------------------------------------

// rxe.c rxe_create_cq_ex, then the kernel's rxe_create_cq (rxe_verbs.c: any creation flag that
// reaches it is EOPNOTSUPP; IBV_CREATE_CQ_ATTR_SINGLE_THREADED stays in
// user space).
ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  // An unknown comp_mask bit passes: rxe on Debian 12 made the CQ
  // (testdata/ex_verbs.rxe.txt, cq-ex-unknown-mask).
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0 ||
      ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 &&
       (attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq* cq = Nic().CreateCq(context, static_cast<int>(attr->cqe),
                              attr->cq_context, attr->channel,
                              static_cast<int>(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  auto* cqx = reinterpret_cast<ibv_cq_ex*>(cq);  // see the file's comment
  FillPollOps(cqx, attr->wc_flags);
  std::lock_guard<std::mutex> lock(ex_mu);
  CqExes()[cq] = std::make_unique<CqEx>();
  return cqx;
}

// rxe.c check_qp_init_attr, then cmd_qp.c create_qp_ex_common (a QP needs
// its PD): 0 or the errno.
int QpExRefusal(const ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr) return EINVAL;
  const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                         IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((attr->comp_mask & ~known) != 0) return EOPNOTSUPP;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 &&
      attr->create_flags != 0) {
    return EOPNOTSUPP;
  }
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 &&
      (SupportedSendOps(attr->qp_type) == 0 ||
       (attr->send_ops_flags & ~SupportedSendOps(attr->qp_type)) != 0)) {
    return EOPNOTSUPP;
  }
  return 0;
}

ibv_qp* CreateQpEx(ibv_context*, ibv_qp_init_attr_ex* attr) {
  int err = QpExRefusal(attr);
  if (err == 0 && ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 ||
                   attr->pd == nullptr)) {
    err = EINVAL;
  }
  if (err != 0) {
    errno = err;
    return nullptr;
  }
  // ibv_qp_init_attr_ex starts with ibv_qp_init_attr's members (verbs.h's
  // own ibv_create_qp_ex passes it as one).
  ibv_qp* qp = Nic().CreateVerbsQp(
      attr->pd, reinterpret_cast<ibv_qp_init_attr*>(attr));
  if (qp == nullptr) return nullptr;
  MakeQpEx(qp, attr);
  return qp;
}

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input*,
                  ibv_device_attr_ex* attr, size_t attr_size) {
  if (attr == nullptr || attr_size < sizeof(attr->orig_attr)) return EINVAL;
  ibv_device_attr_ex full;
  memset(&full, 0, sizeof(full));
  const int err = Nic().QueryDeviceEx(context, &full);
  if (err != 0) return err;
  // A program built against another verbs.h passes its own size: the
  // members both know, and zeros past them.
  memset(attr, 0, attr_size);
  memcpy(attr, &full, attr_size < sizeof(full) ? attr_size : sizeof(full));
  return 0;
}

}  // namespace

// The extended API of a QP made with `attr`: rdma-core gives one to every
// QP from ibv_create_qp_ex (rxe.c rxe_create_qp_ex sets VERBS_QP_EX), with
// the builders only when send_ops_flags was given.
void MakeQpEx(ibv_qp* qp, const ibv_qp_init_attr_ex* attr) {
  auto ex = std::make_unique<QpEx>();
  ex->cap = attr->cap;
  auto* qpx = reinterpret_cast<ibv_qp_ex*>(qp);  // see the file's comment
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0) {
    ex->send_ops = attr->send_ops_flags;
    FillSendOps(qpx, attr->send_ops_flags);
  }
  std::lock_guard<std::mutex> lock(ex_mu);
  QpExes()[qp] = std::move(ex);
}

int QpExCreationRefusal(const ibv_qp_init_attr_ex* attr) {
  return QpExRefusal(attr);
}

ibv_qp_ex* QpToQpEx(ibv_qp* qp) {
  return qp != nullptr && FindQpEx(qp) != nullptr
             ? reinterpret_cast<ibv_qp_ex*>(qp)
             : nullptr;
}

void FillExtendedOps(ibv_context* context) {
  verbs_context* vctx = verbs_get_ctx(context);
  if (vctx == nullptr) return;  // not the fake's (it marks its own)
  vctx->create_qp_ex = CreateQpEx;
  vctx->create_cq_ex = CreateCqEx;
  vctx->query_device_ex = QueryDeviceEx;
}

void ForgetQpEx(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(ex_mu);
  QpExes().erase(qp);
}

void ForgetCqEx(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(ex_mu);
  CqExes().erase(cq);
}

}  // namespace dropin
}  // namespace rpma_harness
