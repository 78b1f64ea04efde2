// queue.cpp: how a request waits: the FIFO queue of waiter slots, the
// handoff of seats to its head, the wait loop of a blocked acquire with the
// watch duty of the head and the one behind it, and the wakeups.

#include <algorithm>
#include <climits>
#include <string>

#include "base/handle.hpp"
#include "base/log.hpp"
#include "shm/fastpath.hpp"
#include "shm/queue.hpp"
#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"
#include "shm/trust.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"
#include "sys/robust_mutex.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {

// Fairness::barging: how long the first in line may be passed.
std::int64_t starvation_bound() {
#ifdef SHMSEM_TESTING
  if (const std::int64_t b = testing::starvation_bound_ns.load(std::memory_order_relaxed)) return b;
#endif
  return kStarvationBoundNs;
}

}  // namespace

std::uint32_t attachment::enqueue(std::uint32_t holder, int weight, std::int64_t ttl_ms) {
  if (hdr->free_waiter == kNil) {
    const std::uint32_t n = hdr->waiter_slots.load();
    // Slots left by granted waiters are taken back once they are a quarter
    // of the table (so that a scan pays for itself), or when it cannot grow.
    if (n >= kMaxWaiters ||
        hdr->left_waiters.load(std::memory_order_relaxed) >= static_cast<std::int32_t>(n / 4))
      take_back_left_waiters();
  }
  if (hdr->free_waiter == kNil) {
    const std::uint32_t n = hdr->waiter_slots.load();
    if (n >= kMaxWaiters)
      fail(errc::too_many, "all " + std::to_string(kMaxWaiters) +
                               " waiter slots are in use (at most that many acquires can wait "
                               "at once)");
    grow_table(hdr->waiter_slots, waiters, kWaitersOffset, kMaxWaiters, "waiter slots");
    link_free_waiters(hdr, waiters, n, hdr->waiter_slots.load());
  }
  const std::uint32_t w = hdr->free_waiter - 1;
  waiter_slot& s = waiters[w];
  hdr->free_waiter = s.next.load(std::memory_order_relaxed);
  s.holder.store(holder, std::memory_order_relaxed);
  s.weight = weight;
  s.ttl_ms = static_cast<std::int32_t>(ttl_ms);
  // Precise: the wait histogram's lowest buckets are finer than the coarse
  // clock.
  s.enqueued_ns = sys::precise_now_ns();
  s.ticket = hdr->next_ticket++;
  link_last(w);
  return w;
}

void attachment::link_last(std::uint32_t w) {
  waiter_slot& s = waiters[w];
  s.lease.store(0);
  s.lease_gen.store(0);
  s.permit_id.store(0);
  const std::uint32_t tail = hdr->queue_tail.load(std::memory_order_relaxed);
  s.next.store(kNil, std::memory_order_relaxed);
  s.prev.store(tail, std::memory_order_relaxed);
  if (tail != kNil)
    waiters[tail - 1].next.store(w + 1, std::memory_order_relaxed);
  else
    hdr->queue_head.store(w + 1, std::memory_order_relaxed);
  hdr->queue_tail.store(w + 1, std::memory_order_relaxed);
  s.state.store(kWaiting, std::memory_order_release);
  add(hdr->waiters, 1);
  count_queued(s, 1);
  // From now on the fast path stands aside (fifo), or its releases wake the
  // first in line (barging), and they come here to hand their seats on. A
  // `woken` left from the queue's last use would keep the first wake away.
  if (tail == kNil) set_gate_flags(queue_flag(), kGateWoken);
}

void attachment::requeue_first(std::uint32_t w, std::int64_t now, wake_list& wakes) {
  const watchers before = queue_watchers();
  waiter_slot& s = waiters[w];
  s.lease.store(0);
  s.lease_gen.store(0);
  s.permit_id.store(0);
  // It was the head when it was served, so its ticket is older than any
  // still queued: first in line again, also for a repair that sorts by it.
  const std::uint32_t head = hdr->queue_head.load(std::memory_order_relaxed);
  s.prev.store(kNil, std::memory_order_relaxed);
  s.next.store(head, std::memory_order_relaxed);
  if (head != kNil)
    waiters[head - 1].prev.store(w + 1, std::memory_order_relaxed);
  else
    hdr->queue_tail.store(w + 1, std::memory_order_relaxed);
  hdr->queue_head.store(w + 1, std::memory_order_relaxed);
  s.state.store(kWaiting, std::memory_order_release);
  add(hdr->waiters, 1);
  count_queued(s, 1);
  set_gate_flags(queue_flag(), 0);
  grant_queued(now, wakes, w + 1);
  wake_new_watchers(before, wakes);
}

