// fast_path_death_test.cpp: a process dies, or stops, inside a lock-free
// acquire or release: after marking its slot and before changing the gate,
// or after changing the gate and before marking its slot done. No lock is
// held there, so no EOWNERDEAD tells anyone; the next reap must find the
// slot, recount the seats in use from the held slots, and give the dead
// process's reserved slots back. A live thread stopped in such a window
// must not make that recount hang, nor let it undercount.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <optional>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using detail::testing::point;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

point act_at = point::fast_acquiring;
int act_signal = SIGKILL;
bool armed = false;

void act_here(point p, std::string_view) {
  if (armed && p == act_at) {
    armed = false;
    ::raise(act_signal);
  }
}

bool in_release(point p) {
  return p == point::fast_releasing || p == point::fast_released;
}

// The first acquire of a thread takes the lock (and fills the thread's
// slot cache); the next ones are lock-free. Returns a lock-free permit.
Permit fast_permit(Semaphore& sem) {
  sem.acquire(1).release();
  return sem.acquire(1);
}

// Raises `sig` at `p`, inside a lock-free acquire or release of one seat.
int act_in_fast_path(const std::string& key, point p, int sig) {
  Semaphore sem = Semaphore::attach(key);
  Permit held;
  if (in_release(p))
    held = fast_permit(sem);
  else
    sem.acquire(1).release();
  act_at = p;
  act_signal = sig;
  armed = true;
  detail::testing::set_hook(act_here);
  if (in_release(p))
    held.release();
  else
    held = sem.acquire(1);
  return armed ? 1 : 0;  // 1: the hook never ran (the path was not lock-free)
}

// Stops itself inside a lock-free acquire of one seat, before its gate
// CAS. Continued, it says 'g' on `got` if it holds the seat, waits for
// `release`, gives the seat back and exits 0.
int stop_in_fast_acquire(const std::string& key, test::pipe_channel& got,
                         test::pipe_channel& release) {
  Semaphore s = Semaphore::attach(key);
  s.acquire(1).release();
  act_at = point::fast_acquiring;
  act_signal = SIGSTOP;
  armed = true;
  detail::testing::set_hook(act_here);
  Permit p = s.acquire(1);  // stops itself halfway
  got.send(p.is_held() ? 'g' : 'x');
  release.receive(std::chrono::minutes(5));
  p.release();
  return 0;
}

std::int64_t file_size(const std::string& key) {
  struct ::stat st;
  if (::stat(Semaphore::segment_path(key).c_str(), &st) != 0) return -1;
  return st.st_size;
}

class DeathInFastPath : public ::testing::TestWithParam<point> {};

TEST_P(DeathInFastPath, SeatsAreRecountedAndNothingLeaks100TimesInARow) {
  const point p = GetParam();
  test::unique_key key(detail::testing::point_name(p));
  Semaphore sem = Semaphore::open(key, 4, test::fifo());
  Permit mine = fast_permit(sem);  // a survivor's lease must outlive every recount
  std::int64_t size_after_first = 0;
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    test::child_process child([&] { return act_in_fast_path(key.str(), p, SIGKILL); });
    ASSERT_EQ(child.wait(), 128 + SIGKILL)
        << "the child did not die at " << detail::testing::point_name(p);
    // Killed after taking the seat (fast_admitted) or before giving it back
    // (fast_releasing): until the recount, the seat is counted as taken.
    // Never fewer than the live lease.
    ASSERT_GE(sem.used(), 1);
    sem.reap();
    ASSERT_EQ(sem.stats().recoveries, static_cast<std::uint64_t>(round + 1));
    ASSERT_TRUE(test::only_survivor_holds(sem, mine, key.str(), 4));
    // The dead children's reserved slots came back: the lease table stops
    // growing after the first round.
    if (round == 0) size_after_first = file_size(key.str());
    ASSERT_EQ(file_size(key.str()), size_after_first);
  }
  mine.release();
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));
}

INSTANTIATE_TEST_SUITE_P(AtEachWindow, DeathInFastPath,
                         ::testing::Values(point::fast_acquiring, point::fast_admitted,
                                           point::fast_releasing, point::fast_released),
                         [](const auto& info) {
                           return std::string(detail::testing::point_name(info.param));
                         });

