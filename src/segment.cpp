#include "segment.hpp"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "fastpath.hpp"
#include "key.hpp"
#include "lifeline.hpp"
#include "log.hpp"
#include "sys/futex.hpp"
#include "sys/proc.hpp"
#include "sys/robust_mutex.hpp"
#include "trust.hpp"

namespace shmsem::detail {

using namespace layout;

#ifdef SHMSEM_TESTING
namespace testing {
std::atomic<hook_fn> current_hook{nullptr};
void set_hook(hook_fn fn) {
  current_hook.store(fn);
}
std::atomic<int> fail_reopen_after_fork{0};
}  // namespace testing
#endif

namespace {

// Writers hold the segment lock, so counters need no read-modify-write.
template <class T, class U>
inline void add(std::atomic<T>& a, U v) {
  a.store(a.load(std::memory_order_relaxed) + static_cast<T>(v), std::memory_order_relaxed);
}

// Every attachment of this process, for handle sharing and for fork().
std::mutex registry_mutex;
std::vector<attachment*> registry;
std::uint64_t next_serial = 1;  // under registry_mutex
std::once_flag atfork_once;

void atfork_prepare() {
  registry_mutex.lock();
}
void atfork_parent() {
  registry_mutex.unlock();
}
void atfork_child() {
  registry_mutex.unlock();
  lifeline::forget_after_fork();
  // The child shares our open file descriptions, and with them our liveness
  // tokens: while it lived, our death would go unnoticed, and its probes,
  // which cannot see locks of its own description, would find us dead.
  // Give it its own descriptions; it claims its own holder record at its
  // first acquire. If it cannot have one, it must not use the semaphore.
  for (attachment* a : registry) {
    int err = a->file->reopen_description();
#ifdef SHMSEM_TESTING
    if (testing::fail_reopen_after_fork.load()) err = EMFILE;
#endif
    if (err == 0) {
      a->file->try_lock(kAttachLockByte, false);
    } else {
      a->broken_by_fork = err;
      a->file->abandon();
    }
    a->self.store(kNoSelf, std::memory_order_relaxed);
    // The parent's permits were copied into the child with its memory, and
    // their pins with the parent's threads, which the child has not: keep
    // every inherited mapping until the child exits.
    a->sticky = true;
    a->entries.clear();
  }
  forget_thread_entries();
}

errc errc_for(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return errc::permission_denied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return errc::no_space;
    case ENOENT:
      return errc::not_found;
    case ENAMETOOLONG:
      return errc::invalid_key;
    default:
      return errc::bad_segment;
  }
}

// Pushes holder records [from, to) onto the free list, lowest index first
// out. The caller holds the lock, or is alone with the segment.
void link_free_holders(segment_header* h, holder_record* hs, std::uint32_t from, std::uint32_t to) {
  for (std::uint32_t i = to; i-- > from;) {
    hs[i].next_free = h->free_holder;
    h->free_holder = i + 1;
  }
}

// The same for waiter slots, linked through `next` while free.
void link_free_waiters(segment_header* h, waiter_slot* ws, std::uint32_t from, std::uint32_t to) {
  for (std::uint32_t i = to; i-- > from;) {
    ws[i].next.store(h->free_waiter, std::memory_order_relaxed);
    h->free_waiter = i + 1;
  }
}

}  // namespace

void throw_segment_errno(const std::string& path, const std::string& what, int err) {
  std::string why = err == ELOOP    ? "it is a symbolic link (refused)"
                    : err == EISDIR ? "it is a directory"
                                    : std::strerror(err);
  const errc code = errc_for(err);
  if (code == errc::bad_segment && err != ELOOP && err != EISDIR)
    throw SegmentError(std::error_code(err, std::system_category()),
                       "shmsem: " + what + " " + path + ": " + why);
  throw SegmentError(make_error_code(code), "shmsem: " + what + " " + path + ": " + why);
}

