// shm/backend.cpp: the shared-memory backend's side of base/backend.hpp:
// the locked acquisition (the fast path said no, or this thread has none),
// which may queue; the figures, read from the gate word; and the
// administrative calls under the segment lock. The work itself is done by
// the segment's files (segment.hpp says which file does what).

#include "shm/backend.hpp"

#include <algorithm>
#include <mutex>

#include "base/key_syntax.hpp"
#include "base/log.hpp"
#include "base/reasons.hpp"
#include "shm/key.hpp"
#include "shm/leases.hpp"
#include "shm/queue.hpp"
#include "shm/renewer.hpp"
#include "shm/segment.hpp"
#include "shm/trust.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"

namespace shmsem::detail {

namespace {

// How long try_acquire() waits for the segment lock (held for microseconds,
// unless its holder is stopped or starved of CPU).
constexpr std::int64_t kTryLockNs = 10'000'000;

// An attempt that ended as `o`, with the segment's figures now.
attempt ended(const attachment& a, Outcome o) {
  attempt t;
  t.outcome = o;
  t.capacity = a.capacity();
  t.used = a.used();
  return t;
}

// [locked] Takes n seats now if they fit without passing anyone in the
// queue, after reclaiming dead holders' and expired seats if that helps.
inline bool admits_now(attachment& a, int n, std::int64_t now, wake_list& wakes) {
  if (a.admit(n, false)) return true;
  // Behind a queue nothing reaped would be ours; the head waiter watches,
  // unless it is dead (or gave up) with nobody behind it to notice.
  const bool queued = (a.gate() & layout::kGateQueued) != 0;
  if (queued && !a.head_gone()) return false;
  a.reap(now, wakes);
  if (queued) a.grant_queued(now, wakes);
  return a.admit(n, false);
}

// [locked] Grants the seats to this process at once and unlocks. A lease
// granted under the lock is released without it where the releasing
// thread can (fast_release() checks, and falls back to the lock): a release
// must not wait behind a herd of processes queued on the lock to join the
// queue.
attempt grant_now(handle& h, segment_lock& lk, std::uint32_t self, const acquisition& q,
                  std::int64_t now) {
  attachment& a = *h.att;
  std::uint64_t id, gen;
  const std::uint32_t slot = a.grant(self, q.n, q.ttl_ms, now, id, gen);
  record_histogram(a.hdr->stats.wait, 0);
  pin(a, +1);
  lk.unlock();
  attempt t = ended(a, Outcome::acquired);
  t.permit = permit_access::make(h, slot, gen, id, q.n, q.ttl_ms, q.renew, now, true);
  return t;
}

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

segment_backend::~segment_backend() {
  if (owned_) attachment::release_handle(att_);
}

std::string_view segment_backend::key() const noexcept {
  return att_->key;
}

Capabilities segment_backend::capabilities() const noexcept {
  return shared_memory_capabilities(att_->hdr->fencing != 0);
}

Fairness segment_backend::fairness() const noexcept {
  return att_->fairness();
}

// ---------------------------------------------------------------------------
// Acquisition

attempt segment_backend::acquire(handle& h, const acquisition& q, const AcquireOptions& opts) {
  attachment& a = *att_;
  const int n = q.n;
  std::int64_t deadline = sys::kNever;
  std::int64_t started = 0;
  if (opts.wait_timeout) {
    started = sys::precise_now_ns();
    // Negative means no wait, however large: clamped before the conversion
    // to nanoseconds, which would overflow.
    const auto budget = std::max(*opts.wait_timeout, std::chrono::milliseconds::zero());
    deadline = started + std::chrono::nanoseconds(budget).count();
  }
  auto fail = [&](Reason r) {
    if (const auto counter = reason_counter(r))
      (a.hdr->stats.*counter).fetch_add(1, std::memory_order_relaxed);
    return ended(a, info_of(r)->outcome);
  };
  if (h.is_shut()) return fail(Reason::shutdown);

  // This thread's entry, filled under the lock below, makes its next
  // acquire lock-free.
  thread_entry* entry = local_entry(a);
  if (!entry) entry = prepare_entry(a);
  if (a.self.load(std::memory_order_relaxed) == kNoSelf) a.claim_holder_armed(deadline);
  std::uint32_t w;
  {
    segment_lock lk(a, deadline);
    if (!lk.owns()) return fail(Reason::timeout);
    const bool first = a.self.load(std::memory_order_relaxed) == kNoSelf;
    if (entry) fill_entry(a, *entry, lk.wakes);
    const std::uint32_t self = a.ensure_self(lk.wakes);
    if (n > a.capacity()) {
      lk.unlock();
      return fail(Reason::exceeds_capacity);
    }
    const std::int64_t now = lease_clock();
    // Full: reclaim dead holders and expired leases before queueing.
    if (admits_now(a, n, now, lk.wakes)) {
      // Returned as made (no copy of the attempt on the common path).
      if (!first) return grant_now(h, lk, self, q, now);
      attempt t = grant_now(h, lk, self, q, now);
      // Our first seat: hold it with our death ringing. try_acquire never
      // waits; a queued acquire's lifeline is usually armed by the time it
      // is served.
      a.await_lifeline(deadline);
      return t;
    }
    if (deadline != sys::kNever && sys::precise_now_ns() >= deadline) {
      lk.unlock();
      return fail(Reason::timeout);
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
  h.wait_started(a.key, n);
  auto& slot = a.waiters[w];
  std::stop_callback on_stop(opts.stop, [&slot] {
    slot.seq.fetch_add(1, std::memory_order_release);
    sys::futex_wake(&slot.seq, 1);
  });
  const queue_wait got = wait_in_queue(a, w, n, deadline, opts.stop, h.shut);
  {
    std::lock_guard g(h.waits_mu);
    h.waits.erase(std::find(h.waits.begin(), h.waits.end(), w));
  }
  attempt t = got.granted ? ended(a, Outcome::acquired) : fail(got.reason);
  t.waited = true;
  t.wakeups = got.wakeups;
  t.waited_ns = sys::precise_now_ns() - started;
  if (got.granted)
    t.permit = permit_access::make(h, got.lease, got.gen, got.id, n, q.ttl_ms, q.renew,
                                   got.granted_ns, true);
  return t;
}

attempt segment_backend::try_acquire(handle& h, const acquisition& q) {
  attachment& a = *att_;
  const int n = q.n;
  auto failed = [&](Outcome outcome) {
    a.hdr->stats.try_failures.fetch_add(1, std::memory_order_relaxed);
    return ended(a, outcome);
  };
  if (h.is_shut()) return failed(Outcome::shutdown);
  thread_entry* entry = local_entry(a);
  if (!entry) entry = prepare_entry(a);
  // A try does not wait: not for seats, and not long for the lock. A lock
  // held longer than this is held by a stopped (or very slow) process;
  // the semaphore is as good as full.
  const std::int64_t lock_deadline = sys::precise_now_ns() + kTryLockNs;
  if (a.self.load(std::memory_order_relaxed) == kNoSelf) (void)a.claim_holder_early(lock_deadline);
  segment_lock lk(a, lock_deadline);
  if (!lk.owns()) {
    if (!a.told_lock_busy.exchange(true, std::memory_order_relaxed))
      log().warn(
          "semaphore '{}': try_acquire() found the segment lock held for over {} ms (is a "
          "process stopped while holding it?) and reported no seat; said once per process",
          a.key, kTryLockNs / 1'000'000);
    return failed(Outcome::unavailable);
  }
  if (entry) fill_entry(a, *entry, lk.wakes);
  const std::uint32_t self = a.ensure_self(lk.wakes);
  const std::int64_t now = lease_clock();
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

Permit permit_access::make(handle& h, std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                           int n, std::int64_t ttl_ms, bool renew, std::int64_t granted_ns,
                           bool fast) {
  Permit p(h.att, slot, n, id, gen, fast, ttl_ms, granted_ns);
  if (h.att->hdr->fencing) p.fence_ = id;  // the id is the token (attachment::grant)
  if (h.opts.observer) [[unlikely]]
    p.observer_ = h.opts.observer;
  if (renew) [[unlikely]] {
    auto r = std::make_shared<renewal>();
    r->att = h.att;
    r->slot = slot;
    r->gen = gen;
    r->id = id;
    r->ttl_ms = ttl_ms;
    r->handle_id = h.id;
    p.renewal_ = r;
    // A handle shut down meanwhile does not start new renewals.
    if (!h.shut.load() && !process_shut_down.load())
      renew_in_background(r);
    else
      r->stop();
  }
  return p;
}

// ---------------------------------------------------------------------------
// Introspection

figures segment_backend::read_figures(const handle&) noexcept {
  // One reading of the gate: its capacity and use belong together.
  const std::uint64_t g = att_->gate();
  return {layout::gate_capacity(g), layout::gate_used(g),
          static_cast<int>(att_->hdr->waiters.load(std::memory_order_relaxed)),
          att_->ewma_sample(lease_clock())};
}

Stats segment_backend::stats(const handle&) {
  return read_stats(*att_);
}

std::vector<Holder> segment_backend::holders(const handle&) {
  return list_holders(*att_);
}

Snapshot segment_backend::snapshot(const handle& h) {
  const attachment& a = *att_;
  Snapshot s = read_figures(h).snapshot_of(a.key);
  s.stats = read_stats(a);
  s.holders = list_holders(a);
  s.created = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(a.hdr->created_realtime_ns)));
  describe_segment(a, h.opts.trusted_owners, s);
  s.death_wakeup = describe_death_wakeup(a);
  s.fairness = a.fairness();
  return s;
}

// ---------------------------------------------------------------------------
// Administration

int segment_backend::reap(handle&, std::optional<std::chrono::milliseconds> lock_timeout) {
  attachment& a = *att_;
  segment_lock lk(a, lock_deadline(lock_timeout));
  require_lock(a, lk, "reap()", lock_timeout);
  return a.reap(lease_clock(), lk.wakes, true);
}

void segment_backend::set_capacity(handle&, int permits,
                                   std::optional<std::chrono::milliseconds> lock_timeout) {
  attachment& a = *att_;
  segment_lock lk(a, lock_deadline(lock_timeout));
  require_lock(a, lk, "set_capacity()", lock_timeout);
  a.ensure_lease_slots(static_cast<std::uint32_t>(permits), a.claimed_thread_records());
  const std::int64_t now = lease_clock();
  a.ewma_sample(now);
  a.set_gate_capacity(permits);
  a.reject_oversized(lk.wakes);
  a.grant_queued(now, lk.wakes);
}

int segment_backend::force_release_all(handle&,
                                       std::optional<std::chrono::milliseconds> lock_timeout) {
  attachment& a = *att_;
  segment_lock lk(a, lock_deadline(lock_timeout));
  require_lock(a, lk, "force_release_all()", lock_timeout);
  const int displaced = detail::force_release_all(a, lease_clock(), lk.wakes);
  if (displaced > 0)
    log().warn("semaphore '{}': force_release_all displaced {} live lease{}", a.key, displaced,
               displaced == 1 ? "" : "s");
  return displaced;
}

bool segment_backend::wait_idle(handle&, std::chrono::milliseconds timeout) {
  attachment& a = *att_;
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
    if (a.watch(lease_clock())) {
      segment_lock lk(a, deadline);
      if (lk.owns()) a.reap(lease_clock(), lk.wakes);
      continue;
    }
    const std::int64_t now = sys::precise_now_ns();
    if (now >= deadline) break;
    sys::futex_wait(&hdr->idle_seq, seq, std::min(deadline, now + kHeadTickNs));
    watch_name(a);
  }
  hdr->idle_waiters.fetch_sub(1);
  return idle;
}

void segment_backend::shutdown(handle& h) {
  stop_renewals_of(h.id);
  h.nudge_waiters();
}

void handle::nudge_waiters() {
  std::lock_guard g(waits_mu);
  for (std::uint32_t w : waits) {
    att->waiters[w].seq.fetch_add(1, std::memory_order_release);
    sys::futex_wake(&att->waiters[w].seq, 1);
  }
}

// ---------------------------------------------------------------------------
// The keys it serves

namespace {

bool claims(std::string_view key) noexcept {
  try {
    return !url_scheme(key);
  } catch (...) {
    return true;  // out of memory: validate_key() will say so
  }
}

std::unique_ptr<backend> open(std::string_view key, int permits, const Options& o) {
  validate_key(key);
  // attach() (permits 0) makes nothing, so it asks for no fencing or fairness.
  attachment* a =
      permits > 0 ? attachment::acquire_handle(key, permits, o.mode, o.open_timeout,
                                               o.trusted_owners, o.fencing, o.fairness)
                  : attachment::acquire_handle(key, 0, o.mode, o.open_timeout, o.trusted_owners);
  std::unique_ptr<backend> b;
  try {
    b = std::make_unique<segment_backend>(a, true);
  } catch (...) {
    attachment::release_handle(a);
    throw;
  }
  // A process opens a key to use it: its holder record's token and its
  // lifeline (the lifeline thread's start) are taken here, so its first
  // acquire only joins the queue. A fleet that opens at once and then
  // acquires at once would otherwise pay thousands of thread starts while
  // the holders wait for a CPU to hand their seats on (docs/performance.md,
  // "Fleets"). Best effort: the first acquire claims whatever this did not,
  // and reports what went wrong. The open waits (at most 10 ms) for the
  // lifeline to be armed, so that it returns with the thread started: a
  // prefork master that forks right after it forks no thread mid-start
  // (which ASan's allocator does not survive), and the process's death
  // rings from its first seat on.
  try {
    const std::int64_t deadline =
        sys::precise_now_ns() + std::chrono::nanoseconds(o.open_timeout).count();
    a->claim_holder_armed(deadline);
  } catch (const std::exception&) {
  }
  return b;
}

bool remove(std::string_view key, bool only_unused) {
  return only_unused ? attachment::remove_if_unused(key) : attachment::remove(key);
}

}  // namespace

const backend_kind segment_kind{.name = "shared memory",
                                .schemes = nullptr,
                                .capabilities = shared_memory_capabilities(true),
                                .claims = &claims,
                                .check = &validate_key,
                                .open = &open,
                                .remove = &remove,
                                .list = nullptr,
                                .names_server = nullptr,
                                .shutdown_all = &stop_all_renewals};

}  // namespace shmsem::detail
