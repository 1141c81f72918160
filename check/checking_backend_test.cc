// Each check of the usage checker, both ways: a buggy program it catches and
// the correct version it stays silent on.

#include "check/checking_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "faults/fault_injection.h"
#include "mock/connected_pair.h"
#include "nic/fake_nic.h"
#include "mock/test_dir.h"
#include "rpma/harness.h"

namespace rpma_harness {

// A peer and an MR made by this function, deleted or not.
// Not in the anonymous namespace: reports name it (dladdr sees only
// exported symbols).
void MakePeerAndMr(bool clean_up, rpma_peer** peer_out = nullptr,
                   rpma_mr_local** mr_out = nullptr) {
  ibv_context* ctx = nullptr;
  ASSERT_EQ(
      rpma_utils_get_ibv_context("10.0.0.9", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx),
      0);
  rpma_peer* peer = nullptr;
  ASSERT_EQ(rpma_peer_new(ctx, &peer), 0);
  static char buf[64];
  rpma_mr_local* mr = nullptr;
  ASSERT_EQ(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_WRITE_SRC, &mr),
            0);
  if (clean_up) {
    ASSERT_EQ(rpma_mr_dereg(&mr), 0);
    ASSERT_EQ(rpma_peer_delete(&peer), 0);
  }
  if (peer_out != nullptr) *peer_out = peer;
  if (mr_out != nullptr) *mr_out = mr;
}

// Exported for the same reason.
int PostHugeWriteWithImm(ConnectedPair* pair, size_t len) {
  return rpma_write_with_imm(pair->client(), pair->server_mr_remote(), 0,
                             pair->client_mr(), 0, len,
                             RPMA_F_COMPLETION_ALWAYS, 1, nullptr);
}

namespace {

using ::testing::HasSubstr;

ConnectedPairOptions Checked(bool print = true) {
  ConnectedPairOptions options;
  CheckOptions check;
  check.print = print;
  options.check = check;
  return options;
}

std::string AllFindings(CheckingBackend* checker) {
  std::string out;
  for (const Finding& f : checker->Findings()) {
    out += f.check + ": " + f.what + " (in " + f.where + ")\n";
  }
  return out;
}

// Posts one write with imm and reaps both completions.
void WriteAndReap(ConnectedPair* pair, size_t len,
                  int flags = RPMA_F_COMPLETION_ALWAYS) {
  ASSERT_EQ(pair->WriteWithImm(0, len, 7, flags), 0);
  ibv_wc wc;
  if (flags == RPMA_F_COMPLETION_ALWAYS) {
    ASSERT_EQ(pair->ClientCompletion(&wc), 0);
  }
  ASSERT_EQ(pair->ServerCompletion(&wc), 0);
  ASSERT_EQ(pair->PostServerRecv(), 0);
}

TEST(ParseCheckOptions, NamesStrictAndUnknown) {
  CheckOptions options;
  std::string why;
  EXPECT_TRUE(ParseCheckOptions("length,strict", &options, &why));
  EXPECT_TRUE(options.strict);
  EXPECT_EQ(options.enabled.count("length"), 1u);
  CheckOptions all;
  EXPECT_TRUE(ParseCheckOptions("1", &all, &why));
  EXPECT_TRUE(all.enabled.empty());
  EXPECT_FALSE(ParseCheckOptions("lenght", &all, &why));
  EXPECT_THAT(why, HasSubstr("unknown check 'lenght'"));
}

TEST(ParseCheckOptions, LandingModes) {
  CheckOptions options;
  std::string why;
  EXPECT_TRUE(ParseCheckOptions("landing=pieces,strict", &options, &why));
  EXPECT_TRUE(options.set_landing);
  EXPECT_EQ(options.landing, Landing::kPieces);
  EXPECT_TRUE(options.enabled.empty());  // every check, too
  CheckOptions completion;
  EXPECT_TRUE(ParseCheckOptions("leak,landing=completion", &completion, &why));
  EXPECT_EQ(completion.landing, Landing::kAtCompletion);
  EXPECT_EQ(completion.enabled.count("leak"), 1u);
  CheckOptions none;
  EXPECT_FALSE(none.set_landing);
  EXPECT_FALSE(ParseCheckOptions("landing=sideways", &none, &why));
  EXPECT_THAT(why, HasSubstr("unknown landing mode 'sideways'"));
}

// ---- 3. destination read too early (landing=pieces) ----

constexpr char kFlag = 0x5a;

// A pair whose NIC lands writes in seeded pieces, through the checker's
// option (as RPMA_HARNESS_CHECK=landing=pieces does), with a client buffer
// whose last byte is the "flag" a buggy server spins on.
std::unique_ptr<ConnectedPair> LandingPair(uint64_t seed) {
  ConnectedPairOptions options = Checked();
  options.nic.seed = seed;
  std::string why;
  EXPECT_TRUE(ParseCheckOptions("landing=pieces", &*options.check, &why));
  auto pair = std::make_unique<ConnectedPair>(options);
  EXPECT_TRUE(pair->ok()) << pair->error();
  for (size_t i = 0; i < pair->buffer_size(); ++i) {
    pair->client_buffer()[i] = static_cast<char>(i % 251 + 1);
  }
  pair->client_buffer()[pair->buffer_size() - 1] = kFlag;
  return pair;
}

bool SameBuffers(ConnectedPair* pair) {
  return memcmp(pair->client_buffer(), pair->server_buffer(),
                pair->buffer_size()) == 0;
}

TEST(LandingMode, ServerSpinningOnALastByteFlagReadsTornDataForSomeSeed) {
  uint64_t torn_seed = 0;
  for (uint64_t seed = 1; seed <= 32 && torn_seed == 0; ++seed) {
    auto pair = LandingPair(seed);
    EXPECT_EQ(pair->nic().landing(), Landing::kPieces);
    ASSERT_EQ(pair->WriteWithImm(0, pair->buffer_size(), 7), 0);
    // The bug: the flag is read as "the data is there", no rpma_cq_get_wc.
    for (int step = 0; step < 64 && pair->nic().Step(); ++step) {
      if (pair->server_buffer()[pair->buffer_size() - 1] == kFlag) {
        if (!SameBuffers(pair.get())) torn_seed = seed;
        break;
      }
    }
    ibv_wc wc;
    ASSERT_EQ(pair->ServerCompletion(&wc), 0);
    ASSERT_EQ(pair->ClientCompletion(&wc), 0);
  }
  EXPECT_NE(torn_seed, 0u) << "no seed in 1..32 tore the 4 KiB write";
}

TEST(LandingMode, ServerThatWaitsForTheCompletionReadsWholeDataForEverySeed) {
  for (uint64_t seed = 1; seed <= 32; ++seed) {
    auto pair = LandingPair(seed);
    ASSERT_EQ(pair->WriteWithImm(0, pair->buffer_size(), 7), 0);
    ibv_wc wc;
    ASSERT_EQ(pair->ServerCompletion(&wc), 0);  // rpma_cq_get_wc first
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(SameBuffers(pair.get())) << "seed " << seed;
    ASSERT_EQ(pair->ClientCompletion(&wc), 0);
    EXPECT_EQ(pair->checker()->FindingCount(), 0u)
        << AllFindings(pair->checker());
  }
}

// ---- 1. truncation and impossible ranges ----

TEST(LengthCheck, WriteBeyond32BitsIsReportedWithTheCaller) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  // 4 GiB + 16 B: librpma posts len & 0xffffffff = 16 bytes and returns 0.
  const size_t len = (size_t{1} << 32) + 16;
  EXPECT_EQ(PostHugeWriteWithImm(&pair, len), 0);
  ASSERT_EQ(pair.checker()->FindingCount("length"), 1u)
      << AllFindings(pair.checker());
  Finding f = pair.checker()->Findings()[0];
  EXPECT_THAT(f.what, HasSubstr("rpma_write_with_imm: len 4294967312"));
  EXPECT_THAT(f.what, HasSubstr("moves 16 bytes"));
  EXPECT_THAT(f.where, HasSubstr("PostHugeWriteWithImm"));
}

