// reasons.hpp: what each Reason an acquisition can fail for is called, what
// its message says, which Outcome the observer sees for it, and which
// counter of the segment's stats counts it. One row per Reason; every
// switch on a Reason reads this table instead.
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>

#include <array>
#include <atomic>
#include <cstdint>

#include "layout.hpp"

namespace shmsem::detail {

struct reason_info {
  Reason reason;
  const char* name;  // to_string(Reason)
  // The end of the AcquisitionError's message; for exceeds_capacity the
  // capacity follows it.
  const char* what;
  Outcome outcome;
  // The shared-memory counter, or null when none counts it.
  std::atomic<std::uint64_t> layout::shared_stats::*counter;
};

inline constexpr std::array<reason_info, 5> kReasons{{
    {Reason::timeout, "timeout", "timed out", Outcome::timeout, &layout::shared_stats::timeouts},
    {Reason::cancelled, "cancelled", "cancelled", Outcome::cancelled,
     &layout::shared_stats::cancelled},
    {Reason::shutdown, "shutdown", "shut down", Outcome::shutdown,
     &layout::shared_stats::shutdowns},
    {Reason::exceeds_capacity, "exceeds_capacity", "more than the capacity of",
     Outcome::exceeds_capacity, &layout::shared_stats::rejected},
    {Reason::error, "error", "segment error", Outcome::error, nullptr},
}};

constexpr bool rows_in_order() {
  for (std::size_t i = 0; i < kReasons.size(); ++i)
    if (static_cast<std::size_t>(kReasons[i].reason) != i) return false;
  return true;
}
static_assert(rows_in_order(), "kReasons must list the Reasons in their declared order");

/// The row of `r`, or null for a value outside the enum.
constexpr const reason_info* info_of(Reason r) noexcept {
  const auto i = static_cast<std::size_t>(r);
  return i < kReasons.size() ? &kReasons[i] : nullptr;
}

}  // namespace shmsem::detail
