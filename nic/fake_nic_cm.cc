// fake_nic_cm.cc: the librdmacm half of the fake NIC: addresses, event
// channels, ids and the IB CM handshake (REQ / REP / RTU, REJ, DREQ / DREP)
// carried over the in-process fabric.
//
// Each CM message is one unit of NIC work (FakeNic::Step), so a test can
// stop between "the server accepted" and "the client saw ESTABLISHED".
// Event semantics follow rdma_cm(7), rdma_get_cm_event(3) and the kernel's
// drivers/infiniband/core/{cma,cm}.c; private-data limits are those of
// RDMA_PS_TCP over IB (include/rdma/ib_cm.h: REQ 92 bytes minus the 36-byte
// rdma_cm header cma.c prepends = 56, REP 196, REJ 148).
//
// Example (active side):
//   nic.CreateId(nullptr, &id, nullptr);             // synchronous id
//   nic.ResolveAddr(id, "10.0.0.1", "7204", 1000);
//   nic.ResolveRoute(id, 1000);
//   nic.MigrateId(id, channel);                       // events from now on
//   nic.CreateQp(id, pd, &init_attr);
//   nic.Connect(id, &param);                          // -> ESTABLISHED later

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "nic/fake_nic.h"
#include "nic/fake_nic_fabric.h"
#include "nic/fake_nic_internal.h"

namespace rpma_harness {

using fake_nic_internal::CmState;

namespace fake_nic_internal {

bool ParseAddress(const char* text, std::string* normalized, bool* wildcard) {
  if (text == nullptr) return false;
  char buf[INET6_ADDRSTRLEN];
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, text, &v4) == 1) {
    inet_ntop(AF_INET, &v4, buf, sizeof(buf));
    *wildcard = v4.s_addr == htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET6, text, &v6) == 1) {
    inet_ntop(AF_INET6, &v6, buf, sizeof(buf));
    *wildcard = IN6_IS_ADDR_UNSPECIFIED(&v6);
  } else {
    return false;
  }
  *normalized = buf;
  return true;
}

}  // namespace fake_nic_internal

namespace {

bool ParsePort(const char* text, uint16_t* port) {
  if (text == nullptr || *text == '\0') {
    *port = 0;
    return true;
  }
  char* end = nullptr;
  const long value = strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 65535) return false;
  *port = static_cast<uint16_t>(value);
  return true;
}

// The IB CM's retry counts are 3-bit fields; rdma_cm caps a larger one at
// 7 (cma.c cma_connect_ib, cma_accept_ib: min_t(u8, 7, ...); recorded:
// cm_verbs, retry_count 9 arrives as 7).
uint8_t ThreeBitCount(uint8_t count) { return std::min<uint8_t>(count, 7); }

}  // namespace

namespace fake_nic_internal {

void FillSockaddr(const std::string& addr, uint16_t port,
                  sockaddr_storage* out) {
  memset(out, 0, sizeof(*out));
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
  }
}

std::string BoundKey(const std::string& addr, uint16_t port) {
  return addr + "|" + std::to_string(port);
}

}  // namespace fake_nic_internal

using fake_nic_internal::BoundKey;
using fake_nic_internal::FillSockaddr;
using fake_nic_internal::kMaxAcceptPrivateData;
using fake_nic_internal::kMaxConnectPrivateData;
using fake_nic_internal::kMaxRejectPrivateData;
using fake_nic_internal::kRejectConsumer;
using fake_nic_internal::kRejectInvalidServiceId;
using fake_nic_internal::kRejectTimeout;

// ---- addresses --------------------------------------------------------------

FakeNic::Device* FakeNic::DeviceOwning(const std::string& addr) {
  for (auto& device : devices_) {
    if (device->config.owns_every_address) return device.get();
    for (const std::string& owned : device->config.addresses) {
      std::string normalized;
      bool wildcard = false;
      if (fake_nic_internal::ParseAddress(owned.c_str(), &normalized,
                                          &wildcard) &&
          normalized == addr) {
        return device.get();
      }
    }
  }
  return nullptr;
}

FakeNic::Device* FakeNic::RouteDevice() {
  for (auto& device : devices_) {
    if (device->config.name == config_.route_device) return device.get();
  }
  return devices_.front().get();
}

int FakeNic::CmFail(int errno_value) {
  errno = errno_value;
  return -1;
}

// ---- event channels ---------------------------------------------------------

rdma_event_channel* FakeNic::CreateEventChannel() {
  std::lock_guard<std::mutex> lock(mu_);
  // Pollable like the rdma_cm fd (rdma_create_event_channel(3)): an eventfd
  // whose count is the number of queued events.
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  auto channel = std::make_unique<EventChannel>();
  channel->base.fd = fd;
  rdma_event_channel* result = &channel->base;
  event_channels_[result] = std::move(channel);
  return result;
}

void FakeNic::DestroyEventChannel(rdma_event_channel* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  EventChannel* ch = FindEventChannel(channel);
  if (ch == nullptr) return;
  // rdma_destroy_event_channel(3): all ids on it must be destroyed first.
  if (ch->num_ids > 0) {
    fprintf(stderr,
            "fake_nic: DestroyEventChannel with %d ids still on it; "
            "channel kept\n",
            ch->num_ids);
    return;
  }
  for (CmEvent* event : ch->queue) outstanding_events_.erase(&event->base);
  close(ch->base.fd);
  event_channels_.erase(channel);
}

void FakeNic::QueueCmWork(std::string what, std::function<void()> run) {
  cm_work_.push_back({std::move(what), std::move(run)});
  BumpPollEpoch();
  WakeWaiters();
}

fake_nic_internal::CmEvent* FakeNic::DeliverCmEvent(
    uint64_t id_handle, rdma_cm_event_type type, int status,
    const void* private_data, size_t private_data_len, uint64_t listen_handle,
    uint32_t remote_qp_num, size_t ib_cm_field_size) {
  auto it = ids_by_handle_.find(id_handle);
  if (it == ids_by_handle_.end()) return nullptr;  // the id is gone
  CmId* id = it->second;
  CmId* listener = nullptr;
  if (listen_handle != 0) {
    auto lit = ids_by_handle_.find(listen_handle);
    if (lit == ids_by_handle_.end()) return nullptr;
    listener = lit->second;
  }
  EventChannel* channel = id->channel;
  if (channel == nullptr) {
    fprintf(stderr,
            "fake_nic: %s for a synchronous id (no event channel) dropped\n",
            fake_nic_internal::CmEventName(type));
    return nullptr;
  }
  auto event = std::make_unique<CmEvent>();
  memset(&event->base, 0, sizeof(event->base));
  event->base.id = &id->base;
  event->base.listen_id = listener ? &listener->base : nullptr;
  event->base.event = type;
  event->base.status = status;
  // For CONNECT_REQUEST, librdmacm counts the event on the listening id
  // (rdma_ack_cm_event releases the listener's reference).
  event->counted_on = listener ? listener->handle : id->handle;
  // A CM message's private-data field holds at most its size (IB CM field
  // sizes), and librdmacm's private_data_len is a uint8_t: a frame from a
  // peer process is input, so a longer tail is cut, never wrapped.
  if (ib_cm_field_size > 0 && private_data_len > ib_cm_field_size) {
    private_data_len = ib_cm_field_size;
  }
  if (private_data_len > UINT8_MAX) private_data_len = UINT8_MAX;
  if (private_data_len > 0) {
    const auto* p = static_cast<const uint8_t*>(private_data);
    event->private_data.assign(p, p + private_data_len);
  }
  if (config_.personality.cm_private_data_padded_to_field_size &&
      ib_cm_field_size > event->private_data.size()) {
    event->private_data.resize(ib_cm_field_size, 0);
  }
  if (!event->private_data.empty()) {
    event->base.param.conn.private_data = event->private_data.data();
    event->base.param.conn.private_data_len =
        static_cast<uint8_t>(event->private_data.size());
  }
  event->base.param.conn.qp_num = remote_qp_num;
  event->base.param.conn.retry_count = id->req_retry_count;
  event->base.param.conn.rnr_retry_count = id->req_rnr_retry_count;
  if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
    // The REQ seen from the passive side (cm.c cm_format_req_event): its
    // initiator depth is our responder resources and the reverse
    // (recorded: cm_verbs "server param").
    event->base.param.conn.responder_resources = id->peer_initiator_depth;
    event->base.param.conn.initiator_depth = id->peer_responder_resources;
  }
  if (type == RDMA_CM_EVENT_REJECTED && id->qp != nullptr) {
    // librdmacm moves the QP to ERR when the program takes the event
    // (cma.c rdma_get_cm_event, RDMA_CM_EVENT_REJECTED: ucma_modify_qp_err;
    // recorded: cm_verbs, the QP of a rejected connect).
    const uint64_t handle = id->handle;
    event->on_get = [this, handle] {
      auto it = ids_by_handle_.find(handle);
      if (it == ids_by_handle_.end() || it->second->qp == nullptr) return;
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      ModifyQpLocked(it->second->qp, attr, IBV_QP_STATE, "REJECTED taken");
    };
  }
  CmEvent* raw = event.get();
  outstanding_events_[&raw->base] = std::move(event);
  channel->queue.push_back(raw);
  fake_nic_internal::SignalFd(channel->base.fd);

  FakeNicEvent record;
  record.kind = FakeNicEvent::Kind::kCmEvent;
  record.qp_num = id->qp ? id->qp->base.qp_num : 0;
  record.opcode = type;
  record.status = status;
  record.byte_len = private_data_len;
  record.text = std::string(fake_nic_internal::CmEventName(type)) + " to " +
                (id->local_addr.empty() ? "?" : id->local_addr) + ":" +
                std::to_string(id->local_port);
  Record(std::move(record));
  return raw;
}