TEST(LengthCheck, ThirtyTwoBitLengthIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  WriteAndReap(&pair, 16);
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(RemoteRangeCheck, WritePastTheAnnouncedSizeIsReportedAtPost) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  const size_t size = pair.buffer_size();
  EXPECT_EQ(
      rpma_write(pair.client(), pair.server_mr_remote(), size - 8,
                 pair.client_mr(), 0, 16, RPMA_F_COMPLETION_ALWAYS, nullptr),
      0);
  // Reported before the NIC ran (it would be REM_ACCESS_ERR).
  ASSERT_EQ(pair.checker()->FindingCount("remote-range"), 1u);
  EXPECT_THAT(pair.checker()->Findings()[0].what,
              HasSubstr("past the 4096 bytes"));
}

TEST(RemoteRangeCheck, WriteEndingAtTheAnnouncedSizeIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  const size_t size = pair.buffer_size();
  ASSERT_EQ(
      rpma_write(pair.client(), pair.server_mr_remote(), size - 16,
                 pair.client_mr(), 0, 16, RPMA_F_COMPLETION_ALWAYS, nullptr),
      0);
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

// A remote MR of the server's buffer that may be flushed (the pair's is
// WRITE_DST only), through a descriptor as a real client gets it.
struct FlushableRemote {
  rpma_mr_local* local = nullptr;
  rpma_mr_remote* remote = nullptr;
  explicit FlushableRemote(ConnectedPair* pair) {
    EXPECT_EQ(
        rpma_mr_reg(
            pair->server_peer(), pair->server_buffer(), pair->buffer_size(),
            RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
            &local),
        0);
    size_t size = 0;
    EXPECT_EQ(rpma_mr_get_descriptor_size(local, &size), 0);
    std::string desc(size, '\0');
    EXPECT_EQ(rpma_mr_get_descriptor(local, &desc[0]), 0);
    EXPECT_EQ(rpma_mr_remote_from_descriptor(desc.data(), size, &remote), 0);
  }
  ~FlushableRemote() {
    rpma_mr_remote_delete(&remote);
    rpma_mr_dereg(&local);
  }
};

TEST(RemoteRangeCheck, FlushPastTheAnnouncedSize) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  FlushableRemote mr(&pair);
  (void)rpma_flush(pair.client(), mr.remote, pair.buffer_size() - 64, 128,
                   RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
                   nullptr);
  ASSERT_EQ(pair.checker()->FindingCount("remote-range"), 1u)
      << AllFindings(pair.checker());
  EXPECT_THAT(pair.checker()->Findings()[0].what, HasSubstr("rpma_flush"));
  ibv_wc wc;
  (void)pair.ClientCompletion(&wc);
}

TEST(RemoteRangeCheck, FlushInsideTheAnnouncedSizeIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  FlushableRemote mr(&pair);
  ASSERT_EQ(
      rpma_flush(pair.client(), mr.remote, pair.buffer_size() - 64, 64,
                 RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, nullptr),
      0);
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

// ---- 2. source changed in flight ----

TEST(SourceChangedCheck, SourceWrittenBeforeTheCompletionIsReaped) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 64);
  ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);
  pair.client_buffer()[10] = 'b';  // the bug: the WR is still outstanding
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(pair.checker()->FindingCount("source-changed"), 1u)
      << AllFindings(pair.checker());
}

