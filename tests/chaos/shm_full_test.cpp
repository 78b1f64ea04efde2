// shm_full_test.cpp: /dev/shm is full. In a private mount namespace the test
// mounts a small tmpfs over /dev/shm (as a full host would be), then: a new
// semaphore fails with a clear SegmentError (errc::no_space), growing the
// capacity fails the same way and changes nothing, and the semaphores that
// already exist keep working. Skipped, saying why, where mounting is refused.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <string>

#include "fault_util.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

constexpr int kSkipped = 77;

// Makes /dev/shm a tmpfs of `size` in a new mount namespace; false if refused.
bool private_small_dev_shm(const char* size, std::string& why) {
  if (::unshare(CLONE_NEWNS) != 0) {
    why = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
    return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", "/dev/shm", "tmpfs", 0, (std::string("mode=1777,size=") + size).c_str()) !=
          0) {
    why = std::string("mount tmpfs on /dev/shm: ") + std::strerror(errno);
    return false;
  }
  return true;
}

// Fills the file system: a file that takes every free byte.
void fill(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  off_t off = 0;
  for (off_t chunk = 1 << 20; chunk >= 4096; chunk /= 2)
    while (::fallocate(fd, 0, off, chunk) == 0) off += chunk;
  ::close(fd);
}

TEST(ShmFull, CreateAndGrowFailWithNoSpaceAndExistingSegmentsKeepWorking) {
  test::child_process child([] {
    std::string why;
    if (!private_small_dev_shm("256k", why)) {
      std::fprintf(stderr, "skipped: %s\n", why.c_str());
      return kSkipped;
    }
    Semaphore old_sem = Semaphore::open("fault.full.old", 2);
    Permit held = old_sem.acquire();
    fill("/dev/shm/filler");

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
