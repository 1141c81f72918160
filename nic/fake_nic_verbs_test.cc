// Verbs without rdma_cm (fake_nic_verbs.cc): the device list, port and GID
// table as a program that calls libibverbs directly sees them, and QPs made
// with CreateVerbsQp that the program connects itself with ModifyQp, in one
// NIC and across two NICs of a fabric (as ibv_rc_pingpong's two processes).

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nic/fake_nic.h"

namespace rpma_harness {
namespace {

constexpr size_t kLen = 8192;

// One side of a verbs program: a device context, PD, buffers, one CQ and
// one QP in RESET.
struct Side {
  explicit Side(FakeNic* nic, ibv_qp_type type = IBV_QPT_RC) : nic(nic) {
    std::vector<ibv_context*> contexts;
    EXPECT_EQ(nic->ListDevices(&contexts), 0);
    ctx = contexts.at(0);
    pd = nic->AllocPd(ctx);
    src.assign(kLen, 0);
    dst.assign(kLen, 0);
    for (size_t i = 0; i < kLen; ++i) src[i] = static_cast<char>(i * 13 + 5);
    smr = nic->RegMr(pd, src.data(), kLen, IBV_ACCESS_LOCAL_WRITE);
    dmr = nic->RegMr(pd, dst.data(), kLen,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    // src again, for a peer's RDMA READ.
    rmr = nic->RegMr(pd, src.data(), kLen,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    cq = nic->CreateCq(ctx, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.qp_type = type;
    init.send_cq = cq;
    init.recv_cq = cq;
    init.cap.max_send_wr = 8;
    init.cap.max_recv_wr = 8;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = nic->CreateVerbsQp(pd, &init);
    EXPECT_NE(qp, nullptr);
  }
  ~Side() {
    if (qp != nullptr) {
      EXPECT_EQ(nic->DestroyVerbsQp(qp), 0);
    }
    nic->DestroyCq(cq);
    nic->DeregMr(smr);
    nic->DeregMr(dmr);
    nic->DeregMr(rmr);
    nic->DeallocPd(pd);
  }
  ibv_port_attr Port() {
    ibv_port_attr port;
    EXPECT_EQ(nic->QueryPort(ctx, 1, &port), 0);
    return port;
  }
  // INIT, then RTR toward (dest_qp_num, dlid or dgid), then RTS with the
  // transport timer's timeout and retry_cnt; returns the RTR's result.
  void Init() {
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    EXPECT_EQ(nic->ModifyQp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                IBV_QP_ACCESS_FLAGS),
              0);
  }
  // RTR's attributes common to RC and UC: the peer's QP number and
  // address (dlid, or dgid with a GRH when not null).
  static ibv_qp_attr RtrAttr(uint32_t dest_qp_num, uint16_t dlid,
                             const ibv_gid* dgid) {
    ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest_qp_num;
    a.ah_attr.port_num = 1;
    a.ah_attr.dlid = dlid;
    if (dgid != nullptr) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = *dgid;
      a.ah_attr.grh.hop_limit = 1;
    }
    return a;
  }
  int Connect(uint32_t dest_qp_num, uint16_t dlid, const ibv_gid* dgid,
              uint8_t timeout = 14, uint8_t retry_cnt = 7,
              uint32_t rq_psn = 0, uint32_t sq_psn = 0) {
    Init();
    ibv_qp_attr a = RtrAttr(dest_qp_num, dlid, dgid);
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    const int rtr = nic->ModifyQp(
        qp, &a,
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rtr != 0) return rtr;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    a.sq_psn = sq_psn;
    EXPECT_EQ(nic->ModifyQp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC),
              0);
    return 0;
  }
  // A UC QP's way to RTS: no read/atomic depths, no timers (the RC ones
  // are EINVAL, as on rxe).
  int ConnectUc(uint32_t dest_qp_num, uint16_t dlid) {
    Init();
    ibv_qp_attr a = RtrAttr(dest_qp_num, dlid, nullptr);
    int rc = nic->ModifyQp(qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                               IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
    if (rc != 0) return rc;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    return nic->ModifyQp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  void PostRecv(uint64_t wr_id) {
    ibv_recv_wr wr;
    ibv_recv_wr* bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    ASSERT_EQ(nic->PostRecv(qp, &wr, &bad), 0);
  }
  // A receive into the whole of dst.
  void PostRecvIntoDst(uint64_t wr_id) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(dst.data()),
                   static_cast<uint32_t>(kLen), dmr->lkey};
    ibv_recv_wr wr;
    ibv_recv_wr* bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(nic->PostRecv(qp, &wr, &bad), 0);
  }
  // One signaled WR `op` of kLen bytes between `local` (of `lmr`) and, for
  // an RDMA op, `remote` (of rkey `rkey`).
  void Post(ibv_wr_opcode op, uint64_t wr_id, char* local, const ibv_mr* lmr,
            const char* remote = nullptr, uint32_t rkey = 0,
            uint32_t imm = 0) {
    ibv_sge sge = {reinterpret_cast<uintptr_t>(local),
                   static_cast<uint32_t>(kLen), lmr->lkey};
    ibv_send_wr wr;
    ibv_send_wr* bad = nullptr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = imm;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(remote);
    wr.wr.rdma.rkey = rkey;
    ASSERT_EQ(nic->PostSend(qp, &wr, &bad), 0);
  }
  // A SEND of the whole of src.
  void Send(uint64_t wr_id) { Post(IBV_WR_SEND, wr_id, src.data(), smr); }
  void WriteWithImm(const Side& to, uint64_t wr_id, uint32_t rkey_xor = 0) {
    Post(IBV_WR_RDMA_WRITE_WITH_IMM, wr_id, src.data(), smr, to.dst.data(),
         to.dmr->rkey ^ rkey_xor,
         htonl(0xabcd0000u | static_cast<uint32_t>(wr_id)));
  }
  // An RDMA READ of the whole of to.src into dst.
  void Read(const Side& to, uint64_t wr_id) {
    Post(IBV_WR_RDMA_READ, wr_id, dst.data(), dmr, to.src.data(),
         to.rmr->rkey);
  }
  ibv_wc Poll() {
    ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    for (int i = 0; i < 200000; ++i) {  // 2 s at most
      if (nic->PollCq(cq, 1, &wc) == 1) return wc;
      if (i > 1000) usleep(10);
    }
    ADD_FAILURE() << "no completion\n" << nic->DebugString();
    return wc;
  }

