// repair.cpp: what happens after a process died inside the segment: the
// segment lock, the repair after EOWNERDEAD, and resettle(), which recounts
// the gate from the lease slots.
//
// The argument that a death at any instruction leaves a repairable state:
// the lease slots are the truth, and every counter, link and free list is
// derived from them, so repair() rebuilds all of those from the slots. A
// slot's state word says what its holder was doing: a dead lock holder's
// half-ended lease is left `ending` (finished here, counted under its
// reason), a handoff cut short is finished from the waiter's slot (the
// waiter learns its lease before the lease is published), and a lock-free
// acquire or release cut short leaves `acquiring` or `releasing`, which
// only overcount the gate until resettle() freezes the gate, waits for the
// live threads in flight and recounts. A repair that fails (or is cut short
// by another death) leaves repair_pending set, so the next locker repairs
// again. docs/design.md ("Repair after a death in flight") gives the
// ordering argument in full.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/log.hpp"
#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"
#include "sys/robust_mutex.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {

// A process that died in the middle of an operation may have counted a
// lease as acquired without publishing it (a grant, or a lock-free acquire),
// or ended a lease without counting how (a lock holder's end_lease, or a
// lock-free release). Either way one granted lease is neither live nor
// ended in the stats. A lease a dead lock holder was ending (left in
// kSlotEnding; `ending` lists them) is counted under its own reason; any
// other as reaped. Then acquired == released + reaped + expired +
// force_released + live leases holds again.
void settle_stats(segment_header* h, const lease_stats& sums, std::uint64_t live,
                  const std::vector<std::pair<lost_reason, std::int32_t>>& ending) {
  auto& s = h->stats;
  const std::uint64_t ended =
      sums.released + s.reaped.load() + s.expired.load() + s.force_released.load();
  if (sums.acquired <= ended + live) return;
  std::uint64_t missing = sums.acquired - ended - live;
  for (const auto& [reason, weight] : ending) {
    if (missing == 0) break;
    count_end(s, reason, weight);
    --missing;
  }
  if (missing) add(s.reaped, missing);
}

}  // namespace

// Nobody is attached: every holder is dead and the lock may be garbage.
// Keep the structure (capacity, tables, stats, thread counters) and clear
// the live state.
void reset_live_state(void* base) {
  auto* h = header(base);
  sys::robust_mutex_init(&h->mutex);
  const std::int64_t now = sys::coarse_now_ns();
  const std::uint32_t hwm = std::min(h->lease_hwm.load(), h->lease_slots.load());
  auto* ls = leases(base);
  std::vector<std::pair<lost_reason, std::int32_t>> ending;
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const std::uint64_t st = ls[i].state.load();
    const std::uint64_t gen = state_gen(st);
    switch (state_kind(st)) {
      case kSlotHeld:
      case kSlotReleasing:  // its holder died before the release counted
        ls[i].lost_reason.store(kLostReaped);
        ls[i].lost_id.store(ls[i].id.load());
        ls[i].lost_ns.store(now);
        if (state_kind(st) == kSlotHeld) count_end(h->stats, kLostReaped, ls[i].weight.load());
        break;
      case kSlotEnding:
        ending.emplace_back(state_reason(st), ls[i].weight.load());
        break;
      default:
        break;
    }
    ls[i].state.store(slot_state(gen, kSlotFree));
  }
  h->lease_hwm.store(0);
  h->free_lease = kNil;
  h->gate.store(make_gate(0, gate_capacity(h->gate.load()), 0));
  h->waiters.store(0);
  h->queue_head.store(kNil);
  h->queue_tail.store(kNil);
  h->earliest_expiry_ns.store(INT64_MAX);
  h->idle_waiters.store(0);
  h->resettle_due_ns.store(0);
  h->resettle_backoff_ns = 0;
  auto* ts = threads(base);
  const std::uint32_t nt = std::min(h->thread_slots.load(), kMaxThreads);
  for (std::uint32_t i = 0; i < nt; ++i) ts[i].state.store(kThreadFree);
  settle_stats(h, sum_lease_stats(h, ts, nt), 0, ending);
  const std::uint32_t nh = std::min(h->holder_slots.load(), kMaxHolders);
  const std::uint32_t nw = std::min(h->waiter_slots.load(), kMaxWaiters);
  std::memset(static_cast<void*>(holders(base)), 0, sizeof(holder_record) * nh);
  std::memset(static_cast<void*>(waiters(base)), 0, sizeof(waiter_slot) * nw);
  h->free_holder = kNil;
  h->free_waiter = kNil;
  link_free_holders(h, holders(base), 0, nh);
  link_free_waiters(h, waiters(base), 0, nw);
}

