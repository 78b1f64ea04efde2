// segment.hpp: a process's attachment to one segment, and every operation
// on the shared tables. Functions marked [locked] must be called with the
// segment lock held (a segment_lock in scope); the rest take care of it.
// The operations are defined across the files that the section comments
// of `attachment` name, one question each.
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/options.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/backend.hpp"
#include "shm/layout.hpp"
#include "shm/tokens.hpp"
#include "sys/clock.hpp"
#include "sys/proc.hpp"
#include "sys/shm.hpp"

namespace shmsem::detail {

#ifdef SHMSEM_TESTING
/// Test-only hooks, compiled into the test build of the library alone. A
/// hook runs at the named point, so a test can kill (or stop) its process
/// exactly there. With the segment lock held: `locked`, `mid_grant`,
/// `mid_release`, `mid_handoff` (a queued waiter's fate is decided, granted
/// or rejected, but the waiter is not yet told); with the init lock held:
/// `initializing`. Without any lock, inside a lock-free operation:
/// `fast_acquiring` (the slot says acquiring, the gate is not yet changed),
/// `fast_admitted` (the gate has the seats, the slot is not yet held),
/// `fast_releasing` (the slot says releasing, the gate still has the
/// seats), `fast_released` (the gate has them back, the slot is not yet
/// returned to the thread's cache). In the renewal thread, with a permit's
/// renewal mutex held, before it extends the lease: `renewing`. In a
/// blocked acquire that stopped waiting (granted, timed out, cancelled),
/// before it takes the lock to leave the queue: `leaving`. With the lock
/// held after an owner died, before the repair: `repairing` (a hook may
/// throw there, as a repair that cannot allocate would).
namespace testing {
enum class point {
  locked,
  mid_grant,
  mid_release,
  initializing,
  mid_handoff,
  fast_acquiring,
  fast_admitted,
  fast_releasing,
  fast_released,
  renewing,
  leaving,
  repairing,
  claiming,  // a first acquire holds a record's token, before the lock
};
/// The point's name as written above, for test names and reports.
constexpr const char* point_name(point p) {
  switch (p) {
    case point::locked:
      return "locked";
    case point::mid_grant:
      return "mid_grant";
    case point::mid_release:
      return "mid_release";
    case point::initializing:
      return "initializing";
    case point::mid_handoff:
      return "mid_handoff";
    case point::fast_acquiring:
      return "fast_acquiring";
    case point::fast_admitted:
      return "fast_admitted";
    case point::fast_releasing:
      return "fast_releasing";
    case point::fast_released:
      return "fast_released";
    case point::renewing:
      return "renewing";
    case point::leaving:
      return "leaving";
    case point::claiming:
      return "claiming";
    case point::repairing:
      return "repairing";
  }
  return "unknown";
}
using hook_fn = void (*)(point, std::string_view key);
void set_hook(hook_fn fn);
extern std::atomic<hook_fn> current_hook;
/// Non-zero: blocked acquires keep no timed watch (no tick, no watchdog):
/// only the lifelines' bells, their own word and their budget wake them.
extern std::atomic<int> no_watch_tick;
/// Non-zero: Fairness::barging's starvation bound in this process, in ns,
/// instead of kStarvationBound (a forked waiter inherits it).
extern std::atomic<std::int64_t> starvation_bound_ns;
}  // namespace testing
#define SHMSEM_HOOK(p)                                                                        \
  do {                                                                                        \
    if (auto hook_ = ::shmsem::detail::testing::current_hook.load(std::memory_order_relaxed)) \
      hook_(::shmsem::detail::testing::point::p, key);                                        \
  } while (0)
#else
#define SHMSEM_HOOK(p) \
  do {                 \
  } while (0)
#endif

inline constexpr std::uint32_t kNoSelf = UINT32_MAX;

/// How long a repairer waits for the live threads' lock-free operations in
/// flight to finish (a few instructions each, unless a thread is stopped).
inline constexpr std::int64_t kQuiesceNs = 50'000'000;
/// After a recount that had to give up, retry after this long, doubling up
/// to the maximum while it keeps failing.
inline constexpr std::int64_t kResettleRetryMinNs = 10'000'000;
inline constexpr std::int64_t kResettleRetryMaxNs = 5'000'000'000;

/// Leases granted and given back, over the locked path and every thread
/// record of the fast path.
struct lease_stats {
  std::uint64_t acquired = 0;
  std::uint64_t released = 0;
};
lease_stats sum_lease_stats(const layout::segment_header* h, const layout::thread_record* t,
                            std::uint32_t n);

struct thread_entry;

/// Waiters to wake once the lock is dropped (waking under the lock would
/// make them block on it straight away).
class wake_list {
 public:
  void add(std::uint32_t waiter) {
    if (n_ < inline_.size())
      inline_[n_++] = waiter;
    else
      more_.push_back(waiter);
  }
  bool empty() const { return n_ == 0 && !idle; }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i < n_; ++i) f(inline_[i]);
    for (auto w : more_) f(w);
  }
  bool idle = false;  // used dropped to 0 while wait_idle() callers wait

 private:
  std::array<std::uint32_t, 8> inline_{};
  std::size_t n_ = 0;
  std::vector<std::uint32_t> more_;
};

