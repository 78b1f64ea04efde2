// shmsem/options.hpp: the knobs of Semaphore::open and of each acquisition.
#pragma once

#include <sys/types.h>
#include <shmsem/export.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

namespace shmsem {

class Observer;

/// Largest capacity a semaphore can have. Each seat costs one 64-byte lease
/// slot in the segment, allocated when the capacity first reaches it.
inline constexpr int kMaxCapacity = 1'000'000;

/// Longest TTL or wait budget accepted (about 11.5 days). Longer values are
/// rejected with std::invalid_argument rather than silently overflowing.
inline constexpr std::chrono::milliseconds kMaxDuration{1'000'000'000};

/// How a freed seat reaches the requests that wait for one. Stored in the
/// segment when it is created, so that every process follows the same one.
enum class Fairness {
  /// Strict FIFO: while anyone waits, a freed seat goes to the first in
  /// line, and a new request (try_acquire too) queues behind. No request is
  /// ever passed, so every wait is bounded by the queue ahead of it, but
  /// each handoff leaves the seat idle while its waiter wakes up.
  fifo,
  /// The default in shared memory (as Go's sync.Mutex and Java's Semaphore
  /// default to a mode that is not FIFO): a running request may take a free
  /// seat ahead of the sleeping ones (Go's normal mode); the first in line is
  /// woken to compete for it. Once the first in line has been first for
  /// longer than kStarvationBound, freed seats go to it, and to nobody else,
  /// until it is served (Go's starvation mode); then the next one in line
  /// may be passed for the bound in turn. Nobody starves, whatever the
  /// weights. It keeps a fleet's seats about as busy as a sem_t's, where fifo
  /// leaves them idle for a wake-up at each handoff (docs/performance.md).
  barging,
};

/// "fifo" or "barging".
SHMSEM_API const char* to_string(Fairness f) noexcept;

/// How long the first waiter in line, counted from when it became the
/// first, lets running requests pass it under Fairness::barging before
/// freed seats are kept for it.
inline constexpr std::chrono::milliseconds kStarvationBound{1};

/// Settings of one handle, given to Semaphore::open.
struct Options {
  /// Mode of a segment this call creates, applied whatever the umask.
  /// 0660 shares the semaphore with the file's group. Ignored on attach.
  mode_t mode = 0600;
  /// Default lease TTL of this handle's permits; nullopt: no expiry.
  std::optional<std::chrono::milliseconds> ttl;
  /// Default for permits that have a TTL: renew them in the background.
  bool auto_renew = false;
  /// Optional hook; costs nothing when empty.
  std::shared_ptr<Observer> observer;
  /// How long open() waits for another process that is initializing the
  /// segment before it gives up with SegmentError (errc::busy).
  std::chrono::milliseconds open_timeout{5000};
  /// Users whose segments this handle accepts on purpose, by name ("postgres")
  /// or by uid in decimal ("1001"). Without them, open() and attach() accept
  /// a segment only if its owner is this process's effective uid or root, or
  /// if this process is not root and the file is not writable by others (its
  /// group was chosen by its owner), neither by its mode nor by a POSIX ACL
  /// entry naming another user or group. Anything else throws SegmentError
  /// (errc::untrusted_owner): /dev/shm is writable by every user, so another
  /// user could have created the file first, with a capacity or contents of
  /// their choosing. A name that is no user of this host throws
  /// std::invalid_argument (naming it) at open(), attach() and inspect().
  /// See docs/ownership.md for sharing a semaphore across users.
  std::vector<std::string> trusted_owners;
  /// Redis keys only: how long this process's session (and so its leases
  /// and queued waits) outlives its last contact with Redis. A holder that
  /// dies, is stopped or is cut off loses its seats this long after its
  /// last renewal; a background thread renews at a third of it. A blocked
  /// waiter sees a SIGKILLed holder's seat within about 4/3 of it. The
  /// first handle of a key in a process sets it (100 ms .. kMaxDuration).
  std::chrono::milliseconds session_timeout{3000};
  /// Redis keys only: the bound on connecting to the server and on each
  /// command. A call during an outage fails within its wait_timeout plus
  /// this (1 ms .. kMaxDuration).
  std::chrono::milliseconds connect_timeout{1000};
  /// Shared memory only, and only when open() creates the segment (an
  /// existing segment keeps what it was created with): every grant takes
  /// the next value of one counter in the segment as its
  /// Permit::fencing_token() (and as its id). Grants then go through the
  /// segment lock. Without it tokens are 0 and the lock-free path is
  /// unchanged. Redis grants always carry tokens.
  bool fencing = false;
  /// Shared memory only: the fairness policy of a segment this call
  /// creates (nullopt: Fairness::barging). An existing segment keeps its own,
  /// and a different one asked for here is logged as a warning, as a
  /// different capacity is. Redis keys are always FIFO: asking for
  /// barging on one throws std::invalid_argument.
  std::optional<Fairness> fairness;
};

/// Settings of one acquire() or try_acquire().
struct AcquireOptions {
  /// Lease TTL; overrides Options::ttl. 0ms means "no expiry" even when the
  /// handle has a default TTL.
  std::optional<std::chrono::milliseconds> ttl;
  /// Total wait budget; nullopt waits until acquired. A zero or negative
  /// budget makes one attempt without waiting (but still queues fairly:
  /// it fails if others wait ahead). Ignored by try_acquire.
  std::optional<std::chrono::milliseconds> wait_timeout;
  /// Overrides Options::auto_renew. Only meaningful with a TTL.
  std::optional<bool> auto_renew;
  /// Cancels a blocked acquire (Reason::cancelled).
  std::stop_token stop;
};

}  // namespace shmsem
