// rdmacm.cc: the functions of the drop-in librdmacm.so.1 that the fake NIC
// models. They run on the same NIC as the drop-in libibverbs.so.1 of the
// process (one NIC a process, as one kernel serves both real libraries):
// librdmacm.so.1 needs libibverbs.so.1 and takes that library's backend
// through its one private symbol, rpma_harness_fake_verbs_backend. Each
// function keeps librdmacm's contract (its man page; rdma-core 44's
// librdmacm/cma.c and addrinfo.c where the page is silent); what the NIC
// decides (the CM handshake, events, the fabric) it decides in nic/.
// What librdmacm keeps beside the public rdma_cm_id (synchronous ids, the
// endpoint's QP attributes, the CQs it made for a QP) is kept here, in
// IdState. The rest of librdmacm's symbols (rsockets, multicast, ECE) are
// generated stubs (librdmacm.symbols, gen_symbols.py).

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nic/fake_nic.h"
#include "verbs_backend/verbs_backend.h"

extern "C" void* rpma_harness_fake_verbs_backend(void);
// The QP extended API, written once in the drop-in libibverbs.so.1
// (verbs_dropin/ibverbs_ex.cc).
extern "C" int rpma_harness_qp_ex_refusal(const ibv_qp_init_attr_ex* attr);
extern "C" void rpma_harness_make_qp_ex(ibv_qp* qp,
                                        const ibv_qp_init_attr_ex* attr);
extern "C" void rpma_harness_forget_qp_ex(ibv_qp* qp);

namespace {

using rpma_harness::VerbsBackend;

VerbsBackend& Nic() {
  static auto* backend =
      static_cast<VerbsBackend*>(rpma_harness_fake_verbs_backend());
  return *backend;
}

// The "cm" convention: -1 with errno.
int Fail(int err) {
  errno = err;
  return -1;
}

// A socket address as the backend's CM takes it: numeric host and port.
bool HostAndPort(const sockaddr* sa, std::string* host, std::string* port) {
  char text[INET6_ADDRSTRLEN] = {};
  uint16_t p = 0;
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    p = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    p = ntohs(in6->sin6_port);
  } else {
    return false;  // AF_IB and others: not modelled
  }
  *host = text;
  *port = std::to_string(p);
  return true;
}

uint16_t PortOf(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(sa)->sin_port;
  }
  if (sa->sa_family == AF_INET6) {
    return reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port;
  }
  return 0;
}

void SayOnce(std::atomic<bool>* told, const char* what) {
  if (!told->exchange(true)) {
    std::fprintf(stderr, "rpma-harness librdmacm.so.1: %s\n", what);
  }
}

// What librdmacm's cma_id_private holds beside the rdma_cm_id (cma.c):
//  - sync: the id was made without an event channel. It has a private
//    channel of its own, and every call that starts a CM exchange waits for
//    the exchange's event and returns its status (ucma_complete); the event
//    stays in id->event until the next call acks it.
//  - ep_qp_attr: a passive endpoint's QP attributes (rdma_create_ep with
//    RAI_PASSIVE); rdma_get_request makes each new id's QP from them.
//  - the CQs and completion channels rdma_create_qp made because the caller
//    gave none (ucma_create_cqs); rdma_destroy_qp destroys those only.
struct OwnCqs {
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_comp_channel* send_channel = nullptr;
  ibv_comp_channel* recv_channel = nullptr;
  void Destroy() const;  // below Nic(); CQs before their channels
};
struct IdState {
  bool sync = false;
  std::unique_ptr<ibv_qp_init_attr> ep_qp_attr;
  OwnCqs own;
};

std::mutex ids_mu;
std::unordered_map<const rdma_cm_id*, IdState>& Ids() {
  static auto* ids = new std::unordered_map<const rdma_cm_id*, IdState>;
  return *ids;
}

// Events handed out and not yet acked, per id they count on (the listener
// for a connection request, as librdmacm counts them): rdma_destroy_id
// waits for them, as cma.c rdma_destroy_id waits for events_completed.
std::condition_variable acked_cv;
std::unordered_map<const rdma_cm_id*, int>& Unacked() {
  static auto* unacked = new std::unordered_map<const rdma_cm_id*, int>;
  return *unacked;
}
std::unordered_map<const rdma_cm_event*, const rdma_cm_id*>& CountedOn() {
  static auto* counted =
      new std::unordered_map<const rdma_cm_event*, const rdma_cm_id*>;
  return *counted;
}

