// queue.hpp: how a blocked acquire waits in the queue (queue.cpp), as the
// public layer calls it.
#pragma once

#include <shmsem/errors.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string>

#include "shm/segment.hpp"

namespace shmsem::detail {

// The head waiter watches for deaths, the others for the death of the one
// ahead. They sleep on the lifelines of those processes (futex_waitv), so
// the kernel wakes them at a death, and nothing wakes them while nothing
// happens. Where a lifeline cannot tell (a kernel before 5.16, over 127
// processes to watch, a process without a lifeline) they look on a tick:
//
// The head's. Each of its wakeups cost about 60 us of CPU time on the
// 2-vCPU VM of the benchmarks, kernel included: a 20 ms tick keeps 50 idle
// waiters near 0.6% of a core, and a dead holder's seats still come back
// within about 20 ms.
inline constexpr std::int64_t kHeadTickNs = 20'000'000;
// The second's: it checks that the head is alive. Rarely needed (a dead
// head is also found by the next release), so it can be slow.
inline constexpr std::int64_t kSecondTickNs = 500'000'000;
// Everyone else's, slower still: for when the head and the second died
// together.
inline constexpr std::int64_t kOtherTickNs = 2'000'000'000;
// With the bells, only the second keeps a tick, a watchdog: a stopped head
// (SIGSTOP) hears no bell, so the second does the head's duty this often.
inline constexpr std::int64_t kSecondWatchdogNs = 2'000'000'000;
// A lifeline read dead while its process still holds its token (the
// kernel closes a dying process's files a few hundred microseconds after it
// marks its robust mutexes), or not yet armed: look again every
// kSoonPollNs, kSoonFastLooks times, then twice as long each time up to
// kHeadTickNs (a token kept on purpose by a child, as `shmsem run` does).
inline constexpr std::int64_t kSoonPollNs = 50'000;
inline constexpr int kSoonFastLooks = 60;
// The longest the acquire that claims a process's holder record waits for
// the lifeline thread to arm it (attachment::await_lifeline): its start,
// on a loaded host, takes from tens of microseconds to milliseconds.
inline constexpr std::int64_t kArmWaitNs = 10'000'000;
// How long a waiter sleeps on a dying holder's exit before it looks again
// whether every thread of it is exiting (attachment::await_exit): each look
// reads /proc once per thread, and takes a CPU the dying process may need.
inline constexpr std::int64_t kExitingLookNs = 200'000;
// How far CLOCK_MONOTONIC_COARSE, which stamps lease expiries, may lag
// CLOCK_MONOTONIC (one scheduler tick at HZ=250).
inline constexpr std::int64_t kCoarseSlackNs = 4'000'000;

// Fairness::barging: how long the first in line may be passed.
inline constexpr std::int64_t kStarvationBoundNs =
    std::chrono::nanoseconds(kStarvationBound).count();

// How long a waiter that gives up waits for a lock holder that is granting
// it seats at that moment (a few microseconds of work) before it leaves
// under the lock instead.
inline constexpr std::int64_t kServingWaitNs = 10'000'000;

/// How a waiter blocked on `a` hears of a holder's death, in words
/// (Snapshot::death_wakeup).
std::string describe_death_wakeup(const attachment& a);

/// What a wait in the queue came to.
struct queue_wait {
  bool granted = false;
  Reason reason = Reason::timeout;  // why not, when !granted
  std::uint32_t lease = 0;          // the granted lease (slot, gen, id)
  std::uint64_t id = 0;
  std::uint64_t gen = 0;
  std::int64_t granted_ns = 0;
  std::uint32_t wakeups = 0;  // times the waiter woke before it ended
};

/// [no lock held] Sleeps on waiter slot `w`, queued for `n` seats, until it
/// is granted or rejected, `stop` is requested, `shut` or shutdown_all()
/// shuts it down, or the absolute `deadline` passes; meanwhile it keeps the
/// watch its place in the queue gives it. Then it leaves the queue: without
/// the lock when it gave up while still queued, or took a grant still held;
/// otherwise under the lock (waiting for it without limit). A grant is kept
/// (and pinned) if it came in time, given back if the wait was cancelled or
/// shut down; a grant whose TTL ran out before it was taken puts the waiter
/// back at the head of the queue while the budget lasts. Throws
/// SegmentError if the lock cannot be used.
queue_wait wait_in_queue(attachment& a, std::uint32_t w, int n, std::int64_t deadline,
                         const std::stop_token& stop, const std::atomic<bool>& shut);

}  // namespace shmsem::detail