  FakeNic* nic;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<char> src, dst;
  ibv_mr* smr = nullptr;
  ibv_mr* dmr = nullptr;
  ibv_mr* rmr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
};

FakeNicConfig WithPersonality(Personality p) {
  FakeNicConfig config;
  config.personality = std::move(p);
  return config;
}

// A NIC that makes progress on its own, as the drop-in libibverbs's does.
std::unique_ptr<FakeNic> Started(FakeNicConfig config = FakeNicConfig()) {
  auto nic = std::make_unique<FakeNic>(std::move(config));
  nic->StartBackgroundProgress();
  return nic;
}

ibv_gid Gid(FakeNic* nic, ibv_context* ctx) {
  ibv_gid_entry entry;
  EXPECT_EQ(nic->QueryGid(ctx, 1, 0, &entry), 0);
  return entry.gid;
}

TEST(FakeNicVerbsTest, SpecPortIsInfiniBandWithALidAndALinkLocalGid) {
  FakeNic nic;
  std::vector<ibv_context*> contexts;
  ASSERT_EQ(nic.ListDevices(&contexts), 0);
  ASSERT_EQ(contexts.size(), 1u);
  EXPECT_STREQ(contexts[0]->device->name, "fake0");
  ibv_port_attr port;
  ASSERT_EQ(nic.QueryPort(contexts[0], 1, &port), 0);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(port.lid, 1);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(nic.QueryPort(contexts[0], 2, &port), EINVAL);
  ibv_gid_entry entry;
  ASSERT_EQ(nic.QueryGid(contexts[0], 1, 0, &entry), 0);
  EXPECT_EQ(entry.gid.raw[0], 0xfe);
  EXPECT_EQ(entry.gid.raw[1], 0x80);
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_IB);
  EXPECT_EQ(nic.QueryGid(contexts[0], 1, 1, &entry), EINVAL);  // table of 1
  ibv_device_attr attr;
  ASSERT_EQ(nic.QueryDevice(contexts[0], &attr), 0);
  EXPECT_NE(attr.node_guid, 0u);
  EXPECT_EQ(memcmp(&entry.gid.raw[8], &attr.node_guid, 8), 0);
}

TEST(FakeNicVerbsTest, RxePortIsRoceWithAnIpv4MappedRoceV2Gid) {
  FakeNic nic(WithPersonality(Personality::Rxe()));
  std::vector<ibv_context*> contexts;
  ASSERT_EQ(nic.ListDevices(&contexts), 0);
  ibv_port_attr port;
  ASSERT_EQ(nic.QueryPort(contexts[0], 1, &port), 0);
  EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.lid, 0);
  EXPECT_EQ(port.gid_tbl_len, 1024);
  ibv_gid_entry entry;
  ASSERT_EQ(nic.QueryGid(contexts[0], 1, 0, &entry), 0);
  const uint8_t want[16] = {0, 0, 0,    0,    0,   0, 0, 0,
                            0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(memcmp(entry.gid.raw, want, 16), 0);
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(nic.QueryGid(contexts[0], 1, 5, &entry), ENODATA);    // empty
  EXPECT_EQ(nic.QueryGid(contexts[0], 1, 1024, &entry), EINVAL);  // past it
}

TEST(FakeNicVerbsTest, TwoQpsConnectedByHandWriteWithImmediate) {
  auto nic = Started();
  Side a(nic.get()), b(nic.get());
  const uint16_t lid = a.Port().lid;
  ASSERT_EQ(a.Connect(b.qp->qp_num, lid, nullptr), 0);
  ASSERT_EQ(b.Connect(a.qp->qp_num, lid, nullptr), 0);
  b.PostRecv(7);
  a.WriteWithImm(b, 1);
  ibv_wc wc = a.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  wc = b.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xabcd0001u);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(a.src, b.dst);
}

TEST(FakeNicVerbsTest, RoceAddressVectorWithoutGrhIsEinvalAtRtr) {
  auto nic = Started(WithPersonality(Personality::Rxe()));
  Side a(nic.get()), b(nic.get());
  EXPECT_EQ(a.Connect(b.qp->qp_num, 0, nullptr), EINVAL);
  const ibv_gid gid = Gid(nic.get(), a.ctx);
  // The QP stayed in INIT; with a GRH the same RTR is taken.
  EXPECT_EQ(a.Connect(b.qp->qp_num, 0, &gid), 0);
}

TEST(FakeNicVerbsTest, AWrongDlidReachesNobodyAndTheWriteExhaustsItsRetries) {
  auto nic = Started();
  Side a(nic.get()), b(nic.get());
  ASSERT_EQ(a.Connect(b.qp->qp_num, /*dlid=*/9, nullptr), 0);
  ASSERT_EQ(b.Connect(a.qp->qp_num, a.Port().lid, nullptr), 0);
  b.PostRecv(7);
  a.WriteWithImm(b, 1);
  const ibv_wc wc = a.Poll();
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_NE(a.src, b.dst);
}

TEST(FakeNicVerbsTest, AQpWhosePeerIsDestroyedReachesNobody) {
  auto nic = Started();
  auto a = std::make_unique<Side>(nic.get());
  auto b = std::make_unique<Side>(nic.get());
  const uint16_t lid = a->Port().lid;
  // b names a, a names nobody: destroying a must not leave b pointing at it.
  ASSERT_EQ(a->Connect(0xabcdef, lid, nullptr), 0);
  ASSERT_EQ(b->Connect(a->qp->qp_num, lid, nullptr), 0);
  a.reset();
  b->WriteWithImm(*b, 1);
  EXPECT_EQ(b->Poll().status, IBV_WC_RETRY_EXC_ERR);
}

TEST(FakeNicVerbsTest, AWrongDgidReachesNobody) {
  auto nic = Started(WithPersonality(Personality::Rxe()));
  Side a(nic.get()), b(nic.get());
  ibv_gid elsewhere = Gid(nic.get(), a.ctx);
  elsewhere.raw[15] ^= 1;  // 127.0.0.0
  // retry_cnt 6: with 7 rxe would retry for ever (see below).
  ASSERT_EQ(a.Connect(b.qp->qp_num, 0, &elsewhere, /*timeout=*/8,
                      /*retry_cnt=*/6),
            0);
  a.WriteWithImm(b, 1);
  EXPECT_EQ(a.Poll().status, IBV_WC_RETRY_EXC_ERR);
}