bool IsSync(const rdma_cm_id* id) {
  std::lock_guard<std::mutex> lock(ids_mu);
  auto it = Ids().find(id);
  return it != Ids().end() && it->second.sync;
}

// cma.c ucma_complete: on a synchronous id, the event the call just
// started, its status as the call's result (REJECTED is ECONNREFUSED).
int Complete(rdma_cm_id* id) {
  if (!IsSync(id)) return 0;
  if (id->event != nullptr) {
    rdma_ack_cm_event(id->event);
    id->event = nullptr;
  }
  if (rdma_get_cm_event(id->channel, &id->event) != 0) return -1;
  const rdma_cm_event* e = id->event;
  if (e->status == 0) return 0;
  if (e->event == RDMA_CM_EVENT_REJECTED) return Fail(ECONNREFUSED);
  return Fail(e->status < 0 ? -e->status : e->status);
}

// A successful call, then (on a synchronous id) its event.
int ThenComplete(rdma_cm_id* id, int rc) {
  return rc == 0 ? Complete(id) : rc;
}

void OwnCqs::Destroy() const {
  if (recv_cq != nullptr) Nic().DestroyCq(recv_cq);
  if (send_cq != nullptr) Nic().DestroyCq(send_cq);
  if (recv_channel != nullptr) Nic().DestroyCompChannel(recv_channel);
  if (send_channel != nullptr) Nic().DestroyCompChannel(send_channel);
}

// The device's default PD, which librdmacm allocates once per device
// (cma.c ucma_get_device) and gives every id on it as id->pd.
ibv_pd* DefaultPd(ibv_context* verbs) {
  static std::mutex mu;
  static auto* pds = new std::unordered_map<ibv_context*, ibv_pd*>;
  std::lock_guard<std::mutex> lock(mu);
  ibv_pd*& pd = (*pds)[verbs];
  if (pd == nullptr) pd = Nic().AllocPd(verbs);
  return pd;
}

}  // namespace

extern "C" {

// ---- event channels and ids ----

rdma_event_channel* rdma_create_event_channel(void) {
  return Nic().CreateEventChannel();
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  Nic().DestroyEventChannel(channel);
}

// rdma_create_id(3): RDMA_PS_TCP (reliable connected QPs) only. A NULL
// channel makes the id synchronous: it gets a private channel (cma.c
// ucma_alloc_id), and its calls wait for their events (Complete).
int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                   rdma_port_space ps) {
  if (id == nullptr) return Fail(EINVAL);
  if (ps != RDMA_PS_TCP) {
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "rdma_create_id: only RDMA_PS_TCP (RC) is modelled by the fake "
            "NIC; others fail with EOPNOTSUPP");
    return Fail(EOPNOTSUPP);
  }
  if (channel != nullptr) return Nic().CreateId(channel, id, context);
  rdma_event_channel* own = Nic().CreateEventChannel();
  if (own == nullptr) return -1;
  if (Nic().CreateId(own, id, context) != 0) {
    const int err = errno;
    Nic().DestroyEventChannel(own);
    return Fail(err);
  }
  std::lock_guard<std::mutex> lock(ids_mu);
  Ids()[*id].sync = true;
  return 0;
}

// rdma_destroy_id(3); a synchronous id's last event is acked and its
// private channel goes with it (cma.c rdma_destroy_id, ucma_free_id).
int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return Fail(EINVAL);
  if (id->qp != nullptr) {
    // rdma_destroy_id(3) wants the QP destroyed first, but librdmacm does
    // not check: the id goes and the QP stays the program's. Here the QP
    // goes with its id (the fake's QP belongs to its id); a later call on
    // it fails with EINVAL. perftest 4.5 does this when a connect is
    // rejected.
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "rdma_destroy_id: the id still has its QP (rdma_destroy_id(3): "
            "destroy it first); the fake destroys it with the id");
    rdma_destroy_qp(id);
  }
  const bool sync = IsSync(id);
  rdma_cm_event* last = id->event;
  rdma_event_channel* channel = id->channel;
  if (last != nullptr) {
    id->event = nullptr;
    rdma_ack_cm_event(last);
  }
  {
    // rdma_destroy_id(3) wants every related event acked first; cma.c
    // rdma_destroy_id blocks until they are (another thread may still be
    // handling one, as cmtime's workers do), and so does this.
    std::unique_lock<std::mutex> lock(ids_mu);
    auto none = [id] { return Unacked().count(id) == 0; };
    if (!acked_cv.wait_for(lock, std::chrono::seconds(10), none)) {
      std::fprintf(stderr,
                   "rpma-harness librdmacm.so.1: rdma_destroy_id waits for "
                   "%d unacked event(s) of its id; librdmacm blocks until "
                   "rdma_ack_cm_event\n",
                   Unacked()[id]);
      acked_cv.wait(lock, none);
    }
  }
  if (Nic().DestroyId(id) != 0) return -1;
  {
    std::lock_guard<std::mutex> lock(ids_mu);
    Ids().erase(id);
  }
  if (sync) Nic().DestroyEventChannel(channel);
  return 0;
}