void attachment::dequeue(std::uint32_t w) {
  waiter_slot& s = waiters[w];
  const std::uint32_t prev = s.prev.load(std::memory_order_relaxed);
  const std::uint32_t next = s.next.load(std::memory_order_relaxed);
  if (prev != kNil)
    waiters[prev - 1].next.store(next, std::memory_order_relaxed);
  else
    hdr->queue_head.store(next, std::memory_order_relaxed);
  if (next != kNil)
    waiters[next - 1].prev.store(prev, std::memory_order_relaxed);
  else
    hdr->queue_tail.store(prev, std::memory_order_relaxed);
  s.prev.store(kNil, std::memory_order_relaxed);
  s.next.store(kNil, std::memory_order_relaxed);
  add(hdr->waiters, -1);
  // A waiter that gave up lowered its holder's count itself.
  if (s.state.load(std::memory_order_relaxed) != kAbandoned) count_queued(s, -1);
  if (hdr->queue_head.load(std::memory_order_relaxed) == kNil)
    set_gate_flags(0, kGateQueued | kGateWaiting | kGateWoken);
}

void attachment::unlink_waiter(std::uint32_t w, wake_list& wakes) {
  const std::uint32_t prev = waiters[w].prev.load(std::memory_order_relaxed);
  const std::uint32_t next = waiters[w].next.load(std::memory_order_relaxed);
  dequeue(w);
  // The one behind a waiter that left from the middle watches the process
  // ahead of it: a new one now. (Behind the head, wake_new_watchers() tells.)
  if (prev != kNil && next != kNil) nudge(next - 1, wakes);
}

void attachment::nudge(std::uint32_t w, wake_list& wakes) {
  // The bump makes a wait it is about to start return at once.
  waiters[w].seq.fetch_add(1, std::memory_order_release);
  wakes.add(w);
}

void attachment::free_waiter(std::uint32_t w, wake_list& wakes) {
  waiter_slot& s = waiters[w];
  if (const std::uint32_t st = s.state.load(std::memory_order_relaxed);
      st == kWaiting || st == kAbandoned) {
    const watchers before = queue_watchers();
    unlink_waiter(w, wakes);
    wake_new_watchers(before, wakes);
  }
  if (s.state.load(std::memory_order_relaxed) == kLeft) hdr->left_waiters.fetch_sub(1);
  s.state.store(kWaiterFree, std::memory_order_release);
  push_free_waiter(w);
}

void attachment::count_queued(const waiter_slot& s, int delta) {
  // Only queued waiters count: once granted, the holder owes its lease
  // (holder_record::leases), and a waiter that leaves without the lock
  // must not have a count to fix.
  const std::uint32_t holder = s.holder.load(std::memory_order_relaxed);
  if (holder >= hdr->holder_slots.load()) return;
  // Read-modify-write: a waiter that gives up lowers its count without
  // the lock (give_up()).
  std::atomic<std::uint32_t>& waiting = holders[holder].waiting;
  if (delta > 0)
    waiting.fetch_add(1);
  else if (waiting.load(std::memory_order_relaxed) > 0)
    waiting.fetch_sub(1);
}

void attachment::drop_abandoned(wake_list& wakes) {
  const watchers before = queue_watchers();
  std::uint32_t w = before.head;
  while (w != kNil) {
    const std::uint32_t next = waiters[w - 1].next.load(std::memory_order_relaxed);
    if (waiters[w - 1].state.load(std::memory_order_acquire) == kAbandoned) {
      unlink_waiter(w - 1, wakes);
      waiters[w - 1].state.store(kWaiterFree, std::memory_order_relaxed);
      push_free_waiter(w - 1);
    }
    w = next;
  }
  wake_new_watchers(before, wakes);
}

void attachment::take_back_left_waiters() {
  const std::uint32_t n = hdr->waiter_slots.load();
  std::int32_t taken = 0;
  for (std::uint32_t w = n; w-- > 0;) {
    if (waiters[w].state.load(std::memory_order_acquire) != kLeft) continue;
    waiters[w].state.store(kWaiterFree, std::memory_order_relaxed);
    push_free_waiter(w);
    ++taken;
  }
  hdr->left_waiters.fetch_sub(taken);
}

void attachment::push_free_waiter(std::uint32_t w) {
  waiters[w].next.store(hdr->free_waiter, std::memory_order_relaxed);
  hdr->free_waiter = w + 1;
}

