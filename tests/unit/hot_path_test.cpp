// The uncontended hot path makes no heap allocation and no system call.
// Allocations are counted by replacing operator new in this binary;
// system calls are forbidden by a seccomp filter in a forked child, which
// the kernel kills (SIGSYS) at the first one. vDSO clock reads are not
// system calls, so they pass.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <shmsem/shmsem.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "shm/segment.hpp"
#include "test_support.hpp"

namespace {
std::atomic<long> allocations{0};
}

void* operator new(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace shmsem {
namespace {

using namespace std::chrono_literals;

void hot_loop(Semaphore& s, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    Permit a = s.acquire();
    auto b = s.try_acquire(2);
    Permit c = s.acquire(1, {.ttl = 5s});
    a.release();
    b->release();
    c.release();
  }
}

TEST(HotPath, AcquireTryAcquireAndReleaseDoNotAllocate) {
  test::unique_key k;
  auto s = Semaphore::open(k, 8);
  hot_loop(s, 10);  // first use claims this process's holder record
  const long before = allocations.load();
  hot_loop(s, 1000);
  EXPECT_EQ(allocations.load() - before, 0);
  EXPECT_EQ(s.used(), 0);
}

std::atomic<long> locks_taken{0};
void count_locks(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::locked) locks_taken.fetch_add(1);
}

TEST(HotPath, UncontendedAcquireTryAcquireAndReleaseTakeNoLock) {
  test::unique_key k;
  auto s = Semaphore::open(k, 8);
  hot_loop(s, 10);  // the first round fills this thread's slot cache, under the lock
  detail::testing::set_hook(count_locks);
  hot_loop(s, 1000);
  detail::testing::set_hook(nullptr);
  // 3000 acquires. The thread's block of 1024 permit ids runs out about
  // three times; each refill grants that one lease under the lock, and its
  // release takes the lock too. Everything else is lock-free.
  EXPECT_LE(locks_taken.load(), 2 * (3000 / 1024 + 2));
  EXPECT_EQ(s.used(), 0);
}

TEST(HotPath, AcquireTryAcquireAndReleaseMakeNoSystemCall) {
  test::unique_key k;
  auto s = Semaphore::open(k, 8);
  hot_loop(s, 10);
  test::child_process child([&] {
    hot_loop(s, 10);  // the child's own holder record, claimed with syscalls
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 2;
    if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return 3;
    hot_loop(s, 1000);
    ::syscall(SYS_exit_group, 0);
    return 4;
  });
  EXPECT_EQ(child.wait(), 0) << "128+31 means the hot path made a system call (SIGSYS)";
  EXPECT_EQ(s.used(), 0);
}

}  // namespace
}  // namespace shmsem
