#include "crash/crash_check.h"

#include <dirent.h>
#include <infiniband/verbs.h>
#include <librpma.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "rpma/harness.h"

namespace rpma_harness {
namespace crash {

// ---------------------------------------------------------------- Image --

size_t Image::regions() const { return state_->regions(); }
const std::string& Image::name(size_t region) const {
  return state_->name(region);
}
size_t Image::size(size_t region) const { return state_->size(region); }

// The runner that owns an Image's choices: maps a (region, unit) to its
// choice-unit index and resolves a unit the first time recovery reads it.
class ImageRunner {
 public:
  ImageRunner(const ModelState& state, std::vector<std::string> promises,
              std::string point)
      : state_(state),
        promises_(std::move(promises)),
        point_(std::move(point)),
        units_(state.ChoiceUnits()) {
    for (size_t i = 0; i < units_.size(); ++i) {
      index_[{units_[i].region, units_[i].unit}] = i;
      contents_.push_back(state.Contents(units_[i].region, units_[i].unit));
      latest_.push_back(state.ContentIndex(
          contents_.back(), state.Latest(units_[i].region, units_[i].unit)));
    }
  }

  const ModelState& state() const { return state_; }
  const std::vector<ChoiceUnit>& units() const { return units_; }
  size_t choices(size_t i) const { return contents_[i].size(); }
  const std::vector<ModelState::Content>& contents(size_t i) const {
    return contents_[i];
  }
  // The content of unit i's last write (ModelState::ContentIndex).
  size_t latest(size_t i) const { return latest_[i]; }
  double combinations() const {
    double product = 1;
    for (const auto& c : contents_) product *= static_cast<double>(c.size());
    return product;
  }

  // A fresh image whose undecided units ask `choose`.
  std::unique_ptr<Image> Make(std::function<int(size_t)> choose) const {
    std::unique_ptr<Image> image(new Image());
    image->state_ = &state_;
    image->choose_ = std::move(choose);
    for (size_t r = 0; r < state_.regions(); ++r) {
      image->bytes_.push_back(state_.durable(r));
    }
    image->decided_.assign(units_.size(), -1);
    image->promises_ = promises_;
    image->point_ = point_;
    image->runner_ = this;
    return image;
  }

  // Puts the unit's chosen content into the image the first time it is
  // read; a unit nobody read stays undecided (and unbranched).
  void Resolve(Image* image, size_t region, uint64_t first_unit,
               uint64_t end_unit) const {
    auto it = index_.lower_bound({region, first_unit});
    const size_t g = state_.unit();
    for (; it != index_.end() && it->first.first == region &&
           it->first.second < end_unit;
         ++it) {
      const size_t i = it->second;
      if (image->decided_[i] >= 0) continue;
      int c = image->choose_(i);
      if (c < 0 || static_cast<size_t>(c) >= contents_[i].size()) c = 0;
      image->decided_[i] = c;
      std::memcpy(image->bytes_[region].data() + it->first.second * g,
                  contents_[i][c].bytes, g);
    }
  }

 private:
  const ModelState& state_;
  std::vector<std::string> promises_;
  std::string point_;
  std::vector<ChoiceUnit> units_;
  std::map<std::pair<size_t, uint64_t>, size_t> index_;
  std::vector<std::vector<ModelState::Content>> contents_;
  std::vector<size_t> latest_;
};

void Image::Read(size_t region, uint64_t offset, void* dst, size_t len) {
  if (region >= regions() || offset >= size(region)) return;
  len = static_cast<size_t>(std::min<uint64_t>(len, size(region) - offset));
  if (len == 0) return;
  const uint64_t g = state_->unit();
  const uint64_t start = state_->pad(region) + offset;
  runner_->Resolve(this, region, start / g, (start + len + g - 1) / g);
  std::memcpy(dst, bytes_[region].data() + start, len);
}

const uint8_t* Image::Bytes(size_t region) {
  const uint64_t g = state_->unit();
  runner_->Resolve(this, region, 0, bytes_[region].size() / g);
  return bytes_[region].data() + state_->pad(region);
}

// ----------------------------------------------------------- Recorder --

namespace {

bool WritesRemote(int opcode) {
  return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
         opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool IsMessage(int opcode) {
  return opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_SEND ||
         opcode == IBV_WR_SEND_WITH_IMM;
}

std::string Hex(const uint8_t* bytes, size_t len) {
  std::string out;
  char b[4];
  for (size_t i = 0; i < len && i < 16; ++i) {
    std::snprintf(b, sizeof(b), "%s%02x", i ? " " : "", bytes[i]);
    out += b;
  }
  if (len > 16) out += " ...";
  return out;
}

std::string QpName(uint32_t qp_num) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%x", qp_num);
  return b;
}

// splitmix64: the sampler's platform-independent draws.
uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr size_t kMaxFindings = 20;

}  // namespace

class PersistenceRecorder::Impl {
 public:
  Impl(FakeNic* nic, CrashCheckOptions options)
      : nic_(nic),
        options_(ValidUnit(std::move(options), &error_)),
        live_(options_.unit) {
    if (nic_ == nullptr) return;  // fed from journals (FeedJournalLine)
    if (!nic_->config().fabric_dir.empty()) {
      // Its writes' remote addresses are other processes' memory.
      error_ =
          "PersistenceRecorder watches one process's NIC, and this NIC is on "
          "a cross-process fabric (RPMA_HARNESS_FABRIC): record the "
          "processes with RPMA_HARNESS_CRASH_RECORD and check the journals "
          "(crash_check)";
      return;
    }
    observer_ = nic_->AddObserver(
        [this](const FakeNicEvent& event) { OnNicEvent(event, nullptr); });
    SetPersistenceListener(
        [this](const PersistenceNote& note) { OnNote(note); });
  }
  ~Impl() {
    if (nic_ == nullptr || observer_ < 0) return;
    SetPersistenceListener(nullptr);
    nic_->RemoveObserver(observer_);
  }

