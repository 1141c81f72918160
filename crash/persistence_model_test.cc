// The persistence model's rules on hand-made logs (no NIC): what a unit may
// hold after a crash once writes, flushes and the server's own persists
// have been folded in.

#include "crash/persistence_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace rpma_harness {
namespace crash {
namespace {

constexpr uint64_t kBase = 0x10000;  // unit-aligned

class ModelTest : public ::testing::Test {
 protected:
  ModelTest() : state_(8) {
    ModelOp op;
    op.kind = ModelOp::Kind::kRegion;
    op.name = "pmem";
    op.base = kBase;
    op.bytes.assign(32, 0);
    state_.Apply(op);
  }

  // A write of `value` to bytes [lo, hi) of unit `unit` by `qp`: the
  // version is the unit's latest content with those bytes replaced.
  void Write(uint64_t unit, size_t lo, size_t hi, uint8_t value, uint32_t qp) {
    ModelOp op;
    op.kind = ModelOp::Kind::kVersion;
    op.unit = unit;
    const uint8_t* latest = state_.Latest(0, unit);
    op.version.bytes.assign(latest, latest + 8);
    for (size_t i = lo; i < hi; ++i) {
      op.version.bytes[i] = value;
      op.version.mask |= uint64_t{1} << i;
    }
    op.version.qp_num = qp;
    op.version.event_seq = ++seq_;
    state_.Apply(op);
  }
  void Fold(uint64_t lo, uint64_t hi, uint32_t qp) {
    ModelOp op;
    op.kind = ModelOp::Kind::kFold;
    op.lo = lo;
    op.hi = hi;
    op.qp_num = qp;
    state_.Apply(op);
  }
  // The distinct contents unit `unit` may hold, as strings of byte values.
  std::vector<std::string> Contents(uint64_t unit) {
    std::vector<std::string> out;
    for (const auto& c : state_.Contents(0, unit)) {
      out.emplace_back(reinterpret_cast<const char*>(c.bytes), 8);
    }
    return out;
  }
  static std::string Bytes(std::vector<uint8_t> b) {
    return std::string(b.begin(), b.end());
  }

  ModelState state_;
  uint64_t seq_ = 0;
};

TEST_F(ModelTest, AWrittenUnitHoldsItsDurableBytesOrAnyWriteSince) {
  Write(0, 0, 8, 1, 7);
  Write(0, 0, 8, 2, 7);
  EXPECT_EQ(Contents(0),
            (std::vector<std::string>{Bytes({0, 0, 0, 0, 0, 0, 0, 0}),
                                      Bytes({1, 1, 1, 1, 1, 1, 1, 1}),
                                      Bytes({2, 2, 2, 2, 2, 2, 2, 2})}));
  EXPECT_EQ(state_.ChoiceUnits().size(), 1u);
}

TEST_F(ModelTest, AFlushMakesTheConnectionsLatestBytesDurable) {
  Write(0, 0, 8, 1, 7);
  Write(0, 0, 8, 2, 7);
  Fold(0, 8, 7);
  EXPECT_EQ(Contents(0),
            (std::vector<std::string>{Bytes({2, 2, 2, 2, 2, 2, 2, 2})}));
  EXPECT_TRUE(state_.ChoiceUnits().empty());
}

TEST_F(ModelTest, AFlushCoversOnlyItsRangeByteByByte) {
  Write(0, 0, 8, 1, 7);
  Fold(0, 4, 7);  // half the unit
  // Bytes 0-3 are durable now; 4-7 may still be old.
  EXPECT_EQ(Contents(0),
            (std::vector<std::string>{Bytes({1, 1, 1, 1, 0, 0, 0, 0}),
                                      Bytes({1, 1, 1, 1, 1, 1, 1, 1})}));
}

TEST_F(ModelTest, AFlushPersistsNothingAnotherConnectionWrote) {
  Write(0, 0, 8, 1, 7);
  Write(1, 0, 8, 3, 9);
  Fold(0, 16, 7);
  EXPECT_EQ(Contents(0).size(), 1u);
  EXPECT_EQ(Contents(1).size(), 2u);  // qp 9's write is still pending
}

TEST_F(ModelTest, AWriteAfterTheFlushedOneMayPersistOrNot) {
  Write(0, 0, 8, 1, 7);
  Write(0, 0, 4, 5, 9);  // another connection, after qp 7's write
  Fold(0, 8, 7);
  // qp 7's bytes are durable; qp 9's later bytes may or may not be there.
  EXPECT_EQ(Contents(0),
            (std::vector<std::string>{Bytes({1, 1, 1, 1, 1, 1, 1, 1}),
                                      Bytes({5, 5, 5, 5, 1, 1, 1, 1})}));
}

TEST_F(ModelTest, TheServersOwnPersistIsDurable) {
  Write(2, 0, 8, 4, 7);
  ModelOp op;
  op.kind = ModelOp::Kind::kPersisted;
  op.lo = 16;
  op.hi = 24;
  op.bytes.assign(8, 4);
  state_.Apply(op);
  EXPECT_TRUE(state_.ChoiceUnits().empty());
  EXPECT_EQ(state_.durable(0)[16], 4);
}

TEST_F(ModelTest, UnitsAreAlignedInTheAddressSpaceNotTheRegion) {
  ModelOp op;
  op.kind = ModelOp::Kind::kRegion;
  op.name = "odd";
  op.base = kBase + 0x1004;  // 4 bytes past a unit boundary
  op.bytes.assign(12, 0);
  state_.Apply(op);
  EXPECT_EQ(state_.pad(1), 4u);
  EXPECT_EQ(state_.durable(1).size(), 16u);  // two units
  EXPECT_EQ(state_.RegionAt(kBase + 0x1004), 1);
  EXPECT_EQ(state_.RegionAt(kBase + 0x1004 + 12), -1);
}

}  // namespace
}  // namespace crash
}  // namespace rpma_harness
