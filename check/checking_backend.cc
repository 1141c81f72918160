#include "check/checking_backend.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "nic/fake_nic.h"
#include "nic/fake_nic_user_memory.h"

namespace rpma_harness {
namespace {

constexpr uint32_t kWcRecvFlag = IBV_WC_RECV;  // every receive opcode has it

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
  return buf;
}

// One call stack: the frames above the checker, symbolized well enough to
// name the user's function (backtrace(3) + dladdr(3); the executable needs
// -rdynamic for its own symbols, which //check adds to every binary).
struct Stack {
  std::vector<void*> frames;
  std::string text;   // "    #0 0x... in fn+0x12 (binary)\n" per frame
  std::string where;  // the first frame outside the harness
};

// The demangled name of the function at `pc` ("" when the dynamic symbol
// table does not have it: a static or anonymous-namespace function), and
// "binary+0xoffset" in *module for addr2line(1).
std::string Symbol(void* pc, std::string* module) {
  Dl_info info;
  std::memset(&info, 0, sizeof(info));
  if (dladdr(pc, &info) == 0) return "";
  if (module != nullptr && info.dli_fname != nullptr) {
    char off[32];
    std::snprintf(off, sizeof(off), "+0x%zx",
                  static_cast<size_t>(static_cast<char*>(pc) -
                                      static_cast<char*>(info.dli_fbase)));
    *module = std::string(info.dli_fname) + off;
  }
  if (info.dli_sname == nullptr) return "";
  int status = 0;
  char* demangled =
      abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

// The harness's own entry points: the librpma API and the checker.
bool IsHarnessFrame(const std::string& name) {
  if (name.compare(0, 5, "rpma_") == 0 &&
      name.find("::") == std::string::npos) {
    return true;  // the C API
  }
  static const char* const kPrefixes[] = {
      "rpma_harness::CheckingBackend::",
      "rpma_harness::internal::",
  };
  for (const char* p : kPrefixes) {
    if (name.compare(0, std::strlen(p), p) == 0) return true;
  }
  return false;
}

// The frames pcs[skip, n) symbolized (see Stack).
Stack SymbolizeStack(void* const* pcs, int n, int skip) {
  Stack stack;
  std::ostringstream out;
  int shown = 0;
  // The user's frame is the one right after the last harness frame of the
  // top run (unnamed frames between are the harness's static helpers).
  bool in_top_run = true;
  int user = -1;
  std::vector<std::string> names, modules;
  for (int i = skip; i < n; ++i) {
    std::string module;
    names.push_back(Symbol(pcs[i], &module));
    modules.push_back(module);
  }
  for (size_t i = 0; i < names.size() && in_top_run; ++i) {
    if (IsHarnessFrame(names[i])) {
      user = static_cast<int>(i) + 1;
    } else if (!names[i].empty()) {
      in_top_run = false;
    }
  }
  if (user >= 0 && user < static_cast<int>(names.size())) {
    stack.where =
        names[user].empty() ? "?? (" + modules[user] + ")" : names[user];
  }
  // Shown from the call the user made (the API entry point), as a
  // sanitizer's report starts at the intercepted function.
  const int first = user >= 1 ? skip + user - 1 : skip;
  for (int i = skip; i < n; ++i) {
    stack.frames.push_back(pcs[i]);
    const std::string& module = modules[i - skip];
    const std::string& name = names[i - skip];
    if (i >= first && shown < 16) {
      out << "    #" << shown << " " << pcs[i] << " in "
          << (name.empty() ? "??" : name) << " (" << module << ")\n";
      ++shown;
    }
  }
  stack.text = out.str();
  if (stack.where.empty()) stack.where = "(unknown)";
  return stack;
}

// The return addresses of the calling frames, walked through the frame
// pointers (every //... target is built with -fno-omit-frame-pointer; as
// ASan's fast unwinder does) within this thread's stack -- ~50x cheaper
// than backtrace(3) through libgcc's unwinder, which costs ~1 us a frame
// here. Frames past one compiled without frame pointers may be wrong;
// when the walk stops before `min` frames, backtrace(3) decides.
int FastBacktrace(void** pcs, int max, int min) {
  static thread_local uintptr_t stack_lo = 0, stack_hi = 0;
  if (stack_hi == 0) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        stack_lo = reinterpret_cast<uintptr_t>(addr);
        stack_hi = stack_lo + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  int n = 0;
  auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  while (n < max && fp >= stack_lo && fp % sizeof(void*) == 0 &&
         fp + 2 * sizeof(void*) <= stack_hi) {
    const auto* frame = reinterpret_cast<const uintptr_t*>(fp);
    const uintptr_t next = frame[0];
    if (frame[1] == 0) break;
    pcs[n++] = reinterpret_cast<void*>(frame[1]);
    if (next <= fp) break;
    fp = next;
  }
  if (n < min) n = backtrace(pcs, max);
  return n;
}

Stack CaptureStack(int skip) {
  void* pcs[48];
  int n = backtrace(pcs, 48);
  return SymbolizeStack(pcs, n, skip);
}

uint64_t StackHash(const std::vector<void*>& frames) {
  uint64_t h = 1469598103934665603ull;
  for (void* f : frames) {
    h ^= reinterpret_cast<uintptr_t>(f);
    h *= 1099511628211ull;
  }
  return h;
}

bool Overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return alen != 0 && blen != 0 && a < b + blen && b < a + alen;
}

bool IsSinkOpcode(int opcode) {
  return opcode == IBV_WR_RDMA_READ || opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool IsRemoteWrite(int opcode) {
  return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
         opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// RDMA WRITE, READ and atomics name a remote range (an opcode the verbs do
// not define names none: PostedOpcode).
bool HasRemote(int opcode) {
  return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
         opcode == IBV_WR_RDMA_READ || opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

}  // namespace

const std::vector<std::string>& CheckNames() {
  static const std::vector<std::string> names = {
      "length",       "remote-range", "source-changed", "overlap",
      "recv-written", "sq-overflow",  "cq-overrun",     "cq-events",
      "mr-unmapped",  "leak",         "psn",
  };
  return names;
}

bool ParseCheckOptions(const std::string& value, CheckOptions* options,
                       std::string* why) {
  std::stringstream in(value);
  std::string item;
  bool ok = true;
  while (std::getline(in, item, ',')) {
    if (item.empty() || item == "1" || item == "all") continue;
    if (item == "strict") {
      options->strict = true;
      continue;
    }
    if (item.rfind("landing=", 0) == 0) {
      const std::string mode = item.substr(8);
      bool known = false;
      for (Landing l :
           {Landing::kAtOnce, Landing::kAtCompletion, Landing::kPieces}) {
        if (mode == LandingName(l)) {
          options->set_landing = true;
          options->landing = l;
          known = true;
        }
      }
      if (!known) {
        ok = false;
        if (why != nullptr) {
          *why = "unknown landing mode '" + mode +
                 "'; known: landing=pieces, landing=completion, landing=once";
        }
      }
      continue;
    }
    const auto& names = CheckNames();
    if (std::find(names.begin(), names.end(), item) == names.end()) {
      ok = false;
      if (why != nullptr) {
        *why = "unknown check '" + item + "'; known:";
        for (const auto& n : names) *why += " " + n;
        *why += ", strict, all, landing=pieces|completion|once";
      }
      continue;
    }
    options->enabled.insert(item);
  }
  return ok;
}

CheckingBackend::CheckingBackend(std::shared_ptr<VerbsBackend> inner,
                                 CheckOptions options)
    : ForwardingBackend(std::move(inner)),
      options_(std::move(options)),
      recv_check_(options_.trace_nic != nullptr &&
                  (options_.enabled.empty() ||
                   options_.enabled.count("recv-written") != 0)) {
  if (options_.set_landing && options_.trace_nic != nullptr) {
    options_.trace_nic->SetLanding(options_.landing);
  }
  if (options_.trace_nic != nullptr) {
    unsigned what = NicTap::kEvents;
    if (Enabled("source-changed")) what |= NicTap::kSourceReads;
    if (recv_check_) what |= NicTap::kNicWrites;
    tap_ = options_.trace_nic->AddTap(this, what);
  }
}

CheckingBackend::~CheckingBackend() {
  if (options_.trace_nic != nullptr) options_.trace_nic->RemoveTap(tap_);
}

void CheckingBackend::OnEvent(const FakeNicEvent& event) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (event.kind == FakeNicEvent::Kind::kCqOverrun) {
    // The event's opcode is the completion's own, before an error
    // completion's fields are zeroed (Personality::error_cqe_opcode_zero).
    lost_[{event.qp_num, (event.opcode & IBV_WC_RECV) != 0}].Add(event, 1);
  }
  if (event.kind == FakeNicEvent::Kind::kExecute &&
      FakeNic::OutOfPsnSequence(event.text)) {
    out_of_sequence_.emplace(event.qp_num, event);  // the QP's first
  }
  auto& ring = trace_[event.qp_num];
  ring.push_back(event);
  if (ring.size() > kTraceLines) ring.pop_front();
}

bool CheckingBackend::Enabled(const std::string& check) const {
  return options_.enabled.empty() || options_.enabled.count(check) != 0;
}

uint64_t CheckingBackend::FindingCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return findings_.size();
}

uint64_t CheckingBackend::FindingCount(const std::string& check) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& f : findings_) n += f.check == check;
  return n;
}

