// shutdown_test.cpp: the process-wide shmsem::shutdown() contract, each
// point seen from another process. shutdown() is irreversible, so every test
// calls it in a forked child and the parent observes the segment.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "service_test_util.hpp"
#include "test_support.hpp"

// Designated initializers that name only some fields are the documented
// style of these options; GCC 12 warns about the fields left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::eventually;
using test::pipe_channel;
using test::unique_key;

// Leases of process `pid` in `sem`.
std::vector<Holder> holders_of(const Semaphore& sem, int pid) {
  std::vector<Holder> out;
  for (const auto& h : sem.holders())
    if (h.pid == pid) out.push_back(h);
  return out;
}

TEST(Shutdown, AutoRenewalStopsSoTheSeatLapsesWithinItsTtl) {
  unique_key key;
  pipe_channel to_parent, to_child;
  child_process child([&] {
    Permit p = shmsem::acquire(key, 1, {.ttl = 300ms, .auto_renew = true});
    if (!p.auto_renewing()) return 3;
    to_parent.send('a');
    to_child.receive();
    shmsem::shutdown();
    if (p.auto_renewing()) return 4;
    to_parent.send('s');
    to_child.receive(std::chrono::minutes(5));  // stays alive, never releases
    return 0;
  });
  ASSERT_EQ(to_parent.receive(), 'a');
  Semaphore sem = Semaphore::attach(key);
  auto first = holders_of(sem, child.pid());
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(first[0].expires_at.has_value());
  const auto initial_expiry = *first[0].expires_at;
  // Before shutdown the lease is renewed past its first expiry.
  EXPECT_TRUE(eventually(
      [&] {
        auto h = holders_of(sem, child.pid());
        return h.size() == 1 && h[0].expires_at && *h[0].expires_at > initial_expiry &&
               h[0].state == HolderState::alive;
      },
      10s));
  to_child.send();
  ASSERT_EQ(to_parent.receive(), 's');
  // After it, the live holder's lease lapses within its TTL and the seat
  // serves someone else, while the child still runs.
  EXPECT_TRUE(eventually([&] { return sem.try_acquire().has_value(); }, 10s));
  EXPECT_EQ(::kill(child.pid(), 0), 0);
  EXPECT_GE(sem.stats().expired, 1u);
  to_child.send();
  EXPECT_EQ(child.wait(), 0);
}

TEST(Shutdown, WorkThatFinishesInTimeReleasesThroughItsScope) {
  unique_key key;
  pipe_channel to_parent, to_child;
  child_process child([&] {
    auto work = bounded({.key = key.str(), .ttl = 60s}, [&] {
      to_parent.send('w');
      to_child.receive();
      shmsem::shutdown();  // arrives while the work runs
    });
    if (!work()) return 3;
    to_parent.send('d');
    to_child.receive();
    return 0;
  });
  ASSERT_EQ(to_parent.receive(), 'w');
  Semaphore sem = Semaphore::attach(key);
  EXPECT_EQ(sem.used(), 1);
  to_child.send();
  ASSERT_EQ(to_parent.receive(), 'd');
  EXPECT_EQ(sem.used(), 0);  // released by the child itself: it is still alive
  EXPECT_EQ(sem.stats().released, 1u);
  EXPECT_EQ(sem.stats().reaped + sem.stats().expired, 0u);
  to_child.send();
  EXPECT_EQ(child.wait(), 0);
}

