// The crash checker on the five persistence bugs of librpma programs (issue
// 24), each next to its corrected twin: the bug must be caught with a
// shrunk image, the twin must pass every image. The program is a tiny
// persistent log: a 64-byte record at offset 0 of the server's persistent
// memory and an 8-byte commit word at offset 256 ("record 1 is valid").

#include "crash/crash_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <librpma.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "crash/expect_crash_consistent.h"
#include "mock/connected_pair.h"

namespace rpma_harness {
namespace crash {
namespace {

using ::testing::HasSubstr;

constexpr size_t kRecord = 0;
constexpr size_t kRecordLen = 64;
constexpr size_t kCommit = 256;

uint8_t PayloadByte(size_t i) { return static_cast<uint8_t>('A' + i % 26); }

// Recovery + invariant of the log: a commit word of 1 means the record is
// all there; a promised commit must have survived.
std::string RecoverLog(Image& image) {
  const uint64_t commit = image.Load<uint64_t>(0, kCommit);
  bool promised = false;
  for (const std::string& p : image.promises()) promised |= p == "commit 1";
  if (commit == 0) {
    return promised ? "\"commit 1\" was promised, but the commit word is 0"
                    : "";
  }
  if (commit != 1) return "the commit word holds " + std::to_string(commit);
  for (size_t i = 0; i < kRecordLen; i += 8) {
    uint8_t got[8];
    image.Read(0, kRecord + i, got, 8);
    for (size_t j = 0; j < 8; ++j) {
      if (got[j] != PayloadByte(i + j)) {
        return "the commit word says 1 but record byte " +
               std::to_string(i + j) + " is not there";
      }
    }
  }
  return "";
}

class CrashPatternTest : public ::testing::Test {
 protected:
  void Start(CrashCheckOptions options = {}, int extra_usage = 0) {
    ConnectedPairOptions o;
    o.server_usage = RPMA_MR_USAGE_WRITE_DST |
                     RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT | extra_usage;
    o.direct_write_to_pmem = true;
    o.recvs = 4;
    pair_ = std::make_unique<ConnectedPair>(o);
    ASSERT_TRUE(pair_->ok()) << pair_->error();
    recorder_ = std::make_unique<PersistenceRecorder>(pair_->nic(), options);
    ASSERT_EQ(recorder_->MarkPersistent(pair_->server_buffer(),
                                        pair_->buffer_size(), "pmem"),
              0);
  }

  void Write(size_t offset, const void* bytes, size_t len) {
    std::memcpy(pair_->client_buffer() + offset, bytes, len);
    ASSERT_EQ(rpma_write(pair_->client(), pair_->server_mr_remote(), offset,
                         pair_->client_mr(), offset, len,
                         RPMA_F_COMPLETION_ON_ERROR, nullptr),
              0);
  }
  void WriteRecord() {
    uint8_t record[kRecordLen];
    for (size_t i = 0; i < kRecordLen; ++i) record[i] = PayloadByte(i);
    Write(kRecord, record, kRecordLen);
  }
  void WriteCommit(uint64_t value = 1) { Write(kCommit, &value, 8); }
  void Flush(size_t offset, size_t len,
             rpma_flush_type type = RPMA_FLUSH_TYPE_PERSISTENT) {
    ASSERT_EQ(rpma_flush(pair_->client(), pair_->server_mr_remote(), offset,
                         len, type, RPMA_F_COMPLETION_ALWAYS, nullptr),
              0);
  }
  // The client waits for its flush (rpma_cq_get_wc).
  void WaitForFlush() {
    ibv_wc wc;
    ASSERT_EQ(pair_->ClientCompletion(&wc), 0);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  }
  // "Committed": a 0-byte write with imm 1; the server, on receiving it,
  // writes and persists the commit word itself (R6) and tells the world.
  void SignalCommitted() {
    ASSERT_EQ(rpma_write_with_imm(pair_->client(), nullptr, 0, nullptr, 0, 0,
                                  RPMA_F_COMPLETION_ON_ERROR, 1, nullptr),
              0);
    ibv_wc wc;
    ASSERT_EQ(pair_->ServerCompletion(&wc), 0);
    ASSERT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    const uint64_t one = 1;
    std::memcpy(pair_->server_buffer() + kCommit, &one, 8);
    recorder_->ServerPersisted(pair_->server_buffer() + kCommit, 8);
    recorder_->Promise("commit 1");
  }

