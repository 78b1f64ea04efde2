// shmsem/version.hpp: the library version, the one place it is written.
// CMake reads SHMSEM_VERSION_{MAJOR,MINOR,PATCH} from this file, so the
// package version, the SONAME and this header cannot drift apart.
#pragma once

#include <shmsem/export.hpp>

#define SHMSEM_VERSION_MAJOR 0
#define SHMSEM_VERSION_MINOR 1
#define SHMSEM_VERSION_PATCH 0

#define SHMSEM_STRINGIFY_(x) #x
#define SHMSEM_STRINGIFY(x) SHMSEM_STRINGIFY_(x)

namespace shmsem {
/// The version of the library a program was compiled against, as "X.Y.Z",
/// built from the numbers above so the two cannot disagree.
inline constexpr const char* kVersionString =
    SHMSEM_STRINGIFY(SHMSEM_VERSION_MAJOR) "." SHMSEM_STRINGIFY(
        SHMSEM_VERSION_MINOR) "." SHMSEM_STRINGIFY(SHMSEM_VERSION_PATCH);
/// The version of the library actually loaded at run time, as "X.Y.Z".
SHMSEM_API const char* runtime_version() noexcept;
}  // namespace shmsem
