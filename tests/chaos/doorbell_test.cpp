// doorbell_test.cpp: a blocked waiter hears of a death from the kernel. Each
// holder process keeps a lifeline (a robust mutex its lifeline thread
// holds); a queued waiter sleeps on the lifelines of the processes it
// watches, and the kernel wakes it when one of them dies. These tests turn
// the waiters' timed checks off (testing::no_watch_tick), so the seat can
// only come back through that bell: on a build without it they wait out
// their budget. The holder dies in each of the ways a process can stop
// being one: SIGKILL, exec, SIGKILL of a forked child, the death of the
// waiter ahead; and a main thread that exits while the process lives on is
// not taken for a death. With more processes than one sleep can watch the
// head falls back to its tick, and a stopped head is covered by the
// second's watchdog.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "sys/futex.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

// The waiters of this process keep no timed watch while it lives.
struct no_watch_tick {
  no_watch_tick() { detail::testing::no_watch_tick.store(1); }
  ~no_watch_tick() { detail::testing::no_watch_tick.store(0); }
};

// A thread of this process blocked in acquire() until it gets a seat or its
// budget runs out.
struct blocked_waiter {
  std::atomic<pid_t> tid{0};
  std::future<bool> got;
  blocked_waiter(Semaphore& sem, std::chrono::milliseconds budget) {
    got = std::async(std::launch::async, [this, &sem, budget] {
      tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
      try {
        Permit p = sem.acquire(1, {.wait_timeout = budget});
        return p.is_held();
      } catch (const AcquisitionError&) {
        return false;
      }
    });
  }
  // Queued and asleep in the library's wait.
  bool asleep() {
    return test::eventually([&] { return tid.load() != 0 && test::asleep_in_futex(tid.load()); });
  }
};

class Doorbell : public ::testing::Test {
 protected:
  void SetUp() override {
    SHMSEM_SHM_ONLY();  // the doorbells are words of a segment
    if (!sys::waitv_supported())
      SHMSEM_SKIP_WITHOUT_CAPABILITY("this kernel has no futex_waitv (Linux 5.16 and later)");
  }
  test::unique_key key;
};

// A forked holder of one seat that reports 'h' once it holds it, then does
// `then` (which never returns while the test needs it).
test::child_process holder(const std::string& key, int capacity, test::pipe_channel& ready,
                           std::function<void()> then) {
  return test::child_process([key, capacity, &ready, then] {
    Semaphore s = Semaphore::open(key, capacity, test::fifo());
    Permit p = s.acquire();
    ready.send('h');
    then();
    return 0;
  });
}

TEST_F(Doorbell, AKilledHoldersSeatReachesABlockedWaiterWithoutATick) {
  test::pipe_channel ready;
  auto h = holder(key.str(), 1, ready, [] {
    for (;;) ::pause();
  });
  ASSERT_EQ(ready.receive(), 'h');
  no_watch_tick quiet;
  Semaphore sem = Semaphore::attach(key.str());
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(w.asleep());
  const auto t0 = clk::now();
  h.kill(SIGKILL);
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready)
      << "no bell: the waiter never heard of the death";
  EXPECT_TRUE(w.got.get());
  std::printf("seat back %.3f ms after the SIGKILL (the kill's own waitpid included)\n",
              std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  EXPECT_TRUE(test::stats_add_up(sem));
}

// The acquire that gives a process its first seat returns once the
// lifeline thread has armed its lifeline, so that its death rings from the
// first seat on, not only once that thread has been scheduled (a waiter
// would find it by polling meanwhile). Fresh processes, one after the
// other: each starts its lifeline thread at that acquire.
TEST_F(Doorbell, AProcessHoldsItsFirstSeatWithItsLifelineArmed) {
  for (int i = 0; i < 50; ++i) {
    test::child_process first([k = key.str()] {
      Semaphore s = Semaphore::open(k, 1, test::fifo());
      Permit p = s.acquire();
      const std::string how = s.snapshot().death_wakeup;
      if (how.find("without a lifeline") != std::string::npos) {
        std::fprintf(stderr, "after the first acquire: %s\n", how.c_str());
        return 1;
      }
      return 0;
    });
    ASSERT_EQ(first.wait(), 0) << "round " << i << ": the first seat was held without a lifeline";
  }
}