  // The record written and flushed (the range and type given), the flush
  // waited for.
  void PersistRecord(size_t offset = kRecord, size_t len = kRecordLen,
                     rpma_flush_type type = RPMA_FLUSH_TYPE_PERSISTENT) {
    WriteRecord();
    Flush(offset, len, type);
    WaitForFlush();
  }
  // The commit word written, flushed and waited for; then promised.
  void CommitAndPromise(PersistenceRecorder& recorder) {
    WriteCommit();
    Flush(kCommit, 8);
    WaitForFlush();
    recorder.Promise("commit 1");
  }

  // The NIC carries out what was posted (no completion is polled).
  void Land() { pair_->nic().RunUntilIdle(); }

  CrashReport Check() { return recorder_->Check(RecoverLog); }

  std::unique_ptr<ConnectedPair> pair_;
  std::unique_ptr<PersistenceRecorder> recorder_;
};

// Bug 1: the client says "committed" (write with imm) before its flush
// completed; the server persists the commit word and acknowledges.
TEST_F(CrashPatternTest, SignalBeforeFlushCompletedIsCaught) {
  Start();
  WriteRecord();
  Flush(kRecord, kRecordLen);
  SignalCommitted();  // the flush's completion not yet polled
  WaitForFlush();
  CrashReport report = Check();
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.violation,
              HasSubstr("the commit word says 1 but record byte"));
  // Shrunk: one record unit lost is enough.
  EXPECT_THAT(report.violation, HasSubstr("1 unit(s) did not hold"));
  EXPECT_THAT(report.violation, HasSubstr("\"pmem\" bytes [0, 8)"));
  ASSERT_FALSE(report.findings.empty()) << report;
  EXPECT_THAT(report.findings[0].text,
              HasSubstr("received RECV_RDMA_WITH_IMM from qp"));
}

TEST_F(CrashPatternTest, SignalAfterFlushCompletedPasses) {
  Start();
  WriteRecord();
  Flush(kRecord, kRecordLen);
  WaitForFlush();
  SignalCommitted();
  CrashReport report = Check();
  EXPECT_TRUE(report.ok()) << report;
  EXPECT_TRUE(report.findings.empty()) << report;
  EXPECT_GT(report.images, 1u);
}

// Bug 2: record and commit word written together and flushed once: a crash
// before the flush completed can keep the commit word and lose the record.
TEST_F(CrashPatternTest, CommitFlushedWithTheDataIsCaught) {
  Start();
  WriteRecord();
  WriteCommit();
  Flush(0, kCommit + 8);
  WaitForFlush();
  recorder_->Promise("commit 1");
  CrashReport report = Check();
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.violation,
              HasSubstr("the commit word says 1 but record byte 0"));
  EXPECT_THAT(report.violation, HasSubstr("1 unit(s) did not hold"));
  EXPECT_THAT(report.violation, HasSubstr("replay: CrashCheckOptions"));
}

TEST_F(CrashPatternTest, DataFlushedBeforeTheCommitPasses) {
  Start();
  PersistRecord();
  CommitAndPromise(*recorder_);
  CrashReport report = Check();
  EXPECT_TRUE(report.ok()) << report;
  EXPECT_TRUE(report.findings.empty()) << report;
}

// Bug 3: the flush covers the wrong range. Under librpma's READ flush on a
// DDIO-off server it happens to work (the READ flushes everything), so the
// strict rule is what catches it.
TEST_F(CrashPatternTest, FlushOfTheWrongRangeIsCaughtUnderTheStrictRule) {
  Start();
  PersistRecord(kRecord + kRecordLen);  // the bytes after the record
  CommitAndPromise(*recorder_);
  CrashReport report = Check();
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.violation, HasSubstr("record byte 0"));
  ASSERT_FALSE(report.findings.empty());
  EXPECT_THAT(report.findings[0].text, HasSubstr("covers nothing"));
}

TEST_F(CrashPatternTest, FlushOfTheWrongRangePassesWhenAReadFlushesAll) {
  CrashCheckOptions options;
  options.read_flushes_all = true;
  Start(options);
  PersistRecord(kRecord + kRecordLen);
  CommitAndPromise(*recorder_);
  EXPECT_TRUE(Check().ok());
}

