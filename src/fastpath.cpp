// fastpath.cpp: the rare halves of the lock-free acquire and release
// (fastpath.hpp has the hot ones): filling a thread's entry under the lock,
// and what a release must finish under it.

#include "fastpath.hpp"

#include <algorithm>
#include <climits>
#include <new>
#include <span>
#include <utility>

#include "log.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"

namespace shmsem::detail {

using namespace layout;

constinit thread_entry no_entry;
__attribute__((tls_model("initial-exec"))) constinit thread_local thread_entry* entry_mru =
    &no_entry;

namespace {

constexpr std::uint32_t kRefill = kCachedSlots / 2;    // slots a refill leaves in the cache
constexpr std::uint64_t kIdBlock = 1024;               // permit ids taken at a time
constexpr std::int64_t kDropEntryLockNs = 10'000'000;  // see drop_entry()

thread_local std::uint64_t entry_uses = 0;  // ticks of the LRU clock
// kThreadEntries entries, or null before the thread's first locked acquire.
constinit thread_local thread_entry* entry_table = nullptr;
// The exit cleanup ran: a late call (another thread_local's destructor)
// stays on the locked path rather than allocate a table nobody frees.
constinit thread_local bool table_closed = false;

// The cleanup at thread exit; constructed (and so registered) at a
// thread's first entry.
struct table_cleanup {
  ~table_cleanup();
};
thread_local table_cleanup cleanup;

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
    // Not for ever: a thread that ends (or gives its entry up) must not
    // hang on a lock a stopped process holds, the more so under the
    // registry mutex. What it kept then stays with this process, and goes
    // back when the process detaches or is reaped.
    segment_lock lk(*a, sys::precise_now_ns() + kDropEntryLockNs);
    if (lk.owns()) {
      a->unreserve_slots(e.slots, e.cached);
      if (e.record) a->free_thread_record(e.record_index);
    } else {
      log().debug(
          "semaphore '{}': the segment lock was busy when a thread let go of its entry; its "
          "reserved lease slots stay with this process until it detaches",
          a->key);
    }
  } catch (const std::exception& ex) {
    log().error("{} (a thread's reserved lease slots stay reserved)", ex.what());
  }
  e.att = nullptr;
  e.record = nullptr;
  e.cached = 0;
}

table_cleanup::~table_cleanup() {
  table_closed = true;
  if (!entry_table) return;
  for (thread_entry& e : std::span(entry_table, kThreadEntries)) {
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
  entry_mru = &no_entry;
  delete[] std::exchange(entry_table, nullptr);
}

}  // namespace

thread_entry* find_entry(const attachment& a) noexcept {
  if (!entry_table) return nullptr;
  for (std::uint32_t i = 0; i < kThreadEntries; ++i) {
    thread_entry& e = entry_table[i];
    if (e.att == &a && e.serial == a.serial) {
      entry_mru = &e;
      return &e;
    }
  }
  return nullptr;
}

thread_entry* prepare_entry(attachment& a) {
  if (thread_entry* e = local_entry(a)) return e;
  if (!entry_table) {
    if (table_closed) return nullptr;
    entry_table = new (std::nothrow) thread_entry[kThreadEntries];
    if (!entry_table) return nullptr;  // no fast path for this thread
    (void)&cleanup;
  }
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
  entry_mru = &e;
  return &e;
}

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
  try {
    segment_lock lk(a, sys::kNever);
    if (queued) a.grant_queued(lease_clock(), lk.wakes);
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
  if (!entry_table) return;
  for (thread_entry& e : std::span(entry_table, kThreadEntries)) {
    e.att = nullptr;
    e.record = nullptr;
    e.cached = 0;
    e.pins.store(0, std::memory_order_relaxed);
    e.busy.store(false, std::memory_order_relaxed);
  }
}

}  // namespace shmsem::detail
