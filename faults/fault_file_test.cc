#include "faults/fault_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "nic/fake_nic.h"
#include "faults/fault_rule_text.h"

namespace rpma_harness {
namespace {

std::string ErrorOf(const std::string& text) {
  FaultFile file;
  std::string error;
  EXPECT_FALSE(ParseFaultFileText(text, "f.yaml", &file, &error)) << text;
  return error;
}

TEST(FaultFileTest, ReadsTheBlockListWithCommentsQuotesAndSeed) {
  FaultFile file;
  std::string error;
  ASSERT_TRUE(ParseFaultFileText(
      "# a comment\n"
      "seed: 7\n"
      "faults:\n"
      "  - name: 'deny the second write'   # plain comments too\n"
      "    on: execute\n"
      "    opcode: write_with_imm\n"
      "    nth: 2\n"
      "    action: complete\n"
      "    status: \"REM_ACCESS_ERR\"\n"
      "\n"
      "  -\n"
      "    name: it''s the \"other\"\n"
      "    on: post_send\n"
      "    action: fail\n"
      "    errno: ENOMEM\n",
      "f.yaml", &file, &error))
      << error;
  EXPECT_EQ(file.seed, 7u);
  ASSERT_EQ(file.faults.size(), 2u);
  EXPECT_EQ(file.faults[0].name, "deny the second write");
  EXPECT_EQ(file.faults[0].call, FaultCall::kExecute);
  EXPECT_EQ(file.faults[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(file.faults[0].nth, 2u);
  EXPECT_EQ(file.faults[0].action, FaultAction::kCompleteWithStatus);
  EXPECT_EQ(file.faults[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(file.faults[1].name, "it''s the \"other\"");  // plain: as written
  EXPECT_EQ(file.faults[1].error, ENOMEM);
  EXPECT_TRUE(file.ignored_keys.empty());
}

TEST(FaultFileTest, AWholeScenarioFileGivesItsFaultsAndNamesTheRest) {
  FaultFile file;
  std::string error;
  ASSERT_TRUE(
      ParseFaultFileText("name: x\n"
                         "workload:\n"
                         "- size: 8\n"
                         "  count: 2\n"
                         "server:\n"
                         "  recv: prepost\n"
                         "faults:\n"
                         "- name: a\n"
                         "  on: reg_mr\n"
                         "  action: fail\n"
                         "  errno: 12\n"
                         "expect:\n"
                         "  faults_fired: [a]\n"
                         "client: {sq_size: 4}\n",
                         "f.yaml", &file, &error))
      << error;
  ASSERT_EQ(file.faults.size(), 1u);
  EXPECT_EQ(file.faults[0].error, 12);
  EXPECT_FALSE(file.seed.has_value());
  EXPECT_EQ(file.ignored_keys,
            (std::vector<std::string>{"name", "workload", "server", "expect",
                                      "client"}));
}

TEST(FaultFileTest, RefusesWhatItDoesNotReadWithLineAndRemedy) {
  const std::string head = "faults:\n  - name: a\n    on: reg_mr\n";
  EXPECT_EQ(ErrorOf("faults: [{name: a}]\n"),
            "f.yaml:1:9: flow style ([...] or {...}) is not read in a faults "
            "file; write one value per key, plain or quoted");
  EXPECT_EQ(ErrorOf("faults: none\n"),
            "f.yaml:1:9: faults: expected a list of faults (one `- name: ...` "
            "entry per fault on the lines below)");
  EXPECT_EQ(ErrorOf(head + "    action: {x: 1}\n"),
            "f.yaml:4:13: flow style ([...] or {...}) is not read in a faults "
            "file; write one value per key, plain or quoted");
  EXPECT_EQ(ErrorOf(head + "    action: &a fail\n"),
            "f.yaml:4:13: anchors and aliases (& *) are not read in a faults "
            "file; write the value out");
  EXPECT_EQ(ErrorOf(head + "    action:\n      - fail\n"),
            "f.yaml:5:7: nested mappings or lists are not read in a faults "
            "file; write the value on its key's line");
  EXPECT_EQ(ErrorOf(head + "\taction: fail\n"),
            "f.yaml:4:1: a tab in the indentation; indent with spaces");
  EXPECT_EQ(ErrorOf(head + "    action: |\n"),
            "f.yaml:4:13: block scalars (| >) are not read in a faults file; "
            "write the value on the key's line, quoted if needed");
  EXPECT_EQ(ErrorOf(head + "   action: fail\n"),
            "f.yaml:4:4: this key is at column 4, the fault's first key at "
            "column 5 (align them)");
  EXPECT_EQ(ErrorOf(head + "    action: \"fail\n"),
            "f.yaml:4:13: the quoted value does not end on its line (a faults "
            "file takes one-line values)");
  EXPECT_EQ(ErrorOf("name: x\n"),
            "f.yaml:1:1: no 'faults:' list (a faults file is a scenario's "
            "faults: list, e.g. `faults:` then `  - name: ...`)");
  EXPECT_EQ(ErrorOf("faults:\n"),
            "f.yaml:1:1: faults: expected a list of faults");
  EXPECT_EQ(ErrorOf("faults:\n- - a\n"),
            "f.yaml:2:3: a list inside a list is not read in a faults file; "
            "each '- ' entry is one fault's `key: value` lines");
  EXPECT_EQ(ErrorOf("seed: - 1\nfaults:\n- name: a\n"),
            "f.yaml:1:7: a list is not a value here (nested lists are not "
            "read in a faults file); write one value");
  EXPECT_EQ(ErrorOf("seed: 01\nfaults:\n"),
            "f.yaml:1:7: seed: '01': a leading zero is not allowed (write "
            "decimal without leading zeros, or hex as 0x...; octal is not "
            "supported)");
  EXPECT_EQ(ErrorOf("faults:\n---\n"),
            "f.yaml:2:1: a second YAML document; a faults file is one "
            "document");
}

TEST(FaultFileTest, SideAndConnectionAreRefusedBecauseTheFileIsPerProcess) {
  EXPECT_EQ(ErrorOf("faults:\n- name: a\n  on: execute\n  side: server\n"
                    "  action: complete\n  status: REM_ACCESS_ERR\n"),
            "f.yaml:4:3: faults[0].side: a faults file (RPMA_HARNESS_FAULTS) "
            "applies to the one process it is given to; leave 'side' out and "
            "give the file to that process (the launcher's --faults "
            "LABEL=FILE)");
  EXPECT_NE(ErrorOf("faults:\n- name: a\n  connection: 1\n")
                .find("f.yaml:3:3: faults[0].connection: a faults file"),
            std::string::npos);
}

TEST(FaultFileTest, TheScenarioRunnersChecksAndMessages) {
  EXPECT_EQ(ErrorOf("faults:\n- name: a\n  on: reg_mr\n  action: explode\n"),
            "f.yaml:4:11: fault 'a'.action: unknown value 'explode' (expected "
            "one of: fail, complete, delay, lose_connection, overflow_cq, "
            "tear)");
  EXPECT_EQ(ErrorOf("faults:\n- name: a\n  on: reg_mr\n  action: fail\n"),
            "f.yaml:2:3: fault 'a': action 'fail' needs 'errno' (e.g. ENOMEM)");
  EXPECT_EQ(ErrorOf("faults:\n- name: a\n  nme: b\n"),
            "f.yaml:3:3: faults[0]: unknown key 'nme' (expected one of: name, "
            "on, side, connection, opcode, nth, every, probability, "
            "max_fires, min_length, max_length, imm, action, errno, status, "
            "steps, bytes)");
  EXPECT_EQ(ErrorOf("faults:\n- name: a\n  on:\n"),
            "f.yaml:3:3: faults[0]: key 'on' has no value (give one, or leave "
            "the key out)");
  EXPECT_EQ(ErrorOf("faults:\n- name: a\n  on: reg_mr\n  action: fail\n"
                    "  errno: EIO\n- name: a\n  on: reg_mr\n  action: fail\n"
                    "  errno: EIO\n"),
            "f.yaml:6:9: fault 'a': two faults have this name");
  EXPECT_EQ(ErrorOf("faults:\n-\n"),
            "f.yaml:2:1: faults[0]: expected a mapping of keys");
}

TEST(FaultFileTest, AnUnreadableFileSaysWhy) {
  FaultFile file;
  std::string error;
  EXPECT_FALSE(ReadFaultFile("/nonexistent/f.yaml", &file, &error));
  EXPECT_EQ(error,
            "/nonexistent/f.yaml: cannot open the faults file: No such file "
            "or directory");
  EXPECT_FALSE(ReadFaultFile("/", &file, &error));
  EXPECT_EQ(error, "/: not a regular file (expected a faults file)");
  EXPECT_NE(ErrorOf(std::string(kMaxFaultFileBytes + 1, '#')).find("64 KiB"),
            std::string::npos);
}

class EnvironmentTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("RPMA_HARNESS_FAULTS");
    unsetenv("RPMA_HARNESS_SEED");
  }
  std::string Write(const std::string& text) {
    const std::string path =
        std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
        "/faults_" + std::to_string(getpid()) + "_" + std::to_string(files_++) +
        ".yaml";
    std::ofstream(path) << text;
    return path;
  }
  int files_ = 0;
};

TEST_F(EnvironmentTest, UnsetLeavesTheBackendAlone) {
  auto nic = std::make_shared<FakeNic>();
  std::string error;
  EXPECT_EQ(WrapWithFaultsFromEnvironment(nic, &error), nic);
}

TEST_F(EnvironmentTest, AFileWrapsTheBackendInItsRules) {
  setenv("RPMA_HARNESS_FAULTS",
         Write("faults:\n- name: no mr\n  on: reg_mr\n  action: fail\n"
               "  errno: ENOMEM\n")
             .c_str(),
         1);
  auto nic = std::make_shared<FakeNic>();
  std::string error;
  auto wrapped = WrapWithFaultsFromEnvironment(nic, &error);
  ASSERT_NE(wrapped, nullptr) << error;
  auto* faults = dynamic_cast<FaultInjector*>(wrapped.get());
  ASSERT_NE(faults, nullptr);
  ibv_context* context = nullptr;
  ASSERT_EQ(faults->GetContextByAddress("127.0.0.1", false, &context), 0);
  ibv_pd* pd = faults->AllocPd(context);
  ASSERT_NE(pd, nullptr);
  char buffer[64];
  errno = 0;
  EXPECT_EQ(faults->RegMr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE),
            nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(faults->TimesFired("no mr"), 1u);
  faults->DeallocPd(pd);
}

TEST_F(EnvironmentTest, ABadFileOrSeedIsAnErrorNotARunWithoutFaults) {
  const std::string bad = Write("faults:\n- name: a\n  on: nowhere\n");
  setenv("RPMA_HARNESS_FAULTS", bad.c_str(), 1);
  std::string error;
  EXPECT_EQ(WrapWithFaultsFromEnvironment(std::make_shared<FakeNic>(), &error),
            nullptr);
  EXPECT_EQ(error, "RPMA_HARNESS_FAULTS=" + bad + ": " + bad +
                       ":3:7: fault 'a'.on: unknown value 'nowhere' (expected "
                       "one of: post_send, post_recv, poll_cq, reg_mr, "
                       "create_qp, connect, accept, cm_event, execute)");
  setenv("RPMA_HARNESS_FAULTS",
         Write("faults:\n- name: a\n  on: reg_mr\n  action: fail\n"
               "  errno: EIO\n")
             .c_str(),
         1);
  setenv("RPMA_HARNESS_SEED", "seven", 1);
  EXPECT_EQ(WrapWithFaultsFromEnvironment(std::make_shared<FakeNic>(), &error),
            nullptr);
  EXPECT_EQ(error,
            "RPMA_HARNESS_SEED='seven': expected an unsigned number (decimal "
            "without leading zeros, or hex as 0x...), got 'seven'");
}

}  // namespace
}  // namespace rpma_harness