  // One journal line (rpma/crash_journal.h) without its time stamp; false
  // if it does not parse.
  bool FeedJournalLine(const std::string& line);

  int MarkPersistent(const void* addr, size_t len, std::string name) {
    std::lock_guard<std::mutex> lock(mu_);
    return MarkLocked(addr, len, std::move(name),
                      static_cast<const uint8_t*>(addr));
  }

  void ServerPersisted(const void* addr, size_t len) {
    std::lock_guard<std::mutex> lock(mu_);
    PersistedLocked(addr, len, static_cast<const uint8_t*>(addr));
  }

  // `bytes`: the content of [addr, addr + len) now (in this process, the
  // memory itself; from a journal, what it recorded).
  void PersistedLocked(const void* addr, size_t len, const uint8_t* bytes) {
    const uint64_t a = reinterpret_cast<uint64_t>(addr);
    if (len > UINT64_MAX - a) return;
    // The last moment at which what the server persists may be lost.
    PointLocked("before the server's own persist");
    for (size_t r = 0; r < live_.regions(); ++r) {
      const uint64_t lo = std::max(a, live_.base(r));
      const uint64_t hi = std::min(a + len, live_.base(r) + live_.size(r));
      if (lo >= hi) continue;
      ModelOp op;
      op.kind = ModelOp::Kind::kPersisted;
      op.region = r;
      op.lo = lo - live_.base(r);
      op.hi = hi - live_.base(r);
      op.bytes.assign(bytes + (lo - a), bytes + (hi - a));
      ApplyLocked(std::move(op));
    }
  }

  void Promise(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    PromiseLocked(std::move(what));
  }

  void PromiseLocked(std::string what) {
    promises_.push_back(what);
    dirty_ = true;
    PointLocked("after promise \"" + what + "\"");
  }

  void CrashPoint(std::string label) {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = true;
    PointLocked(std::move(label));
  }

  CrashReport Check(const RecoveryCheck& check);

 private:
  struct FlushNote {
    uint64_t remote_addr = 0;
    uint64_t len = 0;
    int type = 0;
    uint64_t local_addr = 0;  // the connection's read-after-write buffer
    uint64_t executed_seq = UINT64_MAX;  // its READ's kExecute
  };
  struct Cqe {
    uint64_t wr_id = 0;
    int opcode = 0;
    std::vector<FlushNote> flushes;
  };
  struct Point {
    std::string label;
    size_t log_size = 0;
    size_t promises = 0;
    uint64_t after_event = 0;  // the last NIC event seen before the point
  };

  int MarkLocked(const void* addr, size_t len, std::string name,
                 const uint8_t* bytes) {
    const uint64_t a = reinterpret_cast<uint64_t>(addr);
    if (len == 0 || addr == nullptr || a > UINT64_MAX - 64 ||
        len > UINT64_MAX - 64 - a) {
      return -1;
    }
    for (size_t r = 0; r < live_.regions(); ++r) {
      if (Retired(r)) continue;
      if (a < live_.base(r) + live_.size(r) && live_.base(r) < a + len) {
        if (live_.base(r) == a && live_.size(r) == len) {
          return static_cast<int>(r);  // marked again (and registered)
        }
        FindingLocked("persistent region \"" + name + "\" overlaps \"" +
                      live_.name(r) + "\"; it is not recorded");
        return -1;
      }
    }
    if (len == 0 || addr == nullptr) return -1;
    ModelOp op;
    op.kind = ModelOp::Kind::kRegion;
    op.name = std::move(name);
    op.base = a;
    op.bytes.assign(bytes, bytes + len);
    ApplyLocked(std::move(op));
    return static_cast<int>(live_.regions() - 1);
  }

  void ApplyLocked(ModelOp op) {
    live_.Apply(op);
    log_.push_back(std::move(op));
    dirty_ = true;
  }

  void PointLocked(std::string label) {
    if (!dirty_) return;
    points_.push_back(
        {std::move(label), log_.size(), promises_.size(), last_event_});
    dirty_ = false;
  }

  void FindingLocked(std::string text) {
    for (const Finding& f : findings_) {
      if (f.text == text) return;
    }
    if (findings_.size() < kMaxFindings) findings_.push_back({std::move(text)});
  }

  bool Retired(size_t r) const { return r < retired_.size() && retired_[r]; }

  // The live regions [addr, addr + len) meets, each with the part of the
  // range inside it as region offsets [lo, hi).
  struct Overlap {
    size_t region;
    uint64_t lo, hi;
  };
  std::vector<Overlap> OverlapsLocked(uint64_t addr, uint64_t len) const {
    std::vector<Overlap> out;
    if (len == 0 || len > UINT64_MAX - addr) return out;
    for (size_t r = 0; r < live_.regions(); ++r) {
      if (Retired(r)) continue;
      const uint64_t lo = std::max(addr, live_.base(r));
      const uint64_t hi = std::min(addr + len, live_.base(r) + live_.size(r));
      if (lo < hi) out.push_back({r, lo - live_.base(r), hi - live_.base(r)});
    }
    return out;
  }
  int RegionAtLocked(uint64_t addr) const {
    std::vector<Overlap> o = OverlapsLocked(addr, 1);
    return o.empty() ? -1 : static_cast<int>(o[0].region);
  }