std::vector<ibv_cq*> CheckingBackend::Cqs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<uint64_t, ibv_cq*> by_serial;
  for (const auto& [key, state] : cqs_) {
    if (state.cq != nullptr) by_serial[state.serial] = state.cq;
  }
  std::vector<ibv_cq*> out;
  for (const auto& [serial, cq] : by_serial) out.push_back(cq);
  return out;
}

std::vector<Finding> CheckingBackend::Findings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return findings_;
}

std::string CheckingBackend::TraceLines(uint32_t qp_num) const {
  if (options_.trace_nic == nullptr || qp_num == 0) return "";
  std::lock_guard<std::mutex> lock(trace_mu_);
  auto it = trace_.find(qp_num);
  if (it == trace_.end()) return "";
  std::string out =
      "  the NIC's last trace lines for qp " + std::to_string(qp_num) + ":\n";
  for (const auto& e : it->second) out += "    " + ToString(e) + "\n";
  return out;
}

void CheckingBackend::Report(const std::string& check, const std::string& what,
                             const std::string& details, uint32_t qp_num,
                             const std::string* creation_stack,
                             const std::string& creation_where,
                             const char* stack_label) {
  Stack stack;
  if (creation_stack == nullptr) {
    stack = CaptureStack(/*skip=*/2);
  } else {
    stack.text = *creation_stack;
    stack.where = creation_where;
  }
  // Once per kind of finding and call stack. The kind is the message up to
  // its first ':' with the digits left out: sq-overflow and cq-overrun
  // messages carry counts that change with every post.
  std::string kind;
  for (char c : what.substr(0, what.find(':'))) {
    if (c < '0' || c > '9') kind += c;
  }
  std::string key = check + "|" + kind + "|" +
                    (creation_stack ? *creation_stack
                                    : std::to_string(StackHash(stack.frames)));
  auto it = finding_index_.find(key);
  if (it != finding_index_.end()) {
    ++findings_[it->second].times;
    return;
  }
  finding_index_[key] = findings_.size();
  Finding f;
  f.check = check;
  f.what = what;
  f.details = details;
  f.where = stack.where;
  findings_.push_back(f);
  if (!options_.print) return;
  std::ostringstream out;
  out << "==" << getpid() << "==RPMA-HARNESS CHECK [" << check << "]: " << what
      << "\n";
  if (creation_stack != nullptr) out << "  " << stack_label << ":\n";
  out << stack.text;
  out << details;
  out << TraceLines(qp_num);
  out << "SUMMARY: rpma-harness check " << check;
  if (!stack.where.empty()) out << " in " << stack.where;
  out << "\n";
  std::string text = out.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// ---- what the rpma layer tells -------------------------------------------

void CheckingBackend::CheckLength(const char* call, size_t len) {
  if (!Enabled("length") || len <= UINT32_MAX) return;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t moved = len & 0xffffffffull;
  Report("length",
         std::string(call) + ": len " + std::to_string(len) +
             " does not fit the 32-bit ibv_sge.length; the NIC moves " +
             std::to_string(moved) + " bytes and the call returns 0",
         "  why: ibv_sge.length is uint32_t (infiniband/verbs.h) and librpma "
         "1.3 casts len to it\n"
         "  fix: split the transfer into pieces of at most the port's "
         "max_msg_sz (2^31 bytes on InfiniBand/RoCE; ibv_query_port(3))\n",
         0);
}

void CheckingBackend::CheckRemoteRange(const char* call, size_t offset,
                                       size_t len, uint64_t size,
                                       uint64_t raddr, uint32_t rkey) {
  if (!Enabled("remote-range")) return;
  if (offset <= size && len <= size - offset) return;
  std::lock_guard<std::mutex> lock(mu_);
  Report("remote-range",
         std::string(call) + ": remote range [" + std::to_string(offset) +
             ", +" + std::to_string(len) + ") is past the " +
             std::to_string(size) + " bytes the peer's descriptor announced",
         "  remote MR " + Hex(raddr) + " rkey " + Hex(rkey) + " size " +
             std::to_string(size) +
             "\n  what a NIC does: REM_ACCESS_ERR at completion when the "
             "range leaves the MR (IB spec 9.7.5.1.3; rxe_resp.c "
             "check_rkey), both QPs then in ERR -- or, when the peer "
             "registered more than it announced, a silent write past the "
             "announced end\n"
             "  fix: check dst_offset + len <= rpma_mr_remote_get_size(3) "
             "before posting\n",
         0);
}

void CheckingBackend::NoteCreated(const char* kind, const void* object) {
  if (!Enabled("leak") || object == nullptr) return;
  Stack stack = CaptureStack(/*skip=*/2);
  std::lock_guard<std::mutex> lock(mu_);
  live_[object] = LiveObject{kind, stack.text, stack.where};
}

void CheckingBackend::NoteDeleted(const void* object) {
  if (!Enabled("leak") || object == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(object);
}

void CheckingBackend::ExemptFromOverlap(uintptr_t addr, size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  exempt_.push_back(Range{addr, len});
}

size_t CheckingBackend::ReportLiveObjects() {
  if (!Enabled("leak")) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [object, live] : live_) {
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%p", object);
    static const std::map<std::string, std::string> kRelease = {
        {"rpma_peer", "rpma_peer_delete"},
        {"rpma_ep", "rpma_ep_shutdown"},
        {"rpma_conn_req", "rpma_conn_req_delete (or _connect)"},
        {"rpma_conn", "rpma_conn_disconnect + rpma_conn_delete"},
        {"rpma_mr_local", "rpma_mr_dereg"},
        {"rpma_mr_remote", "rpma_mr_remote_delete"},
        {"rpma_srq", "rpma_srq_delete"},
    };
    auto release = kRelease.find(live.kind);
    Report("leak", live.kind + " " + addr + " is still alive at exit",
           "  fix: " +
               (release == kRelease.end() ? std::string("release it")
                                          : release->second) +
               "(3) before the program ends; with a real NIC its "
               "resources (pinned memory, QPs, CQs) stay until the process "
               "dies\n",
           0, &live.stack, live.where);
  }
  return live_.size();
}

void CheckingBackend::ExitIfStrict() {
  std::vector<Finding> findings = Findings();
  if (findings.empty()) return;
  std::map<std::string, uint64_t> per_check;
  for (const auto& f : findings) ++per_check[f.check];
  std::string line =
      "==" + std::to_string(getpid()) +
      "==rpma-harness check: " + std::to_string(findings.size()) +
      " finding(s):";
  for (const auto& [check, n] : per_check) {
    line += " " + check + "=" + std::to_string(n);
  }
  std::fprintf(stderr, "%s%s\n", line.c_str(),
               options_.strict ? " (strict: exiting with 66)" : "");
  if (options_.strict) {
    std::fflush(nullptr);
    _exit(kStrictExitCode);
  }
}

std::string CheckingBackend::Text(const WrSummary& wr) {
  std::ostringstream out;
  out << wr.queue << " " << wr.num << " wr_id " << Hex(wr.wr_id) << " ";
  if (wr.opcode < 0) {
    out << "RECV";
  } else {
    out << WrOpcodeName(wr.opcode)
        << ((wr.send_flags & IBV_SEND_SIGNALED) ? " signaled" : " unsignaled");
    if (wr.send_flags & IBV_SEND_INLINE) out << " inline";
  }
  if (wr.has_local) out << " local " << Hex(wr.local) << " +" << wr.len;
  if (wr.has_remote) {
    out << " remote " << Hex(wr.remote) << " rkey " << Hex(wr.rkey);
  }
  if (!wr.note.empty()) out << " " << wr.note;
  return out.str();
}

// ---- memory ----------------------------------------------------------------

namespace {

// FNV-1a over 8-byte words in four independent lanes (they keep the
// multiplier busy: ~4x one lane), folded to 32 bits: a chunk's fingerprint.
uint32_t HashChunk(const unsigned char* p, size_t n) {
  constexpr uint64_t kBasis = 1469598103934665603ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t lane[4] = {kBasis, kBasis ^ 1, kBasis ^ 2, kBasis ^ 3};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * kPrime;
    }
  }
  uint64_t h = lane[0] ^ (lane[1] * 3) ^ (lane[2] * 5) ^ (lane[3] * 7);
  for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

}  // namespace

