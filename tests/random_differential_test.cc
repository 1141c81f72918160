// The seeded random differential: small verbs programs (writes with and
// without imm of random sizes around the path MTU, receives, wrong rkeys,
// out-of-bounds targets, an MR and a QP without remote write, inline data,
// RNR with rnr_retry 0 and 7, send-queue overflow by long chains, modify to
// ERR, a disconnect right after a post) run on live rxe and on the fake's
// rxe personality, and their full streams (conformance_fixture.h) must be
// equal.
//
//   - Inside the soft-RoCE VM (RPMA_HARNESS_BACKEND=rdma-core) every program
//     runs on rxe and, in the same process, on the fake; a difference is
//     shrunk to a minimal program, printed as a ready-to-paste C++ literal.
//     With RPMA_HARNESS_PRINT_STREAMS=1 rxe's streams are printed for the
//     recording tests/testdata/rxe_random_streams.txt.
//   - On a host the fake runs the same programs and is compared with that
//     recording.
//
// RPMA_HARNESS_RANDOM_PROGRAMS (default 200) and RPMA_HARNESS_RANDOM_SEED
// (default 1) choose the programs: seeds SEED .. SEED + N - 1. Thousands:
// tools/softroce_vm/random_differential.sh 3000
//
// On a host the same programs also run as two NICs joined by a fabric
// directory (the "fake_rxe_fabric" instance, against the same recording),
// and OneProcessAgreesWithTwo runs wider programs (SENDs, READs, atomics,
// receives with buffers; RPMA_HARNESS_FABRIC_PROGRAMS, default 150) in one
// process and as two NICs and compares everything, the client's buffer
// included.

#include <arpa/inet.h>
#include <errno.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/conformance_fixture.h"

namespace rpma_harness {
namespace {

enum class Fault { kNone, kBadRkey, kOutOfBounds, kReadOnlyMr, kInline };

// What a WriteOp posts. The recorded programs (rxe's streams) are all
// writes; the wider programs of OneProcessAgreesWithTwo use them all.
enum class OpKind : uint8_t { kWrite, kSend, kRead, kFetchAdd, kCmpSwap };

struct WriteOp {
  uint32_t size = 0;
  bool imm = true;  // WRITE_WITH_IMM, SEND_WITH_IMM
  bool signaled = true;
  Fault fault = Fault::kNone;
  uint32_t dst = 0;  // server buffer offset (READ: read from there)
  OpKind kind = OpKind::kWrite;
};

enum class StepKind {
  kRecv,                 // `count` receives (no SGE)
  kWrites,               // one PostSend of a chain of `writes`
  kServerErr,            // ibv_modify_qp(server, ERR)
  kClientErr,            // ibv_modify_qp(client, ERR)
  kServerNoRemoteWrite,  // server qp_access_flags = REMOTE_READ
  kDisconnect,           // rdma_disconnect(client)
};

struct Step {
  StepKind kind = StepKind::kRecv;
  int count = 0;
  std::vector<WriteOp> writes;
  // kRecv: each receive takes this many bytes of the server buffer (0: no
  // SGE), the r-th at offset r * recv_len.
  uint32_t recv_len = 0;
};

struct Program {
  uint64_t seed = 0;
  uint8_t rnr_retry = 0;
  uint32_t max_send_wr = 16;
  std::vector<Step> steps;
};

// splitmix64: the same numbers on every platform and compiler.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(Next() % n); }
  bool Chance(uint32_t percent) { return Below(100) < percent; }

