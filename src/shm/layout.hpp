// layout.hpp: the whole shared-memory format of a shmsem segment. Nothing
// else in the project defines a byte that lives in the segment.
//
// A segment is one file in /dev/shm, mapped MAP_SHARED by every process that
// uses the semaphore. Its regions sit at fixed offsets, so a growing table
// never moves and no process has to remap:
//
//   0                 segment_header (one page)
//   kHoldersOffset    holder_record[kMaxHolders]   one per attached process
//   kWaitersOffset    waiter_slot[kMaxWaiters]     one per blocked acquire
//   kThreadsOffset    thread_record[kMaxThreads]   one per thread using the fast path
//   kLeasesOffset     lease_slot[kMaxLeases]       one per granted or reserved permit
//
// Only the first holder_slots / waiter_slots / thread_slots / lease_slots
// entries of each table are allocated (fallocate); the file is sparse past
// them, and nothing past them is ever touched. Each table grows under the
// lock.
//
// Admission is one word, `gate`: the seats in use, the capacity, and four
// flags (queued, frozen, waiting, woken), so that "is there room" and "take
// it" are one compare-and-swap. Every change of the seats in use, locked or
// not, is a CAS on it.
//
// Who writes what:
// - identity fields (magic .. ewma_base_ns): written once by the initializer
//   while it alone holds the init lock and nobody is attached; read-only
//   afterwards.
// - `gate`: by CAS only, from anywhere. The fast path (no lock) adds or
//   removes seats while neither `queued` nor `frozen` is set; the locked
//   path sets and clears `queued` (a waiter is queued and must not be
//   passed: always under fifo, and under barging once the first in line
//   starves) and only a repairer sets `frozen` (every fast CAS fails until
//   it is cleared). Under barging, a queue that may still be passed sets
//   `waiting` instead, which sends releases to wake the first in line, and
//   `woken` says one is on its way: set by whoever wakes it (lock holder
//   or release, by RMW), cleared by that waiter before it sleeps again, by
//   a CAS that fails if a seat came free meanwhile.
// - a lease slot's `state` word says who may write the rest of the slot:
//     free      in the free list; only a lock holder takes it out
//     reserved  in the slot cache of process `holder`; only a thread of that
//               process writes it (plain stores), then moves it to acquiring
//     acquiring that thread is about to CAS the gate for `weight` seats
//     held      a lease, identified by (slot, gen); ended by one CAS on this
//               word, by its holder (-> releasing) or a lock holder (-> ending)
//     releasing its holder is about to CAS the gate to give the seats back
//     released  the gate CAS is done; the releaser finishes outside the slot
//     ending    a lock holder is ending the lease for `reason`
//   The generation in the word changes with every lease, so a CAS from
//   "held, gen g" cannot succeed on a later lease in the same slot.
// - thread records: each is written by its one thread only (plain stores to
//   its counters); readers sum them.
// - a waiter slot is the queue's while kWaiting, and its waiter's once
//   kGranted: the waiter that finds its lease held moves it to kLeft without
//   the lock, and a lock holder short of free slots takes kLeft ones back.
//   A waiter that gives up moves its slot from kWaiting to kAbandoned by
//   CAS, without the lock; a lock holder moves it to kServing by CAS before
//   it grants, so exactly one of them wins. The lock holder unlinks
//   abandoned slots.
// - `grants_due` and `left_waiters` are set without the lock and read by
//   its holder (see their fields).
// - everything else is written only under `mutex`, by whichever process
//   holds it. Fields that are read WITHOUT the lock are std::atomic, so a
//   lock-free reader sees either the old or the new value of each; the
//   writer, holding the lock, updates them with plain load+store pairs
//   (no read-modify-write is needed: the lock already orders writers).
// - Liveness has two parts. The truth is not in the segment at all: each
//   process with a holder record holds an exclusive OFD lock on byte
//   kTokenBase + its holder index of a token file (its token), a small file
//   beside the segment (token_file_name()), one per kHoldersPerTokenFile
//   records. The kernel drops the lock at that process's death (SIGKILL,
//   exec, a zombie not yet waited for: all the same), whatever its PID
//   namespace. Taking a lock, or asking about one (F_OFD_GETLK), walks
//   every lock on the file: on the segment file, that would be every
//   attached process's; on a token file it is at most kHoldersPerTokenFile.
//   A token file holds the segment's token_secret, and is trusted only if
//   it does: whoever can read the segment wrote it (shm/tokens.hpp). The
//   hint is in the segment: each holder record carries a robust mutex, its
//   lifeline, which a thread of that process keeps locked for as long as
//   the process lives (shm/lifeline.hpp). At the death of that thread (any
//   death of the process, and exec) the kernel marks the word
//   FUTEX_OWNER_DIED. Reading the word is a load; only a lifeline that
//   reads dead (or a holder without one) costs a probe of the token, and
//   the token decides, but for one case: a token still held, of a process
//   that kept it to itself (token_shared clear) and whose every thread is
//   exiting, says only that the kernel has not closed its files yet; the
//   process is gone. A process takes its token before the segment lock:
//   it reserves a free holder record by CAS (holder_state) and, its token
//   taken, sets up the record's lifeline: the only changes to a holder
//   record made without the lock (nobody else reads a claiming record's
//   lifeline).
//
// If a process dies holding `mutex`, the next locker gets EOWNERDEAD and
// repairs: every derived field (the seats in use, free list, queue,
// per-holder counts, earliest expiry) is rebuilt from the lease and waiter
// slots. If a process dies halfway through a lock-free acquire or release
// (its slot left in acquiring or releasing), its effect on the gate is
// unknown; the repairer freezes the gate, waits for the live threads' own
// operations in flight to finish, and recomputes the seats in use from the
// held slots. A dead process's ambiguity can only overcount the seats in
// use, never undercount them, so the bound holds even before the repair.
//
// If you change any of this, bump kLayoutVersion. The format word folds in
// the sizes that fix the layout, so a build with another pthread_mutex_t or
// slot size refuses to attach even if someone forgets.
#pragma once

