// holders.cpp: which processes hold seats, whether they still live, and
// reaping: taking back what dead holders and expired leases hold.

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "shm/lifeline.hpp"
#include "shm/queue.hpp"
#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"
#include "sys/proc.hpp"
#include "sys/robust_mutex.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {
// A token file this process may not use (another user's, or planted), as
// opposed to one it cannot open now (no descriptor left): only the first
// lets a claim try the records of another file.
bool token_file_refused(const SegmentError& e) {
  return e.code() == errc::permission_denied || e.code() == errc::untrusted_owner;
}

// Holds an attachment's `claiming` flag: a spin lock among its threads, so
// that no thread probes tokens while another claims. A token that this
// process's description already holds would look free to it.
class claim_guard {
 public:
  explicit claim_guard(std::atomic<bool>& flag) : flag_(flag) {}
  bool try_take() noexcept { return owns_ = !flag_.exchange(true, std::memory_order_acquire); }
  void take() noexcept {
    while (!try_take()) sys::yield();
  }
  ~claim_guard() {
    if (owns_) flag_.store(false, std::memory_order_release);
  }
  claim_guard(const claim_guard&) = delete;
  claim_guard& operator=(const claim_guard&) = delete;

 private:
  std::atomic<bool>& flag_;
  bool owns_ = false;
};
}  // namespace

const std::atomic<std::uint32_t>* attachment::claim_holder_early(std::int64_t deadline_ns) {
  for (int round = 0; round < 2; ++round) {
    std::uint32_t n;
    {
      claim_guard g(claiming);
      if (!g.try_take()) return nullptr;  // another thread of ours is claiming
      if (self.load(std::memory_order_relaxed) != kNoSelf || early_claim != kNoSelf) return nullptr;
      n = std::min(hdr->holder_slots.load(std::memory_order_acquire), kMaxHolders);
      // Lowest first, as the free list gives them: a head of the queue
      // watches the lifelines of the first records. The CAS settles a race
      // for one record without a system call.
      for (std::uint32_t h = 0; h < n; ++h) {
        std::atomic<std::uint32_t>& state = holders[h].state;
        std::uint32_t expected = kHolderFree;
        if (state.load(std::memory_order_relaxed) != kHolderFree ||
            !state.compare_exchange_strong(expected, kHolderClaiming, std::memory_order_acq_rel))
          continue;
        // Every way out but a taken token puts the record back, from
        // `claiming` only: the locked path may have freed it meanwhile.
        const auto give_back = [&state] {
          std::uint32_t claimed = kHolderClaiming;
          state.compare_exchange_strong(claimed, kHolderFree, std::memory_order_acq_rel);
        };
        bool taken = false;
        try {
          taken = tokens->take(h);
        } catch (const SegmentError& e) {
          give_back();
          // Any other error: the locked path claims again, and reports it.
          if (!token_file_refused(e)) return nullptr;
          // A token file we may not open: the records of another may do
          // (the locked path says what went wrong if none does).
          h = (h / kHoldersPerTokenFile + 1) * kHoldersPerTokenFile - 1;
          continue;
        }
        if (taken) {
          early_claim = h;
          early_identity = sys::self_identity();
          // The record is ours by its token, and its last owner is gone:
          // nothing links through its lifeline any more (see ensure_self).
          // Armed now, the lifeline thread starts (and arms it) while we go
          // for the lock, not while we hold a seat.
          holder_record& r = holders[h];
          r.lifeline_state.store(kLifelineNone, std::memory_order_relaxed);
          sys::robust_mutex_init(&r.lifeline);
          early_lifeline = lifeline::arm(&r.lifeline, &r.lifeline_state);
          SHMSEM_HOOK(claiming);
          return early_lifeline ? &r.lifeline_state : nullptr;
        }
        // Its token is still held: by a process that freed the record and
        // has not closed its descriptor yet, or by one that took the
        // record from the free list under the lock meanwhile.
        give_back();
      }
    }
    // No free record: a full table is for the locked path, which reaps the
    // dead; a table that can grow grows here, and the scan is tried again.
    if (n >= kMaxHolders) return nullptr;
    segment_lock lk(*this, deadline_ns);
    if (!lk.owns()) return nullptr;
    if (hdr->holder_slots.load() == n) grow_holders();
  }
  return nullptr;
}

