// fault_util.hpp: checks shared by the fault tests: the stats identity and
// a structural validation of the segment file as it is on disk.
#pragma once

#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "layout.hpp"

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

}  // namespace shmsem::test
