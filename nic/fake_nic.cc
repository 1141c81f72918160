// fake_nic.cc: devices, protection domains, memory regions, completion
// queues and channels, progress (Step, background thread), observers and
// fault hooks of the fake NIC. The data path is in fake_nic_data_path.cc,
// the CM in fake_nic_cm.cc.
//
// Every behaviour the fake decides is cited beside the code: an rdma-core man
// page, an InfiniBand Architecture Specification (vol. 1) rule, or the
// Linux soft-RoCE driver (drivers/infiniband/sw/rxe/*.c).
//
// Example:
//   FakeNic nic;
//   ibv_cq* cq = nic.CreateCq(ctx, 64, nullptr, channel, 0);
//   nic.ReqNotifyCq(cq, 0);          // the next CQE raises one event
//   nic.Step();                      // the NIC does one unit of work

#include "nic/fake_nic.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "nic/fake_nic_fabric.h"
#include "nic/fake_nic_internal.h"
#include "nic/fake_nic_lifecycle.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {

using fake_nic_internal::ConsumeFd;
using fake_nic_internal::SignalFd;

void fake_nic_internal::SignalFd(int fd) {
  const uint64_t one = 1;
  if (write(fd, &one, sizeof(one)) != sizeof(one)) {
    fprintf(stderr, "fake_nic: eventfd write failed: %s\n", strerror(errno));
  }
}

// The fd is an eventfd in semaphore mode: each read takes one pending event.
// Only called when the count is known to be positive, so it never blocks.
void fake_nic_internal::ConsumeFd(int fd) {
  uint64_t value = 0;
  if (read(fd, &value, sizeof(value)) != sizeof(value)) {
    fprintf(stderr, "fake_nic: eventfd read failed: %s\n", strerror(errno));
  }
}

namespace {

bool FdIsNonBlocking(int fd) { return (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

// ibv_get_async_event(3): "destroying an object ... will wait for all
// affiliated events to be acknowledged"; waiting for ever helps nobody in
// a test, so the destroy is refused and says why.
int RefuseUnackedAsync(const char* verb, unsigned int unacked) {
  fprintf(stderr,
          "fake_nic: %s with %u unacked asynchronous events "
          "(ibv_ack_async_event): EBUSY\n",
          verb, unacked);
  return EBUSY;
}

FakeNic* NicOf(ibv_context* context) {
  using fake_nic_internal::DeviceContext;
  static_assert(std::is_standard_layout<DeviceContext>(),
                "DeviceContext's context is found by its offset");
  constexpr size_t kOffset =
      offsetof(DeviceContext, ext) + offsetof(verbs_context, context);
  return reinterpret_cast<DeviceContext*>(reinterpret_cast<char*>(context) -
                                          kOffset)
      ->nic;
}

int TrampolinePostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return NicOf(qp->context)->PostSend(qp, wr, bad_wr);
}

int TrampolinePostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return NicOf(qp->context)->PostRecv(qp, wr, bad_wr);
}

int TrampolinePollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  return NicOf(cq->context)->PollCq(cq, num_entries, wc);
}

int TrampolinePostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                          ibv_recv_wr** bad_wr) {
  return NicOf(srq->context)->PostSrqRecv(srq, wr, bad_wr);
}

int TrampolineReqNotifyCq(ibv_cq* cq, int solicited_only) {
  return NicOf(cq->context)->ReqNotifyCq(cq, solicited_only);
}

}  // namespace

// ---- construction -----------------------------------------------------------

FakeNic::FakeNic() : FakeNic(FakeNicConfig{}) {}

namespace {
// The config as the NIC keeps it: caps always set (the override, or the
// personality's own).
FakeNicConfig Resolved(FakeNicConfig config) {
  if (!config.caps.has_value()) config.caps = config.personality.caps;
  return config;
}
}  // namespace

FakeNic::FakeNic(FakeNicConfig config)
    : config_(Resolved(std::move(config))),
      rng_state_(config_.seed),
      landing_(config_.landing),
      landing_rng_state_(config_.seed ^ 0x6c616e64696e67ULL) {
  std::vector<FakeDeviceConfig> devices = config_.devices;
  if (devices.empty()) devices.push_back({"fake0", {}, true});
  for (const FakeDeviceConfig& dc : devices) {
    auto device = std::make_unique<Device>();
    memset(&device->device, 0, sizeof(device->device));
    memset(&device->context, 0, sizeof(device->context));
    snprintf(device->device.name, sizeof(device->device.name), "%s",
             dc.name.c_str());
    snprintf(device->device.dev_name, sizeof(device->device.dev_name), "%s",
             dc.name.c_str());
    device->device.node_type = IBV_NODE_CA;
    device->device.transport_type = IBV_TRANSPORT_IB;
    ibv_context* ctx = device->context.context();
    ctx->device = &device->device;
    ctx->cmd_fd = -1;
    ctx->async_fd = -1;
    ctx->num_comp_vectors = 1;
    ctx->ops.post_send = TrampolinePostSend;
    ctx->ops.post_recv = TrampolinePostRecv;
    ctx->ops.poll_cq = TrampolinePollCq;
    ctx->ops.req_notify_cq = TrampolineReqNotifyCq;
    ctx->ops.post_srq_recv = TrampolinePostSrqRecv;
    // An extended context with no extended op yet (see DeviceContext).
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    device->context.ext.sz = sizeof(verbs_context);
    device->context.nic = this;
    device->config = dc;
    // An eventfd in semaphore mode, as a completion channel's (kernel
    // uverbs' async file is readable while an event is queued).
    device->async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
    ctx->async_fd = device->async_fd;
    devices_.push_back(std::move(device));
  }
  // First, so they see each record before any other tap.
  AddBuiltInTaps();
  if (!config_.fabric_dir.empty()) {
    // The fabric thread's frames and link ends come in through these two.
    fabric_ = std::make_unique<fake_nic_internal::Fabric>(
        config_.fabric_dir,
        [this](uint64_t link, const fake_nic_internal::FrameView& frame) {
          OnFabricFrame(link, frame);
        },
        [this](uint64_t link) { OnLinkClosed(link); });
    // Joined only once the fabric is ready: a NIC that joined and then
    // failed would look to the Sequencer like a process dying while it runs.
    const bool prepared = fabric_->Prepare() == 0;
    if (prepared && config_.fabric_sequenced) {
      fake_nic_internal::Fabric::SequenceHooks hooks;
      hooks.grant = [this](uint32_t kind, uint64_t step) {
        OnSequencerGrant(kind, step);
      };
      hooks.release = [this] { OnSequencerRelease(); };
      hooks.local_pending = [this] { return SequencerLocalPending(); };
      hooks.lost = [this] { OnSequencerLost(); };
      sequenced_ =
          fabric_->JoinSequencer(config_.process_label, std::move(hooks)) == 0;
    }
    if (prepared) {
      fabric_->StartThread();
    } else {
      fprintf(stderr, "fake_nic: cannot join the fabric at %s\n",
              config_.fabric_dir.c_str());
      // (Stop before reset: a handler running meanwhile still uses fabric_.)
      if (fabric_ != nullptr) fabric_->Stop();
      fabric_.reset();
      sequenced_ = false;
    }
  }
  fake_nic_internal::NotifyCreated(this);  // the flight recorder, if linked
}