void attachment::claim_holder_armed(std::int64_t deadline_ns) {
  if (const std::atomic<std::uint32_t>* state = claim_holder_early(deadline_ns))
    lifeline::await_armed(state, std::min(deadline_ns, sys::precise_now_ns() + kArmWaitNs));
}

std::uint32_t attachment::ensure_self(wake_list& wakes) {
  std::uint32_t s = self.load(std::memory_order_relaxed);
  if (s != kNoSelf) return s;
  claim_guard g(claiming);
  g.take();
  std::uint32_t chosen = kNoSelf;
  sys::process_identity me;
  bool armed_early = false;
  if (early_claim != kNoSelf) {
    const std::uint32_t h = std::exchange(early_claim, kNoSelf);
    // Ours by its token, so not attached by anyone (a reset of the table
    // may have made it plain free), and on the free list.
    if (h < std::min(hdr->holder_slots.load(), kMaxHolders) &&
        holders[h].state.load() != kHolderAttached) {
      unlink_free_holder(hdr, holders, h);
      chosen = h;
      me = early_identity;
      armed_early = true;
    } else {
      if (std::exchange(early_lifeline, false))
        lifeline::disarm(&holders[h].lifeline, &holders[h].lifeline_state);
      tokens->give_back(h);
    }
  }
  if (chosen == kNoSelf) {
    chosen = take_free_holder(wakes);
    if (chosen == kNoSelf)
      fail(errc::too_many, "all " + std::to_string(kMaxHolders) +
                               " holder records are in use by live processes (at most that many "
                               "processes can use one semaphore at once)");
    me = sys::self_identity();
  }
  holder_record& r = holders[chosen];
  r.generation++;
  r.pid.store(me.pid);
  r.uid = me.uid;
  r.pid_ns.store(me.pid_ns);
  r.start_time = me.start_time;
  std::memcpy(r.comm, me.comm, sizeof r.comm);
  r.waiting.store(0);
  r.threads.store(0);
  r.leases.store(0);
  // Read only once the record is attached (below), so cleared here alone.
  r.token_shared.store(0, std::memory_order_relaxed);
  if (armed_early) {
    lifeline_asked = std::exchange(early_lifeline, false);
  } else {
    // The previous owner is gone (its token was free): its lifeline thread,
    // if it had one, is dead, so nothing links through this mutex any more.
    r.lifeline_state.store(kLifelineNone, std::memory_order_relaxed);
    sys::robust_mutex_init(&r.lifeline);
  }
  r.state.store(kHolderAttached, std::memory_order_release);
  if (!armed_early) lifeline_asked = lifeline::arm(&r.lifeline, &r.lifeline_state);
  self.store(chosen, std::memory_order_relaxed);
  // The head of the queue sleeps on the lifelines of the processes it knew:
  // it must watch ours too.
  if (const std::uint32_t head = hdr->queue_head.load(std::memory_order_relaxed); head != kNil)
    nudge(head - 1, wakes);
  return chosen;
}

