// fastpath.cpp: the rare halves of the lock-free acquire and release
// (fastpath.hpp has the hot ones): filling a thread's entry under the lock,
// and what a release must finish under it.

#include "shm/fastpath.hpp"

#include <algorithm>
#include <climits>
#include <new>
#include <span>
#include <utility>

#include "base/log.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {

constexpr std::uint32_t kRefill = kCachedSlots / 2;  // slots a refill leaves in the cache
constexpr std::uint64_t kIdBlock = 1024;             // permit ids taken at a time

thread_local std::uint64_t entry_uses = 0;  // ticks of the LRU clock
}  // namespace

void fill_entry(attachment& a, thread_entry& e, wake_list& wakes) {
  const std::uint32_t me = a.ensure_self(wakes);
  e.last_used = ++entry_uses;
  // With fencing tokens every grant takes the segment's next token under
  // the lock: the thread gets no lock-free state, and fast_acquire() says no.
  if (a.hdr->fencing) return;
  if (e.holder != me) {
    e.holder = me;
    e.record = nullptr;
    e.cached = 0;
  }
  if (!e.record) {
    const std::uint32_t index = a.claim_thread_record(me);
    if (index == kNoSelf) return;  // the table is full: this thread stays on the locked path
    e.record = &a.threads[index];
    e.record_index = index;
  }
  if (e.cached < kRefill) e.cached += a.reserve_slots(me, e.slots + e.cached, kRefill - e.cached);
  if (e.next_id == e.end_id) {
    e.next_id = a.take_ids(kIdBlock);
    e.end_id = e.next_id + kIdBlock;
  }
}

void after_release(attachment& a, thread_entry& e, lease_slot& l, std::uint64_t gen,
                   std::uint64_t g, std::int32_t n) noexcept {
  // Under barging, a release only wakes the first in line, and only if
  // nobody has yet (`woken`): the seats stay free for whoever runs.
  const bool queued = (g & kGateQueued) != 0 || ((g & kGateWaiting) && !(g & kGateWoken));
  const bool idle = gate_used(g) == n && a.hdr->idle_waiters.load(std::memory_order_relaxed) > 0;
  const bool full = e.cached == kCachedSlots;
  // The gate already has the seats: a repairer must not wait for this slot
  // while we wait for the lock.
  l.state.store(slot_state(gen, kSlotReleased), std::memory_order_release);
  if (idle) {
    a.hdr->idle_seq.fetch_add(1, std::memory_order_release);
    sys::futex_wake(&a.hdr->idle_seq, INT_MAX);
  }
  if (!queued && !full) return;
  try {
    // Waiting for the lock to serve the queue would put the seats behind
    // every process queued on the lock (a herd joining the queue). Whoever
    // holds it serves the queue before it lets go: we, if it is free.
    if (queued) a.hdr->grants_due.fetch_or(kDueGrants);
    segment_lock lk(a, full ? sys::kNever : sys::kNoWait);
    if (!lk.owns()) return;
    if (full) {
      // Releases outrun acquires on this thread: half the cache goes back
      // to the free list, for whoever needs it.
      a.unreserve_slots(e.slots, kRefill);
      std::copy(e.slots + kRefill, e.slots + kCachedSlots, e.slots);
      e.cached -= kRefill;
    }
  } catch (const std::exception& ex) {
    // The lease is over either way; a waiter's tick serves the queue.
    log().error("{} (after a release)", ex.what());
  }
}

}  // namespace shmsem::detail