#include <pthread.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <shmsem/options.hpp>
#include <shmsem/stats.hpp>
#include <type_traits>

namespace shmsem::detail::layout {

inline constexpr std::uint64_t kMagic = 0x314d45534d4853ULL;  // "SHMSEM1\0" little-endian
inline constexpr std::uint32_t kLayoutVersion = 10;
// The first layout with token files; its header's token_nonce keeps its
// offset in every later one.
inline constexpr std::uint32_t kFirstTokenFileLayout = 9;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kMaxKeySize = 255;

inline constexpr std::uint32_t kMaxHolders = 4096;   // attached processes at once
inline constexpr std::uint32_t kMaxWaiters = 16384;  // blocked acquires at once
inline constexpr std::uint32_t kMaxThreads = 4096;   // threads using the fast path at once
/// Lease slots a thread keeps reserved for its lock-free acquires, at most.
inline constexpr std::uint32_t kCachedSlots = 16;
/// Lease slots a claimed thread record may keep out of the free list: a
/// full cache, and one slot on its way back into it.
inline constexpr std::uint32_t kSlotsPerThread = kCachedSlots + 1;
/// Lease slots that leave a free one for every grant the gate admits, at
/// `capacity` while `records` thread records are claimed: each lease takes
/// at least one seat, so fewer than `capacity` are held when a grant is
/// admitted, and the records keep the rest. The table never has fewer (see
/// segment_header::lease_slots), so a grant never grows the file, and a
/// full /dev/shm never costs a free seat its lease.
constexpr std::uint32_t lease_slots_needed(std::uint32_t capacity, std::uint32_t records) {
  return capacity + records * kSlotsPerThread;
}
inline constexpr std::uint32_t kMaxLeases =
    lease_slots_needed(static_cast<std::uint32_t>(kMaxCapacity), kMaxThreads);
inline constexpr std::uint32_t kInitialHolders = 16;
inline constexpr std::uint32_t kInitialWaiters = 16;
inline constexpr std::uint32_t kInitialThreads = 16;

/// Index value meaning "none" in the 1-based links below.
inline constexpr std::uint32_t kNil = 0;
inline constexpr std::int64_t kNoExpiry = 0;

/// The expires_ns of a lease granted at `now_ns` with a TTL of `ttl_ms`
/// (none: kNoExpiry).
[[gnu::always_inline]] constexpr std::int64_t expiry_of(std::int64_t now_ns,
                                                        std::int64_t ttl_ms) noexcept {
  return ttl_ms > 0 ? now_ns + ttl_ms * 1'000'000 : kNoExpiry;
}

enum init_state : std::uint32_t { kUninitialized = 0, kInitializing = 1, kReady = 2 };

// A free record is taken in two steps: a process first reserves it
// (claiming, by CAS, with no lock held) and takes its token; only then,
// under the lock, does it become attached. A claiming record is still on
// the free list, so one whose claimer died is taken from there.
enum holder_state : std::uint32_t { kHolderFree = 0, kHolderAttached = 1, kHolderClaiming = 2 };

/// Whether a holder record's lifeline is held by its process.
enum lifeline_state : std::uint32_t {
  kLifelineNone = 0,   // not (yet) held: only the token tells
  kLifelineArmed = 1,  // held by the process's lifeline thread until it dies
};

enum thread_state : std::uint32_t { kThreadFree = 0, kThreadClaimed = 1 };

enum waiter_state : std::uint32_t {
  kWaiterFree = 0,
  kWaiting = 1,   // in the queue
  kGranted = 2,   // the lease in `lease` is the waiter's; it frees the slot
  kRejected = 3,  // its weight exceeds the capacity after a shrink
  // Granted, and its waiter took the lease and left without the lock: the
  // slot is free for whoever holds the lock (take_back_left_waiters).
  kLeft = 4,
  // Its waiter gave up (timeout, cancellation, shutdown) without the lock:
  // still linked in the queue until a lock holder unlinks and frees it.
  kAbandoned = 5,
  // A lock holder is granting it seats: the waiter cannot give up now, and
  // waits for kGranted (or kWaiting again, if the grant failed).
  kServing = 6,
};

/// The bits of segment_header::grants_due.
inline constexpr std::uint32_t kDueGrants = 1;     // a release gave seats back to a queue
inline constexpr std::uint32_t kDueAbandoned = 2;  // a waiter gave up: unlink its slot

/// Why a lease ended without a release by its holder.
enum lost_reason : std::uint32_t {
  kLostNone = 0,
  kLostExpired = 1,
  kLostReaped = 2,
  kLostForceReleased = 3,
  kLostReleased = 4,  // the normal end, kept for completeness
};

/// segment_header::fairness.
inline constexpr std::uint32_t kFairnessFifo = 0;
inline constexpr std::uint32_t kFairnessBarging = 1;
constexpr std::uint32_t fairness_code(Fairness f) {
  return f == Fairness::barging ? kFairnessBarging : kFairnessFifo;
}
constexpr Fairness fairness_of(std::uint32_t code) {
  return code == kFairnessBarging ? Fairness::barging : Fairness::fifo;
}

// --- the gate word ---------------------------------------------------------
// bits 0-20 seats in use, 21-41 capacity, 42 queued, 43 frozen, 44 waiting,
// 45 woken, 46-63 zero.
inline constexpr unsigned kSeatBits = 21;
inline constexpr std::uint64_t kSeatMask = (std::uint64_t{1} << kSeatBits) - 1;
inline constexpr std::uint64_t kGateQueued = std::uint64_t{1} << 42;
inline constexpr std::uint64_t kGateFrozen = std::uint64_t{1} << 43;
inline constexpr std::uint64_t kGateWaiting = std::uint64_t{1} << 44;
inline constexpr std::uint64_t kGateWoken = std::uint64_t{1} << 45;
/// The flags that stop a lock-free acquire.
inline constexpr std::uint64_t kGateBlocked = kGateQueued | kGateFrozen;
inline constexpr std::uint64_t kGateFlags = kGateBlocked | kGateWaiting | kGateWoken;
/// The flags that send a release to the queue.
inline constexpr std::uint64_t kGateServe = kGateQueued | kGateWaiting;
static_assert(static_cast<std::uint64_t>(kMaxCapacity) <= kSeatMask);

constexpr std::int32_t gate_used(std::uint64_t g) {
  return static_cast<std::int32_t>(g & kSeatMask);
}
constexpr std::int32_t gate_capacity(std::uint64_t g) {
  return static_cast<std::int32_t>((g >> kSeatBits) & kSeatMask);
}
constexpr std::uint64_t make_gate(std::int32_t used, std::int32_t capacity, std::uint64_t flags) {
  return (static_cast<std::uint64_t>(used) & kSeatMask) |
         ((static_cast<std::uint64_t>(capacity) & kSeatMask) << kSeatBits) | (flags & kGateFlags);
}
/// True if `n` more seats fit under the capacity of gate value `g`. Never
/// overflows: both fields are 21 bits, so their difference is in range
/// whatever `n` is (and negative after a shrink below the seats in use).
constexpr bool gate_fits(std::uint64_t g, std::int32_t n) {
  return n <= gate_capacity(g) - gate_used(g);
}

// --- the lease slot state word ----------------------------------------------
// bits 0-3 slot_kind, 4-7 lost_reason (with kSlotEnding), 8-63 generation.
enum slot_kind : std::uint32_t {
  kSlotFree = 0,
  kSlotReserved = 1,
  kSlotAcquiring = 2,
  kSlotHeld = 3,
  kSlotReleasing = 4,
  kSlotReleased = 5,
  kSlotEnding = 6,
};
constexpr std::uint64_t slot_state(std::uint64_t gen, slot_kind kind,
                                   lost_reason reason = kLostNone) {
  return (gen << 8) | (static_cast<std::uint64_t>(reason) << 4) | kind;
}
constexpr slot_kind state_kind(std::uint64_t s) {
  return static_cast<slot_kind>(s & 0xf);
}
constexpr lost_reason state_reason(std::uint64_t s) {
  return static_cast<lost_reason>((s >> 4) & 0xf);
}
constexpr std::uint64_t state_gen(std::uint64_t s) {
  return s >> 8;
}

/// Byte offsets of the OFD locks (advisory: they touch no data).
inline constexpr std::uint64_t kLockBase = 1ULL << 40;
inline constexpr std::uint64_t kInitLockByte = kLockBase;        // serializes attach/init
inline constexpr std::uint64_t kAttachLockByte = kLockBase + 1;  // shared by every attached process
// Shared by every process that has finished attaching: proof that the
// segment is initialized and its live state trusted, so that an opener can
// join without the init lock (open.cpp, join_live).
inline constexpr std::uint64_t kSettledLockByte = kLockBase + 2;
// + holder index: a holder's liveness token, in its token file.
inline constexpr std::uint64_t kTokenBase = kLockBase + 64;
/// Holder records whose tokens share one token file: each lock taken or
/// asked about there walks at most this many locks.
inline constexpr std::uint32_t kHoldersPerTokenFile = 128;
inline constexpr std::uint32_t kTokenFiles = kMaxHolders / kHoldersPerTokenFile;
static_assert(kMaxHolders % kHoldersPerTokenFile == 0);

/// The upper bounds of the duration histograms' buckets, in ns; a last
/// bucket above them is implicit. Shared counters are counted into these
/// buckets, so the values are part of the format (format_word() folds them
/// in). The public Histogram::kBounds states them in seconds.
inline constexpr std::array<std::int64_t, 12> kHistogramBoundsNs = {
    100'000,     1'000'000,     5'000'000,     10'000'000,     50'000'000,     100'000'000,
    500'000'000, 1'000'000'000, 5'000'000'000, 10'000'000'000, 60'000'000'000, 300'000'000'000};

constexpr bool public_bounds_match() {
  if (Histogram::kBounds.size() != kHistogramBoundsNs.size()) return false;
  for (std::size_t i = 0; i < kHistogramBoundsNs.size(); ++i) {
    // Positive constants: +0.5 then truncation rounds to nearest
    // (std::llround is not constexpr).
    // NOLINTNEXTLINE(bugprone-incorrect-roundings)
    if (static_cast<std::int64_t>(Histogram::kBounds[i] * 1e9 + 0.5) != kHistogramBoundsNs[i])
      return false;
  }
  return true;
}
static_assert(public_bounds_match(), "Histogram::kBounds must state kHistogramBoundsNs in seconds");

/// Histogram as stored: bucket counts (not cumulative) and the sum in ns.
struct shared_histogram {
  std::atomic<std::uint64_t> counts[kHistogramBoundsNs.size() + 1];
  std::atomic<std::uint64_t> sum_ns;
};

/// Counters of the locked path. stats() adds the thread records' counters
/// of the fast path to these.
struct shared_stats {
  std::atomic<std::uint64_t> acquired;
  std::atomic<std::uint64_t> released;
  std::atomic<std::uint64_t> timeouts;
  std::atomic<std::uint64_t> cancelled;
  std::atomic<std::uint64_t> shutdowns;
  std::atomic<std::uint64_t> rejected;
  std::atomic<std::uint64_t> try_failures;
  std::atomic<std::uint64_t> reaped;
  std::atomic<std::uint64_t> expired;
  std::atomic<std::uint64_t> force_released;
  std::atomic<std::uint64_t> reclaimed_seats;
  std::atomic<std::uint64_t> recoveries;
  std::atomic<std::uint64_t> errors;  // failures under the lock reported by log, not by a caller
  shared_histogram wait;
  shared_histogram hold;
};

/// The smoothed utilization as one word, so that any process (readers
/// included) can advance it with one CAS: the value as a float in the high
/// half, and when it was taken, in ms since ewma_base_ns, in the low half.
constexpr std::uint64_t ewma_word(float value, std::uint32_t at_ms) {
  return (static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(value)) << 32) | at_ms;
}
constexpr float ewma_value(std::uint64_t w) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(w >> 32));
}
constexpr std::uint32_t ewma_ms(std::uint64_t w) {
  return static_cast<std::uint32_t>(w);
}