// Bug 4: VISIBILITY taken for persistence.
TEST_F(CrashPatternTest, VisibilityFlushTakenAsPersistenceIsCaught) {
  Start({}, RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);
  PersistRecord(kRecord, kRecordLen, RPMA_FLUSH_TYPE_VISIBILITY);
  CommitAndPromise(*recorder_);
  CrashReport report = Check();
  ASSERT_FALSE(report.ok()) << report;
  ASSERT_FALSE(report.findings.empty());
  EXPECT_THAT(report.findings[0].text,
              HasSubstr("RPMA_FLUSH_TYPE_VISIBILITY) on persistent memory"));
}

// A peer cfg that declares direct_write_to_pmem on a platform without it:
// the correct program loses data, and the mismatch is a finding.
TEST_F(CrashPatternTest, DeclaredDirectWriteOnADdioPlatformIsCaught) {
  CrashCheckOptions options;
  options.platform_direct_write_to_pmem = false;
  Start(options);
  PersistRecord();
  CommitAndPromise(*recorder_);
  CrashReport report = Check();
  ASSERT_FALSE(report.ok()) << report;
  ASSERT_FALSE(report.findings.empty());
  EXPECT_THAT(report.findings[0].text, HasSubstr("DDIO on"));
}

// Bug 5: a 16-byte commit record {sequence, length} written as one write is
// two units: a crash can tear it. Its twin packs both in one 8-byte
// rpma_atomic_write (R5).
std::string RecoverPair(Image& image) {
  const uint64_t seq = image.Load<uint64_t>(0, kCommit);
  const uint64_t len = image.Load<uint64_t>(0, kCommit + 8);
  if ((seq == 0 && len == 0) || (seq == 1 && len == kRecordLen)) return "";
  return "torn commit record: sequence " + std::to_string(seq) +
         " with length " + std::to_string(len);
}

TEST_F(CrashPatternTest, SixteenByteCommitRecordIsTorn) {
  Start();
  const uint64_t record[2] = {1, kRecordLen};
  Write(kCommit, record, sizeof(record));
  Flush(kCommit, sizeof(record));
  WaitForFlush();
  CrashReport report = recorder_->Check(RecoverPair);
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.violation, HasSubstr("torn commit record"));
  EXPECT_THAT(report.violation, HasSubstr("1 unit(s) did not hold"));
}

std::string RecoverPacked(Image& image) {
  const uint64_t word = image.Load<uint64_t>(0, kCommit);
  if (word == 0 || word == (uint64_t{1} << 32 | kRecordLen)) return "";
  return "torn commit word " + std::to_string(word);
}

TEST_F(CrashPatternTest, EightByteAtomicCommitIsNeverTorn) {
  Start();
  const uint64_t word = uint64_t{1} << 32 | kRecordLen;
  std::memcpy(pair_->client_buffer() + kCommit, &word, 8);
  ASSERT_EQ(rpma_atomic_write(pair_->client(), pair_->server_mr_remote(),
                              kCommit, pair_->client_buffer() + kCommit,
                              RPMA_F_COMPLETION_ON_ERROR, nullptr),
            0);
  Flush(kCommit, 8);
  WaitForFlush();
  CrashReport report = recorder_->Check(RecoverPacked);
  EXPECT_TRUE(report.ok()) << report;
}

// An 8-byte commit word at an unaligned offset spans two units.
TEST_F(CrashPatternTest, UnalignedCommitWordIsTorn) {
  Start();
  const uint64_t word = 0x0101010101010101ULL;
  Write(kCommit + 4, &word, 8);
  Flush(kCommit + 4, 8);
  WaitForFlush();
  CrashReport report = recorder_->Check([](Image& image) -> std::string {
    const uint64_t got = image.Load<uint64_t>(0, kCommit + 4);
    if (got == 0 || got == 0x0101010101010101ULL) return "";
    return "torn word";
  });
  ASSERT_FALSE(report.ok()) << report;
  EXPECT_THAT(report.violation, HasSubstr("before polled RDMA_READ"));
}

