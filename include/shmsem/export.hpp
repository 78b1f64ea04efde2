// shmsem/export.hpp: the visibility macro. The library is built with hidden
// visibility; only what carries SHMSEM_API is part of the ABI.
#pragma once

#if defined(SHMSEM_BUILDING_LIBRARY)
#define SHMSEM_API __attribute__((visibility("default")))
#else
#define SHMSEM_API
#endif
