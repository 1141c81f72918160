// fake_nic_wr_fuzz.cc: random WR chains against random memory-region layouts
// and QP states on the fake NIC.
//
// An input is a little program: the personality, the QP caps, the MRs of
// both hosts (offsets, lengths and access inside a guarded arena per host),
// what happens to the connection, then a list of actions (post send chains
// and receive chains on either QP with random opcodes, flags, SGE lists,
// lengths, keys and offsets; step; poll; deregister). Afterwards:
//   - no byte of either arena outside every region ever registered changed
//     (bytes outside the arenas are guard pages: touching them faults);
//   - a refused post names one of the posted WRs as bad_wr;
//   - every completion carries the wr_id of a WR that was accepted, once.
// One program in eight (the NIC seed's low three bits all set) runs on an
// Unreliable Connected pair (nic/fake_nic_unreliable.cc) made with
// CreateVerbsQp and ModifyQp instead of rdma_cm's RC pair.
// A broken invariant aborts (a crash for libFuzzer, a failure for the
// corpus regression test).

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "tests/connected_qps.h"
#include "tests/guarded_buffer.h"
#include "tools/fuzz/arena_check.h"
#include "tools/fuzz/byte_reader.h"
#include "tools/fuzz/fuzz_targets.h"

namespace rpma_harness {
namespace {

constexpr int64_t kArena = 8192;
constexpr int kMaxActions = 64;
constexpr int kMaxSge = 5;  // one above the largest max_sge the QPs get

[[noreturn]] void Violation(const char* what) {
  fprintf(stderr, "fake_nic_wr_fuzz: invariant broken: %s\n", what);
  abort();
}

struct Side {
  GuardedBuffer* arena = nullptr;
  std::vector<std::pair<int64_t, int64_t>> registered;  // [begin, end)
  std::vector<ibv_mr*> mrs;                             // live ones
  ibv_qp* qp = nullptr;
  ibv_cq* cq = nullptr;
};

class WrProgram {
 public:
  explicit WrProgram(ByteReader* in) : in_(in) {}

  void Run();

 private:
  FakeNicConfig Config();
  void RegisterMrs(int side);
  uint32_t PickKey(bool lkey);
  void FillSge(const Side& own, bool keep_inside, ibv_sge* sge);
  void PostSendChain(int side);
  void PostRecvChain(int side);
  void Poll(int side);
  void Deregister();
  void CheckArenas();
  void ConnectUc(const QpPairOptions& options);

