// lapsed_grant_test.cpp: a queued waiter is served while it cannot run
// (stopped, or preempted on a busy host) for longer than its lease's TTL.
// Its grant lapses and is reclaimed, and the slot goes to the next waiter.
// When the first waiter runs again it must see that the grant is no longer
// its own: it is not handed a Permit for it, it never ends the lease now in
// that slot, and it goes back to the head of the queue.
//
// The stopped process stands in for a preempted one: SIGSTOP makes the
// worst-case schedule happen every time.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stop_token>
#include <thread>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;

constexpr auto kTtl = 300ms;

// Stops the process at `leaving` once (after its acquire stopped waiting,
// before it takes the lock to leave the queue).
std::atomic<bool> stop_when_leaving{false};
void stop_at_leaving(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::leaving && stop_when_leaving.exchange(false)) ::raise(SIGSTOP);
}

// Child B: acquires one seat without a TTL, says 'h', waits for a byte,
// releases. Exits 0 if its release found the seat still held.
int second_holder(const std::string& key, test::pipe_channel& up, test::pipe_channel& down) {
  Semaphore s = Semaphore::attach(key);
  Permit p = s.acquire(1, {.wait_timeout = 60s});
  up.send('h');
  down.receive(std::chrono::minutes(2));
  if (!p.is_held()) return 2;
  try {
    p.release();
  } catch (const PermitNotHeldError&) {
    return 3;  // somebody ended our lease: the bound was broken meanwhile
  }
  return 0;
}

// Lets the grant to the stopped waiter lapse, then has it reclaimed: the
// slot goes to the waiter queued behind it (B), which reports 'h'.
void lapse_and_regrant(Semaphore& sem, test::pipe_channel& b_up) {
  ASSERT_TRUE(test::eventually([&] {
    sem.reap();
    return sem.stats().expired == 1;
  }));
  ASSERT_EQ(b_up.receive(), 'h');
  ASSERT_EQ(sem.used(), 1);
}

TEST(LapsedGrant, IsNotHandedOutAndTheWaiterQueuesFirstAgain) {
  test::unique_key key;
  test::pipe_channel go, a_up, a_down, b_up, b_down;
  // A is forked before this process opens the semaphore, which starts the
  // library's thread (docs/testing.md says why a test forks first).
  test::child_process a([&] {
    go.receive(std::chrono::minutes(2));
    Semaphore s = Semaphore::attach(key);
    Permit p = s.acquire(1, {.ttl = kTtl, .wait_timeout = 60s});
    a_up.send(p.is_held() ? 'g' : 'x');
    a_down.receive(std::chrono::minutes(2));
    p.release();
    return 0;
  });
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  Permit mine = sem.acquire();
  go.send();
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  a.kill(SIGSTOP);
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(a.pid()); }));
  mine.release();  // the seat goes to A, which cannot run to take it
  ASSERT_EQ(sem.waiters(), 0);
  test::child_process b([&] { return second_holder(key.str(), b_up, b_down); });
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  lapse_and_regrant(sem, b_up);

  a.kill(SIGCONT);
  // A finds its grant gone and queues again, first in line.
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }))
      << "the waiter whose grant lapsed did not queue again";
  EXPECT_EQ(sem.used(), 1) << "the lease now in the slot was ended";
  EXPECT_FALSE(sem.try_acquire().has_value()) << "a second seat was granted on capacity 1";
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].pid, b.pid());

  b_down.send();
  EXPECT_EQ(b.wait(), 0) << "B's release found its seat lost";
  EXPECT_EQ(a_up.receive(), 'g') << "A was not served after B released";
  a_down.send();
  EXPECT_EQ(a.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().expired, 1u);
  EXPECT_TRUE(test::stats_add_up(sem));
}

// The same schedule for a waiter that was cancelled: it stopped waiting,
// and was granted (then the grant lapsed and the slot went to B) before it
// took the lock to leave the queue. Giving back "the seat it won" must not
// give back B's.
TEST(LapsedGrant, ACancelledWaiterNeverEndsTheLeaseNowInItsSlot) {
  test::unique_key key;
  test::pipe_channel go, a_up, b_up, b_down, cancel;
  test::child_process a([&] {
    go.receive(std::chrono::minutes(2));
    Semaphore s = Semaphore::attach(key);
    detail::testing::set_hook(stop_at_leaving);
    std::stop_source stop;
    std::thread canceller([&] {
      cancel.receive(std::chrono::minutes(2));
      stop_when_leaving = true;
      stop.request_stop();
    });
    char outcome = 'g';
    try {
      s.acquire(1, {.ttl = kTtl, .wait_timeout = 60s, .stop = stop.get_token()});
    } catch (const AcquisitionError& e) {
      outcome = e.reason() == Reason::cancelled ? 'c' : 'e';
    }
    canceller.join();
    a_up.send(outcome);
    return 0;
  });
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  Permit mine = sem.acquire();
  go.send();
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  cancel.send();
  // A stops itself between "cancelled" and taking the lock to leave.
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(a.pid()); }));
  mine.release();  // granted to A, still in the queue
  test::child_process b([&] { return second_holder(key.str(), b_up, b_down); });
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  lapse_and_regrant(sem, b_up);

  a.kill(SIGCONT);
  EXPECT_EQ(a_up.receive(), 'c');
  EXPECT_EQ(a.wait(), 0);
  EXPECT_EQ(sem.used(), 1) << "the cancelled waiter gave back B's seat";
  EXPECT_FALSE(sem.try_acquire().has_value()) << "a second seat was granted on capacity 1";
  b_down.send();
  EXPECT_EQ(b.wait(), 0) << "B's release found its seat lost";
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));
}

}  // namespace
}  // namespace shmsem
