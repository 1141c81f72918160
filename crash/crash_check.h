// crash_check.h: crash consistency for remote persistent memory. A
// PersistenceRecorder watches a fake NIC and the rpma calls of a program
// that writes to a server's persistent memory; Check() then crashes the
// server at every point that matters and runs the program's recovery on
// every legal content of its persistent memory, and reports the first
// image whose recovered state breaks the program's invariant, shrunk until
// no unit of it can be put back to its latest write.
//
//   ConnectedPairOptions o;
//   o.server_usage = RPMA_MR_USAGE_WRITE_DST |
//                    RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT;
//   o.direct_write_to_pmem = true;
//   ConnectedPair pair(o);
//   crash::PersistenceRecorder recorder(pair.nic());
//   recorder.MarkPersistent(pair.server_buffer(), pair.buffer_size(), "log");
//   ... the program: rpma_write, rpma_flush, rpma_cq_get_wc, ...
//   recorder.Promise("record 1 committed");   // what the world was told
//   crash::CrashReport report = recorder.Check(
//       [](crash::Image& image) -> std::string {
//         uint64_t commit = image.Load<uint64_t>(0, 64);
//         ... recover; return "" when consistent, else what is wrong ...
//       });
//   EXPECT_TRUE(report.ok()) << report;
//
// The rules (docs/crash-consistency.md has them with their sources):
//  R1 a PERSISTENT flush, once its completion (or a later one of the same
//     connection) is polled, makes every byte of its range hold the latest
//     value the connection wrote there before the flush;
//  R2 write and receive completions and VISIBILITY flushes persist nothing;
//  R3 a byte written since its last covering flush holds, after a crash,
//     its durable value or any value written since, independently per
//     aligned unit (CrashCheckOptions::unit, 8 bytes by default), with no
//     order between units, messages or connections;
//  R4 a write posted after a flush may persist before the flushed data;
//  R5 an 8-byte aligned write (rpma_atomic_write) is one unit: never torn;
//  R6 what the server persisted itself (ServerPersisted) is durable.
//
// Recovery reads the image through Image::Read/Load: the checker branches
// only on the units recovery actually reads (as Jaaru does), so a crash
// point with 40 pending units of which recovery reads 3 needs at most the
// combinations of those 3. Past CrashCheckOptions::budget images at a point
// it samples instead and says so.
//
// One recorder per process at a time (it hooks the rpma layer through
// SetPersistenceListener). Thread-safe: the program's threads and the NIC's
// may run while it records.
#ifndef RPMA_HARNESS_CRASH_CRASH_CHECK_H_
#define RPMA_HARNESS_CRASH_CRASH_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "crash/persistence_model.h"
#include "nic/fake_nic.h"

namespace rpma_harness {
namespace crash {

class ImageRunner;

struct CrashCheckOptions {
  // R3's aligned unit G in bytes: 8 (a store) or 64 (a cache line); a power
  // of two from 1 to 64 (below 8 an 8-byte atomic write can tear, which R5
  // says hardware does not do). Another value: Check() says so and checks
  // nothing.
  size_t unit = 8;
  // Images (recovery runs) per crash point before sampling takes over.
  uint64_t budget = uint64_t{1} << 14;
  // Sampling: random images after the structured ones, from this seed.
  uint64_t seed = 1;
  // librpma's flush without a native FLUSH is an 8-byte RDMA READ, and on
  // a platform with DDIO off a READ makes everything the connection wrote
  // before it persistent, whatever range the program meant. Set to model
  // that; the default is the strict rule R1 (native FLUSH: the range only).
  bool read_flushes_all = false;
  // Whether the server's writes really reach PMem (DDIO off). When false a
  // PERSISTENT flush persists nothing, and a peer that declared
  // direct_write_to_pmem is a finding.
  bool platform_direct_write_to_pmem = true;
  // Every poll that returns a completion is a crash point (the moment a
  // side learns something). Promise() and CrashPoint() always are; the end
  // of the recording is one too.
  bool crash_at_polls = true;
  // Replay: check only this crash point (its index in the report), with
  // these choices first (the report prints both).
  int only_point = -1;
  std::vector<UnitChoice> choices;
};

// The server's persistent memory after a crash, as recovery reads it.
// Regions are numbered in the order they were marked (or registered with
// RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT); offsets are within the region.
class Image {
 public:
  size_t regions() const;
  const std::string& name(size_t region) const;
  size_t size(size_t region) const;
  // Copies bytes [offset, offset + len) of `region` (clipped to it).
  void Read(size_t region, uint64_t offset, void* dst, size_t len);
  template <class T>
  T Load(size_t region, uint64_t offset) {
    T value{};
    Read(region, offset, &value, sizeof(T));
    return value;
  }
  // The whole region: decides every unit of it (no lazy pruning).
  const uint8_t* Bytes(size_t region);
  // What the program had promised (Promise) before the crash, in order.
  const std::vector<std::string>& promises() const { return promises_; }
  // The crash point, as the report names it.
  const std::string& point() const { return point_; }

