// negative_timeout_test.cpp: a negative wait_timeout means "do not wait",
// however large it is, as -1ms does. Each wait runs in a child process, so
// that a wait which never ends fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <shmsem/shmsem.hpp>

#include <chrono>

#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::unique_key;

constexpr int kTimedOut = 0, kGranted = 1, kOtherError = 2;

int acquire_in_child(const std::string& key, std::chrono::milliseconds wait) {
  child_process c([key, wait] {
    auto sem = Semaphore::attach(key);
    try {
      AcquireOptions o;
      o.wait_timeout = wait;
      return sem.acquire(1, o).is_held() ? kGranted : kOtherError;
    } catch (const AcquisitionError& e) {
      return e.reason() == Reason::timeout ? kTimedOut : kOtherError;
    }
  });
  return c.wait(30s);
}

class NegativeWaitTimeout : public ::testing::TestWithParam<std::chrono::milliseconds> {};

TEST_P(NegativeWaitTimeout, TimesOutAtOnceWhenNoSeatIsFree) {
  unique_key key;
  auto sem = Semaphore::open(key, 1);
  Permit held = sem.acquire();
  EXPECT_EQ(acquire_in_child(key.str(), GetParam()), kTimedOut);
  EXPECT_EQ(sem.stats().timeouts, 1u);
}

TEST_P(NegativeWaitTimeout, TakesAFreeSeat) {
  unique_key key;
  auto sem = Semaphore::open(key, 1);
  EXPECT_EQ(acquire_in_child(key.str(), GetParam()), kGranted);
}

INSTANTIATE_TEST_SUITE_P(Durations, NegativeWaitTimeout,
                         ::testing::Values(-1ms, -10'000'000'000'000ms,
                                           std::chrono::milliseconds::min()));

}  // namespace
}  // namespace shmsem
