// log.hpp: the library's logger ("shmsem"), for the library's own files.
#pragma once

#include <spdlog/spdlog.h>

namespace shmsem::detail {
/// The current "shmsem" logger; never null.
spdlog::logger& log();
}  // namespace shmsem::detail
