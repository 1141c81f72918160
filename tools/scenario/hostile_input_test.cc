// hostile_input_test.cc: the scenario runner (the built binary) against one
// hostile input per rejected class: each exits 2 with the message it must
// give (file:line:col where the input has a position, a plain message where
// it is not a scenario at all), and none grows past 64 MB of peak RSS (the
// child's VmHWM, read at its exit). Also: inputs that run but must fail
// (exit 1), and that an ordinary scenario still exits 0.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // shadow memory: RSS says nothing
#else
constexpr bool kSanitized = false;
#endif

constexpr long kMaxRssKb = 64 * 1024;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  long max_rss_kb = 0;
  std::string out, err;
};

// The child's own peak RSS (VmHWM of its address space), read at its exit
// through ptrace (PTRACE_O_TRACEEXIT stops it with its memory still there).
// wait4's ru_maxrss would not do: it includes the parent's memory at the
// time of the fork. Sanitized builds run untraced (LeakSanitizer ptraces
// the process itself at exit) and report 0.
long PeakRssAtExit(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

Outcome RunScenarioBinary(const std::vector<std::string>& args) {
  const std::string out_path = TempDir() + "/out.txt";
  const std::string err_path = TempDir() + "/err.txt";
  std::vector<std::string> full = {"tools/scenario"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  Outcome o;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return o;
  }
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    if (!kSanitized) ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (!kSanitized) {
    // Stopped at the exec.
    waitpid(pid, &status, 0);
    ptrace(PTRACE_SETOPTIONS, pid, nullptr,
           reinterpret_cast<void*>(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL));
    ptrace(PTRACE_CONT, pid, nullptr, nullptr);
  }
  while (waitpid(pid, &status, 0) == pid) {
    if (WIFEXITED(status) || WIFSIGNALED(status)) break;
    if (!WIFSTOPPED(status)) continue;
    int deliver = 0;
    if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
      o.max_rss_kb = PeakRssAtExit(pid);
    } else if (WSTOPSIG(status) != SIGTRAP) {
      deliver = WSTOPSIG(status);
    }
    ptrace(PTRACE_CONT, pid, nullptr,
           reinterpret_cast<void*>(static_cast<intptr_t>(deliver)));
  }
  if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  o.out = ReadAll(out_path);
  o.err = ReadAll(err_path);
  return o;
}

constexpr char kWorkload[] =
    "workload:\n"
    "  - write_with_imm: {count: 2, size: 64}\n";

std::string Minimal() { return std::string("name: x\n") + kWorkload; }

std::string WithFault(const std::string& fault) {
  return Minimal() + "faults:\n  - {name: f, " + fault + "}\n";
}

struct HostileCase {
  const char* name;
  std::string text;               // the scenario file's contents
  std::vector<std::string> args;  // after the file ("FILE" is replaced)
  std::string message;            // a substring of stderr, with position
};

void PrintTo(const HostileCase& c, std::ostream* os) { *os << c.name; }

