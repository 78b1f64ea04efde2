// observe.hpp: how the library tells a user's Observer of an event. An
// observer that throws is logged and otherwise ignored: a semaphore's
// bookkeeping never depends on user code.
#pragma once

#include <shmsem/observer.hpp>

#include <exception>
#include <memory>

#include "base/log.hpp"

namespace shmsem::detail {

/// Calls f(*o) if there is an observer, and logs what it throws.
template <class F>
void notify(const std::shared_ptr<Observer>& o, F&& f) noexcept {
  if (!o) return;
  try {
    f(*o);
  } catch (const std::exception& e) {
    log().error("observer threw: {}", e.what());
  } catch (...) {
    log().error("observer threw");
  }
}

}  // namespace shmsem::detail