int FakeNic::GetCmEvent(rdma_event_channel* channel, rdma_cm_event** event) {
  std::unique_lock<std::mutex> lock(mu_);
  EventChannel* ch = FindEventChannel(channel);
  if (ch == nullptr || event == nullptr) return CmFail(EINVAL);
  if (ch->queue.empty() && (fcntl(ch->base.fd, F_GETFL) & O_NONBLOCK)) {
    // Sequenced: an empty non-blocking get is a poll that found nothing.
    const std::function<bool()> has = [ch] { return !ch->queue.empty(); };
    if (!sequenced_ ||
        SequencedWait(lock, &has, "rdma_get_cm_event (O_NONBLOCK)", true) ||
        ch->queue.empty()) {
      return CmFail(EAGAIN);  // rdma_get_cm_event(3) on an O_NONBLOCK channel
    }
  }
  if (BlockUntil(
          lock, [ch] { return !ch->queue.empty(); }, "GetCmEvent") != 0) {
    return -1;
  }
  CmEvent* e = ch->queue.front();
  ch->queue.pop_front();
  fake_nic_internal::ConsumeFd(ch->base.fd);
  e->got = true;
  // After the wait (see Disconnect): the RTU a REP's on_get queues.
  CmWorkNow now(this);
  if (e->on_get) {
    std::function<void()> work = std::move(e->on_get);
    e->on_get = nullptr;
    work();
  }
  auto it = ids_by_handle_.find(e->counted_on);
  if (it != ids_by_handle_.end()) it->second->unacked_events++;
  *event = &e->base;
  return 0;
}

int FakeNic::AckCmEvent(rdma_cm_event* event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outstanding_events_.find(event);
  // Only an event handed out by GetCmEvent can be acked (a queued one is
  // still the channel's).
  if (it == outstanding_events_.end() || !it->second->got) {
    return CmFail(EINVAL);
  }
  auto id = ids_by_handle_.find(it->second->counted_on);
  if (id != ids_by_handle_.end()) id->second->unacked_events--;
  outstanding_events_.erase(it);
  return 0;
}

// ---- ids --------------------------------------------------------------------

int FakeNic::CreateId(rdma_event_channel* channel, rdma_cm_id** id,
                      void* context) {
  std::lock_guard<std::mutex> lock(mu_);
  EventChannel* ch = channel ? FindEventChannel(channel) : nullptr;
  if (id == nullptr || (channel != nullptr && ch == nullptr)) {
    return CmFail(EINVAL);
  }
  auto cm_id = std::make_unique<CmId>();
  memset(&cm_id->base, 0, sizeof(cm_id->base));
  cm_id->handle = next_handle_++;
  cm_id->channel = ch;
  cm_id->base.channel = channel;
  cm_id->base.context = context;
  cm_id->base.ps = RDMA_PS_TCP;
  cm_id->base.qp_type = IBV_QPT_RC;
  if (ch != nullptr) ch->num_ids++;
  *id = &cm_id->base;
  ids_by_handle_[cm_id->handle] = cm_id.get();
  ids_[&cm_id->base] = std::move(cm_id);
  return 0;
}

int FakeNic::DestroyId(rdma_cm_id* id) {
  std::lock_guard<std::mutex> lock(mu_);
  CmWorkNow now(this);
  CmId* c = FindId(id);
  if (c == nullptr) return CmFail(EINVAL);
  // rdma_destroy_id(3): the QP must be destroyed and every event acked
  // first. librdmacm would block forever on unacked events; we refuse.
  if (c->qp != nullptr) {
    fprintf(stderr, "fake_nic: DestroyId with a QP still on the id: EBUSY\n");
    return CmFail(EBUSY);
  }
  if (c->unacked_events > 0) {
    fprintf(stderr, "fake_nic: DestroyId with %d unacked events: EBUSY\n",
            c->unacked_events);
    return CmFail(EBUSY);
  }
  ReleaseId(c);
  return 0;
}

