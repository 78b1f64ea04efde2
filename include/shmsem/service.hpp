// shmsem/service.hpp: the key-based service API. Every call names the key and
// the capacity, as a service that guards many resources would; handles are
// opened on first use and cached per key. Also defines shmsem::shutdown(),
// the process-wide application-shutdown contract.
//
//   shmsem::with_permit("legacy-api", 5, [&] { return api.fetch_report(id); });
//   shmsem::Permit p = shmsem::acquire("legacy-api", 5, {.ttl = 60s, .wait_timeout = 10s});
//
// Capacity: `permits` is used when the call creates the semaphore. An
// existing semaphore keeps its fleet-wide capacity (Semaphore::open logs a
// warning when they differ); change it with Semaphore::set_capacity().
//
// The free functions use Service::instance(). Do not fork() while other
// threads are inside a Service call; a child may use the Service it inherited.
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/export.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/semaphore.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

namespace shmsem {

/// Settings of one Service.
struct ServiceOptions {
  /// Most handles kept open at once. The cache is split into up to 16
  /// shards with LRU eviction each, so the bound is cache_capacity rounded
  /// up to a multiple of the shard count. Values below 1 count as 1.
  std::size_t cache_capacity = 256;
  /// How long a cached handle is trusted without checking that its key
  /// still names the segment the handle has mapped. The first lookup after
  /// that checks (one lstat, no lock); if the key was removed or created
  /// anew meanwhile (Semaphore::remove, `shmsem rm` or `gc`), the handle is
  /// dropped and the key opened again. So no seat is granted from a removed
  /// segment later than this after its removal. Zero checks at every
  /// lookup; negative counts as zero.
  std::chrono::milliseconds recheck_interval{1000};
  /// Options every handle is opened with: mode of created segments, default
  /// TTL, auto_renew, observer (for metrics or tracing), open_timeout.
  Options handle_options;
};

/// A set of cached semaphore handles addressed by key. Safe to use from many
/// threads at once.
///
/// Cache: a per-thread array of the last 8 keys (a hit takes no lock and makes
/// no heap allocation), in front of a sharded LRU map (a hit locks only its
/// shard and makes no heap allocation). A miss opens the segment outside any
/// lock. Evicting a handle never invalidates a live Permit or a call in
/// progress: both keep what they need alive. A hit on a handle older than
/// ServiceOptions::recheck_interval checks that the key was not removed or
/// replaced since (one lstat); otherwise a hit makes no system call.
class SHMSEM_API Service {
 public:
  explicit Service(ServiceOptions options = {});
  /// Closes the cached handles. Permits made through this Service stay valid.
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  /// The process-wide instance the free functions and bounded() use. Never
  /// destroyed, so it may be used from static destructors and atexit handlers.
  static Service& instance();

  /// The cached handle of `key`, opening (and if need be creating, with
  /// capacity `permits`) the semaphore on a miss. The handle stays valid for
  /// as long as the caller keeps it, even if evicted.
  /// Throws std::invalid_argument for an invalid key or permits outside
  /// 1..kMaxCapacity, SegmentError when the segment cannot be opened.
  /// Blocks only on a miss (file system calls, Options::open_timeout).
  std::shared_ptr<Semaphore> semaphore(std::string_view key, int permits);

  /// Takes one seat of `key`, as Semaphore::acquire(1, opts) does.
  /// Throws AcquisitionError: the reasons of Semaphore::acquire, and
  /// Reason::error (cause() = the SegmentError) when the segment cannot be
  /// opened. Throws std::invalid_argument as semaphore() does. Blocks.
  Permit acquire(std::string_view key, int permits, const AcquireOptions& opts = {});

  /// One attempt at one seat of `key`; nullopt when none is free now, when
  /// others are queued, or after shutdown(). Throws AcquisitionError
  /// (Reason::error) when the segment cannot be opened.
  std::optional<Permit> try_acquire(std::string_view key, int permits,
                                    const AcquireOptions& opts = {});

  /// Acquires one seat of `key`, runs fn (with the Permit& if it accepts
  /// one) and always releases, even when fn throws; fn's exceptions
  /// propagate unchanged. A seat lost while fn ran is logged as a warning,
  /// not thrown. The hold time is recorded in the segment's hold histogram.
  /// Returns what fn returns. Acquisition errors as acquire().
  template <class F>
  decltype(auto) with_permit(std::string_view key, int permits, F&& fn,
                             const AcquireOptions& opts = {}) {
    std::shared_ptr<Semaphore> sem = semaphore_for_acquire(key, permits);
    return sem->with_permit(std::forward<F>(fn), 1, opts);
  }

  /// Seats of `key` in use now, fleet-wide; 0 when the semaphore does not
  /// exist (it is not created). Lock-free read. Throws SegmentError when the
  /// segment exists but cannot be read, invalid_argument for a bad key.
  int used_permits(std::string_view key);

  /// capacity - used, never below 0. Creates the semaphore with capacity
  /// `permits` if it does not exist, so it equals permits - used unless the
  /// fleet's capacity was changed. Errors as semaphore().
  int available_permits(std::string_view key, int permits);

  /// Frees every seat of `key`; returns the number of live, unexpired
  /// leases displaced (their holders' release() will throw
  /// PermitNotHeldError). 0 when the semaphore does not exist.
  /// Throws SegmentError when it cannot be opened.
  int force_release_all(std::string_view key);

  /// Drops every cached handle (handles and permits in use stay valid).
  void clear();
  /// Handles currently cached (in the shared tier).
  std::size_t cached() const;

 private:
  struct impl;
  std::shared_ptr<Semaphore> semaphore_for_acquire(std::string_view key, int permits);
  std::shared_ptr<Semaphore> existing(std::string_view key);
  std::unique_ptr<impl> impl_;
};

/// Service::instance().acquire(key, permits, opts).
inline Permit acquire(std::string_view key, int permits, const AcquireOptions& opts = {}) {
  return Service::instance().acquire(key, permits, opts);
}
/// Service::instance().try_acquire(key, permits, opts).
inline std::optional<Permit> try_acquire(std::string_view key, int permits,
                                         const AcquireOptions& opts = {}) {
  return Service::instance().try_acquire(key, permits, opts);
}
/// Service::instance().with_permit(key, permits, fn, opts).
template <class F>
decltype(auto) with_permit(std::string_view key, int permits, F&& fn,
                           const AcquireOptions& opts = {}) {
  return Service::instance().with_permit(key, permits, std::forward<F>(fn), opts);
}
/// Service::instance().used_permits(key).
inline int used_permits(std::string_view key) {
  return Service::instance().used_permits(key);
}
/// Service::instance().available_permits(key, permits).
inline int available_permits(std::string_view key, int permits) {
  return Service::instance().available_permits(key, permits);
}
/// Service::instance().force_release_all(key).
inline int force_release_all(std::string_view key) {
  return Service::instance().force_release_all(key);
}

/// The process-wide application-shutdown contract (shutdown_all() plus the
/// service layer): auto-renewal stops, so this process's seats lapse within
/// their remaining TTL; acquires still waiting end with Reason::shutdown; a
/// seat won during shutdown is given back quietly; later acquires fail with
/// Reason::shutdown and bounded() no longer runs work fail-open. Held
/// permits are NOT released: work that finishes in time releases through
/// its own scope. Irreversible for the life of the process. Thread-safe,
/// does not block; calling it again does nothing more.
SHMSEM_API void shutdown();

/// True once shutdown() was called in this process.
SHMSEM_API bool shutdown_requested() noexcept;

}  // namespace shmsem