void record_histogram(shared_histogram& h, std::int64_t ns) {
  if (ns < 0) ns = 0;
  add(h.counts[histogram_bucket(ns)], 1);
  add(h.sum_ns, ns);
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

[[noreturn]] void attachment::fail(errc code, const std::string& problem) const {
  throw SegmentError(make_error_code(code),
                     "shmsem: semaphore '" + key + "' (" + path + "): " + problem);
}

// ---------------------------------------------------------------------------
// Attach, initialize, detach

namespace {

void initialize(sys::shm_file& f, void* base, std::string_view key, int permits,
                const std::string& path, bool fencing) {
  auto* h = header(base);
  // Allocate before touching a byte: a full /dev/shm then fails here with
  // ENOSPC instead of killing us with SIGBUS on the first write. A crash
  // after this leaves a zero magic, which the next opener re-initializes.
  const auto cap = static_cast<std::uint32_t>(permits);
  int err = f.allocate(0, kHoldersOffset + sizeof(holder_record) * kInitialHolders);
  if (!err) err = f.allocate(kWaitersOffset, sizeof(waiter_slot) * kInitialWaiters);
  if (!err) err = f.allocate(kThreadsOffset, sizeof(thread_record) * kInitialThreads);
  if (!err) err = f.allocate(kLeasesOffset, sizeof(lease_slot) * cap);
  if (err) throw_segment_errno(path, "cannot allocate the segment", err);
  // Then mark the file as ours but unfinished, so a crash from here on is
  // recognized (problem::initializing) and the next opener starts over.
  std::memset(static_cast<void*>(h), 0, kHeaderRegion);
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->format = format_word();
  h->init_state.store(kInitializing, std::memory_order_release);
#ifdef SHMSEM_TESTING
  if (auto hook = testing::current_hook.load()) hook(testing::point::initializing, key);
#endif
  std::memset(static_cast<void*>(holders(base)), 0, sizeof(holder_record) * kInitialHolders);
  std::memset(static_cast<void*>(waiters(base)), 0, sizeof(waiter_slot) * kInitialWaiters);
  std::memset(static_cast<void*>(threads(base)), 0, sizeof(thread_record) * kInitialThreads);
  std::memset(static_cast<void*>(leases(base)), 0, sizeof(lease_slot) * cap);
  h->key_size = static_cast<std::uint32_t>(key.size());
  std::memcpy(h->key, key.data(), key.size());
  h->created_realtime_ns = sys::realtime_now_ns();
  h->ewma_base_ns = sys::coarse_now_ns();
  if (int e = sys::robust_mutex_init(&h->mutex))
    throw_segment_errno(path, "cannot initialize the lock of", e);
  h->gate.store(make_gate(0, permits, 0));
  h->holder_slots.store(kInitialHolders);
  h->waiter_slots.store(kInitialWaiters);
  h->thread_slots.store(kInitialThreads);
  h->lease_slots.store(cap);
  h->earliest_expiry_ns.store(INT64_MAX);
  h->ewma.store(ewma_word(0.0f, 0));
  h->next_permit_id = 1;
  h->next_ticket = 1;
  h->next_fence = 1;
  h->fencing = fencing ? 1 : 0;
  link_free_holders(h, holders(base), 0, kInitialHolders);
  link_free_waiters(h, waiters(base), 0, kInitialWaiters);
  h->init_state.store(kReady, std::memory_order_release);
}

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

// A process that died in the middle of an operation may have counted a
// lease as acquired without publishing it (a grant, or a lock-free acquire),
// or ended a lease without counting how (a lock holder's end_lease, or a
// lock-free release). Either way one granted lease is neither live nor
// ended in the stats. A lease a dead lock holder was ending (left in
// kSlotEnding; `ending` lists them) is counted under its own reason; any
// other as reaped. Then acquired == released + reaped + expired +
// force_released + live leases holds again.
void settle_stats(segment_header* h, const lease_stats& sums, std::uint64_t live,
                  const std::vector<std::pair<lost_reason, std::int32_t>>& ending) {
  auto& s = h->stats;
  const std::uint64_t ended =
      sums.released + s.reaped.load() + s.expired.load() + s.force_released.load();
  if (sums.acquired <= ended + live) return;
  std::uint64_t missing = sums.acquired - ended - live;
  for (const auto& [reason, weight] : ending) {
    if (missing == 0) break;
    count_end(s, reason, weight);
    --missing;
  }
  if (missing) add(s.reaped, missing);
}

// Nobody is attached: every holder is dead and the lock may be garbage.
// Keep the structure (capacity, tables, stats, thread counters) and clear
// the live state.
void reset_live_state(void* base) {
  auto* h = header(base);
  sys::robust_mutex_init(&h->mutex);
  const std::int64_t now = sys::coarse_now_ns();
  const std::uint32_t hwm = std::min(h->lease_hwm.load(), h->lease_slots.load());
  auto* ls = leases(base);
  std::vector<std::pair<lost_reason, std::int32_t>> ending;
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const std::uint64_t st = ls[i].state.load();
    const std::uint64_t gen = state_gen(st);
    switch (state_kind(st)) {
      case kSlotHeld:
      case kSlotReleasing:  // its holder died before the release counted
        ls[i].lost_reason.store(kLostReaped);
        ls[i].lost_id.store(ls[i].id.load());
        ls[i].lost_ns.store(now);
        if (state_kind(st) == kSlotHeld) count_end(h->stats, kLostReaped, ls[i].weight.load());
        break;
      case kSlotEnding:
        ending.emplace_back(state_reason(st), ls[i].weight.load());
        break;
      default:
        break;
    }
    ls[i].state.store(slot_state(gen, kSlotFree));
  }
  h->lease_hwm.store(0);
  h->free_lease = kNil;
  h->gate.store(make_gate(0, gate_capacity(h->gate.load()), 0));
  h->waiters.store(0);
  h->queue_head.store(kNil);
  h->queue_tail.store(kNil);
  h->earliest_expiry_ns.store(INT64_MAX);
  h->idle_waiters.store(0);
  h->resettle_due_ns.store(0);
  h->resettle_backoff_ns = 0;
  auto* ts = threads(base);
  const std::uint32_t nt = std::min(h->thread_slots.load(), kMaxThreads);
  for (std::uint32_t i = 0; i < nt; ++i) ts[i].state.store(kThreadFree);
  settle_stats(h, sum_lease_stats(h, ts, nt), 0, ending);
  const std::uint32_t nh = std::min(h->holder_slots.load(), kMaxHolders);
  const std::uint32_t nw = std::min(h->waiter_slots.load(), kMaxWaiters);
  std::memset(static_cast<void*>(holders(base)), 0, sizeof(holder_record) * nh);
  std::memset(static_cast<void*>(waiters(base)), 0, sizeof(waiter_slot) * nw);
  h->free_holder = kNil;
  h->free_waiter = kNil;
  link_free_holders(h, holders(base), 0, nh);
  link_free_waiters(h, waiters(base), 0, nw);
}

errc errc_for(problem p) {
  switch (p) {
    case problem::bad_version:
    case problem::bad_format:
      return errc::layout_mismatch;
    case problem::truncated:
    case problem::too_small:
      return errc::truncated;
    default:
      return errc::bad_segment;
  }
}

void warn_if_capacity_differs(const attachment& a, int permits) {
  if (permits > 0 && permits != a.capacity())
    log().warn(
        "semaphore '{}' exists with capacity {}; open() asked for {} and the existing "
        "capacity stands (use set_capacity to change it)",
        a.key, a.capacity(), permits);
}

}  // namespace