TEST_F(Doorbell, AHolderThatExecsRingsAsADeath) {
  test::pipe_channel ready, go;
  auto h = holder(key.str(), 1, ready, [&go] {
    go.receive(60s);
    // exec ends every other thread, the lifeline thread with them, and
    // closes the segment's descriptor (O_CLOEXEC): this process is no longer
    // the holder, though it lives on as another program.
    ::execl("/bin/sleep", "sleep", "600", static_cast<char*>(nullptr));
    ::_exit(127);
  });
  ASSERT_EQ(ready.receive(), 'h');
  no_watch_tick quiet;
  Semaphore sem = Semaphore::attach(key.str());
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(w.asleep());
  go.send();
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready)
      << "no bell: the waiter never heard of the exec";
  EXPECT_TRUE(w.got.get());
  EXPECT_EQ(::kill(h.pid(), 0), 0) << "the exec'ed program should still run";
}

TEST_F(Doorbell, AMainThreadThatExitsIsNotADeathAndTheLaterKillIs) {
  test::pipe_channel ready, left;
  auto h = holder(key.str(), 1, ready, [&left] {
    // Another thread keeps the process alive after the main thread exits.
    std::thread([] {
      for (;;) ::pause();
    }).detach();
    left.send('x');
    // What pthread_exit() comes to in the kernel, without unwinding through
    // the test harness's catch-all: this thread, alone, ends.
    ::syscall(SYS_exit, 0);
  });
  ASSERT_EQ(ready.receive(), 'h');
  EXPECT_EQ(left.receive(), 'x');
  // The main thread is gone once its task reads as a zombie.
  const std::string main_stat =
      "/proc/" + std::to_string(h.pid()) + "/task/" + std::to_string(h.pid()) + "/stat";
  ASSERT_TRUE(test::eventually([&] {
    FILE* f = std::fopen(main_stat.c_str(), "r");
    if (!f) return false;
    char buf[512] = {};
    std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char* rp = std::strrchr(buf, ')');
    return rp && rp[2] == 'Z';
  }));
  no_watch_tick quiet;
  Semaphore sem = Semaphore::attach(key.str());
  // The process lives: its seat stays taken, by the bell or anyone else.
  EXPECT_FALSE(sem.try_acquire().has_value());
  {
    blocked_waiter w(sem, 1s);
    EXPECT_FALSE(w.got.get()) << "the seat of a live process was reaped";
  }
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(w.asleep());
  h.kill(SIGKILL);
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(w.got.get());
}

TEST_F(Doorbell, AKilledForkChildRingsAndItsParentKeepsItsSeat) {
  test::pipe_channel ready, child_ready, child_pid;
  // The holder forks a child that takes the second seat: the child has a
  // lifeline of its own, and the parent's stays the parent's.
  auto h = holder(key.str(), 2, ready, [&] {
    // Not while the lifeline thread that the acquire started may still be
    // starting (docs/testing.md, on fork).
    if (!test::eventually(test::other_threads_parked)) std::_Exit(5);
    test::child_process c([&] {
      Semaphore s = Semaphore::attach(key.str());
      Permit p = s.acquire();
      child_ready.send('c');
      for (;;) ::pause();
      return 0;
    });
    child_pid.send_value(c.pid());
    for (;;) ::pause();
  });
  ASSERT_EQ(ready.receive(), 'h');
  ASSERT_EQ(child_ready.receive(), 'c');
  const pid_t child = static_cast<pid_t>(child_pid.receive_value());
  no_watch_tick quiet;
  Semaphore sem = Semaphore::attach(key.str());
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(w.asleep());
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready)
      << "no bell: the waiter never heard of the fork child's death";
  EXPECT_TRUE(w.got.get());
  // The parent still holds its seat: its lifeline did not ring.
  EXPECT_EQ(sem.used(), 1);
  EXPECT_EQ(sem.holders().size(), 1u);
}

