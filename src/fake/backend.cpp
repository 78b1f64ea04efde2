// fake/backend.cpp: the in-process backend (fake/backend.hpp). Everything
// happens under one semaphore's mutex; a waiter sleeps on its condition
// variable and is served in FIFO order, as Redis serves its queue.

#include "fake/backend.hpp"

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>

#include "base/handle.hpp"
#include "base/key_syntax.hpp"
#include "base/observe.hpp"
#include "base/reasons.hpp"
#include "sys/clock.hpp"

namespace shmsem::detail::fake {

namespace {

std::int64_t now_ns() {
  return sys::precise_now_ns();
}

// Counts a wait or a hold of `ns` in its bucket.
void record(Histogram& h, std::int64_t ns) {
  const double seconds = static_cast<double>(ns) / 1e9;
  std::size_t b = 0;
  while (b < Histogram::kBounds.size() && seconds > Histogram::kBounds[b]) ++b;
  ++h.counts[b];
  h.sum_seconds += seconds;
}

// The permits' ids and fencing tokens: one count for every fake semaphore,
// so that a key's tokens keep growing when it is removed and made again.
std::atomic<std::uint64_t> next_token{1};

struct lease_record {
  int n = 0;
  std::int64_t granted_ns = 0;
  std::int64_t ttl_ms = 0;      // 0: no expiry
  std::int64_t expires_ns = 0;  // 0: none
  bool renew = false;           // renewed every third of its TTL while held
  std::int64_t renewed_ns = 0;
  std::uint64_t handle_id = 0;

  // Renewed if due (a renewal thread's work, done when anyone looks), then
  // whether its TTL ran out by `now`.
  bool lapsed(std::int64_t now) {
    if (renew && ttl_ms > 0 && now - renewed_ns >= ttl_ms * 1'000'000 / 3 &&
        (expires_ns == 0 || now < expires_ns)) {
      renewed_ns = now;
      expires_ns = now + ttl_ms * 1'000'000;
    }
    return expires_ns != 0 && now >= expires_ns;
  }
};

struct waiter {
  int n = 0;
  enum class state { waiting, granted, rejected } st = state::waiting;
  std::uint64_t id = 0;  // once granted
};

// One semaphore. Its handles and the leases of its permits share it; it
// outlives its removal for as long as they do, as an unlinked segment does.
struct semaphore {
  std::mutex mu;
  std::condition_variable cv;
  std::string key;
  std::chrono::system_clock::time_point created = std::chrono::system_clock::now();
  // Under mu:
  int capacity = 0;
  int used = 0;  // a lease whose TTL ran out counts until it is reclaimed
  std::map<std::uint64_t, lease_record> leases;
  std::map<std::uint64_t, std::string> ended;  // why a lease that ended early did
  std::deque<waiter*> queue;
  Stats stats;
  bool removed = false;  // by Semaphore::remove(): its waiters' waits end
  double smoothed = 0;   // utilization's EWMA (kEwmaHalfLife), as of smoothed_ns
  std::int64_t smoothed_ns = now_ns();

  // [mu] Brings the EWMA up to `now`, the utilization having been what it
  // is since it was last brought up: call before `used` changes.
  void sample(std::int64_t now) {
    const double dt = static_cast<double>(now - smoothed_ns) / 1e9;
    if (dt <= 0) return;
    const double half_life = std::chrono::duration<double>(kEwmaHalfLife).count();
    const double level = static_cast<double>(used) / std::max(1, capacity);
    smoothed += (1 - std::exp2(-dt / half_life)) * (level - smoothed);
    smoothed_ns = now;
  }

  // [mu] Ends lease `it` whose TTL ran out, as a reclaim does.
  void reclaim(std::map<std::uint64_t, lease_record>::iterator it, std::int64_t now) {
    sample(now);
    used -= it->second.n;
    ++stats.expired;
    stats.reclaimed_seats += static_cast<std::uint64_t>(it->second.n);
    ended[it->first] = "its TTL ran out";
    leases.erase(it);
    serve();
  }

  // [mu] Reclaims the leases whose TTL ran out: the count.
  int expire(std::int64_t now) {
    int freed = 0;
    for (auto it = leases.begin(); it != leases.end();) {
      if (it->second.lapsed(now)) {
        reclaim(it++, now);
        ++freed;
      } else {
        ++it;
      }
    }
    return freed;
  }

