// sys/futex.hpp: shared (not process-private) futex waits and wakes on a
// 32-bit word in the segment. FUTEX_PRIVATE_FLAG is never used: waiters and
// wakers are different processes with different mappings.
#pragma once

#include <atomic>
#include <cstdint>

namespace shmsem::sys {

enum class wait_result { woken, timed_out, value_changed, interrupted };

/// Sleeps while *word == expected, until woken or until the absolute
/// CLOCK_MONOTONIC deadline `deadline_ns` (kNever: no deadline).
wait_result futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::int64_t deadline_ns);

/// Gives the CPU to another runnable thread (sched_yield): for waits of a
/// few instructions on another thread that may have been preempted.
void yield();

/// Wakes up to `count` sleepers on word (INT32_MAX: all).
void futex_wake(std::atomic<std::uint32_t>* word, int count);

}  // namespace shmsem::sys
