// redis/session.cpp: one process's session with one Redis semaphore (see
// session.hpp).

#include "redis/session.hpp"

#include <poll.h>
#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <set>
#include <thread>

#include "base/log.hpp"
#include "redis/scripts.hpp"
#include "sys/clock.hpp"
#include "sys/proc.hpp"
#include "sys/socket.hpp"

namespace shmsem::detail {
extern std::atomic<bool> process_shut_down;
}

namespace shmsem::detail::redis {

namespace {

struct state_registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<semaphore_state>> states;
};

// Never destroyed, replaced in a forked child (see client.cpp).
state_registry* the_states = nullptr;
std::once_flag states_once;

state_registry& states() {
  std::call_once(states_once, [] {
    the_states = new state_registry;
    ::pthread_atfork(nullptr, nullptr, [] { the_states = new state_registry; });
  });
  return *the_states;
}

}  // namespace

std::string host_name() {
  if (const char* h = std::getenv("SHMSEM_HOST"); h && *h) return h;
  return sys::host_name();
}

std::string describe_loss(const std::string& why) {
  const auto bar = why.find('|');
  std::string cause = why.substr(0, bar);
  if (cause == "expired") return "its TTL ran out";
  if (cause == "reaped")
    return "its session lapsed (the holder was dead, stopped or cut off from Redis for longer "
           "than the session timeout)";
  if (cause == "force_released") return "it was force-released";
  if (cause == "data")
    return "Redis lost the semaphore's data (a restart without persistence, a flush, a deleted "
           "key or a failover); the capacity was re-created";
  if (cause == "unknown") return "it is no longer in Redis (the reason is no longer recorded)";
  return cause;
}

namespace {

// A decimal id with nothing around it (ids are never 0).
std::optional<std::uint64_t> parse_id(std::string_view s) {
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v == 0)
    return std::nullopt;
  return v;
}

// A capacity as the scripts print it, or -1.
int parse_cap(std::string_view s) {
  int v = -1;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size() && v >= 0 ? v : -1;
}

}  // namespace

waiter_status parse_waiter_status(std::string_view st) {
  // Whole words first: "gone" also starts with 'g', the grant's tag.
  if (st == "gone") return {waiter_status::gone, 0, -1};
  if (st == "q") return {waiter_status::queued, 0, -1};
  if (st.starts_with('r')) return {waiter_status::rejected, 0, parse_cap(st.substr(1))};
  if (st.size() > 1 && st[0] == 'g')
    if (auto id = parse_id(st.substr(1))) return {waiter_status::granted, *id, -1};
  return {waiter_status::unknown, 0, -1};
}

std::optional<wait_event> parse_wait_event(std::string_view tok) {
  if (tok.size() < 2 || (tok[0] != 'g' && tok[0] != 'r')) return std::nullopt;
  const auto colon = tok.find(':');
  const auto wid = parse_id(tok.substr(1, colon == std::string_view::npos ? tok.npos : colon - 1));
  if (!wid) return std::nullopt;
  const std::string_view after =
      colon == std::string_view::npos ? std::string_view() : tok.substr(colon + 1);
  if (tok[0] == 'r') return wait_event{*wid, 0, parse_cap(after)};
  const auto id = parse_id(after);
  if (!id) return std::nullopt;
  return wait_event{*wid, *id, -1};
}

semaphore_state::semaphore_state(std::shared_ptr<client> c, url u)
    : cli(std::move(c)),
      where(std::move(u)),
      sid(random_id(20)),
      meta(meta_key(where.key)),
      keys(scripts::keys(meta)),
      channel(meta + ":ev:" + sid),
      idle_channel(meta + ":ev-idle"),
      host(host_name()),
      pid(sys::self_pid()),
      fork_gen(fork_generation()) {}

semaphore_state::~semaphore_state() = default;

void semaphore_state::saw_epoch(const std::string& e, std::vector<lease*>* newly_lost) {
  if (e == epoch) return;
  if (!epoch.empty()) {
    for (lease* l : leases)
      if (l->epoch != e && mark_lost(*l, "data") && newly_lost) newly_lost->push_back(l);
    for (auto& [wid, w] : waiters) {
      if (w->st != waiter::state::waiting) continue;
      w->st = waiter::state::gone;
      w->error = describe_loss("data");
    }
    releases.clear();
    abandoned.clear();
    claimed.clear();
    voided.clear();
    cv.notify_all();
  }
  epoch = e;
}