FakeNic::~FakeNic() {
  fake_nic_internal::NotifyDestroying(this);
  // First the fabric thread (it calls into us), then ours, and only then
  // the fabric itself: our progress thread may still send on it (an RNR
  // retry, a receive-posted notice) until it has stopped. Peers see EOF.
  if (fabric_ != nullptr) fabric_->Stop();
  StopBackgroundProgress();
  fabric_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, channel] : comp_channels_) close(channel->base.fd);
  for (auto& [key, channel] : event_channels_) close(channel->base.fd);
  for (auto& device : devices_) {
    if (device->async_fd >= 0) close(device->async_fd);
  }
}

// ---- helpers (REQUIRE mu_) --------------------------------------------------

void FakeNic::Record(FakeNicEvent event) {
  event.seq = next_seq_++;
  for (NicTap* tap : event_taps_) tap->OnEvent(event);
  WakeWaiters();
}

// splitmix64: a tiny, well-mixed generator, so keys and QP numbers are a
// pure function of the seed and the order of creation.
uint32_t FakeNic::NextRandom32() {
  uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 16);
}

uint32_t FakeNic::NewKey() {
  while (true) {
    const uint32_t key = NextRandom32();
    if (key == 0 || mrs_by_lkey_.count(key) || mrs_by_rkey_.count(key)) {
      continue;
    }
    return key;
  }
}

// QP numbers are 24 bits; 0 and 1 are the special QPs (QP0 for the SMI, QP1
// for the GSI), never handed out for an RC QP.
uint32_t FakeNic::NewQpNum() {
  while (true) {
    const uint32_t num = NextRandom32() & 0xffffff;
    if (num > 1 && !qps_by_num_.count(num)) return num;
  }
}

FakeNic::Device* FakeNic::FindDevice(ibv_context* ctx) {
  for (auto& device : devices_) {
    if (device->context.context() == ctx) return device.get();
  }
  return nullptr;
}

template <typename Map, typename K>
static auto FindIn(Map& map, K* key) -> decltype(map.begin()->second.get()) {
  auto it = map.find(static_cast<const void*>(key));
  return it == map.end() ? nullptr : it->second.get();
}

FakeNic::Pd* FakeNic::FindPd(ibv_pd* pd) { return FindIn(pds_, pd); }
// By the slot in `handle` (see cq_slots_): reads the caller's ibv_cq, which
// a foreign pointer has too, and touches only the CQ itself.
FakeNic::Cq* FakeNic::FindCq(ibv_cq* cq) {
  if (cq == nullptr) return nullptr;
  const size_t slot = cq->handle;
  if (slot >= cq_slots_.size()) return nullptr;
  Cq* found = cq_slots_[slot];
  return found != nullptr && &found->base == cq ? found : nullptr;
}

FakeNic::Qp* FakeNic::FindQp(ibv_qp* qp) {
  if (qp == nullptr) return nullptr;
  const size_t slot = qp->handle;
  if (slot >= qp_slots_.size()) return nullptr;
  Qp* found = qp_slots_[slot];
  return found != nullptr && &found->base == qp ? found : nullptr;
}

FakeNic::Srq* FakeNic::FindSrq(ibv_srq* srq) { return FindIn(srqs_, srq); }

FakeNic::Mr* FakeNic::FindMrByLkey(uint32_t lkey) {
  if (Mr* hit = lkey_cache_.Find(lkey)) return hit;
  auto it = mrs_by_lkey_.find(lkey);
  if (it == mrs_by_lkey_.end()) return nullptr;
  lkey_cache_.Put(lkey, it->second);
  return it->second;
}

FakeNic::Mr* FakeNic::FindMrByRkey(uint32_t rkey) {
  if (Mr* hit = rkey_cache_.Find(rkey)) return hit;
  auto it = mrs_by_rkey_.find(rkey);
  if (it == mrs_by_rkey_.end()) return nullptr;
  rkey_cache_.Put(rkey, it->second);
  return it->second;
}
FakeNic::CmId* FakeNic::FindId(rdma_cm_id* id) { return FindIn(ids_, id); }
FakeNic::EventChannel* FakeNic::FindEventChannel(rdma_event_channel* ch) {
  return FindIn(event_channels_, ch);
}

FakeNic::Qp* FakeNic::FindQpByNum(uint32_t qp_num) {
  auto it = qps_by_num_.find(qp_num);
  return it == qps_by_num_.end() ? nullptr : it->second;
}

// ibv_post_send(3) returns the provider's errno; siw negates it.
int FakeNic::PostErrno(int errno_value) const {
  return config_.personality.negative_errno ? -errno_value : errno_value;
}

// ibv_create_qp(3) / ibv_create_cq(3): the real depth may exceed the request.
int FakeNic::RealDepth(int requested) const {
  if (!config_.personality.round_queues_to_power_of_two_minus_one) {
    return requested;
  }
  int64_t slots = 1;
  while (slots < int64_t{requested} + 1) slots <<= 1;
  return static_cast<int>(slots - 1);
}

void FakeNic::SetQpState(Qp* qp, ibv_qp_state state, const char* why) {
  // CompleteSend's mark is for the move that follows that completion only.
  const bool runs_twice = qp->requester_runs_twice_in_err;
  qp->requester_runs_twice_in_err = false;
  if (qp->base.state == state) return;
  if (state != IBV_QPS_ERR) qp->flush_send_queue_first = false;
  // A head still waiting when its QP leaves for ERR (an RNR wait, parked
  // with rnr_retry 7, or unanswered): rxe's requester had sent the WRs
  // behind it, and rxe_qp_error's requester run starts from there. Found by
  // random program 808 (rnr_retry 7, six WRs in a seven-slot ring, the
  // client moved to ERR: three posted after flushed on rxe).
  if (state == IBV_QPS_ERR && !qp->sq.empty()) {
    const fake_nic_internal::SendWqe& head = qp->sq.front();
    if (head.rnr_started || head.waiting_for_receive ||
        (head.in_flight && !head.stalled())) {
      RequesterSentPastHead(qp);
    }
  }
  qp->base.state = state;
  if (state == IBV_QPS_ERR) qp->RunErrorTasks(runs_twice);
  // The QP may have work now (RTS, or ERR with queued WRs to flush), and so
  // may its peer (a WR parked on an RNR wait ends once we stop answering).
  MarkMaybeReady(qp);
  MarkMaybeReady(qp->peer);
  FakeNicEvent event;
  event.kind = FakeNicEvent::Kind::kQpState;
  event.qp_num = qp->base.qp_num;
  event.opcode = state;
  event.text = why;
  Record(std::move(event));
}

// ---- devices ----------------------------------------------------------------

int FakeNic::GetContextByAddress(const char* addr, bool local,
                                 ibv_context** ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string normalized;
  bool wildcard = false;
  if (!fake_nic_internal::ParseAddress(addr, &normalized, &wildcard)) {
    errno = EINVAL;
    return -1;
  }
  Device* device = nullptr;
  if (local) {
    device = wildcard ? devices_.front().get() : DeviceOwning(normalized);
  } else if (DeviceOwning(normalized) != nullptr) {
    device = RouteDevice();
  }
  if (device == nullptr) {
    errno = ENODEV;
    return -1;
  }
  *ctx = device->context.context();
  return 0;
}

int FakeNic::QueryDevice(ibv_context* ctx, ibv_device_attr* attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  if (device == nullptr || attr == nullptr) return EINVAL;
  FillDeviceAttr(device, attr);
  return 0;
}