 private:
  uint64_t state_;
};

constexpr uint32_t kBuffer = 64 * 1024;

// `wide`: also SENDs, READs and atomics, and receives with a buffer (the
// recorded seeds are generated without it: their programs never change).
Program Generate(uint64_t seed, bool wide = false) {
  Rng rng(seed * 0x2545f4914f6cdd1dull + 1);
  Program p;
  p.seed = seed;
  p.rnr_retry = rng.Chance(60) ? 0 : 7;
  p.max_send_wr = rng.Chance(30) ? 4 : 16;
  const uint32_t steps = 1 + rng.Below(6);
  // wide: the percentage of ops that keep the fault drawn for them.
  const uint32_t fault_share = wide ? 100 * rng.Below(3) / 2 : 100;
  if (wide && rng.Chance(70)) {
    // Receives first, so that more SENDs and writes with imm find one.
    Step recv;
    recv.kind = StepKind::kRecv;
    recv.count = 2 + static_cast<int>(rng.Below(7));
    recv.recv_len = rng.Chance(50) ? 4096 : 16384;
    p.steps.push_back(recv);
  }
  static const uint32_t kSizes[] = {0,    1,    64,   1023,  1024,
                                    1025, 2048, 4096, 65536, 3000};
  for (uint32_t s = 0; s < steps; ++s) {
    Step step;
    const uint32_t roll = rng.Below(100);
    if (roll < 30) {
      step.kind = StepKind::kRecv;
      step.count = 1 + static_cast<int>(rng.Below(3));
      if (wide && rng.Chance(70)) {
        static const uint32_t kRecvLens[] = {8, 1024, 3000, 4096, 16384};
        step.recv_len = kRecvLens[rng.Below(5)];
      }
    } else if (roll < 88) {
      step.kind = StepKind::kWrites;
      const uint32_t n = rng.Chance(15) ? 4 + rng.Below(8) : 1 + rng.Below(3);
      for (uint32_t i = 0; i < n; ++i) {
        WriteOp w;
        w.size = rng.Chance(70) ? kSizes[rng.Below(10)] : rng.Below(8193);
        w.imm = rng.Chance(75);
        w.signaled = rng.Chance(70);
        const uint32_t f = rng.Below(100);
        w.fault = f < 72   ? Fault::kNone
                  : f < 80 ? Fault::kBadRkey
                  : f < 87 ? Fault::kOutOfBounds
                  : f < 93 ? Fault::kReadOnlyMr
                           : Fault::kInline;
        if (w.fault == Fault::kInline) w.size = rng.Below(80);
        w.dst = w.size >= kBuffer ? 0 : rng.Below(kBuffer - w.size + 1);
        if (wide) {
          // Swarm style: each program its own share of faults, from none
          // to as many as the recorded programs have.
          if (rng.Below(100) >= fault_share) w.fault = Fault::kNone;
          const uint32_t k = rng.Below(100);
          w.kind = k < 45   ? OpKind::kWrite
                   : k < 75 ? OpKind::kSend
                   : k < 90 ? OpKind::kRead
                   : k < 95 ? OpKind::kFetchAdd
                            : OpKind::kCmpSwap;
          if (w.kind == OpKind::kRead && w.fault == Fault::kInline) {
            w.fault = Fault::kNone;  // a READ has no inline form
          }
          if (w.kind == OpKind::kFetchAdd || w.kind == OpKind::kCmpSwap) {
            w.size = 8;
            w.dst = rng.Chance(90) ? (rng.Below(kBuffer / 8)) * 8
                                   : rng.Below(kBuffer - 8);  // misaligned
            if (w.fault == Fault::kInline) w.fault = Fault::kNone;
          }
        }
        step.writes.push_back(w);
      }
    } else if (roll < 92) {
      step.kind = StepKind::kServerNoRemoteWrite;
    } else if (roll < 95) {
      // With rnr_retry 7 a write may be parked on RNR: it would meet the
      // responder in ERR (see below), so those programs take the client to
      // ERR instead (programs 350, 373, 455 of seeds 201..1200).
      step.kind = rng.Chance(50) && p.rnr_retry != 7 ? StepKind::kServerErr
                                                     : StepKind::kClientErr;
      if (step.kind == StepKind::kServerErr) {
        // A responder in ERR drops requests; rxe's requester then retries
        // for retry_cnt x 4.096 us x 2^timeout (~17 s at rdma_cm's timeout
        // 19) before RETRY_EXC_ERR, the fake fails at once (time is steps,
        // docs/fidelity.md, "Differences that remain"). So nothing is sent
        // after it, but receives posted in ERR are.
        p.steps.push_back(step);
        if (rng.Chance(60)) {
          Step recv;
          recv.kind = StepKind::kRecv;
          recv.count = 1 + static_cast<int>(rng.Below(3));
          p.steps.push_back(recv);
        }
        break;
      }
    } else {
      step.kind = StepKind::kDisconnect;
    }
    p.steps.push_back(step);
    if (step.kind == StepKind::kDisconnect) break;
  }
  return p;
}

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "Fault::kNone";
    case Fault::kBadRkey:
      return "Fault::kBadRkey";
    case Fault::kOutOfBounds:
      return "Fault::kOutOfBounds";
    case Fault::kReadOnlyMr:
      return "Fault::kReadOnlyMr";
    case Fault::kInline:
      return "Fault::kInline";
  }
  return "?";
}

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kWrite:
      return "OpKind::kWrite";
    case OpKind::kSend:
      return "OpKind::kSend";
    case OpKind::kRead:
      return "OpKind::kRead";
    case OpKind::kFetchAdd:
      return "OpKind::kFetchAdd";
    case OpKind::kCmpSwap:
      return "OpKind::kCmpSwap";
  }
  return "?";
}