// rdma_migrate_id(3). A NULL channel makes the id synchronous on a new
// private channel (a synchronous id cannot be migrated to NULL again); a
// synchronous id migrated to a channel stops being one, and its private
// channel is destroyed (cma.c rdma_migrate_id).
int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return Fail(EINVAL);
  const bool was_sync = IsSync(id);
  if (was_sync && channel == nullptr) return Fail(EINVAL);
  rdma_event_channel* to = channel;
  if (to == nullptr) {
    to = Nic().CreateEventChannel();
    if (to == nullptr) return -1;
  }
  rdma_event_channel* from = id->channel;
  if (Nic().MigrateId(id, to) != 0) {
    const int err = errno;
    if (channel == nullptr) Nic().DestroyEventChannel(to);
    return Fail(err);
  }
  if (was_sync) {
    if (id->event != nullptr) {
      rdma_ack_cm_event(id->event);
      id->event = nullptr;
    }
    Nic().DestroyEventChannel(from);
  }
  std::lock_guard<std::mutex> lock(ids_mu);
  Ids()[id].sync = channel == nullptr;
  return 0;
}

// ---- addresses ----

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  std::string host, port;
  if (!HostAndPort(addr, &host, &port)) return Fail(EAFNOSUPPORT);
  return Nic().BindAddr(id, host.c_str(), port.c_str());
}

// rdma_resolve_addr(3): the source address, when given, binds first (as
// cma.c rdma_resolve_addr2 does).
int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                      int timeout_ms) {
  std::string host, port;
  if (!HostAndPort(dst_addr, &host, &port)) return Fail(EAFNOSUPPORT);
  if (src_addr != nullptr) {
    std::string src_host, src_port;
    if (!HostAndPort(src_addr, &src_host, &src_port)) {
      return Fail(EAFNOSUPPORT);
    }
    const int err = Nic().BindAddr(id, src_host.c_str(), src_port.c_str());
    if (err != 0) return err;
  }
  return ThenComplete(
      id, Nic().ResolveAddr(id, host.c_str(), port.c_str(), timeout_ms));
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  return ThenComplete(id, Nic().ResolveRoute(id, timeout_ms));
}

int rdma_listen(rdma_cm_id* id, int backlog) {
  return Nic().Listen(id, backlog);
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  return id != nullptr ? PortOf(&id->route.addr.src_addr) : 0;
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  return id != nullptr ? PortOf(&id->route.addr.dst_addr) : 0;
}

