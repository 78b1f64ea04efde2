// holder_stopped_test.cpp: a holder is SIGSTOPped. With a TTL its seat is
// reclaimed once the TTL runs out, and its later release() reports the loss.
// Without a TTL the seat stays held for as long as it is stopped (documented:
// a stopped process is alive). A process stopped while it holds the segment
// lock stalls the others' locked calls until it is continued, but lock-free
// reads keep working (documented).
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

// A child that acquires one seat (with `ttl`), says 'h', waits for a byte,
// then releases and exits 0 if release() reported a loss, 1 if it did not.
int hold_then_release(const std::string& key, std::optional<std::chrono::milliseconds> ttl,
                      test::pipe_channel& up, test::pipe_channel& down) {
  Permit p = Semaphore::attach(key).acquire(1, {.ttl = ttl});
  up.send('h');
  down.receive(std::chrono::minutes(5));
  const bool held = p.is_held();
  try {
    p.release();
  } catch (const PermitNotHeldError&) {
    return held ? 3 : 0;
  }
  return held ? 1 : 2;
}

TEST(HolderStopped, WithTtlSeatIsReclaimedAfterExpiryAndReleaseReportsTheLoss) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  test::pipe_channel up, down;
  test::child_process child([&] { return hold_then_release(key.str(), 300ms, up, down); });
  ASSERT_EQ(up.receive(), 'h');
  const auto start = clk::now();
  child.kill(SIGSTOP);
  Permit p = sem.acquire(1, {.wait_timeout = 10s});
  const auto waited = clk::now() - start;
  EXPECT_GE(waited, 250ms) << "reclaimed before the TTL ran out";
  EXPECT_LT(waited, 3s);
  EXPECT_EQ(sem.stats().expired, 1u);
  child.kill(SIGCONT);
  down.send();
  EXPECT_EQ(child.wait(), 0) << "release() after the loss must throw PermitNotHeldError";
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(sem.used(), 1);
}

TEST(HolderStopped, WithoutTtlSeatStaysHeldWhileStopped) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  test::pipe_channel up, down;
  test::child_process child([&] { return hold_then_release(key.str(), std::nullopt, up, down); });
  ASSERT_EQ(up.receive(), 'h');
  child.kill(SIGSTOP);
  EXPECT_FALSE(sem.try_acquire().has_value());
  EXPECT_THROW(sem.acquire(1, {.wait_timeout = 300ms}), AcquisitionError);
  EXPECT_EQ(sem.reap(), 0);
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].state, HolderState::alive);
  child.kill(SIGCONT);
  down.send();
  EXPECT_EQ(child.wait(), 1) << "the stopped holder without TTL must still hold its seat";
  EXPECT_TRUE(sem.try_acquire().has_value());
}

bool stop_in_lock = false;
void stop_here(detail::testing::point p, std::string_view) {
  if (stop_in_lock && p == detail::testing::point::locked) {
    stop_in_lock = false;
    ::raise(SIGSTOP);
  }
}

TEST(HolderStopped, StoppedInsideTheLockStallsLockedCallsUntilContinued) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2);
  test::pipe_channel up;
  test::child_process child([&] {
    Semaphore s = Semaphore::attach(key);
    detail::testing::set_hook(stop_here);
    stop_in_lock = true;
    Permit p = s.acquire();  // stops itself right after taking the lock
    up.send('h');
    return 0;
  });
  // Wait until the child is stopped (inside the lock).
  ASSERT_TRUE(test::eventually([&] { return test::is_stopped(child.pid()); }));
  // Locked calls time out instead of proceeding...
  try {
    sem.acquire(1, {.wait_timeout = 200ms});
    ADD_FAILURE() << "acquire() went through a lock held by a stopped process";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::timeout);
  }
  // ...lock-free reads do not block.
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.capacity(), 2);
  (void)sem.stats();
  (void)sem.holders();
  child.kill(SIGCONT);
  EXPECT_EQ(up.receive(), 'h');
  EXPECT_EQ(child.wait(), 0);
  EXPECT_TRUE(sem.acquire(1, {.wait_timeout = 5s}).is_held());
}

}  // namespace
}  // namespace shmsem
