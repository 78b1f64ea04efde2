// process.cpp: how a process lives with its attachments: the registry that
// lets handles share one, fork (a child gets token files of its own), each
// thread's table of fast-path entries and the pins that keep a mapping
// alive, and detaching when no handle and no permit is left.

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <mutex>
#include <new>
#include <span>
#include <utility>

#include "base/forking.hpp"
#include "base/log.hpp"
#include "shm/fastpath.hpp"
#include "shm/lifeline.hpp"
#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {

// Every attachment of this process, for handle sharing and for fork().
std::mutex registry_mutex;
std::vector<attachment*> registry;
std::uint64_t next_serial = 1;  // under registry_mutex
std::once_flag atfork_once;

// Every process-local mutex of the library, in the order forking.hpp gives.
void atfork_prepare() {
  registry_mutex.lock();
  lock_handles_for_fork();
  lock_services_for_fork();
  lock_log_for_fork();
  lock_warnings_for_fork();
  lock_async_acquires_for_fork();
}
void atfork_parent() {
  unlock_async_acquires_after_fork(false);
  unlock_warnings_after_fork();
  unlock_log_after_fork();
  unlock_services_after_fork();
  unlock_handles_after_fork();
  registry_mutex.unlock();
}
void atfork_child() {
  unlock_async_acquires_after_fork(true);
  unlock_warnings_after_fork();
  unlock_log_after_fork();
  unlock_services_after_fork();
  unlock_handles_after_fork();
  registry_mutex.unlock();
  lifeline::forget_after_fork();
  // The child shares our open file descriptions. That of the segment may
  // stay shared: its locks say only that the segment is in use, which it
  // is while either of us lives. Those of the token files hold our tokens:
  // while the child kept them our death would go unnoticed, and its probes,
  // which cannot see locks of its own descriptions, would find us dead. It
  // opens its own now, and claims its own holder record at its first
  // acquire.
  for (attachment* a : registry) {
    a->tokens->reopen_after_fork(a->hdr->holder_slots.load(std::memory_order_acquire));
    a->self.store(kNoSelf, std::memory_order_relaxed);
    // A token the parent took ahead of the lock stayed with its description.
    a->early_claim = kNoSelf;
    a->early_lifeline = false;
    a->claiming.store(false, std::memory_order_relaxed);
    // The parent's permits were copied into the child with its memory, and
    // their pins with the parent's threads, which the child has not: keep
    // every inherited mapping until the child exits.
    a->sticky = true;
    a->entries.clear();
  }
  forget_thread_entries();
}

}  // namespace

std::vector<attachment*>& attachments_of_process() {
  return registry;
}

std::uint64_t next_attachment_serial() {
  return next_serial++;
}

