// reasons.hpp: what each Reason an acquisition can fail for is called, what
// its message says, and which Outcome the observer sees for it, for every
// backend. One row per Reason; every switch on a Reason reads this table
// instead (the shared-memory stats counter of each is
// shm/segment.hpp's reason_counter()).
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>

#include <array>
#include <cstddef>

namespace shmsem::detail {

struct reason_info {
  Reason reason;
  const char* name;  // to_string(Reason)
  // The end of the AcquisitionError's message; for exceeds_capacity the
  // capacity follows it.
  const char* what;
  Outcome outcome;
};

inline constexpr std::array<reason_info, 5> kReasons{{
    {Reason::timeout, "timeout", "timed out", Outcome::timeout},
    {Reason::cancelled, "cancelled", "cancelled", Outcome::cancelled},
    {Reason::shutdown, "shutdown", "shut down", Outcome::shutdown},
    {Reason::exceeds_capacity, "exceeds_capacity", "more than the capacity of",
     Outcome::exceeds_capacity},
    {Reason::error, "error", "segment error", Outcome::error},
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