/// Bytes between the stats and the fast path's line, which ends the page.
inline constexpr std::size_t kHeaderPadding = 3136;

struct alignas(kCacheLine) segment_header {
  // --- identity: written once at initialization -------------------------
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t format;                   // format_word()
  std::atomic<std::uint32_t> init_state;  // init_state
  std::uint32_t key_size;
  std::int64_t created_realtime_ns;
  std::int64_t ewma_base_ns;   // CLOCK_MONOTONIC at creation: the origin of ewma_ms()
  char key[kMaxKeySize + 1];   // NUL-terminated copy of the key
  std::uint32_t fencing;       // non-zero: every grant takes a fencing token (next_fence)
  std::uint32_t fairness;      // fairness_code(): the policy every process follows
  std::uint64_t token_nonce;   // random: names the segment's token files
  std::uint64_t token_secret;  // random: what a token file holds to be trusted

  // --- the lock ----------------------------------------------------------
  alignas(kCacheLine) pthread_mutex_t mutex;

  // --- counters read without the lock ---------------------------------------
  alignas(kCacheLine) std::atomic<std::int32_t> waiters;  // waiter slots in the queue
  std::atomic<std::uint32_t> holder_slots;                // allocated holder records
  std::atomic<std::uint32_t> waiter_slots;                // allocated waiter slots
  std::atomic<std::uint32_t> thread_slots;                // allocated thread records
  // Allocated lease slots: never fewer than lease_slots_needed() for the
  // capacity and the claimed thread records (set_capacity and
  // claim_thread_record grow it first, or fail).
  std::atomic<std::uint32_t> lease_slots;
  std::atomic<std::uint32_t> lease_hwm;  // slots [0, hwm) have been handed out at least once
  std::atomic<std::uint64_t> ewma;       // ewma_word(): time-based EWMA of used/capacity
  std::atomic<std::uint32_t> idle_seq;   // futex word bumped when used drops to 0
  // Work left to the lock's holder by callers that did not wait for the
  // lock (kDueGrants, kDueAbandoned); it does it before it lets go
  // (attachment::unlock), so the seats do not wait for the lock.
  std::atomic<std::uint32_t> grants_due;
  // Waiter slots in kLeft: a hint of how many a scan would take back.
  std::atomic<std::int32_t> left_waiters;

