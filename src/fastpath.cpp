#include "fastpath.hpp"

#include <algorithm>
#include <climits>

#include "log.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"

namespace shmsem::detail {

using namespace layout;

__attribute__((
    tls_model("initial-exec"))) constinit thread_local thread_entry entry_table[kThreadEntries];
__attribute__((tls_model("initial-exec"))) constinit thread_local std::uint32_t entry_mru = 0;

namespace {

constexpr std::uint32_t kRefill = kCachedSlots / 2;  // slots a refill leaves in the cache
constexpr std::uint64_t kIdBlock = 1024;             // permit ids taken at a time

thread_local std::uint64_t entry_uses = 0;  // ticks of the LRU clock

// The cleanup at thread exit; constructed (and so registered) at a
// thread's first entry.
struct table_cleanup {
  ~table_cleanup();
};
thread_local table_cleanup cleanup;

template <class T, class U>
inline void bump(std::atomic<T>& a, U v) {
  a.store(a.load(std::memory_order_relaxed) + static_cast<T>(v), std::memory_order_relaxed);
}

// [registry] Gives back what entry `e` holds in its (live) attachment: its
// cached slots and its record, and passes its pins to the attachment.
void drop_entry(thread_entry& e) noexcept {
  attachment* a = e.att;
  if (!a || !attachment::is_registered(a, e.serial)) {
    e.att = nullptr;
    return;
  }
  a->retired_pins.fetch_add(e.pins.exchange(0), std::memory_order_acq_rel);
  a->entries.erase(std::remove(a->entries.begin(), a->entries.end(), &e), a->entries.end());
  try {
    if (a->lock(sys::kNever)) {
      a->unreserve_slots(e.slots, e.cached);
      if (e.record) a->free_thread_record(e.record_index);
      a->unlock();
    }
  } catch (const std::exception& ex) {
    log().error("{} (a thread's reserved lease slots stay reserved)", ex.what());
  }
  e.att = nullptr;
  e.record = nullptr;
  e.cached = 0;
}

table_cleanup::~table_cleanup() {
  for (thread_entry& e : entry_table) {
    bool detach = false;
    attachment* a = e.att;
    {
      auto g = attachment::registry_lock();
      if (!a || !attachment::is_registered(a, e.serial)) continue;
      drop_entry(e);
      detach = attachment::try_detach(a, g);
    }
    if (detach) attachment::finish_detach(a);
  }
}

// The rare rest of a release: hand the seats to queued waiters, wake
// wait_idle() callers, or give surplus cached slots back to the free list.
[[gnu::noinline]] void after_release(attachment& a, thread_entry& e, lease_slot& l,
                                     std::uint64_t gen, std::uint64_t g, std::int32_t n) {
  const bool queued = (g & kGateQueued) != 0;
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
  wake_list wakes;
  try {
    if (a.lock(sys::kNever)) {
      if (queued) a.grant_queued(lease_clock(), wakes);
      if (full) {
        // Releases outrun acquires on this thread: half the cache goes back
        // to the free list, for whoever needs it.
        a.unreserve_slots(e.slots, kRefill);
        std::copy(e.slots + kRefill, e.slots + kCachedSlots, e.slots);
        e.cached -= kRefill;
      }
      a.unlock();
      a.wake(wakes);
    }
  } catch (const std::exception& ex) {
    // The lease is over either way; a waiter's tick serves the queue.
    log().error("{} (after a release)", ex.what());
  }
}

}  // namespace

thread_entry* find_entry(const attachment& a) noexcept {
  for (std::uint32_t i = 0; i < kThreadEntries; ++i) {
    thread_entry& e = entry_table[i];
    if (e.att == &a && e.serial == a.serial) {
      entry_mru = i;
      return &e;
    }
  }
  return nullptr;
}

thread_entry* prepare_entry(attachment& a) {
  if (thread_entry* e = local_entry(a)) return e;
  (void)&cleanup;
  auto g = attachment::registry_lock();
  std::uint32_t victim = kThreadEntries;
  for (std::uint32_t i = 0; i < kThreadEntries && victim == kThreadEntries; ++i) {
    const thread_entry& e = entry_table[i];
    if (!e.att || !attachment::is_registered(e.att, e.serial)) victim = i;
  }
  if (victim == kThreadEntries) {
    // Every entry serves a live semaphore: the least recently used gives way.
    victim = 0;
    for (std::uint32_t i = 1; i < kThreadEntries; ++i)
      if (entry_table[i].last_used < entry_table[victim].last_used) victim = i;
    drop_entry(entry_table[victim]);
  }
  thread_entry& e = entry_table[victim];
  e.att = &a;
  e.serial = a.serial;
  e.record = nullptr;
  e.record_index = 0;
  e.holder = kNoSelf;
  e.cached = 0;
  e.next_id = e.end_id = 0;
  e.pins.store(0, std::memory_order_relaxed);
  e.busy.store(false, std::memory_order_relaxed);
  e.closing.store(a.closing.load(std::memory_order_relaxed), std::memory_order_relaxed);
  a.entries.push_back(&e);
  entry_mru = victim;
  return &e;
}

void fill_entry(attachment& a, thread_entry& e, wake_list& wakes) {
  const std::uint32_t me = a.ensure_self(wakes);
  e.last_used = ++entry_uses;
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

bool fast_acquire(attachment& a, thread_entry& entry, std::int32_t n, std::int64_t ttl_ms,
                  fast_grant& out) {
  thread_entry* e = &entry;
  if (e->cached == 0 || e->next_id == e->end_id || !e->record) return false;
  [[maybe_unused]] const std::string_view key = a.key;  // for the test hooks
  const std::uint32_t slot = e->slots[e->cached - 1];
  lease_slot& l = a.leases[slot];
  // The slot is reserved for this thread: nobody else writes it.
  const std::uint64_t gen = state_gen(l.state.load(std::memory_order_relaxed)) + 1;
  const std::int64_t now = lease_clock();
  const std::int64_t expires = ttl_ms > 0 ? now + ttl_ms * 1'000'000 : kNoExpiry;
  l.weight.store(n, std::memory_order_relaxed);
  l.acquired_ns.store(now, std::memory_order_relaxed);
  l.expires_ns.store(expires, std::memory_order_relaxed);
  l.id.store(e->next_id, std::memory_order_relaxed);
  // The intent, before the gate: a repairer that freezes the gate after our
  // CAS sees it (and waits for us), one that freezes before makes us fail.
  l.state.store(slot_state(gen, kSlotAcquiring), std::memory_order_release);
  SHMSEM_HOOK(fast_acquiring);
  std::uint64_t g = a.hdr->gate.load(std::memory_order_relaxed);
  do {
    if ((g & kGateFlags) || !gate_fits(g, n)) {
      // Queued waiters, a repair, or no room: the locked path decides.
      l.state.store(slot_state(gen, kSlotReserved), std::memory_order_release);
      return false;
    }
  } while (!a.hdr->gate.compare_exchange_weak(
      g, g + static_cast<std::uint64_t>(n), std::memory_order_acq_rel, std::memory_order_relaxed));
  SHMSEM_HOOK(fast_admitted);
  // Counted before the slot says held, so that a repairer that finds the
  // slot held (or this thread past it) finds the count too.
  bump(e->record->acquired, 1);
  l.state.store(slot_state(gen, kSlotHeld), std::memory_order_release);
  --e->cached;
  out = fast_grant{slot, gen, e->next_id++, now};
  e->pins.store(e->pins.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (expires != kNoExpiry && expires < a.hdr->earliest_expiry_ns.load(std::memory_order_relaxed))
    a.lower_earliest_expiry(expires);
  return true;
}

fast_release_result fast_release(attachment& a, thread_entry& entry, std::uint32_t slot,
                                 std::uint64_t gen, std::int32_t n, std::int64_t acquired_ns,
                                 std::int64_t expires_ns, std::uint64_t& gate_before) {
  thread_entry* e = &entry;
  if (!e->record || e->holder == kNoSelf) return fast_release_result::locked;
  [[maybe_unused]] const std::string_view key = a.key;
  lease_slot& l = a.leases[slot];
  const std::int64_t now = lease_clock();
  // An expired lease, or one of another process (a permit inherited across
  // fork): the locked path tells why it is not held.
  if (expires_ns == kReadExpiry) expires_ns = l.expires_ns.load(std::memory_order_relaxed);
  if (expires_ns != kNoExpiry && expires_ns <= now) return fast_release_result::locked;
  if (l.holder.load(std::memory_order_relaxed) != e->holder) return fast_release_result::locked;
  // Dropped before the gate CAS, which is what a detacher's gate RMW meets.
  e->pins.store(e->pins.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  std::uint64_t held = slot_state(gen, kSlotHeld);
  // The one CAS that decides who ends this lease: a lock holder reaping,
  // expiring or force-releasing it races for the same word.
  if (!l.state.compare_exchange_strong(held, slot_state(gen, kSlotReleasing),
                                       std::memory_order_acq_rel, std::memory_order_relaxed)) {
    e->pins.store(e->pins.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return fast_release_result::locked;
  }
  SHMSEM_HOOK(fast_releasing);
  std::uint64_t g = a.hdr->gate.load(std::memory_order_relaxed);
  do {
    if ((g & kGateFrozen) || gate_used(g) < n) {
      // A repairer is counting: step back to held (nobody else writes a
      // releasing slot) and let the locked path end the lease after it.
      l.state.store(held, std::memory_order_release);
      e->pins.store(e->pins.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return fast_release_result::locked;
    }
  } while (!a.hdr->gate.compare_exchange_weak(
      g, g - static_cast<std::uint64_t>(n), std::memory_order_acq_rel, std::memory_order_relaxed));
  SHMSEM_HOOK(fast_released);
  gate_before = g;
  // The hold sample, counted while the slot still says releasing (see
  // fast_acquire).
  const std::int64_t hold = now > acquired_ns ? now - acquired_ns : 0;
  bump(e->record->hold_counts[histogram_bucket(hold)], 1);
  bump(e->record->hold_sum_ns, hold);
  if ((g & kGateQueued) || e->cached == kCachedSlots ||
      (gate_used(g) == n && a.hdr->idle_waiters.load(std::memory_order_relaxed) > 0)) [[unlikely]]
    after_release(a, *e, l, gen, g, n);
  l.state.store(slot_state(gen, kSlotReserved), std::memory_order_release);
  e->slots[e->cached++] = slot;
  return fast_release_result::released;
}

void pin(attachment& a, int delta) noexcept {
  if (thread_entry* e = local_entry(a))
    e->pins.store(e->pins.load(std::memory_order_relaxed) + delta, std::memory_order_release);
  else
    a.retired_pins.fetch_add(delta, std::memory_order_acq_rel);
}

void release_scope::detach_after_release(attachment* a, std::uint64_t serial) noexcept {
  bool detach = false;
  {
    auto g = attachment::registry_lock();
    detach = attachment::is_registered(a, serial) && attachment::try_detach(a, g);
  }
  if (detach) attachment::finish_detach(a);
}

void forget_thread_entries() noexcept {
  for (thread_entry& e : entry_table) {
    e.att = nullptr;
    e.record = nullptr;
    e.cached = 0;
    e.pins.store(0, std::memory_order_relaxed);
    e.busy.store(false, std::memory_order_relaxed);
  }
}

}  // namespace shmsem::detail
