// The data path: writes, sends and receives become exactly one ibv_send_wr /
// ibv_recv_wr each, posted through the connection's backend.

#include <arpa/inet.h>
#include <errno.h>

#include <cstring>

#include "rpma/internal.h"

using rpma_harness::internal::Log;

namespace {

// RPMA_F_COMPLETION_ALWAYS asks for a completion on success too, so the WR is
// signaled. RPMA_F_COMPLETION_ON_ERROR alone leaves it unsignaled: an RC QP
// reports a failed WR whether or not it was signaled (ibv_post_send(3),
// IBV_SEND_SIGNALED; IB spec 10.8.3 "unsignaled completions").
unsigned int SendFlags(int flags) {
  return (flags & (RPMA_F_COMPLETION_ALWAYS & ~RPMA_F_COMPLETION_ON_ERROR))
             ? IBV_SEND_SIGNALED
             : 0;
}

// One SGE over [mr addr + offset, + len) of `mr`.
void FillSge(const rpma_mr_local* mr, size_t offset, size_t len, ibv_sge* sge) {
  sge->addr = reinterpret_cast<uint64_t>(mr->mr->addr) + offset;
  sge->length = static_cast<uint32_t>(len);
  sge->lkey = mr->mr->lkey;
}

int Post(rpma_conn* conn, ibv_send_wr* wr, const char* what) {
  rpma_harness::VerbsBackend* backend = conn->peer->backend.get();
  ibv_send_wr* bad_wr = nullptr;
  int err = backend->PostSend(conn->id->qp, wr, &bad_wr);
  if (err != 0) {
    // Providers disagree on the sign (siw returns -errno); both are failures.
    Log("%s backend: ibv_post_send(%s) failed with %d: %s", backend->Name(),
        what, err, rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  return 0;
}

// The argument rule shared by rpma_write and rpma_write_with_imm: either both
// regions are given, or neither and then no offset or length either (the
// 0-byte form).
bool WriteArgsValid(const rpma_conn* conn, const rpma_mr_remote* dst,
                    size_t dst_offset, const rpma_mr_local* src,
                    size_t src_offset, size_t len, int flags) {
  if (conn == nullptr || flags == 0) return false;
  if ((src == nullptr) != (dst == nullptr)) return false;
  if (src == nullptr && (src_offset != 0 || dst_offset != 0 || len != 0)) {
    return false;
  }
  return true;
}

int PostWrite(rpma_conn* conn, rpma_mr_remote* dst, size_t dst_offset,
              const rpma_mr_local* src, size_t src_offset, size_t len,
              int flags, ibv_wr_opcode opcode, uint32_t imm,
              const void* op_context) {
  if (rpma_harness::LibraryChecker* c = conn->peer->checker) {
    const char* call =
        opcode == IBV_WR_RDMA_WRITE ? "rpma_write" : "rpma_write_with_imm";
    c->CheckLength(call, len);
    if (dst != nullptr) {
      c->CheckRemoteRange(call, dst_offset, len, dst->size, dst->raddr,
                          dst->rkey);
    }
  }
  ibv_sge sge;
  ibv_send_wr wr;
  rpma_harness::internal::ZeroSendWr(&wr);
  wr.wr_id = reinterpret_cast<uint64_t>(op_context);
  wr.opcode = opcode;
  wr.send_flags = SendFlags(flags);
  if (src != nullptr) {
    FillSge(src, src_offset, len, &sge);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = dst->raddr + dst_offset;
    wr.wr.rdma.rkey = dst->rkey;
  }
  if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
  return Post(
      conn, &wr,
      opcode == IBV_WR_RDMA_WRITE ? "RDMA_WRITE" : "RDMA_WRITE_WITH_IMM");
}

int PostSendOp(rpma_conn* conn, const rpma_mr_local* src, size_t offset,
               size_t len, int flags, ibv_wr_opcode opcode, uint32_t imm,
               const void* op_context) {
  if (conn == nullptr || flags == 0) return RPMA_E_INVAL;
  if (src == nullptr && (offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (rpma_harness::LibraryChecker* c = conn->peer->checker) {
    c->CheckLength(opcode == IBV_WR_SEND ? "rpma_send" : "rpma_send_with_imm",
                   len);
  }
  ibv_sge sge;
  ibv_send_wr wr;
  rpma_harness::internal::ZeroSendWr(&wr);
  wr.wr_id = reinterpret_cast<uint64_t>(op_context);
  wr.opcode = opcode;
  wr.send_flags = SendFlags(flags);
  if (src != nullptr) {
    FillSge(src, offset, len, &sge);
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  if (opcode == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(imm);
  return Post(conn, &wr, opcode == IBV_WR_SEND ? "SEND" : "SEND_WITH_IMM");
}

}  // namespace

namespace rpma_harness {
namespace internal {

int PostRead(rpma_conn* conn, rpma_mr_local* dst, size_t dst_offset,
             const rpma_mr_remote* src, size_t src_offset, size_t len,
             int flags, const void* op_context, bool flush) {
  rpma_harness::LibraryChecker* c = conn->peer->checker;
  if (c != nullptr && !flush) {
    c->CheckLength("rpma_read", len);
    if (src != nullptr) {
      c->CheckRemoteRange("rpma_read", src_offset, len, src->size, src->raddr,
                          src->rkey);
    }
  }
  ibv_sge sge;
  ibv_send_wr wr;
  rpma_harness::internal::ZeroSendWr(&wr);
  wr.wr_id = reinterpret_cast<uint64_t>(op_context);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = SendFlags(flags);
  if (src != nullptr) {
    // The local SGE is the sink: the NIC writes it (LOCAL_WRITE needed).
    FillSge(dst, dst_offset, len, &sge);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = src->raddr + src_offset;
    wr.wr.rdma.rkey = src->rkey;
  }
  return Post(conn, &wr, "RDMA_READ");
}

}  // namespace internal
}  // namespace rpma_harness

extern "C" int rpma_read(struct rpma_conn* conn, struct rpma_mr_local* dst,
                         size_t dst_offset, const struct rpma_mr_remote* src,
                         size_t src_offset, size_t len, int flags,
                         const void* op_context) {
  // rpma_read(3): the same argument rule as rpma_write, mirrored.
  if (!WriteArgsValid(conn, src, src_offset, dst, dst_offset, len, flags)) {
    return RPMA_E_INVAL;
  }
  return rpma_harness::internal::PostRead(conn, dst, dst_offset, src,
                                          src_offset, len, flags, op_context);
}

extern "C" int rpma_atomic_write(struct rpma_conn* conn,
                                 struct rpma_mr_remote* dst, size_t dst_offset,
                                 const char src[8], int flags,
                                 const void* op_context) {
  // rpma_atomic_write(3), checks in librpma 1.3's order.
  if (conn == nullptr || dst == nullptr || src == nullptr || flags == 0) {
    return RPMA_E_INVAL;
  }
  if (dst_offset % RPMA_ATOMIC_WRITE_ALIGNMENT != 0) return RPMA_E_INVAL;
  if (rpma_harness::LibraryChecker* c = conn->peer->checker) {
    c->CheckRemoteRange("rpma_atomic_write", dst_offset, 8, dst->size,
                        dst->raddr, dst->rkey);
  }
  // Without a native atomic write (IBV_WR_ATOMIC_WRITE via ibv_qp_ex, used by
  // librpma 1.3 only on devices reporting IB_UVERBS_DEVICE_ATOMIC_WRITE,
  // which neither the fake nor rxe in Linux 6.1 does) librpma's mr.c posts an
  // 8-byte inline RDMA WRITE with IBV_SEND_FENCE, so that any earlier RDMA
  // READ (a flush) has completed before the write executes. An aligned
  // 8-byte write is one packet, placed by the responder in one go.
  ibv_sge sge;
  sge.addr = reinterpret_cast<uint64_t>(src);
  sge.length = 8;
  sge.lkey = 0;  // inline: the NIC copies the bytes at post time
  ibv_send_wr wr;
  rpma_harness::internal::ZeroSendWr(&wr);
  wr.wr_id = reinterpret_cast<uint64_t>(op_context);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = dst->raddr + dst_offset;
  wr.wr.rdma.rkey = dst->rkey;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_FENCE | SendFlags(flags);
  return Post(conn, &wr, "RDMA_WRITE (atomic write)");
}

extern "C" int rpma_write(struct rpma_conn* conn, struct rpma_mr_remote* dst,
                          size_t dst_offset, const struct rpma_mr_local* src,
                          size_t src_offset, size_t len, int flags,
                          const void* op_context) {
  if (!WriteArgsValid(conn, dst, dst_offset, src, src_offset, len, flags)) {
    return RPMA_E_INVAL;
  }
  return PostWrite(conn, dst, dst_offset, src, src_offset, len, flags,
                   IBV_WR_RDMA_WRITE, 0, op_context);
}

extern "C" int rpma_write_with_imm(struct rpma_conn* conn,
                                   struct rpma_mr_remote* dst,
                                   size_t dst_offset,
                                   const struct rpma_mr_local* src,
                                   size_t src_offset, size_t len, int flags,
                                   uint32_t imm, const void* op_context) {
  if (!WriteArgsValid(conn, dst, dst_offset, src, src_offset, len, flags)) {
    return RPMA_E_INVAL;
  }
  return PostWrite(conn, dst, dst_offset, src, src_offset, len, flags,
                   IBV_WR_RDMA_WRITE_WITH_IMM, imm, op_context);
}

extern "C" int rpma_send(struct rpma_conn* conn,
                         const struct rpma_mr_local* src, size_t offset,
                         size_t len, int flags, const void* op_context) {
  return PostSendOp(conn, src, offset, len, flags, IBV_WR_SEND, 0, op_context);
}

extern "C" int rpma_send_with_imm(struct rpma_conn* conn,
                                  const struct rpma_mr_local* src,
                                  size_t offset, size_t len, int flags,
                                  uint32_t imm, const void* op_context) {
  return PostSendOp(conn, src, offset, len, flags, IBV_WR_SEND_WITH_IMM, imm,
                    op_context);
}

extern "C" int rpma_recv(struct rpma_conn* conn, struct rpma_mr_local* dst,
                         size_t offset, size_t len, const void* op_context) {
  if (conn == nullptr) return RPMA_E_INVAL;
  if (dst == nullptr && (offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (conn->peer->checker != nullptr) {
    conn->peer->checker->CheckLength("rpma_recv", len);
  }
  return rpma_harness::internal::PostRecv(
      conn->peer->backend.get(), conn->id->qp, dst, offset, len, op_context);
}
