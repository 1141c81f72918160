// rpma_flush() as librpma 1.3 does it on a NIC without a native flush verb
// (src/flush.c, "APM" flush): an 8-byte RDMA READ of the flushed range into
// the connection's read-after-write buffer. The READ's response can only be
// generated after the responder has placed every earlier write of the QP
// (IB spec 9.5 / o9-20: an RDMA READ response is ordered after the RDMA
// WRITEs before it), so its completion tells the requester that those
// writes are visible at the responder; with the responder's DDIO off
// ("direct write to PMem", rpma_peer_cfg_set_direct_write_to_pmem(3)) they
// are then in the persistent domain.
//
// Native flush (IBV_WR_FLUSH through ibv_qp_ex, rdma-core >= 43) is used by
// librpma 1.3 only when the device reports IB_UVERBS_DEVICE_FLUSH_GLOBAL and
// _PERSISTENT; neither the fake nor rxe in Linux 6.1 (Debian 12) does, so
// this READ is what librpma posts on both, and it is all we post.

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

namespace rpma_harness {
namespace internal {

// flush.c RAW_SIZE: the read covers 8 bytes.
constexpr size_t kRawSize = 8;

int RawBufferNew(rpma_peer* peer, RawBuffer* raw) {
  const long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) {
    Log("sysconf(_SC_PAGESIZE) failed: %s", std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  // A whole page, mmap()ed, as librpma: registrations are page-granular.
  void* mem = mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return RPMA_E_NOMEM;
  rpma_mr_local* mr = nullptr;
  int ret = rpma_mr_reg(peer, mem, kRawSize, RPMA_MR_USAGE_READ_DST, &mr);
  if (ret != 0) {
    munmap(mem, static_cast<size_t>(page));
    return ret;
  }
  if (peer->checker != nullptr) {
    // librpma's own scratch buffer: every flush reads into it, outstanding
    // or not, and nobody reads the bytes; not the program's object either.
    peer->checker->ExemptFromOverlap(reinterpret_cast<uintptr_t>(mem),
                                     kRawSize);
    peer->checker->NoteDeleted(mr);
  }
  raw->page = mem;
  raw->page_size = static_cast<size_t>(page);
  raw->mr = mr;
  return 0;
}

int RawBufferDelete(RawBuffer* raw) {
  if (raw->page == nullptr) return 0;
  int ret = rpma_mr_dereg(&raw->mr);
  if (ret != 0) {
    // The MR stays registered (the PD keeps it); leaking its 8 bytes is
    // safer than unmapping memory the NIC may still write.
    raw->page = nullptr;
    return ret;
  }
  if (munmap(raw->page, raw->page_size) != 0) ret = RPMA_E_INVAL;
  raw->page = nullptr;
  return ret;
}

}  // namespace internal
}  // namespace rpma_harness

extern "C" int rpma_flush(struct rpma_conn* conn, struct rpma_mr_remote* dst,
                          size_t dst_offset, size_t len,
                          enum rpma_flush_type type_arg, int flags,
                          const void* op_context) {
  // An unknown type from a C caller is read as an int (internal.h EnumAsInt).
  const int type = rpma_harness::internal::EnumAsInt(type_arg);
  // The checks and their order are librpma 1.3's (rpma_flush(3), conn.c).
  if (conn == nullptr || dst == nullptr || flags == 0) return RPMA_E_INVAL;
  if (type == RPMA_FLUSH_TYPE_PERSISTENT && !conn->direct_write_to_pmem) {
    Log("Connection does not support flush to persistency. Check if the "
        "remote node supports direct write to persistent memory.");
    return RPMA_E_NOSUPP;
  }
  int flush_type = 0;
  rpma_mr_remote_get_flush_type(dst, &flush_type);
  if (type == RPMA_FLUSH_TYPE_PERSISTENT &&
      (flush_type & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) == 0) {
    Log("The remote memory region does not support flushing to persistency");
    return RPMA_E_NOSUPP;
  }
  if (type == RPMA_FLUSH_TYPE_VISIBILITY &&
      (flush_type & RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY) == 0) {
    Log("The remote memory region does not support flushing to global "
        "visibility");
    return RPMA_E_NOSUPP;
  }
  if (type != RPMA_FLUSH_TYPE_PERSISTENT &&
      type != RPMA_FLUSH_TYPE_VISIBILITY) {
    // rpma_flush(3): "RPMA_E_INVAL - unknown type value" (librpma 1.3's code
    // would post the READ anyway; the man page is the specification).
    return RPMA_E_INVAL;
  }
  // len is not used by the NIC: the READ always covers 8 bytes at
  // dst_offset. The usage checker sees the range the program meant.
  if (rpma_harness::LibraryChecker* c = conn->peer->checker) {
    c->CheckRemoteRange("rpma_flush", dst_offset,
                        std::max(len, rpma_harness::internal::kRawSize),
                        dst->size, dst->raddr, dst->rkey);
  }
  // The note goes before the post (a NIC on its own thread may execute the
  // READ before PostRead returns); a post that failed takes it back.
  const bool noted = rpma_harness::internal::PersistenceListened() &&
                     conn->id != nullptr && conn->id->qp != nullptr;
  rpma_harness::PersistenceNote note;
  if (noted) {
    note.kind = rpma_harness::PersistenceNote::Kind::kFlush;
    note.qp_num = conn->id->qp->qp_num;
    note.remote_addr = dst->raddr + dst_offset;
    note.local_addr = reinterpret_cast<uint64_t>(conn->raw.page);
    note.len = len;
    note.flush_type = type;
    note.direct_write_to_pmem = conn->direct_write_to_pmem;
    rpma_harness::internal::NotePersistence(note);
  }
  const int ret = rpma_harness::internal::PostRead(
      conn, conn->raw.mr, 0, dst, dst_offset, rpma_harness::internal::kRawSize,
      flags, op_context, /*flush=*/true);
  if (ret != 0 && noted) {
    note.kind = rpma_harness::PersistenceNote::Kind::kFlushNotPosted;
    rpma_harness::internal::NotePersistence(note);
  }
  return ret;
}