  // --- written and read only under the lock ------------------------------
  std::uint32_t free_lease;  // head of the free lease list (1-based), kNil: take from hwm
  std::atomic<std::uint32_t> queue_head;  // FIFO of waiter slots (1-based); read unlocked as a hint
  std::atomic<std::uint32_t> queue_tail;
  std::uint32_t free_holder;  // head of the free holder records (1-based), kNil: none
  std::uint64_t next_permit_id;
  std::uint64_t next_ticket;
  // A resettle that could not finish (a live thread stopped inside a
  // lock-free operation): retry no earlier than this, then back off.
  std::atomic<std::int64_t> resettle_due_ns;  // 0: none pending
  std::int64_t resettle_backoff_ns;
  std::uint32_t free_waiter;  // head of the free waiter slots (1-based), kNil: none
  // Non-zero from the start of a repair until it finished: a repair that
  // failed (it could not allocate) leaves it set, and the next locker
  // repairs again. The mutex itself must be marked consistent either way,
  // or it would be lost for good.
  std::uint32_t repair_pending;

  alignas(kCacheLine) shared_stats stats;

  // --- what the fast path touches: the last line of the page -------------
  // Not near the start of the page: the lease slots a thread caches first
  // sit at the start of theirs, and a slot or record at the same offset in
  // its page (the same low 12 address bits) makes the CPU hold back loads
  // behind unrelated stores (4K aliasing), which doubled the cost of an
  // uncontended acquire+release when measured.
  char reserved_page[kHeaderPadding];
  alignas(kCacheLine) std::atomic<std::uint64_t> gate;  // make_gate()
  std::atomic<std::int64_t>
      earliest_expiry_ns;                   // lower bound of every lease expiry; INT64_MAX: none
  std::atomic<std::uint32_t> idle_waiters;  // wait_idle() callers (hint for waking)
  // The next fencing token (with `fencing`); starts at created_realtime_ns.
  std::atomic<std::uint64_t> next_fence;
};