void FakeNic::FillDeviceAttr(const Device* device,
                             ibv_device_attr* attr) const {
  const FakeDeviceCaps& caps = *config_.caps;
  memset(attr, 0, sizeof(*attr));
  attr->node_guid = DeviceGuid(device);
  attr->sys_image_guid = attr->node_guid;
  snprintf(attr->fw_ver, sizeof(attr->fw_ver), "fake-%s",
           config_.personality.name.c_str());
  attr->max_mr_size = caps.max_mr_size;
  attr->page_size_cap = caps.page_size_cap;
  attr->max_qp = caps.max_qp;
  attr->max_qp_wr = caps.max_qp_wr;
  attr->max_sge = caps.max_sge;
  attr->max_sge_rd = caps.max_sge;
  attr->max_cq = caps.max_cq;
  attr->max_cqe = caps.max_cqe;
  attr->max_mr = caps.max_mr;
  attr->max_pd = caps.max_pd;
  attr->max_qp_rd_atom = caps.max_qp_rd_atom;
  attr->max_qp_init_rd_atom = caps.max_qp_rd_atom;
  attr->atomic_cap = IBV_ATOMIC_HCA;
  attr->max_srq = caps.max_srq;
  attr->max_srq_wr = caps.max_srq_wr;
  attr->max_srq_sge = caps.max_srq_sge;
  attr->phys_port_cnt = 1;
}

// ---- protection domains and memory regions ----------------------------------

ibv_pd* FakeNic::AllocPd(ibv_context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  if (device == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (device->num_pds >= config_.caps->max_pd) {
    errno = ENOMEM;
    return nullptr;
  }
  auto pd = std::make_unique<Pd>();
  pd->base.context = ctx;
  pd->base.handle = static_cast<uint32_t>(next_handle_++);
  pd->device = device;
  device->num_pds++;
  ibv_pd* result = &pd->base;
  pds_[result] = std::move(pd);
  return result;
}

int FakeNic::DeallocPd(ibv_pd* pd) {
  std::lock_guard<std::mutex> lock(mu_);
  Pd* p = FindPd(pd);
  if (p == nullptr) return EINVAL;
  if (p->num_users > 0) return EBUSY;  // ibv_dealloc_pd(3)
  p->device->num_pds--;
  pds_.erase(pd);
  return 0;
}

ibv_mr* FakeNic::RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  std::lock_guard<std::mutex> lock(mu_);
  Pd* p = FindPd(pd);
  // ibv_reg_mr(3): REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE.
  const bool needs_local_write =
      access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  if (p == nullptr ||
      (needs_local_write && !(access & IBV_ACCESS_LOCAL_WRITE)) ||
      length > config_.caps->max_mr_size) {
    errno = EINVAL;
    return nullptr;
  }
  if (p->device->num_mrs >= config_.caps->max_mr) {
    errno = ENOMEM;
    return nullptr;
  }
  // A real NIC pins the pages (ib_umem_get: pin_user_pages, FOLL_WRITE when
  // the access is writable -- LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC);
  // memory the process cannot read, or cannot write for a writable access,
  // fails with EFAULT (see fake_nic_user_memory.h), NULL among them
  // (recorded: hostile_verbs reg_mr_null_addr).
  const bool writable =
      access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                IBV_ACCESS_REMOTE_ATOMIC);
  if (fake_nic_internal::CheckUserMapping(reinterpret_cast<uintptr_t>(addr),
                                          length, writable) != 0) {
    errno = EFAULT;
    return nullptr;
  }
  auto mr = std::make_unique<Mr>();
  mr->base.context = pd->context;
  mr->base.pd = pd;
  mr->base.addr = addr;
  mr->base.length = length;
  mr->base.handle = static_cast<uint32_t>(next_handle_++);
  // Keys are drawn from the seeded generator: deterministic, distinct from
  // each other and from every live key, and not a guessable sequence, so a
  // test that uses a stale or made-up key is caught.
  mr->base.lkey = NewKey();
  const bool remote =
      access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                IBV_ACCESS_REMOTE_ATOMIC);
  if (!remote && config_.personality.rkey_zero_without_remote_access) {
    mr->base.rkey = 0;
  } else if (config_.personality.rkey_equals_lkey) {
    mr->base.rkey = mr->base.lkey;
  } else {
    do {
      mr->base.rkey = NewKey();
    } while (mr->base.rkey == mr->base.lkey);
  }
  mr->pd = p;
  mr->access = access;
  mr->ordinal = next_mr_ordinal_++;
  p->num_users++;
  p->device->num_mrs++;
  mrs_by_lkey_[mr->base.lkey] = mr.get();
  if (mr->base.rkey != 0) mrs_by_rkey_[mr->base.rkey] = mr.get();
  ibv_mr* result = &mr->base;
  mrs_[result] = std::move(mr);
  return result;
}

int FakeNic::DeregMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mrs_.find(mr);
  if (it == mrs_.end()) return EINVAL;
  Mr* m = it->second.get();
  mrs_by_lkey_.erase(m->base.lkey);
  if (m->base.rkey != 0) mrs_by_rkey_.erase(m->base.rkey);
  lkey_cache_.Clear();
  rkey_cache_.Clear();
  m->pd->num_users--;
  m->pd->device->num_mrs--;
  mrs_.erase(it);
  return 0;
}

// ---- completion queues ------------------------------------------------------

ibv_comp_channel* FakeNic::CreateCompChannel(ibv_context* ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  if (device == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  // An eventfd in semaphore mode: POLLIN exactly while an event is pending,
  // like the uverbs completion-event fd (ibv_create_comp_channel(3)).
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  auto channel = std::make_unique<CompChannel>();
  channel->base.context = ctx;
  channel->base.fd = fd;
  channel->device = device;
  ibv_comp_channel* result = &channel->base;
  comp_channels_[result] = std::move(channel);
  return result;
}

int FakeNic::DestroyCompChannel(ibv_comp_channel* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = comp_channels_.find(channel);
  if (it == comp_channels_.end()) return EINVAL;
  if (it->second->num_cqs > 0) return EBUSY;  // ibv_destroy_comp_channel(3)
  close(it->second->base.fd);
  comp_channels_.erase(it);
  return 0;
}

ibv_cq* FakeNic::CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                          ibv_comp_channel* channel, int comp_vector) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  CompChannel* ch = channel ? FindIn(comp_channels_, channel) : nullptr;
  // ibv_create_cq(3): cqe in [1, max_cqe], comp_vector < num_comp_vectors.
  if (device == nullptr || (channel != nullptr && ch == nullptr) || cqe < 1 ||
      cqe > config_.caps->max_cqe || comp_vector < 0 ||
      comp_vector >= device->context.context()->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  if (device->num_cqs >= config_.caps->max_cq) {
    errno = ENOMEM;
    return nullptr;
  }
  std::unique_ptr<Cq> cq;
  if (retired_cqs_.size() <= kRetiredKept) {
    cq.reset(new (config_.verbs_extension) Cq());
  } else {  // see cq_slots_
    cq = std::move(retired_cqs_.front());
    retired_cqs_.pop_front();
  }
  if (free_cq_slots_.empty()) {
    cq->slot = cq_slots_.size();
    cq_slots_.push_back(cq.get());
  } else {
    cq->slot = free_cq_slots_.back();
    free_cq_slots_.pop_back();
    cq_slots_[cq->slot] = cq.get();
  }
  // A retired CQ's too, and the extension room past it.
  memset(&cq->base, 0,
         sizeof(cq->base) + (config_.verbs_extension ? fake_nic_internal::kCqExtension : 0));
  cq->device = device;
  cq->channel = ch;
  cq->depth = RealDepth(cqe);
  cq->base.context = ctx;
  cq->base.channel = channel;
  cq->base.cq_context = cq_context;
  next_handle_++;  // handed out as before, so later handles stay the same
  cq->base.handle = static_cast<uint32_t>(cq->slot);
  cq->base.cqe = cq->depth;
  device->num_cqs++;
  if (ch != nullptr) ch->num_cqs++;
  ibv_cq* result = &cq->base;
  if (cqs_.size() <= cq->slot) cqs_.resize(cq->slot + 1);
  cqs_[cq->slot] = std::move(cq);
  return result;
}

