// fault_util.hpp: checks shared by the fault tests (the stats identity, a
// structural validation of the segment file as it is on disk) and the
// private, small, full /dev/shm of the tests of a full file system.
#pragma once

#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "shm/layout.hpp"

namespace shmsem::test {

/// Every granted lease ended exactly once or is still held.
inline ::testing::AssertionResult stats_add_up(const Semaphore& sem) {
  const Stats s = sem.stats();
  const std::uint64_t live = sem.holders().size();
  const std::uint64_t ended = s.released + s.reaped + s.expired + s.force_released;
  if (s.acquired == ended + live) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "acquired=" << s.acquired << " but released=" << s.released << " reaped=" << s.reaped
         << " expired=" << s.expired << " force_released=" << s.force_released
         << " still held=" << live;
}

/// layout::validate over the first page of the segment file of `key`.
inline detail::layout::problem file_problem(const std::string& key) {
  const std::string path = Semaphore::segment_path(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return detail::layout::problem::too_small;
  struct ::stat st;
  ::fstat(fd, &st);
  std::vector<unsigned char> buf(detail::layout::kHeaderRegion);
  const ssize_t got = ::pread(fd, buf.data(), buf.size(), 0);
  ::close(fd);
  if (got < 0) return detail::layout::problem::too_small;
  return detail::layout::validate(buf.data(), static_cast<std::uint64_t>(st.st_size), nullptr,
                                  key.data(), key.size());
}

/// True if `pid` is stopped (state T in /proc/<pid>/stat).
inline bool is_stopped(pid_t pid) {
  char state = 0;
  if (FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r")) {
    char buf[512] = {};
    std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    // The command name may hold spaces and parentheses: the state follows the last ')'.
    if (const char* rp = std::strrchr(buf, ')')) state = rp[2];
  }
  return state == 'T';
}

/// After a process died inside an operation and the survivor repaired: the
/// survivor's one-seat lease `mine` is the only lease, the stats add up, the
/// file is sound, and every other seat of `capacity` can be taken and given
/// back.
inline ::testing::AssertionResult only_survivor_holds(Semaphore& sem, const Permit& mine,
                                                      const std::string& key, int capacity) {
  if (!mine.is_held()) return ::testing::AssertionFailure() << "the survivor lost its lease";
  if (sem.used() != 1)
    return ::testing::AssertionFailure() << "used() = " << sem.used() << ", not 1";
  if (sem.waiters() != 0)
    return ::testing::AssertionFailure() << "waiters() = " << sem.waiters() << ", not 0";
  if (sem.holders().size() != 1)
    return ::testing::AssertionFailure() << sem.holders().size() << " holders, not 1";
  if (auto r = stats_add_up(sem); !r) return r;
  if (file_problem(key) != detail::layout::problem::none)
    return ::testing::AssertionFailure() << "the file is " << to_string(file_problem(key));
  auto rest = sem.try_acquire(capacity - 1);
  if (!rest) return ::testing::AssertionFailure() << "the free seats cannot be taken";
  if (sem.used() != capacity)
    return ::testing::AssertionFailure() << "used() = " << sem.used() << " with every seat taken";
  rest->release();
  return ::testing::AssertionSuccess();
}

/// Makes /dev/shm a tmpfs of `size` in a new mount namespace (of this
/// process: call it in a child); false, with the reason in `why`, if the
/// kernel refuses.
inline bool private_small_dev_shm(const char* size, std::string& why) {
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

/// Fills the file system of `path`: a file there takes every free byte.
inline void fill_file_system(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  off_t off = 0;
  for (off_t chunk = 1 << 20; chunk >= 4096; chunk /= 2)
    while (::fallocate(fd, 0, off, chunk) == 0) off += chunk;
  ::close(fd);
}

}  // namespace shmsem::test