/// One process that has used the semaphore (claimed lazily, at its first
/// acquire). Freed when the process detaches with nothing held, or reaped
/// when its liveness token is gone.
struct alignas(kCacheLine) holder_record {
  std::atomic<std::uint32_t> state;       // holder_state
  std::atomic<std::uint32_t> generation;  // bumped at every claim (read without the lock)
  std::atomic<std::int32_t> pid;          // in the namespace pid_ns
  std::uint32_t uid;
  std::atomic<std::uint64_t> pid_ns;
  std::uint64_t start_time;            // clock ticks since boot (informational)
  std::atomic<std::uint32_t> waiting;  // waiter slots in use
  std::atomic<std::uint32_t> threads;  // thread records claimed
  char comm[16];
  // Lease slots of this holder that are not free (reserved, held or in
  // flight). The fast path only moves a slot among those states, so the
  // count changes under the lock alone. A holder with none and no waiter
  // owes no seat, and a watcher need not probe it.
  std::atomic<std::uint32_t> leases;
  std::uint32_t next_free;  // free list link (1-based), valid while not attached
  // The lifeline (see the top of this file). Initialized by the claimer
  // under the segment lock; then locked, and only ever unlocked, by its
  // process's lifeline thread. Read by anyone, as a word.
  alignas(8) pthread_mutex_t lifeline;
  std::atomic<std::uint32_t> lifeline_state;  // lifeline_state
  // The free list is doubly linked: a process claims a record before it
  // takes the lock (holder_state), so the record it brings may sit anywhere
  // in the list.
  std::uint32_t prev_free;  // free list link (1-based), valid while not attached
  // Nonzero once the process gave its token to a process tree
  // (inheritable_liveness_fd(), as `shmsem run` does): the tree may outlive
  // the process, so the process's exit says nothing of its seats, and only
  // the token is asked. Cleared at every claim.
  std::atomic<std::uint32_t> token_shared;
};

