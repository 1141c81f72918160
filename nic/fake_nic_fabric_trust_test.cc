// The fabric's trust rules (fake_nic_fabric_trust.h): which directories a
// fabric accepts, and which peers. Cases that need a second user (a
// directory owned by someone else, a peer of another uid) run as root and
// skip otherwise.

#include "nic/fake_nic_fabric_trust.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "mock/test_dir.h"
#include "nic/fake_nic.h"

namespace rpma_harness {
namespace {

constexpr uid_t kNobody = 65534;

class FabricTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("RPMA_HARNESS_FABRIC_SHARED");
    base_ = NewTestDir("fabric_trust");
    ASSERT_FALSE(base_.empty());
  }
  void TearDown() override {
    const std::string cmd = "rm -rf '" + base_ + "'";
    ASSERT_EQ(system(cmd.c_str()), 0);
  }
  int Check(const std::string& dir, FabricTrust trust = {}) {
    why_.clear();
    return CheckFabricDirectory(dir, &trust, &why_);
  }
  static bool Empty(const std::string& dir) {
    const std::string cmd = "test -z \"$(ls -A '" + dir + "')\"";
    return system(cmd.c_str()) == 0;
  }
  std::string base_;
  std::string why_;
};

TEST_F(FabricTrustTest, AMissingDirectoryIsCreatedPrivate) {
  const mode_t old = umask(0);
  const std::string dir = base_ + "/fabric";
  EXPECT_EQ(Check(dir), 0) << why_;
  umask(old);
  struct stat st;
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  // And accepted again as it is.
  EXPECT_EQ(Check(dir), 0) << why_;
}

TEST_F(FabricTrustTest, AMissingParentIsAnErrorNotACreatedPath) {
  EXPECT_EQ(Check(base_ + "/no/such/parent"), ENOENT);
  EXPECT_NE(why_.find("cannot create"), std::string::npos) << why_;
}

TEST_F(FabricTrustTest, ASymbolicLinkIsRefusedAndNothingIsCreatedWhereItPoints) {
  const std::string target = base_ + "/target";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  const std::string link = base_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(Check(link), ELOOP);
  EXPECT_NE(why_.find("symbolic link"), std::string::npos) << why_;
  EXPECT_TRUE(Empty(target));
  // A dangling link is refused too, not followed to create its target.
  const std::string dangling = base_ + "/dangling";
  ASSERT_EQ(symlink((base_ + "/elsewhere").c_str(), dangling.c_str()), 0);
  EXPECT_EQ(Check(dangling), ELOOP);
  struct stat st;
  EXPECT_NE(lstat((base_ + "/elsewhere").c_str(), &st), 0);
}

TEST_F(FabricTrustTest, AFileIsRefused) {
  const std::string file = base_ + "/file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_EQ(Check(file), ENOTDIR);
  EXPECT_NE(why_.find("not a directory"), std::string::npos) << why_;
}

TEST_F(FabricTrustTest, AWorldWritableDirectoryIsRefusedEvenSharedWithTheGroup) {
  const std::string dir = base_ + "/open";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 01777), 0);  // as /tmp
  EXPECT_EQ(Check(dir), EACCES);
  EXPECT_NE(why_.find("writable by every user (mode 1777)"), std::string::npos)
      << why_;
  FabricTrust shared;
  shared.shared_group = true;
  EXPECT_EQ(Check(dir, shared), EACCES);
  EXPECT_TRUE(Empty(dir));
}

TEST_F(FabricTrustTest, AGroupWritableDirectoryNeedsTheSharedGroupOptIn) {
  const std::string dir = base_ + "/team";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0770), 0);
  EXPECT_EQ(Check(dir), EACCES);
  EXPECT_NE(why_.find("RPMA_HARNESS_FABRIC_SHARED=group"), std::string::npos)
      << why_;
  FabricTrust shared;
  shared.shared_group = true;
  EXPECT_EQ(Check(dir, shared), 0) << why_;
}

TEST_F(FabricTrustTest, TheOptInIsReadFromTheEnvironmentAndOnlyGroupCounts) {
  EXPECT_FALSE(FabricTrustFromEnvironment().shared_group);
  setenv("RPMA_HARNESS_FABRIC_SHARED", "group", 1);
  EXPECT_TRUE(FabricTrustFromEnvironment().shared_group);
  setenv("RPMA_HARNESS_FABRIC_SHARED", "everyone", 1);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(FabricTrustFromEnvironment().shared_group);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "RPMA_HARNESS_FABRIC_SHARED=everyone: expected 'group'"),
            std::string::npos);
  unsetenv("RPMA_HARNESS_FABRIC_SHARED");
}