uint64_t CheckingBackend::TotalLength(const std::vector<Range>& ranges) {
  uint64_t total = 0;
  for (const Range& r : ranges) total += r.len;
  return total;
}

bool CheckingBackend::HashChunks(const std::vector<Range>& ranges,
                                 uint64_t from, uint64_t to, uint32_t* out,
                                 uintptr_t* fault) {
  // Read through the fake's guarded copy (not FakeNic::NicWrite: the
  // checker is not the NIC, so no tap hears of it) so memory the program unmapped is
  // reported instead of crashing the checker. 4 KiB at a time: 16 chunks.
  unsigned char block[4096];
  uint64_t pos = from;
  while (pos < to) {
    const uint64_t n = std::min<uint64_t>(sizeof(block), to - pos);
    // Gather stream bytes [pos, pos + n) from the ranges.
    uint64_t skip = pos, got = 0;
    for (const Range& r : ranges) {
      if (got == n) break;
      if (skip >= r.len) {
        skip -= r.len;
        continue;
      }
      const uint64_t take = std::min(r.len - skip, n - got);
      if (!fake_nic_internal::GuardedCopy(
              block + got, reinterpret_cast<const void*>(r.addr + skip),
              static_cast<size_t>(take), fault)) {
        return false;
      }
      got += take;
      skip = 0;
    }
    for (uint64_t c = 0; c < got; c += kChunk) {
      out[(pos + c) / kChunk] =
          HashChunk(block + c, static_cast<size_t>(std::min(kChunk, got - c)));
    }
    if (got < n) break;  // past the stream's end
    pos += n;
  }
  return true;
}

bool CheckingBackend::Exempt(const Range& r) const {
  for (const Range& e : exempt_) {
    if (r.addr >= e.addr && r.addr + r.len <= e.addr + e.len) return true;
  }
  return false;
}

void CheckingBackend::CheckOverlap(uint32_t qp_num,
                                   const std::vector<Range>& local, bool sink,
                                   const Range* remote, uint32_t rkey,
                                   bool remote_written, const WrSummary& wr,
                                   bool include_recvs) {
  if (!Enabled("overlap")) return;
  auto against = [&](const std::vector<Range>& other, bool other_sink,
                     const WrSummary& other_wr) {
    if (!sink && !other_sink) return false;  // two readers are fine
    for (const Range& a : local) {
      if (Exempt(a)) continue;
      for (const Range& b : other) {
        if (!Overlap(a.addr, a.len, b.addr, b.len)) continue;
        Report("overlap",
               std::string(sink ? "the NIC may write" : "the NIC reads") +
                   " local memory " + Hex(a.addr) + " +" +
                   std::to_string(a.len) + " that an outstanding operation " +
                   (other_sink ? "receives into" : "still reads"),
               "  new WR:         " + Text(wr) +
                   "\n  outstanding WR: " + Text(other_wr) +
                   "\n  why: ibv_post_send(3)/ibv_post_recv(3): a buffer "
                   "belongs to the NIC until its WR completes; the two "
                   "operations race and the result depends on the NIC\n"
                   "  fix: reap the outstanding WR's completion (or, for an "
                   "unsignaled WR, a later signaled one's) before reusing "
                   "the memory, or use separate buffers\n",
               qp_num);
        return true;
      }
    }
    return false;
  };
  for (const auto& [num, qs] : qps_) {
    for (const auto& s : qs.sends) {
      if (against(s.local, s.local_is_sink, s.wr)) return;
      if (remote != nullptr && num != qp_num && s.rkey == rkey &&
          (remote_written || s.remote_written) &&
          Overlap(remote->addr, remote->len, s.remote.addr, s.remote.len)) {
        Report("overlap",
               "two outstanding operations of different QPs touch "
               "overlapping remote memory " +
                   Hex(remote->addr) + " and at least one writes it",
               "  new WR:         " + Text(wr) +
                   "\n  outstanding WR: " + Text(s.wr) +
                   "\n  why: the IB spec orders operations within one QP "
                   "only (o9-21); across QPs the responder may apply them "
                   "in any order\n"
                   "  fix: wait for one completion before posting the "
                   "other, or give each connection its own range\n",
               qp_num);
        return;
      }
    }
    if (!include_recvs) continue;
    for (const auto& r : qs.recvs) {
      if (against(r.local, true, r.wr)) return;
    }
  }
  if (!include_recvs) return;
  for (const auto& [srq, recvs] : srq_recvs_) {
    for (const auto& r : recvs) {
      if (against(r.local, true, r.wr)) return;
    }
  }
}

// ---- completions
// -------------------------------------------------------------

namespace {

// "bytes [lo, hi) (packets #a-#b of n, path MTU m)" for chunk indexes
// [first, last] of a `total`-byte source.
std::string ChunkSpan(uint64_t first, uint64_t last, uint64_t chunk,
                      uint64_t total, uint32_t mtu) {
  const uint64_t lo = first * chunk;
  const uint64_t hi = std::min(total, (last + 1) * chunk);
  std::string out = "bytes [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    ") of " + std::to_string(total);
  if (mtu != 0 && total > mtu) {
    const uint64_t packets = (total + mtu - 1) / mtu;
    const uint64_t a = lo / mtu, b = (hi - 1) / mtu;
    out += " (packet" + std::string(a == b ? " #" : "s #") + std::to_string(a) +
           (a == b ? "" : "-#" + std::to_string(b)) + " of " +
           std::to_string(packets) + ", path MTU " + std::to_string(mtu) + ")";
  }
  return out;
}

// The first and last index where `differs` holds, or false.
template <typename Pred>
bool Span(size_t n, Pred differs, uint64_t* first, uint64_t* last) {
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (!differs(i)) continue;
    if (!any) *first = i;
    *last = i;
    any = true;
  }
  return any;
}

}  // namespace

