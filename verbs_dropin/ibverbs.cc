// ibverbs.cc: the functions of the drop-in libibverbs.so.1 that the fake
// NIC models, over the process's one backend: the fake NIC the environment
// asks for (rpma/fake_backend.h), under RPMA_HARNESS_FAULTS's rules and,
// with RPMA_HARNESS_CHECK, the usage checker, exactly as a librpma program
// gets it. Each function keeps libibverbs' contract (its man page, and
// rdma-core 44's libibverbs/verbs.c and device.c where the page is silent:
// return conventions, empty GID entries); what the NIC decides, it decides
// in nic/. The rest of libibverbs' symbols are generated stubs
// (libibverbs.symbols, gen_symbols.py).
//
// ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq and
// ibv_post_srq_recv are inline in <infiniband/verbs.h>: they call through
// the context's ops table, which OpenContexts points at this backend; the
// extended verbs (ibv_create_qp_ex, ibv_create_cq_ex, ibv_query_device_ex)
// through its verbs_context, which it fills from ibverbs_ex.cc.

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "check/checking_backend.h"
#include "rpma/fake_backend.h"
#include "verbs_backend/unavailable_backend.h"
#include "verbs_backend/verbs_backend.h"
#include "verbs_dropin/ibverbs_internal.h"

// <infiniband/verbs.h> makes these macros over inline wrappers; the
// exported functions are the names themselves.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

namespace rpma_harness {
namespace dropin {

VerbsBackend& Nic() {
  static std::shared_ptr<VerbsBackend>* backend = [] {
    const char* choice = std::getenv("RPMA_HARNESS_BACKEND");
    std::shared_ptr<VerbsBackend> made;
    if (choice != nullptr && *choice != '\0' &&
        std::strcmp(choice, "fake") != 0) {
      // The real NIC is reached through the real libibverbs, which this
      // library replaces.
      made = std::make_shared<rpma_harness::UnavailableBackend>(
          std::string("RPMA_HARNESS_BACKEND='") + choice +
          "': the drop-in libibverbs.so.1 runs the fake NIC only; for a "
          "real NIC take it off LD_LIBRARY_PATH");
    } else {
      made = rpma_harness::WrapForCheckingFromEnvironment(
          rpma_harness::MakeFakeBackendFromEnvironment(
              nullptr, /*verbs_extension=*/true),
          /*verbs_program=*/true);
    }
    // Never destroyed: a program may still call from its own atexit
    // handlers or threads while static destructors run.
    return new std::shared_ptr<VerbsBackend>(std::move(made));
  }();
  return **backend;
}

void SayOnce(std::atomic<bool>* told, const char* what) {
  if (!told->exchange(true)) {
    std::fprintf(stderr, "rpma-harness libibverbs.so.1: %s\n", what);
  }
}

}  // namespace dropin
}  // namespace rpma_harness

namespace {

using rpma_harness::VerbsBackend;
using rpma_harness::dropin::Nic;
using rpma_harness::dropin::SayOnce;

int OpsPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return Nic().PostSend(qp, wr, bad_wr);
}
int OpsPostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return Nic().PostRecv(qp, wr, bad_wr);
}
int OpsPostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return Nic().PostSrqRecv(srq, wr, bad_wr);
}
int OpsPollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  return Nic().PollCq(cq, num_entries, wc);
}
int OpsReqNotifyCq(ibv_cq* cq, int solicited_only) {
  return Nic().ReqNotifyCq(cq, solicited_only);
}

// Every device's context, its ops table through Nic() (so that the fault
// rules and the checker see the inline calls too).
int OpenContexts(std::vector<ibv_context*>* contexts) {
  const int err = Nic().ListDevices(contexts);
  if (err != 0) return err;
  for (ibv_context* ctx : *contexts) {
    ctx->ops.post_send = OpsPostSend;
    ctx->ops.post_recv = OpsPostRecv;
    ctx->ops.post_srq_recv = OpsPostSrqRecv;
    ctx->ops.poll_cq = OpsPollCq;
    ctx->ops.req_notify_cq = OpsReqNotifyCq;
    rpma_harness::dropin::FillExtendedOps(ctx);
  }
  return 0;
}

ibv_context* ContextOf(ibv_device* device) {
  std::vector<ibv_context*> contexts;
  if (device == nullptr || OpenContexts(&contexts) != 0) return nullptr;
  for (ibv_context* ctx : contexts) {
    if (ctx->device == device) return ctx;
  }
  return nullptr;
}

// The "ptr" convention: the object, or NULL with errno set.
template <typename T>
T* FailPtr(int err) {
  errno = err;
  return nullptr;
}

}  // namespace

