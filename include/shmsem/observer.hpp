// shmsem/observer.hpp: the hook a program attaches to watch one handle's
// acquisitions, for metrics, logs or tracing spans.
//
// Callbacks run in the thread that did the operation, outside the segment
// lock, so an observer may block or log; but every millisecond it spends is
// added to that operation. With no observer set the hot path pays one
// null-pointer test and nothing else.
#pragma once

#include <shmsem/errors.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shmsem {

/// Outcome of one acquire() or try_acquire() call.
enum class Outcome { acquired, timeout, cancelled, shutdown, exceeds_capacity, error, unavailable };

/// Human-readable name of an Outcome ("acquired", "timeout", ...).
SHMSEM_API const char* to_string(Outcome o) noexcept;

/// Everything known about one finished acquisition attempt: enough to open
/// and close a tracing span (see the OpenTelemetry example in docs/service.md).
struct AcquireEvent {
  std::string_view key;
  int capacity = 0;                  ///< capacity when the attempt ended
  int weight = 0;                    ///< seats asked for
  int used = 0;                      ///< seats in use right after the attempt
  std::uint64_t permit_id = 0;       ///< 0 unless outcome == acquired
  std::uint32_t wakeups = 0;         ///< times the waiter woke before it ended
  std::chrono::nanoseconds wait{0};  ///< time spent blocked (0 on the fast path)
  Outcome outcome = Outcome::acquired;
  bool waited = false;  ///< false: decided without blocking
};

/// Event of a seat given back or lost.
struct ReleaseEvent {
  std::string_view key;
  int capacity = 0;
  int weight = 0;
  int used = 0;  ///< seats in use right after the release
  std::uint64_t permit_id = 0;
  std::chrono::nanoseconds held{0};  ///< time from acquisition to release
};

/// Override the callbacks you need; the defaults do nothing. Callbacks must
/// not throw (an exception is caught and logged).
class SHMSEM_API Observer {
 public:
  virtual ~Observer();
  /// A caller is about to block for `weight` seats.
  virtual void on_wait_start(std::string_view key, int weight);
  /// A blocked caller stopped waiting, with any outcome.
  virtual void on_wait_end(const AcquireEvent& e);
  /// An attempt obtained seats (e.outcome == acquired) or finished without them.
  virtual void on_acquire(const AcquireEvent& e);
  /// A permit was released normally.
  virtual void on_release(const ReleaseEvent& e);
  /// A permit found its seat lost (expired, reaped or force-released).
  virtual void on_lost(std::string_view key, std::uint64_t permit_id, std::string_view why);
  /// This handle reclaimed `seats` seats of dead holders or expired leases.
  virtual void on_reaped(std::string_view key, int seats);
};

}  // namespace shmsem