void FakeNic::ReleaseId(CmId* c) {
  // Events queued but not yet got die with the id (the kernel's
  // ucma_destroy_id drops them too); so do the ids of connection requests
  // nobody took off a destroyed listener's channel.
  std::vector<CmId*> orphans;
  if (c->channel != nullptr) {
    auto& queue = c->channel->queue;
    for (auto it = queue.begin(); it != queue.end();) {
      CmEvent* e = *it;
      if (e->base.id == &c->base || e->counted_on == c->handle) {
        if (e->base.id != &c->base) orphans.push_back(FindId(e->base.id));
        fake_nic_internal::ConsumeFd(c->channel->base.fd);
        outstanding_events_.erase(&e->base);
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    c->channel->num_ids--;
  }
  const uint64_t peer = c->peer_handle;
  if (c->link != 0) {
    // The peer is in another process: the same messages, on the link,
    // which then closes (cma.c rdma_destroy_id -> ib_destroy_cm_id).
    if (id_by_link_.count(c->link) != 0) {
      if (c->state == CmState::kConnected || c->state == CmState::kAccepted) {
        fabric_->Send(c->link, fake_nic_internal::kFrameDreq, nullptr, 0);
      } else if (c->state == CmState::kDisconnected && c->drep_owed) {
        SendDrep(c);  // cm.c cm_destroy_id, IB_CM_DREQ_RCVD
      } else if (c->state == CmState::kRequestReceived) {
        SendCmFrame(c, fake_nic_internal::kFrameRej, kRejectConsumer, {});
      } else if (c->state == CmState::kConnecting) {
        SendCmFrame(c, fake_nic_internal::kFrameRej, kRejectTimeout, {});
      }
      id_by_link_.erase(c->link);
    }
    fabric_->Close(c->link);
  } else if (c->state == CmState::kDisconnected && c->drep_owed) {
    // cm.c cm_destroy_id in IB_CM_DREQ_RCVD: the DREP the peer waits for.
    SendDrep(c);
  } else if ((c->state == CmState::kConnected ||
              c->state == CmState::kAccepted) &&
             peer != 0) {
    // Destroying a connected id sends a DREQ (cma.c rdma_destroy_id ->
    // ib_destroy_cm_id), so the peer sees DISCONNECTED.
    QueueCmWork("DREQ (id destroyed)", [this, peer] {
      auto it = ids_by_handle_.find(peer);
      if (it != ids_by_handle_.end()) DreqArrived(it->second, "peer id destroyed");
    });
  } else if (c->state == CmState::kRequestReceived && peer != 0) {
    // A request dropped without rdma_accept / rdma_reject: the IB CM
    // rejects it (cm.c cm_destroy_id, IB_CM_REQ_RCVD: REJ, consumer
    // defined).
    QueueCmWork("REJ (request dropped)", [this, peer] {
      auto it = ids_by_handle_.find(peer);
      if (it == ids_by_handle_.end() ||
          it->second->state != CmState::kConnecting) {
        return;
      }
      it->second->state = CmState::kRejected;
      DeliverCmEvent(peer, RDMA_CM_EVENT_REJECTED, kRejectConsumer, nullptr, 0,
                     0, 0, kMaxRejectPrivateData);
    });
  } else if (c->state == CmState::kConnecting && peer != 0) {
    // The active side gives up mid-handshake: cm.c cm_destroy_id in
    // IB_CM_REQ_SENT sends a REJ with reason IB_CM_REJ_TIMEOUT (4), which
    // the passive id sees as REJECTED.
    QueueCmWork("REJ (connect abandoned)", [this, peer] {
      auto it = ids_by_handle_.find(peer);
      if (it == ids_by_handle_.end()) return;
      CmId* p = it->second;
      if (p->state != CmState::kRequestReceived &&
          p->state != CmState::kAccepted) {
        return;
      }
      p->state = CmState::kRejected;
      if (p->qp != nullptr) SetQpState(p->qp, IBV_QPS_ERR, "REJ received");
      DeliverCmEvent(peer, RDMA_CM_EVENT_REJECTED, kRejectTimeout, nullptr, 0,
                     0, 0, kMaxRejectPrivateData);
    });
  }
  if (c->bound) bound_.erase(BoundKey(c->local_addr, c->local_port));
  if (c->state == CmState::kListening && fabric_ != nullptr) {
    bool wildcard = false;
    std::string unused;
    fake_nic_internal::ParseAddress(c->local_addr.c_str(), &unused, &wildcard);
    fabric_->Unpublish(wildcard ? "any" : c->local_addr, c->local_port);
  }
  ids_by_handle_.erase(c->handle);
  // Its DREQ's timeout and its timewait end with it (cm.c cm_destroy_id).
  const uint64_t handle = c->handle;
  cm_timers_.erase(std::remove_if(cm_timers_.begin(), cm_timers_.end(),
                                  [handle](const CmTimer& t) {
                                    return t.handle == handle;
                                  }),
                   cm_timers_.end());
  ids_.erase(&c->base);
  for (CmId* orphan : orphans) {
    if (orphan != nullptr) ReleaseId(orphan);
  }
}

void FakeNic::SetLocalAddress(CmId* id, Device* device, const std::string& addr,
                              uint16_t port) {
  id->device = device;
  id->base.verbs = device->context.context();
  id->base.port_num = 1;
  id->local_addr = addr;
  id->local_port = port;
  FillSockaddr(addr, port, &id->base.route.addr.src_storage);
}

// rdma_resolve_addr(3). An address no device owns cannot be resolved: a
// synchronous id fails with EHOSTUNREACH (the kernel's answer when no
// neighbour answers, as librdmacm's ucma_complete returns the event status),
// an asynchronous one gets RDMA_CM_EVENT_ADDR_ERROR with status
// -EHOSTUNREACH.
int FakeNic::ResolveAddr(rdma_cm_id* id, const char* addr, const char* port,
                         int /*timeout_ms*/) {
  std::lock_guard<std::mutex> lock(mu_);
  CmWorkNow now(this);
  CmId* c = FindId(id);
  std::string normalized;
  bool wildcard = false;
  uint16_t port_number = 0;
  if (c == nullptr ||
      !fake_nic_internal::ParseAddress(addr, &normalized, &wildcard) ||
      wildcard || !ParsePort(port, &port_number) ||
      (c->state != CmState::kIdle && c->state != CmState::kAddrBound)) {
    return CmFail(EINVAL);
  }
  Device* destination = DeviceOwning(normalized);
  if (destination == nullptr) {
    if (c->channel == nullptr) return CmFail(EHOSTUNREACH);
    const uint64_t handle = c->handle;
    QueueCmWork("ADDR_ERROR", [this, handle] {
      DeliverCmEvent(handle, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH, nullptr,
                     0, 0, 0);
    });
    return 0;
  }
  if (c->state == CmState::kIdle) {
    Device* local = RouteDevice();
    const std::string source = local->config.addresses.empty()
                                   ? normalized  // loopback-style device
                                   : local->config.addresses.front();
    std::string source_normalized;
    bool unused = false;
    fake_nic_internal::ParseAddress(source.c_str(), &source_normalized,
                                    &unused);
    SetLocalAddress(c, local, source_normalized, next_ephemeral_port_++);
  }
  c->remote_addr = normalized;
  c->remote_port = port_number;
  FillSockaddr(normalized, port_number, &c->base.route.addr.dst_storage);
  c->state = CmState::kAddrResolved;
  if (c->channel != nullptr) {
    const uint64_t handle = c->handle;
    QueueCmWork("ADDR_RESOLVED", [this, handle] {
      DeliverCmEvent(handle, RDMA_CM_EVENT_ADDR_RESOLVED, 0, nullptr, 0, 0, 0);
    });
  }
  return 0;
}

int FakeNic::ResolveRoute(rdma_cm_id* id, int /*timeout_ms*/) {
  std::lock_guard<std::mutex> lock(mu_);
  CmWorkNow now(this);
  CmId* c = FindId(id);
  if (c == nullptr || c->state != CmState::kAddrResolved) {
    return CmFail(EINVAL);
  }
  c->state = CmState::kRouteResolved;
  if (c->channel != nullptr) {
    const uint64_t handle = c->handle;
    QueueCmWork("ROUTE_RESOLVED", [this, handle] {
      DeliverCmEvent(handle, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, nullptr, 0, 0, 0);
    });
  }
  return 0;
}

// rdma_bind_addr(3). The wildcard address binds to the first device and
// listens on every address. A port already bound on the same address (or
// on the wildcard) is EADDRINUSE, as for TCP sockets.
int FakeNic::BindAddr(rdma_cm_id* id, const char* addr, const char* port) {
  std::lock_guard<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  std::string normalized;
  bool wildcard = false;
  uint16_t port_number = 0;
  if (c == nullptr ||
      !fake_nic_internal::ParseAddress(addr, &normalized, &wildcard) ||
      !ParsePort(port, &port_number) || c->state != CmState::kIdle) {
    return CmFail(EINVAL);
  }
  Device* device = wildcard ? devices_.front().get() : DeviceOwning(normalized);
  if (device == nullptr) return CmFail(ENODEV);
  if (port_number == 0) port_number = next_ephemeral_port_++;
  for (const auto& [key, handle] : bound_) {
    const size_t bar = key.rfind('|');
    const std::string bound_addr = key.substr(0, bar);
    const uint16_t bound_port =
        static_cast<uint16_t>(atoi(key.c_str() + bar + 1));
    std::string unused;
    bool bound_wildcard = false;
    fake_nic_internal::ParseAddress(bound_addr.c_str(), &unused,
                                    &bound_wildcard);
    if (bound_port == port_number &&
        (bound_addr == normalized || bound_wildcard || wildcard)) {
      return CmFail(EADDRINUSE);
    }
  }
  SetLocalAddress(c, device, normalized, port_number);
  c->bound = true;
  bound_[BoundKey(normalized, port_number)] = c->handle;
  c->state = CmState::kAddrBound;
  return 0;
}

int FakeNic::Listen(rdma_cm_id* id, int /*backlog*/) {
  std::lock_guard<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  // A synchronous listener would need rdma_get_request, which VerbsBackend
  // does not have: listeners need an event channel.
  if (c == nullptr || c->state != CmState::kAddrBound ||
      c->channel == nullptr) {
    return CmFail(EINVAL);
  }
  if (fabric_ != nullptr) {
    // Other processes on the fabric find the listener by its address.
    bool wildcard = false;
    std::string unused;
    fake_nic_internal::ParseAddress(c->local_addr.c_str(), &unused, &wildcard);
    const int err =
        fabric_->Publish(wildcard ? "any" : c->local_addr, c->local_port);
    if (err != 0) return CmFail(err);
  }
  c->state = CmState::kListening;
  return 0;
}

// rdma_set_option(3), as cma.c / ucma.c answer it: the options of an RC id
// that change nothing the fake models are accepted; RDMA_OPTION_ID_ACK_TIMEOUT
// (a uint8_t) becomes the QP's timeout when the CM moves it to RTS
// (rdma_set_ack_timeout; CmModifyQpToRts); RDMA_OPTION_IB_PATH needs an IB
// path record the fake does not have; anything else is ENOSYS, as
// ucma_set_option answers an unknown option.
int FakeNic::SetOption(rdma_cm_id* id, int level, int optname, void* optval,
                       size_t optlen) {
  std::lock_guard<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  if (c == nullptr) return CmFail(EINVAL);
  // ucma_set_option copies the value in (memdup_user): EFAULT without one.
  if (optval == nullptr) return CmFail(EFAULT);
  if (level == RDMA_OPTION_IB) {
    return CmFail(optname == RDMA_OPTION_IB_PATH ? EOPNOTSUPP : ENOSYS);
  }
  if (level != RDMA_OPTION_ID) return CmFail(ENOSYS);
  switch (optname) {
    case RDMA_OPTION_ID_TOS:
      return optlen == sizeof(uint8_t) ? 0 : CmFail(EINVAL);
    case RDMA_OPTION_ID_REUSEADDR:
    case RDMA_OPTION_ID_AFONLY:
      return optlen == sizeof(int) ? 0 : CmFail(EINVAL);
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (optlen != sizeof(uint8_t)) return CmFail(EINVAL);
      c->ack_timeout = *static_cast<const uint8_t*>(optval) & 31;
      c->ack_timeout_set = true;
      return 0;
    default:
      return CmFail(ENOSYS);
  }
}

int FakeNic::MigrateId(rdma_cm_id* id, rdma_event_channel* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  EventChannel* to = FindEventChannel(channel);
  if (c == nullptr || to == nullptr) return CmFail(EINVAL);
  EventChannel* from = c->channel;
  // rdma_migrate_id(3): queued events of the id move with it (the kernel's
  // ucma_migrate_id moves them to the new file).
  if (from != nullptr) {
    auto& queue = from->queue;
    for (auto it = queue.begin(); it != queue.end();) {
      CmEvent* e = *it;
      if (e->counted_on == c->handle) {
        fake_nic_internal::ConsumeFd(from->base.fd);
        to->queue.push_back(e);
        fake_nic_internal::SignalFd(to->base.fd);
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    from->num_ids--;
  }
  to->num_ids++;
  c->channel = to;
  c->base.channel = channel;
  return 0;
}

// ---- QPs on ids -------------------------------------------------------------

// rdma_create_qp(3): an RC QP on the id's device, left in INIT (the CM moves
// it to RTR/RTS during the handshake). The caps actually granted are written
// back to init_attr->cap (ibv_create_qp(3)).
int FakeNic::CreateQp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* init_attr) {
  std::lock_guard<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  Pd* p = FindPd(pd);
  if (c == nullptr || p == nullptr || init_attr == nullptr ||
      c->device == nullptr || c->qp != nullptr || p->device != c->device) {
    return CmFail(EINVAL);
  }
  // An RDMA_PS_TCP id carries an RC QP (rdma_create_id(3)).
  if (init_attr->qp_type != IBV_QPT_RC) return CmFail(EINVAL);
  Qp* raw = nullptr;
  const int err = NewQpLocked(p, init_attr, &raw);
  if (err != 0) return CmFail(err);
  raw->id = c;
  c->qp = raw;
  c->base.qp = &raw->base;
  c->base.pd = pd;
  c->base.send_cq = init_attr->send_cq;
  c->base.recv_cq = init_attr->recv_cq;
  c->base.send_cq_channel = init_attr->send_cq->channel;
  c->base.recv_cq_channel = init_attr->recv_cq->channel;
  // cma.c ucma_init_conn_qp: INIT at once; a passive id's access flags
  // already come from the REQ (see CmModifyQpToRts).
  const int access =
      c->state == CmState::kRequestReceived
          ? IBV_ACCESS_REMOTE_WRITE |
                (c->peer_initiator_depth > 0
                     ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                     : 0)
          : 0;
  CmModifyQpToInit(raw, access, "rdma_create_qp");
  return 0;
}

// The QP itself, for rdma_create_qp and ibv_create_qp alike: an RC QP on
// p's device in RESET, with the caps granted written back to
// init_attr->cap (ibv_create_qp(3)). Returns 0 or the errno.
int FakeNic::NewQpLocked(Pd* p, ibv_qp_init_attr* init_attr, Qp** out) {
  Device* device = p->device;
  Cq* send_cq = FindCq(init_attr->send_cq);
  Cq* recv_cq = FindCq(init_attr->recv_cq);
  const FakeDeviceCaps& caps = *config_.caps;
  const ibv_qp_cap& want = init_attr->cap;
  // RC and UC are modelled; librdmacm would create missing CQs, we require
  // them. An SRQ must be this NIC's, on the same device.
  Srq* srq = nullptr;
  if (init_attr->srq != nullptr) {
    srq = FindSrq(init_attr->srq);
    if (srq == nullptr || srq->device != device) return EINVAL;
  }
  if ((init_attr->qp_type != IBV_QPT_RC &&
       init_attr->qp_type != IBV_QPT_UC) ||
      send_cq == nullptr ||
      recv_cq == nullptr || send_cq->device != device ||
      recv_cq->device != device) {
    return EINVAL;
  }
  // ibv_create_qp(3): EINVAL when a cap exceeds the device's limits. With an
  // SRQ the receive caps are not used (rxe_qp.c rxe_qp_chk_cap checks them
  // only without one).
  if (want.max_send_wr > static_cast<uint32_t>(caps.max_qp_wr) ||
      (srq == nullptr &&
       want.max_recv_wr > static_cast<uint32_t>(caps.max_qp_wr)) ||
      want.max_send_sge > static_cast<uint32_t>(caps.max_sge) ||
      (srq == nullptr &&
       want.max_recv_sge > static_cast<uint32_t>(caps.max_sge)) ||
      want.max_inline_data > caps.max_inline_data) {
    return EINVAL;
  }
  if (device->num_qps >= caps.max_qp) return ENOMEM;

  std::unique_ptr<Qp> qp;
  if (retired_qps_.size() <= kRetiredKept) {
    qp.reset(new (config_.verbs_extension) Qp());
  } else {  // see FakeNic::cq_slots_
    qp = std::move(retired_qps_.front());
    retired_qps_.pop_front();
  }
  memset(&qp->base, 0,
         sizeof(qp->base) + (config_.verbs_extension ? fake_nic_internal::kQpExtension : 0));
  qp->device = device;
  qp->pd = p;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;
  if (config_.personality.new_qp_path_mtu_256) qp->attr.path_mtu = IBV_MTU_256;
  qp->cap = want;
  qp->cap.max_send_wr = RealDepth(static_cast<int>(want.max_send_wr));
  qp->cap.max_recv_wr = RealDepth(static_cast<int>(want.max_recv_wr));
  if (config_.personality.sq_flush_follows_requester_index &&
      config_.personality.round_queues_to_power_of_two_minus_one) {
    // rxe_queue.c rxe_queue_init: depth + 1 slots, a power of two.
    qp->sq_ring_slots = qp->cap.max_send_wr + 1;
  }
  if (srq != nullptr) {
    // No receive queue of its own (rxe_qp.c: no rq with an SRQ; the caps
    // written back say 0).
    qp->srq = srq;
    qp->cap.max_recv_wr = 0;
    qp->cap.max_recv_sge = 0;
    srq->qps.push_back(qp.get());
  }
  if (config_.personality.send_caps_from_wqe_size) {
    // Personality::send_caps_from_wqe_size (rxe_qp.c rxe_qp_init_req).
    const uint32_t wqe_size = std::max<uint32_t>(
        want.max_send_sge * static_cast<uint32_t>(sizeof(ibv_sge)),
        want.max_inline_data);
    qp->cap.max_send_sge = wqe_size / static_cast<uint32_t>(sizeof(ibv_sge));
    qp->cap.max_inline_data = wqe_size;
  }
  // (`want` is init_attr->cap: the depths asked for are read before it is
  // written.)
  const uint32_t asked_send_wr = want.max_send_wr;
  const uint32_t asked_recv_wr = want.max_recv_wr;
  init_attr->cap = qp->cap;
  if (config_.personality.create_qp_reports_requested_depth) {
    init_attr->cap.max_send_wr = asked_send_wr;
    if (srq == nullptr) init_attr->cap.max_recv_wr = asked_recv_wr;
  }
  qp->sq_sig_all = init_attr->sq_sig_all != 0;
  qp->base.context = device->context.context();
  qp->base.qp_context = init_attr->qp_context;
  qp->base.pd = &p->base;
  qp->base.send_cq = init_attr->send_cq;
  qp->base.recv_cq = init_attr->recv_cq;
  next_handle_++;  // handed out as before, so later handles stay the same
  // A destroyed QP's slot is taken again, as a CQ's is (see cq_slots_):
  // the slot tables stay as large as the most QPs alive at once, not as
  // the QPs ever made (a program that connects again and again grew them
  // by 16 bytes a connection; found by tools/chaos/soak.sh).
  size_t slot;
  if (free_qp_slots_.empty()) {
    slot = qp_slots_.size();
    qp_slots_.push_back(nullptr);
    qps_.emplace_back();
    marked_.resize(qp_slots_.size() / 64 + 1, 0);
    marked_summary_.resize(marked_.size() / 64 + 1, 0);
  } else {
    slot = free_qp_slots_.back();
    free_qp_slots_.pop_back();
  }
  qp->base.handle = static_cast<uint32_t>(slot);  // see FindQp
  qp->base.qp_num = NewQpNum();
  qp->base.state = IBV_QPS_RESET;
  qp->base.qp_type = init_attr->qp_type;
  qp->base.srq = init_attr->srq;
  Qp* raw = qp.get();
  qps_by_num_[raw->base.qp_num] = raw;
  qp_order_.push_back(raw);
  raw->slot = slot;
  qp_slots_[slot] = raw;
  qps_[slot] = std::move(qp);  // at raw->slot, as in qp_slots_
  p->num_users++;
  send_cq->num_qps++;
  recv_cq->num_qps++;
  device->num_qps++;
  *out = raw;
  return 0;
}

void FakeNic::DetachFromPeer(Qp* qp) {
  // A WR parked on an RNR wait is ready once nobody answers.
  MarkMaybeReady(qp);
  MarkMaybeReady(qp->peer);
  if (qp->peer != nullptr && qp->peer->peer == qp) qp->peer->peer = nullptr;
  qp->peer = nullptr;
}

// rdma_destroy_qp(3): outstanding WRs vanish without completions; CQEs
// already in the CQs stay.
void FakeNic::DestroyQp(rdma_cm_id* id) {
  std::lock_guard<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  if (c == nullptr || c->qp == nullptr) {
    fprintf(stderr, "fake_nic: DestroyQp on an id without a QP\n");
    return;
  }
  DestroyQpLocked(c->qp);
}

// Both destroys (rdma_destroy_qp, ibv_destroy_qp): the QP leaves the NIC,
// and the id it was made on (if any) keeps no QP.
void FakeNic::DestroyQpLocked(Qp* qp) {
  // Transmission order: with background progress a real NIC would have
  // sent what was posted before the destroy (see Disconnect).
  if (background_running_) RunRequesterNow(qp);
  DetachFromPeer(qp);
  for (size_t i = 0; i < qp_order_.size(); ++i) {
    if (qp_order_[i] == qp) {
      qp_order_.erase(qp_order_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  UnmarkReady(qp->slot);
  qp_slots_[qp->slot] = nullptr;
  if (qp->srq != nullptr) {
    auto& attached = qp->srq->qps;
    attached.erase(std::find(attached.begin(), attached.end(), qp));
  }
  qp->pd->num_users--;
  qp->send_cq->num_qps--;
  qp->recv_cq->num_qps--;
  qp->device->num_qps--;
  qps_by_num_.erase(qp->base.qp_num);
  if (CmId* c = qp->id) {
    c->qp = nullptr;
    c->base.qp = nullptr;
  }
  // Retired, not freed (see FakeNic::cq_slots_).
  const size_t slot = qp->slot;
  std::unique_ptr<Qp>& owned = qps_[slot];
  *owned = Qp();  // its rings and buffers released now
  retired_qps_.push_back(std::move(owned));
  free_qp_slots_.push_back(slot);
}

// ---- the handshake ----------------------------------------------------------

// rdma_connect(3): sends a REQ. A synchronous id would block here in
// librdmacm; VerbsBackend users migrate ids to a channel first (as librpma
// does), so the fake requires a channel.
FakeNic::CmId* FakeNic::FindListener(const std::string& addr, uint16_t port) {
  // A listener bound to the address itself, else to a wildcard.
  for (const std::string& key :
       {BoundKey(addr, port), BoundKey("0.0.0.0", port),
        BoundKey("::", port)}) {
    auto b = bound_.find(key);
    if (b == bound_.end()) continue;
    auto candidate = ids_by_handle_.find(b->second);
    if (candidate != ids_by_handle_.end() &&
        candidate->second->state == CmState::kListening) {
      return candidate->second;
    }
  }
  return nullptr;
}

FakeNic::CmId* FakeNic::NewRequestId(
    CmId* listener, Device* device, const std::string& local_addr,
    uint16_t local_port, const std::string& remote_addr, uint16_t remote_port,
    uint8_t retry_count, uint8_t rnr_retry_count, uint8_t initiator_depth,
    uint8_t responder_resources) {
  // The new id shares the listener's channel and context (rdma_cm(7),
  // librdmacm ucma_process_conn_req).
  auto child = std::make_unique<CmId>();
  memset(&child->base, 0, sizeof(child->base));
  child->handle = next_handle_++;
  child->channel = listener->channel;
  child->base.channel = &listener->channel->base;
  child->base.context = listener->base.context;
  child->base.ps = RDMA_PS_TCP;
  child->base.qp_type = IBV_QPT_RC;
  listener->channel->num_ids++;
  SetLocalAddress(child.get(), device, local_addr, local_port);
  child->remote_addr = remote_addr;
  child->remote_port = remote_port;
  FillSockaddr(child->remote_addr, child->remote_port,
               &child->base.route.addr.dst_storage);
  child->state = CmState::kRequestReceived;
  child->listener_handle = listener->handle;
  child->req_retry_count = retry_count;
  child->req_rnr_retry_count = rnr_retry_count;
  child->peer_initiator_depth = initiator_depth;
  child->peer_responder_resources = responder_resources;
  CmId* raw = child.get();
  ids_by_handle_[raw->handle] = raw;
  ids_[&raw->base] = std::move(child);
  return raw;
}

int FakeNic::Connect(rdma_cm_id* id, rdma_conn_param* param) {
  std::lock_guard<std::mutex> lock(mu_);
  CmWorkNow now(this);
  CmId* c = FindId(id);
  if (c == nullptr || c->channel == nullptr ||
      c->state != CmState::kRouteResolved ||
      (c->qp != nullptr && c->qp->base.state != IBV_QPS_INIT) ||
      ConnParamRefusal(*c, param) != 0) {
    return CmFail(EINVAL);
  }
  // No QP on the id: the REQ carries the QP number the program names
  // (rdma_connect(3), conn_param qp_num; recorded: cm_verbs no_qp).
  c->param_qp_num = c->qp == nullptr && param != nullptr ? param->qp_num : 0;
  if (param != nullptr && param->private_data_len > kMaxConnectPrivateData) {
    return CmFail(EINVAL);
  }
  // With no conn_param librdmacm uses retry 7 / rnr_retry 7
  // (librdmacm/cma.c ucma_copy_conn_param_to_kern); both are 3-bit fields.
  c->req_retry_count = param ? ThreeBitCount(param->retry_count) : 7;
  c->req_rnr_retry_count = param ? ThreeBitCount(param->rnr_retry_count) : 7;
  c->initiator_depth = RdDepth(param ? param->initiator_depth : 0xff);
  c->responder_resources = RdDepth(param ? param->responder_resources : 0xff);
  std::vector<uint8_t> private_data;
  if (param != nullptr && param->private_data_len > 0) {
    const auto* p = static_cast<const uint8_t*>(param->private_data);
    private_data.assign(p, p + param->private_data_len);
  }
  c->state = CmState::kConnecting;
  // The REQ's starting PSN: our QP's sq_psn, the passive QP's rq_psn.
  c->starting_psn = NextRandom32() & 0xffffff;
  const uint64_t handle = c->handle;
  QueueCmWork("REQ", [this, handle, private_data] {
    auto it = ids_by_handle_.find(handle);
    if (it == ids_by_handle_.end()) return;
    CmId* active = it->second;
    if (active->state != CmState::kConnecting) return;
    Device* destination = DeviceOwning(active->remote_addr);
    // A device that does not answer: the REQ times out, which rdma_cm
    // reports as UNREACHABLE with status -ETIMEDOUT (cma.c cma_ib_handler,
    // IB_CM_REQ_ERROR).
    if (destination == nullptr || !destination->up) {
      active->state = CmState::kRouteResolved;
      DeliverCmEvent(handle, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, nullptr, 0,
                     0, 0);
      return;
    }
    CmId* listener = FindListener(active->remote_addr, active->remote_port);
    // Not in this process: a listener of another process on the fabric.
    if (listener == nullptr && fabric_ != nullptr &&
        DialRemote(active, private_data)) {
      return;
    }
    if (listener == nullptr) {
      // No listener on the service id: the IB CM answers with a REJ,
      // reason 8, IB_CM_REJ_INVALID_SERVICE_ID.
      active->state = CmState::kRejected;
      DeliverCmEvent(handle, RDMA_CM_EVENT_REJECTED, kRejectInvalidServiceId,
                     nullptr, 0, 0, 0, kMaxRejectPrivateData);
      return;
    }
    CmId* child = NewRequestId(
        listener, destination, active->remote_addr, active->remote_port,
        active->local_addr, active->local_port, active->req_retry_count,
        active->req_rnr_retry_count, active->initiator_depth,
        active->responder_resources);
    child->peer_handle = handle;
    child->peer_starting_psn = active->starting_psn;
    active->peer_handle = child->handle;
    const uint64_t child_handle = child->handle;
    DeliverCmEvent(child_handle, RDMA_CM_EVENT_CONNECT_REQUEST, 0,
                   private_data.data(), private_data.size(), listener->handle,
                   active->qp ? active->qp->base.qp_num : active->param_qp_num,
                   kMaxConnectPrivateData);
  });
  return 0;
}

int FakeNic::ConnParamRefusal(const CmId& id,
                              const rdma_conn_param* param) const {
  // With no QP on the id, the QP number must come from a conn_param.
  if (param == nullptr) return id.qp == nullptr ? EINVAL : 0;
  // RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (0xff) ask for the device's
  // maximum; a larger explicit value is refused (recorded: cm_verbs
  // connect_responder_resources_200, connect_initiator_depth_200).
  const int max = config_.caps->max_qp_rd_atom;
  if (param->responder_resources != 0xff &&
      param->responder_resources > max) {
    return EINVAL;
  }
  if (param->initiator_depth != 0xff && param->initiator_depth > max) {
    return EINVAL;
  }
  return 0;
}

void FakeNic::SetRepEventParams(CmEvent* event, uint8_t rep_initiator_depth,
                                uint8_t rep_responder_resources,
                                uint8_t rep_rnr_retry) {
  // cm.c cm_format_rep_event and cma.c cma_set_rep_event_data: the REP's
  // initiator depth is our responder resources and the reverse, its RNR
  // retry count; the event has no retry count (recorded: cm_verbs
  // "client param").
  rdma_conn_param& conn = event->base.param.conn;
  conn.responder_resources = rep_initiator_depth;
  conn.initiator_depth = rep_responder_resources;
  conn.retry_count = 0;
  conn.rnr_retry_count = rep_rnr_retry;
}

// rdma_accept(3): the passive QP goes RTR and RTS now (librdmacm
// ucma_modify_qp_rtr / ucma_modify_qp_rts) and a REP is sent; the active
// side moves its QP to RTS and sees ESTABLISHED when the REP arrives, the
// passive side when the RTU arrives. Retry counts follow the IB CM
// (drivers/infiniband/core/cm.c): both QPs use the REQ's retry_count; the
// passive QP's rnr_retry is the REQ's, the active QP's is the REP's.
int FakeNic::Accept(rdma_cm_id* id, rdma_conn_param* param) {
  std::lock_guard<std::mutex> lock(mu_);
  CmWorkNow now(this);
  CmId* c = FindId(id);
  if (c == nullptr || c->state != CmState::kRequestReceived ||
      (c->qp != nullptr && c->qp->base.state != IBV_QPS_INIT) ||
      ConnParamRefusal(*c, param) != 0) {
    return CmFail(EINVAL);
  }
  c->param_qp_num = c->qp == nullptr && param != nullptr ? param->qp_num : 0;
  const uint8_t rep_rnr_retry =
      param ? ThreeBitCount(param->rnr_retry_count) : 7;
  std::vector<uint8_t> private_data;
  if (param != nullptr && param->private_data_len > 0) {
    const auto* p = static_cast<const uint8_t*>(param->private_data);
    private_data.assign(p, p + param->private_data_len);
  }
  Qp* qp = c->qp;
  c->initiator_depth = RdDepth(param ? param->initiator_depth : 0xff);
  c->responder_resources = RdDepth(param ? param->responder_resources : 0xff);
  CmQpParams qp_params;
  qp_params.retry_cnt = c->req_retry_count;
  qp_params.rnr_retry = c->req_rnr_retry_count;
  qp_params.initiator_depth = c->initiator_depth;
  qp_params.responder_resources = c->responder_resources;
  qp_params.peer_initiator_depth = c->peer_initiator_depth;
  // The REP's starting PSN: our QP's sq_psn, the active QP's rq_psn.
  c->starting_psn = NextRandom32() & 0xffffff;
  qp_params.rq_psn = c->peer_starting_psn;
  qp_params.sq_psn = c->starting_psn;
  auto active_it =
      c->link != 0 ? ids_by_handle_.end() : ids_by_handle_.find(c->peer_handle);
  if (qp == nullptr) {
    // The program connects a QP of its own (c->param_qp_num).
  } else if (c->link != 0) {
    // The active QP is in another process: requests to it go on the link.
    qp->link = c->link;
    qp_params.dest_qp_num = c->remote_qp_num;
  } else if (active_it != ids_by_handle_.end() &&
             active_it->second->qp != nullptr) {
    Qp* active_qp = active_it->second->qp;
    qp->peer = active_qp;
    active_qp->peer = qp;
    qp_params.dest_qp_num = active_qp->base.qp_num;
  } else if (active_it != ids_by_handle_.end()) {
    // The peer connects a QP of its own: the number its REQ carried (as
    // across processes, c->remote_qp_num).
    qp_params.dest_qp_num = active_it->second->param_qp_num;
  }
  if (qp != nullptr) CmModifyQpToRts(qp, qp_params, "rdma_accept");
  if (param != nullptr && param->private_data_len > kMaxAcceptPrivateData) {
    // librdmacm moved the QP to RTR and RTS before the kernel refused the
    // REP's private data; the kernel's rdma_accept then rejects the
    // connection (cma.c rdma_accept, "reject:" -- REJ reason 28) and
    // librdmacm moves the QP to ERR (ucma_modify_qp_err). Recorded:
    // cm_verbs bad_accept.
    if (qp != nullptr) SetQpState(qp, IBV_QPS_ERR, "rdma_accept failed");
    SendReject(c, {});
    return CmFail(EINVAL);
  }
  const uint8_t rep_initiator_depth = c->initiator_depth;
  const uint8_t rep_responder_resources = c->responder_resources;
  const uint32_t rep_starting_psn = c->starting_psn;
  c->state = CmState::kAccepted;
  if (c->link != 0) {
    // The REP carries what the in-process REP work below passes along.
    SendCmFrame(c, fake_nic_internal::kFrameRep, 0, private_data,
                rep_rnr_retry);
    return 0;
  }
  const uint64_t passive_handle = c->handle;
  const uint64_t active_handle = c->peer_handle;
  QueueCmWork("REP", [this, passive_handle, active_handle, rep_rnr_retry,
                      rep_initiator_depth, rep_responder_resources,
                      rep_starting_psn, private_data] {
    auto a = ids_by_handle_.find(active_handle);
    auto p = ids_by_handle_.find(passive_handle);
    if (a == ids_by_handle_.end() || a->second->state != CmState::kConnecting) {
      return;
    }
    CmId* passive = p == ids_by_handle_.end() ? nullptr : p->second;
    uint32_t passive_qp_num = 0;
    if (passive != nullptr) {
      passive_qp_num = passive->qp != nullptr ? passive->qp->base.qp_num
                                              : passive->param_qp_num;
    }
    CmEvent* established = DeliverCmEvent(
        active_handle, RDMA_CM_EVENT_ESTABLISHED, 0, private_data.data(),
        private_data.size(), 0, passive_qp_num, kMaxAcceptPrivateData);
    if (established == nullptr) return;
    SetRepEventParams(established, rep_initiator_depth,
                      rep_responder_resources, rep_rnr_retry);
    // librdmacm processes the REP inside rdma_get_cm_event on the active
    // side (cma.c ucma_process_conn_resp): only then does the QP go to RTR
    // and RTS and the RTU go out, so the passive side's ESTABLISHED waits
    // for the active side to read its own (seen on rxe, see
    // tools/softroce_vm/README.md).
    established->on_get = [this, active_handle, passive_handle, rep_rnr_retry,
                           rep_initiator_depth, rep_responder_resources,
                           rep_starting_psn] {
      auto a = ids_by_handle_.find(active_handle);
      if (a == ids_by_handle_.end() ||
          a->second->state != CmState::kConnecting) {
        return;
      }
      CmId* active = a->second;
      auto p = ids_by_handle_.find(passive_handle);
      CmId* passive = p == ids_by_handle_.end() ? nullptr : p->second;
      active->state = CmState::kConnected;
      if (active->qp != nullptr) {
        Qp* qp = active->qp;
        // cm.c cm_rep_handler: the REP's responder resources bound our
        // reads, its initiator depth our responder side.
        CmQpParams qp_params;
        qp_params.retry_cnt = active->req_retry_count;
        qp_params.rnr_retry = rep_rnr_retry;
        qp_params.initiator_depth =
            std::min(active->initiator_depth, rep_responder_resources);
        qp_params.responder_resources = rep_initiator_depth;
        qp_params.peer_initiator_depth = rep_initiator_depth;
        qp_params.rq_psn = rep_starting_psn;
        qp_params.sq_psn = active->starting_psn;
        if (passive != nullptr && passive->qp != nullptr) {
          qp_params.dest_qp_num = passive->qp->base.qp_num;
          qp->peer = passive->qp;
          passive->qp->peer = qp;
        } else if (passive != nullptr) {
          qp_params.dest_qp_num = passive->param_qp_num;  // its REP's
        }
        CmModifyQpToRts(qp, qp_params, "REP processed");
      }
      const uint32_t active_qp_num = active->qp ? active->qp->base.qp_num
                                                : active->param_qp_num;
      QueueCmWork("RTU", [this, passive_handle, active_qp_num] {
        auto it = ids_by_handle_.find(passive_handle);
        if (it == ids_by_handle_.end() ||
            it->second->state != CmState::kAccepted) {
          return;
        }
        it->second->state = CmState::kConnected;
        DeliverCmEvent(passive_handle, RDMA_CM_EVENT_ESTABLISHED, 0, nullptr, 0,
                       0, active_qp_num);
      });
      WakeWaiters();
    };
  });
  return 0;
}

// rdma_reject(3): a REJ with reason 28, IB_CM_REJ_CONSUMER_DEFINED;
// the active side sees REJECTED with that status and the private data.
int FakeNic::Reject(rdma_cm_id* id, const void* private_data,
                    uint8_t private_data_len) {
  std::lock_guard<std::mutex> lock(mu_);
  CmWorkNow now(this);
  CmId* c = FindId(id);
  if (c == nullptr || c->state != CmState::kRequestReceived) {
    return CmFail(EINVAL);
  }
  if (private_data_len > kMaxRejectPrivateData) return CmFail(EINVAL);
  std::vector<uint8_t> data;
  if (private_data_len > 0) {
    const auto* p = static_cast<const uint8_t*>(private_data);
    data.assign(p, p + private_data_len);
  }
  SendReject(c, std::move(data));
  return 0;
}

void FakeNic::SendReject(CmId* c, std::vector<uint8_t> data) {
  c->state = CmState::kRejected;
  if (c->link != 0) {
    SendCmFrame(c, fake_nic_internal::kFrameRej, kRejectConsumer, data);
    return;
  }
  const uint64_t active_handle = c->peer_handle;
  QueueCmWork("REJ", [this, active_handle, data] {
    auto it = ids_by_handle_.find(active_handle);
    if (it == ids_by_handle_.end() ||
        it->second->state != CmState::kConnecting) {
      return;
    }
    it->second->state = CmState::kRejected;
    DeliverCmEvent(active_handle, RDMA_CM_EVENT_REJECTED, kRejectConsumer,
                   data.data(), data.size(), 0, 0, kMaxRejectPrivateData);
  });
}

// librdmacm's rdma_disconnect moves the local QP to ERR with ibv_modify_qp
// (cma.c ucma_shutdown -> ucma_modify_qp_err), before it tells the kernel
// anything: what a program's own ibv_modify_qp to ERR does, refusal
// included. Returns 0 or the modify's errno.
int FakeNic::DisconnectQpToErr(Qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return ModifyQpLocked(qp, attr, IBV_QP_STATE, "rdma_disconnect");
}

// rdma_disconnect(3): the local QP goes to ERR now (librdmacm moves it
// before sending the DREQ), the peer's QP when the DREQ arrives, and each
// side gets exactly one DISCONNECTED: the peer on the DREQ, we on the DREP.
// Calling it again, or on a connection the peer already closed, is a no-op
// success, as answering a DREQ with a DREP is for librdmacm.
int FakeNic::Disconnect(rdma_cm_id* id) {
  std::unique_lock<std::mutex> lock(mu_);
  CmId* c = FindId(id);
  if (c == nullptr) return CmFail(EINVAL);
  // The modify comes first: a QP it refuses (one in RESET) fails the call
  // with EINVAL, and nothing is sent.
  if (c->qp != nullptr && !QpMayMoveTo(c->qp, IBV_QPS_ERR)) {
    return CmFail(EINVAL);
  }
  // After a REJ the kernel's rdma_disconnect still finds its IB CM id and
  // answers 0 (cma.c rdma_disconnect: the DREQ fails, a DREP is tried);
  // recorded, cm_verbs disconnect_refused.
  if (c->state == CmState::kDisconnected || c->state == CmState::kRejected) {
    if (c->qp != nullptr) DisconnectQpToErr(c->qp);
    // The answer to the peer's DREQ (Personality::
    // dreq_waits_for_peer_disconnect).
    if (c->drep_owed) SendDrep(c);
    return 0;
  }
  if (c->state != CmState::kConnected && c->state != CmState::kAccepted) {
    return CmFail(EINVAL);
  }
  // Transmission order: WRs posted before rdma_disconnect were on the wire
  // on a real NIC before librdmacm moved the QP to ERR (rxe runs the
  // requester inside ibv_post_send; a hardware NIC's doorbell has started
  // them). With background progress the fake sends them now; in manual
  // mode the test decides with Step() and they flush.
  if (c->qp != nullptr && background_running_) RunRequesterNow(c->qp);
  // Toward a peer in another process the same WRs are answered before the
  // QP leaves RTS, as rxe's loopback on one host answers them inside
  // ibv_post_send (found by the one-process / two-process differential,
  // WritePostedBeforeDisconnectArrives). Bounded: a peer that stopped
  // answering does not hold rdma_disconnect.
  if (c->qp != nullptr && c->qp->link != 0 && background_running_) {
    Qp* qp = c->qp;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (FindId(id) == c && c->qp == qp && qp->base.state == IBV_QPS_RTS &&
           !qp->sq.empty() && !qp->link_dead &&
           !qp->sq.front().stalled() &&
           std::chrono::steady_clock::now() < deadline) {
      if (!qp->sq.front().in_flight) {
        const size_t before = qp->sq.size();
        RunRequesterNow(qp);
        if (qp->sq.size() == before && !qp->sq.front().in_flight) break;
        continue;
      }
      WaitForEventUntil(lock,
                        std::min(deadline, std::chrono::steady_clock::now() +
                                               std::chrono::milliseconds(1)));
    }
    // Meanwhile the id may have gone, or the peer's DREQ have come.
    if (FindId(id) != c) return CmFail(EINVAL);
    if (c->state != CmState::kConnected && c->state != CmState::kAccepted) {
      if (c->qp != nullptr) DisconnectQpToErr(c->qp);
      if (c->drep_owed) SendDrep(c);  // as above: the answer to that DREQ
      return 0;
    }
  }
  // Not before the wait above: while it lives the background thread is not
  // woken, and that wait needs it.
  CmWorkNow now(this);
  if (c->qp != nullptr) DisconnectQpToErr(c->qp);
  c->state = CmState::kDisconnected;
  const uint64_t local = c->handle;
  if (c->link != 0) {
    // The DREP (or the link's end, if the peer is gone) brings our
    // DISCONNECTED (fake_nic_remote.cc).
    if (id_by_link_.count(c->link) == 0 ||
        !fabric_->Send(c->link, fake_nic_internal::kFrameDreq, nullptr, 0)) {
      QueueCmWork("DREP (peer gone)",
                  [this, local] { DreqAnswered(local, 0); });
    } else {
      // Whether the DREP waits for the peer's rdma_disconnect is the peer
      // process's personality: a DREQ it leaves unanswered times out here.
      ArmDreqTimer(c);
    }
    return 0;
  }
  const uint64_t peer = c->peer_handle;
  const bool waits = config_.personality.dreq_waits_for_peer_disconnect;
  if (waits) ArmDreqTimer(c);
  QueueCmWork("DREQ", [this, local, peer, waits] {
    auto it = ids_by_handle_.find(peer);
    if (it != ids_by_handle_.end()) DreqArrived(it->second, "DREQ received");
    if (waits) return;  // the peer's rdma_disconnect answers (SendDrep)
    QueueCmWork("DREP", [this, local] { DreqAnswered(local, 0); });
  });
  return 0;
}

void FakeNic::DeliverDisconnectedOnce(CmId* c, int status) {
  if (c->disconnect_seen) return;
  c->disconnect_seen = true;
  DeliverCmEvent(c->handle, RDMA_CM_EVENT_DISCONNECTED, status, nullptr, 0, 0,
                 0);
}

void FakeNic::DreqArrived(CmId* c, const char* why) {
  const bool waits = config_.personality.dreq_waits_for_peer_disconnect;
  if (c->state == CmState::kConnected || c->state == CmState::kAccepted) {
    c->state = CmState::kDisconnected;
    // Personality::dreq_waits_for_peer_disconnect: our rdma_disconnect or
    // rdma_destroy_id answers (SendDrep).
    c->drep_owed = waits;
    // Personality::peer_qp_to_err_on_dreq.
    if (c->qp != nullptr && config_.personality.peer_qp_to_err_on_dreq) {
      SetQpState(c->qp, IBV_QPS_ERR, why);
    }
  } else if (c->state == CmState::kDisconnected && !c->disconnect_seen) {
    // The DREQs crossed: ours is cancelled (no timeout) and this one is
    // taken as any other, so a later rdma_disconnect or rdma_destroy_id of
    // ours sends the DREP (cm.c cm_dreq_handler in IB_CM_DREQ_SENT:
    // ib_cancel_mad, IB_CM_DREQ_RCVD).
    c->drep_owed = waits;
  }
  if (c->state != CmState::kDisconnected) return;
  DeliverDisconnectedOnce(c, 0);
  // A NIC whose CM answers a DREQ by itself has sent its DREP.
  if (!waits) EnterTimewait(c);
}

void FakeNic::DreqAnswered(uint64_t handle, int status) {
  auto it = ids_by_handle_.find(handle);
  if (it == ids_by_handle_.end()) return;
  DeliverDisconnectedOnce(it->second, status);
  EnterTimewait(it->second);  // cm.c cm_drep_handler, cm_process_send_error
}

void FakeNic::SendDrep(CmId* c) {
  c->drep_owed = false;
  EnterTimewait(c);  // cm.c cm_send_drep_locked
  if (c->link != 0) {
    if (id_by_link_.count(c->link) != 0) {
      fabric_->Send(c->link, fake_nic_internal::kFrameDrep, nullptr, 0);
    }
    return;
  }
  const uint64_t peer = c->peer_handle;
  if (ids_by_handle_.count(peer) == 0) return;  // nobody waits for it
  QueueCmWork("DREP", [this, peer] { DreqAnswered(peer, 0); });
}

void FakeNic::ArmDreqTimer(CmId* c) {
  CmTimer timer;
  timer.at = std::chrono::steady_clock::now() +
             std::chrono::milliseconds(config_.personality.dreq_timeout_ms);
  timer.handle = c->handle;
  cm_timers_.push_back(timer);
  TimerArmed(timer.at);
}

void FakeNic::EnterTimewait(CmId* c) {
  if (config_.personality.timewait_ms == 0 || c->timewait_armed) return;
  c->timewait_armed = true;
  CmTimer timer;
  timer.at = std::chrono::steady_clock::now() +
             std::chrono::milliseconds(config_.personality.timewait_ms);
  timer.handle = c->handle;
  timer.timewait = true;
  cm_timers_.push_back(timer);
  TimerArmed(timer.at);
}

void FakeNic::FireCmTimersLocked() {
  for (const CmTimer& timer : fake_nic_internal::TakeDueTimers(
           cm_timers_, std::chrono::steady_clock::now())) {
    // A destroyed id has neither (cm.c cm_destroy_id).
    auto it = ids_by_handle_.find(timer.handle);
    if (it == ids_by_handle_.end()) continue;
    if (timer.timewait) {
      DeliverCmEvent(timer.handle, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, nullptr, 0,
                     0, 0);
      continue;
    }
    // The DREQ may have had its DREP, or been cancelled by the peer's DREQ.
    if (it->second->disconnect_seen) continue;
    // The peer never answered: its program did not call rdma_disconnect
    // (cm.c cm_process_send_error in IB_CM_DREQ_SENT: timewait, then
    // IB_CM_DREQ_ERROR, which cma.c reports as DISCONNECTED, -ETIMEDOUT).
    DreqAnswered(timer.handle, -ETIMEDOUT);
  }
}

bool FakeNic::NextTimerLocked(std::chrono::steady_clock::time_point* at) const {
  bool any = false;
  for (const TransportTimer& t : transport_timers_) {
    if (!any || t.at < *at) *at = t.at;
    any = true;
  }
  for (const CmTimer& t : cm_timers_) {
    if (!any || t.at < *at) *at = t.at;
    any = true;
  }
  return any;
}

// The link dies under a connection. rdma_cm has no message for this; what
// the application eventually sees is a CM timeout, which librpma treats
// (with DEVICE_REMOVAL) as a lost connection: RDMA_CM_EVENT_CONNECT_ERROR
// with status -ETIMEDOUT at both ends. Both QPs go to ERR at once.
bool FakeNic::LoseConnection(uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(mu_);
  Qp* qp = FindQpByNum(qp_num);
  if (qp == nullptr || qp->id == nullptr) return false;
  CmId* local = qp->id;
  if (local->state != CmState::kConnected &&
      local->state != CmState::kAccepted) {
    return false;
  }
  FakeNicEvent event;
  event.kind = FakeNicEvent::Kind::kFault;
  event.qp_num = qp_num;
  event.text = "fault: LoseConnection";
  Record(std::move(event));
  LoseConnectionLocked(qp);
  return true;
}

void FakeNic::LoseConnectionLocked(Qp* qp) {
  CmId* local = qp->id;
  if (local == nullptr) return;
  std::vector<uint64_t> ends = {local->handle};
  auto peer = ids_by_handle_.find(local->peer_handle);
  if (peer != ids_by_handle_.end()) ends.push_back(peer->second->handle);
  for (uint64_t handle : ends) {
    CmId* end = ids_by_handle_.at(handle);
    end->state = CmState::kDisconnected;
    end->disconnect_seen = true;
    if (end->qp != nullptr) {
      SetQpState(end->qp, IBV_QPS_ERR, "connection lost");
    }
    QueueCmWork("connection lost", [this, handle] {
      DeliverCmEvent(handle, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT, nullptr,
                     0, 0, 0);
    });
  }
}

}  // namespace rpma_harness
