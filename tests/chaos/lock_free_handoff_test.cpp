// lock_free_handoff_test.cpp: a seat passes from a releaser to a queued
// waiter without either of them waiting for the segment lock. In a fleet,
// hundreds of processes can be asleep on that lock to join the queue; a
// release or a granted waiter that queued behind them kept the seats idle.
//
// A process stopped while it holds the lock stands in for the herd: the
// lock is as far away as it can be, every time.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> stop_once{true};
void stop_at_first_lock(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::locked && stop_once.exchange(false)) ::raise(SIGSTOP);
}

// Waits for 'g', then takes the segment lock (through reap()) and stops
// itself inside it. Continued, it lets go and exits 0.
int lock_and_stop(const std::string& key, test::pipe_channel& go) {
  Semaphore s = Semaphore::attach(key);
  if (go.receive(2min) != 'g') return 2;
  detail::testing::set_hook(stop_at_first_lock);
  s.reap(5min);
  detail::testing::set_hook(nullptr);
  return 0;
}

// Waits for 'g', queues for the one seat with a budget that outlasts the
// test's setup by far (the locker must be stopped in the lock before it
// runs out), and says 't' when it has run out unserved. Exits 0 then.
int give_up_soon(const std::string& key, test::pipe_channel& go, test::pipe_channel& up) {
  Semaphore s = Semaphore::attach(key);
  if (go.receive(2min) != 'g') return 2;
  try {
    (void)s.acquire(1, {.wait_timeout = 5s});
  } catch (const AcquisitionError& e) {
    if (e.reason() != Reason::timeout) return 3;
    up.send('t');
    return 0;
  }
  return 4;  // it had no seat to get
}

// Waits for 'g', queues for the one seat, says 'a' once it has it, and
// gives it back. Exits 0 if the seat was still its own at the release.
int wait_for_seat(const std::string& key, test::pipe_channel& go, test::pipe_channel& up) {
  Semaphore s = Semaphore::attach(key);
  if (go.receive(2min) != 'g') return 2;
  Permit p = s.acquire(1, {.wait_timeout = 2min});
  up.send('a');
  p.release();
  return 0;
}

// The stage of these tests: one seat, held here; a waiter queued for it; a
// locker ready to take the lock and stop; an impatient waiter, which queues
// only when a test tells it to. The children are forked before this
// process acquires (see docs/testing.md on fork).
class LockFreeHandoff : public ::testing::Test {
 protected:
  void SetUp() override {
    mine = sem.acquire(1);
    w_go.send('g');
    ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  }
  void stop_locker_in_the_lock() {
    l_go.send('g');
    ASSERT_TRUE(test::eventually([&] { return test::is_stopped(locker.pid()); }));
  }
  // The children end well, and the seat is free and counted.
  void expect_all_returned() {
    EXPECT_EQ(locker.wait(), 0);
    EXPECT_EQ(waiter.wait(), 0);
    EXPECT_EQ(sem.reap(1s), 0);
    EXPECT_EQ(sem.used(), 0);
    EXPECT_TRUE(test::stats_add_up(sem));
  }

  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  test::pipe_channel w_go, w_up, l_go;
  test::child_process waiter{[this] { return wait_for_seat(key.str(), w_go, w_up); }};
  test::child_process locker{[this] { return lock_and_stop(key.str(), l_go); }};
  test::pipe_channel i_go, i_up;
  test::child_process impatient{[this] { return give_up_soon(key.str(), i_go, i_up); }};
  Permit mine;
};

TEST_F(LockFreeHandoff, AGrantedWaiterLeavesTheQueueWhileAStoppedProcessHoldsTheLock) {
  // The waiter is granted while it cannot run...
  waiter.kill(SIGSTOP);
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(waiter.pid()); }));
  mine.release();
  EXPECT_EQ(sem.waiters(), 0);
  EXPECT_EQ(sem.used(), 1);
  // ...and runs again only once another process holds the lock, stopped.
  stop_locker_in_the_lock();
  waiter.kill(SIGCONT);
  EXPECT_EQ(w_up.receive(30s), 'a') << "the granted waiter waited for the lock to leave the queue";
  locker.kill(SIGCONT);
  expect_all_returned();
}

