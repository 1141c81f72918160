// ibverbs_internal.h: what the drop-in libibverbs.so.1's files share --
// the process's NIC (ibverbs.cc) and the extended verbs API over it
// (ibverbs_ex.cc).
#ifndef RPMA_HARNESS_VERBS_DROPIN_IBVERBS_INTERNAL_H_
#define RPMA_HARNESS_VERBS_DROPIN_IBVERBS_INTERNAL_H_

#include <infiniband/verbs.h>

#include <atomic>

#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {
namespace dropin {

// The process's one backend: the fake NIC under the fault rules and the
// checker, made at the first call that needs it (ibverbs.cc).
VerbsBackend& Nic();

// Prints `what` on stderr the first time *told is set.
void SayOnce(std::atomic<bool>* told, const char* what);

// ibverbs_ex.cc: fills the extended ops of a context the NIC handed out
// (create_qp_ex, create_cq_ex, query_device_ex).
void FillExtendedOps(ibv_context* context);

// ibverbs_ex.cc: the QP extended API. QpExCreationRefusal: 0, or the errno
// ibv_create_qp_ex / rdma_create_qp_ex answer for `attr` before a QP is
// made. MakeQpEx: gives `qp`, just made with `attr`, its ibv_qp_ex.
// QpToQpEx: ibv_qp_to_qp_ex(3).
int QpExCreationRefusal(const ibv_qp_init_attr_ex* attr);
void MakeQpEx(ibv_qp* qp, const ibv_qp_init_attr_ex* attr);
ibv_qp_ex* QpToQpEx(ibv_qp* qp);

// ibverbs_ex.cc: a QP or CQ just destroyed leaves the extended API.
void ForgetQpEx(ibv_qp* qp);
void ForgetCqEx(ibv_cq* cq);

}  // namespace dropin
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_VERBS_DROPIN_IBVERBS_INTERNAL_H_