/// The counter of the segment's stats that counts failures for `r`, or
/// null when none does.
constexpr std::atomic<std::uint64_t> layout::shared_stats::*reason_counter(Reason r) noexcept {
  switch (r) {
    case Reason::timeout:
      return &layout::shared_stats::timeouts;
    case Reason::cancelled:
      return &layout::shared_stats::cancelled;
    case Reason::shutdown:
      return &layout::shared_stats::shutdowns;
    case Reason::exceeds_capacity:
      return &layout::shared_stats::rejected;
    case Reason::error:
      break;
  }
  return nullptr;
}

/// Why a lease was looked up and not found held.
struct loss {
  layout::lost_reason reason = layout::kLostNone;
  std::int64_t at_ns = 0;
  bool other_process = false;  // the lease belongs to another process (fork)
  std::string describe() const;
};

/// A segment whose name was removed, which this process is letting go of.
/// Once it has, the segment's token files in which no token is held go.
struct removed_segment {
  std::uint64_t nonce = 0;
  std::uint32_t records = 0;
  void sweep_token_files() const noexcept;
};

struct attachment final : lease_owner {
  std::string key;
  std::string name;  // in /dev/shm
  std::string path;  // /dev/shm/<name>
  std::unique_ptr<sys::shm_file> file;
  std::unique_ptr<token_files> tokens;  // where the holders' liveness tokens are
  sys::file_id file_identity;
  layout::segment_header* hdr = nullptr;
  layout::holder_record* holders = nullptr;
  layout::waiter_slot* waiters = nullptr;
  layout::thread_record* threads = nullptr;
  layout::lease_slot* leases = nullptr;
  std::uint64_t pid_ns = 0;

  // Process-local state.
  std::atomic<std::uint32_t> self{kNoSelf};  // our holder record, claimed lazily (segment lock)
  // A free holder record whose token claim_holder_early() took, not yet
  // ours in the segment; ensure_self() makes it so. Both run only with
  // `claiming` set, and a fork child clears both.
  std::atomic<bool> claiming{false};
  std::uint32_t early_claim = kNoSelf;
  sys::process_identity early_identity;  // read with early_claim, off the lock
  bool early_lifeline = false;           // early_claim's lifeline was given to arm
  // Holders whose death this process has seen, as (generation << 32) |
  // (index + 1), one per index modulo the size. A record stays attached,
  // with the same generation, from its process's death until it is reaped,
  // so a death seen is not asked of the kernel again: watch() and the
  // reap under the lock after it pay one walk of the file's locks, not two.
  static constexpr std::size_t kGoneSeen = 256;
  mutable std::array<std::atomic<std::uint64_t>, kGoneSeen> gone_seen{};
  bool lifeline_asked = false;  // the lifeline thread took our record's lifeline to arm (lock)
  // Under the registry mutex:
  std::uint64_t serial = 0;            // unique among this process's attachments, never reused
  std::int64_t handles = 0;            // Semaphore handles pointing here
  bool dying = false;                  // no handle, no permit: being unmapped
  bool sticky = false;                 // inherited across fork(): kept mapped until exit
  std::vector<thread_entry*> entries;  // the threads' fast-path entries for this attachment
  // Pins of Permits whose thread has no entry (or dropped it), and releases
  // in progress by threads that have none.
  std::atomic<std::int64_t> retired_pins{0};
  std::atomic<std::int64_t> releasing{0};
  std::atomic<bool> closing{false};  // no handle left: the release of the last pin detaches
  // Whether the name still leads to this file (trust.cpp, from periodic work only).
  std::atomic<std::int64_t> name_check_due{0};
  std::atomic<bool> name_lost{false};

