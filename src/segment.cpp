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

#include "key.hpp"
#include "log.hpp"
#include "sys/futex.hpp"
#include "sys/proc.hpp"
#include "sys/robust_mutex.hpp"

namespace shmsem::detail {

using namespace layout;

#ifdef SHMSEM_TESTING
namespace testing {
namespace {
std::atomic<hook_fn> current_hook{nullptr};
}
void set_hook(hook_fn fn) {
  current_hook.store(fn);
}
}  // namespace testing
#define SHMSEM_HOOK(p)                                                      \
  do {                                                                      \
    if (auto hook_ = testing::current_hook.load(std::memory_order_relaxed)) \
      hook_(testing::point::p, key);                                        \
  } while (0)
#else
#define SHMSEM_HOOK(p) \
  do {                 \
  } while (0)
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
std::once_flag atfork_once;

void atfork_prepare() {
  registry_mutex.lock();
}
void atfork_parent() {
  registry_mutex.unlock();
}
void atfork_child() {
  registry_mutex.unlock();
  // The child shares our open file descriptions, and with them our liveness
  // tokens: while it lived, our death would go unnoticed. Give it its own
  // descriptions; it claims its own holder record at its first acquire.
  for (attachment* a : registry) {
    if (a->file->reopen_description() == 0) a->file->try_lock(kAttachLockByte, false);
    a->self.store(kNoSelf, std::memory_order_relaxed);
  }
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

std::int64_t ms_to_ns(std::int64_t ms) {
  return ms * 1'000'000;
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

namespace {
// The bucket bounds in nanoseconds, so the hot path compares integers.
// (A function, not an immediately invoked lambda: cppcheck 2.10 cannot parse that.)
constexpr std::array<std::int64_t, Histogram::kBounds.size()> bounds_ns() {
  std::array<std::int64_t, Histogram::kBounds.size()> out{};
  // Positive constants: +0.5 then truncation rounds to nearest, and
  // std::llround is not constexpr.
  for (std::size_t i = 0; i < out.size(); ++i)
    // NOLINTNEXTLINE(bugprone-incorrect-roundings)
    out[i] = static_cast<std::int64_t>(Histogram::kBounds[i] * 1e9 + 0.5);
  return out;
}
constexpr auto kBoundsNs = bounds_ns();

}  // namespace

void record_histogram(shared_histogram& h, std::int64_t ns) {
  if (ns < 0) ns = 0;
  std::size_t b = 0;
  while (b < kBoundsNs.size() && ns > kBoundsNs[b]) ++b;
  add(h.counts[b], 1);
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
                const std::string& path) {
  auto* h = header(base);
  // Allocate before touching a byte: a full /dev/shm then fails here with
  // ENOSPC instead of killing us with SIGBUS on the first write. A crash
  // after this leaves a zero magic, which the next opener re-initializes.
  const auto cap = static_cast<std::uint32_t>(permits);
  int err = f.allocate(0, kHoldersOffset + sizeof(holder_record) * kInitialHolders);
  if (!err) err = f.allocate(kWaitersOffset, sizeof(waiter_slot) * kInitialWaiters);
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
  std::memset(static_cast<void*>(leases(base)), 0, sizeof(lease_slot) * cap);
  h->key_size = static_cast<std::uint32_t>(key.size());
  std::memcpy(h->key, key.data(), key.size());
  h->created_realtime_ns = sys::realtime_now_ns();
  if (int e = sys::robust_mutex_init(&h->mutex))
    throw_segment_errno(path, "cannot initialize the lock of", e);
  h->capacity.store(permits);
  h->holder_slots.store(kInitialHolders);
  h->waiter_slots.store(kInitialWaiters);
  h->lease_slots.store(cap);
  h->earliest_expiry_ns.store(INT64_MAX);
  h->ewma_ns.store(sys::coarse_now_ns());
  h->next_permit_id = 1;
  h->next_ticket = 1;
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

// A process that died inside the critical section may have counted a lease
// as acquired without publishing it (grant), or cleared a lease without
// counting how it ended (end_lease). Either way one granted lease is neither
// live nor ended in the stats. The lease end_lease() announced in `ending`
// is counted under its own reason; any other as reaped. Then acquired ==
// released + reaped + expired + force_released + live leases holds again.
void settle_stats(segment_header* h, const lease_slot* ls, std::uint64_t live) {
  const std::uint32_t ending = std::exchange(h->ending, 0);
  auto& s = h->stats;
  const std::uint64_t ended =
      s.released.load() + s.reaped.load() + s.expired.load() + s.force_released.load();
  const std::uint64_t acquired = s.acquired.load();
  if (acquired <= ended + live) return;
  std::uint64_t missing = acquired - ended - live;
  const std::uint32_t slot = ending_slot(ending);
  if (ending != 0 && slot < h->lease_slots.load() && ls[slot].id.load() == 0) {
    count_end(s, ending_reason(ending), ls[slot].weight.load());
    --missing;
  }
  if (missing) add(s.reaped, missing);
}

// Nobody is attached: every holder is dead and the lock may be garbage.
// Keep the structure (capacity, tables, stats) and clear the live state.
void reset_live_state(void* base) {
  auto* h = header(base);
  sys::robust_mutex_init(&h->mutex);
  const std::int64_t now = sys::coarse_now_ns();
  const std::uint32_t hwm = h->lease_hwm.load();
  auto* ls = leases(base);
  for (std::uint32_t i = 0; i < hwm; ++i) {
    const std::uint64_t id = ls[i].id.load();
    if (id == 0) continue;
    ls[i].lost_reason.store(kLostReaped);
    ls[i].lost_id.store(id);
    ls[i].lost_ns.store(now);
    ls[i].id.store(0);
    count_end(h->stats, kLostReaped, ls[i].weight.load());
  }
  h->lease_hwm.store(0);
  h->free_lease = kNil;
  h->used.store(0);
  h->waiters.store(0);
  h->queue_head.store(kNil);
  h->queue_tail.store(kNil);
  h->earliest_expiry_ns.store(INT64_MAX);
  h->idle_waiters.store(0);
  settle_stats(h, ls, 0);
  std::memset(static_cast<void*>(holders(base)), 0, sizeof(holder_record) * h->holder_slots.load());
  std::memset(static_cast<void*>(waiters(base)), 0, sizeof(waiter_slot) * h->waiter_slots.load());
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

}  // namespace

attachment* attachment::acquire_handle(std::string_view key, int permits, mode_t mode,
                                       std::chrono::milliseconds open_timeout) {
  validate_key(key);
  const std::string name = key_to_name(key);
  const std::string path = std::string(sys::kShmDir) + "/" + name;
  std::call_once(atfork_once,
                 [] { ::pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
  const std::int64_t deadline =
      sys::precise_now_ns() + std::chrono::nanoseconds(open_timeout).count();

  std::lock_guard g(registry_mutex);
  for (attachment* a : registry) {
    if (a->name != name) continue;
    struct ::stat st;
    // A removed file stays usable for those who have it, but a new open
    // must get the semaphore that now has the name.
    if (a->file->stat(st) != 0 || st.st_nlink == 0) continue;
    if (!a->lock(deadline))
      a->fail(errc::busy, "the segment lock is held by a stopped or stuck process");
    const bool usable = !a->dying;
    if (usable) ++a->handles;
    a->unlock();
    if (usable) {
      if (permits > 0 && permits != a->hdr->capacity.load())
        log().warn(
            "semaphore '{}' exists with capacity {}; open() asked for {} and the existing "
            "capacity stands (use set_capacity to change it)",
            a->key, a->hdr->capacity.load(), permits);
      return a;
    }
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
    const auto size = static_cast<std::uint64_t>(st.st_size);
    bool key_mismatch = false;
    problem p = size == 0 ? problem::uninitialized
                          : validate(base, size, &key_mismatch, key.data(), key.size());
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
        initialize(*file, base, key, permits, path);
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
    a->leases = layout::leases(base);
    a->pid_ns = sys::self_pid_ns();
    a->handles = 1;
    registry.push_back(a);
    if (permits > 0 && permits != a->hdr->capacity.load())
      log().warn(
          "semaphore '{}' exists with capacity {}; open() asked for {} and the existing "
          "capacity stands (use set_capacity to change it)",
          a->key, a->hdr->capacity.load(), permits);
    return a;
  }
}

void attachment::release_handle(attachment* a) noexcept {
  // lock() throws only for an unrecoverable segment lock. This runs in
  // destructors: log and keep the mapping (leaked) rather than terminate.
  try {
    a->lock(sys::kNever);
  } catch (const std::exception& e) {
    log().error("{} (the handle is dropped without detaching)", e.what());
    return;
  }
  --a->handles;
  const bool detach = a->handles == 0 && a->live_permits == 0 && !a->dying;
  if (detach) a->dying = true;
  a->unlock();
  if (detach) finish_detach(a);
}

bool attachment::drop_permit_locked() noexcept {
  --live_permits;
  if (live_permits == 0 && handles == 0 && !dying) {
    dying = true;
    return true;
  }
  return false;
}

void attachment::finish_detach(attachment* a) noexcept {
  {
    std::lock_guard g(registry_mutex);
    registry.erase(std::remove(registry.begin(), registry.end(), a), registry.end());
  }
  bool locked = false;
  try {
    locked = a->lock(sys::kNever);
  } catch (const std::exception& e) {  // unrecoverable lock: detach without tidying
    log().error("{} (detaching without freeing the holder record)", e.what());
  }
  if (locked) {
    const std::uint32_t self = a->self.load();
    if (self != kNoSelf) {
      holder_record& r = a->holders[self];
      if (r.leases.load() == 0 && r.waiting.load() == 0) r.state.store(kHolderFree);
    }
    a->unlock();
  }
  // Never unmap while holding the lock: the kernel could no longer reach
  // the robust mutex to mark it if we died.
  delete a;  // closes the fd: our OFD locks (token, attach) go with it
}

bool attachment::remove_if_unused(std::string_view key) {
  validate_key(key);
  const std::string name = key_to_name(key);
  int err = 0;
  bool created = false;
  auto file = sys::shm_file::open(name, false, 0600, err, created);
  if (!file) {
    if (err == ENOENT) return false;
    throw_segment_errno(std::string(sys::kShmDir) + "/" + name, "cannot open", err);
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
  switch (sys::robust_mutex_lock(&hdr->mutex, deadline_ns)) {
    case sys::lock_result::locked:
      break;
    case sys::lock_result::timed_out:
      return false;
    case sys::lock_result::owner_died:
      repair();
      sys::robust_mutex_make_consistent(&hdr->mutex);
      add(hdr->stats.recoveries, 1);
      log().warn(
          "semaphore '{}': a process died holding the segment lock; the segment was "
          "repaired from its lease table",
          key);
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

void attachment::repair() {
  // Slots are the truth; every counter and link is derived from them.
  const std::uint32_t nh = std::min(hdr->holder_slots.load(), kMaxHolders);
  const std::uint32_t nw = std::min(hdr->waiter_slots.load(), kMaxWaiters);
  const std::uint32_t hwm = std::min(hdr->lease_hwm.load(), hdr->lease_slots.load());
  hdr->lease_hwm.store(hwm);
  for (std::uint32_t i = 0; i < nh; ++i) {
    holders[i].leases.store(0);
    holders[i].waiting.store(0);
  }
  std::int64_t used_now = 0;
  std::uint64_t live = 0;
  std::int64_t earliest = INT64_MAX;
  std::uint32_t free_head = kNil;
  for (std::uint32_t i = hwm; i-- > 0;) {
    lease_slot& l = leases[i];
    if (l.id.load() == 0) {
      l.next_free = free_head;
      free_head = i + 1;
      continue;
    }
    used_now += l.weight.load();
    ++live;
    const std::uint32_t h = l.holder.load();
    if (h < nh) add(holders[h].leases, 1);
    const std::int64_t exp = l.expires_ns.load();
    if (exp != kNoExpiry) earliest = std::min(earliest, exp);
  }
  hdr->free_lease = free_head;
  hdr->used.store(static_cast<std::int32_t>(used_now));
  hdr->earliest_expiry_ns.store(earliest);
  settle_stats(hdr, leases, live);

  std::vector<std::uint32_t> queued;
  wake_list told;
  for (std::uint32_t i = 0; i < nw; ++i) {
    waiter_slot& w = waiters[i];
    const std::uint32_t st = w.state.load();
    if (st == kWaiterFree) continue;
    if (w.holder < nh) add(holders[w.holder].waiting, 1);
    if (st != kWaiting) continue;
    // A handoff cut short: the lease was published for this waiter, which
    // was not yet told. Finish it, or the seat stays with nobody's permit.
    // Likewise a rejection: a waiter that can never fit must not be queued
    // again, where it would hold back everyone behind it.
    const std::uint64_t granted = w.permit_id.load();
    const std::uint32_t lease = w.lease.load();
    if (granted != 0 && lease < hwm && leases[lease].id.load() == granted)
      tell(i, kGranted, told);
    else if (w.weight > hdr->capacity.load())
      tell(i, kRejected, told);
    else
      queued.push_back(i);
  }
  std::sort(queued.begin(), queued.end(), [this](std::uint32_t a, std::uint32_t b) {
    return waiters[a].ticket < waiters[b].ticket;
  });
  std::uint32_t prev = kNil;
  for (std::uint32_t w : queued) {
    waiters[w].prev = prev;
    waiters[w].next = kNil;
    if (prev != kNil) waiters[prev - 1].next = w + 1;
    prev = w + 1;
  }
  hdr->queue_head.store(queued.empty() ? kNil : queued.front() + 1);
  hdr->queue_tail.store(prev);
  hdr->waiters.store(static_cast<std::int32_t>(queued.size()));
  wake(told);  // under the lock: the repairing caller has no place to defer it to
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
  const std::int64_t now = lease_clock();
  std::uint32_t n = hdr->holder_slots.load();
  std::uint32_t chosen = kNoSelf;
  for (std::uint32_t i = 0; i < n && chosen == kNoSelf; ++i) {
    holder_record& r = holders[i];
    if (r.state.load() == kHolderAttached) {
      if (file->locked_by_other(kTokenBase + i)) continue;
      reap_holder(i, now, wakes);  // its owner is gone
    }
    if (file->try_lock(kTokenBase + i, true)) chosen = i;
  }
  if (chosen == kNoSelf) {
    grow_table(hdr->holder_slots, holders, kHoldersOffset, kMaxHolders, "holder records");
    if (!file->try_lock(kTokenBase + n, true))
      fail(errc::bad_segment, "cannot take a liveness token");
    chosen = n;
  }
  const sys::process_identity me = sys::self_identity();
  holder_record& r = holders[chosen];
  r.generation++;
  r.pid.store(me.pid);
  r.uid = me.uid;
  r.pid_ns.store(me.pid_ns);
  r.start_time = me.start_time;
  std::memcpy(r.comm, me.comm, sizeof r.comm);
  r.leases.store(0);
  r.waiting.store(0);
  r.state.store(kHolderAttached, std::memory_order_release);
  self.store(chosen, std::memory_order_relaxed);
  return chosen;
}

bool attachment::holder_alive(std::uint32_t h) const {
  if (h == self.load(std::memory_order_relaxed)) return true;
  if (h >= hdr->holder_slots.load(std::memory_order_relaxed)) return false;
  if (holders[h].state.load(std::memory_order_acquire) != kHolderAttached) return false;
  return file->locked_by_other(kTokenBase + h);
}

void attachment::reap_holder(std::uint32_t h, std::int64_t now, wake_list& wakes) {
  const std::uint32_t nw = hdr->waiter_slots.load();
  for (std::uint32_t w = 0; w < nw; ++w)
    if (waiters[w].state.load() != kWaiterFree && waiters[w].holder == h) free_waiter(w);
  const std::uint32_t hwm = hdr->lease_hwm.load();
  for (std::uint32_t i = 0; i < hwm; ++i)
    if (leases[i].id.load() != 0 && leases[i].holder.load() == h)
      end_lease(i, kLostReaped, now, wakes);
  holders[h].leases.store(0);
  holders[h].waiting.store(0);
  holders[h].state.store(kHolderFree, std::memory_order_release);
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

void attachment::ewma_advance(std::int64_t now) {
  const std::int64_t t = hdr->ewma_ns.load(std::memory_order_relaxed);
  if (now <= t) return;  // same clock tick: the level changes, the average waits
  hdr->ewma.store(ewma_now(now), std::memory_order_relaxed);
  hdr->ewma_ns.store(now, std::memory_order_relaxed);
}

double attachment::ewma_now(std::int64_t now) const {
  const std::int64_t t = hdr->ewma_ns.load(std::memory_order_relaxed);
  const double v = hdr->ewma.load(std::memory_order_relaxed);
  const double level = static_cast<double>(hdr->used.load(std::memory_order_relaxed)) /
                       hdr->capacity.load(std::memory_order_relaxed);
  if (now <= t) return v;
  constexpr double kHalfLifeNs = std::chrono::nanoseconds(kEwmaHalfLife).count();
  const double decay = std::exp2(-static_cast<double>(elapsed_ns(now, t)) / kHalfLifeNs);
  return level + (v - level) * decay;
}

std::uint32_t attachment::grant(std::uint32_t holder, int weight, std::int64_t ttl_ms,
                                std::int64_t now, std::uint64_t& id, waiter_slot* to) {
  std::uint32_t slot;
  if (hdr->free_lease != kNil) {
    slot = hdr->free_lease - 1;
    hdr->free_lease = leases[slot].next_free;
  } else {
    slot = hdr->lease_hwm.load(std::memory_order_relaxed);
    if (slot >= hdr->lease_slots.load(std::memory_order_relaxed))
      fail(errc::bad_segment, "the lease table is full (the segment is corrupt)");
    hdr->lease_hwm.store(slot + 1, std::memory_order_relaxed);
  }
  lease_slot& l = leases[slot];
  const std::int64_t expires = ttl_ms > 0 ? now + ms_to_ns(ttl_ms) : kNoExpiry;
  l.weight.store(weight, std::memory_order_relaxed);
  l.holder.store(holder, std::memory_order_relaxed);
  l.acquired_ns.store(now, std::memory_order_relaxed);
  // Release: Permit::expires_at() reads the expiry between two reads of the
  // id without the lock; one that sees this lease's expiry must then see
  // the previous lease's id = 0.
  l.expires_ns.store(expires, std::memory_order_release);
  ewma_advance(now);
  add(hdr->used, weight);
  SHMSEM_HOOK(mid_grant);
  add(holders[holder].leases, 1);
  id = hdr->next_permit_id++;
  add(hdr->stats.acquired, 1);
  if (expires != kNoExpiry && expires < hdr->earliest_expiry_ns.load(std::memory_order_relaxed))
    hdr->earliest_expiry_ns.store(expires, std::memory_order_relaxed);
  if (to) {
    to->lease.store(slot, std::memory_order_relaxed);
    to->permit_id.store(id, std::memory_order_relaxed);
  }
  l.id.store(id, std::memory_order_release);
  return slot;
}

void attachment::end_lease(std::uint32_t slot, lost_reason reason, std::int64_t now,
                           wake_list& wakes) {
  lease_slot& l = leases[slot];
  const std::uint64_t id = l.id.load(std::memory_order_relaxed);
  const std::int32_t weight = l.weight.load(std::memory_order_relaxed);
  const std::uint32_t holder = l.holder.load(std::memory_order_relaxed);
  if (reason != kLostReleased) {
    // Written before the id is cleared, so a permit that finds its id gone
    // also finds why.
    l.lost_reason.store(reason, std::memory_order_relaxed);
    l.lost_ns.store(now, std::memory_order_relaxed);
    l.lost_id.store(id, std::memory_order_release);
  }
  hdr->ending = ending_word(slot, reason);
  l.id.store(0, std::memory_order_release);
  SHMSEM_HOOK(mid_release);
  ewma_advance(now);
  add(hdr->used, -weight);
  if (holder < hdr->holder_slots.load(std::memory_order_relaxed) &&
      holders[holder].leases.load(std::memory_order_relaxed) > 0)
    add(holders[holder].leases, -1);
  l.next_free = hdr->free_lease;
  hdr->free_lease = slot + 1;
  if (reason == kLostReleased)
    hold_sample(elapsed_ns(now, l.acquired_ns.load(std::memory_order_relaxed)));
  count_end(hdr->stats, reason, weight);
  hdr->ending = 0;
  if (hdr->used.load(std::memory_order_relaxed) == 0 &&
      hdr->idle_waiters.load(std::memory_order_relaxed) > 0) {
    hdr->idle_seq.fetch_add(1, std::memory_order_release);
    wakes.idle = true;
  }
  if (hdr->queue_head.load(std::memory_order_relaxed) != kNil) grant_queued(now, wakes);
}

void attachment::hold_sample(std::int64_t ns) {
  record_histogram(hdr->stats.hold, ns);
}

bool attachment::holds(std::uint32_t slot, std::uint64_t id, std::int64_t now, loss* why) const {
  const lease_slot& l = leases[slot];
  const std::uint64_t current = l.id.load(std::memory_order_acquire);
  if (current == id) {
    if (l.holder.load(std::memory_order_relaxed) != self.load(std::memory_order_relaxed)) {
      if (why) why->other_process = true;
      return false;
    }
    const std::int64_t exp = l.expires_ns.load(std::memory_order_relaxed);
    if (exp != kNoExpiry && exp <= now) {
      if (why) *why = loss{kLostExpired, exp, false};
      return false;
    }
    return true;
  }
  if (why) {
    if (l.lost_id.load(std::memory_order_acquire) == id)
      *why = loss{static_cast<lost_reason>(l.lost_reason.load(std::memory_order_relaxed)),
                  l.lost_ns.load(std::memory_order_relaxed), false};
    else
      *why = loss{};
  }
  return false;
}

// ---------------------------------------------------------------------------
// The queue

std::uint32_t attachment::enqueue(std::uint32_t holder, int weight, std::int64_t ttl_ms,
                                  std::int64_t now) {
  std::uint32_t n = hdr->waiter_slots.load();
  std::uint32_t w = 0;
  while (w < n && waiters[w].state.load(std::memory_order_relaxed) != kWaiterFree) ++w;
  if (w == n) grow_table(hdr->waiter_slots, waiters, kWaitersOffset, kMaxWaiters, "waiter slots");
  waiter_slot& s = waiters[w];
  s.holder = holder;
  s.weight = weight;
  s.ttl_ms = ttl_ms;
  s.enqueued_ns = now;
  s.ticket = hdr->next_ticket++;
  s.lease.store(0);
  s.permit_id.store(0);
  s.next = kNil;
  s.prev = hdr->queue_tail.load(std::memory_order_relaxed);
  if (s.prev != kNil)
    waiters[s.prev - 1].next = w + 1;
  else
    hdr->queue_head.store(w + 1, std::memory_order_relaxed);
  hdr->queue_tail.store(w + 1, std::memory_order_relaxed);
  s.state.store(kWaiting, std::memory_order_release);
  add(hdr->waiters, 1);
  add(holders[holder].waiting, 1);
  return w;
}

void attachment::dequeue(std::uint32_t w) {
  waiter_slot& s = waiters[w];
  if (s.prev != kNil)
    waiters[s.prev - 1].next = s.next;
  else
    hdr->queue_head.store(s.next, std::memory_order_relaxed);
  if (s.next != kNil)
    waiters[s.next - 1].prev = s.prev;
  else
    hdr->queue_tail.store(s.prev, std::memory_order_relaxed);
  s.prev = s.next = kNil;
  add(hdr->waiters, -1);
}

void attachment::free_waiter(std::uint32_t w) {
  waiter_slot& s = waiters[w];
  if (s.state.load(std::memory_order_relaxed) == kWaiting) dequeue(w);
  s.state.store(kWaiterFree, std::memory_order_release);
  if (s.holder < hdr->holder_slots.load() && holders[s.holder].waiting.load() > 0)
    add(holders[s.holder].waiting, -1);
}

void attachment::grant_queued(std::int64_t now, wake_list& wakes) {
  const std::int32_t cap = hdr->capacity.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint32_t head = hdr->queue_head.load(std::memory_order_relaxed);
    if (head == kNil) break;
    waiter_slot& s = waiters[head - 1];
    // Strict FIFO: a head that does not fit holds back everyone behind it.
    if (hdr->used.load(std::memory_order_relaxed) + s.weight > cap) break;
    std::uint64_t id = 0;
    grant(s.holder, s.weight, s.ttl_ms, now, id, &s);
    SHMSEM_HOOK(mid_handoff);
    record_histogram(hdr->stats.wait, elapsed_ns(now, s.enqueued_ns));
    dequeue(head - 1);
    tell(head - 1, kGranted, wakes);
  }
}

void attachment::tell(std::uint32_t w, waiter_state state, wake_list& wakes) {
  waiters[w].state.store(state, std::memory_order_release);
  waiters[w].seq.fetch_add(1, std::memory_order_release);
  wakes.add(w);
}

void attachment::reject_oversized(wake_list& wakes) {
  const std::int32_t cap = hdr->capacity.load(std::memory_order_relaxed);
  std::uint32_t w = hdr->queue_head.load(std::memory_order_relaxed);
  while (w != kNil) {
    waiter_slot& s = waiters[w - 1];
    const std::uint32_t next = s.next;
    if (s.weight > cap) {
      dequeue(w - 1);
      SHMSEM_HOOK(mid_handoff);
      tell(w - 1, kRejected, wakes);
    }
    w = next;
  }
}

// ---------------------------------------------------------------------------
// Reaping

int attachment::reap(std::int64_t now, wake_list& wakes, bool force_scan) {
  const std::int32_t before = hdr->used.load(std::memory_order_relaxed);
  const std::uint32_t hwm = hdr->lease_hwm.load(std::memory_order_relaxed);
  if (force_scan || hdr->earliest_expiry_ns.load(std::memory_order_relaxed) <= now) {
    // Leases granted during the scan (end_lease hands seats to waiters)
    // lower the bound themselves; the scan lowers it for the rest.
    hdr->earliest_expiry_ns.store(INT64_MAX, std::memory_order_relaxed);
    std::int64_t earliest = INT64_MAX;
    for (std::uint32_t i = 0; i < hwm; ++i) {
      if (leases[i].id.load(std::memory_order_relaxed) == 0) continue;
      const std::int64_t exp = leases[i].expires_ns.load(std::memory_order_relaxed);
      if (exp == kNoExpiry) continue;
      if (exp <= now)
        end_lease(i, kLostExpired, now, wakes);
      else
        earliest = std::min(earliest, exp);
    }
    if (earliest < hdr->earliest_expiry_ns.load(std::memory_order_relaxed))
      hdr->earliest_expiry_ns.store(earliest, std::memory_order_relaxed);
  }
  const std::uint32_t n = hdr->holder_slots.load();
  const std::uint32_t me = self.load(std::memory_order_relaxed);
  for (std::uint32_t h = 0; h < n; ++h) {
    holder_record& r = holders[h];
    if (h == me || r.state.load() != kHolderAttached) continue;
    if (r.leases.load() == 0 && r.waiting.load() == 0 && !force_scan) continue;
    if (!file->locked_by_other(kTokenBase + h)) reap_holder(h, now, wakes);
  }
  const std::int32_t freed = before - hdr->used.load(std::memory_order_relaxed);
  return freed > 0 ? freed : 0;
}

bool attachment::reap_needed(std::int64_t now) const {
  if (hdr->earliest_expiry_ns.load(std::memory_order_relaxed) <= now) return true;
  const std::uint32_t n = hdr->holder_slots.load(std::memory_order_relaxed);
  const std::uint32_t me = self.load(std::memory_order_relaxed);
  for (std::uint32_t h = 0; h < n; ++h) {
    const holder_record& r = holders[h];
    if (h == me || r.state.load(std::memory_order_acquire) != kHolderAttached) continue;
    if (r.leases.load(std::memory_order_relaxed) == 0 &&
        r.waiting.load(std::memory_order_relaxed) == 0)
      continue;
    if (!file->locked_by_other(kTokenBase + h)) return true;
  }
  return false;
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

}  // namespace shmsem::detail
