// init_death_test.cpp: the creator of a segment is killed (or stopped) while
// it initializes it. The next open re-initializes the segment and works, an
// attach without a capacity fails clearly, and nothing hangs: a creator
// that is stopped, not dead, makes open() fail with errc::busy once
// Options::open_timeout runs out.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

#include "fault_util.hpp"
#include "segment.hpp"
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
  test::child_process creator([&] { return create_and_die(key.str(), SIGSTOP); });
  ASSERT_TRUE(test::eventually(
      [&] { return test::file_problem(key.str()) == detail::layout::problem::initializing; }));
  const auto start = clk::now();
  try {
    Options o;
    o.open_timeout = 300ms;
    Semaphore::open(key, 2, o);
    ADD_FAILURE() << "open() went past a creator stopped in the middle of initialization";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::busy) << e.what();
  }
  EXPECT_LT(clk::now() - start, 3s);
  creator.kill(SIGKILL);  // a stopped process dies of SIGKILL too
  Semaphore sem = Semaphore::open(key, 2);
  EXPECT_TRUE(sem.acquire().is_held());
}

}  // namespace
}  // namespace shmsem