// A responder not yet RTR drops the request (rxe_recv.c check_type_state);
// the requester's transport timer sends it again, and once the responder
// is RTR it lands: a program that moves its QPs out of order still works,
// as on rxe (timeout 12: 16.8 ms a try, retry_cnt 7).
TEST(FakeNicVerbsTest, ARequestToAPeerNotYetRtrLandsWhenTheTimerSendsItAgain) {
  auto nic = Started();
  Side a(nic.get()), b(nic.get());
  const uint16_t lid = a.Port().lid;
  ASSERT_EQ(a.Connect(b.qp->qp_num, lid, nullptr, /*timeout=*/12), 0);
  b.Init();
  b.PostRecv(7);
  a.WriteWithImm(b, 1);
  usleep(5000);  // dropped by b, in INIT
  ibv_wc wc;
  ASSERT_EQ(nic->PollCq(a.cq, 1, &wc), 0) << "the dropped request completed";
  EXPECT_NE(a.src, b.dst);
  ASSERT_EQ(b.Connect(a.qp->qp_num, lid, nullptr), 0);
  wc = a.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 1u);
  wc = b.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(a.src, b.dst);
}

// rxe counts retry_cnt down only when it is not 7 (rxe_comp.c
// COMPST_ERROR_RETRY): on the rxe personality a QP with retry_cnt 7 sends
// an unanswered request again for ever, one with 6 gives up after 7
// timeouts (timeout 8: 1.05 ms each); the spec personality gives up
// after 8 with retry_cnt 7.
TEST(FakeNicVerbsTest, RxeRetriesForEverWithRetryCountSeven) {
  for (const bool rxe : {true, false}) {
    for (const uint8_t retry_cnt : {7, 6}) {
      SCOPED_TRACE(std::string(rxe ? "rxe" : "spec") + " retry_cnt " +
                   std::to_string(retry_cnt));
      auto nic = Started(WithPersonality(rxe ? Personality::Rxe()
                                             : Personality::Spec()));
      Side a(nic.get()), b(nic.get());
      // Nobody: a GID nobody has on RoCE, a LID nobody has on InfiniBand.
      ibv_gid nobody = Gid(nic.get(), a.ctx);
      nobody.raw[15] ^= 1;
      ASSERT_EQ(a.Connect(b.qp->qp_num, rxe ? 0 : 9, rxe ? &nobody : nullptr,
                          /*timeout=*/8, retry_cnt),
                0);
      a.WriteWithImm(b, 1);
      ibv_wc wc;
      int polled = 0;
      for (int i = 0; i < 60 && polled == 0; ++i) {  // 60 ms: 57 timeouts
        polled = nic->PollCq(a.cq, 1, &wc);
        usleep(1000);
      }
      if (rxe && retry_cnt == 7) {
        EXPECT_EQ(polled, 0) << "rxe gave up on retry_cnt 7";
      } else {
        ASSERT_EQ(polled, 1);
        EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
      }
    }
  }
}

// Unreliable Connected (fake_nic_unreliable.cc; recorded on rxe by
// verbs_dropin/testdata/uc_verbs.c): a write with imm lands and both sides
// complete; one with a bad rkey completes at the requester all the same,
// the responder drops it and keeps its receive for the next message, and
// neither QP leaves RTS.
TEST(FakeNicVerbsTest, UnreliableConnectedLandsOrDropsWithoutAnAnswer) {
  auto nic = Started();
  Side a(nic.get(), IBV_QPT_UC), b(nic.get(), IBV_QPT_UC);
  const uint16_t lid = a.Port().lid;
  // RC's attributes are refused: UC has no timers or read depths.
  EXPECT_EQ(a.Connect(b.qp->qp_num, lid, nullptr), EINVAL);
  ASSERT_EQ(a.ConnectUc(b.qp->qp_num, lid), 0);
  ASSERT_EQ(b.ConnectUc(a.qp->qp_num, lid), 0);
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(nic->QueryQp(a.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(init.qp_type, IBV_QPT_UC);

  b.PostRecv(7);
  a.WriteWithImm(b, 1, /*rkey_xor=*/0x5a5a);
  ibv_wc wc = a.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);  // nothing comes back to say no
  EXPECT_EQ(wc.wr_id, 1u);
  usleep(20000);
  ASSERT_EQ(nic->PollCq(b.cq, 1, &wc), 0) << "the dropped write completed";
  EXPECT_NE(a.src, b.dst);

  a.WriteWithImm(b, 2);
  EXPECT_EQ(a.Poll().status, IBV_WC_SUCCESS);
  wc = b.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);  // the receive the dropped write left
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(a.src, b.dst);
  for (Side* side : {&a, &b}) {
    ASSERT_EQ(nic->QueryQp(side->qp, &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  }
}

TEST(FakeNicVerbsTest, ABadRkeyIsARemoteAccessErrorOnBothSides) {
  auto nic = Started();
  Side a(nic.get()), b(nic.get());
  const uint16_t lid = a.Port().lid;
  ASSERT_EQ(a.Connect(b.qp->qp_num, lid, nullptr), 0);
  ASSERT_EQ(b.Connect(a.qp->qp_num, lid, nullptr), 0);
  b.PostRecv(7);
  a.WriteWithImm(b, 1, /*rkey_xor=*/0x5a5a);
  EXPECT_EQ(a.Poll().status, IBV_WC_REM_ACCESS_ERR);
}

// A program that spins on ibv_poll_cq without pause while its request goes
// unanswered still gets its RETRY_EXC_ERR when the timeouts run out: the
// NIC's own thread fires due timers even while a poller drives the rest.
// (It had stood aside for as long as anyone polled: on the rxe
// personality no completion came in 20 s, where timeout 8 and retry_cnt 2
// make ~3 ms.)
TEST(FakeNicVerbsTest, ASpinningPollerSeesItsTransportTimeout) {
  for (const bool rxe : {true, false}) {
    auto nic = Started(rxe ? WithPersonality(Personality::Rxe())
                           : FakeNicConfig());
    Side a(nic.get());
    const ibv_gid gid = Gid(nic.get(), a.ctx);
    ASSERT_EQ(a.Connect(/*nobody=*/0x123456, a.Port().lid,
                        rxe ? &gid : nullptr, /*timeout=*/8,
                        /*retry_cnt=*/2),
              0);
    a.WriteWithImm(a, 1);
    ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    // (A hang guard, not a speed goal: 300 times what is due.)
    const auto start = std::chrono::steady_clock::now();
    while (nic->PollCq(a.cq, 1, &wc) == 0 &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) {
    }
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR)
        << (rxe ? "rxe" : "spec") << ": nothing in "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
               .count()
        << " s";
  }
}

// a (timeout 18: 1.07 s, outlasting the RNR wait, so it parks rather than
// retransmits) SENDs to b, which has no receive and asks for the longest
// RNR wait (min_rnr_timer 0: 655.36 ms, IB spec table 45). Once a's WR is
// parked on b's RNR NAK, b changes (RTS to RTS, its access flags): the WR
// is resent at the RNR timer's next tick (rxe_comp.c rnr_nak_timer), NAKed
// again as no receive came yet, and then, a receive posted, it completes.
// Returns the time between the two RNR NAKs.
std::chrono::duration<double> ResendAfterChangeGap(Side& a, Side& b) {
  ibv_qp_attr m;
  memset(&m, 0, sizeof(m));
  m.qp_state = IBV_QPS_RTS;
  m.min_rnr_timer = 0;
  EXPECT_EQ(b.nic->ModifyQp(b.qp, &m, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER),
            0);
  std::mutex mu;
  std::vector<std::chrono::steady_clock::time_point> naks;
  const int watch = a.nic->AddObserver([&](const FakeNicEvent& event) {
    if (event.kind != FakeNicEvent::Kind::kRnrNak) return;
    std::lock_guard<std::mutex> lock(mu);
    naks.push_back(std::chrono::steady_clock::now());
  });
  auto nak_count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return naks.size();
  };
  a.Send(1);
  for (int i = 0; i < 30000 && nak_count() < 1; ++i) usleep(100);
  memset(&m, 0, sizeof(m));
  m.qp_state = IBV_QPS_RTS;
  m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(b.nic->ModifyQp(b.qp, &m, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS),
            0);
  for (int i = 0; i < 30000 && nak_count() < 2; ++i) usleep(100);
  a.nic->RemoveObserver(watch);
  b.PostRecvIntoDst(7);
  EXPECT_EQ(a.Poll().status, IBV_WC_SUCCESS);
  EXPECT_EQ(b.Poll().status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.src, b.dst);
  std::lock_guard<std::mutex> lock(mu);
  if (naks.size() < 2) {
    ADD_FAILURE() << naks.size() << " RNR NAK(s) in 3 s, 2 wanted";
    return std::chrono::duration<double>(0);
  }
  return naks[1] - naks[0];
}

