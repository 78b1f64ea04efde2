// sys/futex.cpp: the futex system calls (see futex.hpp).

#include "sys/futex.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "sys/clock.hpp"

namespace shmsem::sys {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

wait_result futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::int64_t deadline_ns) {
  timespec ts{};
  const timespec* tp = nullptr;
  if (deadline_ns != kNever) {
    ts = to_timespec(deadline_ns < 0 ? 0 : deadline_ns);
    tp = &ts;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline, so a
  // spurious wakeup never stretches the total wait.
  long r = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_BITSET, expected,
                     tp, nullptr, FUTEX_BITSET_MATCH_ANY);
  if (r == 0) return wait_result::woken;
  switch (errno) {
    case ETIMEDOUT:
      return wait_result::timed_out;
    case EAGAIN:
      return wait_result::value_changed;
    default:
      return wait_result::interrupted;
  }
}

void futex_wake(std::atomic<std::uint32_t>* word, int count) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr,
            0);
}

void yield() {
  ::sched_yield();
}

}  // namespace shmsem::sys
