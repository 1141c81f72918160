// checking_backend.h: an RDMA usage checker -- the program bugs a real NIC
// silently tolerates, reported the way sanitizers report memory bugs.
//
// A CheckingBackend is a VerbsBackend that wraps any other (the fake NIC, a
// FaultInjector, rdma-core), forwards every call unchanged and watches them:
// every post, poll, registration, CQ event and destroy. The rpma layer adds
// what only it knows (the size_t length before it became a 32-bit SGE, the
// size a peer's descriptor announced, which rpma objects are alive).
// Each finding is printed once per call stack on stderr, sanitizer-style:
// what happened, the call and its backtrace, the WR(s), the NIC's trace
// lines when the wrapped backend is a FakeNic, and how to fix it; it is
// counted whether printed or not.
//
//   auto nic = std::make_shared<FakeNic>();
//   CheckOptions options;            // every check; findings print on stderr
//   options.trace_nic = nic.get();   // adds the NIC's trace lines to reports
//   auto checked = std::make_shared<CheckingBackend>(nic, options);
//   rpma_harness::ScopedBackend use(checked);
//   ... the program under test ...
//   EXPECT_EQ(checked->FindingCount(), 0u);
//
// Any program: RPMA_HARNESS_CHECK=1 (every check), or a comma-separated list
// of check names (below), plus "strict" to make a finding fail the process:
// at exit, like ASan, it then exits with kStrictExitCode.
//
// Checks (names as RPMA_HARNESS_CHECK takes them):
//   length         a write/read/send/recv length beyond 32 bits (the NIC
//                  moves len & 0xffffffff; ibv_sge.length is uint32_t)
//   remote-range   a remote range past the size the peer's descriptor
//                  announced (would be REM_ACCESS_ERR / a silent overrun of
//                  a larger MR behind the same rkey)
//   source-changed the source of a posted write/send changed before its
//                  completion (or a later signaled one) was reaped; on the
//                  fake it also tells whether that was before the NIC read
//                  it (the peer got the new bytes) or after (the old ones),
//                  and which bytes / packets
//   overlap        a READ destination posted over memory an outstanding
//                  operation uses (or the reverse); a SEND landing in a
//                  receive buffer that another outstanding receive or send
//                  also uses (a receive reposted too early); two
//                  outstanding operations of different QPs touching
//                  overlapping remote memory, one writing
//   recv-written   the program wrote into the buffer of an outstanding
//                  receive (on the fake only: it tells the NIC's writes
//                  from the program's)
//   sq-overflow    more WRs outstanding on a send queue than its depth: an
//                  unsignaled WR's slot is only freed when a later signaled
//                  WR's completion is reaped (rdma-core mlx5 cq.c)
//   cq-overrun     more signaled WRs outstanding than the CQ holds, or a
//                  CQ that did overrun
//   cq-events      ibv_destroy_cq with unacknowledged CQ events (on
//                  rdma-core it blocks forever: ibv_get_cq_event(3))
//   mr-unmapped    registered memory the program unmapped or protected
//   leak           rpma objects still alive at exit (with where each was
//                  created)
// and one mode of the fake NIC, not a check (it reports nothing itself):
//   landing=pieces      an RDMA write's bytes land in seeded pieces over
//                       several steps, its completions after the last one;
//   landing=completion  they land when its completions are generated
//   (FakeNicConfig::landing: a destination read too early sees torn data).
//
// Thread-safe: one mutex serialises the checker's own state; the wrapped
// backend is called without it held. The checker is a tap on trace_nic
// (nic/nic_tap.h: its records, source reads and NIC writes), called with
// the NIC's mutex held; several checkers may watch one NIC.

#ifndef RPMA_HARNESS_CHECK_CHECKING_BACKEND_H_
#define RPMA_HARNESS_CHECK_CHECKING_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "nic/fake_nic.h"
#include "verbs_backend/forwarding_backend.h"
#include "verbs_backend/verbs_backend.h"