// A WR parked on an RNR NAK (rnr_retry 7) sees a change of its responder
// at the RNR timer's next tick, not at once, as on rxe: so a program that
// moves its responder through RESET, INIT and RTR to RTS is answered
// halfway only when a tick falls inside those calls. (The fake resent at
// once, and then every retransmit timeout, 1.05 ms for timeout 8 where
// rxe's jiffy is 4 ms: hostile_verbs's reset_mid_send_sq0_rq3_retry7 got
// its reconnect NAKed into ERR between RTR and RTS, RTS EPERM, under
// load.) The bound is a floor only, so load cannot fail it.
TEST(FakeNicVerbsTest, AParkedWrSeesItsResponderChangeAtTheRnrTimersTick) {
  for (const bool rxe : {true, false}) {
    SCOPED_TRACE(rxe ? "rxe" : "spec");
    auto nic = Started(rxe ? WithPersonality(Personality::Rxe())
                           : FakeNicConfig());
    Side a(nic.get()), b(nic.get());
    const ibv_gid gid = Gid(nic.get(), a.ctx);
    const ibv_gid* dgid = rxe ? &gid : nullptr;
    ASSERT_EQ(a.Connect(b.qp->qp_num, a.Port().lid, dgid, /*timeout=*/18,
                        /*retry_cnt=*/6),
              0);
    ASSERT_EQ(b.Connect(a.qp->qp_num, a.Port().lid, dgid), 0);
    EXPECT_GE(ResendAfterChangeGap(a, b).count(), 0.6);
  }
}

// What became of a write with imm whose responder was reset mid-message.
struct AfterReset {
  ibv_wc_status write = IBV_WC_GENERAL_ERR;
  bool received = false;  // b's receive completed (any status)
  ibv_wc_status receive = IBV_WC_GENERAL_ERR;
  bool last_landed = false;
  ibv_qp_state responder = IBV_QPS_RESET;
};

