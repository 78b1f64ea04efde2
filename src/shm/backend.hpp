// shm/backend.hpp: the shared-memory backend behind base/backend.hpp: one
// handle's mapped segment, its locked acquisitions (the lock-free ones are
// the public layer's inline fast path, shm/fastpath.hpp), its figures and
// its administration; and how a grant becomes a Permit.
#pragma once

#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>

#include <cstdint>
#include <memory>
#include <string_view>

#include "base/backend.hpp"
#include "base/handle.hpp"
#include "shm/fastpath.hpp"

namespace shmsem::detail {

struct attachment;

/// How a shared-memory grant becomes a Permit.
struct permit_access {
  /// The permit of lease `slot` (generation `gen`, id `id`) of `n` seats
  /// of h's segment, granted at `granted_ns`; it starts its auto-renewal.
  /// `fast`: its release may go without the lock.
  static Permit make(handle& h, std::uint32_t slot, std::uint64_t gen, std::uint64_t id, int n,
                     std::int64_t ttl_ms, bool renew, std::int64_t granted_ns, bool fast);
  /// The permit of a lock-free grant with no renewal and nobody to tell.
  static Permit plain(handle& h, int n, std::int64_t ttl_ms, const fast_grant& g) noexcept {
    return Permit(h.att, g.slot, n, g.id, g.gen, true, ttl_ms, g.now_ns);
  }
  /// plain(), made in place in `p` (try_acquire's optional).
  static void hold_plain(std::optional<Permit>& p, handle& h, int n, std::int64_t ttl_ms,
                         const fast_grant& g) noexcept {
    p->hold(h.att, g.slot, n, g.id, g.gen, true, ttl_ms, g.now_ns);
  }
};

/// One handle's segment. It releases the handle's mapping when it goes,
/// unless it only borrows the attachment (`owned` false: a copy that
/// Semaphore::inspect made).
class segment_backend final : public backend {
 public:
  segment_backend(attachment* a, bool owned) noexcept : att_(a), owned_(owned) {}
  ~segment_backend() override;
  segment_backend(const segment_backend&) = delete;
  segment_backend& operator=(const segment_backend&) = delete;

  std::string_view key() const noexcept override;
  Capabilities capabilities() const noexcept override;
  Fairness fairness() const noexcept override;
  attachment* fast_path_segment() const noexcept override { return att_; }
  attempt acquire(handle& h, const acquisition& q, const AcquireOptions& opts) override;
  attempt try_acquire(handle& h, const acquisition& q) override;
  figures read_figures(const handle& h) noexcept override;
  Stats stats(const handle& h) override;
  std::vector<Holder> holders(const handle& h) override;
  Snapshot snapshot(const handle& h) override;
  int reap(handle& h, std::optional<std::chrono::milliseconds> lock_timeout) override;
  void set_capacity(handle& h, int permits,
                    std::optional<std::chrono::milliseconds> lock_timeout) override;
  int force_release_all(handle& h, std::optional<std::chrono::milliseconds> lock_timeout) override;
  bool wait_idle(handle& h, std::chrono::milliseconds timeout) override;
  void shutdown(handle& h) override;

 private:
  attachment* const att_;
  const bool owned_;
};

/// What a shared-memory key's handles can do (`fencing`: the segment's).
constexpr Capabilities shared_memory_capabilities(bool fencing) noexcept {
  return {.reads_without_io = true,
          .barging = true,
          .fencing = fencing,
          .process_liveness = true,
          .segment_file = true};
}

/// Shared memory's keys: every key that is no URL (src/api/backends.cpp).
extern const backend_kind segment_kind;

}  // namespace shmsem::detail
