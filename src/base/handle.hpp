// handle.hpp: what a Semaphore object owns, process-local: the seam where
// the public layer meets a backend (a mapped segment, or another backend
// behind base/backend.hpp).
#pragma once

#include <shmsem/observer.hpp>
#include <shmsem/options.hpp>
#include <shmsem/semaphore.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace shmsem::detail {

struct attachment;
class backend;

struct handle {
  attachment* att = nullptr;
  // Set instead of `att` for a key of another backend (base/backend.hpp).
  std::shared_ptr<backend> remote;
  Options opts;
  std::uint64_t id = 0;
  std::atomic<bool> shut{false};
  std::mutex waits_mu;               // guards `waits`
  std::vector<std::uint32_t> waits;  // waiter slots of this handle's blocked acquires

  /// Makes this handle's blocked acquires look at their state again.
  void nudge_waiters();
};

/// The library's own way into a Semaphore (the service cache checks which
/// segment file its cached handles have mapped).
struct semaphore_access {
  static const handle& of(const Semaphore& s) noexcept { return *s.h_; }
};

/// Set by shutdown_all(): every handle, old or new, acts shut down.
extern std::atomic<bool> process_shut_down;

}  // namespace shmsem::detail