TEST_F(Doorbell, TheSecondWaiterHearsTheHeadDieAndTakesItsPlace) {
  test::pipe_channel ready, go, queued;
  auto h = holder(key.str(), 1, ready, [&go] { go.receive(60s); });
  ASSERT_EQ(ready.receive(), 'h');
  // The head: a waiter in another process.
  test::child_process head([&] {
    Semaphore s = Semaphore::attach(key.str());
    queued.send('q');
    Permit p = s.acquire(1, {.wait_timeout = 60s});
    for (;;) ::pause();
    return 0;
  });
  EXPECT_EQ(queued.receive(), 'q');
  no_watch_tick quiet;
  Semaphore sem = Semaphore::attach(key.str());
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 2; }));
  ASSERT_TRUE(w.asleep());
  head.kill(SIGKILL);
  // The second heard it, and reaped the dead head out of the queue.
  EXPECT_TRUE(test::eventually([&] { return sem.waiters() == 1; }, 20s))
      << "the second never heard of the head's death";
  go.send();  // the holder lets go: the seat is ours
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(w.got.get());
}

TEST_F(Doorbell, AStoppedHeadIsCoveredByTheSecondsWatchdog) {
  test::pipe_channel ready, queued, got;
  auto h = holder(key.str(), 1, ready, [] {
    for (;;) ::pause();
  });
  ASSERT_EQ(ready.receive(), 'h');
  test::child_process head([&] {
    Semaphore s = Semaphore::attach(key.str());
    queued.send('q');
    Permit p = s.acquire(1, {.wait_timeout = 60s});
    got.send('g');
    for (;;) ::pause();
    return 0;
  });
  EXPECT_EQ(queued.receive(), 'q');
  Semaphore sem = Semaphore::attach(key.str());
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(w.asleep());
  ASSERT_EQ(::kill(head.pid(), SIGSTOP), 0);
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(head.pid()); }));
  h.kill(SIGKILL);
  // The head cannot act; the second's watchdog reaps the dead holder, and
  // the seat goes to the head, first in line, stopped or not.
  EXPECT_TRUE(test::eventually([&] { return sem.waiters() == 1 && sem.used() == 1; }, 20s))
      << "nobody reaped the dead holder while the head was stopped";
  ASSERT_EQ(::kill(head.pid(), SIGCONT), 0);
  EXPECT_EQ(got.receive(), 'g');
  head.kill(SIGKILL);
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(w.got.get());
}

TEST_F(Doorbell, PastWhatOneSleepCanWatchTheHeadFallsBackToItsTick) {
  // More holder processes than the 127 lifelines a head can sleep on.
  constexpr int kHolders = 130;
  std::vector<test::pipe_channel> ready(kHolders);
  std::vector<test::child_process> holders;
  holders.reserve(kHolders);
  // One at a time, so that they take the holder records in order.
  for (int i = 0; i < kHolders; ++i) {
    holders.push_back(holder(key.str(), kHolders, ready[static_cast<std::size_t>(i)], [] {
      for (;;) ::pause();
    }));
    ASSERT_EQ(ready[static_cast<std::size_t>(i)].receive(), 'h');
  }
  Semaphore sem = Semaphore::attach(key.str());
  EXPECT_EQ(sem.used(), kHolders);
  blocked_waiter w(sem, 30s);
  ASSERT_TRUE(w.asleep());
  // The head watches the lifelines of the first 127 holder records; the
  // last holder's record is past them, so only the tick can find it.
  holders.back().kill(SIGKILL);
  ASSERT_EQ(w.got.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(w.got.get());
}

}  // namespace
}  // namespace shmsem