int FakeNic::DestroyCq(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(mu_);
  BumpPollEpoch();  // a remembered empty poll of it must look again
  Cq* c = FindCq(cq);
  if (c == nullptr) return EINVAL;
  if (c->num_qps > 0) return EBUSY;  // ibv_destroy_cq(3)
  // ibv_destroy_cq(3) waits for every event got with ibv_get_cq_event to be
  // acked; waiting forever helps nobody in a test, so refuse instead.
  if (c->events_acked < c->events_delivered) {
    fprintf(stderr, "fake_nic: DestroyCq with %u unacked CQ events: EBUSY\n",
            c->events_delivered - c->events_acked);
    return EBUSY;
  }
  // The same for its asynchronous events.
  if (c->async_unacked > 0) {
    return RefuseUnackedAsync("DestroyCq", c->async_unacked);
  }
  DropAsyncEventsLocked(c->device, &c->base);
  if (c->channel != nullptr) {
    auto& pending = c->channel->pending;
    for (auto it = pending.begin(); it != pending.end();) {
      if (*it == c) {
        it = pending.erase(it);
        ConsumeFd(c->channel->base.fd);
      } else {
        ++it;
      }
    }
    c->channel->num_cqs--;
  }
  c->device->num_cqs--;
  cq_slots_[c->slot] = nullptr;
  free_cq_slots_.push_back(c->slot);
  std::unique_ptr<Cq>& owned = cqs_[c->slot];
  *owned = Cq();  // its ring released now (see cq_slots_)
  retired_cqs_.push_back(std::move(owned));
  return 0;
}

// ibv_req_notify_cq(3): arms the CQ for exactly one event, raised when the
// next CQE is added (CQEs already queued do not raise one). With
// solicited_only, only solicited CQEs raise it; error CQEs count as
// solicited (rxe_resp.c posts completions that have no packet, such as
// flushes, as solicited).
int FakeNic::ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  std::lock_guard<std::mutex> lock(mu_);
  Cq* c = FindCq(cq);
  if (c == nullptr) return EINVAL;
  c->armed = true;
  c->armed_solicited_only = solicited_only != 0;
  return 0;
}

int FakeNic::GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                        void** cq_context) {
  std::unique_lock<std::mutex> lock(mu_);
  CompChannel* ch = FindIn(comp_channels_, channel);
  if (ch == nullptr || cq == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  if (ch->pending.empty() && FdIsNonBlocking(ch->base.fd)) {
    // Sequenced: an empty non-blocking get is a poll that found nothing.
    const std::function<bool()> has = [ch] { return !ch->pending.empty(); };
    if (!sequenced_ ||
        SequencedWait(lock, &has, "ibv_get_cq_event (O_NONBLOCK)", true) ||
        ch->pending.empty()) {
      errno = EAGAIN;  // ibv_get_cq_event(3) on an O_NONBLOCK channel
      return -1;
    }
  }
  if (background_running_ && !sequenced_ &&
      config_.background_block_timeout_ms <= 0) {
    // A program's own NIC: wait as libibverbs does, in read(2), so that a
    // signal interrupts the wait as it interrupts read (EINTR from a handler
    // without SA_RESTART: qperf stops its tests with SIGALRM this way).
    if (WaitForCqEvent(lock, channel, &ch) != 0) return -1;
  } else if (BlockUntil(
                 lock, [ch] { return !ch->pending.empty(); },
                 "GetCqEvent") != 0) {
    return -1;
  }
  Cq* c = ch->pending.front();
  ch->pending.pop_front();
  ConsumeFd(ch->base.fd);
  c->events_delivered++;
  *cq = &c->base;
  *cq_context = c->base.cq_context;
  return 0;
}

namespace {
// read(2) of an eventfd is restarted after a handler installed with
// SA_RESTART and fails with EINTR after one without (signal(7)); poll(2)
// fails with EINTR after either. Which signal came is not known here, so a
// wait in poll ends as the read would have when some caught signal's
// handler lacks SA_RESTART (qperf's SIGALRM), and goes on otherwise. The
// fault signals are not counted: raised by a thread's own instruction they
// never interrupt its wait (the fake's own SIGSEGV/SIGBUS handlers,
// fake_nic_user_memory.cc, have no SA_RESTART). A program that catches one
// signal with SA_RESTART and another without sees EINTR for both here where
// libibverbs would restart after the first (docs/fidelity.md).
bool SomeHandlerInterruptsRead() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
        sig == SIGTRAP || sig == SIGSYS) {
      continue;
    }
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) != 0) continue;
    if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
    if ((sa.sa_flags & SA_RESTART) == 0) return true;
  }
  return false;
}

// Waits in poll(2) on `fds`: own_fd first, then the rings' sockets. Returns
// as read(2) of own_fd does once own_fd is readable (having read it into
// *count); 0 with *doorbell set when a ring's socket became readable first
// (nothing read); -1 with errno as read(2) would fail.
ssize_t WaitOnFds(std::vector<pollfd>* fds, int own_fd, uint64_t* count,
                  bool* doorbell) {
  for (;;) {
    if (poll(fds->data(), fds->size(), -1) < 0) {
      if (errno == EINTR && !SomeHandlerInterruptsRead()) continue;
      return -1;
    }
    if ((*fds)[0].revents != 0) return read(own_fd, count, sizeof(*count));
    *doorbell = true;
    return 0;
  }
}
}  // namespace