bool semaphore_state::mark_lost(lease& l, const std::string& why) {
  if (l.lost) return false;
  l.lost = true;
  l.why = why;
  l.auto_renew = false;
  return true;
}

std::optional<loss_note> semaphore_state::take_loss_note(lease& l) {
  if (!l.lost || l.loss_reported) return std::nullopt;
  l.loss_reported = true;
  return loss_note{l.id, describe_loss(l.why), l.observer};
}

void semaphore_state::tell(const loss_note& n) const {
  log().warn("semaphore '{}': permit {} was lost: {}", where.display, n.id, n.why);
  notify(n.observer, [&](Observer& o) { o.on_lost(where.display, n.id, n.why); });
}

void semaphore_state::add_waiter(waiter& w) {
  waiters[w.wid] = &w;
  auto it = early.find(w.wid);
  if (it == early.end()) return;
  const wait_event& ev = it->second.ev;
  w.st = ev.lease_id ? waiter::state::granted : waiter::state::rejected;
  w.lease_id = ev.lease_id;
  w.cap = ev.cap;
  w.heard_late = it->second.late;
  early.erase(it);
}

void semaphore_state::renewed(std::int64_t sent_at, std::uint64_t own_wid) {
  if (sys::precise_now_ns() >= session_deadline_ns()) {
    for (auto& [wid, w] : waiters)
      if (w->st == waiter::state::granted && wid != own_wid) w->heard_late = true;
    for (auto& [wid, e] : early)
      if (wid != own_wid) e.late = true;
  }
  touched_ns = std::max(touched_ns, sent_at);
}

bool semaphore_state::active() const {
  return !leases.empty() || !waiters.empty() || idle_watchers > 0 || !releases.empty() ||
         !abandoned.empty() || !voided.empty();
}

std::shared_ptr<semaphore_state> state_for(const url& u) {
  auto& r = states();
  std::lock_guard g(r.mu);
  auto& slot = r.states[u.ep.identity() + '\n' + u.key];
  if (auto s = slot.lock()) return s;
  auto s = std::make_shared<semaphore_state>(client::get(u.ep), u);
  slot = s;
  return s;
}

// ---------------------------------------------------------------------------
// The keeper

namespace {

struct schedule {
  std::int64_t backoff_ns = 0;
  std::int64_t retry_ns = 0;  // after a failure: not before
};

struct subscriber {
  std::shared_ptr<client> cli;
  std::unique_ptr<connection> conn;
  std::set<std::string> sent;  // SUBSCRIBEd on this connection
  std::map<std::string, std::weak_ptr<semaphore_state>> by_channel;
  std::int64_t retry_ns = 0;
  std::int64_t backoff_ns = 0;
  bool refused = false;      // a SUBSCRIBE was refused (logged once)
  bool probe = false;        // a message was missed: PING the connection
  std::int64_t ping_ns = 0;  // when the unanswered PING was sent, or 0
};

constexpr std::int64_t kMinBackoffNs = 20'000'000;
constexpr std::int64_t kMaxBackoffNs = 1'000'000'000;
constexpr std::int64_t kEarlyKeepNs = 60'000'000'000;
// A subscriber that does not answer a PING in this time is dead (a
// black-holed connection never says so by itself).
constexpr std::int64_t kPingTimeoutNs = 1'000'000'000;

std::int64_t next_backoff(std::int64_t b, std::int64_t cap) {
  return std::min(std::max(kMinBackoffNs, b * 2), std::max(kMinBackoffNs, cap));
}

}  // namespace

struct keeper::impl {
  std::mutex mu;  // guards watched
  std::vector<std::shared_ptr<semaphore_state>> watched;
  int efd = -1;
  // Keeper thread only:
  std::map<semaphore_state*, schedule> sched;
  std::map<std::string, subscriber> subs;  // by client identity