// The "fix:" names the call the program makes: librpma's, or for a verbs
// program (the drop-in libibverbs.so.1) the verbs one.
TEST(SourceChangedCheck, TheFixNamesTheProgramsOwnCall) {
  for (const bool verbs : {false, true}) {
    ConnectedPairOptions options = Checked(/*print=*/false);
    options.check->verbs_program = verbs;
    ConnectedPair pair(options);
    ASSERT_TRUE(pair.ok()) << pair.error();
    std::memset(pair.client_buffer(), 'a', 64);
    ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);
    pair.client_buffer()[10] = 'b';
    ibv_wc wc;
    ASSERT_EQ(pair.ClientCompletion(&wc), 0);
    ASSERT_EQ(pair.checker()->FindingCount("source-changed"), 1u);
    const std::string details = pair.checker()->Findings()[0].details;
    EXPECT_THAT(details, HasSubstr(verbs ? "only after ibv_poll_cq(3)"
                                         : "only after rpma_cq_get_wc(3)"));
  }
}

TEST(SourceChangedCheck, SourceWrittenAfterTheCompletionIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 64);
  ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  pair.client_buffer()[10] = 'b';
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(SourceChangedCheck, UnsignaledWriteIsOutstandingUntilALaterSignaledOne) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_EQ(
      rpma_write(pair.client(), pair.server_mr_remote(), 0, pair.client_mr(), 0,
                 32, RPMA_F_COMPLETION_ON_ERROR, nullptr),
      0);
  pair.nic().RunUntilIdle();
  pair.client_buffer()[0] ^= 1;  // executed, but not known to be complete
  ASSERT_EQ(
      rpma_write(pair.client(), pair.server_mr_remote(), 64, pair.client_mr(),
                 64, 32, RPMA_F_COMPLETION_ALWAYS, nullptr),
      0);
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  EXPECT_EQ(pair.checker()->FindingCount("source-changed"), 1u)
      << AllFindings(pair.checker());
}

TEST(SourceChangedCheck, ChangedBeforeTheNicReadItThePeerGetsTheNewBytes) {
  ConnectedPair pair(Checked(/*print=*/false));
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 64);
  ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);  // posted, not yet executed
  pair.client_buffer()[10] = 'b';
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(pair.checker()->FindingCount("source-changed"), 1u)
      << AllFindings(pair.checker());
  const Finding f = pair.checker()->Findings()[0];
  EXPECT_THAT(f.what, HasSubstr("changed before the NIC read it (the peer "
                                "got the NEW bytes)"));
  EXPECT_THAT(f.details, HasSubstr("changed: bytes [0, 64) of 64"));
  EXPECT_EQ(pair.server_buffer()[10], 'b');  // what the finding says
}

TEST(SourceChangedCheck, ChangedAfterTheNicReadItThePeerGetsTheOldBytes) {
  ConnectedPair pair(Checked(/*print=*/false));
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 64);
  ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);
  pair.nic().RunUntilIdle();  // the NIC read the source
  pair.client_buffer()[10] = 'b';
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(pair.checker()->FindingCount("source-changed"), 1u)
      << AllFindings(pair.checker());
  EXPECT_THAT(pair.checker()->Findings()[0].what,
              HasSubstr("changed after the NIC read it but before its "
                        "completion was reaped (the peer got the OLD bytes; "
                        "on hardware undefined)"));
  EXPECT_EQ(pair.server_buffer()[10], 'a');
}

TEST(SourceChangedCheck, WithoutAnExecutionTapComparesPostWithReap) {
  // The checker's taps go to another (idle) NIC, as over a backend with no
  // execution tap (rdma-core): only post and reap are compared.
  FakeNic elsewhere;
  ConnectedPairOptions options = Checked(/*print=*/false);
  options.check->trace_nic = &elsewhere;
  ConnectedPair pair(options);
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 64);
  ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);
  pair.client_buffer()[10] = 'b';
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(pair.checker()->FindingCount("source-changed"), 1u)
      << AllFindings(pair.checker());
  EXPECT_THAT(pair.checker()->Findings()[0].what,
              HasSubstr("changed between the post and the reaping of its "
                        "completion"));
}

ConnectedPairOptions CheckedMtu1024() {
  ConnectedPairOptions options = Checked(/*print=*/false);
  options.buffer_size = 8192;
  options.nic.caps = FakeDeviceCaps();
  options.nic.caps->active_mtu = IBV_MTU_1024;
  return options;
}

TEST(SourceChangedCheck, MultiPacketWriteNamesThePacketThatChanged) {
  ConnectedPairOptions options = CheckedMtu1024();
  // Prints the example in docs/usage-checker.md, "Reading a report".
  options.check->print = true;
  ConnectedPair pair(options);
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 8192);
  ASSERT_EQ(pair.WriteWithImm(0, 8192, 1), 0);
  pair.client_buffer()[5000] = 'b';  // in packet #4 (bytes 4096-5119)
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(pair.checker()->FindingCount("source-changed"), 1u)
      << AllFindings(pair.checker());
  const Finding f = pair.checker()->Findings()[0];
  EXPECT_THAT(f.what, HasSubstr("before the NIC read it"));
  EXPECT_THAT(f.details, HasSubstr("changed: bytes [4864, 5120) of 8192 "
                                   "(packet #4 of 8, path MTU 1024)"));
}

TEST(SourceChangedCheck, MultiPacketWriteInPiecesUnchangedIsSilent) {
  ConnectedPairOptions options = CheckedMtu1024();
  options.check->set_landing = true;
  options.check->landing = Landing::kPieces;
  ConnectedPair pair(options);
  ASSERT_TRUE(pair.ok()) << pair.error();
  std::memset(pair.client_buffer(), 'a', 8192);
  for (int i = 0; i < 3; ++i) WriteAndReap(&pair, 8192);
  pair.client_buffer()[5000] = 'b';  // after the reap: fine
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

// ---- 4. buffer reuse ----

// The client sends 16 bytes; the server reaps the receive they landed in.
void SendAndReap(ConnectedPair* pair) {
  ASSERT_EQ(rpma_send(pair->client(), pair->client_mr(), 0, 16,
                      RPMA_F_COMPLETION_ALWAYS, nullptr),
            0);
  ibv_wc wc;
  ASSERT_EQ(pair->ServerCompletion(&wc), 0);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(pair->ClientCompletion(&wc), 0);
}

}  // namespace

