// byte_reader.h: turns a fuzzer's input into values, a few bytes at a time.
// Past the end every read returns 0, so any input is a valid program.
// (Our own small reader rather than libFuzzer's FuzzedDataProvider, so the
// same targets also build with gcc for the corpus regression test.)
//
// Example:
//   ByteReader in(data, size);
//   int opcode = in.Range(0, 12);

#ifndef RPMA_HARNESS_TOOLS_FUZZ_BYTE_READER_H_
#define RPMA_HARNESS_TOOLS_FUZZ_BYTE_READER_H_

#include <cstddef>
#include <cstdint>

namespace rpma_harness {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return empty() ? 0 : size_ - pos_; }

  uint8_t U8() { return empty() ? 0 : data_[pos_++]; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return U16() | (static_cast<uint32_t>(U16()) << 16); }
  uint64_t U64() { return U32() | (static_cast<uint64_t>(U32()) << 32); }
  bool Bool() { return U8() & 1; }

  // A value in [lo, hi] (inclusive).
  int64_t Range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t raw = span <= 0x100 ? U8() : span <= 0x10000 ? U16() : U32();
    return lo + static_cast<int64_t>(raw % span);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TOOLS_FUZZ_BYTE_READER_H_
