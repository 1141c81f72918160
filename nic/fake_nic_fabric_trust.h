// Who may join a fabric: the rules for the fabric directory and for the
// processes at the other end of its sockets.
//
// A fabric directory (RPMA_HARNESS_FABRIC) is where processes publish their
// listeners and dial each other; whoever can create a file there can stand
// in for a server, and whoever can connect can read what a client writes.
// So, as a careful daemon treats its runtime directory:
//   - the directory is created 0700 if it is missing (its parent must
//     exist); an existing one must be a real directory (not a symbolic
//     link, not a file), owned by this process's effective uid, and not
//     writable by other users (no S_IWOTH, and no S_IWGRP unless shared);
//   - a peer at the other end of a socket must have this process's uid
//     (SO_PEERCRED), on both the accepting and the dialling side.
// RPMA_HARNESS_FABRIC_SHARED=group is the one opt-in: then the directory
// may belong to another user and be group-writable, provided its group is
// one of this process's groups, and peers of that group are accepted too.
// A refusal is an error with a message naming the rule; nothing is created
// in a refused directory.

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_TRUST_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_TRUST_H_

#include <sys/types.h>

#include <string>

namespace rpma_harness {

struct FabricTrust {
  bool shared_group = false;  // RPMA_HARNESS_FABRIC_SHARED=group
  gid_t group = 0;            // the directory's group, when shared_group
};

// The trust a fabric of this process grants, from RPMA_HARNESS_FABRIC_SHARED
// (an unknown value is reported on stderr and grants nothing more).
FabricTrust FabricTrustFromEnvironment();

// Creates `dir` (0700) if missing and checks it against the rules above.
// Returns 0, or an errno (ELOOP a symbolic link, ENOTDIR not a directory,
// EACCES a foreign owner or writable by others, or what mkdir/lstat said)
// with *why saying which rule and how to mend it. Fills trust->group.
int CheckFabricDirectory(const std::string& dir, FabricTrust* trust,
                         std::string* why);

// Whether the process at the other end of the connected Unix socket `fd`
// may talk to this fabric; on false, *why names its uid and gid.
bool FabricPeerAllowed(int fd, const FabricTrust& trust, std::string* why);

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_FABRIC_TRUST_H_