  // --- lifecycle: the process-local registry, where many handles share one
  // attachment, fork and detach (process.cpp); opening, initializing and
  // removing the segment (open.cpp)
  /// Attaches to `key`, creating the segment with `permits` seats when
  /// permits > 0 and it is absent, with `fencing` and `fairness` (nullopt:
  /// barging); an existing segment keeps its own, and a different capacity or
  /// fairness asked for is logged. Counts one handle. Throws SegmentError
  /// (untrusted_owner: see trust.hpp), std::invalid_argument.
  static attachment* acquire_handle(std::string_view key, int permits, mode_t mode,
                                    std::chrono::milliseconds open_timeout,
                                    const std::vector<std::string>& trusted_owners,
                                    bool fencing = false,
                                    std::optional<Fairness> fairness = std::nullopt);
  /// Drops one handle; unmaps when no handle and no permit remain.
  static void release_handle(attachment* a) noexcept;
  /// The mutex over every attachment's lifecycle fields (and the registry).
  static std::unique_lock<std::mutex> registry_lock();
  /// [registry] True if `a` (with `serial`) is still attached in this process.
  static bool is_registered(const attachment* a, std::uint64_t serial);
  /// [registry, held by `lock`] Unregisters `a` and returns true if nothing
  /// can touch its mapping any more: no handle, no pin, no release in
  /// flight; the caller must then call finish_detach() (without the
  /// registry mutex). While it waits for a release to finish (whose
  /// observer may open semaphores), it lets go of the registry mutex.
  static bool try_detach(attachment* a, std::unique_lock<std::mutex>& lock);
  static void finish_detach(attachment* a) noexcept;
  /// Removes the segment if no live process is attached. Race-free against
  /// a concurrent attach.
  static bool remove_if_unused(std::string_view key);
  /// Empty unless the segment's name was removed: then what
  /// removed_segment needs to sweep its token files once we let go.
  std::optional<removed_segment> if_removed() const noexcept;
  /// Removes the segment's name whoever uses it (they keep the segment they
  /// have), and its token files in which no token is held. False if there
  /// was none. Throws SegmentError.
  static bool remove(std::string_view key);
  /// [locked] Called when this process is done with the segment: frees what
  /// it kept in reserve (lease slots, thread records) and its holder record.
  void retire_self();
  /// Gives up a record claim_holder_early() claimed that ensure_self()
  /// never took over (the acquire did not get the lock), lifeline first.
  void drop_early_claim() noexcept;