TEST(Shutdown, WaitingAcquiresEndWithReasonShutdown) {
  unique_key key;
  pipe_channel to_parent, to_child;
  // The child is forked before this process opens the semaphore, while it
  // has no thread but this one: opening starts the library's background
  // threads, and a fork() while one of them is still starting (allocating)
  // leaves a sanitizer allocator lock held for ever in the child (GCC 12's
  // ASan does not lock its allocator around fork(); glibc's malloc does).
  child_process child([&] {
    to_child.receive();  // the parent holds the only seat now
    std::atomic<int> result_acquire{-1}, result_bounded{-1}, ran{0};
    std::thread waiter([&] {
      try {
        shmsem::acquire(key, 1);
        result_acquire = 1;
      } catch (const AcquisitionError& e) {
        result_acquire = e.reason() == Reason::shutdown ? 0 : 2;
      }
    });
    std::thread skipper([&] {
      // skip without a wait_timeout would not wait at all.
      auto f =
          bounded({.key = key.str(), .wait_timeout = 1h, .on_unavailable = OnUnavailable::skip},
                  [&] { ++ran; });
      result_bounded = f() ? 1 : 0;
    });
    to_child.receive();  // both are blocked now
    shmsem::shutdown();
    waiter.join();
    skipper.join();
    if (result_acquire != 0) return 10 + result_acquire.load();
    if (result_bounded != 0 || ran != 0) return 20;
    // Later acquires fail at once, and bounded() does not fall back to fail_open.
    try {
      shmsem::acquire(key, 1, {.wait_timeout = 10s});
      return 30;
    } catch (const AcquisitionError& e) {
      if (e.reason() != Reason::shutdown) return 31;
    }
    test::unopenable_key bad(key.str() + ".unopenable");
    auto fail_open = bounded({.key = bad.str()}, [&] { ++ran; });
    try {
      fail_open();
      return 32;
    } catch (const AcquisitionError& e) {
      if (e.reason() != Reason::shutdown) return 33;
    }
    return ran == 0 ? 0 : 34;
  });
  Semaphore sem = Semaphore::open(key, 1);
  Permit held = sem.acquire();
  to_child.send();
  EXPECT_TRUE(eventually([&] { return sem.waiters() == 2; }, 20s)) << sem.waiters();
  to_child.send();
  EXPECT_EQ(child.wait(), 0);
  EXPECT_EQ(sem.waiters(), 0);
  EXPECT_EQ(sem.used(), 1);  // only ours
  EXPECT_GE(sem.stats().shutdowns, 2u);
}

TEST(Shutdown, SeatWonDuringShutdownIsGivenBack) {
  unique_key key;
  Semaphore sem = Semaphore::open(key, 2);
  pipe_channel to_parent, to_child;
  child_process child([&] {
    std::atomic<long> grants{0};
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (;;) {
          try {
            Permit p = shmsem::acquire(key, 2);
            grants.fetch_add(1);
          } catch (const AcquisitionError& e) {
            if (e.reason() != Reason::shutdown) bad.fetch_add(1);
            return;
          }
        }
      });
    }
    // Let the threads contend (grants and queued waits) before shutdown.
    while (grants.load() < 2000) std::this_thread::yield();
    shmsem::shutdown();
    for (auto& th : threads) th.join();
    to_parent.send(bad.load() == 0 ? 'k' : 'b');
    to_child.receive();
    return 0;
  });
  ASSERT_EQ(to_parent.receive(), 'k');
  // The child lives on: no seat of it may remain, and nobody waits.
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(holders_of(sem, child.pid()).empty());
  EXPECT_EQ(sem.waiters(), 0);
  const Stats s = sem.stats();
  EXPECT_EQ(s.acquired, s.released);
  EXPECT_EQ(s.reaped + s.expired + s.force_released, 0u);
  to_child.send();
  EXPECT_EQ(child.wait(), 0);
}

TEST(Shutdown, HeldPermitsAreNotReleased) {
  unique_key key;
  pipe_channel to_parent, to_child;
  child_process child([&] {
    Permit p = shmsem::acquire(key, 1);
    to_parent.send('h');
    to_child.receive();
    shmsem::shutdown();
    to_parent.send(p.is_held() ? 's' : 'x');
    to_child.receive(std::chrono::minutes(5));
    return 0;
  });
  ASSERT_EQ(to_parent.receive(), 'h');
  Semaphore sem = Semaphore::attach(key);
  to_child.send();
  ASSERT_EQ(to_parent.receive(), 's');
  EXPECT_EQ(sem.used(), 1);
  auto h = holders_of(sem, child.pid());
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].state, HolderState::alive);
  EXPECT_FALSE(sem.try_acquire().has_value());
  // Only the holder's death frees it.
  child.kill(SIGKILL);
  EXPECT_TRUE(eventually([&] { return sem.try_acquire().has_value(); }, 10s));
}

}  // namespace
}  // namespace shmsem