TEST_F(FabricTrustTest, ADirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  const std::string dir = base_ + "/theirs";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  if (chown(dir.c_str(), kNobody, kNobody) != 0) {
    // A sandbox's user namespace may map no second uid.
    GTEST_SKIP() << "cannot give a directory to uid 65534 here: "
                 << strerror(errno);
  }
  EXPECT_EQ(Check(dir), EACCES);
  EXPECT_NE(why_.find("belongs to uid 65534"), std::string::npos) << why_;
  // Shared with the group: still refused, 65534 is not one of our groups.
  FabricTrust shared;
  shared.shared_group = true;
  EXPECT_EQ(Check(dir, shared), EACCES);
  EXPECT_NE(why_.find("is not one of this user's"), std::string::npos) << why_;
}

TEST_F(FabricTrustTest, APeerOfThisUserIsAllowed) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::string why;
  EXPECT_TRUE(FabricPeerAllowed(sv[0], FabricTrust{}, &why)) << why;
  close(sv[0]);
  close(sv[1]);
}

TEST_F(FabricTrustTest, APeerOfAnotherUserIsRefusedUnlessOfTheSharedGroup) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a second user";
  // An abstract socket: no file permissions stand between the two users.
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "rpma-harness-trust-" + std::to_string(getpid());
  memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  auto dial_as_nobody = [&]() -> int {
    const pid_t pid = fork();
    if (pid == 0) {
      if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      _exit(connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 ? 0 : 4);
    }
    // The child has connected (or failed) before it exits: the connection
    // waits in the backlog, with the credentials of its connect.
    int status = 0;
    waitpid(pid, &status, 0);
    const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (fd >= 0) close(fd);
      return -WEXITSTATUS(status);
    }
    return fd;
  };
  const int fd = dial_as_nobody();
  if (fd == -3) GTEST_SKIP() << "setuid is not allowed here (a sandbox)";
  ASSERT_GE(fd, 0);
  std::string why;
  EXPECT_FALSE(FabricPeerAllowed(fd, FabricTrust{}, &why));
  EXPECT_NE(why.find("uid 65534"), std::string::npos) << why;
  FabricTrust shared;
  shared.shared_group = true;
  shared.group = kNobody;
  EXPECT_TRUE(FabricPeerAllowed(fd, shared, &why)) << why;
  shared.group = 12345;
  EXPECT_FALSE(FabricPeerAllowed(fd, shared, &why));
  close(fd);
  close(listener);
}

// A NIC given a refused directory says why, stays off the fabric, and
// creates nothing there.
TEST_F(FabricTrustTest, ANicGivenARefusedDirectoryStaysOffTheFabric) {
  const std::string target = base_ + "/target";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  const std::string link = base_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  FakeNicConfig config;
  config.fabric_dir = link;
  testing::internal::CaptureStderr();
  { FakeNic nic(config); }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("fake_nic fabric: refusing " + link +
                     ": " + link + " is a symbolic link"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("cannot join the fabric"), std::string::npos) << err;
  EXPECT_TRUE(Empty(target));
}

// The directory removed after the NIC joined (a /tmp cleaner): a listen
// makes it again, 0700, and publishes; the same directory replaced by a
// symbolic link is refused as at joining, and nothing lands where it
// points.
TEST_F(FabricTrustTest, AListenAfterTheDirectoryWasRemovedMakesItAgain) {
  const std::string dir = base_ + "/fabric";
  FakeNicConfig config;
  config.fabric_dir = dir;
  FakeNic nic(config);
  const std::string rm = "rm -rf '" + dir + "'";
  ASSERT_EQ(system(rm.c_str()), 0);
  auto listen = [&nic](const char* port) {
    rdma_event_channel* channel = nic.CreateEventChannel();
    rdma_cm_id* id = nullptr;
    if (channel == nullptr || nic.CreateId(channel, &id, nullptr) != 0 ||
        nic.BindAddr(id, "127.0.0.1", port) != 0) {
      return -2;
    }
    return nic.Listen(id, 4);
  };
  EXPECT_EQ(listen("7301"), 0);
  struct stat st;
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(access((dir + "/l-127.0.0.1-7301").c_str(), F_OK), 0);

  ASSERT_EQ(system(rm.c_str()), 0);
  const std::string target = base_ + "/target";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), dir.c_str()), 0);
  testing::internal::CaptureStderr();
  EXPECT_NE(listen("7302"), 0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("is a symbolic link"), std::string::npos) << err;
  EXPECT_TRUE(Empty(target));
}

}  // namespace
}  // namespace rpma_harness