/// One thread of an attached process that acquires without the lock. Its
/// counters are written by that thread alone, with plain stores; stats()
/// adds them up. A record outlives its thread: the next thread to claim it
/// goes on counting from where it stood.
struct alignas(kCacheLine) thread_record {
  std::atomic<std::uint32_t> state;     // thread_state
  std::atomic<std::uint32_t> holder;    // the process it belongs to, while claimed
  std::atomic<std::uint64_t> acquired;  // leases granted on the fast path (none waited)
  std::atomic<std::uint64_t> hold_sum_ns;
  // Releases on the fast path by hold time (their sum is the release count).
  std::atomic<std::uint64_t> hold_counts[kHistogramBoundsNs.size() + 1];
};

/// One blocked acquire. Its owner sleeps on `seq`; whoever changes `state`
/// for it (a grant, a rejection) or wants it to look again (shutdown,
/// cancellation) bumps `seq` and wakes it.
struct alignas(kCacheLine) waiter_slot {
  std::atomic<std::uint32_t> seq;
  std::atomic<std::uint32_t> state;   // waiter_state
  std::atomic<std::uint32_t> holder;  // holder record index (read unlocked by the watchdog)
  std::int32_t weight;
  // Queue links (1-based), written under the lock; read unlocked as hints
  // (who is second in line). `next` links the free list while free.
  std::atomic<std::uint32_t> prev;
  std::atomic<std::uint32_t> next;
  std::atomic<std::uint32_t> lease;      // with kGranted: the lease slot
  std::int32_t ttl_ms;                   // TTL to give the lease; 0: none (kMaxDuration fits)
  std::atomic<std::uint64_t> permit_id;  // with kGranted: the lease's id
  // With kGranted: the lease's generation in its slot. The lease is the
  // waiter's only while the slot still says (lease_gen, held): a grant
  // whose TTL ran out before the waiter came for it may have been ended
  // and its slot given to another lease.
  std::atomic<std::uint64_t> lease_gen;
  std::int64_t enqueued_ns;  // CLOCK_MONOTONIC (precise) when it joined the queue
  std::uint64_t ticket;      // FIFO order, rebuilt from this after a crash
};