const char* KindName(StepKind k) {
  switch (k) {
    case StepKind::kRecv:
      return "StepKind::kRecv";
    case StepKind::kWrites:
      return "StepKind::kWrites";
    case StepKind::kServerErr:
      return "StepKind::kServerErr";
    case StepKind::kClientErr:
      return "StepKind::kClientErr";
    case StepKind::kServerNoRemoteWrite:
      return "StepKind::kServerNoRemoteWrite";
    case StepKind::kDisconnect:
      return "StepKind::kDisconnect";
  }
  return "?";
}

// The program as a C++ literal for RegressionPrograms() below.
std::string AsCode(const Program& p) {
  std::ostringstream out;
  out << "Program{" << p.seed << ", " << int{p.rnr_retry} << ", "
      << p.max_send_wr << ", {";
  for (const Step& s : p.steps) {
    out << "\n    Step{" << KindName(s.kind) << ", " << s.count << ", {";
    for (const WriteOp& w : s.writes) {
      out << "WriteOp{" << w.size << ", " << (w.imm ? "true" : "false") << ", "
          << (w.signaled ? "true" : "false") << ", " << FaultName(w.fault)
          << ", " << w.dst;
      if (w.kind != OpKind::kWrite) out << ", " << OpKindName(w.kind);
      out << "}, ";
    }
    out << "}";
    if (s.recv_len != 0) out << ", " << s.recv_len;
    out << "},";
  }
  out << "}}";
  return out.str();
}

// Programs a difference was once found with (shrunk; seeds from 1000001 on
// so that they do not collide with generated ones): run on every CI run.
std::vector<Program> RegressionPrograms() {
  return {
      // Receives posted to a QP in ERR never complete on rxe 6.1
      // (Personality::flushes_receives_posted_in_err). Programs 2, 22, 29.
      Program{1000001,
              0,
              16,
              {Step{StepKind::kServerNoRemoteWrite, 0, {}},
               Step{StepKind::kWrites,
                    0,
                    {WriteOp{0, false, true, Fault::kNone, 35925}}},
               Step{StepKind::kRecv, 1, {}}}},
      Program{1000002,
              7,
              4,
              {Step{StepKind::kWrites,
                    0,
                    {WriteOp{1, false, true, Fault::kReadOnlyMr, 0}}},
               Step{StepKind::kRecv, 1, {}}}},
      // A write parked on RNR (rnr_retry 7) sees the responder's new access
      // flags at its next retry. Programs 53, 180 (shrunk by hand).
      Program{1000003,
              7,
              16,
              {Step{StepKind::kWrites,
                    0,
                    {WriteOp{64, true, true, Fault::kNone, 0}}},
               Step{StepKind::kServerNoRemoteWrite, 0, {}}}},
      // A write parked on RNR whose rkey is bad, then two receives in one
      // call: the first completes with the access error, the second
      // flushes. Program 92 (receives were posted one call at a time then).
      Program{1000004,
              7,
              16,
              {Step{StepKind::kWrites,
                    0,
                    {WriteOp{1, true, true, Fault::kBadRkey, 8015}}},
               Step{StepKind::kRecv, 2, {}}}},
      // Send WRs posted in ERR are flushed only when rxe's requester index
      // is not at the producer at the doorbell (Personality::
      // sq_flush_follows_requester_index): the first write fails on its
      // FIRST packet (the index stays on it), the second post's two WRs
      // bring the 8-slot ring's producer to that index. Program 500.
      Program{1000005,
              7,
              4,
              {Step{StepKind::kWrites,
                    0,
                    {WriteOp{1025, true, true, Fault::kOutOfBounds, 936},
                     WriteOp{0, true, true, Fault::kNone, 11056},
                     WriteOp{0, true, true, Fault::kNone, 46833},
                     WriteOp{0, true, true, Fault::kNone, 39530},
                     WriteOp{0, false, true, Fault::kBadRkey, 4862},
                     WriteOp{0, true, true, Fault::kNone, 35706},
                     WriteOp{0, true, true, Fault::kNone, 33299}}},
               Step{StepKind::kWrites,
                    0,
                    {WriteOp{0, true, true, Fault::kNone, 13564},
                     WriteOp{0, true, true, Fault::kBadRkey, 8755}}}}},
      // The same through an RNR error (rnr_retry 0): one index step per
      // ibv_post_send in ERR, so seven WRs in one post land on it. Program
      // 644.
      Program{1000006,
              0,
              4,
              {Step{StepKind::kWrites,
                    0,
                    {WriteOp{0, true, true, Fault::kNone, 2003}}},
               Step{StepKind::kWrites,
                    0,
                    {WriteOp{0, true, true, Fault::kNone, 34852},
                     WriteOp{0, true, true, Fault::kNone, 42754}}},
               Step{StepKind::kWrites,
                    0,
                    {WriteOp{0, true, true, Fault::kNone, 24805},
                     WriteOp{0, false, true, Fault::kNone, 8118},
                     WriteOp{0, false, true, Fault::kNone, 7940},
                     WriteOp{0, false, true, Fault::kNone, 6340},
                     WriteOp{0, false, true, Fault::kNone, 19244},
                     WriteOp{0, true, true, Fault::kNone, 8772},
                     WriteOp{0, true, true, Fault::kOutOfBounds, 29912}}}}},
      // A receive stranded in ERR flushes on the next ibv_modify_qp to ERR
      // (rxe_qp.c rxe_qp_from_attr runs rxe_qp_error). Program 936.
      Program{
          1000007,
          0,
          16,
          {Step{StepKind::kWrites,
                0,
                {WriteOp{1025, true, true, Fault::kBadRkey, 24097}}},
           Step{StepKind::kRecv, 1, {}}, Step{StepKind::kServerErr, 0, {}}}},
  };
}

