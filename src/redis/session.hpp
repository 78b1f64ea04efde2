// redis/session.hpp: what one process knows about one Redis semaphore,
// and the background thread that keeps its session alive.
//
// A process has one session per semaphore: an entry in the semaphore's
// sessions set whose deadline every script this process runs pushes to now
// + session_timeout. Its leases and queued waits belong to it. While the
// process holds, waits or waits for idle, the keeper thread renews the
// session a third of the timeout after its last renewal, and that same
// script reaps sessions that lapsed, expires leases, extends auto-renewing
// ones and reports losses. It is the only timed Redis call; blocked waiters
// sleep on a condition variable until the keeper hears their grant on the
// session's pub/sub channel (or in a renewal's reply, if a message was lost).
//
// Lock order: keeper::mu_ before semaphore_state::mu. No lock is held
// across a Redis call, except a lease's renew_mu by extend().
#pragma once

#include <shmsem/observer.hpp>

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/backend.hpp"
#include "base/observe.hpp"
#include "redis/client.hpp"
#include "redis/url.hpp"

namespace shmsem::detail::redis {

struct semaphore_state;

/// Milliseconds (Redis's unit) as nanoseconds (the clock's).
constexpr std::int64_t ms_ns(std::int64_t ms) {
  return ms * 1'000'000;
}

/// How often a waiter asks for its grant when it cannot hear it on the
/// pub/sub channels (at most; a renewal comes sooner with a short session).
constexpr std::int64_t kPollWithoutChannelsNs = 100'000'000;

/// The Redis side of one Permit.
struct lease final : lease_owner {
  std::string_view key_of(const Permit& p) const noexcept override;
  bool is_held(const Permit& p) const noexcept override;
  std::optional<Permit::clock::time_point> expires_at(const Permit& p) const noexcept override;
  bool auto_renewing(const Permit& p) const noexcept override;
  void stop_auto_renew(Permit& p) noexcept override;
  void extend(Permit& p, std::chrono::milliseconds ttl) override;
  void release(Permit& p) override;

  std::shared_ptr<semaphore_state> sem;
  std::uint64_t id = 0;  // also the fencing token
  std::string epoch;
  int weight = 0;
  std::uint64_t handle_id = 0;
  std::uint64_t fork_gen = 0;
  std::shared_ptr<Observer> observer;
  // Under sem->mu:
  std::int64_t ttl_ms = 0;      // 0: no expiry
  bool auto_renew = false;      // extended by the keeper while true
  std::int64_t renewed_ns = 0;  // when its expiry was last set
  bool lost = false;
  bool loss_reported = false;  // observer and log told once
  std::string why;
  std::atomic<std::int64_t> expires_ns{0};  // local estimate (CLOCK_MONOTONIC), 0: none
};

/// A lost lease, to tell its observer and the log about.
struct loss_note {
  std::uint64_t id = 0;
  std::string why;  // in words
  std::shared_ptr<Observer> observer;
};

/// One blocked acquire.
struct waiter {
  enum class state { waiting, granted, rejected, gone };
  std::uint64_t wid = 0;
  state st = state::waiting;  // under sem->mu
  std::uint64_t lease_id = 0;
  int cap = -1;         // rejected: the capacity that rejected it, if told
  bool lapsed = false;  // gone because its session lapsed: it may start over
  // Granted, but the session may have lapsed since the grant was heard (the
  // process was stopped before or after it heard it): the seat may be
  // someone else's by now.
  bool heard_late = false;
  std::string error;  // why it is gone
};

/// A wait's state in a renewal's reply: "q", "g<lease id>", "r[<capacity>]"
/// or "gone".
struct waiter_status {
  enum kind_t { queued, granted, rejected, gone, unknown } kind;
  std::uint64_t lease_id;  // granted
  int cap;                 // rejected: the capacity that rejected it, or -1
};
waiter_status parse_waiter_status(std::string_view st);

/// A token of a session channel's message: "g<wid>:<lease id>" (granted)
/// or "r<wid>[:<capacity>]" (rejected).
struct wait_event {
  std::uint64_t wid;
  std::uint64_t lease_id;  // 0: rejected
  int cap;                 // rejected: the capacity that rejected it, or -1
};
/// nullopt for a token that is neither.
std::optional<wait_event> parse_wait_event(std::string_view tok);

/// One process's view of one semaphore, shared by its handles and permits.
struct semaphore_state {
  semaphore_state(std::shared_ptr<client> c, url u);
  ~semaphore_state();