/// One permit, granted or reserved for one.
struct alignas(kCacheLine) lease_slot {
  std::atomic<std::uint64_t> state;      // slot_state()
  std::atomic<std::uint64_t> id;         // permit id of the lease
  std::atomic<std::int64_t> expires_ns;  // kNoExpiry or CLOCK_MONOTONIC ns
  std::atomic<std::int64_t> acquired_ns;
  std::atomic<std::int32_t> weight;
  std::atomic<std::uint32_t> holder;       // holder record index (of the lease, or the reserver)
  std::uint32_t next_free;                 // free list link (1-based), valid while free
  std::atomic<std::uint32_t> lost_reason;  // why the lease with lost_id ended
  std::atomic<std::uint64_t> lost_id;      // the last lease of this slot that was taken away
  std::atomic<std::int64_t> lost_ns;       // when
};

inline constexpr std::size_t kHeaderRegion = 4096;
inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kHoldersOffset = kHeaderRegion;
inline constexpr std::size_t kWaitersOffset = kHoldersOffset + sizeof(holder_record) * kMaxHolders;
/// Thread records start half a page after a page boundary and lease slots
/// on one, so that a thread's record and the slots it caches first do not
/// share the low 12 address bits (see the gate line above).
inline constexpr std::size_t kThreadsOffset =
    kWaitersOffset + sizeof(waiter_slot) * kMaxWaiters + kPage / 2;
