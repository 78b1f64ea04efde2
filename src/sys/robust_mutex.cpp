// sys/robust_mutex.cpp: the pthread calls behind the robust mutexes (see
// robust_mutex.hpp).

#include "sys/robust_mutex.hpp"

#include <linux/futex.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>

#include "sys/clock.hpp"
#include "sys/futex.hpp"

namespace shmsem::sys {

int robust_mutex_init(pthread_mutex_t* m) {
  pthread_mutexattr_t a;
  int e = pthread_mutexattr_init(&a);
  if (e) return e;
  // PTHREAD_PRIO_INHERIT is deliberately not set: glibc asserts when a PI
  // owner lives in another PID namespace.
  if (!(e = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED)) &&
      !(e = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST)))
    e = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  return e;
}

lock_result robust_mutex_lock(pthread_mutex_t* m, std::int64_t deadline_ns) {
  int e;
  if (deadline_ns == kNever) {
    e = pthread_mutex_lock(m);
  } else if (deadline_ns == kNoWait) {
    e = pthread_mutex_trylock(m);
    if (e == EBUSY) e = ETIMEDOUT;
  } else {
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer (GCC 12) does not intercept pthread_mutex_clocklock
    // and then reports every unlock as bogus; give it the realtime variant.
    timespec rt;
    ::clock_gettime(CLOCK_REALTIME, &rt);
    const std::int64_t left = deadline_ns - precise_now_ns();
    timespec ts = to_timespec(to_ns(rt) + (left > 0 ? left : 0));
    e = pthread_mutex_timedlock(m, &ts);
#else
    timespec ts = to_timespec(deadline_ns < 0 ? 0 : deadline_ns);
    e = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
#endif
  }
  switch (e) {
    case 0:
      return lock_result::locked;
    case EOWNERDEAD:
      return lock_result::owner_died;
    case ETIMEDOUT:
      return lock_result::timed_out;
    default:
      return lock_result::unrecoverable;
  }
}

int robust_mutex_make_consistent(pthread_mutex_t* m) {
  return pthread_mutex_consistent(m);
}

void robust_mutex_unlock(pthread_mutex_t* m) {
  pthread_mutex_unlock(m);
}

lock_result robust_mutex_trylock(pthread_mutex_t* m) {
  switch (pthread_mutex_trylock(m)) {
    case 0:
      return lock_result::locked;
    case EOWNERDEAD:
      return lock_result::owner_died;
    case EBUSY:
      return lock_result::timed_out;
    default:
      return lock_result::unrecoverable;
  }
}

bool robust_mutex_owner_alive(const pthread_mutex_t* m) {
  // glibc's pthread_mutex_t begins with the futex word (__data.__lock).
  static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0);
  const auto* word = reinterpret_cast<const std::atomic<std::uint32_t>*>(m);
  const std::uint32_t w = word->load(std::memory_order_acquire);
  return (w & FUTEX_TID_MASK) != 0 && (w & FUTEX_OWNER_DIED) == 0;
}

bool robust_mutex_watch(pthread_mutex_t* m, const std::atomic<std::uint32_t>*& word,
                        std::uint32_t& expected) {
  auto* w = reinterpret_cast<std::atomic<std::uint32_t>*>(m);
  std::uint32_t v = w->load(std::memory_order_acquire);
  do {
    if ((v & FUTEX_TID_MASK) == 0 || (v & FUTEX_OWNER_DIED) != 0) return false;
    if (v & FUTEX_WAITERS) break;
  } while (!w->compare_exchange_weak(v, v | FUTEX_WAITERS, std::memory_order_acq_rel,
                                     std::memory_order_acquire));
  word = w;
  expected = v | FUTEX_WAITERS;
  return true;
}

void robust_mutex_wake_watchers(pthread_mutex_t* m) {
  futex_wake(reinterpret_cast<std::atomic<std::uint32_t>*>(m), INT_MAX);
}

}  // namespace shmsem::sys