 private:
  friend class ImageRunner;
  Image() = default;
  const ModelState* state_ = nullptr;
  const ImageRunner* runner_ = nullptr;
  std::function<int(size_t choice_unit)> choose_;
  std::vector<std::vector<uint8_t>> bytes_;  // padded as the state's
  std::vector<int> decided_;                 // per choice unit: -1 or choice
  std::vector<std::string> promises_;
  std::string point_;
};

// Recovery plus invariant: "" when the recovered state is consistent with
// what the image promised, else what is wrong (it goes into the report).
using RecoveryCheck = std::function<std::string(Image& image)>;

struct CrashPointResult {
  size_t index = 0;  // the crash point's number (CrashCheckOptions::only_point)
  std::string label;
  // The last NIC event (FakeNicEvent::seq; a journal's line) before the
  // crash: where a timeline draws it.
  uint64_t after_event = 0;
  uint64_t pending_units = 0;  // units with writes not yet persistent
  double combinations = 0;     // all images of the point (product)
  uint64_t images = 0;         // recovery runs
  bool exhaustive = false;     // every image recovery could tell apart
  uint64_t violations = 0;
};

struct Finding {
  std::string text;
};

struct CrashReport {
  bool ok() const { return violation.empty(); }
  std::vector<CrashPointResult> points;
  uint64_t images = 0;
  uint64_t violating_images = 0;
  std::vector<Finding> findings;
  // The first violation, shrunk; empty when none.
  std::string violation;
  std::string Text() const;
};

std::ostream& operator<<(std::ostream& out, const CrashReport& report);

class PersistenceRecorder {
 public:
  // Observes `nic` (its executed writes and reads and its completions) and
  // the rpma layer (flushes, polls, registrations) until destroyed.
  explicit PersistenceRecorder(FakeNic& nic, CrashCheckOptions options = {});
  ~PersistenceRecorder();
  PersistenceRecorder(const PersistenceRecorder&) = delete;

  // A run of separate processes, recorded by each of them in `dir` with
  // RPMA_HARNESS_CRASH_RECORD=dir (rpma/crash_journal.h): the journals
  // merged in time order, ready for Check(). Only the persistent memory's
  // images are known then, not the memory: recovery reads the Image. On
  // failure returns null and says why in *error.
  static std::unique_ptr<PersistenceRecorder> FromJournal(
      const std::string& dir, CrashCheckOptions options, std::string* error);
  // The same from the journals' texts (name: for messages "NAME:LINE: ...").
  struct JournalFile {
    std::string name;
    std::string text;
  };
  static std::unique_ptr<PersistenceRecorder> FromJournalText(
      const std::vector<JournalFile>& files, CrashCheckOptions options,
      std::string* error);
  PersistenceRecorder& operator=(const PersistenceRecorder&) = delete;

  // [addr, addr + len) is persistent memory of the server, named `name` in
  // reports; its content now is its durable content. Returns the region's
  // index, or -1 (with a finding) when it overlaps one already marked.
  // rpma_mr_reg with RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT marks its memory
  // by itself ("mr1", "mr2", ...).
  int MarkPersistent(const void* addr, size_t len, std::string name);
  // R6: the server made [addr, addr + len) persistent itself (pmem_persist,
  // msync on a file-backed mapping): its present content is durable.
  void ServerPersisted(const void* addr, size_t len);
  // The program told the outside world `what` (acknowledged a commit,
  // printed a result): a crash point, and from here on every image carries
  // the promise (Image::promises) for the invariant to hold it to.
  void Promise(std::string what);
  // A crash point of the program's own choosing.
  void CrashPoint(std::string label);

  // Crashes at every recorded point and at the end, runs `check` on the
  // images of each, and reports. May be called more than once.
  CrashReport Check(const RecoveryCheck& check);
  // Recovery and invariant apart: `recover` builds State from the image,
  // `invariant` judges it ("" when consistent).
  template <class State>
  CrashReport Check(
      const std::function<State(Image&)>& recover,
      const std::function<std::string(const State&, const Image&)>& invariant) {
    return Check([&](Image& image) {
      State state = recover(image);
      return invariant(state, image);
    });
  }

 private:
  class Impl;
  explicit PersistenceRecorder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace crash
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_CRASH_CRASH_CHECK_H_
