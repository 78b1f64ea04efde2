// semaphore.cpp: what the public Semaphore calls check and return: argument
// checks, options, the choice of the fast or the locked path, observer events
// and errors. The work itself is done by the segment's files (segment.hpp
// says which file does what).

#include <shmsem/semaphore.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "base/backend.hpp"
#include "base/forking.hpp"
#include "base/handle.hpp"
#include "base/key_syntax.hpp"
#include "base/log.hpp"
#include "base/reasons.hpp"
#include "shm/fastpath.hpp"
#include "shm/key.hpp"
#include "shm/leases.hpp"
#include "shm/queue.hpp"
#include "shm/renewer.hpp"
#include "shm/trust.hpp"
#include "sys/futex.hpp"
#include "sys/shm.hpp"

namespace shmsem {

namespace detail {

std::atomic<bool> process_shut_down{false};

namespace {
std::mutex handles_mutex;  // before each handle's waits_mu (forking.hpp)
std::vector<handle*> all_handles;
std::atomic<std::uint64_t> next_handle_id{1};

void register_handle(handle* h) {
  handle_fork_once();
  std::lock_guard g(handles_mutex);
  all_handles.push_back(h);
}

// How long try_acquire() waits for the segment lock (held for microseconds,
// unless its holder is stopped or starved of CPU).
constexpr std::int64_t kTryLockNs = 10'000'000;
void check_weight(int n, const char* what) {
  if (n < 1)
    throw std::invalid_argument(std::string("shmsem: ") + what + " needs n >= 1, got " +
                                std::to_string(n));
}

void check_duration(std::chrono::milliseconds d, const char* what, bool allow_negative) {
  if ((!allow_negative && d.count() < 0) || d > kMaxDuration)
    throw std::invalid_argument(std::string("shmsem: ") + what + " of " +
                                std::to_string(d.count()) + " ms is out of range (0.." +
                                std::to_string(kMaxDuration.count()) + " ms)");
}

// The event the observer is told of, for every way an acquisition ends.
AcquireEvent acquire_event(const attachment& a, int n, Outcome outcome, std::uint64_t id = 0,
                           std::uint32_t wakeups = 0, std::int64_t waited_ns = 0,
                           bool waited = false) {
  return AcquireEvent{
      a.key,   a.capacity(), n, a.used(), id, wakeups, std::chrono::nanoseconds(waited_ns),
      outcome, waited};
}

template <class F>
void notify(const std::shared_ptr<Observer>& o, F&& f) {
  try {
    f(*o);
  } catch (const std::exception& e) {
    log().error("observer threw: {}", e.what());
  } catch (...) {
    log().error("observer threw");
  }
}

}  // namespace

void lock_handles_for_fork() noexcept {
  handles_mutex.lock();
  // A handle on the list is alive: ~Semaphore takes it off first.
  for (handle* h : all_handles) h->waits_mu.lock();
}

void unlock_handles_after_fork() noexcept {
  for (handle* h : all_handles) h->waits_mu.unlock();
  handles_mutex.unlock();
}

void handle::nudge_waiters() {
  std::lock_guard g(waits_mu);
  for (std::uint32_t w : waits) {
    att->waiters[w].seq.fetch_add(1, std::memory_order_release);
    sys::futex_wake(&att->waiters[w].seq, 1);
  }
}

void release_after_work(Permit& p) noexcept {
  try {
    p.release();
  } catch (const PermitNotHeldError& e) {
    log().warn("{} (the work had already run)", e.what());
  } catch (const std::exception& e) {
    log().error("shmsem: release after work failed: {}", e.what());
  }
}

}  // namespace detail

using detail::attachment;
using detail::handle;
using detail::segment_lock;

namespace {

struct acquisition {
  int n;
  std::int64_t ttl_ms;  // 0: none
  bool renew;
};

acquisition resolve(const handle& h, int n, const AcquireOptions& o) {
  acquisition a{n, 0, false};
  if (!o.ttl && !h.opts.ttl) [[likely]]
    return a;  // no TTL, so nothing to renew
  if (o.ttl) {
    detail::check_duration(*o.ttl, "TTL", false);
    a.ttl_ms = o.ttl->count();
  } else if (h.opts.ttl) {
    a.ttl_ms = h.opts.ttl->count();
  }
  a.renew = a.ttl_ms > 0 && o.auto_renew.value_or(h.opts.auto_renew);
  return a;
}

AcquisitionError acquisition_error(const attachment& a, Reason r, int n, const std::string& extra) {
  std::string msg = "shmsem: cannot acquire " + std::to_string(n) + " seat" + (n == 1 ? "" : "s") +
                    " of '" + a.key + "': ";
  if (const auto* row = detail::info_of(r)) msg += row->what;
  if (r == Reason::exceeds_capacity) msg += " " + std::to_string(a.capacity());
  return AcquisitionError(r, msg + extra);
}

}  // namespace

Semaphore::Semaphore(std::unique_ptr<detail::handle> h) noexcept : h_(std::move(h)) {}
Semaphore::Semaphore(Semaphore&&) noexcept = default;
Semaphore& Semaphore::operator=(Semaphore&& o) noexcept {
  if (this != &o) {
    Semaphore dying(std::move(*this));
    h_ = std::move(o.h_);
  }
  return *this;
}

Semaphore::~Semaphore() {
  if (!h_) return;
  {
    std::lock_guard g(detail::handles_mutex);
    auto& v = detail::all_handles;
    v.erase(std::remove(v.begin(), v.end(), h_.get()), v.end());
  }
  if (h_->remote) return;
  attachment::release_handle(h_->att);
}

static void check_options(const Options& options) {
  if (options.ttl) detail::check_duration(*options.ttl, "default TTL", false);
  if (options.open_timeout.count() < 0)
    throw std::invalid_argument("shmsem: negative open_timeout");
  detail::validate_trusted_owners(options.trusted_owners);
  if (options.fairness && *options.fairness != Fairness::fifo &&
      *options.fairness != Fairness::barging)
    throw std::invalid_argument("shmsem: unknown Options::fairness " +
                                std::to_string(static_cast<int>(*options.fairness)));
}

Semaphore Semaphore::open(std::string_view key, int permits, const Options& options) {
  const detail::backend_kind* const kind = detail::backend_of(key);
  if (!kind) detail::validate_key(key);
  if (permits < 1 || permits > kMaxCapacity)
    throw std::invalid_argument("shmsem: open('" + std::string(key) +
                                "') needs permits from 1 to " + std::to_string(kMaxCapacity) +
                                ", got " + std::to_string(permits));
  check_options(options);
  if (kind && !kind->capabilities.barging && options.fairness == Fairness::barging)
    throw std::invalid_argument("shmsem: open('" + detail::shown_url(key) + "'): " + kind->name +
                                " keys are always FIFO (Fairness::barging is for shared memory)");
  auto h = std::make_unique<handle>();
  h->opts = options;
  if (kind)
    h->remote = kind->open(key, permits, options);
  else
    h->att = attachment::acquire_handle(key, permits, options.mode, options.open_timeout,
                                        options.trusted_owners, options.fencing, options.fairness);
  h->id = detail::next_handle_id++;
  detail::register_handle(h.get());
  return Semaphore(std::move(h));
}

Semaphore Semaphore::attach(std::string_view key, const Options& options) {
  const detail::backend_kind* const kind = detail::backend_of(key);
  if (!kind) detail::validate_key(key);
  check_options(options);
  auto h = std::make_unique<handle>();
  h->opts = options;
  if (kind)
    h->remote = kind->open(key, 0, options);
  else
    h->att = attachment::acquire_handle(key, 0, options.mode, options.open_timeout,
                                        options.trusted_owners);
  h->id = detail::next_handle_id++;
  detail::register_handle(h.get());
  return Semaphore(std::move(h));
}

bool Semaphore::remove(std::string_view key) {
  if (const auto* kind = detail::backend_of(key)) return kind->remove(key, false);
  return attachment::remove(key);
}

bool Semaphore::remove_if_unused(std::string_view key) {
  if (const auto* kind = detail::backend_of(key)) return kind->remove(key, true);
  return attachment::remove_if_unused(key);
}

std::vector<std::string> Semaphore::list(std::string_view server) {
  const auto* kind = detail::backend_of(server);
  if (!kind)
    throw std::invalid_argument("shmsem: list(): '" + std::string(server) +
                                "' is not the URL of a server (redis:// or redis+unix://)");
  return kind->list(server);
}

std::vector<std::string> Semaphore::list() {
  std::vector<std::string> keys;
  for (const std::string& name : sys::shm_list(std::string(detail::kNamePrefix))) {
    if (auto k = detail::name_to_key(name)) {
      keys.push_back(std::move(*k));
      continue;
    }
    if (!detail::is_hashed_name(name)) continue;
    // A hashed name: the key is only in the segment. The buffer is on the
    // stack: as thread_local it would take 4 KB of the library's TLS block,
    // which must stay small (see entry_mru in fastpath.hpp).
    alignas(64) char buf[detail::layout::kHeaderRegion];
    std::size_t got = 0;
    std::uint64_t size = 0;
    if (sys::shm_read_prefix(name, buf, sizeof buf, got, size) != 0) continue;
    // validate() reads only the header; the size it checks is the file's.
    if (got < sizeof buf || detail::layout::validate(buf, size) != detail::layout::problem::none)
      continue;
    const auto* h = detail::layout::header(buf);
    std::string k(h->key, h->key_size);
    if (detail::key_to_name(k) == name) keys.push_back(std::move(k));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::string Semaphore::segment_path(std::string_view key) {
  if (const auto* kind = detail::backend_of(key))
    throw std::invalid_argument("shmsem: '" + detail::shown_url(key) + "' is a " + kind->name +
                                " key: it has no segment file");
  detail::validate_key(key);
  return sys::shm_path(detail::key_to_name(key));
}

std::string_view Semaphore::key() const noexcept {
  if (h_->remote) return h_->remote->key();
  return h_->att->key;
}

// ---------------------------------------------------------------------------
// Acquisition

namespace detail {
struct permit_access {
  static Permit make(handle& h, std::uint32_t slot, std::uint64_t gen, std::uint64_t id, int n,
                     std::int64_t ttl_ms, bool renew, std::int64_t granted_ns, bool fast);
  /// The permit of a lock-free grant (the observer told of it).
  static Permit fast(handle& h, int n, std::int64_t ttl_ms, bool renew, const fast_grant& g) {
    if (!h.opts.observer && !renew) [[likely]]
      return Permit(h.att, g.slot, n, g.id, g.gen, true, ttl_ms, g.now_ns);
    return observed_fast(h, n, ttl_ms, renew, g);
  }
  /// fast() for try_acquire(): the permit is made in the optional.
  static std::optional<Permit> fast_optional(handle& h, int n, std::int64_t ttl_ms, bool renew,
                                             const fast_grant& g) {
    std::optional<Permit> p(std::in_place);  // one return: the optional is the caller's
    if (!h.opts.observer && !renew) [[likely]]
      p->hold(h.att, g.slot, n, g.id, g.gen, true, ttl_ms, g.now_ns);
    else
      *p = observed_fast(h, n, ttl_ms, renew, g);
    return p;
  }
  static Permit observed_fast(handle& h, int n, std::int64_t ttl_ms, bool renew,
                              const fast_grant& g);
};
}  // namespace detail

namespace {
// A lease granted under the lock. Its release goes without the lock where
// the releasing thread can (fast_release() checks, and falls back to the
// lock): a release must not wait behind a herd of processes queued on the
// lock to join the queue.
Permit make_permit(handle& h, std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                   const acquisition& q, std::int64_t granted_ns) {
  return detail::permit_access::make(h, slot, gen, id, q.n, q.ttl_ms, q.renew, granted_ns, true);
}

bool shut_down(const handle& h) {
  return h.shut.load(std::memory_order_relaxed) ||
         detail::process_shut_down.load(std::memory_order_relaxed);
}

// [locked] Takes n seats now if they fit without passing anyone in the
// queue, after reclaiming dead holders' and expired seats if that helps.
bool admits_now(attachment& a, int n, std::int64_t now, detail::wake_list& wakes) {
  if (a.admit(n, false)) return true;
  // Behind a queue nothing reaped would be ours; the head waiter watches,
  // unless it is dead (or gave up) with nobody behind it to notice.
  const bool queued = (a.gate() & detail::layout::kGateQueued) != 0;
  if (queued && !a.head_gone()) return false;
  a.reap(now, wakes);
  if (queued) a.grant_queued(now, wakes);
  return a.admit(n, false);
}

// [locked] Grants the seats to this process at once, unlocks, and tells the
// observer.
Permit grant_now(handle& h, segment_lock& lk, std::uint32_t self, const acquisition& q,
                 std::int64_t now) {
  attachment& a = *h.att;
  std::uint64_t id, gen;
  const std::uint32_t slot = a.grant(self, q.n, q.ttl_ms, now, id, gen);
  detail::record_histogram(a.hdr->stats.wait, 0);
  detail::pin(a, +1);
  lk.unlock();
  Permit p = make_permit(h, slot, gen, id, q, now);
  if (h.opts.observer) {
    const AcquireEvent e = detail::acquire_event(a, q.n, Outcome::acquired, id);
    detail::notify(h.opts.observer, [&](Observer& o) { o.on_acquire(e); });
  }
  return p;
}
}  // namespace

namespace {
Permit acquire_locked(handle& h, const AcquireOptions& opts, const acquisition& q,
                      detail::thread_entry* entry);
std::optional<Permit> try_acquire_locked(handle& h, const acquisition& q,
                                         detail::thread_entry* entry);
}  // namespace

// True for a weight that is below 1 or above any capacity: the cold
// branch of acquire() and try_acquire(), one comparison on the hot path.
// Such a weight never reaches the gate, whose fields it could overflow.
static bool odd_weight(int n) {
  return static_cast<unsigned>(n) - 1u >= static_cast<unsigned>(kMaxCapacity);
}

Permit Semaphore::acquire(int n, const AcquireOptions& opts) {
  if (odd_weight(n)) [[unlikely]] {
    detail::check_weight(n, "acquire()");
    // More than any capacity: the locked path refuses it.
    return acquire_locked(*h_, opts, resolve(*h_, n, opts), nullptr);
  }
  handle& h = *h_;
  const acquisition q = resolve(h, n, opts);
  if (opts.wait_timeout) detail::check_duration(*opts.wait_timeout, "wait_timeout", true);
  if (h.remote) [[unlikely]]
    return h.remote->acquire(h, q.n, q.ttl_ms, q.renew, opts);
  attachment& a = *h.att;
  detail::thread_entry* entry = detail::local_entry(a);
  detail::fast_grant fg;
  if (entry && !shut_down(h) && detail::fast_acquire(a, *entry, n, q.ttl_ms, fg))
    return detail::permit_access::fast(h, q.n, q.ttl_ms, q.renew, fg);
  return acquire_locked(h, opts, q, entry);
}

namespace {
// acquire() when the fast path said no: the locked path, which may queue.
// Kept out of line so that the fast path stays a short function.
[[gnu::noinline]] Permit acquire_locked(handle& h, const AcquireOptions& opts, const acquisition& q,
                                        detail::thread_entry* entry) {
  // A weight above any capacity comes here first, Redis handles included.
  if (h.remote) return h.remote->acquire(h, q.n, q.ttl_ms, q.renew, opts);
  attachment& a = *h.att;
  const int n = q.n;
  const bool shut = shut_down(h);
  std::int64_t deadline = sys::kNever;
  std::int64_t started = 0;
  if (opts.wait_timeout) {
    started = sys::precise_now_ns();
    // Negative means no wait, however large: clamped before the conversion
    // to nanoseconds, which would overflow.
    const auto budget = std::max(*opts.wait_timeout, std::chrono::milliseconds::zero());
    deadline = started + std::chrono::nanoseconds(budget).count();
  }
  auto fail = [&](Reason r, std::uint32_t wakeups, std::int64_t waited_ns,
                  bool waited) -> AcquisitionError {
    const detail::reason_info& why = *detail::info_of(r);
    if (const auto counter = detail::reason_counter(r))
      (a.hdr->stats.*counter).fetch_add(1, std::memory_order_relaxed);
    if (h.opts.observer) {
      const AcquireEvent e =
          detail::acquire_event(a, n, why.outcome, 0, wakeups, waited_ns, waited);
      detail::notify(h.opts.observer, [&](Observer& o) {
        if (waited) o.on_wait_end(e);
        o.on_acquire(e);
      });
    }
    return acquisition_error(a, r, n, "");
  };
  if (shut) throw fail(Reason::shutdown, 0, 0, false);

  // This thread's entry, filled under the lock below, makes its next
  // acquire lock-free.
  if (!entry) entry = detail::prepare_entry(a);
  if (a.self.load(std::memory_order_relaxed) == detail::kNoSelf)
    attachment::await_early_lifeline(a.claim_holder_early(deadline), deadline);
  std::uint32_t w;
  {
    segment_lock lk(a, deadline);
    if (!lk.owns()) throw fail(Reason::timeout, 0, 0, false);
    const bool first = a.self.load(std::memory_order_relaxed) == detail::kNoSelf;
    if (entry) detail::fill_entry(a, *entry, lk.wakes);
    const std::uint32_t self = a.ensure_self(lk.wakes);
    if (n > a.capacity()) {
      lk.unlock();
      throw fail(Reason::exceeds_capacity, 0, 0, false);
    }
    const std::int64_t now = detail::lease_clock();
    // Full: reclaim dead holders and expired leases before queueing.
    if (admits_now(a, n, now, lk.wakes)) {
      Permit p = grant_now(h, lk, self, q, now);
      if (first) {
        // Our first seat: hold it with our death ringing. try_acquire
        // never waits; a queued acquire's lifeline is usually armed by
        // the time it is served.
        lk.unlock();
        a.await_lifeline(deadline);
      }
      return p;
    }
    if (deadline != sys::kNever && sys::precise_now_ns() >= deadline) {
      lk.unlock();
      throw fail(Reason::timeout, 0, 0, false);
    }
    w = a.enqueue(self, n, q.ttl_ms);
    // Seats a lock-free release gave back after admits_now() looked, before
    // the queue flag stopped the fast path: serve the queue now.
    a.grant_queued(now, lk.wakes, w + 1);
  }

  // --- blocked: sleep on our waiter slot until granted or told to stop ---
  if (!started) started = sys::precise_now_ns();
  {
    std::lock_guard g(h.waits_mu);
    h.waits.push_back(w);
  }
  if (h.opts.observer)
    detail::notify(h.opts.observer, [&](Observer& o) { o.on_wait_start(a.key, n); });
  auto& slot = a.waiters[w];
  std::stop_callback on_stop(opts.stop, [&slot] {
    slot.seq.fetch_add(1, std::memory_order_release);
    sys::futex_wake(&slot.seq, 1);
  });
  const detail::queue_wait got = detail::wait_in_queue(a, w, n, deadline, opts.stop, h.shut);
  {
    std::lock_guard g(h.waits_mu);
    h.waits.erase(std::find(h.waits.begin(), h.waits.end(), w));
  }
  const std::int64_t waited = sys::precise_now_ns() - started;
  if (!got.granted) throw fail(got.reason, got.wakeups, waited, true);
  Permit p = make_permit(h, got.lease, got.gen, got.id, q, got.granted_ns);
  if (h.opts.observer) {
    const AcquireEvent e =
        detail::acquire_event(a, n, Outcome::acquired, got.id, got.wakeups, waited, true);
    detail::notify(h.opts.observer, [&](Observer& o) {
      o.on_wait_end(e);
      o.on_acquire(e);
    });
  }
  return p;
}

}  // namespace

std::optional<Permit> Semaphore::try_acquire(int n, const AcquireOptions& opts) {
  if (odd_weight(n)) [[unlikely]] {
    detail::check_weight(n, "try_acquire()");
    return try_acquire_locked(*h_, resolve(*h_, n, opts), nullptr);
  }
  handle& h = *h_;
  const acquisition q = resolve(h, n, opts);
  if (h.remote) [[unlikely]]
    return h.remote->try_acquire(h, q.n, q.ttl_ms, q.renew);
  attachment& a = *h.att;
  detail::thread_entry* entry = detail::local_entry(a);
  detail::fast_grant fg;
  if (entry && !shut_down(h) && detail::fast_acquire(a, *entry, n, q.ttl_ms, fg))
    return detail::permit_access::fast_optional(h, q.n, q.ttl_ms, q.renew, fg);
  return try_acquire_locked(h, q, entry);
}

namespace {
[[gnu::noinline]] std::optional<Permit> try_acquire_locked(handle& h, const acquisition& q,
                                                           detail::thread_entry* entry) {
  if (h.remote) return h.remote->try_acquire(h, q.n, q.ttl_ms, q.renew);
  attachment& a = *h.att;
  const int n = q.n;
  auto failed = [&](Outcome outcome) -> std::optional<Permit> {
    a.hdr->stats.try_failures.fetch_add(1, std::memory_order_relaxed);
    if (h.opts.observer) {
      const AcquireEvent e = detail::acquire_event(a, n, outcome);
      detail::notify(h.opts.observer, [&](Observer& o) { o.on_acquire(e); });
    }
    return std::nullopt;
  };
  if (shut_down(h)) return failed(Outcome::shutdown);
  if (!entry) entry = detail::prepare_entry(a);
  // A try does not wait: not for seats, and not long for the lock. A lock
  // held longer than this is held by a stopped (or very slow) process;
  // the semaphore is as good as full.
  const std::int64_t lock_deadline = sys::precise_now_ns() + detail::kTryLockNs;
  if (a.self.load(std::memory_order_relaxed) == detail::kNoSelf)
    (void)a.claim_holder_early(lock_deadline);
  segment_lock lk(a, lock_deadline);
  if (!lk.owns()) {
    if (!a.told_lock_busy.exchange(true, std::memory_order_relaxed))
      detail::log().warn(
          "semaphore '{}': try_acquire() found the segment lock held for over {} ms (is a "
          "process stopped while holding it?) and reported no seat; said once per process",
          a.key, detail::kTryLockNs / 1'000'000);
    return failed(Outcome::unavailable);
  }
  if (entry) detail::fill_entry(a, *entry, lk.wakes);
  const std::uint32_t self = a.ensure_self(lk.wakes);
  const std::int64_t now = detail::lease_clock();
  if (n > a.capacity()) {
    lk.unlock();
    return failed(Outcome::exceeds_capacity);
  }
  if (!admits_now(a, n, now, lk.wakes)) {
    lk.unlock();
    return failed(Outcome::unavailable);
  }
  return grant_now(h, lk, self, q, now);
}
}  // namespace

namespace detail {
Permit permit_access::observed_fast(handle& h, int n, std::int64_t ttl_ms, bool renew,
                                    const fast_grant& g) {
  Permit p = make(h, g.slot, g.gen, g.id, n, ttl_ms, renew, g.now_ns, true);
  if (h.opts.observer) {
    attachment& a = *h.att;
    const AcquireEvent e = detail::acquire_event(a, n, Outcome::acquired, g.id);
    detail::notify(h.opts.observer, [&](Observer& o) { o.on_acquire(e); });
  }
  return p;
}

Permit permit_access::make(handle& h, std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                           int n, std::int64_t ttl_ms, bool renew, std::int64_t granted_ns,
                           bool fast) {
  Permit p(h.att, slot, n, id, gen, fast, ttl_ms, granted_ns);
  if (h.att->hdr->fencing) p.fence_ = id;  // the id is the token (attachment::grant)
  if (h.opts.observer) [[unlikely]]
    p.observer_ = h.opts.observer;
  if (renew) [[unlikely]] {
    auto r = std::make_shared<detail::renewal>();
    r->att = h.att;
    r->slot = slot;
    r->gen = gen;
    r->id = id;
    r->ttl_ms = ttl_ms;
    r->handle_id = h.id;
    p.renewal_ = r;
    // A handle shut down meanwhile does not start new renewals.
    if (!h.shut.load() && !detail::process_shut_down.load())
      detail::renew_in_background(r);
    else
      r->stop();
  }
  return p;
}
}  // namespace detail

// ---------------------------------------------------------------------------
// Introspection

int Semaphore::capacity() const noexcept {
  if (h_->remote) return h_->remote->read_figures(*h_).capacity;
  return h_->att->capacity();
}
int Semaphore::used() const noexcept {
  if (h_->remote) return h_->remote->read_figures(*h_).used;
  return h_->att->used();
}
int Semaphore::available() const noexcept {
  if (h_->remote) {
    const auto f = h_->remote->read_figures(*h_);
    return std::max(0, f.capacity - f.used);
  }
  const std::uint64_t g = h_->att->gate();
  return std::max(0, detail::layout::gate_capacity(g) - detail::layout::gate_used(g));
}
int Semaphore::waiters() const noexcept {
  if (h_->remote) return h_->remote->read_figures(*h_).waiters;
  return h_->att->hdr->waiters.load(std::memory_order_relaxed);
}
bool Semaphore::empty() const noexcept {
  return used() == 0;
}
Fairness Semaphore::fairness() const noexcept {
  return h_->remote ? Fairness::fifo : h_->att->fairness();
}
namespace {
constexpr Capabilities shared_memory_capabilities(bool fencing) {
  return {.reads_without_io = true,
          .barging = true,
          .fencing = fencing,
          .process_liveness = true,
          .segment_file = true};
}
}  // namespace
Capabilities Semaphore::capabilities() const noexcept {
  if (h_->remote) return h_->remote->capabilities();
  return shared_memory_capabilities(h_->att->hdr->fencing != 0);
}
Capabilities Semaphore::capabilities_of(std::string_view key) {
  if (const auto* kind = detail::backend_of(key)) return kind->capabilities;
  detail::validate_key(key);
  return shared_memory_capabilities(true);
}
bool Semaphore::full() const noexcept {
  return used() >= capacity();
}
double Semaphore::utilization() const noexcept {
  if (h_->remote) {
    const auto f = h_->remote->read_figures(*h_);
    return static_cast<double>(f.used) / std::max(1, f.capacity);
  }
  const std::uint64_t g = h_->att->gate();
  return static_cast<double>(detail::layout::gate_used(g)) /
         std::max(1, detail::layout::gate_capacity(g));
}
double Semaphore::utilization_smoothed() const noexcept {
  if (h_->remote) return h_->remote->read_figures(*h_).smoothed;
  return h_->att->ewma_sample(detail::lease_clock());
}

Stats Semaphore::stats() const {
  if (h_->remote) return h_->remote->stats(*h_);
  return detail::read_stats(*h_->att);
}

std::vector<Holder> Semaphore::holders() const {
  if (h_->remote) return h_->remote->holders(*h_);
  return detail::list_holders(*h_->att);
}

Snapshot Semaphore::snapshot() const {
  if (h_->remote) return h_->remote->snapshot(*h_);
  Snapshot s;
  s.key = std::string(key());
  s.capacity = capacity();
  s.used = used();
  s.waiters = waiters();
  s.utilization = utilization();
  s.utilization_smoothed = utilization_smoothed();
  s.stats = stats();
  s.holders = holders();
  s.created = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(h_->att->hdr->created_realtime_ns)));
  detail::describe_segment(*h_->att, h_->opts.trusted_owners, s);
  s.death_wakeup = detail::describe_death_wakeup(*h_->att);
  s.fairness = fairness();
  return s;
}

// ---------------------------------------------------------------------------
// Administration

namespace {
// The deadline of an administrative call's wait for the segment lock.
std::int64_t lock_deadline(std::optional<std::chrono::milliseconds> timeout) {
  if (!timeout) return sys::kNever;
  return sys::precise_now_ns() + std::chrono::nanoseconds(std::max(*timeout, {})).count();
}

// The segment lock for an administrative call, or SegmentError
// (errc::lock_timeout) naming the key once `timeout` has passed.
void require_lock(const attachment& a, const segment_lock& lk, const char* call,
                  std::optional<std::chrono::milliseconds> timeout) {
  if (lk.owns()) return;
  a.fail(errc::lock_timeout, std::string(call) + " waited " + std::to_string(timeout->count()) +
                                 " ms for the segment lock, which another process holds (is it "
                                 "stopped?)");
}
}  // namespace

int Semaphore::reap(std::optional<std::chrono::milliseconds> lock_timeout) {
  if (h_->remote) return h_->remote->reap(*h_);
  attachment& a = *h_->att;
  int freed;
  {
    segment_lock lk(a, lock_deadline(lock_timeout));
    require_lock(a, lk, "reap()", lock_timeout);
    freed = a.reap(detail::lease_clock(), lk.wakes, true);
  }
  if (freed > 0 && h_->opts.observer)
    detail::notify(h_->opts.observer, [&](Observer& o) { o.on_reaped(a.key, freed); });
  return freed;
}

void Semaphore::set_capacity(int permits, std::optional<std::chrono::milliseconds> lock_timeout) {
  if (permits < 1 || permits > kMaxCapacity)
    throw std::invalid_argument("shmsem: set_capacity() needs 1.." + std::to_string(kMaxCapacity) +
                                ", got " + std::to_string(permits));
  if (h_->remote) return h_->remote->set_capacity(*h_, permits);
  attachment& a = *h_->att;
  segment_lock lk(a, lock_deadline(lock_timeout));
  require_lock(a, lk, "set_capacity()", lock_timeout);
  a.ensure_lease_slots(static_cast<std::uint32_t>(permits), a.claimed_thread_records());
  const std::int64_t now = detail::lease_clock();
  a.ewma_sample(now);
  a.set_gate_capacity(permits);
  a.reject_oversized(lk.wakes);
  a.grant_queued(now, lk.wakes);
}

int Semaphore::force_release_all(std::optional<std::chrono::milliseconds> lock_timeout) {
  if (h_->remote) return h_->remote->force_release_all(*h_);
  attachment& a = *h_->att;
  segment_lock lk(a, lock_deadline(lock_timeout));
  require_lock(a, lk, "force_release_all()", lock_timeout);
  const int displaced = detail::force_release_all(a, detail::lease_clock(), lk.wakes);
  if (displaced > 0)
    detail::log().warn("semaphore '{}': force_release_all displaced {} live lease{}", a.key,
                       displaced, displaced == 1 ? "" : "s");
  return displaced;
}

bool Semaphore::wait_idle(std::chrono::milliseconds timeout) {
  if (h_->remote) return h_->remote->wait_idle(*h_, timeout);
  attachment& a = *h_->att;
  auto* hdr = a.hdr;
  const std::int64_t deadline =
      sys::precise_now_ns() + std::chrono::nanoseconds(std::max(timeout, {})).count();
  hdr->idle_waiters.fetch_add(1);
  bool idle = false;
  for (;;) {
    const std::uint32_t seq = hdr->idle_seq.load(std::memory_order_acquire);
    if (a.used() == 0) {
      idle = true;
      break;
    }
    if (a.watch(detail::lease_clock())) {
      segment_lock lk(a, deadline);
      if (lk.owns()) a.reap(detail::lease_clock(), lk.wakes);
      continue;
    }
    const std::int64_t now = sys::precise_now_ns();
    if (now >= deadline) break;
    sys::futex_wait(&hdr->idle_seq, seq, std::min(deadline, now + detail::kHeadTickNs));
    detail::watch_name(a);
  }
  hdr->idle_waiters.fetch_sub(1);
  return idle;
}

void Semaphore::shutdown() {
  h_->shut.store(true);
  detail::stop_renewals_of(h_->id);
  if (h_->remote)
    h_->remote->shutdown(*h_);
  else
    h_->nudge_waiters();
}

void shutdown_all() {
  detail::process_shut_down.store(true);
  detail::stop_all_renewals();
  std::lock_guard g(detail::handles_mutex);
  for (auto* h : detail::all_handles) {
    h->shut.store(true);
    if (h->remote)
      h->remote->shutdown(*h);
    else
      h->nudge_waiters();
  }
}

}  // namespace shmsem