TEST_F(LockFreeHandoff, AReleaseToTheQueueDoesNotWaitForAStoppedLockHolder) {
  stop_locker_in_the_lock();
  // Released by the thread that acquired (another thread has no lock-free
  // state and ends the lease under the lock). If it waits for the lock, a
  // watchdog lets the locker go on after 30 s, and the test fails.
  std::promise<void> released;
  auto watchdog = std::async(std::launch::async, [&, done = released.get_future()] {
    if (done.wait_for(30s) == std::future_status::ready) return true;
    locker.kill(SIGCONT);
    return false;
  });
  mine.release();
  released.set_value();
  EXPECT_TRUE(watchdog.get()) << "the release waited for the lock to hand its seat on";
  // The lock's holder hands the seat on when it lets go (or the waiter
  // does, at its next look).
  locker.kill(SIGCONT);
  EXPECT_EQ(w_up.receive(60s), 'a');
  expect_all_returned();
}

TEST_F(LockFreeHandoff, AQueuedAcquireWhoseBudgetRunsOutLeavesWhileAStoppedProcessHoldsTheLock) {
  i_go.send('g');
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 2; }));
  stop_locker_in_the_lock();
  EXPECT_EQ(i_up.receive(30s), 't') << "the acquire waited for the lock past its budget";
  EXPECT_EQ(impatient.wait(), 0);
  // Its slot is unlinked once the lock is free again, and the waiter ahead
  // of it is served as usual.
  locker.kill(SIGCONT);
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  mine.release();
  EXPECT_EQ(w_up.receive(30s), 'a');
  expect_all_returned();
}

// A waiter that gave up while a stopped process held the lock leaves the
// unlinking of its slot to that lock's holder (a bit in grants_due). A
// lock-free release that then asks the same holder to serve the queue must
// not erase that bit: the slot, behind a head that cannot be served yet,
// would stay in the queue and be counted as a waiter.
TEST(LockFreeHandoffFlags, AReleaseToTheQueueKeepsAGiveUpForTheLockHolder) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  test::pipe_channel h_go, h_up, l_go, i_go, i_up;
  // Forked before this process acquires (see docs/testing.md on fork).
  test::child_process head([&] {
    Semaphore s = Semaphore::attach(key.str());
    if (h_go.receive(2min) != 'g') return 2;
    Permit p = s.acquire(2, {.wait_timeout = 2min});
    h_up.send('a');
    p.release();
    return 0;
  });
  test::child_process locker([&] { return lock_and_stop(key.str(), l_go); });
  // It stays attached once it gave up: its exit would be a death, and the
  // reap of it would unlink its slot anyway.
  test::pipe_channel i_quit;
  test::child_process impatient([&] {
    Semaphore s = Semaphore::attach(key.str());
    if (i_go.receive(2min) != 'g') return 2;
    try {
      (void)s.acquire(1, {.wait_timeout = 5s});
      return 4;  // it had no seat to get
    } catch (const AcquisitionError& e) {
      if (e.reason() != Reason::timeout) return 3;
    }
    i_up.send('t');
    i_quit.receive(2min);
    return 0;
  });
  Permit first = sem.acquire(1);
  Permit second = sem.acquire(1);
  h_go.send('g');
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  i_go.send('g');
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 2; }));
  l_go.send('g');
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(locker.pid()); }));
  ASSERT_EQ(i_up.receive(30s), 't');
  // Lock-free, to a queue whose head needs both seats: only the flag for
  // the lock's holder is set.
  first.release();
  locker.kill(SIGCONT);
  EXPECT_TRUE(test::eventually([&] { return sem.waiters() == 1; }))
      << "the slot of the waiter that gave up stayed in the queue";
  i_quit.send('q');
  EXPECT_EQ(impatient.wait(), 0);
  second.release();
  EXPECT_EQ(h_up.receive(30s), 'a');
  EXPECT_EQ(head.wait(), 0);
  EXPECT_EQ(locker.wait(), 0);
  EXPECT_EQ(sem.waiters(), 0);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));
}

}  // namespace
}  // namespace shmsem
