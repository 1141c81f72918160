// fault_injection.h: make the fake NIC fail on purpose, repeatably.
//
// A FaultInjector is a VerbsBackend that wraps another one (LevelDB's
// FaultInjectionTestEnv idea: the fault layer wraps, it does not fork the
// NIC). Rules match calls (post_send, post_recv, poll_cq, reg_mr, create_qp,
// connect, accept, CM events) or the NIC's execution of a send WR, and then
// act: fail the call with an errno, complete the WR with a status (with the
// QP-to-ERR-and-flush consequences a real NIC has), rewrite a polled
// completion's status, delay a WR, tear it, lose the connection, or overflow
// a CQ. Every fault that fires is recorded, in the injector and (on the
// fake) in the NIC's event stream.
//
// Any backend: the faults a real NIC can host are the ones that act on a
// call -- a call that fails with an errno (post_send, post_recv, poll_cq,
// reg_mr, create_qp, connect, accept, a CM event), a polled completion whose
// status is rewritten (poll_cq + complete), and the RNR retry override.
// They work over rdma-core as over the fake. The rest need a hook inside the
// fake NIC (FaultNeedsFakeNic says which and why) and AddRule refuses them
// on any other backend with a message naming the fault.
//
//   auto nic = std::make_shared<FakeNic>();
//   auto faults = std::make_shared<FaultInjector>(nic, /*seed=*/42);
//   FaultRule rule;
//   rule.name = "second write is denied";
//   rule.call = FaultCall::kExecute;
//   rule.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
//   rule.nth = 2;
//   rule.action = FaultAction::kCompleteWithStatus;
//   rule.status = IBV_WC_REM_ACCESS_ERR;
//   faults->AddRule(rule);
//   rpma_harness::ScopedBackend use(faults);
//   ...
//   EXPECT_EQ(faults->TimesFired("second write is denied"), 1u);
//
// Thread-safe. Determinism: with the same rules, seed and call sequence the
// same faults fire.

#ifndef RPMA_HARNESS_FAULTS_FAULT_INJECTION_H_
#define RPMA_HARNESS_FAULTS_FAULT_INJECTION_H_

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "verbs_backend/forwarding_backend.h"
#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

enum class FaultCall {
  kPostSend,
  kPostRecv,
  kPollCq,
  kRegMr,
  kCreateQp,
  kConnect,
  kAccept,
  kCmEvent,  // a CM event handed out by GetCmEvent
  kExecute,  // the NIC starting a send WR (not a call: the wire)
};

enum class FaultAction {
  kFailCall,            // the call fails with `error`; nothing executes
  kCompleteWithStatus,  // the WR completes with `status` (kExecute, kPostSend);
                        // at kPollCq: the polled completion's status is
                        // rewritten to `status` (nothing else changes)
  kDelay,               // the WR waits `delay_steps` progress steps
  kLoseConnection,      // both QPs to ERR, RPMA_CONN_LOST at both ends
  kOverflowCq,          // the CQ overruns (a lost completion)
  kTearWrite,           // `torn_bytes` of the write land, then `status`
};

const char* ToString(FaultCall call);
const char* ToString(FaultAction action);

struct FaultRule;
// Empty when `rule` works over any VerbsBackend; else why it needs the fake
// NIC (e.g. "an execute-time fault acts inside the NIC ...").
std::string FaultNeedsFakeNic(const FaultRule& rule);

struct FaultRule {
  std::string name;  // unique; how the rule is named in records
  FaultCall call = FaultCall::kExecute;

  // ---- what matches: every set field must hold ----
  uint32_t qp_num = 0;                 // 0: any QP
  std::optional<int> opcode;           // ibv_wr_opcode (post_send, execute) or
                                       // rdma_cm_event_type (cm_event)
  std::optional<uint64_t> min_length;  // WR length (post_send, execute)
  std::optional<uint64_t> max_length;
  std::optional<uint32_t> imm;  // host byte order
  std::optional<uint64_t> remote_addr_min;
  std::optional<uint64_t> remote_addr_max;
  std::function<bool(const ExecuteInfo&)> predicate;  // any other condition

  // ---- which matches fire ----
  uint64_t nth = 0;          // only the nth match (1-based); 0: any
  uint64_t every = 0;        // every k-th match; 0: each
  double probability = 1.0;  // drawn from the injector's seeded generator
  uint64_t max_fires = 0;    // 0: unlimited

  // ---- what happens ----
  FaultAction action = FaultAction::kFailCall;
  int error = 0;  // errno for kFailCall, positive (the NIC's sign applies)
  ibv_wc_status status = IBV_WC_GENERAL_ERR;
  int delay_steps = 1;
  uint64_t torn_bytes = 0;
};