extern "C" {

// ---- devices (ibv_get_device_list(3), ibv_open_device(3)) ----

ibv_device** ibv_get_device_list(int* num_devices) {
  std::vector<ibv_context*> contexts;
  const int err = OpenContexts(&contexts);
  if (err != 0) {
    if (num_devices != nullptr) *num_devices = 0;
    return FailPtr<ibv_device*>(err);
  }
  auto** list = static_cast<ibv_device**>(
      calloc(contexts.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) return FailPtr<ibv_device*>(ENOMEM);
  for (size_t i = 0; i < contexts.size(); ++i) list[i] = contexts[i]->device;
  if (num_devices != nullptr) *num_devices = static_cast<int>(contexts.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) { free(list); }

const char* ibv_get_device_name(ibv_device* device) {
  return device != nullptr ? device->name : nullptr;
}

int ibv_get_device_index(ibv_device* device) {
  std::vector<ibv_context*> contexts;
  if (device == nullptr || OpenContexts(&contexts) != 0) return -1;
  for (size_t i = 0; i < contexts.size(); ++i) {
    if (contexts[i]->device == device) return static_cast<int>(i);
  }
  return -1;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  ibv_context* ctx = ContextOf(device);
  ibv_device_attr attr;
  if (ctx == nullptr || Nic().QueryDevice(ctx, &attr) != 0) {
    errno = ENODEV;
    return 0;
  }
  return attr.node_guid;
}

// The fake's device has one context, kept for the NIC's life: every open
// returns it and close releases nothing (the objects made on it stay the
// NIC's, as the usage checker's leak report counts them).
ibv_context* ibv_open_device(ibv_device* device) {
  ibv_context* ctx = ContextOf(device);
  return ctx != nullptr ? ctx : FailPtr<ibv_context>(ENODEV);
}

int ibv_close_device(ibv_context* context) {
  return ContextOf(context != nullptr ? context->device : nullptr) == context
             ? 0
             : -1;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  return Nic().QueryDevice(context, device_attr);
}

// The exported symbol takes the old, shorter struct; <infiniband/verbs.h>'s
// inline ibv_query_port passes a whole ibv_port_attr, which providers fill
// (rdma-core cmd.c ibv_cmd_query_port writes flags and port_cap_flags2).
int ibv_query_port(ibv_context* context, uint8_t port_num,
                   struct _compat_ibv_port_attr* port_attr) {
  return Nic().QueryPort(context, port_num,
                         reinterpret_cast<ibv_port_attr*>(port_attr));
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num,
                      uint32_t gid_index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry) || port_num > 255) {
    return EINVAL;
  }
  return Nic().QueryGid(context, static_cast<uint8_t>(port_num), gid_index,
                        entry);
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                             size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  ibv_port_attr port;
  int err = Nic().QueryPort(context, 1, &port);
  if (err != 0) return -err;
  size_t n = 0;
  for (uint32_t i = 0; i < static_cast<uint32_t>(port.gid_tbl_len); ++i) {
    ibv_gid_entry entry;
    err = Nic().QueryGid(context, 1, i, &entry);
    if (err == ENODATA) continue;
    if (err != 0) return -err;
    if (n == max_entries) return -EINVAL;  // verbs.c: the table is larger
    memcpy(reinterpret_cast<char*>(entries) + n * entry_size, &entry,
           sizeof(entry));
    ++n;
  }
  return static_cast<ssize_t>(n);
}

// ibv_query_gid(3): 0 or -1. An empty entry is all zeros and success
// (rdma-core 44 verbs.c ibv_query_gid, "Preserve API behavior for empty
// GID").
int ibv_query_gid(ibv_context* context, uint8_t port_num, int index,
                  ibv_gid* gid) {
  ibv_gid_entry entry;
  const int err = index < 0
                      ? EINVAL
                      : Nic().QueryGid(context, port_num,
                                       static_cast<uint32_t>(index), &entry);
  if (err == ENODATA) {
    memset(gid, 0, sizeof(*gid));
    return 0;
  }
  if (err != 0) {
    errno = err;
    return -1;
  }
  *gid = entry.gid;
  return 0;
}

// libibverbs' private ibv_query_gid_type (ibv_devinfo prints the GID's
// type with it): 0 = IB or RoCE v1, 1 = RoCE v2 (enum ibv_gid_type_sysfs).
int ibv_query_gid_type(ibv_context* context, uint8_t port_num,
                       unsigned int index, int* type) {
  ibv_gid_entry entry;
  const int err = Nic().QueryGid(context, port_num, index, &entry);
  if (err == ENODATA) {
    *type = 0;
    return 0;
  }
  if (err != 0) {
    errno = err;
    return -1;
  }
  *type = entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
  return 0;
}

// One P_Key, the default full-membership 0xffff at index 0 (rxe_param.h
// RXE_PORT_PKEY_TBL_LEN 1, rxe_verbs.c rxe_query_pkey). 0 or -1.
int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index,
                   __be16* pkey) {
  ibv_port_attr port;
  if (Nic().QueryPort(context, port_num, &port) != 0 || index < 0 ||
      index >= static_cast<int>(port.pkey_tbl_len) || pkey == nullptr) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  __be16 have;
  if (ibv_query_pkey(context, port_num, 0, &have) != 0) return -1;
  if (have == pkey) return 0;
  errno = ENOENT;
  return -1;
}

// ---- PDs and MRs ----

ibv_pd* ibv_alloc_pd(ibv_context* context) { return Nic().AllocPd(context); }

int ibv_dealloc_pd(ibv_pd* pd) { return Nic().DeallocPd(pd); }