std::vector<HostileCase> Cases() {
  const std::string big_list = [] {
    std::string t = Minimal() + "description: [";
    while (t.size() < 70 * 1024) t += "0, ";
    return t + "0]\n";
  }();
  // The most yaml-cpp nodes the size bound lets in (~32 000 one-character
  // scalars: ~20 MB peak, the largest of all rejected inputs).
  const std::string widest_list = [] {
    std::string t = "name: x\nworkload: [";
    while (t.size() < 65000) t += "1,";
    return t + "1]\n";
  }();
  const std::string many_items = [] {
    std::string t = "name: x\nworkload:\n";
    for (int i = 0; i < 257; ++i) {
      t +=
          "  - write_with_imm: {size: 8, dst_offset: " + std::to_string(i * 8) +
          "}\n";
    }
    return t;
  }();
  return {
      // ---- strict YAML ----
      {"duplicate_key",
       "name: a\nname: b\n" + std::string(kWorkload),
       {},
       "f.yaml:2:1: scenario: key 'name' is given twice"},
      {"duplicate_nested_key",
       "name: x\nworkload:\n  - write_with_imm: {size: 8, size: 16}\n",
       {},
       "f.yaml:3:31: workload[0].write_with_imm: key 'size' is given twice"},
      {"second_document",
       Minimal() + "---\nname: y\n",
       {},
       "f.yaml:4:1: a second YAML document"},
      {"empty_second_document",
       Minimal() + "---\n",
       {},
       "f.yaml:4:1: a second YAML document"},
      {"empty_file", "", {}, "f.yaml:1:1: the file is empty"},
      {"only_comments", "# nothing\n\n", {}, "f.yaml:1:1: the file is empty"},
      {"empty_document", "---\n", {}, "f.yaml:1:1: the document is empty"},
      {"deep_nesting",
       "name: x\nworkload: " + std::string(3000, '[') + std::string(3000, ']') +
           "\n",
       {},
       "f.yaml:2:6011: nested more than 2000 levels deep"},
      {"alias_repeats_an_item",
       "name: x\nworkload:\n  - &w {write_with_imm: {size: 8}}\n  - *w\n",
       {},
       // yaml-cpp gives an alias the position of its anchor.
       "f.yaml:3:5: workload[1] writes server bytes [0, 8) that workload[0] "
       "also writes"},
      // yaml-cpp's parser returns an empty document here forever (its
      // LoadAll grew without bound: found by the fuzzer's RSS limit).
      {"parser_makes_no_progress",
       "#No=\xff:\n, \"'- {, sENR",
       {},
       "f.yaml:2:1: not valid YAML here (the parser makes no progress)"},
      {"not_a_mapping",
       "- a\n- b\n",
       {},
       "f.yaml:1:1: a scenario is a mapping"},
      {"probability_nan",
       WithFault("on: execute, probability: nan, action: "
                 "delay"),
       {},
       "f.yaml:5:41: fault 'f'.probability: expected a decimal number from 0 "
       "to 1 (e.g. 0.25), got 'nan'"},
      {"probability_inf",
       WithFault("on: execute, probability: .inf, action: "
                 "delay"),
       {},
       "got '.inf'"},
      {"probability_empty",
       WithFault("on: execute, probability: '', action: "
                 "delay"),
       {},
       "f.yaml:5:41: fault 'f'.probability: expected a decimal number from 0 "
       "to 1 (e.g. 0.25), got ''"},
      {"probability_exponent",
       WithFault("on: execute, probability: 1e-1, "
                 "action: delay"),
       {},
       "got '1e-1'"},
      {"probability_hex_float",
       WithFault("on: execute, probability: 0x1p-2, "
                 "action: delay"),
       {},
       "got '0x1p-2'"},
      {"probability_zero",
       WithFault("on: execute, probability: 0, action: "
                 "delay"),
       {},
       "f.yaml:5:41: fault 'f'.probability: probability 0 never fires"},
      {"number_empty",
       "name: x\nseed: ''\n" + std::string(kWorkload),
       {},
       "f.yaml:2:7: seed: expected an unsigned number (decimal without "
       "leading zeros, or hex as 0x...), got an empty value"},
      {"number_no_value",
       "name: x\nseed:\n" + std::string(kWorkload),
       {},
       "f.yaml:2:1: scenario: key 'seed' has no value"},
      {"number_octal_looking",
       "name: x\nworkload:\n  - write_with_imm: {count: 010}\n",
       {},
       "f.yaml:3:29: workload[0].write_with_imm.count: '010': a leading zero "
       "is not allowed"},
      {"number_08",
       "name: x\nworkload:\n  - write_with_imm: {count: 08}\n",
       {},
       "f.yaml:3:29: workload[0].write_with_imm.count: '08': a leading zero "
       "is not allowed"},
      {"number_negative",
       "name: x\nseed: -1\n" + std::string(kWorkload),
       {},
       "f.yaml:2:7: seed: expected an unsigned number"},
      {"number_too_large",
       "name: x\nseed: 18446744073709551616\n" + std::string(kWorkload),
       {},
       "f.yaml:2:7: seed: 18446744073709551616 is larger than "
       "18446744073709551615"},
      {"number_plus_sign",
       "name: x\nseed: +5\n" + std::string(kWorkload),
       {},
       "f.yaml:2:7: seed: expected an unsigned number"},
      {"duplicate_status",
       Minimal() + "expect:\n  client: {SUCCESS: 1, SUCCESS: 2}\n",
       {},
       "f.yaml:5:24: expect.client: status 'SUCCESS' is given twice"},
      {"duplicate_fault_listed",
       WithFault("on: execute, action: delay") +
           "expect:\n  faults_fired: [f, f]\n",
       {},
       "f.yaml:7:21: expect.faults_fired: 'f' is listed twice"},
      {"non_scalar_key",
       "name: x\n? [a]\n: 1\n" + std::string(kWorkload),
       {},
       "f.yaml:2:3: scenario: keys are names"},
      // ---- zero where zero means nothing ----
      {"nth_zero",
       WithFault("on: execute, nth: 0, action: delay"),
       {},
       "f.yaml:5:33: fault 'f'.nth: must be at least 1 (matches count from "
       "1)"},
      {"every_zero",
       WithFault("on: execute, every: 0, action: delay"),
       {},
       "f.yaml:5:35: fault 'f'.every: must be at least 1"},
      {"max_fires_zero",
       WithFault("on: execute, max_fires: 0, action: delay"),
       {},
       "f.yaml:5:39: fault 'f'.max_fires: must be at least 1"},
      {"delay_steps_zero",
       WithFault("on: execute, action: delay, steps: 0"),
       {},
       "f.yaml:5:50: fault 'f'.steps: must be at least 1"},
      {"errno_zero",
       WithFault("on: post_send, action: fail, errno: 0"),
       {},
       "f.yaml:5:51: fault 'f'.errno: must be at least 1"},
      {"cq_size_zero",
       "name: x\nclient: {cq_size: 0}\n" + std::string(kWorkload),
       {},
       "f.yaml:2:19: client.cq_size: must be at least 1"},
      {"sq_size_zero",
       "name: x\nclient: {sq_size: 0}\n" + std::string(kWorkload),
       {},
       "f.yaml:2:19: client.sq_size: must be at least 1"},
      {"rq_size_zero",
       "name: x\nserver: {rq_size: 0}\n" + std::string(kWorkload),
       {},
       "f.yaml:2:19: server.rq_size: must be at least 1"},
      {"max_steps_zero",
       "name: x\nmax_steps: 0\n" + std::string(kWorkload),
       {},
       "f.yaml:2:12: max_steps: must be at least 1"},
      {"connections_zero",
       "name: x\nconnections: 0\n" + std::string(kWorkload),
       {},
       "f.yaml:2:14: connections: must be at least 1"},
      // ---- out-of-range indices and contradictions ----
      {"fault_connection_beyond",
       "name: x\nconnections: 2\n" + std::string(kWorkload) +
           "faults:\n  - {name: f, on: execute, side: client, connection: 3, "
           "action: delay}\n",
       {},
       "f.yaml:6:54: fault 'f'.connection: 3 is beyond the scenario's 2 "
       "connections"},
      {"fault_connection_without_side",
       "name: x\nconnections: 2\n" + std::string(kWorkload) +
           "faults:\n  - {name: f, on: execute, connection: 2, action: "
           "delay}\n",
       {},
       "f.yaml:6:40: fault 'f'.connection: needs 'side'"},
      {"min_above_max_length",
       WithFault("on: execute, min_length: 9, max_length: 8, action: delay"),
       {},
       "f.yaml:5:55: fault 'f': max_length 8 is below min_length 9"},
      {"offset_wraps",
       "name: x\nworkload:\n  - write_with_imm: {count: 2, size: 64, "
       "dst_offset: 0xffffffffffffffff}\n",
       {},
       "f.yaml:3:54: workload[0].write_with_imm.dst_offset: the last write's "
       "offset"},
      {"too_many_items",
       many_items,
       {},
       "f.yaml:259:5: workload: more than 256 items"},
      {"widest_yaml_within_the_bound",
       widest_list,
       {},
       "f.yaml:2:524: workload: more than 256 items"},
      // ---- the budget ----
      {"budget_mr_size",
       "name: x\nserver: {mr_size: 1073741824}\nclient: {mr_size: "
       "1073741824}\n" +
           std::string(kWorkload),
       {},
       "f.yaml:3:19: over budget: memory ~2.3 GiB"},
      {"budget_connections_times_mr",
       "name: x\nconnections: 64\nserver: {mr_size: 33554432}\n" +
           std::string(kWorkload),
       {},
       "f.yaml:3:19: over budget: memory"},
      {"budget_count_times_size",
       "name: x\nworkload:\n  - write_with_imm: {count: 1048576, size: 64, "
       "stride: 0x40}\n",
       {},
       "f.yaml:3:5: over budget: events 7540096 (1048576 writes x 7 + "
       "max_steps 200000)"},
      {"budget_bytes_moved",
       "name: x\nworkload:\n  - write_with_imm: {count: 16, size: "
       "2147483648}\n",
       {},
       "f.yaml:3:5: over budget: bytes moved 32.0 GiB (count x size of every "
       "write, x 1 connection) is more than the budget's 16.0 GiB; run with "
       "--budget 2 to allow it"},
      {"budget_max_steps",
       "name: x\nmax_steps: 100000000\n" + std::string(kWorkload),
       {},
       "f.yaml:2:12: over budget: events 100000078"},
      {"budget_events_with_budget_flag",
       "name: x\nmax_steps: 0x10000000000\n" + std::string(kWorkload),
       {"--budget", "1024"},
       "f.yaml:2:12: over budget: events 1099511627854 (2 writes x 7 + "
       "max_steps 1099511627776) is more than the budget's 1024000000; more "
       "than the largest --budget (1024) allows"},
      // ---- files that are not scenarios: plain messages ----
      {"file_too_large", big_list, {}, "f.yaml: larger than 64 KiB"},
      // ---- the command line, by the file's rules ----
      {"seed_negative",
       Minimal(),
       {"--seed", "-1"},
       "--seed: expected an "
       "unsigned number"},
      {"seed_too_large",
       Minimal(),
       {"--seed", "18446744073709551616"},
       "--seed: 18446744073709551616 is larger than"},
      {"seed_octal_looking",
       Minimal(),
       {"--seed", "010"},
       "--seed: '010': a leading zero is not allowed"},
      {"seed_empty", Minimal(), {"--seed", ""}, "got an empty value"},
      {"budget_zero",
       Minimal(),
       {"--budget", "0"},
       "--budget: must be at "
       "least 1"},
      {"budget_too_large",
       Minimal(),
       {"--budget", "1025"},
       "--budget: 1025 is larger than 1024"},
      {"replay_missing",
       Minimal(),
       {"--replay", "/nonexistent/trace.jsonl"},
       "--replay /nonexistent/trace.jsonl: cannot open: No such file"},
      {"replay_directory",
       Minimal(),
       {"--replay", "/"},
       "--replay /: is a directory"},
      {"replay_dev_zero",
       Minimal(),
       {"--replay", "/dev/zero"},
       "/dev/zero: line 1 is longer than 64 KiB: not a trace"},
      {"trace_to_directory",
       Minimal(),
       {"--trace", "/"},
       "--trace /: is a directory"},
  };
}