void CheckingBackend::CompareSource(const OutstandingSend& s, uint32_t qp_num) {
  const size_t n = s.post_chunks.size();
  std::vector<uint32_t> now(n);
  uintptr_t fault = 0;
  if (!HashChunks(s.local, 0, s.total, now.data(), &fault)) {
    if (Enabled("mr-unmapped")) {
      Report("mr-unmapped",
             "the source of an outstanding WR became unreadable (fault "
             "at " +
                 Hex(fault) + ") before its completion was reaped",
             "  WR: " + Text(s.wr) +
                 "\n  fix: unmap or free registered memory only after " +
                 Call("rpma_mr_dereg(3)", "ibv_dereg_mr(3)") +
                 " and after every WR using it completed\n",
             qp_num);
    }
    return;
  }
  if (!Enabled("source-changed")) return;
  const bool tapped = !s.read_mask.empty();
  auto read = [&](size_t i) { return tapped && s.read_mask[i] != 0; };
  uint64_t first = 0, last = 0;
  const std::string op = WrOpcodeName(s.opcode);
  const std::string fix =
      "  fix: change the buffer only after " +
      Call("rpma_cq_get_wc(3)", "ibv_poll_cq(3)") +
      " returned this WR's completion (for an unsignaled WR: a later "
      "signaled one's), or write from another buffer\n";
  // Before the NIC read it: what went on the wire differs from the post.
  if (Span(
          n,
          [&](size_t i) {
            return read(i) && s.read_chunks[i] != s.post_chunks[i];
          },
          &first, &last)) {
    uint64_t f2 = 0, l2 = 0;
    const bool again = Span(
        n, [&](size_t i) { return read(i) && now[i] != s.read_chunks[i]; }, &f2,
        &l2);
    Report("source-changed",
           "the source of a posted " + op +
               " changed before the NIC read it (the peer got the NEW "
               "bytes)",
           "  WR: " + Text(s.wr) + "\n  changed: " +
               ChunkSpan(first, last, kChunk, s.total, s.mtu) +
               ", compared in " + std::to_string(kChunk) +
               "-byte blocks when the fake NIC read them" +
               (again ? "; changed again after the read" : "") +
               "\n  why: ibv_post_send(3): the buffers may not be modified "
               "until the WR completes; here the NIC read them after the "
               "change, so the peer got bytes the program wrote after the "
               "post -- on hardware the read may come at any moment, so "
               "the peer may get old, new or mixed bytes\n" +
               fix,
           qp_num);
    return;
  }
  // After the NIC read it, before the reap.
  if (Span(
          n, [&](size_t i) { return read(i) && now[i] != s.read_chunks[i]; },
          &first, &last)) {
    Report("source-changed",
           "the source of a posted " + op +
               " changed after the NIC read it but before its completion "
               "was reaped (the peer got the OLD bytes; on hardware "
               "undefined)",
           "  WR: " + Text(s.wr) + "\n  changed: " +
               ChunkSpan(first, last, kChunk, s.total, s.mtu) +
               "\n  why: ibv_post_send(3): the buffers may not be modified "
               "until the WR completes; the fake read them before the "
               "change, a real NIC may read them later (or again, on a "
               "retransmission), so on hardware the peer may get the new "
               "or mixed bytes\n" +
               fix,
           qp_num);
    return;
  }
  // Not seen by the NIC (no execution tap: rdma-core, or a WR that ended
  // before its source was read): post against reap only.
  if (Span(
          n, [&](size_t i) { return !read(i) && now[i] != s.post_chunks[i]; },
          &first, &last)) {
    Report("source-changed",
           "the source of a posted " + op +
               " changed between the post and the reaping of its "
               "completion",
           "  WR: " + Text(s.wr) +
               "\n  changed: " + ChunkSpan(first, last, kChunk, s.total, 0) +
               (options_.trace_nic == nullptr
                    ? " (compared at post and at reap: this backend has no "
                      "execution tap)"
                    : "") +
               "\n  why: ibv_post_send(3): the buffers may not be "
               "modified until the WR completes; a real NIC reads them "
               "at any moment in between (several times, on a "
               "retransmission), so the peer may get old, new or mixed "
               "bytes\n" +
               fix,
           qp_num);
  }
}

void CheckingBackend::ReapSend(QpState* qs, const ibv_wc& wc) {
  auto retire = [&](OutstandingSend& s, bool compare) {
    if (s.signaled && qs->send_cq != nullptr) {
      auto cq = cqs_.find(qs->send_cq);
      if (cq != cqs_.end() && cq->second.signaled_outstanding > 0) {
        --cq->second.signaled_outstanding;
      }
    }
    if (compare && s.has_hash) CompareSource(s, qs->qp_num);
  };
  if (wc.status != IBV_WC_SUCCESS) {
    // An error completes exactly one WR (signaled or not); the QP is in
    // ERR and every later WR flushes with its own error completion.
    qs->in_error = true;
    if (!qs->sends.empty()) {
      retire(qs->sends.front(), false);
      qs->sends.pop_front();
    }
    return;
  }
  // In-order completion on an RC send queue: a success completion retires
  // its WR and every unsignaled WR posted before it (IB spec 10.8.3;
  // rdma-core mlx5 cq.c frees the SQ up to the completed WQE at poll).
  while (!qs->sends.empty()) {
    OutstandingSend s = std::move(qs->sends.front());
    qs->sends.pop_front();
    bool last = s.signaled || qs->sq_sig_all;
    retire(s, true);
    if (last) break;
  }
}

void CheckingBackend::ReapRecv(QpState* qs, const ibv_wc& wc) {
  std::deque<OutstandingRecv>* recvs =
      qs->srq != nullptr ? &srq_recvs_[qs->srq] : &qs->recvs;
  if (recvs->empty()) return;
  // An RQ is consumed in order; an SRQ in the order of its posts too, but
  // interleaved between QPs: take the oldest receive with this wr_id.
  auto it = recvs->begin();
  for (; it != recvs->end(); ++it) {
    if (it->wr_id == wc.wr_id) break;
  }
  if (it == recvs->end()) it = recvs->begin();
  if (qs->srq != nullptr) {
    // recv-written: an SRQ's receives are taken in any order across its
    // QPs, so when several outstanding ones share this wr_id the checker
    // cannot tell which completed; it compares none of them (comparing the
    // wrong one would report the program's legitimate reuse of the buffer
    // whose completion it did get).
    bool ambiguous = false;
    for (auto other = std::next(it); other != recvs->end(); ++other) {
      if (other->wr_id == it->wr_id && other->has_hash) {
        other->has_hash = false;
        ambiguous = true;
      }
    }
    if (ambiguous) it->has_hash = false;
  }
  CompareRecv(&*it,
              wc.status == IBV_WC_SUCCESS
                  ? "when its completion was reaped"
                  : "when its flushed or failed completion was reaped",
              qs->qp_num);
  OutstandingRecv done = std::move(*it);
  recvs->erase(it);
  // Only a SEND places bytes in a receive buffer (a write with imm consumes
  // the receive but writes the remote address: IB spec 9.4.3), so a
  // receive buffer shared with other outstanding operations is a race
  // exactly when a SEND landed in it: the next message, or the NIC still
  // reading it for a send, may overwrite what the program now reads.
  if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
      wc.byte_len > 0) {
    std::vector<Range> landed;
    uint64_t left = wc.byte_len;
    for (const Range& r : done.local) {
      if (left == 0) break;
      landed.push_back(Range{r.addr, std::min(left, r.len)});
      left -= landed.back().len;
    }
    WrSummary wr = done.wr;
    wr.note = "(completed: a SEND of " + std::to_string(wc.byte_len) +
              " bytes landed)";
    CheckOverlap(qs->qp_num, landed, /*sink=*/true, nullptr, 0, false, wr,
                 /*include_recvs=*/true);
  }
}

// ---- the fake's taps ------------------------------------------------------

