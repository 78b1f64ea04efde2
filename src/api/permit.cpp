// permit.cpp: what a Permit does after the grant, for every backend: the
// argument checks, and shared memory's lock-free release inline. Every
// other call goes to the lease's owner (base/backend.hpp): shared memory's
// in shm/permits.cpp, Redis's in redis/backend.cpp.

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>
#include <shmsem/permit.hpp>

#include <stdexcept>
#include <string>

#include "base/backend.hpp"
#include "base/log.hpp"
#include "shm/fastpath.hpp"
#include "shm/segment.hpp"

namespace shmsem {

Permit& Permit::operator=(Permit&& o) noexcept {
  if (this != &o) {
    release_quietly();
    owner_ = o.owner_;
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
    o.owner_ = nullptr;
    o.id_ = 0;
  }
  return *this;
}

std::string_view Permit::key() const noexcept {
  return owner_ ? owner_->key_of(*this) : std::string_view();
}

std::optional<std::chrono::milliseconds> Permit::ttl() const noexcept {
  if (ttl_ms_ <= 0) return std::nullopt;
  return std::chrono::milliseconds(ttl_ms_);
}

std::optional<Permit::clock::time_point> Permit::expires_at() const noexcept {
  if (owner_) return owner_->expires_at(*this);
  // Released: the expiry it last had.
  if (expires_ns_ == 0) return std::nullopt;
  return clock::time_point(std::chrono::nanoseconds(expires_ns_));
}

bool Permit::is_held() const noexcept {
  return owner_ && owner_->is_held(*this);
}

bool Permit::auto_renewing() const noexcept {
  return owner_ && owner_->auto_renewing(*this);
}

void Permit::stop_auto_renew() noexcept {
  if (owner_) owner_->stop_auto_renew(*this);
}

void Permit::extend(std::chrono::milliseconds ttl) {
  if (ttl.count() < 1 || ttl > kMaxDuration)
    throw std::invalid_argument("shmsem: extend() of '" + std::string(key()) +
                                "' needs a TTL from 1 ms to " +
                                std::to_string(kMaxDuration.count()) + " ms (about 11 days), got " +
                                std::to_string(ttl.count()) + " ms");
  if (!owner_)
    throw ExtensionError("shmsem: extend() on a permit that holds nothing (released or moved)");
  owner_->extend(*this, ttl);
}

void Permit::release() {
  if (!owner_) return;
  // The common case in a few lines: a lock-free shared-memory lease, no
  // renewal to stop, nobody to tell. Only shared memory makes a fast_ lease.
  if (fast_ && !renewal_ && !observer_) [[likely]] {
    auto& a = static_cast<detail::attachment&>(*owner_);
    if (detail::thread_entry* entry = detail::local_entry(a)) {
      detail::release_scope scope(a, entry);
      std::uint64_t gate_before;
      // Without a renewal, expires_ns_ is the lease's expiry: no need to
      // read the slot's.
      if (detail::fast_release(a, *entry, slot_, gen_, weight_, detail::ns_of(acquired_at_),
                               expires_ns_, gate_before) == detail::fast_release_result::released) {
        owner_ = nullptr;
        return;
      }
    }
  }
  release_slowly();
}

void Permit::release_slowly() {
  owner_->release(*this);
}

void Permit::release_quietly() noexcept {
  if (!owner_) return;
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