std::uint32_t attachment::take_free_holder(wake_list& wakes) {
  const std::int64_t now = lease_clock();
  // A record is ours once we hold its token byte. One whose token another
  // description holds (a process that claimed it ahead of the lock, or
  // freed it and has not yet closed its descriptor) is skipped, and put
  // back whatever happens.
  std::vector<std::uint32_t> busy;
  struct put_back {
    attachment& a;
    std::vector<std::uint32_t>& records;
    ~put_back() {
      for (std::uint32_t h : records) push_free_holder(a.hdr, a.holders, h);
    }
  } restore{*this, busy};
  // A token file this process may not open (one another user made after
  // we forked and dropped our rights) refuses its records, not the
  // semaphore: a record of another file will do, and a new file is ours.
  std::exception_ptr refused;
  auto claim_from_free_list = [&]() -> std::uint32_t {
    while (hdr->free_holder != kNil) {
      const std::uint32_t h = hdr->free_holder - 1;
      unlink_free_holder(hdr, holders, h);
      busy.push_back(h);  // until its token is ours
      try {
        if (tokens->take(h)) {
          busy.pop_back();
          return h;
        }
      } catch (const SegmentError& e) {
        if (!token_file_refused(e)) throw;  // out of descriptors, say: no other file would do
        refused = std::current_exception();
      }
    }
    return kNoSelf;
  };
  // The last try: with no record left, a refused token file is the reason.
  auto last_claim = [&]() -> std::uint32_t {
    const std::uint32_t h = claim_from_free_list();
    if (h == kNoSelf && refused) std::rethrow_exception(refused);
    return h;
  };
  std::uint32_t chosen = claim_from_free_list();
  if (chosen != kNoSelf) return chosen;
  // Only records of token files we may not open are free: a grown table
  // brings records of new files, which we make (tokens.hpp).
  while (refused && hdr->holder_slots.load() < kMaxHolders) {
    grow_holders();
    if ((chosen = claim_from_free_list()) != kNoSelf) return chosen;
  }
  // Records of processes that died owing nothing are still attached:
  // their lifelines say so without a system call; the token confirms.
  const std::uint32_t me = self.load(std::memory_order_relaxed);
  std::uint32_t n = std::min(hdr->holder_slots.load(), kMaxHolders);
  for (std::uint32_t h = 0; h < n; ++h)
    if (h != me && holders[h].state.load() == kHolderAttached &&
        read_lifeline(h) == lifeline_reading::dead && holder_gone(h))
      reap_holder(h, now, wakes);
  if ((chosen = claim_from_free_list()) != kNoSelf) return chosen;
  if (n < kMaxHolders) {
    grow_holders();
    return last_claim();
  }
  // The table is full: only now probe the tokens of the holders without a
  // lifeline, a system call each.
  for (std::uint32_t h = 0; h < n; ++h)
    if (h != me && holders[h].state.load() == kHolderAttached && holder_gone(h))
      reap_holder(h, now, wakes);
  return last_claim();
}

void attachment::grow_holders() {
  const std::uint32_t n = hdr->holder_slots.load();
  grow_table(hdr->holder_slots, holders, kHoldersOffset, kMaxHolders, "holder records");
  link_free_holders(hdr, holders, n, hdr->holder_slots.load());
}

void attachment::free_holder_record(std::uint32_t h) {
  holders[h].state.store(kHolderFree, std::memory_order_release);
  push_free_holder(hdr, holders, h);
}

bool attachment::holder_alive(std::uint32_t h) const {
  if (h == self.load(std::memory_order_relaxed)) return true;
  if (h >= std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders)) return false;
  if (holders[h].state.load(std::memory_order_acquire) != kHolderAttached) return false;
  return !holder_gone(h);
}

attachment::lifeline_reading attachment::read_lifeline(std::uint32_t h) const {
  const holder_record& r = holders[h];
  if (r.lifeline_state.load(std::memory_order_acquire) != kLifelineArmed)
    return lifeline_reading::unarmed;
  return sys::robust_mutex_owner_alive(&r.lifeline) ? lifeline_reading::alive
                                                    : lifeline_reading::dead;
}

