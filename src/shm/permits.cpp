// permits.cpp: what a Permit of shared memory does after the grant, beside
// its lock-free release (api/permit.cpp): its lease as this process sees
// it, extension, and the release that takes the lock or tells somebody.

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>
#include <shmsem/permit.hpp>

#include <mutex>
#include <string>

#include "base/log.hpp"
#include "shm/fastpath.hpp"
#include "shm/renewer.hpp"
#include "shm/segment.hpp"

namespace shmsem::detail {

namespace {

// Frees the permit's lease under the lock if still held. Returns true if it
// was held; otherwise `why` says what happened to it.
bool end_permit(attachment& a, std::uint32_t slot, std::uint64_t gen, std::uint64_t id, loss& why,
                int& used_after) {
  segment_lock lk(a, sys::kNever);
  const std::int64_t now = lease_clock();
  const std::uint64_t held = layout::slot_state(gen, layout::kSlotHeld);
  bool ended = false;
  switch (a.lease_state(slot, gen, id, now, &why)) {
    case attachment::lease_status::held:
      ended = a.end_lease(slot, held, layout::kLostReleased, now, lk.wakes);
      break;
    case attachment::lease_status::expired:
      // Expired but not yet reclaimed: reclaim it now, as expired. Only
      // this lease: (slot, gen) and the id are its own.
      a.end_lease(slot, held, layout::kLostExpired, now, lk.wakes);
      break;
    default:
      break;
  }
  used_after = a.used();
  pin(a, -1);
  // What a detacher's gate RMW meets, as a lock-free release's CAS does.
  a.hdr->gate.fetch_add(0, std::memory_order_acq_rel);
  return ended;
}

}  // namespace

std::string_view attachment::key_of(const Permit&) const noexcept {
  return key;
}

std::optional<Permit::clock::time_point> attachment::expires_at(const Permit& p) const noexcept {
  std::int64_t exp = p.expires_ns_;
  // A renewal may have moved the expiry: read the slot, but keep what was
  // read only if the slot still held this lease afterwards. Once the lease
  // ended, the slot may hold somebody else's.
  const layout::lease_slot& l = leases[p.slot_];
  const std::uint64_t held = layout::slot_state(p.gen_, layout::kSlotHeld);
  if (l.state.load(std::memory_order_acquire) == held &&
      l.id.load(std::memory_order_relaxed) == p.id_) {
    const std::int64_t live = l.expires_ns.load(std::memory_order_acquire);
    if (l.state.load(std::memory_order_relaxed) == held) exp = live;
  }
  if (exp == 0) return std::nullopt;
  return Permit::clock::time_point(std::chrono::nanoseconds(exp));
}

bool attachment::is_held(const Permit& p) const noexcept {
  return holds(p.slot_, p.gen_, p.id_, lease_clock(), nullptr);
}

bool attachment::auto_renewing(const Permit& p) const noexcept {
  return p.renewal_ && p.renewal_->active.load();
}

void attachment::stop_auto_renew(Permit& p) noexcept {
  if (p.renewal_) p.renewal_->stop();
}

void attachment::extend(Permit& p, std::chrono::milliseconds ttl) {
  std::string why;
  std::int64_t exp = 0;
  extend_result r;
  {
    // Held across the extension, so that a renewal in flight cannot set
    // the expiry back to the old TTL after this one.
    std::unique_lock<std::mutex> g;
    if (p.renewal_ && !p.renewal_->inherited()) g = std::unique_lock(p.renewal_->mu);
    r = extend_lease(*this, p.slot_, p.gen_, p.id_, ttl.count(), INT64_MAX, &exp, &why);
    if (r == extend_result::extended && p.renewal_) p.renewal_->ttl_ms = ttl.count();
  }
  if (r != extend_result::extended)
    throw ExtensionError("shmsem: cannot extend permit " + std::to_string(p.id_) + " of '" + key +
                         "': " + why);
  p.ttl_ms_ = ttl.count();
  p.expires_ns_ = exp;
  if (p.renewal_) reschedule_renewal(*p.renewal_, ttl.count());
}

void attachment::release(Permit& p) {
  if (p.renewal_) p.renewal_->stop();
  p.owner_ = nullptr;
  // Until it ends, the mapping stays, whatever another thread does with the
  // last handle.
  thread_entry* entry = local_entry(*this);
  release_scope scope(*this, entry);
  loss why;
  int used_after = 0;
  bool held;
  std::uint64_t gate_before = 0;
  // A renewal may have moved the expiry: the slot has it (kReadExpiry asks
  // fast_release() to read it there).
  const std::int64_t expires = p.renewal_ ? kReadExpiry : p.expires_ns_;
  if (p.fast_ && entry &&
      fast_release(*this, *entry, p.slot_, p.gen_, p.weight_, ns_of(p.acquired_at_), expires,
                   gate_before) == fast_release_result::released) {
    held = true;
    used_after = layout::gate_used(gate_before) - p.weight_;
  } else {
    held = end_permit(*this, p.slot_, p.gen_, p.id_, why, used_after);
  }
  if (p.observer_) {
    try {
      if (held)
        p.observer_->on_release(ReleaseEvent{key, capacity(), p.weight_, used_after, p.id_,
                                             Permit::clock::now() - p.acquired_at_});
      else if (!why.other_process)
        p.observer_->on_lost(key, p.id_, why.describe());
    } catch (const std::exception& e) {
      log().error("observer threw: {}", e.what());
    }
  }
  p.observer_.reset();
  if (!held)
    throw PermitNotHeldError(
        "shmsem: permit " + std::to_string(p.id_) + " of '" + key + "' was not held at release: " +
            why.describe() + (why.other_process ? "" : "; for that period the bound was not held"),
        why.other_process);
}

}  // namespace shmsem::detail