class HostileInputTest : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileInputTest, ExitsTwoWithItsMessageWithinTheMemoryBound) {
  const HostileCase& c = GetParam();
  const std::string file = WriteFile("f.yaml", c.text);
  std::vector<std::string> args = {file, "--quiet"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  const Outcome o = RunScenarioBinary(args);
  EXPECT_EQ(o.signal, 0) << o.err;
  EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
  // Messages name the file as given; compare from its base name.
  std::string err = o.err;
  for (size_t at; (at = err.find(TempDir() + "/")) != std::string::npos;) {
    err.erase(at, TempDir().size() + 1);
  }
  EXPECT_THAT(err, HasSubstr(c.message));
  if (!kSanitized) {
    EXPECT_LE(o.max_rss_kb, kMaxRssKb) << "peak RSS in KB";
  }
  std::printf("%-32s peak RSS %5ld KB  %s", c.name, o.max_rss_kb, err.c_str());
}

INSTANTIATE_TEST_SUITE_P(Classes, HostileInputTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<HostileCase>& i) {
                           return std::string(i.param.name);
                         });

struct PathCase {
  const char* name;
  std::string path;
  std::string message;
};

void PrintTo(const PathCase& c, std::ostream* os) { *os << c.name; }

class UnusableScenarioPathTest : public ::testing::TestWithParam<PathCase> {};

