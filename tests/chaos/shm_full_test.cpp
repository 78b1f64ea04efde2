// shm_full_test.cpp: /dev/shm is full. In a private mount namespace the test
// mounts a small tmpfs over /dev/shm (as a full host would be), then: a new
// semaphore fails with a clear SegmentError (errc::no_space), growing the
// capacity fails the same way and changes nothing, and the semaphores that
// already exist keep working. Skipped, saying why, where mounting is refused.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "fault_util.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

constexpr int kSkipped = 77;

TEST(ShmFull, CreateAndGrowFailWithNoSpaceAndExistingSegmentsKeepWorking) {
  test::child_process child([] {
    std::string why;
    if (!test::private_small_dev_shm("256k", why)) {
      std::fprintf(stderr, "skipped: %s\n", why.c_str());
      return kSkipped;
    }
    Semaphore old_sem = Semaphore::open("fault.full.old", 2);
    Permit held = old_sem.acquire();
    test::fill_file_system("/dev/shm/filler");

    // A new semaphore cannot be created.
    try {
      Semaphore::open("fault.full.new", 2);
      ADD_FAILURE() << "open() succeeded on a full /dev/shm";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::no_space) << e.what();
      EXPECT_EQ(e.code(), std::errc::no_space_on_device);
      EXPECT_NE(std::string(e.what()).find("/dev/shm/"), std::string::npos) << e.what();
    }
    // Growing cannot allocate the larger lease table; the capacity stands.
    try {
      old_sem.set_capacity(100000);
      ADD_FAILURE() << "set_capacity() grew the table on a full /dev/shm";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::no_space) << e.what();
    }
    EXPECT_EQ(old_sem.capacity(), 2);
    // The existing semaphore keeps working, from this process and others.
    Permit second = old_sem.acquire();
    EXPECT_EQ(old_sem.used(), 2);
    EXPECT_FALSE(old_sem.try_acquire().has_value());
    second.release();
    test::child_process other([] {
      Semaphore s = Semaphore::attach("fault.full.old");
      Permit p = s.acquire(1, {.wait_timeout = std::chrono::seconds(5)});
      return p.is_held() ? 0 : 1;
    });
    EXPECT_EQ(other.wait(), 0);
    held.release();
    EXPECT_EQ(old_sem.used(), 0);
    EXPECT_TRUE(test::stats_add_up(old_sem));

    // Once there is room again, the failed key can be created.
    ::unlink("/dev/shm/filler");
    Semaphore fresh = Semaphore::open("fault.full.new", 2);
    EXPECT_TRUE(fresh.acquire().is_held());
    return 0;
  });
  const int rc = child.wait();
  if (rc == kSkipped)
    SHMSEM_SKIP_WITHOUT_CAPABILITY(
        "cannot mount a private tmpfs on /dev/shm here (needs root); see stderr");
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace shmsem