// A count or a seed (the wide programs' seeds start at 3000001).
int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  // Not a number must not mean "0 programs, passed".
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0 || n > 100000000) {
    ADD_FAILURE() << name << "='" << v
                  << "': expected a whole number from 0 to 100000000";
    return fallback;
  }
  return static_cast<int>(n);
}

class RandomDifferential : public ConformanceTest {
 protected:
  // Runs `p` on the current backend and returns its stream (Canonical).
  std::vector<std::string> RunProgram(const Program& p) {
    drain_quiet_ms_ = 60;
    compare_with_recording_ = false;
    TakeStream();
    BeginSection("");
    QpOptions options;
    options.max_send_wr = p.max_send_wr;
    options.max_recv_wr = 16;
    options.max_send_sge = 1;
    options.max_inline_data = 64;
    options.rnr_retry_count = p.rnr_retry;
    Connect(options);
    if (HasFatalFailure()) return {};
    // A short RNR timer (0.01 ms, IB spec table 45): an rnr_retry 7 write
    // waiting for a receive goes within any drain window once one is posted.
    ibv_qp_attr timer{};
    timer.min_rnr_timer = 1;
    RecordPost(
        "modify server min_rnr_timer",
        nic(server()).ModifyQp(server().qp, &timer, IBV_QP_MIN_RNR_TIMER));
    // Atomics (wide programs only) need REMOTE_ATOMIC: an MR of their own
    // over the same buffer.
    bool has_atomics = false;
    bool brings_back = false;  // READs or atomics
    for (const Step& step : p.steps) {
      for (const WriteOp& op : step.writes) {
        has_atomics = has_atomics || op.kind == OpKind::kFetchAdd ||
                      op.kind == OpKind::kCmpSwap;
        brings_back = brings_back || op.kind != OpKind::kWrite;
      }
    }
    // What READs and atomics bring back lands in a client buffer of its
    // own: in the source buffer a later WR would read bytes a READ still
    // in flight writes, which ibv_post_send(3) leaves undefined (no fence)
    // and which rxe, pipelining WRs behind a READ, and the fake, one WR at
    // a time, answer differently (wide seed 3000183).
    back_buffer_.assign(brings_back ? kBuffer : 0, 0);
    back_mr_ = brings_back ? nic(client()).RegMr(client().pd,
                                                 back_buffer_.data(),
                                                 back_buffer_.size(),
                                                 IBV_ACCESS_LOCAL_WRITE)
                           : nullptr;
    atomic_mr_ =
        has_atomics
            ? nic(server()).RegMr(
                  server().pd, server().buffer.data(), server().buffer.size(),
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
            : nullptr;
    ibv_mr* read_only = nic(server()).RegMr(
        server().pd, server().buffer.data(), server().buffer.size(),
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    uint64_t wr_id = 1;
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const Step& step = p.steps[i];
      RecordLine("step " + std::to_string(i));
      switch (step.kind) {
        case StepKind::kRecv: {
          // One chain, one call: a WR parked on RNR retries when rxe's RNR
          // timer fires, after the whole chain is in; the fake's background
          // thread could otherwise slip between two calls.
          std::vector<ibv_recv_wr> recvs(static_cast<size_t>(step.count));
          std::vector<ibv_sge> recv_sges(recvs.size());
          for (size_t r = 0; r < recvs.size(); ++r) {
            recvs[r] = ibv_recv_wr{};
            recvs[r].wr_id = wr_id++;
            if (step.recv_len > 0) {
              recv_sges[r] = ibv_sge{
                  reinterpret_cast<uint64_t>(server().buffer.data()) +
                      (r * step.recv_len) % (kBuffer - step.recv_len + 1),
                  step.recv_len, server().mr->lkey};
              recvs[r].sg_list = &recv_sges[r];
              recvs[r].num_sge = 1;
            }
            if (r > 0) recvs[r - 1].next = &recvs[r];
          }
          ibv_recv_wr* bad = nullptr;
          const int ret = nic(server()).PostRecv(server().qp, &recvs[0], &bad);
          int bad_index = -1;
          for (size_t r = 0; ret != 0 && r < recvs.size(); ++r) {
            if (bad == &recvs[r]) bad_index = static_cast<int>(r);
          }
          RecordPost("recv server", ret, bad_index);
          break;
        }
        case StepKind::kWrites: {
          std::vector<ibv_sge> sges(step.writes.size());
          std::vector<ibv_send_wr> wrs(step.writes.size());
          for (size_t w = 0; w < step.writes.size(); ++w) {
            const WriteOp& op = step.writes[w];
            uint32_t dst = op.dst;
            if (op.fault == Fault::kOutOfBounds) dst = kBuffer - op.size + 1;
            const uint64_t id = wr_id++;
            wrs[w] = WriteWr(id, 0, dst, op.size, op.imm,
                             0x1000 + static_cast<uint32_t>(id), op.signaled,
                             &sges[w]);
            if (op.size == 0) {
              // Still name the target: a zero-length write's rkey and VA
              // are not checked (C9-88), whatever they are.
              wrs[w].wr.rdma.rkey = server().mr->rkey;
              wrs[w].wr.rdma.remote_addr =
                  reinterpret_cast<uint64_t>(server().buffer.data()) + dst;
            }
            if (op.fault == Fault::kBadRkey) wrs[w].wr.rdma.rkey ^= 0x5a5a;
            if (op.fault == Fault::kReadOnlyMr && read_only != nullptr) {
              wrs[w].wr.rdma.rkey = read_only->rkey;
            }
            if (op.fault == Fault::kInline) {
              wrs[w].send_flags |= IBV_SEND_INLINE;
            }
            ShapeOp(op, &wrs[w], &sges[w]);
            if (w > 0) wrs[w - 1].next = &wrs[w];
          }
          ibv_send_wr* bad = nullptr;
          PostSend(client(), &wrs[0], &bad);
          break;
        }
        case StepKind::kServerErr:
        case StepKind::kClientErr: {
          ibv_qp_attr a{};
          a.qp_state = IBV_QPS_ERR;
          const bool server_side = step.kind == StepKind::kServerErr;
          RecordPost(server_side ? "modify server ERR" : "modify client ERR",
                     nic(server_side ? server() : client())
                         .ModifyQp(server_side ? server().qp : client().qp, &a,
                                   IBV_QP_STATE));
          break;
        }
        case StepKind::kServerNoRemoteWrite: {
          ibv_qp_attr a{};
          a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
          RecordPost(
              "modify server access=REMOTE_READ",
              nic(server()).ModifyQp(server().qp, &a, IBV_QP_ACCESS_FLAGS));
          break;
        }
        case StepKind::kDisconnect:
          RecordPost("disconnect client",
                     nic(client()).Disconnect(client().id) == 0 ? 0 : errno);
          break;
      }
      DrainAndRecord(client());
      DrainAndRecord(server());
    }
    if (read_only != nullptr) nic(server()).DeregMr(read_only);
    if (atomic_mr_ != nullptr) nic(server()).DeregMr(atomic_mr_);
    atomic_mr_ = nullptr;
    if (back_mr_ != nullptr) {
      RecordDigest("back", back_buffer_);
      nic(client()).DeregMr(back_mr_);
    }
    back_mr_ = nullptr;
    EndSection();
    return Canonical(TakeStream());
  }

  // A write WR (WriteWr, faults applied) made into op.kind: a SEND from the
  // same source bytes, a READ of the same remote range into the same offset
  // of back_buffer_, an atomic on the 8 bytes at the target with the result
  // into back_buffer_'s first 8 bytes.
  void ShapeOp(const WriteOp& op, ibv_send_wr* wr, ibv_sge* sge) {
    const bool imm = op.imm;
    switch (op.kind) {
      case OpKind::kWrite:
        return;
      case OpKind::kSend:
        wr->opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        wr->wr.rdma.remote_addr = 0;
        wr->wr.rdma.rkey = 0;
        return;
      case OpKind::kRead:
        wr->opcode = IBV_WR_RDMA_READ;
        wr->imm_data = 0;
        if (wr->num_sge == 1 && back_mr_ != nullptr) {
          sge->addr = sge->addr -
                      reinterpret_cast<uint64_t>(client().buffer.data()) +
                      reinterpret_cast<uint64_t>(back_buffer_.data());
          sge->lkey = back_mr_->lkey;
        }
        return;
      case OpKind::kFetchAdd:
      case OpKind::kCmpSwap: {
        const uint64_t remote = wr->wr.rdma.remote_addr;
        const bool own_rkey =
            op.fault == Fault::kNone || op.fault == Fault::kOutOfBounds;
        const uint32_t rkey = own_rkey && atomic_mr_ != nullptr
                                  ? atomic_mr_->rkey
                                  : wr->wr.rdma.rkey;
        wr->opcode = op.kind == OpKind::kFetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD
                                                  : IBV_WR_ATOMIC_CMP_AND_SWP;
        wr->imm_data = 0;
        wr->wr.atomic.remote_addr = remote;
        wr->wr.atomic.rkey = rkey;
        wr->wr.atomic.compare_add = op.kind == OpKind::kFetchAdd ? 3 : 0;
        wr->wr.atomic.swap = 0x0101010101010101ull;
        *sge = ibv_sge{reinterpret_cast<uint64_t>(back_buffer_.data()), 8,
                       back_mr_->lkey};
        wr->sg_list = sge;
        wr->num_sge = 1;
        return;
      }
    }
  }

  // The steps' post lines in order, then each side's completions in CQ
  // order, then the states and landed ranges. Which drain window a
  // completion fell into is timing (an RNR retry or a retransmission on
  // rxe can take longer than one window), so it is not compared; the
  // order of each CQ is.
  static std::vector<std::string> Canonical(std::vector<std::string> lines) {
    std::vector<std::string> steps, client, server, final;
    for (std::string& line : lines) {
      if (line.rfind("client ", 0) == 0) {
        client.push_back(std::move(line));
      } else if (line.rfind("server ", 0) == 0) {
        server.push_back(std::move(line));
      } else if (line.rfind("state ", 0) == 0 || line.rfind("landed", 0) == 0) {
        final.push_back(std::move(line));
      } else {
        steps.push_back(std::move(line));
      }
    }
    for (auto* part : {&client, &server, &final}) {
      steps.insert(steps.end(), part->begin(), part->end());
    }
    return steps;
  }

  // Line by line; `a_name` / `b_name` label the two sides.
  static std::string Diff(const std::vector<std::string>& rxe,
                          const std::vector<std::string>& fake,
                          const char* a_name = "rxe:  ",
                          const char* b_name = "fake: ") {
    std::ostringstream diff;
    for (size_t i = 0; i < std::max(rxe.size(), fake.size()); ++i) {
      const std::string a = i < rxe.size() ? rxe[i] : "<none>";
      const std::string b = i < fake.size() ? fake[i] : "<none>";
      if (a != b) {
        diff << "\n  #" << i << " " << a_name << a << "\n  #" << i << " "
             << b_name << b;
      }
    }
    return diff.str();
  }

  // Inside the VM: rxe against the fake, in this process (or, for
  // OneProcessAgreesWithTwo, the fake in one process against two NICs over
  // a fabric: reference_ and candidate_).
  std::string Compare(const Program& p, std::vector<std::string>* rxe_out) {
    UseBackend(reference_);
    std::vector<std::string> rxe = RunProgram(p);
    UseBackend(candidate_);
    std::vector<std::string> fake = RunProgram(p);
    if (rxe_out != nullptr) *rxe_out = rxe;
    if (reference_ == "rdma_core") return Diff(rxe, fake);
    return Diff(rxe, fake, "one process: ", "two NICs:    ");
  }
  ibv_mr* atomic_mr_ = nullptr;  // RunProgram, while a program runs
  // Where READs and atomics land (RunProgram, while a program runs).
  std::vector<uint8_t> back_buffer_;
  ibv_mr* back_mr_ = nullptr;
  std::string reference_ = "rdma_core";
  std::string candidate_ = "fake_rxe";

  // Smaller programs that still differ, one change at a time.
  static std::vector<Program> Candidates(const Program& p) {
    std::vector<Program> out;
    for (size_t i = 0; i < p.steps.size(); ++i) {
      Program q = p;
      q.steps.erase(q.steps.begin() + static_cast<std::ptrdiff_t>(i));
      out.push_back(q);
    }
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const Step& s = p.steps[i];
      for (size_t w = 0; w < s.writes.size(); ++w) {
        if (s.writes.size() > 1) {
          Program q = p;
          auto& ws = q.steps[i].writes;
          ws.erase(ws.begin() + static_cast<std::ptrdiff_t>(w));
          out.push_back(q);
        }
        const WriteOp& op = s.writes[w];
        for (uint32_t size : {0u, 1u, 64u, 1025u}) {
          if (size >= op.size) continue;
          Program q = p;
          q.steps[i].writes[w].size = size;
          q.steps[i].writes[w].dst = std::min(op.dst, kBuffer - size);
          out.push_back(q);
        }
        if (!op.signaled) {
          Program q = p;
          q.steps[i].writes[w].signaled = true;
          out.push_back(q);
        }
      }
      if (s.kind == StepKind::kRecv && s.count > 1) {
        Program q = p;
        q.steps[i].count--;
        out.push_back(q);
      }
    }
    return out;
  }

