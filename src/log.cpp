#include "log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <shmsem/logging.hpp>

#include <mutex>

namespace shmsem {
namespace {
// Never destroyed: the library's detached threads (the lifeline and Redis
// keepers) may log while the process runs its exit handlers.
std::mutex& logger_mutex = *new std::mutex;
std::shared_ptr<spdlog::logger>& current = *new std::shared_ptr<spdlog::logger>;

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
  std::lock_guard g(logger_mutex);
  if (!current) current = make_default();
  return current;
}

void set_logger(std::shared_ptr<spdlog::logger> l) {
  std::lock_guard g(logger_mutex);
  current = l ? std::move(l) : make_default();
}

namespace detail {
spdlog::logger& log() {
  // Logging is off the hot path (warnings about lost seats, recoveries), so
  // a mutex-guarded lookup per message is fine; it keeps set_logger() safe.
  static thread_local std::shared_ptr<spdlog::logger> keep;
  keep = logger();
  return *keep;
}
}  // namespace detail
}  // namespace shmsem