  // A write landed (the NIC's kExecute right after its bytes moved, or a
  // journal's kLanded): one version per unit it touched, the unit's bytes as
  // they are now. `landed`: the bytes of [remote_addr, remote_addr +
  // byte_len) now.
  void RecordWriteLocked(const FakeNicEvent& event, const uint8_t* landed) {
    // An RDMA WRITE that completed wrote every byte of its range, changed
    // or not. Of a failed one, or an atomic (a compare-and-swap that did
    // not swap wrote nothing), only the bytes that changed are known.
    const bool whole = event.status == IBV_WC_SUCCESS &&
                       (event.opcode == IBV_WR_RDMA_WRITE ||
                        event.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
    const uint64_t g = live_.unit();
    for (const Overlap& o : OverlapsLocked(event.remote_addr, event.byte_len)) {
      const size_t r = o.region;
      const uint64_t base = live_.base(r), pad = live_.pad(r);
      const uint64_t lo = o.lo + pad, hi = o.hi + pad;
      for (uint64_t u = lo / g; u * g < hi; ++u) {
        UnitVersion v;
        const uint8_t* latest = live_.Latest(r, u);
        v.bytes.assign(latest, latest + g);
        uint64_t mask = 0;
        for (uint64_t b = std::max(lo, u * g); b < std::min(hi, (u + 1) * g);
             ++b) {
          const uint8_t now = landed[base + b - pad - event.remote_addr];
          const size_t i = b - u * g;
          if (whole || now != v.bytes[i]) {
            mask |= uint64_t{1} << i;
            v.bytes[i] = now;
          }
        }
        if (mask == 0) continue;
        v.mask = mask;
        v.qp_num = event.qp_num;
        v.event_seq = event.seq;
        v.opcode = event.opcode;
        written_[event.qp_num].insert({r, u});
        ModelOp op;
        op.kind = ModelOp::Kind::kVersion;
        op.region = r;
        op.unit = u;
        op.version = std::move(v);
        ApplyLocked(std::move(op));
      }
    }
  }

  // Units holding a byte `qp_num` wrote that is not durable yet.
  uint64_t PendingOfLocked(uint32_t qp_num) const {
    uint64_t count = 0;
    const size_t g = live_.unit();
    for (const ChoiceUnit& c : live_.ChoiceUnits()) {
      const uint8_t* durable = live_.durable(c.region).data() + c.unit * g;
      bool pending = false;
      for (const UnitVersion& v : *live_.Versions(c.region, c.unit)) {
        if (v.qp_num != qp_num) continue;
        for (size_t i = 0; i < g && !pending; ++i) {
          pending = (v.mask >> i & 1) != 0 && v.bytes[i] != durable[i];
        }
      }
      count += pending;
    }
    return count;
  }

  // `landed`: a journal's bytes of a kLanded event (nullptr: read them
  // from this process's memory).
  void OnNicEvent(const FakeNicEvent& event, const uint8_t* landed) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.empty()) return;
    last_event_ = std::max(last_event_, event.seq);
    if (event.kind == FakeNicEvent::Kind::kLanded) {
      // A write from another process landed here (journals only: the
      // in-process NIC reports its writes as kExecute).
      // Fed from a journal the bytes are the journal's; live, this
      // process's memory.
      const uint8_t* bytes =
          nic_ == nullptr ? landed
                          : reinterpret_cast<const uint8_t*>(event.remote_addr);
      if (WritesRemote(event.opcode) && bytes != nullptr) {
        RecordWriteLocked(event, bytes);
      }
      if (IsMessage(event.opcode)) {
        message_from_ = event.qp_num;
        message_landed_ = true;
      }
      return;
    }
    if (event.kind == FakeNicEvent::Kind::kExecute) {
      // In a journal the requester's kExecute is in another process than
      // the memory: its kLanded there has the bytes.
      if (nic_ != nullptr) {
        if (WritesRemote(event.opcode)) {
          RecordWriteLocked(
              event, reinterpret_cast<const uint8_t*>(event.remote_addr));
        }
        if (event.status == IBV_WC_SUCCESS && IsMessage(event.opcode)) {
          message_from_ = event.qp_num;
          message_landed_ = true;
        }
      }
      if (event.opcode == IBV_WR_RDMA_READ && event.status == IBV_WC_SUCCESS) {
        // A flush's READ has executed: the flush is done at the responder
        // and waits for the completion the program polls (R1).
        // Only a flush's READ lands in the connection's read-after-write
        // buffer; flushes execute in the order they were posted.
        std::deque<FlushNote>& noted = noted_[event.qp_num];
        if (!noted.empty() && noted.front().local_addr == event.local_addr &&
            noted.front().remote_addr == event.remote_addr) {
          FlushNote flush = noted.front();
          noted.pop_front();
          flush.executed_seq = event.seq;
          executed_[event.qp_num].push_back(flush);
        }
      }
      return;
    }
    if (event.kind != FakeNicEvent::Kind::kCompletion ||
        event.status != IBV_WC_SUCCESS) {
      return;
    }
    if (event.opcode < IBV_WC_RECV) {
      // A successful send-side CQE: the flushes executed before it are
      // complete once the program polls it (or a later one of the QP).
      Cqe cqe;
      cqe.wr_id = event.wr_id;
      cqe.opcode = event.opcode;
      cqe.flushes = std::move(executed_[event.qp_num]);
      executed_[event.qp_num].clear();
      cqes_[event.qp_num].push_back(std::move(cqe));
    } else if (message_landed_) {
      message_landed_ = false;
      sender_[event.qp_num] = message_from_;
      unpersisted_[event.qp_num].push_back(PendingOfLocked(message_from_));
    }
  }