attachment::watchers attachment::queue_watchers() const {
  watchers out;
  out.head = hdr->queue_head.load(std::memory_order_acquire);
  if (out.head != kNil && out.head <= hdr->waiter_slots.load(std::memory_order_relaxed))
    out.second = waiters[out.head - 1].next.load(std::memory_order_relaxed);
  return out;
}

void attachment::wake_new_watchers(const watchers& before, wake_list& wakes) {
  const watchers now = queue_watchers();
  // A new head watches every process, a new second the new head's.
  if (now.head != kNil && now.head != before.head) nudge(now.head - 1, wakes);
  if (now.second != kNil && now.second != before.second && now.second != before.head)
    nudge(now.second - 1, wakes);
}

attachment::served attachment::serve_head(std::uint32_t head, std::int64_t now, wake_list& wakes) {
  waiter_slot& s = waiters[head - 1];
  if (s.state.load(std::memory_order_acquire) == kAbandoned) {
    drop_abandoned(wakes);
    return served::again;
  }
  // In order: a head that does not fit holds back everyone behind it.
  if (!admit(s.weight, true)) return served::stop;
  // Ours to serve, unless its waiter gave up since we looked.
  std::uint32_t queued = kWaiting;
  if (!s.state.compare_exchange_strong(queued, kServing, std::memory_order_acq_rel)) {
    give_back(s.weight);
    drop_abandoned(wakes);
    return served::again;
  }
  std::uint64_t id = 0, gen = 0;
  try {
    grant(s.holder.load(std::memory_order_relaxed), s.weight, s.ttl_ms, now, id, gen, &s);
  } catch (const SegmentError& e) {
    tell(head - 1, kWaiting, wakes);  // a waiter about to give up waits for this
    // No lease slot for it (a full /dev/shm, or every slot in use): the
    // seats went back to the gate and it stays first in line. Whoever
    // releases, or the head's own timer, tries again; the caller here
    // (a release, a reap) has done its own part and must not fail.
    report_error(std::string(e.what()) + " (a queued waiter stays queued until it can be served)",
                 grant_failing);
    return served::stop;
  }
  grant_failing.store(false, std::memory_order_relaxed);
  SHMSEM_HOOK(mid_handoff);
  const std::int64_t waited = elapsed_ns(sys::precise_now_ns(), s.enqueued_ns);
  record_histogram(hdr->stats.wait, waited);
  dequeue(head - 1);
  tell(head - 1, kGranted, wakes);
  // Barging, starved: the head that was passed for the bound is served, and
  // running requests may pass the next one again, for the bound counted
  // from when it became the head (queue_waiter::keep_watch). A deep queue's heads have
  // all waited long before their turn; an exit only for a head served
  // within the bound of its enqueue (Go's sync.Mutex) would keep a busy
  // semaphore, whose queue never empties, FIFO for good, each seat idle
  // while a sleeper wakes.
  if (hdr->fairness == kFairnessBarging && (gate() & kGateQueued) &&
      hdr->queue_head.load(std::memory_order_relaxed) != kNil)
    set_gate_flags(kGateWaiting, kGateQueued);
  return served::granted;
}

void attachment::grant_queued(std::int64_t now, wake_list& wakes, std::uint32_t own) {
  const watchers before = queue_watchers();
  bool granted = false;
  for (;;) {
    const std::uint32_t head = hdr->queue_head.load(std::memory_order_relaxed);
    if (head == kNil) break;
    // A waiter whose process is gone is not served: its seats would stay
    // taken until a reap found them. Its process is reaped instead (which
    // frees its waiter slots). A live one costs a load of its lifeline.
    if (const std::uint32_t h = waiters[head - 1].holder.load(std::memory_order_relaxed);
        h < std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders) &&
        reapable(h)) {
      reap_holder(h, now, wakes);
      if (hdr->queue_head.load(std::memory_order_relaxed) == head) break;
      continue;
    }
    if (head != own && queue_passable()) {
      // Barging: a seat handed to a sleeper would stay idle while it wakes
      // up. The first in line is woken to compete for it instead, once:
      // `woken` keeps the releases that follow from waking it again.
      const std::uint64_t g = gate();
      if (waiters[head - 1].state.load(std::memory_order_acquire) == kAbandoned) {
        drop_abandoned(wakes);
        continue;
      }
      if (granted && !gate_fits(g, waiters[head - 1].weight)) {
        // Its turn came with our grant (the `woken` was ours), but there
        // is nothing to compete for: the next release wakes it.
        set_gate_flags(0, kGateWoken);
      } else if (granted || !(g & kGateWoken)) {
        set_gate_flags(kGateWoken, 0);
        nudge(head - 1, wakes);
      }
      break;
    }
    const served r = serve_head(head, now, wakes);
    if (r == served::stop) break;
    if (r == served::granted) granted = true;
  }
  wake_new_watchers(before, wakes);
}