// ibv_reg_mr(3): IBV_ACCESS_OPTIONAL_RANGE flags are hints a device may
// ignore ("If a device does not support them, they are ignored").
ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return Nic().RegMr(pd, addr, length, access & ~IBV_ACCESS_OPTIONAL_RANGE);
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  if (iova != reinterpret_cast<uintptr_t>(addr)) {
    // The fake addresses an MR by the program's own addresses.
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "ibv_reg_mr_iova with an iova other than the address is not "
            "modelled by the fake NIC; it fails with EOPNOTSUPP");
    return FailPtr<ibv_mr>(EOPNOTSUPP);
  }
  return ibv_reg_mr(pd, addr, length, static_cast<int>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                        int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova,
                          static_cast<unsigned int>(access));
}

int ibv_dereg_mr(ibv_mr* mr) { return Nic().DeregMr(mr); }

// ---- completion channels and CQs ----

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  return Nic().CreateCompChannel(context);
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  return Nic().DestroyCompChannel(channel);
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                      ibv_comp_channel* channel, int comp_vector) {
  return Nic().CreateCq(context, cqe, cq_context, channel, comp_vector);
}

int ibv_destroy_cq(ibv_cq* cq) {
  const int err = Nic().DestroyCq(cq);
  if (err == 0) rpma_harness::dropin::ForgetCqEx(cq);
  return err;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq,
                     void** cq_context) {
  return Nic().GetCqEvent(channel, cq, cq_context);
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  Nic().AckCqEvents(cq, nevents);
}

// ---- QPs and SRQs ----

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  return Nic().CreateVerbsQp(pd, qp_init_attr);
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  return Nic().ModifyQp(qp, attr, attr_mask);
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                 ibv_qp_init_attr* init_attr) {
  return Nic().QueryQp(qp, attr, attr_mask, init_attr);
}

int ibv_destroy_qp(ibv_qp* qp) {
  const int err = Nic().DestroyVerbsQp(qp);
  if (err == 0) rpma_harness::dropin::ForgetQpEx(qp);
  return err;
}

// A QP from ibv_create_qp_ex (or rdma_create_qp_ex) has one; a QP from
// ibv_create_qp has none (rdma-core verbs.c: VERBS_QP_EX).
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  return rpma_harness::dropin::QpToQpEx(qp);
}

// 0: no promise that data lands in order (what libibverbs answers for a
// provider without query_qp_data_in_order).
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  return Nic().CreateSrq(pd, srq_init_attr);
}

int ibv_destroy_srq(ibv_srq* srq) { return Nic().DestroySrq(srq); }

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  return Nic().ModifySrq(srq, srq_attr, srq_attr_mask);
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  return Nic().QuerySrq(srq, srq_attr);
}

// ---- asynchronous events: what rxe raises (nic/fake_nic.h GetAsyncEvent) ----

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  return Nic().GetAsyncEvent(context, event);
}

void ibv_ack_async_event(ibv_async_event* event) {
  Nic().AckAsyncEvent(event);
}

// ---- fork support: the fake pins no pages, so fork needs nothing ----

int ibv_fork_init(void) { return 0; }
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }

// ---- sysfs: a fake device has none ----

const char* ibv_get_sysfs_path(void) { return "/sys"; }

int ibv_read_sysfs_file(const char*, const char*, char*, size_t) {
  errno = ENOENT;
  return -1;
}

int ibv_read_ibdev_sysfs_file(char*, size_t, void*, const char*, ...) {
  errno = ENOENT;
  return -1;
}

// The drop-in librdmacm.so.1 runs on this library's NIC (one NIC a
// process); it takes it here, the one symbol of the harness's own node
// (RPMA_HARNESS_PRIVATE_1), which no program refers to.
// A program may never call ibv_get_device_list: an rdma_cm program takes
// its context from id->verbs. So the contexts' ops tables are pointed at
// the backend here too, or its inline ibv_post_send / ibv_poll_cq would
// reach the bare NIC past the fault rules and the checker.
// The drop-in librdmacm's rdma_create_qp_ex and rdma_destroy_qp give and
// take a QP's extended API here (same node), so it is written once.
int rpma_harness_qp_ex_refusal(const ibv_qp_init_attr_ex* attr) {
  return rpma_harness::dropin::QpExCreationRefusal(attr);
}
void rpma_harness_make_qp_ex(ibv_qp* qp, const ibv_qp_init_attr_ex* attr) {
  rpma_harness::dropin::MakeQpEx(qp, attr);
}
void rpma_harness_forget_qp_ex(ibv_qp* qp) {
  rpma_harness::dropin::ForgetQpEx(qp);
}

void* rpma_harness_fake_verbs_backend(void) {
  static const bool routed = [] {
    std::vector<ibv_context*> contexts;
    return OpenContexts(&contexts) == 0;
  }();
  (void)routed;
  return &Nic();
}

// Providers (Debian's libmlx5.so.1, libefa.so.1) register themselves from
// their constructors when a program links them; the fake has no use for
// them, and their devices are never listed.
void verbs_register_driver_34(void*) {}

}  // extern "C"
