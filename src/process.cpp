// process.cpp: how a process lives with its attachments: the registry that
// lets handles share one, fork (a child gets descriptions of its own), and
// detaching when no handle and no permit is left.

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <mutex>

#include "fastpath.hpp"
#include "lifeline.hpp"
#include "log.hpp"
#include "segment.hpp"
#include "segment_shared.hpp"
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

}  // namespace shmsem::detail
