// sys/robust_mutex.hpp: process-shared robust pthread mutexes: the segment
// lock, and each holder record's lifeline. When its owner dies the kernel
// marks it, and the next locker gets lock_result::owner_died: it must repair
// the protected state, then call make_consistent() before unlocking, or the
// mutex is lost for good.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace shmsem::sys {

enum class lock_result { locked, owner_died, timed_out, unrecoverable };

/// Initializes a process-shared robust mutex in place. Returns errno or 0.
int robust_mutex_init(pthread_mutex_t* m);

/// Locks, waiting at most until the absolute CLOCK_MONOTONIC deadline
/// (kNever: without limit; kNoWait: only if it is free now).
lock_result robust_mutex_lock(pthread_mutex_t* m, std::int64_t deadline_ns);

/// Marks the state repaired after owner_died. Returns errno or 0.
int robust_mutex_make_consistent(pthread_mutex_t* m);

void robust_mutex_unlock(pthread_mutex_t* m);

/// Locks without waiting: locked, owner_died (then locked too), or
/// timed_out when another thread holds it.
lock_result robust_mutex_trylock(pthread_mutex_t* m);

/// Reads the owner word of a robust mutex, without any lock, and tells
/// whether a live thread holds it: its thread id is in the word and the
/// kernel has not marked it FUTEX_OWNER_DIED. This is the kernel's robust
/// futex ABI (the word glibc's robust list points the kernel at), not a
/// glibc detail: the kernel writes it when the owner dies.
bool robust_mutex_owner_alive(const pthread_mutex_t* m);

/// Makes the kernel wake a sleeper on the owner word of `m` when its owner
/// dies: sets FUTEX_WAITERS in the word if a live thread holds it. Returns
/// the word to sleep on (with the value it must still have) in `out`, or
/// false if no live thread holds `m`. The owner's unlock then wakes a
/// sleeper too, as any contended unlock would.
bool robust_mutex_watch(pthread_mutex_t* m, const std::atomic<std::uint32_t>*& word,
                        std::uint32_t& expected);

/// Wakes every sleeper on the owner word of `m` (robust_mutex_watch): its
/// owner died or let go, and they must look again.
void robust_mutex_wake_watchers(pthread_mutex_t* m);

}  // namespace shmsem::sys
