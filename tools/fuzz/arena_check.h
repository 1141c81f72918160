// arena_check.h: the "nothing outside a registered region changed" check the
// fuzz targets share. Each target fills two arenas (one per host) with a
// known pattern, registers parts of them, runs a program, and then requires
// every byte outside the union of the registered ranges to still hold the
// pattern.
//
// Example:
//   static const ArenaPattern pattern(kArena, [](int side, int64_t i) {
//     return static_cast<uint8_t>(i ^ side);
//   });
//   std::memcpy(arena, pattern.Of(0), kArena);
//   ... run ...
//   if (!UnregisteredBytesUnchanged(0, arena, pattern.Of(0), kArena, ranges))
//     abort();

#ifndef RPMA_HARNESS_TOOLS_FUZZ_ARENA_CHECK_H_
#define RPMA_HARNESS_TOOLS_FUZZ_ARENA_CHECK_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

namespace rpma_harness {

// The bytes both arenas start with, built once (per-byte loops would
// otherwise dominate an instrumented run).
class ArenaPattern {
 public:
  ArenaPattern(int64_t size, uint8_t (*byte)(int side, int64_t i)) {
    for (int side = 0; side < 2; ++side) {
      bytes_[side].resize(static_cast<size_t>(size));
      for (int64_t i = 0; i < size; ++i) bytes_[side][i] = byte(side, i);
    }
  }
  const uint8_t* Of(int side) const { return bytes_[side].data(); }

 private:
  std::vector<uint8_t> bytes_[2];
};

// True when every byte of `arena` [0, size) outside the union of `ranges`
// ([begin, end) pairs, in any order, overlapping or not) equals `pattern`;
// otherwise prints the first changed gap and returns false.
inline bool UnregisteredBytesUnchanged(
    int side, const uint8_t* arena, const uint8_t* pattern, int64_t size,
    std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  auto gap_ok = [&](int64_t begin, int64_t end) {
    if (end <= begin || std::memcmp(arena + begin, pattern + begin,
                                    static_cast<size_t>(end - begin)) == 0) {
      return true;
    }
    fprintf(stderr, "side %d, unregistered bytes [%lld, %lld) changed\n", side,
            static_cast<long long>(begin), static_cast<long long>(end));
    return false;
  };
  int64_t cursor = 0;
  for (const auto& [begin, end] : ranges) {
    if (!gap_ok(cursor, begin)) return false;
    cursor = std::max(cursor, end);
  }
  return gap_ok(cursor, size);
}

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_FUZZ_ARENA_CHECK_H_