  // [mu] A new lease of n seats.
  std::uint64_t grant(int n, const acquisition& q, std::uint64_t handle_id) {
    const std::uint64_t id = next_token.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t now = now_ns();
    leases[id] = {n,       now, q.ttl_ms, q.ttl_ms > 0 ? now + q.ttl_ms * 1'000'000 : 0,
                  q.renew, now, handle_id};
    sample(now);
    used += n;
    ++stats.acquired;
    return id;
  }

  // [mu] Grants the queue's head while it fits, and rejects a head that no
  // capacity could fit.
  void serve() {
    while (!queue.empty()) {
      waiter& w = *queue.front();
      if (w.n > capacity) {
        w.st = waiter::state::rejected;
        ++stats.rejected;
      } else if (used + w.n <= capacity) {
        w.st = waiter::state::granted;
        w.id = grant(w.n, {w.n, 0, false}, 0);
      } else {
        break;
      }
      queue.pop_front();
    }
    cv.notify_all();
  }
};

using semaphore_ptr = std::shared_ptr<semaphore>;

std::mutex registry_mu;
// Guarded by registry_mu:
std::map<std::string, semaphore_ptr, std::less<>> registry;
std::set<std::string, std::less<>> blocked;  // keys that block() made unopenable

std::string name_of(std::string_view key) {
  return std::string(key.substr(std::string_view("fake://").size()));
}

// The Permit side: one lease, owned by its Permit until released.
struct lease final : lease_owner {
  semaphore_ptr sem;
  std::uint64_t id = 0;
  std::shared_ptr<Observer> observer;

  // [sem->mu] The record while it is held (not lapsed), or null.
  lease_record* record() const {
    auto it = sem->leases.find(id);
    if (it == sem->leases.end() || it->second.lapsed(now_ns())) return nullptr;
    return &it->second;
  }
  std::string why_ended() const {
    auto it = sem->ended.find(id);
    return it == sem->ended.end() ? "its TTL ran out" : it->second;
  }

  std::string_view key_of(const Permit&) const noexcept override { return sem->key; }
  bool is_held(const Permit&) const noexcept override {
    std::lock_guard g(sem->mu);
    return record() != nullptr;
  }
  std::optional<Permit::clock::time_point> expires_at(const Permit& p) const noexcept override {
    std::lock_guard g(sem->mu);
    auto it = sem->leases.find(id);
    std::int64_t exp = lease_access::expires_ns(p);
    if (it != sem->leases.end()) {
      it->second.lapsed(now_ns());
      exp = it->second.expires_ns;
    }
    if (exp == 0) return std::nullopt;
    return Permit::clock::time_point(std::chrono::nanoseconds(exp));
  }
  bool auto_renewing(const Permit&) const noexcept override {
    std::lock_guard g(sem->mu);
    const lease_record* r = record();
    return r && r->renew;
  }
  void stop_auto_renew(Permit&) noexcept override {
    std::lock_guard g(sem->mu);
    if (lease_record* r = record()) r->renew = false;
  }
  void extend(Permit& p, std::chrono::milliseconds ttl) override {
    std::int64_t exp = 0;
    {
      std::lock_guard g(sem->mu);
      lease_record* r = record();
      if (!r)
        throw ExtensionError("shmsem: cannot extend permit " + std::to_string(id) + " of '" +
                             sem->key + "': " + why_ended());
      r->ttl_ms = ttl.count();
      r->renewed_ns = now_ns();
      r->expires_ns = exp = r->renewed_ns + ttl.count() * 1'000'000;
    }
    lease_access::set_ttl(p, ttl.count(), exp);
  }
  void release(Permit& p) override {
    std::unique_ptr<lease> self(static_cast<lease*>(lease_access::take(p)));
    int weight = 0, used = 0, cap = 0;
    std::string why;
    {
      std::lock_guard g(sem->mu);
      const std::int64_t now = now_ns();
      if (lease_record* r = record()) {
        weight = r->n;
        sem->sample(now);
        sem->used -= r->n;
        ++sem->stats.released;
        fake::record(sem->stats.hold, now - r->granted_ns);
        sem->leases.erase(id);
        sem->serve();
      } else {
        // Lapsed but not yet reclaimed: reclaimed now, as expired.
        if (auto it = sem->leases.find(id); it != sem->leases.end()) sem->reclaim(it, now);
        why = why_ended();
      }
      used = sem->used;
      cap = sem->capacity;
    }
    if (weight > 0) {
      notify(observer, [&](Observer& o) {
        o.on_release(ReleaseEvent{sem->key, cap, weight, used, id, lease_access::held_for(p)});
      });
      return;
    }
    notify(observer, [&](Observer& o) { o.on_lost(sem->key, id, why); });
    throw PermitNotHeldError("shmsem: permit " + std::to_string(id) + " of '" + sem->key +
                             "' was not held at release: " + why);
  }
};

// One handle's side.
class fake_backend final : public backend {
 public:
  fake_backend(semaphore_ptr s, int permits) : key_(s->key), permits_(permits), s_(std::move(s)) {}