// Laziness: recovery that reads only the commit word while it is 0 needs
// two images where reading everything would need 2^9.
TEST_F(CrashPatternTest, RecoveryBranchesOnlyOnWhatItReads) {
  Start();
  WriteRecord();
  WriteCommit();
  Land();
  uint64_t runs = 0;
  CrashReport report = recorder_->Check([&](Image& image) {
    ++runs;
    return RecoverLog(image);
  });  // one crash point: the end, nothing flushed
  ASSERT_FALSE(report.ok());
  ASSERT_EQ(report.points.size(), 1u);
  EXPECT_EQ(report.points[0].pending_units, 9u);
  EXPECT_EQ(report.points[0].combinations, 512);
  // Commit word 0 (one run, consistent), then 1 with the first record
  // unit old: violated; shrinking then tries that unit at its new content.
  EXPECT_EQ(runs, 3u);
}

TEST_F(CrashPatternTest, AllImagesOfAPointAreRunWhenRecoveryReadsAll) {
  Start();
  WriteRecord();
  Land();
  uint64_t runs = 0;
  CrashReport report = recorder_->Check([&](Image& image) {
    ++runs;
    image.Bytes(0);
    return std::string();
  });
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(runs, 256u);  // 8 record units, each old or new
  EXPECT_TRUE(report.points[0].exhaustive);
}

TEST_F(CrashPatternTest, PastTheBudgetItSamplesAndSaysSo) {
  CrashCheckOptions options;
  options.budget = 16;
  Start(options);
  WriteRecord();
  Land();
  CrashReport report = recorder_->Check([](Image& image) {
    image.Bytes(0);
    return std::string();
  });
  EXPECT_TRUE(report.ok());
  EXPECT_FALSE(report.points[0].exhaustive);
  EXPECT_EQ(report.points[0].images, 32u);
  EXPECT_THAT(report.Text(), HasSubstr("(sampled: over the budget)"));
}

TEST_F(CrashPatternTest, ReplayRunsTheReportedImage) {
  Start();
  WriteRecord();
  WriteCommit();
  Flush(0, kCommit + 8);
  WaitForFlush();
  CrashReport first = Check();
  ASSERT_FALSE(first.ok());
  // The replay line names the point and the choices; run just those.
  CrashCheckOptions replay;
  replay.only_point = 0;
  const size_t at = first.violation.find("only_point = ");
  ASSERT_NE(at, std::string::npos);
  replay.only_point = std::stoi(first.violation.substr(at + 13));
  // Same program again, recorded under the replay options.
  recorder_.reset();
  pair_.reset();
  Start(replay);
  WriteRecord();
  WriteCommit();
  Flush(0, kCommit + 8);
  WaitForFlush();
  CrashReport again = Check();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.points.size(), 1u);
  EXPECT_EQ(again.violation, first.violation);
}

// R1 covers what the connection wrote before the flush: a write posted
// after it (and executed before the flush's completion was polled) stays
// pending, so the flushed value must still be a possible image.
TEST_F(CrashPatternTest, AFlushDoesNotPersistWritesPostedAfterIt) {
  Start();
  WriteCommit(1);
  Flush(kCommit, 8);
  const uint64_t two = 2;
  std::memcpy(pair_->client_buffer() + 512, &two, 8);
  ASSERT_EQ(rpma_write(pair_->client(), pair_->server_mr_remote(), kCommit,
                       pair_->client_mr(), 512, 8, RPMA_F_COMPLETION_ON_ERROR,
                       nullptr),
            0);
  WaitForFlush();
  std::set<uint64_t> seen;
  CrashReport report = recorder_->Check([&](Image& image) {
    if (image.point().find("after polled") != std::string::npos) {
      seen.insert(image.Load<uint64_t>(0, kCommit));
    }
    return std::string();
  });
  EXPECT_TRUE(report.ok()) << report;
  EXPECT_EQ(seen, (std::set<uint64_t>{1, 2})) << report;
}