  void OnNote(const PersistenceNote& note) {
    std::lock_guard<std::mutex> lock(mu_);
    switch (note.kind) {
      case PersistenceNote::Kind::kMrReg:
        if (note.usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) {
          MarkLocked(note.addr, note.len, "mr" + std::to_string(++registered_),
                     static_cast<const uint8_t*>(note.addr));
        }
        return;
      case PersistenceNote::Kind::kMrDereg: {
        // The memory may be reused for something else: no longer recorded
        // (its images stay: what it persisted is still there).
        const uint64_t a = reinterpret_cast<uint64_t>(note.addr);
        for (size_t r = 0; r < live_.regions(); ++r) {
          if (!Retired(r) && live_.base(r) == a && live_.size(r) == note.len) {
            retired_.resize(live_.regions(), false);
            retired_[r] = true;
          }
        }
        return;
      }
      case PersistenceNote::Kind::kFlushNotPosted: {
        std::deque<FlushNote>& noted = noted_[note.qp_num];
        for (auto it = noted.rbegin(); it != noted.rend(); ++it) {
          if (it->remote_addr == note.remote_addr &&
              it->local_addr == note.local_addr) {
            noted.erase(std::next(it).base());
            break;
          }
        }
        return;
      }
      case PersistenceNote::Kind::kFlush: {
        const int r = RegionAtLocked(note.remote_addr);
        if (r >= 0 && note.flush_type == RPMA_FLUSH_TYPE_VISIBILITY) {
          FindingLocked(
              "rpma_flush(RPMA_FLUSH_TYPE_VISIBILITY) on persistent memory \"" +
              live_.name(r) + "\" (qp " + QpName(note.qp_num) +
              "): it makes data visible, not persistent (R2); use "
              "RPMA_FLUSH_TYPE_PERSISTENT");
        }
        if (note.flush_type == RPMA_FLUSH_TYPE_PERSISTENT &&
            note.direct_write_to_pmem &&
            !options_.platform_direct_write_to_pmem) {
          FindingLocked(
              "the peer cfg declares direct_write_to_pmem, but the platform "
              "writes through the CPU cache (DDIO on): "
              "rpma_flush(PERSISTENT) persists nothing there "
              "(rpma_peer_cfg_set_direct_write_to_pmem(3))");
        }
        FlushNote flush;
        flush.remote_addr = note.remote_addr;
        flush.len = note.len;
        flush.type = note.flush_type;
        flush.local_addr = note.local_addr;
        noted_[note.qp_num].push_back(flush);
        return;
      }
      case PersistenceNote::Kind::kPolled:
        OnPolledLocked(note.wc);
        return;
      case PersistenceNote::Kind::kPersisted:
        PersistedLocked(note.addr, note.len,
                        static_cast<const uint8_t*>(note.addr));
        return;
      case PersistenceNote::Kind::kPromise:
        PromiseLocked(note.text);
        return;
    }
  }

  void OnPolledLocked(const ibv_wc& wc) {
    const std::string what = std::string("polled ") + WcOpcodeName(wc.opcode) +
                             " " + WcStatusName(wc.status) + " on qp " +
                             QpName(wc.qp_num);
    if (wc.status != IBV_WC_SUCCESS) {
      if (options_.crash_at_polls) PointLocked("after " + what);
      return;
    }
    if (wc.opcode >= IBV_WC_RECV) {
      std::deque<uint64_t>& queue = unpersisted_[wc.qp_num];
      if (!queue.empty()) {
        const uint64_t pending = queue.front();
        queue.pop_front();
        if (pending > 0) {
          FindingLocked(
              "qp " + QpName(wc.qp_num) + " received " +
              WcOpcodeName(wc.opcode) + " from qp " +
              QpName(sender_[wc.qp_num]) + " while " + std::to_string(pending) +
              " unit(s) the sender wrote were not yet persistent (no "
              "PERSISTENT flush of theirs had been polled complete): a "
              "server that takes this message as \"committed\" can lose "
              "them in a crash");
        }
      }
      if (options_.crash_at_polls) PointLocked("after " + what);
      return;
    }
    std::deque<Cqe>& cqes = cqes_[wc.qp_num];
    auto it = std::find_if(cqes.begin(), cqes.end(), [&](const Cqe& c) {
      return c.wr_id == wc.wr_id && c.opcode == static_cast<int>(wc.opcode);
    });
    std::vector<FlushNote> flushes;
    if (it != cqes.end()) {
      for (auto c = cqes.begin(); c != it + 1; ++c) {
        for (FlushNote& f : c->flushes) flushes.push_back(f);
      }
      cqes.erase(cqes.begin(), it + 1);
    }
    bool folds = false;
    for (const FlushNote& f : flushes) {
      folds |= f.type == RPMA_FLUSH_TYPE_PERSISTENT;
    }
    // The moment before the program learns of the flush is a crash point
    // of its own: the last one at which the flushed data may be lost.
    if (folds && options_.crash_at_polls) PointLocked("before " + what);
    for (const FlushNote& f : flushes) FoldLocked(wc.qp_num, f);
    if (options_.crash_at_polls) PointLocked("after " + what);
  }

  void FoldLocked(uint32_t qp_num, const FlushNote& flush) {
    if (flush.type != RPMA_FLUSH_TYPE_PERSISTENT) return;  // R2
    if (!options_.platform_direct_write_to_pmem) return;
    const std::vector<Overlap> covered =
        OverlapsLocked(flush.remote_addr, std::max<uint64_t>(flush.len, 1));
    if (covered.empty()) return;
    // Did the connection ever write into the range?
    const uint64_t g = live_.unit();
    bool wrote = false;
    for (const Overlap& o : covered) {
      const uint64_t pad = live_.pad(o.region);
      for (uint64_t u = (o.lo + pad) / g; u * g < o.hi + pad && !wrote; ++u) {
        wrote = written_[qp_num].count({o.region, u}) != 0;
      }
    }
    if (!wrote) {
      const Overlap& o = covered.front();
      FindingLocked("rpma_flush(PERSISTENT) of \"" + live_.name(o.region) +
                    "\" [" + std::to_string(o.lo) + ", " +
                    std::to_string(o.hi) + ") by qp " + QpName(qp_num) +
                    " covers nothing that connection wrote");
    }
    auto fold = [&](size_t region, uint64_t from, uint64_t to) {
      ModelOp op;
      op.kind = ModelOp::Kind::kFold;
      op.region = region;
      op.lo = from;
      op.hi = to;
      op.qp_num = qp_num;
      op.before_seq = flush.executed_seq;
      ApplyLocked(std::move(op));
    };
    if (options_.read_flushes_all) {
      // librpma's READ flush on a DDIO-off platform: the READ response
      // follows every earlier write of the QP (IB spec o9-20), so all of
      // them are in the persistent domain.
      for (size_t region = 0; region < live_.regions(); ++region) {
        fold(region, 0, live_.size(region));
      }
    } else {
      for (const Overlap& o : covered) fold(o.region, o.lo, o.hi);
    }
  }

