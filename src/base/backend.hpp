// backend.hpp: the seam between the public layer and a backend. Every
// backend (src/shm/, src/redis/, the tests' src/fake/) implements
// `backend` for a Semaphore handle, and src/api/backends.cpp lists each
// one's `backend_kind` (shared memory's last: it serves every key that is
// no URL). The public layer keeps one branch of its own for shared memory: the inline
// lock-free fast path of acquire() and try_acquire(), and Permit its
// lock-free release; a Permit's other calls go to its `lease_owner`.
//
// What the public layer does, once for every backend: it checks arguments
// (weights, durations, options) before they reach a backend; it tells the
// observer how each acquisition ended, and turns a refusal into the
// caller's AcquisitionError or empty optional (an `attempt`, below); and
// it tells the observer of seats reaped. What each backend does: its
// work, its stats (a refusal is counted where the backend keeps its
// counters, in the same step that refuses), the observer's on_wait_start
// (handle::wait_started(), at the moment it queues), and the Permit side of
// its leases. What a backend throws is one of the public exceptions, its
// message naming the key.
#pragma once

#include <shmsem/observer.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/stats.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shmsem::detail {

struct attachment;
struct handle;

/// What a Permit's lease is, after the grant, to the backend that granted
/// it. A Permit points at one (Permit::owner_): for shared memory, the
/// segment's attachment, which the permits of that segment share; for
/// another backend, an object of the lease's own, which the Permit owns
/// until its release() frees it (lease_access::take()).
class lease_owner {
 public:
  virtual ~lease_owner() = default;
  virtual std::string_view key_of(const Permit& p) const noexcept = 0;
  virtual bool is_held(const Permit& p) const noexcept = 0;
  virtual std::optional<Permit::clock::time_point> expires_at(const Permit& p) const noexcept = 0;
  virtual bool auto_renewing(const Permit& p) const noexcept = 0;
  virtual void stop_auto_renew(Permit& p) noexcept = 0;
  /// `ttl` is checked (1 ms .. kMaxDuration).
  virtual void extend(Permit& p, std::chrono::milliseconds ttl) = 0;
  /// Ends the lease of `p` and leaves `p` empty: every release that the
  /// public layer's lock-free one does not take.
  virtual void release(Permit& p) = 0;
};

/// How a backend makes, reads and empties a Permit that holds its lease.
struct lease_access {
  /// A permit of `n` seats held through `l`, with `token` as its id and
  /// fencing token, granted at `granted_ns` (CLOCK_MONOTONIC) and expiring
  /// `ttl_ms` later (0: never).
  static Permit make(lease_owner* l, std::uint64_t token, int n, std::int64_t ttl_ms,
                     std::int64_t granted_ns) noexcept {
    Permit p;
    p.owner_ = l;
    p.id_ = token;
    p.fence_ = token;
    p.weight_ = n;
    p.ttl_ms_ = ttl_ms;
    p.expires_ns_ = ttl_ms > 0 ? granted_ns + ttl_ms * 1'000'000 : 0;
    p.acquired_at_ = Permit::clock::time_point(std::chrono::nanoseconds(granted_ns));
    return p;
  }
  static lease_owner* get(const Permit& p) noexcept { return p.owner_; }
  /// Empties `p` and returns what held its lease.
  static lease_owner* take(Permit& p) noexcept { return std::exchange(p.owner_, nullptr); }
  static void set_ttl(Permit& p, std::int64_t ttl_ms, std::int64_t expires_ns) noexcept {
    p.ttl_ms_ = ttl_ms;
    p.expires_ns_ = expires_ns;
  }
  /// The expiry `p` was granted or last extended with (0: none).
  static std::int64_t expires_ns(const Permit& p) noexcept { return p.expires_ns_; }
  static std::chrono::nanoseconds held_for(const Permit& p) noexcept {
    return Permit::clock::now() - p.acquired_at_;
  }
};

/// The figures a Semaphore reads, from the backend's last word on them.
struct figures {
  int capacity = 0;
  int used = 0;
  int waiters = 0;
  double smoothed = 0;

  /// A snapshot of `key` with these figures, for the backend to complete.
  Snapshot snapshot_of(std::string_view key) const {
    Snapshot s;
    s.key = std::string(key);
    s.capacity = capacity;
    s.used = used;
    s.waiters = waiters;
    s.utilization = static_cast<double>(used) / std::max(1, capacity);
    s.utilization_smoothed = smoothed;
    return s;
  }
};

/// One acquisition as the caller asked for it, its options resolved
/// against the handle's.
struct acquisition {
  int n;
  std::int64_t ttl_ms;  // 0: none
  bool renew;
};