// A unit written back to an earlier value: its latest content is that
// value, not the one listed last.
TEST_F(CrashPatternTest, TheLatestWriteIsTheLastOneEvenWhenItRepeatsContent) {
  Start();
  const uint64_t one = 1, zero = 0;
  std::memcpy(pair_->client_buffer() + 512, &one, 8);
  std::memcpy(pair_->client_buffer() + 520, &zero, 8);
  for (size_t src : {512, 520}) {
    ASSERT_EQ(rpma_write(pair_->client(), pair_->server_mr_remote(), kCommit,
                         pair_->client_mr(), src, 8, RPMA_F_COMPLETION_ON_ERROR,
                         nullptr),
              0);
  }
  Land();
  CrashReport report = recorder_->Check([](Image& image) -> std::string {
    return image.Load<uint64_t>(0, kCommit) == 1 ? "holds 1" : "";
  });
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.violation, HasSubstr("1 unit(s) did not hold"));
  EXPECT_THAT(report.violation, HasSubstr("put 00 00 00 00 00 00 00 00"))
      << report;
}

// The one-assertion form, on the fixed protocol.
TEST_F(CrashPatternTest, ExpectCrashConsistentPassesTheFixedProtocol) {
  Start();
  recorder_.reset();  // the helper makes its own
  struct Log {
    uint64_t commit = 0;
    bool record_whole = false;
  };
  ExpectCrashConsistent<Log>(
      pair_->nic(),
      [&](PersistenceRecorder& recorder) {
        recorder.MarkPersistent(pair_->server_buffer(), pair_->buffer_size(),
                                "pmem");
        PersistRecord();
        CommitAndPromise(recorder);
      },
      [](Image& image) {
        Log log;
        log.commit = image.Load<uint64_t>(0, kCommit);
        if (log.commit == 1) {
          uint8_t record[kRecordLen];
          image.Read(0, kRecord, record, kRecordLen);
          log.record_whole = true;
          for (size_t i = 0; i < kRecordLen; ++i) {
            log.record_whole &= record[i] == PayloadByte(i);
          }
        }
        return log;
      },
      [](const Log& log, const Image& image) -> std::string {
        if (log.commit == 1 && !log.record_whole) return "torn log";
        if (log.commit != 1 && !image.promises().empty()) {
          return "promised commit lost";
        }
        return "";
      });
}

TEST(CrashCheckOptionsTest, AUnitThatIsNotAPowerOfTwoIsRefused) {
  auto nic = std::make_shared<FakeNic>();
  CrashCheckOptions options;
  options.unit = 3;
  PersistenceRecorder recorder(*nic, options);
  CrashReport report = recorder.Check([](Image&) { return std::string(); });
  EXPECT_FALSE(report.ok());
  EXPECT_THAT(report.violation, HasSubstr("power of two from 1 to 64"));
}

// Journals: hostile lines are refused with the file and line, never read.
TEST(CrashJournalTest, BadLinesAreRefusedWithFileAndLine) {
  for (const char* text : {"x nic exec 1\n", "12 nic landed 1 0 4096 8 zz\n",
                           "12 nic frob\n", "12 note promise\n13 note\n"}) {
    std::string error;
    EXPECT_EQ(PersistenceRecorder::FromJournalText({{"j", text}}, {}, &error),
              nullptr)
        << text;
    EXPECT_THAT(error, ::testing::MatchesRegex("j:[12]: .*")) << text;
  }
}

TEST(CrashJournalTest, ARegionPastTheEndOfMemoryIsIgnored) {
  std::string error;
  auto recorder = PersistenceRecorder::FromJournalText(
      {{"j", "12 note reg 18446744073709551615 8 56 0000000000000000\n"}}, {},
      &error);
  ASSERT_NE(recorder, nullptr) << error;
  size_t regions = 99;
  recorder->Check([&](Image& image) {
    regions = image.regions();
    return std::string();
  });
  EXPECT_EQ(regions, 0u);
}

TEST(CrashJournalTest, ALandedWriteOutsideEveryRegionIsIgnored) {
  std::string error;
  auto recorder = PersistenceRecorder::FromJournalText(
      {{"server",
        "10 note reg 4096 8 56 0000000000000000\n"
        "11 nic landed 7 0 8192 8 0102030405060708\n"}},
      {}, &error);
  ASSERT_NE(recorder, nullptr) << error;
  CrashReport report = recorder->Check([](Image& image) -> std::string {
    return image.Load<uint64_t>(0, 0) == 0 ? "" : "changed";
  });
  EXPECT_TRUE(report.ok()) << report;
}

}  // namespace
}  // namespace crash
}  // namespace rpma_harness