  static CrashCheckOptions ValidUnit(CrashCheckOptions options,
                                     std::string* error) {
    if (options.unit == 0 || options.unit > 64 ||
        (options.unit & (options.unit - 1)) != 0) {
      *error = "CrashCheckOptions::unit is " + std::to_string(options.unit) +
               ": it must be a power of two from 1 to 64";
      options.unit = 8;
    }
    return options;
  }

  std::string error_;  // set: nothing is recorded, Check() says this
  FakeNic* nic_;       // null: fed from journals
  int observer_ = -1;
  std::vector<bool> retired_;  // regions deregistered
  uint64_t journal_lines_ = 0;
  uint64_t last_event_ = 0;
  const CrashCheckOptions options_;
  std::mutex mu_;
  ModelState live_;
  std::vector<ModelOp> log_;
  std::vector<Point> points_;
  std::vector<std::string> promises_;
  bool dirty_ = false;
  std::vector<Finding> findings_;
  int registered_ = 0;
  std::map<uint32_t, std::deque<FlushNote>> noted_;
  std::map<uint32_t, std::vector<FlushNote>> executed_;
  std::map<uint32_t, std::deque<Cqe>> cqes_;
  std::map<uint32_t, std::set<std::pair<size_t, uint64_t>>> written_;
  bool message_landed_ = false;
  uint32_t message_from_ = 0;
  std::map<uint32_t, uint32_t> sender_;
  std::map<uint32_t, std::deque<uint64_t>> unpersisted_;
};

namespace {

bool ParseHex(const std::string& hex, std::vector<uint8_t>* out) {
  if (hex.size() % 2 != 0) return false;
  out->resize(hex.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

bool PersistenceRecorder::Impl::FeedJournalLine(const std::string& line) {
  ++journal_lines_;
  std::istringstream in(line);
  std::string source, kind;
  if (!(in >> source >> kind)) return false;
  if (source == "nic") {
    FakeNicEvent e;
    std::vector<uint8_t> bytes;
    if (kind == "exec") {
      e.kind = FakeNicEvent::Kind::kExecute;
      if (!(in >> e.qp_num >> e.opcode >> e.status >> e.remote_addr >>
            e.byte_len >> e.local_addr)) {
        return false;
      }
    } else if (kind == "cqe") {
      e.kind = FakeNicEvent::Kind::kCompletion;
      if (!(in >> e.qp_num >> e.wr_id >> e.opcode >> e.status)) return false;
    } else if (kind == "landed") {
      e.kind = FakeNicEvent::Kind::kLanded;
      std::string hex;
      if (!(in >> e.qp_num >> e.opcode >> e.remote_addr >> e.byte_len)) {
        return false;
      }
      in >> hex;
      if (!ParseHex(hex, &bytes) || bytes.size() != e.byte_len) return false;
    } else {
      return false;
    }
    e.seq = journal_lines_;  // events are named by their merged line
    OnNicEvent(e, bytes.data());
    return true;
  }
  if (source != "note") return false;
  PersistenceNote n;
  if (kind == "reg" || kind == "persisted") {
    uint64_t addr = 0, len = 0;
    int usage = 0;
    std::string hex;
    if (!(in >> addr >> len)) return false;
    if (kind == "reg" && !(in >> usage)) return false;
    in >> hex;
    std::vector<uint8_t> bytes;
    if (kind == "reg" && !(usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)) {
      return true;  // not persistent memory: no content recorded
    }
    if (!ParseHex(hex, &bytes) || bytes.size() != len) return false;
    const void* at = reinterpret_cast<const void*>(addr);
    std::lock_guard<std::mutex> lock(mu_);
    if (kind == "reg") {
      MarkLocked(at, len, "mr" + std::to_string(++registered_), bytes.data());
    } else {
      PersistedLocked(at, len, bytes.data());
    }
    return true;
  }
  if (kind == "flush" || kind == "unflush") {
    int declared = 0;
    n.kind = kind == "flush" ? PersistenceNote::Kind::kFlush
                             : PersistenceNote::Kind::kFlushNotPosted;
    if (!(in >> n.qp_num >> n.remote_addr >> n.len >> n.flush_type >>
          declared >> n.local_addr)) {
      return false;
    }
    n.direct_write_to_pmem = declared != 0;
  } else if (kind == "polled") {
    int opcode = 0, status = 0;
    n.kind = PersistenceNote::Kind::kPolled;
    if (!(in >> n.wc.qp_num >> n.wc.wr_id >> opcode >> status)) return false;
    // Values of the enums only (ibv_wc_status: SUCCESS .. GENERAL_ERR;
    // ibv_wc_opcode: below 256).
    if (opcode < 0 || opcode > 255 || status < IBV_WC_SUCCESS ||
        status > IBV_WC_GENERAL_ERR) {
      return false;
    }
    n.wc.opcode = static_cast<ibv_wc_opcode>(opcode);
    n.wc.status = static_cast<ibv_wc_status>(status);
  } else if (kind == "promise") {
    n.kind = PersistenceNote::Kind::kPromise;
    std::getline(in, n.text);
    if (!n.text.empty() && n.text[0] == ' ') n.text.erase(0, 1);
  } else {
    return false;
  }
  OnNote(n);
  return true;
}

// ------------------------------------------------------------ Checking --

namespace {

struct Decision {
  size_t unit = 0;  // choice-unit index
  size_t choice = 0;
  size_t choices = 0;
  size_t latest = 0;  // the choice that is the unit's last write
  bool lost() const { return choice != latest; }
};

struct Run {
  std::string verdict;
  std::vector<Decision> decisions;
};

// One crash point: the DFS over what recovery reads, then sampling.
class PointChecker {
 public:
  PointChecker(const ImageRunner& runner, const RecoveryCheck& check,
               const CrashCheckOptions& options)
      : runner_(runner), check_(check), options_(options) {}

  // Runs recovery with the unit choices `pick` gives (by choice-unit
  // index); records which units it read and what each held.
  Run RunWith(const std::function<size_t(size_t)>& pick) {
    Run run;
    std::unique_ptr<Image> image = runner_.Make([&](size_t i) {
      size_t c = pick(i);
      if (c >= runner_.choices(i)) c = runner_.latest(i);  // a stale replay
      run.decisions.push_back({i, c, runner_.choices(i), runner_.latest(i)});
      return static_cast<int>(c);
    });
    run.verdict = check_(*image);
    ++images_;
    return run;
  }

  uint64_t images() const { return images_; }
  bool nondeterministic() const { return nondeterministic_; }

  // Lazily exhaustive (Jaaru): depth-first over the decisions recovery
  // makes, each new unit first at its durable content. Returns the first
  // violating run, if any; `*complete` tells whether every distinguishable
  // image was tried within the budget.
  bool Explore(Run* violation, bool* complete) {
    std::vector<Decision> prefix;
    *complete = false;
    while (images_ < options_.budget) {
      size_t k = 0;
      Run run = RunWith([&](size_t i) -> size_t {
        const size_t at = k++;
        if (at < prefix.size() && prefix[at].unit != i) {
          // The same choices, yet recovery read another unit: it depends on
          // something besides the image, and the tree is not this one.
          nondeterministic_ = true;
        }
        return at < prefix.size() && prefix[at].unit == i ? prefix[at].choice
                                                          : 0;
      });
      if (!run.verdict.empty()) {
        *violation = std::move(run);
        return true;
      }
      std::vector<Decision>& taken = run.decisions;
      while (!taken.empty() &&
             taken.back().choice + 1 >= taken.back().choices) {
        taken.pop_back();
      }
      if (taken.empty()) {
        *complete = !nondeterministic_;
        return false;
      }
      taken.back().choice++;
      prefix = std::move(taken);
    }
    return false;
  }

  // Past the budget: images of every unit decided up front. All-new,
  // every prefix of the write order (globally and per connection), one
  // unit off all-new and off all-old, then seeded random ones.
  bool Sample(uint64_t limit, Run* violation) {
    const std::vector<ChoiceUnit>& units = runner_.units();
    const size_t n = units.size();
    std::vector<size_t> latest(n);
    for (size_t i = 0; i < n; ++i) latest[i] = runner_.latest(i);
    auto tryit = [&](const std::vector<size_t>& assignment) {
      if (images_ >= limit) return false;
      Run run = RunWith([&](size_t i) { return assignment[i]; });
      if (run.verdict.empty()) return false;
      *violation = std::move(run);
      return true;
    };
    if (tryit(latest)) return true;
    // Prefixes of the write order: every content whose last write came
    // at or before the cut.
    std::set<uint64_t> cuts;
    std::set<uint32_t> qps;
    for (size_t i = 0; i < n; ++i) {
      const auto* versions = Versions(units[i]);
      for (const UnitVersion& v : *versions) {
        cuts.insert(v.event_seq);
        qps.insert(v.qp_num);
      }
    }
    // Each unit as its last write at or before the cut (of `qp`, or of
    // anyone when qp < 0) left it; durable when there was none.
    auto prefix = [&](uint64_t cut, int qp) {
      std::vector<size_t> a(n, 0);
      for (size_t i = 0; i < n; ++i) {
        const auto* versions = Versions(units[i]);
        for (size_t j = versions->size(); j-- > 0;) {
          const UnitVersion& v = (*versions)[j];
          if (v.event_seq <= cut &&
              (qp < 0 || v.qp_num == static_cast<uint32_t>(qp))) {
            a[i] = runner_.state().ContentIndex(runner_.contents(i),
                                                v.bytes.data());
            break;
          }
        }
      }
      return a;
    };
    for (uint64_t cut : cuts) {
      if (tryit(prefix(cut, -1))) return true;
    }
    if (qps.size() > 1) {
      for (uint32_t qp : qps) {
        for (uint64_t cut : cuts) {
          if (tryit(prefix(cut, static_cast<int>(qp)))) return true;
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      for (size_t c = 0; c < runner_.choices(i); ++c) {
        if (c == latest[i]) continue;
        std::vector<size_t> a = latest;
        a[i] = c;
        if (tryit(a)) return true;
      }
      for (size_t c = 1; c < runner_.choices(i); ++c) {
        std::vector<size_t> a(n, 0);
        a[i] = c;
        if (tryit(a)) return true;
      }
    }
    uint64_t seed = options_.seed;
    while (images_ < limit) {
      std::vector<size_t> a(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = NextRandom(&seed) % runner_.choices(i);
      }
      if (tryit(a)) return true;
    }
    return false;
  }

  // Delta debugging, one unit at a time: puts each unit that did not hold
  // its latest content back to it while the violation remains. The result
  // is minimal (no single unit can be put back), not always the smallest.
  Run Shrink(const Run& failing) {
    std::map<size_t, size_t> deviating;
    for (const Decision& d : failing.decisions) {
      if (d.lost()) deviating[d.unit] = d.choice;
    }
    auto run_with = [&](const std::map<size_t, size_t>& dev) {
      return RunWith([&](size_t i) {
        auto it = dev.find(i);
        return it != dev.end() ? it->second : runner_.latest(i);
      });
    };
    Run best = failing;
    std::vector<size_t> order;
    for (const auto& [unit, choice] : deviating) order.push_back(unit);
    for (size_t unit : order) {
      std::map<size_t, size_t> trial = deviating;
      trial.erase(unit);
      Run run = run_with(trial);
      if (!run.verdict.empty()) {
        deviating = std::move(trial);
        best = std::move(run);
      }
    }
    return best;
  }

  const std::vector<UnitVersion>* Versions(const ChoiceUnit& u) const {
    return runner_.state().Versions(u.region, u.unit);
  }

 private:
  const ImageRunner& runner_;
  const RecoveryCheck& check_;
  const CrashCheckOptions& options_;
  uint64_t images_ = 0;
  bool nondeterministic_ = false;
};

std::string DescribeRun(const ModelState& state, const ImageRunner& runner,
                        const Run& run, int point_index) {
  std::ostringstream out;
  const size_t g = state.unit();
  std::vector<const Decision*> lost;
  for (const Decision& d : run.decisions) {
    if (d.lost()) lost.push_back(&d);
  }
  out << "  " << lost.size() << " unit(s) did not hold their latest write ("
      << run.decisions.size() << " read by recovery, " << runner.units().size()
      << " pending):\n";
  for (const Decision* d : lost) {
    const ChoiceUnit& u = runner.units()[d->unit];
    const auto& contents = runner.contents(d->unit);
    const auto& versions = *state.Versions(u.region, u.unit);
    const UnitVersion& last = versions.back();
    const int64_t pad = static_cast<int64_t>(state.pad(u.region));
    const int64_t from = std::max<int64_t>(0, int64_t(u.unit * g) - pad);
    const int64_t to = std::min<int64_t>(int64_t(state.size(u.region)),
                                         int64_t((u.unit + 1) * g) - pad);
    out << "    \"" << state.name(u.region) << "\" bytes [" << from << ", "
        << to << "): held ";
    if (contents[d->choice].version < 0) {
      out << "its durable bytes (" << Hex(contents[d->choice].bytes, g) << ")";
    } else {
      const UnitVersion& held = versions[contents[d->choice].version];
      out << "an older write's (" << Hex(contents[d->choice].bytes, g) << ", "
          << WrOpcodeName(held.opcode) << " by qp " << QpName(held.qp_num)
          << ", event #" << held.event_seq << ")";
    }
    out << "; the last write (" << WrOpcodeName(last.opcode) << " by qp "
        << QpName(last.qp_num) << ", event #" << last.event_seq << ") put "
        << Hex(contents[d->latest].bytes, g) << ". No PERSISTENT flush of qp "
        << QpName(last.qp_num)
        << " covering these bytes had been polled complete: flush them with "
           "rpma_flush(..., RPMA_FLUSH_TYPE_PERSISTENT, ...) and wait for its "
           "completion before this point.\n";
  }
  std::string cli;
  out << "  replay: CrashCheckOptions::only_point = " << point_index
      << ", choices = {";
  bool first = true;
  for (const Decision& d : run.decisions) {
    const ChoiceUnit& u = runner.units()[d.unit];
    out << (first ? "" : ", ") << "{" << u.region << ", " << u.unit << ", "
        << d.choice << "}";
    cli += (first ? "" : ";") + std::to_string(u.region) + "," +
           std::to_string(u.unit) + "," + std::to_string(d.choice);
    first = false;
  }
  out << "} (crash_check --point " << point_index
      << (cli.empty() ? "" : " --choices '" + cli + "'") << ")\n";
  return out.str();
}

}  // namespace

CrashReport PersistenceRecorder::Impl::Check(const RecoveryCheck& check) {
  std::vector<ModelOp> log;
  std::vector<Point> points;
  std::vector<std::string> promises;
  CrashReport report;
  if (!error_.empty()) {
    report.violation = "crash check not run: " + error_ + "\n";
    return report;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    log = log_;
    points = points_;
    promises = promises_;
    report.findings = findings_;
    if (dirty_ || points.empty()) {
      points.push_back(
          {"at the end", log_.size(), promises_.size(), last_event_});
    }
  }
  ModelState state(options_.unit);
  size_t applied = 0;
  for (size_t p = 0; p < points.size(); ++p) {
    for (; applied < points[p].log_size; ++applied) state.Apply(log[applied]);
    if (options_.only_point >= 0 &&
        static_cast<size_t>(options_.only_point) != p) {
      continue;
    }
    std::vector<std::string> promised(promises.begin(),
                                      promises.begin() + points[p].promises);
    ImageRunner runner(state, promised, points[p].label);
    PointChecker checker(runner, check, options_);
    CrashPointResult result;
    result.index = p;
    result.label = points[p].label;
    result.after_event = points[p].after_event;
    result.pending_units = runner.units().size();
    result.combinations = runner.combinations();
    Run violation;
    bool found = false;
    if (!options_.choices.empty()) {
      std::map<std::pair<size_t, uint64_t>, size_t> wanted;
      for (const UnitChoice& c : options_.choices) {
        wanted[{c.region, c.unit}] = c.choice;
      }
      Run run = checker.RunWith([&](size_t i) -> size_t {
        auto it =
            wanted.find({runner.units()[i].region, runner.units()[i].unit});
        return it != wanted.end() ? it->second : runner.latest(i);
      });
      if (!run.verdict.empty()) {
        violation = std::move(run);
        found = true;
      }
    }
    bool complete = false;
    if (!found) found = checker.Explore(&violation, &complete);
    if (!found && !complete) {
      found = checker.Sample(2 * options_.budget, &violation);
    }
    result.exhaustive = complete;
    if (checker.nondeterministic()) {
      report.findings.push_back(
          {"recovery read different units on the same choices at crash point "
           "#" +
           std::to_string(p) +
           ": it must depend on the image only (deterministic), or the "
           "exploration cannot cover every image"});
    }
    if (found) {
      result.violations = 1;
      Run shrunk = checker.Shrink(violation);
      std::ostringstream out;
      out << "crash point #" << p << " (" << points[p].label
          << "): " << shrunk.verdict << "\n"
          << DescribeRun(state, runner, shrunk, static_cast<int>(p));
      if (!promised.empty()) {
        out << "  promised before the crash:";
        for (const std::string& s : promised) out << " \"" << s << "\"";
        out << "\n";
      }
      report.violation = out.str();
      report.violating_images = 1;
    }
    result.images = checker.images();
    report.images += result.images;
    report.points.push_back(std::move(result));
    if (found) break;
  }
  return report;
}

std::string CrashReport::Text() const {
  std::ostringstream out;
  out << "crash check: " << points.size() << " crash point(s), " << images
      << " image(s), " << (ok() ? "no violation" : "a violation") << "\n";
  if (!ok()) out << violation;
  if (!findings.empty()) {
    out << "findings:\n";
    for (const Finding& f : findings) out << "  " << f.text << "\n";
  }
  out << "crash points:\n";
  for (size_t p = 0; p < points.size(); ++p) {
    const CrashPointResult& r = points[p];
    char combos[32];
    std::snprintf(combos, sizeof(combos), "%.0f", r.combinations);
    out << "  #" << r.index << " " << r.label << ": " << r.pending_units
        << " pending unit(s), " << combos << " image(s) possible, " << r.images
        << " run "
        << (r.violations > 0 ? "(stopped at the violation)"
            : r.exhaustive   ? "(all that recovery can tell apart)"
                             : "(sampled: over the budget)")
        << "\n";
  }
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const CrashReport& report) {
  return out << report.Text();
}

// ------------------------------------------------------------- Facade --

PersistenceRecorder::PersistenceRecorder(FakeNic& nic,
                                         CrashCheckOptions options)
    : impl_(std::make_unique<Impl>(&nic, std::move(options))) {}

PersistenceRecorder::PersistenceRecorder(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

std::unique_ptr<PersistenceRecorder> PersistenceRecorder::FromJournal(
    const std::string& dir, CrashCheckOptions options, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    *error = dir + ": " + std::strerror(errno);
    return nullptr;
  }
  std::vector<std::string> files;
  while (dirent* entry = readdir(d)) {
    if (std::strncmp(entry->d_name, "journal.", 8) == 0) {
      files.push_back(dir + "/" + entry->d_name);
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    *error = dir +
             ": no journal.* files (was RPMA_HARNESS_CRASH_RECORD=" + dir +
             " set for the processes?)";
    return nullptr;
  }
  std::vector<JournalFile> texts;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      *error = path + ": " + std::strerror(errno);
      return nullptr;
    }
    std::ostringstream content;
    content << in.rdbuf();
    texts.push_back({path, content.str()});
  }
  return FromJournalText(texts, std::move(options), error);
}

std::unique_ptr<PersistenceRecorder> PersistenceRecorder::FromJournalText(
    const std::vector<JournalFile>& files, CrashCheckOptions options,
    std::string* error) {
  // Every line of every process, in the order of their time stamps
  // (CLOCK_MONOTONIC: one clock for the whole host); ties keep file order.
  struct Line {
    uint64_t time;
    size_t file, number;
    std::string text;
  };
  std::vector<Line> lines;
  for (size_t f = 0; f < files.size(); ++f) {
    std::istringstream in(files[f].text);
    std::string text;
    size_t number = 0;
    while (std::getline(in, text)) {
      ++number;
      const size_t space = text.find(' ');
      char* end = nullptr;
      errno = 0;
      const uint64_t time = std::strtoull(text.c_str(), &end, 10);
      if (space == std::string::npos || space == 0 || errno != 0 ||
          end != text.c_str() + space ||
          !std::isdigit(static_cast<unsigned char>(text[0]))) {
        *error = files[f].name + ":" + std::to_string(number) +
                 ": not a journal line (TIME SOURCE KIND ...)";
        return nullptr;
      }
      lines.push_back({time, f, number, text.substr(space + 1)});
    }
  }
  std::stable_sort(
      lines.begin(), lines.end(),
      [](const Line& a, const Line& b) { return a.time < b.time; });
  auto impl = std::make_unique<Impl>(nullptr, std::move(options));
  for (const Line& line : lines) {
    if (!impl->FeedJournalLine(line.text)) {
      std::string shown = line.text.substr(0, 60);
      for (char& c : shown) {
        if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
      }
      *error = files[line.file].name + ":" + std::to_string(line.number) +
               ": cannot read \"" + shown + "\"";
      return nullptr;
    }
  }
  return std::unique_ptr<PersistenceRecorder>(
      new PersistenceRecorder(std::move(impl)));
}

PersistenceRecorder::~PersistenceRecorder() = default;

int PersistenceRecorder::MarkPersistent(const void* addr, size_t len,
                                        std::string name) {
  return impl_->MarkPersistent(addr, len, std::move(name));
}
void PersistenceRecorder::ServerPersisted(const void* addr, size_t len) {
  impl_->ServerPersisted(addr, len);
}
void PersistenceRecorder::Promise(std::string what) {
  impl_->Promise(std::move(what));
}
void PersistenceRecorder::CrashPoint(std::string label) {
  impl_->CrashPoint(std::move(label));
}
CrashReport PersistenceRecorder::Check(const RecoveryCheck& check) {
  return impl_->Check(check);
}

}  // namespace crash
}  // namespace rpma_harness
