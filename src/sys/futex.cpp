// sys/futex.cpp: the futex system calls (see futex.hpp).

#include "sys/futex.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <cerrno>
#include <climits>
#include <cstdint>

#include "sys/clock.hpp"

namespace shmsem::sys {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

wait_result futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::int64_t deadline_ns) {
  timespec ts{};
  const timespec* tp = nullptr;
  if (deadline_ns != kNever) {
    ts = to_timespec(deadline_ns < 0 ? 0 : deadline_ns);
    tp = &ts;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline, so a
  // spurious wakeup never stretches the total wait.
  long r = ::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(word), FUTEX_WAIT_BITSET,
                     expected, tp, nullptr, FUTEX_BITSET_MATCH_ANY);
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

namespace {
// -1 unknown, 0 missing (ENOSYS), 1 works.
std::atomic<int> waitv_state{-1};
}  // namespace

waitv_result futex_waitv(const wait_word* words, int n, std::int64_t deadline_ns) {
  if (waitv_state.load(std::memory_order_relaxed) == 0) return {wait_result::interrupted};
  ::futex_waitv v[kMaxWaitWords] = {};
  n = n < kMaxWaitWords ? n : kMaxWaitWords;
  for (int i = 0; i < n; ++i) {
    v[i].val = words[i].expected;
    v[i].uaddr = reinterpret_cast<std::uintptr_t>(words[i].word);
    v[i].flags = FUTEX_32;  // shared: no FUTEX_PRIVATE_FLAG
  }
  timespec ts{};
  const timespec* tp = nullptr;
  if (deadline_ns != kNever) {
    ts = to_timespec(deadline_ns < 0 ? 0 : deadline_ns);
    tp = &ts;
  }
  const long r = ::syscall(SYS_futex_waitv, v, static_cast<unsigned>(n), 0u, tp, CLOCK_MONOTONIC);
  if (r >= 0) {
    waitv_state.store(1, std::memory_order_relaxed);
    return {wait_result::woken, static_cast<int>(r)};
  }
  switch (errno) {
    case ETIMEDOUT:
      return {wait_result::timed_out};
    case EAGAIN:
      return {wait_result::value_changed};
    case EINTR:
      return {wait_result::interrupted};
    default:
      // ENOSYS (before Linux 5.16), or a refusal that would refuse every
      // retry: the callers fall back to one word and their ticks.
      waitv_state.store(0, std::memory_order_relaxed);
      return {wait_result::interrupted};
  }
}

bool waitv_supported() {
  int st = waitv_state.load(std::memory_order_relaxed);
  if (st < 0) {
    // An empty vector is refused (EINVAL) where the call exists.
    st =
        ::syscall(SYS_futex_waitv, nullptr, 0u, 0u, nullptr, CLOCK_MONOTONIC) < 0 && errno == ENOSYS
            ? 0
            : 1;
    waitv_state.store(st, std::memory_order_relaxed);
  }
  return st == 1;
}

void futex_wake(std::atomic<std::uint32_t>* word, int count) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr,
            0);
}

void yield() {
  ::sched_yield();
}

}  // namespace shmsem::sys
