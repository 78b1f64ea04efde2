// The coarse clock that stamps leases: read through the vDSO directly when
// the process has one, and always in agreement with the kernel's clock.
#include <gtest/gtest.h>
#include <sys/auxv.h>
#include <time.h>

#include "sys/clock.hpp"

namespace shmsem {
namespace {

std::int64_t glibc_now(clockid_t id) {
  timespec ts;
  ::clock_gettime(id, &ts);
  return sys::to_ns(ts);
}

TEST(Clock, CoarseReadsAgreeWithTheKernelsCoarseClock) {
  timespec res;
  ASSERT_EQ(::clock_getres(CLOCK_MONOTONIC_COARSE, &res), 0);
  const std::int64_t tick = sys::to_ns(res);
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t before = glibc_now(CLOCK_MONOTONIC_COARSE);
    const std::int64_t ours = sys::coarse_now_ns();
    const std::int64_t after = glibc_now(CLOCK_MONOTONIC_COARSE);
    ASSERT_LE(before, ours);
    ASSERT_LE(ours, after);
    ASSERT_LE(after - before, 100 * tick) << "the machine stalled; the bounds mean nothing";
  }
}

TEST(Clock, PreciseReadsAgreeWithTheKernelsMonotonicClock) {
  const std::int64_t before = glibc_now(CLOCK_MONOTONIC);
  const std::int64_t ours = sys::precise_now_ns();
  const std::int64_t after = glibc_now(CLOCK_MONOTONIC);
  EXPECT_LE(before, ours);
  EXPECT_LE(ours, after);
}

TEST(Clock, ReadsThroughTheVdsoWhenTheProcessHasOne) {
  if (::getauxval(AT_SYSINFO_EHDR) == 0) GTEST_SKIP() << "no vDSO in this process (valgrind?)";
  EXPECT_NE(sys::vdso_clock_gettime, &::clock_gettime)
      << "the vDSO's clock_gettime was not found; every read pays glibc's wrapper";
}

}  // namespace
}  // namespace shmsem