  void renew(const std::shared_ptr<semaphore_state>& s, schedule& sc);
  std::int64_t due(semaphore_state& s, const schedule& sc, std::int64_t now);
  void serve_subscribers(const std::vector<std::shared_ptr<semaphore_state>>& live,
                         std::vector<pollfd>& fds, std::vector<subscriber*>& owners,
                         std::int64_t& wake_at);
  void read_subscriber(subscriber& sub);
  void drop_subscriber(subscriber& sub, const std::string& why);
};

keeper& keeper::get() {
  static keeper* the_keeper = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    the_keeper = new keeper;
    // The thread does not exist in a forked child: start afresh there.
    ::pthread_atfork(nullptr, nullptr, [] { the_keeper = new keeper; });
  });
  return *the_keeper;
}

keeper::keeper() : impl_(new impl) {
  impl_->efd = sys::event_open();
  std::thread([this] { run(); }).detach();
}

void keeper::watch(const std::shared_ptr<semaphore_state>& s) {
  {
    std::lock_guard g(impl_->mu);
    if (std::find(impl_->watched.begin(), impl_->watched.end(), s) == impl_->watched.end())
      impl_->watched.push_back(s);
    std::lock_guard sg(s->mu);
    s->watched = true;
  }
  poke();
}

void keeper::poke() {
  sys::event_poke(impl_->efd);
}

std::int64_t keeper::impl::due(semaphore_state& s, const schedule& sc, std::int64_t now) {
  std::lock_guard g(s.mu);
  if (!s.active()) return sys::kNever;
  if (sc.retry_ns > 0) return sc.retry_ns;
  if (s.check_now || !s.releases.empty() || !s.abandoned.empty() || !s.voided.empty()) return now;
  std::int64_t d = s.touched_ns + ms_ns(s.session_ms) / 3;
  if (s.no_channels && (!s.waiters.empty() || s.idle_watchers > 0))
    d = std::min(d, s.touched_ns + kPollWithoutChannelsNs);
  for (const lease* l : s.leases)
    if (l->auto_renew && l->ttl_ms > 0)
      d = std::min(d, l->renewed_ns + std::max<std::int64_t>(ms_ns(l->ttl_ms) / 3, 1'000'000));
  if ((!s.waiters.empty() || s.idle_watchers > 0) && s.expiry_due_ns > 0)
    d = std::min(d, s.expiry_due_ns);
  return d;
}

