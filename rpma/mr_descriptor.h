// mr_descriptor.h: the wire form of a memory region descriptor and the
// usage -> access-flags table.
//
// The descriptor is 21 bytes, packed, little-endian, with no alignment
// requirement (it usually travels inside connection private data):
//   offset 0  raddr  (8)   the region's address in the owner's space
//   offset 8  size   (8)
//   offset 16 rkey   (4)
//   offset 20 usage  (1)   RPMA_MR_USAGE_* bits
// Example:
//   uint8_t wire[kMrDescriptorSize];
//   EncodeMrDescriptor({0x1000, 4096, 0x42, RPMA_MR_USAGE_WRITE_DST}, wire);

#ifndef RPMA_HARNESS_RPMA_MR_DESCRIPTOR_H_
#define RPMA_HARNESS_RPMA_MR_DESCRIPTOR_H_

#include <cstddef>
#include <cstdint>

namespace rpma_harness {

constexpr size_t kMrDescriptorSize = 21;

struct MrDescriptor {
  uint64_t raddr;
  uint64_t size;
  uint32_t rkey;
  uint8_t usage;
};

// Writes kMrDescriptorSize bytes to `out` (any alignment).
void EncodeMrDescriptor(const MrDescriptor& desc, uint8_t* out);

// Reads a descriptor from `in` (any alignment). False when `size` is shorter
// than kMrDescriptorSize or the usage byte is 0 (no region has no usage).
bool DecodeMrDescriptor(const uint8_t* in, size_t size, MrDescriptor* desc);

// IBV_ACCESS_* flags a region registered for `usage` (RPMA_MR_USAGE_*) needs:
//   READ_SRC  -> REMOTE_READ         READ_DST  -> LOCAL_WRITE
//   WRITE_SRC -> LOCAL_WRITE         WRITE_DST -> REMOTE_WRITE | LOCAL_WRITE
//   FLUSH_TYPE_* -> REMOTE_READ      SEND -> none      RECV -> LOCAL_WRITE
// WRITE_SRC asks for LOCAL_WRITE although the NIC only reads it, as librpma
// does, so that the same region can also be a receive or read destination.
int UsageToAccess(int usage);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_RPMA_MR_DESCRIPTOR_H_