inline constexpr std::size_t kLeasesOffset =
    (kThreadsOffset + sizeof(thread_record) * kMaxThreads + kPage - 1) / kPage * kPage;
inline constexpr std::size_t kMappingSize = kLeasesOffset + sizeof(lease_slot) * kMaxLeases;

/// Bytes the file must have to hold `lease_slots` lease slots.
constexpr std::uint64_t file_size_for(std::uint32_t lease_slots) {
  return kLeasesOffset + static_cast<std::uint64_t>(sizeof(lease_slot)) * lease_slots;
}

/// The format word: the sizes that fix the layout, folded together.
constexpr std::uint32_t format_word() {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  mix(kLayoutVersion);
  mix(sizeof(segment_header));
  mix(sizeof(pthread_mutex_t));
  mix(offsetof(segment_header, mutex));
  mix(offsetof(segment_header, gate));
  mix(offsetof(segment_header, stats));
  mix(sizeof(shared_stats));
  mix(sizeof(holder_record));
  mix(offsetof(holder_record, lifeline));
  mix(offsetof(holder_record, token_shared));
  mix(sizeof(waiter_slot));
  mix(sizeof(thread_record));
  mix(sizeof(lease_slot));
  mix(kMaxHolders);
  mix(kMaxWaiters);
  mix(kMaxThreads);
  mix(kMaxLeases);
  mix(kSeatBits);
  mix(kHoldersPerTokenFile);
  mix(offsetof(segment_header, token_secret));
  for (std::int64_t bound : kHistogramBoundsNs) mix(static_cast<std::uint64_t>(bound));
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

static_assert(std::is_standard_layout_v<segment_header>);
static_assert(std::is_standard_layout_v<holder_record>);
static_assert(std::is_standard_layout_v<thread_record>);
static_assert(std::is_standard_layout_v<waiter_slot>);
static_assert(std::is_standard_layout_v<lease_slot>);
static_assert(sizeof(segment_header) == kHeaderRegion);
static_assert(offsetof(segment_header, gate) == kHeaderRegion - kCacheLine);
static_assert(sizeof(holder_record) == 2 * kCacheLine);
static_assert(sizeof(thread_record) == 2 * kCacheLine);
static_assert(sizeof(waiter_slot) == kCacheLine);
static_assert(sizeof(lease_slot) == kCacheLine);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8);

/// Typed views of the regions of a mapping.
inline segment_header* header(void* base) {
  return static_cast<segment_header*>(base);
}
inline holder_record* holders(void* base) {
  return reinterpret_cast<holder_record*>(static_cast<char*>(base) + kHoldersOffset);
}
inline waiter_slot* waiters(void* base) {
  return reinterpret_cast<waiter_slot*>(static_cast<char*>(base) + kWaitersOffset);
}
inline thread_record* threads(void* base) {
  return reinterpret_cast<thread_record*>(static_cast<char*>(base) + kThreadsOffset);
}
inline lease_slot* leases(void* base) {
  return reinterpret_cast<lease_slot*>(static_cast<char*>(base) + kLeasesOffset);
}

/// What validate() found wrong with a file.
enum class problem {
  none,
  uninitialized,  // all-zero magic: a creator died before writing the header
  too_small,      // shorter than the header
  bad_magic,      // not a shmsem segment
  bad_version,    // another layout version
  bad_format,     // same version, other sizes (another build)
  initializing,   // init_state says a creator is (or died) midway
  bad_header,     // a field out of range
  truncated,      // shorter than its tables need
};

const char* to_string(problem p);

/// Checks the structure of a segment image of `file_size` bytes at `base`
/// (of which only min(file_size, kHeaderRegion) bytes are read). It never
/// reads past file_size, never writes, and never trusts a field before
/// checking its range. `key` (if non-empty) must match the stored key;
/// a mismatch is reported as bad_header with *key_mismatch set.
problem validate(const void* base, std::uint64_t file_size, bool* key_mismatch = nullptr,
                 const char* key = nullptr, std::size_t key_size = 0);

}  // namespace shmsem::detail::layout