  // --- the gate (gate.cpp; any thread, locked or not)
  std::uint64_t gate() const { return hdr->gate.load(std::memory_order_acquire); }
  std::int32_t used() const { return layout::gate_used(gate()); }
  std::int32_t capacity() const { return layout::gate_capacity(gate()); }
  /// The policy stored in the segment (fixed at its creation).
  Fairness fairness() const { return layout::fairness_of(hdr->fairness); }
  /// True if running requests may pass the queue now: barging, and its
  /// first in line has not starved.
  bool queue_passable() const {
    return hdr->fairness == layout::kFairnessBarging && !(gate() & layout::kGateQueued);
  }
  /// The gate flag a queue that is no longer empty sets.
  std::uint64_t queue_flag() const {
    return hdr->fairness == layout::kFairnessBarging ? layout::kGateWaiting : layout::kGateQueued;
  }
  /// Allocated thread records, bounded by the table's size.
  std::uint32_t thread_count() const {
    return std::min(hdr->thread_slots.load(std::memory_order_acquire), layout::kMaxThreads);
  }
  /// Takes `n` seats if they fit and the gate is not frozen and, unless
  /// `pass_queue` (the queue itself is being served), nobody is queued.
  bool admit(std::int32_t n, bool pass_queue);
  /// Gives `n` seats back; returns the gate as it was before.
  std::uint64_t give_back(std::int32_t n);
  /// Sets or clears gate flags (kGateQueued, kGateFrozen, ...) [locked].
  void set_gate_flags(std::uint64_t set, std::uint64_t clear);
  /// Sets the capacity in the gate [locked].
  void set_gate_capacity(std::int32_t capacity);
  /// Lowers earliest_expiry_ns to `expires` if that is earlier (any thread).
  void lower_earliest_expiry(std::int64_t expires);
  /// The smoothed utilization at `now_ns`, taking the current level as a
  /// sample: every call (a reader's too) advances the shared average.
  double ewma_sample(std::int64_t now_ns) const;

  // --- holders and reaping (holders.cpp; [locked] unless said otherwise)
  /// [not locked] Takes the token of a free holder record for this process
  /// ahead of its first locked acquire, so that the system call, a walk of
  /// every lock on the file, is not made under the lock. Grows the holder
  /// table (under the lock, until `deadline_ns`) if it has no free record.
  /// Best effort: ensure_self() claims under the lock whatever this did not.
  /// The record's lifeline is given to the lifeline thread to arm at once:
  /// returns its state word to wait on (claim_holder_armed()), or null.
  const std::atomic<std::uint32_t>* claim_holder_early(std::int64_t deadline_ns);
  /// [not locked] claim_holder_early(), then a wait, at most until
  /// `deadline_ns` and kArmWaitNs from now, until that record's lifeline is
  /// armed: what an open does, and an acquire that finds no record of ours
  /// yet, before it takes its first seat, so that no seat is held while the
  /// lifeline thread starts. (try_acquire never waits.)
  void claim_holder_armed(std::int64_t deadline_ns);
  /// Our holder record, claimed (or taken over from claim_holder_early())
  /// if we have none. Throws SegmentError (errc::too_many) if every record
  /// is a live process's.
  std::uint32_t ensure_self(wake_list& wakes);
  /// True if holder record `holder` is attached and its process lives (or
  /// is this one). Reads the lifeline; probes the token only when the
  /// lifeline reads dead or is absent. Lock-free.
  bool holder_alive(std::uint32_t holder) const;
  /// True if attached holder `holder` is not this process and its token is
  /// gone, or its lifeline reads dead and exiting_alone() says so: its
  /// process died. Lock-free; one system call, or a read of /proc per thread
  /// of a dying process that still holds its token.
  bool holder_gone(std::uint32_t holder) const;
  /// True if holder `holder`'s lifeline reads dead, it shares its token
  /// with nobody (token_shared), and every thread of its process is exiting
  /// (sys::process_exiting): it runs no more user code, and its token is
  /// held only until the kernel closes its files. Reads /proc.
  bool exiting_alone(std::uint32_t holder) const;
  /// What holder record `holder`'s lifeline says, from one load: `unarmed`
  /// (none yet, or never: only the token tells), `alive`, or `dead` (its
  /// thread died: the process is dying or dead, and the token decides).
  enum class lifeline_reading { unarmed, alive, dead };
  lifeline_reading read_lifeline(std::uint32_t holder) const;
  /// Reclaims dead holders' and expired leases; returns seats freed.
  int reap(std::int64_t now_ns, wake_list& wakes, bool force_scan = false);

