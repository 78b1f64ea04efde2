// sys/clock.hpp: the clocks shmsem reads. All lease times are
// CLOCK_MONOTONIC nanoseconds, the same clock as std::chrono::steady_clock,
// so they compare across processes on one host.
#pragma once

#include <time.h>

#include <cstdint>

namespace shmsem::sys {

inline std::int64_t to_ns(const timespec& ts) {
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

using clock_gettime_fn = int (*)(clockid_t, timespec*);

/// The kernel's vDSO clock_gettime when the process has one, else glibc's.
/// glibc's own clock_gettime calls the same vDSO function through a wrapper
/// that costs about 2.5 ns more per read here: on a hot path that reads the
/// clock twice per acquire and release, that is a third of a sem_t pair.
extern clock_gettime_fn vdso_clock_gettime;

/// CLOCK_MONOTONIC_COARSE: a vDSO read of about 5 ns with one kernel tick
/// (1-4 ms) of resolution. Lease timestamps and TTL checks use it: a TTL is
/// honoured to within one tick, and the hot path stays cheap.
inline std::int64_t coarse_now_ns() {
  timespec ts;
  vdso_clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return to_ns(ts);
}

/// CLOCK_REALTIME: only for the creation time shown to people.
inline std::int64_t realtime_now_ns() {
  timespec ts;
  vdso_clock_gettime(CLOCK_REALTIME, &ts);
  return to_ns(ts);
}

/// CLOCK_MONOTONIC: for wait deadlines and measured wait times.
inline std::int64_t precise_now_ns() {
  timespec ts;
  vdso_clock_gettime(CLOCK_MONOTONIC, &ts);
  return to_ns(ts);
}

inline timespec to_timespec(std::int64_t ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

/// No deadline.
inline constexpr std::int64_t kNever = INT64_MAX;
/// A deadline that has passed before anyone waits: try once, never block.
inline constexpr std::int64_t kNoWait = 0;

}  // namespace shmsem::sys