  std::string_view key() const noexcept override { return key_; }
  Capabilities capabilities() const noexcept override { return kind.capabilities; }
  Fairness fairness() const noexcept override { return Fairness::fifo; }

  attempt acquire(handle& h, const acquisition& q, const AcquireOptions& opts) override {
    const semaphore_ptr sp = current(true);
    semaphore& s = *sp;
    const std::int64_t started = now_ns();
    std::int64_t deadline = INT64_MAX;
    if (opts.wait_timeout)
      deadline = started + std::chrono::nanoseconds(std::max(*opts.wait_timeout, {})).count();
    std::unique_lock lk(s.mu);
    s.expire(started);
    if (h.is_shut()) return refused(s, Reason::shutdown, false, 0);
    if (q.n > s.capacity) return refused(s, Reason::exceeds_capacity, false, 0);
    if (s.queue.empty() && s.used + q.n <= s.capacity)
      return granted(h, sp, q, s.grant(q.n, q, h.id), started);
    if (started >= deadline) return refused(s, Reason::timeout, false, 0);
    waiter w;
    w.n = q.n;
    s.queue.push_back(&w);
    lk.unlock();
    h.wait_started(s.key, q.n);
    // Registered without the mutex: for a token already stopped, the
    // callback runs here, at once, and takes it.
    std::stop_callback on_stop(opts.stop, [&s] {
      std::lock_guard g(s.mu);
      s.cv.notify_all();
    });
    lk.lock();
    std::uint32_t wakeups = 0;
    Reason why = Reason::timeout;
    while (w.st == waiter::state::waiting) {
      if (opts.stop.stop_requested()) {
        why = Reason::cancelled;
        break;
      }
      if (h.is_shut()) {
        why = Reason::shutdown;
        break;
      }
      if (s.removed) {
        why = Reason::error;
        break;
      }
      const std::int64_t now = now_ns();
      if (now >= deadline) break;
      // A renewed lease may keep others waiting: check expiries as time goes.
      s.cv.wait_for(lk,
                    std::chrono::nanoseconds(std::min<std::int64_t>(deadline - now, 5'000'000)));
      s.expire(now_ns());
      ++wakeups;
    }
    attempt t;
    if (w.st == waiter::state::granted) {
      // A grant that arrived as the caller gave up is kept.
      t = granted(h, sp, q, w.id, started);
    } else if (w.st == waiter::state::rejected) {
      t = refused(s, Reason::exceeds_capacity, true, wakeups);
    } else {
      s.queue.erase(std::find(s.queue.begin(), s.queue.end(), &w));
      s.serve();  // those behind it may fit now
      t = refused(s, why, true, wakeups);
      if (why == Reason::error) t.detail = "its semaphore was removed while it waited";
    }
    t.waited = true;
    t.wakeups = wakeups;
    t.waited_ns = now_ns() - started;
    return t;
  }

  attempt try_acquire(handle& h, const acquisition& q) override {
    const semaphore_ptr sp = current(true);
    semaphore& s = *sp;
    const std::int64_t started = now_ns();
    std::unique_lock lk(s.mu);
    s.expire(started);
    if (h.is_shut()) return refused(s, Reason::shutdown, false, 0);
    if (q.n > s.capacity) {
      ++s.stats.try_failures;
      return ended(s, Outcome::exceeds_capacity);
    }
    if (!s.queue.empty() || s.used + q.n > s.capacity) {
      ++s.stats.try_failures;
      return ended(s, Outcome::unavailable);
    }
    return granted(h, sp, q, s.grant(q.n, q, h.id), started);
  }

