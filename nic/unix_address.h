// unix_address.h: a Unix-domain socket address for a path of any length,
// for the fabric's listeners and its Sequencer.
//
// unix(7): sun_path holds 107 bytes and a NUL, and bind(2)/connect(2) fail
// (or, worse, silently truncate) a longer path. A fabric directory is often
// longer than that: Bazel's TEST_TMPDIR is about 120 bytes before a file
// name. A longer path is reached through its directory instead: the
// directory is opened O_PATH, and the socket is named
// /proc/self/fd/<fd>/<file>, which the kernel resolves at bind(2) and
// connect(2) time to the same file (proc(5), /proc/[pid]/fd). The
// descriptor lives as long as the UnixAddress, so keep it until the call
// returns.
//
//   UnixAddress a(dir + "/l-127.0.0.1-7000");
//   if (a.error() != 0) return a.error();   // ENAMETOOLONG, ENOENT, ...
//   bind(fd, a.addr(), a.len());

#ifndef RPMA_HARNESS_NIC_UNIX_ADDRESS_H_
#define RPMA_HARNESS_NIC_UNIX_ADDRESS_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <string>

namespace rpma_harness {

class UnixAddress {
 public:
  explicit UnixAddress(const std::string& path);
  ~UnixAddress();
  UnixAddress(const UnixAddress&) = delete;
  UnixAddress& operator=(const UnixAddress&) = delete;

  // 0, or why the path cannot be addressed: ENAMETOOLONG (even the file
  // name alone is too long), or the errno of opening its directory.
  int error() const { return error_; }
  const sockaddr* addr() const {
    return reinterpret_cast<const sockaddr*>(&address_);
  }
  socklen_t len() const { return sizeof(address_); }
  // The path as the kernel is given it (the path itself, or the
  // /proc/self/fd form).
  const char* name() const { return address_.sun_path; }

 private:
  sockaddr_un address_;
  int dir_fd_ = -1;
  int error_ = 0;
};

}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_UNIX_ADDRESS_H_