void CheckingBackend::OnSourceRead(const NicSourceRead& read) {
  std::lock_guard<std::mutex> lock(mu_);
  auto q = qps_.find(read.qp_num);
  if (q == qps_.end()) return;
  // The NIC executes a send queue in order: the WR is the oldest one not
  // yet wholly read with this wr_id, source and length (one that ended
  // without being read, by an injected fault, is passed over).
  for (OutstandingSend& s : q->second.sends) {
    if (!s.has_hash || s.read_done || s.wr_id != read.wr_id ||
        s.local.empty() || s.local[0].addr != read.first_addr ||
        s.total != read.total_length) {
      continue;
    }
    const size_t n = s.post_chunks.size();
    if (s.read_mask.empty()) {
      s.read_chunks.assign(n, 0);
      s.read_mask.assign(n, 0);
    }
    const uint64_t from = read.offset / kChunk * kChunk;
    const uint64_t to = std::min(s.total, read.offset + read.length);
    uintptr_t fault = 0;
    if (from < to &&
        HashChunks(s.local, from, to, s.read_chunks.data(), &fault)) {
      for (uint64_t c = from / kChunk; c < (to + kChunk - 1) / kChunk; ++c) {
        s.read_mask[c] = 1;
      }
    }
    s.mtu = read.mtu;
    if (to >= s.total) s.read_done = true;
    return;
  }
}

void CheckingBackend::OnNicWrite(uintptr_t dst, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto visit = [&](OutstandingRecv& r, uint32_t qp_num) {
    if (!r.has_hash) return;
    uint64_t stream = 0;
    bool hit = false;
    for (const Range& range : r.local) {
      const uint64_t a = std::max<uint64_t>(dst, range.addr);
      const uint64_t b = std::min<uint64_t>(dst + n, range.addr + range.len);
      if (a < b) {
        if (!hit && !r.nic_wrote) {
          // The NIC's first write into this buffer (a SEND landing, a
          // peer's write into memory shared with it): the whole buffer
          // is compared before the bytes land.
          CompareRecv(&r, "before the NIC wrote into it", qp_num);
          if (!r.has_hash) return;
        }
        hit = true;
        const uint64_t lo = (stream + a - range.addr) / kChunk;
        const uint64_t hi = (stream + b - range.addr + kChunk - 1) / kChunk;
        for (uint64_t c = lo; c < hi && c < r.nic_written.size(); ++c) {
          r.nic_written[c] = 1;
        }
      }
      stream += range.len;
    }
    if (hit) r.nic_wrote = true;
  };
  for (auto& [num, qs] : qps_) {
    for (auto& r : qs.recvs) visit(r, num);
  }
  for (auto& [srq, recvs] : srq_recvs_) {
    for (auto& r : recvs) visit(r, 0);
  }
}

// ---- VerbsBackend ----------------------------------------------------------

int CheckingBackend::DeregMr(ibv_mr* mr) {
  if (mr != nullptr) {
    // Memory may be freed once its MR is gone: the outstanding WRs over it
    // are no longer compared (their post was checked already).
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t lo = reinterpret_cast<uintptr_t>(mr->addr);
    for (auto& [num, qs] : qps_) {
      for (auto& s : qs.sends) {
        for (const Range& r : s.local) {
          if (Overlap(lo, mr->length, r.addr, r.len)) s.has_hash = false;
        }
      }
      for (auto& rv : qs.recvs) {
        for (const Range& r : rv.local) {
          if (Overlap(lo, mr->length, r.addr, r.len)) rv.has_hash = false;
        }
      }
    }
    for (auto& [srq, recvs] : srq_recvs_) {
      for (auto& rv : recvs) {
        for (const Range& r : rv.local) {
          if (Overlap(lo, mr->length, r.addr, r.len)) rv.has_hash = false;
        }
      }
    }
    exempt_.erase(std::remove_if(exempt_.begin(), exempt_.end(),
                                 [&](const Range& e) {
                                   return Overlap(lo, mr->length, e.addr,
                                                  e.len);
                                 }),
                  exempt_.end());
  }
  return target()->DeregMr(mr);
}

ibv_cq* CheckingBackend::CreateCq(ibv_context* ctx, int cqe, void* cq_context,
                                  ibv_comp_channel* channel, int comp_vector) {
  ibv_cq* cq = target()->CreateCq(ctx, cqe, cq_context, channel, comp_vector);
  if (cq != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    CqState state;
    state.depth = cq->cqe;
    state.serial = next_cq_serial_++;
    state.cq = cq;
    cqs_[cq] = state;
  }
  return cq;
}

int CheckingBackend::DestroyCq(ibv_cq* cq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cqs_.find(cq);
    if (it != cqs_.end() && it->second.events_unacked > 0 &&
        Enabled("cq-events")) {
      Report("cq-events",
             "ibv_destroy_cq with " +
                 std::to_string(it->second.events_unacked) +
                 " CQ event(s) not acknowledged",
             "  why: ibv_get_cq_event(3): every event must be acknowledged "
             "with ibv_ack_cq_events(3); ibv_destroy_cq(3) waits for that, "
             "so on rdma-core this call blocks forever\n"
             "  fix: ibv_ack_cq_events(cq, n) for every event got before "
             "destroying the CQ\n",
             0);
    }
  }
  int err = target()->DestroyCq(cq);
  if (err == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cqs_.erase(cq);
    lost_by_cq_.erase(cq);
  }
  return err;
}

int CheckingBackend::GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                                void** cq_context) {
  int rc = target()->GetCqEvent(channel, cq, cq_context);
  if (rc == 0 && cq != nullptr && *cq != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    ++cqs_[*cq].events_unacked;
  }
  return rc;
}

void CheckingBackend::AckCqEvents(ibv_cq* cq, unsigned int nevents) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cqs_.find(cq);
    if (it != cqs_.end()) {
      it->second.events_unacked -=
          std::min<uint64_t>(it->second.events_unacked, nevents);
    }
  }
  target()->AckCqEvents(cq, nevents);
}

void CheckingBackend::ReportOutOfSequence() {
  std::map<uint32_t, FakeNicEvent> told;
  {
    std::lock_guard<std::mutex> trace_lock(trace_mu_);
    if (out_of_sequence_.empty()) return;
    told.swap(out_of_sequence_);
  }
  if (!Enabled("psn")) return;
  for (const auto& [qp_num, event] : told) {
    char qp[16];
    snprintf(qp, sizeof(qp), "0x%x", qp_num);
    Report("psn",
           std::string("QP ") + qp + "'s request (wr_id " +
               std::to_string(event.wr_id) +
               ") did not carry the PSN its peer expects: " + event.text,
           "  why: ibv_modify_qp(3): a QP sends from the sq_psn its RTS set, "
           "and its peer's responder takes only the request carrying the "
           "PSN it expects -- the rq_psn its RTR set, advanced past each "
           "request (IB spec 9.7.1; rxe_resp.c check_psn). A request ahead "
           "of it is never answered (RETRY_EXC_ERR), one reaching it "
           "mid-message is an invalid request (REM_INV_REQ_ERR, the peer "
           "to ERR), and one wholly behind it is a duplicate: unanswered, "
           "or ACKed with nothing executed (success, nothing landed)\n"
           "  fix: give each QP's RTR as rq_psn the sq_psn its peer's RTS "
           "sets (exchange them with the QP numbers, as ibv_rc_pingpong "
           "does), and keep sending from where the QP is: a QP moved back "
           "to RTR needs its peer's current PSN\n",
           qp_num);
  }
}

void CheckingBackend::ReportCqOverrun(const ibv_cq* cq,
                                      const std::string& what) {
  auto it = cqs_.find(cq);
  if (it == cqs_.end() || it->second.overrun_reported ||
      !Enabled("cq-overrun")) {
    return;
  }
  it->second.overrun_reported = true;
  Report("cq-overrun", what,
         "  CQ depth " + std::to_string(it->second.depth) +
             "\n  why: ibv_create_cq(3): more completions than cqe entries "
             "unpolled overrun the CQ, an affiliated asynchronous error "
             "(IBV_EVENT_CQ_ERR, IB spec 11.4.2.1); most NICs then fail "
             "its polls and move its QPs to ERR, rxe drops the completion "
             "and goes on (rxe_cq.c rxe_cq_post) -- on either a completion "
             "is lost\n"
             "  fix: size the CQ for every completion that can be "
             "outstanding (signaled sends + posted receives), or poll "
             "more often\n",
         0);
}

