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

/// CLOCK_MONOTONIC_COARSE: a vDSO read of about 4 ns with one kernel tick
/// (1-4 ms) of resolution. Lease timestamps and TTL checks use it: a TTL is
/// honoured to within one tick, and the hot path stays cheap.
inline std::int64_t coarse_now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return to_ns(ts);
}

/// CLOCK_MONOTONIC: for wait deadlines and measured wait times.
inline std::int64_t precise_now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
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

}  // namespace shmsem::sys
