// layout.cpp: whether a mapped file is a shmsem segment this build can use
// (layout.hpp's validate()), and what to call each problem found.

#include "shm/layout.hpp"

#include <cstring>

namespace shmsem::detail::layout {

const char* to_string(problem p) {
  switch (p) {
    case problem::none:
      return "valid";
    case problem::uninitialized:
      return "never initialized (its creator died before writing the header)";
    case problem::too_small:
      return "too small to be a shmsem segment";
    case problem::bad_magic:
      return "not a shmsem segment (bad magic number)";
    case problem::bad_version:
      return "a shmsem segment of another layout version";
    case problem::bad_format:
      return "a shmsem segment of an incompatible build (format word differs)";
    case problem::initializing:
      return "left half-initialized by a creator that died";
    case problem::bad_header:
      return "corrupt (a header field is out of range)";
    case problem::truncated:
      return "truncated (shorter than its tables)";
  }
  return "unknown problem";
}

problem validate(const void* base, std::uint64_t file_size, bool* key_mismatch, const char* key,
                 std::size_t key_size) {
  if (key_mismatch) *key_mismatch = false;
  if (file_size < sizeof(std::uint64_t)) return problem::too_small;
  const auto* bytes = static_cast<const unsigned char*>(base);
  std::uint64_t magic;
  std::memcpy(&magic, bytes, sizeof magic);
  if (magic == 0) return problem::uninitialized;
  if (magic != kMagic) return problem::bad_magic;
  if (file_size < kHeaderRegion) return problem::too_small;
  const auto* h = static_cast<const segment_header*>(base);
  if (h->layout_version != kLayoutVersion) return problem::bad_version;
  if (h->format != format_word()) return problem::bad_format;
  if (h->init_state.load(std::memory_order_acquire) != kReady) return problem::initializing;
  if (h->key_size < 1 || h->key_size > kMaxKeySize) return problem::bad_header;
  if (std::memchr(h->key, 0, h->key_size) != nullptr) return problem::bad_header;
  const std::uint64_t gate = h->gate.load(std::memory_order_relaxed);
  const std::int32_t cap = gate_capacity(gate);
  const std::uint32_t leases = h->lease_slots.load(std::memory_order_relaxed);
  const std::uint32_t holders = h->holder_slots.load(std::memory_order_relaxed);
  const std::uint32_t waiters = h->waiter_slots.load(std::memory_order_relaxed);
  const std::uint32_t threads = h->thread_slots.load(std::memory_order_relaxed);
  const std::uint32_t hwm = h->lease_hwm.load(std::memory_order_relaxed);
  if (cap < 1 || cap > kMaxCapacity) return problem::bad_header;
  if (h->fairness != kFairnessFifo && h->fairness != kFairnessBarging) return problem::bad_header;
  if ((gate & ~(kSeatMask | (kSeatMask << kSeatBits) | kGateFlags)) != 0)
    return problem::bad_header;
  if (leases < static_cast<std::uint32_t>(cap) || leases > kMaxLeases) return problem::bad_header;
  if (holders < 1 || holders > kMaxHolders) return problem::bad_header;
  if (waiters < 1 || waiters > kMaxWaiters) return problem::bad_header;
  if (threads < 1 || threads > kMaxThreads) return problem::bad_header;
  if (hwm > leases) return problem::bad_header;
  if (h->free_lease > hwm || h->queue_head.load(std::memory_order_relaxed) > waiters ||
      h->queue_tail.load(std::memory_order_relaxed) > waiters || h->free_waiter > waiters ||
      h->free_holder > holders)
    return problem::bad_header;
  if (file_size < file_size_for(leases)) return problem::truncated;
  if (key != nullptr && (h->key_size != key_size || std::memcmp(h->key, key, key_size) != 0)) {
    if (key_mismatch) *key_mismatch = true;
    return problem::bad_header;
  }
  return problem::none;
}

}  // namespace shmsem::detail::layout