  // --- leases and thread records (leases.cpp; [locked] unless said otherwise)
  /// Claims a thread record for `holder`, first growing the lease table to
  /// what one more record needs (ensure_lease_slots); kNoSelf if either
  /// table is full or cannot grow.
  std::uint32_t claim_thread_record(std::uint32_t holder);
  /// Thread records claimed now (a scan of the table).
  std::uint32_t claimed_thread_records() const;
  /// Grows the lease table to lease_slots_needed(capacity, records), if it
  /// has fewer; throws SegmentError (the table is unchanged then).
  void ensure_lease_slots(std::uint32_t capacity, std::uint32_t records);
  void free_thread_record(std::uint32_t index);
  /// Frees every thread record of `holder` (it is gone, or done).
  void free_thread_records_of(std::uint32_t holder);
  /// Calls `f(slot, state)` for each lease slot of `holder` that is not
  /// free, in slot order, and stops at the last one its count
  /// (holder_record::leases, read once) says there is: in a fleet the
  /// table is as long as the fleet.
  template <class F>
  void each_lease_of(std::uint32_t holder, F&& f) {
    const std::uint32_t hwm = hdr->lease_hwm.load();
    for (std::uint32_t i = 0, left = holders[holder].leases.load(); i < hwm && left > 0; ++i) {
      if (leases[i].holder.load() != holder) continue;
      const std::uint64_t st = leases[i].state.load(std::memory_order_acquire);
      if (layout::state_kind(st) == layout::kSlotFree) continue;
      --left;
      f(i, st);
    }
  }
  /// Reserves up to `want` free lease slots for `holder` (state reserved),
  /// growing the table if needed; returns how many it wrote to `out`.
  std::uint32_t reserve_slots(std::uint32_t holder, std::uint32_t* out, std::uint32_t want);
  /// Returns reserved slots to the free list.
  void unreserve_slots(const std::uint32_t* slots, std::uint32_t n);
  /// Hands out a block of `n` permit ids; returns the first.
  std::uint64_t take_ids(std::uint64_t n);
  /// Gives `weight` admitted seats (admit() took them) a lease slot of
  /// `holder`; returns the slot, and its id and generation. For a queued
  /// waiter, `to` is its slot: it learns the lease before the lease is
  /// published, so repair() can finish a handoff cut short by a death.
  std::uint32_t grant(std::uint32_t holder, int weight, std::int64_t ttl_ms, std::int64_t now_ns,
                      std::uint64_t& id, std::uint64_t& gen, layout::waiter_slot* to = nullptr);
  /// Ends the lease of `slot` whose state word is `held` (kSlotHeld). False
  /// if it had ended already (its holder or another party won the CAS).
  /// `reason` kLostReleased is the holder's own release.
  bool end_lease(std::uint32_t slot, std::uint64_t held, layout::lost_reason reason,
                 std::int64_t now_ns, wake_list& wakes);
  /// Grows the lease table to hold `slots` (fallocate); throws SegmentError.
  void grow_leases(std::uint32_t slots);
  void hold_sample(std::int64_t ns);
  /// What became of lease (`slot`, `gen`, `id`) as this process sees it.
  enum class lease_status {
    held,     // live, ours, unexpired
    expired,  // still in its slot, ours, but past its expiry: reclaim it as expired
    lost,     // ended (released, expired, reaped or force-released); `why` says how
    foreign,  // held, but by another process (a permit inherited across fork)
  };
  lease_status lease_state(std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                           std::int64_t now_ns, loss* why) const;
  /// lease_state() == held.
  bool holds(std::uint32_t slot, std::uint64_t gen, std::uint64_t id, std::int64_t now_ns,
             loss* why) const {
    return lease_state(slot, gen, id, now_ns, why) == lease_status::held;
  }

