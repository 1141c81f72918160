// persistence_model.h: what a server's persistent memory may hold after a
// crash (the rules R1-R6 of crash_check.h), as a state that a log of
// operations folds into. No NIC, no rpma: crash_check.cc feeds it.
//
// Each region keeps its durable bytes and, per aligned unit of G bytes, the
// versions written since the unit was last made durable: the unit's whole
// content just after each write landed, with the bytes that write wrote
// (`mask`) and who wrote them. After a crash a unit holds its durable bytes
// or one of its versions (R3); units choose independently.
//
//   ModelState state(/*unit=*/8);
//   size_t r = state.AddRegion("log", base, bytes_now, len);
//   state.Apply(ModelOp::Version(r, unit, snapshot, mask, qp, seq, opcode));
//   state.Apply(ModelOp::Fold(r, lo, hi, qp));   // a PERSISTENT flush done
#ifndef RPMA_HARNESS_CRASH_PERSISTENCE_MODEL_H_
#define RPMA_HARNESS_CRASH_PERSISTENCE_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rpma_harness {
namespace crash {

// One write's effect on one unit.
struct UnitVersion {
  std::vector<uint8_t> bytes;  // the unit's G bytes after the write landed
  uint64_t mask = 0;           // bit i: the write wrote byte i of the unit
  uint32_t qp_num = 0;         // the writing connection (requester QP)
  uint64_t event_seq = 0;      // the NIC event that executed it
  int opcode = 0;              // ibv_wr_opcode
};

struct ModelOp {
  enum class Kind {
    kRegion,     // a region is marked persistent (bytes: its content now)
    kVersion,    // a write landed on one unit
    kFold,       // R1: [lo, hi) of a region made durable for qp_num
    kPersisted,  // R6: the server persisted [lo, hi) itself (bytes)
  };
  Kind kind = Kind::kVersion;
  size_t region = 0;
  uint64_t unit = 0;  // kVersion
  UnitVersion version;
  uint64_t lo = 0, hi = 0;  // kFold, kPersisted: offsets in the region
  uint32_t qp_num = 0;      // kFold
  // kFold: only writes executed before the flush's READ count (event_seq
  // below this): a write posted after the flush is not made durable by it.
  uint64_t before_seq = UINT64_MAX;
  std::vector<uint8_t> bytes;  // kPersisted: [lo, hi); kRegion: content
  std::string name;            // kRegion
  uint64_t base = 0;           // kRegion: the region's address
};

// A unit that has versions at a crash point: a choice of the image.
struct ChoiceUnit {
  size_t region = 0;
  uint64_t unit = 0;
};

// A decided choice: the unit (region, unit index) and what it holds: its
// distinct contents numbered durable first (0), then the versions in the
// order written, a content that repeats an earlier one skipped
// (ModelState::Contents).
struct UnitChoice {
  size_t region = 0;
  uint64_t unit = 0;
  size_t choice = 0;
};

class ModelState {
 public:
  explicit ModelState(size_t unit) : unit_(unit) {}

  void Apply(const ModelOp& op);

  size_t unit() const { return unit_; }
  size_t regions() const { return regions_.size(); }
  const std::string& name(size_t r) const { return regions_[r].name; }
  uint64_t base(size_t r) const { return regions_[r].base; }
  uint64_t size(size_t r) const { return regions_[r].size; }
  // Bytes of the region before its first byte up to the unit boundary.
  uint64_t pad(size_t r) const { return regions_[r].pad; }
  // The durable bytes, padded at the front to a unit boundary.
  const std::vector<uint8_t>& durable(size_t r) const {
    return regions_[r].durable;
  }
  // The units with versions, in (region, unit) order.
  std::vector<ChoiceUnit> ChoiceUnits() const;
  const std::vector<UnitVersion>* Versions(size_t r, uint64_t unit) const;
  // The contents the unit may hold after a crash, distinct, durable first;
  // with each, the index of the last version that wrote it (-1: durable).
  struct Content {
    const uint8_t* bytes;
    int version;
  };
  std::vector<Content> Contents(size_t r, uint64_t unit) const;
  // Which of `contents` (a unit's Contents()) holds `bytes` (G of them), or
  // 0. With Latest(): the unit's latest content, which is not always the
  // last one listed (a write may put back earlier content).
  size_t ContentIndex(const std::vector<Content>& contents,
                      const uint8_t* bytes) const;
  // The latest content of a unit: its last version, else durable.
  const uint8_t* Latest(size_t r, uint64_t unit) const;
  // The region whose [base, base + size) holds addr, or -1.
  int RegionAt(uint64_t addr) const;

 private:
  struct Region {
    std::string name;
    uint64_t base = 0;
    uint64_t size = 0;
    uint64_t pad = 0;
    std::vector<uint8_t> durable;
    std::map<uint64_t, std::vector<UnitVersion>> pending;
  };
  // Forgets a unit's versions once every one equals its durable bytes (a
  // fold or the server's own persist made them so). Versions that merely
  // repeat content stay: a later fold needs to know who wrote what.
  void Prune(Region& region, uint64_t unit);

  size_t unit_;
  std::vector<Region> regions_;
};

}  // namespace crash
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_CRASH_PERSISTENCE_MODEL_H_
