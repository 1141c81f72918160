#include "crash/persistence_model.h"

#include <algorithm>
#include <cstring>

namespace rpma_harness {
namespace crash {

void ModelState::Apply(const ModelOp& op) {
  switch (op.kind) {
    case ModelOp::Kind::kRegion: {
      Region region;
      region.name = op.name;
      region.base = op.base;
      region.size = op.bytes.size();
      // Units are aligned in the address space, as cache lines and the
      // 8-byte stores of a PCIe write are, not in the region.
      region.pad = op.base % unit_;
      const uint64_t padded = region.pad + region.size;
      region.durable.assign((padded + unit_ - 1) / unit_ * unit_, 0);
      std::memcpy(region.durable.data() + region.pad, op.bytes.data(),
                  op.bytes.size());
      regions_.push_back(std::move(region));
      return;
    }
    case ModelOp::Kind::kVersion: {
      Region& region = regions_[op.region];
      region.pending[op.unit].push_back(op.version);
      return;
    }
    case ModelOp::Kind::kFold: {
      // R1 per byte: the latest value the flushing connection wrote to the
      // byte becomes durable, and no version older than that write may
      // show an older value for it any more.
      Region& region = regions_[op.region];
      const uint64_t lo = op.lo + region.pad, hi = op.hi + region.pad;
      if (lo >= hi) return;
      auto it = region.pending.lower_bound(lo / unit_);
      while (it != region.pending.end() && it->first * unit_ < hi) {
        const uint64_t start = it->first * unit_;
        std::vector<UnitVersion>& versions = it->second;
        for (uint64_t b = std::max(lo, start); b < std::min(hi, start + unit_);
             ++b) {
          const size_t i = b - start;
          int latest = -1;
          for (int j = static_cast<int>(versions.size()) - 1; j >= 0; --j) {
            if (versions[j].qp_num == op.qp_num &&
                versions[j].event_seq < op.before_seq &&
                (versions[j].mask >> i & 1) != 0) {
              latest = j;
              break;
            }
          }
          if (latest < 0) continue;
          const uint8_t value = versions[latest].bytes[i];
          region.durable[b] = value;
          for (int j = 0; j < latest; ++j) versions[j].bytes[i] = value;
        }
        const uint64_t unit = it->first;
        ++it;
        Prune(region, unit);
      }
      return;
    }
    case ModelOp::Kind::kPersisted: {
      // R6: the server's own persist makes the present bytes durable; no
      // version may show older ones.
      Region& region = regions_[op.region];
      const uint64_t lo = op.lo + region.pad, hi = op.hi + region.pad;
      for (uint64_t b = lo; b < hi; ++b) {
        region.durable[b] = op.bytes[b - lo];
      }
      auto it = region.pending.lower_bound(lo / unit_);
      while (it != region.pending.end() && it->first * unit_ < hi) {
        const uint64_t start = it->first * unit_;
        for (UnitVersion& v : it->second) {
          for (uint64_t b = std::max(lo, start);
               b < std::min(hi, start + unit_); ++b) {
            v.bytes[b - start] = region.durable[b];
          }
        }
        const uint64_t unit = it->first;
        ++it;
        Prune(region, unit);
      }
      return;
    }
  }
}

void ModelState::Prune(Region& region, uint64_t unit) {
  auto it = region.pending.find(unit);
  if (it == region.pending.end()) return;
  const uint8_t* durable = region.durable.data() + unit * unit_;
  for (const UnitVersion& v : it->second) {
    if (std::memcmp(v.bytes.data(), durable, unit_) != 0) return;
  }
  region.pending.erase(it);
}

std::vector<ChoiceUnit> ModelState::ChoiceUnits() const {
  std::vector<ChoiceUnit> units;
  for (size_t r = 0; r < regions_.size(); ++r) {
    for (const auto& [unit, versions] : regions_[r].pending) {
      if (Contents(r, unit).size() > 1) units.push_back({r, unit});
    }
  }
  return units;
}

const std::vector<UnitVersion>* ModelState::Versions(size_t r,
                                                     uint64_t unit) const {
  auto it = regions_[r].pending.find(unit);
  return it == regions_[r].pending.end() ? nullptr : &it->second;
}

std::vector<ModelState::Content> ModelState::Contents(size_t r,
                                                      uint64_t unit) const {
  std::vector<Content> contents;
  contents.push_back({regions_[r].durable.data() + unit * unit_, -1});
  const std::vector<UnitVersion>* versions = Versions(r, unit);
  if (versions == nullptr) return contents;
  for (size_t j = 0; j < versions->size(); ++j) {
    const uint8_t* bytes = (*versions)[j].bytes.data();
    bool seen = false;
    for (Content& c : contents) {
      if (std::memcmp(c.bytes, bytes, unit_) == 0) {
        // The same content again: the later write is its provenance.
        if (c.version >= 0) c.version = static_cast<int>(j);
        seen = true;
        break;
      }
    }
    if (!seen) contents.push_back({bytes, static_cast<int>(j)});
  }
  return contents;
}

size_t ModelState::ContentIndex(const std::vector<Content>& contents,
                                const uint8_t* bytes) const {
  for (size_t c = 0; c < contents.size(); ++c) {
    if (std::memcmp(contents[c].bytes, bytes, unit_) == 0) return c;
  }
  return 0;
}

const uint8_t* ModelState::Latest(size_t r, uint64_t unit) const {
  const std::vector<UnitVersion>* versions = Versions(r, unit);
  if (versions != nullptr && !versions->empty()) {
    return versions->back().bytes.data();
  }
  return regions_[r].durable.data() + unit * unit_;
}

int ModelState::RegionAt(uint64_t addr) const {
  for (size_t r = 0; r < regions_.size(); ++r) {
    if (addr >= regions_[r].base &&
        addr - regions_[r].base < regions_[r].size) {
      return static_cast<int>(r);
    }
  }
  return -1;
}

}  // namespace crash
}  // namespace rpma_harness
