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
//   kLeasesOffset     lease_slot[kMaxLeases]       one per granted permit
//
// Only the first holder_slots / waiter_slots / lease_slots entries of each
// table are allocated (fallocate); the file is sparse past them, and nothing
// past them is ever touched. Each table grows under the lock.
//
// Who writes what:
// - identity fields (magic .. key): written once by the initializer while it
//   alone holds the init lock and nobody is attached; read-only afterwards.
// - everything else is written only under `mutex`, by whichever process
//   holds it. Fields that are read WITHOUT the lock (capacity, used, waiters,
//   stats, EWMA, lease ids and times, waiter state/seq) are std::atomic, so a
//   lock-free reader sees either the old or the new value of each; the
//   writer, holding the lock, updates them with plain load+store pairs
//   (no read-modify-write is needed: the lock already orders writers).
// - lease_slot::id is published last when a lease is granted and cleared
//   first when it ends, so a reader that sees the same non-zero id before
//   and after reading the other fields has read one lease.
// - Liveness is not in the segment at all: each attached process holds an
//   exclusive OFD lock on byte kTokenBase + its holder index of the segment
//   file. The kernel drops it at that process's death (SIGKILL, exec, a
//   zombie not yet waited for: all the same), whatever its PID namespace.
//
// If a process dies holding `mutex`, the next locker gets EOWNERDEAD and
// calls repair(): every derived field (used, free list, queue, per-holder
// counts, earliest expiry) is rebuilt from the lease and waiter slots, which
// are written so that a half-finished update is harmless.
//
// If you change any of this, bump kLayoutVersion. The format word folds in
// the sizes that fix the layout, so a build with another pthread_mutex_t or
// slot size refuses to attach even if someone forgets.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <shmsem/options.hpp>
#include <shmsem/stats.hpp>
#include <type_traits>

namespace shmsem::detail::layout {

inline constexpr std::uint64_t kMagic = 0x314d45534d4853ULL;  // "SHMSEM1\0" little-endian
inline constexpr std::uint32_t kLayoutVersion = 1;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kMaxKeySize = 255;

inline constexpr std::uint32_t kMaxHolders = 4096;   // attached processes at once
inline constexpr std::uint32_t kMaxWaiters = 16384;  // blocked acquires at once
inline constexpr std::uint32_t kMaxLeases = static_cast<std::uint32_t>(kMaxCapacity);
inline constexpr std::uint32_t kInitialHolders = 16;
inline constexpr std::uint32_t kInitialWaiters = 16;

/// Index value meaning "none" in the 1-based links below.
inline constexpr std::uint32_t kNil = 0;
inline constexpr std::int64_t kNoExpiry = 0;

enum init_state : std::uint32_t { kUninitialized = 0, kInitializing = 1, kReady = 2 };

enum holder_state : std::uint32_t { kHolderFree = 0, kHolderAttached = 1 };

enum waiter_state : std::uint32_t {
  kWaiterFree = 0,
  kWaiting = 1,   // in the queue
  kGranted = 2,   // the lease in `lease` is the waiter's; it frees the slot
  kRejected = 3,  // its weight exceeds the capacity after a shrink
};

/// Why a lease ended without a release by its holder.
enum lost_reason : std::uint32_t {
  kLostNone = 0,
  kLostExpired = 1,
  kLostReaped = 2,
  kLostForceReleased = 3,
  kLostReleased = 4,  // the normal end, kept for completeness
};

/// Byte offsets of the OFD locks (advisory: they touch no data).
inline constexpr std::uint64_t kLockBase = 1ULL << 40;
inline constexpr std::uint64_t kInitLockByte = kLockBase;        // serializes attach/init
inline constexpr std::uint64_t kAttachLockByte = kLockBase + 1;  // shared by every attached process
inline constexpr std::uint64_t kTokenBase = kLockBase + 64;      // + holder index: liveness token

/// Histogram as stored: bucket counts (not cumulative) and the sum in ns.
struct shared_histogram {
  std::atomic<std::uint64_t> counts[Histogram::kBounds.size() + 1];
  std::atomic<std::uint64_t> sum_ns;
};

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
  shared_histogram wait;
  shared_histogram hold;
};

struct alignas(kCacheLine) segment_header {
  // --- identity: written once at initialization -------------------------
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t format;                   // format_word()
  std::atomic<std::uint32_t> init_state;  // init_state
  std::uint32_t key_size;
  std::int64_t created_realtime_ns;
  char key[kMaxKeySize + 1];  // NUL-terminated copy of the key

  // --- the lock ----------------------------------------------------------
  alignas(kCacheLine) pthread_mutex_t mutex;

  // --- counters read without the lock ---------------------------------------
  alignas(kCacheLine) std::atomic<std::int32_t> capacity;
  std::atomic<std::int32_t> used;           // seats held, sum of live lease weights
  std::atomic<std::int32_t> waiters;        // waiter slots in the queue
  std::atomic<std::uint32_t> holder_slots;  // allocated holder records
  std::atomic<std::uint32_t> waiter_slots;  // allocated waiter slots
  std::atomic<std::uint32_t> lease_slots;   // allocated lease slots (>= every capacity ever set)
  std::atomic<std::uint32_t> lease_hwm;     // slots [0, hwm) have been handed out at least once
  std::atomic<std::int64_t>
      earliest_expiry_ns;  // lower bound of every lease expiry; INT64_MAX: none
  // Time-based EWMA of used/capacity: value `ewma` at time `ewma_ns`; the
  // level since then is the current used/capacity, because every change of
  // either first advances the average to its own time.
  std::atomic<double> ewma;
  std::uint64_t reserved1;
  std::atomic<std::int64_t> ewma_ns;
  std::atomic<std::uint32_t> idle_seq;      // futex word bumped when used drops to 0
  std::atomic<std::uint32_t> idle_waiters;  // wait_idle() callers (hint for waking)

