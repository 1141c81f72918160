// fake_nic_user_memory.h: how the fake NIC touches memory the program gave
// it, without ever crashing the program for the program's mistake.
//
// A real NIC pins an MR's pages at registration (ib_umem_get ->
// pin_user_pages with FOLL_WRITE when the access is writable), so
//   - registering memory the process cannot access fails with EFAULT
//     (ibv_reg_mr(3) returns NULL, errno EFAULT; rpma_mr_reg: RPMA_E_PROVIDER);
//   - memory unmapped or protected after registration is never seen by the
//     NIC again (it keeps DMAing the pinned pages).
// The fake cannot pin, so it checks the mapping at registration
// (CheckUserMapping) and moves bytes with GuardedCopy: a copy that faults
// because the program unmapped or protected registered memory afterwards
// returns false instead of killing the process; the fake completes the WR
// with an error and reports a harness error (see fake_nic_data_path.cc).
//
//   if (CheckUserMapping(addr, len, /*need_write=*/true) != 0) -> EFAULT
//   uintptr_t fault;
//   if (!GuardedCopy(dst, src, n, &fault)) ... fault is the faulting address

#ifndef RPMA_HARNESS_NIC_FAKE_NIC_USER_MEMORY_H_
#define RPMA_HARNESS_NIC_FAKE_NIC_USER_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace rpma_harness {
namespace fake_nic_internal {

// 0 when every byte of [addr, addr + length) is mapped readable (and
// writable when `need_write`) in this process, else EFAULT (also for a range
// that wraps). For registration, not the data path. Up to 64 MiB the pages
// are faulted in as a real registration's pin faults them in
// (MADV_POPULATE_READ / _WRITE, Linux 5.14); larger ranges, and older
// kernels, are checked against /proc/self/maps, which commits no memory.
// When /proc is not mounted either, falls back to probing each page for
// reading (process_vm_readv) and cannot tell a read-only page.
int CheckUserMapping(uintptr_t addr, size_t length, bool need_write);

// memmove(dst, src, n) (in loopback a source and a destination may
// overlap), except that a SIGSEGV or SIGBUS raised by the copy
// itself ends the copy and returns false with the faulting address in
// *fault_addr (some bytes may have been copied). Costs a sigsetjmp without
// a signal mask and two thread-local stores when nothing faults. The
// handler is installed once per process (InstallCopyFaultHandler, also
// called by the first GuardedCopy); a fault anywhere else goes to the
// handler that was installed before (e.g. ASan's) or to the default action.
// The NIC writes a program's memory through FakeNic::NicWrite, which tells
// the write taps (nic/nic_tap.h) and then calls this.
bool GuardedCopy(void* dst, const void* src, size_t n, uintptr_t* fault_addr);
void InstallCopyFaultHandler();

// A GuardedCopy of WR `wr_id` faulted: the program gave the NIC memory and
// then unmapped or protected it. A real NIC would not notice (it DMAs the
// pages it pinned at registration), so this is the program's bug, reported
// loudly: printed on stderr, and returned for the event's text. `whose`
// names the memory ("the requester's", "the responder's", ...).
std::string HarnessMemoryError(const char* whose, uint64_t wr_id);

}  // namespace fake_nic_internal
}  // namespace rpma_harness

#endif  // RPMA_HARNESS_NIC_FAKE_NIC_USER_MEMORY_H_
