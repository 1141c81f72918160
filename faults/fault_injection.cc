#include "faults/fault_injection.h"

#include <arpa/inet.h>
#include <errno.h>

#include <cstring>
#include <utility>

namespace rpma_harness {

const char* ToString(FaultCall call) {
  switch (call) {
    case FaultCall::kPostSend:
      return "post_send";
    case FaultCall::kPostRecv:
      return "post_recv";
    case FaultCall::kPollCq:
      return "poll_cq";
    case FaultCall::kRegMr:
      return "reg_mr";
    case FaultCall::kCreateQp:
      return "create_qp";
    case FaultCall::kConnect:
      return "connect";
    case FaultCall::kAccept:
      return "accept";
    case FaultCall::kCmEvent:
      return "cm_event";
    case FaultCall::kExecute:
      return "execute";
  }
  return "?";
}

const char* ToString(FaultAction action) {
  switch (action) {
    case FaultAction::kFailCall:
      return "fail";
    case FaultAction::kCompleteWithStatus:
      return "complete";
    case FaultAction::kDelay:
      return "delay";
    case FaultAction::kLoseConnection:
      return "lose_connection";
    case FaultAction::kOverflowCq:
      return "overflow_cq";
    case FaultAction::kTearWrite:
      return "tear";
  }
  return "?";
}

namespace {

bool ActionFits(FaultCall call, FaultAction action) {
  switch (action) {
    case FaultAction::kFailCall:
      return call != FaultCall::kExecute;
    case FaultAction::kCompleteWithStatus:
      return call == FaultCall::kExecute || call == FaultCall::kPostSend ||
             call == FaultCall::kPollCq;
    case FaultAction::kDelay:
    case FaultAction::kTearWrite:
      return call == FaultCall::kExecute;
    case FaultAction::kLoseConnection:
      return call == FaultCall::kExecute || call == FaultCall::kPostSend ||
             call == FaultCall::kPostRecv || call == FaultCall::kPollCq ||
             call == FaultCall::kCmEvent;
    case FaultAction::kOverflowCq:
      return call == FaultCall::kExecute || call == FaultCall::kPollCq;
  }
  return false;
}

uint64_t WrLength(const ibv_send_wr& wr) {
  uint64_t length = 0;
  for (int i = 0; wr.sg_list != nullptr && i < wr.num_sge; ++i) {
    length += wr.sg_list[i].length;
  }
  return length;
}

bool HasImm(int opcode) {
  return opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_SEND_WITH_IMM;
}

// A poll_cq + complete rule rewrites each completion it matches; the other
// poll_cq rules act once per call.
bool RewritesPolled(const FaultRule& rule) {
  return rule.call == FaultCall::kPollCq &&
         rule.action == FaultAction::kCompleteWithStatus;
}

}  // namespace

std::string FaultNeedsFakeNic(const FaultRule& rule) {
  if (rule.call == FaultCall::kExecute) {
    return "an execute-time fault (on: execute) acts while the NIC carries "
           "out a WR, through a hook inside the fake NIC; a real NIC executes "
           "WRs in the kernel or in hardware, where no hook reaches";
  }
  switch (rule.action) {
    case FaultAction::kCompleteWithStatus:
      if (rule.call == FaultCall::kPostSend) {
        return "a forced status for a posted WR (on: post_send, action: "
               "complete) needs the fake NIC to complete that WR with it and "
               "move its QP to ERR; over a real NIC use on: poll_cq (the "
               "polled status is rewritten) or provoke the error itself";
      }
      return "";
    case FaultAction::kLoseConnection:
      return "losing the connection (action: lose_connection) needs the fake "
             "NIC to move both QPs to ERR and raise RPMA_CONN_LOST at both "
             "ends";
    case FaultAction::kOverflowCq:
      return "a CQ overrun (action: overflow_cq) needs the fake NIC to drop a "
             "completion and fail the CQ";
    case FaultAction::kDelay:
    case FaultAction::kTearWrite:
      return std::string("action '") + ToString(rule.action) +
             "' acts inside the fake NIC";
    case FaultAction::kFailCall:
      return "";
  }
  return "";
}

FaultInjector::FaultInjector(std::shared_ptr<VerbsBackend> backend,
                             uint64_t seed)
    : ForwardingBackend(std::move(backend)),
      nic_(std::dynamic_pointer_cast<FakeNic>(shared_target())),
      name_(std::string(target()->Name()) + "+faults"),
      rng_(seed) {
  if (nic_ != nullptr) {
    nic_->SetExecuteHook(
        [this](const ExecuteInfo& info) { return OnExecute(info); });
  }
}

FaultInjector::~FaultInjector() {
  if (nic_ != nullptr) nic_->SetExecuteHook(nullptr);
}

bool FaultInjector::Validate(const FaultRule& rule, std::string* why) {
  auto reject = [&](std::string reason) {
    if (why != nullptr) *why = std::move(reason);
    return false;
  };
  if (rule.name.empty()) return reject("a fault rule needs a name");
  if (!ActionFits(rule.call, rule.action)) {
    return reject(std::string("action '") + ToString(rule.action) +
                  "' cannot apply to '" + ToString(rule.call) + "'");
  }
  if (rule.action == FaultAction::kFailCall && rule.error <= 0) {
    return reject("action 'fail' needs a positive errno");
  }
  if (rule.probability < 0 || rule.probability > 1) {
    return reject("probability must be within [0, 1]");
  }
  return true;
}

bool FaultInjector::AddRule(const FaultRule& rule, std::string* why) {
  if (!Validate(rule, why)) return false;
  if (nic_ == nullptr) {
    const std::string needs = FaultNeedsFakeNic(rule);
    if (!needs.empty()) {
      if (why != nullptr) {
        *why = "fault '" + rule.name + "' cannot run on the " + target()->Name() +
               " backend: " + needs;
      }
      return false;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Rule& r : rules_) {
    if (r.spec.name == rule.name) {
      if (why != nullptr)
        *why = "two fault rules are named '" + rule.name + "'";
      return false;
    }
  }
  rules_.push_back(Rule{rule, 0, 0});
  return true;
}

void FaultInjector::SetRuleQp(const std::string& name, uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Rule& r : rules_) {
    if (r.spec.name == name) r.spec.qp_num = qp_num;
  }
}

void FaultInjector::OverrideRnrRetry(uint8_t rnr_retry) {
  std::lock_guard<std::mutex> lock(mu_);
  rnr_retry_ = rnr_retry;
}

std::vector<FiredFault> FaultInjector::Fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

uint64_t FaultInjector::TimesFired(const std::string& rule) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Rule& r : rules_) {
    if (r.spec.name == rule) return r.fires;
  }
  return 0;
}