TEST_P(UnusableScenarioPathTest, IsAUsageErrorWithAPlainMessage) {
  const Outcome o = RunScenarioBinary({GetParam().path});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_THAT(o.err, HasSubstr(GetParam().message));
  if (!kSanitized) {
    EXPECT_LE(o.max_rss_kb, kMaxRssKb);
  }
  std::printf("%-32s peak RSS %5ld KB  %s", GetParam().name, o.max_rss_kb,
              o.err.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Paths, UnusableScenarioPathTest,
    ::testing::Values(
        PathCase{"missing", "/nonexistent.yaml",
                 "scenario: /nonexistent.yaml: cannot open: No such file"},
        PathCase{"directory", "/",
                 "scenario: /: is a directory, not a "
                 "scenario file"},
        PathCase{"dev_zero", "/dev/zero",
                 "scenario: /dev/zero: larger than 64 KiB, the limit for a "
                 "scenario file"}),
    [](const ::testing::TestParamInfo<PathCase>& i) {
      return std::string(i.param.name);
    });

TEST(HostileInputTest, FiftyMegabyteListIsRefusedWithoutReadingIt) {
  std::string text = Minimal() + "description: [";
  text.reserve(50u << 20);
  while (text.size() < (50u << 20)) text += "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ";
  const std::string file = WriteFile("big.yaml", text + "0]\n");
  const Outcome o = RunScenarioBinary({file});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("larger than 64 KiB"));
  if (!kSanitized) {
    EXPECT_LE(o.max_rss_kb, kMaxRssKb);
  }
}

