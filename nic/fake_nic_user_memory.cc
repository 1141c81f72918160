#include "nic/fake_nic_user_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace rpma_harness {
namespace fake_nic_internal {
namespace {

// Reads a whole /proc file (its size is not known in advance).
bool ReadProcFile(const char* path, std::string* text) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[8192];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text->append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

// Without /proc: one byte per page must be readable (process_vm_readv on
// ourselves returns EFAULT instead of faulting).
int ProbeReadable(uintptr_t addr, size_t length) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t last = addr + length - 1;
  for (uintptr_t p = addr;; p = (p | (page - 1)) + 1) {
    char byte;
    iovec local{&byte, 1};
    iovec remote{reinterpret_cast<void*>(p), 1};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != 1) {
      return EFAULT;
    }
    if ((p | (page - 1)) >= last) return 0;
  }
}

// MADV_POPULATE_READ / MADV_POPULATE_WRITE (Linux 5.14, uapi
// asm-generic/mman-common.h); Debian 12's glibc headers predate them.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// Ranges up to this size are checked by faulting their pages in (below);
// larger ones by /proc/self/maps, which commits no memory.
constexpr size_t kPopulateLimit = size_t{64} << 20;

// Whether this kernel has MADV_POPULATE_READ: asked once, on a page that
// is certainly readable (this function's own code).
bool HavePopulate() {
  static const bool have = [] {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t self = reinterpret_cast<uintptr_t>(&HavePopulate);
    return madvise(reinterpret_cast<void*>(self & ~(page - 1)), page,
                   MADV_POPULATE_READ) == 0;
  }();
  return have;
}

// ibv_reg_mr pins the range's pages (kernel ib_umem_get:
// pin_user_pages_fast, FOLL_WRITE for a writable access): each page is
// faulted in, and one that is unmapped or lacks the permission fails the
// registration. MADV_POPULATE_READ / _WRITE fault the pages in the same way
// without the pin (mm/madvise.c madvise_populate) and answer in one call:
// ENOMEM for a hole, EINVAL for a page without the permission (or a
// mapping that cannot be pinned either), EFAULT where an access would
// raise SIGBUS. Its cost is the range's pages, where a walk of
// /proc/self/maps costs every mapping of the process (~100 us a
// registration in tools/bench/conn_bench, growing with each connection's
// mappings). -1: the kernel cannot tell (no MADV_POPULATE_*).
int CheckByPopulating(uintptr_t addr, size_t length, bool need_write) {
  if (!HavePopulate()) return -1;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = addr & ~(page - 1);
  const uintptr_t end = (addr + length + page - 1) & ~(page - 1);
  if (end < start) return EFAULT;  // the last page wraps
  while (madvise(reinterpret_cast<void*>(start), end - start,
                 need_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) !=
         0) {
    if (errno != EINTR) return EFAULT;
  }
  return 0;
}

// ---- fault-contained copies -------------------------------------------------

struct CopyGuard {
  sigjmp_buf env;
  uintptr_t fault_addr = 0;
};

thread_local CopyGuard* t_guard = nullptr;
struct sigaction g_previous_segv;
struct sigaction g_previous_bus;
std::atomic<bool> g_installed{false};
std::once_flag g_install_once;

void OnFault(int sig, siginfo_t* info, void* context) {
  CopyGuard* guard = t_guard;
  if (guard != nullptr) {
    t_guard = nullptr;
    guard->fault_addr = reinterpret_cast<uintptr_t>(info->si_addr);
    // SA_NODEFER: the signal is not blocked in the handler, so jumping out
    // without restoring a mask leaves the thread as it was.
    siglongjmp(guard->env, 1);
  }
  // Not a guarded copy: whoever handled the signal before us decides.
  const struct sigaction& previous =
      sig == SIGSEGV ? g_previous_segv : g_previous_bus;
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // The default action (terminate with a core dump), as without us.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

}  // namespace

int CheckUserMapping(uintptr_t addr, size_t length, bool need_write) {
  if (length == 0) return 0;
  if (addr + length < addr) return EFAULT;  // wraps
  if (length <= kPopulateLimit) {
    const int populated = CheckByPopulating(addr, length, need_write);
    if (populated >= 0) return populated;
  }
  const uintptr_t end = addr + length;
  std::string maps;
  if (!ReadProcFile("/proc/self/maps", &maps) || maps.empty()) {
    return ProbeReadable(addr, length);
  }
  // Lines are sorted by address: "start-end rwxp offset dev inode path".
  // The range must be covered without a gap by mappings that allow it.
  uintptr_t covered = addr;
  size_t pos = 0;
  while (pos < maps.size() && covered < end) {
    const size_t eol = maps.find('\n', pos);
    const std::string line = maps.substr(
        pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? maps.size() : eol + 1;
    uintptr_t start = 0, stop = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %7s", &start,
                    &stop, perms) != 3) {
      continue;
    }
    if (stop <= covered) continue;
    if (start > covered) return EFAULT;  // a hole
    if (perms[0] != 'r' || (need_write && perms[1] != 'w')) return EFAULT;
    covered = stop;
  }
  return covered >= end ? 0 : EFAULT;
}

void InstallCopyFaultHandler() {
  std::call_once(g_install_once, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = OnFault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous_segv);
    sigaction(SIGBUS, &action, &g_previous_bus);
    g_installed.store(true, std::memory_order_release);
  });
}

bool GuardedCopy(void* dst, const void* src, size_t n, uintptr_t* fault_addr) {
  if (!g_installed.load(std::memory_order_acquire)) InstallCopyFaultHandler();
  CopyGuard guard;
  if (sigsetjmp(guard.env, 0) != 0) {
    *fault_addr = guard.fault_addr;
    return false;
  }
  t_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memmove(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
  return true;
}

std::string HarnessMemoryError(const char* whose, uint64_t wr_id) {
  std::string text = std::string("harness error: ") + whose + " memory of WR " +
                     std::to_string(wr_id) +
                     " faulted (unmapped or protected after registration; "
                     "a real NIC keeps the pages it pinned)";
  std::fprintf(stderr, "fake NIC: %s\n", text.c_str());
  return text;
}

}  // namespace fake_nic_internal
}  // namespace rpma_harness
