// Memory registration and the 21-byte memory-region descriptor.

#include <errno.h>

#include <cstring>
#include <new>

#include "rpma/internal.h"
#include "rpma/mr_descriptor.h"

using rpma_harness::internal::Log;

extern "C" int rpma_mr_reg(struct rpma_peer* peer, void* ptr, size_t size,
                           int usage, struct rpma_mr_local** mr_ptr) {
  // librpma src/mr.c: usage must be non-zero and have no bit outside the
  // eight RPMA_MR_USAGE_* flags (USAGE_ALL_ALLOWED), else RPMA_E_INVAL.
  constexpr int kAllUsages = RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_READ_DST |
                             RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_WRITE_DST |
                             RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV |
                             RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
                             RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT;
  if (peer == nullptr || ptr == nullptr || mr_ptr == nullptr || size == 0 ||
      usage == 0 || (usage & ~kAllUsages) != 0) {
    return RPMA_E_INVAL;
  }
  const int access = rpma_harness::UsageToAccess(usage);
  errno = 0;
  ibv_mr* mr = peer->backend->RegMr(peer->pd, ptr, size, access);
  if (mr == nullptr && errno == EOPNOTSUPP) {
    // librpma's peer.c rpma_peer_setup_mr_reg: memory the NIC cannot pin
    // (e.g. FSDAX) may still be registered on demand when the device has
    // ODP (rpma_utils_ibv_context_is_odp_capable(3)).
    int odp = 0;
    if (rpma_harness::internal::OdpCapable(peer->backend.get(), peer->context,
                                           &odp) == 0 &&
        odp) {
      errno = 0;
      mr = peer->backend->RegMr(peer->pd, ptr, size,
                                access | IBV_ACCESS_ON_DEMAND);
    } else {
      errno = EOPNOTSUPP;
    }
  }
  if (mr == nullptr) {
    int err = errno;
    Log("%s backend: ibv_reg_mr(%p, %zu) failed: %s", peer->backend->Name(),
        ptr, size, std::strerror(err));
    return RPMA_E_PROVIDER;
  }
  auto* local = new (std::nothrow) rpma_mr_local{peer, mr, usage};
  if (local == nullptr) {
    peer->backend->DeregMr(mr);
    return RPMA_E_NOMEM;
  }
  if (peer->checker != nullptr) {
    peer->checker->NoteCreated("rpma_mr_local", local);
  }
  if (rpma_harness::internal::PersistenceListened()) {
    rpma_harness::PersistenceNote note;
    note.kind = rpma_harness::PersistenceNote::Kind::kMrReg;
    note.addr = ptr;
    note.len = size;
    note.usage = usage;
    rpma_harness::internal::NotePersistence(note);
  }
  *mr_ptr = local;
  return 0;
}

extern "C" int rpma_mr_dereg(struct rpma_mr_local** mr_ptr) {
  if (mr_ptr == nullptr) return RPMA_E_INVAL;
  rpma_mr_local* mr = *mr_ptr;
  if (mr == nullptr) return 0;
  rpma_harness::PersistenceNote note;
  note.kind = rpma_harness::PersistenceNote::Kind::kMrDereg;
  note.addr = mr->mr->addr;
  note.len = mr->mr->length;
  int err = mr->peer->backend->DeregMr(mr->mr);
  if (err != 0) {
    Log("%s backend: ibv_dereg_mr failed: %s", mr->peer->backend->Name(),
        rpma_harness::internal::ErrnoText(err));
    return RPMA_E_PROVIDER;
  }
  if (mr->peer->checker != nullptr) mr->peer->checker->NoteDeleted(mr);
  if (rpma_harness::internal::PersistenceListened()) {
    rpma_harness::internal::NotePersistence(note);
  }
  delete mr;
  *mr_ptr = nullptr;
  return 0;
}

extern "C" int rpma_mr_get_descriptor(const struct rpma_mr_local* mr,
                                      void* desc) {
  if (mr == nullptr || desc == nullptr) return RPMA_E_INVAL;
  rpma_harness::MrDescriptor d;
  d.raddr = reinterpret_cast<uint64_t>(mr->mr->addr);
  d.size = mr->mr->length;
  d.rkey = mr->mr->rkey;
  d.usage = static_cast<uint8_t>(mr->usage);
  rpma_harness::EncodeMrDescriptor(d, static_cast<uint8_t*>(desc));
  return 0;
}

