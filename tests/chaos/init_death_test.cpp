// init_death_test.cpp: the creator of a segment is killed (or stopped) while
// it initializes it. The next open re-initializes the segment and works, an
// attach without a capacity fails clearly, and nothing hangs: a creator
// that is stopped, not dead, makes open() fail with errc::busy once
// Options::open_timeout runs out. inspect(), which monitors call and which
// must never wait, tells "not found" (nobody is initializing it) from
// "busy" (someone is) at once.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

#include "fault_util.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

int init_signal = 0;
void signal_while_initializing(detail::testing::point p, std::string_view) {
  if (p == detail::testing::point::initializing && init_signal) ::raise(init_signal);
}

int create_and_die(const std::string& key, int sig) {
  init_signal = sig;
  detail::testing::set_hook(signal_while_initializing);
  Semaphore::open(key, 3);
  return 1;
}

// A creator stopped (SIGSTOP) halfway through initializing `key`: it keeps
// the init lock until it dies.
test::child_process stopped_creator(const std::string& key) {
  test::child_process creator([&] { return create_and_die(key, SIGSTOP); });
  EXPECT_TRUE(test::eventually(
      [&] { return test::file_problem(key) == detail::layout::problem::initializing; }));
  return creator;
}

TEST(InitDeath, NextOpenReinitializesASegmentWhoseCreatorDied) {
  test::unique_key key;
  test::child_process creator([&] { return create_and_die(key.str(), SIGKILL); });
  ASSERT_EQ(creator.wait(), 128 + SIGKILL);
  EXPECT_EQ(test::file_problem(key.str()), detail::layout::problem::initializing);
  // attach() has no capacity to initialize with: a clear error, at once.
  try {
    Semaphore::attach(key);
    ADD_FAILURE() << "attach() accepted a half-initialized segment";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::not_found) << e.what();
  }
  const auto start = clk::now();
  Semaphore sem = Semaphore::open(key, 2);
  EXPECT_LT(clk::now() - start, 2s);
  EXPECT_EQ(sem.capacity(), 2);
  EXPECT_EQ(test::file_problem(key.str()), detail::layout::problem::none);
  Permit p = sem.acquire(2);
  EXPECT_EQ(sem.used(), 2);
}

TEST(InitDeath, AnEmptyFileLeftByACreatorIsInitialized) {
  test::unique_key key;
  // A creator that died between creating the file and allocating it.
  int fd = ::open(Semaphore::segment_path(key).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  Semaphore sem = Semaphore::open(key, 1);
  EXPECT_TRUE(sem.acquire().is_held());
}

TEST(InitDeath, StoppedCreatorMakesOpenFailWithBusyInsteadOfHanging) {
  test::unique_key key;
  test::child_process creator = stopped_creator(key.str());
  const auto start = clk::now();
  try {
    Options o;
    o.open_timeout = 300ms;
    Semaphore::open(key, 2, o);
    ADD_FAILURE() << "open() went past a creator stopped in the middle of initialization";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::busy) << e.what();
    // What it waited for, and who held it in which state: no guess.
    const std::string what = e.what();
    EXPECT_NE(what.find("init lock"), std::string::npos) << what;
    EXPECT_NE(what.find("process " + std::to_string(creator.pid()) + " ("), std::string::npos)
        << what;
    EXPECT_NE(what.find("stopped"), std::string::npos) << what;
    EXPECT_EQ(what.find('?'), std::string::npos) << what;
  }
  EXPECT_LT(clk::now() - start, 3s);
  creator.kill(SIGKILL);  // a stopped process dies of SIGKILL too
  Semaphore sem = Semaphore::open(key, 2);
  EXPECT_TRUE(sem.acquire().is_held());
}

TEST(InitDeath, InspectCallsAFileNobodyFinishedInitializingNotFound) {
  test::unique_key key;
  const std::string path = Semaphore::segment_path(key);
  // An empty file, as a creator that died before sizing it leaves.
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  for (int file = 0; file < 2; ++file) {
    if (file == 1) {
      // A header half-written by a creator killed in the middle.
      ASSERT_EQ(::unlink(path.c_str()), 0);
      test::child_process creator([&] { return create_and_die(key.str(), SIGKILL); });
      ASSERT_EQ(creator.wait(), 128 + SIGKILL);
      ASSERT_EQ(test::file_problem(key.str()), detail::layout::problem::initializing);
    }
    try {
      Semaphore::inspect(key);
      ADD_FAILURE() << "inspect() accepted an uninitialized segment (file " << file << ")";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::not_found) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  // Untouched: the next open with a capacity initializes it.
  EXPECT_EQ(test::file_problem(key.str()), detail::layout::problem::initializing);
  Semaphore sem = Semaphore::open(key, 1);
  EXPECT_EQ(Semaphore::inspect(key).capacity, 1);
}

TEST(InitDeath, InspectSaysBusyAtOnceWhileAStoppedCreatorHoldsTheInitLock) {
  test::unique_key key;
  test::child_process creator = stopped_creator(key.str());
  const auto start = clk::now();
  try {
    Semaphore::inspect(key);
    ADD_FAILURE() << "inspect() read a segment while its creator was initializing it";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::busy) << e.what();
  }
  // Well below the default open timeout (5 s): inspect() does not wait.
  EXPECT_LT(clk::now() - start, 3s);
  creator.kill(SIGKILL);  // and reaped: its init lock is gone
  try {
    Semaphore::inspect(key);
    ADD_FAILURE() << "inspect() read a segment its dead creator left half-initialized";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::not_found) << e.what();
  }
}

}  // namespace
}  // namespace shmsem