bool attachment::lock(std::int64_t deadline_ns) {
  switch (sys::robust_mutex_lock(&hdr->mutex, deadline_ns)) {
    case sys::lock_result::locked:
      if (hdr->repair_pending) repair_after_death(false);
      break;
    case sys::lock_result::timed_out:
      return false;
    case sys::lock_result::owner_died:
      repair_after_death(true);
      break;
    case sys::lock_result::unrecoverable:
      fail(errc::bad_segment, "the segment lock is unrecoverable");
  }
  SHMSEM_HOOK(locked);
  return true;
}

void attachment::unlock(wake_list& wakes) noexcept {
  for (;;) {
    // Work left to us by those who did not wait for the lock: a release's
    // seats for the queue, a waiter that gave up. Seats that fit the head
    // are served even unasked: their releaser may be stopped between giving
    // them back and asking.
    if (hdr->grants_due.load() != 0 || head_owed()) {
      try {
        const std::uint32_t due = hdr->grants_due.exchange(0);
        if (due & kDueAbandoned) drop_abandoned(wakes);
        grant_queued(lease_clock(), wakes);
      } catch (const std::exception& e) {
        log().error("semaphore '{}': {} (serving the queue before unlocking)", key, e.what());
      }
    }
    sys::robust_mutex_unlock(&hdr->mutex);
    // One that came between that look and the unlock saw the lock still
    // taken: it is for us, unless a new holder takes it over.
    if (hdr->grants_due.load() == 0) return;
    try {
      if (!lock(sys::kNoWait)) return;
    } catch (const std::exception& e) {
      log().error("semaphore '{}': {} (serving the queue after unlocking)", key, e.what());
      return;
    }
  }
}