int FakeNic::WaitForCqEvent(std::unique_lock<std::mutex>& lock,
                            ibv_comp_channel* channel, CompChannel** ch) {
  // Each thread waits on an eventfd of its own, which the channel signals
  // with its own fd: only this thread reads it, so the channel's count
  // (what the program's poll(2) sees, and ConsumeFd takes) stays exact.
  thread_local const int own_fd = eventfd(0, EFD_CLOEXEC);
  if (own_fd < 0) {
    errno = ENOMEM;
    return -1;
  }
  // Across processes the waiter also watches the rings' doorbells
  // (Fabric::RingSockets) and drains a ring itself when one rings, until a
  // doorbell brought it nothing: then the fabric thread hands frames over
  // as before (it reads the doorbells; watching again would spin on one
  // it has not read yet).
  bool watch_rings = fabric_ != nullptr;
  std::vector<pollfd> watched;
  while ((*ch)->pending.empty()) {
    if (StepLocked()) continue;  // the ready work first, as BlockUntil does
    if (fabric_ != nullptr) fabric_->BlockingWaitBegins();
    (*ch)->waiter_fds.push_back(own_fd);
    watched.assign(1, pollfd{own_fd, POLLIN, 0});
    if (watch_rings) fabric_->RingSockets(&watched);
    lock.unlock();
    uint64_t count = 0;
    ssize_t n = 0;
    bool doorbell = false;
    if (watched.size() == 1) {
      n = read(own_fd, &count, sizeof(count));
    } else {
      n = WaitOnFds(&watched, own_fd, &count, &doorbell);
      // The frames the doorbell announced, handled here (lock order: a
      // ring's drain lock before mu_); the completion they make signals
      // own_fd, still registered, and is taken below.
      if (doorbell) fabric_->DrainInline(/*polling=*/false);
    }
    const int saved = errno;
    lock.lock();
    *ch = FindIn(comp_channels_, channel);
    if (*ch == nullptr) {  // destroyed under the waiter: its fd is gone
      errno = EBADF;
      return -1;
    }
    auto& fds = (*ch)->waiter_fds;
    fds.erase(std::find(fds.begin(), fds.end(), own_fd));
    if (doorbell) {
      // A signal that came with or after the drain is for an event this
      // wait takes (pending is checked next); a stale one would end the
      // next wait at once.
      pollfd p = {own_fd, POLLIN, 0};
      if (poll(&p, 1, 0) == 1) (void)!read(own_fd, &count, sizeof(count));
      if ((*ch)->pending.empty()) watch_rings = false;
      continue;
    }
    if (n != static_cast<ssize_t>(sizeof(count))) {
      // Drop a signal that came after the interruption, so the next wait
      // does not return at once for an event already taken.
      if ((*ch)->pending.empty()) {
        uint64_t stale = 0;
        pollfd p = {own_fd, POLLIN, 0};
        if (poll(&p, 1, 0) == 1) (void)!read(own_fd, &stale, sizeof(stale));
      }
      errno = saved;
      return -1;
    }
  }
  return 0;
}

void FakeNic::AckCqEvents(ibv_cq* cq, unsigned int nevents) {
  std::lock_guard<std::mutex> lock(mu_);
  Cq* c = FindCq(cq);
  if (c == nullptr) return;
  if (c->events_acked + nevents > c->events_delivered) {
    fprintf(stderr, "fake_nic: AckCqEvents acks %u events, only %u unacked\n",
            nevents, c->events_delivered - c->events_acked);
    c->events_acked = c->events_delivered;
    return;
  }
  c->events_acked += nevents;
}

// ibv_poll_cq(3): a negative value on error. A CQ overrun loses the CQE and
// raises the asynchronous IBV_EVENT_CQ_ERR on real NICs (rxe_cq.c
// rxe_cq_post: queue full -> IB_EVENT_CQ_ERR, -EBUSY), which a program
// polling the CQ would never notice; the fake keeps the CQ in error instead,
// so every later poll returns -EOVERFLOW.
int FakeNic::PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  // Cross-process: the application's own polling drives the NIC. The
  // frames waiting in the shared-memory rings are handled here, before mu_
  // (lock order: drain lock -> mu_), so a busy-polling program sees its
  // peer's request with no thread hand-off (fake_nic_fabric.h DrainInline).
  if (fabric_ != nullptr) fabric_->DrainInline();
  // Nothing changed since this thread last found this CQ empty (see
  // poll_epoch_): empty again, without the mutex.
  struct EmptyPoll {
    uint64_t nic = 0;
    const ibv_cq* cq = nullptr;
    uint64_t epoch = 0;
  };
  static thread_local EmptyPoll last_empty;
  static thread_local uint32_t uncounted = 0;
  if (num_entries > 0 && last_empty.cq == cq && last_empty.nic == serial_ &&
      lockless_empty_polls_.load(std::memory_order_relaxed) &&
      last_empty.epoch == poll_epoch_.load(std::memory_order_acquire)) {
    if (++uncounted >= kEmptyPollsPerCount) {
      uncounted = 0;
      empty_polls_.fetch_add(1, std::memory_order_relaxed);
    }
    return 0;
  }
  std::unique_lock<std::mutex> lock = LockHot();
  Cq* c = FindCq(cq);
  if (c == nullptr) return -EINVAL;
  // rdma-core's providers poll up to num_entries in a loop (rxe.c
  // rxe_poll_cq, mlx5 mlx5_poll_cq): none for a negative count (recorded,
  // hostile_verbs poll_cq_negative_entries).
  if (num_entries < 0) return 0;
  if (c->overrun) return -EOVERFLOW;
  // Sequenced: a poll that would find nothing waits for this process's
  // next granted step (or the Sequencer's release), so a busy-poll loop
  // cannot race the other processes; then it polls once.
  if (sequenced_ && num_entries > 0 && c->entries.empty()) {
    SequencedWait(lock, nullptr, "ibv_poll_cq (empty)", true);
    c = FindCq(cq);
    if (c == nullptr) return -EINVAL;
    if (c->overrun) return -EOVERFLOW;
  }
  // Background progress: a poll that finds its CQ empty runs the NIC's
  // ready work itself before it answers, as rxe runs its requester in the
  // caller's ibv_post_send (rxe_verbs.c rxe_post_send) and a real NIC needs
  // no host CPU at all. Otherwise a program spinning on its CQ waits for the
  // progress thread to get a core: two spinning threads and that thread on
  // two cores took milliseconds a round trip (issue 28,
  // //tools/bench:program_bench). Which thread runs a step does not change
  // which step runs: StepLocked picks it from the same scheduler state under
  // the same mutex. Manual stepping and the sequenced mode are untouched:
  // without background progress no step runs here.
  if (background_running_ && num_entries > 0) {
    if (c->entries.empty()) {
      empty_polls_.fetch_add(1, std::memory_order_relaxed);
    }
    for (int i = 0;
         i < kStepsPerEmptyPoll && c->entries.empty() && StepLocked(); ++i) {
    }
    // Empty, and no step left to run: remembered for the next poll. The
    // epoch read under mu_ is the state this poll saw.
    if (c->entries.empty() && !HasReadyWork()) {
      last_empty = {serial_, cq, poll_epoch_.load(std::memory_order_relaxed)};
    }
  }
  int n = 0;
  while (n < num_entries && !c->entries.empty()) {
    wc[n++] = c->entries.front();
    c->entries.pop_front();
  }
  return n;
}

bool FakeNic::CqHasNoRoom(const Cq* cq) const {
  return cq->overrun || static_cast<int>(cq->entries.size()) >= cq->depth;
}

ibv_wc* FakeNic::CqeSlot(Cq* cq) {
  if (CqHasNoRoom(cq)) return nullptr;
  return &cq->entries.emplace_back();
}

// See Personality::error_cqe_opcode_zero (rxe fills these on success only).
static void ApplyErrorCqeFields(const Personality& personality, ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS && personality.error_cqe_opcode_zero) {
    wc.opcode = IBV_WC_SEND;
    wc.byte_len = 0;
    wc.wc_flags = 0;
    wc.imm_data = 0;
  }
}

void FakeNic::CommitCqe(Cq* cq, ibv_wc& wc, bool solicited) {
  BumpPollEpoch();
  ApplyErrorCqeFields(config_.personality, wc);
  RecordLazily([&](FakeNicEvent* event) {
    event->qp_num = wc.qp_num;
    event->wr_id = wc.wr_id;
    event->opcode = wc.opcode;
    event->status = wc.status;
    event->byte_len = wc.byte_len;
    event->kind = FakeNicEvent::Kind::kCompletion;
  });
  const bool triggers =
      !cq->armed_solicited_only || solicited || wc.status != IBV_WC_SUCCESS;
  if (cq->armed && cq->channel != nullptr && triggers) {
    cq->armed = false;
    cq->channel->pending.push_back(cq);
    SignalFd(cq->channel->base.fd);
    for (int fd : cq->channel->waiter_fds) SignalFd(fd);
    WakeWaiters();
  }
}

