// lock_safety_test.cpp: the segment lock cannot leak, and a full /dev/shm
// costs no free seat its lease. Three ways a live process could keep the
// lock for ever, or keep others waiting on it:
//   - /dev/shm is full when a release hands its seats to queued waiters,
//     and other threads have reserved lease slots for themselves (the lease
//     table keeps room for every seat, so the handoff needs no growth);
//   - a repair after a death that fails (it throws);
//   - a process stopped while it holds the lock: calls that promised not
//     to wait must not wait for it.
// Each must leave every other call returning within its bound, nothing
// over the capacity, and the semaphore usable once the cause is gone.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
constexpr int kSkipped = 77;

// A queued waiter in another process: reports 'q' once it is about to wait,
// then 'g' when granted (and holds until told), 't' when its budget ran out.
struct queued_waiter {
  test::pipe_channel up, down;
  test::child_process proc;
  queued_waiter(const std::string& key, std::chrono::milliseconds budget)
      : proc([this, key, budget] {
          Semaphore s = Semaphore::attach(key);
          up.send('q');
          try {
            Permit p = s.acquire(1, {.wait_timeout = budget});
            up.send('g');
            down.receive(60s);
          } catch (const AcquisitionError& e) {
            up.send(e.reason() == Reason::timeout ? 't' : 'e');
          }
          return 0;
        }) {}
};

TEST(LockSafety, AFullDevShmCostsNoFreeSeatItsLease) {
  test::child_process child([] {
    std::string why;
    if (!test::private_small_dev_shm("256k", why)) {
      std::fprintf(stderr, "skipped: %s\n", why.c_str());
      return kSkipped;
    }
    const std::string key = "fault.handoff";
    Semaphore sem = Semaphore::open(key, 2, test::fifo());
    sem.acquire().release();       // this thread now acquires without the lock
    Permit both = sem.acquire(2);  // lock-free, from its reserve of slots
    test::fill_file_system("/dev/shm/filler");
    // Threads that each try to reserve lease slots for their own lock-free
    // acquires, and stay alive with whatever they got. Before the lease
    // table kept room for every seat, their reserves took what was left,
    // and the handoff below had no slot for its grants.
    constexpr int kReservers = 12;
    std::latch reserved(kReservers), done(1);
    std::vector<std::thread> reservers;
    for (int i = 0; i < kReservers; ++i)
      reservers.emplace_back([&] {
        EXPECT_FALSE(sem.try_acquire().has_value());
        reserved.count_down();
        done.wait();
      });
    // The waiters are forked once every reserver sleeps: a fork() while one
    // of them allocates (its failed reservation builds an error) leaves a
    // sanitizer allocator lock held for ever in the child (GCC 12's ASan
    // does not lock its allocator around fork(); glibc's malloc does), and
    // that child then hangs holding the segment lock.
    reserved.wait();
    queued_waiter w1(key, 30s);
    EXPECT_EQ(w1.up.receive(), 'q');
    EXPECT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
    queued_waiter w2(key, 30s);
    EXPECT_EQ(w2.up.receive(), 'q');
    EXPECT_TRUE(test::eventually([&] { return sem.waiters() == 2; }));
    queued_waiter w3(key, 1s);  // no seat comes for it
    EXPECT_EQ(w3.up.receive(), 'q');
    EXPECT_TRUE(test::eventually([&] { return sem.waiters() == 3; }));

    // The handoff of both seats, with /dev/shm still full: the release
    // returns, the first two waiters get their leases, the third its
    // timeout, and nothing goes over the capacity.
    const auto start = clk::now();
    both.release();
    EXPECT_LT(clk::now() - start, 5s);
    EXPECT_EQ(w1.up.receive(10s), 'g') << "a queued waiter was not served on a full /dev/shm";
    EXPECT_EQ(w2.up.receive(10s), 'g') << "a queued waiter was not served on a full /dev/shm";
    EXPECT_EQ(w3.up.receive(10s), 't') << "a queued waiter hung past its 1 s budget";
    EXPECT_EQ(sem.used(), 2);
    // Others' calls return: a try within its bound.
    auto tried = std::async(std::launch::async, [&] { return sem.try_acquire().has_value(); });
    EXPECT_EQ(tried.wait_for(5s), std::future_status::ready) << "try_acquire() hung";
    if (tried.wait_for(0s) == std::future_status::ready) {
      EXPECT_FALSE(tried.get());
    }
    w1.down.send();
    w2.down.send();
    EXPECT_EQ(w1.proc.wait(), 0);
    EXPECT_EQ(w2.proc.wait(), 0);
    EXPECT_EQ(w3.proc.wait(), 0);
    // A seat is free and the disk still full: a thread new to the semaphore
    // (no reserve of its own) still gets it, from the locked path.
    std::thread newcomer([&] {
      try {
        Permit p = sem.acquire(2, {.wait_timeout = 10s});
        EXPECT_TRUE(p.is_held());
      } catch (const std::exception& e) {
        ADD_FAILURE() << "acquire() with both seats free on a full /dev/shm: " << e.what();
      }
    });
    newcomer.join();
    EXPECT_EQ(sem.stats().errors, 0u);
    ::unlink("/dev/shm/filler");
    done.count_down();
    for (auto& t : reservers) t.join();
    EXPECT_EQ(sem.used(), 0);
    EXPECT_TRUE(test::stats_add_up(sem));
    return 0;
  });
  const int rc = child.wait(120s);
  if (rc == kSkipped)
    SHMSEM_SKIP_WITHOUT_CAPABILITY(
        "cannot mount a private tmpfs on /dev/shm here (needs root); see stderr");
  EXPECT_EQ(rc, 0);
}