void attachment::starve() {
  if (hdr->queue_head.load(std::memory_order_relaxed) == kNil) return;
  // The fast path stands aside, and releases hand their seats on in order.
  set_gate_flags(kGateQueued, kGateWoken);
}

bool attachment::take_grant(std::uint32_t w, std::int64_t now, std::uint64_t& gen,
                            std::uint64_t& id, wake_list& wakes) {
  waiter_slot& s = waiters[w];
  const std::uint32_t slot = s.lease.load(std::memory_order_relaxed);
  gen = s.lease_gen.load(std::memory_order_relaxed);
  id = s.permit_id.load(std::memory_order_relaxed);
  switch (lease_state(slot, gen, id, now, nullptr)) {
    case lease_status::held:
      return true;
    case lease_status::expired:
      // Granted, but its TTL ran out before we came for it: nobody has
      // reclaimed it yet. It was never ours to use.
      end_lease(slot, slot_state(gen, kSlotHeld), kLostExpired, now, wakes);
      return false;
    default:
      // Reclaimed (as expired) meanwhile, its slot perhaps a later lease.
      return false;
  }
}

bool attachment::give_up(std::uint32_t w) noexcept {
  waiter_slot& s = waiters[w];
  // Read first: once abandoned, the slot may be freed and taken at once.
  const std::uint32_t holder = s.holder.load(std::memory_order_relaxed);
  for (bool waited = false;; waited = true) {
    const std::uint32_t seq = s.seq.load(std::memory_order_acquire);
    std::uint32_t st = kWaiting;
    if (s.state.compare_exchange_strong(st, kAbandoned, std::memory_order_acq_rel)) break;
    // A lock holder is deciding our fate right now: its answer comes at
    // once. If it does not (it died there, or was stopped), the caller
    // leaves under the lock, which repairs after a death.
    if (st != kServing || waited) return false;
    sys::futex_wait(&s.seq, seq, sys::precise_now_ns() + kServingWaitNs);
  }
  if (holder < hdr->holder_slots.load()) {
    std::atomic<std::uint32_t>& waiting = holders[holder].waiting;
    if (waiting.load(std::memory_order_relaxed) > 0) waiting.fetch_sub(1);
  }
  // The slot is unlinked by whoever holds the lock when it lets go: by us,
  // if nobody holds it now.
  hdr->grants_due.fetch_or(kDueAbandoned);
  try {
    segment_lock lk(*this, sys::kNoWait);
  } catch (const std::exception& e) {
    log().error("semaphore '{}': {} (leaving the queue)", key, e.what());
  }
  return true;
}

void attachment::leave_granted(std::uint32_t w) noexcept {
  waiters[w].state.store(kLeft, std::memory_order_release);
  hdr->left_waiters.fetch_add(1);
}

void attachment::tell(std::uint32_t w, waiter_state state, wake_list& wakes) {
  waiters[w].state.store(state, std::memory_order_release);
  waiters[w].seq.fetch_add(1, std::memory_order_release);
  wakes.add(w);
}

void attachment::reject_oversized(wake_list& wakes) {
  const std::int32_t cap = capacity();
  const watchers before = queue_watchers();
  std::uint32_t w = before.head;
  while (w != kNil) {
    waiter_slot& s = waiters[w - 1];
    const std::uint32_t next = s.next.load(std::memory_order_relaxed);
    std::uint32_t queued = kWaiting;
    if (s.weight > cap && s.state.compare_exchange_strong(queued, kServing)) {
      unlink_waiter(w - 1, wakes);
      SHMSEM_HOOK(mid_handoff);
      tell(w - 1, kRejected, wakes);
    }
    w = next;
  }
  drop_abandoned(wakes);
  wake_new_watchers(before, wakes);
}

bool attachment::watch(std::int64_t now) const {
  if (hdr->earliest_expiry_ns.load(std::memory_order_relaxed) <= now) return true;
  const std::int64_t due = hdr->resettle_due_ns.load(std::memory_order_relaxed);
  if (due != 0 && due <= now) return true;
  const std::uint32_t n = std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders);
  for (std::uint32_t h = 0; h < n; ++h)
    if (reapable(h)) return true;
  return false;
}

bool attachment::holder_gone_from(std::uint32_t h) const {
  if (h >= std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders)) return false;
  return holders[h].state.load(std::memory_order_acquire) == kHolderAttached && holder_gone(h);
}

