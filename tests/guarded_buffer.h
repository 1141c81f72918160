// guarded_buffer.h: memory with an inaccessible page on each side, so that a
// read or write one byte outside it faults at once (SIGSEGV, or an ASan
// report) instead of silently touching a neighbour.
//
// The usable bytes end exactly at the trailing guard page; when `size` is a
// multiple of the page size they also start exactly at the leading one.
//
// Example:
//   GuardedBuffer buf(8192);          // [data(), data() + 8192) usable
//   buf.data()[8192] = 0;             // faults: the trailing guard page

#ifndef RPMA_HARNESS_TESTS_GUARDED_BUFFER_H_
#define RPMA_HARNESS_TESTS_GUARDED_BUFFER_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace rpma_harness {

class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t size) : size_(size) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (size + page_ - 1) / page_;
    mapping_size_ = (data_pages + 2) * page_;
    void* map = mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      perror("GuardedBuffer: mmap");
      abort();
    }
    mapping_ = static_cast<uint8_t*>(map);
    if (mprotect(mapping_, page_, PROT_NONE) != 0 ||
        mprotect(mapping_ + (data_pages + 1) * page_, page_, PROT_NONE) != 0) {
      perror("GuardedBuffer: mprotect");
      abort();
    }
    data_ = mapping_ + (data_pages + 1) * page_ - size_;
  }
  ~GuardedBuffer() { munmap(mapping_, mapping_size_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  uint64_t addr(int64_t offset = 0) const {
    return reinterpret_cast<uint64_t>(data_) + static_cast<uint64_t>(offset);
  }

 private:
  size_t size_;
  size_t page_;
  size_t mapping_size_;
  uint8_t* mapping_;
  uint8_t* data_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_TESTS_GUARDED_BUFFER_H_