// a (already connected to b, sq_psn 0) writes 8 packets of 1 KiB with imm
// to b, which has no receive: LAST is RNR NAKed (rnr_retry 7). b is then
// reset and connected again to a expecting PSN `rq_psn`, and posts a
// receive. As hostile_verbs.c's reset_mid_message cases, which rxe
// answered (hostile_verbs.rxe.txt): by rq_psn against the message's PSNs
// 0 (FIRST) .. 7 (LAST). With `send`, the message is a SEND (its FIRST
// RNR NAKed, nothing landed before the reset; the receive posted after it
// takes the message into dst): the reset_mid_send cases.
AfterReset ResetMidMessage(Side& a, Side& b, uint16_t b_to_a_lid,
                           uint32_t rq_psn, bool send = false) {
  AfterReset out;
  // Waits for the RNR NAK as a's NIC records it (b's buffer is the NIC's
  // to write until then: reading it would race).
  std::atomic<int> rnr_naks{0};
  const int watch = a.nic->AddObserver([&](const FakeNicEvent& event) {
    if (event.kind == FakeNicEvent::Kind::kRnrNak) ++rnr_naks;
  });
  if (send) {
    a.Send(1);
  } else {
    a.WriteWithImm(b, 1);
  }
  for (int i = 0; i < 20000 && rnr_naks == 0; ++i) usleep(100);
  a.nic->RemoveObserver(watch);
  EXPECT_GT(rnr_naks.load(), 0) << "the message was not RNR NAKed";
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  // (b's NIC wrote under its mutex, which QueryQp takes: the bytes before
  // LAST are safe to read after it.)
  EXPECT_EQ(b.nic->QueryQp(b.qp, &attr, IBV_QP_STATE, &init), 0);
  if (send) {
    EXPECT_EQ(b.dst[0], 0) << "a SEND landed before its receive";
  } else {
    EXPECT_EQ(memcmp(a.src.data(), b.dst.data(), kLen - 1024), 0)
        << "the packets before LAST did not land";
  }
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(b.nic->ModifyQp(b.qp, &attr, IBV_QP_STATE), 0);
  b.Init();
  attr = Side::RtrAttr(a.qp->qp_num, b_to_a_lid, nullptr);
  attr.rq_psn = rq_psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 1;
  EXPECT_EQ(b.nic->ModifyQp(b.qp, &attr,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC |
                                IBV_QP_MIN_RNR_TIMER),
            0);
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  // (A responder answers in RTR already: the packet sent again may have
  // sent it to ERR before this RTS, which ERR refuses.)
  const int rts = b.nic->ModifyQp(b.qp, &attr,
                                  IBV_QP_STATE | IBV_QP_TIMEOUT |
                                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rts != 0) {
    EXPECT_EQ(b.nic->QueryQp(b.qp, &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_ERR) << "RTS refused: " << rts;
  }
  if (send) {
    b.PostRecvIntoDst(7);
  } else {
    b.PostRecv(7);
  }
  out.write = a.Poll().status;
  ibv_wc wc;
  for (int i = 0; i < 200 && !out.received; ++i) {
    out.received = b.nic->PollCq(b.cq, 1, &wc) == 1;
    if (!out.received) usleep(1000);
  }
  out.receive = wc.status;
  EXPECT_EQ(b.nic->QueryQp(b.qp, &attr, IBV_QP_STATE, &init), 0);
  out.responder = attr.qp_state;
  out.last_landed = b.dst[kLen - 1] != 0;  // after b's mutex (QueryQp)
  if (out.write == IBV_WC_SUCCESS && out.responder == IBV_QPS_RTS) {
    // The message was taken: both sides' PSNs moved past it, so the next
    // one is taken too.
    b.PostRecv(8);
    a.WriteWithImm(b, 2);
    EXPECT_EQ(a.Poll().status, IBV_WC_SUCCESS) << "the message after it";
    EXPECT_EQ(b.Poll().status, IBV_WC_SUCCESS);
  }
  return out;
}

bool operator==(const AfterReset& x, const AfterReset& y) {
  return x.write == y.write && x.received == y.received &&
         (!x.received || x.receive == y.receive) &&
         x.last_landed == y.last_landed && x.responder == y.responder;
}
std::ostream& operator<<(std::ostream& os, const AfterReset& r) {
  return os << "write " << ibv_wc_status_str(r.write) << ", receive "
            << (r.received ? ibv_wc_status_str(r.receive) : "none")
            << ", LAST " << (r.last_landed ? "landed" : "not landed")
            << ", responder state " << r.responder;
}

// What rxe answered (hostile_verbs.rxe.txt), by rq_psn against the
// message's PSNs 0 (FIRST) .. 7 (LAST).
struct ResetCase {
  uint32_t rq_psn;
  AfterReset want;
};
const ResetCase kResetCases[] = {
    // The message's first PSN: a PSN sequence NAK at 0, the whole message
    // sent again.
    {0, {IBV_WC_SUCCESS, true, IBV_WC_SUCCESS, true, IBV_QPS_RTS}},
    // LAST's own: a LAST without FIRST, NAK invalid request.
    {7, {IBV_WC_REM_INV_REQ_ERR, true, IBV_WC_WR_FLUSH_ERR, false,
         IBV_QPS_ERR}},
    // A MIDDLE's: the retries run out, the responder goes to ERR.
    {3, {IBV_WC_RETRY_EXC_ERR, true, IBV_WC_WR_FLUSH_ERR, false,
         IBV_QPS_ERR}},
    // Past the message: out of sequence, the retries run out, the
    // responder untouched, its receive still posted.
    {100, {IBV_WC_RETRY_EXC_ERR, false, IBV_WC_SUCCESS, false, IBV_QPS_RTS}},
};

// What rxe answered for a SEND of 8 packets whose FIRST was RNR NAKed
// (hostile_verbs.rxe.txt, reset_mid_send_*): the whole message comes
// again from FIRST, a new request to the reset responder
// (FakeNic::CheckRequestPsn).
const ResetCase kSendResetCases[] = {
    // FIRST in sequence: taken as a new message.
    {0, {IBV_WC_SUCCESS, true, IBV_WC_SUCCESS, true, IBV_QPS_RTS}},
    // A MIDDLE's: it has no FIRST (the ones before are duplicates), NAK
    // invalid request, the responder to ERR.
    {3, {IBV_WC_REM_INV_REQ_ERR, true, IBV_WC_WR_FLUSH_ERR, false,
         IBV_QPS_ERR}},
    // LAST's: the same (rxe_resp.c class C; on rxe a race, see
    // FakeNic::CheckRequestPsn).
    {7, {IBV_WC_REM_INV_REQ_ERR, true, IBV_WC_WR_FLUSH_ERR, false,
         IBV_QPS_ERR}},
    // Past the message: all duplicates, nothing answers.
    {100, {IBV_WC_RETRY_EXC_ERR, false, IBV_WC_SUCCESS, false, IBV_QPS_RTS}},
};

// Each case on a fresh pair in one process: a's message (a write with imm,
// or with `send` a SEND) waits on b's RNR NAK while b is reset.
template <size_t N>
void ExpectResetCasesInOneProcess(const ResetCase (&cases)[N], bool send) {
  for (const ResetCase& c : cases) {
    SCOPED_TRACE("rq_psn " + std::to_string(c.rq_psn));
    auto nic = Started();
    Side a(nic.get()), b(nic.get());
    const uint16_t lid = a.Port().lid;
    // (retry_cnt 6: the timer may spend retries while b is reset, before
    // the sequence NAK spends one.)
    ASSERT_EQ(a.Connect(b.qp->qp_num, lid, nullptr, /*timeout=*/8,
                        /*retry_cnt=*/6),
              0);
    ASSERT_EQ(b.Connect(a.qp->qp_num, lid, nullptr), 0);
    EXPECT_EQ(ResetMidMessage(a, b, lid, c.rq_psn, send), c.want);
  }
}

TEST(FakeNicVerbsTest, ASendResentToAResponderResetSinceAnswersByItsNewPsn) {
  ExpectResetCasesInOneProcess(kSendResetCases, /*send=*/true);
}

TEST(FakeNicVerbsTest, AResponderResetMidMessageAnswersByItsNewPsn) {
  ExpectResetCasesInOneProcess(kResetCases, /*send=*/false);
}

// A requester whose sq_psn is not the PSN its responder expects (rq_psn),
// as psn_verbs.c asked rxe (psn_verbs.rxe.txt): a's one message of 8
// packets of 1 KiB to b (a receive posted on b for a SEND or a write with
// imm), what became of it, of b's receive and of b.
enum class PsnOp { kWriteWithImm, kSend, kRead };
struct PsnOutcome {
  ibv_wc_status wr = IBV_WC_GENERAL_ERR;
  bool received = false;  // b's receive completed (any status)
  ibv_wc_status receive = IBV_WC_GENERAL_ERR;
  bool landed = false;  // the message's bytes reached the far end
  ibv_qp_state responder = IBV_QPS_RESET;
};
bool operator==(const PsnOutcome& x, const PsnOutcome& y) {
  return x.wr == y.wr && x.received == y.received &&
         (!x.received || x.receive == y.receive) && x.landed == y.landed &&
         x.responder == y.responder;
}
std::ostream& operator<<(std::ostream& os, const PsnOutcome& r) {
  return os << "wr " << ibv_wc_status_str(r.wr) << ", receive "
            << (r.received ? ibv_wc_status_str(r.receive) : "none") << ", "
            << (r.landed ? "landed" : "nothing landed")
            << ", responder state " << r.responder;
}
struct PsnCase {
  PsnOp op;
  uint32_t rq_psn, sq_psn;
  PsnOutcome want;
};
constexpr PsnOutcome kTaken{IBV_WC_SUCCESS, true, IBV_WC_SUCCESS, true,
                            IBV_QPS_RTS};
constexpr PsnOutcome kRetriesRunOut{IBV_WC_RETRY_EXC_ERR, false,
                                    IBV_WC_SUCCESS, false, IBV_QPS_RTS};
constexpr PsnOutcome kNoFirst{IBV_WC_REM_INV_REQ_ERR, true,
                              IBV_WC_WR_FLUSH_ERR, false, IBV_QPS_ERR};
const PsnCase kPsnCases[] = {
    {PsnOp::kWriteWithImm, 1000, 1000, kTaken},
    // Ahead of the responder's PSN: NAKed once, ignored, then silence.
    {PsnOp::kWriteWithImm, 1000, 1001, kRetriesRunOut},
    {PsnOp::kSend, 1000, 1100, kRetriesRunOut},
    // Wholly behind: the duplicate's ACK (at PSN 0xffffff on a new QP)
    // is before the message, ignored.
    {PsnOp::kWriteWithImm, 1000, 900, kRetriesRunOut},
    // Reaching the expected PSN at a MIDDLE, or at LAST.
    {PsnOp::kWriteWithImm, 1000, 997, kNoFirst},
    {PsnOp::kSend, 1000, 993, kNoFirst},
    // Wholly behind where 0xffffff is past LAST: the duplicate's ACK
    // completes the WR, nothing executed.
    {PsnOp::kWriteWithImm, 0x900000, 0x900000 - 100,
     {IBV_WC_SUCCESS, false, IBV_WC_SUCCESS, false, IBV_QPS_RTS}},
    {PsnOp::kSend, 0x900000, 0x900000 - 3, kNoFirst},
    // Across the top of the PSN space: 0xfffffe, 0xffffff, then 0 (R).
    {PsnOp::kSend, 0, 0xfffffe, kNoFirst},
    {PsnOp::kSend, 0xfffffe, 0, kRetriesRunOut},
    // A READ behind is a duplicate with nothing to replay: dropped.
    {PsnOp::kRead, 1000, 1000,
     {IBV_WC_SUCCESS, false, IBV_WC_SUCCESS, true, IBV_QPS_RTS}},
    {PsnOp::kRead, 1000, 997, kRetriesRunOut},
    {PsnOp::kRead, 1000, 1001, kRetriesRunOut},
};

// a (connected with sq_psn c.sq_psn, timeout 8, retry_cnt 2) sends c.op to
// b (rq_psn c.rq_psn). A message taken moves both PSNs: one more of the
// same is taken too.
PsnOutcome MismatchedPsns(Side& a, Side& b, const PsnCase& c) {
  PsnOutcome out;
  // What a's NIC recorded of the WR's end: the same in one process and
  // across two, which the usage checker's psn reads.
  std::string ended;
  const int watch = a.nic->AddObserver([&](const FakeNicEvent& event) {
    if (event.kind == FakeNicEvent::Kind::kExecute && event.wr_id == 1 &&
        event.qp_num == a.qp->qp_num) {
      ended = event.text;
    }
  });
  if (c.op != PsnOp::kRead) b.PostRecvIntoDst(7);
  if (c.op == PsnOp::kSend) {
    a.Send(1);
  } else if (c.op == PsnOp::kWriteWithImm) {
    a.WriteWithImm(b, 1);
  } else {
    a.Read(b, 1);
  }
  out.wr = a.Poll().status;
  a.nic->RemoveObserver(watch);
  EXPECT_EQ(FakeNic::OutOfPsnSequence(ended), c.rq_psn != c.sq_psn)
      << "recorded: " << ended;
  ibv_wc wc;
  for (int i = 0; i < 50 && c.op != PsnOp::kRead && !out.received; ++i) {
    out.received = b.nic->PollCq(b.cq, 1, &wc) == 1;
    if (!out.received) usleep(1000);
  }
  out.receive = wc.status;
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  EXPECT_EQ(b.nic->QueryQp(b.qp, &attr, IBV_QP_STATE, &init), 0);
  out.responder = attr.qp_state;
  // (After b's mutex, QueryQp: the bytes are safe to read.)
  out.landed = c.op == PsnOp::kRead ? a.dst == b.src : a.src == b.dst;
  if (out == kTaken ||
      (c.op == PsnOp::kRead && out.wr == IBV_WC_SUCCESS)) {
    // Both sides' PSNs moved past it (a READ: one per response packet).
    if (c.op != PsnOp::kRead) b.PostRecvIntoDst(8);
    if (c.op == PsnOp::kRead) {
      a.Read(b, 2);
    } else {
      a.WriteWithImm(b, 2);
    }
    EXPECT_EQ(a.Poll().status, IBV_WC_SUCCESS) << "the message after it";
    if (c.op != PsnOp::kRead) {
      EXPECT_EQ(b.Poll().status, IBV_WC_SUCCESS);
    }
  }
  return out;
}

std::string PsnCaseName(const PsnCase& c) {
  return std::string(c.op == PsnOp::kSend         ? "send"
                     : c.op == PsnOp::kWriteWithImm ? "write with imm"
                                                    : "read") +
         " rq_psn " + std::to_string(c.rq_psn) + " sq_psn " +
         std::to_string(c.sq_psn);
}

TEST(FakeNicVerbsTest, ARequestOutOfPsnSequenceIsAnsweredAsRxeAnswersIt) {
  for (const PsnCase& c : kPsnCases) {
    SCOPED_TRACE(PsnCaseName(c));
    auto nic = Started();
    Side a(nic.get()), b(nic.get());
    const uint16_t lid = a.Port().lid;
    ASSERT_EQ(a.Connect(b.qp->qp_num, lid, nullptr, /*timeout=*/8,
                        /*retry_cnt=*/2, /*rq_psn=*/0, c.sq_psn),
              0);
    ASSERT_EQ(b.Connect(a.qp->qp_num, lid, nullptr, 14, 7, c.rq_psn), 0);
    EXPECT_EQ(MismatchedPsns(a, b, c), c.want);
  }
}

TEST(FakeNicVerbsTest, CreateVerbsQpRefusesWhatIsNotModelled) {
  FakeNic nic;
  EXPECT_EQ(nic.DestroyVerbsQp(nullptr), EINVAL);
  std::vector<ibv_context*> contexts;
  ASSERT_EQ(nic.ListDevices(&contexts), 0);
  ibv_pd* pd = nic.AllocPd(contexts[0]);
  ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.qp_type = IBV_QPT_UD;
  errno = 0;
  EXPECT_EQ(nic.CreateVerbsQp(pd, &init), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);  // RC and UC only
  init.qp_type = IBV_QPT_RC;     // but no CQs
  EXPECT_EQ(nic.CreateVerbsQp(pd, &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(nic.DeallocPd(pd), 0);
}

// Two NICs on one fabric, as two processes of ibv_rc_pingpong are: each
// takes a node number, its QP numbers carry it, and a QP's RTR toward the
// other's QP number dials that NIC.
class FakeNicVerbsFabricTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/fake_nic_verbs_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    b_.reset();
    a_.reset();
    nic_b_.reset();
    nic_a_.reset();
    const std::string cmd = "rm -rf " + dir_;
    ASSERT_EQ(system(cmd.c_str()), 0);
  }
  std::unique_ptr<FakeNic> NewNic() {
    FakeNicConfig config;
    config.fabric_dir = dir_;
    auto nic = std::make_unique<FakeNic>(std::move(config));
    nic->StartBackgroundProgress();
    return nic;
  }
  // Two NICs with a QP each, connected both ways; a's transport timer:
  // timeout 12 (16.8 ms a try), retry_cnt 2, unless told otherwise.
  void ConnectTimedPair(uint8_t timeout = 12, uint8_t retry_cnt = 2) {
    nic_a_ = NewNic();
    nic_b_ = NewNic();
    a_ = std::make_unique<Side>(nic_a_.get());
    b_ = std::make_unique<Side>(nic_b_.get());
    ASSERT_EQ(a_->Connect(b_->qp->qp_num, b_->Port().lid, nullptr, timeout,
                          retry_cnt),
              0);
    ASSERT_EQ(b_->Connect(a_->qp->qp_num, a_->Port().lid, nullptr), 0);
  }
  // Each case on a fresh pair of NICs (ConnectTimedPair), as
  // ExpectResetCasesInOneProcess.
  template <size_t N>
  void ExpectResetCases(const ResetCase (&cases)[N], bool send) {
    for (const ResetCase& c : cases) {
      SCOPED_TRACE("rq_psn " + std::to_string(c.rq_psn));
      ASSERT_NO_FATAL_FAILURE(ConnectTimedPair());
      EXPECT_EQ(ResetMidMessage(*a_, *b_, a_->Port().lid, c.rq_psn, send),
                c.want);
      b_.reset();
      a_.reset();
      nic_b_.reset();
      nic_a_.reset();
    }
  }
  std::string dir_;
  // ConnectTimedPair's (sides before their NICs when destroyed).
  std::unique_ptr<FakeNic> nic_a_, nic_b_;
  std::unique_ptr<Side> a_, b_;
};

TEST_F(FakeNicVerbsFabricTest, QpNumbersAndLidsNameTheNodeAndWritesCross) {
  auto nic_a = NewNic();
  auto nic_b = NewNic();
  auto a = std::make_unique<Side>(nic_a.get());
  auto b = std::make_unique<Side>(nic_b.get());
  EXPECT_EQ(a->qp->qp_num >> 16, 1u);
  EXPECT_EQ(b->qp->qp_num >> 16, 2u);
  EXPECT_EQ(a->Port().lid, 1);
  EXPECT_EQ(b->Port().lid, 2);
  ASSERT_EQ(a->Connect(b->qp->qp_num, b->Port().lid, nullptr), 0);
  ASSERT_EQ(b->Connect(a->qp->qp_num, a->Port().lid, nullptr), 0);
  b->PostRecv(7);
  a->PostRecv(8);
  a->WriteWithImm(*b, 1);
  ibv_wc wc = a->Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  wc = b->Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xabcd0001u);
  EXPECT_EQ(a->src, b->dst);
  // And back, on b's own link.
  b->WriteWithImm(*a, 2);
  EXPECT_EQ(b->Poll().status, IBV_WC_SUCCESS);
  wc = a->Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 8u);
  EXPECT_EQ(b->src, a->dst);
  // A bad rkey is refused by the far NIC's responder.
  a->WriteWithImm(*b, 3, 0x5a5a);
  EXPECT_EQ(a->Poll().status, IBV_WC_REM_ACCESS_ERR);
}

