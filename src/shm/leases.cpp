// leases.cpp: how a lease is granted, ended and looked up: the lease
// table (free list, growth, the slots a thread keeps in reserve), thread
// records, permit ids, what a permit learns when its lease is gone, and the
// scans of the whole table behind stats(), holders() and
// force_release_all().

#include <shmsem/permit.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

#include "shm/leases.hpp"
#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"

namespace shmsem::detail {

using namespace layout;

// Counts how one lease ended.
void count_end(shared_stats& s, lost_reason reason, std::int32_t weight) {
  switch (reason) {
    case kLostReleased:
      add(s.released, 1);
      break;
    case kLostExpired:
      add(s.expired, 1);
      break;
    case kLostReaped:
      add(s.reaped, 1);
      break;
    default:
      add(s.force_released, 1);
      break;
  }
  if (reason != kLostReleased) add(s.reclaimed_seats, std::max(0, weight));
}

std::string loss::describe() const {
  if (other_process) return "it belongs to the parent process (permits are not inherited by fork)";
  const double ago = at_ns ? static_cast<double>(sys::coarse_now_ns() - at_ns) / 1e6 : 0.0;
  char buf[96];
  std::snprintf(buf, sizeof buf, " %.0f ms ago", ago < 0 ? 0 : ago);
  switch (reason) {
    case kLostExpired:
      return std::string("its TTL ran out") + buf;
    case kLostReaped:
      return std::string("it was reaped as a dead holder's") + buf;
    case kLostForceReleased:
      return std::string("it was force-released") + buf;
    case kLostReleased:
      return "it was already released";
    default:
      return "it was taken away (expired, reaped or force-released; the reason is no longer "
             "recorded)";
  }
}

std::uint32_t attachment::grant(std::uint32_t holder, int weight, std::int64_t ttl_ms,
                                std::int64_t now, std::uint64_t& id, std::uint64_t& gen,
                                waiter_slot* to) {
  std::uint32_t slot;
  try {
    slot = take_free_slot();
  } catch (...) {
    give_back(weight);  // admitted, but no slot to record them in
    throw;
  }
  own_slot(slot, holder);
  lease_slot& l = leases[slot];
  gen = state_gen(l.state.load(std::memory_order_relaxed)) + 1;
  const std::int64_t expires = expiry_of(now, ttl_ms);
  l.weight.store(weight, std::memory_order_relaxed);
  l.acquired_ns.store(now, std::memory_order_relaxed);
  l.expires_ns.store(expires, std::memory_order_relaxed);
  SHMSEM_HOOK(mid_grant);
  // With fencing, the permit id is the grant's token (no thread has
  // lock-free state then: every grant comes here).
  id = hdr->fencing ? hdr->next_fence.fetch_add(1, std::memory_order_relaxed)
                    : hdr->next_permit_id++;
  add(hdr->stats.acquired, 1);
  if (expires != kNoExpiry) lower_earliest_expiry(expires);
  if (to) {
    // The waiter learns which lease is its, generation included, before
    // the lease is published: it must never take a later lease in the
    // same slot for its own (see take_grant()).
    to->lease.store(slot, std::memory_order_relaxed);
    to->lease_gen.store(gen, std::memory_order_relaxed);
    to->permit_id.store(id, std::memory_order_relaxed);
  }
  l.id.store(id, std::memory_order_relaxed);
  // Release: whoever sees the slot held sees the lease's fields.
  l.state.store(slot_state(gen, kSlotHeld), std::memory_order_release);
  return slot;
}

std::uint32_t attachment::take_free_slot() {
  if (hdr->free_lease != kNil) {
    const std::uint32_t slot = hdr->free_lease - 1;
    hdr->free_lease = leases[slot].next_free;
    return slot;
  }
  std::uint32_t slot = hdr->lease_hwm.load(std::memory_order_relaxed);
  const std::uint32_t have = hdr->lease_slots.load(std::memory_order_relaxed);
  if (slot >= have) {
    // ensure_lease_slots() leaves a slot for every grant the gate admits.
    // A reservation can still get here (while more leases are held than a
    // shrunk capacity), and a grant only if threads kept slots outside
    // their caches (fast_release). Grow by a quarter.
    if (have >= kMaxLeases)
      fail(errc::too_many, "all " + std::to_string(kMaxLeases) + " lease slots are in use");
    grow_leases(std::min(kMaxLeases, have + std::max<std::uint32_t>(64, have / 4)));
  }
  hdr->lease_hwm.store(slot + 1, std::memory_order_relaxed);
  return slot;
}

std::uint32_t attachment::reserve_slots(std::uint32_t holder, std::uint32_t* out,
                                        std::uint32_t want) {
  std::uint32_t got = 0;
  try {
    for (; got < want; ++got) {
      const std::uint32_t slot = take_free_slot();
      own_slot(slot, holder);
      lease_slot& l = leases[slot];
      l.state.store(slot_state(state_gen(l.state.load()), kSlotReserved),
                    std::memory_order_release);
      out[got] = slot;
    }
  } catch (const SegmentError&) {
    // A full table or disk only costs this thread its fast path for now.
  }
  return got;
}

void attachment::unreserve_slots(const std::uint32_t* slots, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t st = leases[slots[i]].state.load(std::memory_order_acquire);
    if (state_kind(st) == kSlotReserved) free_slot(slots[i], state_gen(st));
  }
}

