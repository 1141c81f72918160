// rdmacm.cc: the functions of the drop-in librdmacm.so.1 that the fake NIC
// models. They run on the same NIC as the drop-in libibverbs.so.1 of the
// process (one NIC a process, as one kernel serves both real libraries):
// librdmacm.so.1 needs libibverbs.so.1 and takes that library's backend
// through its one private symbol, rpma_harness_fake_verbs_backend. Each
// function keeps librdmacm's contract (its man page; rdma-core 44's
// librdmacm/cma.c and addrinfo.c where the page is silent); what the NIC
// decides (the CM handshake, events, the fabric) it decides in nic/.
// The rest of librdmacm's symbols (rsockets, multicast, ECE, endpoints)
// are generated stubs (librdmacm.symbols, gen_symbols.py).

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "verbs_backend/verbs_backend.h"

extern "C" void* rpma_harness_fake_verbs_backend(void);

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

}  // namespace

extern "C" {

// ---- event channels and ids ----

rdma_event_channel* rdma_create_event_channel(void) {
  return Nic().CreateEventChannel();
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  Nic().DestroyEventChannel(channel);
}

// rdma_create_id(3): RDMA_PS_TCP (reliable connected QPs) only; a NULL
// channel makes the id synchronous.
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
  return Nic().CreateId(channel, id, context);
}

int rdma_destroy_id(rdma_cm_id* id) { return Nic().DestroyId(id); }

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  return Nic().MigrateId(id, channel);
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
  return Nic().ResolveAddr(id, host.c_str(), port.c_str(), timeout_ms);
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  return Nic().ResolveRoute(id, timeout_ms);
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

// rdma_getaddrinfo(3) for IP addresses (RDMA_PS_TCP): the resolver's
// answer, the address as the source with RAI_PASSIVE and as the
// destination otherwise.
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
  ai->ai_qp_type = IBV_QPT_RC;
  ai->ai_port_space = RDMA_PS_TCP;
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

// rdma_create_qp(3): with pd NULL the id's device's default PD, and
// missing CQs made for the QP, as librdmacm does (cma.c rdma_create_qp_ex,
// ucma_create_cqs); the fake's own CreateQp takes them given.
int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr || id->verbs == nullptr) {
    return Fail(EINVAL);
  }
  if (pd == nullptr) {
    static ibv_pd* default_pd = nullptr;
    if (default_pd == nullptr) default_pd = Nic().AllocPd(id->verbs);
    pd = default_pd;
    if (pd == nullptr) return -1;
  }
  ibv_qp_init_attr attr = *qp_init_attr;
  if (attr.send_cq == nullptr) {
    attr.send_cq = Nic().CreateCq(
        id->verbs, static_cast<int>(attr.cap.max_send_wr), nullptr, nullptr, 0);
    if (attr.send_cq == nullptr) return -1;
  }
  if (attr.recv_cq == nullptr) {
    attr.recv_cq = Nic().CreateCq(
        id->verbs, static_cast<int>(attr.cap.max_recv_wr), nullptr, nullptr, 0);
    if (attr.recv_cq == nullptr) return -1;
  }
  const int rc = Nic().CreateQp(id, pd, &attr);
  if (rc == 0) {
    qp_init_attr->cap = attr.cap;
    qp_init_attr->send_cq = attr.send_cq;
    qp_init_attr->recv_cq = attr.recv_cq;
  }
  return rc;
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr) {
  if (qp_init_attr == nullptr) return Fail(EINVAL);
  // The fields of ibv_qp_init_attr, and nothing the fake does not model.
  const uint32_t known = IBV_QP_INIT_ATTR_PD;
  if (qp_init_attr->comp_mask & ~known) {
    static std::atomic<bool> told{false};
    SayOnce(&told,
            "rdma_create_qp_ex: only IBV_QP_INIT_ATTR_PD is modelled by the "
            "fake NIC; other comp_mask bits fail with EOPNOTSUPP");
    return Fail(EOPNOTSUPP);
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
  if (rc == 0) qp_init_attr->cap = attr.cap;
  return rc;
}

void rdma_destroy_qp(rdma_cm_id* id) { Nic().DestroyQp(id); }

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || id->verbs == nullptr) return Fail(EINVAL);
  if (pd == nullptr) return Fail(EINVAL);
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

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return Nic().Connect(id, conn_param);
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return Nic().Accept(id, conn_param);
}

int rdma_reject(rdma_cm_id* id, const void* private_data,
                uint8_t private_data_len) {
  return Nic().Reject(id, private_data, private_data_len);
}

int rdma_disconnect(rdma_cm_id* id) { return Nic().Disconnect(id); }

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  return Nic().GetCmEvent(channel, event);
}

int rdma_ack_cm_event(rdma_cm_event* event) { return Nic().AckCmEvent(event); }

// rdma_set_option(3): the options a connected RC id may take are accepted
// and have no effect on the fake (it models no TOS, no fabric timeouts of
// its own); an option it does not know is EINVAL as in cma.c.
int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                    size_t optlen) {
  if (id == nullptr || optval == nullptr) return Fail(EINVAL);
  switch (level) {
    case RDMA_OPTION_ID:
      switch (optname) {
        case RDMA_OPTION_ID_TOS:
        case RDMA_OPTION_ID_REUSEADDR:
        case RDMA_OPTION_ID_AFONLY:
        case RDMA_OPTION_ID_ACK_TIMEOUT:
          return optlen >= 1 ? 0 : Fail(EINVAL);
        default:
          return Fail(ENOSYS);
      }
    case RDMA_OPTION_IB:
      return optname == RDMA_OPTION_IB_PATH ? Fail(EOPNOTSUPP) : Fail(ENOSYS);
    default:
      return Fail(ENOSYS);
  }
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
