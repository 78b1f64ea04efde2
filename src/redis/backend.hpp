// redis/backend.hpp: the Redis backend as Semaphore and Permit see it.
//
// A Semaphore whose key is a redis:// or redis+unix:// URL has a
// `server_backend` (below) as its handle's backend, and a Permit of it a
// `lease` (redis/session.hpp) as its lease_owner: the implementations of
// base/backend.hpp's interface. `kind` registers the
// keys it serves (src/api/backends.cpp). Nothing here is on the
// shared-memory fast path.
#pragma once

#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/stats.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/backend.hpp"

namespace shmsem::detail::redis {

struct semaphore_state;
struct lease;

/// The Redis half of one Semaphore handle.
struct server_backend final : backend {
  std::atomic<std::shared_ptr<semaphore_state>> state;  // replaced in a forked child
  std::string shown;                                    // the URL without its password
  int permits = 0;                                      // open()'s; 0 for attach()

  std::string_view key() const noexcept override { return shown; }
  Capabilities capabilities() const noexcept override;
  Fairness fairness() const noexcept override { return Fairness::fifo; }
  attempt acquire(handle& h, const acquisition& q, const AcquireOptions& opts) override;
  attempt try_acquire(handle& h, const acquisition& q) override;
  figures read_figures(const handle& h) noexcept override;
  Stats stats(const handle& h) override;
  std::vector<Holder> holders(const handle& h) override;
  Snapshot snapshot(const handle& h) override;
  int reap(handle& h, std::optional<std::chrono::milliseconds> lock_timeout) override;
  void set_capacity(handle& h, int permits,
                    std::optional<std::chrono::milliseconds> lock_timeout) override;
  int force_release_all(handle& h, std::optional<std::chrono::milliseconds> lock_timeout) override;
  bool wait_idle(handle& h, std::chrono::milliseconds timeout) override;
  void shutdown(handle& h) override;
};

/// The keys Redis serves: redis://, redis+unix:// (and rediss://, refused
/// with advice on TLS).
extern const backend_kind kind;

/// Semaphore::open (permits >= 1) and attach (permits == 0) of a URL.
std::unique_ptr<server_backend> open(std::string_view key, int permits, const Options& options);
/// Semaphore::remove and remove_if_unused of a URL: deletes the semaphore
/// from the server (only if nothing is held or queued when `only_unused`).
/// Returns whether it was deleted.
bool remove(std::string_view key, bool only_unused);
/// Semaphore::list(server): the URLs of the semaphores on that server.
std::vector<std::string> list(std::string_view server);

// What server_backend's members do.
attempt acquire(handle& h, int n, std::int64_t ttl_ms, bool renew, const AcquireOptions& opts);
attempt try_acquire(handle& h, int n, std::int64_t ttl_ms, bool renew);

/// The counters, read from the server (or, if it cannot be reached, the
/// last values read, with a debug log).
figures read_figures(const handle& h) noexcept;
Stats stats(const handle& h);
std::vector<Holder> holders(const handle& h);
Snapshot snapshot(const handle& h);

int reap(handle& h);
void set_capacity(handle& h, int permits);
int force_release_all(handle& h);
bool wait_idle(handle& h, std::chrono::milliseconds timeout);
/// The handle's blocked acquires end and its permits stop auto-renewing.
void shutdown(handle& h);

// What lease's members (redis/session.hpp) do: the Permit side. `p`
// holds a lease of this backend; `l` is the lease a Permit holds.
void release(Permit& p);
void extend(Permit& p, std::chrono::milliseconds ttl);
bool is_held(const lease& l) noexcept;
std::optional<Permit::clock::time_point> expires_at(const lease& l) noexcept;
bool auto_renewing(const lease& l) noexcept;
void stop_auto_renew(lease& l) noexcept;
std::string_view key(const lease& l) noexcept;

}  // namespace shmsem::detail::redis