std::vector<std::string> FaultInjector::NeverFired() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const Rule& r : rules_) {
    if (r.fires == 0) names.push_back(r.spec.name);
  }
  return names;
}

std::optional<FaultRule> FaultInjector::Decide(const CallInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Rule& r : rules_) {
    const FaultRule& s = r.spec;
    if (s.call != info.call) continue;
    if (RewritesPolled(s) != info.polled) continue;
    if (s.qp_num != 0 && s.qp_num != info.qp_num) continue;
    if (s.opcode && (!info.opcode || *s.opcode != *info.opcode)) continue;
    if (s.min_length && info.length < *s.min_length) continue;
    if (s.max_length && info.length > *s.max_length) continue;
    if (s.imm && (!info.imm || *s.imm != *info.imm)) continue;
    if (s.remote_addr_min && info.remote_addr < *s.remote_addr_min) continue;
    if (s.remote_addr_max && info.remote_addr > *s.remote_addr_max) continue;
    if (s.predicate && (info.execute == nullptr || !s.predicate(*info.execute)))
      continue;
    const uint64_t match = ++r.matches;
    if (s.max_fires != 0 && r.fires >= s.max_fires) continue;
    if (s.nth != 0 && match != s.nth) continue;
    if (s.every != 0 && match % s.every != 0) continue;
    if (s.probability < 1.0) {
      // 53 random bits as a fraction in [0, 1): the same on every platform
      // (std::uniform_real_distribution is not specified bit for bit).
      const double draw = static_cast<double>(rng_() >> 11) * 0x1p-53;
      if (draw >= s.probability) continue;
    }
    ++r.fires;
    fired_.push_back(
        FiredFault{s.name, info.call, info.qp_num, info.wr_id, match});
    return s;
  }
  return std::nullopt;
}

