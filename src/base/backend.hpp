// backend.hpp: the seam between the public layer and a backend other than
// shared memory. Shared memory stays inline in the public layer, for its
// lock-free fast path; every other backend is a folder (src/redis/) that
// implements `backend` for a Semaphore handle and `remote_lease` for a
// Permit, and one line of src/api/backends.cpp registers its keys.
//
// The contract each implementation keeps, so that the public layer can
// treat them alike: arguments reach it checked (weights, durations, options);
// what it throws is one of the public exceptions, its message naming the key;
// its observer events and stats are its own, as the public headers
// describe them.
#pragma once

#include <shmsem/observer.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/stats.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shmsem::detail {

struct handle;

/// A Permit's lease on a backend other than shared memory. The Permit
/// holds it by a tagged pointer (Permit::remote()) and owns it: release()
/// ends the lease and frees it, through remote_access::take().
class remote_lease {
 public:
  virtual ~remote_lease() = default;
  virtual std::string_view key() const noexcept = 0;
  virtual bool is_held() const noexcept = 0;
  virtual std::optional<Permit::clock::time_point> expires_at() const noexcept = 0;
  virtual bool auto_renewing() const noexcept = 0;
  virtual void stop_auto_renew() noexcept = 0;
  virtual void extend(Permit& p, std::chrono::milliseconds ttl) = 0;
  /// Ends the lease of `p` (whose remote() is this) and leaves `p` empty.
  virtual void release(Permit& p) = 0;
};

/// How a backend makes, reads and empties a Permit that holds its lease.
struct remote_access {
  /// A permit of `n` seats holding `l` (the permit owns it from here on),
  /// with `token` as its id and fencing token, granted at `granted_ns`
  /// (CLOCK_MONOTONIC) and expiring `ttl_ms` later (0: never).
  static Permit make(remote_lease* l, std::uint64_t token, int n, std::int64_t ttl_ms,
                     std::int64_t granted_ns) noexcept {
    Permit p;
    // A tagged pointer: the low bit tells Permit that att_ is a remote lease.
    p.att_ = reinterpret_cast<attachment*>(  // NOLINT(performance-no-int-to-ptr)
        reinterpret_cast<std::uintptr_t>(l) | 1);
    p.id_ = token;
    p.fence_ = token;
    p.weight_ = n;
    p.ttl_ms_ = ttl_ms;
    p.expires_ns_ = ttl_ms > 0 ? granted_ns + ttl_ms * 1'000'000 : 0;
    p.acquired_at_ = Permit::clock::time_point(std::chrono::nanoseconds(granted_ns));
    return p;
  }
  static remote_lease* get(const Permit& p) noexcept { return p.remote(); }
  /// Empties `p` and returns its lease, now the caller's.
  static remote_lease* take(Permit& p) noexcept {
    remote_lease* l = p.remote();
    p.att_ = nullptr;
    return l;
  }
  static void set_ttl(Permit& p, std::int64_t ttl_ms, std::int64_t expires_ns) noexcept {
    p.ttl_ms_ = ttl_ms;
    p.expires_ns_ = expires_ns;
  }
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
};

/// One Semaphore handle's backend other than shared memory. Each call gets
/// the handle, for its options, its id and whether it was shut down.
class backend {
 public:
  virtual ~backend() = default;
  /// The key as the handle shows it (a URL without its password).
  virtual std::string_view key() const noexcept = 0;
  virtual Capabilities capabilities() const noexcept = 0;

  virtual Permit acquire(handle& h, int n, std::int64_t ttl_ms, bool renew,
                         const AcquireOptions& opts) = 0;
  virtual std::optional<Permit> try_acquire(handle& h, int n, std::int64_t ttl_ms, bool renew) = 0;

  /// Never throws: after an error, the last figures read (with a debug log).
  virtual figures read_figures(const handle& h) noexcept = 0;
  virtual Stats stats(const handle& h) = 0;
  virtual std::vector<Holder> holders(const handle& h) = 0;
  virtual Snapshot snapshot(const handle& h) = 0;

  virtual int reap(handle& h) = 0;
  virtual void set_capacity(handle& h, int permits) = 0;
  virtual int force_release_all(handle& h) = 0;
  virtual bool wait_idle(handle& h, std::chrono::milliseconds timeout) = 0;
  /// The handle's blocked acquires end and its permits stop auto-renewing.
  virtual void shutdown(handle& h) = 0;
};

/// A kind of backend: the keys it serves and what is done with a key before
/// a handle exists. src/api/backends.cpp lists them.
struct backend_kind {
  /// In messages: "Redis".
  const char* name;
  /// The schemes it serves, for messages: "redis://, redis+unix://".
  const char* schemes;
  /// What its handles can do (Semaphore::capabilities_of(key)).
  Capabilities capabilities;
  /// True for a key this kind serves (a URL of its scheme).
  bool (*claims)(std::string_view key) noexcept;
  /// Semaphore::open (permits >= 1) and attach (permits == 0).
  std::shared_ptr<backend> (*open)(std::string_view key, int permits, const Options& options);
  /// Semaphore::remove and remove_if_unused: whether it was deleted.
  bool (*remove)(std::string_view key, bool only_unused);
  /// Semaphore::list(server): the keys of the semaphores at that address.
  std::vector<std::string> (*list)(std::string_view server);
};

/// The kind of backend that serves `key`, or null for a shared-memory key.
/// Throws std::invalid_argument, naming the key, for a URL that this build
/// has no backend for.
const backend_kind* backend_of(std::string_view key);

}  // namespace shmsem::detail