void CheckingBackend::ReportLostCompletions(const ibv_cq* cq) {
  Lost mine;
  auto gone = lost_by_cq_.find(cq);
  if (gone != lost_by_cq_.end()) {
    mine = gone->second;
    lost_by_cq_.erase(gone);
  }
  {
    std::lock_guard<std::mutex> lock(trace_mu_);
    for (auto it = lost_.begin(); it != lost_.end();) {
      auto q = qps_.find(it->first.first);
      const bool recv = it->first.second;
      if (q == qps_.end() ||
          (recv ? q->second.recv_cq : q->second.send_cq) != cq) {
        ++it;
        continue;
      }
      mine.Add(it->second.first, it->second.count);
      it = lost_.erase(it);
    }
  }
  if (mine.count == 0) return;
  ReportCqOverrun(cq, "the CQ was full: the NIC lost " +
                          std::to_string(mine.count) +
                          " completion(s), the first of wr_id " +
                          std::to_string(mine.first.wr_id) + " (QP " +
                          std::to_string(mine.first.qp_num) + ", IBV_WC_" +
                          WcStatusName(mine.first.status) + ")");
}

int CheckingBackend::GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) {
  const int rc = target()->GetAsyncEvent(ctx, event);
  if (rc == 0 && event->event_type == IBV_EVENT_CQ_ERR) {
    std::lock_guard<std::mutex> lock(mu_);
    ReportCqOverrun(event->element.cq,
                    "IBV_EVENT_CQ_ERR: the CQ overran and lost a completion");
  }
  return rc;
}

int CheckingBackend::PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  int got = target()->PollCq(cq, num_entries, wc);
  std::lock_guard<std::mutex> lock(mu_);
  if (got < 0) {
    ReportCqOverrun(cq, "ibv_poll_cq failed (" + std::to_string(got) +
                            "): the CQ overran and lost a completion");
    return got;
  }
  ReportLostCompletions(cq);
  ReportOutOfSequence();
  for (int i = 0; i < got; ++i) {
    auto q = qps_.find(wc[i].qp_num);
    if (q == qps_.end()) continue;
    QpState& qs = q->second;
    bool recv;
    if (qs.send_cq != qs.recv_cq) {
      recv = cq == qs.recv_cq;
    } else {
      // One CQ for both queues: only the opcode tells (ibv_poll_cq(3)
      // leaves it undefined for an error; the fake and rxe set it).
      recv = (wc[i].opcode & kWcRecvFlag) != 0;
    }
    if (recv) {
      ReapRecv(&qs, wc[i]);
    } else {
      ReapSend(&qs, wc[i]);
    }
  }
  return got;
}

int CheckingBackend::PostSend(ibv_qp* qp, ibv_send_wr* wr,
                              ibv_send_wr** bad_wr) {
  if (qp == nullptr) return target()->PostSend(qp, wr, bad_wr);
  const bool hash = Enabled("source-changed") || Enabled("mr-unmapped");
  std::vector<OutstandingSend> posts;
  // sq-overflow / cq-overrun findings wait for the post's verdict: a post
  // the NIC refuses (ENOMEM on a full queue) overflowed nothing.
  struct Deferred {
    size_t index;  // in posts
    std::string check, what, details;
    uint32_t qp_num;
  };
  std::vector<Deferred> deferred;
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    OutstandingSend s;
    s.wr_id = w->wr_id;
    const ibv_wr_opcode opcode = PostedOpcode(*w);
    s.opcode = opcode;
    s.signaled = (w->send_flags & IBV_SEND_SIGNALED) != 0;
    s.local_is_sink = IsSinkOpcode(opcode);
    const bool inline_data = (w->send_flags & IBV_SEND_INLINE) != 0;
    if (!inline_data && w->num_sge > 0 && w->sg_list != nullptr) {
      for (int i = 0; i < w->num_sge; ++i) {
        s.local.push_back(Range{w->sg_list[i].addr, w->sg_list[i].length});
      }
    }
    if (HasRemote(opcode)) {
      bool atomic = opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                    opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
      uint64_t total = 0;
      for (int i = 0; i < w->num_sge && w->sg_list != nullptr; ++i) {
        total += w->sg_list[i].length;
      }
      s.remote = Range{
          atomic ? w->wr.atomic.remote_addr : w->wr.rdma.remote_addr, total};
      s.rkey = atomic ? w->wr.atomic.rkey : w->wr.rdma.rkey;
      s.remote_written = IsRemoteWrite(opcode);
    }
    s.wr.num = qp->qp_num;
    s.wr.wr_id = w->wr_id;
    s.wr.opcode = opcode;
    s.wr.send_flags = w->send_flags;
    if (w->num_sge > 0 && w->sg_list != nullptr) {
      s.wr.has_local = true;
      s.wr.local = w->sg_list[0].addr;
      for (int i = 0; i < w->num_sge; ++i) s.wr.len += w->sg_list[i].length;
    }
    if (HasRemote(opcode)) {
      s.wr.has_remote = true;
      s.wr.remote = s.remote.addr;
      s.wr.rkey = s.rkey;
    }
    if (hash && !s.local_is_sink && !s.local.empty()) {
      uintptr_t fault = 0;
      s.total = TotalLength(s.local);
      s.post_chunks.resize((s.total + kChunk - 1) / kChunk);
      if (HashChunks(s.local, 0, s.total, s.post_chunks.data(), &fault)) {
        s.has_hash = true;
      } else if (Enabled("mr-unmapped")) {
        std::lock_guard<std::mutex> lock(mu_);
        Report("mr-unmapped",
               "the source of a posted WR is registered but unreadable "
               "(fault at " +
                   Hex(fault) + ")",
               "  WR: " + Text(s.wr) +
                   "\n  why: a real NIC pinned the pages at ibv_reg_mr(3) "
                   "and keeps using them: it sends what was there, and the "
                   "program has freed memory the NIC still owns\n"
                   "  fix: " +
                   Call("rpma_mr_dereg(3)", "ibv_dereg_mr(3)") +
                   " before munmap/free\n",
               qp->qp_num);
      }
    }
    posts.push_back(std::move(s));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    QpState& qs = qps_[qp->qp_num];
    qs.qp_num = qp->qp_num;
    for (auto& s : posts) {
      if (!qs.in_error) {
        CheckOverlap(qs.qp_num, s.local, s.local_is_sink,
                     HasRemote(s.opcode) ? &s.remote : nullptr, s.rkey,
                     s.remote_written, s.wr,
                     /*include_recvs=*/false);
      }
      const bool signaled = s.signaled || qs.sq_sig_all;
      qs.sends.push_back(s);
      if (qs.in_error) continue;
      if (qs.sq_depth != 0 && qs.sends.size() > qs.sq_depth &&
          Enabled("sq-overflow")) {
        std::string unsignaled_run;
        size_t unsignaled = 0;
        for (const auto& o : qs.sends) unsignaled += !o.signaled;
        deferred.push_back(
            {static_cast<size_t>(&s - posts.data()), "sq-overflow",
             std::to_string(qs.sends.size()) +
                 " WRs outstanding on a send queue of depth " +
                 std::to_string(qs.sq_depth) + " (" +
                 std::to_string(unsignaled) + " unsignaled)",
             "  newest WR: " + Text(s.wr) +
                 "\n  oldest WR: " + Text(qs.sends.front().wr) +
                 "\n  why: a send queue slot is freed only when the "
                 "completion of its WR, or of a later signaled WR, is "
                 "polled (rdma-core providers/mlx5/cq.c advances the SQ "
                 "tail at poll); this fake frees slots at execution, a "
                 "real NIC fails the post with ENOMEM or overwrites "
                 "queued WQEs\n"
                 "  fix: signal at least one WR in every " +
                 Call("sq_size (RPMA_F_COMPLETION_ALWAYS)",
                      "max_send_wr (IBV_SEND_SIGNALED)") +
                 " and reap its completion\n",
             qs.qp_num});
      }
      if (signaled && qs.send_cq != nullptr) {
        auto cq = cqs_.find(qs.send_cq);
        if (cq != cqs_.end()) {
          ++cq->second.signaled_outstanding;
          if (cq->second.signaled_outstanding >
                  static_cast<uint64_t>(cq->second.depth) &&
              Enabled("cq-overrun")) {
            deferred.push_back(
                {static_cast<size_t>(&s - posts.data()), "cq-overrun",
                 std::to_string(cq->second.signaled_outstanding) +
                     " signaled WRs outstanding on a CQ of " +
                     std::to_string(cq->second.depth) + " entries",
                 "  newest WR: " + Text(s.wr) +
                     "\n  why: every signaled WR puts a completion in "
                     "the CQ; once more than cqe are unpolled the CQ "
                     "overruns (ibv_create_cq(3)) and its QPs go to "
                     "ERR\n"
                     "  fix: poll completions before posting more, or "
                     "create a larger CQ (" +
                     Call("rpma_conn_cfg_set_cq_size(3)",
                          "ibv_create_cq(3) with more entries") +
                     ")\n",
                 qs.qp_num});
          }
        }
      }
    }
  }
  int rc = target()->PostSend(qp, wr, bad_wr);
  if (!deferred.empty()) {
    size_t posted = posts.size();
    if (rc != 0) {
      posted = 0;
      for (ibv_send_wr* w = wr;
           w != nullptr && bad_wr != nullptr && w != *bad_wr; w = w->next) {
        ++posted;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const Deferred& d : deferred) {
      if (d.index < posted) Report(d.check, d.what, d.details, d.qp_num);
    }
  }
  if (rc != 0) {
    // The WRs from *bad_wr on were not posted: forget them (newest first).
    size_t unposted = 0;
    bool counting = false;
    for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
      if (bad_wr != nullptr && w == *bad_wr) counting = true;
      if (counting) ++unposted;
    }
    if (bad_wr == nullptr || *bad_wr == nullptr) unposted = posts.size();
    std::lock_guard<std::mutex> lock(mu_);
    QpState& qs = qps_[qp->qp_num];
    for (size_t i = 0; i < unposted && !qs.sends.empty(); ++i) {
      const OutstandingSend& s = qs.sends.back();
      if ((s.signaled || qs.sq_sig_all) && qs.send_cq != nullptr) {
        auto cq = cqs_.find(qs.send_cq);
        if (cq != cqs_.end() && cq->second.signaled_outstanding > 0) {
          --cq->second.signaled_outstanding;
        }
      }
      qs.sends.pop_back();
    }
  }
  return rc;
}

