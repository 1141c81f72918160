#include "nic/fake_nic_fabric_trust.h"

#include <errno.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace rpma_harness {

namespace {

bool InMyGroups(gid_t gid) {
  if (gid == getegid()) return true;
  const int n = getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = getgroups(n, groups.data());
  for (int i = 0; i < got; ++i) {
    if (groups[static_cast<size_t>(i)] == gid) return true;
  }
  return false;
}

std::string Octal(mode_t mode) {
  char text[16];
  snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

FabricTrust FabricTrustFromEnvironment() {
  FabricTrust trust;
  // env RPMA_HARNESS_FABRIC_SHARED=group: share a fabric with the users of
  //   the fabric directory's group: the directory may be another member's
  //   and group-writable (never world-writable), and peers of that group are
  //   accepted. Unset: only this user's processes (nic/fake_nic_fabric_trust.h).
  const char* shared = getenv("RPMA_HARNESS_FABRIC_SHARED");
  if (shared == nullptr || *shared == '\0') return trust;
  if (strcmp(shared, "group") == 0) {
    trust.shared_group = true;
  } else {
    fprintf(stderr,
            "fake_nic fabric: RPMA_HARNESS_FABRIC_SHARED=%s: expected "
            "'group' (or unset): sharing with nobody but this user\n",
            shared);
  }
  return trust;
}

int CheckFabricDirectory(const std::string& dir, FabricTrust* trust,
                         std::string* why) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      const int err = errno;
      *why = "cannot look at " + dir + ": " + strerror(err);
      return err;
    }
    // Missing: ours, 0700. EEXIST: someone made it meanwhile; it is
    // checked like any existing one below.
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      const int err = errno;
      *why = "cannot create " + dir + ": " + strerror(err);
      return err;
    }
    if (lstat(dir.c_str(), &st) != 0) {
      const int err = errno;
      *why = "cannot look at " + dir + ": " + strerror(err);
      return err;
    }
  }
  if (S_ISLNK(st.st_mode)) {
    *why = dir +
           " is a symbolic link; give the directory it points to (a link "
           "in a shared directory such as /tmp could be redirected by "
           "another user)";
    return ELOOP;
  }
  if (!S_ISDIR(st.st_mode)) {
    *why = dir + " exists and is not a directory";
    return ENOTDIR;
  }
  const bool group_ok = trust->shared_group && InMyGroups(st.st_gid);
  if (st.st_uid != geteuid() && !group_ok) {
    *why = dir + " belongs to uid " + std::to_string(st.st_uid) +
           ", not to this user (uid " + std::to_string(geteuid()) +
           "): another user could publish listeners there" +
           (trust->shared_group
                ? std::string(" (RPMA_HARNESS_FABRIC_SHARED=group: its group ") +
                      std::to_string(st.st_gid) + " is not one of this user's)"
                : "; to share a fabric with a group, use a directory of that "
                  "group and RPMA_HARNESS_FABRIC_SHARED=group");
    return EACCES;
  }
  if (st.st_mode & S_IWOTH) {
    *why = dir + " is writable by every user (mode " + Octal(st.st_mode) +
           "): use a directory of your own (it is created 0700 if missing)";
    return EACCES;
  }
  if ((st.st_mode & S_IWGRP) && !group_ok) {
    *why = dir + " is writable by its group (mode " + Octal(st.st_mode) +
           "): chmod g-w it, or set RPMA_HARNESS_FABRIC_SHARED=group to "
           "share the fabric with that group";
    return EACCES;
  }
  trust->group = st.st_gid;
  return 0;
}

bool FabricPeerAllowed(int fd, const FabricTrust& trust, std::string* why) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    *why = std::string("cannot read the peer's credentials: ") +
           strerror(errno);
    return false;
  }
  if (cred.uid == geteuid()) return true;
  if (trust.shared_group && cred.gid == trust.group) return true;
  *why = "a process of uid " + std::to_string(cred.uid) + " (gid " +
         std::to_string(cred.gid) + ", pid " + std::to_string(cred.pid) +
         ") is not this user (uid " + std::to_string(geteuid()) + ")" +
         (trust.shared_group ? " nor of the fabric's group " +
                                   std::to_string(trust.group)
                             : std::string());
  return false;
}

}  // namespace rpma_harness
