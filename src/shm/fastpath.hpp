// fastpath.hpp: acquire and release without the segment lock, and the
// per-thread state that makes it possible.
//
// A thread that has used a semaphore once (through the locked path) keeps,
// in a table of its own (thread-local memory of this process):
//   - a thread record in the segment, whose counters only it writes;
//   - a few lease slots reserved for it (state `reserved`, holder = this
//     process), so that an acquire needs no free list;
//   - a block of permit ids;
//   - a pin count: Permit objects this thread made minus those it ended,
//     which keeps the mapping alive while a Permit may still touch it.
//
// The uncontended acquire is then: mark a reserved slot `acquiring`, CAS
// the gate, mark it `held`. The release: CAS the slot `held` ->
// `releasing`, CAS the gate, put the slot back in the cache. Every other
// case (queued waiters, a frozen gate, an empty cache, an expired lease, a
// permit of another process) takes the locked path, which stays the
// authority. See layout.hpp for who may write what, and docs/design.md
// for why a death at any instruction leaves a repairable state.
#pragma once

#include <shmsem/permit.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

#include "shm/layout.hpp"
#include "shm/segment.hpp"

namespace shmsem::detail {

/// One thread's state for one attachment. Written by its thread alone,
/// except `closing`, which a detacher sets (under the registry mutex).
struct thread_entry {
  attachment* att = nullptr;                // compared, never followed, unless serial matches
  std::uint64_t serial = 0;                 // attachment::serial at claim time
  layout::thread_record* record = nullptr;  // null: no record (the table was full)
  std::uint32_t record_index = 0;
  std::uint32_t holder = kNoSelf;  // this process's holder record
  std::uint32_t cached = 0;        // reserved slots in `slots`
  std::uint32_t slots[layout::kCachedSlots] = {};
  std::uint64_t next_id = 0;  // permit ids [next_id, end_id) are this thread's
  std::uint64_t end_id = 0;
  std::uint64_t last_used = 0;  // for eviction from the table
  std::atomic<std::int64_t> pins{0};
  std::atomic<bool> busy{false};     // inside a release that still touches the mapping
  std::atomic<bool> closing{false};  // the last handle is gone: the last pin detaches
};

/// What a lock-free acquire granted.
struct fast_grant {
  std::uint32_t slot = 0;
  std::uint64_t gen = 0;
  std::uint64_t id = 0;
  std::int64_t now_ns = 0;
};

/// This thread's entry for `a`, or null. The caller holds a handle or a
/// permit of `a`, so `a` is alive.
thread_entry* find_entry(const attachment& a) noexcept;

/// find_entry() with the most recent entry checked inline.
inline thread_entry* local_entry(const attachment& a) noexcept;

enum class fast_release_result {
  released,  // done; `gate_before` is the gate the release replaced
  locked,    // nothing changed: end the lease on the locked path
};

/// [locked, caller holds `a`'s segment lock] Gives this thread an entry
/// for `a` with a record, a full cache of reserved slots and a block of
/// ids, as far as the tables allow. Never throws for a full table: the
/// thread then goes on without a fast path. `e` comes from prepare_entry().
void fill_entry(attachment& a, thread_entry& e, wake_list& wakes);

/// Before taking `a`'s lock: finds or makes room for this thread's entry
/// (registry mutex only). Null if the table cannot take one.
thread_entry* prepare_entry(attachment& a);

/// A Permit of `a` was made (+1) or ended (-1) by this thread.
void pin(attachment& a, int delta) noexcept;

/// The span of one Permit's release, fast or locked, observer call
/// included: while it lasts, the mapping stays (a detacher waits for it).
/// If the last handle went away meanwhile and no pin is left, its end
/// detaches. The pin itself is dropped inside (fast_release(), or under
/// the lock followed by a gate RMW; see try_detach()). `e` is this
/// thread's entry for `a`, or null.
class release_scope {
 public:
  release_scope(attachment& a, thread_entry* e) noexcept : att_(&a), serial_(a.serial), entry_(e) {
    if (entry_)
      entry_->busy.store(true, std::memory_order_relaxed);
    else
      a.releasing.fetch_add(1, std::memory_order_acq_rel);
  }
  ~release_scope() {
    bool closing;
    if (entry_) {
      entry_->busy.store(false, std::memory_order_release);
      closing = entry_->closing.load(std::memory_order_acquire);
    } else {
      // Read before the count drops: after it, the attachment may be gone.
      closing = att_->closing.load(std::memory_order_acquire);
      att_->releasing.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (closing) detach_after_release(att_, serial_);
  }
  release_scope(const release_scope&) = delete;
  release_scope& operator=(const release_scope&) = delete;

 private:
  static void detach_after_release(attachment* a, std::uint64_t serial) noexcept;
  attachment* att_;
  std::uint64_t serial_;
  thread_entry* entry_;
};

/// The fork child's only thread: forget this thread's entries (they name
/// the parent's reservations and records).
void forget_thread_entries() noexcept;

/// This thread's entries live in a table on the heap, allocated at the
/// thread's first locked acquire and freed at its exit. Only `entry_mru`,
/// one pointer, is initial-exec TLS: reaching it is one %fs-relative load,
/// with no __tls_get_addr call and no initialization guard, and 8 bytes fit
/// the static TLS that glibc keeps for libraries loaded with dlopen (the
/// table itself, 1 KB and more, would not).
inline constexpr std::uint32_t kThreadEntries = 8;  // semaphores a thread uses fast at once
/// What `entry_mru` points at while a thread has no table: it matches no
/// attachment, so the hot path needs no null check.
extern constinit thread_entry no_entry;
__attribute__((tls_model("initial-exec"))) extern constinit thread_local thread_entry* entry_mru;

inline thread_entry* local_entry(const attachment& a) noexcept {
  thread_entry* m = entry_mru;
  if (m->att == &a && m->serial == a.serial) [[likely]]
    return m;
  return find_entry(a);
}

/// `expires_ns` value for fast_release(): read the expiry from the slot.
inline constexpr std::int64_t kReadExpiry = -1;

/// The lease's own clock reading (CLOCK_MONOTONIC_COARSE, in ns) back from
/// the time_point a Permit keeps it as.
inline std::int64_t ns_of(Permit::clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// The rare rest of a lock-free release (the slot still says releasing):
/// hands the seats to queued waiters (or leaves that to the lock's holder),
/// wakes wait_idle() callers, or gives surplus cached slots back to the free
/// list. `g` is the gate the release replaced.
void after_release(attachment& a, thread_entry& e, layout::lease_slot& l, std::uint64_t gen,
                   std::uint64_t g, std::int32_t n) noexcept;

/// A counter of the calling thread's own record: a plain load and store.
template <class T, class U>
inline void fast_bump(std::atomic<T>& a, U v) {
  a.store(a.load(std::memory_order_relaxed) + static_cast<T>(v), std::memory_order_relaxed);
}

/// Takes `n` seats without the lock if this thread's entry `entry` for `a`
/// has a reserved slot and an id, the gate is neither queued nor frozen and
/// the seats fit. Never blocks, never allocates, makes no system call.
/// False: nothing changed; take the locked path. Inline: it is the hot path.
[[gnu::always_inline]] inline bool fast_acquire(attachment& a, thread_entry& entry, std::int32_t n,
                                                std::int64_t ttl_ms, fast_grant& out) {
  using namespace layout;
  thread_entry* e = &entry;
  if (e->cached == 0 || e->next_id == e->end_id || !e->record) return false;
  [[maybe_unused]] const std::string_view key = a.key;  // for the test hooks
  const std::uint32_t slot = e->slots[e->cached - 1];
  lease_slot& l = a.leases[slot];
  // The slot is reserved for this thread: nobody else writes it.
  const std::uint64_t gen = state_gen(l.state.load(std::memory_order_relaxed)) + 1;
  const std::int64_t now = lease_clock();
  const std::int64_t expires = expiry_of(now, ttl_ms);
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
    if ((g & kGateBlocked) || !gate_fits(g, n)) {
      // Queued waiters, a repair, or no room: the locked path decides.
      l.state.store(slot_state(gen, kSlotReserved), std::memory_order_release);
      return false;
    }
  } while (!a.hdr->gate.compare_exchange_weak(
      g, g + static_cast<std::uint64_t>(n), std::memory_order_acq_rel, std::memory_order_relaxed));
  SHMSEM_HOOK(fast_admitted);
  // Counted before the slot says held, so that a repairer that finds the
  // slot held (or this thread past it) finds the count too.
  fast_bump(e->record->acquired, 1);
  l.state.store(slot_state(gen, kSlotHeld), std::memory_order_release);
  --e->cached;
  out = fast_grant{slot, gen, e->next_id++, now};
  e->pins.store(e->pins.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (expires != kNoExpiry && expires < a.hdr->earliest_expiry_ns.load(std::memory_order_relaxed))
    a.lower_earliest_expiry(expires);
  return true;
}

/// Gives back the lease (`slot`, `gen`) of `n` seats granted by
/// fast_acquire() to a thread of this process, whose entry is `entry`.
/// `expires_ns` is the lease's expiry (kNoExpiry: none; kReadExpiry: the
/// slot's, which a renewal may have moved); an expired lease takes the
/// locked path. Takes the lock only to hand the seats to queued waiters or
/// to return surplus cached slots (after_release()).
[[gnu::always_inline]] inline fast_release_result fast_release(
    attachment& a, thread_entry& entry, std::uint32_t slot, std::uint64_t gen, std::int32_t n,
    std::int64_t acquired_ns, std::int64_t expires_ns, std::uint64_t& gate_before) {
  using namespace layout;
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
  fast_bump(e->record->hold_counts[histogram_bucket(hold)], 1);
  fast_bump(e->record->hold_sum_ns, hold);
  if ((g & kGateServe) || e->cached == kCachedSlots ||
      (gate_used(g) == n && a.hdr->idle_waiters.load(std::memory_order_relaxed) > 0)) [[unlikely]] {
    after_release(a, *e, l, gen, g, n);
    if (e->cached == kCachedSlots) {
      // The full cache could not give half back (the lock failed): the slot
      // stays reserved outside it, and goes back when this process detaches.
      l.state.store(slot_state(gen, kSlotReserved), std::memory_order_release);
      return fast_release_result::released;
    }
  }
  l.state.store(slot_state(gen, kSlotReserved), std::memory_order_release);
  e->slots[e->cached++] = slot;
  return fast_release_result::released;
}

}  // namespace shmsem::detail