// As AParkedWrSeesItsResponderChangeAtTheRnrTimersTick, the responder on
// a NIC of its own: its word that it changed tells the requester to resend
// at its RNR timer's tick (TellRemoteToRetry), not at once.
TEST_F(FakeNicVerbsFabricTest, AParkedWrSeesItsResponderChangeAtTheRnrTimersTick) {
  ConnectTimedPair(/*timeout=*/18, /*retry_cnt=*/6);
  EXPECT_GE(ResendAfterChangeGap(*a_, *b_).count(), 0.6);
}

// As AResponderResetMidMessageAnswersByItsNewPsn, across processes: the
// requester's LAST, RNR NAKed, waits for the peer's word that a receive
// came; the peer's RESET sends that word before it closes the link (the
// requester had waited for ever), and the packet sent again is answered
// by the PSN the new RTR expects.
TEST_F(FakeNicVerbsFabricTest, AResponderResetMidMessageAnswersByItsNewPsn) {
  ExpectResetCases(kResetCases, /*send=*/false);
}

TEST_F(FakeNicVerbsFabricTest,
       ASendResentToAResponderResetSinceAnswersByItsNewPsn) {
  ExpectResetCases(kSendResetCases, /*send=*/true);
}

// As ARequestOutOfPsnSequenceIsAnsweredAsRxeAnswersIt, the responder on a
// NIC of its own (another process): the same responder check, the same
// answers.
TEST_F(FakeNicVerbsFabricTest, ARequestOutOfPsnSequenceIsAnsweredAsRxeAnswersIt) {
  for (const PsnCase& c : kPsnCases) {
    SCOPED_TRACE(PsnCaseName(c));
    nic_a_ = NewNic();
    nic_b_ = NewNic();
    a_ = std::make_unique<Side>(nic_a_.get());
    b_ = std::make_unique<Side>(nic_b_.get());
    ASSERT_EQ(a_->Connect(b_->qp->qp_num, b_->Port().lid, nullptr,
                          /*timeout=*/8, /*retry_cnt=*/2, /*rq_psn=*/0,
                          c.sq_psn),
              0);
    ASSERT_EQ(b_->Connect(a_->qp->qp_num, a_->Port().lid, nullptr, 14, 7,
                          c.rq_psn),
              0);
    EXPECT_EQ(MismatchedPsns(*a_, *b_, c), c.want);
    b_.reset();
    a_.reset();
    nic_b_.reset();
    nic_a_.reset();
  }
}

