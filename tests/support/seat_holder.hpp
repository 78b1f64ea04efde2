// seat_holder.hpp: a process that holds seats for a test to look at, kill
// or let go, and a file that is not a segment.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <shmsem/shmsem.hpp>

#include <chrono>
#include <string>

#include "test_support.hpp"

namespace shmsem::test {

/// A forked child that holds `n` seats of `key` until told to go (or killed).
struct seat_holder {
  pipe_channel ready, go;
  child_process proc;
  bool finished = false;
  seat_holder(const std::string& key, int capacity, int n)
      : proc([this, key, capacity, n] {
          auto sem = Semaphore::open(key, capacity);
          auto p = sem.acquire(n);
          ready.send('h');
          go.receive(std::chrono::minutes(5));
          ready.send(p.is_held() ? 'y' : 'n');
          return 0;
        }) {
    EXPECT_EQ(ready.receive(), 'h');
  }
  ~seat_holder() {
    if (!finished) go.send();
  }
  /// Lets the child finish; returns whether it still held its seats.
  bool finish() {
    finished = true;
    go.send();
    const bool held = ready.receive() == 'y';
    EXPECT_EQ(proc.wait(), 0);
    return held;
  }
};

/// Writes 4 KiB that are not a shmsem segment at `path` (created, mode 0600).
inline void write_junk_segment(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  ASSERT_GE(fd, 0) << path;
  std::string junk(4096, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 + 7);
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  ::close(fd);
}

}  // namespace shmsem::test