namespace {

template <typename RecvList>
void CollectRecvs(ibv_recv_wr* wr, RecvList* out, const char* queue,
                  uint32_t num) {
  for (ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
    typename RecvList::value_type r;
    r.wr_id = w->wr_id;
    r.wr.queue = queue;
    r.wr.num = num;
    r.wr.wr_id = w->wr_id;
    for (int i = 0; i < w->num_sge && w->sg_list != nullptr; ++i) {
      r.local.push_back({w->sg_list[i].addr, w->sg_list[i].length});
      r.wr.len += w->sg_list[i].length;
    }
    if (!r.local.empty()) {
      r.wr.has_local = true;
      r.wr.local = r.local[0].addr;
    }
    out->push_back(std::move(r));
  }
}

size_t Unposted(ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  size_t n = 0;
  bool counting = bad_wr == nullptr || *bad_wr == nullptr;
  for (ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
    if (bad_wr != nullptr && w == *bad_wr) counting = true;
    if (counting) ++n;
  }
  return n;
}

}  // namespace

void CheckingBackend::HashNewRecvs(std::vector<OutstandingRecv>* posts) {
  if (!recv_check_ || posts->empty()) return;
  // The post_recv's stack, symbolized only for a report: 12 frames reach
  // the user's call (PostRecv, the rpma layer's post, rpma_recv, then the
  // user's) and several of its callers.
  void* pcs[12];
  const int depth = FastBacktrace(pcs, 12, /*min=*/3);
  for (OutstandingRecv& r : *posts) {
    r.total = TotalLength(r.local);
    if (r.total == 0) continue;
    r.post_chunks.resize((r.total + kChunk - 1) / kChunk);
    uintptr_t fault = 0;
    // Unreadable memory: the NIC's own write will report it.
    if (!HashChunks(r.local, 0, r.total, r.post_chunks.data(), &fault)) {
      continue;
    }
    r.nic_written.assign(r.post_chunks.size(), 0);
    r.post_frames.assign(pcs, pcs + depth);
    r.has_hash = true;
  }
}

void CheckingBackend::CompareRecv(OutstandingRecv* r, const char* moment,
                                  uint32_t qp_num) {
  if (!r->has_hash) return;
  const size_t n = r->post_chunks.size();
  std::vector<uint32_t> now(n);
  uintptr_t fault = 0;
  if (!HashChunks(r->local, 0, r->total, now.data(), &fault)) return;
  uint64_t first = 0, last = 0;
  if (!Span(
          n,
          [&](size_t i) {
            return r->nic_written[i] == 0 && now[i] != r->post_chunks[i];
          },
          &first, &last)) {
    return;
  }
  r->has_hash = false;  // once per receive
  const Stack posted =
      SymbolizeStack(r->post_frames.data(),
                     static_cast<int>(r->post_frames.size()), /*skip=*/0);
  Report("recv-written",
         "the program wrote into the buffer of an outstanding receive "
         "(seen " +
             std::string(moment) + ")",
         "  receive: " + Text(r->wr) +
             "\n  changed: " + ChunkSpan(first, last, kChunk, r->total, 0) +
             " (compared with its bytes at post_recv, in " +
             std::to_string(kChunk) +
             "-byte blocks; bytes the NIC wrote are left out)\n"
             "  why: ibv_post_recv(3): the buffers of a WR can only be "
             "safely reused after the request is fully executed and its "
             "work completion has been retrieved; a SEND landing there "
             "overwrites what the program wrote, or mixes with it\n"
             "  fix: write into a receive buffer only after " +
                 Call("rpma_cq_get_wc(3)", "ibv_poll_cq(3)") +
                 " returned its receive's completion, or use another "
                 "buffer\n",
         qp_num, &posted.text, posted.where, "receive posted at");
}

int CheckingBackend::PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                              ibv_recv_wr** bad_wr) {
  if (qp == nullptr) return target()->PostRecv(qp, wr, bad_wr);
  std::vector<OutstandingRecv> posts;
  CollectRecvs(wr, &posts, "qp", qp->qp_num);
  HashNewRecvs(&posts);
  {
    std::lock_guard<std::mutex> lock(mu_);
    QpState& qs = qps_[qp->qp_num];
    qs.qp_num = qp->qp_num;
    // Checked when a SEND lands in it (ReapRecv), not at post.
    for (auto& r : posts) qs.recvs.push_back(r);
  }
  int rc = target()->PostRecv(qp, wr, bad_wr);
  if (rc != 0) {
    size_t n = Unposted(wr, bad_wr);
    std::lock_guard<std::mutex> lock(mu_);
    QpState& qs = qps_[qp->qp_num];
    for (size_t i = 0; i < n && !qs.recvs.empty(); ++i) qs.recvs.pop_back();
  }
  return rc;
}

int CheckingBackend::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                                 ibv_recv_wr** bad_wr) {
  if (srq == nullptr) return target()->PostSrqRecv(srq, wr, bad_wr);
  std::vector<OutstandingRecv> posts;
  CollectRecvs(wr, &posts, "srq", srq->handle);
  HashNewRecvs(&posts);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& recvs = srq_recvs_[srq];
    for (auto& r : posts) recvs.push_back(r);
  }
  int rc = target()->PostSrqRecv(srq, wr, bad_wr);
  if (rc != 0) {
    size_t n = Unposted(wr, bad_wr);
    std::lock_guard<std::mutex> lock(mu_);
    auto& recvs = srq_recvs_[srq];
    for (size_t i = 0; i < n && !recvs.empty(); ++i) recvs.pop_back();
  }
  return rc;
}

