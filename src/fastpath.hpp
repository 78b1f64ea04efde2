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
// authority. See layout.hpp for who may write what, and docs/fast-path.md
// for why a death at any instruction leaves a repairable state.
#pragma once

#include <atomic>
#include <cstdint>

#include "layout.hpp"
#include "segment.hpp"

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

/// Takes `n` seats without the lock if this thread's entry `e` for `a` has
/// a reserved slot and an id, the gate is neither queued nor frozen and the
/// seats fit. Never blocks, never allocates, makes no system call. False:
/// nothing changed; take the locked path.
bool fast_acquire(attachment& a, thread_entry& e, std::int32_t n, std::int64_t ttl_ms,
                  fast_grant& out);

enum class fast_release_result {
  released,  // done; `gate_before` is the gate the release replaced
  locked,    // nothing changed: end the lease on the locked path
};

/// `expires_ns` value for fast_release(): read the expiry from the slot.
inline constexpr std::int64_t kReadExpiry = -1;

/// Gives back the lease (`slot`, `gen`) of `n` seats granted by
/// fast_acquire() to a thread of this process, whose entry is `e`.
/// `expires_ns` is the lease's expiry (kNoExpiry: none; kReadExpiry: the
/// slot's, which a renewal may have moved); an expired lease takes the
/// locked path. Takes the lock only to hand the seats to queued waiters or
/// to return surplus cached slots.
fast_release_result fast_release(attachment& a, thread_entry& e, std::uint32_t slot,
                                 std::uint64_t gen, std::int32_t n, std::int64_t acquired_ns,
                                 std::int64_t expires_ns, std::uint64_t& gate_before);

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

/// This thread's entries (thread-local memory). Initial-exec TLS with
/// constant initialization: reaching them is one %fs-relative address,
/// with no __tls_get_addr call and no initialization guard.
inline constexpr std::uint32_t kThreadEntries = 8;  // semaphores a thread uses fast at once
__attribute__((tls_model(
    "initial-exec"))) extern constinit thread_local thread_entry entry_table[kThreadEntries];
__attribute__((tls_model("initial-exec"))) extern constinit thread_local std::uint32_t entry_mru;

inline thread_entry* local_entry(const attachment& a) noexcept {
  thread_entry& m = entry_table[entry_mru];
  if (m.att == &a && m.serial == a.serial) [[likely]]
    return &m;
  return find_entry(a);
}

}  // namespace shmsem::detail