// rdma_getaddrinfo(3) for IP addresses: the resolver's answer, the address
// as the source with RAI_PASSIVE and as the destination otherwise; the
// hints' QP type and port space, else RC over RDMA_PS_TCP (addrinfo.c
// ucma_convert_to_rai).
int rdma_getaddrinfo(const char* node, const char* service,
                     const rdma_addrinfo* hints, rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr)) {
    return Fail(EINVAL);
  }
  addrinfo want;
  memset(&want, 0, sizeof(want));
  const bool passive = hints != nullptr && (hints->ai_flags & RAI_PASSIVE);
  want.ai_family = hints != nullptr ? hints->ai_family : AF_UNSPEC;
  want.ai_socktype = SOCK_STREAM;
  if (passive) want.ai_flags |= AI_PASSIVE;
  if (hints != nullptr && (hints->ai_flags & RAI_NUMERICHOST)) {
    want.ai_flags |= AI_NUMERICHOST;
  }
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(node, service, &want, &found);
  if (rc != 0) {
    // librdmacm returns getaddrinfo's error (an EAI_* value) and sets errno.
    errno = rc == EAI_SYSTEM ? errno : ENODEV;
    return rc;
  }
  auto* ai = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  auto* addr = static_cast<sockaddr*>(malloc(found->ai_addrlen));
  if (ai == nullptr || addr == nullptr) {
    free(ai);
    free(addr);
    freeaddrinfo(found);
    return Fail(ENOMEM);
  }
  memcpy(addr, found->ai_addr, found->ai_addrlen);
  ai->ai_flags = hints != nullptr ? hints->ai_flags : 0;
  ai->ai_family = found->ai_family;
  ai->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0
                      ? hints->ai_qp_type
                      : IBV_QPT_RC;
  ai->ai_port_space = hints != nullptr && hints->ai_port_space != 0
                          ? hints->ai_port_space
                          : RDMA_PS_TCP;
  if (passive) {
    ai->ai_src_addr = addr;
    ai->ai_src_len = found->ai_addrlen;
  } else {
    ai->ai_dst_addr = addr;
    ai->ai_dst_len = found->ai_addrlen;
  }
  freeaddrinfo(found);
  *res = ai;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

// ---- QPs ----

// rdma_create_qp(3): with pd NULL the id's PD, else its device's default
// PD; a CQ the caller does not give is made for the QP with a completion
// channel of its own and the id as its context, and goes with the QP (cma.c
// rdma_create_qp_ex, ucma_create_cqs): what rdma_get_send_comp and
// rdma_get_recv_comp (<rdma/rdma_verbs.h>) wait on.
int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr || id->verbs == nullptr) {
    return Fail(EINVAL);
  }
  if (id->qp != nullptr) return Fail(EINVAL);
  if (pd == nullptr) pd = id->pd != nullptr ? id->pd : DefaultPd(id->verbs);
  if (pd == nullptr) return -1;
  ibv_qp_init_attr attr = *qp_init_attr;
  OwnCqs made;
  auto make_cq = [&](uint32_t size, ibv_cq** cq, ibv_comp_channel** ch) {
    // A zero size makes no CQ (ucma_create_cqs), and the QP fails below.
    if (size == 0) return true;
    *ch = Nic().CreateCompChannel(id->verbs);
    if (*ch == nullptr) return false;
    *cq = Nic().CreateCq(id->verbs, static_cast<int>(size), id, *ch, 0);
    return *cq != nullptr;
  };
  const bool ok =
      (attr.recv_cq != nullptr ||
       make_cq(attr.cap.max_recv_wr, &made.recv_cq,
               &made.recv_channel)) &&
      (attr.send_cq != nullptr ||
       make_cq(attr.cap.max_send_wr, &made.send_cq,
               &made.send_channel));
  if (!ok) {
    const int err = errno;
    made.Destroy();
    return Fail(err);
  }
  if (attr.recv_cq == nullptr) attr.recv_cq = made.recv_cq;
  if (attr.send_cq == nullptr) attr.send_cq = made.send_cq;
  if (attr.srq == nullptr) attr.srq = id->srq;
  if (Nic().CreateQp(id, pd, &attr) != 0) {
    const int err = errno;
    made.Destroy();
    return Fail(err);
  }
  *qp_init_attr = attr;
  std::lock_guard<std::mutex> lock(ids_mu);
  Ids()[id].own = made;
  return 0;
}

// rdma_create_qp_ex(3): rdma_create_qp's CQs and PD, and the QP as
// ibv_create_qp_ex makes it (cma.c rdma_create_qp_ex calls it): the same
// refusals, and the ibv_wr_* API when send_ops_flags is given.
int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr) {
  if (qp_init_attr == nullptr) return Fail(EINVAL);
  if (const int err = rpma_harness_qp_ex_refusal(qp_init_attr)) {
    return Fail(err);
  }
  ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_context = qp_init_attr->qp_context;
  attr.send_cq = qp_init_attr->send_cq;
  attr.recv_cq = qp_init_attr->recv_cq;
  attr.srq = qp_init_attr->srq;
  attr.cap = qp_init_attr->cap;
  attr.qp_type = qp_init_attr->qp_type;
  attr.sq_sig_all = qp_init_attr->sq_sig_all;
  const int rc = rdma_create_qp(id,
                                (qp_init_attr->comp_mask & IBV_QP_INIT_ATTR_PD)
                                    ? qp_init_attr->pd
                                    : nullptr,
                                &attr);
  if (rc == 0) {
    qp_init_attr->cap = attr.cap;
    rpma_harness_make_qp_ex(id->qp, qp_init_attr);
  }
  return rc;
}

