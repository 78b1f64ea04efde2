// lifeline.hpp: the thread that keeps this process's lifelines.
//
// Each holder record this process claims carries a robust, process-shared
// mutex: its lifeline (layout.hpp). One thread of the process locks it and
// never lets go while the process lives, so the kernel marks it
// FUTEX_OWNER_DIED, and wakes a thread sleeping on it, the moment the
// process dies: SIGKILL, a crash, exit, or exec (exec kills every other
// thread). Other processes then read the word to learn whether this one is
// alive, without a system call.
//
// It is a thread of the library's own, not a caller's: the kernel marks a
// robust mutex when the thread that holds it ends, and a caller's thread
// may end while the process lives on (pthread_exit of the main thread, a
// worker pool that shrinks).
//
// A lifeline is only a hint. The liveness token (an OFD lock) stays the
// truth: a lifeline that reads dead, or a holder without one (the thread
// could not be started, or this process holds too many), is confirmed
// through the token.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace shmsem::detail::lifeline {

/// Asks the lifeline thread to lock `m`, a robust process-shared mutex just
/// initialized in a holder record of a mapped segment, and to set `state`
/// to kLifelineArmed once it holds it. Does not wait for that. Starts the
/// thread on first use. Returns false (and changes nothing) if the thread
/// cannot be started or this process already holds the most lifelines the
/// kernel's robust list walk is sure to reach; the holder then goes
/// without one. Never throws.
bool arm(pthread_mutex_t* m, std::atomic<std::uint32_t>* state) noexcept;

/// Waits until `state` (handed to arm()) reads kLifelineArmed, at most
/// until the CLOCK_MONOTONIC deadline `deadline_ns`. True if it does.
/// Never throws.
bool await_armed(const std::atomic<std::uint32_t>* state, std::int64_t deadline_ns) noexcept;

/// Makes the lifeline thread let go of `m` (if it holds it or was asked
/// to), sets `state` to kLifelineNone, and waits until that is done. Must
/// be called before the holder record is freed or its mapping unmapped:
/// the thread's robust list links through the mutex itself. Does nothing
/// if `m` was never armed. Never throws.
void disarm(pthread_mutex_t* m, std::atomic<std::uint32_t>* state) noexcept;

/// In a fork child: the parent's lifeline thread does not exist here, and
/// its lifelines are the parent's. Start afresh (the child claims its own
/// holder records).
void forget_after_fork() noexcept;

}  // namespace shmsem::detail::lifeline
