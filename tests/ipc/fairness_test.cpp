// fairness_test.cpp: the two fairness policies. Under fifo a freed seat
// goes to the first in line; under barging a running request may take it
// ahead of the sleeping ones, until the first in line has been first for
// kStarvationBound, after which freed seats are kept for it, weights and
// all, until it is served. The policy is the segment's, chosen at creation.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

using test::with_fairness;

// Sets the starvation bound (a testing hook, inherited across fork) for a
// scope, and puts the library's own back at its end.
struct starvation_bound_for_test {
  explicit starvation_bound_for_test(std::int64_t ns) {
    detail::testing::starvation_bound_ns.store(ns);
  }
  ~starvation_bound_for_test() { detail::testing::starvation_bound_ns.store(0); }
};

// Shared between forked processes: anonymous, MAP_SHARED.
template <class T>
struct shared {
  T* p;
  shared() {
    void* m = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("mmap");
    p = new (m) T{};
  }
  ~shared() { ::munmap(p, sizeof(T)); }
  T* operator->() { return p; }
};

TEST(Fairness, IsChosenByTheCreatorAndKeptByEveryLaterOpen) {
  SHMSEM_SHM_ONLY();  // only shared memory can barge; the others are always FIFO
  test::unique_key key;
  auto sem = Semaphore::open(key, 2, with_fairness(Fairness::barging));
  EXPECT_EQ(sem.fairness(), Fairness::barging);
  EXPECT_EQ(sem.snapshot().fairness, Fairness::barging);
  // Another policy asked for later is logged, and the stored one stands.
  auto other = Semaphore::open(key, 2, with_fairness(Fairness::fifo));
  EXPECT_EQ(other.fairness(), Fairness::barging);
  EXPECT_EQ(other.snapshot().fairness, Fairness::barging);
  EXPECT_EQ(Semaphore::attach(key).snapshot().fairness, Fairness::barging);
  EXPECT_EQ(Semaphore::inspect(key).fairness, Fairness::barging);
  test::unique_key plain, ordered;
  EXPECT_EQ(Semaphore::open(plain, 1).fairness(), Fairness::barging);
  EXPECT_EQ(Semaphore::open(plain, 1).snapshot().fairness, Fairness::barging);
  EXPECT_EQ(Semaphore::open(ordered, 1, with_fairness(Fairness::fifo)).fairness(), Fairness::fifo);
  EXPECT_EQ(Semaphore::inspect(ordered).fairness, Fairness::fifo);
  EXPECT_STREQ(to_string(Fairness::barging), "barging");
  EXPECT_STREQ(to_string(Fairness::fifo), "fifo");
}

// Barging where the backend can barge (shared memory), else FIFO.
TEST(Fairness, TheDefaultIsBargingWhereTheBackendCanBarge) {
  test::unique_key key;
  auto sem = Semaphore::open(key, 1);
  const Fairness expected = sem.capabilities().barging ? Fairness::barging : Fairness::fifo;
  EXPECT_EQ(sem.fairness(), expected);
  EXPECT_EQ(sem.snapshot().fairness, expected);
}

TEST(Fairness, AnUnknownPolicyOrBargingOnRedisIsRejected) {
  test::unique_key key;
  EXPECT_THROW(Semaphore::open(key, 1, with_fairness(static_cast<Fairness>(7))),
               std::invalid_argument);
  // Refused before any connection: no server is needed to see it.
  EXPECT_THROW(Semaphore::open("redis://127.0.0.1:1/fairness", 1, with_fairness(Fairness::barging)),
               std::invalid_argument);
}

// A waiter asleep in another process, stopped there (SIGSTOP), and a seat
// freed here: under barging this thread, which runs, takes it at once;
// under fifo it was handed to the stopped waiter and this thread gets none.
class PassingTheQueue : public ::testing::TestWithParam<Fairness> {};