// rdma_destroy_qp(3): the QP, then the CQs and channels rdma_create_qp made
// for it (cma.c rdma_destroy_qp, ucma_destroy_cqs).
void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr) return;
  ibv_qp* qp = id->qp;
  Nic().DestroyQp(id);
  if (qp != nullptr && id->qp == nullptr) rpma_harness_forget_qp_ex(qp);
  OwnCqs made;
  {
    std::lock_guard<std::mutex> lock(ids_mu);
    auto it = Ids().find(id);
    if (it == Ids().end()) return;
    made = std::exchange(it->second.own, OwnCqs());
  }
  made.Destroy();
  if (id->send_cq == made.send_cq) id->send_cq = nullptr;
  if (id->recv_cq == made.recv_cq) id->recv_cq = nullptr;
  if (id->send_cq_channel == made.send_channel) {
    id->send_cq_channel = nullptr;
  }
  if (id->recv_cq_channel == made.recv_channel) {
    id->recv_cq_channel = nullptr;
  }
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || id->verbs == nullptr) return Fail(EINVAL);
  // With pd NULL, the id's PD (cma.c rdma_create_srq_ex).
  if (pd == nullptr) pd = id->pd != nullptr ? id->pd : DefaultPd(id->verbs);
  if (pd == nullptr) return -1;
  ibv_srq* srq = Nic().CreateSrq(pd, attr);
  if (srq == nullptr) return -1;
  id->srq = srq;
  return 0;
}

void rdma_destroy_srq(rdma_cm_id* id) {
  if (id != nullptr && id->srq != nullptr) {
    Nic().DestroySrq(id->srq);
    id->srq = nullptr;
  }
}

// ---- the connection ----

// On a synchronous id, rdma_connect and rdma_accept return once the
// connection is ESTABLISHED (or with the failure's status), and
// rdma_disconnect once it is DISCONNECTED (cma.c ucma_complete).
int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return ThenComplete(id, Nic().Connect(id, conn_param));
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return ThenComplete(id, Nic().Accept(id, conn_param));
}

int rdma_reject(rdma_cm_id* id, const void* private_data,
                uint8_t private_data_len) {
  return Nic().Reject(id, private_data, private_data_len);
}

int rdma_disconnect(rdma_cm_id* id) {
  return ThenComplete(id, Nic().Disconnect(id));
}

// rdma_get_cm_event(3). A connection request to a synchronous listener
// gives a synchronous id (cma.c ucma_process_conn_req migrates it to a
// private channel of its own).
int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (Nic().GetCmEvent(channel, event) != 0) return -1;
  rdma_cm_event* e = *event;
  {
    const rdma_cm_id* counted =
        e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id != nullptr
            ? e->listen_id
            : e->id;
    std::lock_guard<std::mutex> lock(ids_mu);
    Unacked()[counted]++;
    CountedOn()[e] = counted;
  }
  if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id != nullptr &&
      IsSync(e->listen_id) && rdma_migrate_id(e->id, nullptr) != 0) {
    const int err = errno;
    rdma_ack_cm_event(e);
    *event = nullptr;
    return Fail(err);
  }
  return 0;
}

// rdma_get_request(3): the next connection request on a synchronous
// listener, as a new synchronous id with the endpoint's QP made on it when
// rdma_create_ep was given QP attributes; the request stays in (*id)->event
// until the next call on the id acks it (cma.c rdma_get_request).
int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr || !IsSync(listen)) {
    return Fail(EINVAL);
  }
  if (listen->event != nullptr) {
    rdma_ack_cm_event(listen->event);
    listen->event = nullptr;
  }
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(listen->channel, &event) != 0) return -1;
  int err = 0;
  if (event->event == RDMA_CM_EVENT_REJECTED) {
    err = ECONNREFUSED;
  } else if (event->status != 0) {
    err = event->status < 0 ? -event->status : event->status;
  } else if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    err = EINVAL;
  }
  std::unique_ptr<ibv_qp_init_attr> attr;
  if (err == 0) {
    std::lock_guard<std::mutex> lock(ids_mu);
    auto it = Ids().find(listen);
    if (it != Ids().end() && it->second.ep_qp_attr != nullptr) {
      attr = std::make_unique<ibv_qp_init_attr>(*it->second.ep_qp_attr);
    }
  }
  if (err == 0 && attr != nullptr &&
      rdma_create_qp(event->id, listen->pd, attr.get()) != 0) {
    err = errno;
  }
  if (err != 0) {
    listen->event = event;
    return Fail(err);
  }
  *id = event->id;
  (*id)->event = event;
  return 0;
}