void die_when_locked(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::locked) ::raise(SIGKILL);
}
void fail_to_repair(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::repairing) throw std::bad_alloc();
}

TEST(LockSafety, ARepairThatFailsReleasesTheLockAndTheNextLockerRepairs) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  test::child_process dies([&] {
    Semaphore s = Semaphore::attach(key);
    detail::testing::set_hook(die_when_locked);
    s.acquire();  // killed inside the lock: the mutex is left owner-died
    return 1;
  });
  EXPECT_EQ(dies.wait(), 128 + SIGKILL);
  test::pipe_channel report, stay;
  test::child_process repairer([&] {
    Semaphore s = Semaphore::attach(key);
    detail::testing::set_hook(fail_to_repair);
    try {
      s.try_acquire();
      report.send('n');  // the repair did not run, or did not fail
    } catch (const SegmentError& e) {
      const bool names_key = std::string(e.what()).find(key.str()) != std::string::npos;
      report.send(names_key ? 'e' : 'k');
    }
    stay.receive(60s);  // alive: a lock it kept would stay kept
    return 0;
  });
  ASSERT_EQ(report.receive(), 'e') << "n: no failed repair; k: the error did not name the key";
  // The lock is free, and this process repairs again and goes on.
  Permit p = sem.acquire(1, {.wait_timeout = 5s});
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(sem.stats().recoveries, 1u);
  EXPECT_GE(sem.stats().errors, 1u);
  auto second = sem.try_acquire();
  EXPECT_TRUE(second.has_value());
  EXPECT_EQ(sem.used(), 2);
  stay.send();
  EXPECT_EQ(repairer.wait(), 0);
  p.release();
  second->release();
  EXPECT_TRUE(test::stats_add_up(sem));
}

void stop_when_locked(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::locked) ::raise(SIGSTOP);
}

TEST(LockSafety, CallsThatPromisedNotToWaitDoNotWaitForAStoppedLockHolder) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  test::pipe_channel done;
  test::child_process stopped([&] {
    Semaphore s = Semaphore::attach(key);
    detail::testing::set_hook(stop_when_locked);
    Permit p = s.acquire();  // stops itself right after taking the lock
    detail::testing::set_hook(nullptr);
    done.send();
    return 0;
  });
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(stopped.pid()); }));

  // try_acquire: about 10 ms, then no seat.
  const auto start = clk::now();
  auto tried = std::async(std::launch::async, [&] { return sem.try_acquire().has_value(); });
  const bool returned = tried.wait_for(5s) == std::future_status::ready;
  const auto took = clk::now() - start;
  EXPECT_TRUE(returned) << "try_acquire() waited for the stopped lock holder";
  if (returned) {
    EXPECT_FALSE(tried.get());
    EXPECT_LT(took, 1s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count();
    std::printf("try_acquire() behind a stopped lock holder returned after %.1f ms\n",
                std::chrono::duration<double, std::milli>(took).count());
  }
  // The administrative calls: their own timeout, then a typed error.
  auto expect_lock_timeout = [&](const char* call, auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << call << " went through a lock held by a stopped process";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::lock_timeout) << call << ": " << e.what();
      EXPECT_EQ(e.code(), std::errc::timed_out) << call;
      EXPECT_NE(std::string(e.what()).find(key.str()), std::string::npos) << e.what();
    }
  };
  expect_lock_timeout("reap()", [&] { sem.reap(100ms); });
  expect_lock_timeout("set_capacity()", [&] { sem.set_capacity(3, 100ms); });
  expect_lock_timeout("force_release_all()", [&] { sem.force_release_all(100ms); });
  EXPECT_EQ(sem.capacity(), 2);

  stopped.kill(SIGCONT);
  EXPECT_EQ(done.receive(), '.');
  EXPECT_EQ(stopped.wait(), 0);
  if (returned == false) tried.wait();
  EXPECT_EQ(sem.reap(1s), 0);
  EXPECT_TRUE(sem.try_acquire().has_value());
}

}  // namespace
}  // namespace shmsem
