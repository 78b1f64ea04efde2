// shmsem/permit.hpp: Permit, a lease on n seats of one semaphore.
//
// A Permit is what acquire() returns. It is move-only and owns its seats
// until release(), its destructor, or until the seats are lost: the TTL ran
// out, the holder was judged dead, or an operator force-released them.
// A Permit stays valid after the Semaphore handle that made it is destroyed.
// If the holding process dies, its seats are reclaimed by the fleet (on
// Redis, when its session lapses: Options::session_timeout).
#pragma once

#include <shmsem/export.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

namespace shmsem {

class Observer;

namespace detail {
class lease_owner;
struct lease_access;
struct renewal;
struct attachment;
struct permit_access;
}  // namespace detail

class SHMSEM_API Permit {
 public:
  using clock = std::chrono::steady_clock;

  /// An empty permit that holds nothing (is_held() is false, release() does nothing).
  Permit() noexcept = default;
  /// Takes other's lease; other is left empty. Inline, so that returning a
  /// Permit inside a std::optional (try_acquire) costs a few register moves.
  Permit(Permit&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)),
        slot_(other.slot_),
        weight_(other.weight_),
        id_(std::exchange(other.id_, 0)),
        gen_(other.gen_),
        fast_(other.fast_),
        ttl_ms_(other.ttl_ms_),
        expires_ns_(other.expires_ns_),
        acquired_at_(other.acquired_at_),
        renewal_(std::move(other.renewal_)),
        observer_(std::move(other.observer_)),
        fence_(other.fence_) {}
  /// Releases what this permit holds (quietly, as the destructor does), then takes other's lease.
  Permit& operator=(Permit&& other) noexcept;
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;

  /// Releases the seats if still held. Never throws: a lost seat is logged
  /// as a warning instead.
  ~Permit() {
    if (owner_) release_quietly();
  }

  /// The semaphore's key; empty for an empty permit.
  std::string_view key() const noexcept;
  /// Unique id of this lease within its semaphore (never 0 for a real permit).
  std::uint64_t id() const noexcept { return id_; }
  /// Number of seats this permit holds.
  int weight() const noexcept { return weight_; }
  /// The grant's fencing token: a number that strictly increases with every
  /// grant of this semaphore, so that a resource can refuse a writer whose
  /// lease was lost (it carries an older token than one it has seen). On
  /// Redis every grant has one; on shared memory, only a semaphore created
  /// with Options::fencing has them, 0 otherwise. Either way it is then the
  /// same number as id().
  /// With capacity > 1 tokens order grants, not seats: compare them per
  /// resource (per seat of work), not across the whole semaphore.
  std::uint64_t fencing_token() const noexcept { return fence_; }
  /// The lease TTL, or nullopt for a lease without expiry.
  std::optional<std::chrono::milliseconds> ttl() const noexcept;
  /// When the seats were granted (CLOCK_MONOTONIC, one kernel tick of precision).
  clock::time_point acquired_at() const noexcept { return acquired_at_; }
  /// When the lease expires as last set by this process, or nullopt without TTL.
  std::optional<clock::time_point> expires_at() const noexcept;

  /// Frees the seats and wakes waiters. A second call does nothing.
  /// Throws PermitNotHeldError if the seats were lost first; the message
  /// says why and since when. Either way the permit is empty afterwards.
  /// Uncontended it takes no lock; otherwise it waits for the segment lock
  /// without limit (the seats must go back, even past a stopped process).
  /// A failure to hand the seats on to queued waiters (a full /dev/shm) does
  /// not fail the release: it is logged, counted in stats().errors, and the
  /// head waiter retries.
  /// A permit inherited across fork() belongs to the parent: release() in
  /// the child throws PermitNotHeldError and leaves the parent's seats alone.
  /// Thread-safe against the auto-renewal thread; call it from one thread at a time.
  /// On Redis it is one round trip. If the server cannot be reached it
  /// throws SegmentError (the driver's message); the permit is empty and
  /// the release is retried in the background until Redis answers, or the
  /// seats come back when this process's session lapses.
  void release();

  /// Sets the lease's expiry to now + ttl (ttl >= 1ms and <= kMaxDuration,
  /// else std::invalid_argument). A permit without TTL gains one. An
  /// auto-renewing permit is renewed with the new TTL from then on, at a
  /// third of it. Throws ExtensionError if the seats were already lost,
  /// expired included. On Redis, SegmentError if the server cannot be reached.
  void extend(std::chrono::milliseconds ttl);

  /// Live check against the segment, without any lock: false once the seats
  /// were released, reaped, force-released, or their TTL ran out. On Redis
  /// it is a round trip; if the server cannot be reached it answers from
  /// what this process knows (true until the session or the TTL would
  /// have lapsed since the last successful call).
  bool is_held() const noexcept;

  /// True while a background renewal keeps this lease alive.
  bool auto_renewing() const noexcept;
  /// Stops the background renewal of this permit; the lease then expires
  /// at its current expiry unless extended.
  void stop_auto_renew() noexcept;

  /// True for a permit that holds (or held) a lease; false once released.
  explicit operator bool() const noexcept { return owner_ != nullptr; }

 private:
  friend class Semaphore;
  friend struct detail::attachment;
  friend struct detail::permit_access;
  friend struct detail::lease_access;
  Permit(detail::lease_owner* a, std::uint32_t slot, int weight, std::uint64_t id,
         std::uint64_t gen, bool fast, std::int64_t ttl_ms, std::int64_t granted_ns) noexcept {
    hold(a, slot, weight, id, gen, fast, ttl_ms, granted_ns);
  }
  /// Makes this empty permit hold a granted lease. Lets try_acquire() build
  /// its permit inside the std::optional it returns, without a temporary.
  void hold(detail::lease_owner* a, std::uint32_t slot, int weight, std::uint64_t id,
            std::uint64_t gen, bool fast, std::int64_t ttl_ms, std::int64_t granted_ns) noexcept {
    owner_ = a;
    slot_ = slot;
    weight_ = weight;
    id_ = id;
    gen_ = gen;
    fast_ = fast;
    ttl_ms_ = ttl_ms;
    expires_ns_ = ttl_ms > 0 ? granted_ns + ttl_ms * 1'000'000 : 0;
    acquired_at_ = clock::time_point(std::chrono::nanoseconds(granted_ns));
  }
  void release_quietly() noexcept;
  /// release() for every case the lock-free release cannot take.
  void release_slowly();

  // The backend's side of the lease (base/backend.hpp), null once released.
  // slot_, gen_, fast_ and renewal_ are shared memory's: another backend
  // keeps what it needs in its lease_owner.
  detail::lease_owner* owner_ = nullptr;
  std::uint32_t slot_ = 0;
  int weight_ = 0;
  std::uint64_t id_ = 0;
  std::uint64_t gen_ = 0;        // the lease's generation in its slot
  bool fast_ = false;            // a shared-memory lease: release() may go without the lock
  std::int64_t ttl_ms_ = 0;      // 0: no expiry
  std::int64_t expires_ns_ = 0;  // 0: no expiry
  clock::time_point acquired_at_{};
  std::shared_ptr<detail::renewal> renewal_;  // set only for auto-renewing permits
  std::shared_ptr<Observer> observer_;        // empty unless the handle has one
  std::uint64_t fence_ = 0;                   // the fencing token, 0 without fencing
};

}  // namespace shmsem
