// sys/robust_mutex.hpp: the segment lock, a process-shared robust pthread
// mutex. When its owner dies the kernel marks it, and the next locker gets
// lock_result::owner_died: it must repair the protected state, then call
// make_consistent() before unlocking, or the mutex is lost for good.
#pragma once

#include <pthread.h>

#include <cstdint>

namespace shmsem::sys {

enum class lock_result { locked, owner_died, timed_out, unrecoverable };

/// Initializes a process-shared robust mutex in place. Returns errno or 0.
int robust_mutex_init(pthread_mutex_t* m);

/// Locks, waiting at most until the absolute CLOCK_MONOTONIC deadline
/// (kNever: without limit).
lock_result robust_mutex_lock(pthread_mutex_t* m, std::int64_t deadline_ns);

/// Marks the state repaired after owner_died.
void robust_mutex_make_consistent(pthread_mutex_t* m);

void robust_mutex_unlock(pthread_mutex_t* m);

}  // namespace shmsem::sys