std::uint32_t attachment::claimed_thread_records() const {
  const std::uint32_t n = thread_count();
  std::uint32_t claimed = 0;
  for (std::uint32_t t = 0; t < n; ++t)
    if (threads[t].state.load(std::memory_order_relaxed) != kThreadFree) ++claimed;
  return claimed;
}

void attachment::ensure_lease_slots(std::uint32_t capacity, std::uint32_t records) {
  const std::uint32_t need = lease_slots_needed(capacity, records);
  if (need <= hdr->lease_slots.load()) return;
  // A page at a time: tmpfs allocates whole pages anyway, and a fleet of
  // new threads then grows the file once per page, not once per thread.
  constexpr std::uint32_t kPerPage = kPage / sizeof(lease_slot);
  grow_leases(std::min(kMaxLeases, (need + kPerPage - 1) / kPerPage * kPerPage));
}

std::uint32_t attachment::claim_thread_record(std::uint32_t holder) {
  const std::uint32_t n = thread_count();
  std::uint32_t i = 0;
  while (i < n && threads[i].state.load(std::memory_order_relaxed) != kThreadFree) ++i;
  if (i == n && n >= kMaxThreads) return kNoSelf;
  try {
    // The slots this record's cache may keep come first: the grants the
    // gate admits must still find free slots once it has them, however
    // full /dev/shm is by then.
    ensure_lease_slots(static_cast<std::uint32_t>(capacity()), claimed_thread_records() + 1);
    if (i == n)
      grow_table(hdr->thread_slots, threads, kThreadsOffset, kMaxThreads, "thread records");
  } catch (const SegmentError&) {
    return kNoSelf;  // the thread stays on the locked path
  }
  threads[i].holder.store(holder, std::memory_order_relaxed);
  threads[i].state.store(kThreadClaimed, std::memory_order_release);
  add(holders[holder].threads, 1);
  return i;
}

void attachment::free_thread_records_of(std::uint32_t holder) {
  // The counters stay: the next thread to claim a record goes on counting.
  const std::uint32_t nt = thread_count();
  for (std::uint32_t t = 0; t < nt; ++t)
    if (threads[t].state.load() == kThreadClaimed && threads[t].holder.load() == holder)
      threads[t].state.store(kThreadFree, std::memory_order_release);
  holders[holder].threads.store(0);
}

void attachment::free_thread_record(std::uint32_t i) {
  if (i >= thread_count() || threads[i].state.load() != kThreadClaimed) return;
  const std::uint32_t h = threads[i].holder.load(std::memory_order_relaxed);
  threads[i].state.store(kThreadFree, std::memory_order_release);
  if (h < hdr->holder_slots.load() && holders[h].threads.load() > 0) add(holders[h].threads, -1);
}

std::uint64_t attachment::take_ids(std::uint64_t n) {
  const std::uint64_t first = hdr->next_permit_id;
  hdr->next_permit_id += n;
  return first;
}

void attachment::own_slot(std::uint32_t slot, std::uint32_t holder) {
  leases[slot].holder.store(holder, std::memory_order_relaxed);
  if (holder < hdr->holder_slots.load(std::memory_order_relaxed)) add(holders[holder].leases, 1);
}