  // --- the queue and its watch (queue.cpp; [locked] unless said otherwise)
  std::uint32_t enqueue(std::uint32_t holder, int weight, std::int64_t ttl_ms);
  /// [locked] Puts claimed waiter slot `w` at the tail of the queue.
  void link_last(std::uint32_t w);
  void dequeue(std::uint32_t waiter);
  /// [locked] dequeue(), and tells the waiter behind one that left from the
  /// middle of the queue (it watches the process ahead of it).
  void unlink_waiter(std::uint32_t waiter, wake_list& wakes);
  /// [locked] Makes waiter `w` look at its place in the queue again: bumps
  /// its word and adds it to `wakes`.
  void nudge(std::uint32_t waiter, wake_list& wakes);
  /// [locked] Frees a waiter slot, taking it out of the queue if it is in.
  void free_waiter(std::uint32_t waiter, wake_list& wakes);
  /// [no lock] Gives back waiter slot `w`, granted a lease that its waiter
  /// found still held and took: the slot becomes kLeft, for a lock holder
  /// to take back.
  void leave_granted(std::uint32_t w) noexcept;
  /// [locked] Puts every kLeft waiter slot on the free list.
  void take_back_left_waiters();
  /// [no lock] Takes queued waiter `w` out of the queue's hands: true if it
  /// gave up (kAbandoned; a lock holder unlinks and frees the slot, the
  /// caller never touches it again), false if a lock holder decided its
  /// fate first (kGranted, kRejected). Never waits for the lock.
  bool give_up(std::uint32_t w) noexcept;
  /// [locked] Unlinks and frees every kAbandoned slot in the queue, and
  /// wakes the waiters that took up a watch.
  void drop_abandoned(wake_list& wakes);
  /// [locked] Counts a waiter that joins (+1) or leaves (-1) the queue for
  /// its holder (holder_record::waiting).
  void count_queued(const layout::waiter_slot& s, int delta);
  /// The waiters whose watch matters most (1-based, kNil: none): the head,
  /// which watches the holders, and the one behind it, which watches the
  /// head (and keeps the watchdog). Lock-free (a hint), or exact under the
  /// lock.
  struct watchers {
    std::uint32_t head = layout::kNil;
    std::uint32_t second = layout::kNil;
  };
  watchers queue_watchers() const;
  /// [locked] Wakes the waiters that took up a watch since `before` (the
  /// head and the second in line, as queue_watchers() said then): they
  /// must watch other processes now.
  void wake_new_watchers(const watchers& before, wake_list& wakes);
  void reject_oversized(wake_list& wakes);
  enum class served { granted, stop, again };
  /// [locked] Grants the seats of waiter `head` (1-based, first in line) if
  /// they fit; `again`: the queue changed under it, look at the new head.
  served serve_head(std::uint32_t head, std::int64_t now_ns, wake_list& wakes);
  /// [locked] Gives queued waiter `w` its fate (kGranted, kRejected) and
  /// adds it to `wakes`; the caller has taken it out of the queue.
  void tell(std::uint32_t w, layout::waiter_state state, wake_list& wakes);
  /// [locked] Takes the lease granted to waiter `w` (state kGranted). True
  /// if it is still held and unexpired: `gen` and `id` are then set. False
  /// if its TTL ran out before the waiter came for it; the lease is then
  /// ended (as expired) if nobody did it yet, and the waiter is not served.
  bool take_grant(std::uint32_t w, std::int64_t now_ns, std::uint64_t& gen, std::uint64_t& id,
                  wake_list& wakes);
  /// [locked] Puts waiter `w`, whose grant lapsed, back at the head of the
  /// queue: it was first in line when it was served.
  void requeue_first(std::uint32_t w, std::int64_t now_ns, wake_list& wakes);
  /// Grants seats to queued waiters in FIFO order while they fit. While
  /// the queue is passable (queue_passable()), grants only to `own` (the
  /// caller's own waiter slot, 1-based, if it is first in line) and
  /// otherwise wakes the first in line to compete for the seats
  /// (kGateWoken).
  void grant_queued(std::int64_t now_ns, wake_list& wakes, std::uint32_t own = layout::kNil);
  /// [locked] Under barging: the first in line has been first for longer
  /// than the bound, so freed seats are kept for it until it is served
  /// (serve_head()).
  void starve();
  /// The head waiter's watch (no lock): true if reap() would find anything:
  /// a lease past its expiry, a recount due, or a dead process among the
  /// holders that can owe seats (a lease slot or a waiter of theirs). Reads
  /// their lifelines; a system call only for one that reads dead or has
  /// none. Its cost grows with the holders that owe seats, never with the
  /// processes merely attached.
  bool watch(std::int64_t now_ns) const;
  /// The second waiter's watch (no lock): true if the head of the queue
  /// belongs to a dead process (nobody else would notice it).
  bool head_gone() const;
  /// True if the head of the queue is waiting, not being served, and its
  /// seats fit in the gate (no lock; a hint, exact under the lock): a
  /// releaser gave seats back and has not served the queue yet, or was
  /// stopped (or died) before it could.
  bool head_owed() const;
  /// Waits (no lock) until this process's lifeline is armed, at most until
  /// `deadline_ns` and kArmWaitNs from now: called by the acquire that
  /// claimed our holder record, once it holds its seat, so that our death
  /// rings from then on rather than being found by the waiters' polls
  /// while the lifeline thread starts. At once if it cannot be armed.
  void await_lifeline(std::int64_t deadline_ns) const;
  /// Sleeps until the process of holder record `h` has exited (see
  /// sys::wait_for_exit) or is exiting_alone(), at most until
  /// `deadline_ns`. False, at once, if that cannot be waited for here
  /// (another PID namespace, no pidfds).
  bool await_exit(std::uint32_t h, std::int64_t deadline_ns) const;
  /// True if `h` is an attached holder record whose process died (its
  /// token is free). Lock-free; at most one system call.
  bool holder_gone_from(std::uint32_t h) const;
  /// Wakes the waiters a locked operation collected.
  void wake(const wake_list& wakes);