  figures read_figures(const handle&) noexcept override {
    const semaphore_ptr sp = current();
    std::lock_guard g(sp->mu);
    sp->sample(now_ns());
    return {sp->capacity, sp->used, static_cast<int>(sp->queue.size()), sp->smoothed};
  }
  Stats stats(const handle&) override {
    const semaphore_ptr sp = current();
    std::lock_guard g(sp->mu);
    return sp->stats;
  }
  std::vector<Holder> holders(const handle&) override {
    const semaphore_ptr sp = current();
    std::lock_guard g(sp->mu);
    const std::int64_t now = now_ns();
    std::vector<Holder> out;
    for (auto& [id, l] : sp->leases) {
      Holder hd;
      hd.pid = static_cast<int>(::getpid());
      hd.permit_id = id;
      hd.weight = l.n;
      hd.acquired_at =
          std::chrono::steady_clock::time_point(std::chrono::nanoseconds(l.granted_ns));
      if (l.lapsed(now)) hd.state = HolderState::expired;
      if (l.expires_ns)
        hd.expires_at =
            std::chrono::steady_clock::time_point(std::chrono::nanoseconds(l.expires_ns));
      out.push_back(std::move(hd));
    }
    return out;
  }
  Snapshot snapshot(const handle& h) override {
    Snapshot s = read_figures(h).snapshot_of(key_);
    s.stats = stats(h);
    s.holders = holders(h);
    s.created = current()->created;
    return s;
  }

  int reap(handle&, std::optional<std::chrono::milliseconds>) override {
    const semaphore_ptr sp = current();
    std::lock_guard g(sp->mu);
    return sp->expire(now_ns());
  }
  void set_capacity(handle&, int permits, std::optional<std::chrono::milliseconds>) override {
    const semaphore_ptr sp = current(true);
    std::lock_guard g(sp->mu);
    sp->sample(now_ns());
    sp->capacity = permits;
    sp->serve();
  }
  int force_release_all(handle&, std::optional<std::chrono::milliseconds>) override {
    const semaphore_ptr sp = current();
    std::lock_guard g(sp->mu);
    const int displaced = static_cast<int>(sp->leases.size());
    for (const auto& [id, l] : sp->leases) {
      sp->ended[id] = "it was force-released";
      sp->stats.reclaimed_seats += static_cast<std::uint64_t>(l.n);
    }
    sp->stats.force_released += static_cast<std::uint64_t>(displaced);
    sp->sample(now_ns());
    sp->leases.clear();
    sp->used = 0;
    sp->serve();
    return displaced;
  }
  bool wait_idle(handle&, std::chrono::milliseconds timeout) override {
    const semaphore_ptr sp = current();
    std::unique_lock lk(sp->mu);
    const auto until = std::chrono::steady_clock::now() + std::max(timeout, {});
    for (;;) {
      sp->expire(now_ns());
      if (sp->used == 0) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      sp->cv.wait_until(
          lk, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(5)));
    }
  }
  void shutdown(handle& h) override {
    const semaphore_ptr sp = current();
    std::lock_guard g(sp->mu);
    for (auto& [id, l] : sp->leases)
      if (l.handle_id == h.id) l.renew = false;
    sp->cv.notify_all();
  }

 private:
  // [mu] An attempt that ended as `o`, with the figures now.
  static attempt ended(const semaphore& s, Outcome o) {
    attempt t;
    t.outcome = o;
    t.capacity = s.capacity;
    t.used = s.used;
    return t;
  }
  // [mu] A refusal for `r`, counted.
  static attempt refused(semaphore& s, Reason r, bool waited, std::uint32_t wakeups) {
    switch (r) {
      case Reason::timeout:
        ++s.stats.timeouts;
        break;
      case Reason::cancelled:
        ++s.stats.cancelled;
        break;
      case Reason::shutdown:
        ++s.stats.shutdowns;
        break;
      case Reason::exceeds_capacity:
        if (!waited) ++s.stats.rejected;
        break;
      case Reason::error:
        ++s.stats.errors;
        break;
    }
    attempt t = ended(s, info_of(r)->outcome);
    t.waited = waited;
    t.wakeups = wakeups;
    return t;
  }
  // [mu] The attempt that holds lease `id`.
  static attempt granted(const handle& h, const semaphore_ptr& sp, const acquisition& q,
                         std::uint64_t id, std::int64_t started) {
    semaphore& s = *sp;
    lease_record& r = s.leases.at(id);
    fake::record(s.stats.wait, now_ns() - started);
    // A lease granted from the queue takes its caller's terms now.
    r.ttl_ms = q.ttl_ms;
    r.expires_ns = q.ttl_ms > 0 ? now_ns() + q.ttl_ms * 1'000'000 : 0;
    r.renew = q.renew;
    r.handle_id = h.id;
    auto l = std::make_unique<lease>();
    l->sem = sp;
    l->id = id;
    l->observer = h.opts.observer;
    attempt t = ended(s, Outcome::acquired);
    t.permit = lease_access::make(l.release(), id, q.n, q.ttl_ms, r.granted_ns);
    return t;
  }