void attachment::free_slot(std::uint32_t slot, std::uint64_t gen) {
  const std::uint32_t holder = leases[slot].holder.load(std::memory_order_relaxed);
  if (holder < hdr->holder_slots.load(std::memory_order_relaxed) &&
      holders[holder].leases.load(std::memory_order_relaxed) > 0)
    add(holders[holder].leases, -1);
  leases[slot].next_free = hdr->free_lease;
  hdr->free_lease = slot + 1;
  leases[slot].state.store(slot_state(gen, kSlotFree), std::memory_order_release);
}

bool attachment::end_lease(std::uint32_t slot, std::uint64_t held, lost_reason reason,
                           std::int64_t now, wake_list& wakes) {
  lease_slot& l = leases[slot];
  const std::uint64_t gen = state_gen(held);
  // The one CAS that decides who ends this lease: its holder's lock-free
  // release races with us for it.
  if (!l.state.compare_exchange_strong(held, slot_state(gen, kSlotEnding, reason),
                                       std::memory_order_acq_rel))
    return false;
  const std::uint64_t id = l.id.load(std::memory_order_relaxed);
  const std::int32_t weight = l.weight.load(std::memory_order_relaxed);
  if (reason != kLostReleased) {
    // Written before the slot is freed, so a permit that finds its lease
    // gone also finds why.
    l.lost_reason.store(reason, std::memory_order_relaxed);
    l.lost_ns.store(now, std::memory_order_relaxed);
    l.lost_id.store(id, std::memory_order_release);
  }
  SHMSEM_HOOK(mid_release);
  ewma_sample(now);
  const std::uint64_t before = give_back(weight);
  if (reason == kLostReleased)
    hold_sample(elapsed_ns(now, l.acquired_ns.load(std::memory_order_relaxed)));
  count_end(hdr->stats, reason, weight);
  free_slot(slot, gen);
  if (gate_used(before) <= weight && hdr->idle_waiters.load(std::memory_order_relaxed) > 0) {
    hdr->idle_seq.fetch_add(1, std::memory_order_release);
    wakes.idle = true;
  }
  if (hdr->queue_head.load(std::memory_order_relaxed) != kNil) grant_queued(now, wakes);
  return true;
}

void attachment::hold_sample(std::int64_t ns) {
  record_histogram(hdr->stats.hold, ns);
}

attachment::lease_status attachment::lease_state(std::uint32_t slot, std::uint64_t gen,
                                                 std::uint64_t id, std::int64_t now,
                                                 loss* why) const {
  const lease_slot& l = leases[slot];
  // (slot, gen) names one lease for good: the generation changes with every
  // lease of the slot. The id is checked too, as the permit's own name.
  if (l.state.load(std::memory_order_acquire) == slot_state(gen, kSlotHeld) &&
      l.id.load(std::memory_order_relaxed) == id) {
    if (l.holder.load(std::memory_order_relaxed) != self.load(std::memory_order_relaxed)) {
      if (why) why->other_process = true;
      return lease_status::foreign;
    }
    const std::int64_t exp = l.expires_ns.load(std::memory_order_relaxed);
    if (exp != kNoExpiry && exp <= now) {
      if (why) *why = loss{kLostExpired, exp, false};
      return lease_status::expired;
    }
    return lease_status::held;
  }
  if (why) {
    if (l.lost_id.load(std::memory_order_acquire) == id)
      *why = loss{static_cast<lost_reason>(l.lost_reason.load(std::memory_order_relaxed)),
                  l.lost_ns.load(std::memory_order_relaxed), false};
    else
      *why = loss{};
  }
  return lease_status::lost;
}

void attachment::grow_leases(std::uint32_t slots) {
  const std::uint32_t have = hdr->lease_slots.load();
  if (slots <= have) return;
  if (int err = file->allocate(file_size_for(have), file_size_for(slots) - file_size_for(have)))
    throw_segment_errno(path, "cannot grow the lease table of", err);
  hdr->lease_slots.store(slots);
}

lease_stats sum_lease_stats(const segment_header* h, const thread_record* t, std::uint32_t n) {
  lease_stats s;
  s.acquired = h->stats.acquired.load(std::memory_order_relaxed);
  s.released = h->stats.released.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < n; ++i) {
    s.acquired += t[i].acquired.load(std::memory_order_relaxed);
    for (const auto& c : t[i].hold_counts) s.released += c.load(std::memory_order_relaxed);
  }
  return s;
}

// ---------------------------------------------------------------------------
// Every lease at once

namespace {
void read_histogram(const shared_histogram& in, Histogram& out) {
  for (std::size_t i = 0; i < out.counts.size(); ++i)
    out.counts[i] = in.counts[i].load(std::memory_order_relaxed);
  out.sum_seconds = static_cast<double>(in.sum_ns.load(std::memory_order_relaxed)) / 1e9;
}
}  // namespace