  // --- errors and failures under the lock (segment.cpp)
  [[noreturn]] void fail(errc code, const std::string& problem) const;
  /// Logs a failure under the lock that no caller can be told of, and
  /// counts it in stats.errors. The first of a run of failures of one kind
  /// is a warning, the rest are debug lines until one success.
  void report_error(const std::string& what, std::atomic<bool>& failing) const;
  std::atomic<bool> grant_failing{false};   // grant_queued() could not grant for lack of space
  std::atomic<bool> told_lock_busy{false};  // try_acquire() found the lock busy (logged once)
  std::atomic<bool> repair_failing{false};  // the last repair by this process failed

  // --- the Permit side of its leases (permits.cpp; the lock-free release
  // is api/permit.cpp's). `p` holds a lease of this segment.
  std::string_view key_of(const Permit& p) const noexcept override;
  bool is_held(const Permit& p) const noexcept override;
  std::optional<Permit::clock::time_point> expires_at(const Permit& p) const noexcept override;
  bool auto_renewing(const Permit& p) const noexcept override;
  void stop_auto_renew(Permit& p) noexcept override;
  void extend(Permit& p, std::chrono::milliseconds ttl) override;
  void release(Permit& p) override;

 private:
  friend class segment_lock;
  // --- the lock and its repair (repair.cpp)
  /// The robust mutex, only through segment_lock. Locks with a deadline;
  /// repairs after an owner died (or after a repair that failed). False on
  /// timeout. Throws SegmentError, with the mutex released, if it cannot be
  /// used (unrecoverable, or the repair failed).
  bool lock(std::int64_t deadline_ns);
  /// Serves the queue first if a release left that to the lock holder
  /// (grants_due), then unlocks; takes the lock back (if it is free) for one
  /// that came meanwhile. The grants go into `wakes`.
  void unlock(wake_list& wakes) noexcept;
  /// [locked] Runs repair() after `owner_died` (the mutex is then
  /// inconsistent) or because a repair before failed.
  void repair_after_death(bool owner_died);
  void repair();
  /// [locked] Recomputes the seats in use from the held lease slots. The
  /// gate is frozen meanwhile, so no lock-free operation lands during the
  /// count; it first waits for the live threads' operations already in
  /// flight. Returns how many dead processes' operations in flight it
  /// settled (each is counted in stats.recoveries), or -1 (nothing changed)
  /// if a live thread's operation did not finish in time (a stopped
  /// thread): resettle_due_ns then schedules a retry.
  int resettle(std::int64_t now_ns);
  /// True while a recount that gave up waits out its backoff
  /// (resettle_due_ns lies ahead of `now_ns`): no recount is tried then.
  bool resettle_backing_off(std::int64_t now_ns) const {
    const std::int64_t due = hdr->resettle_due_ns.load(std::memory_order_relaxed);
    return due != 0 && due > now_ns;
  }
  // --- the tables (segment_shared.hpp, holders.cpp, leases.cpp, queue.cpp)
  /// [locked] Doubles a fixed-offset table (up to `max` entries).
  template <class Slot>
  void grow_table(std::atomic<std::uint32_t>& count, Slot* table, std::size_t offset,
                  std::uint32_t max, const char* what);
  void reap_holder(std::uint32_t holder, std::int64_t now_ns, wake_list& wakes);
  /// [locked] Puts `slot` on the free list (its holder owes it no more).
  void free_slot(std::uint32_t slot, std::uint64_t gen);
  /// [locked] Records that `slot` (just taken off the free list) is now
  /// `holder`'s.
  void own_slot(std::uint32_t slot, std::uint32_t holder);
  /// [locked] Whether reap() should reap holder `h`: its process died, and
  /// it owes seats, or its lifeline says it died (its record is reusable).
  bool reapable(std::uint32_t h) const;
  /// [locked] Takes a free holder record for this process, or kNoSelf.
  std::uint32_t take_free_holder(wake_list& wakes);
  /// [locked] Grows the holder table and puts the new records on the free
  /// list. Throws SegmentError if it is full or /dev/shm is.
  void grow_holders();
  /// [locked] Puts holder record `h` (or waiter slot `w`) on its free list.
  void free_holder_record(std::uint32_t h);
  void push_free_waiter(std::uint32_t w);
  /// [locked] Takes a slot off the free list (or a new one), growing the
  /// table when every slot is a lease or reserved. Throws SegmentError.
  std::uint32_t take_free_slot();
};

