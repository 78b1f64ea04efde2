// renewer.hpp: the one background thread per process that keeps
// auto-renewing permits alive, extending each at a third of its TTL.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace shmsem::detail {

struct attachment;

/// Counts the forks this process descends from (bumped in each fork child).
std::uint64_t fork_generation() noexcept;

/// The renewal state of one permit, shared by the Permit and the thread.
struct renewal {
  std::mutex mu;              // held while the thread extends; release() takes it to stop
  attachment* att = nullptr;  // valid while !stopped (the Permit keeps it mapped)
  std::uint32_t slot = 0;
  std::uint64_t gen = 0;
  std::uint64_t id = 0;
  std::int64_t ttl_ms = 0;
  std::uint64_t handle_id = 0;
  bool stopped = false;  // under mu
  std::atomic<bool> lost{false};
  std::atomic<bool> active{true};       // !stopped && !lost, readable without mu
  std::atomic<std::int64_t> due_ns{0};  // next renewal; the thread and reschedule() write it
  std::uint64_t made_in = fork_generation();

  /// True in a fork child for a renewal made before the fork: it is the
  /// parent's, and `mu` may have been copied locked by the parent's
  /// renewal thread, which does not exist here. Never take `mu` then.
  bool inherited() const noexcept { return made_in != fork_generation(); }

  /// Stops renewal; waits for an extension in progress. Never blocks on
  /// anything but that extension (and not even on that in a fork child).
  void stop() noexcept;
};

/// Hands a renewal to the thread (started on first use).
void renew_in_background(const std::shared_ptr<renewal>& r);
/// The permit's TTL changed to `ttl_ms` (extend()): renew at a third of it
/// from now, not at the old cadence, which may be later than the new expiry.
void reschedule_renewal(renewal& r, std::int64_t ttl_ms);
/// Stops the renewals of one handle's permits (shutdown()).
void stop_renewals_of(std::uint64_t handle_id);
/// Stops every renewal of this process (shutdown_all()).
void stop_all_renewals();

enum class extend_result { extended, lost, busy };

/// Sets lease (`slot`, `gen`, `id`) to expire at now + ttl_ms, if this
/// process still holds it. `deadline_ns` bounds the wait for the segment
/// lock (busy).
extend_result extend_lease(attachment& a, std::uint32_t slot, std::uint64_t gen, std::uint64_t id,
                           std::int64_t ttl_ms, std::int64_t deadline_ns, std::int64_t* expires,
                           std::string* why);

}  // namespace shmsem::detail