  Program Shrink(Program p) {
    for (int round = 0; round < 50; ++round) {
      bool smaller = false;
      for (const Program& q : Candidates(p)) {
        if (!Compare(q, nullptr).empty()) {
          p = q;
          smaller = true;
          break;
        }
      }
      if (!smaller) break;
    }
    return p;
  }

  // Inside the VM: each program on rxe and on the fake; the first three
  // that differ are shrunk and reported. With RPMA_HARNESS_PRINT_STREAMS=1
  // rxe's streams are printed as "PREFIX seed=N LINE" for the recording.
  void AgainstLiveRxe(const std::vector<Program>& programs,
                      const char* prefix, const char* what) {
    const bool print = std::getenv("RPMA_HARNESS_PRINT_STREAMS") != nullptr;
    int differing = 0;
    for (const Program& p : programs) {
      std::vector<std::string> rxe;
      const std::string diff = Compare(p, &rxe);
      if (print) {
        for (const std::string& line : rxe) {
          std::printf("%s seed=%llu %s\n", prefix,
                      static_cast<unsigned long long>(p.seed), line.c_str());
        }
      }
      if (!diff.empty() && ++differing <= 3) ReportDifference(p, diff);
    }
    std::printf("%s: %zu programs, %d differ\n", what, programs.size(),
                differing);
  }

