// Holders and lock owners that die: nothing leaks, nobody hangs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <shmsem/shmsem.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "seat_holder.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::pipe_channel;
using test::unique_key;

TEST(CrashRecovery, TryAcquireReclaimsTheSeatOfAKilledHolder) {
  unique_key k;
  auto s = Semaphore::open(k, 1, test::fifo());
  test::seat_holder c(k.str(), 1, 1);
  EXPECT_FALSE(s.try_acquire().has_value());
  c.proc.kill(SIGKILL);
  auto p = s.try_acquire();
  ASSERT_TRUE(p.has_value()) << "the dead holder's seat was not reclaimed";
  EXPECT_EQ(s.stats().reaped, 1u);
  EXPECT_EQ(s.stats().reclaimed_seats, 1u);
}

TEST(CrashRecovery, ReapReclaimsAZombieHoldersSeat) {
  unique_key k;
  auto s = Semaphore::open(k, 2, test::fifo());
  test::seat_holder c(k.str(), 2, 2);
  ::kill(c.proc.pid(), SIGKILL);
  // Not waited for yet: a zombie, whose PID still answers kill(pid, 0).
  ASSERT_TRUE(test::eventually([&] { return s.holders().at(0).state == HolderState::dead; }));
  EXPECT_EQ(s.reap(), 2);
  EXPECT_EQ(s.used(), 0);
  c.proc.kill(SIGKILL);
}

