// permit.cpp: what a Permit does after the grant: its lease as this process
// sees it, extension, and the release (lock-free, locked, or quiet).

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>
#include <shmsem/permit.hpp>

#include <mutex>
#include <stdexcept>
#include <string>

#include "base/backend.hpp"
#include "base/log.hpp"
#include "shm/fastpath.hpp"
#include "shm/renewer.hpp"
#include "shm/segment.hpp"

namespace shmsem {

using detail::attachment;

Permit& Permit::operator=(Permit&& o) noexcept {
  if (this != &o) {
    release_quietly();
    att_ = o.att_;
    slot_ = o.slot_;
    weight_ = o.weight_;
    id_ = o.id_;
    gen_ = o.gen_;
    fast_ = o.fast_;
    ttl_ms_ = o.ttl_ms_;
    expires_ns_ = o.expires_ns_;
    acquired_at_ = o.acquired_at_;
    renewal_ = std::move(o.renewal_);
    observer_ = std::move(o.observer_);
    fence_ = o.fence_;
    o.att_ = nullptr;
    o.id_ = 0;
  }
  return *this;
}

std::string_view Permit::key() const noexcept {
  if (auto* l = remote()) return l->key();
  return att_ ? std::string_view(att_->key) : std::string_view();
}

std::optional<std::chrono::milliseconds> Permit::ttl() const noexcept {
  if (ttl_ms_ <= 0) return std::nullopt;
  return std::chrono::milliseconds(ttl_ms_);
}

std::optional<Permit::clock::time_point> Permit::expires_at() const noexcept {
  if (auto* l = remote()) return l->expires_at();
  std::int64_t exp = expires_ns_;
  if (att_) {
    // A renewal may have moved the expiry: read the slot, but keep what was
    // read only if the slot still held this lease afterwards. Once the lease
    // ended, the slot may hold somebody else's.
    const detail::layout::lease_slot& l = att_->leases[slot_];
    const std::uint64_t held = detail::layout::slot_state(gen_, detail::layout::kSlotHeld);
    if (l.state.load(std::memory_order_acquire) == held &&
        l.id.load(std::memory_order_relaxed) == id_) {
      const std::int64_t live = l.expires_ns.load(std::memory_order_acquire);
      if (l.state.load(std::memory_order_relaxed) == held) exp = live;
    }
  }
  if (exp == 0) return std::nullopt;
  return clock::time_point(std::chrono::nanoseconds(exp));
}

bool Permit::is_held() const noexcept {
  if (auto* l = remote()) return l->is_held();
  return att_ && att_->holds(slot_, gen_, id_, detail::lease_clock(), nullptr);
}

bool Permit::auto_renewing() const noexcept {
  if (auto* l = remote()) return l->auto_renewing();
  return renewal_ && renewal_->active.load();
}

void Permit::stop_auto_renew() noexcept {
  if (auto* l = remote()) l->stop_auto_renew();
  if (renewal_) renewal_->stop();
}

void Permit::extend(std::chrono::milliseconds ttl) {
  if (ttl.count() < 1 || ttl > kMaxDuration)
    throw std::invalid_argument("shmsem: extend() of '" + std::string(key()) +
                                "' needs a TTL from 1 ms to " +
                                std::to_string(kMaxDuration.count()) + " ms (about 11 days), got " +
                                std::to_string(ttl.count()) + " ms");
  if (auto* l = remote()) return l->extend(*this, ttl);
  if (!att_)
    throw ExtensionError("shmsem: extend() on a permit that holds nothing (released or moved)");
  std::string why;
  std::int64_t exp = 0;
  detail::extend_result r;
  {
    // Held across the extension, so that a renewal in flight cannot set
    // the expiry back to the old TTL after this one.
    std::unique_lock<std::mutex> g;
    if (renewal_ && !renewal_->inherited()) g = std::unique_lock(renewal_->mu);
    r = detail::extend_lease(*att_, slot_, gen_, id_, ttl.count(), INT64_MAX, &exp, &why);
    if (r == detail::extend_result::extended && renewal_) renewal_->ttl_ms = ttl.count();
  }
  if (r != detail::extend_result::extended)
    throw ExtensionError("shmsem: cannot extend permit " + std::to_string(id_) + " of '" +
                         att_->key + "': " + why);
  ttl_ms_ = ttl.count();
  expires_ns_ = exp;
  if (renewal_) detail::reschedule_renewal(*renewal_, ttl.count());
}

namespace {
// The lease's own clock reading (CLOCK_MONOTONIC_COARSE, in ns) back from
// the time_point the permit keeps it as.
std::int64_t ns_of(Permit::clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Frees the permit's lease under the lock if still held. Returns true if it
// was held; otherwise `why` says what happened to it.
bool end_permit(attachment& a, std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                detail::loss& why, int& used_after) {
  detail::segment_lock lk(a, sys::kNever);
  const std::int64_t now = detail::lease_clock();
  const std::uint64_t held = detail::layout::slot_state(gen, detail::layout::kSlotHeld);
  bool ended = false;
  switch (a.lease_state(slot, gen, id, now, &why)) {
    case attachment::lease_status::held:
      ended = a.end_lease(slot, held, detail::layout::kLostReleased, now, lk.wakes);
      break;
    case attachment::lease_status::expired:
      // Expired but not yet reclaimed: reclaim it now, as expired. Only
      // this lease: (slot, gen) and the id are its own.
      a.end_lease(slot, held, detail::layout::kLostExpired, now, lk.wakes);
      break;
    default:
      break;
  }
  used_after = a.used();
  detail::pin(a, -1);
  // What a detacher's gate RMW meets, as a lock-free release's CAS does.
  a.hdr->gate.fetch_add(0, std::memory_order_acq_rel);
  return ended;
}
}  // namespace

void Permit::release() {
  if (!att_) return;
  // The common case in a few lines: a lock-free lease, no renewal to stop,
  // nobody to tell.
  if (fast_ && !renewal_ && !observer_) {
    attachment& a = *att_;
    if (detail::thread_entry* entry = detail::local_entry(a)) {
      detail::release_scope scope(a, entry);
      std::uint64_t gate_before;
      // Without a renewal, expires_ns_ is the lease's expiry: no need to
      // read the slot's.
      if (detail::fast_release(a, *entry, slot_, gen_, weight_, ns_of(acquired_at_), expires_ns_,
                               gate_before) == detail::fast_release_result::released) {
        att_ = nullptr;
        return;
      }
    }
  }
  release_slowly();
}

void Permit::release_slowly() {
  // A Redis lease is never fast_: it always comes here.
  if (auto* l = remote()) return l->release(*this);
  if (renewal_) renewal_->stop();
  attachment* a = att_;
  att_ = nullptr;
  // Until it ends, the mapping stays, whatever another thread does with the
  // last handle.
  detail::thread_entry* entry = detail::local_entry(*a);
  detail::release_scope scope(*a, entry);
  detail::loss why;
  int used_after = 0;
  bool held;
  std::uint64_t gate_before = 0;
  // A renewal may have moved the expiry: the slot has it (kReadExpiry asks
  // fast_release() to read it there).
  const std::int64_t expires = renewal_ ? detail::kReadExpiry : expires_ns_;
  if (fast_ && entry &&
      detail::fast_release(*a, *entry, slot_, gen_, weight_, ns_of(acquired_at_), expires,
                           gate_before) == detail::fast_release_result::released) {
    held = true;
    used_after = detail::layout::gate_used(gate_before) - weight_;
  } else {
    held = end_permit(*a, slot_, gen_, id_, why, used_after);
  }
  if (observer_) {
    try {
      if (held)
        observer_->on_release(ReleaseEvent{a->key, a->capacity(), weight_, used_after, id_,
                                           clock::now() - acquired_at_});
      else if (!why.other_process)
        observer_->on_lost(a->key, id_, why.describe());
    } catch (const std::exception& e) {
      detail::log().error("observer threw: {}", e.what());
    }
  }
  observer_.reset();
  if (!held)
    throw PermitNotHeldError(
        "shmsem: permit " + std::to_string(id_) + " of '" + a->key + "' was not held at release: " +
            why.describe() + (why.other_process ? "" : "; for that period the bound was not held"),
        why.other_process);
}

void Permit::release_quietly() noexcept {
  if (!att_) return;
  try {
    release();
  } catch (const PermitNotHeldError& e) {
    // A permit inherited across fork() belongs to the parent: dropping the
    // child's copy is normal and not worth a warning.
    if (!e.inherited()) detail::log().warn("{}", e.what());
  } catch (const std::exception& e) {
    detail::log().error("shmsem: releasing a permit failed: {}", e.what());
  }
}

}  // namespace shmsem