  // On a host: the fake against rxe's recording at `path` ("PREFIX seed=N
  // LINE" lines). A missing recording, or a program it does not hold, is a
  // failure: a replay that compares nothing proves nothing.
  void AgainstRecording(const std::vector<Program>& programs,
                        const std::string& path, const std::string& prefix,
                        const char* what) {
    std::ifstream recording(path);
    ASSERT_TRUE(recording.good())
        << path << " is missing (a data dependency of this test)";
    const std::string tag = prefix + " seed=";
    std::map<uint64_t, std::vector<std::string>> rxe;
    std::string line;
    while (std::getline(recording, line)) {
      if (line.rfind(tag, 0) != 0) continue;
      const size_t space = line.find(' ', tag.size());
      const uint64_t seed =
          std::stoull(line.substr(tag.size(), space - tag.size()));
      rxe[seed].push_back(space == std::string::npos ? ""
                                                     : line.substr(space + 1));
    }
    int compared = 0;
    std::vector<uint64_t> unrecorded;
    for (const Program& p : programs) {
      auto it = rxe.find(p.seed);
      if (it == rxe.end()) {
        unrecorded.push_back(p.seed);
        continue;
      }
      const std::string diff = Diff(it->second, RunProgram(p));
      ++compared;
      EXPECT_TRUE(diff.empty()) << "program " << p.seed << " (" << AsCode(p)
                                << ") differs from rxe:" << diff;
    }
    std::printf("%s: %d programs compared with rxe's recording\n", what,
                compared);
    EXPECT_EQ(static_cast<size_t>(compared), programs.size())
        << unrecorded.size() << " programs (the first: seed "
        << (unrecorded.empty() ? 0 : unrecorded.front())
        << ") have no rxe recording in " << path
        << ": record them in the soft-RoCE VM (tools/softroce_vm/ci.sh with "
           "RECORD=1) or run the seeds the recording holds";
  }