// A FIFO nobody writes, as the scenario or as --replay: read as empty at
// once (opened without blocking), never a hang.
TEST(HostileInputTest, AFifoNobodyWritesIsReadAsEmpty) {
  const std::string fifo = TempDir() + "/nobody_writes.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Outcome o = RunScenarioBinary({fifo});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_THAT(o.err, HasSubstr("the file is empty"));
  o = RunScenarioBinary({WriteFile("fifo_replay.yaml", Minimal()), "--quiet",
                         "--replay", fifo});
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("the recording ended after 0 events"));
  unlink(fifo.c_str());
}

// ---- inputs that run, and whose outcome must mean something -------------

TEST(RunOutcomeTest, AnOrdinaryScenarioExitsZero) {
  const Outcome o = RunScenarioBinary({WriteFile("ok.yaml", Minimal())});
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
}

TEST(RunOutcomeTest, FailedSetUpIsAFailedRunUnlessExpected) {
  const std::string setup_fails =
      Minimal() +
      "faults:\n  - {name: f, on: reg_mr, action: fail, errno: ENOMEM}\n";
  Outcome o = RunScenarioBinary({WriteFile("setup.yaml", setup_fails)});
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("FAILED: connection set-up succeeded"));
  o = RunScenarioBinary({WriteFile(
      "setup2.yaml", setup_fails + "expect: {connection: not_connected}\n")});
  EXPECT_EQ(o.exit_code, 0) << o.out << o.err;
}

TEST(RunOutcomeTest, OffsetPlusSizePastTwoToTheSixtyFourIsNoCrash) {
  // The end of the write wraps; the bounds checks must not.
  const Outcome o = RunScenarioBinary({WriteFile(
      "wrap.yaml",
      "name: x\nworkload:\n  - write_with_imm: {count: 1, size: 128, "
      "dst_offset: 0xffffffffffffffc0}\n  - write_with_imm: {count: 1, size: "
      "128, src_offset: 0xffffffffffffffc0}\n")});
  EXPECT_EQ(o.signal, 0);
  EXPECT_TRUE(o.exit_code == 0 || o.exit_code == 1) << o.err;
  EXPECT_THAT(o.out, Not(HasSubstr("MISMATCH")));
}

TEST(RunOutcomeTest, ReplayOfItsOwnTraceIsIdenticalAndOfAnotherDiverges) {
  const std::string file = WriteFile("r.yaml", Minimal());
  const std::string trace = TempDir() + "/r.jsonl";
  ASSERT_EQ(RunScenarioBinary({file, "--quiet", "--trace", trace}).exit_code,
            0);
  Outcome o = RunScenarioBinary({file, "--quiet", "--replay", trace});
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("identical"));
  o = RunScenarioBinary(
      {file, "--quiet", "--replay", WriteFile("other.jsonl", "{}\n")});
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_THAT(o.out, HasSubstr("DIVERGES"));
}

}  // namespace