namespace {

// One renewal script's arguments, and what they covered: the reply is
// matched against these, whatever changed in the state since.
struct renewal {
  std::vector<std::string> args;
  std::vector<lease*> leases;
  std::vector<std::uint64_t> waiters;
  std::size_t voided = 0, releases = 0, abandoned = 0, claimed = 0;
  std::int64_t deadline = 0;
};

// What a renewal tells the process, once the state's lock is let go.
struct renewal_outcome {
  std::vector<lease*> lost;
  std::vector<std::string> heard;  // grants in the reply, for the log
};

// The renewal of `s` as it stands, or nothing when there is no session
// to keep: nothing was ever granted here in this epoch (or the data was
// lost and seen). Under s.mu.
std::optional<renewal> prepare_renewal(semaphore_state& s) {
  s.check_now = false;
  if (s.epoch.empty()) {
    s.releases.clear();
    s.abandoned.clear();
    s.voided.clear();
    return std::nullopt;
  }
  renewal rn;
  rn.args = {s.epoch, s.sid, std::to_string(s.session_ms)};
  auto put = [&](const std::vector<std::string>& v) {
    rn.args.push_back(std::to_string(v.size()));
    rn.args.insert(rn.args.end(), v.begin(), v.end());
  };
  put(s.voided);
  put(s.releases);
  put(s.abandoned);
  put(s.claimed);
  rn.voided = s.voided.size();
  rn.releases = s.releases.size();
  rn.abandoned = s.abandoned.size();
  rn.claimed = s.claimed.size();
  rn.args.push_back(std::to_string(s.leases.size()));
  for (lease* l : s.leases) {
    rn.args.push_back(std::to_string(l->id));
    const bool renew = l->auto_renew && !process_shut_down.load(std::memory_order_relaxed);
    rn.args.push_back(std::to_string(renew ? l->ttl_ms : 0));
    rn.leases.push_back(l);
  }
  const std::size_t count_at = rn.args.size();
  rn.args.emplace_back();
  for (auto& [wid, w] : s.waiters) {
    if (w->st != waiter::state::waiting) continue;
    rn.args.push_back(std::to_string(wid));
    rn.waiters.push_back(wid);
  }
  rn.args[count_at] = std::to_string(rn.waiters.size());
  rn.deadline = sys::precise_now_ns() + s.connect_timeout_ns;
  return rn;
}

// Redis could not be reached: back off, and once the session must have
// lapsed on the server, what it held and queued is gone. Under s.mu.
void renewal_failed(semaphore_state& s, schedule& sc, const std::string& failure,
                    renewal_outcome& out) {
  const std::int64_t now = sys::precise_now_ns();
  if (sc.backoff_ns == 0)
    log().warn("semaphore '{}': cannot renew the session: {}", s.where.display, failure);
  sc.backoff_ns = next_backoff(sc.backoff_ns, ms_ns(s.session_ms) / 3);
  sc.retry_ns = now + sc.backoff_ns;
  if (now < s.session_deadline_ns()) return;
  const std::string why =
      "no contact with Redis for longer than the session timeout (" + failure + ")";
  for (lease* l : s.leases)
    if (s.mark_lost(*l, "reaped")) out.lost.push_back(l);
  for (auto& [wid, w] : s.waiters) {
    if (w->st != waiter::state::waiting) continue;
    w->st = waiter::state::gone;
    w->lapsed = true;
    w->error = why;
  }
  s.cv.notify_all();
}

// The state of each lease the renewal covered, from reply `ls`: renewed
// until its TTL, or lost. Under s.mu.
void settle_leases(semaphore_state& s, const renewal& rn, const reply& ls, std::int64_t sent_at,
                   renewal_outcome& out) {
  for (std::size_t i = 0; i < rn.leases.size(); ++i) {
    lease* l = rn.leases[i];
    if (std::find(s.leases.begin(), s.leases.end(), l) == s.leases.end()) continue;
    const std::string st(ls.at(i).str());
    if (st == "ok") {
      if (l->auto_renew && l->ttl_ms > 0) {
        l->renewed_ns = sent_at;
        l->expires_ns.store(sent_at + ms_ns(l->ttl_ms));
      }
    } else if (s.mark_lost(*l, st)) {
      out.lost.push_back(l);
    }
  }
}

// The state of each wait the renewal covered, from reply `ws`: a grant or
// a rejection the subscriber should have heard, or a place lost with a
// lapsed session. Under s.mu.
void settle_waiters(semaphore_state& s, const renewal& rn, const reply& ws, renewal_outcome& out) {
  for (std::size_t i = 0; i < rn.waiters.size(); ++i) {
    auto it = s.waiters.find(rn.waiters[i]);
    if (it == s.waiters.end() || it->second->st != waiter::state::waiting) continue;
    waiter& w = *it->second;
    switch (const waiter_status got = parse_waiter_status(ws.at(i).str()); got.kind) {
      case waiter_status::granted:
        w.st = waiter::state::granted;
        w.lease_id = got.lease_id;
        out.heard.push_back(std::to_string(w.wid) + " of lease " + std::to_string(w.lease_id));
        if (s.subscribed) s.missed_message = true;
        break;
      case waiter_status::rejected:
        w.st = waiter::state::rejected;
        w.cap = got.cap;
        if (s.subscribed) s.missed_message = true;
        break;
      case waiter_status::gone:
        // Its session lapsed (it was stopped or cut off) and was reaped
        // with its place in the queue: it starts over.
        w.st = waiter::state::gone;
        w.lapsed = true;
        w.error = "its place in the queue was lost: " + describe_loss("reaped");
        break;
      case waiter_status::queued:
      case waiter_status::unknown:
        break;
    }
  }
}

// The server answered the renewal. Under s.mu.
void renewal_answered(semaphore_state& s, schedule& sc, const renewal& rn, const reply& r,
                      std::int64_t sent_at, renewal_outcome& out) {
  if (sc.backoff_ns != 0) log().info("semaphore '{}': session renewed again", s.where.display);
  sc.backoff_ns = 0;
  sc.retry_ns = 0;
  if (r.at(0).str() == "ok") {
    s.renewed(sent_at);
    auto drop_sent = [](std::vector<std::string>& v, std::size_t n) {
      v.erase(v.begin(), v.begin() + static_cast<long>(n));
    };
    drop_sent(s.voided, rn.voided);
    drop_sent(s.releases, rn.releases);
    drop_sent(s.abandoned, rn.abandoned);
    drop_sent(s.claimed, rn.claimed);
    settle_leases(s, rn, r.at(1), sent_at, out);
    settle_waiters(s, rn, r.at(2), out);
    s.last_used = static_cast<int>(r.at(3).integer());
    s.last_cap = static_cast<int>(r.at(4).integer());
    const long long next = r.at(5).integer();
    s.expiry_due_ns = next < 0 ? 0 : sent_at + ms_ns(next);
  } else {
    // "epoch", "absent", "garbage", "format" or "wrongtype": the data these
    // permits were granted in is gone. An acquire may have seen the new
    // epoch first, and what it got there stays.
    s.saw_epoch(r.at(0).str() == "epoch" ? std::string(r.at(1).str()) : std::string(), &out.lost);
  }
  ++s.events;
  s.cv.notify_all();
}

}  // namespace