void FakeNic::AddCqe(Cq* cq, const ibv_wc& built, bool solicited) {
  if (!CqHasNoRoom(cq)) {
    ibv_wc& wc = cq->entries.emplace_back();
    wc = built;
    CommitCqe(cq, wc, solicited);
    return;
  }
  ibv_wc wc = built;
  ApplyErrorCqeFields(config_.personality, wc);
  // rxe (rxe_cq.c rxe_cq_post) loses this one completion and goes on; the
  // spec's overrun is for good. Either is said once per CQ.
  const bool goes_on =
      config_.personality.cq_full_loses_the_completion_only && !cq->overrun;
  if (!(goes_on ? cq->lost_a_completion : cq->overrun)) {
    fprintf(stderr,
            "fake_nic: CQ %p %s (depth %d): completion of wr_id %" PRIu64
            " lost%s\n",
            static_cast<void*>(&cq->base), goes_on ? "full" : "overrun",
            cq->depth, wc.wr_id,
            goes_on ? " (IBV_EVENT_CQ_ERR); the CQ goes on, as rxe's does"
                    : "; PollCq now fails (IBV_EVENT_CQ_ERR)");
  }
  if (goes_on) {
    cq->lost_a_completion = true;
    RaiseCqErrLocked(cq);
  } else {
    OverrunLocked(cq);
  }
  FakeNicEvent event;
  event.qp_num = wc.qp_num;
  event.wr_id = wc.wr_id;
  event.opcode = built.opcode;  // which queue's, even when zeroed in `wc`
  event.status = wc.status;
  event.byte_len = wc.byte_len;
  event.kind = FakeNicEvent::Kind::kCqOverrun;
  event.text = "cq overrun, completion lost";
  Record(std::move(event));
}

// ---- progress ---------------------------------------------------------------

bool FakeNic::Step() {
  std::lock_guard<std::mutex> lock(mu_);
  return StepLocked();
}

size_t FakeNic::RunUntilIdle(size_t max_steps) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t steps = 0;
  while (steps < max_steps && StepLocked()) ++steps;
  return steps;
}

std::string FakeNic::DebugString() {
  std::lock_guard<std::mutex> lock(mu_);
  return DebugStringLocked();
}

std::string FakeNic::DebugStringLocked() {
  using fake_nic_internal::QpStateName;
  std::string out = "fake_nic state (" + config_.personality.name + "):\n";
  char line[256];
  for (Qp* qp : qp_order_) {
    snprintf(line, sizeof(line),
             "  qp 0x%06x %s peer 0x%06x sq %zu/%u rq %zu/%u%s\n",
             qp->base.qp_num, QpStateName(qp->base.state),
             qp->peer ? qp->peer->base.qp_num : 0, qp->sq.size(),
             qp->cap.max_send_wr, qp->rq.size(), qp->cap.max_recv_wr,
             !qp->sq.empty() && qp->sq.front().waiting_for_receive
                 ? " (head waits for a receive: RNR, rnr_retry 7)"
                 : "");
    out += line;
  }
  for (auto& cq : cqs_) {
    if (cq == nullptr) continue;
    snprintf(line, sizeof(line), "  cq %p %zu/%d entries%s%s\n",
             static_cast<const void*>(&cq->base), cq->entries.size(), cq->depth,
             cq->armed ? " armed" : "", cq->overrun ? " OVERRUN" : "");
    out += line;
  }
  for (const CmWork& work : cm_work_) out += "  cm work: " + work.what + "\n";
  for (auto& [key, channel] : event_channels_) {
    snprintf(line, sizeof(line), "  cm channel fd %d: %zu queued events\n",
             channel->base.fd, channel->queue.size());
    out += line;
  }
  return out;
}

FakeNic::Holdings FakeNic::CurrentHoldings() {
  std::lock_guard<std::mutex> lock(mu_);
  Holdings h;
  h.pds = pds_.size();
  h.mrs = mrs_.size();
  h.comp_channels = comp_channels_.size();
  h.cqs = cq_slots_.size() - free_cq_slots_.size();
  h.qps = qp_order_.size();
  h.srqs = srqs_.size();
  h.event_channels = event_channels_.size();
  h.cm_ids = ids_.size();
  h.cm_events = outstanding_events_.size();
  h.cm_work = cm_work_.size();
  return h;
}

bool FakeNic::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return !HasReadyWork();
}

bool FakeNic::Quiescent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (HasReadyWork()) return false;
  for (Qp* qp : qp_order_) {
    if (!qp->sq.empty() && qp->sq.front().in_flight &&
        !qp->sq.front().stalled()) {
      return false;
    }
  }
  return true;
}

void FakeNic::StartBackgroundProgress() {
  std::lock_guard<std::mutex> lock(mu_);
  if (background_running_) return;
  if (sequenced_) return;  // the Sequencer grants every step
  background_running_ = true;
  lockless_empty_polls_.store(true, std::memory_order_relaxed);
  BumpPollEpoch();
  stop_background_ = false;
  background_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t polls_seen = empty_polls_;
    while (!stop_background_) {
      // A thread that polled its empty CQ since we last looked drives the
      // NIC itself (PollCq): stay off the CPU and the mutex for a moment
      // rather than compete with it, and take over only once nobody polls
      // (a blocked waiter steps before it sleeps, so it needs no one).
      if (empty_polls_ != polls_seen) {
        polls_seen = empty_polls_;
        // Timers stay this thread's: a poller runs ready work, and a due
        // transport or CM timer is not ready work until it fires. (Skipped
        // here, a program spinning on its CQ for a RETRY_EXC_ERR never saw
        // it: 20 s and counting on the rxe personality, where 3 ms of
        // timeouts were due.)
        if (!transport_timers_.empty() || !cm_timers_.empty()) {
          FireTransportTimersLocked();
          FireCmTimersLocked();
        }
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(kPollerGraceUs));
        lock.lock();
        continue;
      }
      if (StepLocked()) {
        // Let API callers in between steps.
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        continue;
      }
      if (!transport_timers_.empty() || !cm_timers_.empty()) {
        FireTransportTimersLocked();
        FireCmTimersLocked();
        if (HasReadyWork()) continue;
      }
      work_waiters_++;
      std::chrono::steady_clock::time_point first;
      if (!NextTimerLocked(&first)) {
        background_wakes_at_ = std::chrono::steady_clock::time_point::max();
        work_cv_.wait(lock);
      } else {
        background_wakes_at_ = first;
        work_cv_.wait_until(lock, first);
      }
      work_waiters_--;
    }
  });
}

void FakeNic::StopBackgroundProgress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!background_running_) return;
    stop_background_ = true;
    BumpPollEpoch();
    lockless_empty_polls_.store(false, std::memory_order_relaxed);
    work_cv_.notify_all();
  }
  background_.join();
  std::lock_guard<std::mutex> lock(mu_);
  background_running_ = false;
  event_cv_.notify_all();  // blocked getters fall back to manual progress
}

std::cv_status FakeNic::WaitForEventUntil(
    std::unique_lock<std::mutex>& lock,
    std::chrono::steady_clock::time_point deadline) {
  event_waiters_++;
  const std::cv_status status = event_cv_.wait_until(lock, deadline);
  event_waiters_--;
  return status;
}