ExecuteVerdict FaultInjector::OnExecute(const ExecuteInfo& info) {
  // Runs with the NIC's mutex held: only the injector's own state is used.
  CallInfo call(FaultCall::kExecute);
  call.qp_num = info.qp_num;
  call.wr_id = info.wr_id;
  call.opcode = info.opcode;
  call.length = info.length;
  if (HasImm(info.opcode)) call.imm = ntohl(info.imm_data);
  call.remote_addr = info.remote_addr;
  call.execute = &info;
  ExecuteVerdict verdict;
  std::optional<FaultRule> rule = Decide(call);
  if (!rule) {
    // A status a post_send rule chose for this WR when it was posted.
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = forced_.begin(); it != forced_.end(); ++it) {
      if (it->wr_id == info.wr_id && it->qp_num == info.qp_num) {
        verdict.kind = ExecuteVerdict::Kind::kFail;
        verdict.status = it->status;
        verdict.reason = it->rule + ": the status chosen at post_send";
        forced_.erase(it);
        break;
      }
    }
    return verdict;
  }
  verdict.reason = rule->name;
  verdict.status = rule->status;
  switch (rule->action) {
    case FaultAction::kCompleteWithStatus:
      verdict.kind = ExecuteVerdict::Kind::kFail;
      break;
    case FaultAction::kDelay:
      verdict.kind = ExecuteVerdict::Kind::kDelay;
      verdict.delay_steps = rule->delay_steps;
      break;
    case FaultAction::kLoseConnection:
      verdict.kind = ExecuteVerdict::Kind::kLoseConnection;
      break;
    case FaultAction::kOverflowCq:
      verdict.kind = ExecuteVerdict::Kind::kOverrunCq;
      break;
    case FaultAction::kTearWrite:
      verdict.kind = ExecuteVerdict::Kind::kTear;
      verdict.torn_bytes = rule->torn_bytes;
      if (rule->status == IBV_WC_GENERAL_ERR) {
        // Unless told otherwise, a torn write is what a link that dies
        // mid-message produces: the requester runs out of transport retries.
        verdict.status = IBV_WC_RETRY_EXC_ERR;
      }
      break;
    case FaultAction::kFailCall:
      break;  // rejected by AddRule
  }
  return verdict;
}

int FaultInjector::Sign(int error) const {
  // rdma-core's providers return a positive errno (ibv_post_send(3)); the
  // fake follows its personality (siw's is negative).
  if (nic_ == nullptr) return error;
  return nic_->config().personality.negative_errno ? -error : error;
}

void FaultInjector::Note(const FaultRule& rule, const CallInfo& info,
                         const std::string& what) {
  if (nic_ == nullptr) return;  // Fired() is the record on other backends
  nic_->RecordFault(
      info.qp_num, info.wr_id,
      rule.action == FaultAction::kFailCall ? rule.error : 0,
      "fault: " + rule.name + ": " + ToString(info.call) + " " + what);
}

void FaultInjector::ApplySideEffect(const FaultRule& rule, const CallInfo& info,
                                    ibv_cq* cq) {
  // AddRule admits the actions below only on the fake (FaultNeedsFakeNic).
  if (nic_ == nullptr) return;
  switch (rule.action) {
    case FaultAction::kLoseConnection:
      Note(rule, info, "loses the connection");
      nic_->LoseConnection(info.qp_num);
      break;
    case FaultAction::kOverflowCq:
      Note(rule, info, "overflows the CQ");
      if (cq != nullptr) nic_->OverrunCq(cq);
      break;
    case FaultAction::kCompleteWithStatus:
      {
        // OnExecute (the NIC's execute hook) ends the WR with it.
        std::lock_guard<std::mutex> lock(mu_);
        forced_.push_back({info.wr_id, info.qp_num, rule.status, rule.name});
      }
      Note(rule, info, "completes with a forced status");
      break;
    default:
      break;
  }
}

// ---- calls that rules can fail
// -----------------------------------------------

int FaultInjector::PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  // Rules see each WR of a chain; the first that fails stops the chain there
  // and the WRs before it are posted, as a provider does -- unless the chain
  // goes whole or not at all (kSendWholeChain: ibv_wr_complete(3)).
  const bool whole = wr != nullptr && (wr->send_flags & kSendWholeChain) != 0;
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    CallInfo info(FaultCall::kPostSend);
    info.qp_num = qp->qp_num;
    info.wr_id = w->wr_id;
    const ibv_wr_opcode opcode = PostedOpcode(*w);
    info.opcode = opcode;
    info.length = WrLength(*w);
    if (HasImm(opcode)) info.imm = ntohl(w->imm_data);
    info.remote_addr = w->wr.rdma.remote_addr;
    std::optional<FaultRule> rule = Decide(info);
    if (!rule) continue;
    if (rule->action != FaultAction::kFailCall) {
      ApplySideEffect(*rule, info, nullptr);
      continue;
    }
    int ret = 0;
    if (w != wr && !whole) {
      // Post the WRs before the failing one.
      ibv_send_wr* prev = wr;
      while (prev->next != w) prev = prev->next;
      prev->next = nullptr;
      ret = target()->PostSend(qp, wr, bad_wr);
      prev->next = w;
      if (ret != 0) return ret;
    }
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    *bad_wr = whole ? wr : w;
    return Sign(rule->error);
  }
  return target()->PostSend(qp, wr, bad_wr);
}

int FaultInjector::PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  CallInfo info(FaultCall::kPostRecv);
  info.qp_num = qp->qp_num;
  info.wr_id = wr != nullptr ? wr->wr_id : 0;
  std::optional<FaultRule> rule = Decide(info);
  if (rule && rule->action == FaultAction::kFailCall) {
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    *bad_wr = wr;
    return Sign(rule->error);
  }
  if (rule) ApplySideEffect(*rule, info, nullptr);
  return target()->PostRecv(qp, wr, bad_wr);
}