void keeper::impl::renew(const std::shared_ptr<semaphore_state>& sp, schedule& sc) {
  semaphore_state& s = *sp;
  std::optional<renewal> rn;
  {
    std::lock_guard g(s.mu);
    rn = prepare_renewal(s);
  }
  if (!rn) return;
  const std::int64_t sent_at = sys::precise_now_ns();
  reply r;
  std::string failure;
  try {
    r = s.cli->eval(scripts::renew(), s.keys, rn->args, rn->deadline);
    if (r.is_error()) failure = std::string(r.str());
  } catch (const io_error& e) {
    failure = e.what();
  }
  renewal_outcome out;
  {
    std::lock_guard g(s.mu);
    if (failure.empty())
      renewal_answered(s, sc, *rn, r, sent_at, out);
    else
      renewal_failed(s, sc, failure, out);
  }
  std::vector<loss_note> notes;
  {
    // The leases may have been released meanwhile: only those still here.
    std::lock_guard g(s.mu);
    for (lease* l : out.lost)
      if (std::find(s.leases.begin(), s.leases.end(), l) != s.leases.end())
        if (auto n = s.take_loss_note(*l)) notes.push_back(std::move(*n));
  }
  for (const auto& n : notes) s.tell(n);
  for (const auto& what : out.heard)
    log().debug("semaphore '{}': a renewal found the grant to wait {}", s.where.display, what);
}

void keeper::impl::drop_subscriber(subscriber& sub, const std::string& why) {
  if (sub.conn)
    log().warn("Redis {}: lost the pub/sub connection: {}", sub.cli->seed().where(), why);
  sub.conn.reset();
  sub.sent.clear();
  sub.ping_ns = 0;
  sub.probe = false;
  sub.backoff_ns = next_backoff(sub.backoff_ns, kMaxBackoffNs);
  sub.retry_ns = sys::precise_now_ns() + sub.backoff_ns;
  // Messages may have been missed: every state on it checks at once.
  for (auto& [ch, w] : sub.by_channel)
    if (auto s = w.lock()) {
      std::lock_guard g(s->mu);
      s->subscribed = false;
    }
}

