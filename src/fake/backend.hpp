// fake/backend.hpp: an in-process backend for the tests, and the worked
// example of adding one (docs/design.md, "The backend seam").
//
// A key "fake://NAME" is a semaphore in this process's memory: a mutex, a
// condition variable, a FIFO queue and a map of leases. Its handles in one
// process share it; a forked child has its own copy. It has no holder
// liveness (a lease ends by release, TTL, force release or removal) and no
// file. It is compiled into the test build of the library alone
// (SHMSEM_TESTING), where the conformance suite runs on it with
// SHMSEM_TEST_BACKEND=fake: what passes there is the public layer's
// policy (checks, events, errors) over a backend that does nothing else.
#pragma once

#include <string_view>

#include "base/backend.hpp"

namespace shmsem::detail::fake {

/// The keys it serves: fake://NAME.
extern const backend_kind kind;

/// Makes opening `key` fail with SegmentError (bad_segment) while
/// `blocked`, as a key of another type does on Redis.
void block(std::string_view key, bool blocked);

}  // namespace shmsem::detail::fake
