// log.cpp: where the library's log lines go: the "shmsem" logger, and how
// an application replaces it.

#include "base/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <shmsem/logging.hpp>

#include <mutex>

#include "base/forking.hpp"

namespace shmsem {
namespace {
struct Current {
  std::mutex mutex;
  std::shared_ptr<spdlog::logger> logger;
};

Current& current() {
  // Never destroyed: the library's detached threads (the lifeline and Redis
  // keepers) may log while the process runs its exit handlers.
  static Current* c = [] {
    detail::handle_fork_once();
    return new Current;
  }();
  return *c;
}

std::shared_ptr<spdlog::logger> make_default() {
  // A logger the user registered under our name wins.
  if (auto existing = spdlog::get("shmsem")) return existing;
  auto l = std::make_shared<spdlog::logger>(
      "shmsem", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  l->set_level(spdlog::level::warn);
  return l;
}
}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  Current& c = current();
  std::lock_guard g(c.mutex);
  if (!c.logger) c.logger = make_default();
  return c.logger;
}

void set_logger(std::shared_ptr<spdlog::logger> l) {
  Current& c = current();
  std::lock_guard g(c.mutex);
  c.logger = l ? std::move(l) : make_default();
}

namespace detail {
void lock_log_for_fork() noexcept {
  current().mutex.lock();
}

void unlock_log_after_fork() noexcept {
  current().mutex.unlock();
}

spdlog::logger& log() {
  // Logging is off the hot path (warnings about lost seats, recoveries), so
  // a mutex-guarded lookup per message is fine; it keeps set_logger() safe.
  static thread_local std::shared_ptr<spdlog::logger> keep;
  keep = logger();
  return *keep;
}
}  // namespace detail
}  // namespace shmsem