// A real NIC would block forever; in a single-threaded test that is a hang
// with no message. Without background progress we run the NIC ourselves
// until the event shows up, then wait idle_block_timeout_ms for another
// thread, then fail with ETIMEDOUT and say so.
int FakeNic::BlockUntil(std::unique_lock<std::mutex>& lock,
                        const std::function<bool()>& ready, const char* what) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(config_.idle_block_timeout_ms);
  const int bg_timeout_ms = config_.background_block_timeout_ms;
  const auto bg_deadline = std::chrono::steady_clock::now() +
                           std::chrono::milliseconds(bg_timeout_ms);
  if (sequenced_) {
    while (!ready()) {
      if (SequencedWait(lock, &ready, what, false) < 0) {
        fprintf(stderr,
                "fake_nic: %s cannot wait: the fabric's sequencer is gone; "
                "failing with EIO\n",
                what);
        errno = EIO;
        return -1;
      }
    }
    return 0;
  }
  // A thread that blocks has stopped polling: the fabric thread must not
  // count on it to drain the rings (fake_nic_fabric.h BlockingWaitBegins).
  if (fabric_ != nullptr && background_running_ && !ready()) {
    fabric_->BlockingWaitBegins();
  }
  while (!ready()) {
    if (background_running_) {
      // The waiter does the ready work itself first (see PollCq): the
      // progress thread is for work nobody waits on.
      if (StepLocked()) continue;
      if (bg_timeout_ms <= 0) {
        event_waiters_++;
        event_cv_.wait(lock);
        event_waiters_--;
      } else if (WaitForEventUntil(lock, bg_deadline) ==
                     std::cv_status::timeout &&
                 !ready()) {
        fprintf(stderr,
                "fake_nic: %s got no event within "
                "background_block_timeout_ms (%d); failing with ETIMEDOUT\n"
                "%s",
                what, bg_timeout_ms, DebugStringLocked().c_str());
        errno = ETIMEDOUT;
        return -1;
      }
      continue;
    }
    if (StepLocked()) continue;
    if (std::chrono::steady_clock::now() >= deadline) {
      fprintf(stderr,
              "fake_nic: %s would block forever: the NIC is idle, no event "
              "is pending and background progress is off; failing with "
              "ETIMEDOUT\n",
              what);
      errno = ETIMEDOUT;
      return -1;
    }
    WaitForEventUntil(lock, deadline);
  }
  return 0;
}

// ---- observation and faults -------------------------------------------------

void FakeNic::SetExecuteHook(
    std::function<ExecuteVerdict(const ExecuteInfo&)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  execute_hook_ = std::move(hook);
}

void FakeNic::RecordFault(uint32_t qp_num, uint64_t wr_id, int status,
                          std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  FakeNicEvent event;
  event.kind = FakeNicEvent::Kind::kFault;
  event.qp_num = qp_num;
  event.wr_id = wr_id;
  event.status = status;
  event.text = std::move(text);
  Record(std::move(event));
}

bool FakeNic::OverrunCq(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(mu_);
  Cq* c = FindCq(cq);
  if (c == nullptr) return false;
  OverrunLocked(c);
  FakeNicEvent event;
  event.kind = FakeNicEvent::Kind::kCqOverrun;
  event.text = "fault: cq overrun";
  Record(std::move(event));
  return true;
}

bool FakeNic::SetDeviceUp(const std::string& device_name, bool up) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& device : devices_) {
    if (device->config.name == device_name) {
      // rxe_net.c: the netdev going down / up raises IB_EVENT_PORT_ERR /
      // IB_EVENT_PORT_ACTIVE on port 1 (rxe_port_down / rxe_port_up).
      if (device->up != up) {
        ibv_async_event event;
        memset(&event, 0, sizeof(event));
        event.element.port_num = 1;
        event.event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
        RaiseAsyncEventLocked(device.get(), event);
      }
      device->up = up;
      return true;
    }
  }
  return false;
}

}  // namespace rpma_harness

namespace rpma_harness {

// ---- librpma 1.3: SRQs, extended device query, MR advice (issue 10) ---------

// ibv_query_device_ex(3): orig_attr as ibv_query_device(3) reports it. No
// on-demand paging: odp_caps.general_caps lacks IBV_ODP_SUPPORT, as on rxe
// in Linux 6.1 (rxe_verbs.c fills no odp_caps; ODP for rxe came later), so
// rpma_utils_ibv_context_is_odp_capable(3) reports 0 on both.
int FakeNic::QueryDeviceEx(ibv_context* ctx, ibv_device_attr_ex* attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Device* device = FindDevice(ctx);
  if (device == nullptr || attr == nullptr) return EINVAL;
  memset(attr, 0, sizeof(*attr));
  FillDeviceAttr(device, &attr->orig_attr);
  return 0;
}

// ibv_advise_mr(3) exists only for ODP memory; rdma-core's inline
// ibv_advise_mr returns EOPNOTSUPP when the provider has no advise_mr op,
// which is rxe's case and ours.
int FakeNic::AdviseMr(ibv_pd* pd, ibv_advise_mr_advice, uint32_t, ibv_sge*,
                      uint32_t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FindPd(pd) == nullptr) return EINVAL;
  return EOPNOTSUPP;
}

// ibv_create_srq(3). The limits are rxe's rules (rxe_srq.c
// rxe_srq_chk_init): max_wr of 0 or above the device's max_srq_wr, or
// max_sge above max_srq_sge, is EINVAL. The queue is rounded as the
// personality rounds queues, but attr.max_wr keeps the depth asked for
// and srq_limit arms the limit event, as Debian 12's rxe answered
// (testdata/async_events.rxe.txt: max_wr 16 written back, ibv_query_srq
// then says 31 and the limit asked for; the man page calls srq_limit
// "irrelevant for ibv_create_srq", rxe_srq_from_init takes it).
ibv_srq* FakeNic::CreateSrq(ibv_pd* pd, ibv_srq_init_attr* init_attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Pd* p = FindPd(pd);
  const FakeDeviceCaps& caps = *config_.caps;
  if (p == nullptr || init_attr == nullptr || init_attr->attr.max_wr == 0 ||
      init_attr->attr.max_wr > static_cast<uint32_t>(caps.max_srq_wr) ||
      init_attr->attr.max_sge > static_cast<uint32_t>(caps.max_srq_sge)) {
    errno = EINVAL;
    return nullptr;
  }
  if (p->device->num_srqs >= caps.max_srq) {
    errno = ENOMEM;
    return nullptr;
  }
  auto srq = std::make_unique<Srq>();
  memset(&srq->base, 0, sizeof(srq->base));
  srq->base.context = pd->context;
  srq->base.srq_context = init_attr->srq_context;
  srq->base.pd = pd;
  srq->base.handle = static_cast<uint32_t>(next_handle_++);
  srq->device = p->device;
  srq->pd = p;
  srq->max_wr = static_cast<uint32_t>(
      RealDepth(static_cast<int>(init_attr->attr.max_wr)));
  // At least one SGE per receive (rxe: RXE_MIN_SRQ_SGE).
  srq->max_sge = std::max<uint32_t>(1, init_attr->attr.max_sge);
  srq->limit = init_attr->attr.srq_limit;
  init_attr->attr.max_sge = srq->max_sge;
  ibv_srq* handle = &srq->base;
  p->num_users++;
  p->device->num_srqs++;
  srqs_[handle] = std::move(srq);
  return handle;
}

