// lifeline.cpp: how this process's death shows in the segment without a
// system call: the thread that holds a robust mutex per holder record.

#include "shm/lifeline.hpp"

#include <signal.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "shm/layout.hpp"
#include "sys/futex.hpp"
#include "sys/robust_mutex.hpp"

namespace shmsem::detail::lifeline {

namespace {

// The kernel walks at most 2048 entries of a thread's robust list at its
// death (ROBUST_LIST_LIMIT); past that, lifelines would never be marked.
// Stay well below it: holders past the limit go by their token alone.
constexpr std::size_t kMaxHeld = 1024;

struct request {
  bool arm;
  pthread_mutex_t* mutex;
  std::atomic<std::uint32_t>* state;
};

class keeper {
 public:
  // Everything the thread needs is allocated here, by the caller: the
  // thread itself never allocates, so it never competes with the caller's
  // own allocations (nor shows up in them).
  keeper() { held_list_.reserve(kMaxHeld); }

  bool arm(pthread_mutex_t* m, std::atomic<std::uint32_t>* state) {
    std::lock_guard g(mu_);
    if (held_ + pending_arms_ >= kMaxHeld) return false;
    if (!started_ && !start()) return false;
    queue_.push_back({true, m, state});
    ++pending_arms_;
    cv_.notify_one();
    return true;
  }

  void disarm(pthread_mutex_t* m, std::atomic<std::uint32_t>* state) {
    std::unique_lock g(mu_);
    if (!started_) return;
    queue_.push_back({false, m, state});
    const std::uint64_t ticket = ++requested_;
    cv_.notify_one();
    done_cv_.wait(g, [&] { return served_ >= ticket; });
  }

 private:
  bool start() {
    // No signal of the application's is delivered to this thread: it only
    // ever sleeps, and a handler run here could not expect it.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    bool ok = true;
    try {
      std::thread([this] { run(); }).detach();
    } catch (const std::exception& e) {
      log().warn(
          "cannot start the lifeline thread ({}): dead holders of this process will be found "
          "by their liveness tokens alone",
          e.what());
      ok = false;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    started_ = ok;
    return ok;
  }

  void run() {
    auto& held = held_list_;
    std::unique_lock g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return !queue_.empty(); });
      const request r = queue_.front();
      queue_.pop_front();
      if (r.arm) {
        --pending_arms_;
        // Freshly initialized by the claimer: nobody else holds it.
        const sys::lock_result lr = sys::robust_mutex_trylock(r.mutex);
        if (lr == sys::lock_result::owner_died) sys::robust_mutex_make_consistent(r.mutex);
        if (lr == sys::lock_result::locked || lr == sys::lock_result::owner_died) {
          held.push_back(r.mutex);
          ++held_;
          r.state->store(layout::kLifelineArmed, std::memory_order_release);
          sys::futex_wake(r.state, INT_MAX);  // the acquire that claimed the record
        }
      } else {
        auto it = std::find(held.begin(), held.end(), r.mutex);
        r.state->store(layout::kLifelineNone, std::memory_order_release);
        if (it != held.end()) {
          sys::robust_mutex_unlock(r.mutex);
          // Waiters sleep on it to hear of our death: tell them all that
          // it is no longer ours (the unlock woke only one).
          sys::robust_mutex_wake_watchers(r.mutex);
          held.erase(it);
          --held_;
        }
        ++served_;
        done_cv_.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::deque<request> queue_;
  bool started_ = false;
  std::vector<pthread_mutex_t*> held_list_;  // by the thread only
  std::size_t held_ = 0;
  std::size_t pending_arms_ = 0;
  std::uint64_t requested_ = 0;
  std::uint64_t served_ = 0;
};

// Never destroyed: the thread lives until the process ends, and a lifeline
// let go at static destruction would read as a death while the process
// still runs its exit handlers.
keeper* the_keeper = nullptr;
std::once_flag keeper_once;

keeper& get() {
  std::call_once(keeper_once, [] { the_keeper = new keeper; });
  return *the_keeper;
}

}  // namespace

bool arm(pthread_mutex_t* m, std::atomic<std::uint32_t>* state) noexcept {
  try {
    return get().arm(m, state);
  } catch (...) {
    return false;
  }
}

bool await_armed(const std::atomic<std::uint32_t>* state, std::int64_t deadline_ns) noexcept {
  for (;;) {
    const std::uint32_t s = state->load(std::memory_order_acquire);
    if (s == layout::kLifelineArmed) return true;
    if (sys::futex_wait(state, s, deadline_ns) == sys::wait_result::timed_out)
      return state->load(std::memory_order_acquire) == layout::kLifelineArmed;
  }
}

void disarm(pthread_mutex_t* m, std::atomic<std::uint32_t>* state) noexcept {
  try {
    get().disarm(m, state);
  } catch (...) {
  }
}

void forget_after_fork() noexcept {
  // The parent's keeper (and maybe its mutex, held by a thread that is not
  // here) is abandoned, as the renewer's is.
  if (the_keeper) the_keeper = new keeper;
}

}  // namespace shmsem::detail::lifeline