/// How a backend's acquisition ended: a permit, or why there is none. The
/// public layer tells the observer and the caller from it.
struct attempt {
  std::optional<Permit> permit;  // set: granted
  /// Otherwise why not: a Reason's outcome, or `unavailable` for a try
  /// that found no free seat.
  Outcome outcome = Outcome::acquired;
  /// For the error's message: what follows the reason's words; for
  /// Outcome::error, the backend's own words instead of them.
  std::string detail;
  std::exception_ptr cause;  // the error behind Outcome::error, if any
  /// The semaphore as the backend saw it when the attempt ended.
  int capacity = 0;
  int used = 0;
  bool waited = false;  // false: decided without blocking
  std::uint32_t wakeups = 0;
  std::int64_t waited_ns = 0;
};

/// One Semaphore handle's backend. Each call gets the handle, for its
/// options, its id and whether it was shut down. A `lock_timeout` bounds
/// an administrative call's wait for a lock of the backend's own, where it
/// has one (shared memory's segment lock); unset, it waits as long as it
/// takes.
class backend {
 public:
  virtual ~backend() = default;
  /// The key as the handle shows it (a URL without its password).
  virtual std::string_view key() const noexcept = 0;
  virtual Capabilities capabilities() const noexcept = 0;
  virtual Fairness fairness() const noexcept = 0;
  /// The mapped segment that the public layer's inline fast path works on:
  /// shared memory's, and null for every other backend.
  virtual attachment* fast_path_segment() const noexcept { return nullptr; }

  /// Blocks as `opts` allow. A failure is an `attempt` without a permit,
  /// but an error of the backend's own may also be thrown.
  virtual attempt acquire(handle& h, const acquisition& q, const AcquireOptions& opts) = 0;
  virtual attempt try_acquire(handle& h, const acquisition& q) = 0;

  /// Never throws: after an error, the last figures read (with a debug log).
  virtual figures read_figures(const handle& h) noexcept = 0;
  virtual Stats stats(const handle& h) = 0;
  virtual std::vector<Holder> holders(const handle& h) = 0;
  virtual Snapshot snapshot(const handle& h) = 0;

  /// The seats freed (the public layer tells the observer).
  virtual int reap(handle& h, std::optional<std::chrono::milliseconds> lock_timeout) = 0;
  /// `permits` is checked (1..kMaxCapacity).
  virtual void set_capacity(handle& h, int permits,
                            std::optional<std::chrono::milliseconds> lock_timeout) = 0;
  virtual int force_release_all(handle& h,
                                std::optional<std::chrono::milliseconds> lock_timeout) = 0;
  virtual bool wait_idle(handle& h, std::chrono::milliseconds timeout) = 0;
  /// The handle's blocked acquires end and its permits stop auto-renewing
  /// (after the handle is marked shut).
  virtual void shutdown(handle& h) = 0;
};

/// A kind of backend: the keys it serves and what is done with a key before
/// a handle exists. src/api/backends.cpp lists them.
struct backend_kind {
  /// In messages: "Redis".
  const char* name;
  /// The URL schemes it serves, for messages ("redis://, redis+unix://"),
  /// or null for shared memory, which serves every key that is no URL.
  const char* schemes;
  /// What its handles can do (Semaphore::capabilities_of(key)).
  Capabilities capabilities;
  /// True for a key this kind serves.
  bool (*claims)(std::string_view key) noexcept;
  /// Throws std::invalid_argument, naming the key, for a key it claims but
  /// cannot serve; null if open() is the first to tell.
  void (*check)(std::string_view key);
  /// Semaphore::open (permits >= 1) and attach (permits == 0).
  std::unique_ptr<backend> (*open)(std::string_view key, int permits, const Options& options);
  /// Semaphore::remove and remove_if_unused: whether it was deleted.
  bool (*remove)(std::string_view key, bool only_unused);
  /// Semaphore::list(server): the keys of the semaphores at that address;
  /// null for a kind with no servers.
  std::vector<std::string> (*list)(std::string_view server);
  /// True for the URL of a server of this kind rather than of a semaphore
  /// (Semaphore::names_server); null for a kind with no servers.
  bool (*names_server)(std::string_view text) noexcept;
  /// shutdown_all(): stops what outlives this kind's handles (the
  /// renewals of permits whose Semaphore is gone); null if nothing does.
  void (*shutdown_all)();
};

/// The kind of backend that serves `key`. Throws std::invalid_argument,
/// naming the key, for a URL that this build has no backend for.
const backend_kind& backend_of(std::string_view key);

/// Every kind of backend this build has.
std::span<const backend_kind* const> backend_kinds() noexcept;

}  // namespace shmsem::detail
