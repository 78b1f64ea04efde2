// segment_shared.hpp: what the files of the locked path (segment.cpp,
// gate.cpp, process.cpp, open.cpp, repair.cpp, holders.cpp, leases.cpp,
// queue.cpp) share among themselves, and nobody else uses.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "shm/layout.hpp"
#include "shm/segment.hpp"

namespace shmsem::detail {

// Writers hold the segment lock, so counters need no read-modify-write.
template <class T, class U>
inline void add(std::atomic<T>& a, U v) {
  a.store(a.load(std::memory_order_relaxed) + static_cast<T>(v), std::memory_order_relaxed);
}

// The holder free list, doubly linked (a record claimed by its token may
// sit anywhere in it). The caller holds the lock, or is alone with the
// segment.
inline void push_free_holder(layout::segment_header* h, layout::holder_record* hs,
                             std::uint32_t i) {
  hs[i].next_free = h->free_holder;
  hs[i].prev_free = layout::kNil;
  if (h->free_holder != layout::kNil) hs[h->free_holder - 1].prev_free = i + 1;
  h->free_holder = i + 1;
}

inline void unlink_free_holder(layout::segment_header* h, layout::holder_record* hs,
                               std::uint32_t i) {
  const std::uint32_t next = hs[i].next_free;
  const std::uint32_t prev = hs[i].prev_free;
  if (prev != layout::kNil)
    hs[prev - 1].next_free = next;
  else
    h->free_holder = next;
  if (next != layout::kNil) hs[next - 1].prev_free = prev;
}

// Pushes holder records [from, to) onto the free list, lowest index first
// out.
inline void link_free_holders(layout::segment_header* h, layout::holder_record* hs,
                              std::uint32_t from, std::uint32_t to) {
  for (std::uint32_t i = to; i-- > from;) push_free_holder(h, hs, i);
}

// The same for waiter slots, linked through `next` while free.
inline void link_free_waiters(layout::segment_header* h, layout::waiter_slot* ws,
                              std::uint32_t from, std::uint32_t to) {
  for (std::uint32_t i = to; i-- > from;) {
    ws[i].next.store(h->free_waiter, std::memory_order_relaxed);
    h->free_waiter = i + 1;
  }
}

// now - then, without overflow when `then` comes from a corrupt segment;
// 0 if `then` is not earlier.
inline std::int64_t elapsed_ns(std::int64_t now, std::int64_t then) {
  if (then >= now) return 0;
  const std::uint64_t d = static_cast<std::uint64_t>(now) - static_cast<std::uint64_t>(then);
  return d > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(d);
}

// Keeps the gate frozen for a scope: no lock-free CAS of it succeeds. The
// flag goes whatever ends the scope; an exception that left it set would
// send every acquire to the locked path for good.
class gate_freeze {
 public:
  explicit gate_freeze(attachment& a) : a_(a) { a_.set_gate_flags(layout::kGateFrozen, 0); }
  ~gate_freeze() { a_.set_gate_flags(0, layout::kGateFrozen); }
  gate_freeze(const gate_freeze&) = delete;
  gate_freeze& operator=(const gate_freeze&) = delete;

 private:
  attachment& a_;
};

/// Counts how one lease ended, under `reason` (leases.cpp).
void count_end(layout::shared_stats& s, layout::lost_reason reason, std::int32_t weight);

/// Nobody is attached: every holder is dead and the lock may be garbage.
/// Keeps the structure (capacity, tables, stats, thread counters) and
/// clears the live state (repair.cpp).
void reset_live_state(void* base);

/// [registry] Every attachment of this process, for handle sharing and for
/// fork(); and the serial for a new one (process.cpp).
std::vector<attachment*>& attachments_of_process();
std::uint64_t next_attachment_serial();

template <class Slot>
void attachment::grow_table(std::atomic<std::uint32_t>& count, Slot* table, std::size_t offset,
                            std::uint32_t max, const char* what) {
  const std::uint32_t n = count.load();
  if (n >= max) fail(errc::too_many, "all " + std::to_string(max) + " " + what + " are in use");
  const std::uint32_t grown = std::min(max, n * 2);
  // Allocated before use, so a full /dev/shm is an error here, not a SIGBUS.
  if (int err = file->allocate(offset + sizeof(Slot) * n, sizeof(Slot) * (grown - n)))
    throw_segment_errno(path, std::string("cannot grow the ") + what + " of", err);
  std::memset(static_cast<void*>(&table[n]), 0, sizeof(Slot) * (grown - n));
  count.store(grown);
}

}  // namespace shmsem::detail