  const std::shared_ptr<client> cli;
  const url where;
  const std::string sid;                // random, per process and semaphore
  const std::string meta;               // shmsem{KEY}
  const std::vector<std::string> keys;  // every key: the KEYS of each script
  const std::string channel;            // this session's grants
  const std::string idle_channel;       // "the last seat was freed"
  const std::string host;
  const pid_t pid;
  const std::uint64_t fork_gen;

  std::mutex mu;
  std::condition_variable cv;  // waiters and wait_idle(): something happened
  // Under mu:
  std::string epoch;  // as last seen; empty before the first script
  int recreate_cap = 0;
  std::int64_t session_ms = 3000;
  std::int64_t connect_timeout_ns = 1'000'000'000;
  std::int64_t touched_ns = 0;  // when the last script that renewed the session was sent
  std::vector<lease*> leases;
  std::map<std::uint64_t, waiter*> waiters;
  struct early_event {
    wait_event ev;
    std::int64_t heard;
    bool late;  // heard past session_deadline_ns(), or a lapse may have followed
  };
  std::map<std::uint64_t, early_event> early;  // by wid: heard before its waiter registered
  std::vector<std::string> voided;             // acquire requests that got no reply
  std::vector<std::string> releases;           // to retry (lease ids)
  std::vector<std::string> abandoned;          // waits given up without telling Redis
  std::vector<std::string> claimed;            // grants taken, whose records can go
  int idle_watchers = 0;
  std::uint64_t events = 0;  // bumped at every pub/sub message or renewal
  bool subscribed = false;   // both channels confirmed by the server
  bool no_channels = false;  // the ACL keeps this user off them: waiters poll
  // A renewal found a grant or rejection the subscriber should have heard:
  // the keeper checks the subscriber's connection with a PING.
  bool missed_message = false;
  bool check_now = false;  // the keeper should renew at once
  // In the keeper's list: it wakes for this state by its due time without a
  // poke (a state leaves the list only when it has nothing to keep).
  bool watched = false;
  std::int64_t expiry_due_ns = 0;  // a lease expires then; 0: none known
  int last_used = 0, last_cap = 0;

  /// A script's reply showed this epoch. A new one means Redis lost the
  /// data the earlier permits were granted in: they are lost. [mu held]
  void saw_epoch(const std::string& e, std::vector<lease*>* newly_lost);
  /// Marks a lease lost. [mu held] Returns true if this is news.
  bool mark_lost(lease& l, const std::string& why);
  /// What to tell about a lost lease, once: nullopt if it is not lost or
  /// was told already. [mu held]
  std::optional<loss_note> take_loss_note(lease& l);
  /// Tells the log and the observer. [mu NOT held: observers may block]
  void tell(const loss_note& n) const;
  /// Registers `w` and applies a grant heard before it existed. [mu held]
  void add_waiter(waiter& w);
  /// Session renewal, due checks: true if the keeper has work here. [mu held]
  bool active() const;
  /// The earliest the session can lapse on the server, by this process's
  /// clock: a tenth of the timeout short of touched_ns + session_ms, since
  /// a script moves the deadline only when it is more than a tenth stale
  /// (touch() in scripts.cpp). Past it, the seats may be another's. [mu held]
  std::int64_t session_deadline_ns() const {
    return touched_ns + ms_ns(session_ms) - ms_ns(session_ms) / 10;
  }
  /// The reply to a script that renewed the session, sent at `sent_at`,
  /// came in now. If it came at or past session_deadline_ns(), the session
  /// may have lapsed before the script ran, and the grants heard before it
  /// may have been reaped with it: they count as heard late. `own_wid` is
  /// the wait this reply queued (its grant cannot be older than the reply's
  /// script). [mu held]
  void renewed(std::int64_t sent_at, std::uint64_t own_wid = 0);
};

/// The process's state for `u` (shared with other handles of it).
std::shared_ptr<semaphore_state> state_for(const url& u);

/// "why" of a lost lease as the scripts report it, in words.
std::string describe_loss(const std::string& why);

/// This process's host name: $SHMSEM_HOST if set (tests fake hosts with
/// it), else gethostname().
std::string host_name();

/// The keeper thread: session renewals and the pub/sub subscriber.
class keeper {
 public:
  /// The process's keeper (started on first use; a forked child gets a new one).
  static keeper& get();
  /// `s` has leases, waiters or idle watchers now: renew it, and subscribe
  /// to its channels if it has waiters.
  void watch(const std::shared_ptr<semaphore_state>& s);
  /// Something changed for `s` (a new waiter, a stopped renewal): look again now.
  void poke();

  keeper(const keeper&) = delete;
  keeper& operator=(const keeper&) = delete;

 private:
  keeper();
  void run();
  struct impl;
  impl* impl_;  // never freed: the keeper lives as long as the process
};

}  // namespace shmsem::detail::redis