TEST_F(FakeNicVerbsFabricTest, APeerNicThatIsGoneAnswersNothing) {
  auto nic_a = NewNic();
  auto nic_b = NewNic();
  auto a = std::make_unique<Side>(nic_a.get());
  auto b = std::make_unique<Side>(nic_b.get());
  ASSERT_EQ(a->Connect(b->qp->qp_num, b->Port().lid, nullptr), 0);
  ASSERT_EQ(b->Connect(a->qp->qp_num, a->Port().lid, nullptr), 0);
  b.reset();
  nic_b.reset();           // the peer process exits: its links close
  a->WriteWithImm(*a, 1);  // to any address: nobody answers
  EXPECT_EQ(a->Poll().status, IBV_WC_RETRY_EXC_ERR);
}

// Nobody answers a request to a peer that is gone, and the requester gives
// up only when its transport timer has run out retry_cnt + 1 times: with
// timeout 12 (4.096 us * 2^12 = 16.8 ms) and retry_cnt 2, after 50 ms.
// `a` (timeout 12: 16.8 ms a try; retry_cnt 2) writes to a peer that
// answers nothing: the WR ends in RETRY_EXC_ERR, not before three timeouts
// (a generous 40 ms are checked), and at least three have passed.
void ExpectWriteGivenUpAfterThreeTimeouts(Side* a, uint64_t wr_id) {
  const auto posted = std::chrono::steady_clock::now();
  a->WriteWithImm(*a, wr_id);
  ibv_wc wc;
  while (std::chrono::steady_clock::now() - posted <
         std::chrono::milliseconds(40)) {
    ASSERT_EQ(a->nic->PollCq(a->cq, 1, &wc), 0)
        << "completed too early: " << wc.status << " " << wc.wr_id;
    usleep(1000);
  }
  wc = a->Poll();
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wc.wr_id, wr_id);
  EXPECT_GE(std::chrono::steady_clock::now() - posted,
            std::chrono::microseconds(3 * 4096 * 4096 / 1000));
}

