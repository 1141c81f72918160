// unix_address.cc: see unix_address.h.

#include "nic/unix_address.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace rpma_harness {

UnixAddress::UnixAddress(const std::string& path) {
  memset(&address_, 0, sizeof(address_));
  address_.sun_family = AF_UNIX;
  if (path.size() + 1 <= sizeof(address_.sun_path)) {
    memcpy(address_.sun_path, path.c_str(), path.size() + 1);
    return;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos
                              ? "."
                              : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string file =
      slash == std::string::npos ? path : path.substr(slash + 1);
  dir_fd_ = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    error_ = errno;
    return;
  }
  const int n = snprintf(address_.sun_path, sizeof(address_.sun_path),
                         "/proc/self/fd/%d/%s", dir_fd_, file.c_str());
  if (n < 0 || static_cast<size_t>(n) + 1 > sizeof(address_.sun_path)) {
    error_ = ENAMETOOLONG;
    address_.sun_path[0] = '\0';
  }
}

UnixAddress::~UnixAddress() {
  if (dir_fd_ >= 0) close(dir_fd_);
}

}  // namespace rpma_harness
