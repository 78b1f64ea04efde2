// semaphore.cpp: what the public Semaphore calls check and return, for
// every backend: argument checks, options, observer events and errors. The
// work is the handle's backend's (base/backend.hpp); shared memory's
// lock-free fast path is inline here, the one place that asks which
// backend a handle has.

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
#include "base/observe.hpp"
#include "base/reasons.hpp"
#include "shm/backend.hpp"
#include "shm/fastpath.hpp"
#include "shm/key.hpp"
#include "shm/tokens.hpp"
#include "shm/trust.hpp"
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

using detail::acquisition;
using detail::attachment;
using detail::attempt;
using detail::handle;

namespace {

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

// The Reason behind a failed attempt's outcome (none for `unavailable`).
std::optional<Reason> reason_of(Outcome o) {
  for (const auto& row : detail::kReasons)
    if (row.outcome == o) return row.reason;
  return std::nullopt;
}

AcquisitionError acquisition_error(const handle& h, int n, attempt& t, Reason r) {
  std::string msg = "shmsem: cannot acquire " + std::to_string(n) + " seat" + (n == 1 ? "" : "s") +
                    " of '" + std::string(h.b->key()) + "': ";
  if (r == Reason::error && !t.detail.empty()) {
    msg += t.detail;
  } else {
    msg += detail::info_of(r)->what;
    if (r == Reason::exceeds_capacity) msg += " " + std::to_string(t.capacity);
    if (!t.detail.empty()) msg += ": " + t.detail;
  }
  return AcquisitionError(r, msg, std::move(t.cause));
}

// Tells the observer (there is one) how an acquisition ended.
void tell(const handle& h, const AcquireEvent& e) {
  detail::notify(h.opts.observer, [&](Observer& o) {
    if (e.waited) o.on_wait_end(e);
    o.on_acquire(e);
  });
}

// Tells the observer how an attempt of `n` seats ended.
void tell(const handle& h, int n, const attempt& t) {
  if (!h.opts.observer) [[likely]]
    return;
  tell(h, AcquireEvent{h.b->key(), t.capacity, n, t.used, t.permit ? t.permit->id() : 0, t.wakeups,
                       std::chrono::nanoseconds(t.waited_ns), t.outcome, t.waited});
}

// The end of acquire(): the permit, or the caller's AcquisitionError.
Permit acquired(const handle& h, int n, attempt&& t) {
  tell(h, n, t);
  if (t.permit) return std::move(*t.permit);
  throw acquisition_error(h, n, t, reason_of(t.outcome).value_or(Reason::error));
}

// The end of try_acquire(): the permit, none, or (for an error of the
// backend) an AcquisitionError.
std::optional<Permit> tried(const handle& h, int n, attempt&& t) {
  tell(h, n, t);
  if (t.outcome == Outcome::error) throw acquisition_error(h, n, t, Reason::error);
  return std::move(t.permit);
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

namespace {
// A registered handle of `key`, served by `kind`.
std::unique_ptr<handle> open_handle(const detail::backend_kind& kind, std::string_view key,
                                    int permits, const Options& options) {
  auto h = std::make_unique<handle>();
  h->opts = options;
  h->b = kind.open(key, permits, options);
  h->att = h->b->fast_path_segment();
  h->id = detail::next_handle_id++;
  detail::register_handle(h.get());
  return h;
}
}  // namespace

Semaphore Semaphore::open(std::string_view key, int permits, const Options& options) {
  const detail::backend_kind& kind = detail::backend_of(key);
  if (kind.check) kind.check(key);
  if (permits < 1 || permits > kMaxCapacity)
    throw std::invalid_argument("shmsem: open('" + std::string(key) +
                                "') needs permits from 1 to " + std::to_string(kMaxCapacity) +
                                ", got " + std::to_string(permits));
  check_options(options);
  if (!kind.capabilities.barging && options.fairness == Fairness::barging)
    throw std::invalid_argument("shmsem: open('" + detail::shown_url(key) + "'): " + kind.name +
                                " keys are always FIFO (Fairness::barging is for shared memory)");
  return Semaphore(open_handle(kind, key, permits, options));
}

Semaphore Semaphore::attach(std::string_view key, const Options& options) {
  const detail::backend_kind& kind = detail::backend_of(key);
  if (kind.check) kind.check(key);
  check_options(options);
  return Semaphore(open_handle(kind, key, 0, options));
}

bool Semaphore::remove(std::string_view key) {
  return detail::backend_of(key).remove(key, false);
}

bool Semaphore::remove_if_unused(std::string_view key) {
  return detail::backend_of(key).remove(key, true);
}

std::vector<std::string> Semaphore::remove_orphaned_token_files(bool dry_run) {
  return detail::token_files::sweep_orphans(dry_run);
}

std::vector<std::string> Semaphore::list(std::string_view server) {
  const auto& kind = detail::backend_of(server);
  if (!kind.list)
    throw std::invalid_argument("shmsem: list(): '" + std::string(server) +
                                "' is not the URL of a server (redis:// or redis+unix://)");
  return kind.list(server);
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
  const auto& kind = detail::backend_of(key);
  if (!kind.capabilities.segment_file)
    throw std::invalid_argument("shmsem: '" + detail::shown_url(key) + "' is a " + kind.name +
                                " key: it has no segment file");
  detail::validate_key(key);
  return sys::shm_path(detail::key_to_name(key));
}

std::string_view Semaphore::key() const noexcept {
  return h_->b->key();
}

// ---------------------------------------------------------------------------
// Acquisition

namespace {
// True for a weight that is below 1 or above any capacity: the cold
// branch of acquire() and try_acquire(), one comparison on the hot path.
// Such a weight never reaches the gate, whose fields it could overflow.
bool odd_weight(int n) {
  return static_cast<unsigned>(n) - 1u >= static_cast<unsigned>(kMaxCapacity);
}

// The permit of a lock-free grant, when it has a renewal to start or an
// observer to tell.
[[gnu::noinline]] Permit observed_fast(handle& h, const acquisition& q,
                                       const detail::fast_grant& g) {
  Permit p =
      detail::permit_access::make(h, g.slot, g.gen, g.id, q.n, q.ttl_ms, q.renew, g.now_ns, true);
  if (h.opts.observer) {
    const attachment& a = *h.att;
    tell(h,
         AcquireEvent{a.key, a.capacity(), q.n, a.used(), g.id, 0, {}, Outcome::acquired, false});
  }
  return p;
}

// The permit of a lock-free try, made in the optional that is returned.
std::optional<Permit> fast_optional(handle& h, const acquisition& q, const detail::fast_grant& g) {
  std::optional<Permit> p(std::in_place);  // one return: the optional is the caller's
  if (!h.opts.observer && !q.renew) [[likely]]
    detail::permit_access::hold_plain(p, h, q.n, q.ttl_ms, g);
  else
    *p = observed_fast(h, q, g);
  return p;
}

// The backend's acquisitions, when the fast path said no or there is none.
// Out of line, so that the fast path stays a short function.
[[gnu::noinline]] Permit acquire_in_backend(handle& h, const acquisition& q,
                                            const AcquireOptions& opts) {
  return acquired(h, q.n, h.b->acquire(h, q, opts));
}
[[gnu::noinline]] std::optional<Permit> try_in_backend(handle& h, const acquisition& q) {
  return tried(h, q.n, h.b->try_acquire(h, q));
}
}  // namespace

Permit Semaphore::acquire(int n, const AcquireOptions& opts) {
  handle& h = *h_;
  if (odd_weight(n)) [[unlikely]] {
    detail::check_weight(n, "acquire()");
    // More than any capacity: the backend refuses it.
    return acquire_in_backend(h, resolve(h, n, opts), opts);
  }
  const acquisition q = resolve(h, n, opts);
  if (opts.wait_timeout) detail::check_duration(*opts.wait_timeout, "wait_timeout", true);
  // Shared memory's lock-free fast path; its locked path, and every other
  // backend, are behind the backend interface.
  if (attachment* a = h.att) [[likely]] {
    detail::fast_grant fg;
    if (detail::thread_entry* entry = detail::local_entry(*a);
        entry && !h.is_shut() && detail::fast_acquire(*a, *entry, n, q.ttl_ms, fg)) {
      if (!h.opts.observer && !q.renew) [[likely]]
        return detail::permit_access::plain(h, n, q.ttl_ms, fg);
      return observed_fast(h, q, fg);
    }
  }
  return acquire_in_backend(h, q, opts);
}

std::optional<Permit> Semaphore::try_acquire(int n, const AcquireOptions& opts) {
  handle& h = *h_;
  if (odd_weight(n)) [[unlikely]] {
    detail::check_weight(n, "try_acquire()");
    return try_in_backend(h, resolve(h, n, opts));
  }
  const acquisition q = resolve(h, n, opts);
  if (attachment* a = h.att) [[likely]] {
    detail::fast_grant fg;
    if (detail::thread_entry* entry = detail::local_entry(*a);
        entry && !h.is_shut() && detail::fast_acquire(*a, *entry, n, q.ttl_ms, fg)) {
      return fast_optional(h, q, fg);
    }
  }
  return try_in_backend(h, q);
}

// ---------------------------------------------------------------------------
// Introspection

namespace {
// Reads a figure: shared memory's inline from its segment, as its fast path
// reads the gate (the one branch, for reads), any other backend's through
// the interface.
template <class FromSegment, class FromBackend>
auto figure(const handle& h, FromSegment from_segment, FromBackend from_backend) noexcept {
  if (const attachment* a = h.att) [[likely]]
    return from_segment(*a);
  return from_backend(h.b->read_figures(h));
}
}  // namespace

int Semaphore::capacity() const noexcept {
  return figure(
      *h_, [](const attachment& a) { return a.capacity(); },
      [](const detail::figures& f) { return f.capacity; });
}
int Semaphore::used() const noexcept {
  return figure(
      *h_, [](const attachment& a) { return a.used(); },
      [](const detail::figures& f) { return f.used; });
}
int Semaphore::available() const noexcept {
  return figure(
      *h_,
      [](const attachment& a) {
        const std::uint64_t g = a.gate();
        return std::max(0, detail::layout::gate_capacity(g) - detail::layout::gate_used(g));
      },
      [](const detail::figures& f) { return std::max(0, f.capacity - f.used); });
}
int Semaphore::waiters() const noexcept {
  return figure(
      *h_,
      [](const attachment& a) {
        return static_cast<int>(a.hdr->waiters.load(std::memory_order_relaxed));
      },
      [](const detail::figures& f) { return f.waiters; });
}
bool Semaphore::empty() const noexcept {
  return used() == 0;
}
Fairness Semaphore::fairness() const noexcept {
  return h_->b->fairness();
}
Capabilities Semaphore::capabilities() const noexcept {
  return h_->b->capabilities();
}
Capabilities Semaphore::capabilities_of(std::string_view key) {
  const auto& kind = detail::backend_of(key);
  if (kind.check) kind.check(key);
  return kind.capabilities;
}
bool Semaphore::names_server(std::string_view text) noexcept {
  try {
    const auto& kind = detail::backend_of(text);
    return kind.names_server && kind.names_server(text);
  } catch (...) {
    return false;  // a URL of no backend's (or out of memory)
  }
}
std::string Semaphore::shown_key(std::string_view key) {
  return detail::url_scheme(key) ? detail::shown_url(key) : std::string(key);
}
bool Semaphore::full() const noexcept {
  return figure(
      *h_,
      [](const attachment& a) {
        const std::uint64_t g = a.gate();
        return detail::layout::gate_used(g) >= detail::layout::gate_capacity(g);
      },
      [](const detail::figures& f) { return f.used >= f.capacity; });
}
double Semaphore::utilization() const noexcept {
  return figure(
      *h_,
      [](const attachment& a) {
        const std::uint64_t g = a.gate();
        return static_cast<double>(detail::layout::gate_used(g)) /
               std::max(1, detail::layout::gate_capacity(g));
      },
      [](const detail::figures& f) {
        return static_cast<double>(f.used) / std::max(1, f.capacity);
      });
}
double Semaphore::utilization_smoothed() const noexcept {
  return figure(
      *h_, [](const attachment& a) { return a.ewma_sample(detail::lease_clock()); },
      [](const detail::figures& f) { return f.smoothed; });
}

Stats Semaphore::stats() const {
  return h_->b->stats(*h_);
}

std::vector<Holder> Semaphore::holders() const {
  return h_->b->holders(*h_);
}

Snapshot Semaphore::snapshot() const {
  return h_->b->snapshot(*h_);
}

// ---------------------------------------------------------------------------
// Administration

int Semaphore::reap(std::optional<std::chrono::milliseconds> lock_timeout) {
  const int freed = h_->b->reap(*h_, lock_timeout);
  if (freed > 0) detail::notify(h_->opts.observer, [&](Observer& o) { o.on_reaped(key(), freed); });
  return freed;
}

void Semaphore::set_capacity(int permits, std::optional<std::chrono::milliseconds> lock_timeout) {
  if (permits < 1 || permits > kMaxCapacity)
    throw std::invalid_argument("shmsem: set_capacity() needs 1.." + std::to_string(kMaxCapacity) +
                                ", got " + std::to_string(permits));
  h_->b->set_capacity(*h_, permits, lock_timeout);
}

int Semaphore::force_release_all(std::optional<std::chrono::milliseconds> lock_timeout) {
  return h_->b->force_release_all(*h_, lock_timeout);
}

bool Semaphore::wait_idle(std::chrono::milliseconds timeout) {
  return h_->b->wait_idle(*h_, timeout);
}

void Semaphore::shutdown() {
  h_->shut.store(true);
  h_->b->shutdown(*h_);
}

void shutdown_all() {
  detail::process_shut_down.store(true);
  for (const detail::backend_kind* k : detail::backend_kinds())
    if (k->shutdown_all) k->shutdown_all();
  std::lock_guard g(detail::handles_mutex);
  for (auto* h : detail::all_handles) {
    h->shut.store(true);
    h->b->shutdown(*h);
  }
}

}  // namespace shmsem