TEST_F(FakeNicVerbsFabricTest, APeerThatIsGoneIsGivenUpOnWhenTimerAndRetriesRunOut) {
  ConnectTimedPair();
  b_.reset();
  nic_b_.reset();
  ExpectWriteGivenUpAfterThreeTimeouts(a_.get(), 1);
  ibv_qp_attr attr;
  ibv_qp_init_attr init;
  ASSERT_EQ(nic_a_->QueryQp(a_->qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
}

// A peer process that destroyed its QP but lives on answers nothing for it
// either: the requester's WR ends when its timer and retries run out, not
// at once (ibv_srq_pingpong's client destroys its QPs while the server's
// last sends, which the server does not wait for, are in flight).
TEST_F(FakeNicVerbsFabricTest, AQpDestroyedInALiveProcessIsGivenUpOnByTheTimer) {
  ConnectTimedPair();
  b_->PostRecv(7);
  a_->WriteWithImm(*b_, 1);
  ASSERT_EQ(a_->Poll().status, IBV_WC_SUCCESS);
  ASSERT_EQ(nic_b_->DestroyVerbsQp(b_->qp), 0);
  b_->qp = nullptr;
  ExpectWriteGivenUpAfterThreeTimeouts(a_.get(), 2);
}

// A UC write with imm crosses to another process's NIC, and the requester
// completes as its packets leave, whether or not the far side took them.
TEST_F(FakeNicVerbsFabricTest, UnreliableConnectedAcrossProcesses) {
  auto nic_a = NewNic();
  auto nic_b = NewNic();
  Side a(nic_a.get(), IBV_QPT_UC), b(nic_b.get(), IBV_QPT_UC);
  ASSERT_EQ(a.ConnectUc(b.qp->qp_num, b.Port().lid), 0);
  ASSERT_EQ(b.ConnectUc(a.qp->qp_num, a.Port().lid), 0);
  b.PostRecv(7);
  a.WriteWithImm(b, 1, /*rkey_xor=*/0x5a5a);  // dropped by b's NIC
  EXPECT_EQ(a.Poll().status, IBV_WC_SUCCESS);
  a.WriteWithImm(b, 2);
  EXPECT_EQ(a.Poll().status, IBV_WC_SUCCESS);
  const ibv_wc wc = b.Poll();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(ntohl(wc.imm_data), 0xabcd0002u);
  EXPECT_EQ(a.src, b.dst);
}

// timeout 0 is infinite (rxe arms no retransmit timer): the write to a peer
// that is gone never completes, and its QP can still be destroyed.
TEST_F(FakeNicVerbsFabricTest, ATimeoutOfZeroWaitsForeverOnAPeerThatIsGone) {
  auto nic_a = NewNic();
  auto nic_b = NewNic();
  auto a = std::make_unique<Side>(nic_a.get());
  auto b = std::make_unique<Side>(nic_b.get());
  ASSERT_EQ(a->Connect(b->qp->qp_num, b->Port().lid, nullptr, /*timeout=*/0,
                       /*retry_cnt=*/0),
            0);
  ASSERT_EQ(b->Connect(a->qp->qp_num, a->Port().lid, nullptr), 0);
  b.reset();
  nic_b.reset();
  a->WriteWithImm(*a, 1);
  ibv_wc wc;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(nic_a->PollCq(a->cq, 1, &wc), 0);
    usleep(2000);
  }
  a.reset();  // the QP goes with its WR still in flight
}

TEST_F(FakeNicVerbsFabricTest, ANodeNumberIsFreeAgainWhenItsNicIsGone) {
  auto nic_a = NewNic();
  auto a = std::make_unique<Side>(nic_a.get());
  EXPECT_EQ(a->qp->qp_num >> 16, 1u);
  a.reset();
  nic_a.reset();
  auto nic_c = NewNic();
  Side c(nic_c.get());
  EXPECT_EQ(c.qp->qp_num >> 16, 1u);
}

}  // namespace
}  // namespace rpma_harness