bool attachment::head_owed() const {
  const std::uint32_t head = hdr->queue_head.load(std::memory_order_acquire);
  if (head == kNil || head > hdr->waiter_slots.load(std::memory_order_relaxed)) return false;
  const waiter_slot& s = waiters[head - 1];
  return s.state.load(std::memory_order_acquire) == kWaiting && gate_fits(gate(), s.weight);
}

bool attachment::head_gone() const {
  const std::uint32_t head = hdr->queue_head.load(std::memory_order_acquire);
  if (head == kNil || head > hdr->waiter_slots.load(std::memory_order_relaxed)) return false;
  if (waiters[head - 1].state.load(std::memory_order_acquire) == kAbandoned) return true;
  return holder_gone_from(waiters[head - 1].holder.load(std::memory_order_relaxed));
}

void attachment::wake(const wake_list& wakes) {
  if (wakes.empty()) return;
  wakes.for_each([this](std::uint32_t w) { sys::futex_wake(&waiters[w].seq, 1); });
  if (wakes.idle) sys::futex_wake(&hdr->idle_seq, INT_MAX);
}

// ---------------------------------------------------------------------------
// The wait of a blocked acquire

namespace {

// What a waiter sleeps on: its own slot's word first, then the lifelines of
// the processes whose death its place in the queue must hear of:
//   - the head: every attached process (any may hold seats, and die);
//   - everyone else: the process of the waiter ahead of it (for the second,
//     the head's), so that a chain of deaths (a host's OOM killer takes
//     several at once) still reaches whoever can act on it.
// A death rings the bell: the kernel marks the dying thread's robust
// mutexes and wakes a sleeper on each that has FUTEX_WAITERS set, which
// robust_mutex_watch() sets. The lifeline is only the doorbell: whoever it
// wakes asks the token before it reaps.
struct doorbells {
  sys::wait_word words[sys::kMaxWaitWords];
  int n = 0;
  bool covered = true;            // every death the duty must hear of rings one of `words`
  bool soon = false;              // a lifeline reads dead or is not armed yet: look again soon
  std::uint32_t dying = kNoSelf;  // a holder whose lifeline reads dead
  std::uint32_t ahead = kNoSelf;  // holder record of the waiter ahead (not for the head)

  void collect(attachment& a, const waiter_slot& slot, std::uint32_t seq, bool head) {
    n = 0;
    covered = sys::waitv_supported();
    soon = false;
    dying = kNoSelf;
    ahead = kNoSelf;
    words[n++] = {&slot.seq, seq};
    const std::uint32_t nh =
        std::min(a.hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders);
    if (head) {
      for (std::uint32_t h = 0; h < nh; ++h) add(a, h);
      return;
    }
    // A hint, read without the lock: whoever unlinks the waiter ahead
    // bumps our word, so the sleep below returns at once if it changed.
    const std::uint32_t prev = slot.prev.load(std::memory_order_acquire);
    if (prev == kNil || prev > a.hdr->waiter_slots.load(std::memory_order_relaxed)) return;
    ahead = a.waiters[prev - 1].holder.load(std::memory_order_relaxed);
    if (ahead < nh) add(a, ahead);
  }

  void add(attachment& a, std::uint32_t h) {
    if (h == a.self.load(std::memory_order_relaxed)) return;  // our own death needs no news
    holder_record& r = a.holders[h];
    if (r.state.load(std::memory_order_acquire) != kHolderAttached) return;
    if (n == sys::kMaxWaitWords) {
      covered = false;  // past what one sleep can watch: a tick
      return;
    }
    // Not armed yet (its lifeline thread is starting; it will be in
    // microseconds) or never (it could not start one): look again soon.
    if (r.lifeline_state.load(std::memory_order_acquire) != kLifelineArmed) {
      soon = true;
      return;
    }
    if (sys::robust_mutex_watch(&r.lifeline, words[n].word, words[n].expected)) {
      ++n;
      return;
    }
    // Read dead: the process is dying, or dead and not reaped yet.
    soon = true;
    if (dying == kNoSelf) dying = h;
  }