Stats read_stats(const attachment& a) {
  const auto& s = a.hdr->stats;
  Stats out;
  auto rd = [](const std::atomic<std::uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  out.acquired = rd(s.acquired);
  out.released = rd(s.released);
  out.timeouts = rd(s.timeouts);
  out.cancelled = rd(s.cancelled);
  out.shutdowns = rd(s.shutdowns);
  out.rejected = rd(s.rejected);
  out.try_failures = rd(s.try_failures);
  out.reaped = rd(s.reaped);
  out.expired = rd(s.expired);
  out.force_released = rd(s.force_released);
  out.reclaimed_seats = rd(s.reclaimed_seats);
  out.recoveries = rd(s.recoveries);
  out.errors = rd(s.errors);
  read_histogram(s.wait, out.wait);
  read_histogram(s.hold, out.hold);
  // The fast path's counters, one record per thread: every grant there is
  // immediate (a wait of 0), every release there a hold sample.
  const std::uint32_t nt = a.thread_count();
  for (std::uint32_t t = 0; t < nt; ++t) {
    const auto& r = a.threads[t];
    const std::uint64_t acquired = rd(r.acquired);
    out.acquired += acquired;
    out.wait.counts[0] += acquired;
    for (std::size_t i = 0; i < out.hold.counts.size(); ++i) {
      const std::uint64_t c = rd(r.hold_counts[i]);
      out.hold.counts[i] += c;
      out.released += c;
    }
    out.hold.sum_seconds += static_cast<double>(rd(r.hold_sum_ns)) / 1e9;
  }
  return out;
}

std::vector<Holder> list_holders(const attachment& a) {
  std::vector<Holder> out;
  const std::int64_t now = lease_clock();
  const std::uint32_t hwm = a.hdr->lease_hwm.load(std::memory_order_acquire);
  std::vector<std::int8_t> alive(a.hdr->holder_slots.load(std::memory_order_relaxed), -1);
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const auto& l = a.leases[i];
    const std::uint64_t st = l.state.load(std::memory_order_acquire);
    if (state_kind(st) != kSlotHeld) continue;
    Holder h;
    h.permit_id = l.id.load(std::memory_order_relaxed);
    h.weight = l.weight.load(std::memory_order_relaxed);
    const std::uint32_t holder = l.holder.load(std::memory_order_relaxed);
    const std::int64_t acquired = l.acquired_ns.load(std::memory_order_relaxed);
    const std::int64_t exp = l.expires_ns.load(std::memory_order_acquire);
    if (l.state.load(std::memory_order_relaxed) != st) continue;  // changed under us
    h.acquired_at = Permit::clock::time_point(std::chrono::nanoseconds(acquired));
    if (exp) h.expires_at = Permit::clock::time_point(std::chrono::nanoseconds(exp));
    if (holder < alive.size()) {
      const auto& rec = a.holders[holder];
      if (rec.pid_ns.load(std::memory_order_relaxed) == a.pid_ns)
        h.pid = rec.pid.load(std::memory_order_relaxed);
      else
        h.foreign_namespace = true;
      if (alive[holder] < 0) alive[holder] = a.holder_alive(holder) ? 1 : 0;
    }
    if (exp && exp <= now)
      h.state = HolderState::expired;
    else if (holder >= alive.size() || alive[holder] == 0)
      h.state = HolderState::dead;
    out.push_back(h);
  }
  return out;
}

int force_release_all(attachment& a, std::int64_t now, wake_list& wakes) {
  int displaced = 0;
  const std::uint32_t hwm = a.hdr->lease_hwm.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const auto& l = a.leases[i];
    const std::uint64_t st = l.state.load(std::memory_order_acquire);
    if (state_kind(st) != kSlotHeld) continue;
    const std::int64_t exp = l.expires_ns.load(std::memory_order_relaxed);
    if (exp && exp <= now) {
      a.end_lease(i, st, kLostExpired, now, wakes);
    } else if (!a.holder_alive(l.holder.load(std::memory_order_relaxed))) {
      a.end_lease(i, st, kLostReaped, now, wakes);
    } else if (a.end_lease(i, st, kLostForceReleased, now, wakes)) {
      ++displaced;
    }
  }
  return displaced;
}

}  // namespace shmsem::detail
