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
wait_result futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::int64_t deadline_ns);

/// The most words one futex_waitv() sleeps on (the kernel's limit).
inline constexpr int kMaxWaitWords = 128;

/// One word of a futex_waitv(): sleep while *word == expected.
struct wait_word {
  const std::atomic<std::uint32_t>* word;
  std::uint32_t expected;
};

/// What futex_waitv() came to: `index` is the word that was woken (or
/// found changed; -1 when the kernel does not say which).
struct waitv_result {
  wait_result result;
  int index = -1;
};

/// Sleeps on up to kMaxWaitWords shared words at once (futex_waitv, Linux
/// 5.16 and later) until one of them is woken or differs from its expected
/// value, or until the absolute CLOCK_MONOTONIC deadline (kNever: none).
/// On a kernel without it (or one that refuses the call), returns
/// `interrupted` at once and waitv_supported() turns false.
waitv_result futex_waitv(const wait_word* words, int n, std::int64_t deadline_ns);

/// Whether futex_waitv() works on this kernel (false once a call found it
/// missing, or after a probe here).
bool waitv_supported();

/// Gives the CPU to another runnable thread (sched_yield): for waits of a
/// few instructions on another thread that may have been preempted.
void yield();

/// Wakes up to `count` sleepers on word (INT32_MAX: all).
void futex_wake(std::atomic<std::uint32_t>* word, int count);

}  // namespace shmsem::sys
