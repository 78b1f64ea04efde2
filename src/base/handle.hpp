// handle.hpp: what a Semaphore object owns, process-local: its backend
// (base/backend.hpp) and what the public layer keeps beside it.
#pragma once

#include <shmsem/observer.hpp>
#include <shmsem/options.hpp>
#include <shmsem/semaphore.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "base/backend.hpp"
#include "base/observe.hpp"

namespace shmsem::detail {

struct attachment;

/// Set by shutdown_all(): every handle, old or new, acts shut down.
extern std::atomic<bool> process_shut_down;

struct handle {
  std::unique_ptr<backend> b;  // never null once opened
  // Shared memory's mapped segment, for the inline fast path; null for a
  // key of another backend.
  attachment* att = nullptr;
  Options opts;
  std::uint64_t id = 0;
  std::atomic<bool> shut{false};
  std::mutex waits_mu;               // guards `waits`
  std::vector<std::uint32_t> waits;  // waiter slots of this handle's blocked acquires

  /// True once shutdown() or shutdown_all() was called: its acquisitions
  /// fail with Reason::shutdown.
  bool is_shut() const noexcept {
    return shut.load(std::memory_order_relaxed) ||
           process_shut_down.load(std::memory_order_relaxed);
  }

  /// Makes this handle's shared-memory acquires that are blocked look at
  /// their state again.
  void nudge_waiters();

  /// Tells the observer that an acquisition of `n` seats of `key` starts
  /// to wait: the backend calls it when the acquisition queues.
  void wait_started(std::string_view key, int n) const {
    notify(opts.observer, [&](Observer& o) { o.on_wait_start(key, n); });
  }
};

/// The library's own way into a Semaphore (the service cache checks which
/// segment file its cached handles have mapped).
struct semaphore_access {
  static const handle& of(const Semaphore& s) noexcept { return *s.h_; }
};

}  // namespace shmsem::detail