  sys::waitv_result sleep(std::int64_t until) const {
    if (n == 1 || !sys::waitv_supported()) {
      const sys::wait_result r = sys::futex_wait(words[0].word, words[0].expected, until);
      return {r, r == sys::wait_result::woken ? 0 : -1};
    }
    return sys::futex_waitv(words, n, until);
  }
};

// When the head must look without a bell: the earliest lease expiry (the
// coarse clock it is stamped with lags the precise one by up to a tick of
// its own) and a recount that is due.
std::int64_t timed_duty(const attachment& a) {
  std::int64_t at = sys::kNever;
  const std::int64_t exp = a.hdr->earliest_expiry_ns.load(std::memory_order_relaxed);
  if (exp != INT64_MAX) at = exp + kCoarseSlackNs;
  const std::int64_t due = a.hdr->resettle_due_ns.load(std::memory_order_relaxed);
  if (due != 0) at = std::min(at, due + kCoarseSlackNs);
  return at;
}

bool testing_no_watch_tick() {
#ifdef SHMSEM_TESTING
  return testing::no_watch_tick.load(std::memory_order_relaxed) != 0;
#else
  return false;
#endif
}

}  // namespace

std::string describe_death_wakeup(const attachment& a) {
  const std::string tick =
      "at the reclaim tick (" + std::to_string(kHeadTickNs / 1'000'000) + " ms)";
  if (!sys::waitv_supported())
    return "waiters look " + tick + ": this kernel has no futex_waitv (Linux 5.16 and later)";
  const std::uint32_t nh =
      std::min(a.hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders);
  int attached = 0, without = 0;
  for (std::uint32_t h = 0; h < nh; ++h) {
    if (a.holders[h].state.load(std::memory_order_acquire) != kHolderAttached) continue;
    ++attached;
    if (a.read_lifeline(h) == attachment::lifeline_reading::unarmed) ++without;
  }
  const int watchable = sys::kMaxWaitWords - 1;
  const std::string procs =
      std::to_string(attached) + " attached process" + (attached == 1 ? "" : "es");
  // A head watches every attached process but its own.
  if (attached - 1 > watchable)
    return "waiters look " + tick + ": " + procs + ", more than the " + std::to_string(watchable) +
           " lifelines one waiter can sleep on";
  std::string out =
      "the kernel wakes the waiters (they sleep on the lifelines of the " + procs + ")";
  if (without > 0)
    out += "; " + std::to_string(without) + " without a lifeline " + (without == 1 ? "is" : "are") +
           " found " + tick;
  return out;
}

namespace {

// One queued waiter, in the states of its wait: it keeps the watch duty of
// its place in the queue (sleeping on doorbells, competing for seats as a
// barging head, acting on a death or a handoff owed) until the wait is
// settled (granted, rejected, or given up), then leaves the queue, keeping
// or giving back a grant that raced with it. A grant whose TTL ran out
// before it was taken sends it back to the head of the queue, to keep the
// watch again within what is left of its budget.
class queue_waiter {
 public:
  queue_waiter(attachment& a, std::uint32_t w, int n, std::int64_t deadline,
               const std::stop_token& stop, const std::atomic<bool>& shut)
      : a_(a), w_(w), n_(n), deadline_(deadline), stop_(stop), shut_(shut), slot_(a.waiters[w]) {}

  enum class left { done, requeued };

  // True once the wait is over: granted, rejected, or given up (reason_
  // says why). The slot's sequence is read first, so that a bell rung
  // after this look wakes the next sleep.
  bool settled() {
    seq_ = slot_.seq.load(std::memory_order_acquire);
    const std::uint32_t st = slot_.state.load(std::memory_order_acquire);
    if (st == layout::kGranted) {
      granted_ = true;
      return true;
    }
    if (st == layout::kRejected) return stop_with(Reason::exceeds_capacity);
    if (stop_.stop_requested()) return stop_with(Reason::cancelled);
    if (shut_.load() || process_shut_down.load()) return stop_with(Reason::shutdown);
    now_ = sys::precise_now_ns();
    if (now_ >= deadline_) return stop_with(Reason::timeout);
    return false;
  }

  // One round of the watch duty (see doorbells), kept by sleeping on the
  // lifelines of the processes whose death it must hear of, and by a tick
  // only where those cannot tell.
  void keep_watch() {
    const auto watch = a_.queue_watchers();
    const bool head = watch.head == w_ + 1;
    const bool second = watch.second == w_ + 1;
    if (!head)
      head_since_ = 0;
    else if (head_since_ == 0)
      head_since_ = now_;
    std::int64_t pass_until = sys::kNever;
    if (head && a_.queue_passable()) {
      if (compete()) return;
      pass_until = head_since_ + starvation_bound();
    }
    const sys::waitv_result r = sleep_on_duty(watch, head, second, pass_until);
    if (r.result == sys::wait_result::woken && r.index == 0) ++wakeups_;
    const bool rang = r.result == sys::wait_result::woken && r.index > 0;
    if (rang || r.result == sys::wait_result::timed_out) act_on_duty(head, second);
  }