int FaultInjector::PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  CallInfo info(FaultCall::kPollCq);
  std::optional<FaultRule> rule = Decide(info);
  if (rule && rule->action == FaultAction::kFailCall) {
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    errno = rule->error;
    return -rule->error;
  }
  if (rule) ApplySideEffect(*rule, info, cq);
  const int polled = target()->PollCq(cq, num_entries, wc);
  RewritePolled(polled, wc);
  return polled;
}

void FaultInjector::RewritePolled(int polled, ibv_wc* wc) {
  for (int i = 0; i < polled; ++i) {
    CallInfo info(FaultCall::kPollCq);
    info.polled = true;
    info.qp_num = wc[i].qp_num;
    info.wr_id = wc[i].wr_id;
    info.length = wc[i].byte_len;
    if (wc[i].wc_flags & IBV_WC_WITH_IMM) info.imm = ntohl(wc[i].imm_data);
    std::optional<FaultRule> rule = Decide(info);
    if (!rule) continue;
    // Only the status changes: the NIC did what it did (the QP keeps its
    // state, the bytes that landed stay), the program is told otherwise.
    Note(*rule, info,
         std::string("reports ") + ibv_wc_status_str(rule->status) +
             " instead of " + ibv_wc_status_str(wc[i].status));
    wc[i].status = rule->status;
  }
}

ibv_mr* FaultInjector::RegMr(ibv_pd* pd, void* addr, size_t length,
                             int access) {
  CallInfo info(FaultCall::kRegMr);
  info.length = length;
  if (std::optional<FaultRule> rule = Decide(info)) {
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    errno = rule->error;
    return nullptr;
  }
  return target()->RegMr(pd, addr, length, access);
}

int FaultInjector::CreateQp(rdma_cm_id* id, ibv_pd* pd,
                            ibv_qp_init_attr* init_attr) {
  CallInfo info(FaultCall::kCreateQp);
  if (std::optional<FaultRule> rule = Decide(info)) {
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    errno = rule->error;
    return -1;
  }
  return target()->CreateQp(id, pd, init_attr);
}

int FaultInjector::Establish(FaultCall call, rdma_cm_id* id,
                             rdma_conn_param* param) {
  CallInfo info(call);
  if (id->qp != nullptr) info.qp_num = id->qp->qp_num;
  if (std::optional<FaultRule> rule = Decide(info)) {
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    errno = rule->error;
    return -1;
  }
  rdma_conn_param overridden{};
  if (param != nullptr) overridden = *param;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rnr_retry_) {
      overridden.rnr_retry_count = *rnr_retry_;
      param = &overridden;
    }
  }
  return call == FaultCall::kConnect ? target()->Connect(id, param)
                                     : target()->Accept(id, param);
}

int FaultInjector::Connect(rdma_cm_id* id, rdma_conn_param* param) {
  return Establish(FaultCall::kConnect, id, param);
}

int FaultInjector::Accept(rdma_cm_id* id, rdma_conn_param* param) {
  return Establish(FaultCall::kAccept, id, param);
}

int FaultInjector::GetCmEvent(rdma_event_channel* channel,
                              rdma_cm_event** event) {
  int ret = target()->GetCmEvent(channel, event);
  if (ret != 0) return ret;
  CallInfo info(FaultCall::kCmEvent);
  info.opcode = (*event)->event;
  if ((*event)->id != nullptr && (*event)->id->qp != nullptr) {
    info.qp_num = (*event)->id->qp->qp_num;
  }
  std::optional<FaultRule> rule = Decide(info);
  if (!rule) return 0;
  if (rule->action == FaultAction::kFailCall) {
    // The event was taken: give it back to the NIC as acknowledged, and
    // report the failure the caller would have seen instead.
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    target()->AckCmEvent(*event);
    *event = nullptr;
    errno = rule->error;
    return -1;
  }
  ApplySideEffect(*rule, info, nullptr);
  return 0;
}

// ---- SRQ receives ----

int FaultInjector::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                               ibv_recv_wr** bad_wr) {
  CallInfo info(FaultCall::kPostRecv);
  info.qp_num = 0;
  info.wr_id = wr != nullptr ? wr->wr_id : 0;
  std::optional<FaultRule> rule = Decide(info);
  if (rule && rule->action == FaultAction::kFailCall) {
    Note(*rule, info, "fails with " + std::string(std::strerror(rule->error)));
    *bad_wr = wr;
    return Sign(rule->error);
  }
  if (rule) ApplySideEffect(*rule, info, nullptr);
  return target()->PostSrqRecv(srq, wr, bad_wr);
}

}  // namespace rpma_harness