// recv-written: the program writes into the buffer of an outstanding
// receive. Exported: reports name the post_recv's caller.
int PostRecvIntoTheRecvBuffer(ConnectedPair* pair) {
  return rpma_recv(pair->server(), pair->server_recv_mr(), 0, 64, nullptr);
}

namespace {

TEST(RecvWrittenCheck, CpuWriteBeforeASendLandsIsReportedWithThePost) {
  // Prints the example in docs/usage-checker.md, "Reading a report".
  ConnectedPairOptions options = Checked();
  options.recvs = 0;  // the test posts its own
  ConnectedPair pair(options);
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_EQ(PostRecvIntoTheRecvBuffer(&pair), 0);
  pair.recv_buffer()[40] = 'x';  // the bug: the receive is outstanding
  SendAndReap(&pair);
  ASSERT_EQ(pair.checker()->FindingCount("recv-written"), 1u)
      << AllFindings(pair.checker());
  const Finding f = pair.checker()->Findings()[0];
  EXPECT_THAT(f.what, HasSubstr("wrote into the buffer of an outstanding "
                                "receive (seen before the NIC wrote into it)"));
  EXPECT_THAT(f.details, HasSubstr("changed: bytes [0, 64) of 64"));
  EXPECT_THAT(f.where, HasSubstr("PostRecvIntoTheRecvBuffer"));
}

TEST(RecvWrittenCheck, CpuWriteIntoAWriteWithImmReceiveIsReportedAtTheReap) {
  ConnectedPair pair(Checked(/*print=*/false));
  ASSERT_TRUE(pair.ok()) << pair.error();
  pair.recv_buffer()[3] = 'x';  // the pair's receive is outstanding
  WriteAndReap(&pair, 16);      // the NIC never writes a write-imm receive
  ASSERT_EQ(pair.checker()->FindingCount("recv-written"), 1u)
      << AllFindings(pair.checker());
  EXPECT_THAT(pair.checker()->Findings()[0].what,
              HasSubstr("seen when its completion was reaped"));
}

TEST(RecvWrittenCheck, CpuWriteIntoAReceiveStillPostedAtDestroy) {
  std::shared_ptr<CheckingBackend> checker;
  {
    ConnectedPair pair(Checked(/*print=*/false));
    ASSERT_TRUE(pair.ok()) << pair.error();
    checker = pair.shared_checker();
    pair.recv_buffer()[0] = 'x';
  }  // the pair deletes its connections: the QP goes with its receive
  EXPECT_EQ(checker->FindingCount("recv-written"), 1u)
      << AllFindings(checker.get());
}

TEST(RecvWrittenCheck, CpuWritesAfterEachCompletionAreSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  for (int i = 0; i < 3; ++i) {
    SendAndReap(&pair);
    std::memset(pair.recv_buffer(), 'y', 64);  // its receive completed
    ASSERT_EQ(pair.PostServerRecv(), 0);
    ASSERT_EQ(pair.WriteWithImm(0, 16, 7), 0);
    ibv_wc wc;
    ASSERT_EQ(pair.ClientCompletion(&wc), 0);
    ASSERT_EQ(pair.ServerCompletion(&wc), 0);
    std::memset(pair.recv_buffer(), 'z', 64);  // completed too
    ASSERT_EQ(pair.PostServerRecv(), 0);
  }
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(RecvWrittenCheck, APeersWriteIntoAPostedReceiveBufferIsTheNics) {
  // The server posts a receive over its RDMA-write destination (a program
  // may: a write with imm never touches the receive buffer); the client's
  // writes land there while it is outstanding. The NIC wrote those bytes,
  // not the program: no finding.
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  rpma_mr_local* shared = nullptr;
  ASSERT_EQ(rpma_mr_reg(pair.server_peer(), pair.server_buffer(), 256,
                        RPMA_MR_USAGE_RECV, &shared),
            0);
  ASSERT_EQ(rpma_recv(pair.server(), shared, 0, 256, nullptr), 0);
  std::memset(pair.client_buffer(), 'q', 256);
  WriteAndReap(&pair, 200);  // lands in [0, 200); takes the pair's receive
  ASSERT_EQ(pair.WriteWithImm(0, 64, 2), 0);  // takes the shared receive
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(pair.ServerCompletion(&wc), 0);
  EXPECT_EQ(pair.server_buffer()[100], 'q');
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
  ASSERT_EQ(rpma_mr_dereg(&shared), 0);
}

TEST(OverlapCheck, ReceiveRepostedWhileOutstandingAndASendLands) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  // The pair posted one receive into recv buffer [0, 64); the bug: the
  // same buffer again while the first is outstanding.
  ASSERT_EQ(pair.PostServerRecv(), 0);
  SendAndReap(&pair);
  ASSERT_EQ(pair.checker()->FindingCount("overlap"), 1u)
      << AllFindings(pair.checker());
  EXPECT_THAT(pair.checker()->Findings()[0].details,
              HasSubstr("a SEND of 16 bytes landed"));
}

TEST(OverlapCheck, ReceiveRepostedAfterItsCompletionIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  for (int i = 0; i < 3; ++i) {
    SendAndReap(&pair);
    ASSERT_EQ(pair.PostServerRecv(), 0);
  }
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(OverlapCheck, SharedReceiveBuffersForWritesWithImmAreSilent) {
  // A write with imm consumes a receive but never writes its buffer, so
  // receives sharing one buffer are fine for it.
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_EQ(pair.PostServerRecv(), 0);
  ASSERT_EQ(pair.PostServerRecv(), 0);
  for (int i = 0; i < 3; ++i) WriteAndReap(&pair, 16);
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(OverlapCheck, ReadIntoTheSourceOfAnOutstandingWrite) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  rpma_mr_local* dst = nullptr;
  // The client's buffer is WRITE_SRC only; register it again as READ_DST.
  ASSERT_EQ(rpma_mr_reg(pair.client_peer(), pair.client_buffer(), 256,
                        RPMA_MR_USAGE_READ_DST, &dst),
            0);
  ASSERT_EQ(pair.WriteWithImm(0, 128, 1), 0);
  // The server's MR is WRITE_DST only, so the read will fail at the NIC;
  // the overlap is in the client's own memory, decided at post.
  (void)rpma_read(pair.client(), dst, 64, pair.server_mr_remote(), 0, 64,
                  RPMA_F_COMPLETION_ALWAYS, nullptr);
  EXPECT_EQ(pair.checker()->FindingCount("overlap"), 1u)
      << AllFindings(pair.checker());
  ibv_wc wc;
  while (pair.ClientCompletion(&wc) == 0) {
  }
  rpma_mr_dereg(&dst);
}

// ---- 5. queue hygiene ----

// `n` 8-byte rpma_writes from the client with `flags`, the NIC run after
// each (the fake frees the SQ slot when it executes the WR); false, with a
// failure added, when a post fails.
bool WriteAndRun(ConnectedPair* pair, int n, int flags) {
  for (int i = 0; i < n; ++i) {
    const int ret = rpma_write(pair->client(), pair->server_mr_remote(), 0,
                               pair->client_mr(), 0, 8, flags, nullptr);
    if (ret != 0) {
      ADD_FAILURE() << "rpma_write " << i << " returned " << ret;
      return false;
    }
    pair->nic().RunUntilIdle();
  }
  return true;
}


TEST(SqOverflowCheck, UnsignaledWritesBeyondTheQueueDepth) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  // rpma_conn_cfg's default sq_size is 10. The fake frees a slot when it
  // executes the WR, so every post succeeds here; on mlx5 the 11th fails.
  ASSERT_TRUE(WriteAndRun(&pair, 11, RPMA_F_COMPLETION_ON_ERROR));
  EXPECT_EQ(pair.checker()->FindingCount("sq-overflow"), 1u)
      << AllFindings(pair.checker());
}

TEST(SqOverflowCheck, ASignaledWriteReapedEveryFewIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  for (int i = 0; i < 40; ++i) {
    const bool signal = i % 5 == 4;
    ASSERT_EQ(
        rpma_write(
            pair.client(), pair.server_mr_remote(), 0, pair.client_mr(), 0, 8,
            signal ? RPMA_F_COMPLETION_ALWAYS : RPMA_F_COMPLETION_ON_ERROR,
            nullptr),
        0);
    if (signal) {
      ibv_wc wc;
      ASSERT_EQ(pair.ClientCompletion(&wc), 0);
    }
  }
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(CqOverrunCheck, MoreSignaledWritesThanTheCqHolds) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  // The CQ and the SQ are both 10 deep (rpma_conn_cfg defaults): 11
  // signaled writes without polling.
  ASSERT_TRUE(WriteAndRun(&pair, 11, RPMA_F_COMPLETION_ALWAYS));
  EXPECT_EQ(pair.checker()->FindingCount("cq-overrun"), 1u)
      << AllFindings(pair.checker());
}

// A verbs program's own RC pair (ibv_create_qp, connected with
// ibv_modify_qp, as ibv_rc_pingpong does), made through the checker: its
// QPs are watched as rdma_cm's are.
struct VerbsPair {
  static constexpr uint32_t kDepth = 4;
  // `first_sq_psn`: qps[0]'s sq_psn (both RTRs expect 0).
  explicit VerbsPair(uint32_t first_sq_psn = 0) {
    nic = std::make_shared<FakeNic>();
    CheckOptions options;
    options.print = false;
    options.trace_nic = nic.get();
    options.verbs_program = true;
    checker = std::make_shared<CheckingBackend>(nic, options);
    std::vector<ibv_context*> contexts;
    EXPECT_EQ(checker->ListDevices(&contexts), 0);
    ctx = contexts.at(0);
    pd = checker->AllocPd(ctx);
    mr = checker->RegMr(pd, buf, sizeof(buf),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    cq = checker->CreateCq(ctx, 64, nullptr, nullptr, 0);
    ibv_port_attr port{};
    EXPECT_EQ(checker->QueryPort(ctx, 1, &port), 0);
    for (ibv_qp*& qp : qps) {
      ibv_qp_init_attr init{};
      init.qp_type = IBV_QPT_RC;
      init.send_cq = cq;
      init.recv_cq = cq;
      init.cap.max_send_wr = kDepth;
      init.cap.max_recv_wr = kDepth;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      qp = checker->CreateVerbsQp(pd, &init);
      EXPECT_NE(qp, nullptr);
    }
    for (int i = 0; i < 2; ++i) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      EXPECT_EQ(checker->ModifyQp(qps[i], &a,
                                  IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                0);
      a = ibv_qp_attr{};
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = qps[1 - i]->qp_num;
      a.ah_attr.port_num = 1;
      a.ah_attr.dlid = port.lid;
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 1;
      EXPECT_EQ(checker->ModifyQp(qps[i], &a,
                                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER),
                0);
      a = ibv_qp_attr{};
      a.qp_state = IBV_QPS_RTS;
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 1;
      if (i == 0) a.sq_psn = first_sq_psn;
      EXPECT_EQ(checker->ModifyQp(qps[i], &a,
                                  IBV_QP_STATE | IBV_QP_TIMEOUT |
                                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
                0);
    }
  }
  ~VerbsPair() {
    for (ibv_qp* qp : qps) {
      if (qp != nullptr) {
        EXPECT_EQ(checker->DestroyVerbsQp(qp), 0);
      }
    }
    checker->DestroyCq(cq);
    checker->DeregMr(mr);
    checker->DeallocPd(pd);
  }
  // An 8-byte RDMA WRITE from qps[0] into the second half of buf, the NIC
  // run after it.
  int Write(unsigned int flags) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), 8, mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf + 2048);
    wr.wr.rdma.rkey = mr->rkey;
    ibv_send_wr* bad = nullptr;
    const int ret = checker->PostSend(qps[0], &wr, &bad);
    nic->RunUntilIdle();
    return ret;
  }
  std::shared_ptr<FakeNic> nic;
  std::shared_ptr<CheckingBackend> checker;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qps[2] = {nullptr, nullptr};
  char buf[4096] = {};
};