  // The semaphore of the key now, as a Redis handle finds it on the server.
  // One removed and not made again is made again for an acquisition
  // (`make`), with the capacity last seen (or open()'s); a read sees the
  // one removed, which holds nothing.
  semaphore_ptr current(bool make = false) {
    std::lock_guard g(registry_mu);
    auto it = registry.find(key_);
    if (it != registry.end()) return s_ = it->second;
    if (!make) return s_;
    auto s = std::make_shared<semaphore>();
    s->key = key_;
    {
      std::lock_guard sg(s_->mu);
      s->capacity = permits_ > 0 ? permits_ : s_->capacity;
    }
    registry.emplace(key_, s);
    return s_ = s;
  }

  const std::string key_;
  const int permits_;  // open()'s, 0 for attach()
  semaphore_ptr s_;    // the last one current() found, under registry_mu
};

bool claims(std::string_view key) noexcept {
  try {
    return url_scheme(key) == "fake";
  } catch (...) {
    return false;
  }
}

void check(std::string_view key) {
  if (name_of(key).empty())
    throw std::invalid_argument("shmsem: '" + std::string(key) +
                                "' names no semaphore (fake://NAME)");
}

std::unique_ptr<backend> open(std::string_view key, int permits, const Options&) {
  check(key);
  std::lock_guard g(registry_mu);
  if (blocked.contains(key))
    throw SegmentError(
        make_error_code(errc::bad_segment),
        "shmsem: cannot open '" + std::string(key) + "': it is blocked (fake::block)");
  auto it = registry.find(key);
  if (it == registry.end()) {
    if (permits == 0)
      throw SegmentError(make_error_code(errc::not_found),
                         "shmsem: no semaphore '" + std::string(key) + "'");
    auto s = std::make_shared<semaphore>();
    s->key = std::string(key);
    s->capacity = permits;
    it = registry.emplace(std::string(key), std::move(s)).first;
  }
  return std::make_unique<fake_backend>(it->second, permits);
}

bool remove(std::string_view key, bool only_unused) {
  std::lock_guard g(registry_mu);
  auto it = registry.find(key);
  if (it == registry.end()) return false;
  if (only_unused) {
    std::lock_guard sg(it->second->mu);
    if (it->second->used > 0 || !it->second->queue.empty()) return false;
  }
  const semaphore_ptr gone = std::move(it->second);  // alive till its leases are ended
  semaphore& s = *gone;
  registry.erase(it);
  // As a semaphore deleted from a server: its leases are lost, and its
  // waiters' waits end.
  std::lock_guard sg(s.mu);
  for (const auto& [id, l] : s.leases) s.ended[id] = "its semaphore was removed";
  s.sample(now_ns());
  s.leases.clear();
  s.used = 0;
  s.removed = true;
  s.cv.notify_all();
  return true;
}

std::vector<std::string> list(std::string_view) {
  std::lock_guard g(registry_mu);
  std::vector<std::string> keys;
  for (const auto& [k, s] : registry) keys.push_back(k);
  return keys;
}

}  // namespace

const backend_kind kind{.name = "fake",
                        .schemes = "fake://",
                        .capabilities = {.reads_without_io = true,
                                         .barging = false,
                                         .fencing = true,
                                         .process_liveness = false,
                                         .segment_file = false},
                        .claims = &claims,
                        .check = &check,
                        .open = &open,
                        .remove = &remove,
                        .list = &list,
                        .names_server = nullptr,
                        .shutdown_all = nullptr};

void block(std::string_view key, bool blocked_now) {
  std::lock_guard g(registry_mu);
  if (blocked_now)
    blocked.emplace(key);
  else if (auto it = blocked.find(key); it != blocked.end())
    blocked.erase(it);
}

}  // namespace shmsem::detail::fake
