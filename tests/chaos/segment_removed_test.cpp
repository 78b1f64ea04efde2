// segment_removed_test.cpp: the segment file is deleted (rm) while in use.
// Documented behaviour: the processes that have it open keep using their
// copy (holders, waiters and releases all work), and a later open creates a
// fresh segment under the name: from then on the two groups do not share a
// bound, which is why removing a live semaphore is an operator's decision.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "fault_util.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;

TEST(SegmentRemoved, ExistingHandlesKeepWorkingAndNewOpensGetAFreshSegment) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2);
  Permit held = sem.acquire();
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(test::eventually(test::other_threads_parked));
  test::pipe_channel up, down;
  test::child_process old_user([&] {
    Semaphore s = Semaphore::attach(key);
    up.send('a');
    down.receive();
    // Still the old segment: it sees the parent's seat, and waits for it.
    Permit p = s.acquire(2, {.wait_timeout = 10s});
    return s.used() == 2 ? 0 : 1;
  });
  ASSERT_EQ(up.receive(), 'a');

  ASSERT_EQ(::unlink(Semaphore::segment_path(key).c_str()), 0);  // rm
  EXPECT_FALSE(std::filesystem::exists(Semaphore::segment_path(key)));

  // The old segment keeps working for those who have it.
  Permit second = sem.acquire();
  EXPECT_EQ(sem.used(), 2);
  second.release();
  down.send();
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  held.release();  // hands the seats to the waiting old user
  EXPECT_EQ(old_user.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));

  // A new open, here or elsewhere, creates a fresh segment under the name.
  Semaphore fresh = Semaphore::open(key, 3);
  EXPECT_TRUE(std::filesystem::exists(Semaphore::segment_path(key)));
  EXPECT_EQ(fresh.capacity(), 3);
  EXPECT_EQ(fresh.stats().acquired, 0u);
  Permit f = fresh.acquire(3);
  EXPECT_EQ(sem.used(), 0) << "the fresh segment must be independent of the removed one";
  test::child_process new_user([&] {
    Semaphore s = Semaphore::attach(key);
    return s.capacity() == 3 && s.used() == 3 ? 0 : 1;
  });
  EXPECT_EQ(new_user.wait(), 0);
}

TEST(SegmentRemoved, TokenFilesGoWithTheirSegment) {
  test::unique_key key;
  std::string tokens;
  {
    Semaphore sem = Semaphore::open(key, 2);
    Permit p = sem.acquire();
    tokens = test::token_file_of(sem);
    ASSERT_EQ(tokens.rfind("/dev/shm/shmsem-tokens.", 0), 0u) << tokens;
    EXPECT_FALSE(Semaphore::remove_if_unused(key));  // in use: all stays
    EXPECT_TRUE(std::filesystem::exists(tokens));
  }
  EXPECT_TRUE(std::filesystem::exists(tokens));  // the segment is still there
  EXPECT_TRUE(Semaphore::remove_if_unused(key));
  EXPECT_FALSE(std::filesystem::exists(tokens));

  // Removed while in use: the token files stay for those who still use
  // the segment, and go with the last of them to let go.
  {
    Semaphore sem = Semaphore::open(key, 2);
    Permit p = sem.acquire();
    tokens = test::token_file_of(sem);
    EXPECT_TRUE(Semaphore::remove(key));
    EXPECT_TRUE(std::filesystem::exists(tokens));
    p.release();
    EXPECT_TRUE(sem.acquire().is_held());  // still the removed segment, with its tokens
  }
  EXPECT_FALSE(std::filesystem::exists(tokens));
}

TEST(SegmentRemoved, RemoveIfUnusedRefusesASegmentInUse) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  EXPECT_FALSE(Semaphore::remove_if_unused(key));
  EXPECT_TRUE(std::filesystem::exists(Semaphore::segment_path(key)));
}

}  // namespace
}  // namespace shmsem