struct FiredFault {
  std::string rule;
  FaultCall call = FaultCall::kExecute;
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
  uint64_t match = 0;  // which match of the rule fired (1-based)
};

class FaultInjector final : public ForwardingBackend {
 public:
  // `backend` may be any VerbsBackend; when it is a FakeNic, every fault
  // works, otherwise only those FaultNeedsFakeNic accepts.
  FaultInjector(std::shared_ptr<VerbsBackend> backend, uint64_t seed);
  ~FaultInjector() override;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // False when the rule cannot work (an action the call cannot take, a
  // missing errno, a probability outside [0, 1]); *why says which.
  static bool Validate(const FaultRule& rule, std::string* why);
  // Returns false (and adds nothing) when the rule cannot work: a duplicate
  // name, an action the call cannot take, or a fault that needs the fake NIC
  // on another backend; *why says which.
  bool AddRule(const FaultRule& rule, std::string* why = nullptr);
  // Narrows every rule named `name` to one QP (e.g. once a connection
  // exists and its QP number is known).
  void SetRuleQp(const std::string& name, uint32_t qp_num);

  // Every Connect / Accept from now on asks for this RNR retry count instead
  // of the caller's (librpma always asks for 7, "retry forever"). Under the IB
  // CM the requester's count comes from the other side's message, so this
  // models a peer configured with fewer retries.
  void OverrideRnrRetry(uint8_t rnr_retry);

  std::vector<FiredFault> Fired() const;
  uint64_t TimesFired(const std::string& rule) const;
  // Rules that have not fired yet, for "did my fault really happen?".
  std::vector<std::string> NeverFired() const;
  // The wrapped fake NIC, or nullptr when the backend is not a FakeNic.
  FakeNic* fake_nic() { return nic_.get(); }
  // REQUIRES: the wrapped backend is a FakeNic (fake_nic() != nullptr).
  FakeNic& nic() { return *nic_; }
  VerbsBackend& backend() { return *target(); }

  // The calls faults act on; every other call passes straight through
  // (ForwardingBackend).
  const char* Name() const override { return name_.c_str(); }
  ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) override;
  int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override;
  int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override;
  int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  int GetCmEvent(rdma_event_channel* channel, rdma_cm_event** event) override;
  int CreateQp(rdma_cm_id* id, ibv_pd* pd,
               ibv_qp_init_attr* init_attr) override;
  int Connect(rdma_cm_id* id, rdma_conn_param* param) override;
  int Accept(rdma_cm_id* id, rdma_conn_param* param) override;
  // A kPostRecv call site (qp_num 0: an SRQ belongs to no QP, so only rules
  // for any QP match it).
  int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;

 private:
  struct Rule {
    FaultRule spec;
    uint64_t matches = 0;
    uint64_t fires = 0;
  };
  // What a call looks like to the matcher.
  struct CallInfo {
    explicit CallInfo(FaultCall c) : call(c) {}
    FaultCall call;
    bool polled = false;  // a completion a poll returned (RewritesPolled)
    uint32_t qp_num = 0;
    uint64_t wr_id = 0;
    std::optional<int> opcode;
    uint64_t length = 0;
    std::optional<uint32_t> imm;
    uint64_t remote_addr = 0;
    const ExecuteInfo* execute = nullptr;
  };

  // The first rule that matches and fires for this call, if any; records it.
  std::optional<FaultRule> Decide(const CallInfo& info);
  ExecuteVerdict OnExecute(const ExecuteInfo& info);
  int Sign(int error) const;
  // Connect or Accept: the rules for `call`, then the RNR retry override.
  int Establish(FaultCall call, rdma_cm_id* id, rdma_conn_param* param);
  // Applies a fired rule to a call that is not failed outright (connection
  // loss, CQ overrun, a status for a posted WR); records it in the NIC.
  void ApplySideEffect(const FaultRule& rule, const CallInfo& info, ibv_cq* cq);
  void Note(const FaultRule& rule, const CallInfo& info,
            const std::string& what);

  // Rewrites the statuses of the completions a poll returned, for the
  // poll_cq + complete rules that fire.
  void RewritePolled(int polled, ibv_wc* wc);

  std::shared_ptr<FakeNic> nic_;  // the target when it is the fake, else null
  std::string name_;
  mutable std::mutex mu_;
  std::vector<Rule> rules_;
  // WRs a post_send rule gave a status (kCompleteWithStatus): OnExecute
  // ends each with it when the NIC starts it.
  struct Forced {
    uint64_t wr_id = 0;
    uint32_t qp_num = 0;
    ibv_wc_status status = IBV_WC_GENERAL_ERR;
    std::string rule;
  };
  std::vector<Forced> forced_;
  std::vector<FiredFault> fired_;
  std::mt19937_64 rng_;
  std::optional<uint8_t> rnr_retry_;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_FAULTS_FAULT_INJECTION_H_