// A process died inside a lock-free acquire while another one is stopped
// inside its own: the recount cannot know the stopped one's effect yet, so
// it gives up within its time limit instead of hanging, and leaves the
// count as it was (the dead seat stays taken: safe). Once the stopped
// process continues, the next reap recounts.
TEST(DeathInFastPath, RecountWaitsForAStoppedThreadWithoutHangingThenFinishes) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 4, test::fifo());
  test::pipe_channel got, release;
  test::child_process stopper([&] { return stop_in_fast_acquire(key.str(), got, release); });
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(stopper.pid()); }));
  test::child_process dead(
      [&] { return act_in_fast_path(key.str(), point::fast_admitted, SIGKILL); });
  ASSERT_EQ(dead.wait(), 128 + SIGKILL);
  ASSERT_EQ(sem.used(), 1);  // the dead child's seat; the stopped one has not taken its own yet

  const auto start = clk::now();
  sem.reap();
  EXPECT_LT(clk::now() - start, 2s) << "the recount waited for a stopped process";
  EXPECT_EQ(sem.used(), 1) << "a recount that could not finish changed the count";
  EXPECT_EQ(sem.stats().recoveries, 0u);

  stopper.kill(SIGCONT);
  ASSERT_EQ(got.receive(), 'g');
  ASSERT_EQ(sem.used(), 2);
  // The retry is due shortly after the failed attempt; then the dead
  // child's seat comes back.
  ASSERT_TRUE(test::eventually([&] {
    sem.reap();
    return sem.used() == 1;
  }));
  EXPECT_EQ(sem.stats().recoveries, 1u);
  EXPECT_EQ(sem.holders().size(), 1u);
  EXPECT_TRUE(test::stats_add_up(sem));
  release.send();
  EXPECT_EQ(stopper.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
}

// Dead processes that each left a slot halfway all wait for one recount.
// While a live thread is stopped inside its own acquire, that recount gives
// up after kQuiesceNs (50 ms) and backs off; a reap must honour the backoff
// for every dead holder, or each locked call spends 50 ms per dead holder
// under the lock.
TEST(DeathInFastPath, DeadHoldersWaitForTheRecountsBackoffWhileAThreadIsStopped) {
  constexpr int kDead = 8;
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, kDead, test::fifo());
  test::pipe_channel got, release;
  test::child_process stopper([&] { return stop_in_fast_acquire(key.str(), got, release); });
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(stopper.pid()); }));
  for (int i = 0; i < kDead; ++i) {
    test::child_process dead(
        [&] { return act_in_fast_path(key.str(), point::fast_admitted, SIGKILL); });
    ASSERT_EQ(dead.wait(), 128 + SIGKILL);
  }
  ASSERT_EQ(sem.used(), kDead);  // every seat taken by the dead: a try must reap

  // One recount attempt per call at the most: 50 ms. One per dead holder
  // would be 400 ms.
  for (int round = 0; round < 10; ++round) {
    const auto start = clk::now();
    EXPECT_FALSE(sem.try_acquire().has_value());
    EXPECT_LT(clk::now() - start, 200ms)
        << "round " << round << ": a recount was tried for each dead holder";
  }

  stopper.kill(SIGCONT);
  EXPECT_EQ(got.receive(), 'g');
  release.send();
  EXPECT_EQ(stopper.wait(), 0);
  ASSERT_TRUE(test::eventually([&] {
    sem.reap();
    return sem.used() == 0;
  }));
  EXPECT_EQ(sem.holders().size(), 0u);
  EXPECT_TRUE(test::stats_add_up(sem));
}

// A releaser stopped right after its seat went back to the gate, before it
// told the queue: the seat is no longer its own, and the head waiter gets
// it while the releaser stays stopped.
class StoppedAfterRelease : public ::testing::Test {
 protected:
  // Forks the releaser (holding the one seat lock-free) and the waiter
  // (queued for it), then stops the releaser just after its gate CAS.
  void stage(bool waiter_ticks, const std::function<void()>& before_queue = {}) {
    releaser.emplace([this] {
      Semaphore s = Semaphore::attach(key.str());
      Permit p = fast_permit(s);
      held.send('h');
      if (go.receive(std::chrono::minutes(2)) != 'g') return 2;
      act_at = point::fast_released;
      act_signal = SIGSTOP;
      armed = true;
      detail::testing::set_hook(act_here);
      p.release();
      return 0;
    });
    ASSERT_EQ(held.receive(), 'h');
    if (before_queue) before_queue();
    waiter.emplace([this, waiter_ticks] {
      // Without its timed checks, only another caller can serve it.
      if (!waiter_ticks) detail::testing::no_watch_tick.store(1);
      Semaphore s = Semaphore::attach(key.str());
      Permit p = s.acquire(1, {.wait_timeout = std::chrono::minutes(2)});
      got.send('a');
      p.release();
      return 0;
    });
    ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
    go.send('g');
    ASSERT_TRUE(test::eventually([&] { return test::is_stopped(releaser->pid()); }));
    ASSERT_EQ(sem.used(), sem.capacity() - 1) << "the seat is back in the gate";
  }
  void TearDown() override {
    if (releaser) {
      releaser->kill(SIGCONT);
      EXPECT_EQ(releaser->wait(), 0);
    }
    if (waiter) {
      EXPECT_EQ(waiter->wait(), 0);
    }
    EXPECT_EQ(sem.used(), 0);
    EXPECT_TRUE(test::stats_add_up(sem));
  }

