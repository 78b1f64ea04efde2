// renewer.cpp: how auto-renewing permits stay alive: the one background
// thread per process that extends their leases.

#include "shm/renewer.hpp"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "shm/segment.hpp"
#include "sys/clock.hpp"

namespace shmsem::detail {

extend_result extend_lease(attachment& a, std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                           std::int64_t ttl_ms, std::int64_t deadline_ns, std::int64_t* expires,
                           std::string* why) {
  segment_lock lk(a, deadline_ns);
  if (!lk.owns()) return extend_result::busy;
  const std::int64_t now = lease_clock();
  loss l;
  if (!a.holds(slot, gen, id, now, &l)) {
    lk.unlock();
    if (why) *why = l.describe();
    return extend_result::lost;
  }
  const std::int64_t exp = layout::expiry_of(now, ttl_ms);
  a.leases[slot].expires_ns.store(exp, std::memory_order_relaxed);
  a.lower_earliest_expiry(exp);
  lk.unlock();
  if (expires) *expires = exp;
  return extend_result::extended;
}

namespace {
std::atomic<std::uint64_t> forks{0};
std::once_flag fork_counter_once;
}  // namespace

std::uint64_t fork_generation() noexcept {
  std::call_once(fork_counter_once,
                 [] { ::pthread_atfork(nullptr, nullptr, [] { forks.fetch_add(1); }); });
  return forks.load(std::memory_order_relaxed);
}

void renewal::stop() noexcept {
  if (inherited()) {
    active.store(false);
    return;
  }
  std::lock_guard g(mu);
  stopped = true;
  active.store(false);
}

namespace {

class renewer {
 public:
  void add(const std::shared_ptr<renewal>& r) {
    std::lock_guard g(mu_);
    r->due_ns = sys::precise_now_ns() + r->ttl_ms * 1'000'000 / 3;
    entries_.push_back(r);
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
    cv_.notify_one();
  }

  void reschedule(renewal& r, std::int64_t ttl_ms) {
    std::lock_guard g(mu_);
    r.due_ns = sys::precise_now_ns() + third_of(ttl_ms);
    cv_.notify_one();
  }

  template <class Pred>
  void stop_if(Pred pred) {
    std::vector<std::shared_ptr<renewal>> hit;
    {
      std::lock_guard g(mu_);
      for (auto& e : entries_)
        if (pred(*e)) hit.push_back(e);
    }
    for (auto& e : hit) e->stop();
  }

 private:
  void run() {
    std::unique_lock lk(mu_);
    for (;;) {
      entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                    [](const auto& e) { return !e->active.load(); }),
                     entries_.end());
      std::int64_t next = sys::kNever;
      for (auto& e : entries_) next = std::min(next, e->due_ns.load());
      if (next == sys::kNever) {
        cv_.wait(lk);
        continue;
      }
      const std::int64_t now = sys::precise_now_ns();
      if (next > now) {
        cv_.wait_for(lk, std::chrono::nanoseconds(next - now));
        continue;
      }
      std::vector<std::shared_ptr<renewal>> due;
      for (auto& e : entries_)
        if (e->due_ns <= now) due.push_back(e);
      lk.unlock();
      for (auto& e : due) renew_one(*e);
      lk.lock();
    }
  }

  static std::int64_t third_of(std::int64_t ttl_ms) {
    return std::max<std::int64_t>(1, ttl_ms / 3) * 1'000'000;
  }

  static void renew_one(renewal& e) {
    std::lock_guard g(e.mu);
    const std::int64_t third = third_of(e.ttl_ms);
    if (e.stopped) return;
    [[maybe_unused]] const std::string_view key = e.att->key;  // for the test hook
    SHMSEM_HOOK(renewing);
    std::string why;
    const std::int64_t now = sys::precise_now_ns();
    switch (extend_lease(*e.att, e.slot, e.gen, e.id, e.ttl_ms, now + third, nullptr, &why)) {
      case extend_result::extended:
        e.due_ns = now + third;
        break;
      case extend_result::busy:
        // Try again soon; the lease still has two thirds of its TTL.
        e.due_ns = now + std::min<std::int64_t>(third / 4, 50'000'000);
        break;
      case extend_result::lost:
        e.lost.store(true);
        e.stopped = true;
        e.active.store(false);
        log().warn("semaphore '{}': auto-renewal found permit {} lost: {}", e.att->key, e.id, why);
        break;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<renewal>> entries_;
  bool started_ = false;
};

// Never destroyed: the detached thread may outlive static destruction.
renewer* the_renewer = nullptr;
std::once_flag renewer_once;

renewer& get() {
  std::call_once(renewer_once, [] {
    the_renewer = new renewer;
    // A forked child has no renewal thread and owns none of the parent's
    // permits: it starts from an empty renewer (the old one is abandoned,
    // its mutex possibly locked by a thread that does not exist here).
    ::pthread_atfork(nullptr, nullptr, [] { the_renewer = new renewer; });
  });
  return *the_renewer;
}

}  // namespace

void renew_in_background(const std::shared_ptr<renewal>& r) {
  get().add(r);
}

void reschedule_renewal(renewal& r, std::int64_t ttl_ms) {
  get().reschedule(r, ttl_ms);
}

void stop_renewals_of(std::uint64_t handle_id) {
  get().stop_if([handle_id](const renewal& e) { return e.handle_id == handle_id; });
}

void stop_all_renewals() {
  get().stop_if([](const renewal&) { return true; });
}

}  // namespace shmsem::detail