namespace rpma_harness {

// The check names, in the order the header lists them.
const std::vector<std::string>& CheckNames();

// The exit code of a strict-mode process with findings (ASan's default is 1;
// a distinct value tells a checker failure from the program's own).
constexpr int kStrictExitCode = 66;

struct CheckOptions {
  std::set<std::string> enabled;  // empty: every check
  bool strict = false;            // findings fail the run (see ExitIfStrict)
  bool print = true;              // print each new finding on stderr
  // When the wrapped backend is (or wraps) a FakeNic: reports add its last
  // trace lines for the QP involved.
  FakeNic* trace_nic = nullptr;
  // "landing=pieces" / "landing=completion" / "landing=once": sets the
  // trace_nic's FakeNicConfig::landing (FakeNic::SetLanding), so a program
  // that reads a write's destination before polling its receive completion
  // sees torn or stale data. Not part of "all": it changes when bytes land,
  // not what is reported. Ignored when the backend is not the fake.
  bool set_landing = false;
  Landing landing = Landing::kAtOnce;
  // The program calls libibverbs itself (the drop-in libibverbs.so.1), not
  // librpma: a report's "fix:" names the verbs call (ibv_poll_cq(3)), not
  // the librpma one (rpma_cq_get_wc(3)).
  bool verbs_program = false;
};

// Parses an RPMA_HARNESS_CHECK value: "1"/"all" (every check), a list of
// check names, optionally with "strict" and "landing=MODE" (MODE: pieces,
// completion, once). False (and *why) on an unknown name or mode.
bool ParseCheckOptions(const std::string& value, CheckOptions* options,
                       std::string* why);

struct Finding {
  std::string check;    // a name from CheckNames()
  std::string what;     // one line
  std::string details;  // WRs, trace lines, how to fix (may be multi-line)
  std::string where;    // the user's function (first frame outside the harness)
  uint64_t times = 1;   // how often it happened (printed once)
};

class CheckingBackend final : public ForwardingBackend,
                              public LibraryChecker,
                              private NicTap {
 public:
  CheckingBackend(std::shared_ptr<VerbsBackend> inner, CheckOptions options);
  ~CheckingBackend() override;
  CheckingBackend(const CheckingBackend&) = delete;
  CheckingBackend& operator=(const CheckingBackend&) = delete;

  // ---- results ----
  uint64_t FindingCount() const;  // distinct findings
  uint64_t FindingCount(const std::string& check) const;
  std::vector<Finding> Findings() const;
  bool Enabled(const std::string& check) const;
  const CheckOptions& options() const { return options_; }
  VerbsBackend* inner() const { return target(); }
  // The CQs it watches (alive ones), in creation order: for tests that
  // reach under the rpma layer.
  std::vector<ibv_cq*> Cqs() const;

  // ---- what only the rpma layer knows (LibraryChecker, verbs_backend.h) ----
  LibraryChecker* library_checker() override { return this; }
  void CheckLength(const char* call, size_t len) override;
  void CheckRemoteRange(const char* call, size_t offset, size_t len,
                        uint64_t size, uint64_t raddr,
                        uint32_t rkey) override;
  void NoteCreated(const char* kind, const void* object) override;
  void NoteDeleted(const void* object) override;
  void ExemptFromOverlap(uintptr_t addr, size_t len) override;
  // Reports every rpma object still alive (the "leak" check); returns how
  // many. Runs at exit for the environment's checker.
  size_t ReportLiveObjects();
  // Prints the summary line and, when strict and there are findings,
  // _exit(kStrictExitCode) -- what the environment's checker does at exit.
  void ExitIfStrict();

  // ---- VerbsBackend: the calls it checks; the rest pass straight through
  // (ForwardingBackend) ----
  int DeregMr(ibv_mr* mr) override;
  ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                   ibv_comp_channel* channel, int comp_vector) override;
  int DestroyCq(ibv_cq* cq) override;
  int GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                 void** cq_context) override;
  void AckCqEvents(ibv_cq* cq, unsigned int nevents) override;
  int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override;
  // IBV_EVENT_CQ_ERR on a CQ the program created: cq-overrun (the one sign
  // of an overrun on a NIC whose polls go on, rxe's).
  int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) override;
  int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override;
  int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  int CreateQp(rdma_cm_id* id, ibv_pd* pd,
               ibv_qp_init_attr* init_attr) override;
  void DestroyQp(rdma_cm_id* id) override;
  // ibv_create_qp / ibv_create_qp_ex QPs (a verbs program's, through the
  // drop-in libibverbs.so.1): watched as rdma_cm's are.
  ibv_qp* CreateVerbsQp(ibv_pd* pd, ibv_qp_init_attr* init_attr) override;
  int DestroyVerbsQp(ibv_qp* qp) override;
  int DestroySrq(ibv_srq* srq) override;
  int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;

 private:
  struct Range {
    uint64_t addr = 0;
    uint64_t len = 0;
  };
  // A WR as reports print it; kept as fields, formatted only for a report.
  struct WrSummary {
    const char* queue = "qp";  // "qp" or "srq"
    uint32_t num = 0;
    uint64_t wr_id = 0;
    int opcode = -1;  // ibv_wr_opcode; -1: a receive
    unsigned send_flags = 0;
    bool has_local = false;
    uint64_t local = 0;
    uint64_t len = 0;
    bool has_remote = false;
    uint64_t remote = 0;
    uint32_t rkey = 0;
    std::string note;
  };
  static std::string Text(const WrSummary& wr);
  // A send WR from its post until its completion (or a later signaled
  // one's) is reaped.
  struct OutstandingSend {
    uint64_t wr_id = 0;
    int opcode = 0;
    bool signaled = false;
    std::vector<Range> local;  // SGEs (not for inline WRs)
    bool local_is_sink = false;
    Range remote;
    uint32_t rkey = 0;
    bool remote_written = false;
    bool has_hash = false;
    uint64_t total = 0;                 // bytes of `local`
    std::vector<uint32_t> post_chunks;  // kChunk hashes at post
    // The fake's source-read tap: the chunks as the NIC read them.
    std::vector<uint32_t> read_chunks;
    std::vector<uint8_t> read_mask;  // 1: that chunk was read
    bool read_done = false;          // every byte was read
    uint32_t mtu = 0;
    WrSummary wr;
  };
  struct OutstandingRecv {
    uint64_t wr_id = 0;
    std::vector<Range> local;
    WrSummary wr;
    // recv-written: the buffer's chunks at post, the chunks the NIC wrote
    // since (left out), and the post_recv's call stack (raw frames).
    bool has_hash = false;
    bool nic_wrote = false;
    uint64_t total = 0;
    std::vector<uint32_t> post_chunks;
    std::vector<uint8_t> nic_written;
    std::vector<void*> post_frames;
  };
  struct QpState {
    ibv_qp* qp = nullptr;
    uint32_t qp_num = 0;
    uint32_t sq_depth = 0;
    bool sq_sig_all = false;
    bool in_error = false;  // an error completion was reaped: WRs flush
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;
    ibv_srq* srq = nullptr;
    uint64_t serial = 0;  // TrackQp's count: a reused qp_num is another QP
    std::deque<OutstandingSend> sends;
    std::deque<OutstandingRecv> recvs;
  };
  struct CqState {
    int depth = 0;
    uint64_t signaled_outstanding = 0;
    uint64_t events_unacked = 0;
    bool overrun_reported = false;
    uint64_t serial = 0;
    ibv_cq* cq = nullptr;
  };
  struct LiveObject {
    std::string kind;
    std::string stack;  // where it was created
    std::string where;  // the user's function that created it
  };

  // A new QP of the program's (either way it was made), watched from now.
  void TrackQp(ibv_qp* qp, const ibv_qp_init_attr& init_attr);
  // A QP going away: its receives compared, its signaled WRs no longer
  // counted on its CQ, the completions it lost handed to its CQs.
  // REQUIRES: mu_ held.
  void ForgetQp(uint32_t qp_num);
  // After the QP is gone: its trace lines, and losses nothing ties to a CQ.
  void DropQpTrace(uint32_t qp_num);
  // cq-overrun of a CQ that lost a completion (the NIC told: lost_; or
  // IBV_EVENT_CQ_ERR), once per CQ. REQUIRES: mu_ held.
  void ReportCqOverrun(const ibv_cq* cq, const std::string& what);
  // The lost completions of `cq` the tap was told of, reported at its poll
  // (a NIC that goes on after a full CQ, as rxe, fails no poll).
  // REQUIRES: mu_ held.
  void ReportLostCompletions(const ibv_cq* cq);
  // psn: the requests trace_nic answered as out of their responder's PSN
  // sequence (out_of_sequence_), reported at the program's next poll of
  // any CQ. REQUIRES: mu_ held.
  void ReportOutOfSequence();
  // Records (and prints, once per stack) a finding. REQUIRES: mu_ held.
  // `creation_stack`: for a leak, where the object was created (instead of
  // the current stack).
  void Report(const std::string& check, const std::string& what,
              const std::string& details, uint32_t qp_num,
              const std::string* creation_stack = nullptr,
              const std::string& creation_where = "",
              const char* stack_label = "created at");
  std::string TraceLines(uint32_t qp_num) const;
  // The overlap check of one new operation against everything
  // outstanding. REQUIRES: mu_ held.
  void CheckOverlap(uint32_t qp_num, const std::vector<Range>& local, bool sink,
                    const Range* remote, uint32_t rkey, bool remote_written,
                    const WrSummary& wr, bool include_recvs);
  bool Exempt(const Range& r) const;
  // Reaps the send WRs one completion of `qs` stands for. REQUIRES: mu_.
  void ReapSend(QpState* qs, const ibv_wc& wc);
  void ReapRecv(QpState* qs, const ibv_wc& wc);
  // The source-changed comparison of a retired send WR. REQUIRES: mu_.
  void CompareSource(const OutstandingSend& s, uint32_t qp_num);
  // The recv-written comparison of an outstanding receive's buffer with
  // its bytes at post (the chunks the NIC wrote left out); `moment` says
  // when. REQUIRES: mu_ held.
  void CompareRecv(OutstandingRecv* r, const char* moment, uint32_t qp_num);
  // recv-written: hashes newly posted receives and keeps their stack.
  void HashNewRecvs(std::vector<OutstandingRecv>* posts);
  // The tap on trace_nic (nic/nic_tap.h), called with the NIC's mutex held.
  void OnEvent(const FakeNicEvent& event) override;
  void OnSourceRead(const NicSourceRead& read) override;
  void OnNicWrite(uintptr_t dst, size_t n) override;
  // Hashes bytes [from, to) of the byte stream `ranges` describe (a gather
  // list), one 32-bit hash per kChunk bytes, into out[from / kChunk ...],
  // without crashing on unmapped memory: false (and *fault) when the memory
  // is gone. REQUIRES: from % kChunk == 0.
  static constexpr uint64_t kChunk = 256;  // the smallest path MTU
  static bool HashChunks(const std::vector<Range>& ranges, uint64_t from,
                         uint64_t to, uint32_t* out, uintptr_t* fault);
  static uint64_t TotalLength(const std::vector<Range>& ranges);

  const CheckOptions options_;
  // The call a "fix:" line names: librpma's, or for a verbs program the
  // verbs one.
  std::string Call(const char* rpma, const char* verbs) const {
    return options_.verbs_program ? verbs : rpma;
  }
  // recv-written runs only over the fake (options_.trace_nic), whose
  // writes its tap is told of; over rdma-core a NIC write into a
  // receive buffer (a peer's RDMA WRITE) cannot be told from the program's.
  const bool recv_check_;

  mutable std::mutex mu_;
  std::map<uint32_t, QpState> qps_;  // by qp_num
  std::map<const ibv_cq*, CqState> cqs_;
  std::map<const ibv_srq*, std::deque<OutstandingRecv>> srq_recvs_;
  std::map<const void*, LiveObject> live_;
  std::vector<Range> exempt_;
  uint64_t next_cq_serial_ = 0;
  uint64_t next_qp_serial_ = 0;
  std::vector<Finding> findings_;
  std::map<std::string, size_t> finding_index_;  // check + stack -> index

  // The trace_nic's last events per QP (OnEvent fills them).
  static constexpr size_t kTraceLines = 6;
  mutable std::mutex trace_mu_;
  std::map<uint32_t, std::deque<FakeNicEvent>> trace_;
  // Completions trace_nic lost to a full CQ (kCqOverrun events), by QP
  // and queue (qp_num, receive side): the first one and how many, reported
  // at the program's next poll of that CQ (ReportLostCompletions). Bounded
  // by the QPs, however many completions a CQ nobody polls loses.
  struct Lost {
    FakeNicEvent first;  // the earliest (lowest seq)
    uint64_t count = 0;
    void Add(const FakeNicEvent& event, uint64_t n) {
      if (count == 0 || event.seq < first.seq) first = event;
      count += n;
    }
  };
  std::map<std::pair<uint32_t, bool>, Lost> lost_;
  // The same, of QPs destroyed before their CQ was polled, by CQ (mu_).
  std::map<const ibv_cq*, Lost> lost_by_cq_;
  // Each QP's first request out of its responder's PSN sequence since the
  // last poll (kExecute events; FakeNic::OutOfPsnSequence). trace_mu_.
  std::map<uint32_t, FakeNicEvent> out_of_sequence_;
  int tap_ = 0;  // the handle of this tap on trace_nic
};

// The CheckingBackend behind `backend`, or nullptr when it is not one.
CheckingBackend* CheckerOf(VerbsBackend* backend);

// When RPMA_HARNESS_CHECK is set: `backend` wrapped in a CheckingBackend that
// reports at exit (live objects, summary, strict exit code); otherwise
// `backend` itself. A bad value prints why and checks everything.
// verbs_program: see CheckOptions::verbs_program.
std::shared_ptr<VerbsBackend> WrapForCheckingFromEnvironment(
    std::shared_ptr<VerbsBackend> backend, bool verbs_program = false);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_CHECK_CHECKING_BACKEND_H_
