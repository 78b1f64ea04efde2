// gate.cpp: how seats are counted: the gate word that every acquire and
// release changes, the earliest-expiry bound beside it, and the smoothed
// utilization sampled from it.

#include <algorithm>
#include <chrono>
#include <cmath>

#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"

namespace shmsem::detail {

using namespace layout;

bool attachment::admit(std::int32_t n, bool pass_queue) {
  // Only a lock holder freezes the gate, and every caller here holds the
  // lock: the freeze is its own, and does not hold it back.
  const std::uint64_t blocked = pass_queue ? 0 : kGateQueued;
  std::uint64_t g = hdr->gate.load(std::memory_order_relaxed);
  do {
    if ((g & blocked) || !gate_fits(g, n)) return false;
  } while (!hdr->gate.compare_exchange_weak(g, g + static_cast<std::uint64_t>(n),
                                            std::memory_order_acq_rel, std::memory_order_relaxed));
  return true;
}

std::uint64_t attachment::give_back(std::int32_t n) {
  std::uint64_t g = hdr->gate.load(std::memory_order_relaxed);
  std::uint64_t next;
  do {
    // Never below zero: after a corrupt count, the next resettle is the truth.
    const std::int32_t take = std::min(n, gate_used(g));
    next = g - static_cast<std::uint64_t>(take);
  } while (!hdr->gate.compare_exchange_weak(g, next, std::memory_order_acq_rel,
                                            std::memory_order_relaxed));
  return g;
}

void attachment::set_gate_flags(std::uint64_t set, std::uint64_t clear) {
  std::uint64_t g = hdr->gate.load(std::memory_order_relaxed);
  while (!hdr->gate.compare_exchange_weak(g, (g | set) & ~clear, std::memory_order_acq_rel,
                                          std::memory_order_relaxed)) {
  }
}

void attachment::set_gate_capacity(std::int32_t cap) {
  std::uint64_t g = hdr->gate.load(std::memory_order_relaxed);
  while (!hdr->gate.compare_exchange_weak(g, make_gate(gate_used(g), cap, g & kGateFlags),
                                          std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

void attachment::lower_earliest_expiry(std::int64_t expires) {
  // A CAS loop, not a store: lock-free acquires lower the bound too.
  std::int64_t bound = hdr->earliest_expiry_ns.load(std::memory_order_relaxed);
  while (expires < bound && !hdr->earliest_expiry_ns.compare_exchange_weak(
                                bound, expires, std::memory_order_relaxed)) {
  }
}

double attachment::ewma_sample(std::int64_t now) const {
  const std::uint64_t g = hdr->gate.load(std::memory_order_relaxed);
  const std::int32_t cap = std::max(1, gate_capacity(g));
  const double level = std::clamp(static_cast<double>(gate_used(g)) / cap, 0.0, 1.0);
  const std::uint32_t now_ms =
      static_cast<std::uint32_t>(elapsed_ns(now, hdr->ewma_base_ns) / 1'000'000);
  std::uint64_t w = hdr->ewma.load(std::memory_order_relaxed);
  const double before = static_cast<double>(ewma_value(w));
  const double v = std::isfinite(before) ? std::clamp(before, 0.0, 1.0) : level;
  // Modular: the difference is right across a wrap of the 32-bit ms count.
  const std::uint32_t dt_ms = now_ms - ewma_ms(w);
  if (dt_ms == 0 || dt_ms > (1u << 31)) return v;  // same ms, or a sample from "later"
  constexpr double kHalfLifeMs = std::chrono::milliseconds(kEwmaHalfLife).count();
  const double next = level + (v - level) * std::exp2(-static_cast<double>(dt_ms) / kHalfLifeMs);
  // One attempt: a sample that loses the race is as good as the winner's.
  hdr->ewma.compare_exchange_strong(w, ewma_word(static_cast<float>(next), now_ms),
                                    std::memory_order_relaxed);
  return next;
}

}  // namespace shmsem::detail
