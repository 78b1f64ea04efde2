// argument_validation_test.cpp: every public call with n <= 0, permits <= 0,
// negative or huge durations and capacities above the maximum. Each gets
// std::invalid_argument (or the documented ordinary outcome) and leaves the
// semaphore unchanged.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <filesystem>
#include <stdexcept>

#include "fault_util.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

const ms kHuge = kMaxDuration + ms(1);
const ms kLongest = ms(LLONG_MAX);

TEST(ArgumentValidation, OpenRejectsBadPermitsAndOptions) {
  test::unique_key key;
  for (int permits : {0, -1, INT_MIN, kMaxCapacity + 1, INT_MAX})
    EXPECT_THROW(Semaphore::open(key, permits), std::invalid_argument) << permits;
  for (ms ttl : {ms(-1), kHuge, kLongest}) {
    Options o;
    o.ttl = ttl;
    EXPECT_THROW(Semaphore::open(key, 1, o), std::invalid_argument) << ttl.count();
  }
  Options neg;
  neg.open_timeout = ms(-1);
  EXPECT_THROW(Semaphore::open(key, 1, neg), std::invalid_argument);
  EXPECT_THROW(Semaphore::attach(key, neg), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(Semaphore::segment_path(key)))
      << "a rejected open created the segment";
  EXPECT_NO_THROW(Semaphore::open(key, kMaxCapacity));
}

TEST(ArgumentValidation, AcquireAndTryAcquireRejectBadWeightsAndDurations) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2);
  for (int n : {0, -1, INT_MIN}) {
    EXPECT_THROW(sem.acquire(n), std::invalid_argument) << n;
    EXPECT_THROW(sem.try_acquire(n), std::invalid_argument) << n;
    EXPECT_THROW(sem.with_permit([] {}, n), std::invalid_argument) << n;
  }
  for (ms d : {ms(-1), kHuge, kLongest}) {
    EXPECT_THROW(sem.acquire(1, {.ttl = d}), std::invalid_argument) << d.count();
    EXPECT_THROW(sem.try_acquire(1, {.ttl = d}), std::invalid_argument) << d.count();
  }
  EXPECT_THROW(sem.acquire(1, {.wait_timeout = kHuge}), std::invalid_argument);
  EXPECT_THROW(sem.acquire(1, {.wait_timeout = kLongest}), std::invalid_argument);
  // A negative wait budget is one attempt (documented), not an error.
  EXPECT_TRUE(sem.acquire(1, {.wait_timeout = ms(-5)}).is_held());
  // n above the capacity: an ordinary outcome, not an exception of its own.
  try {
    sem.acquire(3);
    ADD_FAILURE() << "acquire(3) of 2 seats went through";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::exceeds_capacity);
  }
  EXPECT_FALSE(sem.try_acquire(3).has_value());
  EXPECT_FALSE(sem.try_acquire(INT_MAX).has_value());
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));
}

// A weight above the capacity, or above what the admission word can hold,
// is refused before it meets that word: added to the seats in use it would
// overflow into the capacity. The lock-free path is primed (this thread has
// acquired before) and a seat is held, so the sum is not zero.
TEST(ArgumentValidation, WeightsAboveTheCapacityAreRefusedAndLeaveTheGateAlone) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 4);
  sem.acquire().release();  // this thread now acquires without the lock
  Permit held = sem.acquire();
  for (int n : {5, 6, 1 << 20, (1 << 21) - 1, 1 << 21, kMaxCapacity, kMaxCapacity + 1, INT_MAX - 1,
                INT_MAX}) {
    EXPECT_FALSE(sem.try_acquire(n).has_value()) << n;
    try {
      sem.acquire(n, {.wait_timeout = 0ms});
      ADD_FAILURE() << "acquire(" << n << ") of 4 seats went through";
    } catch (const AcquisitionError& e) {
      EXPECT_EQ(e.reason(), Reason::exceeds_capacity) << n;
    }
    ASSERT_EQ(sem.capacity(), 4) << "n = " << n << " changed the capacity";
    ASSERT_EQ(sem.used(), 1) << n;
  }
  // The boundary itself still fits.
  auto rest = sem.try_acquire(3);
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(sem.used(), 4);
  EXPECT_FALSE(sem.try_acquire(1).has_value());
  rest->release();
  held.release();
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(test::stats_add_up(sem));
}

TEST(ArgumentValidation, AdministrationRejectsBadCapacities) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2);
  for (int permits : {0, -1, INT_MIN, kMaxCapacity + 1, INT_MAX})
    EXPECT_THROW(sem.set_capacity(permits), std::invalid_argument) << permits;
  EXPECT_EQ(sem.capacity(), 2);
  EXPECT_TRUE(sem.wait_idle(ms(-100)));  // negative: no wait
  Permit p = sem.acquire();
  EXPECT_FALSE(sem.wait_idle(ms(-100)));
  EXPECT_FALSE(sem.wait_idle(ms(0)));
}

TEST(ArgumentValidation, ExtendRejectsBadTtls) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  Permit p = sem.acquire(1, {.ttl = 10s});
  for (ms d : {ms(0), ms(-1), kHuge, kLongest})
    EXPECT_THROW(p.extend(d), std::invalid_argument) << d.count();
  EXPECT_TRUE(p.is_held());
  EXPECT_NO_THROW(p.extend(kMaxDuration));
  Permit empty;
  EXPECT_THROW(empty.extend(ms(-1)), std::invalid_argument);
  EXPECT_THROW(empty.extend(ms(10)), ExtensionError);
  EXPECT_NO_THROW(empty.release());
}

}  // namespace
}  // namespace shmsem