  void ReportDifference(const Program& p, const std::string& diff) {
    const Program minimal = Shrink(p);
    const std::string minimal_diff = Compare(minimal, nullptr);
    ADD_FAILURE() << "program " << p.seed << " differs:" << diff
                  << "\nshrunk to:\n  " << AsCode(minimal) << minimal_diff
                  << "\nadd it to RegressionPrograms() in "
                     "tests/random_differential_test.cc";
  }
};

TEST_P(RandomDifferential, FakeRxeAgreesWithRxe) {
  const std::string backend = GetParam().name;
  if (backend == "fake_spec") GTEST_SKIP() << "the differential is for rxe";
  // env RPMA_HARNESS_RANDOM_PROGRAMS=N: the harness's own test: how many random
  //   programs //tests:random_differential_test compares (default 200).
  // env RPMA_HARNESS_RANDOM_SEED=N: the harness's own test: the first random
  //   program's seed (default 1; the rxe recording holds seeds 1..200).
  const int count = EnvInt("RPMA_HARNESS_RANDOM_PROGRAMS", 200);
  const int first = EnvInt("RPMA_HARNESS_RANDOM_SEED", 1);
  std::vector<Program> programs = RegressionPrograms();
  for (int i = 0; i < count; ++i) programs.push_back(Generate(first + i));
  if (backend == "rdma_core") {
    AgainstLiveRxe(programs, "RANDOM", "random differential");
    return;
  }
  // On a host: the fake against rxe's recording.
  AgainstRecording(programs, "tests/testdata/rxe_random_streams.txt",
                   "RANDOM", "random differential");
}