attachment* attachment::acquire_handle(std::string_view key, int permits, mode_t mode,
                                       std::chrono::milliseconds open_timeout,
                                       const std::vector<std::string>& trusted_owners,
                                       bool fencing) {
  validate_key(key);
  const std::string name = key_to_name(key);
  const std::string path = sys::shm_path(name);
  std::call_once(atfork_once,
                 [] { ::pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
  const std::int64_t deadline =
      sys::precise_now_ns() + std::chrono::nanoseconds(open_timeout).count();

  std::lock_guard g(registry_mutex);
  for (attachment* a : registry) {
    if (a->name != name || a->dying || a->broken_by_fork) continue;
    struct ::stat st;
    // A removed file stays usable for those who have it, but a new open
    // must get the semaphore that now has the name.
    if (a->file->stat(st) != 0 || st.st_nlink == 0) continue;
    check_owner(st, key, a->path, trusted_owners);
    ++a->handles;
    a->closing.store(false, std::memory_order_relaxed);
    for (thread_entry* e : a->entries) e->closing.store(false, std::memory_order_relaxed);
    warn_if_capacity_differs(*a, permits);
    return a;
  }

  for (int attempt = 0;; ++attempt) {
    int err = 0;
    bool created = false;
    auto file = sys::shm_file::open(name, permits > 0, mode, err, created);
    if (!file) {
      if (err == ENOENT && permits <= 0)
        throw SegmentError(make_error_code(errc::not_found),
                           "shmsem: no semaphore '" + std::string(key) + "' (" + path + ")");
      throw_segment_errno(path, "cannot open", err);
    }
    struct ::stat st;
    if ((err = file->stat(st)) != 0) throw_segment_errno(path, "cannot stat", err);
    if (!S_ISREG(st.st_mode))
      throw SegmentError(make_error_code(errc::bad_segment),
                         "shmsem: " + path + " is not a regular file (refused)");
    check_owner(st, key, path, trusted_owners);  // before a byte of it is trusted
    if (!file->lock_until(kInitLockByte, true, deadline))
      throw SegmentError(make_error_code(errc::busy),
                         "shmsem: " + path +
                             ": another process kept the segment's init lock past the open "
                             "timeout (is it stopped?)");
    if ((err = file->stat(st)) != 0) throw_segment_errno(path, "cannot stat", err);
    if (st.st_nlink == 0) {
      // Removed (by gc or remove) while we waited for the init lock.
      if (attempt < 100) continue;
      throw SegmentError(make_error_code(errc::busy), "shmsem: " + path + " keeps being removed");
    }
    const bool alone = file->try_lock(kAttachLockByte, true);
    if ((err = file->map(kMappingSize)) != 0) throw_segment_errno(path, "cannot map", err);
    void* base = file->base();
    auto size = static_cast<std::uint64_t>(st.st_size);
    bool key_mismatch = false;
    problem p = size == 0 ? problem::uninitialized
                          : validate(base, size, &key_mismatch, key.data(), key.size());
    // A table that grew since our fstat: the file grows before its length
    // is published, so the length validate() read may be newer than the
    // size. Truncated means the size stays short of it.
    for (int again = 0; p == problem::truncated && again < 1000; ++again) {
      if ((err = file->stat(st)) != 0) throw_segment_errno(path, "cannot stat", err);
      if (static_cast<std::uint64_t>(st.st_size) == size) break;
      size = static_cast<std::uint64_t>(st.st_size);
      p = validate(base, size, &key_mismatch, key.data(), key.size());
    }
    if (key_mismatch)
      throw SegmentError(
          make_error_code(errc::bad_segment),
          "shmsem: " + path + " holds another key ('" +
              std::string(header(base)->key, std::min<std::size_t>(header(base)->key_size, 255)) +
              "'), not '" + std::string(key) + "'");
    if (alone) {
      if (p == problem::uninitialized || p == problem::initializing) {
        if (permits <= 0)
          throw SegmentError(make_error_code(errc::not_found),
                             "shmsem: " + path +
                                 " was never fully initialized; open it with a capacity to "
                                 "initialize it");
        if (p == problem::initializing)
          log().warn(
              "semaphore '{}': its creator died during initialization; initializing {} again", key,
              path);
        initialize(*file, base, key, permits, path, fencing);
      } else if (p == problem::none) {
        reset_live_state(base);
      }
    }
    if (p != problem::none &&
        !(alone && (p == problem::uninitialized || p == problem::initializing)))
      throw SegmentError(make_error_code(errc_for(p)), "shmsem: " + path + " is " + to_string(p));
    file->try_lock(kAttachLockByte, false);  // from exclusive to shared, atomically
    file->unlock(kInitLockByte);

    auto* a = new attachment;
    a->key = std::string(key);
    a->name = name;
    a->path = path;
    a->file_identity = {st.st_dev, st.st_ino};
    a->file = std::move(file);
    a->hdr = header(base);
    a->holders = layout::holders(base);
    a->waiters = layout::waiters(base);
    a->threads = layout::threads(base);
    a->leases = layout::leases(base);
    a->pid_ns = sys::self_pid_ns();
    a->handles = 1;
    a->serial = next_serial++;
    registry.push_back(a);
    warn_if_capacity_differs(*a, permits);
    return a;
  }
}

void attachment::release_handle(attachment* a) noexcept {
  bool detach;
  {
    std::unique_lock g(registry_mutex);
    --a->handles;
    detach = try_detach(a, g);
  }
  if (detach) finish_detach(a);
}

std::unique_lock<std::mutex> attachment::registry_lock() {
  return std::unique_lock(registry_mutex);
}

bool attachment::is_registered(const attachment* a, std::uint64_t serial) {
  for (const attachment* r : registry)
    if (r == a) return r->serial == serial;
  return false;
}

bool attachment::try_detach(attachment* a, std::unique_lock<std::mutex>& lock) {
  const std::uint64_t serial = a->serial;
  for (;;) {
    if (a->handles > 0 || a->dying || a->sticky) return false;
    a->closing.store(true, std::memory_order_relaxed);
    for (thread_entry* e : a->entries) e->closing.store(true, std::memory_order_relaxed);
    // Meets the gate CAS of every release in flight (fastpath.cpp): either
    // that release sees `closing` after its CAS and detaches when done, or
    // its dropped pin and its busy flag are visible here.
    a->hdr->gate.fetch_add(0, std::memory_order_acq_rel);
    std::int64_t pins = a->retired_pins.load(std::memory_order_acquire);
    for (const thread_entry* e : a->entries) pins += e->pins.load(std::memory_order_acquire);
    if (pins > 0) return false;  // a Permit still exists; its release detaches
    // No Permit is left, but a release may still be finishing its last
    // stores to the mapping (a lock wait, an observer call): wait for it
    // without the registry mutex, then look again from the start.
    bool busy = a->releasing.load(std::memory_order_acquire) > 0;
    for (const thread_entry* e : a->entries) busy |= e->busy.load(std::memory_order_acquire);
    if (!busy) break;
    lock.unlock();
    sys::yield();
    lock.lock();
    if (!is_registered(a, serial)) return false;  // another thread detached it meanwhile
  }
  a->dying = true;
  registry.erase(std::remove(registry.begin(), registry.end(), a), registry.end());
  return true;
}

void attachment::finish_detach(attachment* a) noexcept {
  try {
    segment_lock lk(*a, sys::kNever);
    a->retire_self();
  } catch (const std::exception& e) {  // unrecoverable lock: detach without tidying
    log().error("{} (detaching without freeing the holder record)", e.what());
    // Our lifeline must go before the mapping does, lock or no lock.
    const std::uint32_t me = a->self.load(std::memory_order_relaxed);
    if (me != kNoSelf) lifeline::disarm(&a->holders[me].lifeline, &a->holders[me].lifeline_state);
  }
  // Never unmap while holding the lock: the kernel could no longer reach
  // the robust mutex to mark it if we died.
  delete a;  // closes the fd: our OFD locks (token, attach) go with it
}

void attachment::retire_self() {
  const std::uint32_t me = self.load();
  if (me == kNoSelf) return;
  // Nothing of ours is in use: no handle, no permit. Give back the slots
  // our threads kept in reserve and their records; the holder record goes
  // too unless a lease of ours is still out (a permit never destroyed).
  bool holds_any = holders[me].waiting.load() != 0;
  const std::uint32_t hwm = hdr->lease_hwm.load();
  for (std::uint32_t i = 0; i < hwm; ++i) {
    if (leases[i].holder.load() != me) continue;
    const std::uint64_t st = leases[i].state.load(std::memory_order_acquire);
    const slot_kind k = state_kind(st);
    if (k == kSlotReserved || k == kSlotReleased)
      free_slot(i, state_gen(st));
    else if (k != kSlotFree && k != kSlotEnding)
      holds_any = true;
  }
  free_thread_records_of(me);
  // Before the mapping goes, and before another process may claim the
  // record and initialize the mutex again: our lifeline thread's robust
  // list links through it.
  lifeline::disarm(&holders[me].lifeline, &holders[me].lifeline_state);
  // A lease of ours still out stays with the record: without its lifeline,
  // our token (gone with our descriptor) tells the others to reap it.
  if (!holds_any) free_holder_record(me);
  self.store(kNoSelf, std::memory_order_relaxed);
}

bool attachment::remove_if_unused(std::string_view key) {
  validate_key(key);
  const std::string name = key_to_name(key);
  int err = 0;
  bool created = false;
  auto file = sys::shm_file::open(name, false, 0600, err, created);
  if (!file) {
    if (err == ENOENT) return false;
    throw_segment_errno(sys::shm_path(name), "cannot open", err);
  }
  struct ::stat st;
  if (file->stat(st) != 0 || !S_ISREG(st.st_mode)) return false;
  // The init lock keeps a new opener out until we are done; it then finds
  // the file unlinked and starts over with a fresh one.
  if (!file->lock_until(kInitLockByte, true, sys::precise_now_ns() + 2'000'000'000)) return false;
  if (file->stat(st) != 0 || st.st_nlink == 0) return false;
  if (!file->try_lock(kAttachLockByte, true)) return false;  // someone is attached
  sys::file_id now_there;
  if (sys::shm_stat_name(name, now_there) != 0 ||
      !(now_there == sys::file_id{st.st_dev, st.st_ino}))
    return false;
  return sys::shm_remove(name) == 0;
}

// ---------------------------------------------------------------------------
// The lock and its repair

bool attachment::lock(std::int64_t deadline_ns) {
  if (broken_by_fork)
    fail(broken_by_fork == EACCES || broken_by_fork == EPERM ? errc::permission_denied
                                                             : errc::bad_segment,
         std::string("this process was forked from one that had it open, and could not get a "
                     "file description of its own (") +
             std::strerror(broken_by_fork) +
             "); sharing the parent's, it could not tell the parent's death from its own, so it "
             "cannot use this semaphore" +
             (broken_by_fork == EACCES || broken_by_fork == EPERM
                  ? ": the parent had dropped the rights to the segment before it forked (open, "
                    "fork, then drop privileges, as prefork servers do)"
                  : ": open it again"));
  switch (sys::robust_mutex_lock(&hdr->mutex, deadline_ns)) {
    case sys::lock_result::locked:
      if (hdr->repair_pending) repair_after_death(false);
      break;
    case sys::lock_result::timed_out:
      return false;
    case sys::lock_result::owner_died:
      repair_after_death(true);
      break;
    case sys::lock_result::unrecoverable:
      fail(errc::bad_segment, "the segment lock is unrecoverable");
  }
  SHMSEM_HOOK(locked);
  return true;
}

void attachment::unlock() noexcept {
  sys::robust_mutex_unlock(&hdr->mutex);
}

void attachment::repair_after_death(bool owner_died) {
  // Set until the repair has finished, so that one cut short (here by an
  // exception, or by our own death) is done again by the next locker.
  hdr->repair_pending = 1;
  std::string failure;
  try {
    SHMSEM_HOOK(repairing);
    repair();
    hdr->repair_pending = 0;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // The mutex is marked consistent whether or not the segment is: left
  // inconsistent and unlocked it would be lost for good. repair_pending
  // tells the next locker that the segment still needs it.
  if (owner_died)
    if (int err = sys::robust_mutex_make_consistent(&hdr->mutex); err != 0 && failure.empty())
      failure = std::string("cannot mark the segment lock consistent: ") + std::strerror(err);
  if (!failure.empty()) {
    report_error("repairing the segment after a death failed (" + failure +
                     "); the next process to take the lock repairs again",
                 repair_failing);
    unlock();
    fail(errc::bad_segment, "repairing the segment after a death failed (" + failure +
                                "); the next process to take the lock repairs again");
  }
  repair_failing.store(false, std::memory_order_relaxed);
  add(hdr->stats.recoveries, 1);
  if (owner_died)
    log().warn(
        "semaphore '{}': a process died holding the segment lock; the segment was repaired "
        "from its lease table",
        key);
  else
    log().warn("semaphore '{}': a repair that had failed was done again", key);
}

void attachment::report_error(const std::string& what, std::atomic<bool>& failing) const {
  add(hdr->stats.errors, 1);
  if (!failing.exchange(true, std::memory_order_relaxed))
    log().error("semaphore '{}': {}", key, what);
  else
    log().debug("semaphore '{}': {}", key, what);
}

void attachment::repair() {
  // Slots are the truth; every counter and link is derived from them.
  const std::uint32_t nh = std::min(hdr->holder_slots.load(), kMaxHolders);
  const std::uint32_t nw = std::min(hdr->waiter_slots.load(), kMaxWaiters);
  const std::uint32_t hwm = std::min(hdr->lease_hwm.load(), hdr->lease_slots.load());
  hdr->lease_hwm.store(hwm);
  for (std::uint32_t i = 0; i < nh; ++i) {
    holders[i].waiting.store(0);
    holders[i].leases.store(0);
  }
  // A lease the dead lock holder was ending: finish it (resettle() counts
  // how it ended). A slot it had taken off the free list without
  // publishing a lease is still free, and goes back on the list.
  std::uint32_t free_head = kNil;
  for (std::uint32_t i = hwm; i-- > 0;) {
    lease_slot& l = leases[i];
    const std::uint64_t st = l.state.load();
    if (state_kind(st) != kSlotFree && state_kind(st) != kSlotEnding) {
      const std::uint32_t h = l.holder.load();
      if (h < nh) add(holders[h].leases, 1);
      continue;
    }
    l.next_free = free_head;
    free_head = i + 1;
  }
  hdr->free_lease = free_head;
  hdr->free_holder = kNil;
  for (std::uint32_t i = nh; i-- > 0;)
    if (holders[i].state.load() == kHolderFree) link_free_holders(hdr, holders, i, i + 1);

  std::vector<std::uint32_t> queued;
  wake_list told;
  hdr->free_waiter = kNil;
  for (std::uint32_t i = nw; i-- > 0;) {
    waiter_slot& w = waiters[i];
    const std::uint32_t st = w.state.load();
    if (st == kWaiterFree) {
      link_free_waiters(hdr, waiters, i, i + 1);
      continue;
    }
    const std::uint32_t holder = w.holder.load();
    if (holder < nh) add(holders[holder].waiting, 1);
    if (st != kWaiting) continue;
    // A handoff cut short: the lease was published for this waiter, which
    // was not yet told. Finish it, or the seat stays with nobody's permit.
    // Likewise a rejection: a waiter that can never fit must not be queued
    // again, where it would hold back everyone behind it.
    const std::uint64_t granted = w.permit_id.load();
    const std::uint32_t lease = w.lease.load();
    if (granted != 0 && lease < hwm &&
        leases[lease].state.load() == slot_state(w.lease_gen.load(), kSlotHeld) &&
        leases[lease].id.load() == granted)
      tell(i, kGranted, told);
    else if (w.weight > capacity())
      tell(i, kRejected, told);
    else
      queued.push_back(i);
  }
  std::sort(queued.begin(), queued.end(), [this](std::uint32_t a, std::uint32_t b) {
    return waiters[a].ticket < waiters[b].ticket;
  });
  std::uint32_t prev = kNil;
  for (std::uint32_t w : queued) {
    waiters[w].prev.store(prev, std::memory_order_relaxed);
    waiters[w].next.store(kNil, std::memory_order_relaxed);
    if (prev != kNil) waiters[prev - 1].next.store(w + 1, std::memory_order_relaxed);
    prev = w + 1;
  }
  hdr->queue_head.store(queued.empty() ? kNil : queued.front() + 1);
  hdr->queue_tail.store(prev);
  hdr->waiters.store(static_cast<std::int32_t>(queued.size()));
  set_gate_flags(queued.empty() ? 0 : kGateQueued, queued.empty() ? kGateQueued : 0);
  wake_new_watchers({}, told);
  // The dead holder may have been halfway through a change of the gate.
  if (resettle(sys::coarse_now_ns()) < 0)
    log().warn(
        "semaphore '{}': the seats in use could not be recounted yet (a live thread is stopped "
        "inside an acquire or release); seats may stay taken until it continues",
        key);
  wake(told);  // under the lock: the repairing caller has no place to defer it to
}

namespace {
// Keeps the gate frozen for a scope: no lock-free CAS of it succeeds. The
// flag goes whatever ends the scope; an exception that left it set would
// send every acquire to the locked path for good.
class gate_freeze {
 public:
  explicit gate_freeze(attachment& a) : a_(a) { a_.set_gate_flags(kGateFrozen, 0); }
  ~gate_freeze() { a_.set_gate_flags(0, kGateFrozen); }
  gate_freeze(const gate_freeze&) = delete;
  gate_freeze& operator=(const gate_freeze&) = delete;

 private:
  attachment& a_;
};
}  // namespace

int attachment::resettle(std::int64_t now) {
  const std::uint32_t hwm = std::min(hdr->lease_hwm.load(), hdr->lease_slots.load());
  gate_freeze frozen(*this);
  // From here no lock-free CAS of the gate succeeds. A live thread caught
  // between its slot's intent (acquiring, releasing) and its gate CAS will
  // see its CAS fail and undo the intent; one past its CAS finishes within
  // a few instructions. Wait for both, but not for a stopped thread.
  std::vector<std::uint32_t> in_flight;
  std::vector<std::int8_t> alive(std::min(hdr->holder_slots.load(), kMaxHolders), -1);
  auto is_alive = [&](std::uint32_t h) {
    if (h >= alive.size()) return false;
    if (alive[h] < 0) alive[h] = holder_alive(h) ? 1 : 0;
    return alive[h] == 1;
  };
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const slot_kind k = state_kind(leases[i].state.load(std::memory_order_acquire));
    if ((k == kSlotAcquiring || k == kSlotReleasing) && is_alive(leases[i].holder.load()))
      in_flight.push_back(i);
  }
  const std::int64_t give_up = sys::precise_now_ns() + kQuiesceNs;
  for (std::uint32_t i : in_flight) {
    for (;;) {
      const slot_kind k = state_kind(leases[i].state.load(std::memory_order_acquire));
      if (k != kSlotAcquiring && k != kSlotReleasing) break;
      if (sys::precise_now_ns() > give_up) {
        const std::int64_t backoff = std::clamp<std::int64_t>(
            hdr->resettle_backoff_ns * 2, kResettleRetryMinNs, kResettleRetryMaxNs);
        hdr->resettle_backoff_ns = backoff;
        hdr->resettle_due_ns.store(std::max<std::int64_t>(now + backoff, 1));
        return -1;
      }
      sys::yield();
    }
  }
  // Quiet: every slot says what the gate holds for it. Held slots count.
  // A live thread's acquire or release that began after the freeze will see
  // its CAS fail and step back: a release to held (so it counts), an
  // acquire to reserved (so it does not); its slot is left to it. A dead
  // process's acquire in flight never took effect and its release in
  // flight did (whether or not the gate heard of it); a dead lock holder's
  // ending lease is over.
  std::int64_t used_now = 0;
  std::uint64_t live = 0;
  std::int64_t earliest = INT64_MAX;
  std::vector<std::pair<lost_reason, std::int32_t>> ending;
  int settled = 0;
  for (std::uint32_t i = 0; i < hwm; ++i) {
    lease_slot& l = leases[i];
    const std::uint64_t st = l.state.load(std::memory_order_acquire);
    const std::uint64_t gen = state_gen(st);
    const slot_kind k = state_kind(st);
    if (k == kSlotHeld || (k == kSlotReleasing && is_alive(l.holder.load()))) {
      used_now += l.weight.load();
      ++live;
      const std::int64_t exp = l.expires_ns.load();
      if (exp != kNoExpiry) earliest = std::min(earliest, exp);
    } else if ((k == kSlotAcquiring || k == kSlotReleasing) && !is_alive(l.holder.load())) {
      free_slot(i, gen);
      ++settled;
    } else if (k == kSlotEnding) {
      ending.emplace_back(state_reason(st), l.weight.load());
      l.state.store(slot_state(gen, kSlotFree), std::memory_order_release);
    }
  }
  const std::uint64_t flags = hdr->queue_head.load() != kNil ? kGateQueued : 0;
  const std::uint64_t before = hdr->gate.load();
  hdr->gate.store(make_gate(static_cast<std::int32_t>(std::min<std::int64_t>(used_now, kSeatMask)),
                            gate_capacity(before), flags),
                  std::memory_order_release);
  hdr->earliest_expiry_ns.store(earliest);
  settle_stats(hdr, sum_lease_stats(hdr, threads, thread_count()), live, ending);
  hdr->resettle_due_ns.store(0);
  hdr->resettle_backoff_ns = 0;
  if (settled > 0) {
    add(hdr->stats.recoveries, settled);
    log().warn(
        "semaphore '{}': {} process{} died halfway through an acquire or release; the seats in "
        "use were recounted from the lease table",
        key, settled, settled == 1 ? "" : "es");
  }
  return settled;
}

// ---------------------------------------------------------------------------
// The gate

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

// ---------------------------------------------------------------------------
// Holders

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

std::uint32_t attachment::ensure_self(wake_list& wakes) {
  std::uint32_t s = self.load(std::memory_order_relaxed);
  if (s != kNoSelf) return s;
  const std::uint32_t chosen = take_free_holder(wakes);
  if (chosen == kNoSelf)
    fail(errc::too_many, "all " + std::to_string(kMaxHolders) +
                             " holder records are in use by live processes (at most that many "
                             "processes can use one semaphore at once)");
  const sys::process_identity me = sys::self_identity();
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
  // The previous owner is gone (its token was free): its lifeline thread,
  // if it had one, is dead, so nothing links through this mutex any more.
  r.lifeline_state.store(kLifelineNone, std::memory_order_relaxed);
  sys::robust_mutex_init(&r.lifeline);
  r.state.store(kHolderAttached, std::memory_order_release);
  lifeline::arm(&r.lifeline, &r.lifeline_state);
  self.store(chosen, std::memory_order_relaxed);
  return chosen;
}

std::uint32_t attachment::take_free_holder(wake_list& wakes) {
  const std::int64_t now = lease_clock();
  // A record is ours once we hold its token byte. One whose token another
  // description still holds (a process that freed the record and has not
  // yet closed its descriptor) is skipped, and put back whatever happens.
  std::vector<std::uint32_t> busy;
  struct put_back {
    attachment& a;
    std::vector<std::uint32_t>& records;
    ~put_back() {
      for (std::uint32_t h : records) a.free_holder_record(h);
    }
  } restore{*this, busy};
  auto claim_from_free_list = [&]() -> std::uint32_t {
    while (hdr->free_holder != kNil) {
      const std::uint32_t h = hdr->free_holder - 1;
      hdr->free_holder = holders[h].next_free;
      if (file->try_lock(kTokenBase + h, true)) return h;
      busy.push_back(h);
    }
    return kNoSelf;
  };
  std::uint32_t chosen = claim_from_free_list();
  if (chosen != kNoSelf) return chosen;
  // Records of processes that died owing nothing are still attached:
  // their lifelines say so without a system call; the token confirms.
  const std::uint32_t me = self.load(std::memory_order_relaxed);
  std::uint32_t n = std::min(hdr->holder_slots.load(), kMaxHolders);
  for (std::uint32_t h = 0; h < n; ++h)
    if (h != me && holders[h].state.load() == kHolderAttached &&
        holders[h].lifeline_state.load(std::memory_order_acquire) == kLifelineArmed &&
        !sys::robust_mutex_owner_alive(&holders[h].lifeline) && holder_gone(h))
      reap_holder(h, now, wakes);
  if ((chosen = claim_from_free_list()) != kNoSelf) return chosen;
  if (n < kMaxHolders) {
    grow_table(hdr->holder_slots, holders, kHoldersOffset, kMaxHolders, "holder records");
    link_free_holders(hdr, holders, n, hdr->holder_slots.load());
    return claim_from_free_list();
  }
  // The table is full: only now probe the tokens of the holders without a
  // lifeline, a system call each.
  for (std::uint32_t h = 0; h < n; ++h)
    if (h != me && holders[h].state.load() == kHolderAttached && holder_gone(h))
      reap_holder(h, now, wakes);
  return claim_from_free_list();
}

void attachment::free_holder_record(std::uint32_t h) {
  holders[h].state.store(kHolderFree, std::memory_order_release);
  holders[h].next_free = hdr->free_holder;
  hdr->free_holder = h + 1;
}

bool attachment::holder_alive(std::uint32_t h) const {
  if (h == self.load(std::memory_order_relaxed)) return true;
  if (h >= std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders)) return false;
  if (holders[h].state.load(std::memory_order_acquire) != kHolderAttached) return false;
  return !holder_gone(h);
}

bool attachment::holder_gone(std::uint32_t h) const {
  if (h == self.load(std::memory_order_relaxed)) return false;
  const holder_record& r = holders[h];
  if (r.lifeline_state.load(std::memory_order_acquire) == kLifelineArmed &&
      sys::robust_mutex_owner_alive(&r.lifeline))
    return false;
  // Read dead, or no lifeline: the token decides. It may still be held a
  // moment after the lifeline was marked (the kernel releases a dying
  // process's robust mutexes before its files), or for good, by a child
  // that inherited the descriptor on purpose (shmsem run).
  return !file->locked_by_other(kTokenBase + h);
}

bool attachment::reapable(std::uint32_t h) const {
  const holder_record& r = holders[h];
  if (r.state.load(std::memory_order_acquire) != kHolderAttached) return false;
  if (h == self.load(std::memory_order_relaxed)) return false;
  const bool owes = r.leases.load(std::memory_order_relaxed) != 0 ||
                    r.waiting.load(std::memory_order_relaxed) != 0;
  const bool armed = r.lifeline_state.load(std::memory_order_acquire) == kLifelineArmed;
  if (armed && sys::robust_mutex_owner_alive(&r.lifeline)) return false;
  // A holder that owes nothing and never had a lifeline costs a probe
  // only when a record is needed (take_free_holder).
  if (!owes && !armed) return false;
  return holder_gone(h);
}

void attachment::reap_holder(std::uint32_t h, std::int64_t now, wake_list& wakes) {
  const std::uint32_t nw = hdr->waiter_slots.load();
  for (std::uint32_t w = 0; w < nw; ++w)
    if (waiters[w].state.load() != kWaiterFree && waiters[w].holder.load() == h)
      free_waiter(w, wakes);
  for (bool recounted = false;;) {
    const std::uint32_t hwm = hdr->lease_hwm.load();
    bool in_flight = false;
    for (std::uint32_t i = 0; i < hwm; ++i) {
      if (leases[i].holder.load() != h) continue;
      const std::uint64_t st = leases[i].state.load(std::memory_order_acquire);
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
    }
    if (!in_flight) break;
    // Killed halfway through a lock-free acquire or release: only a count
    // of every held slot can tell the gate's truth. Until one succeeds, keep
    // the record (and its token byte) so that the next reap tries again.
    if (recounted || resettle(now) < 0) return;
    recounted = true;
  }
  free_thread_records_of(h);
  holders[h].waiting.store(0);
  free_holder_record(h);
}

// ---------------------------------------------------------------------------
// Leases

namespace {
// now - then, without overflow when `then` comes from a corrupt segment;
// 0 if `then` is not earlier.
std::int64_t elapsed_ns(std::int64_t now, std::int64_t then) {
  if (then >= now) return 0;
  const std::uint64_t d = static_cast<std::uint64_t>(now) - static_cast<std::uint64_t>(then);
  return d > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(d);
}
}  // namespace

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

void attachment::lower_earliest_expiry(std::int64_t expires) {
  // A CAS loop, not a store: lock-free acquires lower the bound too.
  std::int64_t bound = hdr->earliest_expiry_ns.load(std::memory_order_relaxed);
  while (expires < bound && !hdr->earliest_expiry_ns.compare_exchange_weak(
                                bound, expires, std::memory_order_relaxed)) {
  }
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
    // Every slot is a lease or in some thread's reserve: grow by a quarter.
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

std::uint32_t attachment::claim_thread_record(std::uint32_t holder) {
  std::uint32_t n = thread_count();
  std::uint32_t i = 0;
  while (i < n && threads[i].state.load(std::memory_order_relaxed) != kThreadFree) ++i;
  if (i == n) {
    if (n >= kMaxThreads) return kNoSelf;
    try {
      grow_table(hdr->thread_slots, threads, kThreadsOffset, kMaxThreads, "thread records");
    } catch (const SegmentError&) {
      return kNoSelf;
    }
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

// ---------------------------------------------------------------------------
// The queue

std::uint32_t attachment::enqueue(std::uint32_t holder, int weight, std::int64_t ttl_ms,
                                  std::int64_t now) {
  if (hdr->free_waiter == kNil) {
    const std::uint32_t n = hdr->waiter_slots.load();
    if (n >= kMaxWaiters)
      fail(errc::too_many, "all " + std::to_string(kMaxWaiters) +
                               " waiter slots are in use (at most that many acquires can wait "
                               "at once)");
    grow_table(hdr->waiter_slots, waiters, kWaitersOffset, kMaxWaiters, "waiter slots");
    link_free_waiters(hdr, waiters, n, hdr->waiter_slots.load());
  }
  const std::uint32_t w = hdr->free_waiter - 1;
  waiter_slot& s = waiters[w];
  hdr->free_waiter = s.next.load(std::memory_order_relaxed);
  s.holder.store(holder, std::memory_order_relaxed);
  s.weight = weight;
  s.ttl_ms = static_cast<std::int32_t>(ttl_ms);
  s.enqueued_ns = now;
  s.ticket = hdr->next_ticket++;
  add(holders[holder].waiting, 1);
  link_last(w);
  return w;
}

void attachment::link_last(std::uint32_t w) {
  waiter_slot& s = waiters[w];
  s.lease.store(0);
  s.lease_gen.store(0);
  s.permit_id.store(0);
  const std::uint32_t tail = hdr->queue_tail.load(std::memory_order_relaxed);
  s.next.store(kNil, std::memory_order_relaxed);
  s.prev.store(tail, std::memory_order_relaxed);
  if (tail != kNil)
    waiters[tail - 1].next.store(w + 1, std::memory_order_relaxed);
  else
    hdr->queue_head.store(w + 1, std::memory_order_relaxed);
  hdr->queue_tail.store(w + 1, std::memory_order_relaxed);
  s.state.store(kWaiting, std::memory_order_release);
  add(hdr->waiters, 1);
  // From now on the fast path stands aside, and its releases come here to
  // hand their seats to the queue.
  if (tail == kNil) set_gate_flags(kGateQueued, 0);
}

void attachment::requeue_first(std::uint32_t w, std::int64_t now, wake_list& wakes) {
  const watchers before = queue_watchers();
  waiter_slot& s = waiters[w];
  s.lease.store(0);
  s.lease_gen.store(0);
  s.permit_id.store(0);
  // It was the head when it was served, so its ticket is older than any
  // still queued: first in line again, also for a repair that sorts by it.
  const std::uint32_t head = hdr->queue_head.load(std::memory_order_relaxed);
  s.prev.store(kNil, std::memory_order_relaxed);
  s.next.store(head, std::memory_order_relaxed);
  if (head != kNil)
    waiters[head - 1].prev.store(w + 1, std::memory_order_relaxed);
  else
    hdr->queue_tail.store(w + 1, std::memory_order_relaxed);
  hdr->queue_head.store(w + 1, std::memory_order_relaxed);
  s.state.store(kWaiting, std::memory_order_release);
  add(hdr->waiters, 1);
  set_gate_flags(kGateQueued, 0);
  grant_queued(now, wakes);
  wake_new_watchers(before, wakes);
}

void attachment::dequeue(std::uint32_t w) {
  waiter_slot& s = waiters[w];
  const std::uint32_t prev = s.prev.load(std::memory_order_relaxed);
  const std::uint32_t next = s.next.load(std::memory_order_relaxed);
  if (prev != kNil)
    waiters[prev - 1].next.store(next, std::memory_order_relaxed);
  else
    hdr->queue_head.store(next, std::memory_order_relaxed);
  if (next != kNil)
    waiters[next - 1].prev.store(prev, std::memory_order_relaxed);
  else
    hdr->queue_tail.store(prev, std::memory_order_relaxed);
  s.prev.store(kNil, std::memory_order_relaxed);
  s.next.store(kNil, std::memory_order_relaxed);
  add(hdr->waiters, -1);
  if (hdr->queue_head.load(std::memory_order_relaxed) == kNil) set_gate_flags(0, kGateQueued);
}

void attachment::free_waiter(std::uint32_t w, wake_list& wakes) {
  waiter_slot& s = waiters[w];
  if (s.state.load(std::memory_order_relaxed) == kWaiting) {
    const watchers before = queue_watchers();
    dequeue(w);
    wake_new_watchers(before, wakes);
  }
  s.state.store(kWaiterFree, std::memory_order_release);
  const std::uint32_t holder = s.holder.load(std::memory_order_relaxed);
  if (holder < hdr->holder_slots.load() && holders[holder].waiting.load() > 0)
    add(holders[holder].waiting, -1);
  push_free_waiter(w);
}

void attachment::push_free_waiter(std::uint32_t w) {
  waiters[w].next.store(hdr->free_waiter, std::memory_order_relaxed);
  hdr->free_waiter = w + 1;
}

attachment::watchers attachment::queue_watchers() const {
  watchers out;
  out.head = hdr->queue_head.load(std::memory_order_acquire);
  if (out.head != kNil && out.head <= hdr->waiter_slots.load(std::memory_order_relaxed))
    out.second = waiters[out.head - 1].next.load(std::memory_order_relaxed);
  return out;
}

void attachment::wake_new_watchers(const watchers& before, wake_list& wakes) {
  const watchers now = queue_watchers();
  // A new head may be asleep on the second's slow timer, a new second
  // without any; the bump makes a wait it is about to start return at once.
  auto wake_one = [&](std::uint32_t w) {
    waiters[w - 1].seq.fetch_add(1, std::memory_order_release);
    wakes.add(w - 1);
  };
  if (now.head != kNil && now.head != before.head) wake_one(now.head);
  if (now.second != kNil && now.second != before.second && now.second != before.head)
    wake_one(now.second);
}

void attachment::grant_queued(std::int64_t now, wake_list& wakes) {
  const watchers before = queue_watchers();
  for (;;) {
    const std::uint32_t head = hdr->queue_head.load(std::memory_order_relaxed);
    if (head == kNil) break;
    waiter_slot& s = waiters[head - 1];
    // Strict FIFO: a head that does not fit holds back everyone behind it.
    if (!admit(s.weight, true)) break;
    std::uint64_t id = 0, gen = 0;
    try {
      grant(s.holder.load(std::memory_order_relaxed), s.weight, s.ttl_ms, now, id, gen, &s);
    } catch (const SegmentError& e) {
      // No lease slot for it (a full /dev/shm, or every slot in use): the
      // seats went back to the gate and it stays first in line. Whoever
      // releases, or the head's own timer, tries again; the caller here
      // (a release, a reap) has done its own part and must not fail.
      report_error(std::string(e.what()) + " (a queued waiter stays queued until it can be served)",
                   grant_failing);
      break;
    }
    grant_failing.store(false, std::memory_order_relaxed);
    SHMSEM_HOOK(mid_handoff);
    record_histogram(hdr->stats.wait, elapsed_ns(now, s.enqueued_ns));
    dequeue(head - 1);
    tell(head - 1, kGranted, wakes);
  }
  wake_new_watchers(before, wakes);
}

bool attachment::take_grant(std::uint32_t w, std::int64_t now, std::uint64_t& gen,
                            std::uint64_t& id, wake_list& wakes) {
  waiter_slot& s = waiters[w];
  const std::uint32_t slot = s.lease.load(std::memory_order_relaxed);
  gen = s.lease_gen.load(std::memory_order_relaxed);
  id = s.permit_id.load(std::memory_order_relaxed);
  switch (lease_state(slot, gen, id, now, nullptr)) {
    case lease_status::held:
      return true;
    case lease_status::expired:
      // Granted, but its TTL ran out before we came for it: nobody has
      // reclaimed it yet. It was never ours to use.
      end_lease(slot, slot_state(gen, kSlotHeld), kLostExpired, now, wakes);
      return false;
    default:
      // Reclaimed (as expired) meanwhile, its slot perhaps a later lease.
      return false;
  }
}

void attachment::tell(std::uint32_t w, waiter_state state, wake_list& wakes) {
  waiters[w].state.store(state, std::memory_order_release);
  waiters[w].seq.fetch_add(1, std::memory_order_release);
  wakes.add(w);
}

void attachment::reject_oversized(wake_list& wakes) {
  const std::int32_t cap = capacity();
  const watchers before = queue_watchers();
  std::uint32_t w = before.head;
  while (w != kNil) {
    waiter_slot& s = waiters[w - 1];
    const std::uint32_t next = s.next.load(std::memory_order_relaxed);
    if (s.weight > cap) {
      dequeue(w - 1);
      SHMSEM_HOOK(mid_handoff);
      tell(w - 1, kRejected, wakes);
    }
    w = next;
  }
  wake_new_watchers(before, wakes);
}

// ---------------------------------------------------------------------------
// Reaping

int attachment::reap(std::int64_t now, wake_list& wakes, bool force_scan) {
  const std::int32_t before = used();
  const std::uint32_t hwm = hdr->lease_hwm.load(std::memory_order_relaxed);
  const std::int64_t due = hdr->resettle_due_ns.load(std::memory_order_relaxed);
  if (due != 0 && due <= now) resettle(now);
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

bool attachment::watch(std::int64_t now) const {
  if (hdr->earliest_expiry_ns.load(std::memory_order_relaxed) <= now) return true;
  const std::int64_t due = hdr->resettle_due_ns.load(std::memory_order_relaxed);
  if (due != 0 && due <= now) return true;
  const std::uint32_t n = std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders);
  for (std::uint32_t h = 0; h < n; ++h)
    if (reapable(h)) return true;
  return false;
}

bool attachment::head_gone() const {
  const std::uint32_t head = hdr->queue_head.load(std::memory_order_acquire);
  if (head == kNil || head > hdr->waiter_slots.load(std::memory_order_relaxed)) return false;
  const std::uint32_t h = waiters[head - 1].holder.load(std::memory_order_relaxed);
  if (h >= std::min(hdr->holder_slots.load(std::memory_order_relaxed), kMaxHolders)) return false;
  return holders[h].state.load(std::memory_order_acquire) == kHolderAttached && holder_gone(h);
}

void attachment::wake(const wake_list& wakes) {
  if (wakes.empty()) return;
  wakes.for_each([this](std::uint32_t w) { sys::futex_wake(&waiters[w].seq, 1); });
  if (wakes.idle) sys::futex_wake(&hdr->idle_seq, INT_MAX);
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

}  // namespace shmsem::detail