  // Leaves the queue once settled; keeps or gives back a grant that raced
  // with the end of the wait.
  left leave() {
    {
      [[maybe_unused]] const std::string_view key = a_.key;
      SHMSEM_HOOK(leaving);
    }
    // Given up while still queued: out without the lock, which a stopped
    // process may hold for as long as it likes.
    if (!granted_ && reason_ != Reason::exceeds_capacity && a_.give_up(w_)) return left::done;
    if (keep_grant_without_lock()) return left::done;
    segment_lock lk(a_, sys::kNever);
    const std::int64_t now = lease_clock();
    if (slot_.state.load(std::memory_order_acquire) == layout::kGranted) {
      lease_ = slot_.lease.load(std::memory_order_relaxed);
      if (!a_.take_grant(w_, now, gen_, id_, lk.wakes)) {
        // Its TTL ran out before we came for it: it was never ours. Back
        // to the head of the queue, within what is left of the budget.
        granted_ = false;
        if (reason_ == Reason::timeout && sys::precise_now_ns() < deadline_) {
          a_.requeue_first(w_, now, lk.wakes);
          return left::requeued;
        }
      } else if (granted_ || reason_ == Reason::timeout) {
        // A grant that arrived as the budget ran out is still a grant.
        hold_grant();
      } else {
        // Cancelled or shut down: a seat won meanwhile goes back quietly.
        a_.end_lease(lease_, layout::slot_state(gen_, layout::kSlotHeld), layout::kLostReleased,
                     now, lk.wakes);
      }
    } else {
      granted_ = false;
    }
    a_.free_waiter(w_, lk.wakes);
    // Our leaving may let the requests behind us in (a big head that left).
    if (!granted_ && a_.hdr->queue_head.load(std::memory_order_relaxed) != layout::kNil)
      a_.grant_queued(now, lk.wakes);
    return left::done;
  }

  queue_wait result() const {
    return queue_wait{granted_, reason_, lease_, id_, gen_, granted_ns_, wakeups_};
  }

 private:
  bool stop_with(Reason r) {
    reason_ = r;
    return true;
  }

  // Barging: running requests may take free seats ahead of the head.
  // Woken, it competes for them; past the bound, it makes the queue FIFO.
  // True to look again at once.
  bool compete() {
    const std::uint64_t g = a_.gate();
    const bool starved = now_ - head_since_ >= starvation_bound();
    if ((layout::gate_fits(g, n_) || starved) && !competed_) {
      competed_ = true;
      segment_lock lk(a_, deadline_);
      if (lk.owns()) {
        if (starved && !layout::gate_fits(a_.gate(), n_)) a_.starve();
        a_.grant_queued(lease_clock(), lk.wakes, w_ + 1);
      }
      return true;
    }
    if (g & layout::kGateWoken) {
      // Nothing to compete for: the next release must wake us. The CAS
      // fails if a seat came free since we looked; then look again.
      std::uint64_t expected = g;
      a_.hdr->gate.compare_exchange_strong(expected, g & ~layout::kGateWoken,
                                           std::memory_order_acq_rel);
      return true;
    }
    return false;
  }

  // Sleeps on the doorbells of the duty until a bell, the tick the duty
  // needs, the end of a barging pass, or the deadline.
  sys::waitv_result sleep_on_duty(const attachment::watchers& watch, bool head, bool second,
                                  std::int64_t pass_until) {
    bells_.collect(a_, slot_, seq_, head);
    std::int64_t until = deadline_;
    std::int64_t look_again = sys::kNever;  // the poll a `soon` reading needs
    if (bells_.soon) {
      // A lifeline reads dead while its process may still hold its token
      // (the kernel lets go of a dying process's files after its robust
      // mutexes), or is about to be armed: look again soon, then less
      // often (for good, a process without a lifeline is on the tick).
      soon_backoff_ = ++soon_looks_ <= kSoonFastLooks
                          ? kSoonPollNs
                          : std::min<std::int64_t>(soon_backoff_ * 2, kHeadTickNs);
      look_again = now_ + soon_backoff_;
    } else {
      soon_looks_ = 0;
      awaited_ = false;
    }
    if (!testing_no_watch_tick()) {
      const std::int64_t tick = head ? kHeadTickNs : second ? kSecondTickNs : kOtherTickNs;
      // A head that fits and is not served is owed a handoff that a
      // failure cut short (a grant with no lease slot to record it in).
      if (!bells_.covered || (head && layout::gate_fits(a_.gate(), n_)))
        until = std::min(until, now_ + tick);
      else if (head)
        // With nobody behind it, the head keeps the second's watchdog: a
        // releaser stopped between giving its seats back and serving the
        // queue rings no bell, and nobody else would look.
        until = std::min(until,
                         watch.second == layout::kNil ? now_ + kSecondWatchdogNs : timed_duty(a_));
      else if (second)
        until = std::min(until, now_ + kSecondWatchdogNs);
    }
    until = std::min(until, pass_until);
    competed_ = false;
    if (bells_.dying != kNoSelf && !awaited_) {
      // Its lifeline rang, and its token goes last: the kernel closes a
      // dying process's files only after it has torn down its memory,
      // hundreds of microseconds on a busy host. Sleep until it has exited
      // rather than poll for it (once: a token kept on purpose by a child,
      // as `shmsem run` does, is left to the polls). Not only until the
      // next poll: that is what this sleep replaces (capped by it, the exit
      // was found by the polls after all, each one a wake-up that takes a
      // CPU from the dying process).
      awaited_ = true;
      if (a_.await_exit(bells_.dying, std::min(until, now_ + kHeadTickNs)))
        return sys::waitv_result{sys::wait_result::timed_out};
    }
    return bells_.sleep(std::min(until, look_again));
  }

