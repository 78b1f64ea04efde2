// header_cxx.cpp: <shmsem/shmsem.h> compiles as C++ (-pedantic) and its
// _INIT macros initialise the structs there too.
#include <shmsem/shmsem.h>

namespace {
[[maybe_unused]] shmsem_acquire_options acquire_options = SHMSEM_ACQUIRE_OPTIONS_INIT;
[[maybe_unused]] shmsem_open_options open_options = SHMSEM_OPEN_OPTIONS_INIT;
[[maybe_unused]] shmsem_stats stats = SHMSEM_STATS_INIT;
static_assert(sizeof(shmsem_acquire_options) == 32, "the first version's layout is fixed");
static_assert(offsetof(shmsem_open_options, trusted_owners) == 40,
              "fields are added after the first version's 40 bytes");
}  // namespace