bool attachment::holder_gone(std::uint32_t h) const {
  if (h == self.load(std::memory_order_relaxed)) return false;
  if (read_lifeline(h) == lifeline_reading::alive) return false;
  // Read dead, or no lifeline: the token decides. It may still be held a
  // moment after the lifeline was marked (the kernel releases a dying
  // process's robust mutexes before its files), or for good, by a child
  // that inherited the descriptor on purpose (shmsem run). A dead lifeline
  // alone would be faster and is not enough: it says that one thread died,
  // and a SIGKILL takes a process's threads one at a time, so another may
  // still be inside a lock-free acquire or release; the token goes only
  // with the last thread (docs/performance.md, case 8), and after the
  // kernel has torn down the process's memory. Once every thread shows
  // that it is exiting, none runs user code again: exiting_alone() says
  // the process is gone then, unless a tree shares its token.
  const holder_record& r = holders[h];
  const std::uint32_t gen = r.generation.load(std::memory_order_acquire);
  const std::uint64_t mark = (std::uint64_t{gen} << 32) | (h + 1);
  std::atomic<std::uint64_t>& seen = gone_seen[h % kGoneSeen];
  if (seen.load(std::memory_order_relaxed) == mark &&
      r.state.load(std::memory_order_acquire) == kHolderAttached)
    return true;
  if (tokens->held_by_other(h) && !exiting_alone(h)) return false;
  // Not if the record was reaped and claimed again meanwhile: its token
  // then said nothing of the process this generation names.
  if (r.state.load(std::memory_order_acquire) == kHolderAttached &&
      r.generation.load(std::memory_order_acquire) == gen)
    seen.store(mark, std::memory_order_relaxed);
  return true;
}

void attachment::await_lifeline(std::int64_t deadline_ns) const {
  const std::uint32_t me = self.load(std::memory_order_relaxed);
  if (me == kNoSelf || !lifeline_asked) return;
  lifeline::await_armed(&holders[me].lifeline_state,
                        std::min(deadline_ns, sys::precise_now_ns() + kArmWaitNs));
}

bool attachment::exiting_alone(std::uint32_t h) const {
  const holder_record& r = holders[h];
  // A pid of another PID namespace means another process (or none) here.
  if (read_lifeline(h) != lifeline_reading::dead ||
      r.token_shared.load(std::memory_order_acquire) != 0 ||
      r.pid_ns.load(std::memory_order_relaxed) != sys::self_pid_ns())
    return false;
  return sys::process_exiting(r.pid.load(std::memory_order_relaxed), r.start_time);
}

bool attachment::await_exit(std::uint32_t h, std::int64_t deadline_ns) const {
  const holder_record& r = holders[h];
  // Its pid means another process (or none) in another PID namespace.
  if (r.pid_ns.load(std::memory_order_relaxed) != sys::self_pid_ns()) return false;
  const pid_t pid = r.pid.load(std::memory_order_relaxed);
  // The exit (files closed) comes after the teardown of the process's
  // memory: 3.5 ms for a node process here. Every thread shows that it is
  // exiting before that, so short sleeps on the exit look for that too.
  for (;;) {
    if (exiting_alone(h)) return true;
    const std::int64_t now = sys::precise_now_ns();
    const std::int64_t until = std::min(deadline_ns, now + kExitingLookNs);
    const sys::exit_wait w = sys::wait_for_exit(pid, until);
    if (w != sys::exit_wait::timed_out || until >= deadline_ns)
      return w != sys::exit_wait::unavailable;
  }
}

bool attachment::reapable(std::uint32_t h) const {
  const holder_record& r = holders[h];
  if (r.state.load(std::memory_order_acquire) != kHolderAttached) return false;
  if (h == self.load(std::memory_order_relaxed)) return false;
  const bool owes = r.leases.load(std::memory_order_relaxed) != 0 ||
                    r.waiting.load(std::memory_order_relaxed) != 0;
  const lifeline_reading reading = read_lifeline(h);
  if (reading == lifeline_reading::alive) return false;
  // A holder that owes nothing and never had a lifeline costs a probe
  // only when a record is needed (take_free_holder).
  if (!owes && reading == lifeline_reading::unarmed) return false;
  return holder_gone(h);
}

