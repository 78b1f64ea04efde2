// shmsem/stats.hpp: what a semaphore reports about itself. Every figure here
// is read from the shared segment, so it describes the whole fleet, not just
// the calling process.
#pragma once

#include <shmsem/export.hpp>
#include <shmsem/options.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shmsem {

/// A fixed-bucket histogram of durations, in the layout Prometheus wants.
struct Histogram {
  /// Upper bounds of the buckets, in seconds; a last, implicit bucket is +Inf.
  static constexpr std::array<double, 12> kBounds = {0.0001, 0.001, 0.005, 0.01, 0.05, 0.1,
                                                     0.5,    1.0,   5.0,   10.0, 60.0, 300.0};
  /// counts[i] = observations in bucket i alone (not cumulative);
  /// counts[kBounds.size()] = observations above the last bound.
  std::array<std::uint64_t, kBounds.size() + 1> counts{};
  double sum_seconds = 0;
  SHMSEM_API std::uint64_t count() const;
};

/// Fleet-wide counters, kept in the segment since it was created.
/// Leases are counted, not seats, except where a name says seats.
/// Every granted lease ends in exactly one of released, reaped, expired or
/// force_released, so acquired == released + reaped + expired +
/// force_released + (leases still held).
struct Stats {
  std::uint64_t acquired = 0;         ///< leases granted
  std::uint64_t released = 0;         ///< leases given back by their holder
  std::uint64_t timeouts = 0;         ///< acquires that ran out of wait budget
  std::uint64_t cancelled = 0;        ///< acquires cancelled by a stop_token
  std::uint64_t shutdowns = 0;        ///< acquires ended by shutdown
  std::uint64_t rejected = 0;         ///< acquires refused: n above capacity
  std::uint64_t try_failures = 0;     ///< try_acquire calls that found no seat
  std::uint64_t reaped = 0;           ///< leases of dead holders reclaimed
  std::uint64_t expired = 0;          ///< leases reclaimed after their TTL ran out
  std::uint64_t force_released = 0;   ///< live leases displaced by force_release_all
  std::uint64_t reclaimed_seats = 0;  ///< seats freed by reaping, expiry and force release
  /// repairs after a process died holding the segment lock, or halfway
  /// through a lock-free acquire or release (one per such death)
  std::uint64_t recoveries = 0;
  /// failures inside the segment lock that no caller could be told of,
  /// each logged: a grant to a queued waiter that found /dev/shm full, a
  /// repair that failed (the next locker repairs again)
  std::uint64_t errors = 0;
  Histogram wait;  ///< time from call to grant, for granted leases
  Histogram hold;  ///< time from grant to release, for released leases
};

/// Whether a lease's holder still counts.
enum class HolderState {
  alive,    ///< the holder process lives and the TTL (if any) has not run out
  dead,     ///< the holder process is gone; the seats will be reaped
  expired,  ///< the TTL ran out; the seats will be reclaimed
};

/// Human-readable name of a HolderState ("alive", "dead", "expired").
SHMSEM_API const char* to_string(HolderState s) noexcept;

/// One lease in the segment.
struct Holder {
  /// The holder's pid as this process's PID namespace sees it, or 0 when it
  /// is unknown there (foreign_namespace is then true). On Redis: the pid
  /// on the holder's own host.
  int pid = 0;
  /// The holder lives in another PID namespace (another container).
  bool foreign_namespace = false;
  /// On Redis, the holder's host name ($SHMSEM_HOST if it set one). Empty
  /// on shared memory, whose holders are all on this host.
  std::string host;
  std::uint64_t permit_id = 0;
  int weight = 0;
  std::chrono::steady_clock::time_point acquired_at;
  std::optional<std::chrono::steady_clock::time_point> expires_at;
  HolderState state = HolderState::alive;
};

/// Who owns a segment file and who may open it, as fstat reports it.
struct SegmentOwner {
  unsigned uid = 0;
  std::string user;  ///< the owner's user name; empty when the uid has none
  unsigned gid = 0;
  std::string group;  ///< the group's name; empty when the gid has none
  unsigned mode = 0;  ///< the permission bits (e.g. 0660)
  /// Whether open() and attach() by this process, with the Options given,
  /// accept this owner (see Options::trusted_owners); false means they
  /// throw SegmentError with errc::untrusted_owner.
  bool trusted = false;
};

/// A process that has a semaphore's segment open, as /proc shows it to the
/// caller (root sees every process; another user sees its own, plus the
/// holder records of the others).
struct SegmentUser {
  std::string key;   ///< empty when the file's name does not tell it (a hashed name)
  std::string path;  ///< the segment's path under /dev/shm (its name, for a removed copy)
  /// The process, or 0 when it is known only from its holder record and
  /// lives in another PID namespace.
  int pid = 0;
  std::string command;  ///< /proc/<pid>/comm, or the command its holder record names
  /// It uses a copy of the segment that has since been removed or replaced
  /// under the name: it and the processes that open the key now no longer
  /// share one bound.
  bool removed_copy = false;
  bool attached = false;  ///< it has a handle open (seen through /proc)
  /// Seats held and acquires waiting under the holder record whose liveness
  /// token it holds; 0 for a process that only has the semaphore open.
  int seats = 0;
  int waiting = 0;
  /// The process that claimed that holder record. It differs from pid when
  /// the token was inherited, as `shmsem run` passes it to its command, and
  /// it may then have exited while its seats stay held.
  int holder_pid = 0;
};

/// A consistent-enough picture of one semaphore, read without any lock (so a
/// stopped reader never stalls the fleet). Counters are individually exact;
/// they may be a few operations apart from each other.
struct Snapshot {
  std::string key;
  int capacity = 0;
  int used = 0;
  int waiters = 0;
  double utilization = 0;           ///< used / capacity
  double utilization_smoothed = 0;  ///< EWMA, half-life kEwmaHalfLife
  Stats stats;
  std::vector<Holder> holders;
  /// When this segment was created. Removing the key and creating it again
  /// (as `shmsem gc` does) makes a new segment, whose counters start at 0.
  std::chrono::system_clock::time_point created;
  /// The owner and mode of the segment file, and whether this process trusts it.
  SegmentOwner owner;
  /// False when the key's name no longer leads to the segment this snapshot
  /// was read from (it was removed or replaced): the processes attached to it
  /// and those that open the key now count separate bounds. Always true for
  /// Semaphore::inspect(), which reads the file the name leads to.
  bool name_still_points_here = true;
  /// How a waiter blocked on this semaphore hears that a holder process
  /// died, in words: woken by the kernel (it sleeps on the lifelines of the
  /// attached processes), or at the reclaim tick, and why. Empty on Redis,
  /// whose leases end with their sessions.
  std::string death_wakeup;
  /// How freed seats reach the waiters (always fifo on Redis).
  Fairness fairness = Fairness::fifo;
};

/// Half-life of utilization_smoothed(): a change in load shows half its
/// weight after this long, and an idle semaphore decays to half in this long.
inline constexpr std::chrono::seconds kEwmaHalfLife{10};

}  // namespace shmsem
