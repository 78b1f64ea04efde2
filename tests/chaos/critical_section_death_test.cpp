// critical_section_death_test.cpp: a process dies inside the segment's
// critical section (right after taking the lock, halfway through a grant,
// halfway through a release, halfway through telling a queued waiter its
// fate), many times in a row. After every death the
// segment must be consistent: the next locker repairs it, the counters
// match the lease table, the stats add up, and the survivors' permits hold.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using detail::testing::point;
using namespace std::chrono_literals;

point die_at = point::locked;
bool armed = false;

void die_here(point p, std::string_view) {
  if (armed && p == die_at) ::raise(SIGKILL);
}

// Dies at `p` while acquiring (locked, mid_grant) or releasing (mid_release).
int die_in_critical_section(const std::string& key, point p) {
  Semaphore sem = Semaphore::attach(key);
  Permit held;
  if (p == point::mid_release) held = sem.acquire(1);
  die_at = p;
  armed = true;
  detail::testing::set_hook(die_here);
  if (p == point::mid_release)
    held.release();
  else
    (void)sem.acquire(1);
  return 1;  // survived: the hook did not fire
}

class DeathInCriticalSection : public ::testing::TestWithParam<point> {};

TEST_P(DeathInCriticalSection, SegmentStaysConsistent100TimesInARow) {
  const point p = GetParam();
  test::unique_key key(detail::testing::point_name(p));
  // With fencing tokens every grant and release takes the lock: the only
  // way to reach mid_release from a thread that could release lock-free.
  Semaphore sem = Semaphore::open(key, 4, {.fencing = p == point::mid_release});
  Permit mine = sem.acquire(1);  // a survivor's lease must outlive every repair
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    test::child_process child([&] { return die_in_critical_section(key.str(), p); });
    ASSERT_EQ(child.wait(), 128 + SIGKILL)
        << "the child did not die at " << detail::testing::point_name(p);
    // The lock is owner-dead now: the next operation repairs, and the dead
    // child's lease (if any) is reaped.
    sem.reap();
    ASSERT_EQ(sem.stats().recoveries, static_cast<std::uint64_t>(round + 1));
    ASSERT_TRUE(test::only_survivor_holds(sem, mine, key.str(), 4));
  }
  mine.release();
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));
}

// A process that dies while ending somebody else's expired lease (its reap
// scan) leaves the lease cleared but not yet counted. The repair must count
// it as expired, as its holder is told, and not as reaped.
TEST(DeathInCriticalSection, ExpiryCutShortIsCountedAsExpired) {
  test::unique_key key("mid_expiry");
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Permit lapsing = sem.acquire(1, {.ttl = 5ms});
    // Waiting for a TTL is waiting for the clock, not for another process.
    std::this_thread::sleep_until(*lapsing.expires_at() + 20ms);
    ASSERT_FALSE(lapsing.is_held());
    test::child_process child([&] {
      Semaphore other = Semaphore::attach(key.str());
      die_at = point::mid_release;
      armed = true;
      detail::testing::set_hook(die_here);
      other.reap();  // ends the lapsed lease, and dies halfway
      return 1;
    });
    ASSERT_EQ(child.wait(), 128 + SIGKILL) << "the child did not die ending the lease";
    sem.reap();
    const Stats st = sem.stats();
    EXPECT_EQ(st.recoveries, static_cast<std::uint64_t>(round + 1));
    EXPECT_EQ(st.expired, static_cast<std::uint64_t>(round + 1));
    EXPECT_EQ(st.reaped, 0u);
    EXPECT_EQ(st.reclaimed_seats, static_cast<std::uint64_t>(round + 1));
    EXPECT_EQ(sem.used(), 0);
    EXPECT_TRUE(test::stats_add_up(sem));
    try {
      lapsing.release();
      ADD_FAILURE() << "release() of a lapsed lease did not throw";
    } catch (const PermitNotHeldError& e) {
      EXPECT_NE(std::string(e.what()).find("TTL ran out"), std::string::npos) << e.what();
    }
  }
}

// A releaser that dies after publishing the lease it hands to the queue
// head, but before telling the head, leaves a seat held for a waiter that
// still waits. The repair must finish the handoff: the waiter gets that
// seat, and no seat stays held by nobody's permit.
TEST(DeathInCriticalSection, HandoffCutShortIsFinishedForTheWaiter) {
  test::unique_key key("mid_handoff");
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    test::pipe_channel held, go, got;
    test::child_process releaser([&] {
      Semaphore s = Semaphore::attach(key.str());
      Permit p = s.acquire(1);
      held.send();
      go.receive();
      die_at = point::mid_handoff;
      armed = true;
      detail::testing::set_hook(die_here);
      p.release();  // hands the seat to the waiter, and dies halfway
      return 1;
    });
    ASSERT_EQ(held.receive(), '.');
    test::child_process waiter([&] {
      Semaphore s = Semaphore::attach(key.str());
      Permit p = s.acquire(1, {.wait_timeout = 30s});
      got.send(p.is_held() ? 'g' : 'x');
      p.release();
      return 0;
    });
    ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
    go.send();
    ASSERT_EQ(releaser.wait(), 128 + SIGKILL) << "the releaser did not die in the handoff";
    sem.reap();  // repairs: the waiter must now hold the seat
    EXPECT_EQ(got.receive(), 'g');
    EXPECT_EQ(waiter.wait(), 0);
    EXPECT_EQ(sem.used(), 0);
    EXPECT_EQ(sem.waiters(), 0);
    EXPECT_TRUE(sem.holders().empty());
    EXPECT_TRUE(test::stats_add_up(sem));
    EXPECT_EQ(sem.stats().recoveries, static_cast<std::uint64_t>(round + 1));
  }
}

// Likewise for a rejection: a process that shrinks the capacity below a
// queued request and dies before telling that waiter must not leave it
// queued, where it could never fit and would block everyone behind it.
TEST(DeathInCriticalSection, RejectionCutShortIsFinishedForTheWaiter) {
  test::unique_key key("mid_reject");
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  Permit mine = sem.acquire(1);
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(test::eventually(test::other_threads_parked));
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    sem.set_capacity(2);
    test::pipe_channel told;
    test::child_process waiter([&] {
      Semaphore s = Semaphore::attach(key.str());
      try {
        (void)s.acquire(2, {.wait_timeout = 30s});
        told.send('g');
      } catch (const AcquisitionError& e) {
        told.send(e.reason() == Reason::exceeds_capacity ? 'r' : 'x');
      }
      return 0;
    });
    ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
    test::child_process shrinker([&] {
      Semaphore s = Semaphore::attach(key.str());
      die_at = point::mid_handoff;
      armed = true;
      detail::testing::set_hook(die_here);
      s.set_capacity(1);  // rejects the waiter, and dies halfway
      return 1;
    });
    ASSERT_EQ(shrinker.wait(), 128 + SIGKILL) << "the shrinker did not die in the rejection";
    sem.reap();  // repairs: the waiter must now be told
    EXPECT_EQ(told.receive(), 'r');
    EXPECT_EQ(waiter.wait(), 0);
    EXPECT_EQ(sem.capacity(), 1);
    EXPECT_EQ(sem.waiters(), 0);
    EXPECT_TRUE(mine.is_held());
    EXPECT_TRUE(test::stats_add_up(sem));
  }
  mine.release();
}

INSTANTIATE_TEST_SUITE_P(AtEachHook, DeathInCriticalSection,
                         ::testing::Values(point::locked, point::mid_grant, point::mid_release),
                         [](const auto& info) {
                           return std::string(detail::testing::point_name(info.param));
                         });

}  // namespace
}  // namespace shmsem
