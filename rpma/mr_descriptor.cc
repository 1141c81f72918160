#include "rpma/mr_descriptor.h"

#include <infiniband/verbs.h>

#include "rpma/librpma.h"

namespace rpma_harness {
namespace {

void PutLittleEndian(uint64_t value, int bytes, uint8_t* out) {
  for (int i = 0; i < bytes; ++i)
    out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLittleEndian(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

}  // namespace

void EncodeMrDescriptor(const MrDescriptor& desc, uint8_t* out) {
  PutLittleEndian(desc.raddr, 8, out);
  PutLittleEndian(desc.size, 8, out + 8);
  PutLittleEndian(desc.rkey, 4, out + 16);
  out[20] = desc.usage;
}

bool DecodeMrDescriptor(const uint8_t* in, size_t size, MrDescriptor* desc) {
  if (size < kMrDescriptorSize) return false;
  if (in[20] == 0) return false;
  desc->raddr = GetLittleEndian(in, 8);
  desc->size = GetLittleEndian(in + 8, 8);
  desc->rkey = static_cast<uint32_t>(GetLittleEndian(in + 16, 4));
  desc->usage = in[20];
  return true;
}

int UsageToAccess(int usage) {
  int access = 0;
  if (usage & (RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
               RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)) {
    access |= IBV_ACCESS_REMOTE_READ;
  }
  if (usage &
      (RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_RECV)) {
    access |= IBV_ACCESS_LOCAL_WRITE;
  }
  if (usage & RPMA_MR_USAGE_WRITE_DST) {
    access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  }
  return access;
}

}  // namespace rpma_harness