TEST_P(PassingTheQueue, ARunningRequestPassesAStoppedWaiterOnlyUnderBarging) {
  SHMSEM_SHM_ONLY();  // only shared memory can barge
  // The waiter must not starve before it is stopped (1 ms is less than a
  // busy host's scheduling delay): an hour's bound, inherited across fork.
  starvation_bound_for_test bound(3'600'000'000'000);
  test::unique_key key;
  auto sem = Semaphore::open(key, 1, with_fairness(GetParam()));
  test::pipe_channel go, got;
  // Forked before this process's first acquire (docs/testing.md, on fork).
  test::child_process waiter([&] {
    go.receive();
    auto s = Semaphore::attach(key);
    Permit p = s.acquire(1, {.wait_timeout = 30s});
    got.send('g');
    return 0;
  });
  Permit held = sem.acquire();
  go.send();
  ASSERT_TRUE(test::eventually(
      [&] { return sem.waiters() == 1 && test::asleep_in_futex(waiter.pid(), waiter.pid()); }));
  waiter.kill(SIGSTOP);
  held.release();
  std::optional<Permit> passed = sem.try_acquire();
  if (GetParam() == Fairness::barging) {
    EXPECT_TRUE(passed.has_value()) << "a running request must pass a sleeping waiter";
    EXPECT_EQ(sem.waiters(), 1);
  } else {
    EXPECT_FALSE(passed.has_value()) << "fifo: the freed seat belongs to the first in line";
  }
  passed.reset();
  waiter.kill(SIGCONT);
  EXPECT_EQ(got.receive(), 'g');
  EXPECT_EQ(waiter.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
}

INSTANTIATE_TEST_SUITE_P(Policies, PassingTheQueue,
                         ::testing::Values(Fairness::fifo, Fairness::barging),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Capacity 4, three seats held here, a weight-3 request waiting in another
// process. A weight-1 try_acquire could pass it for the one free seat; once
// the first in line has been first past the bound it may not, and the
// freed seats are kept for it: a weight-1 request that comes later waits behind the
// weight-3 head even while two seats are free, and is served after it.
TEST(Fairness, AWeightedHeadThatWaitedPastTheBoundIsServedBeforeNewcomers) {
  SHMSEM_SHM_ONLY();  // only shared memory can barge
  test::unique_key key;
  auto sem = Semaphore::open(key, 4, with_fairness(Fairness::barging));
  test::pipe_channel go, got, done;
  test::child_process heavy([&] {
    go.receive();
    auto s = Semaphore::attach(key);
    Permit p = s.acquire(3, {.wait_timeout = 30s});
    got.send('h');
    done.receive();
    return 0;
  });
  std::vector<Permit> held;
  for (int i = 0; i < 3; ++i) held.push_back(sem.acquire());
  go.send();
  ASSERT_TRUE(test::eventually(
      [&] { return sem.waiters() == 1 && test::asleep_in_futex(heavy.pid(), heavy.pid()); }));
  // The free seat: taken by running requests until the head has waited
  // past the bound, then kept for it.
  ASSERT_TRUE(test::eventually([&] { return !sem.try_acquire().has_value(); }, 20s))
      << "the weight-3 head waits past the bound, and weight-1 requests still pass it";
  EXPECT_EQ(sem.used(), 3);
  std::atomic<pid_t> newcomer_tid{0};
  std::atomic<bool> newcomer_got{false};
  std::thread newcomer([&] {
    newcomer_tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    Permit p = sem.acquire(1, {.wait_timeout = 30s});
    newcomer_got.store(true);
  });
  ASSERT_TRUE(test::eventually([&] {
    return sem.waiters() == 2 && newcomer_tid.load() != 0 &&
           test::asleep_in_futex(newcomer_tid.load());
  }));
  held.pop_back();  // two seats free: not enough for the head, and nobody passes it
  EXPECT_FALSE(sem.try_acquire().has_value());
  EXPECT_FALSE(newcomer_got.load());
  EXPECT_EQ(sem.used(), 2);
  held.pop_back();  // three: the head's
  EXPECT_EQ(got.receive(), 'h');
  EXPECT_FALSE(newcomer_got.load()) << "the newcomer was served before the weight-3 head";
  done.send();
  EXPECT_EQ(heavy.wait(), 0);
  newcomer.join();
  EXPECT_TRUE(newcomer_got.load());
  // The queue emptied: running requests may pass again.
  EXPECT_EQ(sem.waiters(), 0);
  EXPECT_EQ(sem.snapshot().fairness, Fairness::barging);
}

// A deep queue's next head has waited longer than the bound by the time its
// turn comes, but it was passed for none of it: running requests may pass
// it again once the starved head before it is served. Capacity 2: a
// weight-2 head starves, is served, and gives its seats back; a weight-1
// and a weight-2 request queued behind it since before it starved. Left
// FIFO, the weight-1 request would take one seat and the other would be
// kept for the weight-2 one behind it; barging again, a running
// try_acquire takes it.
TEST(Fairness, RunningRequestsPassTheNextHeadAgainOnceAStarvedHeadIsServed) {
  SHMSEM_SHM_ONLY();  // only shared memory can barge
  // Long enough that the steps after the starved head's grant fit in it on
  // a loaded host; the test waits this long once, for the first head.
  starvation_bound_for_test bound(1'000'000'000);
  test::unique_key key;
  auto sem = Semaphore::open(key, 2, with_fairness(Fairness::barging));
  std::optional<Permit> first = sem.acquire(), second = sem.acquire();
  std::atomic<pid_t> tids[3]{};
  std::atomic<int> got{0};
  std::atomic<int> give_back{0};  // how many of the waiters, in order, release
  auto queue = [&](int i, int weight) {
    return std::thread([&, i, weight] {
      tids[i].store(static_cast<pid_t>(::syscall(SYS_gettid)));
      Permit p = sem.acquire(weight, {.wait_timeout = 60s});
      got.fetch_add(1 << (i * 4));
      while (give_back.load() <= i) std::this_thread::yield();
    });
  };
  std::vector<std::thread> waiters;
  const int weights[3] = {2, 1, 2};
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(queue(i, weights[i]));
    ASSERT_TRUE(test::eventually([&] {
      return sem.waiters() == i + 1 && tids[i].load() != 0 && test::asleep_in_futex(tids[i].load());
    }));
  }
  // One seat free: running requests take it until the weight-2 head has
  // been passed for the bound, then it is kept for that head.
  const auto all_queued = clk::now();
  first.reset();
  ASSERT_TRUE(test::eventually([&] { return !sem.try_acquire().has_value(); }, 30s))
      << "the head never starved";
  // The passing time is what is tested here, not a synchronisation: the
  // two behind the head have waited past the bound too, the case in which
  // a rule that counts from the enqueue keeps the queue FIFO.
  std::this_thread::sleep_until(all_queued + 1100ms);
  second.reset();  // the starved head is served
  ASSERT_TRUE(test::eventually([&] { return got.load() == 1; }));
  give_back.store(1);
  // Its two seats: one for the weight-1 head, one for whoever runs.
  ASSERT_TRUE(test::eventually([&] { return (got.load() & 0xf0) != 0 || sem.used() < 2; }));
  std::optional<Permit> passed = sem.try_acquire();
  EXPECT_TRUE(passed.has_value())
      << "the queue stayed FIFO after its starved head was served: a free seat was kept for the "
         "weight-2 request at the back";
  passed.reset();
  give_back.store(3);
  for (auto& t : waiters) t.join();
  EXPECT_EQ(got.load(), 0x111);
  EXPECT_EQ(sem.used(), 0);
}

// Four threads in two processes take and give back one seat each as fast
// as they can; weight-3 requests from this process still get through, each
// within a generous budget: the bound, not luck, lets them in.
TEST(Fairness, WeightedRequestsDoNotStarveAmongBargers) {
  SHMSEM_SHM_ONLY();  // only shared memory can barge
  test::unique_key key;
  auto sem = Semaphore::open(key, 4, with_fairness(Fairness::barging));
  struct flags {
    std::atomic<int> stop;
    std::atomic<long> taken;
  };
  shared<flags> f;
  test::pipe_channel ready;
  std::vector<test::child_process> bargers;
  for (int p = 0; p < 2; ++p)
    bargers.emplace_back([&] {
      auto s = Semaphore::attach(key);
      std::vector<std::thread> threads;
      for (int t = 0; t < 2; ++t)
        threads.emplace_back([&] {
          while (f->stop.load() == 0) {
            Permit permit = s.acquire(1, {.wait_timeout = 30s});
            f->taken.fetch_add(1);
          }
        });
      ready.send();
      for (auto& t : threads) t.join();
      return 0;
    });
  for (int p = 0; p < 2; ++p) ASSERT_EQ(ready.receive(), '.');
  ASSERT_TRUE(test::eventually([&] { return f->taken.load() > 1000; }));
  clk::duration longest{};
  for (int i = 0; i < 20; ++i) {
    const auto t0 = clk::now();
    Permit p = sem.acquire(3, {.wait_timeout = 20s});
    longest = std::max(longest, clk::now() - t0);
    EXPECT_LE(sem.used(), 4);
  }
  f->stop.store(1);
  for (auto& b : bargers) EXPECT_EQ(b.wait(), 0);
  RecordProperty(
      "longest_weight3_wait_us",
      static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(longest).count()));
  EXPECT_EQ(sem.used(), 0);
}

}  // namespace
}  // namespace shmsem