int CheckingBackend::CreateQp(rdma_cm_id* id, ibv_pd* pd,
                              ibv_qp_init_attr* init_attr) {
  int rc = target()->CreateQp(id, pd, init_attr);
  if (rc == 0 && id != nullptr && id->qp != nullptr && init_attr != nullptr) {
    TrackQp(id->qp, *init_attr);
  }
  return rc;
}

ibv_qp* CheckingBackend::CreateVerbsQp(ibv_pd* pd,
                                       ibv_qp_init_attr* init_attr) {
  ibv_qp* qp = target()->CreateVerbsQp(pd, init_attr);
  if (qp != nullptr && init_attr != nullptr) TrackQp(qp, *init_attr);
  return qp;
}

void CheckingBackend::TrackQp(ibv_qp* qp, const ibv_qp_init_attr& init_attr) {
  std::lock_guard<std::mutex> lock(mu_);
  QpState& qs = qps_[qp->qp_num];
  qs = QpState();
  qs.qp = qp;
  qs.qp_num = qp->qp_num;
  // The depth the program was told: ibv_create_qp(3) writes it back into
  // cap (rxe writes back the depth asked for, though its ring holds more;
  // a post beyond it works on rxe and fails on a NIC that grants exactly
  // that depth).
  qs.sq_depth = init_attr.cap.max_send_wr;
  qs.serial = ++next_qp_serial_;
  qs.sq_sig_all = init_attr.sq_sig_all != 0;
  qs.send_cq = init_attr.send_cq;
  qs.recv_cq = init_attr.recv_cq;
  qs.srq = init_attr.srq;
}

void CheckingBackend::ForgetQp(uint32_t qp_num) {
  auto it = qps_.find(qp_num);
  if (it == qps_.end()) return;
  for (auto& r : it->second.recvs) {
    CompareRecv(&r, "when its QP was destroyed", it->second.qp_num);
  }
  // Its outstanding WRs are gone with it; their signaled completions
  // will never reach the CQ.
  for (const auto& s : it->second.sends) {
    if ((s.signaled || it->second.sq_sig_all) &&
        it->second.send_cq != nullptr) {
      auto cq = cqs_.find(it->second.send_cq);
      if (cq != cqs_.end() && cq->second.signaled_outstanding > 0) {
        --cq->second.signaled_outstanding;
      }
    }
  }
  // Completions it lost wait for its CQs' next poll all the same.
  {
    std::lock_guard<std::mutex> trace_lock(trace_mu_);
    for (bool recv : {false, true}) {
      auto lost = lost_.find({it->second.qp_num, recv});
      if (lost == lost_.end()) continue;
      ibv_cq* cq = recv ? it->second.recv_cq : it->second.send_cq;
      if (cq != nullptr) {
        lost_by_cq_[cq].Add(lost->second.first, lost->second.count);
      }
      lost_.erase(lost);
    }
  }
  qps_.erase(it);
}

void CheckingBackend::DropQpTrace(uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  trace_.erase(qp_num);
  // Lost after the checker let go of the QP (nothing to tie them to).
  lost_.erase({qp_num, false});
  lost_.erase({qp_num, true});
}

void CheckingBackend::DestroyQp(rdma_cm_id* id) {
  const uint32_t qp_num =
      id != nullptr && id->qp != nullptr ? id->qp->qp_num : 0;
  if (qp_num != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    ForgetQp(qp_num);
  }
  target()->DestroyQp(id);
  if (qp_num != 0) DropQpTrace(qp_num);
}

int CheckingBackend::DestroyVerbsQp(ibv_qp* qp) {
  // Forgotten only once gone: ibv_destroy_qp(3) may refuse (the QP is
  // still the program's then, and still watched). The serial tells this
  // QP from one another thread made meanwhile with the number it freed.
  const uint32_t qp_num = qp != nullptr ? qp->qp_num : 0;
  uint64_t serial = 0;
  if (qp_num != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = qps_.find(qp_num);
    if (it != qps_.end() && it->second.qp == qp) serial = it->second.serial;
  }
  const int rc = target()->DestroyVerbsQp(qp);
  if (rc == 0 && serial == 0 && qp_num != 0) DropQpTrace(qp_num);
  if (rc == 0 && serial != 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = qps_.find(qp_num);
      if (it == qps_.end() || it->second.serial != serial) return rc;
      ForgetQp(qp_num);
    }
    DropQpTrace(qp_num);
  }
  return rc;
}

int CheckingBackend::DestroySrq(ibv_srq* srq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = srq_recvs_.find(srq);
    if (it != srq_recvs_.end()) {
      for (auto& r : it->second) {
        CompareRecv(&r, "when its SRQ was destroyed", 0);
      }
    }
  }
  int rc = target()->DestroySrq(srq);
  if (rc == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    srq_recvs_.erase(srq);
  }
  return rc;
}

// ---- wiring ----------------------------------------------------------------

CheckingBackend* CheckerOf(VerbsBackend* backend) {
  if (backend == nullptr) return nullptr;
  return dynamic_cast<CheckingBackend*>(backend->library_checker());
}

namespace {

std::mutex& ExitMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
// Never destroyed: the at-exit report runs after static destructors may
// have started.
std::vector<std::shared_ptr<CheckingBackend>>& ExitCheckers() {
  static auto* v = new std::vector<std::shared_ptr<CheckingBackend>>;
  return *v;
}

void ReportAtExit() {
  std::vector<std::shared_ptr<CheckingBackend>> checkers;
  {
    std::lock_guard<std::mutex> lock(ExitMutex());
    checkers = ExitCheckers();
  }
  // One summary for the process, over every checker it made (one per
  // installed backend).
  std::map<std::string, uint64_t> per_check;
  uint64_t total = 0;
  bool strict = false;
  for (auto& c : checkers) {
    c->ReportLiveObjects();
    for (const Finding& f : c->Findings()) {
      ++per_check[f.check];
      ++total;
    }
    strict = strict || c->options().strict;
  }
  if (total == 0) return;
  std::string line = "==" + std::to_string(getpid()) +
                     "==rpma-harness check: " + std::to_string(total) +
                     " finding(s):";
  for (const auto& [check, n] : per_check) {
    line += " " + check + "=" + std::to_string(n);
  }
  std::fprintf(stderr, "%s%s\n", line.c_str(),
               strict ? " (strict: exiting with 66)" : "");
  if (strict) {
    std::fflush(nullptr);
    _exit(kStrictExitCode);
  }
}

}  // namespace

std::shared_ptr<VerbsBackend> WrapForCheckingFromEnvironment(
    std::shared_ptr<VerbsBackend> backend, bool verbs_program) {
  // env RPMA_HARNESS_CHECK=1|all|LIST|strict: run the program under the usage
  //   checker (docs/usage-checker.md): 1 or all every check, a comma-separated
  //   list of check names, `strict` (alone or in the list) makes any finding
  //   fail the process at exit with code 66; 0 or empty: off. An unknown name
  //   is reported and every check runs.
  const char* value = std::getenv("RPMA_HARNESS_CHECK");
  if (backend == nullptr || value == nullptr || *value == '\0' ||
      std::strcmp(value, "0") == 0 || CheckerOf(backend.get()) != nullptr) {
    return backend;
  }
  CheckOptions options;
  std::string why;
  if (!ParseCheckOptions(value, &options, &why)) {
    // As docs/usage-checker.md, "Any program" says: the mistake is reported
    // and every check runs (a typo must not quietly turn checks off).
    options.enabled.clear();
    std::fprintf(stderr,
                 "rpma-harness: RPMA_HARNESS_CHECK: %s; running every check\n",
                 why.c_str());
  }
  options.trace_nic = dynamic_cast<FakeNic*>(backend.get());
  options.verbs_program = verbs_program;
  auto checker = std::make_shared<CheckingBackend>(backend, options);
  std::lock_guard<std::mutex> lock(ExitMutex());
  if (ExitCheckers().empty()) std::atexit(ReportAtExit);
  ExitCheckers().push_back(checker);
  return checker;
}

}  // namespace rpma_harness
