// claim_test.cpp: how a process claims its holder record. The token of a
// free record is taken before the segment lock, so that a herd does not
// pass the lock one kernel walk of the file's locks at a time; the threads
// of one process must then claim one record among them. Were two threads
// to claim at once, one could drop a token that the process's shared file
// description already held for the other: the live process would read as
// dead, and its seats would be reaped from under it. A process killed
// between its token and the lock must cost the others nothing.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <latch>
#include <optional>
#include <thread>
#include <vector>

#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::pipe_channel;
using test::unique_key;

TEST(HolderClaim, ThreadsTakingTheirProcesssFirstSeatsAtOnceKeepItAlive) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;
  unique_key k;
  auto s = Semaphore::open(k, kThreads);
  for (int round = 0; round < kRounds; ++round) {
    pipe_channel held, go;
    // A new process each round: its first acquires are its threads' first.
    child_process c([&] {
      auto mine = Semaphore::open(k.str(), kThreads);
      std::latch start(kThreads);
      std::vector<std::optional<Permit>> permits(kThreads);
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
          start.arrive_and_wait();
          permits[static_cast<std::size_t>(t)].emplace(mine.acquire(1, {.wait_timeout = 60s}));
        });
      for (auto& t : threads) t.join();
      held.send('h');
      go.receive(60s);
      for (auto& p : permits) p->release();
      return 0;
    });
    ASSERT_EQ(held.receive(60s), 'h') << "round " << round;
    // The child lives: nothing of it may be reaped.
    EXPECT_EQ(s.reap(), 0) << "round " << round;
    EXPECT_EQ(s.used(), kThreads) << "round " << round;
    const std::vector<Holder> holders = s.holders();
    EXPECT_EQ(holders.size(), static_cast<std::size_t>(kThreads)) << "round " << round;
    for (const Holder& h : holders) {
      EXPECT_EQ(h.pid, c.pid()) << "round " << round;
      EXPECT_EQ(h.state, HolderState::alive) << "round " << round;
    }
    go.send();
    ASSERT_EQ(c.wait(60s), 0) << "round " << round;
    EXPECT_EQ(s.used(), 0) << "round " << round;
  }
}

void die_claiming(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::claiming) ::raise(SIGKILL);
}

// A process killed between reserving its record (its token taken, before
// the lock) and the lock held no seat and queued no waiter: it must cost
// the others nothing. Its record is left reserved, with no token, on the
// free list, where the locked claim takes it back once no record is free.
TEST(HolderClaim, ProcessesKilledBetweenTheirTokenAndTheLockCostNoSeat) {
  constexpr int kDeaths = 40;
  constexpr int kCapacity = 2;
  unique_key k;
  auto s = Semaphore::open(k, kCapacity);
  for (int i = 0; i < kDeaths; ++i) {
    child_process c([&] {
      detail::testing::set_hook(die_claiming);
      auto mine = Semaphore::attach(k.str());
      (void)mine.acquire(1, {.wait_timeout = 30s});
      return 1;  // survived: the hook never ran
    });
    ASSERT_EQ(c.wait(60s), 128 + SIGKILL) << "death " << i;
  }
  EXPECT_EQ(s.used(), 0);
  EXPECT_EQ(s.waiters(), 0);
  // Every seat is still there for the living, and for their first acquires.
  for (int i = 0; i < 20; ++i) {
    child_process c([&] {
      auto mine = Semaphore::attach(k.str());
      Permit a = mine.acquire(kCapacity, {.wait_timeout = 30s});
      return a.weight() == kCapacity ? 0 : 2;
    });
    ASSERT_EQ(c.wait(60s), 0) << "survivor " << i;
  }
  EXPECT_EQ(s.used(), 0);
  EXPECT_EQ(s.stats().acquired, 20u);
  EXPECT_EQ(s.reap(), 0);
}

}  // namespace
}  // namespace shmsem
