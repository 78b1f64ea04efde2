// shmsem/logging.hpp: routing shmsem's log output. This is the only public
// header that includes spdlog; the core headers do not need it.
//
// shmsem logs through an spdlog logger named "shmsem". By default it writes
// warnings and errors to stderr. Nothing is logged on the hot path except
// warnings about lost or reaped seats.
#pragma once

#include <shmsem/export.hpp>

#include <spdlog/logger.h>

#include <memory>

namespace shmsem {

/// The logger shmsem writes to. Set its level or sinks as with any spdlog
/// logger. Thread-safe.
SHMSEM_API std::shared_ptr<spdlog::logger> logger();

/// Replaces the logger shmsem writes to (for example one with your own
/// sinks). Passing nullptr restores the default. Thread-safe.
SHMSEM_API void set_logger(std::shared_ptr<spdlog::logger> logger);

}  // namespace shmsem