  ByteReader* in_;
  std::unique_ptr<FakeNic> nic_;
  std::unique_ptr<ConnectedQps> fabric_;
  Side sides_[2];
  uint64_t next_wr_id_ = 1;
  std::set<uint64_t> accepted_;
  // Personality::refusal_for_the_qp_leaves_bad_wr_null: a post refused for
  // the QP names no WR (the sends stay queued, the receives are not).
  bool qp_refusal_names_no_wr_ = false;
  std::set<uint64_t> completed_;
};

GuardedBuffer& Arena(int side) {
  static GuardedBuffer* arenas[2] = {new GuardedBuffer(kArena),
                                     new GuardedBuffer(kArena)};
  return *arenas[side];
}

FakeNicConfig WrProgram::Config() {
  FakeNicConfig config;
  switch (in_->Range(0, 2)) {
    case 1:
      config.personality = Personality::Rxe();
      break;
    case 2:
      config.personality = Personality::Siw();
      break;
    default:
      break;
  }
  config.seed = in_->U8();
  qp_refusal_names_no_wr_ =
      config.personality.refusal_for_the_qp_leaves_bad_wr_null;
  return config;
}

void WrProgram::RegisterMrs(int side) {
  Side& s = sides_[side];
  ibv_pd* own = side == 0 ? fabric_->client_pd() : fabric_->server_pd();
  ibv_pd* other = side == 0 ? fabric_->server_pd() : fabric_->client_pd();
  const int count = static_cast<int>(in_->Range(0, 3));
  for (int i = 0; i < count; ++i) {
    const int64_t offset = in_->Range(0, kArena);
    const int64_t length = in_->Range(0, kArena - offset);
    const int access =
        in_->U8() & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    // Now and then an MR of this host's memory on the other host's PD.
    ibv_pd* pd = (in_->U8() & 7) == 0 ? other : own;
    ibv_mr* mr = nic_->RegMr(pd, s.arena->data() + offset,
                             static_cast<size_t>(length), access);
    if (mr == nullptr) continue;
    s.registered.push_back({offset, offset + length});
    s.mrs.push_back(mr);
  }
}

// A key of a live MR of either host, or a made-up one.
uint32_t WrProgram::PickKey(bool lkey) {
  std::vector<ibv_mr*> all = sides_[0].mrs;
  all.insert(all.end(), sides_[1].mrs.begin(), sides_[1].mrs.end());
  const int64_t pick = in_->Range(0, static_cast<int64_t>(all.size()));
  if (pick == static_cast<int64_t>(all.size())) return in_->U32();
  return lkey ? all[pick]->lkey : all[pick]->rkey;
}

// An SGE around `own`'s arena. keep_inside (inline data, read by the CPU at
// post time from any memory of the caller) keeps it inside the arena.
void WrProgram::FillSge(const Side& own, bool keep_inside, ibv_sge* sge) {
  int64_t offset, length;
  if (keep_inside) {
    offset = in_->Range(0, kArena);
    length = in_->Range(0, kArena - offset);
  } else {
    offset = in_->Range(-64, kArena + 64);
    length = in_->Range(0, kArena + 64);
  }
  sge->addr = own.arena->addr(offset);
  sge->length = static_cast<uint32_t>(length);
  sge->lkey = PickKey(true);
}

void WrProgram::PostSendChain(int side) {
  const Side& own = sides_[side];
  const Side& peer = sides_[1 - side];
  const int chain = static_cast<int>(in_->Range(1, 3));
  ibv_send_wr wrs[3];
  ibv_sge sges[3][kMaxSge];
  std::memset(wrs, 0, sizeof(wrs));
  for (int i = 0; i < chain; ++i) {
    ibv_send_wr& wr = wrs[i];
    wr.wr_id = next_wr_id_++;
    wr.opcode = static_cast<ibv_wr_opcode>(in_->Range(0, 15));
    wr.send_flags = in_->U8() & (IBV_SEND_FENCE | IBV_SEND_SIGNALED |
                                 IBV_SEND_SOLICITED | IBV_SEND_INLINE);
    wr.num_sge = static_cast<int>(in_->Range(0, kMaxSge));
    const bool keep_inside = wr.send_flags & IBV_SEND_INLINE;
    for (int j = 0; j < wr.num_sge; ++j) {
      FillSge(own, keep_inside, &sges[i][j]);
    }
    wr.sg_list = sges[i];
    wr.imm_data = in_->U32();
    // Mostly around the peer's arena; sometimes anywhere at all.
    const uint64_t remote =
        (in_->U8() & 15) == 0 ? in_->U64()
                              : peer.arena->addr(in_->Range(-64, kArena + 64));
    const uint32_t rkey = PickKey(false);
    if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
        wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = remote;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = in_->U64();
      wr.wr.atomic.swap = in_->U64();
    } else {
      wr.wr.rdma.remote_addr = remote;
      wr.wr.rdma.rkey = rkey;
    }
    wr.next = i + 1 < chain ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int ret = nic_->PostSend(own.qp, wrs, &bad);
  int accepted = chain;
  if (ret != 0) {
    accepted = -1;
    for (int i = 0; i < chain; ++i) {
      if (bad == &wrs[i]) accepted = i;
    }
    // Refused for the QP (rxe): every WR is queued and *bad_wr is NULL.
    if (accepted < 0 && bad == nullptr && qp_refusal_names_no_wr_) {
      accepted = chain;
    }
    if (accepted < 0) Violation("PostSend failed without naming a posted WR");
  }
  for (int i = 0; i < accepted; ++i) accepted_.insert(wrs[i].wr_id);
}

void WrProgram::PostRecvChain(int side) {
  const Side& own = sides_[side];
  const int chain = static_cast<int>(in_->Range(1, 3));
  ibv_recv_wr wrs[3];
  ibv_sge sges[3][kMaxSge];
  std::memset(wrs, 0, sizeof(wrs));
  for (int i = 0; i < chain; ++i) {
    wrs[i].wr_id = next_wr_id_++;
    wrs[i].num_sge = static_cast<int>(in_->Range(0, kMaxSge));
    for (int j = 0; j < wrs[i].num_sge; ++j) FillSge(own, false, &sges[i][j]);
    wrs[i].sg_list = sges[i];
    wrs[i].next = i + 1 < chain ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int ret = nic_->PostRecv(own.qp, wrs, &bad);
  int accepted = chain;
  if (ret != 0) {
    accepted = -1;
    for (int i = 0; i < chain; ++i) {
      if (bad == &wrs[i]) accepted = i;
    }
    // Refused for the QP (rxe): nothing is queued and *bad_wr is NULL.
    if (accepted < 0 && bad == nullptr && qp_refusal_names_no_wr_) {
      accepted = 0;
    }
    if (accepted < 0) Violation("PostRecv failed without naming a posted WR");
  }
  for (int i = 0; i < accepted; ++i) accepted_.insert(wrs[i].wr_id);
}

void WrProgram::Poll(int side) {
  ibv_wc wcs[4];
  const int n = nic_->PollCq(sides_[side].cq, 4, wcs);
  if (n > 4) Violation("PollCq returned more than asked for");
  for (int i = 0; i < n; ++i) {
    if (!accepted_.count(wcs[i].wr_id)) {
      Violation("a completion for a WR that was never accepted");
    }
    if (!completed_.insert(wcs[i].wr_id).second) {
      Violation("two completions for one WR");
    }
  }
}

void WrProgram::Deregister() {
  Side& s = sides_[in_->Range(0, 1)];
  if (s.mrs.empty()) return;
  const size_t pick = static_cast<size_t>(
      in_->Range(0, static_cast<int64_t>(s.mrs.size()) - 1));
  if (nic_->DeregMr(s.mrs[pick]) != 0) Violation("DeregMr of a live MR failed");
  s.mrs.erase(s.mrs.begin() + static_cast<std::ptrdiff_t>(pick));
}

const uint8_t* PatternOf(int side) {
  static const ArenaPattern* pattern =
      new ArenaPattern(kArena, [](int s, int64_t i) {
        return static_cast<uint8_t>((i * 131) ^ (s ? 0x5a : 0xa5));
      });
  return pattern->Of(side);
}

void WrProgram::CheckArenas() {
  for (int side = 0; side < 2; ++side) {
    const Side& s = sides_[side];
    if (!UnregisteredBytesUnchanged(side, s.arena->data(), PatternOf(side),
                                    kArena, s.registered)) {
      Violation("a byte outside every registered region changed");
    }
  }
}

// Two UC QPs of this NIC, each naming the other, moved to RTS as a verbs
// program moves them (the UC column of ibv_modify_qp(3)'s table).
void WrProgram::ConnectUc(const QpPairOptions& options) {
  ibv_pd* pds[2] = {fabric_->client_pd(), fabric_->server_pd()};
  ibv_context* ctxs[2] = {fabric_->client_context(),
                          fabric_->server_context()};
  for (int side = 0; side < 2; ++side) {
    ibv_qp_init_attr init;
    std::memset(&init, 0, sizeof(init));
    init.qp_type = IBV_QPT_UC;
    sides_[side].cq = fabric_->NewCq(ctxs[side], options.cq_depth);
    init.send_cq = sides_[side].cq;
    init.recv_cq = sides_[side].cq;
    init.cap.max_send_wr = options.max_send_wr;
    init.cap.max_recv_wr = options.max_recv_wr;
    init.cap.max_send_sge = options.max_send_sge;
    init.cap.max_recv_sge = options.max_recv_sge;
    init.cap.max_inline_data = options.max_inline_data;
    init.sq_sig_all = options.sq_sig_all ? 1 : 0;
    sides_[side].qp = nic_->CreateVerbsQp(pds[side], &init);
    if (sides_[side].qp == nullptr) Violation("could not create a UC QP");
  }
  ibv_port_attr port;
  ibv_gid_entry gid;
  if (nic_->QueryPort(ctxs[0], 1, &port) != 0 ||
      nic_->QueryGid(ctxs[0], 1, 0, &gid) != 0) {
    Violation("could not query the port");
  }
  const int access = in_->U8() & (IBV_ACCESS_LOCAL_WRITE |
                                  IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ);
  for (int side = 0; side < 2; ++side) {
    ibv_qp* qp = sides_[side].qp;
    ibv_qp_attr a;
    std::memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    int rc = nic_->ModifyQp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS);
    std::memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = static_cast<ibv_mtu>(in_->Range(IBV_MTU_256, IBV_MTU_4096));
    a.dest_qp_num = sides_[1 - side].qp->qp_num;
    a.ah_attr.port_num = 1;
    a.ah_attr.dlid = port.lid;
    if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = gid.gid;
      a.ah_attr.grh.hop_limit = 1;
    }
    rc = rc || nic_->ModifyQp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
    std::memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    rc = rc || nic_->ModifyQp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    if (rc != 0) Violation("could not move a UC QP to RTS");
  }
}

void WrProgram::Run() {
  const FakeNicConfig config = Config();
  const bool uc = (config.seed & 7) == 7;
  nic_ = std::make_unique<FakeNic>(config);
  // The arenas stay mapped: a copy that faults (the fake turns it into a
  // "harness error" completion instead of a SIGSEGV) touched memory outside
  // every registered region.
  nic_->AddObserver([](const FakeNicEvent& e) {
    if (e.kind == FakeNicEvent::Kind::kExecute &&
        e.text.find("harness error") != std::string::npos) {
      Violation("the NIC faulted on memory it verified at registration");
    }
  });
  for (int side = 0; side < 2; ++side) {
    sides_[side].arena = &Arena(side);
    std::memcpy(sides_[side].arena->data(), PatternOf(side), kArena);
  }
  fabric_ = std::make_unique<ConnectedQps>(nic_.get(), "10.7.0.1", "7400");
  QpPairOptions options;
  options.max_send_wr = static_cast<uint32_t>(in_->Range(1, 8));
  options.max_recv_wr = static_cast<uint32_t>(in_->Range(1, 8));
  options.max_send_sge = static_cast<uint32_t>(in_->Range(1, kMaxSge - 1));
  options.max_recv_sge = static_cast<uint32_t>(in_->Range(1, kMaxSge - 1));
  options.max_inline_data = static_cast<uint32_t>(in_->Range(0, 128));
  options.sq_sig_all = in_->Bool();
  options.cq_depth = static_cast<int>(in_->Range(1, 16));
  options.rnr_retry = static_cast<uint8_t>(in_->Range(0, 7));
  QpPair* pair = nullptr;
  if (uc) {
    ConnectUc(options);
  } else {
    pair = fabric_->Connect(options);
    if (pair == nullptr) Violation("could not connect a QP pair");
    sides_[0].qp = pair->client.qp;
    sides_[0].cq = pair->client.cq;
    sides_[1].qp = pair->server.qp;
    sides_[1].cq = pair->server.cq;
  }
  RegisterMrs(0);
  RegisterMrs(1);

  // The connection's fate before any work: as is, lost, disconnected (a UC
  // pair has no connection: a QP moved to ERR or RESET instead).
  const int64_t fate = in_->Range(0, 3);
  if (uc && (fate == 1 || fate == 2)) {
    ibv_qp_attr a;
    std::memset(&a, 0, sizeof(a));
    a.qp_state = fate == 1 ? IBV_QPS_ERR : IBV_QPS_RESET;
    nic_->ModifyQp(sides_[in_->Range(0, 1)].qp, &a, IBV_QP_STATE);
  } else if (fate == 1) {
    nic_->LoseConnection(pair->client.qp->qp_num);
  } else if (fate == 2) {
    nic_->Disconnect(pair->client.id);
  }

  for (int action = 0; action < kMaxActions && !in_->empty(); ++action) {
    switch (in_->Range(0, 7)) {
      case 0:
      case 1:
      case 2:
        PostSendChain(static_cast<int>(in_->Range(0, 1)));
        break;
      case 3:
        PostRecvChain(static_cast<int>(in_->Range(0, 1)));
        break;
      case 4:
        for (int64_t n = in_->Range(1, 4); n > 0; --n) nic_->Step();
        break;
      case 5:
        Poll(static_cast<int>(in_->Range(0, 1)));
        break;
      case 6:
        Deregister();
        break;
      default:
        nic_->RunUntilIdle(10000);
        break;
    }
  }
  nic_->RunUntilIdle(10000);
  for (int i = 0; i < 64; ++i) {
    Poll(0);
    Poll(1);
  }
  CheckArenas();
  // Teardown with work outstanding must be clean too (ASan / LSan).
  for (Side& side : sides_) {
    for (ibv_mr* mr : side.mrs) nic_->DeregMr(mr);
    if (uc && nic_->DestroyVerbsQp(side.qp) != 0) {
      Violation("DestroyVerbsQp of a UC QP failed");
    }
  }
  fabric_.reset();
  nic_.reset();
}

}  // namespace

int FuzzFakeNicWr(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  WrProgram program(&in);
  program.Run();
  return 0;
}

}  // namespace rpma_harness