// ---- endpoints (rdma_create_ep(3)) ----

// A synchronous id for the address rdma_getaddrinfo gave: a passive one is
// bound (rdma_listen and rdma_get_request follow) and keeps the QP
// attributes for the ids of its requests; an active one is resolved and
// routed, with its QP made when attributes are given (cma.c rdma_create_ep).
int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                   ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return Fail(EINVAL);
  rdma_cm_id* cm_id = nullptr;
  if (rdma_create_id(nullptr, &cm_id, nullptr,
                     static_cast<rdma_port_space>(res->ai_port_space)) != 0) {
    return -1;
  }
  int rc = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cm_id, res->ai_src_addr);
    if (rc == 0) {
      if (pd != nullptr) cm_id->pd = pd;
      if (qp_init_attr != nullptr) {
        auto attr = std::make_unique<ibv_qp_init_attr>(*qp_init_attr);
        attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
        std::lock_guard<std::mutex> lock(ids_mu);
        Ids()[cm_id].ep_qp_attr = std::move(attr);
      }
    }
  } else {
    rc = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cm_id, 2000);
    if (rc == 0 && qp_init_attr != nullptr) {
      qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
      rc = rdma_create_qp(cm_id, pd, qp_init_attr);
    }
  }
  if (rc != 0) {
    const int err = errno;
    rdma_destroy_ep(cm_id);
    return Fail(err);
  }
  *id = cm_id;
  return 0;
}

// rdma_destroy_ep(3): the QP, the SRQ and the id.
void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (Nic().AckCmEvent(event) != 0) return -1;
  std::lock_guard<std::mutex> lock(ids_mu);
  auto it = CountedOn().find(event);
  if (it != CountedOn().end()) {
    auto n = Unacked().find(it->second);
    if (n != Unacked().end() && --n->second == 0) Unacked().erase(n);
    CountedOn().erase(it);
    acked_cv.notify_all();
  }
  return 0;
}

// rdma_set_option(3): the NIC's (FakeNic::SetOption), which keeps the ACK
// timeout for the QP and accepts TOS, REUSEADDR and AFONLY.
int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                    size_t optlen) {
  if (id == nullptr) return Fail(EINVAL);
  return Nic().SetOption(id, level, optname, optval, optlen);
}

// ---- devices ----

ibv_context** rdma_get_devices(int* num_devices) {
  std::vector<ibv_context*> contexts;
  const int err = Nic().ListDevices(&contexts);
  if (err != 0) {
    errno = err;
    return nullptr;
  }
  auto** list = static_cast<ibv_context**>(
      calloc(contexts.size() + 1, sizeof(ibv_context*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < contexts.size(); ++i) list[i] = contexts[i];
  if (num_devices != nullptr) *num_devices = static_cast<int>(contexts.size());
  return list;
}

void rdma_free_devices(ibv_context** list) { free(list); }

// rdma_event_str(3): "RDMA_CM_EVENT_<NAME>", as librdmacm spells them.
const char* rdma_event_str(rdma_cm_event_type event) {
  static const std::string* names = [] {
    auto* table = new std::string[RDMA_CM_EVENT_TIMEWAIT_EXIT + 1];
    for (int e = 0; e <= RDMA_CM_EVENT_TIMEWAIT_EXIT; ++e) {
      table[e] = std::string("RDMA_CM_EVENT_") + rpma_harness::CmEventName(e);
    }
    return table;
  }();
  if (event < 0 || event > RDMA_CM_EVENT_TIMEWAIT_EXIT) return "UNKNOWN EVENT";
  return names[event].c_str();
}

}  // extern "C"