TEST(CrashRecovery, BlockedWaiterGetsTheSeatSoonAfterTheHolderDies) {
  unique_key k;
  auto s = Semaphore::open(k, 1, test::fifo());
  test::seat_holder c(k.str(), 1, 1);
  std::chrono::steady_clock::time_point killed;
  std::thread killer([&] {
    while (s.waiters() == 0) std::this_thread::yield();
    killed = std::chrono::steady_clock::now();
    ::kill(c.proc.pid(), SIGKILL);
  });
  auto p = s.acquire(1, {.wait_timeout = 30s});
  const auto done = std::chrono::steady_clock::now();
  killer.join();  // before `killed` is read: the killer thread wrote it
  const auto took = done - killed;
  EXPECT_TRUE(p.is_held());
  // The design target is 50 ms (the head waiter checks every 20 ms); the
  // bound here is generous so a loaded CI machine does not make it flaky.
  EXPECT_LT(took, 2s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
  c.proc.kill(SIGKILL);
}

TEST(CrashRecovery, WaiterOfAnotherProcessProceedsAfterAKill) {
  unique_key k;
  auto s = Semaphore::open(k, 1, test::fifo());
  test::seat_holder h(k.str(), 1, 1);
  pipe_channel waiting, got;
  child_process waiter([&] {
    auto s2 = Semaphore::open(k, 1, test::fifo());
    waiting.send('w');
    auto p = s2.acquire(1, {.wait_timeout = 30s});
    got.send('g');
    return 0;
  });
  ASSERT_EQ(waiting.receive(), 'w');
  // Queued before the kill, or the test would only show that a fresh
  // acquire reclaims a dead holder's seat.
  ASSERT_TRUE(test::eventually([&] { return s.waiters() == 1; }));
  h.proc.kill(SIGKILL);
  EXPECT_EQ(got.receive(), 'g');
  EXPECT_EQ(waiter.wait(), 0);
  EXPECT_EQ(s.used(), 0);
}

TEST(CrashRecovery, DeadWaiterDoesNotBlockTheQueue) {
  unique_key k;
  auto s = Semaphore::open(k, 2, test::fifo());
  auto mine = s.acquire(2);
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(test::eventually(test::other_threads_parked));
  pipe_channel waiting;
  child_process dead_waiter([&] {
    auto s2 = Semaphore::open(k, 2, test::fifo());
    waiting.send('w');
    s2.acquire(2);
    return 0;
  });
  ASSERT_EQ(waiting.receive(), 'w');
  ASSERT_TRUE(test::eventually([&] { return s.waiters() == 1; }));
  dead_waiter.kill(SIGKILL);
  mine.release();
  // The dead head of the queue must not hold back a live request.
  auto p = s.acquire(1, {.wait_timeout = 30s});
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(s.waiters(), 0);
}

// Only the head of the queue watches the holders, and only the one behind
// it watches the head, closely. When the holder, the head and the second
// all die at once, the waiters behind them must still notice.
TEST(CrashRecovery, HolderHeadAndSecondDyingTogetherDoNotStallTheQueue) {
  unique_key k;
  auto s = Semaphore::open(k, 1, test::fifo());
  test::seat_holder holder(k.str(), 1, 1);
  std::vector<child_process> doomed;
  for (int i = 0; i < 2; ++i) {
    doomed.emplace_back([&] {
      Semaphore::open(k, 1, test::fifo()).acquire();
      return 0;
    });
    ASSERT_TRUE(test::eventually([&] { return s.waiters() == i + 1; }));
  }
  std::atomic<bool> queued{false};
  auto third = std::async(std::launch::async, [&] {
    queued = true;
    return s.acquire(1, {.wait_timeout = 60s});
  });
  ASSERT_TRUE(test::eventually([&] { return queued && s.waiters() == 3; }));
  holder.proc.kill(SIGKILL);
  for (auto& c : doomed) c.kill(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  Permit p = third.get();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(s.waiters(), 0);
  // A slow watchdog, not an event: seconds, within a generous bound.
  EXPECT_LT(took, 20s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
}

void die_in(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::mid_grant) ::raise(SIGKILL);
}

TEST(CrashRecovery, OwnerDeathInsideTheLockIsRepaired) {
  unique_key k;
  auto s = Semaphore::open(k, 3, test::fifo());
  auto mine = s.acquire();
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(test::eventually(test::other_threads_parked));
  child_process c([&] {
    auto s2 = Semaphore::open(k, 3, test::fifo());
    detail::testing::set_hook(die_in);
    s2.acquire(2);  // dies holding the lock, halfway through the grant
    return 1;
  });
  EXPECT_EQ(c.wait(), 128 + SIGKILL);
  auto p = s.acquire(2, {.wait_timeout = 30s});  // EOWNERDEAD: repair, then proceed
  EXPECT_EQ(s.stats().recoveries, 1u);
  EXPECT_EQ(s.used(), 3);
  mine.release();
  p.release();
  EXPECT_EQ(s.used(), 0);
  EXPECT_TRUE(s.try_acquire(3).has_value());
}

void die_initializing(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::initializing) ::raise(SIGKILL);
}

TEST(CrashRecovery, CreatorKilledDuringInitializationIsRedone) {
  unique_key k;
  child_process c([&] {
    detail::testing::set_hook(die_initializing);
    Semaphore::open(k, 4, test::fifo());
    return 1;
  });
  EXPECT_EQ(c.wait(), 128 + SIGKILL);
  auto s = Semaphore::open(k, 2, test::fifo());  // re-initializes; no hang
  EXPECT_EQ(s.capacity(), 2);
  auto p = s.acquire(2);
  EXPECT_EQ(s.used(), 2);
}

TEST(CrashRecovery, ReusedPidDoesNotKeepADeadHoldersSeat) {
  unique_key k;
  auto s = Semaphore::open(k, 1, test::fifo());
  test::seat_holder h(k.str(), 1, 1);
  const pid_t dead_pid = h.proc.pid();
  h.proc.kill(SIGKILL);
  // A new, live process with the dead holder's PID: ours, or one of
  // another test running beside this one (ctest -j2), which serves as well.
  test::pid_impostor twin(dead_pid);
  ASSERT_EQ(::kill(dead_pid, 0), 0) << "pid " << dead_pid << " never came back";
  auto p = s.try_acquire();
  EXPECT_TRUE(p.has_value()) << "a recycled PID kept a dead holder's seat";
}

TEST(CrashRecovery, LiveHolderIsNeverReaped) {
  unique_key k;
  auto s = Semaphore::open(k, 1, test::fifo());
  test::seat_holder h(k.str(), 1, 1);
  EXPECT_EQ(s.reap(), 0);
  EXPECT_FALSE(s.try_acquire().has_value());
  EXPECT_EQ(s.holders().at(0).state, HolderState::alive);
  EXPECT_EQ(s.holders().at(0).pid, h.proc.pid());
  h.proc.kill(SIGKILL);
}

}  // namespace
}  // namespace shmsem