void keeper::impl::read_subscriber(subscriber& sub) {
  std::vector<reply> msgs;
  try {
    msgs = sub.conn->read_ready();
  } catch (const io_error& e) {
    drop_subscriber(sub, e.what());
    return;
  }
  // Told to the log after the state's lock is let go (a sink may block).
  std::vector<std::pair<std::string, std::string>> heard;  // semaphore, grant
  for (const reply& m : msgs) {
    if (m.is_error()) {
      // SUBSCRIBE refused (an ACL without the channels): the waiters poll.
      if (!sub.refused)
        log().warn("Redis {}: SUBSCRIBE refused: {}; waiters learn of their grants by polling",
                   sub.cli->seed().where(), m.str());
      sub.refused = true;
      continue;
    }
    const std::string_view type = m.at(0).str();
    if (type == "pong") {
      sub.ping_ns = 0;
      continue;
    }
    const std::string channel(m.at(1).str());
    auto it = sub.by_channel.find(channel);
    if (it == sub.by_channel.end()) continue;
    auto s = it->second.lock();
    if (!s) continue;
    std::lock_guard g(s->mu);
    if (type == "subscribe") {
      if (channel == s->channel) {
        s->subscribed = true;
        // A grant published before this moment was missed: ask for it.
        if (!s->waiters.empty()) s->check_now = true;
      }
      ++s->events;
      s->cv.notify_all();
      continue;
    }
    if (type != "message") continue;
    ++s->events;
    if (channel == s->channel) {
      const std::string_view payload = m.at(2).str();
      std::size_t pos = 0;
      const std::int64_t now = sys::precise_now_ns();
      while (pos < payload.size()) {
        auto end = payload.find(' ', pos);
        if (end == std::string_view::npos) end = payload.size();
        const std::string tok(payload.substr(pos, end - pos));
        pos = end + 1;
        const auto ev = parse_wait_event(tok);
        if (!ev) continue;
        auto w = s->waiters.find(ev->wid);
        if (w != s->waiters.end()) {
          if (w->second->st != waiter::state::waiting) continue;
          w->second->st = ev->lease_id ? waiter::state::granted : waiter::state::rejected;
          w->second->lease_id = ev->lease_id;
          w->second->cap = ev->cap;
          w->second->heard_late = now >= s->session_deadline_ns();
          if (ev->lease_id)
            heard.emplace_back(s->where.display, std::to_string(ev->wid) + " of lease " +
                                                     std::to_string(ev->lease_id) +
                                                     (w->second->heard_late ? ", late" : ""));
        } else {
          // The acquire that queued it has not registered yet.
          std::erase_if(s->early,
                        [&](const auto& e) { return now - e.second.heard > kEarlyKeepNs; });
          s->early[ev->wid] = {*ev, now, now >= s->session_deadline_ns()};
        }
      }
    }
    s->cv.notify_all();
  }
  for (const auto& [where, what] : heard)
    log().debug("semaphore '{}': heard the grant to wait {}", where, what);
}

