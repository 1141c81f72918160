// user_memory_test.cc: the fake NIC never crashes the program for memory the
// program made inaccessible.
//
// - Registration checks the mapping as a real NIC's page pinning does
//   (ib_umem_get: pin_user_pages, FOLL_WRITE for a writable access):
//   inaccessible memory, or read-only memory with a writable access, fails
//   with EFAULT (ibv_reg_mr(3) returns NULL); rpma_mr_reg reports
//   RPMA_E_PROVIDER.
// - Memory unmapped after registration (a real NIC would keep DMAing the
//   pages it pinned) makes the WR complete with an error and the fake report
//   a harness error, instead of a SIGSEGV in the NIC's progress thread.

#include <arpa/inet.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <librpma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "rpma/harness.h"
#include "tests/connected_qps.h"

namespace rpma_harness {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// An anonymous mapping of `pages` pages with `prot`, unmapped at the end
// (unless the test unmapped it already).
class Mapping {
 public:
  Mapping(size_t pages, int prot) : size_(pages * kPage) {
    void* p = mmap(nullptr, size_, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    data_ = static_cast<uint8_t*>(p);
  }
  ~Mapping() {
    if (mapped_) munmap(data_, size_);
  }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  void Unmap() {
    munmap(data_, size_);
    mapped_ = false;
  }

 private:
  size_t size_;
  uint8_t* data_;
  bool mapped_ = true;
};

class RegMrMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric_ = std::make_unique<ConnectedQps>(&nic_);
    ASSERT_NE(fabric_->Connect(QpPairOptions{}), nullptr) << fabric_->error();
  }
  // ibv_reg_mr's result: 0 (registered, then deregistered) or errno.
  int Reg(void* addr, size_t length, int access) {
    errno = 0;
    ibv_mr* mr = nic_.RegMr(fabric_->client_pd(), addr, length, access);
    if (mr == nullptr) return errno;
    EXPECT_EQ(nic_.DeregMr(mr), 0);
    return 0;
  }

  FakeNic nic_;
  std::unique_ptr<ConnectedQps> fabric_;
};

// rxe on Linux 6.1 accepts PROT_NONE for a read-only access (FOLL_FORCE,
// removed in 6.2) and refuses it for a writable one
// (tools/softroce_vm/reg_mr_memory_probe_test.cc); the fake refuses both,
// as current kernels do (docs/fidelity.md, "Differences that remain").
TEST_F(RegMrMemoryTest, InaccessibleMemoryFailsWithEfaultForEveryAccess) {
  Mapping none(2, PROT_NONE);
  const std::vector<int> accesses = {
      0, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
  for (int access : accesses) {
    EXPECT_EQ(Reg(none.data(), none.size(), access), EFAULT) << access;
  }
}

TEST_F(RegMrMemoryTest, ReadOnlyMemoryRegistersOnlyForReading) {
  Mapping read_only(2, PROT_READ);
  EXPECT_EQ(Reg(read_only.data(), read_only.size(), 0), 0);
  EXPECT_EQ(Reg(read_only.data(), read_only.size(), IBV_ACCESS_REMOTE_READ), 0);
  const std::vector<int> writable = {
      IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC};
  for (int access : writable) {
    EXPECT_EQ(Reg(read_only.data(), read_only.size(), access), EFAULT)
        << access;
  }
}

TEST_F(RegMrMemoryTest, ARangeWithAHoleOrAnInaccessiblePageFails) {
  Mapping three(3, PROT_READ | PROT_WRITE);
  ASSERT_EQ(Reg(three.data(), three.size(), IBV_ACCESS_LOCAL_WRITE), 0);
  // The last byte of a range on an inaccessible page is enough.
  ASSERT_EQ(mprotect(three.data() + 2 * kPage, kPage, PROT_NONE), 0);
  EXPECT_EQ(Reg(three.data(), 2 * kPage + 1, 0), EFAULT);
  EXPECT_EQ(Reg(three.data(), 2 * kPage, IBV_ACCESS_LOCAL_WRITE), 0);
  // A hole in the middle.
  ASSERT_EQ(munmap(three.data() + kPage, kPage), 0);
  EXPECT_EQ(Reg(three.data(), 2 * kPage, 0), EFAULT);
  EXPECT_EQ(Reg(three.data(), kPage, 0), 0);
}

// Resident set size of this process in bytes (/proc/self/statm).
size_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * kPage : 0;
}