extern "C" int rpma_mr_get_descriptor_size(const struct rpma_mr_local* mr,
                                           size_t* desc_size) {
  if (mr == nullptr || desc_size == nullptr) return RPMA_E_INVAL;
  *desc_size = rpma_harness::kMrDescriptorSize;
  return 0;
}

extern "C" int rpma_mr_remote_from_descriptor(const void* desc,
                                              size_t desc_size,
                                              struct rpma_mr_remote** mr_ptr) {
  if (desc == nullptr || mr_ptr == nullptr) return RPMA_E_INVAL;
  rpma_harness::MrDescriptor d;
  if (!rpma_harness::DecodeMrDescriptor(static_cast<const uint8_t*>(desc),
                                        desc_size, &d)) {
    return RPMA_E_INVAL;
  }
  auto* remote =
      new (std::nothrow) rpma_mr_remote{d.raddr, d.size, d.rkey, d.usage};
  if (remote == nullptr) return RPMA_E_NOMEM;
  rpma_harness::internal::NoteCreated(rpma_harness::CurrentBackend().get(),
                                      "rpma_mr_remote", remote);
  *mr_ptr = remote;
  return 0;
}

extern "C" int rpma_mr_get_ptr(const struct rpma_mr_local* mr, void** ptr) {
  if (mr == nullptr || ptr == nullptr) return RPMA_E_INVAL;
  *ptr = mr->mr->addr;
  return 0;
}

extern "C" int rpma_mr_get_size(const struct rpma_mr_local* mr, size_t* size) {
  if (mr == nullptr || size == nullptr) return RPMA_E_INVAL;
  *size = mr->mr->length;
  return 0;
}

extern "C" int rpma_mr_remote_get_size(const struct rpma_mr_remote* mr,
                                       size_t* size) {
  if (mr == nullptr || size == nullptr) return RPMA_E_INVAL;
  *size = mr->size;
  return 0;
}

extern "C" int rpma_mr_remote_get_flush_type(const struct rpma_mr_remote* mr,
                                             int* flush_type) {
  if (mr == nullptr || flush_type == nullptr) return RPMA_E_INVAL;
  *flush_type = mr->usage & (RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
                             RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
  return 0;
}

extern "C" int rpma_mr_advise(struct rpma_mr_local* mr, size_t offset,
                              size_t len, int advice, uint32_t flags) {
  // librpma 1.3 does not check mr (it would crash); we refuse it.
  if (mr == nullptr) return RPMA_E_INVAL;
  ibv_sge sge;
  sge.addr = reinterpret_cast<uint64_t>(mr->mr->addr) + offset;
  sge.length = static_cast<uint32_t>(len);
  sge.lkey = mr->mr->lkey;
  rpma_harness::VerbsBackend* backend = mr->peer->backend.get();
  int err = backend->AdviseMr(
      mr->mr->pd, static_cast<ibv_advise_mr_advice>(advice), flags, &sge, 1);
  if (err == 0) return 0;
  Log("%s backend: ibv_advise_mr failed: %s", backend->Name(),
      rpma_harness::internal::ErrnoText(err));
  // rpma_mr_advise(3) and librpma's mr.c: no ODP / no advise support is
  // RPMA_E_NOSUPP, a bad range, advice or flags RPMA_E_INVAL.
  const int e = err < 0 ? -err : err;
  if (e == EOPNOTSUPP || e == ENOTSUP) return RPMA_E_NOSUPP;
  if (e == EFAULT || e == EINVAL) return RPMA_E_INVAL;
  return RPMA_E_PROVIDER;
}

extern "C" int rpma_mr_remote_delete(struct rpma_mr_remote** mr_ptr) {
  if (mr_ptr == nullptr) return RPMA_E_INVAL;
  if (*mr_ptr != nullptr) {
    rpma_harness::internal::NoteDeleted(rpma_harness::CurrentBackend().get(),
                                        *mr_ptr);
  }
  delete *mr_ptr;
  *mr_ptr = nullptr;
  return 0;
}
