// The Redis backend's Semaphore and Permit members: each is one script
// (two for a wait that ends without a grant), its reply turned into the
// same results and errors as on shared memory.
#include "redis/backend.hpp"

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <stop_token>

#include "base/handle.hpp"
#include "base/key_syntax.hpp"
#include "base/log.hpp"
#include "base/reasons.hpp"
#include "redis/scripts.hpp"
#include "redis/session.hpp"
#include "redis/url.hpp"
#include "sys/clock.hpp"

namespace shmsem::detail {
extern std::atomic<bool> process_shut_down;
}

namespace shmsem::detail::redis {

namespace {

using state_ptr = std::shared_ptr<semaphore_state>;

std::string new_epoch() {
  return random_id(32);
}

// Objects made before a fork() belong to the parent: a child must neither
// use their sockets nor run their destructors (their mutexes may be held
// by threads that do not exist in it).
template <class T>
void abandon(std::shared_ptr<T>&& p) noexcept {
  new std::shared_ptr<T>(std::move(p));
}

// The handle's state, a fresh one for this process after a fork().
state_ptr state_of(const handle& h) {
  auto& r = static_cast<server_backend&>(*h.b);
  state_ptr s = r.state.load();
  if (s->fork_gen == fork_generation()) [[likely]]
    return s;
  state_ptr fresh = state_for(s->where);
  {
    std::lock_guard g(fresh->mu);
    fresh->recreate_cap = std::max(fresh->recreate_cap, r.permits ? r.permits : s->recreate_cap);
    fresh->session_ms = std::chrono::milliseconds(h.opts.session_timeout).count();
    fresh->connect_timeout_ns = std::chrono::nanoseconds(h.opts.connect_timeout).count();
  }
  if (r.state.compare_exchange_strong(s, fresh)) abandon(std::move(s));
  return r.state.load();
}

std::string seats(int n) {
  return std::to_string(n) + " seat" + (n == 1 ? "" : "s");
}

// A reply that says the keys are not a shmsem semaphore, in words.
std::string foreign_data(const semaphore_state& s, const reply& r) {
  const std::string_view st = r.at(0).str();
  if (st == "wrongtype")
    return "the Redis key '" + std::string(r.at(1).str()) + "' holds a " +
           std::string(r.at(2).str()) + ", not a shmsem semaphore; it was left alone";
  if (st == "format")
    return "the Redis key '" + s.meta + "' holds a semaphore stored in format '" +
           std::string(r.at(2).str()) +
           "', which this version of shmsem does not read (remove it while unused, with an "
           "older shmsem or redis-cli, and open it again)";
  if (st == "garbage")
    return "the Redis key '" + s.meta +
           "' is a hash that is not a shmsem semaphore; it was left alone";
  if (r.is_error()) return "Redis answered: " + std::string(r.str());
  return "unexpected reply '" + std::string(st) + "' from Redis";
}

[[noreturn]] void throw_io(const semaphore_state& s, const std::string& doing, const io_error& e) {
  throw SegmentError(e.code(), "shmsem: " + doing + " of '" + s.where.display + "': " + e.what());
}

// Runs a script with the state's key; the deadline is one connect timeout.
reply run(semaphore_state& s, const script& sc, const std::vector<std::string>& args,
          std::int64_t* sent_at = nullptr) {
  std::int64_t timeout;
  {
    std::lock_guard g(s.mu);
    timeout = s.connect_timeout_ns;
  }
  const std::int64_t now = sys::precise_now_ns();
  if (sent_at) *sent_at = now;
  return s.cli->eval(sc, s.keys, args, now + timeout);
}

// A new lease of this process: registered for renewal and loss reports.
Permit make_permit(const handle& h, const state_ptr& s, std::uint64_t id, const std::string& epoch,
                   int n, std::int64_t ttl_ms, bool renew, std::int64_t granted_ns) {
  auto* l = new lease;
  l->sem = s;
  l->id = id;
  l->epoch = epoch;
  l->weight = n;
  l->handle_id = h.id;
  l->fork_gen = s->fork_gen;
  l->observer = h.opts.observer;
  l->ttl_ms = ttl_ms;
  l->auto_renew = renew && !h.is_shut();
  l->renewed_ns = granted_ns;
  l->expires_ns.store(ttl_ms > 0 ? granted_ns + ms_ns(ttl_ms) : 0);
  bool poke;
  {
    std::lock_guard g(s->mu);
    poke = !s->watched || (l->auto_renew && ttl_ms > 0);
    s->leases.push_back(l);
  }
  // A watched state has a renewal due no later than this lease needs one
  // (unless it auto-renews a TTL, which may be shorter): no need to wake
  // the keeper, a thread switch that would cost about as much as the
  // acquire's own round trip.
  if (poke) keeper::get().watch(s);
  return lease_access::make(l, l->id, n, ttl_ms, granted_ns);
}

// Runs the acquire script. If no reply comes, the request is voided (the
// keeper makes sure it grants nothing, whenever it runs) and io_error
// propagates.
reply run_acquire(semaphore_state& s, int n, std::int64_t ttl_ms, const char* mode,
                  std::int64_t& sent_at) {
  std::vector<std::string> args;
  {
    std::lock_guard g(s.mu);
    args = {std::to_string(s.recreate_cap),
            new_epoch(),
            s.sid,
            std::to_string(s.session_ms),
            std::to_string(n),
            std::to_string(ttl_ms),
            std::to_string(s.pid),
            s.host,
            mode,
            new_epoch()};
  }
  try {
    return run(s, scripts::acquire(), args, &sent_at);
  } catch (const io_error&) {
    std::lock_guard g(s.mu);
    s.voided.push_back(args.back());
    throw;
  }
}

// Takes the epoch of a reply; leases of an older one are lost.
void saw_epoch(semaphore_state& s, std::string_view epoch) {
  std::vector<lease*> lost;
  std::vector<loss_note> notes;
  {
    std::lock_guard g(s.mu);
    s.saw_epoch(std::string(epoch), &lost);
    for (lease* l : lost)
      if (auto note = s.take_loss_note(*l)) notes.push_back(std::move(*note));
  }
  for (const auto& note : notes) s.tell(note);
}

void touched(semaphore_state& s, std::int64_t sent_at, std::uint64_t own_wid = 0) {
  std::lock_guard g(s.mu);
  s.renewed(sent_at, own_wid);
}

// An attempt that ended as `o`, with the figures last read.
attempt ended(semaphore_state& s, Outcome o, bool waited, std::int64_t started,
              std::uint32_t wakeups) {
  attempt a;
  a.outcome = o;
  a.waited = waited;
  a.wakeups = wakeups;
  a.waited_ns = waited ? sys::precise_now_ns() - started : 0;
  std::lock_guard g(s.mu);
  a.capacity = s.last_cap;
  a.used = s.last_used;
  return a;
}

}  // namespace

std::unique_ptr<server_backend> open(std::string_view key, int permits, const Options& o) {
  const url u = parse(key);
  if (o.session_timeout < std::chrono::milliseconds(100) || o.session_timeout > kMaxDuration)
    throw std::invalid_argument(
        "shmsem: session_timeout of " + std::to_string(o.session_timeout.count()) +
        " ms is out of range (100.." + std::to_string(kMaxDuration.count()) + " ms)");
  if (o.connect_timeout < std::chrono::milliseconds(1) || o.connect_timeout > kMaxDuration)
    throw std::invalid_argument("shmsem: connect_timeout of " +
                                std::to_string(o.connect_timeout.count()) + " ms is out of range");
  state_ptr s = state_for(u);
  {
    std::lock_guard g(s->mu);
    if (s->recreate_cap == 0) {
      // The first handle of this key in the process sets the session.
      s->session_ms = o.session_timeout.count();
    }
    s->connect_timeout_ns = std::chrono::nanoseconds(o.connect_timeout).count();
  }
  reply r;
  try {
    r = run(*s, scripts::open(), {std::to_string(permits), new_epoch()});
  } catch (const io_error& e) {
    throw SegmentError(e.code(), "shmsem: cannot open '" + u.display + "' in Redis: " + e.what());
  }
  const std::string_view st = r.at(0).str();
  if (st == "absent")
    throw SegmentError(make_error_code(errc::not_found),
                       "shmsem: no semaphore '" + u.display + "' in Redis");
  if (st != "ok" && st != "created")
    throw SegmentError(make_error_code(errc::bad_segment),
                       "shmsem: cannot open '" + u.display + "' in Redis: " + foreign_data(*s, r));
  const int cap = static_cast<int>(r.at(2).integer());
  if (st == "ok" && permits > 0 && cap != permits)
    log().warn("semaphore '{}' exists with capacity {}; open(..., {}) keeps it", u.display, cap,
               permits);
  bool told_no_channels = true;
  {
    std::lock_guard g(s->mu);
    // After a loss of data, open()'s permits re-create the semaphore; an
    // attach() knows only the capacity it found.
    s->recreate_cap = std::max(s->recreate_cap, permits > 0 ? permits : cap);
    s->last_cap = cap;
    if (r.at(3).is_integer() && r.at(3).integer() == 0) {
      told_no_channels = s->no_channels;
      s->no_channels = true;
    }
  }
  if (!told_no_channels)
    log().warn(
        "semaphore '{}': the Redis user may not use the semaphore's pub/sub channels; waiters "
        "poll every {} ms instead of hearing their grants at once. Grant them with ACL SETUSER "
        "<user> '&{}:ev*'",
        u.display,
        std::min<std::int64_t>(kPollWithoutChannelsNs / 1'000'000, o.session_timeout.count() / 3),
        s->meta);
  saw_epoch(*s, r.at(1).str());
  auto rm = std::make_unique<server_backend>();
  rm->state.store(s);
  rm->shown = u.display;
  rm->permits = permits;
  return rm;
}

bool remove(std::string_view key, bool only_unused) {
  const url u = parse(key);
  state_ptr s = state_for(u);
  reply r;
  try {
    r = run(*s, scripts::destroy(), {only_unused ? "1" : "0"});
  } catch (const io_error& e) {
    throw_io(*s, "cannot remove Redis semaphore", e);
  }
  const std::string_view st = r.at(0).str();
  if (st == "busy") return false;
  if (st != "ok")
    throw SegmentError(
        make_error_code(errc::bad_segment),
        "shmsem: cannot remove Redis semaphore '" + u.display + "': " + foreign_data(*s, r));
  return r.at(1).integer() == 1;
}

std::vector<std::string> list(std::string_view server) {
  const url u = parse(server, false);
  auto cli = client::get(u.ep);
  const std::int64_t timeout = std::chrono::nanoseconds(Options{}.connect_timeout).count();
  std::vector<std::string> out;
  try {
    for (const endpoint& node : cli->masters(sys::precise_now_ns() + timeout)) {
      std::string cursor = "0";
      do {
        // The main hash of each semaphore: "shmsem{KEY}", nothing after.
        const reply r = cli->command_on(
            node, {"SCAN", cursor, "MATCH", "shmsem{*}", "COUNT", "1000", "TYPE", "hash"},
            sys::precise_now_ns() + timeout);
        if (r.is_error())
          throw io_error(std::make_error_code(std::errc::io_error), std::string(r.str()));
        cursor = std::string(r.at(0).str());
        const reply keys = r.at(1);
        for (std::size_t i = 0; i < keys.size(); ++i) {
          if (auto key = key_of_meta(keys.at(i).str())) out.push_back(with_key(u, *key));
        }
      } while (cursor != "0" && !cursor.empty());
    }
  } catch (const io_error& e) {
    throw SegmentError(e.code(),
                       "shmsem: cannot list the semaphores of '" + u.display + "': " + e.what());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---------------------------------------------------------------------------
// Acquisition

namespace {

// How an acquisition that is refused leaves the steps below: caught where
// the backend's acquire returns its attempt.
struct refused {
  attempt a;
};

// The acquisition failed for `r`. `cap`: the capacity that rejected the
// request (as the script saw it), or -1 for the last one this process read.
[[noreturn]] void fail(semaphore_state& s, Reason r, bool waited, std::int64_t started,
                       std::uint32_t wakeups, const std::string& detail = {},
                       std::exception_ptr cause = nullptr, int cap = -1) {
  refused f{ended(s, info_of(r)->outcome, waited, started, wakeups)};
  // A Redis error is not a segment error: the words are the backend's own.
  f.a.detail = r == Reason::error ? "Redis error" + (detail.empty() ? "" : ": " + detail) : detail;
  f.a.cause = std::move(cause);
  if (cap >= 0) f.a.capacity = cap;
  throw f;
}

attempt granted(const handle& h, const state_ptr& s, std::uint64_t id, int n, std::int64_t ttl_ms,
                bool renew, std::int64_t granted_ns, bool waited, std::int64_t started,
                std::uint32_t wakeups) {
  std::string epoch;
  {
    std::lock_guard g(s->mu);
    epoch = s->epoch;
  }
  Permit p = make_permit(h, s, id, epoch, n, ttl_ms, renew, granted_ns);
  attempt a = ended(*s, Outcome::acquired, waited, started, wakeups);
  a.permit = std::move(p);
  return a;
}

const char* counter_of(Reason r) {
  switch (r) {
    case Reason::timeout:
      return "timeouts";
    case Reason::cancelled:
      return "cancelled";
    case Reason::shutdown:
      return "shutdowns";
    default:
      return "";
  }
}

}  // namespace

namespace {

// Runs the acquire script in `mode` ("try", "once" or "wait") and keeps
// what its reply says of the semaphore. An unreachable server, or a reply
// other than "ok", "full", "exceeds" (or "queued", for a wait), fails the
// call as an acquire that `waited` since `started` through `wakeups`.
reply ask_for_seats(const state_ptr& sp, int n, std::int64_t ttl_ms, const char* mode,
                    std::int64_t& sent_at, bool waited, std::int64_t started,
                    std::uint32_t wakeups) {
  semaphore_state& s = *sp;
  reply r;
  try {
    r = run_acquire(s, n, ttl_ms, mode, sent_at);
  } catch (const io_error& e) {
    keeper::get().watch(sp);
    fail(s, Reason::error, waited, started, wakeups, "cannot reach Redis: " + std::string(e.what()),
         std::make_exception_ptr(SegmentError(e.code(), e.what())));
  }
  const std::string st(r.at(0).str());
  const bool may_queue = std::string_view(mode) != "try";
  if (st != "ok" && (st != "queued" || !may_queue) && st != "full" && st != "exceeds")
    fail(s, Reason::error, waited, started, wakeups, foreign_data(s, r));
  touched(s, sent_at, st == "queued" ? static_cast<std::uint64_t>(r.at(2).integer()) : 0);
  saw_epoch(s, r.at(1).str());
  std::lock_guard g(s.mu);
  s.last_cap = static_cast<int>(r.at(st == "ok" || st == "queued" ? 3 : 2).integer());
  s.last_used = static_cast<int>(r.at(st == "ok" || st == "queued" ? 4 : 3).integer());
  return r;
}

// One blocking acquire, in the steps it takes: ask the server (a seat, a
// refusal, or a place in the queue), sleep until the keeper hears how the
// wait ends, and leave the queue when the caller gives up. A wait whose
// session lapsed (the process was stopped or cut off from Redis for longer
// than the session timeout) lost its place and any grant made to it: it
// starts over at the back of the queue, within what is left of its budget.
class blocking_acquire {
 public:
  blocking_acquire(handle& h, int n, std::int64_t ttl_ms, bool renew, const AcquireOptions& opts)
      : h_(h), sp_(state_of(h)), s_(*sp_), n_(n), ttl_ms_(ttl_ms), renew_(renew), opts_(opts) {
    if (opts.wait_timeout)
      deadline_ = started_ + std::chrono::nanoseconds(*opts.wait_timeout).count();
  }

  attempt run() {
    if (h_.is_shut()) fail(Reason::shutdown);
    for (;; ++wakeups_) {
      std::int64_t sent_at = 0;
      const reply r = ask(sent_at);
      const std::string st(r.at(0).str());
      if (st == "ok") return grant(static_cast<std::uint64_t>(r.at(2).integer()));
      if (st == "exceeds")
        fail(Reason::exceeds_capacity, {}, nullptr, static_cast<int>(r.at(2).integer()));
      if (st == "full") fail(Reason::timeout);
      waiter w;
      join_queue(w, r, sent_at);
      Reason reason = Reason::timeout;
      switch (sleep(w, reason)) {
        case waiter::state::granted:
          return grant(w.lease_id);
        case waiter::state::rejected:
          fail(Reason::exceeds_capacity, {}, nullptr, w.cap);
        case waiter::state::gone:
          if (!w.lapsed) fail(Reason::error, w.error);
          if (auto why = gives_up()) fail(*why);
          log().info("semaphore '{}': a wait for {} started over: its session lapsed",
                     s_.where.display, seats(n_));
          continue;
        case waiter::state::waiting:
          return leave_queue(w, reason);
      }
    }
  }

 private:
  // Why the caller stops waiting, if it does.
  std::optional<Reason> gives_up() const {
    if (opts_.stop.stop_requested()) return Reason::cancelled;
    if (h_.is_shut()) return Reason::shutdown;
    if (sys::precise_now_ns() >= deadline_) return Reason::timeout;
    return std::nullopt;
  }

  [[noreturn]] void fail(Reason r, const std::string& detail = {},
                         std::exception_ptr cause = nullptr, int cap = -1) const {
    redis::fail(s_, r, waited_, started_, wakeups_, detail, std::move(cause), cap);
  }

  attempt grant(std::uint64_t lease_id) const {
    return granted(h_, sp_, lease_id, n_, ttl_ms_, renew_, sys::precise_now_ns(), waited_, started_,
                   wakeups_);
  }

  // Asks for the seats: "ok", "queued", "full" or "exceeds".
  reply ask(std::int64_t& sent_at) const {
    const bool once = opts_.wait_timeout && opts_.wait_timeout->count() <= 0;
    return ask_for_seats(sp_, n_, ttl_ms_, once ? "once" : "wait", sent_at, waited_, started_,
                         wakeups_);
  }

  // Queued: the keeper watches the wait (and the earliest lease expiry
  // the server named) from here on.
  void join_queue(waiter& w, const reply& r, std::int64_t sent_at) {
    w.wid = static_cast<std::uint64_t>(r.at(2).integer());
    const long long expiry_ms = r.at(5).integer();
    {
      std::lock_guard g(s_.mu);
      s_.add_waiter(w);
      if (expiry_ms >= 0) {
        const std::int64_t due = sent_at + ms_ns(expiry_ms);
        if (s_.expiry_due_ns == 0 || due < s_.expiry_due_ns) s_.expiry_due_ns = due;
      }
    }
    keeper::get().watch(sp_);
    if (!waited_) h_.wait_started(s_.where.display, n_);
    waited_ = true;
  }

  // Sleeps until the keeper hears the grant (or a rejection), the caller
  // gives up (`reason` says why, and the wait is still `waiting`), or the
  // session is lost. A grant the session may have outlived is `gone`.
  waiter::state sleep(waiter& w, Reason& reason) {
    std::stop_callback on_stop(opts_.stop, [this] {
      std::lock_guard g(s_.mu);
      s_.cv.notify_all();
    });
    bool give_back = false;
    waiter::state outcome;
    {
      std::unique_lock lk(s_.mu);
      while (w.st == waiter::state::waiting) {
        if (auto why = gives_up()) {
          reason = *why;
          break;
        }
        if (deadline_ == sys::kNever)
          s_.cv.wait(lk);
        else
          s_.cv.wait_for(lk, std::chrono::nanoseconds(deadline_ - sys::precise_now_ns()));
        ++wakeups_;
      }
      outcome = w.st;
      s_.waiters.erase(w.wid);
      if (outcome == waiter::state::granted &&
          (w.heard_late || sys::precise_now_ns() >= s_.session_deadline_ns())) {
        // The session may have lapsed since the grant was heard (this
        // process was stopped before it heard it, or between then and
        // now): the seat may be someone else's by now. It goes back, if
        // it is still ours, and the wait starts over.
        s_.abandoned.push_back(std::to_string(w.wid));
        give_back = true;
        outcome = waiter::state::gone;
        w.lapsed = true;
      } else if (outcome == waiter::state::granted || outcome == waiter::state::rejected) {
        s_.claimed.push_back(std::to_string(w.wid));
      }
    }
    if (give_back) keeper::get().watch(sp_);
    return outcome;
  }

  // Leaves the queue after giving up for `reason`. A grant that arrived as
  // the budget ran out is kept; one that raced with a cancel or a shutdown
  // goes back.
  attempt leave_queue(const waiter& w, Reason reason) {
    const std::string epoch = [&] {
      std::lock_guard g(s_.mu);
      return s_.epoch;
    }();
    int rejected_by = -1;
    try {
      const std::vector<std::string> args = {epoch,
                                             s_.sid,
                                             std::to_string(s_.session_ms),
                                             std::to_string(w.wid),
                                             counter_of(reason),
                                             reason == Reason::timeout ? "1" : "0"};
      std::int64_t sent_at = 0;
      const reply c = redis::run(s_, scripts::cancel(), args, &sent_at);
      const std::string_view cs = c.at(0).str();
      if (cs == "granted") return grant(static_cast<std::uint64_t>(c.at(1).integer()));
      if (cs == "rejected") {
        reason = Reason::exceeds_capacity;
        rejected_by = static_cast<int>(c.at(1).integer());
      }
      if (!c.is_error()) touched(s_, sent_at);
    } catch (const io_error&) {
      // Redis cannot be told now: the keeper will, and gives back a grant.
      {
        std::lock_guard g(s_.mu);
        s_.abandoned.push_back(std::to_string(w.wid));
      }
      keeper::get().watch(sp_);
    }
    fail(reason, {}, nullptr, rejected_by);
  }

  handle& h_;
  const state_ptr sp_;
  semaphore_state& s_;
  const int n_;
  const std::int64_t ttl_ms_;
  const bool renew_;
  const AcquireOptions& opts_;
  const std::int64_t started_ = sys::precise_now_ns();
  std::int64_t deadline_ = sys::kNever;
  bool waited_ = false;
  std::uint32_t wakeups_ = 0;
};

}  // namespace

attempt acquire(handle& h, int n, std::int64_t ttl_ms, bool renew, const AcquireOptions& opts) {
  try {
    return blocking_acquire(h, n, ttl_ms, renew, opts).run();
  } catch (refused& f) {
    return std::move(f.a);
  }
}

attempt try_acquire(handle& h, int n, std::int64_t ttl_ms, bool renew) {
  const state_ptr sp = state_of(h);
  semaphore_state& s = *sp;
  const std::int64_t started = sys::precise_now_ns();
  if (h.is_shut()) return ended(s, Outcome::shutdown, false, started, 0);
  try {
    std::int64_t sent_at = 0;
    const reply r = ask_for_seats(sp, n, ttl_ms, "try", sent_at, false, started, 0);
    const std::string st(r.at(0).str());
    if (st == "exceeds") return ended(s, Outcome::exceeds_capacity, false, started, 0);
    if (st == "full") return ended(s, Outcome::unavailable, false, started, 0);
    return granted(h, sp, static_cast<std::uint64_t>(r.at(2).integer()), n, ttl_ms, renew,
                   sys::precise_now_ns(), false, started, 0);
  } catch (refused& f) {
    return std::move(f.a);
  }
}

// ---------------------------------------------------------------------------
// Introspection

namespace {

struct info_reply {
  bool ok = false;
  std::int64_t now_us = 0;
  std::map<std::string, std::string, std::less<>> fields;
  int waiters = 0;
  std::vector<Holder> holders;
};

long long field(const info_reply& i, std::string_view name) {
  auto it = i.fields.find(name);
  return it == i.fields.end() ? 0 : std::strtoll(it->second.c_str(), nullptr, 10);
}

double field_double(const info_reply& i, std::string_view name) {
  auto it = i.fields.find(name);
  return it == i.fields.end() ? 0.0 : std::strtod(it->second.c_str(), nullptr);
}

// One info script. Throws SegmentError if Redis cannot be reached or the
// key is not a semaphore.
info_reply read_info(semaphore_state& s, bool with_holders) {
  reply r;
  try {
    r = run(s, scripts::info(), {with_holders ? "1" : "0"});
  } catch (const io_error& e) {
    throw_io(s, "cannot read Redis semaphore", e);
  }
  const std::string_view st = r.at(0).str();
  if (st == "absent")
    throw SegmentError(make_error_code(errc::not_found),
                       "shmsem: no semaphore '" + s.where.display + "' in Redis (data lost?)");
  if (st != "ok")
    throw SegmentError(
        make_error_code(errc::bad_segment),
        "shmsem: cannot read Redis semaphore '" + s.where.display + "': " + foreign_data(s, r));
  info_reply i;
  i.ok = true;
  i.now_us = r.at(1).integer();
  const reply f = r.at(2);
  for (std::size_t k = 0; k + 1 < f.size(); k += 2)
    i.fields.emplace(std::string(f.at(k).str()), std::string(f.at(k + 1).str()));
  i.waiters = static_cast<int>(r.at(3).integer());
  const reply hs = r.at(4);
  const auto steady_now = Permit::clock::now();
  for (std::size_t k = 0; k + 6 < hs.size(); k += 7) {
    Holder h;
    h.permit_id = static_cast<std::uint64_t>(hs.at(k).integer());
    h.weight = static_cast<int>(hs.at(k + 1).integer());
    h.acquired_at = steady_now - std::chrono::microseconds(i.now_us - hs.at(k + 2).integer());
    if (const long long exp = hs.at(k + 3).integer(); exp > 0)
      h.expires_at = steady_now + std::chrono::microseconds(exp - i.now_us);
    h.pid = static_cast<int>(hs.at(k + 4).integer());
    h.host = std::string(hs.at(k + 5).str());
    const std::string_view state = hs.at(k + 6).str();
    h.state = state == "expired" ? HolderState::expired
              : state == "dead"  ? HolderState::dead
                                 : HolderState::alive;
    i.holders.push_back(std::move(h));
  }
  std::sort(i.holders.begin(), i.holders.end(),
            [](const Holder& a, const Holder& b) { return a.permit_id < b.permit_id; });
  {
    std::lock_guard g(s.mu);
    s.last_cap = static_cast<int>(field(i, "cap"));
    s.last_used = static_cast<int>(field(i, "used"));
  }
  return i;
}

figures figures_of(const info_reply& i) {
  figures f;
  f.capacity = static_cast<int>(field(i, "cap"));
  f.used = static_cast<int>(field(i, "used"));
  f.waiters = i.waiters;
  // The average as of now: the time since its last change folded in at
  // the current use, as the scripts do.
  const double u = static_cast<double>(f.used) / std::max(1, f.capacity);
  const double ew = field_double(i, "ew");
  const double dt = static_cast<double>(i.now_us - field(i, "ewt"));
  f.smoothed = dt > 0 ? u + (ew - u) * std::pow(0.5, dt / 1e7) : ew;
  return f;
}

void read_histogram(const info_reply& i, char prefix, Histogram& h) {
  for (std::size_t b = 0; b < h.counts.size(); ++b)
    h.counts[b] = static_cast<std::uint64_t>(field(i, std::string(1, prefix) + std::to_string(b)));
  h.sum_seconds = static_cast<double>(field(i, std::string(1, prefix) + "s")) / 1e6;
}

Stats stats_of(const info_reply& i) {
  Stats st;
  auto u = [&](const char* name) { return static_cast<std::uint64_t>(field(i, name)); };
  st.acquired = u("acquired");
  st.released = u("released");
  st.timeouts = u("timeouts");
  st.cancelled = u("cancelled");
  st.shutdowns = u("shutdowns");
  st.rejected = u("rejected");
  st.try_failures = u("try_failures");
  st.reaped = u("reaped");
  st.expired = u("expired");
  st.force_released = u("force_released");
  st.reclaimed_seats = u("reclaimed_seats");
  st.recoveries = u("recoveries");
  read_histogram(i, 'w', st.wait);
  read_histogram(i, 'h', st.hold);
  return st;
}

}  // namespace

figures read_figures(const handle& h) noexcept {
  state_ptr s;
  try {
    s = state_of(h);
    return figures_of(read_info(*s, false));
  } catch (const std::exception& e) {
    log().debug("{}; using the last values read", e.what());
  }
  figures f;
  if (s) {
    std::lock_guard g(s->mu);
    f.capacity = s->last_cap;
    f.used = s->last_used;
    f.smoothed = static_cast<double>(f.used) / std::max(1, f.capacity);
  }
  return f;
}

Stats stats(const handle& h) {
  return stats_of(read_info(*state_of(h), false));
}

std::vector<Holder> holders(const handle& h) {
  return read_info(*state_of(h), true).holders;
}

Snapshot snapshot(const handle& h) {
  info_reply i = read_info(*state_of(h), true);
  Snapshot s = figures_of(i).snapshot_of(h.b->key());
  s.stats = stats_of(i);
  s.holders = std::move(i.holders);
  return s;
}

// ---------------------------------------------------------------------------
// Administration

namespace {

// Runs an administrative script; its "ok" reply, or SegmentError.
reply admin(semaphore_state& s, const script& sc, const std::vector<std::string>& args,
            const char* doing) {
  reply r;
  try {
    r = run(s, sc, args);
  } catch (const io_error& e) {
    throw_io(s, doing, e);
  }
  const std::string_view st = r.at(0).str();
  if (st == "absent")
    throw SegmentError(make_error_code(errc::not_found),
                       "shmsem: " + std::string(doing) + " of '" + s.where.display +
                           "': it is no longer in Redis (data lost?)");
  if (st != "ok")
    throw SegmentError(
        make_error_code(errc::bad_segment),
        "shmsem: " + std::string(doing) + " of '" + s.where.display + "': " + foreign_data(s, r));
  return r;
}

}  // namespace

int reap(handle& h) {
  state_ptr s = state_of(h);
  return static_cast<int>(admin(*s, scripts::reap(), {}, "cannot reap").at(1).integer());
}

void set_capacity(handle& h, int permits) {
  state_ptr s = state_of(h);
  try {
    // Re-create a semaphore whose data was lost with the new capacity.
    run(*s, scripts::open(), {std::to_string(permits), new_epoch()});
  } catch (const io_error& e) {
    throw_io(*s, "cannot resize", e);
  }
  admin(*s, scripts::resize(), {std::to_string(permits)}, "cannot resize");
  std::lock_guard g(s->mu);
  s->last_cap = permits;
}

int force_release_all(handle& h) {
  state_ptr s = state_of(h);
  const int displaced = static_cast<int>(
      admin(*s, scripts::force_release(), {}, "cannot force-release").at(1).integer());
  if (displaced > 0)
    log().warn("semaphore '{}': force_release_all displaced {} live lease{}", s->where.display,
               displaced, displaced == 1 ? "" : "s");
  return displaced;
}

bool wait_idle(handle& h, std::chrono::milliseconds timeout) {
  state_ptr sp = state_of(h);
  semaphore_state& s = *sp;
  const std::int64_t deadline =
      sys::precise_now_ns() + std::chrono::nanoseconds(std::max(timeout, {})).count();
  if (read_figures(h).used == 0) return true;
  if (timeout.count() <= 0) return false;
  // Registered, the last release publishes "idle", and the keeper renews
  // this session (reaping dead holders and expired leases as it does).
  {
    std::lock_guard g(s.mu);
    ++s.idle_watchers;
  }
  keeper::get().watch(sp);
  auto registration = [&](int delta) {
    std::string sid, ms;
    {
      std::lock_guard g(s.mu);
      sid = s.sid;
      ms = std::to_string(s.session_ms);
    }
    std::int64_t sent_at = 0;
    reply r = run(s, scripts::idle(), {sid, ms, std::to_string(delta)}, &sent_at);
    if (r.at(0).str() == "ok") touched(s, sent_at);
    return r;
  };
  bool idle = false;
  try {
    const reply r = registration(+1);
    idle = r.at(0).str() == "ok" && r.at(1).integer() == 0;
    while (!idle) {
      std::uint64_t seen;
      {
        std::unique_lock lk(s.mu);
        seen = s.events;
        const std::int64_t now = sys::precise_now_ns();
        if (now >= deadline) break;
        s.cv.wait_for(lk, std::chrono::nanoseconds(deadline - now),
                      [&] { return s.events != seen; });
        if (s.events == seen) break;  // timed out
      }
      idle = read_figures(h).used == 0;
    }
    registration(-1);
  } catch (const io_error& e) {
    log().debug("semaphore '{}': wait_idle: {}", s.where.display, e.what());
  }
  {
    std::lock_guard g(s.mu);
    --s.idle_watchers;
  }
  return idle;
}

void shutdown(handle& h) {
  state_ptr s = static_cast<server_backend&>(*h.b).state.load();
  if (s->fork_gen != fork_generation()) return;
  std::lock_guard g(s->mu);
  for (lease* l : s->leases)
    if (l->handle_id == h.id) l->auto_renew = false;
  s->cv.notify_all();
}

// ---------------------------------------------------------------------------
// Permits

namespace {

std::string not_held_message(const lease& l, const std::string& why) {
  return "shmsem: permit " + std::to_string(l.id) + " of '" + l.sem->where.display +
         "' was not held at release: " + why;
}

}  // namespace

void release(Permit& p) {
  auto* l = static_cast<lease*>(lease_access::take(p));
  if (l->fork_gen != fork_generation()) {
    // The parent's: its session, its seats. Leave them alone.
    const std::string msg = not_held_message(*l,
                                             "it belongs to the parent process (permits are "
                                             "not inherited by fork)");
    abandon(std::move(l->sem));
    throw PermitNotHeldError(msg, true);
  }
  std::unique_ptr<lease> owned(l);
  semaphore_state& s = *l->sem;
  std::string epoch, known_loss;
  {
    std::lock_guard g(s.mu);
    std::erase(s.leases, l);
    l->auto_renew = false;
    epoch = l->epoch;
    if (l->lost) known_loss = l->why;
  }
  auto lost = [&](const std::string& raw) {
    const std::string why = describe_loss(raw);
    bool tell;
    {
      std::lock_guard g(s.mu);
      tell = !l->loss_reported;
      l->loss_reported = true;
    }
    if (tell) notify(l->observer, [&](Observer& o) { o.on_lost(s.where.display, l->id, why); });
    return PermitNotHeldError(
        not_held_message(*l, why + "; for that period the bound was not held"));
  };
  // Even a lease known to be lost goes to Redis: an expired one is
  // reclaimed there now, and the reply says why it was lost.
  reply r;
  std::int64_t sent_at = 0;
  try {
    r = run(s, scripts::release(),
            {epoch, s.sid, std::to_string(s.session_ms), std::to_string(l->id)}, &sent_at);
  } catch (const io_error& e) {
    if (!known_loss.empty()) throw lost(known_loss);
    {
      std::lock_guard g(s.mu);
      s.releases.push_back(std::to_string(l->id));
    }
    keeper::get().watch(l->sem);
    throw SegmentError(e.code(), "shmsem: cannot release permit " + std::to_string(l->id) +
                                     " of '" + s.where.display + "' now: " + e.what() +
                                     "; it is released when Redis answers again, or when this "
                                     "process's session lapses");
  }
  const std::string_view st = r.at(0).str();
  if (st == "ok") {
    touched(s, sent_at);
    const int used = static_cast<int>(r.at(1).integer());
    const int cap = static_cast<int>(r.at(2).integer());
    {
      std::lock_guard g(s.mu);
      s.last_used = used;
      s.last_cap = cap;
    }
    notify(l->observer, [&](Observer& o) {
      o.on_release(
          ReleaseEvent{s.where.display, cap, l->weight, used, l->id, lease_access::held_for(p)});
    });
    return;
  }
  if (st == "lost") {
    touched(s, sent_at);
    throw lost(std::string(r.at(1).str()));
  }
  throw SegmentError(make_error_code(errc::bad_segment),
                     "shmsem: cannot release permit " + std::to_string(l->id) + " of '" +
                         s.where.display + "': " + foreign_data(s, r));
}

void extend(Permit& p, std::chrono::milliseconds ttl) {
  lease& l = *static_cast<lease*>(lease_access::get(p));
  const std::string prefix = "shmsem: cannot extend permit " + std::to_string(l.id) + " of '" +
                             l.sem->where.display + "': ";
  if (l.fork_gen != fork_generation())
    throw ExtensionError(prefix +
                         "it belongs to the parent process (permits are not inherited "
                         "by fork)");
  semaphore_state& s = *l.sem;
  std::string epoch;
  {
    std::lock_guard g(s.mu);
    if (l.lost) throw ExtensionError(prefix + describe_loss(l.why));
    epoch = l.epoch;
  }
  reply r;
  std::int64_t sent_at = 0;
  try {
    r = run(s, scripts::extend(),
            {epoch, s.sid, std::to_string(s.session_ms), std::to_string(l.id),
             std::to_string(ttl.count())},
            &sent_at);
  } catch (const io_error& e) {
    throw_io(s, "cannot extend permit " + std::to_string(l.id), e);
  }
  const std::string_view st = r.at(0).str();
  if (st == "ok") {
    touched(s, sent_at);
    const std::int64_t exp = sent_at + ms_ns(ttl.count());
    bool poke;
    {
      std::lock_guard g(s.mu);
      l.ttl_ms = ttl.count();
      l.renewed_ns = sent_at;
      l.expires_ns.store(exp);
      poke = l.auto_renew;
    }
    lease_access::set_ttl(p, ttl.count(), exp);
    if (poke) keeper::get().poke();  // a shorter TTL renews sooner
    return;
  }
  if (st != "lost") throw ExtensionError(prefix + foreign_data(s, r));
  std::optional<loss_note> note;
  {
    std::lock_guard g(s.mu);
    s.mark_lost(l, std::string(r.at(1).str()));
    note = s.take_loss_note(l);
  }
  if (note) s.tell(*note);
  throw ExtensionError(prefix + describe_loss(std::string(r.at(1).str())));
}

bool is_held(const lease& cl) noexcept {
  auto& l = const_cast<lease&>(cl);
  if (l.fork_gen != fork_generation()) return false;
  semaphore_state& s = *l.sem;
  std::string epoch;
  {
    std::lock_guard g(s.mu);
    if (l.lost) return false;
    epoch = l.epoch;
  }
  try {
    const reply r = run(s, scripts::held(), {epoch, std::to_string(l.id)});
    const std::string_view st = r.at(0).str();
    if (st == "ok") return true;
    if (st == "lost") {
      std::optional<loss_note> note;
      {
        std::lock_guard g(s.mu);
        s.mark_lost(l, std::string(r.at(1).str()));
        note = s.take_loss_note(l);
      }
      if (note) s.tell(*note);
      return false;
    }
  } catch (const std::exception& e) {
    log().debug("semaphore '{}': is_held: {}", s.where.display, e.what());
  }
  // No answer: judge by what this process knows, erring towards "lost".
  std::lock_guard g(s.mu);
  const std::int64_t now = sys::precise_now_ns();
  const std::int64_t exp = l.expires_ns.load();
  return now < s.session_deadline_ns() && (exp == 0 || exp > now);
}

std::optional<Permit::clock::time_point> expires_at(const lease& l) noexcept {
  const std::int64_t exp = l.expires_ns.load();
  if (exp == 0) return std::nullopt;
  return Permit::clock::time_point(std::chrono::nanoseconds(exp));
}

bool auto_renewing(const lease& l) noexcept {
  if (l.fork_gen != fork_generation()) return false;
  std::lock_guard g(l.sem->mu);
  return l.auto_renew && !l.lost;
}

void stop_auto_renew(lease& l) noexcept {
  if (l.fork_gen != fork_generation()) return;
  std::lock_guard g(l.sem->mu);
  l.auto_renew = false;
}

std::string_view key(const lease& l) noexcept {
  return l.sem->where.display;
}

// ---- the interface of base/backend.hpp --------------------------------------------------

namespace {

constexpr Capabilities kCapabilities{
    .reads_without_io = false,
    .barging = false,
    .fencing = true,
    .process_liveness = false,
    .segment_file = false,
};

bool claims(std::string_view key) noexcept {
  try {
    const std::optional<std::string> scheme = url_scheme(key);
    // rediss:// too, so that open() refuses it with advice on TLS.
    return scheme && (*scheme == "redis" || *scheme == "redis+unix" || *scheme == "rediss");
  } catch (...) {
    return true;  // out of memory: parse() will say so
  }
}

bool names_server(std::string_view text) noexcept {
  try {
    return parse(text, false).key.empty();
  } catch (...) {
    return false;
  }
}

std::unique_ptr<backend> open_backend(std::string_view key, int permits, const Options& options) {
  return open(key, permits, options);
}

}  // namespace

const backend_kind kind{.name = "Redis",
                        .schemes = "redis://, redis+unix://",
                        .capabilities = kCapabilities,
                        .claims = &claims,
                        .check = nullptr,
                        .open = &open_backend,
                        .remove = &remove,
                        .list = &list,
                        .names_server = &names_server,
                        .shutdown_all = nullptr};

Capabilities server_backend::capabilities() const noexcept {
  return kCapabilities;
}
attempt server_backend::acquire(handle& h, const acquisition& q, const AcquireOptions& opts) {
  return redis::acquire(h, q.n, q.ttl_ms, q.renew, opts);
}
attempt server_backend::try_acquire(handle& h, const acquisition& q) {
  return redis::try_acquire(h, q.n, q.ttl_ms, q.renew);
}
figures server_backend::read_figures(const handle& h) noexcept {
  return redis::read_figures(h);
}
Stats server_backend::stats(const handle& h) {
  return redis::stats(h);
}
std::vector<Holder> server_backend::holders(const handle& h) {
  return redis::holders(h);
}
Snapshot server_backend::snapshot(const handle& h) {
  return redis::snapshot(h);
}
// Redis has no lock for an administrative call to wait for: each is one
// script, bounded by the connection's timeouts.
int server_backend::reap(handle& h, std::optional<std::chrono::milliseconds>) {
  return redis::reap(h);
}
void server_backend::set_capacity(handle& h, int n, std::optional<std::chrono::milliseconds>) {
  redis::set_capacity(h, n);
}
int server_backend::force_release_all(handle& h, std::optional<std::chrono::milliseconds>) {
  return redis::force_release_all(h);
}
bool server_backend::wait_idle(handle& h, std::chrono::milliseconds timeout) {
  return redis::wait_idle(h, timeout);
}
void server_backend::shutdown(handle& h) {
  redis::shutdown(h);
}

std::string_view lease::key_of(const Permit&) const noexcept {
  return redis::key(*this);
}
bool lease::is_held(const Permit&) const noexcept {
  return redis::is_held(*this);
}
std::optional<Permit::clock::time_point> lease::expires_at(const Permit&) const noexcept {
  return redis::expires_at(*this);
}
bool lease::auto_renewing(const Permit&) const noexcept {
  return redis::auto_renewing(*this);
}
void lease::stop_auto_renew(Permit&) noexcept {
  redis::stop_auto_renew(*this);
}
void lease::extend(Permit& p, std::chrono::milliseconds ttl) {
  redis::extend(p, ttl);
}
void lease::release(Permit& p) {
  redis::release(p);
}

}  // namespace shmsem::detail::redis