// ibv_destroy_srq(3); the kernel (uverbs ib_destroy_srq_user) refuses while
// a QP uses the SRQ: EBUSY. Receives still queued vanish without
// completions.
int FakeNic::DestroySrq(ibv_srq* srq) {
  std::lock_guard<std::mutex> lock(mu_);
  Srq* s = FindSrq(srq);
  if (s == nullptr) return EINVAL;
  if (!s->qps.empty()) return EBUSY;
  if (s->async_unacked > 0) {
    return RefuseUnackedAsync("DestroySrq", s->async_unacked);
  }
  DropAsyncEventsLocked(s->device, &s->base);
  s->pd->num_users--;
  s->device->num_srqs--;
  srqs_.erase(srq);
  return 0;
}

}  // namespace rpma_harness

namespace rpma_harness {

// ---- asynchronous events and SRQ attributes (issue 22) ----------------------

void FakeNic::RaiseAsyncEventLocked(Device* device,
                                    const ibv_async_event& event) {
  if (device == nullptr || device->async_fd < 0) return;
  device->async_events.push_back(event);
  SignalFd(device->async_fd);
}

void FakeNic::OverrunLocked(Cq* cq) {
  cq->overrun = true;
  RaiseCqErrLocked(cq);
}

void FakeNic::RaiseCqErrLocked(Cq* cq) {
  BumpPollEpoch();
  ibv_async_event event;
  memset(&event, 0, sizeof(event));
  event.element.cq = &cq->base;
  event.event_type = IBV_EVENT_CQ_ERR;
  RaiseAsyncEventLocked(cq->device, event);
}

fake_nic_internal::RecvWqe FakeNic::TakeReceive(Qp* responder) {
  auto& rq = responder->ReceiveQueue();
  fake_nic_internal::RecvWqe recv = std::move(rq.front());
  rq.pop_front();
  // rxe_resp.c get_srq_wqe: once the receive is taken, an armed limit
  // above the receives left raises the event and disarms (limit = 0);
  // ibv_modify_srq(3) arms it again.
  Srq* srq = responder->srq;
  if (srq != nullptr && srq->limit != 0 && srq->rq.size() < srq->limit) {
    srq->limit = 0;
    ibv_async_event event;
    memset(&event, 0, sizeof(event));
    event.element.srq = &srq->base;
    event.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
    RaiseAsyncEventLocked(srq->device, event);
  }
  return recv;
}

void FakeNic::HoldCutReceive(Qp* responder) {
  if (responder->srq == nullptr || responder->srq->rq.empty()) return;
  responder->rq.push_back(TakeReceive(responder));
}

// ibv_get_async_event(3) blocks in a read of the context's async fd and
// honours O_NONBLOCK on it (rdma-core: read(2) of context->async_fd). Here
// the wait is poll(2) on the eventfd outside the NIC's mutex, then the
// event is taken under it (several threads may wait: the one that finds
// the queue empty waits again), with read(2)'s signal rules as
// WaitForCqEvent has them.
int FakeNic::GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) {
  for (;;) {
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Device* device = FindDevice(ctx);
      if (device == nullptr || event == nullptr) {
        errno = EINVAL;
        return -1;
      }
      if (!device->async_events.empty()) {
        *event = device->async_events.front();
        device->async_events.pop_front();
        ConsumeFd(device->async_fd);
        if (unsigned int* unacked = UnackedAsyncLocked(*event)) ++*unacked;
        return 0;
      }
      fd = device->async_fd;
    }
    if (FdIsNonBlocking(fd)) {
      errno = EAGAIN;
      return -1;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0) {
      if (errno == EINTR && !SomeHandlerInterruptsRead()) continue;
      return -1;
    }
  }
}

// ibv_ack_async_event(3). An event of an object that is gone, or one
// acked twice, is not counted (libibverbs would corrupt its count).
void FakeNic::AckAsyncEvent(ibv_async_event* event) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  unsigned int* unacked = UnackedAsyncLocked(*event);
  if (unacked != nullptr && *unacked > 0) --*unacked;
}

// The CQ or SRQ an event names (the element its type selects), or nullptr
// for a port or device event.
static const void* AffiliatedObject(const ibv_async_event& event) {
  switch (event.event_type) {
    case IBV_EVENT_CQ_ERR:
      return event.element.cq;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
    case IBV_EVENT_SRQ_ERR:
      return event.element.srq;
    default:
      return nullptr;
  }
}

unsigned int* FakeNic::UnackedAsyncLocked(const ibv_async_event& event) {
  const void* object = AffiliatedObject(event);
  if (object == nullptr) return nullptr;
  if (event.event_type == IBV_EVENT_CQ_ERR) {
    Cq* c = FindCq(event.element.cq);
    return c != nullptr ? &c->async_unacked : nullptr;
  }
  Srq* s = FindSrq(event.element.srq);
  return s != nullptr ? &s->async_unacked : nullptr;
}

void FakeNic::DropAsyncEventsLocked(Device* device, const void* object) {
  auto& queue = device->async_events;
  for (auto it = queue.begin(); it != queue.end();) {
    if (AffiliatedObject(*it) == object) {
      it = queue.erase(it);
      ConsumeFd(device->async_fd);
    } else {
      ++it;
    }
  }
}

// ibv_modify_srq(3) with rxe's rules (rxe_srq.c rxe_srq_chk_attr):
// IBV_SRQ_MAX_WR of 0 or above the device's max_srq_wr, or below an armed
// limit, is EINVAL; a resize keeps the queued receives, and one below
// their number is EINVAL too (rxe_queue_resize cannot fit them). An
// srq_limit above max_srq_wr or above the queue's size is EINVAL; 0
// disarms. Other mask bits are ignored, as rxe ignored them
// (testdata/async_events.rxe.txt, modify-unknown-mask).
int FakeNic::ModifySrq(ibv_srq* srq, ibv_srq_attr* attr, int attr_mask) {
  std::lock_guard<std::mutex> lock(mu_);
  Srq* s = FindSrq(srq);
  if (s == nullptr || attr == nullptr) return EINVAL;
  const FakeDeviceCaps& caps = *config_.caps;
  uint32_t max_wr = s->max_wr;
  if (attr_mask & IBV_SRQ_MAX_WR) {
    if (attr->max_wr == 0 ||
        attr->max_wr > static_cast<uint32_t>(caps.max_srq_wr) ||
        (s->limit != 0 && attr->max_wr < s->limit)) {
      return EINVAL;
    }
    max_wr = static_cast<uint32_t>(RealDepth(static_cast<int>(attr->max_wr)));
    if (max_wr < s->rq.size()) return EINVAL;
  }
  if (attr_mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > static_cast<uint32_t>(caps.max_srq_wr) ||
        attr->srq_limit > max_wr) {
      return EINVAL;
    }
  }
  if (attr_mask & IBV_SRQ_MAX_WR) {
    s->max_wr = max_wr;
    attr->max_wr = max_wr;
  }
  if (attr_mask & IBV_SRQ_LIMIT) s->limit = attr->srq_limit;
  return 0;
}

// ibv_query_srq(3): the queue's size, SGEs per receive and armed limit.
int FakeNic::QuerySrq(ibv_srq* srq, ibv_srq_attr* attr) {
  std::lock_guard<std::mutex> lock(mu_);
  Srq* s = FindSrq(srq);
  if (s == nullptr || attr == nullptr) return EINVAL;
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  attr->srq_limit = s->limit;
  return 0;
}

}  // namespace rpma_harness