  // After a bell or a tick: serve the queue if the duty finds a reason.
  // The head also serves it when it fits: a releaser that gave its seats
  // back without the lock may have died before handing them on. The second
  // does the head's duty too when its watchdog fires: the head may be
  // stopped, or owed seats that a stopped releaser gave back.
  void act_on_duty(bool head, bool second) {
    watch_name(a_);
    const bool act = head ? a_.watch(lease_clock()) || layout::gate_fits(a_.gate(), n_)
                          : a_.head_gone() || a_.holder_gone_from(bells_.ahead) ||
                                (second && (a_.watch(lease_clock()) || a_.head_owed()));
    if (!act) return;
    segment_lock lk(a_, deadline_);
    if (lk.owns()) {
      a_.reap(lease_clock(), lk.wakes);
      a_.grant_queued(lease_clock(), lk.wakes, w_ + 1);
    }
  }

  // The usual end of a grant (one that arrived as the budget ran out is
  // still a grant): still held, and the slot ours alone since it was
  // granted. Taking the lock again only to give the slot back would make
  // every served waiter queue behind a herd of new ones
  // (docs/performance.md, "Fleets").
  bool keep_grant_without_lock() {
    if (slot_.state.load(std::memory_order_acquire) != layout::kGranted ||
        !(granted_ || reason_ == Reason::timeout))
      return false;
    lease_ = slot_.lease.load(std::memory_order_relaxed);
    gen_ = slot_.lease_gen.load(std::memory_order_relaxed);
    id_ = slot_.permit_id.load(std::memory_order_relaxed);
    if (!a_.holds(lease_, gen_, id_, lease_clock(), nullptr)) return false;
    hold_grant();
    a_.leave_granted(w_);
    return true;
  }

  void hold_grant() {
    granted_ = true;
    granted_ns_ = a_.leases[lease_].acquired_ns.load(std::memory_order_relaxed);
    pin(a_, +1);
  }

  attachment& a_;
  const std::uint32_t w_;
  const int n_;
  const std::int64_t deadline_;
  const std::stop_token& stop_;
  const std::atomic<bool>& shut_;
  waiter_slot& slot_;
  std::uint32_t seq_ = 0;  // the slot's word as settled() last read it
  std::int64_t now_ = 0;   // when settled() last looked
  doorbells bells_{};      // filled by collect() before each sleep
  std::int64_t soon_backoff_ = 0;
  int soon_looks_ = 0;
  bool awaited_ = false;  // waited for the exit of a holder whose lifeline reads dead
  // Barging: since when this waiter has been first in line (as far as it
  // has seen: the new head is woken to take up its watch duty), and
  // whether it already took the lock to compete for a seat since it last
  // slept.
  std::int64_t head_since_ = 0;
  bool competed_ = false;
  // The outcome.
  bool granted_ = false;
  Reason reason_ = Reason::timeout;
  std::uint32_t lease_ = 0;
  std::uint64_t id_ = 0, gen_ = 0;
  std::int64_t granted_ns_ = 0;
  std::uint32_t wakeups_ = 0;
};

}  // namespace

queue_wait wait_in_queue(attachment& a, std::uint32_t w, int n, std::int64_t deadline,
                         const std::stop_token& stop, const std::atomic<bool>& shut) {
  queue_waiter q(a, w, n, deadline, stop, shut);
  do {
    while (!q.settled()) q.keep_watch();
  } while (q.leave() == queue_waiter::left::requeued);
  return q.result();
}

}  // namespace shmsem::detail