// Up to 64 MiB a registration faults its pages in, as a real one's pin
// does; a larger range is checked against the mappings instead, so a test
// may register a large, mostly untouched region (an emulated PMem file)
// without committing it: the same answers, memory untouched.
TEST_F(RegMrMemoryTest, LargeRangesAreCheckedWithoutCommittingThem) {
  const size_t pages = (size_t{96} << 20) / kPage;
  Mapping large(pages, PROT_READ | PROT_WRITE);
  const size_t before = ResidentBytes();
  EXPECT_EQ(Reg(large.data(), large.size(),
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            0);
  EXPECT_LT(ResidentBytes(), before + (size_t{16} << 20))
      << "a 96 MiB registration committed its pages";
  // Its last page read-only: not for a writable access; then inaccessible.
  ASSERT_EQ(mprotect(large.data() + (pages - 1) * kPage, kPage, PROT_READ), 0);
  EXPECT_EQ(Reg(large.data(), large.size(), 0), 0);
  EXPECT_EQ(Reg(large.data(), large.size(), IBV_ACCESS_LOCAL_WRITE), EFAULT);
  ASSERT_EQ(mprotect(large.data() + (pages - 1) * kPage, kPage, PROT_NONE), 0);
  EXPECT_EQ(Reg(large.data(), large.size(), 0), EFAULT);
  // A hole in the middle.
  ASSERT_EQ(mprotect(large.data() + (pages - 1) * kPage, kPage,
                     PROT_READ | PROT_WRITE),
            0);
  ASSERT_EQ(munmap(large.data() + (pages / 2) * kPage, kPage), 0);
  EXPECT_EQ(Reg(large.data(), large.size(), 0), EFAULT);
}

// A small range gets the same answers by faulting in: a page that is
// read-only, inaccessible or missing anywhere in it, down to its last byte.
TEST_F(RegMrMemoryTest, EveryPageOfASmallRangeIsChecked) {
  Mapping eight(8, PROT_READ | PROT_WRITE);
  for (size_t page = 0; page < 8; ++page) {
    ASSERT_EQ(mprotect(eight.data() + page * kPage, kPage, PROT_READ), 0);
    EXPECT_EQ(Reg(eight.data() + 1, eight.size() - 1, IBV_ACCESS_LOCAL_WRITE),
              EFAULT)
        << page;
    EXPECT_EQ(Reg(eight.data() + 1, eight.size() - 1, 0), 0) << page;
    ASSERT_EQ(mprotect(eight.data() + page * kPage, kPage, PROT_NONE), 0);
    EXPECT_EQ(Reg(eight.data() + 1, eight.size() - 1, 0), EFAULT) << page;
    ASSERT_EQ(mprotect(eight.data() + page * kPage, kPage,
                       PROT_READ | PROT_WRITE),
              0);
  }
  EXPECT_EQ(Reg(eight.data() + 1, eight.size() - 1, IBV_ACCESS_LOCAL_WRITE),
            0);
}

TEST_F(RegMrMemoryTest, RangeThatWrapsFails) {
  // (A length above the device's max_mr_size is EINVAL before that.)
  EXPECT_EQ(Reg(reinterpret_cast<void*>(~uintptr_t{0} - 100), 4096, 0), EFAULT);
}

TEST(RpmaMrRegMemoryTest, InaccessibleMemoryIsAProviderError) {
  auto nic = std::make_shared<FakeNic>();
  ScopedBackend use(nic);
  std::vector<std::string> log;
  SetLogSink([&log](const std::string& m) { log.push_back(m); });
  ibv_context* dev = nullptr;
  ASSERT_EQ(
      rpma_utils_get_ibv_context("10.0.0.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev),
      0);
  rpma_peer* peer = nullptr;
  ASSERT_EQ(rpma_peer_new(dev, &peer), 0);
  Mapping none(1, PROT_NONE);
  Mapping read_only(1, PROT_READ);
  rpma_mr_local* mr = nullptr;
  EXPECT_EQ(
      rpma_mr_reg(peer, none.data(), none.size(), RPMA_MR_USAGE_WRITE_SRC, &mr),
      RPMA_E_PROVIDER);
  EXPECT_EQ(mr, nullptr);
  // A write destination needs write access to the pages.
  EXPECT_EQ(rpma_mr_reg(peer, read_only.data(), read_only.size(),
                        RPMA_MR_USAGE_WRITE_DST, &mr),
            RPMA_E_PROVIDER);
  ASSERT_FALSE(log.empty());
  EXPECT_NE(log.back().find("Bad address"), std::string::npos) << log.back();
  // Sending from read-only memory needs no write access.
  ASSERT_EQ(rpma_mr_reg(peer, read_only.data(), read_only.size(),
                        RPMA_MR_USAGE_SEND, &mr),
            0);
  EXPECT_EQ(rpma_mr_dereg(&mr), 0);
  EXPECT_EQ(rpma_peer_delete(&peer), 0);
  SetLogSink(nullptr);
}

// Memory that goes away after registration.
class UnmappedAfterRegistrationTest : public ::testing::Test {
 protected:
  static constexpr int kAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  void SetUp() override {
    fabric_ = std::make_unique<ConnectedQps>(&nic_);
    pair_ = fabric_->Connect(QpPairOptions{});
    ASSERT_NE(pair_, nullptr) << fabric_->error();
    local_mr_ = fabric_->RegMr(fabric_->client_pd(), local_.data(),
                               local_.size(), kAccess);
    remote_mr_ = fabric_->RegMr(fabric_->server_pd(), remote_.data(),
                                remote_.size(), kAccess);
    recv_mr_ = fabric_->RegMr(fabric_->server_pd(), recv_.data(), recv_.size(),
                              kAccess);
    ASSERT_TRUE(fabric_->ok()) << fabric_->error();
    nic_.AddObserver([this](const FakeNicEvent& e) {
      // The WR's execute event says it (QP state changes repeat the text).
      if (e.kind == FakeNicEvent::Kind::kExecute &&
          e.text.find("harness error") != std::string::npos) {
        harness_errors_.push_back(e.text);
      }
    });
  }

  void PostRecv() {
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_.data()), 64, recv_mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 9;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(nic_.PostRecv(pair_->server.qp, &wr, &bad), 0);
  }

  // Posts one WR of `length` bytes and runs the NIC; the client's and the
  // server's completion statuses (-1: none).
  std::pair<int, int> Run(ibv_wr_opcode opcode, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(local_.data()), length,
                local_mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htonl(7);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(remote_.data());
    wr.wr.rdma.rkey = remote_mr_->rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(nic_.PostSend(pair_->client.qp, &wr, &bad), 0);
    nic_.RunUntilIdle();
    ibv_wc wc{};
    const int client =
        nic_.PollCq(pair_->client.cq, 1, &wc) == 1 ? wc.status : -1;
    const int server =
        nic_.PollCq(pair_->server.cq, 1, &wc) == 1 ? wc.status : -1;
    return {client, server};
  }

  FakeNic nic_;
  std::unique_ptr<ConnectedQps> fabric_;
  QpPair* pair_ = nullptr;
  Mapping local_{1, PROT_READ | PROT_WRITE};
  Mapping remote_{1, PROT_READ | PROT_WRITE};
  Mapping recv_{1, PROT_READ | PROT_WRITE};
  ibv_mr* local_mr_ = nullptr;
  ibv_mr* remote_mr_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  std::vector<std::string> harness_errors_;
};

// A multi-packet write whose target loses access to a page after
// registration. Without a packet trace the fake lands the packets in one
// copy (fake_nic_packets.cc); with one, packet by packet. Both must give the
// same statuses, the same landed bytes before the hole and the same
// untouched bytes after it.
struct MultiPacketOutcome {
  int client = -1;
  int server = -1;
  std::vector<uint8_t> landed;  // the target's first two pages
  std::vector<uint8_t> after;   // its fourth page
  std::vector<uint8_t> third;   // its third page
  size_t packets_traced = 0;
  std::vector<std::string> packet_lines;  // each traced packet's text
};

// `hole_page` of the target's four pages (of the source's, with
// `hole_in_source`) is made inaccessible; the write covers `length` bytes
// from the target's start.
MultiPacketOutcome WriteOverAHole(bool trace_packets, int hole_page = 2,
                                  size_t length = 4 * kPage,
                                  bool hole_in_source = false) {
  MultiPacketOutcome out;
  FakeNicConfig config;
  config.trace_packets = trace_packets;
  FakeNic nic(config);
  nic.AddObserver([&out](const FakeNicEvent& e) {
    if (e.kind == FakeNicEvent::Kind::kPacket) {
      ++out.packets_traced;
      out.packet_lines.push_back(e.text);
    }
  });
  ConnectedQps fabric(&nic);
  QpPair* pair = fabric.Connect(QpPairOptions{});
  if (pair == nullptr) return out;
  Mapping local(4, PROT_READ | PROT_WRITE);
  Mapping remote(4, PROT_READ | PROT_WRITE);
  Mapping recv(1, PROT_READ | PROT_WRITE);
  for (size_t i = 0; i < local.size(); ++i) local.data()[i] = uint8_t(i * 7);
  const int access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* local_mr =
      fabric.RegMr(fabric.client_pd(), local.data(), local.size(), access);
  ibv_mr* remote_mr =
      fabric.RegMr(fabric.server_pd(), remote.data(), remote.size(), access);
  ibv_mr* recv_mr =
      fabric.RegMr(fabric.server_pd(), recv.data(), recv.size(), access);
  if (!fabric.ok()) return out;
  ibv_sge rsge{reinterpret_cast<uintptr_t>(recv.data()), 64, recv_mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 9;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  if (nic.PostRecv(pair->server.qp, &rwr, &rbad) != 0) return out;
  // The third page becomes inaccessible (mprotect, not munmap: an unmapped
  // hole can be reused by the next mmap -- under ASan it was -- and the copy
  // would then land in someone else's memory).
  uint8_t* const holed = hole_in_source ? local.data() : remote.data();
  if (mprotect(holed + hole_page * kPage, kPage, PROT_NONE) != 0) {
    return out;
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(local.data()),
              static_cast<uint32_t>(length), local_mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.imm_data = htonl(7);
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(remote.data());
  wr.wr.rdma.rkey = remote_mr->rkey;
  ibv_send_wr* bad = nullptr;
  if (nic.PostSend(pair->client.qp, &wr, &bad) != 0) return out;
  nic.RunUntilIdle();
  ibv_wc wc{};
  out.client = nic.PollCq(pair->client.cq, 1, &wc) == 1 ? wc.status : -1;
  out.server = nic.PollCq(pair->server.cq, 1, &wc) == 1 ? wc.status : -1;
  out.landed.assign(remote.data(), remote.data() + 2 * kPage);
  if (hole_page != 3) {
    out.after.assign(remote.data() + 3 * kPage, remote.data() + 4 * kPage);
  }
  if (hole_page != 2) {
    out.third.assign(remote.data() + 2 * kPage, remote.data() + 3 * kPage);
  }
  return out;
}

TEST(MultiPacketWriteTest, AHoleInTheTargetEndsTheWriteAlikeTracedOrNot) {
  const MultiPacketOutcome quiet = WriteOverAHole(false);
  const MultiPacketOutcome traced = WriteOverAHole(true);
  EXPECT_EQ(quiet.client, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(traced.client, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(quiet.server, traced.server);
  // The packets before the hole landed, in both modes.
  ASSERT_EQ(quiet.landed.size(), 2 * kPage);
  for (size_t i = 0; i < quiet.landed.size(); ++i) {
    ASSERT_EQ(quiet.landed[i], uint8_t(i * 7)) << "byte " << i;
  }
  EXPECT_EQ(quiet.landed, traced.landed);
  // Nothing landed past the hole.
  EXPECT_EQ(quiet.after, std::vector<uint8_t>(kPage, 0));
  EXPECT_EQ(quiet.after, traced.after);
  EXPECT_EQ(quiet.packets_traced, 0u);
  EXPECT_GT(traced.packets_traced, 2u);  // really cut into packets
}

TEST(MultiPacketWriteTest, AHoleUnderTheLastPacketOnlyEndsTheWriteAlike) {
  // 3 pages + 1 KiB: at rdma_cm's 1024-byte path MTU the LAST packet alone
  // lands in the fourth page, the hole. The one copy of every packet faults
  // there; what lands must still be what packet by packet lands: the first
  // three pages, and LAST's receive completing with the error.
  const size_t length = 3 * kPage + 1024;
  const MultiPacketOutcome quiet = WriteOverAHole(false, 3, length);
  const MultiPacketOutcome traced = WriteOverAHole(true, 3, length);
  EXPECT_EQ(quiet.client, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(traced.client, IBV_WC_REM_ACCESS_ERR);
  EXPECT_NE(quiet.server, -1) << "LAST took the receive: it completes";
  EXPECT_EQ(quiet.server, traced.server);
  ASSERT_EQ(quiet.landed.size(), 2 * kPage);
  ASSERT_EQ(quiet.third.size(), kPage);
  for (size_t i = 0; i < kPage; ++i) {
    ASSERT_EQ(quiet.third[i], uint8_t((2 * kPage + i) * 7)) << "byte " << i;
  }
  EXPECT_EQ(quiet.landed, traced.landed);
  EXPECT_EQ(quiet.third, traced.third);
  EXPECT_GT(traced.packets_traced, 12u);
}

// The packet trace tells what each packet did: the one whose payload copy
// faulted was not ACKed. In the responder's memory it is NAKed (the write's
// REM_ACCESS_ERR); in the requester's own it was never sent, as a packet cut
// by a bad source SGE (rxe_req.c finish_packet), and nothing follows it.
TEST(MultiPacketWriteTest, ThePacketWhoseCopyFaultsIsTracedAsItEnded) {
  const MultiPacketOutcome target = WriteOverAHole(true, 2);
  ASSERT_EQ(target.client, IBV_WC_REM_ACCESS_ERR);
  // rdma_cm's 1024-byte MTU: the packets before the third page land, the
  // first in it faults.
  const size_t hole = 2 * kPage / 1024;
  const std::string at =
      "#" + std::to_string(hole) + " offset " + std::to_string(2 * kPage);
  ASSERT_EQ(target.packet_lines.size(), hole + 1);
  for (size_t i = 0; i < hole; ++i) {
    EXPECT_NE(target.packet_lines[i].find(": ACK"), std::string::npos)
        << target.packet_lines[i];
  }
  EXPECT_NE(target.packet_lines[hole].find(at + ": NAK remote access"),
            std::string::npos)
      << target.packet_lines[hole];

  const MultiPacketOutcome source = WriteOverAHole(true, 2, 4 * kPage, true);
  const MultiPacketOutcome quiet = WriteOverAHole(false, 2, 4 * kPage, true);
  EXPECT_EQ(source.client, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(quiet.client, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(source.server, -1) << "LAST never came: no receive was taken";
  EXPECT_EQ(quiet.server, -1);
  EXPECT_EQ(source.landed, quiet.landed);
  ASSERT_EQ(source.packet_lines.size(), hole + 1);
  for (size_t i = 0; i < hole; ++i) {
    EXPECT_NE(source.packet_lines[i].find(": ACK"), std::string::npos)
        << source.packet_lines[i];
  }
  EXPECT_NE(source.packet_lines[hole].find(
                at + ": not sent: the requester's memory faulted"),
            std::string::npos)
      << source.packet_lines[hole];
}

TEST_F(UnmappedAfterRegistrationTest, StillMappedWriteSucceeds) {
  PostRecv();
  std::memset(local_.data(), 0x5a, 64);
  EXPECT_EQ(Run(IBV_WR_RDMA_WRITE_WITH_IMM, 64),
            std::make_pair(int{IBV_WC_SUCCESS}, int{IBV_WC_SUCCESS}));
  EXPECT_EQ(remote_.data()[63], 0x5a);
  EXPECT_TRUE(harness_errors_.empty());
}

TEST_F(UnmappedAfterRegistrationTest, WriteFromUnmappedSourceIsALocalError) {
  PostRecv();
  local_.Unmap();
  // The requester's local protection error; the receive is not consumed (a
  // write with imm takes it only once the data arrived), so the server sees
  // nothing until its QP flushes.
  EXPECT_EQ(Run(IBV_WR_RDMA_WRITE_WITH_IMM, 64).first, IBV_WC_LOC_PROT_ERR);
  ASSERT_EQ(harness_errors_.size(), 1u);
  EXPECT_NE(harness_errors_[0].find("requester"), std::string::npos);
  EXPECT_NE(harness_errors_[0].find("WR 1"), std::string::npos);
}

TEST_F(UnmappedAfterRegistrationTest, WriteToUnmappedTargetIsARemoteError) {
  PostRecv();
  remote_.Unmap();
  const auto [client, server] = Run(IBV_WR_RDMA_WRITE_WITH_IMM, 64);
  EXPECT_EQ(client, IBV_WC_REM_ACCESS_ERR);
  // The receive completes as it does for an rkey violation (spec
  // personality: LOC_ACCESS_ERR).
  EXPECT_EQ(server, IBV_WC_LOC_ACCESS_ERR);
  ASSERT_EQ(harness_errors_.size(), 1u);
  EXPECT_NE(harness_errors_[0].find("responder"), std::string::npos);
}

TEST_F(UnmappedAfterRegistrationTest, SendIntoUnmappedReceiveBuffer) {
  PostRecv();
  recv_.Unmap();
  const auto [client, server] = Run(IBV_WR_SEND, 64);
  EXPECT_EQ(client, IBV_WC_REM_OP_ERR);
  EXPECT_NE(server, IBV_WC_SUCCESS);
  EXPECT_EQ(harness_errors_.size(), 1u);
}

TEST_F(UnmappedAfterRegistrationTest, ReadIntoUnmappedLocalBuffer) {
  local_.Unmap();
  EXPECT_EQ(Run(IBV_WR_RDMA_READ, 64).first, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(harness_errors_.size(), 1u);
}

TEST_F(UnmappedAfterRegistrationTest, ReadFromUnmappedRemoteMemory) {
  remote_.Unmap();
  EXPECT_EQ(Run(IBV_WR_RDMA_READ, 64).first, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(harness_errors_.size(), 1u);
}

TEST_F(UnmappedAfterRegistrationTest, AFaultOutsideTheNicStillCrashes) {
  // The fake's fault handler only catches its own copies.
  EXPECT_DEATH(
      {
        PostRecv();
        std::memset(local_.data(), 1, 64);
        Run(IBV_WR_RDMA_WRITE_WITH_IMM, 64);
        local_.Unmap();
        *static_cast<volatile uint8_t*>(local_.data()) = 1;
      },
      "");
}

}  // namespace
}  // namespace rpma_harness