void attachment::reap_holder(std::uint32_t h, std::int64_t now, wake_list& wakes) {
  // The holder's counts (kept under the lock, rebuilt by repair) spare
  // the scans of a holder that owes nothing, the usual dead process in a
  // fleet that comes and goes: each scan is as long as the fleet.
  const std::uint32_t nw = holders[h].waiting.load() != 0 ? hdr->waiter_slots.load() : 0;
  for (std::uint32_t w = 0; w < nw; ++w)
    if (waiters[w].state.load() != kWaiterFree && waiters[w].holder.load() == h)
      free_waiter(w, wakes);
  for (bool recounted = false; holders[h].leases.load() != 0;) {
    bool in_flight = false;
    each_lease_of(h, [&](std::uint32_t i, std::uint64_t st) {
      switch (state_kind(st)) {
        case kSlotHeld:
          end_lease(i, st, kLostReaped, now, wakes);
          break;
        case kSlotReserved:
        case kSlotReleased:  // the gate has the seats back; only the slot was left
          free_slot(i, state_gen(st));
          break;
        case kSlotAcquiring:
        case kSlotReleasing:
          in_flight = true;
          break;
        default:
          break;
      }
    });
    if (!in_flight) break;
    // Killed halfway through a lock-free acquire or release: only a count
    // of every held slot can tell the gate's truth. Until one succeeds, keep
    // the record (and its token byte) so that the next reap tries again.
    // A recount that gave up lately (a live thread is stopped in flight)
    // is not tried again before its backoff: each try waits kQuiesceNs
    // under the lock, and there may be many such dead holders.
    if (recounted || resettle_backing_off(now) || resettle(now) < 0) return;
    recounted = true;
  }
  free_thread_records_of(h);
  holders[h].waiting.store(0);
  // The kernel woke one sleeper on the dead lifeline; the others watched a
  // process that is gone now.
  sys::robust_mutex_wake_watchers(&holders[h].lifeline);
  free_holder_record(h);
}

int attachment::reap(std::int64_t now, wake_list& wakes, bool force_scan) {
  const std::int32_t before = used();
  const std::uint32_t hwm = hdr->lease_hwm.load(std::memory_order_relaxed);
  if (hdr->resettle_due_ns.load(std::memory_order_relaxed) != 0 && !resettle_backing_off(now))
    resettle(now);
  if (force_scan || hdr->earliest_expiry_ns.load(std::memory_order_relaxed) <= now) {
    // Frozen while the bound is rebuilt: a lock-free acquire that took its
    // seats before the freeze shows its expiry in its slot (acquiring or
    // held), and one after it waits for this lock. Leases granted during
    // the scan (end_lease hands seats to waiters) lower the bound
    // themselves; the scan lowers it for the rest.
    gate_freeze frozen(*this);
    hdr->earliest_expiry_ns.store(INT64_MAX, std::memory_order_relaxed);
    std::int64_t earliest = INT64_MAX;
    try {
      for (std::uint32_t i = 0; i < hwm; ++i) {
        const std::uint64_t st = leases[i].state.load(std::memory_order_acquire);
        const slot_kind k = state_kind(st);
        if (k != kSlotHeld && k != kSlotAcquiring) continue;
        const std::int64_t exp = leases[i].expires_ns.load(std::memory_order_relaxed);
        if (exp == kNoExpiry) continue;
        if (k == kSlotHeld && exp <= now)
          end_lease(i, st, kLostExpired, now, wakes);
        else
          earliest = std::min(earliest, exp);
      }
    } catch (...) {
      // A scan cut short knows no bound: make the next reap scan again.
      lower_earliest_expiry(now);
      throw;
    }
    lower_earliest_expiry(earliest);
  }
  const std::uint32_t n = std::min(hdr->holder_slots.load(), kMaxHolders);
  for (std::uint32_t h = 0; h < n; ++h)
    if (reapable(h)) reap_holder(h, now, wakes);
  const std::int32_t freed = before - used();
  return freed > 0 ? freed : 0;
}

}  // namespace shmsem::detail