void keeper::impl::serve_subscribers(const std::vector<std::shared_ptr<semaphore_state>>& live,
                                     std::vector<pollfd>& fds, std::vector<subscriber*>& owners,
                                     std::int64_t& wake_at) {
  // Which channels each server should have us on.
  std::map<std::string, std::set<std::string>> wanted;
  for (const auto& s : live) {
    std::lock_guard g(s->mu);
    const std::string id = s->cli->seed().identity();
    auto& sub = subs[id];
    if (!sub.cli) sub.cli = s->cli;
    auto& w = wanted[id];
    if (!s->waiters.empty()) {
      w.insert(s->channel);
      sub.by_channel[s->channel] = s;
    }
    if (s->missed_message) {
      // Only a renewal's reply told of a grant: the subscriber may be dead
      // without knowing it. Costs a PING only after a missed message.
      sub.probe = true;
      s->missed_message = false;
    }
    if (s->idle_watchers > 0) {
      w.insert(s->idle_channel);
      sub.by_channel[s->idle_channel] = s;
    }
  }
  const std::int64_t now = sys::precise_now_ns();
  for (auto it = subs.begin(); it != subs.end();) {
    subscriber& sub = it->second;
    const auto& want = wanted[it->first];
    if (want.empty()) {
      // Nobody waits on this server any more.
      sub.conn.reset();
      sub.sent.clear();
      sub.by_channel.clear();
      it = subs.erase(it);
      continue;
    }
    for (const auto& ch : sub.sent) {
      if (want.count(ch)) continue;
      // Leaving a channel: a later waiter must wait for the next confirmation.
      auto b = sub.by_channel.find(ch);
      if (b == sub.by_channel.end()) continue;
      if (auto s = b->second.lock()) {
        std::lock_guard g(s->mu);
        if (ch == s->channel) s->subscribed = false;
      }
    }
    std::erase_if(sub.by_channel, [&](const auto& e) { return !want.count(e.first); });
    if (!sub.conn && now >= sub.retry_ns) {
      try {
        sub.conn = connection::open(sub.cli->seed(), now + 1'000'000'000);
        sub.backoff_ns = 0;
      } catch (const io_error& e) {
        drop_subscriber(sub, e.what());
      }
    }
    if (sub.conn) {
      std::vector<std::string_view> add = {"SUBSCRIBE"}, remove = {"UNSUBSCRIBE"};
      for (const auto& ch : want)
        if (!sub.sent.count(ch)) add.push_back(ch);
      for (const auto& ch : sub.sent)
        if (!want.count(ch)) remove.push_back(ch);
      try {
        if (add.size() > 1) sub.conn->append(add);
        if (remove.size() > 1) sub.conn->append(remove);
        if (add.size() > 1 || remove.size() > 1) sub.conn->flush(now + 1'000'000'000);
        for (std::size_t i = 1; i < add.size(); ++i) sub.sent.insert(std::string(add[i]));
        for (std::size_t i = 1; i < remove.size(); ++i) sub.sent.erase(std::string(remove[i]));
      } catch (const io_error& e) {
        drop_subscriber(sub, e.what());
      }
    }
    if (sub.conn && sub.ping_ns != 0 && now - sub.ping_ns >= kPingTimeoutNs) {
      drop_subscriber(sub, "no answer to a PING in " + std::to_string(kPingTimeoutNs / 1'000'000) +
                               " ms after it missed a message");
    } else if (sub.conn && sub.probe && sub.ping_ns == 0) {
      try {
        sub.conn->append({"PING"});
        sub.conn->flush(now + kPingTimeoutNs);
        sub.ping_ns = now;
      } catch (const io_error& e) {
        drop_subscriber(sub, e.what());
      }
    }
    sub.probe = false;
    if (sub.conn && sub.ping_ns != 0) wake_at = std::min(wake_at, sub.ping_ns + kPingTimeoutNs);
    if (sub.conn) {
      fds.push_back(pollfd{sub.conn->fd(), POLLIN, 0});
      owners.push_back(&sub);
    } else {
      wake_at = std::min(wake_at, sub.retry_ns);
    }
    ++it;
  }
}

void keeper::run() {
  impl& k = *impl_;
  for (;;) {
    std::vector<std::shared_ptr<semaphore_state>> live;
    {
      std::lock_guard g(k.mu);
      live = k.watched;
    }
    std::int64_t wake_at = sys::kNever;
    std::vector<std::shared_ptr<semaphore_state>> keep;
    for (const auto& s : live) {
      schedule& sc = k.sched[s.get()];
      std::int64_t now = sys::precise_now_ns();
      std::int64_t d = k.due(*s, sc, now);
      if (d != sys::kNever && d <= now) {
        k.renew(s, sc);
        d = k.due(*s, sc, sys::precise_now_ns());
      }
      if (d == sys::kNever) continue;
      keep.push_back(s);
      wake_at = std::min(wake_at, d);
    }
    {
      // States with nothing to keep leave the list (watch() puts them back).
      std::lock_guard g(k.mu);
      std::erase_if(k.watched, [&](const auto& s) {
        if (std::find(keep.begin(), keep.end(), s) != keep.end()) return false;
        std::lock_guard sg(s->mu);
        if (s->active()) {
          // It gained work since its due time was computed (without a poke:
          // it was still watched). Look at it again at once.
          wake_at = 0;
          return false;
        }
        s->watched = false;
        k.sched.erase(s.get());
        return true;
      });
    }
    std::vector<pollfd> fds{pollfd{k.efd, POLLIN, 0}};
    std::vector<subscriber*> owners{nullptr};
    k.serve_subscribers(keep, fds, owners, wake_at);
    const std::int64_t now = sys::precise_now_ns();
    int timeout_ms = -1;
    if (wake_at != sys::kNever)
      timeout_ms = static_cast<int>(
          std::clamp<std::int64_t>((wake_at - now + 999'999) / 1'000'000, 0, 60'000));
    const int n = sys::poll_fds(fds.data(), fds.size(), timeout_ms);
    if (n <= 0) continue;
    if (fds[0].revents) sys::event_drain(k.efd);
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) k.read_subscriber(*owners[i]);
  }
}

}  // namespace shmsem::detail::redis