/// The segment lock, held for a scope: the only way to take the segment's
/// robust mutex. Whatever ends the scope (an exception included) unlocks,
/// then wakes the waiters collected in `wakes`: waking under the lock would
/// make them block on it straight away. After an owner died it repairs
/// first (see attachment::repair()).
class segment_lock {
 public:
  /// Takes the lock, waiting until the absolute CLOCK_MONOTONIC `deadline_ns`
  /// (sys::kNever: no limit); owns() tells whether it was taken. Throws
  /// SegmentError (naming the key) when the lock is unrecoverable, when a
  /// repair after a death failed (the next locker repairs again), or in a
  /// fork child that could not get a file description of its own.
  segment_lock(attachment& a, std::int64_t deadline_ns) : a_(a), owns_(a.lock(deadline_ns)) {}
  ~segment_lock() { unlock(); }
  segment_lock(const segment_lock&) = delete;
  segment_lock& operator=(const segment_lock&) = delete;
  bool owns() const noexcept { return owns_; }
  /// Lets go early, then wakes.
  void unlock() noexcept {
    if (!owns_) return;
    owns_ = false;
    a_.unlock(wakes);
    a_.wake(wakes);
  }
  wake_list wakes;

 private:
  attachment& a_;
  bool owns_;
};

/// The clock value stored in leases (CLOCK_MONOTONIC_COARSE).
inline std::int64_t lease_clock() {
  return sys::coarse_now_ns();
}

/// Builds a SegmentError naming `path` from an errno.
[[noreturn]] void throw_segment_errno(const std::string& path, const std::string& what, int err);

/// The bucket of Histogram that a duration of `ns` (>= 0) falls in.
inline std::size_t histogram_bucket(std::int64_t ns) {
  std::size_t b = 0;
  while (b < layout::kHistogramBoundsNs.size() && ns > layout::kHistogramBoundsNs[b]) ++b;
  return b;
}

void record_histogram(layout::shared_histogram& h, std::int64_t ns);

}  // namespace shmsem::detail