void attachment::repair_after_death(bool owner_died) {
  // Set until the repair has finished, so that one cut short (here by an
  // exception, or by our own death) is done again by the next locker.
  hdr->repair_pending = 1;
  std::string failure;
  try {
    SHMSEM_HOOK(repairing);
    repair();
    hdr->repair_pending = 0;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // The mutex is marked consistent whether or not the segment is: left
  // inconsistent and unlocked it would be lost for good. repair_pending
  // tells the next locker that the segment still needs it.
  if (owner_died)
    if (int err = sys::robust_mutex_make_consistent(&hdr->mutex); err != 0 && failure.empty())
      failure = std::string("cannot mark the segment lock consistent: ") + std::strerror(err);
  if (!failure.empty()) {
    report_error("repairing the segment after a death failed (" + failure +
                     "); the next process to take the lock repairs again",
                 repair_failing);
    sys::robust_mutex_unlock(&hdr->mutex);
    fail(errc::bad_segment, "repairing the segment after a death failed (" + failure +
                                "); the next process to take the lock repairs again");
  }
  repair_failing.store(false, std::memory_order_relaxed);
  add(hdr->stats.recoveries, 1);
  if (owner_died)
    log().warn(
        "semaphore '{}': a process died holding the segment lock; the segment was repaired "
        "from its lease table",
        key);
  else
    log().warn("semaphore '{}': a repair that had failed was done again", key);
}

void attachment::repair() {
  // Slots are the truth; every counter and link is derived from them.
  const std::uint32_t nh = std::min(hdr->holder_slots.load(), kMaxHolders);
  const std::uint32_t nw = std::min(hdr->waiter_slots.load(), kMaxWaiters);
  const std::uint32_t hwm = std::min(hdr->lease_hwm.load(), hdr->lease_slots.load());
  hdr->lease_hwm.store(hwm);
  for (std::uint32_t i = 0; i < nh; ++i) {
    holders[i].waiting.store(0);
    holders[i].leases.store(0);
  }
  // A lease the dead lock holder was ending: finish it (resettle() counts
  // how it ended). A slot it had taken off the free list without
  // publishing a lease is still free, and goes back on the list.
  std::uint32_t free_head = kNil;
  for (std::uint32_t i = hwm; i-- > 0;) {
    lease_slot& l = leases[i];
    const std::uint64_t st = l.state.load();
    if (state_kind(st) != kSlotFree && state_kind(st) != kSlotEnding) {
      const std::uint32_t h = l.holder.load();
      if (h < nh) add(holders[h].leases, 1);
      continue;
    }
    l.next_free = free_head;
    free_head = i + 1;
  }
  hdr->free_lease = free_head;
  hdr->free_holder = kNil;
  for (std::uint32_t i = nh; i-- > 0;)
    if (holders[i].state.load() != kHolderAttached) link_free_holders(hdr, holders, i, i + 1);

  std::vector<std::uint32_t> queued;
  wake_list told;
  hdr->free_waiter = kNil;
  for (std::uint32_t i = nw; i-- > 0;) {
    waiter_slot& w = waiters[i];
    const std::uint32_t st = w.state.load();
    if (st == kWaiterFree || st == kLeft || st == kAbandoned) {
      if (st == kLeft) hdr->left_waiters.fetch_sub(1);
      if (st != kWaiterFree) w.state.store(kWaiterFree);
      link_free_waiters(hdr, waiters, i, i + 1);
      continue;
    }
    if (st != kWaiting && st != kServing) continue;
    // A handoff cut short (kServing): the lease was published for this
    // waiter, which was not yet told. Finish it, or the seat stays with
    // nobody's permit. Likewise a rejection: a waiter that can never fit
    // must not be queued again, where it would hold back everyone behind
    // it. A queued waiter may give up meanwhile (kWaiting to kAbandoned,
    // without the lock): only a claim by CAS tells it anything.
    const std::uint64_t granted = w.permit_id.load();
    const std::uint32_t lease = w.lease.load();
    std::uint32_t queued_state = kWaiting;
    const bool ours = st == kServing || (w.weight > capacity() &&
                                         w.state.compare_exchange_strong(queued_state, kServing));
    if (st == kServing && granted != 0 && lease < hwm &&
        leases[lease].state.load() == slot_state(w.lease_gen.load(), kSlotHeld) &&
        leases[lease].id.load() == granted) {
      tell(i, kGranted, told);
    } else if (w.weight > capacity() && ours) {
      tell(i, kRejected, told);
    } else if (w.weight > capacity()) {
      // It gave up as we looked: free, like the others that did.
      w.state.store(kWaiterFree);
      link_free_waiters(hdr, waiters, i, i + 1);
    } else {
      if (st == kServing) tell(i, kWaiting, told);  // its waiter may be waiting to give up
      queued.push_back(i);
    }
  }
  for (std::uint32_t w : queued)
    if (const std::uint32_t holder = waiters[w].holder.load(); holder < nh)
      add(holders[holder].waiting, 1);
  std::sort(queued.begin(), queued.end(), [this](std::uint32_t a, std::uint32_t b) {
    return waiters[a].ticket < waiters[b].ticket;
  });
  std::uint32_t prev = kNil;
  for (std::uint32_t w : queued) {
    waiters[w].prev.store(prev, std::memory_order_relaxed);
    waiters[w].next.store(kNil, std::memory_order_relaxed);
    if (prev != kNil) waiters[prev - 1].next.store(w + 1, std::memory_order_relaxed);
    prev = w + 1;
  }
  hdr->queue_head.store(queued.empty() ? kNil : queued.front() + 1);
  hdr->queue_tail.store(prev);
  hdr->waiters.store(static_cast<std::int32_t>(queued.size()));
  // A starved queue stays in order; `woken` goes (every waiter is nudged
  // below).
  set_gate_flags(queued.empty() ? 0 : queue_flag(),
                 kGateWoken | (queued.empty() ? kGateQueued | kGateWaiting : 0));
  // Rebuilt in ticket order, the queue may put anyone behind someone new:
  // each waiter watches the process of the one ahead, so all look again.
  for (std::uint32_t w : queued) nudge(w, told);
  // The dead holder may have been halfway through a change of the gate.
  if (resettle(sys::coarse_now_ns()) < 0)
    log().warn(
        "semaphore '{}': the seats in use could not be recounted yet (a live thread is stopped "
        "inside an acquire or release); seats may stay taken until it continues",
        key);
  wake(told);  // under the lock: the repairing caller has no place to defer it to
}

int attachment::resettle(std::int64_t now) {
  const std::uint32_t hwm = std::min(hdr->lease_hwm.load(), hdr->lease_slots.load());
  gate_freeze frozen(*this);
  // From here no lock-free CAS of the gate succeeds. A live thread caught
  // between its slot's intent (acquiring, releasing) and its gate CAS will
  // see its CAS fail and undo the intent; one past its CAS finishes within
  // a few instructions. Wait for both, but not for a stopped thread.
  std::vector<std::uint32_t> in_flight;
  std::vector<std::int8_t> alive(std::min(hdr->holder_slots.load(), kMaxHolders), -1);
  auto is_alive = [&](std::uint32_t h) {
    if (h >= alive.size()) return false;
    if (alive[h] < 0) alive[h] = holder_alive(h) ? 1 : 0;
    return alive[h] == 1;
  };
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const slot_kind k = state_kind(leases[i].state.load(std::memory_order_acquire));
    if ((k == kSlotAcquiring || k == kSlotReleasing) && is_alive(leases[i].holder.load()))
      in_flight.push_back(i);
  }
  const std::int64_t give_up = sys::precise_now_ns() + kQuiesceNs;
  for (std::uint32_t i : in_flight) {
    for (;;) {
      const slot_kind k = state_kind(leases[i].state.load(std::memory_order_acquire));
      if (k != kSlotAcquiring && k != kSlotReleasing) break;
      if (sys::precise_now_ns() > give_up) {
        const std::int64_t backoff = std::clamp<std::int64_t>(
            hdr->resettle_backoff_ns * 2, kResettleRetryMinNs, kResettleRetryMaxNs);
        hdr->resettle_backoff_ns = backoff;
        // From the end of this try, not its start: the try itself took
        // kQuiesceNs, longer than the first backoffs.
        hdr->resettle_due_ns.store(
            std::max<std::int64_t>(std::max(now, lease_clock()) + backoff, 1));
        return -1;
      }
      sys::yield();
    }
  }
  // Quiet: every slot says what the gate holds for it. Held slots count.
  // A live thread's acquire or release that began after the freeze will see
  // its CAS fail and step back: a release to held (so it counts), an
  // acquire to reserved (so it does not); its slot is left to it. A dead
  // process's acquire in flight never took effect and its release in
  // flight did (whether or not the gate heard of it); a dead lock holder's
  // ending lease is over.
  std::int64_t used_now = 0;
  std::uint64_t live = 0;
  std::int64_t earliest = INT64_MAX;
  std::vector<std::pair<lost_reason, std::int32_t>> ending;
  int settled = 0;
  for (std::uint32_t i = 0; i < hwm; ++i) {
    lease_slot& l = leases[i];
    const std::uint64_t st = l.state.load(std::memory_order_acquire);
    const std::uint64_t gen = state_gen(st);
    const slot_kind k = state_kind(st);
    if (k == kSlotHeld || (k == kSlotReleasing && is_alive(l.holder.load()))) {
      used_now += l.weight.load();
      ++live;
      const std::int64_t exp = l.expires_ns.load();
      if (exp != kNoExpiry) earliest = std::min(earliest, exp);
    } else if ((k == kSlotAcquiring || k == kSlotReleasing) && !is_alive(l.holder.load())) {
      free_slot(i, gen);
      ++settled;
    } else if (k == kSlotEnding) {
      ending.emplace_back(state_reason(st), l.weight.load());
      l.state.store(slot_state(gen, kSlotFree), std::memory_order_release);
    }
  }
  const std::uint64_t before = hdr->gate.load();
  // A starved queue stays so; a `woken` may be lost (a release then wakes
  // the first in line again).
  const std::uint64_t flags =
      hdr->queue_head.load() != kNil ? queue_flag() | (before & kGateQueued) : 0;
  hdr->gate.store(make_gate(static_cast<std::int32_t>(std::min<std::int64_t>(used_now, kSeatMask)),
                            gate_capacity(before), flags),
                  std::memory_order_release);
  hdr->earliest_expiry_ns.store(earliest);
  settle_stats(hdr, sum_lease_stats(hdr, threads, thread_count()), live, ending);
  hdr->resettle_due_ns.store(0);
  hdr->resettle_backoff_ns = 0;
  if (settled > 0) {
    add(hdr->stats.recoveries, settled);
    log().warn(
        "semaphore '{}': {} process{} died halfway through an acquire or release; the seats in "
        "use were recounted from the lease table",
        key, settled, settled == 1 ? "" : "es");
  }
  return settled;
}

}  // namespace shmsem::detail