TEST(SqOverflowCheck, VerbsQpUnsignaledWritesBeyondTheQueueDepth) {
  VerbsPair pair;
  for (uint32_t i = 0; i <= VerbsPair::kDepth; ++i) ASSERT_EQ(pair.Write(0), 0);
  const std::vector<Finding> findings = pair.checker->Findings();
  ASSERT_EQ(pair.checker->FindingCount("sq-overflow"), 1u)
      << AllFindings(pair.checker.get());
  // A verbs program is told the verbs call to fix.
  EXPECT_THAT(findings[0].details, testing::HasSubstr("IBV_SEND_SIGNALED"));
}

TEST(SqOverflowCheck, VerbsQpSignaledEveryFewAndReapedIsSilent) {
  VerbsPair pair;
  for (int i = 0; i < 20; ++i) {
    const bool signal = i % 3 == 2;
    ASSERT_EQ(pair.Write(signal ? IBV_SEND_SIGNALED : 0), 0);
    if (signal) {
      ibv_wc wc{};
      ASSERT_EQ(pair.checker->PollCq(pair.cq, 1, &wc), 1);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
  }
  EXPECT_EQ(pair.checker->FindingCount(), 0u)
      << AllFindings(pair.checker.get());
}

// A verbs pair connected by hand with qps[0]'s sq_psn not the rq_psn its
// peer's RTR set: its write is never answered, and the checker says why at
// the poll that reaps RETRY_EXC_ERR.
TEST(PsnCheck, AWriteFromAPsnItsPeerDoesNotExpect) {
  VerbsPair pair(/*first_sq_psn=*/100);
  ASSERT_EQ(pair.Write(IBV_SEND_SIGNALED), 0);
  EXPECT_EQ(pair.checker->FindingCount("psn"), 0u);  // told at the poll
  ibv_wc wc{};
  ASSERT_EQ(pair.checker->PollCq(pair.cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  ASSERT_EQ(pair.checker->FindingCount("psn"), 1u)
      << AllFindings(pair.checker.get());
  const Finding f = pair.checker->Findings()[0];
  EXPECT_THAT(f.what, testing::HasSubstr("out of PSN sequence"));
  EXPECT_THAT(f.details, testing::HasSubstr("rq_psn"));
}

TEST(PsnCheck, PsnsThatAgreeAreSilent) {
  VerbsPair pair;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(pair.Write(IBV_SEND_SIGNALED), 0);
    ibv_wc wc{};
    ASSERT_EQ(pair.checker->PollCq(pair.cq, 1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(pair.checker->FindingCount(), 0u)
      << AllFindings(pair.checker.get());
}

TEST(RecvWrittenCheck, VerbsQpReceiveWrittenAndStillPostedAtDestroy) {
  // ibv_destroy_qp(3) of a QP with a receive outstanding whose buffer the
  // program wrote meanwhile: reported when the QP goes.
  VerbsPair pair;
  ibv_sge sge{reinterpret_cast<uintptr_t>(pair.buf + 1024), 64,
              pair.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(pair.checker->PostRecv(pair.qps[1], &wr, &bad), 0);
  pair.buf[1024 + 10] = 'x';
  EXPECT_EQ(pair.checker->FindingCount("recv-written"), 0u);
  ASSERT_EQ(pair.checker->DestroyVerbsQp(pair.qps[1]), 0);
  pair.qps[1] = nullptr;
  ASSERT_EQ(pair.checker->FindingCount("recv-written"), 1u)
      << AllFindings(pair.checker.get());
  EXPECT_THAT(pair.checker->Findings()[0].what,
              testing::HasSubstr("destroyed"));
}

TEST(CqOverrunCheck, AnOverrunCqIsExplained) {
  ConnectedPairOptions options = Checked();
  FaultRule rule;
  rule.name = "overrun";
  rule.call = FaultCall::kExecute;
  rule.action = FaultAction::kOverflowCq;
  rule.nth = 1;
  options.faults.push_back(rule);
  ConnectedPair pair(options);
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_EQ(pair.WriteWithImm(0, 8, 1), 0);
  ibv_wc wc;
  EXPECT_NE(pair.ClientCompletion(&wc), 0);
  EXPECT_EQ(pair.checker()->FindingCount("cq-overrun"), 1u)
      << AllFindings(pair.checker());
}

// rxe loses a completion that finds its CQ full and goes on (rxe_cq.c
// rxe_cq_post): no poll fails, so the checker hears of the loss from the
// NIC and reports it at the CQ's next poll -- once, with the lost WR.
// 16 signaled writes on a CQ rxe sizes to 15 (rpma's 10 rounded up).
std::vector<Finding> LostCompletionFindings(CheckingBackend* checker) {
  std::vector<Finding> out;
  for (const Finding& f : checker->Findings()) {
    if (f.check == "cq-overrun" &&
        f.what.find("the NIC lost 1 completion(s)") != std::string::npos) {
      out.push_back(f);
    }
  }
  return out;
}

ConnectedPairOptions CheckedRxe() {
  ConnectedPairOptions options = Checked(/*print=*/false);
  options.nic.personality = Personality::Rxe();
  return options;
}

TEST(CqOverrunCheck, RxeLostCompletionIsReportedAtPoll) {
  ConnectedPair pair(CheckedRxe());
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_TRUE(WriteAndRun(&pair, 16, RPMA_F_COMPLETION_ALWAYS));
  EXPECT_TRUE(LostCompletionFindings(pair.checker()).empty())
      << "reported before the program polled";
  ibv_wc wc;
  for (int i = 0; i < 15; ++i) {
    ASSERT_EQ(pair.ClientCompletion(&wc), 0) << i;
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(pair.ClientCompletion(&wc), RPMA_E_NO_COMPLETION)
      << "rxe's CQ holds 15";
  const std::vector<Finding> lost = LostCompletionFindings(pair.checker());
  ASSERT_EQ(lost.size(), 1u) << AllFindings(pair.checker());
  EXPECT_NE(lost[0].what.find("IBV_WC_SUCCESS"), std::string::npos)
      << lost[0].what;
  EXPECT_NE(lost[0].details.find("rxe_cq_post"), std::string::npos);
}

// The same overrun seen as a program that reads async events sees it:
// IBV_EVENT_CQ_ERR names the CQ (what a real rxe gives over rdma-core).
TEST(CqOverrunCheck, CqErrEventIsReported) {
  ConnectedPair pair(CheckedRxe());
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_TRUE(WriteAndRun(&pair, 16, RPMA_F_COMPLETION_ALWAYS));
  const std::vector<ibv_cq*> cqs = pair.checker()->Cqs();
  ASSERT_FALSE(cqs.empty());
  ibv_async_event event{};
  ASSERT_EQ(pair.checker()->GetAsyncEvent(cqs[0]->context, &event), 0);
  ASSERT_EQ(event.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(event.element.cq->cqe, 15);
  bool found = false;
  for (const Finding& f : pair.checker()->Findings()) {
    found |= f.check == "cq-overrun" &&
             f.what.find("IBV_EVENT_CQ_ERR") != std::string::npos;
  }
  EXPECT_TRUE(found) << AllFindings(pair.checker());
  pair.checker()->AckAsyncEvent(&event);
}

TEST(CqOverrunCheck, PollingAsYouGoIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(
        rpma_write(pair.client(), pair.server_mr_remote(), 0, pair.client_mr(),
                   0, 8, RPMA_F_COMPLETION_ALWAYS, nullptr),
        0);
    ibv_wc wc;
    ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  }
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

// Takes one CQ event of the client's CQ through the checker; acks it or not.
std::shared_ptr<CheckingBackend> CqEventThenTeardown(bool ack) {
  auto pair = std::make_unique<ConnectedPair>(Checked());
  EXPECT_TRUE(pair->ok()) << pair->error();
  std::shared_ptr<CheckingBackend> checker = pair->shared_checker();
  // The client's CQ: its fd is the one rpma_cq_get_fd(3) gives.
  int fd = -1;
  EXPECT_EQ(rpma_cq_get_fd(pair->client_cq(), &fd), 0);
  ibv_cq* cq = nullptr;
  for (ibv_cq* c : checker->Cqs()) {
    if (c->channel != nullptr && c->channel->fd == fd) cq = c;
  }
  EXPECT_NE(cq, nullptr);
  if (cq == nullptr) return checker;
  EXPECT_EQ(pair->WriteWithImm(0, 8, 1), 0);
  pair->nic().RunUntilIdle();
  ibv_cq* event_cq = nullptr;
  void* context = nullptr;
  EXPECT_EQ(checker->GetCqEvent(cq->channel, &event_cq, &context), 0);
  EXPECT_EQ(event_cq, cq);
  if (ack) checker->AckCqEvents(cq, 1);
  pair.reset();  // rpma_conn_delete destroys the CQ
  return checker;
}

TEST(CqEventsCheck, DestroyWithAnUnackedEvent) {
  auto checker = CqEventThenTeardown(/*ack=*/false);
  EXPECT_EQ(checker->FindingCount("cq-events"), 1u) << AllFindings(&*checker);
}

TEST(CqEventsCheck, AckedEventsAreSilent) {
  auto checker = CqEventThenTeardown(/*ack=*/true);
  EXPECT_EQ(checker->FindingCount(), 0u) << AllFindings(&*checker);
}

// ---- 6. lifetime ----

TEST(MrUnmappedCheck, SourceUnmappedWhileRegistered) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  rpma_mr_local* mr = nullptr;
  ASSERT_EQ(
      rpma_mr_reg(pair.client_peer(), mem, page, RPMA_MR_USAGE_WRITE_SRC, &mr),
      0);
  ASSERT_EQ(munmap(mem, page), 0);  // the bug: still registered
  (void)rpma_write(pair.client(), pair.server_mr_remote(), 0, mr, 0, 16,
                   RPMA_F_COMPLETION_ALWAYS, nullptr);
  EXPECT_EQ(pair.checker()->FindingCount("mr-unmapped"), 1u)
      << AllFindings(pair.checker());
  ibv_wc wc;
  (void)pair.ClientCompletion(&wc);
  rpma_mr_dereg(&mr);
}

TEST(MrUnmappedCheck, UnmappedAfterDeregIsSilent) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  rpma_mr_local* mr = nullptr;
  ASSERT_EQ(
      rpma_mr_reg(pair.client_peer(), mem, page, RPMA_MR_USAGE_WRITE_SRC, &mr),
      0);
  ASSERT_EQ(rpma_write(pair.client(), pair.server_mr_remote(), 0, mr, 0, 16,
                       RPMA_F_COMPLETION_ALWAYS, nullptr),
            0);
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  ASSERT_EQ(rpma_mr_dereg(&mr), 0);
  ASSERT_EQ(munmap(mem, page), 0);
  EXPECT_EQ(pair.checker()->FindingCount(), 0u) << AllFindings(pair.checker());
}

TEST(LeakCheck, LiveObjectsAreReportedWithWhereTheyWereCreated) {
  auto nic = std::make_shared<FakeNic>();
  CheckOptions options;
  auto checker = std::make_shared<CheckingBackend>(nic, options);
  ScopedBackend use(checker);
  rpma_peer* peer = nullptr;
  rpma_mr_local* mr = nullptr;
  MakePeerAndMr(/*clean_up=*/false, &peer, &mr);
  EXPECT_EQ(checker->ReportLiveObjects(), 2u);
  ASSERT_EQ(checker->FindingCount("leak"), 2u) << AllFindings(&*checker);
  for (const Finding& f : checker->Findings()) {
    EXPECT_THAT(f.what, HasSubstr("still alive at exit"));
  }
  // The created-at stack names the function that made them.
  CaptureStderr();
  CheckOptions quiet;
  auto again = std::make_shared<CheckingBackend>(nic, quiet);
  {
    ScopedBackend use2(again);
    rpma_peer* peer2 = nullptr;
    rpma_mr_local* mr2 = nullptr;
    MakePeerAndMr(/*clean_up=*/false, &peer2, &mr2);
    again->ReportLiveObjects();
    rpma_mr_dereg(&mr2);
    rpma_peer_delete(&peer2);
  }
  std::string report = TakeStderr();
  EXPECT_THAT(report, HasSubstr("MakePeerAndMr"));
  EXPECT_THAT(report, HasSubstr("RPMA-HARNESS CHECK [leak]: rpma_mr_local"));
  // The test's own deliberate leak, released.
  EXPECT_EQ(rpma_mr_dereg(&mr), 0);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
}

TEST(LeakCheck, ACheckerUnderAFaultInjectorStillHearsTheLibrary) {
  // The rpma layer finds the checker through any wrapper above it
  // (VerbsBackend::library_checker(), passed on by ForwardingBackend).
  auto nic = std::make_shared<FakeNic>();
  CheckOptions options;
  options.print = false;
  auto checker = std::make_shared<CheckingBackend>(nic, options);
  auto faults = std::make_shared<FaultInjector>(checker, /*seed=*/1);
  EXPECT_EQ(CheckerOf(faults.get()), checker.get());
  ScopedBackend use(faults);
  rpma_peer* peer = nullptr;
  rpma_mr_local* mr = nullptr;
  MakePeerAndMr(/*clean_up=*/false, &peer, &mr);
  EXPECT_EQ(checker->ReportLiveObjects(), 2u) << AllFindings(&*checker);
  EXPECT_EQ(rpma_mr_dereg(&mr), 0);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
  EXPECT_EQ(checker->ReportLiveObjects(), 0u);
}

TEST(LeakCheck, DeletedObjectsAreSilent) {
  auto nic = std::make_shared<FakeNic>();
  auto checker = std::make_shared<CheckingBackend>(nic, CheckOptions{});
  ScopedBackend use(checker);
  MakePeerAndMr(/*clean_up=*/true);
  EXPECT_EQ(checker->ReportLiveObjects(), 0u);
  EXPECT_EQ(checker->FindingCount(), 0u) << AllFindings(&*checker);
}

// ---- reporting ----

TEST(Report, OncePerCallSiteCountedEveryTime) {
  ConnectedPair pair(Checked(/*print=*/false));
  ASSERT_TRUE(pair.ok()) << pair.error();
  const size_t len = (size_t{1} << 32) + 8;
  for (int i = 0; i < 3; ++i) {
    (void)rpma_write(pair.client(), pair.server_mr_remote(), 0,
                     pair.client_mr(), 0, len, RPMA_F_COMPLETION_ALWAYS,
                     nullptr);
    ibv_wc wc;
    (void)pair.ClientCompletion(&wc);
  }
  ASSERT_EQ(pair.checker()->FindingCount("length"), 1u);
  EXPECT_EQ(pair.checker()->Findings()[0].times, 3u);
}

TEST(Report, SanitizerStyleOnStderrWithTraceLines) {
  ConnectedPair pair(Checked());
  ASSERT_TRUE(pair.ok()) << pair.error();
  ASSERT_EQ(pair.WriteWithImm(0, 64, 1), 0);
  pair.nic().RunUntilIdle();
  pair.client_buffer()[0] ^= 0x5a;
  CaptureStderr();
  ibv_wc wc;
  ASSERT_EQ(pair.ClientCompletion(&wc), 0);
  std::string report = TakeStderr();
  EXPECT_THAT(report, HasSubstr("RPMA-HARNESS CHECK [source-changed]"));
  EXPECT_THAT(report, HasSubstr("WR: qp"));
  EXPECT_THAT(report, HasSubstr("fix:"));
  EXPECT_THAT(report, HasSubstr("op=RDMA_WRITE_WITH_IMM"));
  EXPECT_THAT(report, HasSubstr("SUMMARY: rpma-harness check source-changed"));
}

TEST(Strict, FindingsMakeTheProcessExitWith66) {
  EXPECT_EXIT(
      {
        CheckOptions options;
        options.strict = true;
        options.print = false;
        auto nic = std::make_shared<FakeNic>();
        CheckingBackend checker(nic, options);
        checker.CheckLength("rpma_write", size_t{1} << 33);
        checker.ExitIfStrict();
        std::exit(0);
      },
      testing::ExitedWithCode(kStrictExitCode), "1 finding");
}

TEST(Strict, NoFindingsNoExit) {
  CheckOptions options;
  options.strict = true;
  auto nic = std::make_shared<FakeNic>();
  CheckingBackend checker(nic, options);
  checker.CheckLength("rpma_write", 16);
  checker.ExitIfStrict();  // returns
  EXPECT_EQ(checker.FindingCount(), 0u);
}

}  // namespace
}  // namespace rpma_harness