void handle_fork_once() {
  std::call_once(atfork_once,
                 [] { ::pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
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
    a->drop_early_claim();
  }
  // Never unmap while holding the lock: the kernel could no longer reach
  // the robust mutex to mark it if we died.
  const std::optional<removed_segment> removed = a->if_removed();
  delete a;  // closes the fds: our OFD locks (token, attach) go with them
  if (removed) removed->sweep_token_files();
}

void attachment::drop_early_claim() noexcept {
  if (early_claim == kNoSelf) return;
  const std::uint32_t h = std::exchange(early_claim, kNoSelf);
  // Before the mapping goes: our lifeline thread's robust list links
  // through the record's mutex once it is armed.
  if (std::exchange(early_lifeline, false))
    lifeline::disarm(&holders[h].lifeline, &holders[h].lifeline_state);
  std::uint32_t expected = kHolderClaiming;
  holders[h].state.compare_exchange_strong(expected, kHolderFree, std::memory_order_acq_rel);
}

void attachment::retire_self() {
  drop_early_claim();  // a record claimed for an acquire that never got the lock
  const std::uint32_t me = self.load();
  if (me == kNoSelf) return;
  // Nothing of ours is in use: no handle, no permit. Give back the slots
  // our threads kept in reserve and their records; the holder record goes
  // too unless a lease of ours is still out (a permit never destroyed).
  bool holds_any = holders[me].waiting.load() != 0;
  each_lease_of(me, [&](std::uint32_t i, std::uint64_t st) {
    const slot_kind k = state_kind(st);
    if (k == kSlotReserved || k == kSlotReleased)
      free_slot(i, state_gen(st));
    else if (k != kSlotEnding)
      holds_any = true;
  });
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

// ---------------------------------------------------------------------------
// Each thread's fast-path entries (declared in fastpath.hpp)

constinit thread_entry no_entry;
__attribute__((tls_model("initial-exec"))) constinit thread_local thread_entry* entry_mru =
    &no_entry;

namespace {

constexpr std::int64_t kDropEntryLockNs = 10'000'000;  // see drop_entry()

// kThreadEntries entries, or null before the thread's first locked acquire.
constinit thread_local thread_entry* entry_table = nullptr;
// The exit cleanup ran: a late call (another thread_local's destructor)
// stays on the locked path rather than allocate a table nobody frees.
constinit thread_local bool table_closed = false;

// The cleanup at thread exit; constructed (and so registered) at a
// thread's first entry.
struct table_cleanup {
  ~table_cleanup();
};
thread_local table_cleanup cleanup;

// [registry] Gives back what entry `e` holds in its (live) attachment: its
// cached slots and its record, and passes its pins to the attachment.
void drop_entry(thread_entry& e) noexcept {
  attachment* a = e.att;
  if (!a || !attachment::is_registered(a, e.serial)) {
    e.att = nullptr;
    return;
  }
  a->retired_pins.fetch_add(e.pins.exchange(0), std::memory_order_acq_rel);
  a->entries.erase(std::remove(a->entries.begin(), a->entries.end(), &e), a->entries.end());
  try {
    // Not for ever: a thread that ends (or gives its entry up) must not
    // hang on a lock a stopped process holds, the more so under the
    // registry mutex. What it kept then stays with this process, and goes
    // back when the process detaches or is reaped.
    segment_lock lk(*a, sys::precise_now_ns() + kDropEntryLockNs);
    if (lk.owns()) {
      a->unreserve_slots(e.slots, e.cached);
      if (e.record) a->free_thread_record(e.record_index);
    } else {
      log().debug(
          "semaphore '{}': the segment lock was busy when a thread let go of its entry; its "
          "reserved lease slots stay with this process until it detaches",
          a->key);
    }
  } catch (const std::exception& ex) {
    log().error("{} (a thread's reserved lease slots stay reserved)", ex.what());
  }
  e.att = nullptr;
  e.record = nullptr;
  e.cached = 0;
}

table_cleanup::~table_cleanup() {
  table_closed = true;
  if (!entry_table) return;
  for (thread_entry& e : std::span(entry_table, kThreadEntries)) {
    bool detach = false;
    attachment* a = e.att;
    {
      auto g = attachment::registry_lock();
      if (!a || !attachment::is_registered(a, e.serial)) continue;
      drop_entry(e);
      detach = attachment::try_detach(a, g);
    }
    if (detach) attachment::finish_detach(a);
  }
  entry_mru = &no_entry;
  delete[] std::exchange(entry_table, nullptr);
}

}  // namespace

thread_entry* find_entry(const attachment& a) noexcept {
  if (!entry_table) return nullptr;
  for (std::uint32_t i = 0; i < kThreadEntries; ++i) {
    thread_entry& e = entry_table[i];
    if (e.att == &a && e.serial == a.serial) {
      entry_mru = &e;
      return &e;
    }
  }
  return nullptr;
}

thread_entry* prepare_entry(attachment& a) {
  if (thread_entry* e = local_entry(a)) return e;
  if (!entry_table) {
    if (table_closed) return nullptr;
    entry_table = new (std::nothrow) thread_entry[kThreadEntries];
    if (!entry_table) return nullptr;  // no fast path for this thread
    (void)&cleanup;
  }
  auto g = attachment::registry_lock();
  std::uint32_t victim = kThreadEntries;
  for (std::uint32_t i = 0; i < kThreadEntries && victim == kThreadEntries; ++i) {
    const thread_entry& e = entry_table[i];
    if (!e.att || !attachment::is_registered(e.att, e.serial)) victim = i;
  }
  if (victim == kThreadEntries) {
    // Every entry serves a live semaphore: the least recently used gives way.
    victim = 0;
    for (std::uint32_t i = 1; i < kThreadEntries; ++i)
      if (entry_table[i].last_used < entry_table[victim].last_used) victim = i;
    drop_entry(entry_table[victim]);
  }
  thread_entry& e = entry_table[victim];
  e.att = &a;
  e.serial = a.serial;
  e.record = nullptr;
  e.record_index = 0;
  e.holder = kNoSelf;
  e.cached = 0;
  e.next_id = e.end_id = 0;
  e.pins.store(0, std::memory_order_relaxed);
  e.busy.store(false, std::memory_order_relaxed);
  e.closing.store(a.closing.load(std::memory_order_relaxed), std::memory_order_relaxed);
  a.entries.push_back(&e);
  entry_mru = &e;
  return &e;
}

void pin(attachment& a, int delta) noexcept {
  if (thread_entry* e = local_entry(a))
    e->pins.store(e->pins.load(std::memory_order_relaxed) + delta, std::memory_order_release);
  else
    a.retired_pins.fetch_add(delta, std::memory_order_acq_rel);
}

void release_scope::detach_after_release(attachment* a, std::uint64_t serial) noexcept {
  bool detach = false;
  {
    auto g = attachment::registry_lock();
    detach = attachment::is_registered(a, serial) && attachment::try_detach(a, g);
  }
  if (detach) attachment::finish_detach(a);
}

void forget_thread_entries() noexcept {
  if (!entry_table) return;
  for (thread_entry& e : std::span(entry_table, kThreadEntries)) {
    e.att = nullptr;
    e.record = nullptr;
    e.cached = 0;
    e.pins.store(0, std::memory_order_relaxed);
    e.busy.store(false, std::memory_order_relaxed);
  }
}

}  // namespace shmsem::detail