  explicit StoppedAfterRelease(int capacity = 1)
      : sem(Semaphore::open(key, capacity, test::fifo())) {}

  test::unique_key key;
  Semaphore sem;
  test::pipe_channel held, go, got;
  std::optional<test::child_process> releaser, waiter;
};

TEST_F(StoppedAfterRelease, TheHeadWaiterGetsTheSeatOnItsOwn) {
  stage(true);
  EXPECT_EQ(got.receive(30s), 'a') << "the seat stayed idle while its releaser was stopped";
}

class StoppedAfterReleaseWithACaller : public StoppedAfterRelease {
 protected:
  StoppedAfterReleaseWithACaller() : StoppedAfterRelease(2) {}
};

TEST_F(StoppedAfterReleaseWithACaller, AnyLockedCallServesTheHeadWaiter) {
  // It holds the other seat (its lifeline armed, so that the waiter has no
  // reason to poll it) and tries once more when told to: only its locked
  // call can serve the waiter, whose timed checks are off.
  test::pipe_channel c_first, c_ready, c_go, c_up, c_done;
  test::child_process caller([&] {
    Semaphore s = Semaphore::attach(key.str());
    if (c_first.receive(std::chrono::minutes(2)) != 'f') return 4;
    Permit mine = s.acquire(1);
    c_ready.send('r');
    if (c_go.receive(std::chrono::minutes(2)) != 'g') return 3;
    // First in line is the waiter: the try is refused, and serves it.
    c_up.send(s.try_acquire().has_value() ? 'y' : 'n');
    // Its own release would serve the waiter: only after the verdict.
    c_done.receive(std::chrono::minutes(2));
    mine.release();
    return 0;
  });
  stage(false, [&] {
    c_first.send('f');
    ASSERT_EQ(c_ready.receive(), 'r');
  });
  c_go.send('g');
  EXPECT_EQ(c_up.receive(), 'n') << "the try passed the waiter first in line";
  EXPECT_EQ(got.receive(30s), 'a') << "a locked call left the queue unserved with a seat free";
  c_done.send('d');
  EXPECT_EQ(caller.wait(), 0);
}

// A holder stopped halfway through its lock-free release (its slot says
// releasing) while an operator force-releases everything: exactly one of
// them ends the lease. The force release finds it already being released
// and leaves it; the holder's release, once continued, succeeds.
TEST(DeathInFastPath, ReleaseCaughtBetweenItsTwoCasesWinsAgainstForceRelease) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  test::pipe_channel result;
  test::child_process holder([&] {
    Semaphore s = Semaphore::attach(key.str());
    Permit p = fast_permit(s);
    act_at = point::fast_releasing;
    act_signal = SIGSTOP;
    armed = true;
    detail::testing::set_hook(act_here);
    try {
      p.release();  // stops after the slot CAS, before the gate CAS
      result.send('r');
    } catch (const PermitNotHeldError&) {
      result.send('l');
    }
    return 0;
  });
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(holder.pid()); }));
  EXPECT_EQ(sem.used(), 1);
  EXPECT_EQ(sem.force_release_all(), 0) << "the lease was already being released";
  EXPECT_EQ(sem.used(), 1) << "the seat was given back twice, or by the wrong party";
  holder.kill(SIGCONT);
  EXPECT_EQ(result.receive(), 'r');
  EXPECT_EQ(holder.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
  const Stats st = sem.stats();
  EXPECT_EQ(st.force_released, 0u);
  EXPECT_TRUE(test::stats_add_up(sem));
}

}  // namespace
}  // namespace shmsem