// The wider programs (SENDs, READs, atomics, receives with buffers, each
// program its own share of faults) against live rxe, everything compared,
// the client's buffer included (its digest). Inside the VM each program
// runs on rxe and on the fake, and with RPMA_HARNESS_PRINT_STREAMS=1 rxe's
// streams are printed for tests/testdata/rxe_random_wide_streams.txt; on a
// host the fake (one NIC, and two joined by a fabric) is compared with that
// recording.
// env RPMA_HARNESS_WIDE_PROGRAMS=N: the harness's own test: how many wide
//   programs FakeRxeAgreesWithRxeOnWidePrograms compares (default 100; the
//   recording holds seeds 3000001..3000100).
// env RPMA_HARNESS_WIDE_SEED=N: the harness's own test: the first wide
//   program's seed (default 3000001).
TEST_P(RandomDifferential, FakeRxeAgreesWithRxeOnWidePrograms) {
  const std::string backend = GetParam().name;
  if (backend == "fake_spec") GTEST_SKIP() << "the differential is for rxe";
  record_client_digest_ = true;
  const int count = EnvInt("RPMA_HARNESS_WIDE_PROGRAMS", 100);
  const int first = EnvInt("RPMA_HARNESS_WIDE_SEED", 3000001);
  std::vector<Program> programs;
  for (int i = 0; i < count; ++i) programs.push_back(Generate(first + i, true));
  if (backend == "rdma_core") {
    AgainstLiveRxe(programs, "WIDE", "random differential (wide)");
    return;
  }
  AgainstRecording(programs, "tests/testdata/rxe_random_wide_streams.txt",
                   "WIDE", "random differential (wide)");
}

// The fake in one process against the same fake as two NICs that meet only
// through a fabric directory (two processes' path: request / answer frames,
// the far responder), on wider programs than rxe's recording holds: SENDs,
// READs and atomics beside the writes, receives with buffers. Every
// completion per CQ, post result, QP state, the server's landed bytes and
// a digest of the client's buffer must agree. A difference is shrunk.
// RPMA_HARNESS_FABRIC_PROGRAMS (default 150) from seed 5000001 on.
// env RPMA_HARNESS_FABRIC_PROGRAMS=N: the harness's own test: how many wide
//   programs OneProcessAgreesWithTwo runs in one process and as two NICs
//   (default 150, from seed 5000001).
TEST_P(RandomDifferential, OneProcessAgreesWithTwo) {
  if (GetParam().name != "fake_rxe") {
    GTEST_SKIP() << "runs once, from the fake_rxe instance";
  }
  reference_ = "fake_rxe";
  candidate_ = "fake_rxe_fabric";
  record_client_digest_ = true;
  const int count = EnvInt("RPMA_HARNESS_FABRIC_PROGRAMS", 150);
  int differing = 0;
  // What the programs reached, from the one-process streams: completions
  // by side, opcode and status.
  std::map<std::string, int> reached;
  for (int i = 0; i < count; ++i) {
    const Program p = Generate(5000001 + static_cast<uint64_t>(i), true);
    std::vector<std::string> reference;
    const std::string diff = Compare(p, &reference);
    if (!diff.empty() && ++differing <= 3) ReportDifference(p, diff);
    for (const std::string& line : reference) {
      const size_t status = line.find(" status=");
      if (status == std::string::npos) continue;
      const size_t end = line.find(" byte_len=");
      reached[line.substr(0, line.find(' ')) +
              line.substr(status, end - status)]++;
    }
  }
  std::printf("one process vs two: %d wide programs, %d differ; reached:\n",
              count, differing);
  for (const auto& [what, n] : reached) {
    std::printf("  %-40s %d\n", what.c_str(), n);
  }
  EXPECT_EQ(differing, 0);
  // The wider programs are meant to reach these: SEND, READ and atomic
  // completions that succeed, on the requester and the responder.
  for (const char* want :
       {"client status=0 opcode=0", "client status=0 opcode=2",
        "client status=0 opcode=3", "client status=0 opcode=4",
        "server status=0 opcode=128", "server status=0 opcode=129"}) {
    EXPECT_GT(reached[want], 0) << want << " never reached";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, RandomDifferential, ::testing::ValuesIn(BackendsUnderTest()),
    [](const ::testing::TestParamInfo<BackendUnderTest>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rpma_harness
