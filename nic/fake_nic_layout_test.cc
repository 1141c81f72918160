// fake_nic_layout_test.cc: the send and receive slots' reset (Ring frees a
// slot by Clear(), keeping its buffers, and hands it out again as if new)
// and the SGE list's spill.

#include <gtest/gtest.h>

#include <cstring>

#include "nic/fake_nic_internal.h"

namespace rpma_harness {
namespace fake_nic_internal {
namespace {

bool FieldsAreFresh(const SendWqe& wqe) {
  const SendWqeFields fresh;
  return memcmp(static_cast<const SendWqeFields*>(&wqe), &fresh,
                sizeof(fresh)) == 0;
}

// Every byte of the plain members set to something else than its initial
// value, a spilled SGE list, inline data and a pending landing: Clear() must
// give back an entry equal to a value-initialised one and keep the buffers.
TEST(SendWqeTest, ClearedEntryEqualsAFreshOneAndKeepsItsBuffers) {
  SendWqe wqe;
  ASSERT_TRUE(FieldsAreFresh(wqe));
  // Trivially copyable: its bytes may be written directly.
  memset(static_cast<void*>(static_cast<SendWqeFields*>(&wqe)), 0xa5,
         sizeof(SendWqeFields));
  ASSERT_FALSE(FieldsAreFresh(wqe));
  for (uint32_t i = 0; i < SgeList::kInline + 3; ++i) {
    wqe.sges.push_back({0x1000u + i, 8, 7});
  }
  wqe.inline_data.assign(100, 0x5a);
  wqe.landing = std::make_unique<PendingLanding>();
  const Sge* spilled = wqe.sges.begin();
  const uint8_t* inline_buffer = wqe.inline_data.data();

  wqe.Clear();

  EXPECT_TRUE(FieldsAreFresh(wqe));
  EXPECT_TRUE(wqe.sges.empty());
  EXPECT_TRUE(wqe.inline_data.empty());
  EXPECT_EQ(wqe.landing, nullptr);
  // The next WR reuses the buffers: no allocation for the same shape.
  EXPECT_GE(wqe.inline_data.capacity(), 100u);
  wqe.inline_data.assign(100, 1);
  EXPECT_EQ(wqe.inline_data.data(), inline_buffer);
  for (uint32_t i = 0; i < SgeList::kInline + 3; ++i) {
    wqe.sges.push_back({0x2000u + i, 16, 9});
  }
  EXPECT_EQ(wqe.sges.begin(), spilled);
  EXPECT_EQ(wqe.sges[SgeList::kInline + 2].addr,
            0x2000u + SgeList::kInline + 2);
}

TEST(SgeListTest, InlineThenSpilledEntriesKeepTheirOrder) {
  SgeList list;
  for (uint32_t i = 0; i < 5; ++i) list.push_back({i, i * 2, i * 3});
  ASSERT_EQ(list.size(), 5u);
  uint32_t i = 0;
  for (const Sge& sge : list) {
    EXPECT_EQ(sge.addr, i);
    EXPECT_EQ(sge.length, i * 2);
    EXPECT_EQ(sge.lkey, i * 3);
    ++i;
  }
  list.clear();
  list.push_back({42, 1, 2});  // back to the inline entries
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list.front().addr, 42u);
}

TEST(RecvWqeTest, ClearedEntryEqualsAFreshOne) {
  RecvWqe wqe;
  wqe.wr_id = 77;
  for (uint32_t i = 0; i < SgeList::kInline + 1; ++i) {
    wqe.sges.push_back({i, 1, 1});
  }
  wqe.Clear();
  EXPECT_EQ(wqe.wr_id, RecvWqe().wr_id);
  EXPECT_TRUE(wqe.sges.empty());
}

// A ring frees slots by Clear() and hands them out without constructing:
// what a WR leaves in its slot must not show in the next one's.
TEST(RingTest, ReusedSendSlotIsFresh) {
  Ring<SendWqe> ring;
  for (int round = 0; round < 3; ++round) {
    SendWqe& slot = ring.emplace_back();
    EXPECT_TRUE(FieldsAreFresh(slot)) << "round " << round;
    EXPECT_TRUE(slot.sges.empty());
    slot.wr_id = 9;
    slot.in_flight = true;
    slot.sges.push_back({1, 2, 3});
    ring.pop_front();
  }
}

}  // namespace
}  // namespace fake_nic_internal
}  // namespace rpma_harness