  // --- written and read only under the lock ------------------------------
  std::uint32_t free_lease;  // head of the free lease list (1-based), kNil: take from hwm
  std::atomic<std::uint32_t> queue_head;  // FIFO of waiter slots (1-based); read unlocked as a hint
  std::atomic<std::uint32_t> queue_tail;
  std::uint32_t ending;  // the lease end in progress: ending_word(); 0: none
  std::uint64_t next_permit_id;
  std::uint64_t next_ticket;

  alignas(kCacheLine) shared_stats stats;
};

/// One process that has used the semaphore (claimed lazily, at its first
/// acquire). Freed when the process detaches with nothing held, or reaped
/// when its liveness token is gone.
struct alignas(kCacheLine) holder_record {
  std::atomic<std::uint32_t> state;  // holder_state
  std::uint32_t generation;          // bumped at every claim
  std::atomic<std::int32_t> pid;     // in the namespace pid_ns
  std::uint32_t uid;
  std::atomic<std::uint64_t> pid_ns;
  std::uint64_t start_time;            // clock ticks since boot (informational)
  std::atomic<std::uint32_t> leases;   // leases held
  std::atomic<std::uint32_t> waiting;  // waiter slots in use
  char comm[16];
};

/// One blocked acquire. Its owner sleeps on `seq`; whoever changes `state`
/// for it (a grant, a rejection) or wants it to look again (shutdown,
/// cancellation) bumps `seq` and wakes it.
struct alignas(kCacheLine) waiter_slot {
  std::atomic<std::uint32_t> seq;
  std::atomic<std::uint32_t> state;  // waiter_state
  std::uint32_t holder;              // holder record index
  std::int32_t weight;
  std::uint32_t prev;  // queue links (1-based)
  std::uint32_t next;
  std::atomic<std::uint32_t> lease;  // with kGranted: the lease slot
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> permit_id;  // with kGranted
  std::int64_t ttl_ms;                   // TTL to give the lease; 0: none
  std::int64_t enqueued_ns;
  std::uint64_t ticket;  // FIFO order, rebuilt from this after a crash
};

/// One granted permit.
struct alignas(kCacheLine) lease_slot {
  std::atomic<std::uint64_t> id;         // permit id; 0: free
  std::atomic<std::int64_t> expires_ns;  // kNoExpiry or CLOCK_MONOTONIC ns
  std::atomic<std::int64_t> acquired_ns;
  std::atomic<std::int32_t> weight;
  std::atomic<std::uint32_t> holder;       // holder record index
  std::uint32_t next_free;                 // free list link (1-based), valid while id == 0
  std::atomic<std::uint32_t> lost_reason;  // why the lease with lost_id ended
  std::atomic<std::uint64_t> lost_id;      // the last lease of this slot that was taken away
  std::atomic<std::int64_t> lost_ns;       // when
  std::uint64_t reserved0;
};

/// A process can die between clearing a lease and counting how it ended.
/// end_lease() names the lease and the reason here first, so that repair()
/// can count such a lease under its true reason instead of guessing.
inline constexpr std::uint32_t kEndingSlotMask = (1u << 28) - 1;
static_assert(kMaxLeases < kEndingSlotMask);
constexpr std::uint32_t ending_word(std::uint32_t slot, lost_reason reason) {
  return (static_cast<std::uint32_t>(reason) << 28) | (slot + 1);
}
constexpr std::uint32_t ending_slot(std::uint32_t word) {
  return (word & kEndingSlotMask) - 1;
}
constexpr lost_reason ending_reason(std::uint32_t word) {
  return static_cast<lost_reason>(word >> 28);
}

inline constexpr std::size_t kHeaderRegion = 4096;
inline constexpr std::size_t kHoldersOffset = kHeaderRegion;
inline constexpr std::size_t kWaitersOffset = kHoldersOffset + sizeof(holder_record) * kMaxHolders;
inline constexpr std::size_t kLeasesOffset = kWaitersOffset + sizeof(waiter_slot) * kMaxWaiters;
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
  mix(offsetof(segment_header, stats));
  mix(sizeof(shared_stats));
  mix(sizeof(holder_record));
  mix(sizeof(waiter_slot));
  mix(sizeof(lease_slot));
  mix(kMaxHolders);
  mix(kMaxWaiters);
  mix(kMaxLeases);
  mix(Histogram::kBounds.size());
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

static_assert(std::is_standard_layout_v<segment_header>);
static_assert(std::is_standard_layout_v<holder_record>);
static_assert(std::is_standard_layout_v<waiter_slot>);
static_assert(std::is_standard_layout_v<lease_slot>);
static_assert(sizeof(segment_header) <= kHeaderRegion);
static_assert(sizeof(holder_record) == kCacheLine);
static_assert(sizeof(waiter_slot) == kCacheLine);
static_assert(sizeof(lease_slot) == kCacheLine);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
static_assert(std::atomic<double>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<double>) == 8);

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
